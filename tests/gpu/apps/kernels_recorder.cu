// Test kernels for what the recorder (arena ABI 2, detail/record.cuh) makes
// delicate: markers on diverged warps beside a profiling context, lanes and
// warps that exit early, partial warps, 32-warp blocks, warps that fill many
// chunks (and two chunks at once), markers in device functions, cycle-exact
// ranges, and timestamps across SMs. Every kernel documents the exact events
// each warp records; tests/gpu/gpu_scenarios_test.cc (GpuScenarios.Recorder*)
// checks them.
//
// Counting convention below: "i name N" is N instants, "X name N" is N
// completed ranges in the trace (each recorded as a BEGIN and an END, so it
// counts 2 in smprof-run's "N events" total); "recorded" is that total.
//
// Kernels templated on kWithContext run the same body with SMPROF_CONTEXT()
// (the cursor in a register; diverged markers still use the shared-memory
// cursor) and without it (every marker uses the shared-memory cursor): the
// body takes the context as a parameter named `smprof_ctx`, either the
// kernel's smprof::Context or the no-context enumerator the markers find
// when a kernel declares none, so both variants run the same marker code as
// a hand-written kernel would.
//
// The recorder records one event per group of lanes that reaches a marker
// together. Where a marker must be reached by the whole warp after divergent
// code, the kernels reconverge with __syncwarp() first: the test is about the
// recorder, not about where the compiler reconverges a warp.
#include <smprof/smprof.cuh>

#include "tests/gpu/apps/kernels.h"

