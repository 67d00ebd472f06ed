// Test-only writer of arena chunks as the device recorder writes them, with
// its words (include/smprof/detail/arena_protocol.h): headers, 16-byte events and
// the Triton markers' compact 8-byte slots. Shared by the arena decoder's,
// the launch assembler's and the chunk scan's tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "smprof/detail/arena_protocol.h"
#include "smprof/wire.h"

namespace smprof::testing {

class ArenaBuilder {
 public:
  // `chunks` chunks of `chunk_bytes` each (the arena decoder's tests use 256:
  // 3 header slots and 13 events).
  explicit ArenaBuilder(uint32_t chunks, uint32_t chunk_bytes = 256)
      : chunk_(chunk_bytes), bytes_(static_cast<size_t>(chunks) * chunk_bytes, 0) {}

  // Writes a chunk header like ClaimChunk does; returns the chunk index. The
  // default anchor (clock 0 at time 0) makes clocks read as nanoseconds with
  // a rate of 1 cycle/ns.
  uint32_t Claim(uint64_t grid, uint32_t bx, uint16_t warp, uint16_t sm, uint64_t name_base = 0x1000,
                 uint64_t anchor_clock = 0, uint64_t anchor_time = 0, uint8_t flags = 0) {
    const uint32_t c = next_++;
    const uint64_t words[protocol::kChunkHeaderWords] = {
        grid, name_base, protocol::BlockWord(bx, 0, 0), protocol::WarpWord(sm, warp, warp + 40u, flags),
        anchor_clock, anchor_time};
    std::memcpy(At(c, 0), words, sizeof(words));
    fill_.push_back(wire::kChunkHeaderSlots);
    return c;
  }
  // Writes an event the way the recorder packs it.
  void Add(uint32_t chunk, uint64_t clock, int32_t name, uint32_t kind, uint32_t value = 0) {
    const uint64_t words[2] = {protocol::EventLow(clock, kind),
                               protocol::EventHigh(static_cast<uint32_t>(name), value)};
    std::memcpy(At(chunk, fill_[chunk]++), words, sizeof(words));
  }
  void Skip(uint32_t chunk) { ++fill_[chunk]; }  // leaves an unused slot
  // Claims a chunk and writes nothing (a Triton warp's first chunk, claimed
  // at the kernel's start, when the warp then reaches no marker).
  uint32_t ClaimUnwritten() {
    fill_.push_back(0);
    return next_++;
  }
  // Writes 8-byte slot `slot` of a kChunkCompact chunk (0-5 are the header).
  void Compact(uint32_t chunk, uint32_t slot, uint32_t word0, uint32_t word1) {
    const wire::CompactEvent e{word0, word1};
    std::memcpy(bytes_.data() + size_t{chunk} * chunk_ + slot * sizeof(e), &e, sizeof(e));
  }
  uint8_t* At(uint32_t chunk, uint32_t slot) { return bytes_.data() + size_t{chunk} * chunk_ + slot * 16; }
  const uint8_t* data() const { return bytes_.data(); }
  uint32_t used() const { return next_; }

  uint32_t chunk_bytes() const { return chunk_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  uint32_t chunk_;
  std::vector<uint8_t> bytes_;
  std::vector<uint32_t> fill_;
  uint32_t next_ = 0;
};

}  // namespace smprof::testing
