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
// the common path has no divergent branch):
//   1. read %globaltimer first, so the marker's own cost lands after the stamp;
//   2. read the warp's cursor from static shared memory (16 bytes per warp,
//      512 bytes per block). Shared memory survives from earlier blocks, so
//      the cursor counts only if its tag equals this warp's identity hash
//      (%gridid, block, warp, harvest epoch);
//   3. append a 16-byte Event to the warp's chunk, or claim the next chunk
//      with one atomicAdd when the cursor is foreign or the chunk is full;
//   4. when no chunk is left, count the event in dropped_events (exact loss
//      accounting) and remember kNoChunk so the warp stops claiming.
// The warp must not split inside a marker, or the next marker would elect a
// second recording lane (seen on H200 with a leader-only branch: a duplicate
// event); the rare chunk-claim branch ends in a __shfl_sync that rejoins it.
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
// costs idle kernels time (on H200: an idle marker 42 -> 100 cycles, the
// example GEMM 1.00x -> 1.10x) in exchange for halving the recording cost
// (711 -> 363 cycles per event). -DSMPROF_INLINE_RECORDER inlines it for
// builds that are always profiled. Figures: docs/performance.md.
#if defined(SMPROF_INLINE_RECORDER)
#define SMPROF_RECORDER_INLINE SMPROF_FORCEINLINE
#else
#define SMPROF_RECORDER_INLINE SMPROF_NOINLINE
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
  return block ^ ((grid ^ (static_cast<uint64_t>(epoch) << 48)) * 0x9E3779B97F4A7C15ull);
}

// The per-warp cursors of the block (static shared memory, one instance per
// kernel that records).
__device__ SMPROF_FORCEINLINE uint32_t CursorAddress(uint32_t warp) {
  __shared__ wire::WarpCursor cursors[kMaxWarpsPerBlock];
  return static_cast<uint32_t>(__cvta_generic_to_shared(&cursors[warp]));
}

__device__ SMPROF_FORCEINLINE void LoadCursor(uint32_t addr, uint64_t& tag, uint64_t& cursor) {
  asm volatile("ld.volatile.shared.v2.u64 {%0, %1}, [%2];" : "=l"(tag), "=l"(cursor) : "r"(addr) : "memory");
}

__device__ SMPROF_FORCEINLINE void StoreCursor(uint32_t addr, uint64_t tag, uint32_t chunk, uint32_t fill) {
  const uint64_t cursor = static_cast<uint64_t>(chunk) | (static_cast<uint64_t>(fill) << 32);
  asm volatile("st.volatile.shared.v2.u64 [%0], {%1, %2};" ::"r"(addr), "l"(tag), "l"(cursor) : "memory");
}

// Predicated on `leader`: every lane of the warp runs the recorder in
// lockstep and only the recording lane's stores take effect, so the common
// path has no divergent branch and the warp never splits.
__device__ SMPROF_FORCEINLINE void StoreFillIf(bool leader, uint32_t addr, uint32_t fill) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p st.volatile.shared.u32 [%1], %2;\n}" ::"r"(
          static_cast<uint32_t>(leader)),
      "r"(addr + 12), "r"(fill)
      : "memory");
}

__device__ SMPROF_FORCEINLINE void Store16If(bool leader, void* dst, uint64_t lo, uint64_t hi) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p st.global.v2.u64 [%1], {%2, %3};\n}" ::"r"(
          static_cast<uint32_t>(leader)),
      "l"(dst), "l"(lo), "l"(hi)
      : "memory");
}

__device__ SMPROF_FORCEINLINE void Store16(void* dst, uint64_t lo, uint64_t hi) {
  asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(dst), "l"(lo), "l"(hi) : "memory");
}

// red.global: a fire-and-forget add on a known-global address.
__device__ SMPROF_FORCEINLINE void Count(uint64_t arena, uint32_t offset) {
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(arena + offset) : "memory");
}

