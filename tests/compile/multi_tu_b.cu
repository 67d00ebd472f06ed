#include <cstdio>
#include <smprof/smprof.cuh>

__device__ void marks_in_a(smprof::Context& smprof_ctx, int k);

template <int kStage>
__global__ void multi_tu_b(int k) {
  SMPROF_KERNEL();
  SMPROF_RANGE("b stage %d", smprof::arg(kStage)) { marks_in_a(smprof_ctx, k); }
  SMPROF_ASYNC_END("a span", k, smprof::when(k > 0));
}

void LaunchMultiTuA();
// Run on the GPU machine under smprof-run by GpuScenarios.DeviceApiAcrossSeparatelyCompiledUnits.
int main() {
  LaunchMultiTuA();
  multi_tu_b<3><<<1, 32>>>(1);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) std::fprintf(stderr, "multi_tu: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
