// Profiler: the launch policy, and the composition root of the injector's
// logic (no CUDA here: the GPU is behind injector/gpu.h).
//
// The CUPTI subscriber (cupti_subscriber.h) turns callbacks into the calls
// below; tests make them directly, against a fake Gpu. For each launch the
// policy answers one question, "does this launch record?":
//
//   opted in (KernelTable)  and  selected (SMPROF_KERNELS)
//   and in range (SMPROF_LAUNCHES)  and  inside the capture window
//   (SMPROF_CAPTURE_RANGE=cudaProfilerApi: between cudaProfilerStart/Stop)
//
// A launch that records lights its module (DeviceContext), may first force a
// drain of a nearly full arena (a segment switch when it may, or a read-back
// of the segment switched away from once its kernels finished), holds the context's launch gate until API
// exit and notes its API call (HostCalls) for the harvest. A launch that does
// not record costs a cached lookup and, when no module of its context
// records, nothing else.
//
// Data path of one record: kernel -> arena (DeviceContext) -> read back at a
// synchronisation or drain (Harvester, on the application's thread) ->
// decode, match, ship (Harvester's thread) -> transport -> collector.
//
// Callback rules: no exception leaves a call (the subscriber catches and turns
// profiling off); no smprof lock is held across a Gpu call except the launch
// gate and the read-back mutex (DeviceContext); every wait has a deadline.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/launch_filter.h"
#include "common/settings.h"
#include "injector/activity_store.h"
#include "injector/device_context.h"
#include "injector/gpu.h"
#include "injector/harvester.h"
#include "injector/host_calls.h"
#include "injector/kernel_table.h"
#include "injector/shipper.h"

namespace smprof::injector {

// A kernel launch or graph launch as the driver API saw it.
struct LaunchCall {
  GpuCtx ctx = nullptr;
  GpuFunction function = nullptr;  // nullptr: a graph launch
  const char* symbol = nullptr;    // mangled kernel name
  GpuStream stream = nullptr;
  bool per_thread = false;  // the calling thread's per-thread default stream
  uint64_t warps = 0;
  uint64_t correlation_id = 0;
  wire::HostApi api = wire::kApiNone;
  void* graph_exec = nullptr;  // a graph launch's CUgraphExec
};

class Profiler {
 public:
  // `shipper` must outlive the profiler; its calls are serialised here.
  // `harvest_threads`: 0 chooses by the core count (harvester.h).
  Profiler(Gpu& gpu, const Settings& settings, Shipper& shipper, unsigned harvest_threads = 0,
           uint64_t bounce_bytes = ArenaOptions().bounce_bytes);
  ~Profiler();

  void OnLaunchEnter(const LaunchCall& call);
  // `correlation_id` 0: leaving after an error (the call is not noted).
  void OnLaunchExit(uint64_t correlation_id);
  void OnSyncEnter(wire::HostApi api);
  // `context_wide`: cuCtxSynchronize (work smprof cannot query is done too).
  // `result`: what the call returned (a CUresult); a kernel's failed
  // execution (Gpu::ExecutionError) ends profiling of the context and is
  // reported with the launches that may have failed (ReportKernelFailure).
  void OnSyncExit(GpuCtx ctx, wire::HostApi api, bool context_wide, int result = 0);
  void OnStreamDestroy(GpuStream stream);
  // A graph was instantiated (in `ctx`, current): its kernel nodes decide
  // which modules its launches light and how many chunks they may claim.
  void OnGraphExecCreated(GpuCtx ctx, void* graph, void* exec);
  void OnGraphExecDestroy(void* exec);
  void OnModuleUnload(GpuCtx ctx);
  void OnContextDestroy(GpuCtx ctx);
  void OnProfilerStart();
  void OnProfilerStop();
  // Final harvest of every context; waits (boundedly) until all is shipped.
  // `terminating`: the process is about to be ended by a signal; kernels
  // still running are read as far as they wrote, without waiting for them.
  void Shutdown(bool terminating = false);

  ActivityStore& activity() { return activity_; }
  void SendNotice(wire::NoticeKind kind, const std::string& text);

 private:
  struct Context {
    explicit Context(Gpu& gpu, GpuCtx ctx, const ArenaOptions& options) : device(gpu, ctx, options) {}
    DeviceContext device;
    HostCalls host_calls;
  };

  // The opted-in kernel nodes of an instantiated graph.
  struct GraphPlan {
    std::vector<const KernelInfo*> kernels;
    std::vector<uint64_t> warps;
    std::vector<KernelClass*> selected;  // the selected kernels among them, each once
  };

  Context* ContextFor(GpuCtx ctx, bool create);
  // An unwanted launch before its context was set up (see NoteQuietLaunch).
  void NoteEarlyQuietLaunch(GpuCtx ctx, GpuStream stream, bool per_thread);
  void EnterGraphLaunch(const LaunchCall& call);
  bool TakeLaunch(KernelClass* kernel);
  DeviceContext::Module* ModuleOf(Context& c, const KernelInfo& info);
  void Harvest(Context& c, wire::HarvestReason reason, HarvestMode mode, const wire::HostCall& call = {});
  // A synchronisation returned `error` (a kernel's execution failed; the
  // context can run nothing more): a notice names the recording launches
  // since the last that is known to have finished, and the context's
  // arena is given up (what was read back before still ships).
  void ReportKernelFailure(Context& c, const std::string& error);
  // Before a recording launch on `stream` that may claim `chunks` (not while
  // capturing): a drain when they would pass the arena's high-water mark,
  // else the read-back of a switched segment whose kernels finished; then a
  // sample of the fill level.
  void KeepRoom(Context& c, double chunks, GpuStream stream, const LaunchCall& call);
  // The arena is past its high-water mark at a launch on `stream`: switch
  // segments if the context may, else read back (waiting for the recording
  // work).
  void Drain(Context& c, GpuStream stream, bool per_thread, uint64_t correlation_id);
  void FillStats(wire::StatsMsg* stats);

  Gpu& gpu_;
  const uint64_t id_ = NewInstanceId();
  const Settings settings_;
  const ArenaOptions arena_options_;
  Shipper& shipper_;
  LaunchCounters launch_counters_;  // SMPROF_LAUNCHES: each item's launches so far
  std::mutex ship_mu_;
  ActivityStore activity_;
  KernelTable kernels_;
  Harvester harvester_;

  std::atomic<bool> window_open_;  // the capture window (SMPROF_CAPTURE_RANGE)
  std::atomic<uint64_t> launches_opted_in_{0};
  std::atomic<uint64_t> launches_not_selected_{0};
  std::atomic<uint64_t> context_generation_{1};
  std::atomic<uint64_t> graph_generation_{1};  // bumped whenever graphs_ changes

  std::mutex mu_;  // guards contexts_; never held across a Gpu call
  std::unordered_map<GpuCtx, Context*> contexts_;
  std::unordered_map<void*, std::shared_ptr<const GraphPlan>> graphs_;  // by CUgraphExec
  struct EarlyQuiet {
    GpuStream stream;
    bool per_thread;
    uint64_t thread;
  };
  std::unordered_map<GpuCtx, std::vector<EarlyQuiet>> early_quiet_;  // until the context is set up
  std::vector<std::unique_ptr<Context>> all_contexts_;               // never freed while the profiler lives
  uint64_t host_calls_forgotten_ended_ = 0;
};

}  // namespace smprof::injector
