// Collector fed in-process with synthetic messages; the written trace is
// parsed back and checked event by event, together with the summary numbers.
#include "collector/collector.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collector/async_matcher.h"
#include "collector/stats_report.h"
#include "collector/trace_builder.h"
#include "collector/trace_labels.h"
#include "collector/trace_placement.h"
#include "common/json.h"
#include "tests/support/wire_builders.h"

namespace smprof {
namespace {

using nlohmann::json;
using testing::Bytes;
using testing::Ev;
using testing::Frame;
using testing::Name;
using testing::Process;
using testing::Warp;

constexpr uint64_t kT0 = 5000000000ull;  // first ProcessMsg GPU time; base = kT0 - 1 s

// --- message builders (tests/support/wire_builders.h, with this file's defaults) ---

struct LaunchSpec {
  uint64_t id = 1;
  uint64_t start = kT0 + 1000;
  uint64_t end = kT0 + 100000;
  std::string kernel = "k(int)";  // as the demangler writes a non-template kernel
  uint32_t device = 0;
  uint64_t stream = 7;
  uint32_t flags = 0;
};

Bytes Launch(const LaunchSpec& s) {
  wire::LaunchMsg m = testing::LaunchFields(s.id, s.start, s.end);
  m.grid_id = 55;
  m.correlation_id = 77;
  m.stream_id = s.stream;
  m.device = s.device;
  m.flags = s.flags;
  m.dynamic_smem = 1024;
  m.static_smem = 256;
  m.registers = 32;
  return testing::Launch(m, s.kernel);
}

wire::WireEvent B(uint64_t t, uint32_t name) { return Ev(kT0 + t, name, wire::kEventBegin); }
wire::WireEvent E(uint64_t t, uint32_t name) { return Ev(kT0 + t, name, wire::kEventEnd); }
wire::WireEvent I(uint64_t t, uint32_t name) { return Ev(kT0 + t, name, wire::kEventInstant); }

// `t` relative to kT0.
Bytes Harvest(uint64_t t, uint32_t reason, uint64_t dropped, uint64_t unplaced) {
  return testing::Harvest(kT0 + t, reason, dropped, unplaced);
}

// --- harness -------------------------------------------------------------------

// Every test runs twice: the sinks on the collector's thread, and each on a
// thread of its own (async_sink.h), which must not change a byte.
class CollectorTest : public ::testing::TestWithParam<CollectorOptions::SinkThreads> {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    path_ = ::testing::TempDir() + "collector_test_" + name + "_" + std::to_string(getpid()) + ".json";
    std::string error;
    CollectorOptions options;
    options.trace_path = path_;
    options.sink_threads = GetParam();
    collector_ = Collector::Create(options, &error);
    ASSERT_NE(collector_, nullptr) << error;
  }
  void TearDown() override {
    for (const std::string& f : {path_, PartialPath(path_), NumberedPath(path_, 2)}) ::unlink(f.c_str());
  }

  void Send(transport::ProducerInfo p, const Bytes& b) {
    collector_->HandleMessage(p, b.data(), static_cast<uint32_t>(b.size()));
  }

  // Finishes and parses the trace (strict JSON: the array must be closed).
  json FinishAndParse(CollectorSummary* summary = nullptr) {
    const CollectorSummary s = collector_->Finish();
    EXPECT_TRUE(s.trace_ok) << s.trace_error;
    if (summary) *summary = s;
    std::ifstream in(path_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text_ = ss.str();
    return json::parse(text_);
  }

  std::string path_;
  std::string text_;
  std::unique_ptr<Collector> collector_;
};

std::vector<json> Select(const json& trace, const std::function<bool(const json&)>& pred) {
  std::vector<json> out;
  for (const json& e : trace) {
    if (pred(e)) out.push_back(e);
  }
  return out;
}

std::vector<json> Events(const json& trace, const std::string& ph, int pid, int tid) {
  return Select(trace, [&](const json& e) { return e["ph"] == ph && e["pid"] == pid && e.value("tid", -1) == tid; });
}

// The args.name of a process_name / thread_name metadata event ("" if none).
std::string MetaName(const json& trace, const std::string& what, int pid, int tid = -1) {
  for (const json& e : trace) {
    if (e["ph"] == "M" && e["name"] == what && e["pid"] == pid && e.value("tid", -1) == tid) {
      return e["args"]["name"];
    }
  }
  return "";
}

int64_t SortIndex(const json& trace, const std::string& what, int pid, int tid = -1) {
  int64_t found = -1;
  int count = 0;
  for (const json& e : trace) {
    if (e["ph"] == "M" && e["name"] == what && e["pid"] == pid && e.value("tid", -1) == tid) {
      found = e["args"]["sort_index"];
      ++count;
    }
  }
  EXPECT_LE(count, 1) << what << " " << pid << " " << tid;
  return found;
}

// --- tests ---------------------------------------------------------------------

// A Triton kernel's warps name their block a program (tl.program_id), and a
// program of several CTAs (a cluster: the shape in the flags' bits 4-15) its
// program and CTA rank; unknown flag bits of other warps are ignored.
TEST_P(CollectorTest, TritonWarpsNameTheirProgram) {
  const transport::ProducerInfo a{0, 1000};
  Send(a, Process(1000, kT0, "python3"));
  Send(a, Name(1, "load"));
  LaunchSpec ls;
  ls.id = 7;
  ls.kernel = "matmul";
  Send(a, Launch(ls));
  Send(a, Warp(7, 5, 3, 1, {B(2000, 1), E(3000, 1)}, wire::kWarpTritonProgram));
  Send(a, Warp(7, 2, 0, 0, {B(2000, 1), E(3000, 1)}, 0x8000));
  const uint16_t pairs = wire::kWarpTritonProgram | (0x001 << wire::kWarpClusterShift);  // clusters of 2 along x
  Send(a, Warp(7, 6, 5, 4, {B(2000, 1), E(3000, 1)}, pairs));
  Send(a, Warp(7, 6, 4, 4, {B(2000, 1), E(3000, 1)}, pairs));
  Send(a, Harvest(200000, wire::kHarvestSync, 0, 0));
  collector_->HandleProducerEnd(a, /*clean=*/true);
  CollectorSummary s;
  const json t = FinishAndParse(&s);
  EXPECT_EQ(s.events, 8u);
  EXPECT_EQ(s.malformed_messages, 0u);
  EXPECT_EQ(MetaName(t, "thread_name", 10, 2), "SM 005 | program (3,0,0) | warp 1");
  EXPECT_EQ(MetaName(t, "thread_name", 10, 3), "SM 002 | block (0,0,0) | warp 0");
  EXPECT_EQ(MetaName(t, "thread_name", 10, 4), "SM 006 | program (2,0,0) cta 1 | warp 4");
  EXPECT_EQ(MetaName(t, "thread_name", 10, 5), "SM 006 | program (2,0,0) cta 0 | warp 4");
}

TEST_P(CollectorTest, OneLaunchTwoWarpsEverything) {
  const transport::ProducerInfo a{0, 1000};
  Send(a, Process(1000, kT0,
                  std::string("./app\0--size\0"
                              "3\0",
                              15)));
  Send(a, Name(1, "outer"));
  Send(a, Name(2, "inner"));
  Send(a, Name(3, "mark"));
  LaunchSpec ls;
  ls.id = 7;
  ls.kernel = "void ns::gemm<128>(float const*, int)";
  ls.device = 1;
  ls.stream = 13;
  Send(a, Launch(ls));
  // Warp A (sm 5, block 1, warp 1): nested ranges, an instant, an unmatched END.
  Send(a, Warp(7, 5, 1, 1, {B(2000, 1), B(3000, 2), I(3500, 3), E(4000, 2), E(9000, 1), E(9500, 2)}));
  // Warp B (sm 2, block 0, warp 0): BEGIN never ended, instant with an undefined name.
  Send(a, Warp(7, 2, 0, 0, {B(2500, 1), I(2600, 42)}));
  // Warp A again: a warp split over two messages.
  Send(a, Warp(7, 5, 1, 1, {B(10000, 2), E(11000, 2)}));
  // Unknown launch: orphans.
  Send(a, Warp(99, 1, 0, 0, {I(5000, 3), I(5001, 3), I(5002, 3)}));
  // Malformed: declared name length beyond the message.
  Bytes bad = Name(4, "abc");
  bad[12] = 50;
  Send(a, bad);
  Send(a, Harvest(200000, wire::kHarvestSync, 5, 2));
  // Launch 7 is finalized: late events are orphans too.
  Send(a, Warp(7, 5, 1, 1, {I(200001, 3), I(200002, 3)}));
  Send(a, Harvest(300000, wire::kHarvestHighWater, 0, 0));
  transport::ConsumerStats ts;
  ts.producer_events_dropped = 11;
  ts.framing_errors = 1;
  collector_->SetTransportStats(ts);
  collector_->HandleProducerEnd(a, /*clean=*/true);

  CollectorSummary s;
  const json t = FinishAndParse(&s);

  // Summary numbers.
  EXPECT_EQ(s.processes, 1u);
  EXPECT_EQ(s.launches, 1u);
  EXPECT_EQ(s.events, 10u);  // warp A: 2+2+1+1+2, warp B: 1 unterminated + 1 instant
  EXPECT_EQ(s.lost_device_buffer, 5u);
  EXPECT_EQ(s.lost_device_unplaced, 2u);
  EXPECT_EQ(s.lost_transport, 11u);
  EXPECT_EQ(s.lost_total, 23u);  // 5 + 2 + 11 + 5 orphans
  EXPECT_EQ(s.malformed_messages, 1u);
  EXPECT_EQ(s.orphan_events, 5u);
  EXPECT_EQ(s.unterminated_ranges, 1u);
  EXPECT_EQ(s.unmatched_ends, 1u);
  EXPECT_EQ(s.harvests, 2u);
  EXPECT_EQ(s.forced_drains, 1u);
  EXPECT_EQ(s.framing_errors, 1u);
  EXPECT_EQ(s.producers_incomplete, 0u);
  EXPECT_EQ(s.unknown_names, 1u);
  EXPECT_EQ(s.clamped_timestamps, 0u);

  // Producer track.
  EXPECT_EQ(MetaName(t, "process_name", 2), "smprof | ./app --size 3 | pid 1000");
  EXPECT_EQ(MetaName(t, "thread_name", 2, 1), "harvests");
  // Launch process.
  EXPECT_EQ(MetaName(t, "process_name", 10),
            "#7 ns::gemm<128> | cuda:1 | stream 13 | grid(4,1,1) block(64,1,1) | pid 1000");
  EXPECT_EQ(SortIndex(t, "process_sort_index", 10), 1000001);
  EXPECT_EQ(MetaName(t, "thread_name", 10, 1), "kernel (CUPTI)");
  EXPECT_EQ(MetaName(t, "thread_name", 10, 2), "SM 005 | block (1,0,0) | warp 1");
  EXPECT_EQ(MetaName(t, "thread_name", 10, 3), "SM 002 | block (0,0,0) | warp 0");
  EXPECT_EQ(SortIndex(t, "thread_sort_index", 10, 1), 0);
  EXPECT_EQ(SortIndex(t, "thread_sort_index", 10, 3), 1);  // SM 2 before SM 5
  EXPECT_EQ(SortIndex(t, "thread_sort_index", 10, 2), 2);

  // Kernel slice.
  const auto kernel = Events(t, "X", 10, 1);
  ASSERT_EQ(kernel.size(), 1u);
  EXPECT_EQ(kernel[0]["name"], "void ns::gemm<128>(float const*, int)");
  EXPECT_EQ(kernel[0]["cat"], "smprof");
  EXPECT_DOUBLE_EQ(kernel[0]["ts"].get<double>(), 1000001.0);
  EXPECT_DOUBLE_EQ(kernel[0]["dur"].get<double>(), 99.0);
  const json& ka = kernel[0]["args"];
  EXPECT_EQ(ka["launch_id"], 7);
  EXPECT_EQ(ka["grid"], json({4, 1, 1}));
  EXPECT_EQ(ka["block"], json({64, 1, 1}));
  EXPECT_EQ(ka["device"], 1);
  EXPECT_EQ(ka["stream"], 13);
  EXPECT_EQ(ka["correlation_id"], 77);
  EXPECT_EQ(ka["grid_id"], 55);
  EXPECT_EQ(ka["graph_id"], 0);
  EXPECT_EQ(ka["registers"], 32);
  EXPECT_EQ(ka["dynamic_smem"], 1024);
  EXPECT_EQ(ka["static_smem"], 256);
  EXPECT_EQ(ka["pid"], 1000);
  EXPECT_EQ(ka["flags"], json::array());
  EXPECT_FALSE(ka.contains("note"));

  // Warp A: three slices, two instants.
  const auto xa = Events(t, "X", 10, 2);
  ASSERT_EQ(xa.size(), 3u);
  EXPECT_EQ(xa[0]["name"], "outer");  // in start order
  EXPECT_DOUBLE_EQ(xa[0]["ts"].get<double>(), 1000002.0);
  EXPECT_DOUBLE_EQ(xa[0]["dur"].get<double>(), 7.0);
  EXPECT_EQ(xa[1]["name"], "inner");
  EXPECT_DOUBLE_EQ(xa[1]["ts"].get<double>(), 1000003.0);
  EXPECT_DOUBLE_EQ(xa[1]["dur"].get<double>(), 1.0);
  EXPECT_EQ(xa[2]["name"], "inner");
  EXPECT_DOUBLE_EQ(xa[2]["ts"].get<double>(), 1000010.0);
  EXPECT_DOUBLE_EQ(xa[2]["dur"].get<double>(), 1.0);
  // Closed ranges carry their exact SM-cycle length (the builders' clocks read 1 cycle per ns).
  for (const json& x : xa) {
    EXPECT_EQ(x["args"].size(), 1u) << x.dump();
    EXPECT_EQ(x["args"].value("cycles", 0u), static_cast<uint64_t>(x["dur"].get<double>() * 1000 + 0.5)) << x.dump();
  }
  const auto ia = Events(t, "i", 10, 2);
  ASSERT_EQ(ia.size(), 2u);
  EXPECT_EQ(ia[0]["name"], "mark");
  EXPECT_EQ(ia[0]["s"], "t");
  EXPECT_DOUBLE_EQ(ia[0]["ts"].get<double>(), 1000003.5);
  EXPECT_EQ(ia[1]["name"], "inner (end without begin)");
  EXPECT_DOUBLE_EQ(ia[1]["ts"].get<double>(), 1000009.5);
  EXPECT_EQ(ia[1]["args"]["smprof_error"], "unmatched end");

  // Warp B: unterminated BEGIN ends at the launch end; undefined name.
  const auto xb = Events(t, "X", 10, 3);
  ASSERT_EQ(xb.size(), 1u);
  EXPECT_EQ(xb[0]["name"], "outer");
  EXPECT_DOUBLE_EQ(xb[0]["ts"].get<double>(), 1000002.5);
  EXPECT_DOUBLE_EQ(xb[0]["dur"].get<double>(), 97.5);
  EXPECT_EQ(xb[0]["args"]["unterminated"], true);
  const auto ib = Events(t, "i", 10, 3);
  ASSERT_EQ(ib.size(), 1u);
  EXPECT_EQ(ib[0]["name"], "<unknown name #42>");

  // Exact fixed-point text.
  EXPECT_NE(text_.find("\"ts\":1000002.000,\"dur\":7.000"), std::string::npos);
  EXPECT_NE(text_.find("\"ts\":1000002.500,\"dur\":97.500"), std::string::npos);

  // Harvests and device loss on the producer track.
  const auto hv = Events(t, "i", 2, 1);
  ASSERT_EQ(hv.size(), 2u);
  EXPECT_EQ(hv[0]["name"], "harvest: sync");
  EXPECT_DOUBLE_EQ(hv[0]["ts"].get<double>(), 1000200.0);
  EXPECT_EQ(hv[0]["args"], json({{"device", 0}, {"dropped_events", 5}, {"unplaced_events", 2}}));
  EXPECT_EQ(hv[1]["name"], "forced drain: buffer high-water");
  const auto lost = Select(t, [](const json& e) { return e["ph"] == "C"; });
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0]["pid"], 2);
  EXPECT_EQ(lost[0]["name"], "events lost (device buffer)");
  EXPECT_EQ(lost[0]["args"]["lost"], 7);