namespace {

// 1-D blocks only.
__device__ __forceinline__ unsigned Lane() { return threadIdx.x & 31u; }
__device__ __forceinline__ unsigned WarpOf() { return threadIdx.x >> 5; }
__device__ __forceinline__ unsigned GlobalThread() { return blockIdx.x * blockDim.x + threadIdx.x; }

// The lanes this thread's warp has: 32, except in a block's last warp when
// blockDim.x is not a multiple of 32 (__syncwarp must not name absent lanes).
__device__ __forceinline__ unsigned PresentLanes() {
  const unsigned rest = blockDim.x - (threadIdx.x & ~31u);
  return rest >= 32 ? 0xffffffffu : (1u << rest) - 1u;
}

// Spins `cycles` SM cycles on the calling (converged, full) warp, then
// reconverges it so that the next marker is one marker of the whole warp.
// Spins at least `cycles` SM cycles; returns how many it spun (first to last
// clock read).
__device__ __forceinline__ long long SpinCycles(long long cycles) {
  const long long t0 = clock64();
  long long t;
  while ((t = clock64()) - t0 < cycles) {
  }
  __syncwarp();
  return t - t0;
}

__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// --- 1. Divergent halves beside the context's fast path ---------------------
// The two halves do different global-memory work on either side of their
// marker, so the compiler cannot merge the two markers into one the whole
// warp reaches (a converged marker with a lane-dependent name).
template <typename Ctx>
__device__ __forceinline__ void DivergentHalvesBody(Ctx&& smprof_ctx, int iterations, int* sink) {
  const unsigned lane = Lane();
  SMPROF_INSTANT("enter");
  SMPROF_RANGE("halves") {
    for (int i = 0; i < iterations; ++i) {
      if (lane < 16) {
        SMPROF_INSTANT("lo");
        sink[GlobalThread()] += i;
      } else {
        sink[GlobalThread()] ^= i + 1;
        SMPROF_INSTANT("hi");
      }
      __syncwarp();
      SMPROF_INSTANT("both");
    }
  }
  SMPROF_INSTANT("leave");
}

// --- 2. Lanes and warps that exit early -------------------------------------
// Note that no range is open at an early `return` (a range's END would be
// recorded by the exiting lanes too).
template <typename Ctx>
__device__ __forceinline__ void EarlyExitBody(Ctx&& smprof_ctx, int* sink) {
  const unsigned warp = WarpOf(), lane = Lane();
  if (warp == 2) return;  // the whole warp, before any marker
  SMPROF_INSTANT("before");
  if (warp == 1 && lane >= 20) return;  // 12 lanes leave; lanes 0-19 mark on, diverged
  for (int i = 0; i < 6; ++i) {
    SMPROF_INSTANT("loop");
    if (warp == 3 && lane != 0 && i == 2) return;  // after 3 "loop"s only lane 0 is left
  }
  SMPROF_RANGE("tail") {
    SMPROF_INSTANT("tail_tick");
    sink[GlobalThread()] += 1;
    SMPROF_INSTANT("tail_tick");
  }
  SMPROF_INSTANT("after");
}

// --- 3. Partial warps -------------------------------------------------------
template <typename Ctx>
__device__ __forceinline__ void PartialWarpsBody(Ctx&& smprof_ctx, int* sink) {
  SMPROF_RANGE("part") {
    for (int i = 0; i < 4; ++i) SMPROF_INSTANT("p");
    if (threadIdx.x & 1u) {
      sink[GlobalThread()] += 1;
      SMPROF_INSTANT("odd");
    } else {
      SMPROF_INSTANT("even");
      sink[GlobalThread()] += 2;
    }
    __syncwarp(PresentLanes());
  }
}

// --- 4. Blocks of 1024 threads ----------------------------------------------
template <typename Ctx>
__device__ __forceinline__ void BigBlocksBody(Ctx&& smprof_ctx, int* sink) {
  SMPROF_RANGE("big") {
    for (int i = 0; i < 3; ++i) SMPROF_INSTANT("b");
    if (Lane() == 5) {
      sink[GlobalThread()] = 5;
      SMPROF_INSTANT("lane5");
    }
    __syncwarp();
  }
}

// --- 5. Many markers per warp -----------------------------------------------
template <typename Ctx>
__device__ __forceinline__ void ManyMarkersBody(Ctx&& smprof_ctx, int n) {
  for (int i = 0; i < n; ++i) SMPROF_INSTANT("m");
}

template <typename Ctx>
__device__ __forceinline__ void InterleavedBody(Ctx&& smprof_ctx, int n, long long spin_cycles) {
  for (int i = 0; i < n; ++i) {
    if ((i & 1) == 0) {
      SMPROF_INSTANT("even");  // whole warp: the context's chunk (with a context)
    } else {
      if (Lane() < 16) SMPROF_INSTANT("odd");  // half the warp: the shared-memory cursor's chunk
      __syncwarp();
    }
    SpinCycles(spin_cycles);
  }
}

// --- 6. Device functions ----------------------------------------------------
// Not inlined: one body serves the converged and the divergent call sites,
// and the context reaches the callee by reference.
__device__ __noinline__ void MarkedWithContext(smprof::Context& smprof_ctx, int* sink) {
  SMPROF_RANGE("fn_ctx") {
    SMPROF_INSTANT("fn_ctx_tick");
    sink[GlobalThread()] += 1;
  }
}

// No context parameter: its markers use the shared-memory cursor even when
// the calling kernel has a context.
__device__ __noinline__ void MarkedPlain(int* sink) {
  SMPROF_INSTANT("fn_plain");
  sink[GlobalThread()] += 2;
}

}  // namespace

// 1. divergent_halves<kWithContext>(n, sink), 4 x 64 threads in the scenario.
// Per warp, both variants: i enter 1, X halves 1, i lo n, i hi n, i both n,
// i leave 1 (recorded: 3n + 4). Lanes 0-15 and 16-31 each reach their own
// marker once per iteration: two halves, two events, never one or four.
template <bool kWithContext>
__global__ void divergent_halves(int iterations, int* sink) {
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    DivergentHalvesBody(smprof_ctx, iterations, sink);
  } else {
    DivergentHalvesBody(smprof_ctx, iterations, sink);
  }
}

// 2. early_exit<kWithContext>(sink), 128 threads (warps 0-3).
// Warp 2 returns before any marker: no track. Warps 0, 1 and 3 each: i before
// 1, i loop 6, X tail 1, i tail_tick 2, i after 1 (recorded 12). Warp 1 marks
// with lanes 0-19 after "before" (every later marker takes the diverged
// path); warp 3 loses lanes 1-31 after its third "loop" and goes on with
// lane 0 alone.
template <bool kWithContext>
__global__ void early_exit(int* sink) {
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    EarlyExitBody(smprof_ctx, sink);
  } else {
    EarlyExitBody(smprof_ctx, sink);
  }
}

