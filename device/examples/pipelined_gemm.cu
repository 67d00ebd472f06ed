// Example: a warp-specialised, software-pipelined matrix multiply, and what
// smprof's device API shows of it.
//
// C = A * B, square n x n (n a multiple of 32), one 32x32 tile of C per block
// of 5 warps: warp 0 is the producer, warps 1-4 the consumers (a Hopper
// GEMM's TMA warp and its MMA warp groups, in miniature). The producer loads
// each 32-deep K tile of A and B into one of two shared-memory stages and
// hands it over through arrive/wait barriers (cuda::barrier: mbarriers in
// shared memory, as a Hopper pipeline's); the consumers wait for a full
// stage, multiply, and give the stage back. The host code is plain CUDA: nothing in it knows about smprof.
//
// What each warp records:
//   producer (warp 0, smprof::on_warp(0)): phases "wait empty" -> "load" per
//     tile, an async span "stage" (token: the stage index) from the moment a
//     stage is full to the moment consumer warp 1 takes it, and a counter
//     "bytes loaded" (64-bit) after each tile;
//   consumers (smprof::on_warps(1, 4)): phases "wait full" -> "mma", the
//     "mma" of tile t named "mma k=%d" with t as its integer; warp 1 ends
//     the "stage" span, and an instant "first tile" marks tile 0 only
//     (smprof::when);
//   every warp: SMPROF_KERNEL's "kernel" range over its whole body.
//
//   smprof-run -o pipeline.pftrace ./smprof_example_pipeline [n] [repetitions]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda/barrier>
#include <random>
#include <smprof/smprof.cuh>
#include <vector>

#define CHECK(call)                                                                                 \
  do {                                                                                              \
    cudaError_t err_ = (call);                                                                      \
    if (err_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(2);                                                                                 \
    }                                                                                               \
  } while (0)

constexpr int kTile = 32;   // C tile and K step
constexpr int kStages = 2;  // shared-memory stages
constexpr int kConsumerWarps = 4;
constexpr int kThreads = 32 * (1 + kConsumerWarps);

using Barrier = cuda::barrier<cuda::thread_scope_block>;

__global__ void __launch_bounds__(kThreads)
    gemm_pipelined(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n) {
  __shared__ float as[kStages][kTile][kTile + 1];
  __shared__ float bs[kStages][kTile][kTile + 1];
#pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ Barrier full[kStages], empty[kStages];  // each phase: all kThreads threads arrive
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      init(&full[s], kThreads);
      init(&empty[s], kThreads);
    }
  }
  __syncthreads();
  SMPROF_KERNEL();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = blockIdx.y * kTile, col0 = blockIdx.x * kTile;
  const int tiles = n / kTile;

  if (warp == 0) {  // the producer
    uint64_t bytes = 0;
    for (int t = 0; t < tiles; ++t) {
      const int s = t % kStages;
      SMPROF_PHASE("wait empty", smprof::on_warp(0));
      if (t >= kStages) empty[s].arrive_and_wait();  // the consumers gave it back
      SMPROF_PHASE("load", smprof::on_warp(0));
      for (int r = 0; r < kTile; ++r) {
        as[s][r][lane] = a[static_cast<size_t>(row0 + r) * n + t * kTile + lane];
        bs[s][r][lane] = b[static_cast<size_t>(t * kTile + r) * n + col0 + lane];
      }
      bytes += 2 * kTile * kTile * sizeof(float);
      SMPROF_ASYNC_BEGIN("stage", s, smprof::on_warp(0));
      (void)full[s].arrive();  // the stage is full
      SMPROF_COUNTER("bytes loaded", bytes, smprof::on_warp(0));
    }
    SMPROF_PHASE_END(smprof::on_warp(0));
    return;
  }

  // The consumers: 128 threads, 8 outputs each (rows r0 .. r0 + 7 of column `lane`).
  const int r0 = (warp - 1) * 8;
  float acc[8] = {};
  for (int t = 0; t < tiles; ++t) {
    const int s = t % kStages;
    SMPROF_PHASE("wait full", smprof::on_warps(1, kConsumerWarps));
    full[s].arrive_and_wait();
    SMPROF_ASYNC_END("stage", s, smprof::on_warp(1));
    SMPROF_INSTANT("first tile", smprof::when(t == 0), smprof::on_warp(1));
    SMPROF_PHASE("mma k=%d", smprof::arg(t), smprof::on_warps(1, kConsumerWarps));
    for (int k = 0; k < kTile; ++k) {
      const float bv = bs[s][k][lane];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += as[s][r0 + i][k] * bv;
    }
    if (t + kStages < tiles) (void)empty[s].arrive();  // the producer may refill it
  }
  SMPROF_PHASE_END(smprof::on_warps(1, kConsumerWarps));
  for (int i = 0; i < 8; ++i) c[static_cast<size_t>(row0 + r0 + i) * n + col0 + lane] = acc[i];
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 512;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 3;
  if (n <= 0 || n % kTile != 0 || repetitions <= 0) {
    std::fprintf(stderr, "usage: %s [n (a multiple of %d)] [repetitions]\n", argv[0], kTile);
    return 2;
  }
  const size_t elements = static_cast<size_t>(n) * n;
  std::vector<float> ha(elements), hb(elements), hc(elements);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : ha) x = dist(rng);
  for (float& x : hb) x = dist(rng);
  float *a, *b, *c;
  CHECK(cudaMalloc(&a, elements * sizeof(float)));
  CHECK(cudaMalloc(&b, elements * sizeof(float)));
  CHECK(cudaMalloc(&c, elements * sizeof(float)));
  CHECK(cudaMemcpy(a, ha.data(), elements * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, hb.data(), elements * sizeof(float), cudaMemcpyHostToDevice));
  const dim3 grid(n / kTile, n / kTile);
  for (int r = 0; r < repetitions; ++r) {
    gemm_pipelined<<<grid, kThreads>>>(a, b, c, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaMemcpy(hc.data(), c, elements * sizeof(float), cudaMemcpyDeviceToHost));
  // Check a few rows against the host.
  double worst = 0;
  for (int i = 0; i < n; i += n / 8) {
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int k = 0; k < n; ++k)
        ref += static_cast<double>(ha[static_cast<size_t>(i) * n + k]) * hb[static_cast<size_t>(k) * n + j];
      worst = std::fmax(worst, std::fabs(ref - hc[static_cast<size_t>(i) * n + j]));
    }
  }
  std::printf("pipelined gemm n=%d, %d launches of %d blocks x %d threads: max error %.2e\n", n, repetitions,
              grid.x * grid.y, kThreads, worst);
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
  return worst < 1e-2 * n ? 0 : 1;
}
