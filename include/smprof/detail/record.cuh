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

#include "smprof/detail/arena_protocol.h"
#include "smprof/detail/macros.h"
#include "smprof/detail/options.h"
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

// The two 64-bit halves of a wire::Event (arena_protocol.h).
__device__ SMPROF_FORCEINLINE uint64_t EventLow(uint64_t clock, uint32_t kind_flags) {
  return protocol::EventLow(clock, kind_flags);
}

__device__ SMPROF_FORCEINLINE uint64_t EventHigh(const char* name, uint32_t value) {
  const auto offset = static_cast<uint32_t>(reinterpret_cast<intptr_t>(name) -
                                            reinterpret_cast<intptr_t>(&g_name_base<kAbiVersion>));
  return protocol::EventHigh(offset, value);
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

// An event of kSlots slots (2: a wide value and its continuation) at `dst`.
template <uint32_t kSlots>
__device__ SMPROF_FORCEINLINE void StoreEventIf(bool pred, uint64_t dst, uint64_t lo, uint64_t hi, uint32_t high) {
  Store16If(pred, dst, lo, hi);
  if constexpr (kSlots == 2) {
    Store16If(pred, dst + sizeof(wire::Event), protocol::ContinuationLow(lo), protocol::ContinuationHigh(high));
  }
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
  const uint64_t base = protocol::ChunkAddress(ref.chunks, chunk, ref.chunk_shift);
  const uint64_t clock = sreg::Clock64();
  const uint64_t time = sreg::GlobalTimer();
  const uint64_t w2 = protocol::BlockWord(sreg::CtaidX(), sreg::CtaidY(), sreg::CtaidZ());
  const uint64_t w3 = protocol::WarpWord(sreg::SmId(), WarpIndex(), sreg::WarpSlot(), flags);
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
// never diverge inside. An event takes kSlots consecutive slots of one chunk
// (a wide value's pair is never split: a slot range that does not fit claims
// a new chunk).
template <uint32_t kSlots>
__device__ SMPROF_RECORDER_SLOW_PATH void RecordDiverged(uint64_t lo, uint64_t hi, uint32_t high, unsigned active) {
  constexpr uint32_t kBytes = kSlots * static_cast<uint32_t>(sizeof(wire::Event));
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
  // The leader takes its slots only from its own block's cursor.
  uint32_t slot = 0;
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %1, 0;\n @p atom.shared.add.u32 %0, [%2+8], %3;\n}"
               : "+r"(slot)
               : "r"(static_cast<uint32_t>(leader && own)), "r"(addr), "n"(kBytes)
               : "memory");
  // The verdict: a slot offset (>= the chunk header), 0 = claim, 1 = arena full.
  const uint32_t chunk_bytes = 1u << ref.chunk_shift;
  uint32_t verdict = 0;
  if (own && end == 0) {
    verdict = 1;
  } else if (own && slot + kBytes <= end &&
             slot + chunk_bytes >= end + static_cast<uint32_t>(sizeof(wire::ChunkHeader))) {
    verdict = slot;
  }
  verdict = __shfl_sync(active, verdict, leader_lane);
  if (verdict > 1) {
    StoreEventIf<kSlots>(leader, ref.chunks + verdict, Restamped(lo), hi, high);
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
                   "l"(static_cast<uint64_t>(next + kBytes) | (static_cast<uint64_t>(chunk_end) << 32))
                   : "memory");
      StoreEventIf<kSlots>(true, first, Restamped(lo), hi, high);
    }
  }
  __syncwarp(active);
}

