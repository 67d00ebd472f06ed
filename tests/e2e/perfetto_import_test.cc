// Perfetto's own trace processor imports protobuf traces written with
// smprof's encoder: the packet layout the trace writer is built on (one
// packet sequence per warp track, interned names, an incremental clock and
// track defaults, so an event costs ~12 bytes), and the traces PerfettoSink
// writes from synthetic runs (tests/support/sink_runs.h): no import
// problem, the track tree, slices with their times, depths and args, every
// closed slice's exact cycles recovered by SQL from its track's "cycles"
// counter (or, when asked, from its args), instants, counters, records
// that go back in time, warps interleaved; the device API's records
// (values, counter samples, async spans with their flows; issue 9) in both
// layouts and as JSON. Read back by the engine the
// Perfetto UI runs. Skips visibly where ../shared/tools/perfetto
// is absent (a user's own clone).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "collector/json_sink.h"
#include "collector/perfetto_check.h"
#include "collector/perfetto_sink.h"
#include "collector/proto_reader.h"
#include "collector/run_summary.h"
#include "tests/support/perfetto_builder.h"
#include "tests/support/sink_runs.h"
#include "tests/support/subprocess.h"
#include "tests/support/trace_processor.h"

namespace smprof {
namespace {

using testing::PerfettoBuilder;
using testing::kT0;

using testing::Query;
using testing::TraceProcessor;

// 64 warps x 50 iterations of load (100 ns) / compute (250 ns) / tick.
std::string WriteTrace(bool flags, double* bytes_per_event) {
  PerfettoBuilder w;
  w.Descriptor(1, 0, 77, -1, "GPU 0 | test");
  constexpr int kWarps = 64, kIters = 50;
  for (int warp = 0; warp < kWarps; ++warp) w.Descriptor(100 + warp, 1, 77, warp + 1, "warp " + std::to_string(warp));
  for (int warp = 0; warp < kWarps; ++warp) {
    const uint32_t seq = 1 + warp;
    w.StartSequence(seq, 100 + warp, {"load", "compute", "tick"});
    w.Event(seq, 10 + warp, 1, 1, flags);  // first BEGIN 10+warp ns after kT0
    for (int i = 0; i < kIters; ++i) {
      if (i > 0) w.Event(seq, 40, 1, 1, flags);
      w.Event(seq, 100, 2, 0, flags);
      w.Event(seq, 0, 1, 2, flags);  // compute begins when load ends: END written first
      w.Event(seq, 250, 2, 0, flags);
      w.Event(seq, 5, 3, 3, flags);
    }
  }
  *bytes_per_event = static_cast<double>(w.event_bytes) / static_cast<double>(w.events);
  char templ[] = "/tmp/smprof-pftrace-XXXXXX";
  const int fd = mkstemp(templ);
  close(fd);
  std::ofstream(templ, std::ios::binary) << w.e.bytes();
  // Our own reader walks every packet of what we wrote.
  proto::ProtoReader r(w.e.bytes());
  proto::Field f;
  size_t packets = 0;
  while (r.Next(&f)) packets += f.number == 1;
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(packets, 1u + kWarps + kWarps + w.events);
  // ... and smprof's own checker finds what the trace processor must find.
  const perfetto::TraceSummary summary = perfetto::CheckTrace(w.e.bytes());
  EXPECT_TRUE(summary.errors.empty()) << summary.errors.front();
  EXPECT_EQ(summary.track_events, w.events);
  uint64_t loads = 0;
  for (const auto& [uuid, t] : summary.tracks) {
    const auto it = t.names.find("load");
    loads += it == t.names.end() ? 0 : it->second;
    EXPECT_EQ(t.open, 0u) << t.name;
  }
  EXPECT_EQ(loads, static_cast<uint64_t>(kWarps) * kIters);
  EXPECT_EQ(summary.tracks.at(100 + 5).first_ns, kT0 + 15);
  return templ;
}

void ExpectImported(const std::string& tp, const std::string& trace) {
  EXPECT_TRUE(Query(tp, trace,
                    "select name, idx, value from stats where value > 0 and severity in ('error', 'data_loss')")
                  .empty());
  EXPECT_EQ(Query(tp, trace, "select count(*) from slice where name = 'load' and dur = 100"),
            std::vector<std::string>{"3200"});
  EXPECT_EQ(Query(tp, trace, "select count(*) from slice where name = 'compute' and dur = 250"),
            std::vector<std::string>{"3200"});
  EXPECT_EQ(Query(tp, trace, "select count(*) from slice where name = 'tick' and dur = 0"),
            std::vector<std::string>{"3200"});
  // Warp 5's first load starts at kT0 + 15 ns on its own thread track.
  EXPECT_EQ(Query(tp, trace,
                  "select s.ts, t.name from slice s join thread_track tt on s.track_id = tt.id "
                  "join thread t using (utid) where t.tid = 6 order by s.ts limit 1"),
            std::vector<std::string>{"1000000015,\"warp 5\""});
  EXPECT_EQ(Query(tp, trace, "select count(distinct track_id) from slice"), std::vector<std::string>{"64"});
}

TEST(PerfettoImport, CompactEventPacketsImportExactly) {
  const std::string tp = TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  double with_flags = 0, without_flags = 0;
  const std::string a = WriteTrace(true, &with_flags);
  const std::string b = WriteTrace(false, &without_flags);
  std::printf("bytes per event packet: %.2f with SEQ_NEEDS_INCREMENTAL_STATE on each, %.2f without\n", with_flags,
              without_flags);
  ExpectImported(tp, a);
  ExpectImported(tp, b);
  EXPECT_LE(without_flags, 12.0);
  unlink(a.c_str());
  unlink(b.c_str());
}

// --- PerfettoSink -----------------------------------------------------------

// Writes a run through PerfettoSink to a temporary file; returns its path.
template <typename Run>
std::string WriteWithSink(Run&& run) {
  char templ[] = "/tmp/smprof-psink-XXXXXX";
  const int fd = mkstemp(templ);
  close(fd);
  std::string error;
  auto sink = PerfettoSink::Open(templ, false, &error);
  EXPECT_NE(sink, nullptr) << error;
  if (sink == nullptr) return templ;
  run(*sink);
  EXPECT_TRUE(sink->Finish(CollectorSummary())) << sink->error();
  return templ;
}

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }

// Each slice row of the warp and lane tracks (closed slices and instants)
// with its value on the track's "cycles" counter, paired as
// collector/perfetto_sequences.h says: time by time, in id order. Columns:
// warp track, its parent, slice name, ts, dur, depth, cycles; then `tail`.
std::string CyclesQuery(const std::string& tail) {
  return "select t.name, p.name, s.name, s.ts, s.dur, s.depth, cast(c.value as int) from "
         "(select id, name, track_id, ts, dur, depth, "
         "row_number() over (partition by track_id, ts order by id) as k from slice "
         "where extract_arg(arg_set_id, 'debug.unterminated') is null) s "
         "join track ct on ct.parent_id = s.track_id and ct.name = 'cycles' "
         "join (select track_id, ts, value, row_number() over (partition by track_id, ts order by id) as k "
         "from counter) c on c.track_id = ct.id and c.ts = s.ts and c.k = s.k "
         "join track t on s.track_id = t.id join track p on t.parent_id = p.id " +
         tail;
}

// No import problem: nothing the trace processor counts as an error or a
// loss, and no warning either.
void ExpectCleanImport(const std::string& tp, const std::string& trace) {
  EXPECT_EQ(Query(tp, trace, "select name, idx, severity, value from stats where value > 0 and severity != 'info'"),
            std::vector<std::string>{});
}

TEST(PerfettoImport, SinkSmallRunImportsAsWritten) {
  const std::string tp = TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  const std::string trace = WriteWithSink([](trace::TraceSink& sink) { testing::WriteSmallRun(sink); });
  ExpectCleanImport(tp, trace);
  const std::string gpu = Quoted(testing::kSinkGpuTrack);
  const std::string launch7 = Quoted(testing::SinkLaunchTrack(7, 0)), launch8 = Quoted(testing::SinkLaunchTrack(8, 0));
  // Every event on its track: all slices, and of them the instants.
  EXPECT_EQ(Query(tp, trace,
                  "select t.name, count(*), sum(s.dur = 0) from slice s join track t on s.track_id = t.id "
                  "group by t.name order by t.name"),
            (std::vector<std::string>{launch7 + ",1,0", launch8 + ",1,0", gpu + ",1,1",
                                      "\"pid 4242 | cuda:1 | stream 7\",2,0", "\"smprof run\",3,3",
                                      "\"smprof | ./app --n 3 | pid 4242\",4,4", "\"warp 0\",8,1",
                                      "\"warp 0 lane 1\",1,0", "\"warp 1\",2,1"}));
  // The tree: launch under its GPU, SM > block > warp, a lane beside its warp.
  EXPECT_EQ(
      Query(tp, trace,
            "select t.name, p.name from track t join track p on t.parent_id = p.id "
            "where t.name like 'SM %' or t.name like 'block %' or t.name like 'warp % lane %' "
            "or p.name like 'GPU %' order by t.name, p.name"),
      (std::vector<std::string>{launch7 + "," + gpu, launch8 + "," + gpu, "\"SM 003\"," + launch7,
                                "\"SM 005\"," + launch8, "\"SM 012\"," + launch7, "\"block (0,0,0)\",\"SM 005\"",
                                "\"block (0,1,0)\",\"SM 003\"", "\"block (1,0,0)\",\"SM 012\"",
                                "\"pid 4242 | cuda:1 | stream 7\"," + gpu, "\"warp 0 lane 1\",\"block (1,0,0)\""}));
  // The CUPTI slice and its args.
  EXPECT_EQ(Query(tp, trace,
                  "select s.name, s.ts, s.dur, a.display_value from slice s join track t on s.track_id = t.id "
                  "join args a using (arg_set_id) where t.name = " +
                      launch7 + " and a.key in ('debug.launch_id', 'debug.grid[1]', 'debug.gpu_name') order by a.key"),
            (std::vector<std::string>{"\"_Z4gemmILi128EEvPfS0_\",1000,8000,\"NVIDIA H100\"",
                                      "\"_Z4gemmILi128EEvPfS0_\",1000,8000,\"2\"",
                                      "\"_Z4gemmILi128EEvPfS0_\",1000,8000,\"7\""}));
  // Nesting and exact cycles: a value on the "cycles" counter under each
  // warp (and lane) track at each slice's start, the instants' 0 among them;
  // the unterminated slice has none.
  EXPECT_EQ(Query(tp, trace, CyclesQuery("order by p.name, t.name, s.ts, s.depth")),
            (std::vector<std::string>{
                "\"warp 0\",\"block (0,0,0)\",\"load\",10100,100,0,200",
                "\"warp 0\",\"block (0,1,0)\",\"load\",2000,100,0,200",
                "\"warp 0\",\"block (0,1,0)\",\"load\",2100,200,0,400",
                "\"warp 0\",\"block (1,0,0)\",\"mainloop\",1100,3900,0,7800",
                "\"warp 0\",\"block (1,0,0)\",\"load\",1100,400,1,800",
                "\"warp 0\",\"block (1,0,0)\",\"mma\",1500,2500,1,5000",
                "\"warp 0\",\"block (1,0,0)\",\"tick\",2000,0,2,0",
                "\"warp 0\",\"block (1,0,0)\",\"epilogue\",5000,1000,0,2000",
                "\"warp 0 lane 1\",\"block (1,0,0)\",\"copy\",1800,3700,0,7400",
                "\"warp 1\",\"block (1,0,0)\",\"load (end without begin)\",1200,0,0,0",
            }));
  EXPECT_EQ(Query(tp, trace,
                  "select count(*) from counter c join track t on c.track_id = t.id where t.name = 'cycles'"),
            std::vector<std::string>{"10"});
  EXPECT_EQ(Query(tp, trace, "select count(*) from args where key = 'debug.cycles'"), std::vector<std::string>{"0"});
  // The unterminated slice, the unmatched end, the tick inside mma.
  EXPECT_EQ(Query(tp, trace,
                  "select s.name, s.ts, s.dur, a.key, a.display_value from slice s join args a using (arg_set_id) "
                  "where a.key in ('debug.unterminated', 'debug.note', 'debug.smprof_error') order by s.ts, a.key"),
            (std::vector<std::string>{"\"load (end without begin)\",1200,0,\"debug.smprof_error\",\"unmatched end\"",
                                      "\"mainloop\",1300,7700,\"debug.note\",\"the process ended without detaching\"",
                                      "\"mainloop\",1300,7700,\"debug.unterminated\",\"true\"",
                                      "\"process lost\",12700,0,\"debug.smprof_error\","
                                      "\"producer ended without a clean detach\""}));
  EXPECT_EQ(Query(tp, trace, "select ts, dur, depth from slice where name = 'tick'"),
            std::vector<std::string>{"2000,0,2"});
  // Run and process instants.
  EXPECT_EQ(Query(tp, trace,
                  "select s.name, s.ts from slice s join track t on s.track_id = t.id "
                  "where t.name in ('smprof run', 'smprof | ./app --n 3 | pid 4242') or s.name like 'GPU %' "
                  "order by s.ts, s.name"),
            (std::vector<std::string>{"\"GPU 0 identity\",0", "\"smprof run\",0", "\"layout: launch-centric\",1000",
                                      "\"harvest: sync\",9500",
                                      "\"forced drain: buffer high-water\",12500", "\"not profiled\",12600",
                                      "\"process lost\",12700", "\"smprof run summary\",12700"}));
  EXPECT_EQ(Query(tp, trace,
                  "select a.key, a.display_value from slice s join args a using (arg_set_id) "
                  "where s.name = 'GPU 0 identity' and a.key like 'debug.marker%'"),
            std::vector<std::string>{"\"debug.marker_cost_cycles.default\",\"12.5\""});
  // The counters, under the process's track.
  EXPECT_EQ(Query(tp, trace,
                  "select t.name, p.name, c.ts, cast(c.value as int) from counter c join track t on c.track_id = t.id "
                  "join track p on t.parent_id = p.id where t.name != 'cycles' order by t.name, c.ts"),
            (std::vector<std::string>{"\"events harvested\",\"smprof | ./app --n 3 | pid 4242\",9500,17",
                                      "\"events harvested\",\"smprof | ./app --n 3 | pid 4242\",12500,2",
                                      "\"events lost (device buffer)\",\"smprof | ./app --n 3 | pid 4242\",9500,3",
                                      "\"events lost (device buffer)\",\"smprof | ./app --n 3 | pid 4242\",12500,3"}));
  unlink(trace.c_str());
}

TEST(PerfettoImport, SinkRecordsBackInTimeImportAtTheirTimes) {
  const std::string tp = TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  const std::string trace = WriteWithSink([](trace::TraceSink& sink) { testing::WriteOutOfOrderRun(sink); });
  ExpectCleanImport(tp, trace);
  EXPECT_EQ(Query(tp, trace,
                  "select s.name, s.ts, s.dur, s.depth from slice s join track t on s.track_id = t.id "
                  "where t.name = 'warp 0' order by s.ts"),
            (std::vector<std::string>{"\"a\",1000,1000,0", "\"late\",2200,600,0", "\"late tick\",2500,0,1",
                                      "\"b\",3000,1000,0", "\"c\",4500,500,0"}));
  unlink(trace.c_str());
}

TEST(PerfettoImport, SinkCyclesAsArgsWhenAsked) {
  const std::string tp = TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  const std::string trace = WriteWithSink([](trace::TraceSink& sink) {
    static_cast<PerfettoSink&>(sink).set_cycles_encoding(PerfettoSink::CyclesEncoding::kAnnotation);
    testing::WriteSmallRun(sink);
  });
  ExpectCleanImport(tp, trace);
  EXPECT_EQ(
      Query(tp, trace,
            "select s.name, s.ts, s.dur, s.depth, a.int_value from slice s join track t on s.track_id = t.id "
            "join track b on t.parent_id = b.id join args a using (arg_set_id) "
            "where t.name = 'warp 0' and b.name = 'block (1,0,0)' and a.key = 'debug.cycles' order by s.ts, s.depth"),
      (std::vector<std::string>{"\"mainloop\",1100,3900,0,7800", "\"load\",1100,400,1,800", "\"mma\",1500,2500,1,5000",
                                "\"epilogue\",5000,1000,0,2000"}));
  EXPECT_EQ(Query(tp, trace, "select count(*) from slice join args using (arg_set_id) where key = 'debug.cycles'"),
            std::vector<std::string>{"8"});
  EXPECT_EQ(Query(tp, trace, "select count(*) from track where name = 'cycles'"), std::vector<std::string>{"0"});
  unlink(trace.c_str());
}

// Random nesting with ties everywhere, `launches` of 40 warps, warps one
// after another (`chunk` 0) or interleaved `chunk` records at a time: the
// same slices and depths, and every slice's exact cycles (2 x its duration
// here) by SQL, every instant's 0.
void ExpectRandomRunImports(int chunk, int launches) {
  const std::string tp = TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  testing::SentRun sent;
  const std::string trace =
      WriteWithSink([&](trace::TraceSink& sink) { sent = testing::WriteRandomRun(sink, 7, launches, 40, chunk); });
  ExpectCleanImport(tp, trace);
  std::vector<std::string> want;
  for (const testing::SentSlice& s : sent.slices) {
    want.push_back(Quoted(s.launch) + "," + Quoted(s.block) + "," + Quoted(s.warp) + "," + std::to_string(s.ts) + "," +
                   std::to_string(s.dur) + "," + std::to_string(s.depth) + "," + Quoted(s.name));
  }
  std::vector<std::string> got = Query(tp, trace,
                                       "select l.name, b.name, w.name, s.ts, s.dur, s.depth, s.name from slice s "
                                       "join track w on s.track_id = w.id join track b on w.parent_id = b.id "
                                       "join track sm on b.parent_id = sm.id join track l on sm.parent_id = l.id "
                                       "where s.name != 'tick'");
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_GT(got.size(), 3000u * launches);
  const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
  EXPECT_TRUE(diff.first == got.end()) << "got " << *diff.first << ", want " << *diff.second;
  EXPECT_EQ(Query(tp, trace, "select count(*) from slice where name = 'tick' and dur = 0"),
            std::vector<std::string>{std::to_string(sent.instants.size())});
  // Cycles: every slice row paired with one value, every value with one row.
  const std::string rows = std::to_string(sent.slices.size() + sent.instants.size());
  EXPECT_EQ(Query(tp, trace, CyclesQuery("where c.value = case when s.name = 'tick' then 0 else 2 * s.dur end")
                                 .replace(0, 6, "select count(*) from (select")
                                 .append(")")),
            std::vector<std::string>{rows});
  EXPECT_EQ(Query(tp, trace, "select count(*) from counter c join track t on c.track_id = t.id where t.name = 'cycles'"),
            std::vector<std::string>{rows});
  unlink(trace.c_str());
}

TEST(PerfettoImport, SinkRandomNestingWarpAfterWarp) { ExpectRandomRunImports(0, 3); }
TEST(PerfettoImport, SinkRandomNestingInterleaved) { ExpectRandomRunImports(7, 3); }
// A sequence per record: ties between sequences everywhere.
TEST(PerfettoImport, SinkRandomNestingComingBackAfterEachRecord) { ExpectRandomRunImports(1, 1); }

// --- the device API's records (issue 9) --------------------------------------

// WriteDeviceApiRun (tests/support/sink_runs.h) through PerfettoSink with
// `layout`: values as slice args, counter samples as counter values on a
// track per warp (slot) and name, async spans on their tracks with their
// args, their ends' flows, every slice row still paired with its cycles.
void ExpectDeviceApiImport(TraceLayout layout) {
  const std::string tp = TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  const bool hw = layout == TraceLayout::kHardware;
  const std::string trace = WriteWithSink([layout](trace::TraceSink& sink) {
    static_cast<PerfettoSink&>(sink).set_layout(layout);
    testing::WriteDeviceApiRun(sink);
  });
  ExpectCleanImport(tp, trace);
  EXPECT_EQ(Query(tp, trace,
                  "select s.name, s.ts, a.int_value from slice s join args a using (arg_set_id) "
                  "where a.key = 'debug.value' order by s.ts"),
            (std::vector<std::string>{"\"mma\",1100,42", "\"x (end without begin)\",1300,9",
                                      "\"wait\",1400,1099511627776", "\"tile\",2500,-7"}));
  const std::string w0 = hw ? "\"slot 00\"" : "\"warp 0\"", w1 = hw ? "\"slot 01\"" : "\"warp 1\"";
  const std::string w2 = hw ? "\"slot 02\"" : "\"warp 2\"";
  EXPECT_EQ(Query(tp, trace,
                  "select t.name, p.name, c.ts, cast(c.value as int) from counter c join track t on c.track_id = t.id "
                  "join track p on t.parent_id = p.id where t.name = 'inflight' order by c.ts"),
            (std::vector<std::string>{"\"inflight\"," + w0 + ",1200,3", "\"inflight\"," + w1 + ",1500,1",
                                      "\"inflight\"," + w0 + ",2600,5", "\"inflight\"," + w0 + ",10150,2"}));
  EXPECT_EQ(Query(tp, trace, "select count(*) from track where name = 'inflight'"),
            std::vector<std::string>{hw ? "2" : "3"});
  EXPECT_EQ(Query(tp, trace, "select count(*) from slice where name = 'inflight'"), std::vector<std::string>{"0"});
  // The spans: parent, track, name, ts, dur, depth, token, begin_warp, end_warp, unterminated, smprof_error.
  const std::string sm12 = hw ? "\"SM 012\"" : "\"block (1,0,0)\"";
  const std::string sm3 = hw ? "\"SM 003\"" : "\"block (0,1,0)\"";
  const std::string launch8 = hw ? sm12 : "\"block (0,0,0)\"";
  std::vector<std::string> spans = {
      sm12 + ",\"async\",\"stage\",1150,650,0,0,0,1,\"[NULL]\",\"[NULL]\"",
      sm12 + ",\"async\",\"stage\",1900,600,0,0,0,1,\"[NULL]\",\"[NULL]\"",
      sm12 + ",\"async\",\"copy\",2000,200,1,5,1,0,\"[NULL]\",\"[NULL]\"",
      sm12 + ",\"async\",\"stage\",3000,6000,0,2,0,\"[NULL]\",1,\"[NULL]\"",
      sm12 + ",\"async\",\"stage\",3200,0,1,3,\"[NULL]\",1,\"[NULL]\",\"unmatched end\"",
      sm12 + ",\"async\",\"stage\",4500,100,1,9,2,0,\"[NULL]\",\"[NULL]\"",
      launch8 + ",\"async\",\"stage\",10100,100,0,0,0,0,\"[NULL]\",\"[NULL]\"",
      sm12 + ",\"async lane 1\",\"stage\",1600,1900,0,1,0,1,\"[NULL]\",\"[NULL]\"",
      sm3 + ",\"async\",\"tma\",2000,50,0,0,0,0,\"[NULL]\",\"[NULL]\"",
  };
  std::vector<std::string> got = Query(
      tp, trace,
      "select p.name, t.name, s.name, s.ts, s.dur, s.depth, extract_arg(s.arg_set_id, 'debug.token'), "
      "extract_arg(s.arg_set_id, 'debug.begin_warp'), extract_arg(s.arg_set_id, 'debug.end_warp'), "
      "extract_arg(s.arg_set_id, 'debug.unterminated'), extract_arg(s.arg_set_id, 'debug.smprof_error') "
      "from slice s join track t on s.track_id = t.id join track p on t.parent_id = p.id where t.name glob 'async*'");
  std::sort(spans.begin(), spans.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, spans);
  // Flows between the ends' instants, none for the unterminated span and the unmatched end.
  EXPECT_EQ(Query(tp, trace,
                  "select so.name, so.ts, tso.name, si.ts, tsi.name from flow f join slice so on so.id = f.slice_out "
                  "join slice si on si.id = f.slice_in join track tso on so.track_id = tso.id "
                  "join track tsi on si.track_id = tsi.id order by so.ts, si.ts"),
            (std::vector<std::string>{"\"stage\",1150," + w0 + ",1800," + w1, "\"stage\",1600," + w0 + ",3500," + w1,
                                      "\"stage\",1900," + w0 + ",2500," + w1, "\"tma\",2000," + w0 + ",2050," + w0,
                                      "\"copy\",2000," + w1 + ",2200," + w0, "\"stage\",4500," + w2 + ",4600," + w0,
                                      "\"stage\",10100," + w0 + ",10200," + w0}));
  // Every slice row of warp 0's track (hardware: its slot's) with its cycles,
  // the ends' instants (a 0 each) among them, inside the warp's slices.
  const std::string d = hw ? "1" : "0";  // hardware: under the warp's slice
  const std::string in = hw ? "2" : "1";
  std::vector<std::string> want = {
      "\"mma\",1100,900," + d + ",1800", "\"stage\",1150,0," + in + ",0",     "\"stage\",1600,0," + in + ",0",
      "\"stage\",1900,0," + in + ",0",   "\"load\",2000,1000," + d + ",2000", "\"copy\",2200,0," + in + ",0",
      "\"tile\",2500,0," + in + ",0",    "\"stage\",3000,0," + in + ",0",     "\"stage\",4600,0," + d + ",0"};
  if (hw) {
    want.insert(want.begin(), "\"#7 gemm<128>\",1100,3500,0,0");
    for (const char* row : {"\"#8 gemm<128>\",10100,200,0,0", "\"load\",10100,200,1,400", "\"stage\",10100,0,2,0",
                            "\"stage\",10200,0,2,0"}) {
      want.push_back(row);
    }
  }
  std::string cycles = CyclesQuery("where t.name = " + w0 + " and p.name = " + sm12 + " order by s.ts, s.depth");
  cycles.replace(0, cycles.find(" from "), "select s.name, s.ts, s.dur, s.depth, cast(c.value as int)");
  EXPECT_EQ(Query(tp, trace, cycles), want);
  unlink(trace.c_str());
}

TEST(PerfettoImport, DeviceApiRecordsLaunchCentric) { ExpectDeviceApiImport(TraceLayout::kLaunch); }
TEST(PerfettoImport, DeviceApiRecordsHardwareCentric) { ExpectDeviceApiImport(TraceLayout::kHardware); }

// The same run as JSON (JsonSink): args.value, a counter track per warp,
// async slices with their args, the flows between the warps' threads.
TEST(PerfettoImport, DeviceApiRecordsAsJson) {
  const std::string tp = TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  char templ[] = "/tmp/smprof-json-XXXXXX";
  const int fd = mkstemp(templ);
  close(fd);
  const std::string trace = templ;
  {
    std::string error;
    auto writer = TraceWriter::Open(trace, &error);
    ASSERT_NE(writer, nullptr) << error;
    JsonSink sink(std::move(writer));
    testing::WriteDeviceApiRun(sink);
    ASSERT_TRUE(sink.Finish(CollectorSummary())) << sink.error();
  }
  ExpectCleanImport(tp, trace);
  EXPECT_EQ(Query(tp, trace,
                  "select s.name, s.ts, a.int_value from slice s join args a using (arg_set_id) "
                  "where a.key = 'args.value' order by s.ts"),
            (std::vector<std::string>{"\"mma\",1100,42", "\"x (end without begin)\",1300,9",
                                      "\"wait\",1400,1099511627776", "\"tile\",2500,-7"}));
  EXPECT_EQ(Query(tp, trace,
                  "select t.name, c.ts, cast(c.value as int) from counter c join track t on c.track_id = t.id "
                  "where t.name glob 'inflight*' order by c.ts"),
            (std::vector<std::string>{"\"inflight SM 012 | block (1,0,0) | warp 0\",1200,3",
                                      "\"inflight SM 012 | block (1,0,0) | warp 1\",1500,1",
                                      "\"inflight SM 012 | block (1,0,0) | warp 0\",2600,5",
                                      "\"inflight SM 012 | block (0,0,0) | warp 0\",10150,2"}));
  EXPECT_EQ(Query(tp, trace, "select count(*) from slice where name = 'inflight'"), std::vector<std::string>{"0"});
  EXPECT_EQ(Query(tp, trace,
                  "select s.name, s.ts, s.dur, extract_arg(s.arg_set_id, 'args.token'), "
                  "extract_arg(s.arg_set_id, 'args.unterminated'), extract_arg(s.arg_set_id, 'args.smprof_error') "
                  "from slice s join track t on s.track_id = t.id where t.type = 'legacy_async_process_slice' "
                  "order by s.ts, s.name, s.dur"),
            (std::vector<std::string>{
                "\"stage\",1150,650,0,\"[NULL]\",\"[NULL]\"", "\"stage\",1600,1900,1,\"[NULL]\",\"[NULL]\"",
                "\"stage\",1900,600,0,\"[NULL]\",\"[NULL]\"", "\"copy\",2000,200,5,\"[NULL]\",\"[NULL]\"",
                "\"tma\",2000,50,0,\"[NULL]\",\"[NULL]\"", "\"stage\",3000,6000,2,1,\"[NULL]\"",
                "\"stage\",3200,0,3,\"[NULL]\",\"unmatched end\"", "\"stage\",4500,100,9,\"[NULL]\",\"[NULL]\"",
                "\"stage\",10100,100,0,\"[NULL]\",\"[NULL]\""}));
  const std::string w0 = "\"SM 012 | block (1,0,0) | warp 0\"", w1 = "\"SM 012 | block (1,0,0) | warp 1\"";
  const std::string w2 = "\"SM 012 | block (1,0,0) | warp 2\"", tma = "\"SM 003 | block (0,1,0) | warp 0\"";
  const std::string v0 = "\"SM 012 | block (0,0,0) | warp 0\"";
  EXPECT_EQ(Query(tp, trace,
                  "select so.name, so.ts, a.name, si.ts, b.name from flow f join slice so on so.id = f.slice_out "
                  "join slice si on si.id = f.slice_in join thread_track ta on so.track_id = ta.id "
                  "join thread a on ta.utid = a.utid join thread_track tb on si.track_id = tb.id "
                  "join thread b on tb.utid = b.utid order by so.ts, si.ts"),
            (std::vector<std::string>{"\"stage\",1150," + w0 + ",1800," + w1, "\"stage\",1600," + w0 + ",3500," + w1,
                                      "\"stage\",1900," + w0 + ",2500," + w1, "\"tma\",2000," + tma + ",2050," + tma,
                                      "\"copy\",2000," + w1 + ",2200," + w0, "\"stage\",4500," + w2 + ",4600," + w0,
                                      "\"stage\",10100," + v0 + ",10200," + v0}));
  unlink(trace.c_str());
}

// --- 100,000 small launches: the hardware-centric layout --------------------

// Writes WriteManyLaunchesRun(100,000 launches, 8 SMs x 4 slots, 4 streams)
// with `layout`; returns the path.
std::string WriteManyLaunches(TraceLayout layout, uint64_t launches, PerfettoSink** keep = nullptr) {
  char templ[] = "/tmp/smprof-many-XXXXXX";
  const int fd = mkstemp(templ);
  close(fd);
  std::string error;
  auto sink = PerfettoSink::Open(templ, false, &error);
  EXPECT_NE(sink, nullptr) << error;
  if (!sink) return templ;
  sink->set_layout(layout);
  testing::WriteManyLaunchesRun(*sink, launches);
  EXPECT_TRUE(sink->Finish(CollectorSummary())) << sink->error();
  std::printf("[ layout   ] %s: %s, %llu tracks, %llu bytes\n", TraceLayoutName(layout),
              sink->layout_description().c_str(), static_cast<unsigned long long>(sink->tracks()),
              static_cast<unsigned long long>(sink->bytes_written()));
  (void)keep;
  return templ;
}

// Runs one query, timed (import included: the trace processor imports the
// whole trace before it answers). -1 s when it failed or ran past `limit`.
double TimedQuery(const std::string& tp, const std::string& trace, const std::string& sql, int limit_s,
                  std::vector<std::string>* rows) {
  char templ[] = "/tmp/smprof-tp-XXXXXX";
  const int fd = mkstemp(templ);
  close(fd);
  testing::ProcessSpec spec;
  spec.argv = {tp, "-Q", sql, trace};
  spec.stdout_path = templ;
  spec.stderr_path = "/dev/null";
  const auto start = std::chrono::steady_clock::now();
  const int rc = testing::RunProcess(spec, std::chrono::seconds(limit_s));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream in(templ);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) rows->push_back(line);
  unlink(templ);
  return rc == 0 ? s : -1;
}

