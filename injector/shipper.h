// Shipper: turns harvested launches into transport messages (wire.h).
//
// Owns the process-wide message state: launch ids (increasing with start
// time across harvests), the interned marker names (a NameMsg precedes the
// first use of each id), the named host threads (a ThreadMsg precedes the
// first launch or harvest naming a thread; `thread_name(tid)` says its name),
// and the counters of what was shipped or lost on the way. A name, thread or
// device whose message the transport dropped is announced again at its next
// use. Not thread-safe: the injector calls it
// under its ship mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "injector/harvest.h"
#include "smprof/wire.h"

namespace smprof::injector {

class MessageSink {
 public:
  virtual ~MessageSink() = default;
  // Returns false when the message was dropped (already counted by the sink).
  virtual bool Send(const void* data, uint32_t size, uint64_t events) = 0;
};

struct ShipperCounters {
  uint64_t launches = 0;
  uint64_t events = 0;  // events in messages the sink accepted
  uint64_t messages_dropped = 0;
  uint64_t events_dropped = 0;  // events in messages the sink dropped
};

// What the calibration kernel measured on a GPU (injector/calibration.h).
struct Calibration {
  uint32_t sm_clock_khz = 0;  // 0: not measured
  uint32_t cost_context_centicycles = 0;
  uint32_t cost_default_centicycles = 0;
  uint32_t cost_diverged_centicycles = 0;
  uint32_t cost_idle_centicycles = 0;
};

// What the collector needs to name a GPU across processes and read its times.
struct DeviceInfo {
  uint32_t ordinal = 0;  // CUDA ordinal in this process
  uint32_t sm_count = 0;
  uint32_t cc_major = 0;
  uint32_t cc_minor = 0;
  uint8_t uuid[16] = {};
  uint32_t pci_domain = 0;
  uint32_t pci_bus = 0;
  uint32_t pci_device = 0;
  uint32_t sm_clock_khz = 0;
  uint32_t timer_resolution_ns = 0;  // 0: not measured
  Calibration calibration;           // injector/calibration.h; zeros: not measured
  uint64_t buffer_bytes = 0;         // the device buffer (arena) of the context
  std::string name;
};

// Where a harvest ran on the host (HarvestMsg's host fields; CUPTI clock).
struct HarvestHost {
  uint64_t begin_ns = 0, end_ns = 0;
  uint32_t tid = 0;        // 0: not known
  wire::HostCall call{};   // the synchronising call whose exit ran it, if any
  uint32_t stage_us[wire::kHarvestStages] = {};  // wire::HarvestStage
};

class Shipper {
 public:
  using ThreadNameFn = std::function<std::string(uint32_t)>;
  explicit Shipper(MessageSink* sink, ThreadNameFn thread_name = nullptr)
      : sink_(sink), thread_name_(std::move(thread_name)) {}

  void SendProcess(uint32_t pid, uint32_t ppid, uint64_t host_realtime_ns, uint64_t gpu_time_ns,
                   const std::string& cmdline);
  // Announces a device once; later calls for the same ordinal do nothing.
  void SendDevice(const DeviceInfo& device);
  void SendNotice(wire::NoticeKind kind, const std::string& text);

  // `name_of(generation, address)` returns the marker name stored at a
  // device address by the modules of that name generation (a segment's
  // name_generation: after a module unload, another module may put another
  // name at the same address). `kernel_name(mangled)` returns the display
  // name of a kernel.
  void SendLaunches(const std::vector<Launch>& launches, uint32_t extra_flags,
                    const std::function<std::string(uint64_t, uint64_t)>& name_of,
                    const std::function<std::string(const std::string&)>& kernel_name);

  // `chunks_used` of `chunks_total`: how full the arena was (its fill
  // counter); `chunks_empty` of the used ones were claimed but never written.
  void SendHarvest(uint64_t time_ns, uint32_t device, wire::HarvestReason reason, uint64_t dropped, uint64_t unplaced,
                   uint32_t chunks_used, uint32_t chunks_total, uint32_t chunks_empty,
                   const HarvestHost& host = HarvestHost());
  void SendStats(const wire::StatsMsg& stats);

  const ShipperCounters& counters() const { return counters_; }

  // Events per WarpEventsMsg before a warp is split into several messages.
  static constexpr uint32_t kMaxEventsPerMessage = 4096;

 private:
  uint32_t InternName(const std::string& name);
  // Sends the ThreadMsg of `tid` unless it reached the collector already.
  void AnnounceThread(uint32_t tid);
  bool Send(uint32_t type, const void* fixed, uint32_t fixed_size, const void* tail, uint32_t tail_size,
            uint64_t events);
  // A message built in place: Frame() returns room for `bytes` (padding
  // zeroed), Commit() sets the header over the first bytes and sends it.
  uint8_t* Frame(uint32_t bytes);
  bool Commit(uint32_t type, uint64_t events);

  MessageSink* sink_;
  ShipperCounters counters_;
  uint64_t next_launch_id_ = 1;
  uint32_t next_name_id_ = 1;
  std::unordered_map<std::string, uint32_t> name_ids_;
  struct NameKeyHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& k) const {
      return std::hash<uint64_t>()(k.second * 0x9E3779B97F4A7C15ull ^ k.first);
    }
  };
  // (name generation, address) -> id, per harvest
  std::unordered_map<std::pair<uint64_t, uint64_t>, uint32_t, NameKeyHash> address_ids_;
  std::vector<uint32_t> devices_sent_;
  ThreadNameFn thread_name_;
  std::vector<uint32_t> threads_sent_;
  std::vector<uint8_t> buffer_;
};

}  // namespace smprof::injector
