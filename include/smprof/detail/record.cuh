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
// An event is stamped with %clock64 (cycle-exact durations; each chunk header
// carries a %clock64/%globaltimer anchor for the host's mapping onto the
// global nanosecond timeline) and written by one lane of the warp with one
// 16-byte store. Where the write cursor lives decides the cost:
//
//  * A profiling context (SMPROF_CONTEXT(), a local the markers find by name)
//    holds the cursor in a register: the warp's next event address. A marker
//    reached by the whole warp is a clock read, one compare of
//    __activemask(), a predicated store and an add; the warp claims a chunk
//    (one global atomic, behind the one rare branch) when the cursor reaches
//    a chunk boundary. Kernels declare it once; markers in functions it is not passed
//    to use the shared-memory cursor below.
//  * Without a context, the warp's cursor (tag, next slot, chunk end) lives
//    in static shared memory, 16 bytes per warp. A marker reached by the
//    whole warp loads it, checks that the tag is this block's (shared memory
//    survives from earlier blocks) and stores; everything else takes one rare
//    branch.
//  * Markers reached while the warp is diverged (or after some of its lanes
//    exited) take the out-of-line path: the lowest active lane takes a slot of
//    the shared-memory cursor with a shared atomic, so two halves of a warp at
//    two markers never take the same slot, and a slot is used only if it lies
//    inside the chunk the cursor names (a half that raced a claim claims
//    again: a chunk may be left with a gap, never with a foreign event). The
//    other lanes run the same instructions with their stores predicated off
//    and rejoin with __syncwarp, so the warp does not split inside a marker.
//
// A context's chunk and the cursor's chunk of one warp are merged by time on
// the host. Records are never overwritten: each chunk has a single writer
// between two harvests, and the injector reads and zeroes the arena only when
// no kernel of the context can be running, then bumps the epoch so no stale
// cursor matches. Graph replays reuse %gridid: a replayed warp may continue a
// chunk of an earlier replay of the same epoch, and the injector separates
// replays by time.
#pragma once

#include <cstdint>

#include "smprof/detail/macros.h"
#include "smprof/detail/sreg.cuh"
#include "smprof/wire.h"

