// Test kernels for the device API (docs/device-api.md): phases, predicates,
// warp choice, values (32- and 64-bit, on instants, range ends and
// counters), async spans between warps, names with an integer, and
// SMPROF_KERNEL. Every kernel documents what each warp records;
// tests/gpu/gpu_scenarios_test.cc (GpuScenarios.DeviceApi*) checks it
// exactly, through the trace and the statistics.
//
// Kernels templated on kWithContext run the same body with SMPROF_CONTEXT()
// and without (the shared-memory cursor), as in kernels_recorder.cu. Blocks
// are 1-D, 128 threads (warps 0-3).
#include <cstdint>
#include <smprof/smprof.cuh>

#include "tests/gpu/apps/kernels.h"

namespace {

__device__ __forceinline__ unsigned Lane() { return threadIdx.x & 31u; }
__device__ __forceinline__ unsigned WarpOf() { return threadIdx.x >> 5; }

// Spins about `cycles` SM cycles, then reconverges the warp.
__device__ __forceinline__ void Spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  __syncwarp();
}

// --- 1. Phases ---------------------------------------------------------------
// Per warp: X load n, X mma n (recorded 2n + 1: one event per boundary).
template <typename Ctx>
__device__ __forceinline__ void PhasesBody(Ctx&& smprof_ctx, int n) {
  for (int i = 0; i < n; ++i) {
    SMPROF_PHASE("load");
    Spin(300);
    SMPROF_PHASE("mma");
    Spin(300);
  }
  SMPROF_PHASE_END();
}

// --- 2. Predicates and warp choice -------------------------------------------
// Per warp, n iterations: i even ceil(n/2), X odd floor(n/2), i "lane 5" n,
// i "low half" n (reached by lanes 0-15 only, one of them lane 3), nothing
// for "never" and "high half" (their condition holds on no lane that reaches
// them); warp 1 also i "warp 1" n, warps 2 and 3 i "warps 2-3" n, warp 0
// i leader n.
template <typename Ctx>
__device__ __forceinline__ void PredicatesBody(Ctx&& smprof_ctx, int n, int* sink) {
  for (int i = 0; i < n; ++i) {
    SMPROF_INSTANT("even", smprof::when(i % 2 == 0));
    SMPROF_RANGE("odd", smprof::when(i % 2 == 1)) { Spin(200); }
    SMPROF_INSTANT("lane 5", smprof::when(Lane() == 5));
    SMPROF_INSTANT("never", smprof::when(Lane() == 40));
    if (Lane() < 16) {
      SMPROF_INSTANT("low half", smprof::when(Lane() == 3));
      sink[threadIdx.x] += i;
    } else {
      sink[threadIdx.x] ^= i;
      SMPROF_INSTANT("high half", smprof::when(Lane() == 3));
    }
    __syncwarp();
    SMPROF_INSTANT("warp 1", smprof::on_warp(1));
    SMPROF_INSTANT("warps 2-3", smprof::on_warps(2, 2));
    SMPROF_INSTANT("leader", smprof::per_block());
  }
}

// --- 3. Values -----------------------------------------------------------------
// Per warp w, i = 0 .. n-1: i v32 n with values i - 2; i v64 n with values
// (i << 33) + 5 (64-bit: two slots each, so pairs meet chunk boundaries);
// X r n, each END carrying 3i; counter "count" n samples w * 1000 + i.
template <typename Ctx>
__device__ __forceinline__ void ValuesBody(Ctx&& smprof_ctx, int n) {
  for (int i = 0; i < n; ++i) {
    SMPROF_INSTANT("v32", smprof::value(i - 2));
    SMPROF_INSTANT("v64", smprof::value((static_cast<int64_t>(i) << 33) + 5));
    SMPROF_BEGIN("r");
    Spin(100);
    SMPROF_END("r", smprof::value(3u * static_cast<unsigned>(i)));
    SMPROF_COUNTER("count", static_cast<int>(WarpOf()) * 1000 + i);
  }
}

