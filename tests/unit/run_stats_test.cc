// Run statistics: every number of a small synthetic run against values worked
// out by hand below (durations, nearest-rank percentiles, cycles, share,
// imbalance, gaps, instants); the histogram regime against a known
// distribution and its stated error bound; the files (CSV rows, JSON read
// back, errors that name the field); the diff of two runs; the text tables.
#include "collector/run_stats.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "collector/run_summary.h"
#include "collector/stats_report.h"
#include "collector/stats_sink.h"
#include "common/json.h"

namespace smprof::stats {
namespace {

using trace::InstantRecord;
using trace::LaunchRecord;
using trace::SliceRecord;
using trace::WarpRecord;

LaunchRecord Launch(uint64_t index, const std::string& label, uint64_t start_ns, uint64_t end_ns, uint64_t launch_id,
                    int32_t gpu = 0) {
  LaunchRecord l;
  l.index = index;
  l.pid = 100;
  l.launch_id = launch_id;
  l.kernel = "_Z" + label;
  l.label = label;
  l.gpu = gpu;
  l.start_ns = start_ns;
  l.end_ns = end_ns;
  return l;
}

WarpRecord Warp(uint32_t index, uint16_t sm, uint32_t block_x, uint16_t warp) {
  WarpRecord w;
  w.index = index;
  w.sm = sm;
  w.block[0] = block_x;
  w.warp = warp;
  return w;
}

SliceRecord Slice(std::string_view name, uint64_t begin_ns, uint64_t end_ns, uint32_t cycles, uint32_t depth = 0) {
  SliceRecord s;
  s.name = name;
  s.begin_ns = begin_ns;
  s.end_ns = end_ns;
  s.cycles = cycles;
  s.depth = depth;
  return s;
}

SliceRecord Unterminated(std::string_view name, uint64_t begin_ns, uint64_t end_ns) {
  SliceRecord s = Slice(name, begin_ns, end_ns, 0);
  s.unterminated = true;
  s.note = "launch ended";
  return s;
}

InstantRecord Instant(std::string_view name, uint64_t ts_ns, bool unmatched_end = false) {
  InstantRecord i;
  i.name = name;
  i.ts_ns = ts_ns;
  i.unmatched_end = unmatched_end;
  return i;
}

// The synthetic run (pid 100, times in ns, cycles = 1.5 x ns):
//   launch 0 "gemm" #7, GPU 0, span [1000, 2000):
//     w0 SM1 b(0,0,0) w0: load 1000-1100, compute 1150-1450 (inner 1200-1260
//                         nested), store 1500-1550
//     w1 SM2 b(1,0,0) w0: load 1000-1200, compute 1200-1400, store 1700-1800
//     w2 SM2 b(1,0,0) w1: load 1010-1050, compute from 1100 unterminated;
//                         instants "mark", "oops" (an unmatched END)
//   launch 1 "gemm" #8, GPU 0, span [3000, 3500), open while launch 0 is:
//     w0 SM1 b(0,0,0) w0: load 3000-3400, compute 3450-3500
//   launch 2 "saxpy" #9 (label empty: the kernel name), GPU 1, [5000, 5100):
//     w0 SM0 b(0,0,0) w0: axpy 5000-5080, instant "mark"
void FeedRun(StatsBuilder* b) {
  const LaunchRecord l0 = Launch(0, "gemm", 1000, 2000, 7);
  const LaunchRecord l1 = Launch(1, "gemm", 3000, 3500, 8);
  LaunchRecord l2 = Launch(2, "", 5000, 5100, 9, 1);
  l2.kernel = "saxpy";

  b->OnLaunch(l0);
  const WarpRecord w0 = Warp(0, 1, 0, 0), w1 = Warp(1, 2, 1, 0), w2 = Warp(2, 2, 1, 1);
  b->OnWarp(l0, w0);
  b->OnSlice(l0, w0, Slice("load", 1000, 1100, 150));
  b->OnSlice(l0, w0, Slice("compute", 1150, 1450, 450));
  b->OnSlice(l0, w0, Slice("inner", 1200, 1260, 90, 1));
  b->OnSlice(l0, w0, Slice("store", 1500, 1550, 75));
  b->OnWarp(l0, w1);
  b->OnSlice(l0, w1, Slice("load", 1000, 1200, 300));
  b->OnSlice(l0, w1, Slice("compute", 1200, 1400, 300));
  b->OnSlice(l0, w1, Slice("store", 1700, 1800, 150));
  b->OnWarp(l0, w2);
  b->OnSlice(l0, w2, Slice("load", 1010, 1050, 60));
  b->OnSlice(l0, w2, Unterminated("compute", 1100, 2000));
  b->OnInstant(l0, w2, Instant("mark", 1120));
  b->OnInstant(l0, w2, Instant("oops", 1130, true));

  b->OnLaunch(l1);
  const WarpRecord v0 = Warp(0, 1, 0, 0);
  b->OnWarp(l1, v0);
  b->OnSlice(l1, v0, Slice("load", 3000, 3400, 600));
  b->OnSlice(l1, v0, Slice("compute", 3450, 3500, 75));
  b->OnLaunchEnd(l0);
  b->OnLaunchEnd(l1);

  b->OnLaunch(l2);
  const WarpRecord u0 = Warp(0, 0, 0, 0);
  b->OnWarp(l2, u0);
  b->OnSlice(l2, u0, Slice("axpy", 5000, 5080, 120));
  b->OnInstant(l2, u0, Instant("mark", 5090));
  b->OnLaunchEnd(l2);
}

RunStats BuildRun(size_t gaps_kept = kGapsKept) {
  StatsBuilder b(gaps_kept);
  FeedRun(&b);
  return b.Build();
}

const RegionStats& Region(const KernelStats& k, const std::string& name) {
  for (const RegionStats& r : k.regions) {
    if (r.name == name) return r;
  }
  ADD_FAILURE() << "no region " << name << " in " << k.kernel;
  static const RegionStats none;
  return none;
}

void ExpectDurations(const Durations& d, uint64_t total, double mean, uint64_t p50, uint64_t p95, uint64_t max) {
  EXPECT_EQ(d.total, total);
  EXPECT_DOUBLE_EQ(d.mean, mean);
  EXPECT_EQ(d.p50, p50);
  EXPECT_EQ(d.p95, p95);
  EXPECT_EQ(d.max, max);
}

TEST(RunStatsTest, KernelsAndRunTotals) {
  const RunStats run = BuildRun();
  EXPECT_EQ(run.launches, 3u);
  EXPECT_EQ(run.slices, 12u);
  EXPECT_EQ(run.unterminated, 1u);
  EXPECT_EQ(run.instants, 3u);
  EXPECT_EQ(run.lost_events, 0u);
  ASSERT_EQ(run.kernels.size(), 2u);
  // By span: gemm 1000 + 500, saxpy 100.
  const KernelStats& gemm = run.kernels[0];
  EXPECT_EQ(gemm.kernel, "gemm");
  EXPECT_EQ(gemm.launches, 2u);
  EXPECT_EQ(gemm.warps, 4u);
  EXPECT_EQ(gemm.span_ns, 1500u);
  EXPECT_EQ(gemm.warp_time_ns, 1000u * 3 + 500u * 1);
  const KernelStats& saxpy = run.kernels[1];
  EXPECT_EQ(saxpy.kernel, "saxpy");
  EXPECT_EQ(saxpy.launches, 1u);
  EXPECT_EQ(saxpy.warp_time_ns, 100u);
  // Regions by total: load 740, compute 550, store 150, inner 60.
  std::vector<std::string> order;
  for (const RegionStats& r : gemm.regions) order.push_back(r.name);
  EXPECT_EQ(order, (std::vector<std::string>{"load", "compute", "store", "inner"}));
}

TEST(RunStatsTest, DurationsPercentilesAndCycles) {
  const RunStats run = BuildRun();
  const KernelStats& gemm = run.kernels[0];

  // load: {100, 200, 40, 400} -> sorted 40 100 200 400; p50 = rank ceil(2) = 100,
  // p95 = rank ceil(3.8) = 4 -> 400. Cycles {150, 300, 60, 600}.
  const RegionStats& load = Region(gemm, "load");
  EXPECT_EQ(load.count, 4u);
  EXPECT_EQ(load.unterminated, 0u);
  EXPECT_TRUE(load.exact);
  ExpectDurations(load.ns, 740, 185.0, 100, 400, 400);
  ExpectDurations(load.cycles, 1110, 277.5, 150, 600, 600);

  // compute: {300, 200, 50} and one unterminated, left out.
  // p50 = rank ceil(1.5) = 2 -> 200, p95 = rank ceil(2.85) = 3 -> 300.
  const RegionStats& compute = Region(gemm, "compute");
  EXPECT_EQ(compute.count, 3u);
  EXPECT_EQ(compute.unterminated, 1u);
  ExpectDurations(compute.ns, 550, 550.0 / 3, 200, 300, 300);
  ExpectDurations(compute.cycles, 825, 275.0, 300, 450, 450);

  // store: {50, 100}: p50 = rank 1 -> 50, p95 = rank ceil(1.9) = 2 -> 100.
  const RegionStats& store = Region(gemm, "store");
  EXPECT_EQ(store.count, 2u);
  ExpectDurations(store.ns, 150, 75.0, 50, 100, 100);
  ExpectDurations(store.cycles, 225, 112.5, 75, 150, 150);

  const RegionStats& inner = Region(gemm, "inner");
  EXPECT_EQ(inner.count, 1u);
  ExpectDurations(inner.ns, 60, 60.0, 60, 60, 60);
  ExpectDurations(inner.cycles, 90, 90.0, 90, 90, 90);

  const RegionStats& axpy = Region(run.kernels[1], "axpy");
  ExpectDurations(axpy.ns, 80, 80.0, 80, 80, 80);
}

TEST(RunStatsTest, ShareOfTheKernelSpan) {
  const RunStats run = BuildRun();
  const KernelStats& gemm = run.kernels[0];
  // Denominator: launch 0 spans 1000 ns with 3 warps, launch 1 500 ns with 1.
  ASSERT_TRUE(Region(gemm, "load").share.has_value());
  EXPECT_DOUBLE_EQ(*Region(gemm, "load").share, 740.0 / 3500);
  EXPECT_DOUBLE_EQ(*Region(gemm, "compute").share, 550.0 / 3500);
  EXPECT_DOUBLE_EQ(*Region(gemm, "inner").share, 60.0 / 3500);
  EXPECT_DOUBLE_EQ(*Region(run.kernels[1], "axpy").share, 0.8);

  // No span, no share.
  StatsBuilder b;
  const LaunchRecord l = Launch(0, "spanless", 0, 0, 1);
  const WarpRecord w = Warp(0, 0, 0, 0);
  b.OnLaunch(l);
  b.OnWarp(l, w);
  b.OnSlice(l, w, Slice("r", 10, 20, 15));
  b.OnLaunchEnd(l);
  const RunStats spanless = b.Build();
  EXPECT_FALSE(spanless.kernels.at(0).regions.at(0).share.has_value());
}

TEST(RunStatsTest, ImbalancePerSmAndPerWarp) {
  const RunStats run = BuildRun();
  const KernelStats& gemm = run.kernels[0];

  // load per SM: SM1 = 100 (#7) + 400 (#8) = 500, SM2 = 200 + 40 = 240.
  const RegionStats& load = Region(gemm, "load");
  EXPECT_EQ(load.per_sm.units, 2u);
  EXPECT_EQ(load.per_sm.max_ns, 500u);
  EXPECT_DOUBLE_EQ(load.per_sm.mean_ns, 370.0);
  EXPECT_DOUBLE_EQ(load.per_sm.Ratio(), 500.0 / 370);
  EXPECT_EQ(load.busiest_gpu, 0);
  EXPECT_EQ(load.busiest_sm, 1u);
  // load per warp: 100, 200, 40 (launch #7), 400 (launch #8).
  EXPECT_EQ(load.per_warp.units, 4u);
  EXPECT_EQ(load.per_warp.max_ns, 400u);
  EXPECT_DOUBLE_EQ(load.per_warp.mean_ns, 185.0);
  EXPECT_EQ(load.slowest_warp.launch_id, 8u);
  EXPECT_EQ(load.slowest_warp.pid, 100u);
  EXPECT_EQ(load.slowest_warp.sm, 1u);

  // compute: the unterminated slice of w2 does not count, so w2 did not record it.
  const RegionStats& compute = Region(gemm, "compute");
  EXPECT_EQ(compute.per_sm.units, 2u);
  EXPECT_EQ(compute.per_sm.max_ns, 350u);  // SM1: 300 + 50
  EXPECT_DOUBLE_EQ(compute.per_sm.mean_ns, 275.0);
  EXPECT_EQ(compute.per_warp.units, 3u);
  EXPECT_EQ(compute.per_warp.max_ns, 300u);
  EXPECT_DOUBLE_EQ(compute.per_warp.mean_ns, 550.0 / 3);
  EXPECT_EQ(compute.slowest_warp.launch_id, 7u);

  // store: SM1 50, SM2 100; the slowest warp is b(1,0,0) w0 of #7.
  const RegionStats& store = Region(gemm, "store");
  EXPECT_EQ(store.busiest_sm, 2u);
  EXPECT_DOUBLE_EQ(store.per_sm.Ratio(), 100.0 / 75);
  const WarpLocation& slow = store.slowest_warp;
  EXPECT_EQ(slow.launch_id, 7u);
  EXPECT_EQ(slow.sm, 2u);
  EXPECT_EQ(slow.block[0], 1u);
  EXPECT_EQ(slow.warp, 0u);
  EXPECT_EQ(slow.gpu, 0);

  // saxpy ran on GPU 1.
  EXPECT_EQ(Region(run.kernels[1], "axpy").busiest_gpu, 1);
}

TEST(RunStatsTest, LargestGapsBetweenTopLevelSlices) {
  // Top-level gaps: w0 of #7 load->compute 50 at 1100 and compute->store 50
  // at 1450 (inner is nested: no gap); w1 of #7 compute->store 300 at 1400
  // (load->compute touches: none); w2 of #7 load->compute 50 at 1050; #8
  // load->compute 50 at 3400; saxpy has one slice.
  const RunStats all = BuildRun();
  ASSERT_EQ(all.gaps.size(), 5u);
  std::vector<std::pair<uint64_t, uint64_t>> got;
  for (const Gap& g : all.gaps) got.emplace_back(g.length_ns, g.start_ns);
  EXPECT_EQ(got,
            (std::vector<std::pair<uint64_t, uint64_t>>{{300, 1400}, {50, 1050}, {50, 1100}, {50, 1450}, {50, 3400}}));
  const Gap& top = all.gaps[0];
  EXPECT_EQ(top.kernel, "gemm");
  EXPECT_EQ(top.before, "compute");
  EXPECT_EQ(top.after, "store");
  EXPECT_EQ(top.where.pid, 100u);
  EXPECT_EQ(top.where.launch_id, 7u);
  EXPECT_EQ(top.where.sm, 2u);
  EXPECT_EQ(top.where.block[0], 1u);
  EXPECT_EQ(top.where.warp, 0u);
  EXPECT_EQ(all.gaps[1].after, "compute");  // before the unterminated slice

  // Keeping 3: the longest, then the earliest of the equal ones, whatever
  // the order they came in.
  const RunStats three = BuildRun(3);
  ASSERT_EQ(three.gaps.size(), 3u);
  EXPECT_EQ(three.gaps[0].start_ns, 1400u);
  EXPECT_EQ(three.gaps[1].start_ns, 1050u);
  EXPECT_EQ(three.gaps[2].start_ns, 1100u);
  EXPECT_TRUE(BuildRun(0).gaps.empty());
}

TEST(RunStatsTest, GapsOnlyBetweenTopLevelSlicesOfLaneZero) {
  // After a flush of a long episode a slice may start before the previous
  // one ended: no gap across it, and the later end is what the next gap
  // starts from. A slice on a sibling lane (overlapping without nesting)
  // neither ends nor starts a gap.
  StatsBuilder b;
  const LaunchRecord l = Launch(0, "k", 0, 1000, 1);
  const WarpRecord w = Warp(0, 0, 0, 0);
  b.OnLaunch(l);
  b.OnWarp(l, w);
  b.OnSlice(l, w, Slice("a", 100, 500, 1));
  b.OnSlice(l, w, Slice("b", 50, 80, 1));
  SliceRecord sibling = Slice("x", 510, 520, 1);
  sibling.lane = 1;
  b.OnSlice(l, w, sibling);
  b.OnSlice(l, w, Slice("c", 530, 600, 1));
  b.OnLaunchEnd(l);
  const RunStats run = b.Build();
  ASSERT_EQ(run.gaps.size(), 1u);
  EXPECT_EQ(run.gaps[0].start_ns, 500u);
  EXPECT_EQ(run.gaps[0].length_ns, 30u);
  EXPECT_EQ(run.gaps[0].before, "a");
}

TEST(RunStatsTest, InstantsPerKernelAndName) {
  const RunStats run = BuildRun();
  const std::vector<InstantStats>& gemm = run.kernels[0].instants;
  ASSERT_EQ(gemm.size(), 2u);
  EXPECT_EQ(gemm[0].name, "mark");
  EXPECT_EQ(gemm[0].count, 1u);
  EXPECT_EQ(gemm[0].unmatched_ends, 0u);
  EXPECT_EQ(gemm[1].name, "oops");
  EXPECT_EQ(gemm[1].unmatched_ends, 1u);
  ASSERT_EQ(run.kernels[1].instants.size(), 1u);
  EXPECT_EQ(run.kernels[1].instants[0].name, "mark");
}

TEST(RunStatsTest, LaunchesThatNeverEndedAreCountedByBuild) {
  StatsBuilder b;
  const LaunchRecord l = Launch(0, "k", 0, 100, 1);
  const WarpRecord w0 = Warp(0, 0, 0, 0), w1 = Warp(1, 1, 0, 0);
  b.OnLaunch(l);
  b.OnWarp(l, w0);
  b.OnSlice(l, w0, Slice("r", 0, 10, 1));
  b.OnWarp(l, w1);
  b.OnSlice(l, w1, Slice("r", 0, 30, 1));
  const RunStats run = b.Build();
  ASSERT_EQ(run.kernels.size(), 1u);
  EXPECT_EQ(run.launches, 1u);
  EXPECT_EQ(run.kernels[0].warp_time_ns, 200u);
  const RegionStats& r = run.kernels[0].regions.at(0);
  EXPECT_EQ(r.per_warp.units, 2u);
  EXPECT_EQ(r.per_warp.max_ns, 30u);
  EXPECT_DOUBLE_EQ(r.per_warp.mean_ns, 20.0);
}

// Feeds `values` as one region's slices of one warp (ns = v, cycles = 2v).
RegionStats OneRegion(const std::vector<uint64_t>& values) {
  StatsBuilder b(0);
  const LaunchRecord l = Launch(0, "k", 0, 1, 1);
  const WarpRecord w = Warp(0, 0, 0, 0);
  b.OnLaunch(l);
  b.OnWarp(l, w);
  uint64_t t = 0;
  for (uint64_t v : values) {
    b.OnSlice(l, w, Slice("r", t, t + v, static_cast<uint32_t>(2 * v)));
    t += v;
  }
  b.OnLaunchEnd(l);
  return b.Build().kernels.at(0).regions.at(0);
}

TEST(RunStatsPercentileTest, ExactUpToTheLimit) {
  // 1..65536, shuffled: p50 = rank 32768 -> 32768, p95 = rank ceil(62259.2) = 62260.
  ASSERT_EQ(kExactSamples, 65536u);
  std::vector<uint64_t> values;
  for (uint64_t i = 0; i < 65536; ++i) values.push_back((i * 40503 + 7) % 65536 + 1);  // a permutation
  const RegionStats r = OneRegion(values);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.count, 65536u);
  ExpectDurations(r.ns, 65536ull * 65537 / 2, 65537.0 / 2, 32768, 62260, 65536);
  ExpectDurations(r.cycles, 65536ull * 65537, 65537.0, 65536, 124520, 131072);
}

TEST(RunStatsPercentileTest, HistogramBeyondTheLimitWithinTheStatedError) {
  // 1..200000, shuffled: exact p50 = 100000, p95 = 190000.
  const uint64_t n = 200000;
  std::vector<uint64_t> values;
  for (uint64_t i = 0; i < n; ++i) values.push_back((i * 7919 + 13) % n + 1);  // 7919 is coprime to 2^6 x 5^5
  const RegionStats r = OneRegion(values);
  EXPECT_FALSE(r.exact);
  EXPECT_EQ(r.count, n);
  // count, total, mean and max stay exact.
  EXPECT_EQ(r.ns.total, n * (n + 1) / 2);
  EXPECT_DOUBLE_EQ(r.ns.mean, (n + 1) / 2.0);
  EXPECT_EQ(r.ns.max, n);
  EXPECT_EQ(r.cycles.max, 2 * n);
  auto within = [](uint64_t got, uint64_t exact) {
    return std::fabs(static_cast<double>(got) - static_cast<double>(exact)) <= kHistogramRelativeError * exact;
  };
  EXPECT_TRUE(within(r.ns.p50, 100000)) << r.ns.p50;
  EXPECT_TRUE(within(r.ns.p95, 190000)) << r.ns.p95;
  EXPECT_TRUE(within(r.cycles.p50, 200000)) << r.cycles.p50;
  EXPECT_TRUE(within(r.cycles.p95, 380000)) << r.cycles.p95;
  EXPECT_LE(kHistogramRelativeError, 0.01);
}

TEST(RunStatsPercentileTest, OneSampleOverTheLimitSwitchesToTheHistogram) {
  // 32769 x 1000003 then 32768 x 3000007: p50 = rank 32769 -> 1000003,
  // p95 = rank 62261 -> 3000007. 1000003 lies in [999424, 1007616)
  // (2^19 + 58 x 2^13): the histogram reports that bucket's midpoint,
  // 1003520 (0.35 % off).
  std::vector<uint64_t> values(32769, 1000003);
  values.insert(values.end(), 32767, 3000007);
  const RegionStats exact = OneRegion(values);
  EXPECT_TRUE(exact.exact);
  EXPECT_EQ(exact.ns.p50, 1000003u);

  values.push_back(3000007);
  const RegionStats estimated = OneRegion(values);
  EXPECT_FALSE(estimated.exact);
  EXPECT_EQ(estimated.ns.p50, 1003520u);
  // 3000007 is in [2981888, 3014656) (2^21 + 27 x 2^15): midpoint 2998272.
  EXPECT_EQ(estimated.ns.p95, 2998272u);
  EXPECT_EQ(estimated.ns.max, 3000007u);
  EXPECT_EQ(estimated.ns.total, 32769ull * 1000003 + 32768ull * 3000007);

  // A midpoint beyond the exact max (or min) is clamped to it.
  const RegionStats same = OneRegion(std::vector<uint64_t>(kExactSamples + 1, 1000003));
  EXPECT_FALSE(same.exact);
  EXPECT_EQ(same.ns.p50, 1000003u);
  EXPECT_EQ(same.ns.p95, 1000003u);
}

TEST(RunStatsPercentileTest, HeavyTailKeepsItsShape) {
  // 99 % at 1 us, 1 % at 1 s, 100000 slices: p50 and p95 stay at 1 us.
  std::vector<uint64_t> values;
  for (int i = 0; i < 100000; ++i) values.push_back(i % 100 == 0 ? 1000000000 : 1000);
  const RegionStats r = OneRegion(values);
  EXPECT_FALSE(r.exact);
  EXPECT_NEAR(static_cast<double>(r.ns.p50), 1000, 1000 * kHistogramRelativeError);
  EXPECT_NEAR(static_cast<double>(r.ns.p95), 1000, 1000 * kHistogramRelativeError);
  EXPECT_EQ(r.ns.max, 1000000000u);
}

// ---- files ----

std::string TempBase(const std::string& tag) {
  return ::testing::TempDir() + "run_stats_test_" + tag + "_" + std::to_string(getpid());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One warp of "tile<float, 4>" over [0, 1000) on SM 3: a 0-100 (200 cycles),
// a 200-500 (600 cycles), `say "hi"` 600-700 (50 cycles).
void FeedTile(trace::TraceSink* sink) {
  const LaunchRecord l = Launch(0, "tile<float, 4>", 0, 1000, 1);
  const WarpRecord w = Warp(0, 3, 0, 0);
  sink->OnLaunch(l);
  sink->OnWarp(l, w);
  sink->OnSlice(l, w, Slice("a", 0, 100, 200));
  sink->OnSlice(l, w, Slice("a", 200, 500, 600));
  sink->OnSlice(l, w, Slice("say \"hi\"", 600, 700, 50));
  const uint32_t order[] = {0};
  sink->OnLaunchEnd(l, order, 1);
}

TEST(StatsSinkTest, WritesCsvAndJsonBesideTheTrace) {
  const std::string base = TempBase("files");
  StatsSink sink(base);
  EXPECT_EQ(sink.json_path(), base + ".stats.json");
  EXPECT_EQ(sink.csv_path(), base + ".stats.csv");
  FeedTile(&sink);
  CollectorSummary summary;
  summary.lost_total = 7;
  ASSERT_TRUE(sink.Finish(summary)) << sink.error();
  EXPECT_EQ(sink.error(), "");
  EXPECT_EQ(sink.stats().lost_events, 7u);

  EXPECT_EQ(ReadFile(sink.csv_path()),
            "kernel,region,launches,count,unterminated,total_ns,mean_ns,p50_ns,p95_ns,max_ns,"
            "total_cycles,mean_cycles,p50_cycles,p95_cycles,max_cycles,percentiles_exact,share,"
            "sms,sm_max_ns,sm_mean_ns,sm_imbalance,warps,warp_max_ns,warp_mean_ns,warp_imbalance\n"
            "\"tile<float, 4>\",a,1,2,0,400,200.0,100,300,300,800,400.0,200,600,600,true,0.400000,"
            "1,400,400.0,1.0000,1,400,400.0,1.0000\n"
            "\"tile<float, 4>\",\"say \"\"hi\"\"\",1,1,0,100,100.0,100,100,100,50,50.0,50,50,50,true,0.100000,"
            "1,100,100.0,1.0000,1,100,100.0,1.0000\n");

  RunStats back;
  std::string error;
  ASSERT_TRUE(ReadStatsFile(sink.json_path(), &back, &error)) << error;
  EXPECT_EQ(ToJson(back), ToJson(sink.stats()));
  EXPECT_EQ(back.lost_events, 7u);
  ASSERT_EQ(back.gaps.size(), 2u);  // a->a 100 at 100, a->say "hi" 100 at 500
  EXPECT_EQ(back.gaps[1].after, "say \"hi\"");
  unlink(sink.json_path().c_str());
  unlink(sink.csv_path().c_str());
}

TEST(StatsSinkTest, NamesThatAreNotUtf8AreReplacedNotThrown) {
  const std::string base = TempBase("utf8");
  StatsSink sink(base);
  const LaunchRecord l = Launch(0, "k\xff", 0, 100, 1);
  const WarpRecord w = Warp(0, 0, 0, 0);
  sink.OnLaunch(l);
  sink.OnWarp(l, w);
  sink.OnSlice(l, w, Slice("r\xc3", 0, 10, 1));
  sink.OnLaunchEnd(l, nullptr, 0);
  ASSERT_TRUE(sink.Finish(CollectorSummary())) << sink.error();
  RunStats back;
  std::string error;
  ASSERT_TRUE(ReadStatsFile(sink.json_path(), &back, &error)) << error;
  EXPECT_EQ(back.kernels.at(0).kernel, "k\xef\xbf\xbd");  // U+FFFD
  EXPECT_EQ(back.kernels.at(0).regions.at(0).name, "r\xef\xbf\xbd");
  unlink(sink.json_path().c_str());
  unlink(sink.csv_path().c_str());
}

TEST(StatsSinkTest, AFileThatCannotBeWrittenIsReportedNotThrown) {
  const std::string base = TempBase("missing_dir") + "/no/such/dir/run";
  StatsSink sink(base);
  FeedTile(&sink);
  EXPECT_FALSE(sink.Finish(CollectorSummary()));
  EXPECT_NE(sink.error().find(base + ".stats.json"), std::string::npos) << sink.error();
  EXPECT_NE(sink.error().find("No such file or directory"), std::string::npos) << sink.error();
  EXPECT_NE(sink.error().find("check that the directory exists"), std::string::npos) << sink.error();
  EXPECT_FALSE(sink.Flush());
  // The statistics are there to print all the same.
  EXPECT_EQ(sink.stats().kernels.at(0).regions.at(0).ns.total, 400u);
}

TEST(StatsJsonTest, RoundTripKeepsEveryField) {
  RunStats run = BuildRun();
  run.lost_events = 3;
  run.kernels[1].regions[0].share.reset();
  const nlohmann::json j = ToJson(run);
  EXPECT_EQ(j["format"], "smprof-stats");
  EXPECT_EQ(j["version"], kStatsFormatVersion);
  EXPECT_TRUE(j["kernels"][1]["regions"][0]["share"].is_null());
  RunStats back;
  std::string error;
  ASSERT_TRUE(FromJson(nlohmann::json::parse(j.dump()), &back, &error)) << error;
  EXPECT_EQ(ToJson(back), j);
  const RegionStats& compute = Region(back.kernels[0], "compute");
  EXPECT_EQ(compute.unterminated, 1u);
  EXPECT_DOUBLE_EQ(compute.ns.mean, 550.0 / 3);
  EXPECT_DOUBLE_EQ(*compute.share, 550.0 / 3500);
  EXPECT_EQ(compute.slowest_warp.launch_id, 7u);
  EXPECT_FALSE(back.kernels[1].regions[0].share.has_value());
  EXPECT_EQ(back.gaps.at(0).where.block[0], 1u);
  ASSERT_EQ(back.open_ranges.size(), 1u);
  EXPECT_EQ(back.open_ranges[0].region, "compute");
  EXPECT_EQ(back.open_ranges[0].where.warp, 1u);
}

// Each slice without an END is listed with its warp and when it began (the
// earliest kOpenRangesKept of the run): where the warps of a kernel still
// running were when it was read.
TEST(RunStatsTest, OpenRangesSayWhereWarpsWere) {
  const RunStats run = BuildRun();
  ASSERT_EQ(run.open_ranges.size(), 1u);
  const OpenRange& o = run.open_ranges[0];
  EXPECT_EQ(o.kernel, "gemm");
  EXPECT_EQ(o.region, "compute");
  EXPECT_EQ(o.since_ns, 1100u);
  EXPECT_EQ(o.where.sm, 2u);
  EXPECT_EQ(o.where.block[0], 1u);
  EXPECT_EQ(o.where.warp, 1u);
  EXPECT_EQ(o.where.launch_id, 7u);

  StatsBuilder b;
  const LaunchRecord l = Launch(0, "stuck", 0, 100, 3);
  b.OnLaunch(l);
  for (uint32_t i = 0; i < kOpenRangesKept + 5; ++i) {
    const WarpRecord w = Warp(i, 1, i, 0);
    b.OnWarp(l, w);
    b.OnSlice(l, w, Unterminated("mma", 1000 - i, 2000));  // later warps began earlier
  }
  b.OnLaunchEnd(l);
  const RunStats many = b.Build();
  ASSERT_EQ(many.open_ranges.size(), kOpenRangesKept);
  EXPECT_EQ(many.open_ranges.front().since_ns, 1000u - (kOpenRangesKept + 4));
  EXPECT_EQ(many.open_ranges.back().since_ns, 1000u - 5);
  const std::string text = RenderText(many);
  EXPECT_NE(text.find("ranges never ended: where warps were when a running kernel was read, or a missing END (the "
                      "first 32 of 37)"),
            std::string::npos)
      << text;
}

TEST(StatsJsonTest, ErrorsNameTheFieldAndTheFix) {
  const nlohmann::json good = ToJson(BuildRun());
  RunStats out;
  std::string error;

  EXPECT_FALSE(FromJson(nlohmann::json::array(), &out, &error));
  EXPECT_NE(error.find("not a smprof stats file"), std::string::npos) << error;

  nlohmann::json j = good;
  j["version"] = 2;
  EXPECT_FALSE(FromJson(j, &out, &error));
  EXPECT_NE(error.find("version"), std::string::npos) << error;
  EXPECT_NE(error.find("read it with the smprof that wrote it"), std::string::npos) << error;

  j = good;
  j["kernels"][0]["regions"][1]["ns"].erase("p95");
  EXPECT_FALSE(FromJson(j, &out, &error));
  EXPECT_EQ(error, "kernels[0].regions[1].ns.p95: missing");

  j = good;
  j["kernels"][0]["regions"][0]["count"] = "4";
  EXPECT_FALSE(FromJson(j, &out, &error));
  EXPECT_EQ(error, "kernels[0].regions[0].count: expected an unsigned integer, got \"4\"");

  j = good;
  j["gaps"][0]["warp"]["block"] = {1, 2};
  EXPECT_FALSE(FromJson(j, &out, &error));
  EXPECT_EQ(error, "gaps[0].warp.block: expected [x, y, z]");

  const std::string path = TempBase("not_json") + ".stats.json";
  std::ofstream(path) << "{\"format\": ";
  EXPECT_FALSE(ReadStatsFile(path, &out, &error));
  EXPECT_EQ(error.rfind(path + " is not JSON", 0), 0u) << error;
  unlink(path.c_str());
  EXPECT_FALSE(ReadStatsFile(path, &out, &error));
  EXPECT_EQ(error, "cannot open stats file " + path);
}

// ---- diff ----

RegionStats Made(const std::string& name, uint64_t count, double mean, uint64_t p95) {
  RegionStats r;
  r.name = name;
  r.count = count;
  r.ns.mean = mean;
  r.ns.p95 = p95;
  r.ns.total = static_cast<uint64_t>(mean * count);
  return r;
}

TEST(StatsDiffTest, RegionByRegion) {
  RunStats a, b;
  a.kernels.push_back({"k", 1, 1, 1, 1, {Made("r1", 10, 200, 400), Made("gone", 5, 50, 60)}, {}});
  b.kernels.push_back({"k", 1, 1, 1, 1, {Made("r1", 12, 100, 300), Made("new", 3, 30, 40)}, {}});
  b.kernels.push_back({"k2", 1, 1, 1, 1, {Made("only", 1, 10, 10)}, {}});
  const std::vector<RegionDiff> d = Diff(a, b);
  ASSERT_EQ(d.size(), 4u);

  EXPECT_EQ(d[0].kernel, "k");
  EXPECT_EQ(d[0].region, "r1");
  EXPECT_EQ(d[0].presence, RegionDiff::Presence::kBoth);
  EXPECT_EQ(d[0].count_a, 10u);
  EXPECT_EQ(d[0].count_b, 12u);
  ASSERT_TRUE(d[0].speedup.has_value());
  EXPECT_DOUBLE_EQ(*d[0].speedup, 2.0);           // 200 / 100
  EXPECT_DOUBLE_EQ(*d[0].p95_change_pct, -25.0);  // (300 - 400) / 400

  EXPECT_EQ(d[1].region, "gone");
  EXPECT_EQ(d[1].presence, RegionDiff::Presence::kRemoved);
  EXPECT_EQ(d[1].count_b, 0u);
  EXPECT_FALSE(d[1].speedup.has_value());
  EXPECT_EQ(d[2].region, "new");
  EXPECT_EQ(d[2].presence, RegionDiff::Presence::kAdded);
  EXPECT_EQ(d[2].count_b, 3u);
  EXPECT_EQ(d[3].kernel, "k2");
  EXPECT_EQ(d[3].presence, RegionDiff::Presence::kAdded);

  const nlohmann::json j = DiffToJson(d);
  EXPECT_EQ(j["format"], "smprof-stats-diff");
  EXPECT_EQ(j["regions"][0]["status"], "both");
  EXPECT_DOUBLE_EQ(j["regions"][0]["speedup"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["regions"][0]["p95_change_pct"].get<double>(), -25.0);
  EXPECT_EQ(j["regions"][1]["status"], "removed");
  EXPECT_TRUE(j["regions"][1]["speedup"].is_null());
  EXPECT_EQ(j["regions"][2]["status"], "added");

  const std::string text = RenderDiff(d);
  EXPECT_NE(text.find("kernel k\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kernel k2\n"), std::string::npos) << text;
  // r1: 10 -> 12, 200 ns -> 100 ns, 2.00x, 400 ns -> 300 ns, -25.0 %.
  EXPECT_NE(
      text.find(
          "  r1                         10        12    200 ns    100 ns    2.00x    400 ns    300 ns  -25.0 %\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("gone (removed)"), std::string::npos) << text;
  EXPECT_NE(text.find("new (added)"), std::string::npos) << text;
}

TEST(StatsDiffTest, SameRunIsNoChange) {
  const RunStats run = BuildRun();
  for (const RegionDiff& d : Diff(run, run)) {
    EXPECT_EQ(d.presence, RegionDiff::Presence::kBoth) << d.region;
    ASSERT_TRUE(d.speedup.has_value()) << d.region;
    EXPECT_DOUBLE_EQ(*d.speedup, 1.0);
    EXPECT_DOUBLE_EQ(*d.p95_change_pct, 0.0);
  }
}

// ---- text ----

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

bool HasLineStartingWith(const std::string& text, const std::string& prefix) {
  for (const std::string& line : Lines(text)) {
    if (line.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

TEST(StatsTextTest, TablesOfRegionsImbalanceAndGaps) {
  RunStats run = BuildRun();
  run.lost_events = 12;
  const std::string text = RenderText(run);
  for (const std::string& line : Lines(text)) EXPECT_LE(line.size(), 100u) << line;
  EXPECT_NE(text.find("smprof stats: 3 launches of 2 kernels, 12 slices (1 unterminated), 3 instants\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("warning: 12 events"), std::string::npos) << text;
  EXPECT_NE(text.find("kernel gemm: 2 launches, 4 warps recorded, mean span 750 ns\n"), std::string::npos) << text;
  // load: 4 slices, 740 ns total, mean 185, p50 100, p95 400, max 400,
  // share 740/3500 = 21.1 %, mean cycles 277.5 -> 278.
  EXPECT_NE(
      text.find("  load                      4    740 ns    185 ns    100 ns    400 ns    400 ns   21.1 %       278\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("unterminated (no END; not in the durations): compute 1\n"), std::string::npos) << text;
  // Imbalance of load: SMs 500/370 = 1.35, warps 400/185 = 2.16.
  EXPECT_NE(
      text.find("  load                  2      1.35  GPU0 SM1         4      2.16  pid 100 #8 SM1 b(0,0,0) w0\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("instants: mark 1, oops 1 (1 unmatched END)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kernel saxpy: 1 launch, 1 warp recorded"), std::string::npos) << text;
  EXPECT_NE(text.find("    0.000001 s  gemm                compute                 pid 100 #7 SM2 b(1,0,0) w1\n"),
            std::string::npos)
      << text;
  // The largest gap: 300 ns at 1400 ns = 0.000001 s.
  EXPECT_NE(
      text.find("    300 ns   0.000001 s  gemm                compute -> store        pid 100 #7 SM2 b(1,0,0) w0\n"),
      std::string::npos)
      << text;

  const std::string top2 = RenderText(run, TextOptions{2});
  EXPECT_NE(top2.find("... 2 more regions in the .stats.csv"), std::string::npos) << top2;
  EXPECT_FALSE(HasLineStartingWith(top2, "  store")) << top2;
}

TEST(StatsTextTest, UnitsAndApproximatePercentiles) {
  std::vector<uint64_t> values(kExactSamples + 1, 12400);
  values[0] = 2500000;
  StatsBuilder b(0);
  const LaunchRecord l = Launch(0, "k", 0, 1, 1);
  const WarpRecord w = Warp(0, 0, 0, 0);
  b.OnLaunch(l);
  b.OnWarp(l, w);
  b.OnSlice(l, w, Slice("long\x1b[31mname that does not fit", 0, 1, 1));
  uint64_t t = 0;
  for (uint64_t v : values) {
    b.OnSlice(l, w, Slice("r", t, t + v, 1));
    t += v;
  }
  b.OnLaunchEnd(l);
  const std::string text = RenderText(b.Build());
  // 12400 ns = 12.4 us (its bucket's midpoint is 12352), approximate
  // percentiles marked "~", max 2.5 ms.
  EXPECT_NE(text.find("~12.4 us"), std::string::npos) << text;
  EXPECT_NE(text.find("2.5 ms"), std::string::npos) << text;
  // The escape character is not printed; the name is cut with "...".
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_NE(text.find("long?[31mname ..."), std::string::npos) << text;
}

TEST(StatsAdviceTest, OnlyTracesAboveAGigabyteGetAdviceNamingTheBiggestKernels) {
  RunStats run;
  for (const auto& [name, counts] : std::vector<std::pair<std::string, std::vector<uint64_t>>>{
           {"small", {5}}, {"big", {700, 300}}, {"mid", {60}}, {"tiny", {1}}}) {
    KernelStats k;
    k.kernel = name;
    for (uint64_t c : counts) {
      RegionStats r;
      r.count = c;
      k.regions.push_back(r);
    }
    run.kernels.push_back(k);
  }
  EXPECT_EQ(LargeTraceAdvice(kLargeTraceBytes, run), "");
  const std::string advice = LargeTraceAdvice(3000000000ull, run);
  EXPECT_EQ(advice.rfind("the trace is 3.0 GB, more than the Perfetto UI opens", 0), 0u) << advice;
  EXPECT_NE(advice.find("--warps 0"), std::string::npos) << advice;
  EXPECT_NE(advice.find("(most recorded: big 1000 ranges, mid 60 ranges, small 5 ranges)"), std::string::npos)
      << advice;
  EXPECT_EQ(advice.find("tiny"), std::string::npos) << advice;
  EXPECT_EQ(LargeTraceAdvice(2000000000ull, RunStats{}).find("most recorded"), std::string::npos);
}

// --- the device API's records (docs/device-api.md) -------------------------------

SliceRecord Valued(std::string_view name, uint64_t begin_ns, uint64_t end_ns, int64_t value) {
  SliceRecord s = Slice(name, begin_ns, end_ns, 0);
  s.value.present = true;
  s.value.value = value;
  return s;
}

SliceRecord PhaseSlice(std::string_view name, uint64_t begin_ns, uint64_t end_ns) {
  SliceRecord s = Slice(name, begin_ns, end_ns, 2 * (end_ns - begin_ns));
  s.phase = true;
  return s;
}

InstantRecord ValuedInstant(std::string_view name, uint64_t ts_ns, int64_t value, bool counter = false) {
  InstantRecord i = Instant(name, ts_ns);
  i.value.present = true;
  i.value.counter = counter;
  i.value.value = value;
  return i;
}

trace::AsyncSpanRecord AsyncSpan(std::string_view name, uint64_t begin_ns, uint64_t end_ns, const WarpRecord* b,
                                 const WarpRecord* e) {
  trace::AsyncSpanRecord a;
  a.name = name;
  a.begin_ns = begin_ns;
  a.end_ns = end_ns;
  a.begin_warp = b;
  a.end_warp = e;
  return a;
}

// One launch of "pipe" (0..1000 ns, two warps): phases, a range named like
// a phase, values on slices and instants, counter samples, async spans.
//   warp 0: phase load [0,100], range load [50,80] (value 7), phase mma [100,400],
//           instant tile 3 and -5, counter inflight 2, 6, 1
//   warp 1: phase load [0,300], range load [10,20] (value -1), instant tile (no value)
//   async stage: [100,250] w0->w1, [200,260] w0->w1, [300,1000] unterminated,
//                [500,500] unmatched end
void FeedDeviceApi(trace::TraceSink* sink) {
  const LaunchRecord l = Launch(0, "pipe", 0, 1000, 3);
  const WarpRecord w0 = Warp(0, 1, 0, 0), w1 = Warp(1, 1, 0, 1);
  sink->OnLaunch(l);
  sink->OnWarp(l, w0);
  sink->OnWarp(l, w1);
  sink->OnSlice(l, w0, PhaseSlice("load", 0, 100));
  sink->OnSlice(l, w0, Valued("load", 50, 80, 7));
  sink->OnSlice(l, w0, PhaseSlice("mma", 100, 400));
  sink->OnInstant(l, w0, ValuedInstant("tile", 120, 3));
  sink->OnInstant(l, w0, ValuedInstant("tile", 130, -5));
  sink->OnInstant(l, w0, ValuedInstant("inflight", 140, 2, true));
  sink->OnInstant(l, w0, ValuedInstant("inflight", 150, 6, true));
  sink->OnInstant(l, w0, ValuedInstant("inflight", 160, 1, true));
  sink->OnSlice(l, w1, PhaseSlice("load", 0, 300));
  sink->OnSlice(l, w1, Valued("load", 10, 20, -1));
  sink->OnInstant(l, w1, Instant("tile", 170));
  sink->OnAsyncSpan(l, AsyncSpan("stage", 100, 250, &w0, &w1));
  sink->OnAsyncSpan(l, AsyncSpan("stage", 200, 260, &w0, &w1));
  sink->OnAsyncSpan(l, AsyncSpan("stage", 300, 1000, &w0, nullptr));
  sink->OnAsyncSpan(l, AsyncSpan("stage", 500, 500, nullptr, &w1));
  const uint32_t order[] = {0, 1};
  sink->OnLaunchEnd(l, order, 2);
}

RunStats BuildDeviceApiRun() {
  StatsSink sink(TempBase("device_api_build"));
  FeedDeviceApi(&sink);
  return sink.Build(CollectorSummary{});
}

TEST(DeviceApiStatsTest, PhasesAreRegionsMarkedApartFromRangesOfTheSameName) {
  const RunStats run = BuildDeviceApiRun();
  ASSERT_EQ(run.kernels.size(), 1u);
  const KernelStats& k = run.kernels[0];
  ASSERT_EQ(k.regions.size(), 3u);  // by total: load (phase) 400, mma (phase) 300, load (range) 40
  EXPECT_EQ(k.regions[0].name, "load");
  EXPECT_TRUE(k.regions[0].phase);
  EXPECT_EQ(k.regions[0].count, 2u);
  EXPECT_EQ(k.regions[0].ns.total, 400u);
  EXPECT_EQ(k.regions[0].ns.max, 300u);
  EXPECT_EQ(k.regions[0].cycles.total, 800u);
  EXPECT_EQ(k.regions[1].name, "mma");
  EXPECT_TRUE(k.regions[1].phase);
  EXPECT_EQ(k.regions[1].ns.total, 300u);
  EXPECT_EQ(k.regions[2].name, "load");
  EXPECT_FALSE(k.regions[2].phase);
  EXPECT_EQ(k.regions[2].count, 2u);
  EXPECT_EQ(k.regions[2].ns.total, 40u);
  EXPECT_EQ(run.slices, 5u);
}

TEST(DeviceApiStatsTest, ValuesPerNameAndSource) {
  const RunStats run = BuildDeviceApiRun();
  const KernelStats& k = run.kernels[0];
  ASSERT_EQ(k.values.size(), 3u);  // by name, then source
  const ValueStats& inflight = k.values[0];
  EXPECT_EQ(inflight.name, "inflight");
  EXPECT_EQ(inflight.source, ValueStats::Source::kCounter);
  EXPECT_EQ(inflight.count, 3u);
  EXPECT_EQ(inflight.min, 1);
  EXPECT_EQ(inflight.max, 6);
  EXPECT_EQ(inflight.sum, 9);
  EXPECT_DOUBLE_EQ(inflight.mean, 3.0);
  const ValueStats& load = k.values[1];
  EXPECT_EQ(load.name, "load");
  EXPECT_EQ(load.source, ValueStats::Source::kSlice);
  EXPECT_EQ(load.count, 2u);
  EXPECT_EQ(load.min, -1);
  EXPECT_EQ(load.max, 7);
  EXPECT_EQ(load.sum, 6);
  EXPECT_DOUBLE_EQ(load.mean, 3.0);
  const ValueStats& tile = k.values[2];
  EXPECT_EQ(tile.name, "tile");
  EXPECT_EQ(tile.source, ValueStats::Source::kInstant);
  EXPECT_EQ(tile.count, 2u);  // the instant without a value is no value
  EXPECT_EQ(tile.min, -5);
  EXPECT_EQ(tile.max, 3);
  EXPECT_EQ(tile.sum, -2);
  EXPECT_DOUBLE_EQ(tile.mean, -1.0);
  // Counter samples are not instants.
  ASSERT_EQ(k.instants.size(), 1u);
  EXPECT_EQ(k.instants[0].name, "tile");
  EXPECT_EQ(k.instants[0].count, 3u);
  EXPECT_EQ(run.instants, 3u);
}

TEST(DeviceApiStatsTest, ValueSumsSaturateAndMeansStayExact) {
  StatsBuilder b;
  const LaunchRecord l = Launch(0, "k", 0, 100, 1);
  const WarpRecord w = Warp(0, 0, 0, 0);
  b.OnInstant(l, w, ValuedInstant("big", 1, INT64_MAX));
  b.OnInstant(l, w, ValuedInstant("big", 2, INT64_MAX));
  b.OnInstant(l, w, ValuedInstant("small", 3, INT64_MIN));
  b.OnInstant(l, w, ValuedInstant("small", 4, INT64_MIN));
  b.OnLaunchEnd(l);
  const RunStats run = b.Build();
  ASSERT_EQ(run.kernels[0].values.size(), 2u);
  EXPECT_EQ(run.kernels[0].values[0].sum, INT64_MAX);
  EXPECT_DOUBLE_EQ(run.kernels[0].values[0].mean, static_cast<double>(INT64_MAX));
  EXPECT_EQ(run.kernels[0].values[1].sum, INT64_MIN);
  EXPECT_DOUBLE_EQ(run.kernels[0].values[1].mean, static_cast<double>(INT64_MIN));
}

TEST(DeviceApiStatsTest, AsyncSpansByNameLikeRanges) {
  const RunStats run = BuildDeviceApiRun();
  EXPECT_EQ(run.async_spans, 4u);
  const KernelStats& k = run.kernels[0];
  ASSERT_EQ(k.async.size(), 1u);
  const AsyncStats& a = k.async[0];
  EXPECT_EQ(a.name, "stage");
  EXPECT_EQ(a.count, 2u);  // with both ends
  EXPECT_EQ(a.unterminated, 1u);
  EXPECT_EQ(a.unmatched_ends, 1u);
  EXPECT_EQ(a.ns.total, 210u);  // 150 + 60
  EXPECT_DOUBLE_EQ(a.ns.mean, 105.0);
  EXPECT_EQ(a.min_ns, 60u);
  EXPECT_EQ(a.ns.max, 150u);
  EXPECT_EQ(a.ns.p50, 60u);
  EXPECT_TRUE(a.exact);
}

TEST(DeviceApiStatsTest, FilesAndTextShowThem) {
  const std::string base = TempBase("device_api");
  StatsSink sink(base);
  FeedDeviceApi(&sink);
  ASSERT_TRUE(sink.Finish(CollectorSummary{})) << sink.error();
  EXPECT_EQ(ReadFile(sink.csv_path()),
            "kernel,region,launches,count,unterminated,total_ns,mean_ns,p50_ns,p95_ns,max_ns,"
            "total_cycles,mean_cycles,p50_cycles,p95_cycles,max_cycles,percentiles_exact,share,"
            "sms,sm_max_ns,sm_mean_ns,sm_imbalance,warps,warp_max_ns,warp_mean_ns,warp_imbalance,"
            "kind,value_count,value_min,value_max,value_mean,value_sum\n"
            "pipe,load,1,2,0,400,200.0,100,300,300,800,400.0,200,600,600,true,0.200000,"
            "1,400,400.0,1.0000,2,300,200.0,1.5000,phase,,,,,\n"
            "pipe,mma,1,1,0,300,300.0,300,300,300,600,600.0,600,600,600,true,0.150000,"
            "1,300,300.0,1.0000,1,300,300.0,1.0000,phase,,,,,\n"
            "pipe,load,1,2,0,40,20.0,10,30,30,0,0.0,0,0,0,true,0.020000,"
            "1,40,40.0,1.0000,2,30,20.0,1.5000,range,2,-1,7,3,6\n"
            "pipe,stage,1,2,1,210,105.0,60,150,150,,,,,,true,,,,,,,,,,async,,,,,\n"
            "pipe,inflight,1,,,,,,,,,,,,,,,,,,,,,,,counter,3,1,6,3,9\n"
            "pipe,tile,1,,,,,,,,,,,,,,,,,,,,,,,instant,2,-5,3,-1,-2\n");
  RunStats back;
  std::string error;
  ASSERT_TRUE(ReadStatsFile(sink.json_path(), &back, &error)) << error;
  EXPECT_EQ(ToJson(back), ToJson(sink.stats()));
  const nlohmann::json j = ToJson(back);
  EXPECT_EQ(j["async_spans"], 4);
  EXPECT_EQ(j["kernels"][0]["regions"][0]["phase"], true);
  EXPECT_FALSE(j["kernels"][0]["regions"][2].contains("phase"));
  EXPECT_EQ(j["kernels"][0]["values"][0], nlohmann::json({{"name", "inflight"},
                                                          {"source", "counter"},
                                                          {"count", 3},
                                                          {"min", 1},
                                                          {"max", 6},
                                                          {"mean", 3.0},
                                                          {"sum", 9}}));
  EXPECT_EQ(j["kernels"][0]["async_spans"][0]["min_ns"], 60);
  EXPECT_EQ(j["kernels"][0]["async_spans"][0]["unmatched_ends"], 1);
  EXPECT_TRUE(j["definitions"].contains("values"));
  // A bad source names the field.
  nlohmann::json bad = j;
  bad["kernels"][0]["values"][1]["source"] = "gauge";
  EXPECT_FALSE(FromJson(bad, &back, &error));
  EXPECT_NE(error.find("kernels[0].values[1].source"), std::string::npos) << error;

  const std::string text = RenderText(sink.stats());
  for (const std::string& line : Lines(text)) EXPECT_LE(line.size(), 100u) << line;
  EXPECT_NE(text.find("5 slices (0 unterminated), 3 instants, 4 async spans\n"), std::string::npos) << text;
  EXPECT_TRUE(HasLineStartingWith(text, "  load (phase)              2    400 ns")) << text;
  EXPECT_TRUE(HasLineStartingWith(text, "  mma (phase)               1    300 ns")) << text;
  EXPECT_TRUE(HasLineStartingWith(text, "  load                      2     40 ns")) << text;
  EXPECT_NE(text.find("  stage                     2    210 ns    105 ns     60 ns    150 ns    150 ns\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("async spans unterminated / unmatched ENDs (not in the durations): stage 1 / 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  inflight           counter          3            1            6              3"
                      "              9\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  tile               instant          2           -5            3             -1"
                      "             -2\n"),
            std::string::npos)
      << text;
  unlink(sink.json_path().c_str());
  unlink(sink.csv_path().c_str());
}

// A phase and a range of the same name are compared apart.
TEST(DeviceApiStatsTest, DiffKeepsPhasesApartFromRanges) {
  const RunStats a = BuildDeviceApiRun();
  RunStats b = a;
  b.kernels[0].regions.erase(b.kernels[0].regions.begin());  // the phase "load"
  const std::vector<RegionDiff> d = Diff(a, b);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].region, "load (phase)");
  EXPECT_EQ(d[0].presence, RegionDiff::Presence::kRemoved);
  EXPECT_EQ(d[1].region, "mma (phase)");
  EXPECT_EQ(d[1].presence, RegionDiff::Presence::kBoth);
  EXPECT_EQ(d[2].region, "load");
  EXPECT_EQ(d[2].presence, RegionDiff::Presence::kBoth);
  EXPECT_EQ(d[2].count_b, 2u);
}

}  // namespace
}  // namespace smprof::stats
