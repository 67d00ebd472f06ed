// Harvester: from a context's arena to transport messages, off the
// application's threads.
//
//   application thread                 smprof's harvest threads
//   Harvest(): DeviceContext::Read     --> queue --> [in read order] probe the clocks,
//   (wait for recording work, copy                   take CUPTI's records
//    the used chunks, reset)                     --> [in parallel] bring the chunks to
//                                                    host memory, scan them (names,
//                                                    what each kernel claimed), read
//                                                    the names
//                                                --> [in read order] ship the records,
//                                                    names, chunks and the harvest,
//                                                    then the counters
//
// The chunks ship as they were read back: the collector decodes them and
// matches them with the records (collector/launch_assembler.h), so a
// process whose GPU records faster than the host decodes is never held by
// the decoding, and what it shipped outlives it. Taking records and
// shipping go by turns in the order of the read-backs, so a read-back's
// records are those of the kernels that ended before it, and the collector
// receives them in order.
//
// An application thread is held only while the arena is copied (and, for a
// forced drain that cannot switch segments, while the recording work it
// waits for finishes: device_context.h). The queue
// holds at most kSnapshotsPerContext read-backs per context, each in a
// reusable host buffer (host_buffer.h): host memory stays bounded by that
// many arena copies. The copy the application waits for is the device's (a
// staging copy in device memory, device_context.h); a harvest thread brings
// it to the host buffer when it takes the job. Overflow policy
// (SMPROF_BACKLOG): when a context's buffers are all queued, the next
// read-back either waits for a harvest thread to free one (wait, the
// default: the application is stalled, the wait shows as the harvest's
// `wait` stage, nothing is dropped) or is skipped at once (drop: the
// application is never held longer than a copy; the events stay in the
// device buffer for a later harvest, and what no longer fits there is
// dropped on the device, counted; skipped read-backs are counted in
// StatsMsg::harvests_skipped). The last read-back before the arena or the
// modules go (exit, module unload, context end) neither waits nor skips: it
// takes one buffer beyond the bound.
//
// Which records are wanted (their events kept by the collector): those whose
// launch's API call was noted in the context's HostCalls (launches of kernels
// that were excluded, outside the launch range or the capture window but ran
// while their module recorded are filtered there and counted). A final
// harvest (exit, context end) reads nothing back: it takes every record left
// and tells the collector to stop waiting for records.
//
// Names are read from the modules' memory. Each read-back keeps the
// generation of its context's modules (a module unload or context end starts
// a new one, after reading the names of everything queued or in progress),
// so a name is read only from the memory of the modules that wrote the event;
// the collector receives each (generation, address) once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/settings.h"
#include "injector/activity_store.h"
#include "injector/device_context.h"
#include "injector/gpu.h"
#include "injector/host_calls.h"
#include "injector/shipper.h"
#include "smprof/wire.h"

namespace smprof::injector {

class ChunkScanner;
class KernelTable;

// A quarter of the machine's cores, 1 to kMaxHarvestThreads: how many
// harvest threads bring read-backs to host memory and ship them at once.
inline constexpr unsigned kMaxHarvestThreads = 4;
unsigned QuarterOfTheCores();
// Half the machine's cores, 1 to 8: how many threads scan one piece of a
// large read-back (the application is then waiting for the harvests, or
// about to).
unsigned HalfOfTheCores();

// One context as the harvester sees it. The profiler owns it.
struct HarvestTarget {
  DeviceContext* device = nullptr;
  HostCalls* host_calls = nullptr;
};

class Harvester {
 public:
  // Fills the process-wide counters the harvester does not own (launch counts).
  using StatsFiller = std::function<void(wire::StatsMsg*)>;
  // `threads`: harvest threads (0: a quarter of the cores, 1 to kMaxThreads).
  // `backlog`: the overflow policy above.
  Harvester(Gpu& gpu, ActivityStore& activity, KernelTable& kernels, Shipper& shipper, std::mutex& ship_mu,
            StatsFiller fill_stats, unsigned threads = 0, Backlog backlog = Backlog::kWait);
  ~Harvester();  // stops the harvest thread (queued work is abandoned)

  // On an application thread: reads the arena back if it may (see
  // HarvestMode) and queues the rest. `call`: the synchronising API call
  // whose exit runs it (api kApiNone: none). False if nothing was read.
  bool Harvest(HarvestTarget target, wire::HarvestReason reason, HarvestMode mode, const wire::HostCall& call = {});
  // Waits until every queued harvest of `device` (nullptr: of all contexts)
  // has been shipped, giving up (false) once no harvest has finished for
  // `stall`. `final`: a final harvest of `device` ships every record left
  // (and the collector stops waiting for records of its events).
  bool Flush(const DeviceContext* device, bool final, std::chrono::milliseconds stall);
  // On the application's thread, inside a module-unload or context-destroy
  // callback (after the forced harvest): reads every marker name the queued
  // harvests of `device` need while the modules are still there (the
  // harvest thread's own driver calls wait for the unload to finish, so it is
  // never waited for here), then starts a new name generation: later
  // harvests read names afresh (a new module may reuse the addresses).
  void ReadNamesBeforeUnload(DeviceContext* device);
  // The context is gone: its remaining harvests ship without touching the
  // GPU (names from what ReadNamesBeforeUnload read); `final` as in Flush.
  void EndContext(DeviceContext* device);

