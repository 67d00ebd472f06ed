// StatsSink: the run statistics as one more trace sink.
//
// The trace builder hands it the same records as the trace writers; it feeds
// a StatsBuilder (run_stats.h) and, when the run is over, writes
// <base>.stats.json (read back by `smprof`, see stats_report.h) and
// <base>.stats.csv beside the trace, and keeps the statistics for smprof-run
// to print. It holds no event, only the bounded statistics, so it covers
// every event of runs of any size.
//
// A file that cannot be written does not stop the run or the other sinks:
// Finish returns false and error() names the file and the cause; stats()
// still holds the statistics.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "collector/run_stats.h"
#include "collector/trace_sink.h"

namespace smprof::stats {

class StatsSink : public trace::TraceSink {
 public:
  // `base`: the trace's path, e.g. "run.pftrace" (trace_placement.h, StatsBase).
  explicit StatsSink(std::string base, size_t gaps_kept = kGapsKept);

  // Names the files (a sink may be created before the trace has its final
  // name); call before Finish.
  void SetBase(std::string base) { base_ = std::move(base); }
  std::string json_path() const { return base_ + ".stats.json"; }
  std::string csv_path() const { return base_ + ".stats.csv"; }

  void OnLaunch(const trace::LaunchRecord& launch) override;
  void OnWarp(const trace::LaunchRecord& launch, const trace::WarpRecord& warp) override;
  void OnSlice(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
               const trace::SliceRecord& slice) override;
  void OnInstant(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                 const trace::InstantRecord& instant) override;
  void OnAsyncSpan(const trace::LaunchRecord& launch, const trace::AsyncSpanRecord& span) override;
  void OnLaunchEnd(const trace::LaunchRecord& launch, const uint32_t* warps_in_order, size_t warp_count) override;

  bool Flush() override { return error_.empty(); }
  // Builds the statistics (lost_events from the summary's lost_total); the
  // collector puts them into the trace before the trace is closed.
  const RunStats& Build(const CollectorSummary& summary);
  // Builds them unless Build did, and writes both files, the second even if
  // the first failed.
  bool Finish(const CollectorSummary& summary) override;
  std::string error() const override { return error_; }

  // The statistics, once Finish has run.
  const RunStats& stats() const { return stats_; }

 private:
  void Write(const std::string& path, const std::string& text);

  std::string base_;
  StatsBuilder builder_;
  RunStats stats_;
  bool built_ = false;
  std::string error_;
};

}  // namespace smprof::stats
