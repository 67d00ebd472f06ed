// ChunkScan: what the injector must know of a read-back before it ships the
// chunks as they are (the collector decodes them: collector/arena_decoder.h).
//
//   - the marker names its events use: read from the modules' memory while
//     they are loaded (device addresses name_base + name_offset, distinct);
//   - how many events it holds: what is lost if it cannot be shipped;
//   - what each launch's warps wrote (events and chunks per warp, by grid
//     id): the chunk sizing of the kernel's next launches (chunk_sizing.h).
//
// One pass over the chunk headers and event words; events are not
// validated (the collector does that, and counts what it rejects): a chunk
// without kChunkMagic is skipped, an all-zero one counted empty.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace smprof::injector {

struct WarpTally {
  uint64_t events = 0;
  uint32_t chunks = 0;
};

struct ChunkScan {
  uint64_t chunks = 0;
  uint64_t events = 0;
  uint64_t empty_chunks = 0;
  std::vector<uint64_t> name_addresses;  // distinct, in first-use order
  // Per grid id, the warps that recorded (keyed by block and warp; graph
  // replays of one grid id add up).
  std::unordered_map<uint64_t, std::vector<WarpTally>> warps_by_grid;
};

// Scans `num_chunks` chunks of `chunk_bytes` each. `tally`: also fill
// warps_by_grid (a hash per chunk; names and events cost one pass alone).
ChunkScan ScanChunks(const uint8_t* chunks, uint64_t num_chunks, uint32_t chunk_bytes, bool tally);

}  // namespace smprof::injector