#if defined(__CUDACC__)
namespace smprof::detail {

inline constexpr int kAbiVersion = static_cast<int>(wire::kArenaAbiVersion);
inline constexpr int kMaxWarpsPerBlock = 32;

// The claim and diverged paths are inlined at every marker, behind one rare
// branch. Out of line (-DSMPROF_OUTLINE_RECORDER: smaller code) they are a
// call in the user's branch, and on H100 a warp that reached a marker on a
// divergent path then stayed split after the branch (no reconvergence
// without a __syncwarp), so the markers that followed took the diverged path
// once per group. Both forms have inline linkage: the header is included by
// many translation units.
#if defined(SMPROF_OUTLINE_RECORDER)
#define SMPROF_RECORDER_SLOW_PATH inline SMPROF_NOINLINE
#else
#define SMPROF_RECORDER_SLOW_PATH SMPROF_FORCEINLINE
#endif

// Looked up by name: _ZN6smprof6detail7g_arenaILi2EEE and
// _ZN6smprof6detail11g_name_baseILi2EEE. Variable templates keep one fixed
// mangled name across translation units, whole-program and -rdc builds alike.
template <int kVersion>
__constant__ wire::ArenaRef g_arena = {};
template <int kVersion>
__device__ char g_name_base = 0;

__device__ SMPROF_FORCEINLINE const wire::ArenaRef& Ref() { return g_arena<kAbiVersion>; }

__device__ SMPROF_FORCEINLINE uint32_t LinearThreadId() {
  return sreg::TidX() + sreg::NtidX() * (sreg::TidY() + sreg::NtidY() * sreg::TidZ());
}

__device__ SMPROF_FORCEINLINE uint32_t WarpIndex() { return LinearThreadId() >> 5; }

// The lanes this warp has: all 32 except in the last warp of a block whose
// size is not a multiple of 32.
__device__ SMPROF_FORCEINLINE unsigned WarpLanes() {
  const uint32_t rest = sreg::NtidX() * sreg::NtidY() * sreg::NtidZ() - (WarpIndex() << 5);
  return rest >= 32 ? 0xffffffffu : (1u << rest) - 1u;
}

// SMPROF_WARPS: bit w of the mask selects warp w of each block (warps >= 31 use bit 31).
__device__ SMPROF_FORCEINLINE bool WarpSelected(const wire::ArenaRef& ref) {
  const uint32_t warp = WarpIndex();
  return ((ref.warp_mask >> (warp < 31 ? warp : 31)) & 1u) != 0;
}

__device__ SMPROF_FORCEINLINE uint32_t ChunkMask(const wire::ArenaRef& ref) { return (1u << ref.chunk_shift) - 1u; }

// The cursor slot already says which warp of the block; the tag tells this
// block of this launch (and epoch) from whatever ran on the SM before. The
// block bits are exact (x < 2^31, y, z < 2^16), so blocks of one launch never
// collide; other launches differ through the multiplied grid id and epoch.
// Computed at each marker from special registers (sreg.cuh says why).
__device__ SMPROF_FORCEINLINE uint64_t WarpTag(uint64_t grid, uint32_t epoch) {
  const uint64_t block = static_cast<uint64_t>(sreg::CtaidX()) | (static_cast<uint64_t>(sreg::CtaidY()) << 31) |
                         (static_cast<uint64_t>(sreg::CtaidZ()) << 47);
  return block ^ ((grid ^ (static_cast<uint64_t>(epoch) << 32)) * 0x9E3779B97F4A7C15ull);
}

// The per-warp cursors of the block (static shared memory, one instance per
// kernel that records without a context).
__device__ SMPROF_FORCEINLINE wire::WarpCursor* Cursors() {
  __shared__ wire::WarpCursor cursors[kMaxWarpsPerBlock];
  return cursors;
}

// The two 64-bit halves of a wire::Event.
__device__ SMPROF_FORCEINLINE uint64_t EventLow(uint64_t clock, uint32_t kind_flags) {
  const uint32_t info = (static_cast<uint32_t>(clock >> 32) << wire::kEventClockShift) | kind_flags;
  return static_cast<uint32_t>(clock) | (static_cast<uint64_t>(info) << 32);
}

__device__ SMPROF_FORCEINLINE uint64_t EventHigh(const char* name, uint32_t value) {
  const auto offset = static_cast<uint32_t>(reinterpret_cast<intptr_t>(name) -
                                            reinterpret_cast<intptr_t>(&g_name_base<kAbiVersion>));
  return offset | (static_cast<uint64_t>(value) << 32);
}

// A BEGIN is stamped after the marker's own work, every other kind before it,
// so a range holds as little of the recorder as it can: the slow paths
// re-read the clock for a BEGIN just before they store it.
__device__ SMPROF_FORCEINLINE bool StampsLate(uint32_t kind_flags) {
  return (kind_flags & wire::kEventKindMask) == wire::kEventBegin;
}

__device__ SMPROF_FORCEINLINE uint64_t Restamped(uint64_t lo) {
  const auto kind_flags = static_cast<uint32_t>(lo >> 32) & (wire::kEventKindMask | wire::kEventFlagsMask);
  return StampsLate(kind_flags) ? EventLow(sreg::Clock64(), kind_flags) : lo;
}

__device__ SMPROF_FORCEINLINE void Store16(uint64_t dst, uint64_t lo, uint64_t hi) {
  asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(dst), "l"(lo), "l"(hi) : "memory");
}

__device__ SMPROF_FORCEINLINE void Store16If(bool pred, uint64_t dst, uint64_t lo, uint64_t hi) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p st.global.v2.u64 [%1], {%2, %3};\n}" ::"r"(
          static_cast<uint32_t>(pred)),
      "l"(dst), "l"(lo), "l"(hi)
      : "memory");
}

// red.global: a fire-and-forget add on a known-global address.
__device__ SMPROF_FORCEINLINE void Count(uint64_t arena, uint32_t offset) {
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(arena + offset) : "memory");
}

