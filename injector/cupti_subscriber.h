// CuptiSubscriber: CUPTI's callbacks in, the profiler's plain calls out.
//
// Subscribes under the name "smprof" (a tool refused after us can name us)
// to the driver API's launch, synchronisation, stream-destroy and
// cuProfilerStart/Stop callbacks and to module-unload, context-destroy and
// graph-exec create/destroy resource callbacks, and turns each into one Profiler call. Kernel activity
// records (CONCURRENT_KERNEL, from EnableKernelRecords on) arrive in buffers on CUPTI's thread and go to
// the profiler's ActivityStore as plain KernelRecords.
//
// Guards, on every callback: smprof's own driver calls re-enter the callback
// (a thread-local re-entrancy guard ignores them); a forked child never
// touches the parent's profiler (a pthread_atfork flag, cheaper than
// comparing getpid()); no exception crosses into CUPTI: the first one turns
// profiling off for the rest of the process.
#pragma once

#include <string>

#include "injector/profiler.h"

namespace smprof::injector {

// Subscribes `profiler` (which must live for the rest of the process). When
// another tool holds CUPTI, *holder names it and false is returned.
bool Subscribe(Profiler* profiler, std::string* holder);
// Stops delivering callbacks to the profiler (exit).
void StopCallbacks();
// Starts CUPTI's kernel records (idempotent). Deferred to the first context
// that records: every kernel launch of the process pays for them.
void EnableKernelRecords();
// Stops CUPTI's kernel records if they were started, for good (a process
// that goes on after its profiling session).
void DisableKernelRecords();

}  // namespace smprof::injector
