// AsyncMatcher: spans across warps of a block, matched per (block, name,
// token) in time order, FIFO; unterminated spans and unmatched ends; the cap.
#include "collector/async_matcher.h"

#include <gtest/gtest.h>

#include <vector>

namespace smprof {
namespace {

using Span = AsyncMatcher::Span;

trace::WarpRecord MakeWarp(uint32_t index, uint32_t bx, uint16_t warp) {
  trace::WarpRecord w;
  w.index = index;
  w.block[0] = bx;
  w.warp = warp;
  return w;
}

std::vector<Span> Match(AsyncMatcher& m, uint64_t end_ns) {
  std::vector<Span> out;
  m.Match(end_ns, &out);
  return out;
}

TEST(AsyncMatcherTest, AnEndOnAnotherWarpClosesTheSpan) {
  const trace::WarpRecord producer = MakeWarp(0, 1, 0), consumer = MakeWarp(1, 1, 4);
  AsyncMatcher m;
  // The consumer's warp arrives first; times decide.
  EXPECT_TRUE(m.Add(true, consumer, 5, 2, 300));
  EXPECT_TRUE(m.Add(false, producer, 5, 2, 100));
  const auto s = Match(m, 1000);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].name_id, 5u);
  EXPECT_EQ(s[0].token, 2u);
  EXPECT_EQ(s[0].block[0], 1u);
  EXPECT_EQ(s[0].begin_ns, 100u);
  EXPECT_EQ(s[0].end_ns, 300u);
  EXPECT_EQ(s[0].begin_warp, &producer);
  EXPECT_EQ(s[0].end_warp, &consumer);
  EXPECT_EQ(m.held(), 0u);
}

// A token reused by every iteration: each END closes the oldest open span.
TEST(AsyncMatcherTest, TokensReusedAcrossIterationsCloseFirstInFirstOut) {
  const trace::WarpRecord p = MakeWarp(0, 0, 0), c = MakeWarp(1, 0, 1);
  AsyncMatcher m;
  m.Add(false, p, 1, 0, 100);
  m.Add(false, p, 1, 0, 200);
  m.Add(false, p, 1, 0, 300);
  m.Add(true, c, 1, 0, 250);
  m.Add(true, c, 1, 0, 350);
  m.Add(true, c, 1, 0, 400);
  const auto s = Match(m, 1000);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].begin_ns, 100u);
  EXPECT_EQ(s[0].end_ns, 250u);
  EXPECT_EQ(s[1].begin_ns, 200u);
  EXPECT_EQ(s[1].end_ns, 350u);
  EXPECT_EQ(s[2].begin_ns, 300u);
  EXPECT_EQ(s[2].end_ns, 400u);
}

// The same name and token in two blocks are two spans; names and tokens too.
TEST(AsyncMatcherTest, BlocksNamesAndTokensAreMatchedApart) {
  const trace::WarpRecord b0 = MakeWarp(0, 0, 0), b1 = MakeWarp(1, 1, 0), b1c = MakeWarp(2, 1, 3);
  AsyncMatcher m;
  m.Add(false, b0, 1, 7, 100);
  m.Add(false, b1, 1, 7, 110);
  m.Add(false, b1, 2, 7, 120);  // another name
  m.Add(false, b1, 1, 8, 130);  // another token
  m.Add(true, b1c, 1, 7, 200);  // closes block 1's, not block 0's older one
  const auto s = Match(m, 1000);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].begin_ns, 100u);  // block 0: unterminated
  EXPECT_EQ(s[0].end_ns, 1000u);
  EXPECT_EQ(s[0].end_warp, nullptr);
  EXPECT_EQ(s[1].begin_ns, 110u);
  EXPECT_EQ(s[1].end_ns, 200u);
  EXPECT_EQ(s[1].block[0], 1u);
  EXPECT_EQ(s[1].end_warp, &b1c);
  EXPECT_EQ(s[2].begin_ns, 120u);
  EXPECT_EQ(s[2].end_warp, nullptr);
  EXPECT_EQ(s[3].begin_ns, 130u);
  EXPECT_EQ(s[3].end_warp, nullptr);
}

TEST(AsyncMatcherTest, UnmatchedEndsAndUnterminatedSpans) {
  const trace::WarpRecord w = MakeWarp(0, 0, 0);
  AsyncMatcher m;
  m.Add(true, w, 1, 0, 50);    // an END with no BEGIN
  m.Add(false, w, 1, 0, 100);  // a BEGIN with no END
  m.Add(false, w, 2, 0, 900);  // begins after the launch end given: ends where it begins
  const auto s = Match(m, 500);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].begin_ns, 50u);
  EXPECT_EQ(s[0].end_ns, 50u);
  EXPECT_EQ(s[0].begin_warp, nullptr);
  EXPECT_EQ(s[0].end_warp, &w);
  EXPECT_EQ(s[1].begin_ns, 100u);
  EXPECT_EQ(s[1].end_ns, 500u);
  EXPECT_EQ(s[1].begin_warp, &w);
  EXPECT_EQ(s[1].end_warp, nullptr);
  EXPECT_EQ(s[2].begin_ns, 900u);
  EXPECT_EQ(s[2].end_ns, 900u);
}

// At the same time a BEGIN comes before an END: the END closes it.
TEST(AsyncMatcherTest, ABeginAtTheSameTimeAsAnEndComesFirst) {
  const trace::WarpRecord w = MakeWarp(0, 0, 0);
  AsyncMatcher m;
  m.Add(true, w, 1, 3, 100);
  m.Add(false, w, 1, 3, 100);
  const auto s = Match(m, 500);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].begin_warp, &w);
  EXPECT_EQ(s[0].end_warp, &w);
  EXPECT_EQ(s[0].begin_ns, 100u);
  EXPECT_EQ(s[0].end_ns, 100u);
}

TEST(AsyncMatcherTest, EventsBeyondTheCapAreDroppedAndCounted) {
  const trace::WarpRecord w = MakeWarp(0, 0, 0);
  AsyncMatcher m;
  for (size_t i = 0; i < kMaxAsyncEvents; ++i) ASSERT_TRUE(m.Add(false, w, 1, 0, i));
  EXPECT_FALSE(m.Add(true, w, 1, 0, 1));
  EXPECT_FALSE(m.Add(true, w, 1, 0, 2));
  EXPECT_EQ(m.dropped(), 2u);
  EXPECT_EQ(m.held(), kMaxAsyncEvents);
  std::vector<Span> s;
  m.Match(kMaxAsyncEvents, &s);
  EXPECT_EQ(s.size(), kMaxAsyncEvents);
  EXPECT_EQ(s.back().end_warp, nullptr);
  EXPECT_EQ(m.dropped(), 2u);
}

}  // namespace
}  // namespace smprof
