// RangeMatcher: matching, start order, lanes for ranges that overlap
// without nesting, and the early write-out of very long episodes.
#include "collector/range_matcher.h"

#include <gtest/gtest.h>

#include <vector>

namespace smprof {
namespace {

using Kind = RangeMatcher::Kind;

std::vector<RangeMatcher::Record> Take(RangeMatcher& m) {
  std::vector<RangeMatcher::Record> out = m.ready();
  m.ClearReady();
  return out;
}

TEST(RangeMatcherTest, NestedRangesAreReleasedInStartOrderWhenTheWarpIsIdle) {
  RangeMatcher m;
  m.Begin(1, 100, 10);
  m.Begin(2, 110, 20);
  m.End(2, 120, 35);
  EXPECT_TRUE(m.ready().empty());  // the outer range is still open
  m.Instant(3, 125);
  m.End(1, 200, 110);
  const auto r = Take(m);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].name_id, 1u);
  EXPECT_EQ(r[0].begin_ns, 100u);
  EXPECT_EQ(r[0].end_ns, 200u);
  EXPECT_EQ(r[0].cycles, 100u);
  EXPECT_EQ(r[0].depth, 0u);
  EXPECT_EQ(r[1].name_id, 2u);
  EXPECT_EQ(r[1].cycles, 15u);
  EXPECT_EQ(r[1].depth, 1u);
  EXPECT_EQ(r[2].kind, Kind::kInstant);
  EXPECT_EQ(r[2].depth, 1u);  // inside the outer range
  for (const auto& e : r) EXPECT_EQ(e.lane, 0u);
  m.Instant(4, 300);  // nothing open: released at once
  const auto i = Take(m);
  ASSERT_EQ(i.size(), 1u);
  EXPECT_EQ(i[0].depth, 0u);
}

// Producer/consumer: "load" and "mma" overlap without nesting; the one that
// does not fit the warp's track goes to lane 1, and lane 1 is reused.
TEST(RangeMatcherTest, OverlappingRangesGoToTheLowestLaneWhereTheyNest) {
  RangeMatcher m;
  m.Begin(1, 100, 0);  // load [100, 300)
  m.Begin(2, 200, 0);  // mma  [200, 400)
  m.End(1, 300, 0);
  m.Begin(1, 350, 0);  // load [350, 500)
  m.End(2, 400, 0);
  m.End(1, 500, 0);
  const auto r = Take(m);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].begin_ns, 100u);
  EXPECT_EQ(r[0].lane, 0u);
  EXPECT_EQ(r[1].begin_ns, 200u);
  EXPECT_EQ(r[1].lane, 1u);
  EXPECT_EQ(r[2].begin_ns, 350u);
  EXPECT_EQ(r[2].lane, 0u);  // [100,300) ended: fits lane 0 again
}

TEST(RangeMatcherTest, EndClosesTheLatestOpenBeginOfItsNameAndCountsUnmatched) {
  RangeMatcher m;
  m.Begin(1, 10, 0);
  m.Begin(1, 20, 0);
  m.End(1, 30, 0);
  EXPECT_EQ(m.open(), 1u);
  m.End(1, 40, 0);
  m.End(7, 50, 0);  // no BEGIN of 7
  const auto r = Take(m);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].begin_ns, 10u);
  EXPECT_EQ(r[0].end_ns, 40u);
  EXPECT_EQ(r[1].begin_ns, 20u);
  EXPECT_EQ(r[1].end_ns, 30u);
  EXPECT_EQ(r[2].kind, Kind::kUnmatchedEnd);
}

TEST(RangeMatcherTest, CloseAllEndsOpenRangesUnterminated) {
  RangeMatcher m;
  m.Begin(1, 10, 0);
  m.Begin(2, 20, 0);
  m.CloseAll(15, RangeMatcher::Why::kProducerLost);  // before the inner begin: clamped to it
  const auto r = Take(m);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].kind, Kind::kUnterminated);
  EXPECT_EQ(r[0].end_ns, 15u);
  EXPECT_EQ(r[1].end_ns, 20u);
  EXPECT_EQ(r[1].why, RangeMatcher::Why::kProducerLost);
  EXPECT_EQ(m.open(), 0u);
}

