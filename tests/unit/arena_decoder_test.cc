// Arena decoding and launch matching, fed with chunks written the way the
// device recorder writes them.
#include "collector/arena_decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "collector/clock_map.h"
#include "collector/launch_matcher.h"
#include "smprof/detail/arena_protocol.h"
#include "tests/support/arena_builder.h"

namespace smprof::arena {
namespace {

constexpr uint32_t kChunk = 256;  // 3 header slots + 13 events

using testing::ArenaBuilder;

// Decodes and maps clocks at 1 cycle/ns (the builder's default anchors).
std::vector<WarpSegment> Decode(const ArenaBuilder& a, DecodeStats* stats) {
  std::vector<WarpSegment> out;
  DecodeChunks(a.data(), a.used(), kChunk, &out, stats);
  MapEventClocks(&out, 1.0);
  return out;
}

TEST(DecodeChunks, ReadsHeadersAndEventsInOrder) {
  ArenaBuilder a(4);
  const uint32_t c = a.Claim(42, 7, 3, 11, 0x2000, 5, 6, wire::kChunkFromCursor);
  a.Add(c, 100, 8, wire::kEventBegin);
  a.Add(c, 200, 8, wire::kEventEnd, 77);
  a.Add(c, 0x0012345600000250ull, -16, wire::kEventInstant);  // clock bits above 32 come from info
  std::vector<WarpSegment> out;
  DecodeStats stats;
  DecodeChunks(a.data(), a.used(), kChunk, &out, &stats);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].grid_id, 42u);
  EXPECT_EQ(out[0].name_base, 0x2000u);
  EXPECT_EQ(out[0].block[0], 7u);
  EXPECT_EQ(out[0].warp, 3u);
  EXPECT_EQ(out[0].hw_warp, 43u);
  EXPECT_EQ(out[0].sm, 11u);
  EXPECT_EQ(out[0].flags, wire::kChunkFromCursor);
  EXPECT_EQ(out[0].anchor_clock, 5u);
  EXPECT_EQ(out[0].anchor_time_ns, 6u);
  ASSERT_EQ(out[0].events.size(), 3u);
  EXPECT_EQ(out[0].events[2].name_offset, -16);
  EXPECT_EQ(out[0].events[2].clock, 0x0012345600000250ull);
  EXPECT_EQ(out[0].events[1].clock, 200u);
  EXPECT_EQ(out[0].events[1].value, 77u);
  EXPECT_EQ(out[0].events[1].info, uint32_t{wire::kEventEnd});
  EXPECT_EQ(stats.events, 3u);
  EXPECT_EQ(stats.malformed_events, 0u);
}

TEST(DecodeChunks, RejectsCorruptChunksAndEventsAndSkipsUnusedSlots) {
  ArenaBuilder a(4);
  const uint32_t good = a.Claim(1, 0, 0, 0);
  a.Add(good, 10, 0, wire::kEventInstant);
  a.Add(good, 20, 0, 9);                                           // a kind this recorder does not write
  a.Add(good, 25, 0, wire::kEventBegin | wire::kEventHasValue);    // a flag its kind does not take
  a.Add(good, 0, 5, 0);                                            // info 0 but not an unused slot
  const uint32_t bad = a.Claim(2, 0, 1, 0);
  a.Add(bad, 30, 0, wire::kEventInstant);
  a.At(bad, 0)[27] = 0x00;  // break the magic
  // A gap (a diverged half that raced a claim leaves one) is skipped.
  const uint32_t gappy = a.Claim(3, 0, 2, 0);
  a.Add(gappy, 40, 0, wire::kEventInstant);
  a.Skip(gappy);
  a.Add(gappy, 50, 0, wire::kEventInstant);
  std::vector<WarpSegment> out;
  DecodeStats stats;
  DecodeChunks(a.data(), a.used(), kChunk, &out, &stats);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].events.size(), 1u);
  EXPECT_EQ(out[1].events.size(), 2u);
  EXPECT_EQ(stats.malformed_chunks, 1u);
  EXPECT_EQ(stats.malformed_events, 3u);
}

TEST(DecodeChunks, CountsAChunkClaimedButNeverWrittenAsEmptyNotMalformed) {
  ArenaBuilder a(4);
  a.ClaimUnwritten();
  const uint32_t c = a.Claim(1, 0, 0, 0);
  a.Add(c, 10, 0, wire::kEventInstant);
  const uint32_t stray = a.ClaimUnwritten();
  a.At(stray, 0)[5] = 0x01;  // zero but for one byte: not an unwritten chunk
  std::vector<WarpSegment> out;
  DecodeStats stats;
  DecodeChunks(a.data(), a.used(), kChunk, &out, &stats);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].events.size(), 1u);
  EXPECT_EQ(stats.chunks, 3u);
  EXPECT_EQ(stats.empty_chunks, 1u);
  EXPECT_EQ(stats.malformed_chunks, 1u);
  EXPECT_EQ(stats.malformed_events, 0u);
}

