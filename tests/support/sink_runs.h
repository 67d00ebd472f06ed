// Test helper: synthetic runs delivered to a trace::TraceSink, the way the
// trace builder delivers them (tests/unit/perfetto_sink_test.cc,
// tests/e2e/perfetto_import_test.cc): a small run with every kind of
// record, a warp whose records go back in time, and random nesting on two
// lanes, warp after warp or interleaved, that reports the slices it sent.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "collector/trace_sink.h"

namespace smprof::testing {

inline trace::LaunchRecord SinkLaunch(uint64_t index, uint64_t launch_id, int32_t gpu, uint64_t start, uint64_t end) {
  trace::LaunchRecord l;
  l.index = index;
  l.process = 0;
  l.pid = 4242;
  l.launch_id = launch_id;
  l.kernel = "_Z4gemmILi128EEvPfS0_";
  l.label = "gemm<128>";
  l.gpu = gpu;
  l.device = 1;
  l.stream = 7;
  l.grid[0] = 4, l.grid[1] = 2, l.grid[2] = 1;
  l.block[0] = 128, l.block[1] = 1, l.block[2] = 1;
  l.start_ns = start;
  l.end_ns = end;
  l.correlation_id = 99;
  l.registers = 64;
  return l;
}

// The track name PerfettoSink gives SinkLaunch(..., launch_id, gpu, ...).
inline std::string SinkLaunchTrack(uint64_t launch_id, int32_t gpu) {
  const std::string where = gpu >= 0 ? "GPU " + std::to_string(gpu) + " (cuda:1)" : "cuda:1";
  return "#" + std::to_string(launch_id) + " gemm<128> | " + where +
         " | stream 7 | grid(4,2,1) block(128,1,1) | pid 4242";
}

inline trace::WarpRecord SinkWarp(uint32_t index, uint16_t sm, uint32_t bx, uint32_t by, uint16_t warp) {
  trace::WarpRecord w;
  w.index = index;
  w.sm = sm;
  w.block[0] = bx, w.block[1] = by, w.block[2] = 0;
  w.warp = warp;
  return w;
}

// cycles: twice the duration.
inline trace::SliceRecord SinkSlice(std::string_view name, uint64_t begin, uint64_t end, uint32_t depth,
                                    uint32_t lane = 0) {
  trace::SliceRecord s;
  s.name = name;
  s.begin_ns = begin;
  s.end_ns = end;
  s.cycles = static_cast<uint32_t>((end - begin) * 2);
  s.depth = depth;
  s.lane = lane;
  return s;
}

inline trace::InstantRecord SinkInstant(std::string_view name, uint64_t ts, bool unmatched = false) {
  trace::InstantRecord i;
  i.name = name;
  i.ts_ns = ts;
  i.unmatched_end = unmatched;
  return i;
}

inline trace::ProcessRecord SinkProcess() {
  trace::ProcessRecord p;
  p.index = 0;
  p.pid = 4242;
  p.command = "./app --n 3";
  return p;
}

inline constexpr const char* kSinkGpuTrack =
    "GPU 0 | NVIDIA H100 | 0000:19:00.0 | GPU-01234567-89ab-cdef-0123-456789abcdef";

// One GPU, one process, two launches, warps one after another (each reusing
// the sequence id of the one before), every kind of record, two harvests, a
// notice, a lost process. Launch 7 on GPU 0:
//   SM 012 / block (1,0,0) / warp 0: mainloop[1100,5000] > {load[1100,1500],
//     mma[1500,4000]}, tick@2000, epilogue[5000,6000]; lane 1: copy[1800,5500]
//   SM 012 / block (1,0,0) / warp 1: "load (end without begin)"@1200,
//     mainloop[1300,9000] unterminated
//   SM 003 / block (0,1,0) / warp 0: load[2000,2100], load[2100,2300]
// Launch 8: SM 005 / block (0,0,0) / warp 0: load[10100,10200].
inline void WriteSmallRun(trace::TraceSink& sink) {
  sink.OnRun({{"command", {"./app", "--n", "3"}}, {"options", {{"output", "t.pftrace"}, {"overwrite", true}}}});
  trace::GpuRecord gpu;
  gpu.index = 0;
  gpu.name = "NVIDIA H100";
  gpu.uuid = "GPU-01234567-89ab-cdef-0123-456789abcdef";
  gpu.pci_bus_id = "0000:19:00.0";
  gpu.sm_count = 132;
  gpu.cc_major = 9;
  gpu.sm_clock_khz = 1755000;
  gpu.timer_resolution_ns = 32;
  gpu.facts = {{"index", 0},
               {"name", gpu.name},
               {"sm_count", 132},
               {"marker_cost_cycles", {{"default", 12.5}}},
               {"seen_as", nlohmann::json::array()}};
  sink.OnGpu(gpu);
  // As the trace builder does: the process attaches unnamed, then says its command.
  trace::ProcessRecord attached = SinkProcess();
  attached.command = "?";
  sink.OnProcess(attached);
  const trace::ProcessRecord proc = SinkProcess();
  sink.OnProcessNamed(proc);

  const trace::LaunchRecord l = SinkLaunch(0, 7, 0, 1000, 9000);
  sink.OnLaunch(l);
  const trace::WarpRecord w0 = SinkWarp(0, 12, 1, 0, 0), w1 = SinkWarp(1, 12, 1, 0, 1), w2 = SinkWarp(2, 3, 0, 1, 0);
  sink.OnWarp(l, w0);
  sink.OnWarp(l, w1);
  sink.OnWarp(l, w2);
  sink.OnSlice(l, w0, SinkSlice("mainloop", 1100, 5000, 0));
  sink.OnSlice(l, w0, SinkSlice("load", 1100, 1500, 1));
  sink.OnSlice(l, w0, SinkSlice("mma", 1500, 4000, 1));
  sink.OnSlice(l, w0, SinkSlice("copy", 1800, 5500, 0, 1));
  sink.OnInstant(l, w0, SinkInstant("tick", 2000));
  sink.OnSlice(l, w0, SinkSlice("epilogue", 5000, 6000, 0));
  sink.OnInstant(l, w1, SinkInstant("load", 1200, true));
  trace::SliceRecord open = SinkSlice("mainloop", 1300, 9000, 0);
  open.unterminated = true;
  open.cycles = 0;
  open.note = "the process ended without detaching";
  sink.OnSlice(l, w1, open);
  sink.OnSlice(l, w2, SinkSlice("load", 2000, 2100, 0));
  sink.OnSlice(l, w2, SinkSlice("load", 2100, 2300, 0));
  const uint32_t order[] = {2, 0, 1};
  sink.OnLaunchEnd(l, order, 3);

  trace::HarvestRecord h;
  h.ts_ns = 9500;
  h.reason = 1;  // sync
  h.dropped_events = 3;
  h.lost_so_far = 3;
  sink.OnHarvest(proc, h);

  const trace::LaunchRecord l2 = SinkLaunch(1, 8, 0, 10000, 12000);
  sink.OnLaunch(l2);
  const trace::WarpRecord v0 = SinkWarp(0, 5, 0, 0, 0);
  sink.OnWarp(l2, v0);
  sink.OnSlice(l2, v0, SinkSlice("load", 10100, 10200, 0));
  sink.OnLaunchEnd(l2, order, 1);
  h.ts_ns = 12500;
  h.reason = 2;  // forced drain
  h.dropped_events = 0;
  sink.OnHarvest(proc, h);
  sink.OnNotice(proc, 12600, "stepped_aside", "another profiler holds CUPTI");
  sink.OnProcessLost(proc, 12700);
}

// Launch #1 (no GPU: a root track), one warp: a[1000,2000], b[3000,4000],
// then a flushed episode earlier than b: late[2200,2800] and "late tick"
// @2500, then c[4500,5000].
inline void WriteOutOfOrderRun(trace::TraceSink& sink) {
  const trace::LaunchRecord l = SinkLaunch(0, 1, -1, 0, 10000);
  sink.OnLaunch(l);
  const trace::WarpRecord w = SinkWarp(0, 0, 0, 0, 0);
  sink.OnWarp(l, w);
  sink.OnSlice(l, w, SinkSlice("a", 1000, 2000, 0));
  sink.OnSlice(l, w, SinkSlice("b", 3000, 4000, 0));
  sink.OnSlice(l, w, SinkSlice("late", 2200, 2800, 0));
  sink.OnInstant(l, w, SinkInstant("late tick", 2500));
  sink.OnSlice(l, w, SinkSlice("c", 4500, 5000, 0));
  sink.OnLaunchEnd(l, nullptr, 0);
}

// A slice as a reader finds it: launch track, block, warp track, slice.
struct SentSlice {
  std::string launch, block, warp;
  uint64_t ts, dur;
  uint32_t depth;
  std::string name;
  bool operator<(const SentSlice& o) const {
    return std::tie(launch, block, warp, ts, depth, name, dur) <
           std::tie(o.launch, o.block, o.warp, o.ts, o.depth, o.name, o.dur);
  }
  bool operator==(const SentSlice& o) const {
    return std::tie(launch, block, warp, ts, dur, depth, name) ==
           std::tie(o.launch, o.block, o.warp, o.ts, o.dur, o.depth, o.name);
  }
};

struct SentInstant {
  std::string launch, block, warp;
  uint64_t ts;
  bool operator<(const SentInstant& o) const {
    return std::tie(launch, block, warp, ts) < std::tie(o.launch, o.block, o.warp, o.ts);
  }
  bool operator==(const SentInstant& o) const {
    return std::tie(launch, block, warp, ts) == std::tie(o.launch, o.block, o.warp, o.ts);
  }
};

struct SentRun {
  std::vector<SentSlice> slices;      // sorted
  std::vector<SentInstant> instants;  // "tick", sorted
};

namespace internal {

struct Node {
  const char* name;
  uint64_t begin, end;
  uint32_t depth;
};

// Nested slices in [begin, end] in preorder, with ties everywhere:
// zero-length slices, children starting with their parent or ending with
// it, touching siblings.
inline void Tree(std::mt19937& rng, uint64_t begin, uint64_t end, uint32_t depth, std::vector<Node>* out) {
  static const char* const kNames[] = {"load", "mma", "store", "sync", "epilogue", "wait"};
  uint64_t t = begin;
  std::uniform_int_distribution<int> coin(0, 3);
  while (t < end || (t == end && coin(rng) == 0 && depth < 4)) {
    const uint64_t gap = coin(rng) == 0 ? 0 : rng() % 50;
    const uint64_t b = std::min(end, t + gap);
    const uint64_t e = coin(rng) == 0 ? b : std::min(end, b + rng() % 400);
    out->push_back({kNames[rng() % 6], b, e, depth});
    if (depth < 4 && coin(rng) != 0) Tree(rng, b, e, depth + 1, out);
    if (e == end) break;
    t = e;
  }
}

}  // namespace internal

// `launches` launches one after the other, `warps` warps each, random
// nesting on lanes 0 and 1 with ties everywhere, "tick" instants. With
// `chunk` 0 the warps come one after another, each whole (as the collector
// hands them); otherwise interleaved, `chunk` records of each in turn (so
// every warp comes back after the others, again and again).
inline SentRun WriteRandomRun(trace::TraceSink& sink, uint32_t seed, int launches, int warps, int chunk = 7) {
  std::mt19937 rng(seed);
  SentRun sent;
  for (int li = 0; li < launches; ++li) {
    const trace::LaunchRecord l = SinkLaunch(li, 100 + li, -1, 0, 1u << 20);
    const std::string launch_track = SinkLaunchTrack(100 + li, -1);
    sink.OnLaunch(l);
    std::vector<trace::WarpRecord> warp_records;
    std::vector<std::vector<std::pair<uint32_t, internal::Node>>> records(warps);  // (lane, node), start order
    for (int wi = 0; wi < warps; ++wi) {
      warp_records.push_back(SinkWarp(wi, wi % 3, wi / 4, 0, wi % 4));
      if (chunk != 0) sink.OnWarp(l, warp_records.back());
      std::vector<internal::Node> lane0, lane1;
      internal::Tree(rng, 1000 * li, 1000 * li + 20000, 0, &lane0);
      internal::Tree(rng, 1000 * li + 50, 1000 * li + 15000, 0, &lane1);
      size_t a = 0, b = 0;
      while (a < lane0.size() || b < lane1.size()) {
        if (b == lane1.size() || (a < lane0.size() && lane0[a].begin <= lane1[b].begin)) {
          records[wi].push_back({0, lane0[a++]});
        } else {
          records[wi].push_back({1, lane1[b++]});
        }
      }
    }
    std::vector<size_t> pos(warps, 0);
    for (bool more = true; more;) {
      more = false;
      for (int wi = 0; wi < warps; ++wi) {
        const trace::WarpRecord& w = warp_records[wi];
        const std::string block = "block (" + std::to_string(w.block[0]) + ",0,0)";
        const std::string warp = "warp " + std::to_string(w.warp);
        if (chunk == 0) sink.OnWarp(l, w);
        for (int k = 0; (chunk == 0 || k < chunk) && pos[wi] < records[wi].size(); ++k, ++pos[wi]) {
          const auto& [lane, n] = records[wi][pos[wi]];
          if (rng() % 5 == 0) {
            sink.OnInstant(l, w, SinkInstant("tick", n.begin));
            sent.instants.push_back({launch_track, block, warp, n.begin});
          }
          sink.OnSlice(l, w, SinkSlice(n.name, n.begin, n.end, n.depth, lane));
          sent.slices.push_back(
              {launch_track, block, warp + (lane ? " lane 1" : ""), n.begin, n.end - n.begin, n.depth, n.name});
        }
        more = more || pos[wi] < records[wi].size();
      }
    }
    sink.OnLaunchEnd(l, nullptr, 0);
  }
  std::sort(sent.slices.begin(), sent.slices.end());
  std::sort(sent.instants.begin(), sent.instants.end());
  return sent;
}

// Many small launches (the hardware-centric layout's case): launch i, id
// i + 1, "step" on stream i % 4, [1000 + 250 i, + 800] ns, one block of one
// warp on SM i % sms, slot (i / sms) % slots: work[s+100, s+600] >
// load[s+100, s+300] (depth 1), tick@s+400. A slot is reused every
// sms * slots launches (250 ns apart each): no two warps of a slot overlap
// when sms * slots >= 4. `gpu` -1: no OnGpu (an undescribed GPU).
inline void WriteManyLaunchesRun(trace::TraceSink& sink, uint64_t launches, uint16_t sms = 8, uint16_t slots = 4,
                                 int32_t gpu = 0) {
  if (gpu >= 0) {
    trace::GpuRecord g;
    g.index = static_cast<uint32_t>(gpu);
    g.name = "NVIDIA H100";
    g.sm_count = 132;
    g.facts = {{"index", gpu}, {"name", g.name}};
    sink.OnGpu(g);
  }
  sink.OnProcess(SinkProcess());
  for (uint64_t i = 0; i < launches; ++i) {
    const uint64_t s = 1000 + 250 * i;
    trace::LaunchRecord l = SinkLaunch(i, i + 1, gpu, s, s + 800);
    l.label = "step";
    l.kernel = "_Z4stepv";
    l.stream = 7 + i % 4;
    l.grid[0] = l.grid[1] = 1;
    sink.OnLaunch(l);
    trace::WarpRecord w = SinkWarp(0, static_cast<uint16_t>(i % sms), 0, 0, 0);
    w.hw_warp = static_cast<uint16_t>((i / sms) % slots);
    sink.OnWarp(l, w);
    sink.OnSlice(l, w, SinkSlice("work", s + 100, s + 600, 0));
    sink.OnSlice(l, w, SinkSlice("load", s + 100, s + 300, 1));
    sink.OnInstant(l, w, SinkInstant("tick", s + 400));
    const uint32_t order[] = {0};
    sink.OnLaunchEnd(l, order, 1);
  }
}

inline trace::SliceRecord SinkValueSlice(std::string_view name, uint64_t begin, uint64_t end, int64_t value) {
  trace::SliceRecord s = SinkSlice(name, begin, end, 0);
  s.value.present = true;
  s.value.value = value;
  return s;
}

inline trace::InstantRecord SinkCounter(std::string_view name, uint64_t ts, int64_t value) {
  trace::InstantRecord i = SinkInstant(name, ts);
  i.value.present = true;
  i.value.counter = true;
  i.value.value = value;
  return i;
}

inline trace::AsyncSpanRecord SinkSpan(std::string_view name, uint32_t token, const trace::WarpRecord* begin_warp,
                                       uint64_t begin, const trace::WarpRecord* end_warp, uint64_t end,
                                       uint64_t flow_id) {
  trace::AsyncSpanRecord a;
  a.name = name;
  a.token = token;
  const trace::WarpRecord* w = begin_warp != nullptr ? begin_warp : end_warp;
  std::copy(w->block, w->block + 3, a.block);
  a.begin_warp = begin_warp;
  a.end_warp = end_warp;
  a.begin_ns = begin;
  a.end_ns = end;
  a.flow_id = flow_id;
  return a;
}

// The device API's records (issue 9): values, a phase, counter samples,
// async spans. One GPU, one process; launch 7 [1000, 9000] on GPU 0:
//   SM 012 / block (1,0,0) / warp 0 (slot 0): mma[1100,2000] value 42,
//     inflight 3 @1200, phase load[2000,3000], tile@2500 value -7,
//     inflight 5 @2600
//   SM 012 / block (1,0,0) / warp 1 (slot 1): "x (end without begin)"@1300
//     value 9, wait[1400,4000] value 2^40, inflight 1 @1500
//   SM 012 / block (1,0,0) / warp 2 (slot 2): no record but an async begin
//   SM 003 / block (0,1,0) / warp 0 (slot 0): load[2000,2100]
//   async spans of block (1,0,0), (name token: begin warp@t -> end warp@t, flow id):
//     A stage 0: w0@1150 -> w1@1800, 1      B stage 1: w0@1600 -> w1@3500, 2
//       (overlaps A without nesting)
//     C stage 0: w0@1900 -> w1@2500, 3      D copy 5: w1@2000 -> w0@2200, 4 (in C)
//     E stage 2: w0@3000, unterminated (to 9000), 5
//     F stage 3: an unmatched end on w1@3200, 6 (in E)
//     H stage 9: w2@4500 -> w0@4600, 8 (in E; after w0's last record)
//   and of block (0,1,0): G tma 0: w2'@2000 -> w2'@2050, 7.
// A harvest at 9500. Launch 8 [10000, 12000]: SM 012 / block (0,0,0) / warp 0 (slot 0):
//   load[10100,10300], inflight 2 @10150, I stage 0: @10100 -> @10200, 9.
inline void WriteDeviceApiRun(trace::TraceSink& sink) {
  trace::GpuRecord gpu;
  gpu.index = 0;
  gpu.name = "NVIDIA H100";
  gpu.sm_count = 132;
  gpu.facts = {{"index", 0}, {"name", gpu.name}};
  sink.OnGpu(gpu);
  sink.OnProcess(SinkProcess());

  const trace::LaunchRecord l = SinkLaunch(0, 7, 0, 1000, 9000);
  sink.OnLaunch(l);
  trace::WarpRecord w0 = SinkWarp(0, 12, 1, 0, 0), w1 = SinkWarp(1, 12, 1, 0, 1), w3 = SinkWarp(2, 12, 1, 0, 2),
                    w2 = SinkWarp(3, 3, 0, 1, 0);
  w1.hw_warp = 1;
  w3.hw_warp = 2;
  for (const trace::WarpRecord* w : {&w0, &w1, &w3, &w2}) sink.OnWarp(l, *w);
  sink.OnSlice(l, w0, SinkValueSlice("mma", 1100, 2000, 42));
  sink.OnInstant(l, w0, SinkCounter("inflight", 1200, 3));
  trace::SliceRecord phase = SinkSlice("load", 2000, 3000, 0);
  phase.phase = true;
  sink.OnSlice(l, w0, phase);
  trace::InstantRecord tile = SinkInstant("tile", 2500);
  tile.value.present = true;
  tile.value.value = -7;
  sink.OnInstant(l, w0, tile);
  sink.OnInstant(l, w0, SinkCounter("inflight", 2600, 5));
  trace::InstantRecord x = SinkInstant("x", 1300, true);
  x.value.present = true;
  x.value.value = 9;
  sink.OnInstant(l, w1, x);
  sink.OnSlice(l, w1, SinkValueSlice("wait", 1400, 4000, int64_t{1} << 40));
  sink.OnInstant(l, w1, SinkCounter("inflight", 1500, 1));
  sink.OnSlice(l, w2, SinkSlice("load", 2000, 2100, 0));
  sink.OnAsyncSpan(l, SinkSpan("stage", 0, &w0, 1150, &w1, 1800, 1));
  sink.OnAsyncSpan(l, SinkSpan("stage", 1, &w0, 1600, &w1, 3500, 2));
  sink.OnAsyncSpan(l, SinkSpan("stage", 0, &w0, 1900, &w1, 2500, 3));
  sink.OnAsyncSpan(l, SinkSpan("tma", 0, &w2, 2000, &w2, 2050, 7));
  sink.OnAsyncSpan(l, SinkSpan("copy", 5, &w1, 2000, &w0, 2200, 4));
  sink.OnAsyncSpan(l, SinkSpan("stage", 2, &w0, 3000, nullptr, 9000, 5));
  sink.OnAsyncSpan(l, SinkSpan("stage", 3, nullptr, 3200, &w1, 3200, 6));
  sink.OnAsyncSpan(l, SinkSpan("stage", 9, &w3, 4500, &w0, 4600, 8));
  const uint32_t order[] = {3, 0, 1, 2};
  sink.OnLaunchEnd(l, order, 4);
  trace::HarvestRecord h;
  h.ts_ns = 9500;
  h.reason = 1;  // sync
  sink.OnHarvest(SinkProcess(), h);

  const trace::LaunchRecord l2 = SinkLaunch(1, 8, 0, 10000, 12000);
  sink.OnLaunch(l2);
  const trace::WarpRecord v0 = SinkWarp(0, 12, 0, 0, 0);
  sink.OnWarp(l2, v0);
  sink.OnSlice(l2, v0, SinkSlice("load", 10100, 10300, 0));
  sink.OnInstant(l2, v0, SinkCounter("inflight", 10150, 2));
  sink.OnAsyncSpan(l2, SinkSpan("stage", 0, &v0, 10100, &v0, 10200, 9));
  sink.OnLaunchEnd(l2, order + 1, 1);
}

}  // namespace smprof::testing
