// Every marker form; compiled with and without -DSMPROF_DISABLE by
// check_disabled_ptx.cmake.
#include <cstdint>
#include <smprof/smprof.cuh>

__device__ void in_function(smprof::Context& smprof_ctx, int k) {
  SMPROF_INSTANT("in function", smprof::value(k), smprof::on_warps(0, 4));
}

__global__ void all_markers(int* out, int k, uint64_t bytes) {
  SMPROF_KERNEL();
  SMPROF_RANGE("range") { out[0] = 1; }
  SMPROF_RANGE("stage %d", smprof::arg(k), smprof::when(k > 1)) { out[1] = 2; }
  SMPROF_SCOPE("scope");
  SMPROF_BEGIN("begin");
  SMPROF_END("begin", smprof::value(bytes));
  SMPROF_INSTANT("instant");
  SMPROF_INSTANT("lane", smprof::when(threadIdx.x == 3), smprof::value(k));
  SMPROF_PHASE("load", smprof::per_block());
  SMPROF_PHASE("mma %u", smprof::arg(static_cast<unsigned>(k)), smprof::on_warp(1));
  SMPROF_PHASE_END();
  SMPROF_PHASE_END(smprof::when(k != 0));
  SMPROF_COUNTER("counter", k);
  SMPROF_COUNTER("wide counter", bytes, smprof::on_warp(0));
  SMPROF_ASYNC_BEGIN("async", k % 4);
  SMPROF_ASYNC_END("async", k % 4, smprof::on_warps(4, 4));
  in_function(smprof_ctx, k);
}

// The same markers without a context: the shared-memory cursor.
__global__ void no_context(int* out, int k) {
  SMPROF_RANGE("range", smprof::when(k > 0)) { out[0] = 1; }
  SMPROF_PHASE("p");
  SMPROF_PHASE_END();
  SMPROF_INSTANT("v", smprof::value(static_cast<int64_t>(k) << 40));
  SMPROF_ASYNC_BEGIN("a", 1u);
  SMPROF_ASYNC_END("a", 1u);
}
