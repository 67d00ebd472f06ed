// One wrapper per PTX special register smprof reads. Device code only.
//
// The per-thread and per-warp ones are `asm volatile`: read where the marker
// stands, never hoisted by the compiler into registers that stay live across
// the user's loop. A value hoisted out of a marker costs an idle marker
// registers (the 32x32-tiled matrix multiply went from 32 to 44 registers per
// thread, and from two 1024-thread blocks per SM to one); a special register
// read costs a recording marker a few cycles. The block's index and shape are
// the same for every thread of the block: they come from the compiler's
// builtins, which it keeps in uniform registers (S2UR on sm_75+), so a
// hoisted copy costs no per-thread register and a marker no S2R latency.
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

// mov.u64 %r, %clock64;  SM cycles, per SM (not synchronised across SMs)
__device__ SMPROF_FORCEINLINE uint64_t Clock64() {
  uint64_t c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  return c;
}

// mov.u32 %r, %warpid;  the warp's slot on its SM (may change on preemption)
__device__ SMPROF_FORCEINLINE uint32_t WarpSlot() {
  uint32_t w;
  asm volatile("mov.u32 %0, %%warpid;" : "=r"(w));
  return w;
}

// mov.u64 %r, %gridid;  equals CUPTI's kernel activity gridId (reused by graph replays)
__device__ SMPROF_FORCEINLINE uint64_t GridId() {
  uint64_t g;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(g));
  return g;
}

#define SMPROF_SREG_U32(fn, reg)                       \
  __device__ SMPROF_FORCEINLINE uint32_t fn() {        \
    uint32_t v;                                        \
    asm volatile("mov.u32 %0, %%" reg ";" : "=r"(v)); \
    return v;                                          \
  }
SMPROF_SREG_U32(TidX, "tid.x")
SMPROF_SREG_U32(TidY, "tid.y")
SMPROF_SREG_U32(TidZ, "tid.z")
#undef SMPROF_SREG_U32

// %ntid and %ctaid: uniform across the block (see above).
__device__ SMPROF_FORCEINLINE uint32_t NtidX() { return blockDim.x; }
__device__ SMPROF_FORCEINLINE uint32_t NtidY() { return blockDim.y; }
__device__ SMPROF_FORCEINLINE uint32_t NtidZ() { return blockDim.z; }
__device__ SMPROF_FORCEINLINE uint32_t CtaidX() { return blockIdx.x; }
__device__ SMPROF_FORCEINLINE uint32_t CtaidY() { return blockIdx.y; }
__device__ SMPROF_FORCEINLINE uint32_t CtaidZ() { return blockIdx.z; }

// mov.u32 %r, %smid;  SM the warp runs on
__device__ SMPROF_FORCEINLINE uint32_t SmId() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// mov.u32 %r, %laneid;
__device__ SMPROF_FORCEINLINE uint32_t LaneId() {
  uint32_t l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
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
