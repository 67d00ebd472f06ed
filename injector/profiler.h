// The injector's CUPTI subscriber: sees launches, provides arenas, harvests.
//
// Lifecycle: Start() (from InitializeInjection or the LD_PRELOAD constructor)
// reads the configuration, attaches to the run's transport, subscribes to
// CUPTI and registers Shutdown() with atexit. Everything lives in a leaky
// singleton so no static destructor can run under a late callback.
//
// Callback hot-path rules (see profiler.cc):
//   - a thread-local re-entrancy guard: smprof's own driver calls re-enter the
//     callback and must be ignored;
//   - per launch: one cached function lookup; no allocation after the first
//     launch of a function in a context;
//   - smprof holds no mutex of its own across a CUPTI or driver call, except
//     two per context: the launch gate (a shared_timed_mutex), held shared by
//     launches of profiled kernels from API enter to API exit and exclusively,
//     with a timeout, by a harvest while it reads and zeroes the arena (so no
//     kernel can start meanwhile); and the harvest mutex, which serialises
//     harvests (taken first, only by harvests, with a timeout or try-lock);
//   - waits are bounded: a harvest that must wait for profiled work (a drain,
//     teardown, exit) polls with a deadline and gives up rather than hold up
//     the application; capturing streams are never queried or synchronised;
//   - no synchronisation of the application's streams on the normal path:
//     harvests happen where the application already synchronised, after
//     checking (cuStreamQuery) that every stream with profiled work is idle.
//     Work smprof cannot query (another thread's per-thread default stream, a
//     stream destroyed while busy) waits for the application's next context
//     synchronisation. Only a forced drain (arena past its high-water mark), a
//     module unload, context destruction and process exit wait for streams.
#pragma once

namespace smprof::injector {

// Returns false when profiling is off for this process (reason logged).
bool Start();
// Final harvest and detach; idempotent. Registered with atexit by Start().
void Shutdown();

}  // namespace smprof::injector