  // Sends the cumulative counters (ship mutex held by the caller or not: takes it).
  void SendStats();
  // Exit could not wait any longer: the events of read-backs not yet shipped
  // are counted as lost on the host (StatsMsg::events_lost_host) and
  // returned.
  uint64_t CountUnshipped();

  static constexpr size_t kSnapshotsPerContext = 4;
  // A read-back copied to host memory on the application's thread (no
  // staging slice free): about this fast, page faults included (H200 host).
  static constexpr uint64_t kDirectCopyBytesPerSecond = uint64_t{1} << 30;
  // ... and never less than this: a staging area full of small read-backs
  // is freed within milliseconds by harvest threads that are not stuck.
  static constexpr std::chrono::milliseconds kMinStagingWait{50};
  // Grid ids whose kernel a context remembers for teaching chunk sizes.
  static constexpr size_t kRecentGrids = 65536;
  static constexpr unsigned kMaxThreads = kMaxHarvestThreads;

 private:
  struct Job;
  struct ContextState;

  ContextState& StateOf(const DeviceContext* device);  // mu_ held
  void StartThreads();                                 // mu_ held
  void Enqueue(std::unique_ptr<Job> job);              // mu_ held
  class StageClock;
  struct TakenRecords {
    std::vector<KernelRecord> records;
    std::vector<Shipper::Record> shipped;  // point into `records`
    bool probed = false;                   // the clock probe ran
    // A read of kernels still running: the grids of the records taken so
    // far, and the kernel launches after the last whose record was taken.
    std::set<uint64_t> known_grids;
    std::vector<std::pair<uint64_t, HostCalls::Call>> outstanding;
  };
  void Run();
  // One job's harvest, in these stages:
  void Process(Job& job);
  TakenRecords TakeRecords(Job& job, ContextState& state, bool gone);  // take turn
  void NameRunningLaunchesLocked(const Job& job, ContextState& state, const ChunkScanner& scanner,
                                 const TakenRecords& taken);  // ship turn, ship_mu_ held
  void ShipChunks(Job& job, ChunkScanner* scanner, StageClock& clock);  // ship turn
  void TeachClaims(ContextState& state, const ChunkScanner& scanner, uint32_t chunk_bytes);
  void ShipHarvestLocked(Job& job, ContextState& state, const ChunkScanner& scanner,  // ship_mu_ held
                         const std::vector<std::pair<uint64_t, std::string>>& names, bool probed, StageClock& clock);
  // Waits for the job's turn at a step done in read order (false: stopping).
  bool WaitTurn(const uint64_t& turn, uint64_t seq);
  void EndTurn(uint64_t* turn);
  void AdvanceLocked(uint64_t* turn);  // mu_ held: past the turns of jobs that failed
  void AbandonLocked(uint64_t seq);    // mu_ held: a failed job gives up its turns
  std::string ReadName(ContextState& state, DeviceContext* device, uint64_t generation, uint64_t address);
  void SendStatsLocked();  // ship_mu_ held

  Gpu& gpu_;
  ActivityStore& activity_;
  KernelTable& kernels_;
  Shipper& shipper_;
  std::mutex& ship_mu_;
  StatsFiller fill_stats_;
  const unsigned thread_count_;
  // Threads one piece of a large read-back is scanned on (chunk_scan.h).
  const unsigned scan_threads_;
  wire::StatsMsg stats_{};  // ship_mu_
  const Backlog backlog_;
  std::atomic<uint64_t> skipped_{0};  // read-backs skipped under Backlog::kDrop

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  size_t busy_ = 0;                                     // jobs being processed
  uint64_t finished_ = 0;                               // jobs processed (Flush waits while it grows)
  std::vector<Job*> processing_;                        // their snapshots stay valid while mu_ is held
  uint64_t next_seq_ = 0;                               // read order of the next job
  uint64_t take_turn_ = 0;                              // the job whose records are taken next
  uint64_t ship_turn_ = 0;                              // the job shipped next
  std::set<uint64_t> abandoned_take_, abandoned_ship_;  // turns of jobs that failed before them
  bool stop_ = false;
  std::unordered_map<const DeviceContext*, std::unique_ptr<ContextState>> states_;
  std::vector<std::thread> threads_;
};

}  // namespace smprof::injector
