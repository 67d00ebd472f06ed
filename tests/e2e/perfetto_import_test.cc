// Perfetto's own trace processor imports protobuf traces written with
// smprof's encoder: the packet layout the trace writer is built on (one
// packet sequence per warp track, interned names, an incremental clock and
// track defaults, so an event costs ~12 bytes) read back by the engine the
// Perfetto UI runs. Skips visibly where ../shared/tools/perfetto is absent
// (a user's own clone).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "collector/perfetto_check.h"
#include "collector/proto_reader.h"
#include "tests/support/perfetto_builder.h"
#include "tests/support/subprocess.h"

namespace smprof {
namespace {

using testing::PerfettoBuilder;
using testing::kT0;

std::string TraceProcessor() {
  const char* src = std::getenv("SMPROF_SOURCE_DIR");
  const std::string path = std::string(src ? src : ".") + "/../shared/tools/perfetto/trace_processor_shell";
  return access(path.c_str(), X_OK) == 0 ? path : std::string();
}

// Runs one query; returns the CSV lines after the header.
std::vector<std::string> Query(const std::string& tp, const std::string& trace, const std::string& sql) {
  char templ[] = "/tmp/smprof-tp-XXXXXX";
  const int fd = mkstemp(templ);
  close(fd);
  testing::ProcessSpec spec;
  spec.argv = {tp, "-Q", sql, trace};
  spec.stdout_path = templ;
  spec.stderr_path = "/dev/null";
  EXPECT_EQ(testing::RunProcess(spec, std::chrono::seconds(60)), 0) << sql;
  std::ifstream in(templ);
  std::vector<std::string> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) rows.push_back(line);
  unlink(templ);
  return rows;
}

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

}  // namespace
}  // namespace smprof