// 3. partial_warps<kWithContext>(sink), blockDim 48 (warps 0 and 1, warp 1
// has 16 lanes) and 100 (warps 0-3, warp 3 has 4 lanes). Per warp, full or
// partial: X part 1, i p 4, i even 1, i odd 1 (recorded 8). A partial warp
// whose present lanes all reach a marker is converged (the fast paths); its
// odd and even lanes are two groups.
template <bool kWithContext>
__global__ void partial_warps(int* sink) {
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    PartialWarpsBody(smprof_ctx, sink);
  } else {
    PartialWarpsBody(smprof_ctx, sink);
  }
}

// 4. big_blocks<kWithContext>(sink), 1024 threads: 32 warps per block, warp 31
// included (the shared-memory cursor array's last slot). Per warp: X big 1,
// i b 3, i lane5 1 (lane 5 alone) (recorded 6).
template <bool kWithContext>
__global__ void __launch_bounds__(1024) big_blocks(int* sink) {
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    BigBlocksBody(smprof_ctx, sink);
  } else {
    BigBlocksBody(smprof_ctx, sink);
  }
}

// 5a. many_markers<kWithContext>(n): per warp i m n (recorded n). n = 2000
// fills 33 chunks of the default 1024 bytes (61 events after the 48-byte
// header each), 8 of 4096 bytes, 154 of 256 bytes.
template <bool kWithContext>
__global__ void many_markers(int n) {
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    ManyMarkersBody(smprof_ctx, n);
  } else {
    ManyMarkersBody(smprof_ctx, n);
  }
}

// 5b. interleaved_markers<kWithContext>(n, spin): per warp, for i < n: even i
// "even" (whole warp), odd i "odd" (lanes 0-15 only), each followed by a spin
// of `spin` cycles. Per warp (n even): i even n/2, i odd n/2 (recorded n),
// alternating in time, starting with "even". With a context the two fill two
// chunks at once (the context's and the shared-memory cursor's), which the
// host merges by time. The spin (200 cycles in the scenario, ~100 ns) keeps
// neighbouring events further apart than the clock map's anchor quantisation
// (one 32-ns %globaltimer tick), so that their order in ns is their order in
// cycles.
template <bool kWithContext>
__global__ void interleaved_markers(int n, long long spin_cycles) {
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    InterleavedBody(smprof_ctx, n, spin_cycles);
  } else {
    InterleavedBody(smprof_ctx, n, spin_cycles);
  }
}

// 6. device_functions<kWithContext>(sink). Per warp, 3 iterations of: a
// converged call of each function, then lanes 0-7 call MarkedWithContext and
// lanes 24-31 MarkedPlain (lanes 8-23 neither), all inside one "kernel" scope.
//   with a context:    X kernel 1, X fn_ctx 6, i fn_ctx_tick 6, i fn_plain 6 (recorded 26)
//   without (MarkedPlain calls only): X kernel 1, i fn_plain 6 (recorded 8)
template <bool kWithContext>
__global__ void device_functions(int* sink) {
  const unsigned lane = Lane();
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    SMPROF_SCOPE("kernel");
    for (int i = 0; i < 3; ++i) {
      MarkedWithContext(smprof_ctx, sink);
      MarkedPlain(sink);
      if (lane < 8) {
        MarkedWithContext(smprof_ctx, sink);
      } else if (lane >= 24) {
        MarkedPlain(sink);
      }
      // A block barrier, not __syncwarp(): after calls of non-inlined
      // functions on divergent paths, H100 kept the warp split across a
      // __syncwarp(), and a marker reached by a split warp records once per
      // group (the kernel scope's END twice).
      __syncthreads();
    }
  } else {
    SMPROF_SCOPE("kernel");
    for (int i = 0; i < 3; ++i) {
      MarkedPlain(sink);
      if (lane >= 24) MarkedPlain(sink);
      __syncthreads();  // see above
    }
  }
}

// 7. cycle_ranges(n1, n2, n3), one warp (32 threads) per block, with a context.
// Per warp: i warmup 1, X spin1k 1, X spin10k 1, X spin100k 1 (recorded 7),
// the ranges around spins of n1, n2, n3 cycles (1000, 10000, 100000 in the
// scenario). "warmup" claims the context's chunk, so no chunk claim falls
// inside a timed range; 7 events fit any chunk size (256 bytes: 13).
// spun[3 * block + i]: the cycles spin i really took (its loop overshoots N
// by up to one iteration), so the test can tell the markers' own cycles
// inside a range from the spin's.
__global__ void cycle_ranges(long long n1, long long n2, long long n3, unsigned long long* spun) {
  SMPROF_CONTEXT();
  SMPROF_INSTANT("warmup");
  long long t[3];
  SMPROF_RANGE("spin1k") { t[0] = SpinCycles(n1); }
  SMPROF_RANGE("spin10k") { t[1] = SpinCycles(n2); }
  SMPROF_RANGE("spin100k") { t[2] = SpinCycles(n3); }
  if (threadIdx.x == 0) {
    for (int i = 0; i < 3; ++i) spun[3 * blockIdx.x + i] = static_cast<unsigned long long>(t[i]);
  }
}