// The device API's kinds and flags (docs/device-api.md): a wide value's
// continuation slot is folded into its event; one out of place, or a flag
// a kind does not take, is malformed.
TEST(DecodeChunks, FoldsWideValuesAndChecksEachKindsFlags) {
  ArenaBuilder a(2);
  const uint32_t c = a.Claim(1, 0, 0, 0);
  a.Add(c, 10, 0, wire::kEventPhase | wire::kEventNameValue, 3);
  a.Add(c, 11, 0, wire::kEventInstant | wire::kEventHasValue | wire::kEventWideValue, 0x89abcdefu);
  a.Add(c, 11, 0, wire::kEventValueHigh, 0x01234567u);
  a.Add(c, 12, 0, wire::kEventInstant | wire::kEventHasValue | wire::kEventCounter, 5);
  a.Add(c, 13, 0, wire::kEventAsyncBegin, 7);
  a.Add(c, 14, 0, wire::kEventAsyncEnd, 7);
  a.Add(c, 15, 0, wire::kEventPhaseEnd);
  a.Add(c, 16, 0, wire::kEventEnd | wire::kEventHasValue, 9);
  const uint32_t d = a.Claim(1, 0, 0, 0);                                              // 13 slots a chunk
  a.Add(d, 17, 0, wire::kEventValueHigh, 1);                                           // no wide event before it
  a.Add(d, 18, 0, wire::kEventInstant | wire::kEventCounter, 1);                       // a counter without a value
  a.Add(d, 19, 0, wire::kEventEnd | wire::kEventHasValue | wire::kEventNameValue, 1);  // a value and a name integer
  a.Add(d, 20, 0, wire::kEventAsyncBegin | wire::kEventHasValue, 1);                   // async spans take no value
  a.Add(d, 21, 0, wire::kEventEnd | wire::kEventHasValue | wire::kEventWideValue, 2);  // continuation missing
  a.Add(d, 22, 0, wire::kEventInstant);
  std::vector<WarpSegment> out;
  DecodeStats stats;
  DecodeChunks(a.data(), a.used(), kChunk, &out, &stats);
  ASSERT_EQ(out.size(), 2u);
  std::vector<DecodedEvent> e = out[0].events;
  e.insert(e.end(), out[1].events.begin(), out[1].events.end());
  ASSERT_EQ(e.size(), 8u);
  EXPECT_EQ(e[0].info, uint32_t{wire::kEventPhase | wire::kEventNameValue});
  EXPECT_EQ(e[0].value, 3u);
  EXPECT_EQ(e[1].value, 0x89abcdefu);
  EXPECT_EQ(e[1].value_high, 0x01234567u);
  EXPECT_EQ(e[2].info, uint32_t{wire::kEventInstant | wire::kEventHasValue | wire::kEventCounter});
  EXPECT_EQ(e[3].value, 7u);
  EXPECT_EQ(e[5].info, uint32_t{wire::kEventPhaseEnd});
  EXPECT_EQ(e[6].value, 9u);
  EXPECT_EQ(e[6].value_high, 0u);
  EXPECT_EQ(e[7].clock, 22u);  // the slot after the wide END without its continuation is read on its own
  EXPECT_EQ(stats.events, 8u);
  EXPECT_EQ(stats.malformed_events, 5u);
}

uint32_t Tag(uint32_t kind_flags, uint32_t name, bool value_follows = false) {
  return kind_flags | name << wire::kCompactNameShift | (value_follows ? wire::kCompactValueFollows : 0);
}

