// The launch-cost benchmark's kernel that does not opt in: this translation
// unit (its own module) does not include <smprof/smprof.cuh>.
#include <cuda_runtime.h>

__global__ void lc_plain(int* out) {
  if (threadIdx.x == 0) atomicAdd(out, 1);
}

void LaunchPlain(cudaStream_t s, int* out) { lc_plain<<<1, 32, 0, s>>>(out); }
