// LaunchAssembler: read-backs as the injector ships them in, launches out.
#include "collector/launch_assembler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "collector/message_decoder.h"
#include "tests/support/arena_builder.h"
#include "tests/support/wire_builders.h"

namespace smprof {
namespace {

using testing::ArenaBuilder;
using testing::Bytes;

constexpr transport::ProducerInfo kProducer{3, 4242};
constexpr uint32_t kContext = 1;

// What the assembler hands on, decoded.
struct Output {
  std::vector<Bytes> messages;
  uint32_t TypeAt(size_t i) const {
    wire::MsgHeader h;
    std::memcpy(&h, messages.at(i).data(), sizeof(h));
    return h.type;
  }
  template <typename T>
  T As(size_t i) const {
    T t;
    std::memcpy(&t, messages.at(i).data(), sizeof(T));
    return t;
  }
  std::string Text(size_t i, size_t fixed, uint32_t len) const {
    return std::string(reinterpret_cast<const char*>(messages.at(i).data()) + fixed, len);
  }
  std::vector<size_t> Of(uint32_t type) const {
    std::vector<size_t> at;
    for (size_t i = 0; i < messages.size(); ++i) {
      if (TypeAt(i) == type) at.push_back(i);
    }
    return at;
  }
  // Marker names by id (NameMsg).
  std::map<uint32_t, std::string> Names() const {
    std::map<uint32_t, std::string> names;
    for (size_t i : Of(wire::kMsgName)) {
      const auto m = As<wire::NameMsg>(i);
      names[m.name_id] = Text(i, sizeof(m), m.name_len);
    }
    return names;
  }
  std::vector<wire::WireEvent> Events(size_t i) const {
    const auto w = As<wire::WarpEventsMsg>(i);
    std::vector<wire::WireEvent> events(w.count);
    std::memcpy(events.data(), messages.at(i).data() + sizeof(w), w.count * sizeof(wire::WireEvent));
    return events;
  }
  uint64_t EventCount() const {
    uint64_t n = 0;
    for (size_t i : Of(wire::kMsgWarpEvents)) n += As<wire::WarpEventsMsg>(i).count;
    return n;
  }
};

class LaunchAssemblerTest : public ::testing::Test {
 protected:
  void Feed(const Bytes& m) { assembler.HandleMessage(kProducer, m.data(), static_cast<uint32_t>(m.size())); }
  // One read-back: records, names, the chunks, the harvest.
  void ReadBack(const ArenaBuilder& a, const std::vector<wire::KernelRecordEntry>& records,
                uint32_t reason = wire::kHarvestSync, uint32_t flags = 0, uint32_t generation = 1) {
    if (!records.empty()) Feed(testing::Records(0, kContext, records));
    std::vector<uint8_t> used(a.bytes().begin(), a.bytes().begin() + size_t{a.used()} * a.chunk_bytes());
    if (a.used() != 0) Feed(testing::Chunks(0, kContext, a.chunk_bytes(), used, generation));
    Feed(testing::ReadBackHarvest(1000000, 0, kContext, reason, a.used(), flags));
  }

