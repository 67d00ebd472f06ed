// Benchmark: how long Perfetto's own trace processor takes to import a run of
// many small launches in each protobuf layout (the bound: 100,000
// launches in at most 10 s; the same run as JSON, one process per launch,
// took 513 s). Writes the run through the real PerfettoSink
// (tests/support/sink_runs.h: 1 block x 1 warp per launch, a range, a nested
// range and an instant each, over 8 SMs x 4 warp slots and 4 streams), then
// times `trace_processor_shell -Q <counts>` on it, which imports the whole
// trace before it answers, and checks the counts it answers.
//   smprof_bench_trace_import [launches (default 100000)] [trace_processor_shell]
// The trace processor defaults to ../shared/tools/perfetto/trace_processor_shell
// beside the source tree.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "collector/perfetto_sink.h"
#include "collector/run_summary.h"
#include "tests/support/sink_runs.h"

namespace {

struct Result {
  uint64_t tracks = 0, bytes = 0;
  double import_s = -1;
  std::string counts;
  std::string layout;
};

Result Measure(const std::string& tp, smprof::TraceLayout layout, uint64_t launches) {
  Result r;
  char path[] = "/tmp/smprof-bench-import-XXXXXX";
  const int fd = mkstemp(path);
  close(fd);
  std::string error;
  auto sink = smprof::PerfettoSink::Open(path, false, &error);
  if (!sink) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return r;
  }
  sink->set_layout(layout);
  smprof::testing::WriteManyLaunchesRun(*sink, launches);
  sink->Finish(smprof::CollectorSummary());
  r.tracks = sink->tracks();
  r.bytes = sink->bytes_written();
  r.layout = sink->layout_description();
  const std::string out = std::string(path) + ".out";
  const std::string cmd = "'" + tp + "' -Q \"select (select count(*) from slice where name = 'work'), " +
                          "(select count(*) from stats where value > 0 and severity in ('error', 'data_loss'))\" " +
                          path + " > " + out + " 2>/dev/null";
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = std::system(cmd.c_str());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ifstream in(out);
  std::string header;
  std::getline(in, header);
  std::getline(in, r.counts);
  r.import_s = rc == 0 ? s : -1;
  unlink(path);
  unlink(out.c_str());
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const long launches = argc > 1 ? std::atol(argv[1]) : 100000L;
  const std::string tp = argc > 2 ? argv[2] : std::string(SMPROF_SOURCE_DIR) +
                                                  "/../shared/tools/perfetto/trace_processor_shell";
  if (launches <= 0 || access(tp.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "usage: %s [launches > 0] [trace_processor_shell]\n(%s is not executable)\n", argv[0],
                 tp.c_str());
    return 2;
  }
  std::printf("import of %ld one-warp launches by Perfetto's trace processor (%s)\n", launches, tp.c_str());
  std::printf("%-9s %9s %12s %10s %12s  %s\n", "layout", "tracks", "bytes", "import s", "x launch", "counts (work ranges, errors)");
  const Result launch = Measure(tp, smprof::TraceLayout::kLaunch, static_cast<uint64_t>(launches));
  int failures = 0;
  for (const auto& [name, layout] : {std::pair<const char*, smprof::TraceLayout>{"launch", smprof::TraceLayout::kLaunch},
                                     {"hardware", smprof::TraceLayout::kHardware},
                                     {"auto", smprof::TraceLayout::kAuto}}) {
    const Result r = layout == smprof::TraceLayout::kLaunch ? launch : Measure(tp, layout, launches);
    const bool ok = r.import_s >= 0 && r.counts == std::to_string(launches) + ",0";
    failures += ok ? 0 : 1;
    std::printf("%-9s %9llu %12llu %10.2f %12.2f  %s%s\n", name, static_cast<unsigned long long>(r.tracks),
                static_cast<unsigned long long>(r.bytes), r.import_s,
                r.import_s > 0 ? launch.import_s / r.import_s : 0.0, r.counts.c_str(), ok ? "" : "  FAILED");
  }
  return failures == 0 ? 0 : 1;
}
