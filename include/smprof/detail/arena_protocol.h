// The arena protocol as words: a chunk's address, its header and an event as
// the 64-bit stores that write them (the structs and constants are
// smprof/wire.h's). Every writer of an arena builds its stores here: the
// device recorder (record.cuh), the injector tests' fake GPU
// (tests/fakes/fake_gpu.h) and the decoder tests' arena builder
// (tests/support/arena_builder.h); the readers (collector/arena_decoder.h,
// injector/chunk_scan.h) read the structs, whose layout wire.h pins.
//
// Plain arithmetic on integers, inlined: the recorder's code is what it was
// written out by hand.
#pragma once

#include <cstdint>

#include "smprof/detail/macros.h"
#include "smprof/wire.h"

namespace smprof::protocol {

// Chunk `index` of the generation's chunks (each 1 << `chunk_shift` bytes).
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE constexpr uint64_t ChunkAddress(uint64_t chunks, uint32_t index,
                                                                      uint32_t chunk_shift) {
  return chunks + (static_cast<uint64_t>(index) << chunk_shift);
}

// A chunk header is three 16-byte stores of two words each:
//   [0] grid id, [1] name base, [2] BlockWord, [3] WarpWord, [4] anchor
//   %clock64, [5] anchor %globaltimer.
inline constexpr uint32_t kChunkHeaderWords = sizeof(wire::ChunkHeader) / sizeof(uint64_t);

// ChunkHeader::block_x, block_y, block_z.
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE constexpr uint64_t BlockWord(uint32_t x, uint32_t y, uint32_t z) {
  return static_cast<uint64_t>(x) | (static_cast<uint64_t>(y) << 32) | (static_cast<uint64_t>(z) << 48);
}

// ChunkHeader::sm, warp, magic (written with them: the header's last word to
// say it is whole), hw_warp, flags; cluster 0 (one CTA per cluster).
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE constexpr uint64_t WarpWord(uint32_t sm, uint32_t warp, uint32_t hw_warp,
                                                                  uint32_t flags) {
  return static_cast<uint64_t>(sm & 0xffff) | (static_cast<uint64_t>(warp) << 16) |
         (static_cast<uint64_t>(wire::kChunkMagic) << 24) | (static_cast<uint64_t>(hw_warp & 0xff) << 32) |
         (static_cast<uint64_t>(flags) << 40);
}

// An event's first word: wire::Event::clock_lo and info (the clock's bits
// 32 and up, shifted, with the kind and flags).
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE constexpr uint64_t EventLow(uint64_t clock, uint32_t kind_flags) {
  const uint32_t info = (static_cast<uint32_t>(clock >> 32) << wire::kEventClockShift) | kind_flags;
  return static_cast<uint32_t>(clock) | (static_cast<uint64_t>(info) << 32);
}

// Its second word: wire::Event::name_offset (from the module's name base)
// and value.
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE constexpr uint64_t EventHigh(uint32_t name_offset, uint32_t value) {
  return name_offset | (static_cast<uint64_t>(value) << 32);
}

// A wide value's continuation slot (wire::kEventValueHigh) after the event
// whose first word is `low`: the same clock, bits 32-63 of the value, no name.
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE constexpr uint64_t ContinuationLow(uint64_t low) {
  return (low & ~(uint64_t{0xff} << 32)) | (static_cast<uint64_t>(wire::kEventValueHigh) << 32);
}
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE constexpr uint64_t ContinuationHigh(uint32_t value_high) {
  return static_cast<uint64_t>(value_high) << 32;
}

}  // namespace smprof::protocol
