// The device-side recorder behind the SMPROF_* markers.
//
// Handoff without kernel parameters: every module that includes this header
// defines smprof::detail::g_arena<kArenaAbiVersion>, a wire::ArenaRef with a
// fixed mangled name. The injector finds it per module and context
// (cuModuleGetGlobal) and fills it before the first profiled launch; without
// the injector it stays zero, and a marker costs one load and one uniform
// branch.
//
// Per event, on one lane of the warp (the lowest active lane):
//   1. read %globaltimer first, so the marker's own cost lands after the stamp;
//   2. find the warp's cursor: WarpSlot[%smid][%warpid]. Only the warp resident
//      in that hardware slot touches it, so plain (relaxed, CTA-scope: same SM,
//      same L1) loads and stores suffice; a new resident warp sees a foreign
//      tag and claims a fresh chunk;
//   3. append a 16-byte Event to its chunk, or claim the next chunk with one
//      atomicAdd when the slot is foreign or the chunk is full;
//   4. when no chunk is left, count the event in dropped_events (exact loss
//      accounting) and remember kNoChunk so the warp stops claiming.
// Records are never overwritten: each chunk has a single writer between two
// harvests, and the injector reads and zeroes the arena only when no kernel
// of the context can be running.
//
// Graph replays reuse %gridid, so a replayed warp may continue a chunk of an
// earlier replay; the injector separates replays by event time.
#pragma once

#include <cstdint>

#include "smprof/detail/macros.h"
#include "smprof/detail/sreg.cuh"
#include "smprof/wire.h"

#if defined(__CUDACC__)
namespace smprof::detail {

inline constexpr int kAbiVersion = static_cast<int>(wire::kArenaAbiVersion);

// The module global the injector looks up by name. A variable template keeps
// one fixed mangled name (_ZN6smprof6detail7g_arenaILi1EEE) across translation
// units, whole-program and -rdc builds alike.
template <int kVersion>
__device__ wire::ArenaRef g_arena = {};

__device__ SMPROF_FORCEINLINE uint32_t LinearThreadId() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

__device__ SMPROF_FORCEINLINE uint64_t WarpTag(uint64_t grid, uint32_t warp) {
  uint64_t h = (grid + 1) * 0x9E3779B97F4A7C15ull;
  h ^= (static_cast<uint64_t>(blockIdx.x) * 0xC2B2AE3D27D4EB4Full);
  h ^= (static_cast<uint64_t>(blockIdx.y) << 40) ^ (static_cast<uint64_t>(blockIdx.z) << 20) ^ warp;
  return h | 1;  // never 0, the unowned tag
}

__device__ SMPROF_FORCEINLINE void LoadSlot(const wire::WarpSlot* slot, uint64_t& tag, uint64_t& cursor) {
  asm volatile("ld.relaxed.cta.global.v2.u64 {%0, %1}, [%2];" : "=l"(tag), "=l"(cursor) : "l"(slot) : "memory");
}

__device__ SMPROF_FORCEINLINE void StoreSlot(wire::WarpSlot* slot, uint64_t tag, uint32_t chunk, uint32_t fill) {
  const uint64_t cursor = static_cast<uint64_t>(chunk) | (static_cast<uint64_t>(fill) << 32);
  asm volatile("st.relaxed.cta.global.v2.u64 [%0], {%1, %2};" ::"l"(slot), "l"(tag), "l"(cursor) : "memory");
}

__device__ SMPROF_FORCEINLINE void Store16(void* dst, uint64_t lo, uint64_t hi) {
  asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(dst), "l"(lo), "l"(hi) : "memory");
}

__device__ SMPROF_FORCEINLINE void Count(uint64_t arena, uint32_t offset) {
  atomicAdd(reinterpret_cast<unsigned long long*>(arena + offset), 1ull);
}

