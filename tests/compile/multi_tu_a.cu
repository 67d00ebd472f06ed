// Two translation units that both include the markers, linked into one
// program with separate compilation (-rdc=true): see CMakeLists.txt. A
// device function defined in one unit and called from the other takes the
// context, with every kind of marker.
#include <cstdint>
#include <smprof/smprof.cuh>

__device__ void marks_in_a(smprof::Context& smprof_ctx, int k) {
  SMPROF_PHASE("a phase");
  SMPROF_INSTANT("a", smprof::value(k), smprof::on_warp(0));
  SMPROF_COUNTER("a counter", static_cast<uint64_t>(k) << 40);
  SMPROF_ASYNC_BEGIN("a span", k, smprof::when(k > 0));
  SMPROF_PHASE_END();
}

__global__ void multi_tu_a() { SMPROF_INSTANT("a"); }
void LaunchMultiTuA() { multi_tu_a<<<1, 32>>>(); }
