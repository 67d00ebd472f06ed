// Shipper: message framing, name interning, launch ids, splitting, loss counting.
#include "injector/shipper.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

namespace smprof::injector {
namespace {

class RecordingSink : public MessageSink {
 public:
  bool Send(const void* data, uint32_t size, uint64_t events) override {
    if (reject_all) return false;
    messages.emplace_back(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
    event_counts.push_back(events);
    return true;
  }
  uint32_t TypeAt(size_t i) const {
    wire::MsgHeader h;
    std::memcpy(&h, messages[i].data(), sizeof(h));
    return h.type;
  }
  template <typename T>
  T As(size_t i) const {
    T t;
    std::memcpy(&t, messages[i].data(), sizeof(T));
    return t;
  }
  bool reject_all = false;
  std::vector<std::vector<uint8_t>> messages;
  std::vector<uint64_t> event_counts;
};

Launch MakeLaunch(const WarpSegment* seg, uint64_t start, size_t events) {
  Launch l;
  l.record.start_ns = start;
  l.record.end_ns = start + 100;
  l.record.name = "_Z4gemmPf";
  l.record.grid[0] = 3;
  LaunchEvents w;
  w.segment = seg;
  for (size_t i = 0; i < events; ++i) {
    DecodedEvent e;
    e.time_ns = start + i;
    e.clock = 1000 + i;
    e.name_offset = static_cast<int32_t>(i % 2) * 8;
    e.info = wire::kEventInstant;
    w.events.push_back(e);
  }
  l.warps.push_back(w);
  l.event_count = events;
  return l;
}

TEST(Shipper, FramesLaunchesNamesAndEvents) {
  RecordingSink sink;
  Shipper s(&sink);
  WarpSegment seg;
  seg.name_base = 0x1000;
  seg.block[0] = 2;
  seg.warp = 1;
  seg.hw_warp = 41;
  const std::vector<Launch> launches = {MakeLaunch(&seg, 10, 3)};
  s.SendLaunches(
      launches, 0, [](uint64_t, uint64_t a) { return a == 0x1000 ? std::string("even") : std::string("odd"); },
      [](const std::string&) { return std::string("gemm(float*)"); });
  // launch, name "even", name "odd", warp events
  ASSERT_EQ(sink.messages.size(), 4u);
  EXPECT_EQ(sink.TypeAt(0), wire::kMsgLaunch);
  EXPECT_EQ(sink.TypeAt(1), wire::kMsgName);
  EXPECT_EQ(sink.TypeAt(2), wire::kMsgName);
  EXPECT_EQ(sink.TypeAt(3), wire::kMsgWarpEvents);
  for (const auto& m : sink.messages) EXPECT_EQ(m.size() % 8, 0u);
  const auto launch = sink.As<wire::LaunchMsg>(0);
  EXPECT_EQ(launch.launch_id, 1u);
  EXPECT_EQ(launch.name_len, std::strlen("gemm(float*)"));
  const auto warp = sink.As<wire::WarpEventsMsg>(3);
  EXPECT_EQ(warp.count, 3u);
  EXPECT_EQ(warp.block[0], 2u);
  EXPECT_EQ(sink.event_counts[3], 3u);
  wire::WireEvent e[3];
  std::memcpy(e, sink.messages[3].data() + sizeof(wire::WarpEventsMsg), sizeof(e));
  EXPECT_EQ(e[0].name_id, 1u);
  EXPECT_EQ(e[1].name_id, 2u);
  EXPECT_EQ(e[2].name_id, 1u);
  EXPECT_EQ(e[2].cycles, 1002u);
  EXPECT_EQ(e[2].time_ns, 12u);
  EXPECT_EQ(e[2].kind, uint32_t{wire::kEventInstant});
  EXPECT_EQ(warp.hw_warp, 41u);
  EXPECT_EQ(warp.flags, 0u);
  EXPECT_EQ(s.counters().events, 3u);

  // Launch ids keep increasing across harvests; known names are not resent.
  s.SendLaunches(
      launches, wire::kLaunchForcedDrain, [](uint64_t, uint64_t) { return std::string("even"); },
      [](const std::string&) { return std::string("gemm(float*)"); });
  EXPECT_EQ(sink.As<wire::LaunchMsg>(4).launch_id, 2u);
  EXPECT_TRUE(sink.As<wire::LaunchMsg>(4).flags & wire::kLaunchForcedDrain);
  EXPECT_EQ(sink.TypeAt(5), wire::kMsgWarpEvents);
}

// A chunk written by a Triton kernel's markers marks its warp's messages,
// with its cluster's shape; another chunk's shape is not shipped.
TEST(Shipper, TritonChunksMarkTheirWarpsAPrograms) {
  for (const uint8_t flags : {uint8_t{wire::kChunkFromTriton}, uint8_t{0}}) {
    RecordingSink sink;
    Shipper s(&sink);
    WarpSegment seg;
    seg.name_base = 0x1000;
    seg.flags = flags;
    seg.cluster = 0x213;  // 4 x 2 x 3 CTAs
    const std::vector<Launch> launches = {MakeLaunch(&seg, 10, 1)};
    s.SendLaunches(
        launches, 0, [](uint64_t, uint64_t) { return std::string("load"); }, [](const std::string& n) { return n; });
    ASSERT_EQ(sink.TypeAt(sink.messages.size() - 1), wire::kMsgWarpEvents);
    EXPECT_EQ(sink.As<wire::WarpEventsMsg>(sink.messages.size() - 1).flags,
              flags != 0 ? uint16_t{wire::kWarpTritonProgram | 0x2130} : uint16_t{0});
  }
}

TEST(Shipper, HarvestCarriesLossesAndArenaFill) {
  RecordingSink sink;
  Shipper s(&sink);
  s.SendHarvest(123, 1, wire::kHarvestHighWater, 4, 5, 96, 128, 7);
  ASSERT_EQ(sink.messages.size(), 1u);
  ASSERT_EQ(sink.TypeAt(0), wire::kMsgHarvest);
  ASSERT_EQ(sink.messages[0].size(), sizeof(wire::HarvestMsg));
  const auto h = sink.As<wire::HarvestMsg>(0);
  EXPECT_EQ(h.time_ns, 123u);
  EXPECT_EQ(h.device, 1u);
  EXPECT_EQ(h.reason, wire::kHarvestHighWater);
  EXPECT_EQ(h.dropped_events, 4u);
  EXPECT_EQ(h.unplaced_events, 5u);
  EXPECT_EQ(h.chunks_used, 96u);
  EXPECT_EQ(h.chunks_total, 128u);
  EXPECT_EQ(h.chunks_empty, 7u);
}

TEST(Shipper, NamesAThreadOnceBeforeTheLaunchOrHarvestThatNamesIt) {
  RecordingSink sink;
  std::vector<uint32_t> asked;
  Shipper s(&sink, [&](uint32_t tid) {
    asked.push_back(tid);
    return std::string(tid == 77 ? "main" : "worker");
  });
  WarpSegment seg;
  std::vector<Launch> launches = {MakeLaunch(&seg, 10, 1), MakeLaunch(&seg, 20, 1)};
  launches[0].call = wire::HostCall{1, 5, 77, wire::kApiLaunchKernel};
  launches[1].call = wire::HostCall{6, 8, 77, wire::kApiLaunchKernel};
  const auto name = [](uint64_t, uint64_t) { return std::string("x"); };
  const auto kernel = [](const std::string& m) { return m; };
  s.SendLaunches(launches, 0, name, kernel);
  ASSERT_GE(sink.messages.size(), 2u);
  ASSERT_EQ(sink.TypeAt(0), wire::kMsgThread);
  const auto t = sink.As<wire::ThreadMsg>(0);
  EXPECT_EQ(t.tid, 77u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sink.messages[0].data()) + sizeof(t), t.name_len), "main");
  ASSERT_EQ(sink.TypeAt(1), wire::kMsgLaunch);
  const auto l = sink.As<wire::LaunchMsg>(1);
  EXPECT_EQ(l.call.start_ns, 1u);
  EXPECT_EQ(l.call.end_ns, 5u);
  EXPECT_EQ(l.call.tid, 77u);
  EXPECT_EQ(l.call.api, wire::kApiLaunchKernel);
  size_t threads = 0;
  for (size_t i = 0; i < sink.messages.size(); ++i) threads += sink.TypeAt(i) == wire::kMsgThread;
  EXPECT_EQ(threads, 1u);