  // Run summary: last event of the trace, at the latest timestamp.
  EXPECT_EQ(MetaName(t, "process_name", 1), "smprof run");
  const json& last = t.back();
  EXPECT_EQ(last["ph"], "i");
  EXPECT_EQ(last["pid"], 1);
  EXPECT_DOUBLE_EQ(last["ts"].get<double>(), 1000300.0);
  json expected = s.ToTraceJson();
  for (auto& [key, value] : expected.items()) EXPECT_EQ(last["args"][key], value) << key;
  EXPECT_EQ(last["args"]["unknown_names"], 1);
  EXPECT_TRUE(last["args"].contains("sink_waits"));  // the sink threads' queue: how often it was full

  // Every non-metadata event is in the smprof category.
  for (const json& e : t) {
    if (e["ph"] != "M") {
      EXPECT_EQ(e["cat"], "smprof") << e.dump();
    }
  }
}

TEST_P(CollectorTest, EndClosesMostRecentOpenBeginOfTheSameName) {
  const transport::ProducerInfo a{0, 1};
  Send(a, Process(1, kT0, "app"));
  Send(a, Name(1, "a"));
  Send(a, Name(2, "b"));
  Send(a, Launch(LaunchSpec{}));
  // a(1000) { a(2000) { b(3000) ... a ends(4000) closes the inner a, not b;
  // the next END of a closes the outer a; b stays open.
  Send(a, Warp(1, 0, 0, 0, {B(2000, 1), B(3000, 1), B(3500, 2), E(4000, 1), E(6000, 1)}));
  Send(a, Harvest(200000, wire::kHarvestSync, 0, 0));
  CollectorSummary s;
  const json t = FinishAndParse(&s);
  // The two a's nest on the warp's track; b overlaps the outer a without
  // nesting in it, so it goes on the warp's second lane.
  const auto x = Events(t, "X", 10, 2);
  ASSERT_EQ(x.size(), 2u);
  EXPECT_EQ(x[0]["name"], "a");
  EXPECT_DOUBLE_EQ(x[0]["ts"].get<double>(), 1000002.0);
  EXPECT_DOUBLE_EQ(x[0]["dur"].get<double>(), 4.0);
  EXPECT_EQ(x[1]["name"], "a");
  EXPECT_DOUBLE_EQ(x[1]["ts"].get<double>(), 1000003.0);
  EXPECT_DOUBLE_EQ(x[1]["dur"].get<double>(), 1.0);
  EXPECT_EQ(MetaName(t, "thread_name", 10, 3), MetaName(t, "thread_name", 10, 2) + " | lane 1");
  EXPECT_EQ(SortIndex(t, "thread_sort_index", 10, 3), SortIndex(t, "thread_sort_index", 10, 2) + 1);
  const auto lane = Events(t, "X", 10, 3);
  ASSERT_EQ(lane.size(), 1u);
  EXPECT_EQ(lane[0]["name"], "b");
  EXPECT_EQ(lane[0]["args"]["unterminated"], true);
  EXPECT_DOUBLE_EQ(lane[0]["dur"].get<double>(), 96.5);  // to the launch end
  EXPECT_EQ(s.unmatched_ends, 0u);
  EXPECT_EQ(s.unterminated_ranges, 1u);
  EXPECT_EQ(s.events, 5u);
}

// What the collector writes, smprof-run reads back into the same structure.
TEST(CollectorSummaryTest, FromJsonReadsWhatToJsonWrites) {
  CollectorSummary a;
  a.trace = "/t/x.pftrace";
  a.processes = 2;
  a.launches = 3;
  a.events = 4;
  a.lost_device_buffer = 5;
  a.lost_device_unplaced = 6;
  a.lost_transport = 7;
  a.lost_host = 15;
  a.orphan_events = 8;
  a.lost_total = 41;
  a.malformed_messages = 9;
  a.producers_incomplete = 10;
  a.launches_opted_in = 11;
  a.launches_not_selected = 12;
  a.host_calls_forgotten = 14;
  a.harvests_skipped = 16;
  a.switched_drains = 17;
  a.transport_unread_messages = 13;
  a.not_profiled = json::array({{{"pid", 1}, {"reason", "stepped_aside"}, {"detail", "ncu"}}});
  a.stats_json = "/t/x.pftrace.stats.json";
  a.stats_csv = "/t/x.pftrace.stats.csv";
  a.exit = {{"status", "exited"}, {"code", 0}};
  a.trace_ok = false;
  a.trace_error = "disk full";
  CollectorSummary b;
  std::string error;
  ASSERT_TRUE(CollectorSummary::FromJson(a.ToJson(), &b, &error)) << error;
  EXPECT_EQ(b.ToJson(), a.ToJson());
  EXPECT_FALSE(b.trace_ok);
  EXPECT_EQ(b.stats_csv, a.stats_csv);
  EXPECT_EQ(b.lost_host, 15u);
  EXPECT_EQ(b.harvests_skipped, 16u);
  // A summary written before "host" was counted reads as none lost there.
  json old = a.ToJson();
  old["lost"].erase("host");
  ASSERT_TRUE(CollectorSummary::FromJson(old, &b, &error)) << error;
  EXPECT_EQ(b.lost_host, 0u);
  // Broken input names the key.
  json bad = a.ToJson();
  bad["launches"] = "three";
  EXPECT_FALSE(CollectorSummary::FromJson(bad, &b, &error));
  EXPECT_NE(error.find("\"launches\""), std::string::npos) << error;
  bad = a.ToJson();
  bad["lost"].erase("total");
  EXPECT_FALSE(CollectorSummary::FromJson(bad, &b, &error));
  EXPECT_NE(error.find("\"total\""), std::string::npos) << error;
  EXPECT_FALSE(CollectorSummary::FromJson(json::array(), &b, &error));
}

