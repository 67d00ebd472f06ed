// Graph test kernels, in a second translation unit that includes smprof: an
// application with several instrumented files must link (whole-program and
// -rdc builds alike) and each file is its own module at run time.
#include <smprof/smprof.cuh>

#include "tests/gpu/apps/kernels.h"

// k1 records 5 instants per warp, k2 one range (2 events).
__global__ void graph_k1() {
  for (int i = 0; i < 5; ++i) SMPROF_INSTANT("g1");
}

__global__ void graph_k2() {
  SMPROF_SCOPE("g2");
  const long long until = clock64() + 2000;
  while (clock64() < until) {
  }
}

void LaunchGraphK1(cudaStream_t s) { graph_k1<<<2, 64, 0, s>>>(); }
void LaunchGraphK2(cudaStream_t s) { graph_k2<<<3, 32, 0, s>>>(); }