// Claims a chunk for the calling warp and writes its header. Returns kNoChunk
// when the arena is full. Out of line: it runs once per chunk.
__device__ SMPROF_NOINLINE uint32_t ClaimChunk(uint64_t grid, uint32_t warp) {
  const wire::ArenaRef& ref = g_arena<kAbiVersion>;
  uint32_t chunk;
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;"
               : "=r"(chunk)
               : "l"(ref.arena + offsetof(wire::ArenaHeader, next_chunk))
               : "memory");
  if (chunk >= ref.num_chunks) return wire::kNoChunk;
  char* base = reinterpret_cast<char*>(ref.chunks) + (static_cast<uint64_t>(chunk) << ref.chunk_shift);
  const uint64_t w2 = static_cast<uint64_t>(blockIdx.x) | (static_cast<uint64_t>(blockIdx.y) << 32) |
                      (static_cast<uint64_t>(blockIdx.z) << 48);
  const uint64_t w3 = static_cast<uint64_t>(sreg::SmId() & 0xffff) | (static_cast<uint64_t>(warp) << 16) |
                      (static_cast<uint64_t>(wire::kChunkMagic) << 24);
  Store16(base, grid, reinterpret_cast<uint64_t>(&g_name_base<kAbiVersion>));
  Store16(base + 16, w2, w3);
  return chunk;
}

// Runs on every active lane of the warp; `leader` is the one that records.
__device__ SMPROF_RECORDER_INLINE void RecordEvent(const char* name, uint32_t kind, uint64_t now, unsigned active,
                                                   uint32_t leader_lane) {
  const wire::ArenaRef& ref = g_arena<kAbiVersion>;
  const uint32_t warp = LinearThreadId() >> 5;
  if (((ref.warp_mask >> (warp < 31 ? warp : 31)) & 1u) == 0) return;  // same for the whole warp
  const bool leader = sreg::LaneId() == leader_lane;
  if (ref.chunks == 0 || ref.num_chunks == 0) {  // raced the publication
    if (leader) Count(ref.arena, offsetof(wire::ArenaHeader, unplaced_events));
    return;
  }
  const uint32_t cursor_addr = CursorAddress(warp);
  const uint64_t grid = sreg::GridId();
  const uint64_t tag = WarpTag(grid, ref.epoch);
  uint64_t cursor_tag, cursor;
  LoadCursor(cursor_addr, cursor_tag, cursor);
  uint32_t chunk = static_cast<uint32_t>(cursor);
  uint32_t fill = static_cast<uint32_t>(cursor >> 32);
  const uint32_t capacity = 1u << (ref.chunk_shift - 4);
  const bool fresh = cursor_tag != tag || fill >= capacity || chunk >= ref.num_chunks;
  // The leader's view decides, for the whole warp (a vote keeps it uniform).
  if (__any_sync(active, leader && fresh)) {
    uint32_t claimed = wire::kNoChunk;
    if (leader) {
      if (cursor_tag != tag || chunk != wire::kNoChunk) claimed = ClaimChunk(grid, warp);
      if (claimed == wire::kNoChunk) {
        StoreCursor(cursor_addr, tag, wire::kNoChunk, 0);
        Count(ref.arena, offsetof(wire::ArenaHeader, dropped_events));
      } else {
        StoreCursor(cursor_addr, tag, claimed, wire::kChunkHeaderSlots + 1);
      }
    }
    chunk = __shfl_sync(active, claimed, leader_lane);
    if (chunk == wire::kNoChunk) return;
    fill = wire::kChunkHeaderSlots;
  } else {
    StoreFillIf(leader, cursor_addr, fill + 1);
  }
  char* event = reinterpret_cast<char*>(ref.chunks) + (static_cast<uint64_t>(chunk) << ref.chunk_shift) +
                fill * sizeof(wire::Event);
  const auto offset = static_cast<int32_t>(reinterpret_cast<intptr_t>(name) -
                                           reinterpret_cast<intptr_t>(&g_name_base<kAbiVersion>));
  Store16If(leader, event, now,
            static_cast<uint64_t>(static_cast<uint32_t>(offset)) | (static_cast<uint64_t>(kind) << 32));
}

// The marker entry point: one constant load and one uniform branch when not
// profiling. Every lane that reaches the marker runs the recorder; the lowest
// active lane's stores are the only ones that take effect.
__device__ SMPROF_FORCEINLINE void Record(const char* name, uint32_t kind) {
  if (g_arena<kAbiVersion>.arena == 0) return;
  const uint64_t now = sreg::GlobalTimer();
  const unsigned active = __activemask();
  RecordEvent(name, kind, now, active, static_cast<uint32_t>(__ffs(active) - 1));
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
