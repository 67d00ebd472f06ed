#include <smprof/smprof.cuh>

__device__ void marks_in_a(smprof::Context& smprof_ctx, int k);

template <int kStage>
__global__ void multi_tu_b(int k) {
  SMPROF_KERNEL();
  SMPROF_RANGE("b stage %d", smprof::arg(kStage)) { marks_in_a(smprof_ctx, k); }
  SMPROF_ASYNC_END("a span", k, smprof::when(k > 0));
}

void LaunchMultiTuA();
int main() {
  LaunchMultiTuA();
  multi_tu_b<3><<<1, 32>>>(1);
  return 0;
}