TEST_P(CollectorTest, SummaryJsonHasExactlyTheDocumentedKeys) {
  const CollectorSummary s = collector_->Finish();
  const json j = s.ToJson();
  std::set<std::string> keys;
  for (auto& [key, value] : j.items()) keys.insert(key);
  EXPECT_EQ(keys, (std::set<std::string>{"trace",
                                         "processes",
                                         "launches",
                                         "events",
                                         "lost",
                                         "filtered_events",
                                         "unattributed_events",
                                         "malformed_messages",
                                         "orphan_events",
                                         "unterminated_ranges",
                                         "unmatched_ends",
                                         "forced_drains",
                                         "switched_drains",
                                         "harvests",
                                         "framing_errors",
                                         "producers_incomplete",
                                         "registry_full",
                                         "transport_unread_messages",
                                         "launches_opted_in",
                                         "launches_not_selected",
                                         "host_calls_forgotten",
                                         "harvests_skipped",
                                         "async_spans",
                                         "async_unterminated",
                                         "async_unmatched_ends",
                                         "async_dropped",
                                         "gpus",
                                         "not_profiled",
                                         "kernel_failures",
                                         "layout",
                                         "run",
                                         "exit"}));
  EXPECT_EQ(j["layout"], "launch-centric (JSON)");
  std::set<std::string> lost_keys;
  for (auto& [key, value] : j["lost"].items()) lost_keys.insert(key);
  EXPECT_EQ(lost_keys,
            (std::set<std::string>{"device_buffer", "device_unplaced", "transport", "host", "orphan", "total"}));
  EXPECT_EQ(j["trace"], path_);

  // A failed trace write is reported.
  CollectorSummary failed = s;
  failed.trace_ok = false;
  failed.trace_error = "writing trace file 'x': No space left on device";
  EXPECT_EQ(failed.ToJson()["trace_error"], failed.trace_error);
}

TEST_P(CollectorTest, EventsOfADroppedLaunchCountAsLost) {
  // The transport dropped launch 5's LaunchMsg: its events arrive as orphans.
  const transport::ProducerInfo a{0, 1};
  Send(a, Process(1, kT0, "app"));
  Send(a, Name(1, "x"));
  Send(a, Warp(5, 0, 0, 0, {B(2000, 1), E(3000, 1), I(3500, 1)}));
  transport::ConsumerStats ts;
  ts.producer_events_dropped = 4;
  ts.registry_full = 2;
  collector_->SetTransportStats(ts);
  collector_->HandleProducerEnd(a, /*clean=*/true);
  CollectorSummary s;
  const json t = FinishAndParse(&s);
  EXPECT_EQ(s.orphan_events, 3u);
  EXPECT_EQ(s.lost_transport, 4u);
  EXPECT_EQ(s.lost_total, 7u);
  EXPECT_EQ(s.registry_full, 2u);
  const json j = s.ToJson();
  EXPECT_EQ(j["lost"]["orphan"], 3);
  EXPECT_EQ(j["lost"]["total"], 7);
  EXPECT_EQ(j["registry_full"], 2);
  EXPECT_EQ(t.back()["args"]["lost"]["orphan"], 3);
  EXPECT_EQ(t.back()["args"]["registry_full"], 2);
}

// The open-BEGIN index must pair exactly like "the most recent open BEGIN of
// the same name" (a linear scan), whatever the order: random sequences over a
// few names, long enough to leave closed slots inside the stack and compact
// them, checked against that scan.
TEST_P(CollectorTest, EndMatchingAgreesWithALinearScan) {
  const transport::ProducerInfo a{0, 1};
  Send(a, Process(1, kT0, "app"));
  constexpr uint32_t kNames = 5;
  for (uint32_t n = 1; n <= kNames; ++n) Send(a, Name(n, "n" + std::to_string(n)));
  LaunchSpec ls;
  ls.end = kT0 + 10000000;
  Send(a, Launch(ls));

  struct Open {
    uint32_t name;
    uint64_t t;
  };
  struct Expected {
    std::string name;
    uint64_t ts, dur;
    bool unterminated;
  };
  std::vector<Open> stack;
  std::vector<Expected> expected;
  uint64_t unmatched = 0;
  std::mt19937_64 rng(99);
  std::vector<wire::WireEvent> batch;
  uint64_t t = 1000;
  for (int i = 0; i < 20000; ++i, t += 10) {
    const uint32_t name = 1 + static_cast<uint32_t>(rng() % kNames);
    // Mostly BEGINs early, mostly ENDs late: deep stacks, then unwinding.
    const bool begin = rng() % 100 < (i < 12000 ? 60u : 35u);
    if (begin) {
      batch.push_back(B(t, name));
      stack.push_back({name, t});
    } else {
      batch.push_back(E(t, name));
      auto it = std::find_if(stack.rbegin(), stack.rend(), [&](const Open& o) { return o.name == name; });
      if (it == stack.rend()) {
        ++unmatched;
      } else {
        expected.push_back({"n" + std::to_string(name), it->t, t - it->t, false});
        stack.erase(std::next(it).base());
      }
    }
    if (batch.size() == 1000) {
      Send(a, Warp(1, 0, 0, 0, batch));
      batch.clear();
    }
  }
  if (!batch.empty()) Send(a, Warp(1, 0, 0, 0, batch));
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
    expected.push_back({"n" + std::to_string(it->name), it->t, 10000000 - it->t, true});
  }
  Send(a, Harvest(20000000, wire::kHarvestSync, 0, 0));
  CollectorSummary s;
  const json tr = FinishAndParse(&s);
  // Every range, on the warp's track or one of its lanes, in start order
  // (the longer first on equal starts); on each track, ranges nest.
  std::vector<json> x;
  std::map<int, std::vector<std::pair<double, double>>> per_track;  // tid -> (ts, end)
  for (const json& e : Select(tr, [](const json& e) { return e["ph"] == "X" && e["pid"] == 10 && e["tid"] != 1; })) {
    x.push_back(e);
    per_track[e["tid"].get<int>()].push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  }
  EXPECT_GT(per_track.size(), 1u);  // this sequence interleaves names: lanes are needed
  for (const auto& [tid, spans] : per_track) {
    std::vector<double> open;  // ends of the enclosing ranges
    for (const auto& [ts, end] : spans) {
      while (!open.empty() && open.back() <= ts) open.pop_back();
      ASSERT_TRUE(open.empty() || end <= open.back() + 1e-9) << "tid " << tid << " at " << ts;
      open.push_back(end);
    }
  }
  std::stable_sort(expected.begin(), expected.end(),
                   [](const Expected& l, const Expected& r) { return l.ts != r.ts ? l.ts < r.ts : l.dur > r.dur; });
  std::stable_sort(x.begin(), x.end(), [](const json& l, const json& r) {
    return l["ts"].get<double>() != r["ts"].get<double>() ? l["ts"].get<double>() < r["ts"].get<double>()
                                                          : l["dur"].get<double>() > r["dur"].get<double>();
  });
  ASSERT_EQ(x.size(), expected.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i]["name"], expected[i].name) << i;
    ASSERT_DOUBLE_EQ(x[i]["ts"].get<double>(), 1000000.0 + expected[i].ts / 1000.0) << i;
    ASSERT_DOUBLE_EQ(x[i]["dur"].get<double>(), expected[i].dur / 1000.0) << i;
    ASSERT_TRUE(x[i].contains("args")) << i << " " << x[i].dump();
    ASSERT_EQ(x[i]["args"].contains("unterminated"), expected[i].unterminated) << i;
    if (!expected[i].unterminated) {
      ASSERT_EQ(x[i]["args"].value("cycles", 0u), expected[i].dur) << i;
    }
  }
  EXPECT_EQ(s.unmatched_ends, unmatched);
  EXPECT_EQ(s.unterminated_ranges, stack.size());
}

// Open BEGINs per warp are capped: past 65536 the oldest is written as
// unterminated (noting why), and pairing of the newer ones is unaffected.
TEST_P(CollectorTest, OpenBeginsPerWarpAreCapped) {
  const transport::ProducerInfo a{0, 1};
  Send(a, Process(1, kT0, "app"));
  Send(a, Name(1, "deep"));
  Send(a, Name(2, "other"));
  LaunchSpec ls;
  ls.end = kT0 + 100000000;
  Send(a, Launch(ls));
  constexpr uint32_t kCap = 1u << 16;
  constexpr uint32_t kOver = 3;
  std::vector<wire::WireEvent> batch;
  uint64_t t = 1000;
  // "other" first: it is the oldest, so it is the first evicted.
  batch.push_back(B(t++, 2));
  for (uint32_t i = 0; i < kCap - 1 + kOver; ++i) {
    batch.push_back(B(t++, 1));
    if (batch.size() == 10000) {
      Send(a, Warp(1, 0, 0, 0, batch));
      batch.clear();
    }
  }
  // The newest "deep" is still paired with its END; "other" was evicted, so
  // its END is unmatched.
  batch.push_back(E(t, 1));
  batch.push_back(E(t + 1, 2));
  Send(a, Warp(1, 0, 0, 0, batch));
  CollectorSummary before_finish = collector_->counters();
  EXPECT_EQ(before_finish.unterminated_ranges, kOver);  // written when evicted
  Send(a, Harvest(200000000, wire::kHarvestSync, 0, 0));
  CollectorSummary s;
  const json tr = FinishAndParse(&s);
  const auto x = Select(tr, [](const json& e) { return e["ph"] == "X" && e["pid"] == 10 && e["tid"] != 1; });
  ASSERT_EQ(x.size(), kCap + kOver);
  // In start order: the evicted (the oldest), with the reason, closed where
  // they were evicted.
  EXPECT_EQ(x[0]["name"], "other");
  for (uint32_t i = 0; i < kOver; ++i) {
    EXPECT_EQ(x[i]["args"]["unterminated"], true) << i;
    EXPECT_NE(x[i]["args"]["note"].get<std::string>().find("65536"), std::string::npos) << i;
    EXPECT_DOUBLE_EQ(x[i]["ts"].get<double>() + x[i]["dur"].get<double>(), 1000000.0 + (1000 + kCap + i) / 1000.0) << i;
  }
  EXPECT_EQ(x[1]["name"], "deep");
  EXPECT_DOUBLE_EQ(x[1]["ts"].get<double>(), 1000001.001);
  // The newest "deep", closed by its END.
  EXPECT_EQ(x.back()["name"], "deep");
  EXPECT_FALSE(x.back()["args"].contains("unterminated"));
  EXPECT_EQ(x.back()["args"].value("cycles", 0u), 1u);
  EXPECT_DOUBLE_EQ(x.back()["ts"].get<double>(), 1000000.0 + (t - 1) / 1000.0);
  EXPECT_EQ(s.unmatched_ends, 1u);
  EXPECT_EQ(s.unterminated_ranges, kCap - 1 + kOver);
  EXPECT_EQ(s.events, kOver + 2 + 1 + (kCap - 1));  // evicted, pair, unmatched, finalized
}