// An episode longer than kMaxBuffered is written out early; the range open
// across it comes later, on a lane of its own, so every lane still nests.
TEST(RangeMatcherTest, RecordsAreReleasedInStartOrderEvenWhenTheClockStepsBack) {
  RangeMatcher m;
  m.Begin(1, 100, 0);
  m.Begin(2, 120, 0);
  m.End(2, 130, 0);
  m.Begin(3, 110, 0);  // recorded later, starts earlier
  m.End(3, 115, 0);
  m.Instant(4, 105);
  m.End(1, 200, 0);
  const auto r = Take(m);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].name_id, 1u);
  EXPECT_EQ(r[1].name_id, 4u);
  EXPECT_EQ(r[2].name_id, 3u);
  EXPECT_EQ(r[3].name_id, 2u);
  for (const auto& e : r) EXPECT_EQ(e.lane, 0u);
}

TEST(RangeMatcherTest, AReusedMatcherStartsFromScratch) {
  RangeMatcher m;
  m.Begin(1, 100, 0);
  m.Begin(2, 110, 0);
  m.Reset();
  EXPECT_EQ(m.open(), 0u);
  EXPECT_EQ(m.last_ns(), 0u);
  m.End(1, 120, 0);  // nothing is open any more: unmatched
  auto r = Take(m);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, Kind::kUnmatchedEnd);
  m.Begin(5, 130, 7);
  m.End(5, 140, 17);
  r = Take(m);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, Kind::kSlice);
  EXPECT_EQ(r[0].cycles, 10u);
  EXPECT_EQ(r[0].lane, 0u);
}

TEST(RangeMatcherTest, AVeryLongEpisodeIsWrittenOutEarly) {
  RangeMatcher m;
  m.Begin(1, 0, 0);  // open across the whole episode
  uint64_t t = 1;
  size_t released = 0;
  for (size_t i = 0; i < RangeMatcher::kMaxBuffered; ++i, t += 2) {
    m.Begin(2, t, 0);
    m.End(2, t + 1, 0);
    released += m.ready().size();
    m.ClearReady();
  }
  EXPECT_EQ(released, RangeMatcher::kMaxBuffered);
  m.End(1, t, 0);
  const auto r = Take(m);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].name_id, 1u);
  EXPECT_EQ(r[0].begin_ns, 0u);
  EXPECT_GE(r[0].lane, 1u);
}

// An END's value goes on its slice, an instant's on the instant, a counter
// sample is marked; records without one carry none.
TEST(RangeMatcherTest, ValuesRideOnTheirRecords) {
  RangeMatcher m;
  m.Begin(1, 100, 0);
  m.Instant(2, 110, {-5, RangeMatcher::kValuePresent});
  m.Instant(3, 120, {int64_t{1} << 40, RangeMatcher::kValuePresent | RangeMatcher::kValueCounter});
  m.Instant(4, 130);
  m.End(1, 200, 0, {42, RangeMatcher::kValuePresent});
  m.End(9, 210, 0, {7, RangeMatcher::kValuePresent});  // unmatched: an instant with the value
  const auto r = Take(m);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].kind, Kind::kSlice);
  EXPECT_EQ(r[0].value_flags, RangeMatcher::kValuePresent);
  EXPECT_EQ(r[0].value, 42);
  EXPECT_EQ(r[1].name_id, 2u);
  EXPECT_EQ(r[1].value_flags, RangeMatcher::kValuePresent);
  EXPECT_EQ(r[1].value, -5);
  EXPECT_EQ(r[2].value_flags, RangeMatcher::kValuePresent | RangeMatcher::kValueCounter);
  EXPECT_EQ(r[2].value, int64_t{1} << 40);
  EXPECT_EQ(r[3].value_flags, 0u);
  EXPECT_EQ(r[3].value, 0);
  EXPECT_EQ(r[4].kind, Kind::kUnmatchedEnd);
  EXPECT_EQ(r[4].value, 7);
  for (const auto& e : r) EXPECT_FALSE(e.phase);
  // A plain END after a valued one: no value left over in the reused slot.
  m.Begin(1, 300, 0);
  m.End(1, 310, 0);
  const auto plain = Take(m);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].value_flags, 0u);
}

