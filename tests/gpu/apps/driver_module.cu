// An opted-in module loaded through the driver API (cuModuleLoad), so the
// injector sees a real CUfunction instead of the runtime's CUkernel.
#include <smprof/smprof.cuh>

// Per warp: `n` "drv" instants.
extern "C" __global__ void driver_kernel(int n) {
  for (int i = 0; i < n; ++i) SMPROF_INSTANT("drv");
}