// --- 4. Async spans ------------------------------------------------------------
// Per block, n iterations: warp 0 begins "stage" with token i % 4, the block
// synchronises, warp 1 ends it: n spans per block, each from warp 0 to warp
// 1. Warp 0 also begins "orphan" (token 9) that nothing ends (unterminated),
// warp 2 ends "stray" (token 1) that nothing began (unmatched). Recorded per
// block: 2n + 2.
template <typename Ctx>
__device__ __forceinline__ void AsyncBody(Ctx&& smprof_ctx, int n) {
  SMPROF_ASYNC_BEGIN("orphan", 9, smprof::on_warp(0));
  for (int i = 0; i < n; ++i) {
    SMPROF_ASYNC_BEGIN("stage", i % 4, smprof::on_warp(0));
    Spin(200);
    __syncthreads();
    SMPROF_ASYNC_END("stage", i % 4, smprof::on_warp(1));
    __syncthreads();
  }
  SMPROF_ASYNC_END("stray", 1, smprof::on_warp(2));
}

// --- 5. Names with an integer --------------------------------------------------
// Per warp, i = 0 .. n-1: X "stage <i % 3>", i "tile <i + 10 in hex>"
// (e.g. "tile 0x0a"), X "step <i>" (phases; the last ended by PHASE_END).
template <typename Ctx>
__device__ __forceinline__ void NamesBody(Ctx&& smprof_ctx, int n) {
  for (int i = 0; i < n; ++i) {
    SMPROF_PHASE("step %u", smprof::arg(static_cast<unsigned>(i)));
    SMPROF_RANGE("stage %d", smprof::arg(i % 3)) { Spin(100); }
    SMPROF_INSTANT("tile 0x%02x", smprof::arg(i + 10));
  }
  SMPROF_PHASE_END();
}

template <bool kWithContext>
__global__ void api_phases(int n) {
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    PhasesBody(smprof_ctx, n);
  } else {
    PhasesBody(smprof_ctx, n);
  }
}

template <bool kWithContext>
__global__ void api_predicates(int n, int* sink) {
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    PredicatesBody(smprof_ctx, n, sink);
  } else {
    PredicatesBody(smprof_ctx, n, sink);
  }
}

template <bool kWithContext>
__global__ void api_values(int n) {
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    ValuesBody(smprof_ctx, n);
  } else {
    ValuesBody(smprof_ctx, n);
  }
}

template <bool kWithContext>
__global__ void api_async(int n) {
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    AsyncBody(smprof_ctx, n);
  } else {
    AsyncBody(smprof_ctx, n);
  }
}

template <bool kWithContext>
__global__ void api_names(int n) {
  if constexpr (kWithContext) {
    SMPROF_CONTEXT();
    NamesBody(smprof_ctx, n);
  } else {
    NamesBody(smprof_ctx, n);
  }
}

// --- 6. SMPROF_KERNEL ------------------------------------------------------------
// Per warp: X kernel 1 (the warp's whole body), i work n inside it.
__global__ void api_kernel_scope(int n) {
  SMPROF_KERNEL();
  for (int i = 0; i < n; ++i) {
    Spin(100);
    SMPROF_INSTANT("work");
  }
}

}  // namespace

void LaunchDeviceApi(int blocks, int n, int* sink, cudaStream_t s) {
  api_phases<true><<<blocks, 128, 0, s>>>(n);
  api_phases<false><<<blocks, 128, 0, s>>>(n);
  api_predicates<true><<<blocks, 128, 0, s>>>(n, sink);
  api_predicates<false><<<blocks, 128, 0, s>>>(n, sink);
  api_values<true><<<blocks, 128, 0, s>>>(n);
  api_values<false><<<blocks, 128, 0, s>>>(n);
  api_async<true><<<blocks, 128, 0, s>>>(n);
  api_async<false><<<blocks, 128, 0, s>>>(n);
  api_names<true><<<blocks, 128, 0, s>>>(n);
  api_names<false><<<blocks, 128, 0, s>>>(n);
  api_kernel_scope<<<blocks, 128, 0, s>>>(n);
}