TEST_P(CollectorTest, LatestStatsMessageGivesDeviceTotals) {
  const transport::ProducerInfo a{3, 50};
  Send(a, Process(50, kT0, "app"));
  Send(a, Harvest(1000, wire::kHarvestSync, 5, 0));
  wire::StatsMsg st{};
  st.events_dropped_device = 40;
  Send(a, Frame(st, wire::kMsgStats));
  st.events_dropped_device = 50;
  st.events_unplaced_device = 4;
  st.events_filtered = 9;
  st.events_unattributed = 6;
  st.harvests = 7;
  st.forced_drains = 3;
  st.events_lost_host = 12;  // read back, never shipped: the exit could not wait
  st.harvests_skipped = 2;   // SMPROF_BACKLOG drop
  Send(a, Frame(st, wire::kMsgStats));
  collector_->HandleProducerEnd(a, true);
  // A second producer without stats: its harvest drops count.
  const transport::ProducerInfo b{4, 60};
  Send(b, Process(60, kT0, "app2"));
  Send(b, Harvest(2000, wire::kHarvestExit, 8, 1));

  CollectorSummary s;
  const json t = FinishAndParse(&s);
  EXPECT_EQ(s.lost_device_buffer, 58u);
  EXPECT_EQ(s.lost_device_unplaced, 5u);
  EXPECT_EQ(s.filtered_events, 9u);
  EXPECT_EQ(s.unattributed_events, 6u);
  EXPECT_EQ(s.harvests, 8u);
  EXPECT_EQ(s.forced_drains, 3u);
  EXPECT_EQ(s.lost_host, 12u);
  EXPECT_EQ(s.harvests_skipped, 2u);
  EXPECT_EQ(s.lost_total, 75u);
  EXPECT_EQ(s.producers_incomplete, 1u);  // b never ended
  EXPECT_EQ(Events(t, "i", 3, 1)[0]["name"], "harvest: exit");
}

// Drains that switched arena segments are counted apart (of the forced ones).
TEST_P(CollectorTest, SwitchedDrainsAreCounted) {
  const transport::ProducerInfo a{3, 50};
  Send(a, Process(50, kT0, "app"));
  wire::HarvestMsg m = testing::HarvestFields(kT0 + 1000, wire::kHarvestHighWater);
  m.flags = wire::kHarvestSwitched;
  Send(a, testing::Frame(m, wire::kMsgHarvest));
  Send(a, Harvest(2000, wire::kHarvestHighWater, 0, 0));
  Send(a, Harvest(3000, wire::kHarvestSync, 0, 0));
  collector_->HandleProducerEnd(a, true);
  CollectorSummary s;
  FinishAndParse(&s);
  EXPECT_EQ(s.forced_drains, 2u);
  EXPECT_EQ(s.switched_drains, 1u);
  EXPECT_EQ(s.harvests, 3u);
}

TEST_P(CollectorTest, TwoProducersInterleavedKeepTheirOwnNamesAndLaunches) {
  const transport::ProducerInfo a{0, 100};
  const transport::ProducerInfo b{1, 200};
  Send(a, Process(100, kT0, "proc-a"));
  Send(b, Process(200, kT0 + 5, "proc-b"));
  Send(a, Name(1, "alpha"));
  Send(b, Name(1, "beta"));
  LaunchSpec la;
  la.id = 1;
  la.kernel = "ka";
  LaunchSpec lb = la;
  lb.kernel = "kb";
  lb.start = kT0 + 500;
  Send(a, Launch(la));
  Send(b, Launch(lb));
  Send(b, Warp(1, 0, 0, 0, {I(3000, 1)}));
  Send(a, Warp(1, 0, 0, 0, {I(2000, 1)}));
  Send(b, Harvest(4000, wire::kHarvestSync, 0, 0));
  Send(a, Harvest(5000, wire::kHarvestSync, 0, 0));
  collector_->HandleProducerEnd(b, true);
  collector_->HandleProducerEnd(a, true);

  CollectorSummary s;
  const json t = FinishAndParse(&s);
  EXPECT_EQ(s.processes, 2u);
  EXPECT_EQ(s.launches, 2u);
  EXPECT_EQ(s.events, 2u);
  EXPECT_EQ(s.harvests, 2u);
  EXPECT_EQ(s.unknown_names, 0u);
  EXPECT_EQ(MetaName(t, "process_name", 2), "smprof | proc-a | pid 100");
  EXPECT_EQ(MetaName(t, "process_name", 3), "smprof | proc-b | pid 200");
  EXPECT_EQ(MetaName(t, "process_name", 10), "#1 ka | cuda:0 | stream 7 | grid(4,1,1) block(64,1,1) | pid 100");
  EXPECT_EQ(MetaName(t, "process_name", 11), "#1 kb | cuda:0 | stream 7 | grid(4,1,1) block(64,1,1) | pid 200");
  EXPECT_EQ(SortIndex(t, "process_sort_index", 10), 1000001);
  EXPECT_EQ(SortIndex(t, "process_sort_index", 11), 1000000);  // b's launch started first
  ASSERT_EQ(Events(t, "i", 10, 2).size(), 1u);
  EXPECT_EQ(Events(t, "i", 10, 2)[0]["name"], "alpha");
  ASSERT_EQ(Events(t, "i", 11, 2).size(), 1u);
  EXPECT_EQ(Events(t, "i", 11, 2)[0]["name"], "beta");
  EXPECT_EQ(Events(t, "i", 2, 1).size(), 1u);
  EXPECT_EQ(Events(t, "i", 3, 1).size(), 1u);
}

TEST_P(CollectorTest, ReusedEntryStartsFromScratch) {
  const transport::ProducerInfo first{0, 100};
  Send(first, Process(100, kT0, "first"));
  Send(first, Name(1, "alpha"));
  Send(first, Launch(LaunchSpec{}));
  Send(first, Warp(1, 0, 0, 0, {B(2000, 1)}));
  collector_->HandleProducerEnd(first, /*clean=*/true);  // finalizes launch 1

  const transport::ProducerInfo second{0, 300};  // same registry entry, new process
  Send(second, Process(300, kT0 + 1, "second"));
  Send(second, Warp(1, 0, 0, 0, {I(3000, 1)}));  // launch 1 belongs to the first process
  Send(second, Launch(LaunchSpec{}));
  Send(second, Warp(1, 0, 0, 0, {I(4000, 1)}));  // name 1 was never defined here

  CollectorSummary s;
  const json t = FinishAndParse(&s);
  EXPECT_EQ(s.processes, 2u);
  EXPECT_EQ(s.launches, 2u);
  EXPECT_EQ(s.orphan_events, 1u);
  EXPECT_EQ(s.unterminated_ranges, 1u);
  EXPECT_EQ(s.unknown_names, 1u);
  EXPECT_EQ(s.producers_incomplete, 1u);  // the second never ended
  EXPECT_EQ(MetaName(t, "process_name", 3), "smprof | second | pid 300");
  const auto x = Events(t, "X", 10, 2);
  ASSERT_EQ(x.size(), 1u);
  EXPECT_EQ(x[0]["name"], "alpha");
  EXPECT_EQ(x[0]["args"], json({{"unterminated", true}}));  // clean end: no note
  EXPECT_DOUBLE_EQ(x[0]["dur"].get<double>(), 98.0);        // up to the launch end
  const auto i = Events(t, "i", 11, 2);
  ASSERT_EQ(i.size(), 1u);
  EXPECT_EQ(i[0]["name"], "<unknown name #1>");
  const auto lost = Events(t, "i", 3, 1);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0]["name"], "process lost");
}

TEST_P(CollectorTest, UncleanEndFinalizesAndCounts) {
  const transport::ProducerInfo a{0, 100};
  Send(a, Process(100, kT0, "crashy"));
  Send(a, Name(1, "work"));
  Send(a, Launch(LaunchSpec{}));
  Send(a, Warp(1, 3, 0, 2, {B(2000, 1), B(2100, 1), I(150000, 1)}));
  collector_->HandleProducerEnd(a, /*clean=*/false);
  CollectorSummary s;
  const json t = FinishAndParse(&s);
  EXPECT_EQ(s.producers_incomplete, 1u);
  EXPECT_EQ(s.unterminated_ranges, 2u);
  const auto x = Events(t, "X", 10, 2);
  ASSERT_EQ(x.size(), 2u);
  // In start order; both end at the warp's last event, later than the launch end.
  EXPECT_DOUBLE_EQ(x[0]["ts"].get<double>(), 1000002.0);
  EXPECT_DOUBLE_EQ(x[0]["dur"].get<double>(), 148.0);
  EXPECT_DOUBLE_EQ(x[1]["ts"].get<double>(), 1000002.1);
  EXPECT_DOUBLE_EQ(x[1]["dur"].get<double>(), 147.9);
  for (const json& e : x) {
    EXPECT_EQ(e["args"]["unterminated"], true);
    EXPECT_TRUE(e["args"].contains("note"));
  }
  const auto lost = Events(t, "i", 2, 1);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0]["name"], "process lost");
  EXPECT_DOUBLE_EQ(lost[0]["ts"].get<double>(), 1000150.0);
}

TEST_P(CollectorTest, MessagesBeforeProcessMsgAreAccepted) {
  const transport::ProducerInfo a{2, 4242};
  Send(a, Name(1, "early"));
  LaunchSpec ls;
  ls.start = kT0 + 1000;
  Send(a, Launch(ls));
  Send(a, Warp(1, 0, 0, 0, {I(1500, 1)}));
  Send(a, Process(4242, kT0 - 500000, "late-process-msg"));
  Send(a, Harvest(200000, wire::kHarvestSync, 0, 0));
  CollectorSummary s;
  const json t = FinishAndParse(&s);
  EXPECT_EQ(s.malformed_messages, 0u);
  EXPECT_EQ(s.events, 1u);
  // Base came from the launch start (the first timestamp written).
  EXPECT_DOUBLE_EQ(Events(t, "X", 10, 1)[0]["ts"].get<double>(), 1000000.0);
  EXPECT_EQ(MetaName(t, "process_name", 10), "#1 k | cuda:0 | stream 7 | grid(4,1,1) block(64,1,1) | pid 4242");
  EXPECT_EQ(Events(t, "i", 10, 2)[0]["name"], "early");
  EXPECT_EQ(MetaName(t, "process_name", 2), "smprof | late-process-msg | pid 4242");
}

