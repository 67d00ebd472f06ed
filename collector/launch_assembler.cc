#include "collector/launch_assembler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <tuple>
#include <vector>

#include "collector/arena_decoder.h"
#include "collector/launch_matcher.h"
#include "collector/message_decoder.h"
#include "common/message_fields.h"
#include "common/run_parts.h"
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

void LaunchAssembler::SendName(Producer& p, uint32_t id, const std::string& text) {
  auto m = ZeroedMessage<wire::NameMsg>();
  m.name_id = id;
  m.name_len = TextLength(text);
  p.out.Send(next_, p.info, wire::kMsgName, m, text.data(), m.name_len);
}

void LaunchAssembler::SendLaunch(Producer& p, const Context& c, const arena::Launch& launch, uint64_t launch_id,
                                 uint32_t extra_flags) {
  const arena::KernelRecord& r = launch.record;
  auto m = ZeroedMessage<wire::LaunchMsg>();
  m.launch_id = launch_id;
  m.start_ns = r.start_ns;
  m.end_ns = std::max(r.start_ns, r.end_ns);
  m.grid_id = r.grid_id;
  m.correlation_id = r.correlation_id;
  m.stream_id = r.stream_id;
  m.device = (launch.flags & wire::kLaunchNoActivity) != 0 ? c.device : r.device;
  m.context_id = r.context_id;
  m.graph_id = r.graph_id;
  m.flags = launch.flags | extra_flags | (r.graph_id != 0 ? uint32_t{wire::kLaunchFromGraph} : 0u) |
            (r.running() ? uint32_t{wire::kLaunchRunning} : 0u);
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
  // No launch refers to an unmatched segment: each is moved, not copied.
  for (const arena::WarpSegment* s : unmatched) {
    const size_t index = static_cast<size_t>(s - segments.data());
    const int age = ages[index] + 1;
    if (final || age > kCarryHarvests || waiting_events + s->events.size() > carry_limit) {
      given_up.push_back(std::move(segments[index]));
    } else {
      waiting_events += s->events.size();
      waiting.push_back(std::move(segments[index]));
      waiting_ages.push_back(age);
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

  Emit(p, c, launches, reason == wire::kHarvestHighWater ? uint32_t{wire::kLaunchForcedDrain} : 0u);
  if (logger_) {
    logger_->debug("pid {}: read-back of GPU {}: {} chunks ({} empty, {} malformed), {} launches, {} events",
                   p.info.pid, c.device, decode.chunks, decode.empty_chunks, decode.malformed_chunks, launches.size(),
                   match.events);
  }
  return launches.size();
}

namespace {

// A marker name as a chunk gives it: its module generation and address.
struct NameKey {
  uint64_t generation = 0;
  uint64_t address = 0;
  bool operator==(const NameKey& o) const { return generation == o.generation && address == o.address; }
};
struct NameKeyHash {
  size_t operator()(const NameKey& k) const { return std::hash<uint64_t>()(k.address * 31 + k.generation); }
};

// One WarpEventsMsg: events [first, first + count) of a launch's warp, in
// `slots` wire entries (a wide value takes two).
struct Piece {
  uint32_t launch = 0;  // index in the read-back's launches
  uint32_t warp = 0;    // index in the launch's warps
  uint32_t first = 0, count = 0, slots = 0;
};

// A contiguous run of the read-back's warps, framed by one thread.
struct Part {
  std::vector<Piece> pieces;
  std::vector<std::pair<size_t, NameKey>> first_uses;  // (piece, name): where the part first uses a name
  // NameMsgs to send before a piece: (piece, name id, text).
  std::vector<std::tuple<size_t, uint32_t, std::string>> names_due;
  std::vector<uint8_t> bytes;                          // the pieces' messages back to back
  std::vector<std::pair<size_t, uint32_t>> frames;     // (offset, size) of each piece's message
};

}  // namespace

void LaunchAssembler::Emit(Producer& p, const Context& c, const std::vector<arena::Launch>& launches,
                           uint32_t extra_flags) {
  // The warps in send order, split into parts of about equal events.
  std::vector<std::pair<uint32_t, uint32_t>> warps;  // (launch, warp)
  uint64_t events = 0;
  for (uint32_t l = 0; l < launches.size(); ++l) {
    for (uint32_t w = 0; w < launches[l].warps.size(); ++w) warps.emplace_back(l, w);
    events += launches[l].event_count;
  }
  const unsigned parts_count = PartsFor(threads_, events, kEventsPerFrameThread);
  std::vector<size_t> bounds{0};  // part i: warps [bounds[i], bounds[i + 1])
  {
    uint64_t seen = 0;
    for (size_t i = 0; i < warps.size() && bounds.size() < parts_count; ++i) {
      seen += launches[warps[i].first].warps[warps[i].second].events.size();
      if (seen * parts_count >= events * bounds.size()) bounds.push_back(i + 1);
    }
    bounds.push_back(warps.size());
  }
  std::vector<Part> parts(bounds.size() - 1);
  const auto key_of = [&](const arena::LaunchEvents& warp, const arena::DecodedEvent& e) {
    const arena::WarpSegment& seg = *warp.segment;
    return NameKey{seg.name_generation, seg.name_base + static_cast<int64_t>(e.name_offset)};
  };

  // Each part's messages (a message holds up to kMaxEventsPerMessage wire
  // entries; a wide value takes two, never split) and the names it uses
  // first, in order.
  RunParts(static_cast<unsigned>(parts.size()), [&](unsigned i) {
    Part& part = parts[i];
    std::unordered_set<NameKey, NameKeyHash> seen;
    for (size_t k = bounds[i]; k < bounds[i + 1]; ++k) {
      const arena::LaunchEvents& warp = launches[warps[k].first].warps[warps[k].second];
      for (size_t first = 0; first < warp.events.size();) {
        Piece piece{warps[k].first, warps[k].second, static_cast<uint32_t>(first), 0, 0};
        while (first + piece.count < warp.events.size()) {
          const arena::DecodedEvent& e = warp.events[first + piece.count];
          const uint32_t need = (e.info & wire::kEventWideValue) != 0 ? 2 : 1;
          if (piece.slots + need > kMaxEventsPerMessage) break;
          piece.slots += need;
          ++piece.count;
          const NameKey key = key_of(warp, e);
          if (seen.insert(key).second) part.first_uses.emplace_back(part.pieces.size(), key);
        }
        part.pieces.push_back(piece);
        first += piece.count;
      }
    }
  });

  // Name ids in the order of first use in the read-back (as one thread
  // would give them); a text new to the producer gets a NameMsg before the
  // message that uses it first.
  std::unordered_map<NameKey, uint32_t, NameKeyHash> ids;
  for (Part& part : parts) {
    for (const auto& [piece, key] : part.first_uses) {
      if (ids.count(key) != 0) continue;
      auto it = c.marker_names.find({static_cast<uint32_t>(key.generation), key.address});
      std::string text;
      if (it != c.marker_names.end()) {
        text = it->second;
      } else {
        char unreadable[64];
        std::snprintf(unreadable, sizeof(unreadable), "<unreadable name at 0x%llx>",
                      static_cast<unsigned long long>(key.address));
        text = unreadable;
      }
      auto known = p.name_ids.find(text);
      if (known == p.name_ids.end()) {
        known = p.name_ids.emplace(text, p.next_name_id++).first;
        part.names_due.emplace_back(piece, known->second, text);
      }
      ids.emplace(key, known->second);
    }
  }

  // The messages, framed in parallel (the last ids by address in front of
  // the map: a kernel has few names).
  const uint64_t first_launch_id = p.next_launch_id;
  RunParts(static_cast<unsigned>(parts.size()), [&](unsigned i) {
    Part& part = parts[i];
    struct Cached {
      NameKey key;
      uint32_t id = 0;
    };
    Cached recent[64] = {};
    for (const Piece& piece : part.pieces) {
      const arena::LaunchEvents& warp = launches[piece.launch].warps[piece.warp];
      const arena::WarpSegment& seg = *warp.segment;
      auto w = ZeroedMessage<wire::WarpEventsMsg>();
      w.launch_id = first_launch_id + piece.launch;
      std::copy(seg.block, seg.block + 3, w.block);
      w.sm = seg.sm;
      w.warp = seg.warp;
      w.hw_warp = seg.hw_warp;
      w.flags = (seg.flags & wire::kChunkFromTriton) != 0
                    ? static_cast<uint16_t>(wire::kWarpTritonProgram | (seg.cluster << wire::kWarpClusterShift))
                    : 0;
      w.count = piece.slots;
      const uint32_t size = wire::PaddedSize(static_cast<uint32_t>(sizeof(w) + piece.slots * sizeof(wire::WireEvent)));
      const size_t offset = part.bytes.size();
      part.bytes.resize(offset + size);
      part.frames.emplace_back(offset, size);
      uint8_t* message = part.bytes.data() + offset;
      w.h = wire::MsgHeader{wire::kMsgWarpEvents, size};
      std::memcpy(message, &w, sizeof(w));
      uint8_t* at = message + sizeof(w);
      for (uint32_t j = 0; j < piece.count; ++j, at += sizeof(wire::WireEvent)) {
        const arena::DecodedEvent& e = warp.events[piece.first + j];
        const NameKey key = key_of(warp, e);
        Cached& slot = recent[(key.address >> 3) % 64];
        if (slot.id == 0 || !(slot.key == key)) slot = Cached{key, ids.at(key)};
        const wire::WireEvent event{e.time_ns, static_cast<uint32_t>(e.clock), slot.id, e.info, e.value};
        std::memcpy(at, &event, sizeof(event));
        if ((e.info & wire::kEventWideValue) != 0) {
          at += sizeof(wire::WireEvent);
          const wire::WireEvent high{e.time_ns, static_cast<uint32_t>(e.clock), slot.id, wire::kEventValueHigh,
                                     e.value_high};
          std::memcpy(at, &high, sizeof(high));
        }
      }
      std::memset(at, 0, message + size - at);  // the padding
    }
  });

  // In start order: a LaunchMsg, then its warps' messages, each after the
  // NameMsgs of the names it uses first.
  uint32_t next_launch = 0;
  const auto send_launches_to = [&](uint32_t end) {
    for (; next_launch < end; ++next_launch) SendLaunch(p, c, launches[next_launch], first_launch_id + next_launch,
                                                        extra_flags);
  };
  for (const Part& part : parts) {
    size_t due = 0;
    for (size_t k = 0; k < part.pieces.size(); ++k) {
      send_launches_to(part.pieces[k].launch + 1);
      for (; due < part.names_due.size() && std::get<0>(part.names_due[due]) == k; ++due) {
        SendName(p, std::get<1>(part.names_due[due]), std::get<2>(part.names_due[due]));
      }
      next_(p.info, part.bytes.data() + part.frames[k].first, part.frames[k].second);
    }
  }
  send_launches_to(static_cast<uint32_t>(launches.size()));
  p.next_launch_id = first_launch_id + launches.size();
}

}  // namespace smprof
