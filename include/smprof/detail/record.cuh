// The device-side recorder behind the SMPROF_* markers.
//
// Handoff without kernel parameters: every module that includes this header
// defines smprof::detail::g_arena<kArenaAbiVersion>, a wire::ArenaRef in
// __constant__ memory with a fixed mangled name, and g_name_base<...>, a
// __device__ byte that marker names are stored relative to. The injector finds
// both per module and context (cuModuleGetGlobal) and fills the ArenaRef before
// the first profiled launch; without the injector it stays zero, and a marker
// costs one constant-cache load and one uniform branch.
//
// Per event, for one lane of the warp (the lowest active lane; the other
// active lanes run the same instructions with their stores predicated off, so
// the common path has no divergent branch and no warp-collective operation):
//   1. read %globaltimer first, so the marker's own cost lands after the stamp;
//   2. read the warp's cursor from static shared memory (16 bytes per warp,
//      512 bytes per block): the tag and the address of the next event slot.
//      Shared memory survives from earlier blocks, so the cursor counts only if
//      its tag equals this block's identity hash (%gridid, block, harvest
//      epoch) and its address lies inside the arena;
//   3. store the 16-byte Event there and advance the cursor (the common path:
//      a handful of instructions after the load);
//   4. when the cursor is foreign or the chunk is full, claim the next chunk
//      with one atomicAdd and write a ChunkHeader naming the warp; when no
//      chunk is left, count the event in dropped_events (exact loss
//      accounting) and set the address to 0 so the warp stops claiming.
// The warp must not split inside a marker, or the next marker would elect a
// second recording lane (seen on H200 with a leader-only early return: a
// duplicate event); the rare claim branch ends in __syncwarp over the lanes
// that took it.
//
// Records are never overwritten: each chunk has a single writer between two
// harvests, and the injector reads and zeroes the arena only when no kernel of
// the context can be running, then bumps the epoch so no stale cursor matches.
// Graph replays reuse %gridid: a replayed warp may continue a chunk of an
// earlier replay of the same epoch, and the injector separates replays by time.
#pragma once

#include <cstdint>

#include "smprof/detail/macros.h"
#include "smprof/detail/sreg.cuh"
#include "smprof/wire.h"

