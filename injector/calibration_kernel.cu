// The injector's calibration kernel: what a marker costs on the GPU the
// application runs on, measured with the real recorder (this file includes
// the public header like any profiled module), and how fast %clock64 runs
// against %globaltimer. Built into a fatbin and embedded in the injector
// (injector/calibration.h), which publishes a private arena to this module's
// g_arena before launching it on one warp.
//
// Cost per event = (cycles of a loop of kEvents markers - the same loop
// empty) / kEvents on lane 0, the least of kRounds rounds, for markers with a
// profiling context, without one, reached by a half warp (diverged), and (on
// the second launch, with the arena reference zeroed) idle markers.
#include <smprof/smprof.cuh>

#include <cstdint>

#include "injector/calibration_layout.h"

namespace {

using namespace smprof::calibration;  // NOLINT(google-build-using-namespace): the slots

constexpr int kRounds = 4;


__device__ __forceinline__ long long Min(long long a, long long b) { return a < b ? a : b; }

__device__ __forceinline__ long long EmptyLoop() {
  const long long t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < kEvents; ++i) asm volatile("" ::: "memory");
  return clock64() - t0;
}

// 64 markers. With `::smprof_ctx` (no context: the shared-memory cursor, and
// on a half warp the diverged path) or with the kernel's context.
template <typename Ctx>
__device__ __forceinline__ long long MarkerLoop(Ctx&& smprof_ctx) {
  const long long t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < kEvents; ++i) {
    SMPROF_INSTANT("smprof calibration");
    asm volatile("" ::: "memory");
  }
  return clock64() - t0;
}

}  // namespace

extern "C" __global__ void smprof_calibrate(unsigned long long* out, unsigned long long spin_ns) {
  SMPROF_CONTEXT();
  long long best[kSlots];
  for (long long& b : best) b = 1ll << 62;
  for (int round = 0; round < kRounds; ++round) {
    best[kEmpty] = Min(best[kEmpty], EmptyLoop());
    best[kContext] = Min(best[kContext], MarkerLoop(smprof_ctx));
    best[kDefault] = Min(best[kDefault], MarkerLoop(::smprof_ctx));
    if (threadIdx.x < 16) {
      best[kDivergedEmpty] = Min(best[kDivergedEmpty], EmptyLoop());
      best[kDiverged] = Min(best[kDiverged], MarkerLoop(::smprof_ctx));
    }
    __syncwarp();
  }
  // The SM clock against %globaltimer over `spin_ns`.
  const uint64_t c0 = smprof::detail::sreg::Clock64();
  const uint64_t t0 = smprof::detail::sreg::GlobalTimer();
  uint64_t t1 = t0;
  while (t1 - t0 < spin_ns) t1 = smprof::detail::sreg::GlobalTimer();
  const uint64_t c1 = smprof::detail::sreg::Clock64();
  if (threadIdx.x == 0) {
    for (int s = kEmpty; s <= kDiverged; ++s) out[s] = static_cast<unsigned long long>(best[s]);
    out[kClock0] = c0;
    out[kTime0] = t0;
    out[kClock1] = c1;
    out[kTime1] = t1;
  }
}
