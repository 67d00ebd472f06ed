// One wrapper per PTX special register smprof reads. Device code only.
#pragma once

#include <cstdint>

#include "smprof/detail/macros.h"

#if defined(__CUDACC__)
namespace smprof::detail::sreg {

// mov.u64 %r, %globaltimer;  ns, same clock as CUPTI timestamps (32 ns ticks on H100/H200)
__device__ SMPROF_FORCEINLINE uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// mov.u64 %r, %gridid;  equals CUPTI's kernel activity gridId (reused by graph replays)
__device__ SMPROF_FORCEINLINE uint64_t GridId() {
  uint64_t g;
  asm("mov.u64 %0, %%gridid;" : "=l"(g));
  return g;
}

// mov.u32 %r, %smid;  SM the warp runs on
__device__ SMPROF_FORCEINLINE uint32_t SmId() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// mov.u32 %r, %laneid;
__device__ SMPROF_FORCEINLINE uint32_t LaneId() {
  uint32_t l;
  asm("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}

// mov.u32 %r, %lanemask_lt;  bits of the lanes below this one
__device__ SMPROF_FORCEINLINE uint32_t LaneMaskLt() {
  uint32_t m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

}  // namespace smprof::detail::sreg
#endif  // __CUDACC__