// A PHASE closes the open phase at its own time and cycles; PHASE_END
// closes the last; a range of the same name is matched apart.
TEST(RangeMatcherTest, PhasesCloseEachOtherApartFromRanges) {
  RangeMatcher m;
  m.Phase(1, 100, 1000);
  EXPECT_TRUE(m.phase_open());
  m.Begin(1, 110, 1010);           // a range named like the phase
  m.Phase(2, 150, 1050);           // closes phase 1, not the range
  m.End(1, 160, 1060);             // closes the range, not phase 2
  EXPECT_TRUE(m.ready().empty());  // phase 2 still open
  EXPECT_EQ(m.open(), 1u);
  EXPECT_TRUE(m.PhaseEnd(0, 200, 1100));
  EXPECT_FALSE(m.phase_open());
  const auto r = Take(m);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].name_id, 1u);
  EXPECT_TRUE(r[0].phase);
  EXPECT_EQ(r[0].kind, Kind::kSlice);
  EXPECT_EQ(r[0].begin_ns, 100u);
  EXPECT_EQ(r[0].end_ns, 150u);
  EXPECT_EQ(r[0].cycles, 50u);
  EXPECT_EQ(r[0].lane, 0u);
  EXPECT_EQ(r[1].name_id, 1u);
  EXPECT_FALSE(r[1].phase);
  EXPECT_EQ(r[1].begin_ns, 110u);
  EXPECT_EQ(r[1].end_ns, 160u);
  EXPECT_EQ(r[1].lane, 1u);  // overlaps phase 1 without nesting
  EXPECT_EQ(r[2].name_id, 2u);
  EXPECT_TRUE(r[2].phase);
  EXPECT_EQ(r[2].begin_ns, 150u);
  EXPECT_EQ(r[2].end_ns, 200u);
  EXPECT_EQ(r[2].cycles, 50u);
  // A PHASE_END with no phase open is an unmatched END.
  EXPECT_FALSE(m.PhaseEnd(3, 300, 0));
  const auto u = Take(m);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].kind, Kind::kUnmatchedEnd);
  EXPECT_EQ(u[0].name_id, 3u);
  EXPECT_EQ(u[0].begin_ns, 300u);
}

TEST(RangeMatcherTest, AnOpenPhaseEndsUnterminatedAndIsNeverEvicted) {
  RangeMatcher m;
  m.Phase(7, 10, 0);
  for (uint32_t i = 0; i + 1 < RangeMatcher::kMaxOpen; ++i) m.Begin(100, 20 + i, 0);
  EXPECT_EQ(m.open(), RangeMatcher::kMaxOpen);
  m.Begin(100, 1000000, 0);  // evicts the oldest range, not the phase
  EXPECT_TRUE(m.phase_open());
  EXPECT_EQ(m.open(), RangeMatcher::kMaxOpen);
  m.CloseAll(2000000, RangeMatcher::Why::kNone);
  EXPECT_FALSE(m.phase_open());
  const auto r = Take(m);
  ASSERT_EQ(r.size(), RangeMatcher::kMaxOpen + 1);
  EXPECT_TRUE(r[0].phase);
  EXPECT_EQ(r[0].kind, Kind::kUnterminated);
  EXPECT_EQ(r[0].begin_ns, 10u);
  EXPECT_EQ(r[0].end_ns, 2000000u);
  size_t evicted = 0;
  for (const auto& e : r) evicted += e.why == RangeMatcher::Why::kTooManyOpen ? 1 : 0;
  EXPECT_EQ(evicted, 1u);
  for (size_t i = 1; i < r.size(); ++i) EXPECT_FALSE(r[i].phase) << i;
}

}  // namespace
}  // namespace smprof
