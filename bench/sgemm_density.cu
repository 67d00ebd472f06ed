// What markers cost on real kernels, by how densely they are placed.
//
// The example's tiled SGEMM (device/examples/tiled_gemm.cu: 64x64 output tile
// per 256-thread block, 4x4 per thread, 16-deep K steps) at three densities,
// and the classic 32x32 shared-memory GEMM (one output per thread):
//
//   loop    one range around the main K loop, one around the store
//   k64     one range per 64-deep K step (4 consecutive 16-deep steps)
//   k16     the example's markers: "load" and "compute" ranges per 16-deep
//           step, a "mainloop done" instant (warp 0), a "store" range
//   smem32  per 32-deep K tile: a "load" range (tile loads and the first
//           barrier) and an "mma" instant: three marker calls
//
// Each kernel is built with and without SMPROF_CONTEXT() (the ctx argument):
// one kernel body takes the context as a parameter named `smprof_ctx`, the
// name markers look up. Built twice by bench/CMakeLists.txt: with live
// markers (idle in a plain run, recording under smprof-run) and with
// -DSMPROF_DISABLE (the compiled-out baseline); bench/sgemm_figures.sh runs
// them side by side.
//
//   sgemm_density <loop|k64|k16|smem32> <ctx: 0|1> <n> <reps>
//
// Prints the best of `reps` launches timed with CUDA events around each; exits
// 1 when sampled results disagree with a double-precision reference.
#include <smprof/smprof.cuh>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CHECK(call)                                                                                 \
  do {                                                                                              \
    cudaError_t err_ = (call);                                                                      \
    if (err_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(2);                                                                                 \
    }                                                                                               \
  } while (0)

constexpr int kTile = 64;  // tiled SGEMM: output tile per block
constexpr int kStep = 16;  // K depth per shared-memory stage
constexpr int kThreads = 256;
constexpr int kSmemTile = 32;  // smem32: output tile and K depth per stage

enum class Density { kLoop, kK64, kK16 };

// What the kernels pass as `smprof_ctx` when they declare no context: the
// header's global of that name, which makes markers use the shared-memory
// cursor. Compiled out there is no such global, and markers ignore it.
__device__ __forceinline__ auto NoContext() {
#if defined(SMPROF_DISABLE)
  return smprof::Context{};
#else
  return smprof_ctx;
#endif
}

// One block's 64x64 tile of C = A * B at marker density kDensity.
template <Density kDensity, typename Ctx>
__device__ __forceinline__ void TiledGemm([[maybe_unused]] Ctx&& smprof_ctx, const float* __restrict__ a,
                                          const float* __restrict__ b, float* __restrict__ c, int n) {
  __shared__ float as[kStep][kTile + 4];
  __shared__ float bs[kStep][kTile + 4];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * kTile, col0 = blockIdx.x * kTile;
  float acc[4][4] = {};

  const auto load = [&](int k0) {  // global -> shared, then the barrier
    for (int i = threadIdx.x; i < kTile * kStep; i += kThreads) {
      const int r = i / kStep, k = i % kStep;  // A tile: kTile rows x kStep cols, stored transposed
      as[k][r] = a[(row0 + r) * n + k0 + k];
      const int kk = i / kTile, cc = i % kTile;  // B tile: kStep rows x kTile cols
      bs[kk][cc] = b[(k0 + kk) * n + col0 + cc];
    }
    __syncthreads();
  };
  const auto compute = [&] {  // the FMAs, then the barrier before the next load
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
  };
  const auto store = [&] {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) c[(row0 + ty * 4 + i) * n + col0 + tx * 4 + j] = acc[i][j];
  };

  if constexpr (kDensity == Density::kLoop) {
    SMPROF_RANGE("mainloop") {
      for (int k0 = 0; k0 < n; k0 += kStep) {
        load(k0);
        compute();
      }
    }
    SMPROF_RANGE("store") { store(); }
  } else if constexpr (kDensity == Density::kK64) {
    for (int k0 = 0; k0 < n; k0 += 4 * kStep) {
      SMPROF_RANGE("k64") {
        for (int k1 = k0; k1 < k0 + 4 * kStep; k1 += kStep) {
          load(k1);
          compute();
        }
      }
    }
    store();
  } else {
    for (int k0 = 0; k0 < n; k0 += kStep) {
      SMPROF_RANGE("load") { load(k0); }
      SMPROF_RANGE("compute") { compute(); }
    }
    if (threadIdx.x < 32) SMPROF_INSTANT("mainloop done");
    SMPROF_RANGE("store") { store(); }
  }
}

// One block's 32x32 tile, one output per thread.
template <typename Ctx>
__device__ __forceinline__ void Smem32Gemm([[maybe_unused]] Ctx&& smprof_ctx, const float* __restrict__ a,
                                           const float* __restrict__ b, float* __restrict__ c, int n) {
  __shared__ float as[kSmemTile][kSmemTile];
  __shared__ float bs[kSmemTile][kSmemTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kSmemTile + ty, col = blockIdx.x * kSmemTile + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < n; k0 += kSmemTile) {
    SMPROF_RANGE("load") {
      as[ty][tx] = a[row * n + k0 + tx];
      bs[ty][tx] = b[(k0 + ty) * n + col];
      __syncthreads();
    }
    SMPROF_INSTANT("mma");
#pragma unroll
    for (int k = 0; k < kSmemTile; ++k) acc = fmaf(as[ty][k], bs[k][tx], acc);
    __syncthreads();
  }
  c[row * n + col] = acc;
}