  Output out;
  LaunchAssembler assembler{[this](const transport::ProducerInfo& p, const uint8_t* data, uint32_t size) {
                              EXPECT_EQ(p.pid, kProducer.pid);
                              out.messages.emplace_back(data, data + size);
                            },
                            1, nullptr};
};

TEST_F(LaunchAssemblerTest, AReadBackBecomesLaunchesWithNamedEvents) {
  Feed(testing::KernelName(1, "gemm(float*)"));
  Feed(testing::MarkerName(kContext, 1, 0x1000, "even"));
  Feed(testing::MarkerName(kContext, 1, 0x1008, "odd"));
  ArenaBuilder a(1);
  const uint32_t c = a.Claim(9, 2, 1, 4);  // grid 9, block 2, warp 1 (%warpid 41), SM 4
  a.Add(c, 100, 0, wire::kEventInstant);
  a.Add(c, 101, 8, wire::kEventInstant);
  a.Add(c, 102, 0, wire::kEventInstant);
  wire::KernelRecordEntry record = testing::Record(9, 50, 500, 7, 1);
  record.call = testing::Call(wire::kApiLaunchKernel, 10, 20, 77);
  ReadBack(a, {record});
  // launch, name "even", name "odd", warp events, harvest
  ASSERT_EQ(out.messages.size(), 5u);
  EXPECT_EQ(out.TypeAt(0), wire::kMsgLaunch);
  EXPECT_EQ(out.TypeAt(1), wire::kMsgName);
  EXPECT_EQ(out.TypeAt(2), wire::kMsgName);
  EXPECT_EQ(out.TypeAt(3), wire::kMsgWarpEvents);
  EXPECT_EQ(out.TypeAt(4), wire::kMsgHarvest);
  for (const Bytes& m : out.messages) {
    DecodedMessage d;
    EXPECT_EQ(MessageDecoder::Decode(m.data(), static_cast<uint32_t>(m.size()), &d), DecodeStatus::kOk);
  }
  const auto launch = out.As<wire::LaunchMsg>(0);
  EXPECT_EQ(launch.launch_id, 1u);
  EXPECT_EQ(out.Text(0, sizeof(launch), launch.name_len), "gemm(float*)");
  EXPECT_EQ(launch.grid_id, 9u);
  EXPECT_EQ(launch.correlation_id, 7u);
  EXPECT_EQ(launch.call.tid, 77u);
  EXPECT_EQ(launch.call.api, wire::kApiLaunchKernel);
  const auto warp = out.As<wire::WarpEventsMsg>(3);
  EXPECT_EQ(warp.launch_id, 1u);
  EXPECT_EQ(warp.block[0], 2u);
  EXPECT_EQ(warp.warp, 1u);
  EXPECT_EQ(warp.sm, 4u);
  EXPECT_EQ(warp.hw_warp, 41u);
  EXPECT_EQ(warp.flags, 0u);
  const std::vector<wire::WireEvent> e = out.Events(3);
  ASSERT_EQ(e.size(), 3u);
  const std::map<uint32_t, std::string> names = out.Names();
  EXPECT_EQ(names.at(e[0].name_id), "even");
  EXPECT_EQ(names.at(e[1].name_id), "odd");
  EXPECT_EQ(e[2].name_id, e[0].name_id);
  EXPECT_EQ(e[2].cycles, 102u);
  EXPECT_EQ(e[2].time_ns, 102u);
  EXPECT_EQ(e[2].kind, uint32_t{wire::kEventInstant});

  // Launch ids keep increasing across read-backs; a forced drain marks its
  // launches; known names are not sent again.
  out.messages.clear();
  ArenaBuilder b(1);
  b.Add(b.Claim(10, 0, 0, 0), 200, 0, wire::kEventInstant);
  ReadBack(b, {testing::Record(10, 150, 900, 8, 1)}, wire::kHarvestHighWater);
  ASSERT_EQ(out.messages.size(), 3u);
  EXPECT_EQ(out.As<wire::LaunchMsg>(0).launch_id, 2u);
  EXPECT_TRUE(out.As<wire::LaunchMsg>(0).flags & wire::kLaunchForcedDrain);
  EXPECT_EQ(out.TypeAt(1), wire::kMsgWarpEvents);
}

// A chunk written by a Triton kernel's markers marks its warp's messages,
// with its cluster's shape; another chunk's shape is not passed on.
TEST_F(LaunchAssemblerTest, TritonChunksMarkTheirWarpsAPrograms) {
  for (const uint8_t flags : {uint8_t{wire::kChunkFromTriton}, uint8_t{0}}) {
    out.messages.clear();
    ArenaBuilder a(1);
    const uint32_t c = a.Claim(5, 0, 0, 0, 0x1000, 0, 0, flags);
    uint8_t* header = a.At(c, 0);
    const uint16_t cluster = 0x213;  // 4 x 2 x 3 CTAs
    std::memcpy(header + offsetof(wire::ChunkHeader, cluster), &cluster, sizeof(cluster));
    a.Add(c, 100, 0, wire::kEventInstant);
    ReadBack(a, {testing::Record(5, 0, 1000, 1, 1)});
    const std::vector<size_t> warps = out.Of(wire::kMsgWarpEvents);
    ASSERT_EQ(warps.size(), 1u);
    EXPECT_EQ(out.As<wire::WarpEventsMsg>(warps[0]).flags,
              flags != 0 ? uint16_t{wire::kWarpTritonProgram | 0x2130} : uint16_t{0});
  }
}

// A warp of more events than one message holds goes out in several; a wide
// value and its continuation never split.
TEST_F(LaunchAssemblerTest, LargeWarpsSplitAndWideValuesStayPaired) {
  const uint32_t kBig = 65536;  // 4093 events a chunk
  const uint32_t per_chunk = kBig / sizeof(wire::Event) - wire::kChunkHeaderSlots;
  ArenaBuilder a(3, kBig);
  uint64_t clock = 0;
  uint64_t events = 0;
  for (int k = 0; k < 3; ++k) {
    const uint32_t c = a.Claim(7, 0, 0, 0);
    for (uint32_t i = 0; i + 1 < per_chunk; i += 2, ++events) {
      if (k == 1 && i % 4 == 0) {  // every other event of the middle chunk wide
        a.Add(c, clock, 0, wire::kEventInstant | wire::kEventHasValue | wire::kEventWideValue, uint32_t(events));
        a.Add(c, clock, 0, wire::kEventValueHigh, uint32_t(events + 1000));
      } else {
        a.Add(c, clock, 0, wire::kEventInstant);
        a.Skip(c);
      }
      ++clock;
    }
  }
  ReadBack(a, {testing::Record(7, 0, 1u << 30, 1, 1)});
  uint64_t seen = 0;
  for (size_t i : out.Of(wire::kMsgWarpEvents)) {
    const std::vector<wire::WireEvent> e = out.Events(i);
    ASSERT_LE(e.size(), LaunchAssembler::kMaxEventsPerMessage);
    for (size_t k = 0; k < e.size(); ++k) {
      ASSERT_NE(e[k].kind, uint32_t{wire::kEventValueHigh}) << "a continuation without its event, message " << i;
      ++seen;
      if ((e[k].kind & wire::kEventWideValue) == 0) continue;
      ASSERT_LT(k + 1, e.size()) << "a pair split across messages";
      EXPECT_EQ(e[k + 1].kind, uint32_t{wire::kEventValueHigh});
      EXPECT_EQ(e[k + 1].value, e[k].value + 1000);
      ++k;
    }
  }
  EXPECT_EQ(seen, events);
  EXPECT_GE(out.Of(wire::kMsgWarpEvents).size(), 2u);
}

// Events of two name generations at one address (a module unloaded, another
// put its own name there) keep their own names.
TEST_F(LaunchAssemblerTest, OneAddressOfTwoNameGenerationsNamesEachItsOwn) {
  Feed(testing::MarkerName(kContext, 1, 0x1000, "old"));
  Feed(testing::MarkerName(kContext, 2, 0x1000, "new"));
  ArenaBuilder first(1), second(1);
  first.Add(first.Claim(1, 0, 0, 0), 10, 0, wire::kEventInstant);
  second.Add(second.Claim(2, 0, 0, 0), 20, 0, wire::kEventInstant);
  Feed(testing::Records(0, kContext, {testing::Record(1, 0, 100, 1, 1), testing::Record(2, 0, 100, 2, 1)}));
  Feed(testing::Chunks(0, kContext, 256, first.bytes(), 1));
  Feed(testing::Chunks(0, kContext, 256, second.bytes(), 2));
  Feed(testing::ReadBackHarvest(1000, 0, kContext, wire::kHarvestSync, 2));
  const std::map<uint32_t, std::string> names = out.Names();
  std::vector<std::string> used;
  for (size_t i : out.Of(wire::kMsgWarpEvents)) used.push_back(names.at(out.Events(i)[0].name_id));
  EXPECT_EQ(used, (std::vector<std::string>{"old", "new"}));
}

// A record that comes a read-back late still gets its events; one that never
// comes leaves them under a synthetic launch at the final harvest.
TEST_F(LaunchAssemblerTest, EventsWaitForALateRecord) {
  ArenaBuilder a(1);
  a.Add(a.Claim(3, 0, 0, 0), 100, 0, wire::kEventInstant);
  ReadBack(a, {});
  EXPECT_TRUE(out.Of(wire::kMsgLaunch).empty());
  EXPECT_EQ(out.Of(wire::kMsgHarvest).size(), 1u);
  ReadBack(ArenaBuilder(0), {testing::Record(3, 0, 1000, 1, 1)});
  ASSERT_EQ(out.Of(wire::kMsgLaunch).size(), 1u);
  EXPECT_EQ(out.As<wire::LaunchMsg>(out.Of(wire::kMsgLaunch)[0]).flags & wire::kLaunchNoActivity, 0u);
  EXPECT_EQ(out.EventCount(), 1u);
}

TEST_F(LaunchAssemblerTest, EventsWhoseRecordNeverComesShipUnattributedAtTheFinalHarvest) {
  ArenaBuilder a(1);
  a.Add(a.Claim(3, 0, 0, 0), 100, 0, wire::kEventInstant);
  ReadBack(a, {});
  EXPECT_TRUE(out.Of(wire::kMsgLaunch).empty());
  ReadBack(ArenaBuilder(0), {}, wire::kHarvestExit, wire::kHarvestFinal);
  ASSERT_EQ(out.Of(wire::kMsgLaunch).size(), 1u);
  const size_t l = out.Of(wire::kMsgLaunch)[0];
  EXPECT_TRUE(out.As<wire::LaunchMsg>(l).flags & wire::kLaunchNoActivity);
  EXPECT_EQ(out.Text(l, sizeof(wire::LaunchMsg), out.As<wire::LaunchMsg>(l).name_len),
            "<kernel of grid 3, no CUPTI record>");
  // The counters say so.
  Feed(testing::Stats(wire::StatsMsg{}));
  const auto stats = out.As<wire::StatsMsg>(out.Of(wire::kMsgStats).back());
  EXPECT_EQ(stats.events_unattributed, 1u);
  EXPECT_EQ(stats.launches_profiled, 1u);
}

// The producer ends (killed, say) before a final harvest: what waits ships.
TEST_F(LaunchAssemblerTest, WhatWaitsShipsWhenTheProducerEnds) {
  ArenaBuilder a(1);
  a.Add(a.Claim(3, 0, 0, 0), 100, 0, wire::kEventInstant);
  ReadBack(a, {});
  assembler.HandleProducerEnd(kProducer);
  EXPECT_EQ(out.Of(wire::kMsgLaunch).size(), 1u);
  EXPECT_EQ(out.EventCount(), 1u);
}

// A final flush that read nothing back and found nothing waiting is not a
// harvest (the trace would show one that did nothing).
TEST_F(LaunchAssemblerTest, AnEmptyFinalFlushIsNoHarvest) {
  ReadBack(ArenaBuilder(0), {}, wire::kHarvestExit, wire::kHarvestFinal);
  EXPECT_TRUE(out.messages.empty());
}

// Events of launches that were not profiled (excluded kernels recording in a
// module lit for another) are filtered and counted.
TEST_F(LaunchAssemblerTest, UnwantedLaunchesAreFilteredAndCounted) {
  ArenaBuilder a(2);
  a.Add(a.Claim(1, 0, 0, 0), 100, 0, wire::kEventInstant);
  const uint32_t c = a.Claim(2, 0, 0, 0);
  a.Add(c, 100, 0, wire::kEventInstant);
  a.Add(c, 110, 0, wire::kEventInstant);
  ReadBack(a, {testing::Record(1, 0, 1000, 1, 1), testing::Record(2, 0, 1000, 2, 1, /*wanted=*/false)});
  EXPECT_EQ(out.Of(wire::kMsgLaunch).size(), 1u);
  wire::StatsMsg injected{};
  injected.events_recorded = 3;
  Feed(testing::Stats(injected));
  const auto stats = out.As<wire::StatsMsg>(out.Of(wire::kMsgStats).back());
  EXPECT_EQ(stats.events_filtered, 2u);
  EXPECT_EQ(stats.events_recorded, 3u);
  EXPECT_EQ(stats.launches_profiled, 1u);
}

// Untrusted input: a kernel or a name the producer never sent is reported as
// such; chunks that fail validation are counted, never decoded.
TEST_F(LaunchAssemblerTest, MissingNamesAndBadChunksAreReportedNotGuessed) {
  ArenaBuilder a(2);
  a.Add(a.Claim(4, 0, 0, 0, 0x5000), 100, 24, wire::kEventInstant);
  std::memset(a.At(a.ClaimUnwritten(), 0), 0x5A, 256);  // garbage: malformed
  ReadBack(a, {testing::Record(4, 0, 1000, 1, /*kernel_id=*/9)});
  ASSERT_EQ(out.Of(wire::kMsgLaunch).size(), 1u);
  const size_t l = out.Of(wire::kMsgLaunch)[0];
  EXPECT_EQ(out.Text(l, sizeof(wire::LaunchMsg), out.As<wire::LaunchMsg>(l).name_len), "<unknown kernel>");
  EXPECT_EQ(out.Names().begin()->second, "<unreadable name at 0x5018>");
  // A ChunksMsg whose chunk size is no chunk size is passed on for the next
  // stage to count (as malformed), and counted here.
  wire::ChunksMsg bad{};
  bad.chunk_bytes = 300;
  bad.count = 0;
  const Bytes m = testing::Frame(bad, wire::kMsgChunks);
  out.messages.clear();
  Feed(m);
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0], m);
  EXPECT_EQ(assembler.rejected(), 1u);
}

