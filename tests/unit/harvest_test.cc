// Arena decoding and launch matching, fed with chunks written the way the
// device recorder writes them.
#include "injector/harvest.h"

#include <gtest/gtest.h>

#include <cstring>

namespace smprof::injector {
namespace {

constexpr uint32_t kChunk = 256;  // 2 header slots + 14 events

class ArenaBuilder {
 public:
  explicit ArenaBuilder(uint32_t chunks) : bytes_(static_cast<size_t>(chunks) * kChunk, 0) {}

  // Writes a chunk header like ClaimChunk does; returns the chunk index.
  uint32_t Claim(uint64_t grid, uint32_t bx, uint16_t warp, uint16_t sm, uint64_t anchor = 0x1000) {
    const uint32_t c = next_++;
    wire::ChunkHeader h{};
    h.grid_id = grid;
    h.anchor = anchor;
    h.block_x = bx;
    h.sm = sm;
    h.warp = static_cast<uint8_t>(warp);
    h.magic = wire::kChunkMagic;
    std::memcpy(At(c, 0), &h, sizeof(h));
    fill_.push_back(wire::kChunkHeaderSlots);
    return c;
  }
  void Add(uint32_t chunk, uint64_t t, int32_t name, uint32_t kind) {
    wire::Event e{t, name, kind};
    std::memcpy(At(chunk, fill_[chunk]++), &e, sizeof(e));
  }
  uint8_t* At(uint32_t chunk, uint32_t slot) { return bytes_.data() + chunk * kChunk + slot * 16; }
  const uint8_t* data() const { return bytes_.data(); }
  uint32_t used() const { return next_; }

 private:
  std::vector<uint8_t> bytes_;
  std::vector<uint32_t> fill_;
  uint32_t next_ = 0;
};

TEST(DecodeChunks, ReadsHeadersAndEventsInOrder) {
  ArenaBuilder a(4);
  const uint32_t c = a.Claim(42, 7, 3, 11);
  a.Add(c, 100, 8, wire::kEventBegin);
  a.Add(c, 200, 8, wire::kEventEnd);
  a.Add(c, 250, -16, wire::kEventInstant);
  std::vector<WarpSegment> out;
  DecodeStats stats;
  DecodeChunks(a.data(), a.used(), kChunk, &out, &stats);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].grid_id, 42u);
  EXPECT_EQ(out[0].block[0], 7u);
  EXPECT_EQ(out[0].warp, 3u);
  EXPECT_EQ(out[0].sm, 11u);
  ASSERT_EQ(out[0].events.size(), 3u);
  EXPECT_EQ(out[0].events[2].name_offset, -16);
  EXPECT_EQ(out[0].events[1].time_ns, 200u);
  EXPECT_EQ(stats.events, 3u);
  EXPECT_EQ(stats.malformed_events, 0u);
}

TEST(DecodeChunks, RejectsCorruptChunksAndEvents) {
  ArenaBuilder a(4);
  const uint32_t good = a.Claim(1, 0, 0, 0);
  a.Add(good, 10, 0, wire::kEventInstant);
  a.Add(good, 20, 0, 7);  // bad kind bits
  a.Add(good, 0, 5, wire::kEventInstant);  // zero time
  const uint32_t bad = a.Claim(2, 0, 1, 0);
  a.Add(bad, 30, 0, wire::kEventInstant);
  a.At(bad, 0)[27] = 0x00;  // break the magic
  // A hole followed by an event: only the prefix is trusted.
  const uint32_t holey = a.Claim(3, 0, 2, 0);
  a.Add(holey, 40, 0, wire::kEventInstant);
  wire::Event late{50, 0, wire::kEventInstant};
  std::memcpy(a.At(holey, 6), &late, sizeof(late));
  std::vector<WarpSegment> out;
  DecodeStats stats;
  DecodeChunks(a.data(), a.used(), kChunk, &out, &stats);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].events.size(), 1u);
  EXPECT_EQ(out[1].events.size(), 1u);
  EXPECT_EQ(stats.malformed_chunks, 1u);
  EXPECT_EQ(stats.malformed_events, 3u);
}