TEST_P(CollectorTest, TimestampsBeforeBaseAreClampedAndCounted) {
  const transport::ProducerInfo a{0, 1};
  Send(a, Process(1, kT0, "app"));
  Send(a, Launch(LaunchSpec{}));
  Send(a, Warp(1, 0, 0, 0, {Ev(5, 0, wire::kEventInstant)}));
  CollectorSummary s;
  const json t = FinishAndParse(&s);
  EXPECT_EQ(s.clamped_timestamps, 1u);
  EXPECT_DOUBLE_EQ(Events(t, "i", 10, 2)[0]["ts"].get<double>(), 0.0);
}

TEST_P(CollectorTest, NoActivityLaunchIsWrittenWithFlagsAndNote) {
  const transport::ProducerInfo a{0, 1};
  Send(a, Process(1, kT0, "app"));
  LaunchSpec ls;
  ls.flags = wire::kLaunchNoActivity | wire::kLaunchFromGraph | wire::kLaunchForcedDrain | 0x100;
  ls.start = kT0 + 1000;
  ls.end = kT0 + 2000;
  Send(a, Launch(ls));
  Send(a, Warp(1, 0, 0, 0, {B(1200, 1), I(1700, 1)}));
  Send(a, Harvest(5000, wire::kHarvestSync, 0, 0));
  const json t = FinishAndParse();
  const auto k = Events(t, "X", 10, 1);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0]["args"]["flags"], json({"no_activity", "graph", "forced_drain", "0x100"}));
  EXPECT_TRUE(k[0]["args"]["note"].is_string());
  const auto x = Events(t, "X", 10, 2);
  ASSERT_EQ(x.size(), 1u);
  EXPECT_DOUBLE_EQ(x[0]["dur"].get<double>(), 0.5);  // up to the warp's last event
}

TEST_P(CollectorTest, NastyNamesStayValidJson) {
  const transport::ProducerInfo a{0, 1};
  const std::string nasty("\"q\\\n\x01\xFF\xC0\xAF end", 12);
  Send(a, Process(1, kT0, nasty));
  Send(a, Name(1, nasty));
  LaunchSpec ls;
  ls.kernel = nasty;
  Send(a, Launch(ls));
  Send(a, Warp(1, 0, 0, 0, {I(1500, 1), E(1600, 1)}));
  const json t = FinishAndParse();
  const std::string fffd = "\xEF\xBF\xBD";
  const std::string repaired = "\"q\\\n\x01" + fffd + fffd + fffd + " end";
  EXPECT_EQ(Events(t, "i", 10, 2)[0]["name"], repaired);
  EXPECT_EQ(Events(t, "i", 10, 2)[1]["name"], repaired + " (end without begin)");
  EXPECT_EQ(Events(t, "X", 10, 1)[0]["name"], repaired);
}

TEST_P(CollectorTest, FuzzedMessagesNeverBreakTheTrace) {
  std::mt19937_64 rng(1234);
  std::vector<Bytes> seeds = {
      Process(1, kT0, "app"),
      Name(1, "n1"),
      Name(2, "n2"),
      Launch(LaunchSpec{}),
      Warp(1, 0, 0, 0, {B(2000, 1), I(2100, 2), E(2200, 1), E(2300, 2)}),
      Warp(1, 3, 1, 2, {B(2000, 2), B(2100, 1)}),
      Harvest(3000, wire::kHarvestSync, 1, 1),
      Frame(wire::StatsMsg{}, wire::kMsgStats),
  };
  uint64_t delivered = 0;
  for (int i = 0; i < 30000; ++i) {
    const transport::ProducerInfo p{static_cast<uint32_t>(rng() % 3), static_cast<uint32_t>(100 + rng() % 3)};
    Bytes b = seeds[rng() % seeds.size()];
    if (rng() % 4 != 0) {
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) {
        const size_t bit = 64 + rng() % ((b.size() - 8) * 8);  // keep the header: reach deeper checks
        b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      }
    }
    Send(p, b);
    ++delivered;
    if (rng() % 500 == 0) collector_->HandleProducerEnd(p, rng() % 2 == 0);
  }
  CollectorSummary s;
  const json t = FinishAndParse(&s);
  EXPECT_TRUE(t.is_array());
  EXPECT_GT(s.malformed_messages, 0u);
  EXPECT_LT(s.malformed_messages, delivered);
  EXPECT_GT(s.events, 0u);
}

// The process label, by pid, of every process whose name starts with `prefix`.
std::map<int, std::string> ProcessesNamed(const json& trace, const std::string& prefix) {
  std::map<int, std::string> out;
  for (const json& e : trace) {
    if (e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"].get<std::string>().rfind(prefix, 0) == 0) {
      out[e["pid"].get<int>()] = e["args"]["name"];
    }
  }
  return out;
}

// Two processes pinned to two physical GPUs both call theirs cuda:0; a third
// process sees the first GPU as cuda:1. The trace shows each physical GPU
// once, and every launch names the run-wide GPU and the process's ordinal.
TEST_P(CollectorTest, GpusAreGroupedByPhysicalIdentityNotByOrdinal) {
  const transport::ProducerInfo a{0, 100}, b{1, 200}, c{2, 300};
  Send(a, Process(100, kT0, "app --rank 0"));
  Send(b, Process(200, kT0, "app --rank 1"));
  Send(c, Process(300, kT0, "app --rank 2"));
  Send(a, testing::Device(0, "NVIDIA H200", 0x11, 0x19));
  Send(b, testing::Device(0, "NVIDIA H200", 0x22, 0x1a));
  Send(c, testing::Device(1, "NVIDIA H200", 0x11, 0x19));
  LaunchSpec la, lb, lc;
  lc.device = 1;
  lb.start = kT0 + 2000;
  Send(a, Launch(la));
  Send(b, Launch(lb));
  Send(c, Launch(lc));
  CollectorSummary s;
  const json t = FinishAndParse(&s);

  const auto gpus = ProcessesNamed(t, "GPU ");
  ASSERT_EQ(gpus.size(), 2u);
  const std::string uuid_a = "GPU-11111111-1111-1111-1111-111111111111";
  const std::string uuid_b = "GPU-22222222-2222-2222-2222-222222222222";
  std::set<std::string> labels;
  for (const auto& [pid, label] : gpus) labels.insert(label);
  EXPECT_EQ(labels, (std::set<std::string>{"GPU 0 | NVIDIA H200 | 0000:19:00.0 | " + uuid_a,
                                           "GPU 1 | NVIDIA H200 | 0000:1a:00.0 | " + uuid_b}));
  std::set<std::string> launches;
  for (const auto& [pid, label] : ProcessesNamed(t, "#")) launches.insert(label);
  EXPECT_EQ(launches,
            (std::set<std::string>{"#1 k | GPU 0 (cuda:0) | stream 7 | grid(4,1,1) block(64,1,1) | pid 100",
                                   "#1 k | GPU 1 (cuda:0) | stream 7 | grid(4,1,1) block(64,1,1) | pid 200",
                                   "#1 k | GPU 0 (cuda:1) | stream 7 | grid(4,1,1) block(64,1,1) | pid 300"}));

  // GPU 0's track holds the kernel spans of both processes that used it.
  int gpu0 = -1;
  for (const auto& [pid, label] : gpus) {
    if (label.rfind("GPU 0 ", 0) == 0) gpu0 = pid;
  }
  const auto identity = Events(t, "i", gpu0, 0);
  ASSERT_EQ(identity.size(), 1u);
  EXPECT_EQ(identity[0]["args"]["uuid"], uuid_a);
  EXPECT_EQ(identity[0]["args"]["timer_resolution_ns"], 32);
  EXPECT_EQ(MetaName(t, "thread_name", gpu0, 1), "pid 100 | cuda:0 | stream 7");
  EXPECT_EQ(MetaName(t, "thread_name", gpu0, 2), "pid 300 | cuda:1 | stream 7");
  EXPECT_EQ(Events(t, "X", gpu0, 1).size(), 1u);
  EXPECT_EQ(Events(t, "X", gpu0, 2).size(), 1u);

  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_EQ(s.gpus[0]["uuid"], uuid_a);
  EXPECT_EQ(s.gpus[0]["pci_bus_id"], "0000:19:00.0");
  EXPECT_EQ(s.gpus[0]["sm_count"], 132);
  EXPECT_EQ(s.gpus[0]["sm_clock_khz"], 1980000);
  EXPECT_EQ(s.gpus[0]["timer_resolution_ns"], 32);
  EXPECT_EQ(s.gpus[0]["compute_capability"], "9.0");
  EXPECT_EQ(s.gpus[0]["seen_as"], json::parse(R"([{"pid":100,"ordinal":0,"buffer_mib":0},{"pid":300,"ordinal":1,"buffer_mib":0}])"));
  EXPECT_EQ(s.gpus[1]["seen_as"], json::parse(R"([{"pid":200,"ordinal":0,"buffer_mib":0}])"));
  EXPECT_EQ(t.back()["args"]["gpus"], s.gpus);
}

TEST_P(CollectorTest, LaunchesAreNamedByTheSharedKernelNameParser) {
  const transport::ProducerInfo a{0, 1};
  Send(a, Process(1, kT0, "app"));
  LaunchSpec l;
  l.kernel = "f(int)::{lambda(int)#1}::operator()(int) const";
  Send(a, Launch(l));
  const json t = FinishAndParse();
  EXPECT_EQ(MetaName(t, "process_name", 10),
            "#1 f(int)::{lambda(int)#1}::operator() | cuda:0 | stream 7 | grid(4,1,1) block(64,1,1) | pid 1");
}

TEST_P(CollectorTest, NoticesSayWhyAProcessWasNotProfiled) {
  const transport::ProducerInfo a{0, 41};
  Send(a, Process(41, kT0, "app"));
  Send(a, testing::Notice(wire::kNoticeCuptiUnavailable, "CUPTI for compute-sanitizer"));
  CollectorSummary s;
  const json t = FinishAndParse(&s);
  EXPECT_EQ(s.not_profiled, json::parse(R"([{"pid":41,"reason":"cupti_unavailable",
                                            "detail":"CUPTI for compute-sanitizer"}])"));
  const auto notes = Select(t, [](const json& e) { return e["ph"] == "i" && e["name"] == "not profiled"; });
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0]["pid"], 2);
  EXPECT_EQ(notes[0]["args"]["detail"], "CUPTI for compute-sanitizer");
}

