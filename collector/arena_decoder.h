// Arena decoding: from the raw bytes of an arena read-back to warp segments
// with times.
//
// Pure functions, no CUDA: the injector ships the chunks it read back as they
// are (wire::ChunksMsg) and the launch assembler (launch_assembler.h) hands
// them here; tests hand in bytes they wrote themselves. Every byte is
// untrusted: a producer may be another version, or die mid-write.
//
//   DecodeChunks    arena chunks -> WarpSegments (one per chunk), validated:
//                   a chunk without kChunkMagic, or an event with a kind or
//                   flags its kind does not take (docs/device-api.md), is
//                   counted as malformed and skipped, never trusted. A wide
//                   value's continuation slot is folded into its event
//                   (value_high); one out of place is malformed. Unused
//                   (all-zero) slots are skipped wherever they are: a warp
//                   that raced a claim on a diverged path, or a wide event
//                   that did not fit its chunk, may leave one.
//   MapEventClocks  each event's %clock64 -> %globaltimer ns, through the
//                   anchors of the chunks of its SM (clock_map.h).
#pragma once

#include <cstdint>
#include <vector>

#include "smprof/wire.h"

namespace smprof::arena {

// One event as the host carries it.
struct DecodedEvent {
  uint64_t time_ns = 0;  // set by MapEventClocks, moved onto CUPTI's clock by MatchLaunches
  uint64_t clock = 0;    // %clock64 (56 bits)
  int32_t name_offset = 0;
  uint32_t info = 0;  // wire::EventKind | wire::EventFlags
  uint32_t value = 0;
  uint32_t value_high = 0;  // bits 32-63 of a wide value (wire::kEventWideValue), from its continuation slot
};

struct WarpSegment {
  uint64_t grid_id = 0;
  uint64_t name_base = 0;  // module g_name_base address: names are name_base + offset
  uint32_t block[3] = {0, 0, 0};
  uint16_t sm = 0;
  uint16_t warp = 0;
  uint8_t hw_warp = 0;  // %warpid
  uint8_t flags = 0;    // wire::ChunkFlags
  uint16_t cluster = 0;  // wire::ChunkHeader::cluster (masked to kClusterShapeMask)
  uint64_t anchor_clock = 0;
  uint64_t anchor_time_ns = 0;
  uint64_t name_generation = 0;      // of its context's modules when it was read back (wire::ChunksMsg)
  std::vector<DecodedEvent> events;  // recording order
};

struct DecodeStats {
  uint64_t chunks = 0;
  uint64_t events = 0;
  uint64_t empty_chunks = 0;  // claimed but never written: a header of zeros (see DecodeChunks)
  uint64_t malformed_chunks = 0;
  uint64_t malformed_events = 0;
};

namespace internal {
// Whether an event's kind and flags (Event::info bits 0-7) go together; a
// continuation (kEventValueHigh) is well formed only after its wide event.
bool WellFormedEvent(uint32_t kind_flags);
}  // namespace internal

// The part of one chunk that was read: its first `bytes` bytes (the rest
// were zero: never written, wire::kChunksUsedBytes).
struct ChunkPart {
  const uint8_t* data = nullptr;
  uint32_t bytes = 0;
};

// Appends `chunk`'s segment to *out if it is valid and not empty. A chunk
// whose header is all zero (or that has no bytes) is empty, not malformed: a
// Triton warp claims its first chunk at the kernel's start
// (python/smprof/triton/_marker_ptx.py) and may then reach no marker; the
// arena is zero wherever nothing was written.
void DecodeChunk(ChunkPart chunk, uint32_t chunk_bytes, std::vector<WarpSegment>* out, DecodeStats* stats);

// `chunks` holds `num_chunks` whole chunks of `chunk_bytes` each (a power of
// two >= 64): one segment per valid, non-empty chunk, in order.
void DecodeChunks(const uint8_t* chunks, uint32_t num_chunks, uint32_t chunk_bytes, std::vector<WarpSegment>* out,
                  DecodeStats* stats);

// Sets every event's time_ns from its clock and the anchors of all segments
// on its SM; `fallback_cycles_per_ns` is the SM clock in GHz (measured, or
// nominal), used where an SM's anchors span too little time to fit a rate.
// Split over up to `threads` threads (this one and threads - 1 started for
// the call) when there are at least kSegmentsPerMapThread segments per
// thread: the same times.
void MapEventClocks(std::vector<WarpSegment>* segments, double fallback_cycles_per_ns, unsigned threads = 1);
inline constexpr size_t kSegmentsPerMapThread = 16384;

// DecodeChunk for every part, the work split over up to `threads` threads
// when there are at least kChunksPerDecodeThread chunks per thread: the same
// segments, in the same order.
void DecodeChunks(const std::vector<ChunkPart>& chunks, uint32_t chunk_bytes, unsigned threads,
                  std::vector<WarpSegment>* out, DecodeStats* stats);
inline constexpr uint32_t kChunksPerDecodeThread = 16384;

}  // namespace smprof::arena
