// ChunkScan: names, events and per-warp claims of a read-back, without decoding.
#include "injector/chunk_scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "smprof/wire.h"
#include "tests/support/arena_builder.h"

namespace smprof::injector {
namespace {

using testing::ArenaBuilder;

TEST(ChunkScan, FindsEachNameOnceAndCountsEvents) {
  ArenaBuilder a(4);
  const uint32_t c0 = a.Claim(7, 0, 0, 0, 0x1000);
  a.Add(c0, 1, 16, wire::kEventBegin);
  a.Add(c0, 2, 16, wire::kEventEnd);
  a.Add(c0, 3, 80, wire::kEventInstant | wire::kEventHasValue | wire::kEventWideValue);
  a.Add(c0, 3, 0, wire::kEventValueHigh);  // a continuation: no event, no name
  const uint32_t c1 = a.Claim(7, 1, 0, 0, 0x2000);
  a.Add(c1, 4, 16, wire::kEventBegin);  // another module: another address
  a.ClaimUnwritten();                    // claimed and never written
  std::memset(a.At(a.ClaimUnwritten(), 0), 0xAB, 48);  // not a chunk of ours
  const ChunkScan scan = ScanChunks(a.data(), a.used(), a.chunk_bytes(), /*tally=*/false);
  EXPECT_EQ(scan.chunks, 4u);
  EXPECT_EQ(scan.events, 4u);
  EXPECT_EQ(scan.empty_chunks, 1u);
  EXPECT_EQ(scan.name_addresses, (std::vector<uint64_t>{0x1010, 0x1050, 0x2010}));
  EXPECT_TRUE(scan.warps_by_grid.empty());
}

TEST(ChunkScan, CompactChunksSkipTheirValueSlots) {
  ArenaBuilder a(1);
  const uint32_t c = a.Claim(3, 0, 2, 0, 0x4000, 0, 0, wire::kChunkFromTriton | wire::kChunkCompact);
  a.Compact(c, 6, 10, (8u << wire::kCompactNameShift) | wire::kEventBegin);
  a.Compact(c, 7, 20,
            (24u << wire::kCompactNameShift) | wire::kEventEnd | wire::kEventHasValue | wire::kCompactValueFollows);
  a.Compact(c, 8, 0xFFFF, 0xFFFFFFFF);  // the value: not an event
  const ChunkScan scan = ScanChunks(a.data(), a.used(), a.chunk_bytes(), /*tally=*/true);
  EXPECT_EQ(scan.events, 2u);
  EXPECT_EQ(scan.name_addresses, (std::vector<uint64_t>{0x4008, 0x4018}));
  ASSERT_EQ(scan.warps_by_grid.count(3), 1u);
  ASSERT_EQ(scan.warps_by_grid.at(3).size(), 1u);
  EXPECT_EQ(scan.warps_by_grid.at(3)[0].events, 2u);
}

// A warp's chunks add up (what sizes its kernel's next chunks); warps and
// grids stay apart.
TEST(ChunkScan, TalliesEventsAndChunksPerWarp) {
  ArenaBuilder a(5);
  const uint32_t full = a.Claim(1, 0, 0, 0);
  for (int e = 0; e < 13; ++e) a.Add(full, e, 0, wire::kEventInstant);
  a.Add(a.Claim(1, 0, 0, 0), 20, 0, wire::kEventInstant);  // the same warp's next chunk
  a.Add(a.Claim(1, 0, 1, 0), 1, 0, wire::kEventInstant);   // warp 1
  a.Add(a.Claim(1, 5, 0, 0), 1, 0, wire::kEventInstant);   // another block, warp 0
  a.Add(a.Claim(2, 0, 0, 0), 1, 0, wire::kEventInstant);   // another grid
  const ChunkScan scan = ScanChunks(a.data(), a.used(), a.chunk_bytes(), /*tally=*/true);
  ASSERT_EQ(scan.warps_by_grid.size(), 2u);
  std::vector<std::pair<uint64_t, uint32_t>> warps;
  for (const WarpTally& w : scan.warps_by_grid.at(1)) warps.emplace_back(w.events, w.chunks);
  std::sort(warps.begin(), warps.end());
  EXPECT_EQ(warps, (std::vector<std::pair<uint64_t, uint32_t>>{{1, 1}, {1, 1}, {14, 2}}));
  EXPECT_EQ(scan.warps_by_grid.at(2).size(), 1u);
}

}  // namespace
}  // namespace smprof::injector