TEST_P(CollectorTest, AKernelFailureIsInTheTraceAndTheSummary) {
  const transport::ProducerInfo a{0, 41};
  Send(a, Process(41, kT0, "app"));
  Send(a, testing::Notice(wire::kNoticeKernelFailed, "GPU 0: CUDA_ERROR_ASSERT; fault_write(int*) (launch call 9)"));
  CollectorSummary s;
  const json t = FinishAndParse(&s);
  EXPECT_TRUE(s.not_profiled.empty()) << s.not_profiled.dump();
  EXPECT_EQ(s.kernel_failures,
            json::parse(R"j([{"pid":41,"detail":"GPU 0: CUDA_ERROR_ASSERT; fault_write(int*) (launch call 9)"}])j"));
  const auto failures = Select(t, [](const json& e) { return e["ph"] == "i" && e["name"] == "kernel failed"; });
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0]["args"]["reason"], "kernel_failed");
  EXPECT_NE(failures[0]["args"]["detail"].get<std::string>().find("fault_write(int*)"), std::string::npos);
  EXPECT_TRUE(Select(t, [](const json& e) { return e["name"] == "not profiled"; }).empty());
}

TEST_P(CollectorTest, LaunchCountsOfOptedInKernelsReachTheSummary) {
  const transport::ProducerInfo a{0, 1}, b{1, 2};
  wire::StatsMsg st{};
  st.launches_opted_in = 5;
  st.launches_not_selected = 5;
  st.host_calls_forgotten = 7;
  Send(a, testing::Stats(st));
  st.launches_opted_in = 3;
  st.launches_not_selected = 1;
  st.host_calls_forgotten = 0;
  Send(b, testing::Stats(st));
  st.launches_opted_in = 4;  // a later StatsMsg of the same process replaces the earlier one
  Send(b, testing::Stats(st));
  CollectorSummary s;
  FinishAndParse(&s);
  EXPECT_EQ(s.launches_opted_in, 9u);
  EXPECT_EQ(s.launches_not_selected, 6u);
  EXPECT_EQ(s.host_calls_forgotten, 7u);
}

TEST_P(CollectorTest, RunMetadataIsAtTheStartAndExitStatusInTheSummary) {
  collector_->HandleControl(json::parse(R"({"run": {"command": ["./app", "--n", "3"], "smprof_version": "0.1.0",
                                                    "settings": {"SMPROF_BUFFER_MB": {"value": "64",
                                                                                      "source": "default"}}}})"));
  collector_->HandleControl(json::parse(R"({"exit": {"status": "exited", "code": 3}})"));
  collector_->HandleControl(json::parse(R"({"unknown": 1})"));  // ignored
  CollectorSummary s;
  const json t = FinishAndParse(&s);
  const auto run = Events(t, "i", 1, 1);
  ASSERT_EQ(run.size(), 2u);  // the run metadata and the summary
  EXPECT_EQ(run[0]["name"], "smprof run");
  EXPECT_DOUBLE_EQ(run[0]["ts"].get<double>(), 0.0);
  EXPECT_EQ(run[0]["args"]["command"], json::parse(R"(["./app", "--n", "3"])"));
  EXPECT_EQ(run[0]["args"]["settings"]["SMPROF_BUFFER_MB"]["source"], "default");
  EXPECT_EQ(s.run["smprof_version"], "0.1.0");
  EXPECT_EQ(s.exit, json::parse(R"({"status": "exited", "code": 3})"));
  EXPECT_EQ(run[1]["args"]["exit"]["code"], 3);
  EXPECT_EQ(run[1]["args"]["run"]["command"][0], "./app");
}

// The trace is written under PartialPath and moved into place by Finish.
TEST_P(CollectorTest, TraceIsPartialUntilFinished) {
  const transport::ProducerInfo a{0, 1};
  Send(a, Process(1, kT0, "app"));
  EXPECT_EQ(::access(path_.c_str(), F_OK), -1);
  EXPECT_EQ(::access(PartialPath(path_).c_str(), F_OK), 0);
  CollectorSummary s;
  FinishAndParse(&s);
  EXPECT_EQ(s.trace, path_);
  EXPECT_EQ(::access(path_.c_str(), F_OK), 0);
  EXPECT_EQ(::access(PartialPath(path_).c_str(), F_OK), -1);
}

// A file created at the trace path during the run is not overwritten: the
// trace lands at the numbered path and the summary says where.
TEST_P(CollectorTest, AFileThatAppearedMeanwhileIsNotOverwritten) {
  std::ofstream(path_) << "keep me";
  const CollectorSummary s = collector_->Finish();
  EXPECT_TRUE(s.trace_ok) << s.trace_error;
  EXPECT_EQ(s.trace, NumberedPath(path_, 2));
  std::ifstream kept(path_);
  std::string text;
  std::getline(kept, text);
  EXPECT_EQ(text, "keep me");
  EXPECT_TRUE(json::accept(std::ifstream(s.trace)));
}

TEST_P(CollectorTest, ExistingPartialFileStopsASecondWriterUnlessOverwriting) {
  CollectorOptions options;
  options.trace_path = path_;
  std::string error;
  EXPECT_EQ(Collector::Create(options, &error), nullptr);  // our own collector_ holds the partial file
  EXPECT_NE(error.find("already exists"), std::string::npos) << error;
  EXPECT_NE(error.find(PartialPath(path_)), std::string::npos) << error;
  collector_.reset();  // leaves the partial file behind, as a killed run would
  options.overwrite = true;
  collector_ = Collector::Create(options, &error);
  ASSERT_NE(collector_, nullptr) << error;
  std::ofstream(path_) << "old trace";
  const CollectorSummary s = collector_->Finish();
  EXPECT_TRUE(s.trace_ok) << s.trace_error;
  EXPECT_EQ(s.trace, path_);
  EXPECT_TRUE(json::accept(std::ifstream(path_)));
}

// -o /dev/null discards the trace: written there directly, no partial file,
// nothing placed beside it.
TEST(TracePlacementTest, DevNullIsWrittenDirectly) {
  CollectorOptions options;
  options.trace_path = "/dev/null";
  std::string error;
  auto collector = Collector::Create(options, &error);
  ASSERT_NE(collector, nullptr) << error;
  const CollectorSummary s = collector->Finish();
  EXPECT_TRUE(s.trace_ok) << s.trace_error;
  EXPECT_EQ(s.trace, "/dev/null");
  EXPECT_NE(::access("/dev/null.partial", F_OK), 0);
  EXPECT_NE(::access("/dev/null-2", F_OK), 0);
  EXPECT_TRUE(IsStreamPath("/dev/null"));
  EXPECT_FALSE(IsStreamPath("/tmp"));
  EXPECT_FALSE(IsStreamPath("/no/such/file"));
}

TEST(TracePlacementTest, NumberedPaths) {
  EXPECT_EQ(NumberedPath("/d/trace.json", 2), "/d/trace-2.json");
  EXPECT_EQ(NumberedPath("trace", 3), "trace-3");
  EXPECT_EQ(NumberedPath("/d.x/trace", 2), "/d.x/trace-2");
  EXPECT_EQ(NumberedPath("/d/.hidden", 2), "/d/.hidden-2");
  EXPECT_EQ(NumberedPath("/d/a.b.json", 2), "/d/a.b-2.json");
  EXPECT_EQ(PartialPath("/d/trace.json"), "/d/trace.json.partial");
}

TEST(GpuIdentityTest, UuidAndPciText) {
  uint8_t uuid[16] = {0x94, 0x7b, 0x83, 0xbb, 0x87, 0x31, 0x77, 0x41, 0xa0, 0x2a, 0x79, 0x3c, 0xee, 0xab, 0xd4, 0x7e};
  EXPECT_EQ(internal::UuidText(uuid), "GPU-947b83bb-8731-7741-a02a-793ceeabd47e");  // as nvidia-smi -L writes it
  uint8_t zero[16] = {};
  EXPECT_EQ(internal::UuidText(zero), "");
  EXPECT_EQ(internal::PciBusIdText(0, 0x19, 0), "0000:19:00.0");
  EXPECT_EQ(internal::PciBusIdText(0, 0, 6), "0000:00:06.0");
  EXPECT_EQ(internal::PciBusIdText(0, 0, 0), "");
}

TEST(LaunchFlagsTest, Words) {
  EXPECT_EQ(internal::LaunchFlagsJson(0), "[]");
  EXPECT_EQ(internal::LaunchFlagsJson(wire::kLaunchFromGraph), "[\"graph\"]");
  EXPECT_EQ(internal::HarvestReasonName(wire::kHarvestModuleUnload), "harvest: module unload");
  EXPECT_EQ(internal::HarvestReasonName(wire::kHarvestContextDestroy), "harvest: context destroy");
  EXPECT_EQ(internal::HarvestReasonName(99), "harvest: reason 99");
}

// --- the device API through the trace builder (docs/device-api.md) ---------------
// A sink that writes down what the builder hands on, one line per call, so
// that a test states the exact records and their order.

class RecordingSink : public trace::TraceSink {
 public:
  void OnWarp(const trace::LaunchRecord& l, const trace::WarpRecord& w) override {
    log.push_back("warp " + std::to_string(l.launch_id) + "/" + std::to_string(w.index));
  }
  void OnSlice(const trace::LaunchRecord&, const trace::WarpRecord& w, const trace::SliceRecord& s) override {
    std::string line = "slice w" + std::to_string(w.index) + " " + std::string(s.name) + " [" +
                       std::to_string(s.begin_ns) + "," + std::to_string(s.end_ns) + "]";
    if (s.phase) line += " phase";
    if (s.unterminated) line += " unterminated";
    if (s.lane != 0) line += " lane " + std::to_string(s.lane);
    if (s.value.present) line += " value " + std::to_string(s.value.value);
    if (s.value.counter) line += " counter";  // never on a slice
    log.push_back(line);
    keys[std::string(s.name)] = s.name_key;
  }
  void OnInstant(const trace::LaunchRecord&, const trace::WarpRecord& w, const trace::InstantRecord& i) override {
    std::string line =
        "instant w" + std::to_string(w.index) + " " + std::string(i.name) + " @" + std::to_string(i.ts_ns);
    if (i.unmatched_end) line += " unmatched";
    if (i.value.present) line += " value " + std::to_string(i.value.value);
    if (i.value.counter) line += " counter";
    log.push_back(line);
    keys[std::string(i.name)] = i.name_key;
  }
  void OnAsyncSpan(const trace::LaunchRecord& l, const trace::AsyncSpanRecord& a) override {
    ++async_spans;
    if (!log_async) return;
    const auto warp = [](const trace::WarpRecord* w) { return w ? "w" + std::to_string(w->index) : std::string("-"); };
    std::string line = "async " + std::to_string(l.launch_id) + " " + std::string(a.name) + " token " +
                       std::to_string(a.token) + " block " + std::to_string(a.block[0]) + " [" +
                       std::to_string(a.begin_ns) + "," + std::to_string(a.end_ns) + "] " + warp(a.begin_warp) + "->" +
                       warp(a.end_warp) + " flow " + std::to_string(a.flow_id);
    if (a.unterminated()) line += " unterminated";
    if (a.unmatched_end()) line += " unmatched";
    log.push_back(line);
  }
  void OnLaunchEnd(const trace::LaunchRecord& l, const uint32_t*, size_t) override {
    log.push_back("end " + std::to_string(l.launch_id));
  }
  std::vector<std::string> log;
  std::map<std::string, uint32_t> keys;
  bool log_async = true;
  uint64_t async_spans = 0;
};