// Claims a chunk for the calling lane's warp and writes its header; returns
// the device address of its first event slot, or 0 when the arena is full.
__device__ SMPROF_RECORDER_SLOW_PATH uint64_t ClaimChunk(uint32_t flags) {
  const wire::ArenaRef& ref = Ref();
  uint32_t chunk;
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;"
               : "=r"(chunk)
               : "l"(ref.arena + offsetof(wire::ArenaHeader, next_chunk))
               : "memory");
  if (chunk >= ref.num_chunks) return 0;
  const uint64_t base = ref.chunks + (static_cast<uint64_t>(chunk) << ref.chunk_shift);
  const uint64_t clock = sreg::Clock64();
  const uint64_t time = sreg::GlobalTimer();
  const uint64_t w2 = static_cast<uint64_t>(sreg::CtaidX()) | (static_cast<uint64_t>(sreg::CtaidY()) << 32) |
                      (static_cast<uint64_t>(sreg::CtaidZ()) << 48);
  const uint64_t w3 = static_cast<uint64_t>(sreg::SmId() & 0xffff) | (static_cast<uint64_t>(WarpIndex()) << 16) |
                      (static_cast<uint64_t>(wire::kChunkMagic) << 24) |
                      (static_cast<uint64_t>(sreg::WarpSlot() & 0xff) << 32) | (static_cast<uint64_t>(flags) << 40);
  Store16(base, sreg::GridId(), reinterpret_cast<uint64_t>(&g_name_base<kAbiVersion>));
  Store16(base + 16, w2, w3);
  Store16(base + 32, clock, time);
  return base + sizeof(wire::ChunkHeader);
}

// ---------------------------------------------------------------------------
// The shared-memory cursor: markers outside a context, and diverged markers.
// ---------------------------------------------------------------------------

__device__ SMPROF_FORCEINLINE uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Every lane in `active` runs this; only the leader's (lowest active lane's)
// memory operations take effect, and its verdict is broadcast, so the lanes
// never diverge inside.
__device__ SMPROF_RECORDER_SLOW_PATH void RecordDiverged(uint64_t lo, uint64_t hi, unsigned active) {
  const wire::ArenaRef& ref = Ref();
  const uint32_t leader_lane = static_cast<uint32_t>(__ffs(active) - 1);
  const bool leader = sreg::LaneId() == leader_lane;
  if (ref.chunks == 0 || ref.num_chunks == 0) {  // raced the publication (uniform: constant memory)
    if (leader) Count(ref.arena, offsetof(wire::ArenaHeader, unplaced_events));
    __syncwarp(active);
    return;
  }
  const uint32_t addr = SharedAddress(&Cursors()[WarpIndex()]);
  const uint64_t tag = WarpTag(sreg::GridId(), ref.epoch);
  uint64_t seen_tag;
  uint32_t end;
  asm volatile("ld.volatile.shared.u64 %0, [%2];\n\tld.volatile.shared.u32 %1, [%2+12];"
               : "=l"(seen_tag), "=r"(end)
               : "r"(addr)
               : "memory");
  const bool own = seen_tag == tag;
  // The leader takes a slot only from its own block's cursor.
  uint32_t slot = 0;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %1, 0;\n @p atom.shared.add.u32 %0, [%2+8], 16;\n}"
      : "+r"(slot)
      : "r"(static_cast<uint32_t>(leader && own)), "r"(addr)
      : "memory");
  // The verdict: a slot offset (>= the chunk header), 0 = claim, 1 = arena full.
  const uint32_t chunk_bytes = 1u << ref.chunk_shift;
  uint32_t verdict = 0;
  if (own && end == 0) {
    verdict = 1;
  } else if (own && slot < end && slot + chunk_bytes >= end + static_cast<uint32_t>(sizeof(wire::ChunkHeader))) {
    verdict = slot;
  }
  verdict = __shfl_sync(active, verdict, leader_lane);
  if (verdict > 1) {
    Store16If(leader, ref.chunks + verdict, Restamped(lo), hi);
    return;
  }
  if (leader) {
    const uint64_t first = verdict == 1 ? 0 : ClaimChunk(wire::kChunkFromCursor);
    if (first == 0) {
      asm volatile("st.volatile.shared.v2.u64 [%0], {%1, %2};" ::"r"(addr), "l"(tag), "l"(uint64_t{0}) : "memory");
      Count(ref.arena, offsetof(wire::ArenaHeader, dropped_events));
    } else {
      const auto next = static_cast<uint32_t>(first - ref.chunks);
      const uint32_t chunk_end = next - static_cast<uint32_t>(sizeof(wire::ChunkHeader)) + chunk_bytes;
      asm volatile("st.volatile.shared.v2.u64 [%0], {%1, %2};" ::"r"(addr), "l"(tag),
                   "l"(static_cast<uint64_t>(next + static_cast<uint32_t>(sizeof(wire::Event))) |
                       (static_cast<uint64_t>(chunk_end) << 32))
                   : "memory");
      Store16(first, Restamped(lo), hi);
    }
  }
  __syncwarp(active);
}

