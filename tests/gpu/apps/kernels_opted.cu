// Test kernels that opt in to smprof. Every kernel records an exact,
// documented number of events per warp so the GPU tests can check counts.
#include <smprof/smprof.cuh>

#include "tests/gpu/apps/kernels.h"

namespace {

__device__ void Spin(long long ns) {
  const long long until = clock64() + ns * 2;  // ~2 cycles/ns at H100/H200 clocks; only needs to be long
  while (clock64() < until) {
  }
}

}  // namespace

// Per warp: outer range, 3 "tick" instants, an inner BEGIN/END: 7 events.
__global__ void marker_grid(int* out) {
  SMPROF_RANGE("outer") {
    for (int i = 0; i < 3; ++i) SMPROF_INSTANT("tick");
    SMPROF_BEGIN("inner");
    atomicAdd(out, 1);
    SMPROF_END("inner");
  }
}

// Per warp: `n` "step" instants, spread over about `spin_ns`.
__global__ void count_kernel(int n, long long spin_ns) {
  for (int i = 0; i < n; ++i) {
    SMPROF_INSTANT("step");
    Spin(spin_ns / n);
  }
}

__global__ void gemm_like_a(int n) {
  for (int i = 0; i < n; ++i) SMPROF_INSTANT("a_step");
}

__global__ void other_b(int n) {
  for (int i = 0; i < n; ++i) SMPROF_INSTANT("b_step");
}


// Per warp: `n` instants; used to overflow or fill the buffer.
__global__ void flood(int n, long long spin_ns) {
  for (int i = 0; i < n; ++i) SMPROF_INSTANT("flood");
  if (spin_ns > 0) Spin(spin_ns);
}

// No markers, in an opted-in module: launches of it record nothing.
__global__ void silent_big(float* out) {
  if (out != nullptr) out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
}

// Spins until *flag (mapped host memory) becomes non-zero, with one range.
__global__ void wait_for_flag(volatile int* flag) {
  SMPROF_SCOPE("waiting");
  while (*flag == 0) {
  }
}

// Per warp: one "work" range (BEGIN and END).
__global__ void one_range(int* out) {
  SMPROF_SCOPE("work");
  atomicAdd(out, 1);
}

// Writes through `bad` inside a "poke" range: the launch faults.
__global__ void fault_write(int* bad) {
  SMPROF_SCOPE("poke");
  *bad = 1;
}

// Per block of 3 warps, until *flag (mapped host memory) becomes non-zero:
// warp 0 ends a "load" range and spins inside "mma"; warp 1 ends a "load"
// range and spins outside any; warp 2 spins without an event.
__global__ void stuck_warps(volatile int* flag) {
  const unsigned warp = threadIdx.x / 32;
  if (warp < 2) {
    SMPROF_BEGIN("load");
    SMPROF_END("load");
  }
  if (warp == 0) SMPROF_BEGIN("mma");
  while (*flag == 0) {
  }
  if (warp == 0) SMPROF_END("mma");
}

void LaunchOneRange(int blocks, int threads, int* out, cudaStream_t s) { one_range<<<blocks, threads, 0, s>>>(out); }
void LaunchFaultWrite(int* bad, cudaStream_t s) { fault_write<<<1, 32, 0, s>>>(bad); }
void LaunchStuckWarps(int blocks, volatile int* flag, cudaStream_t s) { stuck_warps<<<blocks, 96, 0, s>>>(flag); }
void LaunchSilentBig(cudaStream_t s) { silent_big<<<4096, 1024, 0, s>>>(nullptr); }
void LaunchWaitForFlag(volatile int* flag, cudaStream_t s) { wait_for_flag<<<1, 32, 0, s>>>(flag); }
void LaunchMarkerGrid(int blocks, int threads, int* out, cudaStream_t s) { marker_grid<<<blocks, threads, 0, s>>>(out); }
void LaunchCount(int blocks, int threads, int n, long long spin_ns, cudaStream_t s) {
  count_kernel<<<blocks, threads, 0, s>>>(n, spin_ns);
}
void LaunchGemmLikeA(int n, cudaStream_t s) { gemm_like_a<<<2, 64, 0, s>>>(n); }
void LaunchOtherB(int n, cudaStream_t s) { other_b<<<2, 64, 0, s>>>(n); }
void LaunchFlood(int blocks, int threads, int n, long long spin_ns, cudaStream_t s) {
  flood<<<blocks, threads, 0, s>>>(n, spin_ns);
}
