// Every marker form; compiled with and without -DSMPROF_DISABLE by
// check_disabled_ptx.cmake.
#include <smprof/smprof.cuh>

__global__ void all_markers(int* out) {
  SMPROF_RANGE("range") { out[0] = 1; }
  SMPROF_SCOPE("scope");
  SMPROF_BEGIN("begin");
  SMPROF_END("begin");
  SMPROF_INSTANT("instant");
}
