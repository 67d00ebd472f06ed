// A module that does not opt in: no smprof header, so the injector must leave
// its kernels alone and they must never appear in a trace.
#include "tests/gpu/apps/kernels.h"

__global__ void plain_kernel(int* out) { atomicAdd(out, 1); }

void LaunchPlain(int* out, cudaStream_t s) { plain_kernel<<<4, 128, 0, s>>>(out); }
