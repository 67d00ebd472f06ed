#include "collector/launch_assembler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/arena_decoder.h"
#include "collector/launch_matcher.h"
#include "collector/message_decoder.h"
#include "common/message_fields.h"
#include "smprof/wire.h"

namespace smprof {
namespace {

// One message for the next stage, built in place.
class Outgoing {
 public:
  // Room for `bytes`, the caller to write every one of them (the padding
  // after them is zeroed here); Commit sets the header.
  uint8_t* Frame(uint32_t bytes) {
    const uint32_t size = wire::PaddedSize(bytes);
    if (capacity_ < size) {
      capacity_ = std::max<size_t>(size, capacity_ * 2);
      buffer_ = std::make_unique<uint8_t[]>(capacity_);
    }
    size_ = size;
    std::memset(buffer_.get() + bytes, 0, size - bytes);
    return buffer_.get();
  }
  template <typename Msg>
  void Send(const LaunchAssembler::Next& next, const transport::ProducerInfo& info, uint32_t type, const Msg& fixed,
            const void* tail, uint32_t tail_size) {
    uint8_t* m = Frame(static_cast<uint32_t>(sizeof(Msg)) + tail_size);
    std::memcpy(m, &fixed, sizeof(Msg));
    if (tail_size > 0) std::memcpy(m + sizeof(Msg), tail, tail_size);
    Commit(next, info, type);
  }
  void Commit(const LaunchAssembler::Next& next, const transport::ProducerInfo& info, uint32_t type) {
    const wire::MsgHeader h{type, size_};
    std::memcpy(buffer_.get(), &h, sizeof(h));
    next(info, buffer_.get(), size_);
  }

