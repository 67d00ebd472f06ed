#include "injector/chunk_sizing.h"

#include <algorithm>

#include "smprof/wire.h"

namespace smprof::injector {
namespace {

uint64_t ChunksFor(uint64_t events, uint64_t slots) { return (events + slots - 1) / slots; }

// From `from`, which fits: each claim stalls its warp, so double while that
// saves a quarter of the claims and still fits. A kernel that claims nothing
// has nothing to save.
int Grow(const std::function<double(int)>& chunks_at, int from, int max_class, double limit_bytes) {
  int c = from;
  double chunks = chunks_at(c);
  while (c < max_class && chunks > 0) {
    const double next = chunks_at(c + 1);
    if (next > kGrowthClaims * chunks || next * ChunkBytesOf(c + 1) > limit_bytes) break;
    ++c;
    chunks = next;
  }
  return c;
}

// Halving from `larger` to `smaller` chunks costs no claim. Rates are
// averages over warps: a relative tolerance absorbs their rounding.
bool NoMore(double smaller, double larger) { return smaller <= larger * (1 + 1e-6); }

// From `from`: halve, down to `floor`, while no one claims more for it
// (fewer bytes, so it still fits).
int Shrink(const std::function<double(int)>& chunks_at, const std::function<double(int)>& mix_at, int from,
           int floor) {
  int c = from;
  while (c > floor && NoMore(chunks_at(c - 1), chunks_at(c)) && NoMore(mix_at(c - 1), mix_at(c))) --c;
  return c;
}

}  // namespace

void ClaimRates::RaiseShrinkFloor(int chunk_class) {
  // kChunkClasses (never taught) gives way to the first tally's floor.
  int floor = shrink_floor_.load(std::memory_order_acquire);
  while ((floor == kChunkClasses || floor < chunk_class) &&
         !shrink_floor_.compare_exchange_weak(floor, chunk_class, std::memory_order_acq_rel)) {
  }
}

void ClaimRates::Rescale(int chunk_class, double rate) {
  const double was = at(chunk_class);
  if (was <= 0) return set_all(rate);  // nothing claimed before: no shape to keep
  for (int c = 0; c < kChunkClasses; ++c) set(c, at(c) * rate / was);
}

uint64_t ClaimTally::SlotsOf(uint32_t chunk_bytes) {
  return chunk_bytes / sizeof(wire::Event) - wire::kChunkHeaderSlots;
}

void ClaimTally::AddWarp(uint64_t events, uint32_t chunks) {
  if (events == 0) return;
  const uint64_t beyond = chunks > ChunksFor(events, observed_slots_) ? chunks - ChunksFor(events, observed_slots_) : 0;
  for (int c = 0; c < kChunkClasses; ++c) chunks_[c] += ChunksFor(events, SlotsOf(ChunkBytesOf(c))) + beyond;
}

void ClaimTally::Teach(uint64_t launched_warps, ClaimRates* rates) const {
  if (launched_warps == 0) return;
  for (int c = 0; c < kChunkClasses; ++c) {
    rates->set(c, static_cast<double>(chunks_[c]) / static_cast<double>(launched_warps));
  }
  int floor = kChunkClasses - 1;
  while (floor > 0 && NoMore(static_cast<double>(chunks_[floor - 1]), static_cast<double>(chunks_[floor]))) --floor;
  rates->RaiseShrinkFloor(floor);
}

int ChooseChunkClass(const std::function<double(int)>& chunks_at, int start_class, int max_class, double limit_bytes,
                     const std::function<double(int)>& mix_at, int shrink_floor) {
  const int start = std::min(start_class, max_class);
  int fewest = start;
  double fewest_bytes = -1;
  for (int c = start; c >= 0; --c) {
    const double bytes = chunks_at(c) * ChunkBytesOf(c);
    if (bytes <= limit_bytes) {
      if (c != start) return c;
      const int grown = Grow(chunks_at, c, max_class, limit_bytes);
      return grown == start && mix_at ? Shrink(chunks_at, mix_at, start, shrink_floor) : grown;
    }
    if (fewest_bytes < 0 || bytes < fewest_bytes) {
      fewest = c;
      fewest_bytes = bytes;
    }
  }
  return fewest;
}

}  // namespace smprof::injector