KernelRecord Record(uint64_t grid, uint64_t start, uint64_t end, uint64_t corr, const std::string& name) {
  KernelRecord r;
  r.grid_id = grid;
  r.start_ns = start;
  r.end_ns = end;
  r.correlation_id = corr;
  r.name = name;
  return r;
}

const auto kAll = [](const std::string&) { return true; };

TEST(MatchLaunches, SeparatesGraphReplaysSharingAGridIdByTime) {
  // One warp continued the same chunk across two replays of grid 9.
  ArenaBuilder a(2);
  const uint32_t c = a.Claim(9, 0, 0, 0);
  a.Add(c, 1000, 0, wire::kEventInstant);
  a.Add(c, 1100, 0, wire::kEventInstant);
  a.Add(c, 50000, 0, wire::kEventInstant);
  std::vector<WarpSegment> segs;
  DecodeStats ds;
  DecodeChunks(a.data(), a.used(), kChunk, &segs, &ds);
  const std::vector<KernelRecord> records = {Record(9, 40000, 60000, 2, "k"), Record(9, 900, 1200, 1, "k")};
  MatchStats ms;
  const auto launches = MatchLaunches(segs, records, kAll, 0, &ms);
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].record.correlation_id, 1u);  // sorted by start
  EXPECT_EQ(launches[0].event_count, 2u);
  EXPECT_EQ(launches[1].event_count, 1u);
  EXPECT_EQ(ms.events, 3u);
}

TEST(MatchLaunches, FiltersUnselectedKernelsAndKeepsOrphans) {
  ArenaBuilder a(3);
  const uint32_t keep = a.Claim(1, 0, 0, 0);
  a.Add(keep, 100, 0, wire::kEventInstant);
  const uint32_t drop = a.Claim(2, 0, 0, 0);
  a.Add(drop, 100, 0, wire::kEventInstant);
  a.Add(drop, 110, 0, wire::kEventInstant);
  const uint32_t orphan = a.Claim(3, 5, 1, 2);
  a.Add(orphan, 300, 0, wire::kEventInstant);
  std::vector<WarpSegment> segs;
  DecodeStats ds;
  DecodeChunks(a.data(), a.used(), kChunk, &segs, &ds);
  const std::vector<KernelRecord> records = {Record(1, 50, 150, 1, "gemm"), Record(2, 50, 150, 2, "other"),
                                             Record(4, 10, 20, 3, "gemm")};
  MatchStats ms;
  const auto launches = MatchLaunches(segs, records, [](const std::string& n) { return n == "gemm"; }, 0, &ms);
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
  std::vector<WarpSegment> segs;
  DecodeStats ds;
  DecodeChunks(a.data(), a.used(), kChunk, &segs, &ds);
  MatchStats ms;
  const auto launches = MatchLaunches(segs, {Record(5, 100900, 101200, 1, "k")}, kAll, 100000, &ms);
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
  std::vector<WarpSegment> segs;
  DecodeStats ds;
  DecodeChunks(a.data(), a.used(), kChunk, &segs, &ds);
  // Grid 1 allows offsets [100800-1000, 101600-1500] = [99800, 100100];
  // grid 2 allows [104950-5000, 105100-5000] = [99950, 100100].
  const std::vector<KernelRecord> records = {Record(1, 100800, 101600, 1, "k"), Record(2, 104950, 105100, 2, "k"),
                                             Record(3, 0, 10, 3, "k"), Record(3, 50, 60, 4, "k")};
  EXPECT_EQ(EstimateClockOffset(segs, records, 99000), 99950);
  EXPECT_EQ(EstimateClockOffset(segs, records, 100000), 100000);
  EXPECT_EQ(EstimateClockOffset(segs, records, 200000), 100100);
  // Contradicting launches: keep the estimate.
  const std::vector<KernelRecord> bad = {Record(1, 100800, 101600, 1, "k"), Record(2, 5000, 5100, 2, "k")};
  EXPECT_EQ(EstimateClockOffset(segs, bad, 12345), 12345);
}

}  // namespace
}  // namespace smprof::injector