#if defined(__CUDACC__)
namespace smprof::detail {

inline constexpr int kAbiVersion = static_cast<int>(wire::kArenaAbiVersion);
inline constexpr int kMaxWarpsPerBlock = 32;

// The recording path stays out of line by default, so a marker that is not
// recording is just the constant load and branch: inlined at every marker it
// costs idle kernels time (on H200: an idle marker 42 -> 97 cycles, the
// example GEMM 1.02x -> 1.03x of its compiled-out time at n=2048) in exchange
// for a faster recording path (722 -> 407 cycles per event on one warp).
// -DSMPROF_INLINE_RECORDER inlines it for builds that are always profiled.
// Figures: docs/performance.md.
// Both forms have inline linkage: the header is included by many translation
// units of one program.
#if defined(SMPROF_INLINE_RECORDER)
#define SMPROF_RECORDER_INLINE SMPROF_FORCEINLINE
#else
#define SMPROF_RECORDER_INLINE inline SMPROF_NOINLINE
#endif

// Looked up by name: _ZN6smprof6detail7g_arenaILi1EEE and
// _ZN6smprof6detail11g_name_baseILi1EEE. Variable templates keep one fixed
// mangled name across translation units, whole-program and -rdc builds alike.
template <int kVersion>
__constant__ wire::ArenaRef g_arena = {};
template <int kVersion>
__device__ char g_name_base = 0;

__device__ SMPROF_FORCEINLINE uint32_t LinearThreadId() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

// The cursor slot already says which warp of the block; the tag tells this
// block of this launch (and epoch) from whatever ran on the SM before. The
// block bits are exact (x < 2^31, y, z < 2^16), so blocks of one launch never
// collide; other launches differ through the multiplied grid id and epoch.
__device__ SMPROF_FORCEINLINE uint64_t WarpTag(uint64_t grid, uint32_t epoch) {
  const uint64_t block = static_cast<uint64_t>(blockIdx.x) | (static_cast<uint64_t>(blockIdx.y) << 31) |
                         (static_cast<uint64_t>(blockIdx.z) << 47);
  return block ^ ((grid ^ (static_cast<uint64_t>(epoch) << 32)) * 0x9E3779B97F4A7C15ull);
}

// The per-warp cursors of the block (static shared memory, one instance per
// kernel that records).
__device__ SMPROF_FORCEINLINE uint32_t CursorAddress(uint32_t warp) {
  __shared__ wire::WarpCursor cursors[kMaxWarpsPerBlock];
  return static_cast<uint32_t>(__cvta_generic_to_shared(&cursors[warp]));
}

__device__ SMPROF_FORCEINLINE uint64_t LoadTag(uint32_t addr) {
  uint64_t tag;
  asm volatile("ld.volatile.shared.u64 %0, [%1];" : "=l"(tag) : "r"(addr) : "memory");
  return tag;
}

__device__ SMPROF_FORCEINLINE void StoreCursor(uint32_t addr, uint64_t tag, uint32_t next) {
  asm volatile("st.volatile.shared.v2.u64 [%0], {%1, %2};" ::"r"(addr), "l"(tag), "l"(static_cast<uint64_t>(next))
               : "memory");
}

// On the leader only: takes the next event slot of the cursor with a shared
// memory atomic, so markers on divergent paths of one warp (each with its own
// leader) never take the same slot. Other lanes get 0.
__device__ SMPROF_FORCEINLINE uint32_t TakeSlotIf(bool leader, uint32_t addr) {
  uint32_t slot = 0;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %1, 0;\n @p atom.shared.add.u32 %0, [%2], 16;\n}"
      : "+r"(slot)
      : "r"(static_cast<uint32_t>(leader)), "r"(addr + 8)
      : "memory");
  return slot;
}

__device__ SMPROF_FORCEINLINE void Store16If(bool leader, uint64_t dst, uint64_t lo, uint64_t hi) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p st.global.v2.u64 [%1], {%2, %3};\n}" ::"r"(
          static_cast<uint32_t>(leader)),
      "l"(dst), "l"(lo), "l"(hi)
      : "memory");
}

__device__ SMPROF_FORCEINLINE void Store16(uint64_t dst, uint64_t lo, uint64_t hi) {
  asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(dst), "l"(lo), "l"(hi) : "memory");
}

// red.global: a fire-and-forget add on a known-global address.
__device__ SMPROF_FORCEINLINE void Count(uint64_t arena, uint32_t offset) {
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(arena + offset) : "memory");
}

// Claims a chunk for the calling warp and writes its header; returns the
// offset of its first event slot, or 0 when the arena is full. Out of line:
// it runs once per chunk.
__device__ inline SMPROF_NOINLINE uint32_t ClaimChunk(uint64_t grid, uint32_t warp) {
  const wire::ArenaRef& ref = g_arena<kAbiVersion>;
  uint32_t chunk;
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;"
               : "=r"(chunk)
               : "l"(ref.arena + offsetof(wire::ArenaHeader, next_chunk))
               : "memory");
  if (chunk >= ref.num_chunks) return 0;
  const uint32_t offset = chunk << ref.chunk_shift;
  const uint64_t base = ref.chunks + offset;
  const uint64_t w2 = static_cast<uint64_t>(blockIdx.x) | (static_cast<uint64_t>(blockIdx.y) << 32) |
                      (static_cast<uint64_t>(blockIdx.z) << 48);
  const uint64_t w3 = static_cast<uint64_t>(sreg::SmId() & 0xffff) | (static_cast<uint64_t>(warp) << 16) |
                      (static_cast<uint64_t>(wire::kChunkMagic) << 24);
  Store16(base, grid, reinterpret_cast<uint64_t>(&g_name_base<kAbiVersion>));
  Store16(base + 16, w2, w3);
  return offset + static_cast<uint32_t>(sizeof(wire::ChunkHeader));
}

