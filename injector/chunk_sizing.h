// Chunk sizing: how many chunks a kernel's warps claim, at every chunk size,
// and which chunk size the arena uses until the next read-back.
//
// Every recording warp takes whole chunks, and each chunk is claimed with a
// global atomic whose round trip stalls the warp (on Hopper its warpgroup's
// wgmma with it). So the size pulls two ways: many warps that each write a
// few events fill the arena with empty slots at a large size (2048 warps x 2
// events took 2 MiB of 1 KiB chunks for 64 KiB of events), and warps that
// write many events claim again and again at a small one (256 events: 5
// claims of 1 KiB chunks per launch, one of 8 KiB; measured on an H100, a
// marked Triton matmul went from 1.166x to 1.136x of its unmarked time).
//
// The size is chosen per *generation* of the arena (the launches between two
// read-backs), at its first recording launch, from that launch's projected
// chunks at every size:
//   1. From the start size (kStartChunkShift, 1 KiB; SMPROF_CHUNK_BYTES when
//      smaller) down: the largest size at which they fit under the
//      high-water mark; when none fits, the size needing the fewest bytes.
//   2. Only when the start size fit, grow: double while the next size is at
//      most SMPROF_CHUNK_BYTES, still fits, and cuts the chunks to at most
//      3/4 (a doubling must save a quarter of the claims). Unknown kernels
//      (one chunk per warp at every size) and warps whose events already fit
//      one chunk stay where they are, so the slots wasted stay bounded.
//   3. Only when the start size fit and no growth was taken, shrink: halve
//      while neither that launch nor the kernels of the previous generation
//      (each with the warps it launched there) would claim a chunk more, and
//      no size below each kernel's shrink floor is taken. Warps of a few
//      events then take 256 bytes, not 1 KiB, in a program whose kernels all
//      write few (4,096 warps of two events: 1 MiB a launch instead of 4); a
//      program that also runs a dense kernel keeps the start size, since its
//      dense launches would otherwise claim 2-4 times as often. A kernel's
//      floor is the smallest size down to which no tally of its decoded
//      warps ever needed a chunk more, and it only rises: a kernel whose
//      warps write few events in one launch and many in another (a Triton
//      function called with several problem sizes) stops shrinking once it
//      was seen dense, rather than alternate between small chunks and many
//      claims. A kernel no tally has taught (one chunk per warp assumed at
//      every size) never shrinks.
// Later launches of the generation use the same size (chunks of one
// generation are all alike: the recorder tells a full chunk by its cursor
// reaching a multiple of the size); a launch that would not fit forces a
// drain first and then sizes the next generation.
//
// What a kernel claims is learned per compiled function (KernelInfo: Triton
// compiles one per specialisation, and a light one must not take a heavy
// one's chunks), and per kernel name for graph replays, at every size class
// at once from its decoded warps: a warp with e events in k chunks of size c0 needs
// ceil(e / slots(c)) chunks of size c, plus the chunks it took beyond
// ceil(e / slots(c0)) at c0 (a warp writes to a second chunk when a diverged
// marker goes to its shared-memory cursor). Unknown kernels count one chunk
// per launched warp at every size: the first launch of a kernel of many small
// warps already gets small chunks. A read-back, before its warps are
// decoded, sees only the chunks claimed at the generation's size: it rescales
// the kernel's rates at every size by what it saw, keeping their shape (set
// at one size alone, a dense kernel's level would make the sizes above, still
// at one chunk per warp, look a cheap place to grow to).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>

namespace smprof::injector {

inline constexpr uint32_t kMinChunkShift = 8;   // 256 bytes
inline constexpr uint32_t kMaxChunkShift = 16;  // 64 KiB
inline constexpr uint32_t kStartChunkShift = 10;  // 1 KiB: where a generation's sizing starts
inline constexpr int kChunkClasses = kMaxChunkShift - kMinChunkShift + 1;
// A doubling of the chunk size is taken only when it cuts claims to this.
inline constexpr double kGrowthClaims = 0.75;

inline constexpr int ChunkClassOf(uint32_t chunk_shift) { return static_cast<int>(chunk_shift - kMinChunkShift); }
inline constexpr uint32_t ChunkBytesOf(int chunk_class) { return 1u << (kMinChunkShift + chunk_class); }

// Chunks claimed per launched warp, by chunk class; lock-free (read on every
// launch, written by harvests).
class ClaimRates {
 public:
  ClaimRates() {
    for (auto& r : per_warp_) r.store(1.0f, std::memory_order_relaxed);
  }
  double at(int chunk_class) const { return per_warp_[chunk_class].load(std::memory_order_relaxed); }
  // The smallest chunk class a generation may shrink to for this kernel
  // (rule 3 above); kChunkClasses until a tally of decoded warps has taught
  // the rates (a read-back's level alone does not: their shape over the
  // sizes is then only assumed).
  int shrink_floor() const { return shrink_floor_.load(std::memory_order_acquire); }
  // A tally found that halving from `chunk_class` costs claims no lower:
  // the floor rises to it (or is set, the first time).
  void RaiseShrinkFloor(int chunk_class);
  void set(int chunk_class, double rate) { per_warp_[chunk_class].store(static_cast<float>(rate), std::memory_order_relaxed); }
  void set_all(double rate) {
    for (auto& r : per_warp_) r.store(static_cast<float>(rate), std::memory_order_relaxed);
  }
  // `rate` seen at `chunk_class` alone (a read-back): every class scaled
  // alike, so the others keep the shape the last tally taught.
  void Rescale(int chunk_class, double rate);

 private:
  std::array<std::atomic<float>, kChunkClasses> per_warp_;
  std::atomic<int> shrink_floor_{kChunkClasses};
};

// Accumulates one launch's warps, then teaches the rates.
class ClaimTally {
 public:
  // `observed_chunk_bytes`: the size of the chunks the warps were read in.
  explicit ClaimTally(uint32_t observed_chunk_bytes) : observed_slots_(SlotsOf(observed_chunk_bytes)) {}
  // One recording warp: `events` events in `chunks` chunks.
  void AddWarp(uint64_t events, uint32_t chunks);
  // Sets `rates` for `launched_warps` launched warps (nothing when 0) and
  // raises their shrink floor to what these warps allow.
  void Teach(uint64_t launched_warps, ClaimRates* rates) const;

  static uint64_t SlotsOf(uint32_t chunk_bytes);

 private:
  uint64_t observed_slots_;
  std::array<uint64_t, kChunkClasses> chunks_{};
};

// The chunk class for a generation, where `chunks_at(class)` chunks of that
// size must fit in `limit_bytes`: the largest class up to `start_class` (or
// `max_class` when smaller) that fits, or when none fits the class needing
// the fewest bytes; then, when the start class fit, each larger class up to
// `max_class` that fits and needs at most kGrowthClaims of the chunks of the
// class before it; when none did, each smaller class down to `shrink_floor`
// at which neither `chunks_at` nor `mix_at` (the chunks the previous
// generation's kernels would claim) needs more chunks. Without `mix_at`,
// no shrinking.
int ChooseChunkClass(const std::function<double(int)>& chunks_at, int start_class, int max_class, double limit_bytes,
                     const std::function<double(int)>& mix_at = {}, int shrink_floor = kChunkClasses);

}  // namespace smprof::injector