// A marker without a context. Inline: the converged, in-chunk case is a
// shared load, a compare against the block's tag, a predicated store and a
// shared store, and falls through; everything else takes one rare branch
// to the slow path (a taken branch costs a marker ~15 cycles on H100, so the
// common case must not take one).
template <uint32_t kSlots>
__device__ SMPROF_FORCEINLINE void RecordFromCursor(uint32_t kind_flags, uint64_t clock, uint64_t hi, uint32_t high,
                                                    unsigned active) {
  constexpr uint32_t kBytes = kSlots * static_cast<uint32_t>(sizeof(wire::Event));
  const wire::ArenaRef& ref = Ref();
  wire::WarpCursor* cursor = &Cursors()[WarpIndex()];
  const uint64_t tag = cursor->tag;
  const uint32_t next = cursor->next;
  const uint32_t end = cursor->end;
  if (__builtin_expect(
          (active != WarpLanes()) | (tag != WarpTag(sreg::GridId(), ref.epoch)) | (next + (kBytes - 16) >= end), 0)) {
    RecordDiverged<kSlots>(EventLow(clock, kind_flags), hi, high, active);
    return;
  }
  cursor->next = next + kBytes;
  const bool lane0 = sreg::LaneId() == 0;  // before a BEGIN's late stamp (see Context::Record)
  const uint64_t stamp = StampsLate(kind_flags) ? sreg::Clock64() : clock;
  StoreEventIf<kSlots>(lane0, ref.chunks + next, EventLow(stamp, kind_flags), hi, high);
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
// its lanes keep agreeing), or the cursor is at a chunk boundary, or a wide
// event finds one slot left (lane 0 claims a chunk, every lane gets the new
// cursor; a slot left over stays empty). Returns the cursor.
template <uint32_t kSlots>
__device__ SMPROF_RECORDER_SLOW_PATH uint64_t RecordContextSlow(uint64_t cursor, uint64_t lo, uint64_t hi,
                                                                uint32_t high, unsigned active, unsigned lanes) {
  if (active != lanes) {
    RecordDiverged<kSlots>(lo, hi, high, active);
    return cursor;
  }
  const wire::ArenaRef& ref = Ref();
  uint64_t result = cursor;
  if (sreg::LaneId() == 0) {
    if (ref.chunks == 0 || ref.num_chunks == 0) {
      Count(ref.arena, offsetof(wire::ArenaHeader, unplaced_events));  // raced the publication: retry later
    } else if (cursor != kCursorArenaFull && (result = ClaimChunk(0)) != 0) {
      StoreEventIf<kSlots>(true, result, Restamped(lo), hi, high);
      result += kSlots * sizeof(wire::Event);
    } else {
      result = kCursorArenaFull;
      Count(ref.arena, offsetof(wire::ArenaHeader, dropped_events));
    }
  }
  return __shfl_sync(active, result, 0);
}

// No predicate: every marker of a recording warp records.
struct Always {
  __device__ SMPROF_FORCEINLINE bool operator()() const { return true; }
};

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

  // An event of kSlots slots; `pred` (called only when the warp records)
  // is voted on by the active lanes: the event is recorded when it holds
  // on any of them.
  template <uint32_t kSlots, typename Pred>
  __device__ SMPROF_FORCEINLINE void Record(uint32_t kind_flags, const char* name, uint32_t value, uint32_t high,
                                            Pred pred) {
    if (cursor_ == 0) return;  // not recording: one compare of a register
    const bool late = detail::StampsLate(kind_flags);
    const unsigned active = __activemask();
    // The vote before the clock read, and a uniform branch on it: a marker
    // whose predicate fails costs the vote and the branch (measured: cheaper
    // than predicating the store and the cursor's advance on the vote, when
    // the predicate holds too, at full occupancy); one that records is
    // stamped after the vote.
    if constexpr (!std::is_same<Pred, detail::Always>::value) {
      if (!__any_sync(active, pred())) return;  // uniform: every lane gets the vote
    }
    const uint64_t clock = detail::sreg::Clock64();
    const uint64_t lo = detail::EventLow(clock, kind_flags);
    const uint64_t hi = detail::EventHigh(name, value);
    // One rare branch: diverged, or at a chunk boundary, or (wide) one slot
    // before it (`|`, not `||`: one predicate, one branch).
    const uint32_t mask = detail::ChunkMask(detail::Ref());
    bool rare = (active != lanes_) | ((static_cast<uint32_t>(cursor_) & mask) == 0);
    if constexpr (kSlots == 2) rare |= ((static_cast<uint32_t>(cursor_) + sizeof(wire::Event)) & mask) == 0;
    if (__builtin_expect(rare, 0)) {
      cursor_ = detail::RecordContextSlow<kSlots>(cursor_, lo, hi, high, active, lanes_);
      return;
    }
    // %laneid before a BEGIN's late stamp: its read latency stays outside the range.
    const bool lane0 = detail::sreg::LaneId() == 0;
    const uint64_t stamp = late ? detail::sreg::Clock64() : clock;
    detail::StoreEventIf<kSlots>(lane0, cursor_, detail::EventLow(stamp, kind_flags), hi, high);
    cursor_ += kSlots * sizeof(wire::Event);
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

template <uint32_t kSlots, typename Pred>
__device__ SMPROF_FORCEINLINE void Record(smprof_no_context_t, uint32_t kind_flags, const char* name, uint32_t value,
                                          uint32_t high, Pred pred) {
  const wire::ArenaRef& ref = Ref();
  if (ref.arena == 0) return;  // not profiling: one constant load and a uniform branch
  if constexpr (std::is_same<Pred, Always>::value) {
    const uint64_t clock = sreg::Clock64();  // before the warp test: see Context::Record
    if (!WarpSelected(ref)) return;
    RecordFromCursor<kSlots>(kind_flags, clock, EventHigh(name, value), high, __activemask());
  } else {
    if (!WarpSelected(ref)) return;
    const unsigned active = __activemask();
    if (!__any_sync(active, pred())) return;  // before the clock read, as in Context::Record
    RecordFromCursor<kSlots>(kind_flags, sreg::Clock64(), EventHigh(name, value), high, active);
  }
}

template <uint32_t kSlots, typename Pred>
__device__ SMPROF_FORCEINLINE void Record(Context& ctx, uint32_t kind_flags, const char* name, uint32_t value,
                                          uint32_t high, Pred pred) {
  ctx.template Record<kSlots>(kind_flags, name, value, high, pred);
}

// ---------------------------------------------------------------------------
// Options (options.h) applied to one marker.
// ---------------------------------------------------------------------------

struct Applied {
  uint32_t flags = 0;
  uint64_t value = 0;
};

__device__ SMPROF_FORCEINLINE void ApplyValue(Applied&, When) {}
__device__ SMPROF_FORCEINLINE void ApplyValue(Applied&, OnWarps) {}
template <typename T>
__device__ SMPROF_FORCEINLINE void ApplyValue(Applied& a, ValueOption<T> v) {
  a.flags |= wire::kEventHasValue | (sizeof(T) == 8 ? wire::kEventWideValue : 0u);
  a.value = sizeof(T) == 8 ? static_cast<uint64_t>(v.v) : static_cast<uint64_t>(static_cast<uint32_t>(v.v));
}
__device__ SMPROF_FORCEINLINE void ApplyValue(Applied& a, ArgOption arg) {
  a.flags |= wire::kEventNameValue;
  a.value = arg.n;
}

// Who records, from the when/on_warp(s) options: the conditions are the
// user's values; the warp's index (kWarps: an on_warp(s) option was given)
// is computed only when the marker records, from the compiler's threadIdx
// and blockDim (which the kernel's own role choice usually has in registers
// already), not from the recorder's volatile %tid reads.
template <bool kWarps>
struct Gate {
  bool when = true;
  uint32_t first = 0;  // warps [first, end) of each block
  uint32_t end = ~0u;
  __device__ SMPROF_FORCEINLINE bool Holds() const {
    if constexpr (kWarps) {
      const uint32_t warp = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) >> 5;
      return when && warp >= first && warp < end;
    } else {
      return when;
    }
  }
};
template <typename... Opts>
using GateOf = Gate<(false || ... || std::is_same<Opts, OnWarps>::value)>;

template <bool kWarps>
__device__ SMPROF_FORCEINLINE void Narrow(Gate<kWarps>& g, When w) {
  g.when = g.when && w.ok;
}
template <bool kWarps>
__device__ SMPROF_FORCEINLINE void Narrow(Gate<kWarps>& g, OnWarps o) {
  g.first = o.first > g.first ? o.first : g.first;
  const uint32_t end = o.first + o.count < o.first ? ~0u : o.first + o.count;
  g.end = end < g.end ? end : g.end;
}
template <bool kWarps, typename T>
__device__ SMPROF_FORCEINLINE void Narrow(Gate<kWarps>&, ValueOption<T>) {}
template <bool kWarps>
__device__ SMPROF_FORCEINLINE void Narrow(Gate<kWarps>&, ArgOption) {}

// Every marker: kind, name, the base value (a token; 0 otherwise), options.
// `Ctx` is Context& or smprof_no_context_t (the enumerator `smprof_ctx`).
template <uint32_t kKind, uint32_t kFlags, typename Ctx, typename... Opts>
__device__ SMPROF_FORCEINLINE void MarkWith(Ctx&& ctx, const char* name, uint32_t token, const Opts&... opts) {
  using Pack = OptionPack<Opts...>;
  Applied a;
  (ApplyValue(a, opts), ...);
  const uint32_t kind_flags = kKind | kFlags | a.flags;
  const uint32_t value = Pack::kValues + Pack::kArgs != 0 ? static_cast<uint32_t>(a.value) : token;
  const uint32_t high = static_cast<uint32_t>(a.value >> 32);
  constexpr uint32_t kSlots = Pack::kWide ? 2 : 1;
  if constexpr (Pack::kPredicated) {
    GateOf<Opts...> g;
    (Narrow(g, opts), ...);
    Record<kSlots>(ctx, kind_flags, name, value, high, [g]() { return g.Holds(); });
  } else {
    Record<kSlots>(ctx, kind_flags, name, value, high, Always{});
  }
}

template <uint32_t kKind, typename Ctx, size_t N, typename... Opts>
__device__ SMPROF_FORCEINLINE void Mark(Ctx&& ctx, const char (&name)[N], const Opts&... opts) {
  using Pack = OptionPack<Opts...>;
  static_assert(Pack::kValues == 0 || kKind == wire::kEventEnd || kKind == wire::kEventInstant,
                "smprof::value goes on SMPROF_END, SMPROF_INSTANT or SMPROF_COUNTER");
  static_assert(Pack::kArgs == 0 || kKind == wire::kEventBegin || kKind == wire::kEventEnd ||
                    kKind == wire::kEventInstant || kKind == wire::kEventPhase,
                "smprof::arg goes on a named range, instant or phase");
  MarkWith<kKind, 0>(ctx, name, 0, opts...);
}

template <typename Ctx, size_t N, typename T, typename... Opts>
__device__ SMPROF_FORCEINLINE void Counter(Ctx&& ctx, const char (&name)[N], T v, const Opts&... opts) {
  using Pack = OptionPack<Opts...>;
  static_assert(Pack::kValues == 0 && Pack::kArgs == 0, "SMPROF_COUNTER(name, value, ...) takes its value once");
  MarkWith<wire::kEventInstant, wire::kEventCounter>(ctx, name, 0, smprof::value(v), opts...);
}

template <uint32_t kKind, typename Ctx, size_t N, typename T, typename... Opts>
__device__ SMPROF_FORCEINLINE void Async(Ctx&& ctx, const char (&name)[N], T token, const Opts&... opts) {
  static_assert(std::is_integral<T>::value || std::is_enum<T>::value, "an async span's token is an integer");
  static_assert(sizeof(T) <= 4, "an async span's token is a 32-bit integer");
  using Pack = OptionPack<Opts...>;
  static_assert(Pack::kValues == 0 && Pack::kArgs == 0, "async spans take smprof::when and on_warp(s) only");
  MarkWith<kKind, 0>(ctx, name, static_cast<uint32_t>(token), opts...);
}

// How a marker object keeps the context it records through: a reference to
// a Context, or nothing for the shared-memory cursor.
template <typename Ctx>
struct ContextRef {
  Ctx& ctx;
  __device__ SMPROF_FORCEINLINE Ctx& get() const { return ctx; }
};
template <>
struct ContextRef<smprof_no_context_t> {
  __device__ SMPROF_FORCEINLINE smprof_no_context_t get() const { return smprof_ctx; }
};
__device__ SMPROF_FORCEINLINE ContextRef<Context> RefTo(Context& ctx) { return ContextRef<Context>{ctx}; }
__device__ SMPROF_FORCEINLINE ContextRef<smprof_no_context_t> RefTo(smprof_no_context_t) {
  return ContextRef<smprof_no_context_t>{};
}

// SMPROF_PHASE_END(options...): a call on this object, so that the macro
// works with no argument at all.
template <typename Ctx>
struct PhaseEnder {
  ContextRef<Ctx> ref;
  template <typename... Opts>
  __device__ SMPROF_FORCEINLINE void operator()(const Opts&... opts) const {
    using Pack = OptionPack<Opts...>;
    static_assert(Pack::kValues == 0 && Pack::kArgs == 0, "SMPROF_PHASE_END takes smprof::when and on_warp(s) only");
    MarkWith<wire::kEventPhaseEnd, 0>(ref.get(), "", 0, opts...);
  }
};
template <typename Ctx>
__device__ SMPROF_FORCEINLINE auto EndPhase(Ctx&& ctx) {
  return PhaseEnder<std::decay_t<Ctx>>{RefTo(ctx)};
}

// Scoped range: begin on construction, end on destruction. The END is
// recorded under the BEGIN's predicate (voted again: the same result unless
// lanes exited inside the range) with the BEGIN's name integer.
template <typename Ctx, bool kPredicated, typename G>
class ScopedRange {
 public:
  __device__ SMPROF_FORCEINLINE ScopedRange(ContextRef<Ctx> ref, const char* name, G gate, uint32_t name_flags,
                                            uint32_t arg)
      : ref_(ref), name_(name), arg_(arg), name_flags_(name_flags), gate_(gate) {}
  __device__ SMPROF_FORCEINLINE ~ScopedRange() {
    if constexpr (kPredicated) {
      const G g = gate_;
      Record<1>(ref_.get(), wire::kEventEnd | name_flags_, name_, arg_, 0u, [g]() { return g.Holds(); });
    } else {
      Record<1>(ref_.get(), wire::kEventEnd | name_flags_, name_, arg_, 0u, Always{});
    }
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  ContextRef<Ctx> ref_;
  const char* name_;
  uint32_t arg_;
  uint32_t name_flags_;
  G gate_;
};

template <typename Ctx, size_t N, typename... Opts>
__device__ SMPROF_FORCEINLINE ScopedRange<std::decay_t<Ctx>, OptionPack<Opts...>::kPredicated, GateOf<Opts...>>
OpenRange(Ctx&& ctx, const char (&name)[N], const Opts&... opts) {
  using Pack = OptionPack<Opts...>;
  static_assert(Pack::kValues == 0, "a scoped range takes no smprof::value: give it to SMPROF_END");
  Applied a;
  (ApplyValue(a, opts), ...);
  MarkWith<wire::kEventBegin, 0>(ctx, name, 0, opts...);
  GateOf<Opts...> g;
  (Narrow(g, opts), ...);
  return ScopedRange<std::decay_t<Ctx>, Pack::kPredicated, GateOf<Opts...>>(RefTo(ctx), name, g, a.flags,
                                                                            static_cast<uint32_t>(a.value));
}

}  // namespace smprof::detail
#endif  // __CUDACC__
