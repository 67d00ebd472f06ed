#include "injector/shipper.h"

#include <algorithm>
#include <cstring>

namespace smprof::injector {
namespace {

constexpr uint32_t kMaxStringBytes = 64u << 10;

template <typename Msg>
Msg Zeroed() {
  Msg m;
  std::memset(&m, 0, sizeof(m));
  return m;
}

uint32_t ClampedLength(const std::string& s) {
  return static_cast<uint32_t>(std::min<size_t>(s.size(), kMaxStringBytes));
}

}  // namespace

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
  auto m = Zeroed<wire::ProcessMsg>();
  m.pid = pid;
  m.ppid = ppid;
  m.host_realtime_ns = host_realtime_ns;
  m.gpu_time_ns = gpu_time_ns;
  m.cmdline_len = ClampedLength(cmdline);
  Send(wire::kMsgProcess, &m, sizeof(m), cmdline.data(), m.cmdline_len, 0);
}

void Shipper::SendDevice(const DeviceInfo& d) {
  if (std::find(devices_sent_.begin(), devices_sent_.end(), d.ordinal) != devices_sent_.end()) return;
  auto m = Zeroed<wire::DeviceMsg>();
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
  m.name_len = ClampedLength(d.name);
  if (Send(wire::kMsgDevice, &m, sizeof(m), d.name.data(), m.name_len, 0)) devices_sent_.push_back(d.ordinal);
}

void Shipper::SendNotice(wire::NoticeKind kind, const std::string& text) {
  auto m = Zeroed<wire::NoticeMsg>();
  m.kind = kind;
  m.text_len = ClampedLength(text);
  Send(wire::kMsgNotice, &m, sizeof(m), text.data(), m.text_len, 0);
}

uint32_t Shipper::InternName(const std::string& name) {
  auto it = name_ids_.find(name);
  if (it != name_ids_.end()) return it->second;
  const uint32_t id = next_name_id_++;
  auto m = Zeroed<wire::NameMsg>();
  m.name_id = id;
  m.name_len = ClampedLength(name);
  if (Send(wire::kMsgName, &m, sizeof(m), name.data(), m.name_len, 0)) name_ids_.emplace(name, id);
  return id;
}

void Shipper::AnnounceThread(uint32_t tid) {
  if (tid == 0 || std::find(threads_sent_.begin(), threads_sent_.end(), tid) != threads_sent_.end()) return;
  const std::string name = thread_name_ ? thread_name_(tid) : std::string();
  auto m = Zeroed<wire::ThreadMsg>();
  m.tid = tid;
  m.name_len = ClampedLength(name);
  if (Send(wire::kMsgThread, &m, sizeof(m), name.data(), m.name_len, 0)) threads_sent_.push_back(tid);
}

