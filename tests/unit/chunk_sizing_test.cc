// Chunk sizing: what a kernel's warps claim at each chunk size, and the size
// a generation of the arena gets.
#include "injector/chunk_sizing.h"

#include <gtest/gtest.h>

namespace smprof::injector {
namespace {

constexpr int k256 = 0, k512 = 1, k1K = 2, k2K = 3, k4K = 4, k8K = 5, k16K = 6, k64K = 8;

// Teaches `rates` warps that each write `events` events, as a harvest does
// (read in 1 KiB chunks, no chunk beyond what the events need).
void TeachWarpsWriting(uint64_t events, ClaimRates* rates) {
  ClaimTally tally(1024);
  tally.AddWarp(events, static_cast<uint32_t>((events + 60) / 61));
  tally.Teach(1, rates);
}

TEST(ChunkSizingTest, SlotsAreWhatAChunkHoldsAfterItsHeader) {
  EXPECT_EQ(ClaimTally::SlotsOf(256), 13u);
  EXPECT_EQ(ClaimTally::SlotsOf(1024), 61u);
  EXPECT_EQ(ChunkBytesOf(k1K), 1024u);
  EXPECT_EQ(ChunkClassOf(10), k1K);
}

TEST(ChunkSizingTest, UnknownKernelsCountOneChunkPerWarp) {
  ClaimRates rates;
  for (int c = 0; c < kChunkClasses; ++c) EXPECT_EQ(rates.at(c), 1.0);
}

TEST(ChunkSizingTest, ATallyTeachesEverySizeFromTheEventsOfEachWarp) {
  // 4 launched warps, 3 recording: 2 events, 61 events, 62 events (at 1 KiB:
  // 1, 1 and 2 chunks), read in 1 KiB chunks.
  ClaimTally tally(1024);
  tally.AddWarp(2, 1);
  tally.AddWarp(61, 1);
  tally.AddWarp(62, 2);
  tally.AddWarp(0, 0);
  ClaimRates rates;
  tally.Teach(4, &rates);
  EXPECT_DOUBLE_EQ(rates.at(k1K), (1 + 1 + 2) / 4.0);
  EXPECT_DOUBLE_EQ(rates.at(k256), (1 + 5 + 5) / 4.0);  // 13 events per 256-byte chunk
  EXPECT_DOUBLE_EQ(rates.at(k4K), (1 + 1 + 1) / 4.0);
}

TEST(ChunkSizingTest, ChunksBeyondWhatTheEventsNeedCountAtEverySize) {
  // 2 events in 2 chunks (a diverged marker went to the warp's second chunk).
  ClaimTally tally(1024);
  tally.AddWarp(2, 2);
  ClaimRates rates;
  tally.Teach(1, &rates);
  EXPECT_DOUBLE_EQ(rates.at(k256), 2.0);
  EXPECT_DOUBLE_EQ(rates.at(k4K), 2.0);
}

TEST(ChunkSizingTest, AReadBackRescalesEverySizeKeepingTheShape) {
  ClaimRates rates;
  TeachWarpsWriting(256, &rates);  // 5, 3, 2, 1 chunks at 1, 2, 4, 8 KiB
  rates.Rescale(k8K, 2.0);         // twice the events now
  EXPECT_DOUBLE_EQ(rates.at(k1K), 10.0);
  EXPECT_DOUBLE_EQ(rates.at(k2K), 6.0);
  EXPECT_DOUBLE_EQ(rates.at(k8K), 2.0);
  rates.set_all(0);  // it recorded nothing: no shape to keep
  rates.Rescale(k1K, 3.0);
  EXPECT_DOUBLE_EQ(rates.at(k256), 3.0);
  EXPECT_DOUBLE_EQ(rates.at(k64K), 3.0);
}

// Before its warps are decoded, a dense kernel is known only by the 5
// chunks per warp its read-back counted at 1 KiB: the sizes above must not
// look like one chunk per warp.
TEST(ChunkSizingTest, ALevelSeenAtOneSizeDoesNotMakeTheOthersLookCheaper) {
  ClaimRates rates;
  rates.Rescale(k1K, 5.0);
  const auto chunks_at = [&](int c) { return 8.0 * rates.at(c); };
  EXPECT_EQ(ChooseChunkClass(chunks_at, k1K, k64K, 48.0 * 1024 * 1024), k1K);
}

TEST(ChunkSizingTest, TheLargestSizeUpToTheStartThatFitsIsChosen) {
  // 2048 warps, one chunk each, 768 KiB under the mark: 256 bytes (512 KiB).
  const auto one_per_warp = [](int) { return 2048.0; };
  EXPECT_EQ(ChooseChunkClass(one_per_warp, k1K, k1K, 768.0 * 1024), k256);
  EXPECT_EQ(ChooseChunkClass(one_per_warp, k1K, k64K, 768.0 * 1024), k256);
  // The same warps in a 64 MiB arena keep the start size.
  EXPECT_EQ(ChooseChunkClass(one_per_warp, k1K, k1K, 48.0 * 1024 * 1024), k1K);
}

TEST(ChunkSizingTest, UnknownKernelsStayAtTheStartSize) {
  // One chunk per warp at every size: a doubling saves no claim.
  const ClaimRates unknown;
  const auto chunks_at = [&](int c) { return 64.0 * unknown.at(c); };
  EXPECT_EQ(ChooseChunkClass(chunks_at, k1K, k64K, 48.0 * 1024 * 1024), k1K);
}

TEST(ChunkSizingTest, KernelsThatClaimNothingStayAtTheStartSize) {
  const auto silent = [](int) { return 0.0; };
  EXPECT_EQ(ChooseChunkClass(silent, k1K, k64K, 48.0 * 1024 * 1024), k1K);
}

TEST(ChunkSizingTest, DenseWarpsGrowUntilOneChunkHoldsTheirEvents) {
  // 256 events per warp: 5 chunks of 1 KiB, 3 of 2 KiB, 2 of 4 KiB, 1 of 8 KiB
  // and 1 of 16 KiB. 8 KiB is the last size that saves claims.
  ClaimRates rates;
  TeachWarpsWriting(256, &rates);
  EXPECT_DOUBLE_EQ(rates.at(k1K), 5.0);
  EXPECT_DOUBLE_EQ(rates.at(k2K), 3.0);
  EXPECT_DOUBLE_EQ(rates.at(k4K), 2.0);
  EXPECT_DOUBLE_EQ(rates.at(k8K), 1.0);
  EXPECT_DOUBLE_EQ(rates.at(k16K), 1.0);
  const auto chunks_at = [&](int c) { return 132.0 * rates.at(c); };
  EXPECT_EQ(ChooseChunkClass(chunks_at, k1K, k64K, 48.0 * 1024 * 1024), k8K);
}

TEST(ChunkSizingTest, GrowthNeedsAQuarterFewerChunks) {
  const auto cut_to = [](double ratio) {
    return [ratio](int c) { return c <= k1K ? 400.0 : c == k2K ? 400.0 * ratio : 400.0 * ratio * ratio * 2; };
  };
  EXPECT_EQ(ChooseChunkClass(cut_to(0.75), k1K, k64K, 48.0 * 1024 * 1024), k2K);
  EXPECT_EQ(ChooseChunkClass(cut_to(0.76), k1K, k64K, 48.0 * 1024 * 1024), k1K);
}

TEST(ChunkSizingTest, GrowthStopsWhereTheLaunchWouldNoLongerFit) {
  // 600 events per warp: 10 chunks of 1 KiB (10 KiB), 5 of 2 KiB (10 KiB),
  // 3 of 4 KiB (12 KiB), 2 of 8 KiB (16 KiB), 1 of 16 KiB (16 KiB).
  ClaimRates rates;
  TeachWarpsWriting(600, &rates);
  ASSERT_DOUBLE_EQ(rates.at(k4K), 3.0);
  ASSERT_DOUBLE_EQ(rates.at(k8K), 2.0);
  const auto chunks_at = [&](int c) { return 100.0 * rates.at(c); };
  // 100 warps take 1.17 MiB at 4 KiB and 1.56 MiB at 8 KiB.
  EXPECT_EQ(ChooseChunkClass(chunks_at, k1K, k64K, 1.5 * 1024 * 1024), k4K);
  EXPECT_EQ(ChooseChunkClass(chunks_at, k1K, k64K, 48.0 * 1024 * 1024), k16K);
}

TEST(ChunkSizingTest, AMaximumBelowTheStartIsNeverPassed) {
  // SMPROF_CHUNK_BYTES=512: the dense warps above fit in 512-byte chunks.
  ClaimRates rates;
  TeachWarpsWriting(256, &rates);
  const auto chunks_at = [&](int c) { return 132.0 * rates.at(c); };
  EXPECT_EQ(ChooseChunkClass(chunks_at, k1K, k512, 48.0 * 1024 * 1024), k512);
  // The start size itself as the maximum: nothing to grow to.
  EXPECT_EQ(ChooseChunkClass(chunks_at, k1K, k1K, 48.0 * 1024 * 1024), k1K);
}

TEST(ChunkSizingTest, OnlyATallyOfDecodedWarpsSetsTheShrinkFloor) {
  ClaimRates rates;
  EXPECT_EQ(rates.shrink_floor(), kChunkClasses);
  rates.Rescale(k1K, 5.0);  // a read-back's level: the shape is still assumed
  EXPECT_EQ(rates.shrink_floor(), kChunkClasses);
  TeachWarpsWriting(2, &rates);  // one chunk a warp at every size
  EXPECT_EQ(rates.shrink_floor(), k256);
}

TEST(ChunkSizingTest, TheShrinkFloorOnlyRises) {
  ClaimRates rates;
  TeachWarpsWriting(20, &rates);  // one 512-byte chunk, two of 256
  EXPECT_EQ(rates.shrink_floor(), k512);
  TeachWarpsWriting(256, &rates);  // 1 chunk from 8 KiB up, 2 of 4 KiB
  EXPECT_EQ(rates.shrink_floor(), k8K);
  TeachWarpsWriting(2, &rates);  // sparse again: the floor stays
  EXPECT_EQ(rates.shrink_floor(), k8K);
  const auto launch = [&](int c) { return 8.0 * rates.at(c); };
  EXPECT_EQ(ChooseChunkClass(launch, k1K, k64K, 48.0 * 1024 * 1024, launch, rates.shrink_floor()), k1K);
}

TEST(ChunkSizingTest, SparseWarpsShrinkWhenNothingInTheMixClaimsMore) {
  ClaimRates sparse;
  TeachWarpsWriting(2, &sparse);  // one chunk per warp at every size
  const auto launch = [&](int c) { return 4096.0 * sparse.at(c); };
  const auto mix = [&](int c) { return 2.0 * 4096.0 * sparse.at(c); };
  EXPECT_EQ(ChooseChunkClass(launch, k1K, k64K, 48.0 * 1024 * 1024, mix, sparse.shrink_floor()), k256);
  // Without a known mix the start size stays.
  EXPECT_EQ(ChooseChunkClass(launch, k1K, k64K, 48.0 * 1024 * 1024), k1K);
}

TEST(ChunkSizingTest, ShrinkingStopsWhereAWarpWouldNeedASecondChunk) {
  // 20 events: one chunk of 512 bytes (29 slots), two of 256 (13 slots).
  ClaimRates rates;
  TeachWarpsWriting(20, &rates);
  const auto launch = [&](int c) { return 64.0 * rates.at(c); };
  EXPECT_EQ(ChooseChunkClass(launch, k1K, k64K, 48.0 * 1024 * 1024, launch, k256), k512);
}

TEST(ChunkSizingTest, ADenseKernelInTheMixKeepsTheStartSize) {
  ClaimRates sparse, dense;
  TeachWarpsWriting(2, &sparse);
  TeachWarpsWriting(256, &dense);  // 5 chunks at 1 KiB, 10 at 512 bytes
  const auto launch = [&](int c) { return 4096.0 * sparse.at(c); };
  const auto mix = [&](int c) { return 4096.0 * sparse.at(c) + 8.0 * dense.at(c); };
  EXPECT_EQ(ChooseChunkClass(launch, k1K, k64K, 48.0 * 1024 * 1024, mix, k256), k1K);
}

TEST(ChunkSizingTest, GrowthComesBeforeShrinking) {
  ClaimRates dense;
  TeachWarpsWriting(256, &dense);
  const auto launch = [&](int c) { return 132.0 * dense.at(c); };
  EXPECT_EQ(ChooseChunkClass(launch, k1K, k64K, 48.0 * 1024 * 1024, launch, k256), k8K);
}

TEST(ChunkSizingTest, WhenNothingFitsTheSizeNeedingFewestBytesIsChosen) {
  // 258 events per warp: 20 chunks of 256 bytes (5120) against 5 of 1 KiB (5120)
  // and 3 of 512 bytes (29 events each: 9 chunks, 4608 bytes).
  const auto dense = [](int c) { return c == k256 ? 20.0 : c == 1 ? 9.0 : 5.0; };
  EXPECT_EQ(ChooseChunkClass(dense, k1K, k1K, 1000.0), 1);
  // Nothing fits: no growth either, however much larger sizes would save.
  const auto denser = [](int c) { return c == k256 ? 20.0 : c == 1 ? 9.0 : c == k1K ? 5.0 : 1.0; };
  EXPECT_EQ(ChooseChunkClass(denser, k1K, k64K, 1000.0), 1);
}

}  // namespace
}  // namespace smprof::injector