  sink.messages.clear();
  HarvestHost host;
  host.begin_ns = 30;
  host.end_ns = 50;
  host.tid = 78;
  host.call = wire::HostCall{25, 30, 78, wire::kApiStreamSynchronize};
  host.stage_us[wire::kStageCopy] = 7;
  host.stage_us[wire::kStageShip] = 9;
  s.SendHarvest(40, 0, wire::kHarvestSync, 0, 0, 1, 2, 5, host);  // more empty than used: clamped
  ASSERT_EQ(sink.messages.size(), 2u);
  EXPECT_EQ(sink.TypeAt(0), wire::kMsgThread);
  EXPECT_EQ(sink.As<wire::ThreadMsg>(0).tid, 78u);
  const auto h = sink.As<wire::HarvestMsg>(1);
  EXPECT_EQ(h.host_begin_ns, 30u);
  EXPECT_EQ(h.host_end_ns, 50u);
  EXPECT_EQ(h.host_tid, 78u);
  EXPECT_EQ(h.chunks_empty, 1u);
  EXPECT_EQ(h.call.api, wire::kApiStreamSynchronize);
  EXPECT_EQ(h.call.start_ns, 25u);
  EXPECT_EQ(h.stage_us[wire::kStageCopy], 7u);
  EXPECT_EQ(h.stage_us[wire::kStageShip], 9u);
  EXPECT_EQ(h.stage_us[wire::kStageWait], 0u);
  EXPECT_EQ(asked, (std::vector<uint32_t>{77, 78}));
}

TEST(Shipper, ThreadWhoseMessageWasDroppedIsNamedAgain) {
  RecordingSink sink;
  Shipper s(&sink, [](uint32_t) { return std::string("main"); });
  HarvestHost host;
  host.tid = 77;
  sink.reject_all = true;
  s.SendHarvest(40, 0, wire::kHarvestExit, 0, 0, 0, 0, 0, host);
  sink.reject_all = false;
  s.SendHarvest(50, 0, wire::kHarvestExit, 0, 0, 0, 0, 0, host);
  ASSERT_EQ(sink.messages.size(), 2u);
  EXPECT_EQ(sink.TypeAt(0), wire::kMsgThread);
  EXPECT_EQ(sink.TypeAt(1), wire::kMsgHarvest);
}

TEST(Shipper, SplitsLargeWarpsAndCountsDrops) {
  RecordingSink sink;
  Shipper s(&sink);
  WarpSegment seg;
  const size_t n = Shipper::kMaxEventsPerMessage * 2 + 5;
  const std::vector<Launch> launches = {MakeLaunch(&seg, 10, n)};
  const auto name = [](uint64_t, uint64_t) { return std::string("x"); };
  const auto kernel = [](const std::string& m) { return m; };
  s.SendLaunches(launches, 0, name, kernel);
  uint64_t total = 0;
  int warp_messages = 0;
  for (size_t i = 0; i < sink.messages.size(); ++i) {
    if (sink.TypeAt(i) == wire::kMsgWarpEvents) {
      ++warp_messages;
      total += sink.As<wire::WarpEventsMsg>(i).count;
    }
  }
  EXPECT_EQ(warp_messages, 3);
  EXPECT_EQ(total, n);
  sink.reject_all = true;
  s.SendLaunches(launches, 0, name, kernel);
  EXPECT_EQ(s.counters().events_dropped, n);
  EXPECT_EQ(s.counters().events, n);
  EXPECT_EQ(s.counters().messages_dropped, 4u);  // launch + 3 warp messages
}

// A wide value ships as its event and a kEventValueHigh entry right after it,
// never split across messages; counts are of events, not entries.
TEST(Shipper, WideValuesShipAsPairsNeverSplit) {
  RecordingSink sink;
  Shipper s(&sink);
  WarpSegment seg;
  const size_t n = Shipper::kMaxEventsPerMessage + 1;
  std::vector<Launch> launches = {MakeLaunch(&seg, 10, n)};
  std::vector<DecodedEvent>& events = launches[0].warps[0].events;
  // Every event wide but the first: the first message holds the narrow one
  // and (kMax - 1) / 2 pairs, and would split the next pair.
  for (size_t i = 1; i < n; ++i) {
    events[i].info = wire::kEventInstant | wire::kEventHasValue | wire::kEventWideValue;
    events[i].value = static_cast<uint32_t>(i);
    events[i].value_high = static_cast<uint32_t>(i + 1000);
  }
  const auto name = [](uint64_t, uint64_t) { return std::string("x"); };
  const auto kernel = [](const std::string& m) { return m; };
  s.SendLaunches(launches, 0, name, kernel);
  size_t events_seen = 0;
  uint64_t counted = 0;
  for (size_t i = 0; i < sink.messages.size(); ++i) {
    if (sink.TypeAt(i) != wire::kMsgWarpEvents) continue;
    const auto w = sink.As<wire::WarpEventsMsg>(i);
    ASSERT_LE(w.count, Shipper::kMaxEventsPerMessage);
    ASSERT_EQ(sink.messages[i].size(), sizeof(w) + w.count * sizeof(wire::WireEvent));
    counted += sink.event_counts[i];
    for (uint32_t k = 0; k < w.count; ++k) {
      wire::WireEvent e;
      std::memcpy(&e, sink.messages[i].data() + sizeof(w) + k * sizeof(e), sizeof(e));
      ASSERT_NE(e.kind, uint32_t{wire::kEventValueHigh}) << "a continuation without its event, message " << i;
      const size_t index = events_seen++;
      EXPECT_EQ(e.value, index);
      if ((e.kind & wire::kEventWideValue) == 0) continue;
      ASSERT_LT(k + 1, w.count) << "a pair split across messages";
      wire::WireEvent high;
      std::memcpy(&high, sink.messages[i].data() + sizeof(w) + (k + 1) * sizeof(high), sizeof(high));
      EXPECT_EQ(high.kind, uint32_t{wire::kEventValueHigh});
      EXPECT_EQ(high.value, index + 1000);
      EXPECT_EQ(high.time_ns, e.time_ns);
      EXPECT_EQ(high.name_id, e.name_id);
      ++k;
    }
  }
  EXPECT_EQ(events_seen, n);
  EXPECT_EQ(counted, n);
  EXPECT_EQ(s.counters().events, n);
}

// Events of two name generations at one address (a module unloaded, another
// put its own name there) keep their own names within one harvest.
TEST(Shipper, OneAddressOfTwoNameGenerationsNamesEachItsOwn) {
  RecordingSink sink;
  Shipper s(&sink);
  WarpSegment old_module, new_module;
  old_module.name_base = new_module.name_base = 0x1000;
  old_module.name_generation = 1;
  new_module.name_generation = 2;
  new_module.warp = 1;
  const std::vector<Launch> launches = {MakeLaunch(&old_module, 10, 1), MakeLaunch(&new_module, 20, 1)};
  s.SendLaunches(
      launches, 0,
      [](uint64_t generation, uint64_t) { return generation == 1 ? std::string("old") : std::string("new"); },
      [](const std::string& m) { return m; });
  std::map<uint32_t, std::string> names;
  std::vector<uint32_t> used;
  for (size_t i = 0; i < sink.messages.size(); ++i) {
    if (sink.TypeAt(i) == wire::kMsgName) {
      const auto m = sink.As<wire::NameMsg>(i);
      names[m.name_id] = std::string(reinterpret_cast<const char*>(sink.messages[i].data() + sizeof(m)), m.name_len);
    } else if (sink.TypeAt(i) == wire::kMsgWarpEvents) {
      wire::WireEvent e;
      std::memcpy(&e, sink.messages[i].data() + sizeof(wire::WarpEventsMsg), sizeof(e));
      used.push_back(e.name_id);
    }
  }
  ASSERT_EQ(used.size(), 2u);
  EXPECT_EQ(names[used[0]], "old");
  EXPECT_EQ(names[used[1]], "new");
}

TEST(Shipper, NameWhoseMessageWasDroppedIsAnnouncedAgain) {
  RecordingSink sink;
  Shipper s(&sink);
  WarpSegment seg;
  const std::vector<Launch> launches = {MakeLaunch(&seg, 10, 1)};
  const auto name = [](uint64_t, uint64_t) { return std::string("load"); };
  const auto kernel = [](const std::string& m) { return m; };
  sink.reject_all = true;
  s.SendLaunches(launches, 0, name, kernel);
  sink.reject_all = false;
  s.SendLaunches(launches, 0, name, kernel);
  // launch, the name again (under a fresh id), the warp's events
  ASSERT_EQ(sink.messages.size(), 3u);
  EXPECT_EQ(sink.TypeAt(1), wire::kMsgName);
  const auto announced = sink.As<wire::NameMsg>(1);
  wire::WireEvent e;
  std::memcpy(&e, sink.messages[2].data() + sizeof(wire::WarpEventsMsg), sizeof(e));
  EXPECT_EQ(e.name_id, announced.name_id);
}

}  // namespace
}  // namespace smprof::injector