 private:
  std::unique_ptr<uint8_t[]> buffer_;
  size_t capacity_ = 0;
  uint32_t size_ = 0;
};

}  // namespace

struct LaunchAssembler::Context {
  uint32_t device = 0;  // CUDA ordinal in the process
  // Chunks of the read-back in progress (until its HarvestMsg), by size:
  // their bytes back to back, and where each chunk's part is.
  struct Block {
    uint32_t chunk_bytes = 0;
    uint32_t generation = 0;
    std::vector<uint8_t> bytes;
    std::vector<std::pair<uint64_t, uint32_t>> parts;  // offset in `bytes`, length
  };
  std::vector<Block> blocks;
  uint64_t read_chunks = 0;                   // in `blocks`
  std::vector<arena::KernelRecord> records;   // of the read-back in progress
  // Waiting across read-backs, each with the read-backs it has waited.
  std::vector<arena::WarpSegment> carried_segments;
  std::vector<int> carried_segment_ages;
  std::vector<arena::KernelRecord> carried_records;
  std::vector<int> carried_record_ages;
  int64_t clock_offset = 0;
  // Marker names by (name generation, device address).
  std::map<std::pair<uint32_t, uint64_t>, std::string> marker_names;
};

struct LaunchAssembler::Producer {
  transport::ProducerInfo info{};
  std::unordered_map<uint32_t, std::string> kernel_names;  // KernelNameMsg id -> text
  std::unordered_map<std::string, uint32_t> name_ids;      // marker text -> NameMsg id sent
  uint32_t next_name_id = 1;
  uint64_t next_launch_id = 1;
  std::map<uint32_t, Context> contexts;         // by CUPTI context id
  std::map<uint32_t, double> cycles_per_ns;     // by ordinal, from DeviceMsg
  uint64_t launches = 0, filtered = 0, unattributed = 0, malformed = 0;
  Outgoing out;
};

LaunchAssembler::LaunchAssembler(Next next, unsigned threads, std::shared_ptr<spdlog::logger> logger)
    : next_(std::move(next)), threads_(std::max(1u, threads)), logger_(std::move(logger)) {}

LaunchAssembler::~LaunchAssembler() = default;

LaunchAssembler::Producer& LaunchAssembler::ProducerOf(const transport::ProducerInfo& info) {
  auto& slot = producers_[{info.entry, info.pid}];
  if (!slot) {
    slot = std::make_unique<Producer>();
    slot->info = info;
  }
  return *slot;
}

uint32_t LaunchAssembler::NameId(Producer& p, const std::string& text) {
  auto it = p.name_ids.find(text);
  if (it != p.name_ids.end()) return it->second;
  const uint32_t id = p.next_name_id++;
  auto m = ZeroedMessage<wire::NameMsg>();
  m.name_id = id;
  m.name_len = TextLength(text);
  p.out.Send(next_, p.info, wire::kMsgName, m, text.data(), m.name_len);
  p.name_ids.emplace(text, id);
  return id;
}

void LaunchAssembler::HandleMessage(const transport::ProducerInfo& producer, const uint8_t* data, uint32_t size) {
  DecodedMessage m;
  const DecodeStatus status = MessageDecoder::Decode(data, size, &m);
  if (status != DecodeStatus::kOk) {  // the next stage counts it
    if (size >= sizeof(wire::MsgHeader)) {
      wire::MsgHeader h;
      std::memcpy(&h, data, sizeof(h));
      if (h.type >= wire::kMsgKernelName && h.type <= wire::kMsgChunks) ++rejected_;
    }
    next_(producer, data, size);
    return;
  }
  Producer& p = ProducerOf(producer);
  switch (m.type) {
    case wire::kMsgKernelName:
      p.kernel_names[m.kernel_name.kernel_id] = std::string(m.text);
      return;
    case wire::kMsgMarkerName:
      p.contexts[m.marker_name.context_id].marker_names[{m.marker_name.generation, m.marker_name.address}] =
          std::string(m.text);
      return;
    case wire::kMsgRecords: {
      Context& c = p.contexts[m.records.context_id];
      c.device = m.records.device;
      c.records.reserve(c.records.size() + m.records.count);
      for (uint32_t i = 0; i < m.records.count; ++i) {
        const wire::KernelRecordEntry e = m.record(i);
        arena::KernelRecord r;
        static_cast<wire::KernelRecordEntry&>(r) = e;
        r.device = m.records.device;
        r.context_id = m.records.context_id;
        c.records.push_back(r);
      }
      return;
    }
    case wire::kMsgChunks: {
      Context& c = p.contexts[m.chunks.context_id];
      c.device = m.chunks.device;
      if (c.blocks.empty() || c.blocks.back().chunk_bytes != m.chunks.chunk_bytes ||
          c.blocks.back().generation != m.chunks.name_generation) {
        c.blocks.push_back(Context::Block{m.chunks.chunk_bytes, m.chunks.name_generation, {}});
      }
      Context::Block& block = c.blocks.back();
      const uint8_t* at = m.payload;
      for (uint32_t i = 0; i < m.chunks.count; ++i) {
        uint32_t part = m.chunks.chunk_bytes;
        if ((m.chunks.flags & wire::kChunksUsedBytes) != 0) {  // lengths checked by the decoder
          wire::ChunkBytes prefix;
          std::memcpy(&prefix, at, sizeof(prefix));
          part = prefix.bytes;
          at += sizeof(prefix);
        }
        block.parts.emplace_back(block.bytes.size(), part);
        block.bytes.insert(block.bytes.end(), at, at + part);
        at += part;
      }
      c.read_chunks += m.chunks.count;
      return;
    }
    case wire::kMsgHarvest: {
      Context& c = p.contexts[m.harvest.context_id];
      if ((m.harvest.flags & wire::kHarvestProbed) != 0) c.clock_offset = m.harvest.clock_offset_ns;
      const bool final = (m.harvest.flags & wire::kHarvestFinal) != 0;
      const bool read = c.read_chunks != 0 || m.harvest.chunks_used != 0;
      const size_t launches = Assemble(p, c, final, m.harvest.reason);
      // A final flush that read nothing and found nothing waiting is no harvest.
      if (final && !read && launches == 0) return;
      break;
    }
    case wire::kMsgDevice: {
      const wire::DeviceMsg& d = m.device;
      const uint32_t khz = d.sm_clock_measured_khz != 0 ? d.sm_clock_measured_khz : d.sm_clock_khz;
      p.cycles_per_ns[d.device] = khz != 0 ? khz / 1e6 : 1.0;
      break;
    }
    case wire::kMsgStats: {
      wire::StatsMsg s = m.stats;
      s.launches_profiled += p.launches;
      s.events_filtered += p.filtered;
      s.events_unattributed += p.unattributed;
      s.events_malformed += p.malformed;
      p.out.Send(next_, p.info, wire::kMsgStats, s, nullptr, 0);
      return;
    }
    default:
      break;
  }
  next_(producer, data, size);
}

void LaunchAssembler::HandleProducerEnd(const transport::ProducerInfo& producer) {
  auto it = producers_.find({producer.entry, producer.pid});
  if (it == producers_.end()) return;
  Producer& p = *it->second;
  for (auto& [id, c] : p.contexts) {
    if (!c.blocks.empty() || !c.records.empty() || !c.carried_segments.empty()) {
      Assemble(p, c, /*final=*/true, wire::kHarvestExit);
    }
  }
  producers_.erase(it);
}

void LaunchAssembler::Finish() {
  while (!producers_.empty()) HandleProducerEnd(producers_.begin()->second->info);
}

size_t LaunchAssembler::Assemble(Producer& p, Context& c, bool final, uint32_t reason) {
  // The read-back's chunks: decoded, their clocks mapped (carried segments
  // were mapped with their own read-back).
  std::vector<arena::WarpSegment> segments;
  arena::DecodeStats decode;
  uint64_t read_events_capacity = 0;
  for (Context::Block& b : c.blocks) {
    const size_t first = segments.size();
    std::vector<arena::ChunkPart> parts;
    parts.reserve(b.parts.size());
    for (const auto& [offset, bytes] : b.parts) parts.push_back(arena::ChunkPart{b.bytes.data() + offset, bytes});
    arena::DecodeChunks(parts, b.chunk_bytes, threads_, &segments, &decode);
    for (size_t i = first; i < segments.size(); ++i) segments[i].name_generation = b.generation;
    read_events_capacity += b.parts.size() * b.chunk_bytes / sizeof(wire::Event);
  }
  c.blocks.clear();
  c.read_chunks = 0;
  p.malformed += decode.malformed_events;
  const auto rate = p.cycles_per_ns.find(c.device);
  arena::MapEventClocks(&segments, rate != p.cycles_per_ns.end() ? rate->second : 1.0, threads_);

  const size_t fresh = segments.size();
  std::vector<int> ages(fresh, 0);
  std::move(c.carried_segments.begin(), c.carried_segments.end(), std::back_inserter(segments));
  ages.insert(ages.end(), c.carried_segment_ages.begin(), c.carried_segment_ages.end());
  c.carried_segments.clear();
  c.carried_segment_ages.clear();
  std::vector<arena::KernelRecord> records = std::move(c.carried_records);
  std::vector<int> record_ages = std::move(c.carried_record_ages);
  c.carried_records.clear();
  c.carried_record_ages.clear();
  records.insert(records.end(), c.records.begin(), c.records.end());
  record_ages.resize(records.size(), 0);
  c.records.clear();

  c.clock_offset = arena::EstimateClockOffset(segments, records, c.clock_offset);
  arena::MatchStats match;
  std::vector<const arena::WarpSegment*> unmatched;
  std::vector<size_t> unused;
  std::vector<arena::Launch> launches =
      arena::MatchLaunches(&segments, records, c.clock_offset, &match, &unmatched, &unused, threads_);
  // Segments still without a record wait (a bounded number of read-backs and
  // events); the rest ship now under synthetic launches.
  std::vector<arena::WarpSegment> waiting, given_up;
  std::vector<int> waiting_ages;
  size_t waiting_events = 0;
  const size_t carry_limit = std::max<size_t>(kMaxCarriedEvents, read_events_capacity);
  for (const arena::WarpSegment* s : unmatched) {
    const int age = ages[static_cast<size_t>(s - segments.data())] + 1;
    if (final || age > kCarryHarvests || waiting_events + s->events.size() > carry_limit) {
      given_up.push_back(*s);
    } else {
      waiting.push_back(*s);
      waiting_ages.push_back(age);
      waiting_events += s->events.size();
    }
  }
  if (!given_up.empty()) {
    std::vector<arena::Launch> synthetic = arena::MatchLaunches(&given_up, {}, c.clock_offset, &match);
    std::move(synthetic.begin(), synthetic.end(), std::back_inserter(launches));
    std::stable_sort(launches.begin(), launches.end(), [](const arena::Launch& a, const arena::Launch& b) {
      return std::tie(a.record.start_ns, a.record.correlation_id) <
             std::tie(b.record.start_ns, b.record.correlation_id);
    });
  }
  for (size_t i : unused) {
    const int age = record_ages[i] + 1;
    if (!final && age <= kCarryHarvests) {
      c.carried_records.push_back(records[i]);
      c.carried_record_ages.push_back(age);
    }
  }
  c.carried_segments = std::move(waiting);
  c.carried_segment_ages = std::move(waiting_ages);
  p.filtered += match.filtered;
  p.unattributed += match.unattributed;

  // In start order: a LaunchMsg, then its warps' events.
  const uint32_t extra_flags = reason == wire::kHarvestHighWater ? uint32_t{wire::kLaunchForcedDrain} : 0u;
  // In front of the name maps: the last ids by address (a kernel has few names).
  struct Cached {
    uint64_t address = 0;
    uint64_t generation = 0;
    uint32_t id = 0;
  };
  Cached recent[64] = {};
  const auto name_id = [&](uint64_t generation, uint64_t address) {
    Cached& slot = recent[(address >> 3) % 64];
    if (slot.id != 0 && slot.address == address && slot.generation == generation) return slot.id;
    auto it = c.marker_names.find({static_cast<uint32_t>(generation), address});
    char unreadable[64];
    std::snprintf(unreadable, sizeof(unreadable), "<unreadable name at 0x%llx>",
                  static_cast<unsigned long long>(address));
    const uint32_t id = NameId(p, it != c.marker_names.end() ? it->second : std::string(unreadable));
    slot = Cached{address, generation, id};
    return id;
  };
  std::vector<uint32_t> ids;  // a message's name ids
  for (const arena::Launch& launch : launches) {
    const arena::KernelRecord& r = launch.record;
    auto m = ZeroedMessage<wire::LaunchMsg>();
    m.launch_id = p.next_launch_id++;
    m.start_ns = r.start_ns;
    m.end_ns = std::max(r.start_ns, r.end_ns);
    m.grid_id = r.grid_id;
    m.correlation_id = r.correlation_id;
    m.stream_id = r.stream_id;
    m.device = (launch.flags & wire::kLaunchNoActivity) != 0 ? c.device : r.device;
    m.context_id = r.context_id;
    m.graph_id = r.graph_id;
    m.flags = launch.flags | extra_flags | (r.graph_id != 0 ? uint32_t{wire::kLaunchFromGraph} : 0u);
    std::copy(r.grid, r.grid + 3, m.grid);
    std::copy(r.block, r.block + 3, m.block);
    m.dynamic_smem = r.dynamic_smem;
    m.static_smem = r.static_smem;
    m.registers = r.registers;
    m.call = r.call;
    std::string display;
    if ((launch.flags & wire::kLaunchNoActivity) != 0) {
      display = "<kernel of grid " + std::to_string(r.grid_id) + ", no CUPTI record>";
    } else if (auto k = p.kernel_names.find(r.kernel_id); k != p.kernel_names.end()) {
      display = k->second;
    } else {
      display = "<unknown kernel>";
    }
    m.name_len = TextLength(display);
    p.out.Send(next_, p.info, wire::kMsgLaunch, m, display.data(), m.name_len);
    ++p.launches;

    for (const arena::LaunchEvents& warp : launch.warps) {
      const arena::WarpSegment& seg = *warp.segment;
      // A message holds up to kMaxEventsPerMessage wire entries; a wide value
      // takes two (its event, then a kEventValueHigh entry), never split.
      for (size_t first = 0; first < warp.events.size();) {
        size_t count = 0;
        uint32_t slots = 0;
        while (first + count < warp.events.size()) {
          const uint32_t need = (warp.events[first + count].info & wire::kEventWideValue) != 0 ? 2 : 1;
          if (slots + need > kMaxEventsPerMessage) break;
          slots += need;
          ++count;
        }
        // Names first: a new one sends a NameMsg (through the same buffer).
        ids.resize(count);
        for (size_t i = 0; i < count; ++i) {
          ids[i] = name_id(seg.name_generation, seg.name_base + static_cast<int64_t>(warp.events[first + i].name_offset));
        }
        auto w = ZeroedMessage<wire::WarpEventsMsg>();
        w.launch_id = m.launch_id;
        std::copy(seg.block, seg.block + 3, w.block);
        w.sm = seg.sm;
        w.warp = seg.warp;
        w.hw_warp = seg.hw_warp;
        w.flags = (seg.flags & wire::kChunkFromTriton) != 0
                      ? static_cast<uint16_t>(wire::kWarpTritonProgram | (seg.cluster << wire::kWarpClusterShift))
                      : 0;
        w.count = slots;
        uint8_t* message = p.out.Frame(static_cast<uint32_t>(sizeof(w) + slots * sizeof(wire::WireEvent)));
        std::memcpy(message, &w, sizeof(w));
        uint8_t* at = message + sizeof(w);
        for (size_t i = 0; i < count; ++i, at += sizeof(wire::WireEvent)) {
          const arena::DecodedEvent& e = warp.events[first + i];
          const wire::WireEvent event{e.time_ns, static_cast<uint32_t>(e.clock), ids[i], e.info, e.value};
          std::memcpy(at, &event, sizeof(event));
          if ((e.info & wire::kEventWideValue) != 0) {
            at += sizeof(wire::WireEvent);
            const wire::WireEvent high{e.time_ns, static_cast<uint32_t>(e.clock), ids[i], wire::kEventValueHigh,
                                       e.value_high};
            std::memcpy(at, &high, sizeof(high));
          }
        }
        p.out.Commit(next_, p.info, wire::kMsgWarpEvents);
        first += count;
      }
    }
  }
  if (logger_) {
    logger_->debug("pid {}: read-back of GPU {}: {} chunks ({} empty, {} malformed), {} launches, {} events",
                   p.info.pid, c.device, decode.chunks, decode.empty_chunks, decode.malformed_chunks, launches.size(),
                   match.events);
  }
  return launches.size();
}

}  // namespace smprof