// Claims a chunk for the calling warp and writes its header. Returns kNoChunk
// when the arena is full. Kept out of line: it runs once per chunk.
__device__ SMPROF_NOINLINE uint32_t ClaimChunk(const wire::ArenaRef& ref, const wire::ArenaRef* anchor,
                                               uint64_t grid, uint32_t warp, uint32_t sm) {
  auto* header = reinterpret_cast<wire::ArenaHeader*>(ref.arena);
  const uint32_t chunk = atomicAdd(&header->next_chunk, 1u);
  if (chunk >= ref.num_chunks) return wire::kNoChunk;
  char* base = reinterpret_cast<char*>(ref.chunks) + (static_cast<uint64_t>(chunk) << ref.chunk_shift);
  const uint64_t w2 = static_cast<uint64_t>(blockIdx.x) | (static_cast<uint64_t>(blockIdx.y) << 32) |
                      (static_cast<uint64_t>(blockIdx.z) << 48);
  const uint64_t w3 = static_cast<uint64_t>(sm) | (static_cast<uint64_t>(warp) << 16) |
                      (static_cast<uint64_t>(wire::kChunkMagic) << 24);
  Store16(base, grid, reinterpret_cast<uint64_t>(anchor));
  Store16(base + 16, w2, w3);
  return chunk;
}

__device__ SMPROF_NOINLINE void RecordEnabled(const wire::ArenaRef* anchor, const char* name, uint32_t kind,
                                              uint64_t now) {
  const wire::ArenaRef ref = *anchor;
  const uint32_t warp = LinearThreadId() >> 5;
  if (((ref.warp_mask >> (warp < 31 ? warp : 31)) & 1u) == 0) return;
  if (ref.slots == 0 || ref.chunks == 0 || ref.num_chunks == 0) {  // raced the publication
    Count(ref.arena, offsetof(wire::ArenaHeader, unplaced_events));
    return;
  }
  const uint32_t sm = sreg::SmId();
  const uint32_t hw_warp = sreg::WarpId();
  if (sm >= ref.sm_slots || hw_warp >= ref.warps_per_sm) {
    Count(ref.arena, offsetof(wire::ArenaHeader, unplaced_events));
    return;
  }
  auto* slot = reinterpret_cast<wire::WarpSlot*>(ref.slots) + (sm * ref.warps_per_sm + hw_warp);
  const uint64_t grid = sreg::GridId();
  const uint64_t tag = WarpTag(grid, warp);
  uint64_t slot_tag, cursor;
  LoadSlot(slot, slot_tag, cursor);
  uint32_t chunk = static_cast<uint32_t>(cursor);
  uint32_t fill = static_cast<uint32_t>(cursor >> 32);
  const uint32_t capacity = (1u << ref.chunk_shift) / sizeof(wire::Event);
  if (slot_tag != tag || chunk == wire::kNoChunk || fill >= capacity) {
    if (slot_tag == tag && chunk == wire::kNoChunk) {
      Count(ref.arena, offsetof(wire::ArenaHeader, dropped_events));
      return;
    }
    chunk = ClaimChunk(ref, anchor, grid, warp, sm);
    if (chunk == wire::kNoChunk) {
      StoreSlot(slot, tag, wire::kNoChunk, 0);
      Count(ref.arena, offsetof(wire::ArenaHeader, dropped_events));
      return;
    }
    fill = wire::kChunkHeaderSlots;
  }
  char* event = reinterpret_cast<char*>(ref.chunks) + (static_cast<uint64_t>(chunk) << ref.chunk_shift) +
                fill * sizeof(wire::Event);
  const auto offset = static_cast<int32_t>(reinterpret_cast<intptr_t>(name) - reinterpret_cast<intptr_t>(anchor));
  Store16(event, now, static_cast<uint64_t>(static_cast<uint32_t>(offset)) | (static_cast<uint64_t>(kind) << 32));
  StoreSlot(slot, tag, chunk, fill + 1);
}

// The marker entry point: one load and one uniform branch when not profiling.
__device__ SMPROF_FORCEINLINE void Record(const char* name, uint32_t kind) {
  const wire::ArenaRef* anchor = &g_arena<kAbiVersion>;
  if (anchor->arena == 0) return;
  const uint64_t now = sreg::GlobalTimer();
  if (sreg::LaneId() != static_cast<uint32_t>(__ffs(__activemask()) - 1)) return;
  RecordEnabled(anchor, name, kind, now);
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
