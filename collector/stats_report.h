// Stats report: RunStats (run_stats.h) as people and programs read it.
//
//  * RenderText: a terminal table, readable at 100 columns: per kernel the
//    regions with the most total time, their imbalance, then the largest
//    gaps of the run. Durations carry units ("12.3 us"); percentiles taken
//    from the histogram are marked "~".
//  * ToJson / FromJson / ReadStatsFile: the .stats.json file, read back with
//    errors that name the field, so `smprof` prints and compares runs from
//    their files without the trace.
//  * ToCsv: the .stats.csv file, one row per kernel x region, every column;
//    a run with phases, async spans or values adds a row kind and value
//    columns, and rows for async spans and for instant and counter values.
//  * Diff / RenderDiff / DiffToJson: two runs region by region.
//
// Kept apart from the statistics themselves so that their definitions live
// in one place (run_stats.h) and every format shows the same numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collector/run_stats.h"
#include "common/json.h"

namespace smprof::stats {

// The version of the .stats.json layout this code writes and reads.
inline constexpr int kStatsFormatVersion = 1;

struct TextOptions {
  size_t top_regions = 10;  // per kernel; the files have them all
};

std::string RenderText(const RunStats& run, const TextOptions& options = {});

// {"format": "smprof-stats", "version", "definitions": {...}, "launches",
//  "slices", "unterminated", "instants", "async_spans" (when any), "lost_events",
//  "kernels": [{"kernel", "launches", "warps", "span_ns", "warp_time_ns",
//    "regions": [{"name", "phase" (phases only: true), "count", "unterminated", "percentiles_exact",
//      "ns": {"total", "mean", "p50", "p95", "max"}, "cycles": {...},
//      "share" (null when undefined),
//      "sm_imbalance": {"sms", "max_ns", "mean_ns", "ratio", "gpu", "sm"},
//      "warp_imbalance": {"warps", "max_ns", "mean_ns", "ratio", "warp": WHERE}}],
//    "instants": [{"name", "count", "unmatched_ends"}],
//    "values" (when any): [{"name", "source": "slice" | "instant" | "counter",
//      "count", "min", "max", "mean", "sum"}],
//    "async_spans" (when any): [{"name", "count", "unterminated",
//      "unmatched_ends", "percentiles_exact", "ns": {...}, "min_ns"}]}],
//  "gaps": [{"kernel", "warp": WHERE, "before", "after", "start_ns", "length_ns"}]}
// WHERE = {"pid", "launch_id", "gpu", "sm", "block": [x, y, z], "warp"}.
// "definitions" and "ratio" are for readers; FromJson ignores them. Names
// are the program's bytes, possibly not UTF-8: dump the result with
// nlohmann::json::error_handler_t::replace.
nlohmann::json ToJson(const RunStats& run);
// False, with *error naming the field and what was wrong, on anything that
// is not a stats file this version reads. *run is then unspecified.
bool FromJson(const nlohmann::json& json, RunStats* run, std::string* error);
bool ReadStatsFile(const std::string& path, RunStats* run, std::string* error);

// Header row, then one row per kernel x region (RFC 4180 quoting: kernel
// labels hold commas). Empty cells: share or imbalance undefined.
std::string ToCsv(const RunStats& run);

// A trace larger than this is not worth opening in a browser: the Perfetto
// UI runs its trace processor in WebAssembly, with at most 4 GB of memory,
// and needs a few times a trace's size to load it.
inline constexpr uint64_t kLargeTraceBytes = uint64_t{1} << 30;

// "" for a trace of at most kLargeTraceBytes; else one line saying so, how
// to open it anyway, and the options that narrow the next run, naming the
// kernels of `run` that recorded most.
std::string LargeTraceAdvice(uint64_t trace_bytes, const RunStats& run);

// One kernel x region of two runs, a (before) and b (after).
struct RegionDiff {
  enum class Presence { kBoth, kRemoved /* only in a */, kAdded /* only in b */ };
  std::string kernel, region;
  Presence presence = Presence::kBoth;
  uint64_t count_a = 0, count_b = 0;
  double mean_a_ns = 0, mean_b_ns = 0;
  uint64_t p95_a_ns = 0, p95_b_ns = 0;
  std::optional<double> speedup;         // mean a / mean b (> 1: b is faster); both need durations
  std::optional<double> p95_change_pct;  // (p95 b - p95 a) / p95 a x 100; needs p95 a > 0
};

// Kernels and regions matched by name; in a's order (kernels by span,
// regions by total time), then what only b has, each listed under its kernel.
std::vector<RegionDiff> Diff(const RunStats& a, const RunStats& b);
std::string RenderDiff(const std::vector<RegionDiff>& diff);
// {"format": "smprof-stats-diff", "version", "regions": [{"kernel", "region",
//  "status": "both" | "added" | "removed", "count_a", "count_b", "mean_a_ns",
//  "mean_b_ns", "speedup" (or null), "p95_a_ns", "p95_b_ns",
//  "p95_change_pct" (or null)}]}
nlohmann::json DiffToJson(const std::vector<RegionDiff>& diff);

}  // namespace smprof::stats
