// The injector's lifecycle: Start() attaches to the run and subscribes,
// Shutdown() ships the last harvests and detaches.
//
// Start() runs from InitializeInjection (CUDA_INJECTION64_PATH) or the
// LD_PRELOAD constructor (entry.cc). It reads the configuration, attaches to
// the run's transport, and subscribes the profiler (profiler.h) to CUPTI
// (cupti_subscriber.h) with the real Gpu (cuda_gpu.h); it registers
// Shutdown() with atexit. A process that is not profiled for a reason the
// user should hear about (a bad setting, another tool holding CUPTI or
// injecting) still attaches, long enough to tell the collector why.
// Everything lives in leaky singletons so no static destructor can run under
// a late callback.
//
// One profiling session per process: Start() runs once (later calls return
// the first call's result and do nothing else), and after Shutdown() or
// Stop() nothing starts it again, since CUPTI callbacks stop for good and the
// run it shipped to is over. A caller that loads the injector itself
// (smprof-run --serve: smprof.profile() in Python) may call Start() after
// CUDA is initialised: kernels launched before it are not profiled, and
// those launched after Stop() record nothing.
#pragma once

namespace smprof::injector {

// Returns false when profiling is off for this process (reason logged).
bool Start();
// Final harvest of every context (waiting, boundedly, for their recording
// kernels), shipped; then callbacks stop and the run is detached. Idempotent;
// registered with atexit by Start(). True if this call ended an active
// session.
bool Shutdown();
// Shutdown() for a process that goes on (smprof_inject_stop): also stops
// CUPTI's kernel records, which every later launch would pay for. Not at
// exit, where CUPTI may already be going away. True as for Shutdown().
bool Stop();

}  // namespace smprof::injector
