#include "collector/stats_sink.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "collector/run_summary.h"
#include "collector/stats_report.h"

namespace smprof::stats {

StatsSink::StatsSink(std::string base, size_t gaps_kept) : base_(std::move(base)), builder_(gaps_kept) {}

void StatsSink::OnLaunch(const trace::LaunchRecord& launch) { builder_.OnLaunch(launch); }

void StatsSink::OnWarp(const trace::LaunchRecord& launch, const trace::WarpRecord& warp) {
  builder_.OnWarp(launch, warp);
}

void StatsSink::OnSlice(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                        const trace::SliceRecord& slice) {
  builder_.OnSlice(launch, warp, slice);
}

void StatsSink::OnInstant(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                          const trace::InstantRecord& instant) {
  builder_.OnInstant(launch, warp, instant);
}

void StatsSink::OnAsyncSpan(const trace::LaunchRecord& launch, const trace::AsyncSpanRecord& span) {
  builder_.OnAsyncSpan(launch, span);
}

void StatsSink::OnLaunchEnd(const trace::LaunchRecord& launch, const uint32_t*, size_t) {
  builder_.OnLaunchEnd(launch);
}

const RunStats& StatsSink::Build(const CollectorSummary& summary) {
  if (!built_) {
    stats_ = builder_.Build();
    stats_.lost_events = summary.lost_total;
    built_ = true;
  }
  return stats_;
}

bool StatsSink::Finish(const CollectorSummary& summary) {
  Build(summary);
  // Names are the program's bytes: invalid UTF-8 becomes U+FFFD, not an exception.
  Write(json_path(), ToJson(stats_).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  Write(csv_path(), ToCsv(stats_));
  return error_.empty();
}

void StatsSink::Write(const std::string& path, const std::string& text) {
  int err = 0;
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) {
    err = errno;
  } else {
    if (fwrite(text.data(), 1, text.size(), f) != text.size()) err = errno != 0 ? errno : EIO;
    if (fclose(f) != 0 && err == 0) err = errno;
  }
  if (err == 0 || !error_.empty()) return;  // the first failure is the one to fix
  error_ = "cannot write the run statistics to " + path + ": " + strerror(err) +
           " (check that the directory exists and is writable and that the disk has room)";
}

}  // namespace smprof::stats
