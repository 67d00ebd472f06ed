#include "injector/chunk_sizing.h"

#include <algorithm>

#include "smprof/wire.h"

namespace smprof::injector {
namespace {

uint64_t ChunksFor(uint64_t events, uint64_t slots) { return (events + slots - 1) / slots; }

}  // namespace

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
}

int ChooseChunkClass(const std::function<double(int)>& chunks_at, int max_class, double limit_bytes) {
  int fewest = max_class;
  double fewest_bytes = -1;
  for (int c = max_class; c >= 0; --c) {
    const double bytes = chunks_at(c) * ChunkBytesOf(c);
    if (bytes <= limit_bytes) return c;
    if (fewest_bytes < 0 || bytes < fewest_bytes) {
      fewest = c;
      fewest_bytes = bytes;
    }
  }
  return fewest;
}

}  // namespace smprof::injector