// Runs on every lane in `active` (the lanes that reached the marker
// together); only the leader's (lowest active lane's) stores take effect, and
// every decision is the leader's, broadcast, so the lanes never diverge.
__device__ SMPROF_RECORDER_INLINE void RecordEvent(const char* name, uint32_t kind, uint64_t now,
                                                          unsigned active) {
  const wire::ArenaRef& ref = g_arena<kAbiVersion>;
  const uint32_t warp = LinearThreadId() >> 5;
  if (((ref.warp_mask >> (warp < 31 ? warp : 31)) & 1u) == 0) return;  // same for the whole warp
  const uint32_t leader_lane = static_cast<uint32_t>(__ffs(active) - 1);
  const bool leader = sreg::LaneId() == leader_lane;
  if (ref.chunks == 0 || ref.num_chunks == 0) {  // raced the publication (uniform: constant memory)
    if (leader) Count(ref.arena, offsetof(wire::ArenaHeader, unplaced_events));
    __syncwarp(active);
    return;
  }
  const uint64_t payload =
      static_cast<uint32_t>(reinterpret_cast<intptr_t>(name) - reinterpret_cast<intptr_t>(&g_name_base<kAbiVersion>)) |
      (static_cast<uint64_t>(kind) << 32);
  const uint32_t cursor_addr = CursorAddress(warp);
  const uint64_t grid = sreg::GridId();
  const uint64_t tag = WarpTag(grid, ref.epoch);
  const uint32_t chunk_mask = (1u << ref.chunk_shift) - 1;
  const uint32_t span = ref.num_chunks << ref.chunk_shift;
  const bool own = LoadTag(cursor_addr) == tag;
  // The leader's verdict, broadcast: a slot offset; 0 = claim a chunk (a
  // foreign cursor, or a full chunk, which leaves the cursor on a chunk
  // boundary); 1 = the arena is full (the cursor holds an odd offset).
  uint32_t slot = TakeSlotIf(leader, cursor_addr);
  if (!own) {
    slot = 0;
  } else if (slot & 1) {
    slot = 1;
  } else if ((slot & chunk_mask) == 0 || slot >= span) {
    slot = 0;
  }
  slot = __shfl_sync(active, slot, leader_lane);
  if (slot > 1) {
    Store16If(leader, ref.chunks + slot, now, payload);
    return;
  }
  // Rare: a new block or a full chunk (claim), or a full arena (drop).
  if (leader) {
    const uint32_t first = slot == 1 ? 0 : ClaimChunk(grid, warp);
    if (first == 0) {
      StoreCursor(cursor_addr, tag, 1);  // odd: "arena full" until the next epoch
      Count(ref.arena, offsetof(wire::ArenaHeader, dropped_events));
    } else {
      StoreCursor(cursor_addr, tag, first + static_cast<uint32_t>(sizeof(wire::Event)));
      Store16(ref.chunks + first, now, payload);
    }
  }
  __syncwarp(active);
}

// The marker entry point: one constant load and one uniform branch when not
// profiling. Every lane that reaches the marker runs the recorder.
__device__ SMPROF_FORCEINLINE void Record(const char* name, uint32_t kind) {
  if (g_arena<kAbiVersion>.arena == 0) return;
  const uint64_t now = sreg::GlobalTimer();
  RecordEvent(name, kind, now, __activemask());
}

// Scoped range: begin on construction, end on destruction.
class ScopedRange {
 public:
  __device__ SMPROF_FORCEINLINE explicit ScopedRange(const char* name) : name_(name) {
    Record(name_, wire::kEventBegin);
  }
  __device__ SMPROF_FORCEINLINE ~ScopedRange() { Record(name_, wire::kEventEnd); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  const char* name_;
};

}  // namespace smprof::detail
#endif  // __CUDACC__
