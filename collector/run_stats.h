// Run statistics: what a run's regions cost, without opening the trace.
//
// StatsBuilder is fed the trace sink's records (the same calls, in the same
// order: see trace_sink.h) and produces a RunStats, a plain structure that
// knows nothing of files; stats_sink.h writes it beside the trace and
// stats_report.h prints it, reads it back and compares two runs.
//
// Definitions (the tests hold the code to them):
//  * Kernel: LaunchRecord::label (the qualified name; `kernel` if empty).
//    Region: a slice name. Statistics are per kernel x region over every
//    launch of the kernel, every warp and every lane.
//  * Durations: end - begin in ns, and the slice's exact SM cycles.
//    Unterminated slices (no END came) have no duration of their own: they
//    are counted in `unterminated` and left out of every duration, share,
//    imbalance and percentile.
//  * Percentiles: nearest rank. p-th percentile of n samples = the sample of
//    rank ceil(p/100 * n) (1-based) in ascending order: p50 of {1,2,3,4} is 2,
//    p95 of 1..20 is 19. Exact while a region has at most kExactSamples
//    slices; beyond that, from a log-bucketed histogram (64 buckets per
//    power of two, the bucket's midpoint reported, clamped to the exact
//    min and max) whose relative error is at most kHistogramRelativeError.
//    count, total, mean and max are always exact.
//  * Memory is bounded however many events the run has: per kernel x region
//    at most kExactSamples values per unit (then the histogram's at most
//    3776 buckets) and one total per SM; per open launch, one total per
//    warp and region, folded into the kernel when the launch ends.
//  * Share of the kernel span: region total ns / sum over the kernel's
//    launches of (launch span x warps of that launch that recorded events).
//    That is the average share of a recording warp's time in the kernel
//    spent in the region. Nested regions overlap their parents (as do ranges
//    on sibling lanes), so shares are per region and do not add up to 1.
//    Undefined (nullopt) when the kernel's launches have no span.
//  * Imbalance: per-SM totals of a region (SM = GPU x SM, summed over the
//    kernel's launches) and per-warp totals (warp = launch x SM x block x
//    warp), each as max / mean over the SMs (warps) that recorded at least
//    one terminated slice of the region. 1 = perfectly even.
//  * Gaps: on each warp, the time between consecutive top-level slices
//    (lane 0, depth 0): from the end of one to the begin of the next, where
//    nothing the program marked was running. The time before a warp's first
//    slice and after its last is not a gap: in a kernel of several waves of
//    blocks it is time the warp did not exist yet or any more, and would
//    drown the gaps inside warps. The largest of the run are kept (kGapsKept
//    unless the builder is told otherwise).
//    After a flush of a very long episode a slice may arrive before the end
//    of the previous one (trace_sink.h); no gap is counted across it.
//  * Open ranges: slices without an END, each with its warp and when it
//    began: where a warp was when a kernel still running was read (the
//    process about to end), else a missing END. The first kOpenRangesKept
//    of the run by begin time are kept.
//  * Instants: counted per kernel x name; unmatched ENDs (shown as instants)
//    are counted among them and separately. Counter samples are not
//    instants: they are counted in their values only.
//  * Phases (SMPROF_PHASE) are regions like ranges, marked `phase`; a phase
//    and a range of the same name are two regions.
//  * Values (SMPROF_END/INSTANT with smprof::value, SMPROF_COUNTER): per
//    kernel x name x source (slice, instant, counter), count, min, max, sum
//    (saturated at the int64 limits) and mean (of the exact sum).
//  * Async spans (SMPROF_ASYNC_BEGIN/END): per kernel x name, like regions:
//    count and durations of the terminated ones (with min), unterminated
//    spans and unmatched ends counted apart, left out of the durations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collector/trace_sink.h"

