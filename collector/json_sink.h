// JsonSink: the run as a Chrome/Perfetto JSON trace (`-o trace.json`).
//
// Streams through TraceWriter (trace_writer.h: whole objects only, a killed
// writer leaves a valid prefix). JSON has processes and threads only, so the
// track tree is flattened onto synthetic pids:
//   pid 1          "smprof run": the run's metadata as an instant at time 0
//                  and the summary as the last event.
//   pid 2..9, ...  one per profiled process: "harvests" thread (harvest
//                  instants, device-loss counter, notices, "process lost"),
//                  then one thread per application thread that launched
//                  profiled kernels or ran a harvest ("<name> <tid>", on
//                  its own tid; tid 1 is the "harvests" thread's, so a
//                  thread 1 gets 0xFFFFFFFE): its launch API calls
//                  (each with a flow arrow to its kernel's CUPTI slice; a
//                  graph's kernels follow their cuGraphLaunch in one chain,
//                  in start order), its harvests ("harvest: sync", "forced
//                  drain: ...": the time the application spent in smprof)
//                  inside the synchronising call that ran them.
//                  The first 8 processes get 2..9; later ones share the
//                  counter below.
//   GPU processes  one per physical GPU: its facts as an instant at time 0 on
//                  tid 0 "identity", and one thread per (process, stream)
//                  with every kernel span on it. Sorted first.
//   pid 10, 11 ... one per launch, in arrival order: tid 1 "kernel (CUPTI)",
//                  then one thread per warp ("SM 012 | block (1,0,0) | warp
//                  3") and, where ranges on a warp overlap without nesting,
//                  one per extra lane ("... | warp 3 | lane 1") sorted right
//                  after its warp.
// The device API's records (docs/device-api.md), on a launch's pid:
//  * a value: args.value of its "X" slice or "i" instant;
//  * a counter sample: a "C" event named after the marker with the warp's
//    tid and one arg, keyed by the warp's thread title ("SM 012 | block
//    (1,0,0) | warp 3": 5): Perfetto keeps JSON counters per process, one
//    track per (name, key), so each warp's samples get a track of their own,
//    "inflight SM 012 | block (1,0,0) | warp 3";
//  * an async span: "b" on its begin warp's tid and "e" on its end warp's
//    (the other's when one is missing), cat "smprof", paired by
//    "id2":{"local":"0x<flow id>"} (a process-scoped async track per span
//    in Perfetto), args token, begin_warp, end_warp, and "unterminated"
//    true or "smprof_error" "unmatched end"; its ends as "i" instants named
//    after it on the warps' threads and, with both warps, a flow v1 from
//    one to the other: "s" and "f" ("bp":"e", binding to that instant),
//    "id" the flow id (flow v1 ids are apart from the launch calls'
//    bind_id flows);
//  * a phase: a plain "X" slice.
// Timestamps are microseconds with three decimals (nanoseconds exact).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "collector/trace_sink.h"
#include "collector/trace_writer.h"

namespace smprof {

class JsonSink : public trace::TraceSink {
 public:
  explicit JsonSink(std::unique_ptr<TraceWriter> writer);

  void OnRun(const nlohmann::json& run) override;
  void OnGpu(const trace::GpuRecord& gpu) override;
  void OnProcess(const trace::ProcessRecord& process) override;
  void OnProcessNamed(const trace::ProcessRecord& process) override;
  void OnNotice(const trace::ProcessRecord& process, uint64_t ts_ns, std::string_view reason,
                std::string_view detail) override;
  void OnHarvest(const trace::ProcessRecord& process, const trace::HarvestRecord& harvest) override;
  void OnProcessLost(const trace::ProcessRecord& process, uint64_t ts_ns) override;
  void OnLaunch(const trace::LaunchRecord& launch) override;
  void OnWarp(const trace::LaunchRecord& launch, const trace::WarpRecord& warp) override;
  void OnSlice(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
               const trace::SliceRecord& slice) override;
  void OnInstant(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                 const trace::InstantRecord& instant) override;
  void OnAsyncSpan(const trace::LaunchRecord& launch, const trace::AsyncSpanRecord& span) override;
  void OnLaunchEnd(const trace::LaunchRecord& launch, const uint32_t* warps_in_order, size_t warp_count) override;
  bool Flush() override;
  bool Finish(const CollectorSummary& summary) override;
  std::string error() const override { return writer_->error(); }
  std::string layout_description() const override { return "launch-centric (JSON)"; }

  const std::string& path() const { return writer_->path(); }

 private:
  struct LaunchTracks {
    uint32_t pid = 0;
    uint32_t next_tid = 2;
    std::vector<uint32_t> warp_tids;                          // by WarpRecord::index (0: none yet)
    std::vector<std::string> warp_titles;                     // by WarpRecord::index
    std::map<std::pair<uint32_t, uint32_t>, uint32_t> lanes;  // (warp index, lane > 0) -> tid
  };
  struct GpuTracks {
    uint32_t pid = 0;
    trace::GpuRecord record;
    std::map<std::pair<uint32_t, uint64_t>, uint32_t> stream_tids;  // (pid, stream) -> tid
    uint32_t next_tid = 1;
  };

  uint32_t AllocatePid() { return next_launch_pid_++; }
  // The JSON tid of a host thread of `process` (named on first use).
  uint32_t HostTid(uint32_t process, uint32_t tid, std::string_view name);
  uint32_t WarpTid(LaunchTracks& t, const trace::WarpRecord& warp, uint32_t lane);
  // The warp's thread (named now if OnWarp did not come).
  uint32_t WarpTid(const trace::LaunchRecord& launch, LaunchTracks& t, const trace::WarpRecord& warp);
  void Touch(uint64_t ns) { last_ns_ = std::max(last_ns_, ns); }

  std::unique_ptr<TraceWriter> writer_;
  std::map<uint32_t, uint32_t> process_pids_;  // ProcessRecord::index -> pid
  std::set<std::pair<uint32_t, uint32_t>> host_tids_;  // (process index, JSON tid) named so far
  std::map<uint32_t, GpuTracks> gpus_;         // GpuRecord::index -> tracks
  std::map<uint64_t, LaunchTracks> launches_;  // LaunchRecord::index -> tracks, until OnLaunchEnd
  uint32_t next_process_pid_ = 2;
  uint32_t next_launch_pid_ = 10;
  uint64_t last_ns_ = 0;
};

}  // namespace smprof
