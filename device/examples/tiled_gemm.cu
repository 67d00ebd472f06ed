// Example: a tiled single-precision matrix multiply, instrumented with smprof.
//
// C = A * B, square n x n matrices, 64x64 output tile per block of 256
// threads (8 warps); each thread computes a 4x4 sub-tile. Per K-step every
// warp records a "load" range (global -> shared, then the barrier) and a
// "compute" range (the FMAs); the epilogue is a "store" range, and warp 0
// marks the end of the main loop with an instant. The host code is plain
// CUDA: nothing in it knows about smprof.
//
//   smprof-run -o gemm.json ./smprof_example_gemm [n] [repetitions]
#include <smprof/smprof.cuh>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CHECK(call)                                                                         \
  do {                                                                                      \
    cudaError_t err_ = (call);                                                              \
    if (err_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)

constexpr int kTile = 64;
constexpr int kStep = 16;
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) gemm_tiled(const float* __restrict__ a, const float* __restrict__ b,
                                                       float* __restrict__ c, int n) {
  __shared__ float as[kStep][kTile + 4];
  __shared__ float bs[kStep][kTile + 4];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * kTile, col0 = blockIdx.x * kTile;
  float acc[4][4] = {};

  for (int k0 = 0; k0 < n; k0 += kStep) {
    SMPROF_RANGE("load") {
      for (int i = threadIdx.x; i < kTile * kStep; i += kThreads) {
        const int r = i / kStep, k = i % kStep;  // A tile: kTile rows x kStep cols, stored transposed
        as[k][r] = a[(row0 + r) * n + k0 + k];
        const int kk = i / kTile, cc = i % kTile;  // B tile: kStep rows x kTile cols
        bs[kk][cc] = b[(k0 + kk) * n + col0 + cc];
      }
      __syncthreads();
    }
    SMPROF_RANGE("compute") {
#pragma unroll
      for (int k = 0; k < kStep; ++k) {
        float av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = as[k][ty * 4 + i];
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = bs[k][tx * 4 + j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
  }
  if (threadIdx.x < 32) SMPROF_INSTANT("mainloop done");
  SMPROF_RANGE("store") {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) c[(row0 + ty * 4 + i) * n + col0 + tx * 4 + j] = acc[i][j];
  }
}

// No markers: it shares the module with gemm_tiled but records nothing, so
// the trace has no group for it.
__global__ void fill(float* p, int count, float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) p[i] = value;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  if (n <= 0 || n % kTile != 0 || reps <= 0) {
    std::fprintf(stderr, "usage: %s [n (multiple of %d)] [repetitions]\n", argv[0], kTile);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA GPU found: this example needs one\n");
    return 3;
  }
  const size_t elems = static_cast<size_t>(n) * n;
  std::vector<float> ha(elems), hb(elems), hc(elems);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (auto& x : ha) x = dist(rng);
  for (auto& x : hb) x = dist(rng);

  float *da, *db, *dc;
  CHECK(cudaMalloc(&da, elems * sizeof(float)));
  CHECK(cudaMalloc(&db, elems * sizeof(float)));
  CHECK(cudaMalloc(&dc, elems * sizeof(float)));
  CHECK(cudaMemcpy(da, ha.data(), elems * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, hb.data(), elems * sizeof(float), cudaMemcpyHostToDevice));
  fill<<<(elems + 255) / 256, 256>>>(dc, static_cast<int>(elems), NAN);
  CHECK(cudaGetLastError());

  const dim3 grid(n / kTile, n / kTile);
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  float best_ms = 1e30f;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(start));
    gemm_tiled<<<grid, kThreads>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (ms < best_ms) best_ms = ms;
  }
  CHECK(cudaMemcpy(hc.data(), dc, elems * sizeof(float), cudaMemcpyDeviceToHost));

  // Check 256 sampled entries against a double-precision reference.
  double max_rel = 0;
  std::uniform_int_distribution<int> pick(0, n - 1);
  for (int s = 0; s < 256; ++s) {
    const int i = pick(rng), j = pick(rng);
    double ref = 0, mag = 0;
    for (int k = 0; k < n; ++k) {
      ref += static_cast<double>(ha[static_cast<size_t>(i) * n + k]) * hb[static_cast<size_t>(k) * n + j];
      mag += std::fabs(static_cast<double>(ha[static_cast<size_t>(i) * n + k]) * hb[static_cast<size_t>(k) * n + j]);
    }
    const double err = std::fabs(hc[static_cast<size_t>(i) * n + j] - ref) / (mag > 0 ? mag : 1);
    if (!(err <= max_rel)) max_rel = std::isnan(err) ? INFINITY : std::max(max_rel, err);
  }
  const double gflops = 2.0 * n * n * static_cast<double>(n) / (best_ms * 1e6);
  std::printf("gemm_tiled n=%d: best %.3f ms over %d runs (%.1f GFLOP/s), max relative error %.2e\n", n, best_ms,
              reps, gflops, max_rel);
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  return max_rel < 1e-4 ? 0 : 1;
}
