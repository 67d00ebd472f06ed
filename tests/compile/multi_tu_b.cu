#include <smprof/smprof.cuh>

__global__ void multi_tu_b() { SMPROF_RANGE("b") {} }
void LaunchMultiTuA();
int main() {
  LaunchMultiTuA();
  multi_tu_b<<<1, 32>>>();
  return 0;
}