template <Density kDensity, bool kContext>
__global__ void __launch_bounds__(kThreads)
    gemm_density(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n) {
  if constexpr (kContext) {
    SMPROF_CONTEXT();
    TiledGemm<kDensity>(smprof_ctx, a, b, c, n);
  } else {
    TiledGemm<kDensity>(NoContext(), a, b, c, n);
  }
}

template <bool kContext>
__global__ void __launch_bounds__(kSmemTile * kSmemTile, 2)
    gemm_smem32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n) {
  if constexpr (kContext) {
    SMPROF_CONTEXT();
    Smem32Gemm(smprof_ctx, a, b, c, n);
  } else {
    Smem32Gemm(NoContext(), a, b, c, n);
  }
}

namespace {

using LaunchFn = void (*)(const float*, const float*, float*, int);

template <Density kDensity, bool kContext>
void LaunchTiled(const float* a, const float* b, float* c, int n) {
  gemm_density<kDensity, kContext><<<dim3(n / kTile, n / kTile), kThreads>>>(a, b, c, n);
}

template <bool kContext>
void LaunchSmem32(const float* a, const float* b, float* c, int n) {
  gemm_smem32<kContext><<<dim3(n / kSmemTile, n / kSmemTile), dim3(kSmemTile, kSmemTile)>>>(a, b, c, n);
}

struct Variant {
  const char* name;
  LaunchFn launch[2];  // without, with SMPROF_CONTEXT()
};

constexpr Variant kVariants[] = {
    {"loop", {LaunchTiled<Density::kLoop, false>, LaunchTiled<Density::kLoop, true>}},
    {"k64", {LaunchTiled<Density::kK64, false>, LaunchTiled<Density::kK64, true>}},
    {"k16", {LaunchTiled<Density::kK16, false>, LaunchTiled<Density::kK16, true>}},
    {"smem32", {LaunchSmem32<false>, LaunchSmem32<true>}},
};

// Largest error of 256 sampled entries of c, relative to the sum of the
// magnitudes of their products (double-precision reference); NaN counts as
// infinite.
double MaxSampledError(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c, int n,
                       std::mt19937& rng) {
  double max_rel = 0;
  std::uniform_int_distribution<int> pick(0, n - 1);
  for (int s = 0; s < 256; ++s) {
    const size_t i = pick(rng), j = pick(rng);
    double ref = 0, mag = 0;
    for (size_t k = 0; k < static_cast<size_t>(n); ++k) {
      const double p = static_cast<double>(a[i * n + k]) * b[k * n + j];
      ref += p;
      mag += std::fabs(p);
    }
    const double err = std::fabs(c[i * n + j] - ref) / (mag > 0 ? mag : 1);
    if (std::isnan(err)) return INFINITY;
    max_rel = std::max(max_rel, err);
  }
  return max_rel;
}

}  // namespace

int main(int argc, char** argv) {
  const Variant* variant = nullptr;
  for (const Variant& v : kVariants) {
    if (argc > 1 && std::strcmp(argv[1], v.name) == 0) variant = &v;
  }
  const int ctx = argc > 2 ? std::atoi(argv[2]) : -1;
  const int n = argc > 3 ? std::atoi(argv[3]) : 0;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 0;
  // n <= 16384 keeps every index within int.
  if (argc != 5 || variant == nullptr || (ctx != 0 && ctx != 1) || n <= 0 || n % kTile != 0 || n > 16384 ||
      reps <= 0) {
    std::fprintf(stderr, "usage: %s <loop|k64|k16|smem32> <ctx: 0|1> <n: multiple of %d, at most 16384> <reps>\n",
                 argv[0], kTile);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA GPU found: this benchmark needs one\n");
    return 3;
  }

  const size_t elems = static_cast<size_t>(n) * n;
  const size_t bytes = elems * sizeof(float);
  std::vector<float> ha(elems), hb(elems), hc(elems);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (auto& x : ha) x = dist(rng);
  for (auto& x : hb) x = dist(rng);

  float *da, *db, *dc;
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, ha.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, hb.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dc, 0xff, bytes));  // all-ones floats are NaN: an unwritten entry fails the check

  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  float best_ms = INFINITY;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(start));
    variant->launch[ctx](da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms);
  }
  CHECK(cudaMemcpy(hc.data(), dc, bytes, cudaMemcpyDeviceToHost));

  const double max_rel = MaxSampledError(ha, hb, hc, n, rng);
  std::printf("%s ctx=%d n=%d: best %.4f ms over %d runs\n", variant->name, ctx, n, best_ms, reps);
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  if (!(max_rel < 1e-4)) {
    std::fprintf(stderr, "%s ctx=%d n=%d: wrong results, max relative error %.2e\n", variant->name, ctx, n, max_rel);
    return 1;
  }
  return 0;
}
