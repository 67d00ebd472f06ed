#include "injector/shipper.h"

#include <algorithm>
#include <cstring>

#include "common/message_fields.h"
#include "common/names.h"

namespace smprof::injector {

uint8_t* Shipper::Frame(uint32_t bytes) {
  const uint32_t size = wire::PaddedSize(bytes);
  buffer_.resize(size);
  std::memset(buffer_.data() + bytes, 0, size - bytes);
  return buffer_.data();
}

bool Shipper::Send(uint32_t type, const void* fixed, uint32_t fixed_size, const void* tail, uint32_t tail_size,
                   uint64_t events) {
  uint8_t* message = Frame(fixed_size + tail_size);
  std::memcpy(message, fixed, fixed_size);
  if (tail_size > 0) std::memcpy(message + fixed_size, tail, tail_size);
  return Commit(type, events);
}

bool MessageSink::SendBulk(const Part* parts, size_t count, uint32_t size, uint64_t events) {
  std::vector<uint8_t> joined;
  joined.reserve(size);
  for (size_t i = 0; i < count; ++i) {
    const auto* p = static_cast<const uint8_t*>(parts[i].data);
    joined.insert(joined.end(), p, p + parts[i].bytes);
  }
  return Send(joined.data(), size, events);
}

bool Shipper::Commit(uint32_t type, uint64_t events) {
  const auto size = static_cast<uint32_t>(buffer_.size());
  const wire::MsgHeader header{type, size};
  std::memcpy(buffer_.data(), &header, sizeof(header));
  if (sink_->Send(buffer_.data(), size, events)) {
    counters_.events += events;
    return true;
  }
  ++counters_.messages_dropped;
  counters_.events_dropped += events;
  return false;
}

void Shipper::SendProcess(uint32_t pid, uint32_t ppid, uint64_t host_realtime_ns, uint64_t gpu_time_ns,
                          const std::string& cmdline) {
  auto m = ZeroedMessage<wire::ProcessMsg>();
  m.pid = pid;
  m.ppid = ppid;
  m.host_realtime_ns = host_realtime_ns;
  m.gpu_time_ns = gpu_time_ns;
  m.cmdline_len = TextLength(cmdline);
  Send(wire::kMsgProcess, &m, sizeof(m), cmdline.data(), m.cmdline_len, 0);
}

void Shipper::SendDevice(const DeviceInfo& d) {
  if (std::find(devices_sent_.begin(), devices_sent_.end(), d.ordinal) != devices_sent_.end()) return;
  auto m = ZeroedMessage<wire::DeviceMsg>();
  m.device = d.ordinal;
  m.sm_count = d.sm_count;
  m.cc_major = d.cc_major;
  m.cc_minor = d.cc_minor;
  std::memcpy(m.uuid, d.uuid, sizeof(m.uuid));
  m.pci_domain = d.pci_domain;
  m.pci_bus = d.pci_bus;
  m.pci_device = d.pci_device;
  m.sm_clock_khz = d.sm_clock_khz;
  m.timer_resolution_ns = d.timer_resolution_ns;
  m.sm_clock_measured_khz = d.calibration.sm_clock_khz;
  m.cost_context_centicycles = d.calibration.cost_context_centicycles;
  m.cost_default_centicycles = d.calibration.cost_default_centicycles;
  m.cost_diverged_centicycles = d.calibration.cost_diverged_centicycles;
  m.cost_idle_centicycles = d.calibration.cost_idle_centicycles;
  m.buffer_mib = static_cast<uint32_t>(std::min<uint64_t>(d.buffer_bytes >> 20, UINT32_MAX));
  m.name_len = TextLength(d.name);
  if (Send(wire::kMsgDevice, &m, sizeof(m), d.name.data(), m.name_len, 0)) devices_sent_.push_back(d.ordinal);
}

void Shipper::SendNotice(wire::NoticeKind kind, const std::string& text) {
  auto m = ZeroedMessage<wire::NoticeMsg>();
  m.kind = kind;
  m.text_len = TextLength(text);
  Send(wire::kMsgNotice, &m, sizeof(m), text.data(), m.text_len, 0);
}

uint32_t Shipper::KernelId(const std::string& mangled) {
  auto it = kernel_ids_.find(mangled);
  if (it != kernel_ids_.end()) return it->second;
  const uint32_t id = next_kernel_id_++;
  const std::string name = mangled.empty() ? std::string("<unknown kernel>") : Demangle(mangled);
  auto m = ZeroedMessage<wire::KernelNameMsg>();
  m.kernel_id = id;
  m.name_len = TextLength(name);
  if (Send(wire::kMsgKernelName, &m, sizeof(m), name.data(), m.name_len, 0)) kernel_ids_.emplace(mangled, id);
  return id;
}

void Shipper::AnnounceThread(uint32_t tid) {
  if (tid == 0 || std::find(threads_sent_.begin(), threads_sent_.end(), tid) != threads_sent_.end()) return;
  const std::string name = thread_name_ ? thread_name_(tid) : std::string();
  auto m = ZeroedMessage<wire::ThreadMsg>();
  m.tid = tid;
  m.name_len = TextLength(name);
  if (Send(wire::kMsgThread, &m, sizeof(m), name.data(), m.name_len, 0)) threads_sent_.push_back(tid);
}

void Shipper::SendRecords(uint32_t device, uint32_t context_id, const std::vector<Record>& records) {
  constexpr size_t kPerMessage = (kChunkMessageBytes - sizeof(wire::RecordsMsg)) / sizeof(wire::KernelRecordEntry);
  for (size_t first = 0; first < records.size(); first += kPerMessage) {
    const size_t count = std::min(kPerMessage, records.size() - first);
    // Kernel and thread names first: announcing one sends a message (through buffer_).
    std::vector<uint32_t> kernel_ids(count);
    for (size_t i = 0; i < count; ++i) {
      kernel_ids[i] = KernelId(records[first + i].record->name);
      if (records[first + i].call.api != wire::kApiNone) AnnounceThread(records[first + i].call.tid);
    }
    auto m = ZeroedMessage<wire::RecordsMsg>();
    m.device = device;
    m.context_id = context_id;
    m.count = static_cast<uint32_t>(count);
    uint8_t* message = Frame(static_cast<uint32_t>(sizeof(m) + count * sizeof(wire::KernelRecordEntry)));
    std::memcpy(message, &m, sizeof(m));
    for (size_t i = 0; i < count; ++i) {
      const Record& rec = records[first + i];
      wire::KernelRecordEntry e = *rec.record;
      e.end_ns = std::max(e.start_ns, e.end_ns);
      e.kernel_id = kernel_ids[i];
      e.flags = (rec.wanted ? uint32_t{wire::kRecordWanted} : 0u) | (rec.record->flags & wire::kRecordRunning);
      e.call = rec.call.api != wire::kApiNone ? rec.call : wire::HostCall{};
      std::memcpy(message + sizeof(m) + i * sizeof(e), &e, sizeof(e));
    }
    Commit(wire::kMsgRecords, 0);
  }
}

void Shipper::SendMarkerName(uint32_t context_id, uint32_t generation, uint64_t address, const std::string& name) {
  auto m = ZeroedMessage<wire::MarkerNameMsg>();
  m.address = address;
  m.context_id = context_id;
  m.generation = generation;
  m.name_len = TextLength(name);
  Send(wire::kMsgMarkerName, &m, sizeof(m), name.data(), m.name_len, 0);
}

void Shipper::SendChunks(uint32_t device, uint32_t context_id, uint32_t generation, uint32_t chunk_bytes,
                         const uint8_t* chunks, const std::vector<uint32_t>& used_bytes, uint64_t events) {
  const size_t count = used_bytes.size();
  uint64_t total = 0;
  for (uint32_t used : used_bytes) total += std::min(used, chunk_bytes);
  uint64_t events_left = events, bytes_left = total;
  for (size_t first = 0; first < count;) {
    // As many chunks as fit in one message (at least one).
    size_t n = 0;
    uint64_t bytes = 0;
    while (first + n < count) {
      const uint64_t part = sizeof(wire::ChunkBytes) + std::min(used_bytes[first + n], chunk_bytes);
      if (n > 0 && sizeof(wire::ChunksMsg) + bytes + part > kChunkMessageBytes) break;
      bytes += part;
      ++n;
    }
    // The loss counters take the events in proportion to the bytes (the last message the rest).
    const uint64_t written = bytes - n * sizeof(wire::ChunkBytes);
    const uint64_t share = first + n == count || bytes_left == 0 ? events_left : events * written / total;
    events_left -= std::min(share, events_left);
    bytes_left -= std::min(written, bytes_left);
    // Sent in parts, straight from the chunks: the header, then each chunk's
    // length and written bytes (multiples of 8: no padding).
    auto m = ZeroedMessage<wire::ChunksMsg>();
    m.h = wire::MsgHeader{wire::kMsgChunks, static_cast<uint32_t>(sizeof(m) + bytes)};
    m.device = device;
    m.context_id = context_id;
    m.chunk_bytes = chunk_bytes;
    m.count = static_cast<uint32_t>(n);
    m.name_generation = generation;
    m.flags = wire::kChunksUsedBytes;
    part_lengths_.resize(n);
    parts_.clear();
    parts_.push_back({&m, sizeof(m)});
    for (size_t i = first; i < first + n; ++i) {
      wire::ChunkBytes& part = part_lengths_[i - first];
      part = wire::ChunkBytes{std::min(used_bytes[i], chunk_bytes), 0};
      parts_.push_back({&part, sizeof(part)});
      if (part.bytes != 0) parts_.push_back({chunks + i * chunk_bytes, part.bytes});
    }
    if (sink_->SendBulk(parts_.data(), parts_.size(), m.h.size, share)) {
      counters_.events += share;
    } else {
      ++counters_.messages_dropped;
      counters_.events_dropped += share;
    }
    first += n;
  }
}

void Shipper::SendHarvest(uint64_t time_ns, uint32_t device, uint32_t context_id, wire::HarvestReason reason,
                          uint64_t dropped, uint64_t unplaced, uint32_t chunks_used, uint32_t chunks_total,
                          uint32_t chunks_empty, uint32_t flags, int64_t clock_offset_ns, const HarvestHost& host) {
  AnnounceThread(host.tid);
  auto m = ZeroedMessage<wire::HarvestMsg>();
  m.time_ns = time_ns;
  m.device = device;
  m.reason = reason;
  m.dropped_events = dropped;
  m.unplaced_events = unplaced;
  m.chunks_used = chunks_used;
  m.chunks_total = chunks_total;
  m.chunks_empty = std::min(chunks_empty, chunks_used);
  m.context_id = context_id;
  m.flags = flags;
  m.clock_offset_ns = (flags & wire::kHarvestProbed) != 0 ? clock_offset_ns : 0;
  if (host.tid != 0) {
    m.host_begin_ns = host.begin_ns;
    m.host_end_ns = std::max(host.begin_ns, host.end_ns);
    m.host_tid = host.tid;
    if (host.call.api != wire::kApiNone) m.call = host.call;
    std::copy(host.stage_us, host.stage_us + wire::kHarvestStages, m.stage_us);
  }
  Send(wire::kMsgHarvest, &m, sizeof(m), nullptr, 0, 0);
}

void Shipper::SendStats(const wire::StatsMsg& stats) { Send(wire::kMsgStats, &stats, sizeof(stats), nullptr, 0, 0); }

}  // namespace smprof::injector