namespace smprof::stats {

// Percentiles are exact up to this many slices per kernel x region.
inline constexpr uint64_t kExactSamples = uint64_t{1} << 16;
// Beyond it, a percentile is within this relative error of the exact one
// (half a bucket of 1/64 of a power of two).
inline constexpr double kHistogramRelativeError = 1.0 / 128;
// How many of the largest gaps a run keeps by default.
inline constexpr size_t kGapsKept = 10;
// How many open ranges (slices without an END) a run lists.
inline constexpr size_t kOpenRangesKept = 32;

// One unit (ns or cycles) of a region's terminated slices.
struct Durations {
  uint64_t total = 0;
  double mean = 0;
  uint64_t p50 = 0, p95 = 0, max = 0;
};

// Where a warp is: enough to find it in the trace.
struct WarpLocation {
  uint32_t pid = 0;
  uint64_t launch_id = 0;  // the process's own launch id ("#id" in the trace)
  int32_t gpu = -1;        // run-wide GPU index, -1 if unknown
  uint32_t sm = 0;
  uint32_t block[3] = {0, 0, 0};
  uint32_t warp = 0;  // in its block
};

// max / mean of per-unit (SM or warp) totals of one region.
struct Imbalance {
  uint64_t units = 0;   // SMs (warps) that recorded the region
  uint64_t max_ns = 0;  // the largest total
  double mean_ns = 0;   // mean total over those units
  double Ratio() const { return mean_ns > 0 ? static_cast<double>(max_ns) / mean_ns : 0; }
};

struct RegionStats {
  std::string name;
  bool phase = false;         // a phase (SMPROF_PHASE), not a range
  uint64_t count = 0;         // terminated slices: what every duration covers
  uint64_t unterminated = 0;  // slices with no END, left out of the durations
  bool exact = true;          // percentiles exact (count <= kExactSamples)
  Durations ns, cycles;
  std::optional<double> share;  // of the kernel span, see above
  Imbalance per_sm;
  int32_t busiest_gpu = -1;  // where per_sm.max_ns was
  uint32_t busiest_sm = 0;
  Imbalance per_warp;
  WarpLocation slowest_warp;  // where per_warp.max_ns was
};

struct InstantStats {
  std::string name;
  uint64_t count = 0;
  uint64_t unmatched_ends = 0;  // of `count`: ENDs without a BEGIN
};

// The values recorded with the markers of one name, from one source.
struct ValueStats {
  enum class Source : uint8_t { kSlice, kInstant, kCounter };
  std::string name;
  Source source = Source::kSlice;
  uint64_t count = 0;
  int64_t min = 0, max = 0;
  int64_t sum = 0;  // saturated at INT64_MIN / INT64_MAX
  double mean = 0;
};

struct AsyncStats {
  std::string name;
  uint64_t count = 0;           // spans with both ends: what the durations cover
  uint64_t unterminated = 0;    // no END (ended with the launch)
  uint64_t unmatched_ends = 0;  // an END that closed nothing
  bool exact = true;            // percentiles exact (count <= kExactSamples)
  Durations ns;
  uint64_t min_ns = 0;
};

struct KernelStats {
  std::string kernel;  // the label
  uint64_t launches = 0;
  uint64_t warps = 0;                  // warps that recorded events, over all launches
  uint64_t span_ns = 0;                // sum of the launches' spans
  uint64_t warp_time_ns = 0;           // sum of launch span x recording warps: the share's denominator
  std::vector<RegionStats> regions;    // by total ns, largest first (ties: by name)
  std::vector<InstantStats> instants;  // by name
  std::vector<ValueStats> values;      // by name, then source
  std::vector<AsyncStats> async;       // by total ns, largest first (ties: by name)
};

struct Gap {
  std::string kernel;
  WarpLocation where;
  std::string before, after;  // the top-level regions around it
  uint64_t start_ns = 0;      // trace time of the end of `before`
  uint64_t length_ns = 0;
};

struct OpenRange {
  std::string kernel;
  WarpLocation where;
  std::string region;
  uint64_t since_ns = 0;  // trace time of its BEGIN
};

struct RunStats {
  uint64_t launches = 0;
  uint64_t slices = 0;  // all slices, unterminated included
  uint64_t unterminated = 0;
  uint64_t instants = 0;
  uint64_t async_spans = 0;  // every async span, unterminated and unmatched ends included
  // Events recorded on the GPU that never reached the trace (the collector's
  // lost.total): the statistics cannot cover them. Set by the sink.
  uint64_t lost_events = 0;
  std::vector<KernelStats> kernels;  // by span, largest first (ties: by name)
  std::vector<Gap> gaps;             // longest first (ties: earliest first)
  std::vector<OpenRange> open_ranges;  // the earliest kOpenRangesKept, by begin time
};

// Accumulates one run. Not thread-safe; the caller feeds it in sink order.
class StatsBuilder {
 public:
  explicit StatsBuilder(size_t gaps_kept = kGapsKept);
  ~StatsBuilder();
  StatsBuilder(const StatsBuilder&) = delete;
  StatsBuilder& operator=(const StatsBuilder&) = delete;

  void OnLaunch(const trace::LaunchRecord& launch);
  void OnWarp(const trace::LaunchRecord& launch, const trace::WarpRecord& warp);
  void OnSlice(const trace::LaunchRecord& launch, const trace::WarpRecord& warp, const trace::SliceRecord& slice);
  void OnInstant(const trace::LaunchRecord& launch, const trace::WarpRecord& warp, const trace::InstantRecord& instant);
  void OnAsyncSpan(const trace::LaunchRecord& launch, const trace::AsyncSpanRecord& span);
  void OnLaunchEnd(const trace::LaunchRecord& launch);

  // The statistics so far. Launches that never ended are ended first (their
  // warps' totals join the imbalance), so call it once the run is over.
  RunStats Build();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace smprof::stats
