// Two translation units that both include the markers, linked into one
// program with separate compilation (-rdc=true): see CMakeLists.txt.
#include <smprof/smprof.cuh>

__global__ void multi_tu_a() { SMPROF_INSTANT("a"); }
void LaunchMultiTuA() { multi_tu_a<<<1, 32>>>(); }