constexpr uint32_t kValue = wire::kEventHasValue;
constexpr uint32_t kWide = wire::kEventWideValue;
constexpr uint32_t kCounter = wire::kEventCounter;
constexpr uint32_t kNameValue = wire::kEventNameValue;

wire::WireEvent At(uint64_t t, uint32_t name, uint32_t kind, uint32_t value = 0) {
  return Ev(kT0 + t, name, kind, value);
}

// Trace time of `t` (relative to kT0): the base is kT0 - 1 s.
uint64_t Ts(uint64_t t) { return 1000000000ull + t; }
std::string Span(uint64_t b, uint64_t e) { return "[" + std::to_string(Ts(b)) + "," + std::to_string(Ts(e)) + "]"; }
std::string At(uint64_t t) { return "@" + std::to_string(Ts(t)); }

class DeviceApiTest : public ::testing::Test {
 protected:
  DeviceApiTest() : builder_({&sink_}, nullptr) {}
  void Send(const Bytes& b, transport::ProducerInfo p = kProducer) {
    builder_.HandleMessage(p, b.data(), static_cast<uint32_t>(b.size()));
  }
  // A process with names 1.. and launch 1 (ending at kT0 + 100000).
  void Start(const std::vector<std::string>& names, transport::ProducerInfo p = kProducer) {
    Send(Process(p.pid, kT0, "app"), p);
    for (size_t i = 0; i < names.size(); ++i) Send(Name(static_cast<uint32_t>(i + 1), names[i]), p);
    Send(Launch(LaunchSpec{}), p);
  }
  CollectorSummary Finish() {
    Send(Harvest(200000, wire::kHarvestSync, 0, 0));
    CollectorSummary s;
    builder_.Finish(transport::ConsumerStats{}, &s);
    return s;
  }
  // The log without the warp lines.
  std::vector<std::string> Records() const {
    std::vector<std::string> out;
    for (const std::string& l : sink_.log) {
      if (l.rfind("warp ", 0) != 0) out.push_back(l);
    }
    return out;
  }

  static constexpr transport::ProducerInfo kProducer{0, 1000};
  RecordingSink sink_;
  TraceBuilder builder_;
};

using Lines = std::vector<std::string>;

TEST_F(DeviceApiTest, ValuesGoOnTheirSlicesAndInstants) {
  Start({"mma", "tile", "inflight"});
  Send(Warp(
      1, 0, 0, 0,
      {At(100, 1, wire::kEventBegin), At(200, 1, wire::kEventEnd | kValue, 0xffffffffu),  // -1, sign-extended
       At(300, 2, wire::kEventInstant | kValue, 7), At(400, 2, wire::kEventInstant | kValue | kWide, 1),  // 2^33 + 1
       At(400, 2, wire::kEventValueHigh, 2),
       At(500, 2, wire::kEventInstant | kValue | kWide, 0xfffffffeu),  // -2, 64 bits
       At(500, 2, wire::kEventValueHigh, 0xffffffffu),
       At(600, 2, wire::kEventInstant | kValue | kWide, 0xfffffffeu),  // 2^32 - 2: not sign-extended
       At(600, 2, wire::kEventValueHigh, 0), At(700, 3, wire::kEventInstant | kValue | kCounter, 5),
       At(800, 1, wire::kEventBegin), At(900, 1, wire::kEventEnd | kValue | kWide, 0),  // 2^62
       At(900, 1, wire::kEventValueHigh, 0x40000000u),
       At(950, 1, wire::kEventEnd | kValue, 3),  // unmatched: an instant with its value
       At(990, 2, wire::kEventInstant)}));
  const CollectorSummary s = Finish();
  EXPECT_EQ(
      Records(),
      (Lines{"slice w0 mma " + Span(100, 200) + " value -1", "instant w0 tile " + At(300) + " value 7",
             "instant w0 tile " + At(400) + " value 8589934593", "instant w0 tile " + At(500) + " value -2",
             "instant w0 tile " + At(600) + " value 4294967294", "instant w0 inflight " + At(700) + " value 5 counter",
             "slice w0 mma " + Span(800, 900) + " value 4611686018427387904",
             "instant w0 mma " + At(950) + " unmatched value 3", "instant w0 tile " + At(990), "end 1"}));
  EXPECT_EQ(s.events, 11u);  // 2 pairs, 6 instants, 1 unmatched END; continuations are no events
  EXPECT_EQ(s.unmatched_ends, 1u);
  EXPECT_EQ(s.malformed_messages, 0u);
}

TEST_F(DeviceApiTest, NamesWithAnIntegerAreRenderedAndMatchedByTheirInteger) {
  Start({"stage %d", "tile", "k%05d|%x", "phase %u"});
  Send(Warp(1, 0, 0, 0,
            {At(100, 1, wire::kEventBegin | kNameValue, 3), At(110, 1, wire::kEventBegin | kNameValue, 4),
             At(120, 1, wire::kEventEnd | kNameValue, 3),  // closes "stage 3", though "stage 4" is newer
             At(130, 1, wire::kEventEnd | kNameValue, 4), At(140, 2, wire::kEventInstant | kNameValue, 0xfffffffbu),
             At(150, 3, wire::kEventInstant | kNameValue, 0xfffffff9u), At(160, 4, wire::kEventPhase | kNameValue, 2),
             At(170, 4, wire::kEventPhaseEnd), At(180, 1, wire::kEventEnd | kNameValue, 5),
             At(190, 1, wire::kEventBegin), At(195, 1, wire::kEventEnd)}));
  // Another producer renders the same text: the same run-wide key.
  const transport::ProducerInfo other{1, 2000};
  Send(Process(2000, kT0, "app2"), other);
  Send(Name(9, "stage %d"), other);
  LaunchSpec ls;
  ls.id = 5;
  Send(Launch(ls), other);
  Send(Warp(5, 0, 0, 0, {At(100, 9, wire::kEventInstant | kNameValue, 3)}), other);
  const CollectorSummary s = Finish();
  EXPECT_EQ(Records(), (Lines{"slice w0 stage 3 " + Span(100, 120), "slice w0 stage 4 " + Span(110, 130) + " lane 1",
                              "instant w0 tile -5 " + At(140), "instant w0 k-0007|%x " + At(150),
                              "slice w0 phase 2 " + Span(160, 170) + " phase",
                              "instant w0 stage 5 " + At(180) + " unmatched", "slice w0 stage %d " + Span(190, 195),
                              "instant w0 stage 3 " + At(100),  // streamed as it comes
                              "end 1", "end 5"}));
  EXPECT_NE(sink_.keys.at("stage 3"), sink_.keys.at("stage 4"));
  EXPECT_NE(sink_.keys.at("stage 3"), sink_.keys.at("stage %d"));
  EXPECT_EQ(s.unmatched_ends, 1u);
  EXPECT_EQ(s.events, 12u);  // 3 pairs, 3 instants, 1 unmatched END, the phase's 2 boundaries
  EXPECT_EQ(s.unknown_names, 0u);
}

// A NameMsg that redefines a format's text: the names rendered next use it.
TEST_F(DeviceApiTest, ARedefinedFormatIsRenderedAgain) {
  Start({"old %d"});
  Send(Warp(1, 0, 0, 0, {At(100, 1, wire::kEventInstant | kNameValue, 1)}));
  Send(Name(1, "new %d"));
  Send(Warp(1, 0, 0, 0, {At(200, 1, wire::kEventInstant | kNameValue, 1)}));
  Finish();
  EXPECT_EQ(Records(), (Lines{"instant w0 old 1 " + At(100), "instant w0 new 1 " + At(200), "end 1"}));
}

TEST_F(DeviceApiTest, PhasesCloseEachOtherAndEndWithTheLaunch) {
  Start({"load", "mma", "end"});
  // Warp 0: load -> mma -> PHASE_END, a range named like a phase in
  // between, then a PHASE_END with no phase open.
  Send(Warp(1, 0, 0, 0,
            {At(100, 1, wire::kEventPhase), At(150, 2, wire::kEventBegin), At(200, 2, wire::kEventPhase),
             At(250, 2, wire::kEventEnd), At(300, 3, wire::kEventPhaseEnd), At(400, 3, wire::kEventPhaseEnd)}));
  // Warp 1: a phase still open when the launch ends.
  Send(Warp(1, 0, 0, 1, {At(500, 1, wire::kEventPhase)}));
  const CollectorSummary s = Finish();
  EXPECT_EQ(Records(),
            (Lines{"slice w0 load " + Span(100, 200) + " phase", "slice w0 mma " + Span(150, 250) + " lane 1",
                   "slice w0 mma " + Span(200, 300) + " phase", "instant w0 end " + At(400) + " unmatched",
                   "slice w1 load " + Span(500, 100000) + " phase unterminated", "end 1"}));
  // load, mma, PHASE_END: 3 boundaries; the range: 2; the unmatched PHASE_END: 1; warp 1's PHASE: 1.
  EXPECT_EQ(s.events, 7u);
  EXPECT_EQ(s.unmatched_ends, 1u);
  EXPECT_EQ(s.unterminated_ranges, 1u);
}

