// A marked kernel in a project that consumes the installed smprof through
// find_package(smprof) and smprof::headers (tests/install).
#include <smprof/smprof.cuh>

#include <cstdio>

__global__ void scale(float* data, int n, float factor) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  SMPROF_RANGE("scale") {
    if (i < n) data[i] *= factor;
  }
  SMPROF_INSTANT("done");
}

int main() {
  constexpr int kN = 1 << 16;
  float* data = nullptr;
  cudaError_t err = cudaMalloc(&data, kN * sizeof(float));
  if (err == cudaSuccess) {
    scale<<<kN / 256, 256>>>(data, kN, 2.0f);
    err = cudaDeviceSynchronize();
    cudaFree(data);
  }
  if (err != cudaSuccess) {
    std::fprintf(stderr, "consumer: %s\n", cudaGetErrorString(err));
    return 1;
  }
  std::puts("consumer: ok");
  return 0;
}