// Framing a large read-back over threads hands on exactly the messages one
// thread does, in the same order: launches, names before their first use
// (known, unreadable, shared by two launches), split and wide warps.
TEST(LaunchAssembler, FramingOverThreadsHandsOnWhatOneThreadDoes) {
  constexpr uint32_t kChunk = 1024, kWarps = 6000, kChunksPerWarp = 2;
  ArenaBuilder a(kWarps * kChunksPerWarp, kChunk);
  const uint32_t per_chunk = kChunk / sizeof(wire::Event) - wire::kChunkHeaderSlots;
  uint64_t events = 0;
  for (uint32_t w = 0; w < kWarps; ++w) {
    const uint64_t grid = w < kWarps / 3 ? 5 : 6;
    for (uint32_t k = 0; k < kChunksPerWarp; ++k) {
      const uint32_t c = a.Claim(grid, w / 4, static_cast<uint16_t>(w % 4), static_cast<uint16_t>(w % 132));
      for (uint32_t i = 0; i + 1 < per_chunk; ++i, ++events) {
        // Names: 40 known ones spread over the warps, one never named.
        const int32_t name = static_cast<int32_t>(((w * 7 + i) % 41) * 8);
        const uint64_t clock = uint64_t{k} * 100000 + i * 10;
        if (w % 97 == 0 && i % 5 == 0) {
          a.Add(c, clock, name, wire::kEventInstant | wire::kEventHasValue | wire::kEventWideValue, i);
          a.Add(c, clock, name, wire::kEventValueHigh, i + 1);
          ++i;
        } else {
          a.Add(c, clock, name, (i % 2 == 0) ? wire::kEventBegin : wire::kEventEnd);
        }
      }
    }
  }
  ASSERT_GE(events, 2 * LaunchAssembler::kEventsPerFrameThread) << "too small to be framed over threads";
  std::vector<Bytes> outputs[2];
  const unsigned threads[2] = {1, 4};
  for (int run = 0; run < 2; ++run) {
    LaunchAssembler assembler([&](const transport::ProducerInfo&, const uint8_t* data,
                                  uint32_t size) { outputs[run].emplace_back(data, data + size); },
                              threads[run], nullptr);
    const auto feed = [&](const Bytes& m) {
      assembler.HandleMessage(kProducer, m.data(), static_cast<uint32_t>(m.size()));
    };
    feed(testing::KernelName(1, "gemm"));
    for (uint32_t n = 0; n < 40; ++n) {
      feed(testing::MarkerName(kContext, 1, 0x1000 + n * 8, "name " + std::to_string(n)));
    }
    feed(testing::Records(0, kContext, {testing::Record(5, 0, 1u << 30, 1, 1), testing::Record(6, 0, 1u << 30, 2, 1)}));
    constexpr uint32_t kChunksPerMessage = 256;  // as the shipper splits a read-back
    for (uint32_t first = 0; first < a.used(); first += kChunksPerMessage) {
      const uint32_t n = std::min(kChunksPerMessage, a.used() - first);
      std::vector<uint8_t> part(a.bytes().begin() + size_t{first} * kChunk,
                                a.bytes().begin() + size_t{first + n} * kChunk);
      feed(testing::Chunks(0, kContext, kChunk, part, 1));
    }
    feed(testing::ReadBackHarvest(1000000, 0, kContext, wire::kHarvestSync, a.used(), 0));
  }
  ASSERT_GT(outputs[0].size(), 3000u);
  ASSERT_EQ(outputs[1].size(), outputs[0].size());
  size_t names = 0;
  for (size_t i = 0; i < outputs[0].size(); ++i) {
    ASSERT_EQ(outputs[1][i], outputs[0][i]) << "message " << i;
    wire::MsgHeader h;
    std::memcpy(&h, outputs[0][i].data(), sizeof(h));
    names += h.type == wire::kMsgName;
  }
  EXPECT_EQ(names, 41u);  // 40 names and the unreadable one
}

}  // namespace
}  // namespace smprof
