#include "injector/chunk_scan.h"

#include <cstring>
#include <tuple>
#include <unordered_set>

#include "smprof/wire.h"

namespace smprof::injector {
namespace {

struct WarpKey {
  uint64_t grid;
  uint32_t block_x;
  uint32_t block_yz;
  uint32_t warp;
  bool operator==(const WarpKey& o) const {
    return std::tie(grid, block_x, block_yz, warp) == std::tie(o.grid, o.block_x, o.block_yz, o.warp);
  }
};

struct WarpKeyHash {
  size_t operator()(const WarpKey& k) const {
    uint64_t h = k.grid * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t{k.block_x} << 32 | k.block_yz) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= k.warp + 0x85EBCA77C2B2AE63ull + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

// Distinct addresses, with a direct-mapped cache in front of the set: a
// kernel's events repeat a few names.
class Addresses {
 public:
  explicit Addresses(std::vector<uint64_t>* out) : out_(out) {}
  void Add(uint64_t address) {
    uint64_t& slot = recent_[(address >> 3) & 63];
    if (slot == address + 1) return;
    slot = address + 1;
    if (seen_.insert(address).second) out_->push_back(address);
  }

 private:
  std::vector<uint64_t>* out_;
  std::unordered_set<uint64_t> seen_;
  uint64_t recent_[64] = {};
};

}  // namespace

ChunkScan ScanChunks(const uint8_t* chunks, uint64_t num_chunks, uint32_t chunk_bytes, bool tally) {
  ChunkScan scan;
  Addresses names(&scan.name_addresses);
  std::unordered_map<WarpKey, WarpTally, WarpKeyHash> warps;
  if (chunk_bytes < sizeof(wire::ChunkHeader)) return scan;
  for (uint64_t c = 0; c < num_chunks; ++c) {
    const uint8_t* base = chunks + c * chunk_bytes;
    ++scan.chunks;
    wire::ChunkHeader h;
    std::memcpy(&h, base, sizeof(h));
    if (h.magic != wire::kChunkMagic) {
      bool empty = true;
      for (size_t i = 0; i < sizeof(h) && empty; ++i) empty = base[i] == 0;
      scan.empty_chunks += empty ? 1 : 0;
      continue;
    }
    uint64_t events = 0;
    if ((h.flags & wire::kChunkCompact) != 0) {
      for (uint32_t at = sizeof(h); at + sizeof(wire::CompactEvent) <= chunk_bytes; at += sizeof(wire::CompactEvent)) {
        wire::CompactEvent e;
        std::memcpy(&e, base + at, sizeof(e));
        if (e.tag == 0) continue;
        ++events;
        names.Add(h.name_base + ((e.tag & ~wire::kCompactValueFollows) >> wire::kCompactNameShift));
        if ((e.tag & wire::kCompactValueFollows) != 0) at += sizeof(wire::CompactEvent);  // its value slot
      }
    } else {
      for (uint32_t at = sizeof(h); at + sizeof(wire::Event) <= chunk_bytes; at += sizeof(wire::Event)) {
        wire::Event e;
        std::memcpy(&e, base + at, sizeof(e));
        if (e.info == 0 || (e.info & wire::kEventKindMask) == wire::kEventValueHigh) continue;
        ++events;
        names.Add(h.name_base + static_cast<int64_t>(e.name_offset));
      }
    }
    scan.events += events;
    if (tally) {
      WarpTally& w = warps[WarpKey{h.grid_id, h.block_x, uint32_t{h.block_y} | uint32_t{h.block_z} << 16, h.warp}];
      w.events += events;
      ++w.chunks;
    }
  }
  for (const auto& [key, w] : warps) scan.warps_by_grid[key.grid].push_back(w);
  return scan;
}

}  // namespace smprof::injector
