// Shipper: turns what a harvest read back into transport messages (wire.h).
//
// A read-back ships as it is: its kernel records (RecordsMsg), the marker
// names its events use (MarkerNameMsg), its chunks (ChunksMsg) and the
// HarvestMsg that closes it; the collector decodes and matches them
// (collector/launch_assembler.h). Owns the process-wide message state: the
// interned kernel names (a KernelNameMsg precedes the first record naming
// one), the named host threads (a ThreadMsg precedes the first record or
// harvest naming a thread; `thread_name(tid)` says its name), and the
// counters of what was shipped or lost on the way. A kernel, thread or device
// whose message the transport dropped is announced again at its next use.
// Not thread-safe: the injector calls it under its ship mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/message_fields.h"
#include "injector/activity_store.h"
#include "smprof/wire.h"

namespace smprof::injector {

class MessageSink {
 public:
  virtual ~MessageSink() = default;
  // Returns false when the message was dropped (already counted by the sink).
  virtual bool Send(const void* data, uint32_t size, uint64_t events) = 0;
  // A message of events read back, in parts (the first begins with its
  // MsgHeader; their sizes add up to `size`): waits longer for room (while
  // the collector lives) before dropping. By default joined and sent.
  using Part = MessagePart;
  virtual bool SendBulk(const Part* parts, size_t count, uint32_t size, uint64_t events);
};

struct ShipperCounters {
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

  // A kernel record of a read-back, with what the launch path knew of it.
  struct Record {
    const KernelRecord* record = nullptr;
    bool wanted = false;    // profiled: the collector keeps its events (wire::kRecordWanted)
    wire::HostCall call{};  // the API call that launched it (api kApiNone: unknown)
  };
  // The records a harvest of context `context_id` took.
  void SendRecords(uint32_t device, uint32_t context_id, const std::vector<Record>& records);
  // The marker name at `address` for the modules of `generation`.
  void SendMarkerName(uint32_t context_id, uint32_t generation, uint64_t address, const std::string& name);
  // Chunks of `chunk_bytes` as read back, each up to its written bytes
  // (`used_bytes`, one per chunk: wire::kChunksUsedBytes), holding `events`
  // events (for the loss counters), in as many messages as they need.
  void SendChunks(uint32_t device, uint32_t context_id, uint32_t generation, uint32_t chunk_bytes,
                  const uint8_t* chunks, const std::vector<uint32_t>& used_bytes, uint64_t events);

  // Closes a read-back of context `context_id` (wire::HarvestMsg):
  // `chunks_used` of `chunks_total` is how full the arena was (its fill
  // counter), `chunks_empty` of the used ones were claimed but never
  // written; `flags` wire::HarvestFlags, `clock_offset_ns` from the clock
  // probe (with kHarvestProbed).
  void SendHarvest(uint64_t time_ns, uint32_t device, uint32_t context_id, wire::HarvestReason reason,
                   uint64_t dropped, uint64_t unplaced, uint32_t chunks_used, uint32_t chunks_total,
                   uint32_t chunks_empty, uint32_t flags, int64_t clock_offset_ns,
                   const HarvestHost& host = HarvestHost());
  void SendStats(const wire::StatsMsg& stats);

  const ShipperCounters& counters() const { return counters_; }

  // The bytes of chunks one ChunksMsg carries at most (a ring of 1 MiB takes
  // messages of half its size).
  static constexpr uint32_t kChunkMessageBytes = 256u << 10;

 private:
  // The KernelNameMsg id of a kernel (mangled name), announced at first use.
  uint32_t KernelId(const std::string& mangled);
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
  uint32_t next_kernel_id_ = 1;
  std::unordered_map<std::string, uint32_t> kernel_ids_;  // mangled name -> id announced
  std::vector<uint32_t> devices_sent_;
  ThreadNameFn thread_name_;
  std::vector<uint32_t> threads_sent_;
  std::vector<uint8_t> buffer_;
  std::vector<MessageSink::Part> parts_;         // SendChunks' message, in parts
  std::vector<wire::ChunkBytes> part_lengths_;  // ... and its chunks' length prefixes
};

}  // namespace smprof::injector