// The Triton markers' 8-byte events: 32-bit clocks unwrapped against the
// anchor (the first event may precede it) and then each predecessor, across
// a wrap of the 32 bits and over gaps up to 2^32 cycles; a value in the slot
// after its event.
TEST(DecodeChunks, CompactChunksUnwrapTheirClocksAndReadValueSlots) {
  ArenaBuilder a(1);
  const uint64_t anchor = 0x7ffffff00ull;  // bits 0-31: 0xfffffff00
  const uint32_t c = a.Claim(9, 4, 2, 3, 0x3000, anchor, 100, wire::kChunkFromTriton | wire::kChunkCompact);
  const uint32_t h = wire::kCompactHeaderSlots;
  a.Compact(c, h, 0xfffffef0u, Tag(wire::kEventBegin, 1));                              // 16 cycles before the anchor
  a.Compact(c, h + 1, 0x00000010u, Tag(wire::kEventEnd | wire::kEventHasValue, 6, true));  // after a wrap
  a.Compact(c, h + 2, 0xdeadbeefu, 0x01234567u);                                          // its value (not wide)
  a.Compact(c, h + 3, 0x00000000u, Tag(wire::kEventInstant | wire::kEventHasValue | wire::kEventWideValue,
                                       0x7fffff, true));  // 2^32 - 16 cycles later: one short of a second wrap
  a.Compact(c, h + 4, 0x89abcdefu, 0x01234567u);
  a.Compact(c, h + 6, 0x00000020u, Tag(wire::kEventAsyncBegin, 11, true));  // slot h + 5 unused
  a.Compact(c, h + 7, 7, 0);
  std::vector<WarpSegment> out;
  DecodeStats stats;
  DecodeChunks(a.data(), a.used(), kChunk, &out, &stats);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].grid_id, 9u);
  EXPECT_EQ(out[0].flags, wire::kChunkFromTriton | wire::kChunkCompact);
  const std::vector<DecodedEvent>& e = out[0].events;
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].clock, anchor - 16);
  EXPECT_EQ(e[0].info, uint32_t{wire::kEventBegin});
  EXPECT_EQ(e[0].name_offset, 1);
  EXPECT_EQ(e[1].clock, 0x800000010ull);
  EXPECT_EQ(e[1].name_offset, 6);
  EXPECT_EQ(e[1].value, 0xdeadbeefu);
  EXPECT_EQ(e[1].value_high, 0u);  // not a wide value: the slot's upper half is not read
  EXPECT_EQ(e[2].clock, 0x900000000ull);
  EXPECT_EQ(e[2].name_offset, 0x7fffff);
  EXPECT_EQ(e[2].value, 0x89abcdefu);
  EXPECT_EQ(e[2].value_high, 0x01234567u);
  EXPECT_EQ(e[3].clock, 0x900000020ull);
  EXPECT_EQ(e[3].value, 7u);
  EXPECT_EQ(stats.events, 4u);
  EXPECT_EQ(stats.malformed_events, 0u);
}

// A Triton chunk's header says its cluster's shape; bits above the shape
// (from shared memory that is not trusted) are dropped.
TEST(DecodeChunks, TheClusterShapeComesFromTheHeader) {
  ArenaBuilder a(2);
  for (const uint16_t shape : {uint16_t{0x001}, uint16_t{0xf213}}) {
    const uint32_t c = a.Claim(9, 4, 2, 3, 0x3000, 0, 0, wire::kChunkFromTriton | wire::kChunkCompact);
    std::memcpy(a.At(c, 0) + offsetof(wire::ChunkHeader, cluster), &shape, sizeof(shape));
    a.Compact(c, wire::kCompactHeaderSlots, 10, Tag(wire::kEventInstant, 1));
  }
  std::vector<WarpSegment> out;
  DecodeStats stats;
  DecodeChunks(a.data(), a.used(), kChunk, &out, &stats);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].cluster, 0x001);
  EXPECT_EQ(out[1].cluster, 0x213);
  EXPECT_EQ(wire::ClusterExtent(out[1].cluster, 0), 4u);
  EXPECT_EQ(wire::ClusterExtent(out[1].cluster, 1), 2u);
  EXPECT_EQ(wire::ClusterExtent(out[1].cluster, 2), 3u);
}

// A compact slot is malformed when its kind and flags do not go together,
// when it says a value follows and its kind takes none (or the reverse), or
// when its value would lie past the chunk; a zero tag with a clock is not an
// unused slot. The slot after a refused event is read on its own.
TEST(DecodeChunks, CompactSlotsThatDisagreeWithTheirKindAreMalformed) {
  ArenaBuilder a(1);
  const uint32_t c = a.Claim(1, 0, 0, 0, 0x1000, 0, 0, wire::kChunkFromTriton | wire::kChunkCompact);
  const uint32_t h = wire::kCompactHeaderSlots;
  a.Compact(c, h, 10, Tag(wire::kEventBegin, 1, true));                   // a value BEGIN does not take
  a.Compact(c, h + 1, 11, Tag(wire::kEventInstant | wire::kEventHasValue, 1));  // its value slot missing
  a.Compact(c, h + 2, 12, Tag(9, 1));                                      // no such kind
  a.Compact(c, h + 3, 13, 0);                                              // a clock without a tag
  a.Compact(c, h + 4, 14, Tag(wire::kEventInstant, 2));
  const uint32_t last = kChunk / sizeof(wire::CompactEvent) - 1;
  a.Compact(c, last, 15, Tag(wire::kEventInstant | wire::kEventHasValue, 1, true));  // its value past the end
  std::vector<WarpSegment> out;
  DecodeStats stats;
  DecodeChunks(a.data(), a.used(), kChunk, &out, &stats);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].events.size(), 1u);
  EXPECT_EQ(out[0].events[0].clock, 14u);
  EXPECT_EQ(stats.malformed_events, 5u);
}