// A marker without a context. Inline: the converged, in-chunk case is a
// shared load, a compare against the block's tag, a predicated store and a
// shared store, and falls through; everything else takes one rare branch
// to the slow path (a taken branch costs a marker ~15 cycles on H100, so the
// common case must not take one).
__device__ SMPROF_FORCEINLINE void RecordFromCursor(uint32_t kind_flags, uint64_t clock, uint64_t hi,
                                                    unsigned active) {
  const wire::ArenaRef& ref = Ref();
  wire::WarpCursor* cursor = &Cursors()[WarpIndex()];
  const uint64_t tag = cursor->tag;
  const uint32_t next = cursor->next;
  const uint32_t end = cursor->end;
  if (__builtin_expect((active != WarpLanes()) | (tag != WarpTag(sreg::GridId(), ref.epoch)) | (next >= end), 0)) {
    RecordDiverged(EventLow(clock, kind_flags), hi, active);
    return;
  }
  cursor->next = next + static_cast<uint32_t>(sizeof(wire::Event));
  const bool lane0 = sreg::LaneId() == 0;  // before a BEGIN's late stamp (see Context::Record)
  const uint64_t stamp = StampsLate(kind_flags) ? sreg::Clock64() : clock;
  Store16If(lane0, ref.chunks + next, EventLow(stamp, kind_flags), hi);
}

// ---------------------------------------------------------------------------
// The profiling context: the cursor in a register.
// ---------------------------------------------------------------------------

// Context cursor states besides an event address. Both are multiples of any
// chunk size, so "at a chunk boundary" covers them with one test.
inline constexpr uint64_t kCursorNeedsChunk = 1ull << 63;
inline constexpr uint64_t kCursorArenaFull = 1ull << 62;

// The rare case of a context's marker: the warp is diverged (the marker
// goes to the shared-memory cursor's chunk; the context is left as it is, so
// its lanes keep agreeing), or the cursor is at a chunk boundary (lane 0
// claims a chunk, every lane gets the new cursor). Returns the cursor.
__device__ SMPROF_RECORDER_SLOW_PATH uint64_t RecordContextSlow(uint64_t cursor, uint64_t lo, uint64_t hi,
                                                                unsigned active, unsigned lanes) {
  if (active != lanes) {
    RecordDiverged(lo, hi, active);
    return cursor;
  }
  const wire::ArenaRef& ref = Ref();
  uint64_t result = cursor;
  if (sreg::LaneId() == 0) {
    if (ref.chunks == 0 || ref.num_chunks == 0) {
      Count(ref.arena, offsetof(wire::ArenaHeader, unplaced_events));  // raced the publication: retry later
    } else if (cursor != kCursorArenaFull && (result = ClaimChunk(0)) != 0) {
      Store16(result, Restamped(lo), hi);
      result += sizeof(wire::Event);
    } else {
      result = kCursorArenaFull;
      Count(ref.arena, offsetof(wire::ArenaHeader, dropped_events));
    }
  }
  return __shfl_sync(active, result, 0);
}

}  // namespace smprof::detail