// 8. cross_sm_ticks(n, out), with a context; the scenario runs 4 blocks per SM
// of 128 threads. Per warp: i tick n (recorded n). Tick i of warp w of block
// b is marked right after a %globaltimer read, which goes to
// out[(b * warps per block + w) * n + i]; a spin of 200-699 cycles (a hash of
// b, w, i) separates the ticks.
__global__ void cross_sm_ticks(int n, unsigned long long* out) {
  SMPROF_CONTEXT();
  const unsigned warp = WarpOf();
  const unsigned warps = blockDim.x >> 5;
  for (int i = 0; i < n; ++i) {
    const unsigned long long t = GlobalTimerNs();
    SMPROF_INSTANT("tick");
    out[(static_cast<size_t>(blockIdx.x) * warps + warp) * n + i] = t;  // every lane stores the same value
    unsigned h = blockIdx.x * 2654435761u ^ warp * 40503u ^ static_cast<unsigned>(i) * 2246822519u;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    SpinCycles(200 + h % 500);
  }
}

void LaunchDivergentHalves(bool with_context, int blocks, int threads, int iterations, int* sink, cudaStream_t s) {
  if (with_context) {
    divergent_halves<true><<<blocks, threads, 0, s>>>(iterations, sink);
  } else {
    divergent_halves<false><<<blocks, threads, 0, s>>>(iterations, sink);
  }
}

void LaunchEarlyExit(bool with_context, int blocks, int* sink, cudaStream_t s) {
  if (with_context) {
    early_exit<true><<<blocks, 128, 0, s>>>(sink);
  } else {
    early_exit<false><<<blocks, 128, 0, s>>>(sink);
  }
}

void LaunchPartialWarps(bool with_context, int blocks, int threads, int* sink, cudaStream_t s) {
  if (with_context) {
    partial_warps<true><<<blocks, threads, 0, s>>>(sink);
  } else {
    partial_warps<false><<<blocks, threads, 0, s>>>(sink);
  }
}

void LaunchBigBlocks(bool with_context, int blocks, int* sink, cudaStream_t s) {
  if (with_context) {
    big_blocks<true><<<blocks, 1024, 0, s>>>(sink);
  } else {
    big_blocks<false><<<blocks, 1024, 0, s>>>(sink);
  }
}

void LaunchManyMarkers(bool with_context, int blocks, int threads, int n, cudaStream_t s) {
  if (with_context) {
    many_markers<true><<<blocks, threads, 0, s>>>(n);
  } else {
    many_markers<false><<<blocks, threads, 0, s>>>(n);
  }
}

void LaunchInterleavedMarkers(bool with_context, int blocks, int threads, int n, long long spin_cycles,
                              cudaStream_t s) {
  if (with_context) {
    interleaved_markers<true><<<blocks, threads, 0, s>>>(n, spin_cycles);
  } else {
    interleaved_markers<false><<<blocks, threads, 0, s>>>(n, spin_cycles);
  }
}

void LaunchDeviceFunctions(bool with_context, int blocks, int threads, int* sink, cudaStream_t s) {
  if (with_context) {
    device_functions<true><<<blocks, threads, 0, s>>>(sink);
  } else {
    device_functions<false><<<blocks, threads, 0, s>>>(sink);
  }
}

void LaunchCycleRanges(int blocks, long long n1, long long n2, long long n3, unsigned long long* spun,
                       cudaStream_t s) {
  cycle_ranges<<<blocks, 32, 0, s>>>(n1, n2, n3, spun);
}

void LaunchCrossSmTicks(int blocks, int threads, int n, unsigned long long* out, cudaStream_t s) {
  cross_sm_ticks<<<blocks, threads, 0, s>>>(n, out);
}