// A wide event in a chunk's last slot has no continuation: malformed (the
// recorder never writes one there).
TEST(DecodeChunks, AWideEventInAChunksLastSlotIsMalformed) {
  ArenaBuilder a(1);
  const uint32_t c = a.Claim(1, 0, 0, 0);
  const uint32_t slots = kChunk / 16 - wire::kChunkHeaderSlots;
  for (uint32_t i = 0; i + 1 < slots; ++i) a.Add(c, 10 + i, 0, wire::kEventInstant);
  a.Add(c, 500, 0, wire::kEventInstant | wire::kEventHasValue | wire::kEventWideValue, 1);
  std::vector<WarpSegment> out;
  DecodeStats stats;
  DecodeChunks(a.data(), a.used(), kChunk, &out, &stats);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].events.size(), slots - 1);
  EXPECT_EQ(stats.malformed_events, 1u);
}

TEST(MapEventClocks, MapsThroughTheNearestEarlierAnchorOfTheSameSm) {
  ArenaBuilder a(4);
  // SM 1: anchors 100 us apart at 2 cycles/ns; SM 2: its own clock origin.
  const uint32_t c1 = a.Claim(1, 0, 0, 1, 0x1000, 1000000, 5000000);
  const uint32_t c2 = a.Claim(1, 1, 0, 1, 0x1000, 1200000, 5100000);
  const uint32_t c3 = a.Claim(1, 2, 0, 2, 0x1000, 77, 5000000);
  a.Add(c1, 1000000 + 2000, 0, wire::kEventInstant);  // 1 us after the first anchor
  a.Add(c2, 1200000 + 20, 0, wire::kEventInstant);    // 10 ns after the second
  a.Add(c1, 999000, 0, wire::kEventInstant);          // before every anchor: the first one
  a.Add(c3, 77 + 3000, 0, wire::kEventInstant);       // one anchor only: the fallback rate (1.5)
  std::vector<WarpSegment> out;
  DecodeStats stats;
  DecodeChunks(a.data(), a.used(), kChunk, &out, &stats);
  MapEventClocks(&out, 1.5);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].events[0].time_ns, 5001000u);
  EXPECT_EQ(out[0].events[1].time_ns, 5000000u - 500u);
  EXPECT_EQ(out[1].events[0].time_ns, 5100010u);
  EXPECT_EQ(out[2].events[0].time_ns, 5002000u);
}

// Split over threads, a large read-back decodes to exactly what one pass
// gives: the same segments in the same order, the same times and counts.
TEST(DecodeChunks, SplitOverThreadsGivesWhatOnePassGives) {
  const uint32_t chunks = 3 * kChunksPerDecodeThread + 77;
  ArenaBuilder a(chunks);
  uint64_t clock = 1000000;
  for (uint32_t c = 0; c < chunks; ++c) {
    const uint16_t sm = static_cast<uint16_t>(c * 7 % 132);
    // Anchors at about 1.9 cycles/ns with a 32 ns %globaltimer tick.
    const uint64_t anchor_clock = clock + sm * 1000;
    const uint64_t anchor_time = (anchor_clock * 10 / 19) / 32 * 32;
    const uint32_t k =
        a.Claim(1 + c / 5000, c % 64, static_cast<uint16_t>(c % 8), sm, 0x1000, anchor_clock, anchor_time);
    if (c % 1000 == 999) {
      a.Add(k, anchor_clock + 5, 0, 99);  // a malformed event
      continue;
    }
    for (uint32_t e = 0; e < 13; ++e)
      a.Add(k, anchor_clock + 40 * e + c % 13, static_cast<int32_t>(e % 3), wire::kEventBegin + e % 3);
    clock += 300;
  }
  std::vector<WarpSegment> one, split;
  DecodeStats one_stats, split_stats;
  DecodeChunks(a.data(), a.used(), kChunk, &one, &one_stats);
  MapEventClocks(&one, 1.9);
  std::vector<ChunkPart> parts;
  for (uint32_t c = 0; c < a.used(); ++c) parts.push_back(ChunkPart{a.data() + size_t{c} * kChunk, kChunk});
  DecodeChunks(parts, kChunk, 4, &split, &split_stats);
  MapEventClocks(&split, 1.9, 4);
  ASSERT_EQ(split.size(), one.size());
  EXPECT_EQ(split_stats.chunks, one_stats.chunks);
  EXPECT_EQ(split_stats.events, one_stats.events);
  EXPECT_EQ(split_stats.malformed_events, one_stats.malformed_events);
  EXPECT_GT(one_stats.malformed_events, 0u);
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(split[i].anchor_clock, one[i].anchor_clock) << i;
    ASSERT_EQ(split[i].events.size(), one[i].events.size()) << i;
    for (size_t e = 0; e < one[i].events.size(); ++e) {
      ASSERT_EQ(split[i].events[e].time_ns, one[i].events[e].time_ns) << i << " " << e;
      ASSERT_EQ(split[i].events[e].clock, one[i].events[e].clock) << i << " " << e;
    }
  }
}