namespace smprof {

// A kernel's profiling context: SMPROF_CONTEXT() declares one named
// `smprof_ctx`, which the markers of that scope use; pass it on as
// `smprof::Context& smprof_ctx` to device functions whose markers should use
// it too. 12 bytes of registers per thread.
class Context {
 public:
  __device__ SMPROF_FORCEINLINE Context() : lanes_(detail::WarpLanes()) {
    const wire::ArenaRef& ref = detail::Ref();
    cursor_ = ref.arena != 0 && detail::WarpSelected(ref) ? detail::kCursorNeedsChunk : 0;
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  __device__ SMPROF_FORCEINLINE void Record(uint32_t kind_flags, const char* name, uint32_t value) {
    if (cursor_ == 0) return;  // not recording: one compare of a register
    const bool late = detail::StampsLate(kind_flags);
    const uint64_t clock = detail::sreg::Clock64();
    const unsigned active = __activemask();
    const uint64_t lo = detail::EventLow(clock, kind_flags);
    const uint64_t hi = detail::EventHigh(name, value);
    // One rare branch: diverged, or at a chunk boundary (`|`, not `||`: one
    // predicate, one branch).
    if (__builtin_expect(
            (active != lanes_) | ((static_cast<uint32_t>(cursor_) & detail::ChunkMask(detail::Ref())) == 0), 0)) {
      cursor_ = detail::RecordContextSlow(cursor_, lo, hi, active, lanes_);
      return;
    }
    // %laneid before a BEGIN's late stamp: its read latency stays outside the range.
    const bool lane0 = detail::sreg::LaneId() == 0;
    const uint64_t stamp = late ? detail::sreg::Clock64() : clock;
    detail::Store16If(lane0, cursor_, detail::EventLow(stamp, kind_flags), hi);
    cursor_ += sizeof(wire::Event);
  }

 private:
  uint64_t cursor_;  // next event slot; 0: not recording; kCursorNeedsChunk, kCursorArenaFull
  // The warp's lanes (WarpLanes), computed once: a marker compares
  // __activemask() with a register instead of re-reading %tid and %ntid.
  unsigned lanes_;
};

}  // namespace smprof

// What markers find as `smprof_ctx` where no context is declared: the
// shared-memory cursor.
enum smprof_no_context_t { smprof_ctx };

namespace smprof::detail {

__device__ SMPROF_FORCEINLINE void Mark(smprof_no_context_t, uint32_t kind_flags, const char* name, uint32_t value) {
  const wire::ArenaRef& ref = Ref();
  if (ref.arena == 0) return;  // not profiling: one constant load and a uniform branch
  const uint64_t clock = sreg::Clock64();  // before the warp test: see Context::Record
  if (!WarpSelected(ref)) return;
  RecordFromCursor(kind_flags, clock, EventHigh(name, value), __activemask());
}

__device__ SMPROF_FORCEINLINE void Mark(Context& ctx, uint32_t kind_flags, const char* name, uint32_t value) {
  ctx.Record(kind_flags, name, value);
}

// Scoped range: begin on construction, end on destruction.
template <typename Ctx>
class ScopedRange {
 public:
  __device__ SMPROF_FORCEINLINE ScopedRange(Ctx& ctx, const char* name) : ctx_(ctx), name_(name) {
    Mark(ctx_, wire::kEventBegin, name_, 0);
  }
  __device__ SMPROF_FORCEINLINE ~ScopedRange() { Mark(ctx_, wire::kEventEnd, name_, 0); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  Ctx& ctx_;
  const char* name_;
};

template <>
class ScopedRange<smprof_no_context_t> {
 public:
  __device__ SMPROF_FORCEINLINE ScopedRange(smprof_no_context_t, const char* name) : name_(name) {
    Mark(smprof_ctx, wire::kEventBegin, name_, 0);
  }
  __device__ SMPROF_FORCEINLINE ~ScopedRange() { Mark(smprof_ctx, wire::kEventEnd, name_, 0); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  const char* name_;
};

template <typename Ctx>
ScopedRange(Ctx&, const char*) -> ScopedRange<Ctx>;
ScopedRange(smprof_no_context_t, const char*) -> ScopedRange<smprof_no_context_t>;

}  // namespace smprof::detail
#endif  // __CUDACC__
