// Harvester: from a context's arena to transport messages, off the
// application's threads.
//
//   application thread                 smprof's harvest thread
//   Harvest(): DeviceContext::Read     --> queue --> probe the clocks, take CUPTI's
//   (wait for recording work, copy                   records, decode, match, name,
//    the used chunks, reset)                         ship, send the harvest and stats
//
// An application thread is held only while the arena is copied (and, for a
// forced drain, while the recording work it waits for finishes). The queue
// holds at most kSnapshotsPerContext read-backs per context, each in a
// reusable page-locked buffer: host memory stays bounded by that many arena
// copies. Overflow policy: when a context's buffers are all queued, the next
// read-back waits for the harvest thread to free one (the application is
// stalled, and the wait shows as the harvest's `wait` stage); nothing is
// dropped.
//
// Events whose CUPTI record has not arrived wait for the next harvest of
// their context; the final harvest (exit, context end) ships them under a
// synthetic launch. Only events of *wanted* launches are shipped: a launch
// whose API call was noted in the context's HostCalls (launches of kernels
// that were excluded, outside the launch range or the capture window but ran
// while their module recorded are filtered and counted).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "injector/activity_store.h"
#include "injector/device_context.h"
#include "injector/gpu.h"
#include "injector/host_calls.h"
#include "injector/shipper.h"
#include "smprof/wire.h"

namespace smprof::injector {

class KernelTable;

// One context as the harvester sees it. The profiler owns it.
struct HarvestTarget {
  DeviceContext* device = nullptr;
  HostCalls* host_calls = nullptr;
};

class Harvester {
 public:
  // Fills the process-wide counters the harvester does not own (launch counts).
  using StatsFiller = std::function<void(wire::StatsMsg*)>;
  Harvester(Gpu& gpu, ActivityStore& activity, KernelTable& kernels, Shipper& shipper, std::mutex& ship_mu,
            StatsFiller fill_stats);
  ~Harvester();  // stops the harvest thread (queued work is abandoned)

  // On an application thread: reads the arena back if it may (see
  // HarvestMode) and queues the rest. `call`: the synchronising API call
  // whose exit runs it (api kApiNone: none). False if nothing was read.
  bool Harvest(HarvestTarget target, wire::HarvestReason reason, HarvestMode mode, const wire::HostCall& call = {});
  // Waits (until `deadline`) until every queued harvest of `device` (nullptr:
  // of all contexts) has been shipped. `final`: events still waiting for a
  // CUPTI record ship now under synthetic launches.
  bool Flush(const DeviceContext* device, bool final, std::chrono::steady_clock::time_point deadline);
  // The context is gone: free its buffers and names (after a final Flush).
  void Forget(const DeviceContext* device);
  // Marker names read from a context's modules are forgotten (module unload).
  void ForgetNames(const DeviceContext* device);

  // Sends the cumulative counters (ship mutex held by the caller or not: takes it).
  void SendStats();

  static constexpr size_t kSnapshotsPerContext = 2;

 private:
  struct Job;
  struct ContextState;

  ContextState& StateOf(const DeviceContext* device);  // mu_ held
  void Run();
  void Process(Job& job);
  std::string ReadName(ContextState& state, DeviceContext* device, uint64_t address);
  void SendStatsLocked();  // ship_mu_ held

  Gpu& gpu_;
  ActivityStore& activity_;
  KernelTable& kernels_;
  Shipper& shipper_;
  std::mutex& ship_mu_;
  StatsFiller fill_stats_;
  wire::StatsMsg stats_{};  // ship_mu_

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  size_t busy_ = 0;  // jobs being processed
  bool stop_ = false;
  std::unordered_map<const DeviceContext*, std::unique_ptr<ContextState>> states_;
  std::thread thread_;
};

}  // namespace smprof::injector
