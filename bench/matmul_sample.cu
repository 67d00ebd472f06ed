// A cuda-samples-style matrix multiply (the classic 32x32 shared-memory
// tiles, one output per thread, 1024-thread blocks), marked the way a user
// first marks such a kernel: per K tile a "load" range around the tile loads
// and their barrier, and an "mma" instant before the multiply-adds (three
// marker calls, every warp). Like the sample: C(320x640) = A(320x320) *
// B(320x640), one warm-up launch, then 300 launches timed with CUDA events,
// then the result checked. Under smprof-run every launch records ~192 k
// events (58 M in all): bench/app_wall.py runs it plain and profiled.
//
//   smprof_bench_matmul_sample
#include <smprof/smprof.cuh>

#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/cuda_check.h"

constexpr int kBlock = 32;

// C = A * B, A is ha x wa, B is wa x wb.
__global__ void __launch_bounds__(kBlock * kBlock)
    matrix_mul(float* __restrict__ c, const float* __restrict__ a, const float* __restrict__ b, int wa, int wb) {
  const int bx = blockIdx.x, by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
  const int a_begin = wa * kBlock * by, a_end = a_begin + wa - 1, a_step = kBlock;
  const int b_begin = kBlock * bx, b_step = kBlock * wb;
  float acc = 0.0f;
  for (int ai = a_begin, bi = b_begin; ai <= a_end; ai += a_step, bi += b_step) {
    __shared__ float as[kBlock][kBlock];
    __shared__ float bs[kBlock][kBlock];
    SMPROF_RANGE("load") {
      as[ty][tx] = a[ai + wa * ty + tx];
      bs[ty][tx] = b[bi + wb * ty + tx];
      __syncthreads();
    }
    SMPROF_INSTANT("mma");
#pragma unroll
    for (int k = 0; k < kBlock; ++k) acc += as[ty][k] * bs[k][tx];
    __syncthreads();
  }
  c[wb * kBlock * by + kBlock * bx + wb * ty + tx] = acc;
}

int main() {
  const int ha = 10 * kBlock, wa = 10 * kBlock, wb = 20 * kBlock;
  std::vector<float> ha_(static_cast<size_t>(ha) * wa, 1.0f), hb(static_cast<size_t>(wa) * wb, 0.01f);
  std::vector<float> hc(static_cast<size_t>(ha) * wb);
  float *a, *b, *c;
  CHECK(cudaMalloc(&a, ha_.size() * sizeof(float)));
  CHECK(cudaMalloc(&b, hb.size() * sizeof(float)));
  CHECK(cudaMalloc(&c, hc.size() * sizeof(float)));
  CHECK(cudaMemcpy(a, ha_.data(), ha_.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, hb.data(), hb.size() * sizeof(float), cudaMemcpyHostToDevice));
  const dim3 threads(kBlock, kBlock), grid(wb / kBlock, ha / kBlock);
  matrix_mul<<<grid, threads>>>(c, a, b, wa, wb);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  const int iterations = 300;
  CHECK(cudaEventRecord(start));
  for (int i = 0; i < iterations; ++i) matrix_mul<<<grid, threads>>>(c, a, b, wa, wb);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  const double per = ms / iterations;
  const double flops = 2.0 * ha * wa * wb;
  std::printf("matrix_mul 320x320 * 320x640: %.3f ms per launch, %.1f GFLOP/s\n", per, flops * 1e-6 / per);
  CHECK(cudaMemcpy(hc.data(), c, hc.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (float v : hc) wrong += std::fabs(v - wa * 0.01f) > 1e-3f * wa * 0.01f;
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
  if (wrong != 0) {
    std::fprintf(stderr, "matrix_mul: %d of %zu results wrong\n", wrong, hc.size());
    return 1;
  }
  return 0;
}