TEST(ClockMap, TakesTheTightestBoundOfNearbyAnchors) {
  // 1 cycle/ns. Two anchors 1 us apart read %globaltimer 20 ns and 0 ns
  // after a tick: the later-rounded one (the larger estimate) wins for events
  // near both; a far anchor (100 us) does not count.
  ClockMap map(1.0);
  map.AddAnchor(3, 1000, 5000);  // true 5020: read 20 ns late in its tick
  map.AddAnchor(3, 2000, 6020);  // true 6020: read on the tick
  map.AddAnchor(3, 102000, 105990);
  map.Build();
  EXPECT_EQ(map.ToNs(3, 1500), 5520u);  // through the second anchor, not 5500
  EXPECT_EQ(map.ToNs(3, 2500), 6520u);
  EXPECT_EQ(map.ToNs(3, 102500), 106490u);
}

// ToNs divides only for neighbours a multiplication does not rule out; the
// result must be what dividing for every neighbour within the span gives
// (the rule above, written out here), on anchors like a busy SM's: read up
// to a 32 ns tick late, a few hundred ns to a few us apart.
// The cursor evaluates only the neighbours that can still win; ToNs all of
// them: both must give the brute-force result exactly.
TEST(ClockMap, SkippingDivisionsChangesNoResult) {
  struct A {
    uint64_t clock, time;
  };
  uint64_t lcg = 12345;
  const auto next = [&](uint64_t n) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (lcg >> 33) % n;
  };
  ClockMap map(1.98);
  std::vector<std::vector<A>> anchors(4);
  const double rates[] = {1.98, 1.755, 1.41, 1.98};
  for (uint16_t sm = 0; sm < 4; ++sm) {
    uint64_t clock = 1000000 + next(100000);
    for (int i = 0; i < 200; ++i) {
      clock += 200 + next(8000);
      const double true_ns = 1.8e18 / 1e9 * 1e9 + static_cast<double>(clock) / rates[sm];
      const uint64_t time = static_cast<uint64_t>(true_ns) / 32 * 32 + (i % 7 == 0 ? next(3) : 0);
      anchors[sm].push_back({clock, time});
      map.AddAnchor(sm, clock, time);
    }
  }
  map.Build();
  uint64_t checked = 0;
  for (uint16_t sm = 0; sm < 4; ++sm) {
    std::vector<A>& a = anchors[sm];
    std::sort(a.begin(), a.end(), [](const A& x, const A& y) { return x.clock < y.clock; });
    const double rate = map.CyclesPerNs(sm);
    // Random order, then increasing runs (as within a chunk): the cursor's two ways.
    std::vector<uint64_t> queries;
    for (int q = 0; q < 20000; ++q)
      queries.push_back(a.front().clock - 5000 + next(a.back().clock - a.front().clock + 10000));
    std::vector<uint64_t> sorted = queries;
    std::sort(sorted.begin() + 10000, sorted.end());
    ClockMap::Cursor cursor(map, sm);
    for (const uint64_t clock : sorted) {
      size_t nearest = 0;
      while (nearest + 1 < a.size() && a[nearest + 1].clock <= clock) ++nearest;
      const auto through = [&](const A& x) {
        return static_cast<int64_t>(x.time) +
               std::llround(static_cast<double>(static_cast<int64_t>(clock - x.clock)) / rate);
      };
      const int64_t base = through(a[nearest]);
      int64_t best = base;
      const size_t lo = nearest > ClockMap::kNeighbours ? nearest - ClockMap::kNeighbours : 0;
      const size_t hi = std::min(a.size(), nearest + ClockMap::kNeighbours + 1);
      for (size_t i = lo; i < hi; ++i) {
        const int64_t gap = static_cast<int64_t>(clock - a[i].clock);
        if (std::llabs(gap) > static_cast<int64_t>(ClockMap::kNeighbourSpanNs * rate)) continue;
        const int64_t estimate = through(a[i]);
        if (estimate > best && estimate - base <= ClockMap::kMaxTickNs) best = estimate;
      }
      ASSERT_EQ(map.ToNs(sm, clock), static_cast<uint64_t>(best)) << "sm " << sm << " clock " << clock;
      ASSERT_EQ(cursor.ToNs(clock), static_cast<uint64_t>(best)) << "cursor, sm " << sm << " clock " << clock;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 80000u);
}

TEST(ClockMap, KeepsTheFallbackWhenAnchorsContradictIt) {
  ClockMap map(2.0);
  map.AddAnchor(0, 0, 1000000);
  map.AddAnchor(0, 100, 2000000);  // 1e-4 cycles/ns over 1 ms: not a clock
  map.Build();
  EXPECT_DOUBLE_EQ(map.CyclesPerNs(0), 2.0);
  EXPECT_EQ(map.ToNs(0, 40), 1000020u);
  EXPECT_EQ(map.ToNs(7, 40), 0u) << "an SM without anchors cannot be mapped";
}

