// ChunkScanner: what the injector must know of a read-back before it ships
// its chunks (the collector decodes them: collector/arena_decoder.h).
//
//   - the marker names its events use: read from the modules' memory while
//     they are loaded (device addresses name_base + name_offset, distinct);
//   - how many events it holds: what is lost if it cannot be shipped;
//   - how much of each chunk was written: a chunk ships up to its last
//     written slot (wire::kChunksUsedBytes), so a warp that wrote two
//     events costs the host two events, not its chunk;
//   - what each launch's warps wrote (events and chunks per warp, by grid
//     id): the chunk sizing of the kernel's next launches (chunk_sizing.h).
//     Warps are sampled by a hash of their identity (all chunks of a
//     sampled warp count), so a read-back of millions of chunks tallies
//     about kTallyWarps warps.
//
// One pass over the chunk headers and event words, piece by piece (a
// read-back comes to host memory in pieces), each chunk's unwritten tail
// skipped 64 bytes at a time; events are not validated (the
// collector does that, and counts what it rejects): a chunk without
// kChunkMagic ships whole, an all-zero one is counted empty and ships as
// nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace smprof::injector {

struct WarpTally {
  uint64_t events = 0;
  uint32_t chunks = 0;
};

class ChunkScanner {
 public:
  // `expected_chunks`: the read-back's size, which sets the tally's sampling.
  ChunkScanner(uint32_t chunk_bytes, uint64_t expected_chunks);

  // Scans `count` chunks; appends each one's written bytes (a multiple of 8;
  // 0 for an empty chunk) to *used_bytes. With `threads` > 1, a batch of
  // kBytesPerThread or more is split over up to that many threads (this one
  // and the others started for the call), at least kBytesPerThread each:
  // the same result.
  void Add(const uint8_t* chunks, uint64_t count, std::vector<uint32_t>* used_bytes, unsigned threads = 1);
  static constexpr uint64_t kBytesPerThread = uint64_t{1} << 20;

  uint64_t chunks() const { return chunks_; }
  uint64_t events() const { return events_; }
  uint64_t empty_chunks() const { return empty_; }
  uint64_t used_bytes() const { return used_; }  // what ships of the chunks
  const std::vector<uint64_t>& name_addresses() const { return names_; }  // distinct, in first-use order
  // The sampled warps by grid id, and the fraction of warps sampled (1/N).
  std::unordered_map<uint64_t, std::vector<WarpTally>> TallyByGrid() const;
  uint32_t tally_one_in() const { return sample_mask_ + 1; }

  static constexpr uint64_t kTallyWarps = 65536;

 private:
  struct WarpKey {
    uint64_t grid;
    uint32_t block_x;
    uint32_t block_yz;
    uint32_t warp;
    bool operator==(const WarpKey& o) const {
      return grid == o.grid && block_x == o.block_x && block_yz == o.block_yz && warp == o.warp;
    }
  };
  struct WarpKeyHash {
    size_t operator()(const WarpKey& k) const;
  };
  void AddName(uint64_t address);
  void AddRange(const uint8_t* chunks, uint64_t count, std::vector<uint32_t>* used_bytes);
  // Adds what `other` (of the same chunk size and sampling) scanned after this one.
  void Merge(const ChunkScanner& other);

  const uint32_t chunk_bytes_;
  uint32_t sample_mask_ = 0;
  uint64_t chunks_ = 0, events_ = 0, empty_ = 0, used_ = 0;
  std::vector<uint64_t> names_;
  std::unordered_set<uint64_t> seen_names_;
  uint64_t recent_names_[64] = {};
  std::unordered_map<WarpKey, WarpTally, WarpKeyHash> warps_;
};

}  // namespace smprof::injector