// The import time is measured by bench/trace_import.cc (side by side for
// the three layouts); here only what the trace processor finds.
constexpr uint64_t kManyLaunches = 100000;

// Every count in one query (each query is a whole import).
const char* const kManyCounts =
    "select (select count(*) from slice where name = 'work'), (select count(*) from slice where name = 'load'), "
    "(select count(*) from slice where name = 'tick' and dur = 0), "
    "(select count(*) from slice where name = 'step'), "
    "(select count(*) from slice where name glob '#* step' and depth = 0), "
    "(select count(*) from slice where name = 'work' and depth = 1), "
    "(select count(*) from slice where name = 'load' and depth = 2), "
    "(select count(*) from slice where name = '_Z4stepv'), "
    "(select count(*) from track), "
    "(select count(*) from stats where value > 0 and severity in ('error', 'data_loss'))";

double ExpectManyLaunchesImport(const std::string& tp, TraceLayout layout, uint64_t launch_centric) {
  const std::string trace = WriteManyLaunches(layout, kManyLaunches);
  std::vector<std::string> rows;
  const double s = TimedQuery(tp, trace, kManyCounts, 120, &rows);
  std::printf("[ import   ] %s layout, %llu launches: %.2f s\n", TraceLayoutName(layout),
              static_cast<unsigned long long>(kManyLaunches), s);
  EXPECT_GE(s, 0) << "the trace processor failed or took more than 120 s";
  const uint64_t n = kManyLaunches, hw = n - launch_centric;
  const std::string want = std::to_string(n) + "," + std::to_string(n) + "," + std::to_string(n) + "," +
                           std::to_string(n) + "," + std::to_string(hw) + "," + std::to_string(hw) + "," +
                           std::to_string(hw) + "," + std::to_string(launch_centric) + ",";
  EXPECT_EQ(rows.size(), 1u);
  if (rows.size() == 1) {
    EXPECT_EQ(rows[0].substr(0, want.size()), want) << rows[0];
    const std::string tail = rows[0].substr(rows[0].rfind(',') + 1);
    EXPECT_EQ(tail, "0") << "errors or data losses: " << rows[0];
  }
  rows.clear();
  EXPECT_EQ(Query(tp, trace, "select name, idx, severity, value from stats where value > 0 and severity != 'info'"),
            std::vector<std::string>{});
  unlink(trace.c_str());
  return s;
}

TEST(PerfettoImport, HundredThousandLaunchesHardwareLayoutImportExactly) {
  const std::string tp = TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  ExpectManyLaunchesImport(tp, TraceLayout::kHardware, 0);
}

TEST(PerfettoImport, HundredThousandLaunchesAutoLayoutImportExactly) {
  const std::string tp = TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  ExpectManyLaunchesImport(tp, TraceLayout::kAuto, PerfettoSink::kAutoLaunchLimit);
}

}  // namespace
}  // namespace smprof