TEST_F(DeviceApiTest, AsyncSpansAreMatchedAcrossWarpsWhenTheLaunchEnds) {
  Start({"stage", "copy", "last"});
  // Block 0: the producer (warp 0) begins "stage" with tokens 0 and 1 twice
  // (two iterations), the consumer (warp 1) ends them.
  Send(Warp(1, 0, 0, 0,
            {At(100, 1, wire::kEventAsyncBegin, 0), At(110, 1, wire::kEventAsyncBegin, 1),
             At(300, 1, wire::kEventAsyncBegin, 0), At(310, 1, wire::kEventAsyncBegin, 1),
             At(320, 2, wire::kEventBegin), At(330, 2, wire::kEventEnd)}));
  Send(Warp(1, 0, 0, 1,
            {At(200, 1, wire::kEventAsyncEnd, 0), At(210, 1, wire::kEventAsyncEnd, 1),
             At(400, 1, wire::kEventAsyncEnd, 0),    // token 1's second span never ends
             At(50, 2, wire::kEventAsyncEnd, 9)}));  // an END with no BEGIN
  // Block 1 uses the same name and token: its own span.
  Send(Warp(1, 1, 1, 0, {At(120, 1, wire::kEventAsyncBegin, 0), At(130, 1, wire::kEventAsyncEnd, 0)}));
  CollectorSummary s = Finish();
  EXPECT_EQ(Records(),
            (Lines{"slice w0 copy " + Span(320, 330),
                   "async 1 copy token 9 block 0 " + Span(50, 50) + " -->w1 flow 1 unmatched",
                   "async 1 stage token 0 block 0 " + Span(100, 200) + " w0->w1 flow 2",
                   "async 1 stage token 1 block 0 " + Span(110, 210) + " w0->w1 flow 3",
                   "async 1 stage token 0 block 1 " + Span(120, 130) + " w2->w2 flow 4",
                   "async 1 stage token 0 block 0 " + Span(300, 400) + " w0->w1 flow 5",
                   "async 1 stage token 1 block 0 " + Span(310, 100000) + " w0->- flow 6 unterminated", "end 1"}));
  EXPECT_EQ(s.async_spans, 6u);
  EXPECT_EQ(s.async_unterminated, 1u);
  EXPECT_EQ(s.async_unmatched_ends, 1u);
  EXPECT_EQ(s.async_dropped, 0u);
  EXPECT_EQ(s.events, 12u);  // 10 async events and a pair
  EXPECT_EQ(s.unmatched_ends, 0u);
}

// Spans come after the launch's last warp record, before its end; flow ids
// go on from launch to launch.
TEST_F(DeviceApiTest, FlowIdsAreRunWide) {
  Start({"s"});
  Send(Warp(1, 0, 0, 0, {At(100, 1, wire::kEventAsyncBegin, 1), At(150, 1, wire::kEventBegin)}));
  Send(Warp(1, 0, 0, 1, {At(200, 1, wire::kEventAsyncEnd, 1)}));
  LaunchSpec ls;
  ls.id = 2;
  ls.start = kT0 + 300000;
  ls.end = kT0 + 400000;
  Send(Harvest(250000, wire::kHarvestSync, 0, 0));
  Send(Launch(ls));
  Send(Warp(2, 0, 0, 0, {At(300100, 1, wire::kEventAsyncBegin, 1), At(300200, 1, wire::kEventAsyncEnd, 1)}));
  Finish();
  EXPECT_EQ(sink_.log, (Lines{"warp 1/0", "warp 1/1", "slice w0 s " + Span(150, 100000) + " unterminated",
                              "async 1 s token 1 block 0 " + Span(100, 200) + " w0->w1 flow 1", "end 1", "warp 2/0",
                              "async 2 s token 1 block 0 " + Span(300100, 300200) + " w0->w0 flow 2", "end 2"}));
}

TEST_F(DeviceApiTest, AsyncEventsBeyondTheCapAreDroppedAndCounted) {
  sink_.log_async = false;
  Start({"s"});
  std::vector<wire::WireEvent> batch(32768, At(100, 1, wire::kEventAsyncBegin, 1));  // a message under 1 MiB
  for (size_t sent = 0; sent < kMaxAsyncEvents; sent += batch.size()) Send(Warp(1, 0, 0, 0, batch));
  Send(Warp(1, 0, 0, 1, {At(200, 1, wire::kEventAsyncEnd, 1), At(300, 1, wire::kEventAsyncEnd, 1)}));
  const CollectorSummary s = Finish();
  EXPECT_EQ(s.async_dropped, 2u);
  EXPECT_EQ(s.async_spans, kMaxAsyncEvents);
  EXPECT_EQ(s.async_unterminated, kMaxAsyncEvents);
  EXPECT_EQ(s.events, kMaxAsyncEvents);
  EXPECT_EQ(sink_.async_spans, kMaxAsyncEvents);
}

// A producer renders at most kMaxRenderedNames names; the rest keep their format.
TEST_F(DeviceApiTest, RenderedNamesPerProducerAreCapped) {
  Start({"t %d"});
  const auto cap = static_cast<uint32_t>(TraceBuilder::kMaxRenderedNames);
  std::vector<wire::WireEvent> batch;
  for (uint32_t n = 0; n <= cap; ++n) {
    batch.push_back(At(100 + n, 1, wire::kEventInstant | kNameValue, n));
    if (batch.size() == 32768 || n == cap) {
      Send(Warp(1, 0, 0, 0, batch));
      batch.clear();
    }
  }
  Send(Warp(1, 0, 0, 0, {At(200000, 1, wire::kEventInstant | kNameValue, 7)}));  // rendered before: kept
  const CollectorSummary s = Finish();
  const Lines r = Records();
  ASSERT_EQ(r.size(), cap + 3u);
  EXPECT_EQ(r[0], "instant w0 t 0 " + At(100));
  EXPECT_EQ(r[cap - 1], "instant w0 t " + std::to_string(cap - 1) + " " + At(100 + cap - 1));
  EXPECT_EQ(r[cap], "instant w0 t %d " + At(100 + cap));
  EXPECT_EQ(r[cap + 1], "instant w0 t 7 " + At(200000));
  EXPECT_EQ(s.events, cap + 2u);
}

TEST_F(DeviceApiTest, MalformedEventsDropTheirMessage) {
  Start({"x"});
  Send(Warp(1, 0, 0, 0, {At(100, 1, wire::kEventValueHigh, 1)}));  // a continuation without its event
  Send(Warp(1, 0, 0, 0, {At(100, 1, wire::kEventInstant), At(110, 1, wire::kEventInstant | kValue | kWide, 1)}));
  Send(Warp(1, 0, 0, 0, {At(100, 1, wire::kEventAsyncBegin | kValue, 1)}));  // a flag on a kind that takes none
  Send(Warp(1, 0, 0, 0, {At(100, 1, wire::kEventInstant | kCounter, 1)}));   // a counter without a value
  Send(Name(kMaxWireNameId + 1, "mine"));
  Send(Warp(1, 0, 0, 0, {At(200, 1, wire::kEventInstant)}));
  const CollectorSummary s = Finish();
  EXPECT_EQ(s.malformed_messages, 5u);
  EXPECT_EQ(Records(), (Lines{"instant w0 x " + At(200), "end 1"}));
  EXPECT_EQ(s.events, 1u);
}

// The whole collector with its statistics: phases, values, counters and
// async spans from messages to the .stats.json.
TEST_P(CollectorTest, DeviceApiReachesTheStatistics) {
  std::string error;
  CollectorOptions options;
  options.trace_path = path_ + ".api.json";
  options.stats = true;
  options.sink_threads = GetParam();
  collector_ = Collector::Create(options, &error);
  ASSERT_NE(collector_, nullptr) << error;
  const transport::ProducerInfo a{0, 1};
  Send(a, Process(1, kT0, "app"));
  Send(a, Name(1, "load"));
  Send(a, Name(2, "mma"));
  Send(a, Name(3, "stage %d"));
  Send(a, Name(4, "inflight"));
  Send(a, Launch(LaunchSpec{}));
  Send(a, Warp(1, 0, 0, 0,
               {At(100, 1, wire::kEventPhase), At(300, 2, wire::kEventPhase), At(400, 1, wire::kEventPhaseEnd),
                At(150, 3, wire::kEventAsyncBegin, 0), At(160, 4, wire::kEventInstant | kValue | kCounter, 3),
                At(170, 4, wire::kEventInstant | kValue | kCounter | kWide, 0), At(170, 4, wire::kEventValueHigh, 1),
                At(180, 1, wire::kEventBegin | kNameValue, 9), At(190, 1, wire::kEventEnd | kNameValue, 9)}));
  Send(a, Warp(1, 0, 0, 1, {At(250, 3, wire::kEventAsyncEnd, 0)}));
  Send(a, Harvest(200000, wire::kHarvestSync, 0, 0));
  collector_->HandleProducerEnd(a, true);
  const CollectorSummary s = collector_->Finish();
  ASSERT_EQ(s.stats_error, "");
  EXPECT_EQ(s.events, 9u);  // 3 phase boundaries, 2 async, 2 counter samples, 1 pair
  EXPECT_EQ(s.async_spans, 1u);
  stats::RunStats run;
  ASSERT_TRUE(stats::ReadStatsFile(s.stats_json, &run, &error)) << error;
  for (const std::string& f : {options.trace_path, s.stats_json, s.stats_csv}) ::unlink(f.c_str());
  ASSERT_EQ(run.kernels.size(), 1u);
  const stats::KernelStats& k = run.kernels[0];
  ASSERT_EQ(k.regions.size(), 3u);
  EXPECT_EQ(k.regions[0].name, "load");  // 200 ns
  EXPECT_TRUE(k.regions[0].phase);
  EXPECT_EQ(k.regions[0].ns.total, 200u);
  EXPECT_EQ(k.regions[1].name, "mma");
  EXPECT_TRUE(k.regions[1].phase);
  EXPECT_EQ(k.regions[1].ns.total, 100u);
  EXPECT_EQ(k.regions[2].name, "load 9");  // no conversion: the integer appended
  EXPECT_FALSE(k.regions[2].phase);
  ASSERT_EQ(k.async.size(), 1u);
  EXPECT_EQ(k.async[0].name, "stage %d");  // async names are not formatted
  EXPECT_EQ(k.async[0].ns.total, 100u);
  ASSERT_EQ(k.values.size(), 1u);
  EXPECT_EQ(k.values[0].name, "inflight");
  EXPECT_EQ(k.values[0].source, stats::ValueStats::Source::kCounter);
  EXPECT_EQ(k.values[0].count, 2u);
  EXPECT_EQ(k.values[0].min, 3);
  EXPECT_EQ(k.values[0].max, int64_t{1} << 32);
  EXPECT_TRUE(k.instants.empty());
}

INSTANTIATE_TEST_SUITE_P(SinkThreads, CollectorTest,
                         ::testing::Values(CollectorOptions::SinkThreads::kOff, CollectorOptions::SinkThreads::kOn),
                         [](const ::testing::TestParamInfo<CollectorOptions::SinkThreads>& p) {
                           return p.param == CollectorOptions::SinkThreads::kOn ? std::string("SinkThreads")
                                                                                : std::string("OneThread");
                         });

}  // namespace
}  // namespace smprof