KernelRecord Record(uint64_t grid, uint64_t start, uint64_t end, uint64_t corr, bool wanted = true) {
  KernelRecord r;
  r.grid_id = grid;
  r.start_ns = start;
  r.end_ns = end;
  r.correlation_id = corr;
  r.flags = wanted ? uint32_t{wire::kRecordWanted} : 0u;
  return r;
}

TEST(MatchLaunches, SeparatesGraphReplaysSharingAGridIdByTime) {
  // One warp continued the same chunk across two replays of grid 9.
  ArenaBuilder a(2);
  const uint32_t c = a.Claim(9, 0, 0, 0);
  a.Add(c, 1000, 0, wire::kEventInstant);
  a.Add(c, 1100, 0, wire::kEventInstant);
  a.Add(c, 50000, 0, wire::kEventInstant);
  DecodeStats ds;
  std::vector<WarpSegment> segs = Decode(a, &ds);
  const std::vector<KernelRecord> records = {Record(9, 40000, 60000, 2), Record(9, 900, 1200, 1)};
  MatchStats ms;
  const auto launches = MatchLaunches(&segs, records, 0, &ms);
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].record.correlation_id, 1u);  // sorted by start
  EXPECT_EQ(launches[0].event_count, 2u);
  EXPECT_EQ(launches[1].event_count, 1u);
  EXPECT_EQ(ms.events, 3u);
}

TEST(MatchLaunches, FiltersUnwantedLaunchesAndKeepsOrphans) {
  ArenaBuilder a(3);
  const uint32_t keep = a.Claim(1, 0, 0, 0);
  a.Add(keep, 100, 0, wire::kEventInstant);
  const uint32_t drop = a.Claim(2, 0, 0, 0);
  a.Add(drop, 100, 0, wire::kEventInstant);
  a.Add(drop, 110, 0, wire::kEventInstant);
  const uint32_t orphan = a.Claim(3, 5, 1, 2);
  a.Add(orphan, 300, 0, wire::kEventInstant);
  DecodeStats ds;
  std::vector<WarpSegment> segs = Decode(a, &ds);
  const std::vector<KernelRecord> records = {Record(1, 50, 150, 1), Record(2, 50, 150, 2, /*wanted=*/false),
                                             Record(4, 10, 20, 3)};
  MatchStats ms;
  const auto launches = MatchLaunches(&segs, records, 0, &ms);
  ASSERT_EQ(launches.size(), 2u);  // gemm with events, orphan grid 3; not "other", not the silent gemm
  EXPECT_EQ(ms.filtered, 2u);
  EXPECT_EQ(ms.unattributed, 1u);
  EXPECT_EQ(ms.events, 2u);
  const Launch* synthetic = nullptr;
  for (const auto& l : launches)
    if (l.flags & wire::kLaunchNoActivity) synthetic = &l;
  ASSERT_NE(synthetic, nullptr);
  EXPECT_EQ(synthetic->record.grid_id, 3u);
  EXPECT_EQ(synthetic->record.start_ns, 300u);
}

TEST(MatchLaunches, MovesEventsOntoCuptiClock) {
  ArenaBuilder a(1);
  const uint32_t c = a.Claim(5, 0, 0, 0);
  a.Add(c, 1000, 0, wire::kEventInstant);
  DecodeStats ds;
  std::vector<WarpSegment> segs = Decode(a, &ds);
  MatchStats ms;
  const auto launches = MatchLaunches(&segs, {Record(5, 100900, 101200, 1)}, 100000, &ms);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].warps[0].events[0].time_ns, 101000u);
}

TEST(EstimateClockOffset, ClampsTheProbeIntoWhatUnambiguousLaunchesAllow) {
  ArenaBuilder a(3);
  const uint32_t c1 = a.Claim(1, 0, 0, 0);
  a.Add(c1, 1000, 0, wire::kEventInstant);
  a.Add(c1, 1500, 0, wire::kEventInstant);
  const uint32_t c2 = a.Claim(2, 0, 0, 0);
  a.Add(c2, 5000, 0, wire::kEventInstant);
  const uint32_t c3 = a.Claim(3, 0, 0, 0);  // two records: ambiguous, ignored
  a.Add(c3, 9000, 0, wire::kEventInstant);
  DecodeStats ds;
  std::vector<WarpSegment> segs = Decode(a, &ds);
  // Grid 1 allows offsets [100800-1000, 101600-1500] = [99800, 100100];
  // grid 2 allows [104950-5000, 105100-5000] = [99950, 100100].
  const std::vector<KernelRecord> records = {Record(1, 100800, 101600, 1), Record(2, 104950, 105100, 2),
                                             Record(3, 0, 10, 3), Record(3, 50, 60, 4)};
  EXPECT_EQ(EstimateClockOffset(segs, records, 99000), 99950);
  EXPECT_EQ(EstimateClockOffset(segs, records, 100000), 100000);
  EXPECT_EQ(EstimateClockOffset(segs, records, 200000), 100100);
  // Contradicting launches: keep the estimate.
  const std::vector<KernelRecord> bad = {Record(1, 100800, 101600, 1), Record(2, 5000, 5100, 2)};
  EXPECT_EQ(EstimateClockOffset(segs, bad, 12345), 12345);
}