void Shipper::SendLaunches(const std::vector<Launch>& launches, uint32_t extra_flags,
                           const std::function<std::string(uint64_t, uint64_t)>& name_of,
                           const std::function<std::string(const std::string&)>& kernel_name) {
  address_ids_.clear();  // addresses are only stable while modules stay loaded
  // In front of the map: the last ids by address (a kernel has few names).
  struct Cached {
    uint64_t address = 0;
    uint64_t generation = 0;
    uint32_t id = 0;
  };
  Cached recent[64];
  for (const Launch& launch : launches) {
    const KernelRecord& r = launch.record;
    auto m = Zeroed<wire::LaunchMsg>();
    m.launch_id = next_launch_id_++;
    m.start_ns = r.start_ns;
    m.end_ns = r.end_ns;
    m.grid_id = r.grid_id;
    m.correlation_id = r.correlation_id;
    m.stream_id = r.stream_id;
    m.device = r.device;
    m.context_id = r.context_id;
    m.graph_id = r.graph_id;
    m.flags = launch.flags | extra_flags | (r.graph_id != 0 ? uint32_t{wire::kLaunchFromGraph} : 0u);
    std::copy(r.grid, r.grid + 3, m.grid);
    std::copy(r.block, r.block + 3, m.block);
    m.dynamic_smem = r.dynamic_smem;
    m.static_smem = r.static_smem;
    m.registers = r.registers;
    if (launch.call.api != wire::kApiNone) {
      m.call = launch.call;
      AnnounceThread(launch.call.tid);
    }
    const std::string display = (launch.flags & wire::kLaunchNoActivity) && r.name.empty()
                                    ? "<kernel of grid " + std::to_string(r.grid_id) + ", no CUPTI record>"
                                    : kernel_name(r.name);
    m.name_len = ClampedLength(display);
    Send(wire::kMsgLaunch, &m, sizeof(m), display.data(), m.name_len, 0);
    ++counters_.launches;

    for (const LaunchEvents& warp : launch.warps) {
      const WarpSegment& seg = *warp.segment;
      // A message holds up to kMaxEventsPerMessage wire entries; a wide value
      // takes two (its event, then a kEventValueHigh entry), never split.
      for (size_t first = 0; first < warp.events.size();) {
        size_t count = 0;    // events
        uint32_t slots = 0;  // wire entries
        while (first + count < warp.events.size()) {
          const uint32_t need = (warp.events[first + count].info & wire::kEventWideValue) != 0 ? 2 : 1;
          if (slots + need > kMaxEventsPerMessage) break;
          slots += need;
          ++count;
        }
        // Names first: interning one sends a NameMsg (through buffer_).
        for (size_t i = first; i < first + count; ++i) {
          const uint64_t address = seg.name_base + static_cast<int64_t>(warp.events[i].name_offset);
          Cached& slot = recent[(address >> 3) % 64];
          if (slot.id == 0 || slot.address != address || slot.generation != seg.name_generation) {
            const auto key = std::make_pair(seg.name_generation, address);
            auto it = address_ids_.find(key);
            if (it == address_ids_.end()) {
              it = address_ids_.emplace(key, InternName(name_of(seg.name_generation, address))).first;
            }
            slot = Cached{address, seg.name_generation, it->second};
          }
        }
        auto w = Zeroed<wire::WarpEventsMsg>();
        w.launch_id = m.launch_id;
        std::copy(seg.block, seg.block + 3, w.block);
        w.sm = seg.sm;
        w.warp = seg.warp;
        w.hw_warp = seg.hw_warp;
        w.flags = (seg.flags & wire::kChunkFromTriton) != 0
                      ? static_cast<uint16_t>(wire::kWarpTritonProgram | (seg.cluster << wire::kWarpClusterShift))
                      : 0;
        w.count = slots;
        uint8_t* message = Frame(static_cast<uint32_t>(sizeof(w) + slots * sizeof(wire::WireEvent)));
        std::memcpy(message, &w, sizeof(w));
        uint8_t* out = message + sizeof(w);
        for (size_t i = first; i < first + count; ++i, out += sizeof(wire::WireEvent)) {
          const DecodedEvent& e = warp.events[i];
          const uint64_t address = seg.name_base + static_cast<int64_t>(e.name_offset);
          const Cached& slot = recent[(address >> 3) % 64];
          const uint32_t id = slot.id != 0 && slot.address == address && slot.generation == seg.name_generation
                                  ? slot.id
                                  : address_ids_.at(std::make_pair(seg.name_generation, address));
          const wire::WireEvent wire_event{e.time_ns, static_cast<uint32_t>(e.clock), id, e.info, e.value};
          std::memcpy(out, &wire_event, sizeof(wire_event));
          if ((e.info & wire::kEventWideValue) != 0) {
            out += sizeof(wire::WireEvent);
            const wire::WireEvent high{e.time_ns, static_cast<uint32_t>(e.clock), id, wire::kEventValueHigh,
                                       e.value_high};
            std::memcpy(out, &high, sizeof(high));
          }
        }
        Commit(wire::kMsgWarpEvents, count);
        first += count;
      }
    }
  }
}

void Shipper::SendHarvest(uint64_t time_ns, uint32_t device, wire::HarvestReason reason, uint64_t dropped,
                          uint64_t unplaced, uint32_t chunks_used, uint32_t chunks_total, uint32_t chunks_empty,
                          const HarvestHost& host) {
  AnnounceThread(host.tid);
  auto m = Zeroed<wire::HarvestMsg>();
  m.time_ns = time_ns;
  m.device = device;
  m.reason = reason;
  m.dropped_events = dropped;
  m.unplaced_events = unplaced;
  m.chunks_used = chunks_used;
  m.chunks_total = chunks_total;
  m.chunks_empty = std::min(chunks_empty, chunks_used);
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
