// One known run through the whole collector library (TraceBuilder and the
// trace writers), written in both formats and imported by Perfetto's own
// trace processor: no import error, the exact slices per track, names,
// lanes for ranges that overlap without nesting, unmatched and unterminated
// ranges, the loss and arena-fill counters. Skips visibly when the trace processor is absent.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collector/collector.h"
#include "collector/perfetto_check.h"
#include "collector/stats_report.h"
#include "collector/trace_statistics.h"
#include "tests/support/trace_processor.h"
#include "tests/support/wire_builders.h"

namespace smprof {
namespace {

using testing::Ev;
using testing::Query;

constexpr uint64_t kT0 = 5000000000ull;  // base = kT0 - 1 s, so trace time = 1e9 + t

wire::WireEvent B(uint64_t t, uint32_t name) { return Ev(kT0 + t, name, wire::kEventBegin); }
wire::WireEvent E(uint64_t t, uint32_t name) { return Ev(kT0 + t, name, wire::kEventEnd); }
wire::WireEvent I(uint64_t t, uint32_t name) { return Ev(kT0 + t, name, wire::kEventInstant); }

// A collector writing `options.trace_path` afresh (the format follows the
// name), fed by producer pid 77.
struct Feed {
  explicit Feed(CollectorOptions options) {
    unlink(options.trace_path.c_str());
    std::string error;
    c = Collector::Create(options, &error);
    EXPECT_NE(c, nullptr) << error;
  }
  void operator()(const testing::Bytes& b) const { c->HandleMessage(p, b.data(), static_cast<uint32_t>(b.size())); }
  std::unique_ptr<Collector> c;
  transport::ProducerInfo p{0, 77};
};

// Writes the run to `path` (the format follows the name) and returns it.
std::string WriteRun(const std::string& path, const std::string& trace_cycles = "none") {
  CollectorOptions options;
  options.trace_path = path;
  options.stats = true;
  options.trace_cycles = trace_cycles;
  const Feed send(options);
  const auto& c = send.c;
  const auto& p = send.p;
  if (!c) return path;
  send(testing::Process(77, kT0, std::string("app\0--x", 7)));
  send(testing::Device(0, "Test GPU", 1, 0x19));
  for (const auto& [id, name] : std::vector<std::pair<uint32_t, std::string>>{
           {1, "load"}, {2, "mma"}, {3, "tick"}, {4, "epilogue"}}) {
    send(testing::Name(id, name));
  }
  send(testing::Launch(1, kT0 + 1000, kT0 + 100000, "gemm(float*)"));
  // Warp A: load and mma overlap without nesting (mma goes to lane 1); a
  // tick between; epilogue with a tick inside.
  send(testing::Warp(1, 3, 0, 0, {B(2000, 1), B(2500, 2), E(3000, 1), I(3500, 3), E(4000, 2), B(5000, 4), I(5500, 3),
                                   E(6000, 4)}));
  // Warp B: an END without BEGIN, a BEGIN never ended (to the launch end).
  send(testing::Warp(1, 5, 1, 2, {B(2000, 1), E(2600, 1), E(2700, 2), B(2800, 4)}));
  send(testing::Launch(2, kT0 + 110000, kT0 + 120000, "gemm(float*)"));
  send(testing::Warp(2, 3, 0, 0, {I(111000, 3)}));
  send(testing::Harvest(kT0 + 200000, wire::kHarvestSync, 5, 0, 3, 12));
  c->HandleProducerEnd(p, /*clean=*/true);
  const CollectorSummary s = c->Finish();
  EXPECT_TRUE(s.trace_ok) << s.trace_error;
  EXPECT_EQ(s.launches, 2u);
  EXPECT_EQ(s.events, 13u);
  EXPECT_EQ(s.unmatched_ends, 1u);
  EXPECT_EQ(s.unterminated_ranges, 1u);
  return path;
}

// name -> rows, from "select name, count(*) ... group by name".
std::map<std::string, std::string> Counts(const std::vector<std::string>& rows) {
  std::map<std::string, std::string> out;
  for (const std::string& r : rows) {
    const size_t comma = r.rfind(',');
    std::string name = r.substr(0, comma);
    if (name.size() >= 2 && name.front() == '"') name = name.substr(1, name.size() - 2);
    out[name] = r.substr(comma + 1);
  }
  return out;
}

void ExpectCommon(const std::string& tp, const std::string& trace) {
  EXPECT_TRUE(
      Query(tp, trace, "select name, idx, value from stats where value > 0 and severity in ('error', 'data_loss')")
          .empty())
      << trace;
  const auto by_name = Counts(Query(tp, trace, "select name, count(*) from slice group by name"));
  EXPECT_EQ(by_name.at("load"), "2") << trace;
  EXPECT_EQ(by_name.at("mma"), "1") << trace;
  EXPECT_EQ(by_name.at("epilogue"), "2") << trace;
  EXPECT_EQ(by_name.at("tick"), "3") << trace;
  EXPECT_EQ(by_name.at("mma (end without begin)"), "1") << trace;
  EXPECT_EQ(by_name.at("gemm(float*)"), "2") << trace;  // the CUPTI spans on the launches' tracks
  EXPECT_EQ(by_name.at("gemm"), "2") << trace;  // and on the GPU's stream track
  EXPECT_EQ(by_name.at("smprof run summary"), "1") << trace;
  // Nesting: the tick inside epilogue is one level down; the unterminated
  // epilogue runs to the launch end (97.2 us after its BEGIN at 2.8 us).
  EXPECT_EQ(Query(tp, trace, "select count(*) from slice where name = 'tick' and depth = 1"),
            std::vector<std::string>{"1"})
      << trace;
  EXPECT_EQ(Query(tp, trace, "select dur from slice where name = 'epilogue' order by ts limit 1"),
            std::vector<std::string>{"97200"})
      << trace;
}

// --trace-cycles: none (smprof-run's default) leaves the cycles to the
// statistics; counter puts each closed range's exact cycles on its track's
// "cycles" counter (1 cycle per ns in this run).
TEST(TraceImport, RangeCyclesInTheProtobufTraceAsAsked) {
  const std::string tp = testing::TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  const std::string base = "/tmp/smprof-trace-cycles-" + std::to_string(getpid());
  const std::string none = WriteRun(base + "-none.pftrace");
  const std::string counter = WriteRun(base + "-counter.pftrace", "counter");
  EXPECT_EQ(Query(tp, none, "select count(*) from counter_track where name = 'cycles'"),
            std::vector<std::string>{"0"});
  // load 1000 and 600, mma 1500, epilogue 1000 (the unterminated one has
  // none), and 0 for each instant: 3 ticks and the END without a BEGIN (one
  // value per slice row).
  EXPECT_EQ(Query(tp, counter,
                  "select cast(c.value as int) from counter c join counter_track t on c.track_id = t.id "
                  "where t.name = 'cycles' order by c.value"),
            (std::vector<std::string>{"0", "0", "0", "0", "600", "1000", "1000", "1500"}));
  for (const std::string& f : {none, counter}) {
    for (const char* suffix : {"", ".stats.json", ".stats.csv"}) unlink((f + suffix).c_str());
  }
}

TEST(TraceImport, JsonAndProtobufImportAlike) {
  const std::string tp = testing::TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  const std::string base = "/tmp/smprof-trace-import-" + std::to_string(getpid());
  const std::string json = WriteRun(base + ".json");
  const std::string proto = WriteRun(base + ".pftrace");
  ExpectCommon(tp, json);
  ExpectCommon(tp, proto);
  std::ifstream in(proto, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(perfetto::CheckTrace(bytes).errors.empty());

  // JSON: one process per launch, one thread per warp and lane.
  EXPECT_EQ(Query(tp, json,
                  "select count(*) from slice s join thread_track tt on s.track_id = tt.id join thread t using(utid) "
                  "where t.name = 'SM 003 | block (0,0,0) | warp 0 | lane 1' and s.name = 'mma'"),
            std::vector<std::string>{"1"});
  EXPECT_EQ(Query(tp, json, "select count(*) from process where name = 'smprof | app --x | pid 77'"),
            std::vector<std::string>{"1"});
  EXPECT_EQ(Query(tp, json,
                  "select count(*) from process where name like '#1 gemm | GPU 0 (cuda:0) | stream 0 | "
                  "grid(4,1,1) block(64,1,1) | pid 77'"),
            std::vector<std::string>{"1"});
  EXPECT_EQ(Query(tp, json,
                  "select c.value from counter c join process_counter_track t on c.track_id = t.id "
                  "where t.name = 'events lost (device buffer) lost'"),
            std::vector<std::string>{"5.000000"});
  EXPECT_EQ(Query(tp, json,
                  "select c.value from counter c join process_counter_track t on c.track_id = t.id "
                  "where t.name = 'arena fill percent'"),
            std::vector<std::string>{"25.000000"});

  // Protobuf: the same tree as named tracks; the lane beside its warp.
  EXPECT_EQ(Query(tp, proto,
                  "select count(*) from slice s join track t on s.track_id = t.id "
                  "where t.name = 'warp 0 lane 1' and s.name = 'mma'"),
            std::vector<std::string>{"1"});
  EXPECT_EQ(Query(tp, proto, "select count(*) from track where name = 'smprof | app --x | pid 77'"),
            std::vector<std::string>{"1"});
  EXPECT_EQ(Query(tp, proto,
                  "select c.value from counter c join counter_track t on c.track_id = t.id "
                  "where t.name = 'events lost (device buffer)'"),
            std::vector<std::string>{"5.000000"});
  EXPECT_EQ(Query(tp, proto,
                  "select c.value from counter c join counter_track t on c.track_id = t.id "
                  "where t.name = 'arena fill (%)'"),
            std::vector<std::string>{"25.000000"});
  // Each trace carries its own statistics, equal to the file beside it.
  for (const std::string& trace : {json, proto}) {
    std::string text, error;
    ASSERT_TRUE(ReadTraceStatistics(trace, &text, &error)) << error;
    stats::RunStats carried, beside;
    ASSERT_TRUE(stats::FromJson(nlohmann::json::parse(text), &carried, &error)) << error;
    ASSERT_TRUE(stats::ReadStatsFile(trace + ".stats.json", &beside, &error)) << error;
    EXPECT_EQ(stats::ToJson(carried), stats::ToJson(beside)) << trace;
    ASSERT_EQ(carried.kernels.size(), 1u) << trace;
    EXPECT_EQ(carried.kernels[0].kernel, "gemm");
    EXPECT_EQ(carried.launches, 2u);
    EXPECT_EQ(carried.slices, 5u);  // load 2, mma 1, epilogue 2 (one unterminated)
    EXPECT_EQ(carried.unterminated, 1u);
  }
  for (const std::string& f : {json, proto}) {
    for (const char* suffix : {"", ".stats.json", ".stats.csv"}) unlink((f + suffix).c_str());
  }
}

// The host side: launch API calls (one a graph launch of two kernels), a
// synchronising call that ran a harvest, a forced drain inside a launch call,
// a launch whose call is unknown; on two named threads.
std::string WriteHostRun(const std::string& path) {
  CollectorOptions options;
  options.trace_path = path;
  const Feed send(options);
  const auto& c = send.c;
  const auto& p = send.p;
  if (!c) return path;
  const auto launch = [&](uint64_t id, uint64_t start, uint64_t end, const char* kernel, uint64_t correlation,
                          wire::HostCall call) {
    wire::LaunchMsg m = testing::LaunchFields(id, kT0 + start, kT0 + end);
    m.correlation_id = correlation;
    m.call = call;
    send(testing::Launch(m, kernel));
  };
  send(testing::Process(77, kT0, std::string("app")));
  send(testing::Device(0, "Test GPU", 1, 0x19));
  send(testing::Thread(77, "app"));
  send(testing::Thread(78, "worker"));
  launch(1, 10000, 20000, "k1", 11, testing::Call(wire::kApiLaunchKernel, kT0 + 2000, kT0 + 3000, 77));
  launch(2, 30000, 40000, "k2", 12, testing::Call(wire::kApiGraphLaunch, kT0 + 4000, kT0 + 4500, 78));
  launch(3, 40000, 50000, "k3", 12, testing::Call(wire::kApiGraphLaunch, kT0 + 4000, kT0 + 4500, 78));
  launch(4, 50000, 51000, "k4", 0, wire::HostCall{});
  send(testing::HostHarvest(kT0 + 60000, wire::kHarvestSync, 77, kT0 + 55000, kT0 + 70000,
                            testing::Call(wire::kApiStreamSynchronize, kT0 + 52000, kT0 + 55000, 77),
                            {1, 2, 3, 4, 5, 0}, {96, 128, 7}));
  // Untrusted counts: more empty chunks than used ones reads as all used ones.
  send(testing::HostHarvest(kT0 + 85000, wire::kHarvestHighWater, 78, kT0 + 80000, kT0 + 90000, {}, {}, {4, 128, 9}));
  launch(5, 95000, 96000, "k5", 13, testing::Call(wire::kApiLaunchKernel, kT0 + 79000, kT0 + 91000, 78));
  send(testing::Harvest(kT0 + 100000, wire::kHarvestExit, 0));
  c->HandleProducerEnd(p, /*clean=*/true);
  const CollectorSummary s = c->Finish();
  EXPECT_TRUE(s.trace_ok) << s.trace_error;
  EXPECT_EQ(s.launches, 5u);
  EXPECT_EQ(s.malformed_messages, 0u);
  return path;
}

TEST(TraceImport, HostCallsOnTheirThreadsWithFlowsToTheKernels) {
  const std::string tp = testing::TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  const std::string base = "/tmp/smprof-trace-host-" + std::to_string(getpid());
  for (const std::string& trace : {WriteHostRun(base + ".json"), WriteHostRun(base + ".pftrace")}) {
    EXPECT_TRUE(
        Query(tp, trace, "select name, idx, value from stats where value > 0 and severity in ('error', 'data_loss')")
            .empty())
        << trace;
    const std::string on_thread =
        "select s.name, s.depth, s.ts - 1000000000, s.dur from slice s join thread_track tt on s.track_id = tt.id "
        "join thread t using(utid) where t.name = '";
    // Trace time = 1e9 + t (the base is kT0 - 1 s).
    EXPECT_EQ(Query(tp, trace, on_thread + "app 77' order by s.ts, s.depth"),
              (std::vector<std::string>{"\"cuLaunchKernel\",0,2000,1000", "\"cuStreamSynchronize\",0,52000,18000",
                                        "\"harvest: sync\",1,55000,15000"}))
        << trace;
    EXPECT_EQ(Query(tp, trace, on_thread + "worker 78' order by s.ts, s.depth"),
              (std::vector<std::string>{"\"cuGraphLaunch\",0,4000,500", "\"cuLaunchKernel\",0,79000,12000",
                                        "\"forced drain: buffer high-water\",1,80000,10000"}))
        << trace;
    // The harvest's stages as arguments of its slice (JSON args, protobuf debug annotations).
    const std::string arg = std::string("\"") + (trace.back() == 'n' ? "args." : "debug.");
    EXPECT_EQ(Query(tp, trace,
                    "select a.key, a.int_value from slice s join args a using(arg_set_id) where "
                    "s.name = 'harvest: sync' and a.key glob '*_us' order by a.int_value"),
              (std::vector<std::string>{arg + "other_us\",0", arg + "wait_us\",1", arg + "copy_us\",2",
                                        arg + "clock_us\",3", arg + "decode_us\",4", arg + "ship_us\",5"}))
        << trace;
    // How full the arena was, and how many of its claimed chunks were never written.
    EXPECT_EQ(Query(tp, trace,
                    "select s.name, a.key, a.int_value from slice s join args a using(arg_set_id) where "
                    "a.key glob '*chunks_*' order by s.ts, a.key"),
              (std::vector<std::string>{"\"harvest: sync\"," + arg + "chunks_empty\",7",
                                        "\"harvest: sync\"," + arg + "chunks_total\",128",
                                        "\"harvest: sync\"," + arg + "chunks_used\",96",
                                        "\"forced drain: buffer high-water\"," + arg + "chunks_empty\",4",
                                        "\"forced drain: buffer high-water\"," + arg + "chunks_total\",128",
                                        "\"forced drain: buffer high-water\"," + arg + "chunks_used\",4"}))
        << trace;
    // The threads belong to the application's process (pid 77).
    EXPECT_EQ(Query(tp, trace, "select count(*) from thread where tid in (77, 78) and name in ('app 77', 'worker 78')"),
              std::vector<std::string>{"2"})
        << trace;
    // A flow from each call to its kernel; a graph's kernels in one chain.
    EXPECT_EQ(Query(tp, trace,
                    "select o.name, i.name from flow f join slice o on f.slice_out = o.id "
                    "join slice i on f.slice_in = i.id order by o.ts, i.ts"),
              (std::vector<std::string>{"\"cuLaunchKernel\",\"k1\"", "\"cuGraphLaunch\",\"k2\"",
                                        "\"k2\",\"k3\"", "\"cuLaunchKernel\",\"k5\""}))
        << trace;
    if (trace.size() > 8 && trace.compare(trace.size() - 8, 8, ".pftrace") == 0) {
      std::ifstream in(trace, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_TRUE(perfetto::CheckTrace(bytes).errors.empty());  // our own reader agrees
    }
    for (const char* suffix : {"", ".stats.json", ".stats.csv"}) unlink((trace + suffix).c_str());
  }
}

}  // namespace
}  // namespace smprof
