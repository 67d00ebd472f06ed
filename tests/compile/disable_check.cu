// Every marker form, compiled with -DSMPROF_DISABLE (see CMakeLists.txt).
#include <smprof/smprof.cuh>

#ifndef SMPROF_DISABLE
#error "this file checks the disabled build"
#endif

__global__ void all_markers(int* out) {
  SMPROF_RANGE("range") { out[0] = 1; }
  SMPROF_SCOPE("scope");
  SMPROF_BEGIN("begin");
  SMPROF_END("begin");
  SMPROF_INSTANT("instant");
}