TEST(MatchLaunches, MergesTheChunksOfOneWarpInClockOrder) {
  // Warp 0 of block 0: a context chunk and a cursor chunk (diverged markers)
  // and, claimed later, a second context chunk; warp 1 is separate.
  ArenaBuilder a(4);
  const uint32_t ctx = a.Claim(7, 0, 0, 0);
  const uint32_t cursor = a.Claim(7, 0, 0, 0, 0x1000, 0, 0, wire::kChunkFromCursor);
  const uint32_t other = a.Claim(7, 0, 1, 0);
  const uint32_t ctx2 = a.Claim(7, 0, 0, 0);
  a.Add(ctx, 100, 1, wire::kEventBegin);
  a.Add(cursor, 110, 2, wire::kEventInstant);
  a.Add(cursor, 120, 3, wire::kEventInstant);
  a.Add(ctx, 130, 1, wire::kEventEnd);
  a.Add(ctx2, 140, 4, wire::kEventInstant);
  a.Add(other, 105, 5, wire::kEventInstant);
  DecodeStats ds;
  std::vector<WarpSegment> segs = Decode(a, &ds);
  MatchStats ms;
  const auto launches = MatchLaunches(&segs, {Record(7, 0, 1000, 1)}, 0, &ms);
  ASSERT_EQ(launches.size(), 1u);
  ASSERT_EQ(launches[0].warps.size(), 2u);
  const LaunchEvents& w0 = launches[0].warps[0];
  EXPECT_EQ(w0.segment->warp, 0u);
  std::vector<int32_t> names;
  for (const DecodedEvent& e : w0.events) names.push_back(e.name_offset);
  EXPECT_EQ(names, (std::vector<int32_t>{1, 2, 3, 1, 4}));
  EXPECT_EQ(launches[0].warps[1].segment->warp, 1u);
  EXPECT_EQ(launches[0].event_count, 6u);
}

// Merging a launch's warps over threads gives what one thread gives: the same
// launches, warps, chunk counts and events (times moved onto CUPTI's clock),
// for a launch of one record, graph replays sharing a grid id and a grid
// without a record; the first is large enough to be split over threads.
TEST(MatchLaunches, MergingOverThreadsGivesWhatOneThreadGives) {
  std::vector<WarpSegment> segments;
  const auto add = [&](uint64_t grid, uint32_t block, uint16_t warp, uint64_t first_clock, uint32_t events,
                       uint64_t step) {
    WarpSegment s;
    s.grid_id = grid;
    s.block[0] = block;
    s.warp = warp;
    for (uint32_t i = 0; i < events; ++i) {
      DecodedEvent e;
      e.clock = first_clock + i * step;
      e.time_ns = 1000000 + e.clock;
      e.name_offset = static_cast<int32_t>(i % 7);
      e.info = wire::kEventInstant;
      s.events.push_back(e);
    }
    segments.push_back(std::move(s));
  };
  // Grid 1: 6000 warps of three chunks each, claimed round-robin, the third
  // interleaved with the first (a diverged marker's cursor chunk).
  constexpr uint32_t kWarps = 6000, kPerChunk = 120;
  for (uint32_t round = 0; round < 3; ++round) {
    for (uint32_t w = 0; w < kWarps; ++w) {
      const uint64_t start = round == 2 ? 5 : round * 10000;
      add(1, w / 4, static_cast<uint16_t>(w % 4), start, kPerChunk, round == 2 ? 10 : 20);
    }
  }
  // Grid 2: two graph replays, one warp's chunk spanning both; grid 3: no record.
  add(2, 0, 0, 100, 50, 10);
  add(2, 0, 0, 1000000, 50, 10);
  add(3, 0, 0, 0, 10, 1);
  const std::vector<KernelRecord> records = {Record(1, 1000000, 1100000, 1), Record(2, 1000000, 1001000, 2),
                                             Record(2, 1900000, 2100000, 3)};
  std::vector<WarpSegment> copy = segments;
  MatchStats one_stats, many_stats;
  const std::vector<Launch> one = MatchLaunches(&segments, records, 12345, &one_stats);
  const std::vector<Launch> many = MatchLaunches(&copy, records, 12345, &many_stats, nullptr, nullptr, 4);
  ASSERT_GE(one[0].event_count, 2 * kEventsPerMergeThread) << "too small to be split";
  ASSERT_EQ(one.size(), 4u);
  ASSERT_EQ(many.size(), one.size());
  EXPECT_EQ(many_stats.events, one_stats.events);
  EXPECT_EQ(many_stats.unattributed, one_stats.unattributed);
  for (size_t l = 0; l < one.size(); ++l) {
    EXPECT_EQ(many[l].record.correlation_id, one[l].record.correlation_id) << l;
    EXPECT_EQ(many[l].record.start_ns, one[l].record.start_ns) << l;
    EXPECT_EQ(many[l].flags, one[l].flags) << l;
    EXPECT_EQ(many[l].event_count, one[l].event_count) << l;
    ASSERT_EQ(many[l].warps.size(), one[l].warps.size()) << l;
    for (size_t w = 0; w < one[l].warps.size(); ++w) {
      const LaunchEvents& a = one[l].warps[w];
      const LaunchEvents& b = many[l].warps[w];
      ASSERT_EQ(b.segment->block[0], a.segment->block[0]);
      ASSERT_EQ(b.segment->warp, a.segment->warp);
      ASSERT_EQ(b.chunks, a.chunks);
      ASSERT_EQ(b.events.size(), a.events.size());
      for (size_t e = 0; e < a.events.size(); ++e) {
        ASSERT_EQ(b.events[e].clock, a.events[e].clock) << l << " " << w << " " << e;
        ASSERT_EQ(b.events[e].time_ns, a.events[e].time_ns) << l << " " << w << " " << e;
        ASSERT_EQ(b.events[e].name_offset, a.events[e].name_offset) << l << " " << w << " " << e;
      }
    }
  }
  // Merged in clock order, times moved by the offset.
  const LaunchEvents& first = one[0].warps[0];
  EXPECT_EQ(first.chunks, 3u);
  EXPECT_TRUE(std::is_sorted(first.events.begin(), first.events.end(),
                             [](const DecodedEvent& x, const DecodedEvent& y) { return x.clock < y.clock; }));
  EXPECT_EQ(first.events[0].time_ns, 1000000u + 0 + 12345);
}

