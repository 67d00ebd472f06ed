// ChunkScanner: names, events, written bytes and per-warp claims of a read-back, without decoding.
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
  ChunkScanner scan(a.chunk_bytes(), a.used());
  std::vector<uint32_t> used;
  scan.Add(a.data(), a.used(), &used);
  EXPECT_EQ(scan.chunks(), 4u);
  EXPECT_EQ(scan.events(), 4u);
  EXPECT_EQ(scan.empty_chunks(), 1u);
  EXPECT_EQ(scan.name_addresses(), (std::vector<uint64_t>{0x1010, 0x1050, 0x2010}));
  // Written bytes: header + 4 slots, header + 1 slot, nothing, all (not ours: whole).
  EXPECT_EQ(used, (std::vector<uint32_t>{48 + 64, 48 + 16, 0, 256}));
  EXPECT_EQ(scan.used_bytes(), 112u + 64u + 256u);
}

TEST(ChunkScan, CompactChunksSkipTheirValueSlots) {
  ArenaBuilder a(1);
  const uint32_t c = a.Claim(3, 0, 2, 0, 0x4000, 0, 0, wire::kChunkFromTriton | wire::kChunkCompact);
  a.Compact(c, 6, 10, (8u << wire::kCompactNameShift) | wire::kEventBegin);
  a.Compact(c, 7, 20,
            (24u << wire::kCompactNameShift) | wire::kEventEnd | wire::kEventHasValue | wire::kCompactValueFollows);
  a.Compact(c, 8, 0xFFFF, 0xFFFFFFFF);  // the value: not an event
  ChunkScanner scan(a.chunk_bytes(), a.used());
  std::vector<uint32_t> used;
  scan.Add(a.data(), a.used(), &used);
  EXPECT_EQ(scan.events(), 2u);
  EXPECT_EQ(scan.name_addresses(), (std::vector<uint64_t>{0x4008, 0x4018}));
  EXPECT_EQ(used, (std::vector<uint32_t>{9 * 8}));  // header (6 slots), the events and the value slot
  const auto tally = scan.TallyByGrid();
  ASSERT_EQ(tally.count(3), 1u);
  ASSERT_EQ(tally.at(3).size(), 1u);
  EXPECT_EQ(tally.at(3)[0].events, 2u);
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
  ChunkScanner scan(a.chunk_bytes(), a.used());
  scan.Add(a.data(), 2, nullptr);  // in two pieces: a warp's chunks add up across them
  scan.Add(a.data() + 2 * a.chunk_bytes(), a.used() - 2, nullptr);
  EXPECT_EQ(scan.tally_one_in(), 1u);
  const auto tally = scan.TallyByGrid();
  ASSERT_EQ(tally.size(), 2u);
  std::vector<std::pair<uint64_t, uint32_t>> warps;
  for (const WarpTally& w : tally.at(1)) warps.emplace_back(w.events, w.chunks);
  std::sort(warps.begin(), warps.end());
  EXPECT_EQ(warps, (std::vector<std::pair<uint64_t, uint32_t>>{{1, 1}, {1, 1}, {14, 2}}));
  EXPECT_EQ(tally.at(2).size(), 1u);
}

// A read-back of many warps tallies a sample of them: whole warps (every
// chunk of a sampled warp), about kTallyWarps of them.
TEST(ChunkScan, LargeReadBacksTallyASampleOfWholeWarps) {
  const uint32_t warps = 4 * ChunkScanner::kTallyWarps;
  ArenaBuilder a(2 * warps);
  for (uint32_t round = 0; round < 2; ++round) {  // each warp's two chunks, far apart
    for (uint32_t w = 0; w < warps; ++w) a.Add(a.Claim(1, w, 0, 0), round, 0, wire::kEventInstant);
  }
  ChunkScanner scan(a.chunk_bytes(), a.used());
  scan.Add(a.data(), a.used(), nullptr);
  EXPECT_EQ(scan.tally_one_in(), 8u);  // 2 * 4 * kTallyWarps chunks
  const auto tally = scan.TallyByGrid();
  const size_t sampled = tally.at(1).size();
  EXPECT_GT(sampled, warps / 8 * 9 / 10);
  EXPECT_LT(sampled, warps / 8 * 11 / 10);
  for (const WarpTally& w : tally.at(1)) {
    EXPECT_EQ(w.chunks, 2u);
    EXPECT_EQ(w.events, 2u);
  }
}

// Split over threads, a scan finds what one pass finds: the same events,
// written bytes in chunk order, names and tally.
TEST(ChunkScan, SplitOverThreadsGivesWhatOnePassGives) {
  const uint32_t chunks = static_cast<uint32_t>(4 * ChunkScanner::kBytesPerThread / 256 + 33);  // 256-byte chunks
  ArenaBuilder a(chunks);
  for (uint32_t c = 0; c < chunks; ++c) {
    if (c % 97 == 5) {
      a.ClaimUnwritten();
      continue;
    }
    const uint32_t k = a.Claim(1 + c / 3000, c % 50, static_cast<uint16_t>(c % 4), 0, 0x1000 + (c % 7) * 0x100);
    for (uint32_t e = 0; e < c % 13; ++e) a.Add(k, e, static_cast<int32_t>(8 * (e % 5)), wire::kEventInstant);
  }
  ChunkScanner one(a.chunk_bytes(), a.used()), split(a.chunk_bytes(), a.used());
  std::vector<uint32_t> used_one, used_split;
  one.Add(a.data(), a.used(), &used_one);
  split.Add(a.data(), a.used(), &used_split, 4);
  EXPECT_EQ(split.events(), one.events());
  EXPECT_EQ(split.empty_chunks(), one.empty_chunks());
  EXPECT_EQ(split.used_bytes(), one.used_bytes());
  EXPECT_EQ(used_split, used_one);
  std::vector<uint64_t> names_one = one.name_addresses(), names_split = split.name_addresses();
  std::sort(names_one.begin(), names_one.end());
  std::sort(names_split.begin(), names_split.end());
  EXPECT_EQ(names_split, names_one);
  const auto tally_one = one.TallyByGrid(), tally_split = split.TallyByGrid();
  ASSERT_EQ(tally_split.size(), tally_one.size());
  for (const auto& [grid, warps] : tally_one) {
    uint64_t events = 0, events_split = 0;
    for (const WarpTally& w : warps) events += w.events;
    for (const WarpTally& w : tally_split.at(grid)) events_split += w.events;
    EXPECT_EQ(tally_split.at(grid).size(), warps.size()) << grid;
    EXPECT_EQ(events_split, events) << grid;
  }
}

}  // namespace
}  // namespace smprof::injector
