// HostCalls: the application's driver API calls behind profiled work, and
// the names of the threads that made them.
//
// A kernel's CUPTI record carries the correlation id of the API call that
// launched it (for a graph's kernels, their cuGraphLaunch's). At that call's
// exit the callback notes when it began and ended and on which thread (Add);
// the harvest that ships the kernel attaches the call to its LaunchMsg
// (Find), and the collector draws it on that thread's track with a flow
// arrow to the kernel. The harvest also keeps only events of launches whose
// call was noted (the launches that were wanted), less the kernels a call
// excludes (Exclude: a graph replay outside the launch range of some of its
// kernels, whose nodes record because their module is lit for the others).
// A context keeps its calls
// for kCycles harvests (a cycle ends at each read-back of the arena): the
// cycle in progress and the ones before (EndHarvest drops the oldest), so
// a read-back still queued for decoding, or a kernel whose record comes a few
// harvests late, still finds its call. Overflow policy: a cycle holds at most kMaxCalls calls; at the limit
// (a program that launches without synchronising, its kernels recording
// nothing, so no drain comes) the cycle ends early and the calls of the
// oldest are forgotten, counted in forgotten() (StatsMsg::host_calls_forgotten:
// their launches show no call in the trace).
//
// Thread-safe: the callbacks of many application threads add, a harvest
// finds. The thread registry is process-wide: a thread notes its own name
// once (NoteCurrentThread), and the shipper names each thread before its
// first call or harvest reaches the collector (ThreadName).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "smprof/wire.h"

namespace smprof::injector {

class ClaimRates;
struct KernelClass;

class HostCalls {
 public:
  // `rates`: the launched function's claim rates (chunk_sizing.h), which the
  // harvest that decodes its warps teaches; none for a graph's launch.
  // `kernel`: the launched kernel's class (none for a graph's launch).
  void Add(uint64_t correlation_id, const wire::HostCall& call, ClaimRates* rates = nullptr,
           const KernelClass* kernel = nullptr);
  // The launches of `kernel` (an opaque identity) made by that call are not
  // wanted. Kept, and forgotten, with the calls of the same cycle.
  void Exclude(uint64_t correlation_id, const void* kernel);
  bool Excludes(uint64_t correlation_id, const void* kernel) const;
  struct Call {
    wire::HostCall call;
    ClaimRates* rates = nullptr;
    const KernelClass* kernel = nullptr;
  };
  // The calls kept with a correlation id above `correlation_id`, in id order.
  std::vector<std::pair<uint64_t, Call>> After(uint64_t correlation_id) const;
  // The call with that correlation id and its function's claim rates (api
  // kApiNone, zeros and no rates when unknown).
  Call Lookup(uint64_t correlation_id) const;
  wire::HostCall Find(uint64_t correlation_id) const { return Lookup(correlation_id).call; }
  // A harvest of the context shipped: forget the calls of the cycle before.
  void EndHarvest();
  size_t size() const;
  // Calls forgotten at the limit before a harvest could ship them.
  uint64_t forgotten() const;

  static constexpr size_t kMaxCalls = size_t{1} << 16;  // per cycle: ~4 MiB each at most
  // Read-backs queued for shipping (Harvester::kSnapshotsPerContext), the
  // one in progress, and kernel records CUPTI delivers a few harvests late,
  // with room to spare.
  static constexpr size_t kCycles = 32;

 private:
  void EndCycle(bool early);  // mu_ held; early: at the limit, not at a harvest
  const Call* FindLocked(uint64_t correlation_id) const;  // mu_ held

  mutable std::mutex mu_;
  struct Cycle {
    std::unordered_map<uint64_t, Call> calls;
    std::unordered_multimap<uint64_t, const void*> excluded;  // rare: graph replays only
  };
  Cycle current_;
  std::deque<Cycle> previous_;  // newest first, kCycles - 1 at most
  uint64_t forgotten_ = 0;
};

// The calling thread's kernel thread id (gettid), cached per thread.
uint32_t CurrentTid();
// Records the calling thread's name (pthread_getname_np) the first time it
// calls this; cheap afterwards.
void NoteCurrentThread();
// The name a thread noted ("" if it never did).
std::string ThreadName(uint32_t tid);

}  // namespace smprof::injector
