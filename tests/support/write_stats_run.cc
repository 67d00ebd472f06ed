// smprof_test_stats_run BASE: writes a synthetic run (tests/support/sink_runs.h,
// WriteDeviceApiRun: ranges, instants, phases, values, counters and async
// spans over two launches) through the collector's real
// sinks: the protobuf trace BASE and its statistics BASE.stats.json and
// BASE.stats.csv, as smprof-run leaves them. The Python package's CPU tests
// (python/tests) read them back; exit 1 with the error on failure.
#include <cstdio>
#include <string>

#include "collector/perfetto_sink.h"
#include "collector/run_summary.h"
#include "collector/stats_sink.h"
#include "tests/support/sink_runs.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s BASE (writes BASE, BASE.stats.json, BASE.stats.csv)\n", argv[0]);
    return 2;
  }
  const std::string base = argv[1];
  std::string error;
  auto trace = smprof::PerfettoSink::Open(base, /*exclusive=*/false, &error);
  if (!trace) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  smprof::stats::StatsSink stats(base);
  for (smprof::trace::TraceSink* sink : {static_cast<smprof::trace::TraceSink*>(trace.get()),
                                         static_cast<smprof::trace::TraceSink*>(&stats)}) {
    smprof::testing::WriteDeviceApiRun(*sink);
  }
  smprof::CollectorSummary summary;
  summary.trace = base;
  const bool stats_ok = stats.Finish(summary);
  const bool trace_ok = trace->Finish(summary);
  if (!stats_ok || !trace_ok) {
    std::fprintf(stderr, "%s%s\n", stats.error().c_str(), trace->error().c_str());
    return 1;
  }
  return 0;
}
