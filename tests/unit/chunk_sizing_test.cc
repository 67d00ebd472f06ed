// Chunk sizing: what a kernel's warps claim at each chunk size, and the size
// a generation of the arena gets.
#include "injector/chunk_sizing.h"

#include <gtest/gtest.h>

namespace smprof::injector {
namespace {

constexpr int k256 = 0, k1K = 2, k4K = 4;

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

TEST(ChunkSizingTest, TheLargestSizeThatFitsIsChosen) {
  // 2048 warps, one chunk each, 768 KiB under the mark: 256 bytes (512 KiB).
  const auto one_per_warp = [](int) { return 2048.0; };
  EXPECT_EQ(ChooseChunkClass(one_per_warp, k1K, 768.0 * 1024), k256);
  // The same warps in a 64 MiB arena keep the largest size allowed.
  EXPECT_EQ(ChooseChunkClass(one_per_warp, k1K, 48.0 * 1024 * 1024), k1K);
}

TEST(ChunkSizingTest, WhenNothingFitsTheSizeNeedingFewestBytesIsChosen) {
  // 258 events per warp: 20 chunks of 256 bytes (5120) against 5 of 1 KiB (5120)
  // and 3 of 512 bytes (29 events each: 9 chunks, 4608 bytes).
  const auto dense = [](int c) { return c == k256 ? 20.0 : c == 1 ? 9.0 : 5.0; };
  EXPECT_EQ(ChooseChunkClass(dense, k1K, 1000.0), 1);
}

}  // namespace
}  // namespace smprof::injector