// The words every arena writer stores (arena_protocol.h) are the fields the
// readers take from wire.h's structs.
TEST(ArenaProtocol, WordsAreTheHeaderAndEventFields) {
  const uint64_t header_words[protocol::kChunkHeaderWords] = {
      0x1122334455667788ull, 0x7f0000001000ull, protocol::BlockWord(70000, 65535, 3),
      protocol::WarpWord(131, 31, 63, wire::kChunkFromCursor), 123456789012ull, 987654321098ull};
  wire::ChunkHeader h;
  static_assert(sizeof(header_words) == sizeof(h));
  std::memcpy(&h, header_words, sizeof(h));
  EXPECT_EQ(h.grid_id, 0x1122334455667788ull);
  EXPECT_EQ(h.name_base, 0x7f0000001000ull);
  EXPECT_EQ(h.block_x, 70000u);
  EXPECT_EQ(h.block_y, 65535u);
  EXPECT_EQ(h.block_z, 3u);
  EXPECT_EQ(h.sm, 131u);
  EXPECT_EQ(h.warp, 31u);
  EXPECT_EQ(h.magic, wire::kChunkMagic);
  EXPECT_EQ(h.hw_warp, 63u);
  EXPECT_EQ(h.flags, wire::kChunkFromCursor);
  EXPECT_EQ(h.cluster, 0u);
  EXPECT_EQ(h.anchor_clock, 123456789012ull);
  EXPECT_EQ(h.anchor_time_ns, 987654321098ull);

  const uint64_t clock = (uint64_t{0x1234} << 32) | 0x89abcdefu;
  const uint32_t kind = wire::kEventEnd | wire::kEventHasValue;
  const uint64_t event_words[2] = {protocol::EventLow(clock, kind), protocol::EventHigh(0xfffffff0u, 42)};
  wire::Event e;
  std::memcpy(&e, event_words, sizeof(e));
  EXPECT_EQ(e.clock_lo, 0x89abcdefu);
  EXPECT_EQ(e.info & (wire::kEventKindMask | wire::kEventFlagsMask), kind);
  EXPECT_EQ(e.info >> wire::kEventClockShift, 0x1234u);
  EXPECT_EQ(e.name_offset, -16);
  EXPECT_EQ(e.value, 42u);
  const uint64_t continuation[2] = {protocol::ContinuationLow(event_words[0]), protocol::ContinuationHigh(7)};
  std::memcpy(&e, continuation, sizeof(e));
  EXPECT_EQ(e.clock_lo, 0x89abcdefu);
  EXPECT_EQ(e.info & (wire::kEventKindMask | wire::kEventFlagsMask), uint32_t{wire::kEventValueHigh});
  EXPECT_EQ(e.value, 7u);
}

}  // namespace
}  // namespace smprof::arena
