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
#pragma once

namespace smprof::injector {

// Returns false when profiling is off for this process (reason logged).
bool Start();
// Final harvest and detach; idempotent. Registered with atexit by Start().
void Shutdown();

}  // namespace smprof::injector
