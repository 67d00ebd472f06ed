#include "injector/chunk_scan.h"

#include <algorithm>
#include <cstring>

#include "common/run_parts.h"
#include "smprof/wire.h"

namespace smprof::injector {
namespace {

// The end of the last non-zero 8-byte word of `bytes` (a multiple of 8) at
// `base`; 0 when all are zero. A warp fills its chunk from the front, so
// this passes over the unwritten tail at memory speed, 64 bytes a step.
uint32_t WrittenEnd(const uint8_t* base, uint32_t bytes) {
  uint32_t end = bytes;
  while (end >= 64 && end % 64 == 0) {
    uint64_t w[8];
    std::memcpy(w, base + end - 64, sizeof(w));
    if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0) break;
    end -= 64;
  }
  while (end >= 8) {
    uint64_t w;
    std::memcpy(&w, base + end - 8, sizeof(w));
    if (w != 0) break;
    end -= 8;
  }
  return end;
}

}  // namespace

size_t ChunkScanner::WarpKeyHash::operator()(const WarpKey& k) const {
  // splitmix64's finalizer over the identity's words: every bit of each
  // reaches the low bits, which the tally samples by.
  const auto mix = [](uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  return static_cast<size_t>(mix(mix(k.grid) ^ (uint64_t{k.block_x} << 32 | k.block_yz)) ^ k.warp);
}

ChunkScanner::ChunkScanner(uint32_t chunk_bytes, uint64_t expected_chunks) : chunk_bytes_(chunk_bytes) {
  while ((uint64_t{sample_mask_} + 1) * kTallyWarps < expected_chunks && sample_mask_ < (1u << 30)) {
    sample_mask_ = sample_mask_ * 2 + 1;
  }
}

void ChunkScanner::AddName(uint64_t address) {
  uint64_t& slot = recent_names_[(address >> 3) & 63];
  if (slot == address + 1) return;
  slot = address + 1;
  if (seen_names_.insert(address).second) names_.push_back(address);
}

void ChunkScanner::Add(const uint8_t* chunks, uint64_t count, std::vector<uint32_t>* used_bytes, unsigned threads) {
  const unsigned parts = PartsFor(threads, count * chunk_bytes_, kBytesPerThread);
  if (parts == 1) {
    AddRange(chunks, count, used_bytes);
    return;
  }
  // Contiguous ranges, merged in order: what one pass gives.
  std::vector<ChunkScanner> scanners;
  scanners.reserve(parts);
  for (unsigned i = 0; i < parts; ++i) scanners.emplace_back(chunk_bytes_, 0);
  std::vector<std::vector<uint32_t>> used(parts);
  const auto range = [&](unsigned i) {
    const uint64_t begin = count * i / parts, end = count * (i + 1) / parts;
    scanners[i].sample_mask_ = sample_mask_;
    scanners[i].AddRange(chunks + begin * chunk_bytes_, end - begin, used_bytes != nullptr ? &used[i] : nullptr);
  };
  RunParts(parts, range);
  for (unsigned i = 0; i < parts; ++i) {
    Merge(scanners[i]);
    if (used_bytes != nullptr) used_bytes->insert(used_bytes->end(), used[i].begin(), used[i].end());
  }
}

void ChunkScanner::Merge(const ChunkScanner& other) {
  chunks_ += other.chunks_;
  events_ += other.events_;
  empty_ += other.empty_;
  used_ += other.used_;
  for (uint64_t address : other.names_) AddName(address);
  for (const auto& [key, w] : other.warps_) {
    WarpTally& into = warps_[key];
    into.events += w.events;
    into.chunks += w.chunks;
  }
}

void ChunkScanner::AddRange(const uint8_t* chunks, uint64_t count, std::vector<uint32_t>* used_bytes) {
  if (chunk_bytes_ < sizeof(wire::ChunkHeader)) return;
  for (uint64_t c = 0; c < count; ++c) {
    const uint8_t* base = chunks + c * chunk_bytes_;
    ++chunks_;
    wire::ChunkHeader h;
    std::memcpy(&h, base, sizeof(h));
    uint32_t used = 0;
    uint64_t events = 0;
    if (h.magic != wire::kChunkMagic) {
      bool empty = true;
      for (size_t i = 0; i < sizeof(h) && empty; ++i) empty = base[i] == 0;
      empty_ += empty ? 1 : 0;
      used = empty ? 0 : chunk_bytes_;  // not ours to judge: the collector counts it malformed
    } else if ((h.flags & wire::kChunkCompact) != 0) {
      used = sizeof(h);
      const uint32_t limit = WrittenEnd(base, chunk_bytes_);  // slots past it are all zero
      for (uint32_t at = sizeof(h); at + sizeof(wire::CompactEvent) <= limit; at += sizeof(wire::CompactEvent)) {
        wire::CompactEvent e;
        std::memcpy(&e, base + at, sizeof(e));
        if (e.tag == 0 && e.clock_lo == 0) continue;
        used = at + sizeof(e);
        if (e.tag == 0) continue;
        ++events;
        AddName(h.name_base + ((e.tag & ~wire::kCompactValueFollows) >> wire::kCompactNameShift));
        if ((e.tag & wire::kCompactValueFollows) != 0 && at + 2 * sizeof(e) <= chunk_bytes_) {
          at += sizeof(e);  // its value slot
          used = at + sizeof(e);
        }
      }
    } else {
      used = sizeof(h);
      // The slot holding the last written word (its other half may be zero).
      const uint32_t limit = (WrittenEnd(base, chunk_bytes_) + sizeof(wire::Event) - 1) & ~uint32_t{sizeof(wire::Event) - 1};
      for (uint32_t at = sizeof(h); at + sizeof(wire::Event) <= limit; at += sizeof(wire::Event)) {
        uint64_t words[2];
        std::memcpy(words, base + at, sizeof(words));
        if ((words[0] | words[1]) == 0) continue;
        used = at + sizeof(wire::Event);
        wire::Event e;
        std::memcpy(&e, base + at, sizeof(e));
        if (e.info == 0 || (e.info & wire::kEventKindMask) == wire::kEventValueHigh) continue;
        ++events;
        AddName(h.name_base + static_cast<int64_t>(e.name_offset));
      }
    }
    used_ += used;
    events_ += events;
    if (used_bytes != nullptr) used_bytes->push_back(used);
    if (h.magic != wire::kChunkMagic) continue;
    const WarpKey key{h.grid_id, h.block_x, uint32_t{h.block_y} | uint32_t{h.block_z} << 16, h.warp};
    if ((WarpKeyHash()(key) & sample_mask_) != 0) continue;
    WarpTally& w = warps_[key];
    w.events += events;
    ++w.chunks;
  }
}

std::unordered_map<uint64_t, std::vector<WarpTally>> ChunkScanner::TallyByGrid() const {
  std::unordered_map<uint64_t, std::vector<WarpTally>> by_grid;
  for (const auto& [key, w] : warps_) by_grid[key.grid].push_back(w);
  return by_grid;
}

}  // namespace smprof::injector
