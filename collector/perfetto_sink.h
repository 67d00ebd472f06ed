// PerfettoSink: the run as a native Perfetto protobuf trace (TrackEvent).
//
// Two layouts of the warps (TraceLayout, set_layout):
//  * launch-centric (kLaunch): a track per launch, SM, block, warp and lane
//    (below). Shows a few launches in detail; its track count grows with
//    every launch (5 a launch of one warp), and the trace processor's import
//    time with it (100,000 such launches, 500,000 tracks: 9.5 s here on 2
//    shared cores; 513 s as JSON).
//  * hardware-centric (kHardware): GPU > "SM 012" > "slot 05", one track per
//    warp slot (WarpRecord::hw_warp) of an SM, made once and shared by
//    every launch, so the track count is bounded by the hardware and the
//    slots show occupancy over time. A warp is a slice "#<launch_id>
//    <label>" on its slot's track (args launch_id, pid, block [x,y,z], warp;
//    0 on the slot's "cycles" counter, like an instant) from its first
//    record to its last, its ranges nested one level deeper; its lanes > 0
//    on "slot 05 lane n" beside the slot. The CUPTI kernel span is on its
//    stream's track under the GPU, with the launch's args (what the
//    launch-centric layout puts in track names and on the launch slice).
//    The same 100,000 launches: 79 tracks, imported in 6 s
//    (tests/e2e/perfetto_import_test.cc). A slot's counter samples go on a
//    counter track per name under it, an SM's async spans on "async",
//    "async lane n" first under "SM 012": these too are made once and
//    shared by every launch and block that ran there.
//  * kAuto (the default): launch-centric for the first kAutoLaunchLimit
//    (256) launches, hardware-centric from the 257th on, or from the first
//    launch after the trace has kAutoTrackLimit (100,000) tracks; an instant
//    "layout: ..." on "smprof run" says which, from which launch, and why.
// The hardware-centric layout and the choice: perfetto_hardware.h.
//
// Launch-centric track tree (plain named tracks nested through parent_uuid;
// no process or thread descriptors, whose children Perfetto would show as
// siblings):
//   smprof run                        "smprof run" instant at 0 (metadata),
//                                     "smprof run summary" at the end
//   GPU i | name | pci | uuid         "GPU i identity" instant at 0 (facts)
//     pid P | cuda:D | stream S       every kernel span of that stream
//     #id label | GPU ... | pid P     the CUPTI kernel slice (launch args)
//       SM 012 > block (x,y,z) > warp w, and "warp w lane n" beside it
//         cycles                      counter under each warp and lane:
//                                     its slices' SM cycles
//                                     (perfetto_sequences.h)
//         <counter name>              counter under a warp: its samples
//                                     (SMPROF_COUNTER; below)
//       SM 012 > block (x,y,z) >      the block's async spans, first among
//         async, "async lane n"       its children (below)
//   smprof | command | pid P          harvests, notices, "process lost"
//     events lost (device buffer)     counter: the process's losses so far
//     events harvested                counter: events written per harvest
//     arena fill (%)                  counter: the device buffer at each harvest
//   process P "command" > thread      the application's threads (process and
//     "<name> <tid>"                  thread descriptors, in both layouts):
//                                     each launch API call of a profiled
//                                     kernel (once per call), its flow id on
//                                     its BEGIN and on the kernel's span (the
//                                     launch's track; hardware: its stream
//                                     span), so Perfetto draws an arrow, and a
//                                     graph's kernels follow their
//                                     cuGraphLaunch in one chain, in start
//                                     order; each harvest the thread ran ("harvest:
//                                     sync", "forced drain: ...": the time the
//                                     application spent in smprof) inside the
//                                     synchronising call that ran it. Same
//                                     clock as the kernel spans (CUPTI's).
// A launch whose process never described its GPU is a root track. Children
// are ordered explicitly (SMs ascending, blocks by (z,y,x), warps ascending,
// a warp's lanes right after it; on a GPU its streams, then its launches by
// start time), ranks computed from the keys as the tracks are created.
//
// The parts, one file each, that the sink composes (a warp's record goes
// through the hardware layout to its warp's sequence; every packet to the
// trace file):
//  * perfetto_tracks.h: the track tree (descriptors, uuids, ranks) and the
//    events of sequence 1: every descriptor and every event that is not a
//    warp's, with absolute timestamps (trace time: the records' ns as
//    given) and inline names;
//  * perfetto_hardware.h: the hardware-centric layout, slots and overlap
//    tracks, and the choice of layout;
//  * perfetto_sequences.h: a warp's events on a packet sequence of its own
//    (incremental clock, interned names, ~11-13 bytes an event), slices as a
//    BEGIN at once and an END that waits, and their SM cycles
//    (CyclesEncoding);
//  * perfetto_state.h: what is kept of the run while it streams;
//  * trace_file.h: the output file, shared with the JSON writer.
//
// The device API's records (docs/device-api.md):
//  * A value (SliceRecord/InstantRecord::value, not a counter) is the debug
//    annotation "value" on the slice's BEGIN or on the instant
//    (perfetto_sequences.h).
//  * A counter sample (value.counter) is a TYPE_COUNTER event on the warp's
//    sequence (perfetto_sequences.h), on the counter track named after the
//    marker under the warp's track (hardware: the slot's), described on
//    first use per (track, name). (A user counter named "cycles" beside the
//    cycles counter makes the cycles query ambiguous.)
//  * A phase is a plain slice (SliceRecord::phase is for the statistics).
//  * An async span (OnAsyncSpan, after its launch's warps) is a slice on
//    an "async" track: launch-centric, a child of its block's track (ranked
//    before the warps); hardware-centric, of its SM's track, shared by every
//    launch and block that ran there. Spans that overlap without nesting go
//    on sibling lanes "async lane 1", 2, ...: a span goes on the first lane
//    where it nests in the spans open at its begin or that is free then (a
//    lane's spans must come in begin order: the hardware-centric layout
//    passes over a lane whose latest span began later). Its args: token,
//    begin_warp and end_warp (WarpRecord::warp), hardware-centric also
//    launch_id, pid and block; an unterminated span (no end warp: to the
//    launch's end) has "unterminated" true, an unmatched end (no begin
//    warp: zero length) "smprof_error" "unmatched end". Its ends are
//    instants named after it on the begin warp's track at begin_ns and on
//    the end warp's at end_ns (hardware: on the slot track whose slice of
//    the warp holds that time; where none does, the time is placed like a
//    record of the warp: its slice is extended, or opened); with both
//    warps, linked by a flow: flow_ids on the begin instant,
//    terminating_flow_ids on the end one, the id AsyncSpanRecord::flow_id
//    with bit 63 set (the launch calls' flows are run-wide keys below it).
//    Each instant carries 0 on its track's "cycles" counter like every
//    instant there; each end counts as an event in "events harvested". All
//    these packets go on sequence 1 (absolute time, explicit track, inline
//    names), BEGIN and END at once: on a lane the spans nest or follow each
//    other, and an END at t precedes in the file any later span's BEGIN at t.
//    ~140 bytes a linked span without cycles (BEGIN with its args ~65, END
//    ~15, each instant ~30), ~185 with the hardware-centric args.
//
// What is still pending at OnLaunchEnd is written then, on the warp's
// sequence or on sequence 1, which also releases the launch's state: memory
// is bounded by the open launches.
//
// Streaming: packets are whole records of the trace file, written out at 1
// MiB and on Flush, so a killed writer leaves a valid trace: a prefix of
// whole packets, every event after its track's descriptor. On a write error
// the file is cut after the last packet that reached it whole, error() says
// so, nothing more is written and Finish returns false.
//
// Single-threaded: the collector owns the sink.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "collector/perfetto_hardware.h"
#include "collector/perfetto_sequences.h"
#include "collector/perfetto_state.h"
#include "collector/perfetto_tracks.h"
#include "collector/trace_file.h"
#include "collector/trace_sink.h"

namespace smprof {

class PerfettoSink : public trace::TraceSink {
 public:
  // How a closed slice's SM cycles are written (perfetto_sequences.h).
  enum class CyclesEncoding {
    kCounter,     // the default: a value on the track's "cycles" counter
    kAnnotation,  // the BEGIN's debug annotation "cycles"
    kNone,        // not in the trace (the statistics keep them)
  };

  // Creates `path` (truncating it, or failing if it exists when
  // `exclusive`). nullptr + *error on failure.
  static std::unique_ptr<PerfettoSink> Open(const std::string& path, bool exclusive, std::string* error);
  // Writes out what is buffered (pending ENDs are not: see Finish).
  ~PerfettoSink() override;

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
  // Ends the launches still open, writes the summary instant, closes.
  bool Finish(const CollectorSummary& summary) override;
  std::string error() const override { return file_.error(); }

  // "none", "counter" or "args"; false for another word.
  static bool ParseCyclesEncoding(std::string_view word, CyclesEncoding* encoding);
  // Before the first warp record; the sink's default is kCounter (smprof-run's
  // is kNone: see common/settings.cc).
  void set_cycles_encoding(CyclesEncoding encoding) {
    sequences_.set_cycles(encoding == CyclesEncoding::kCounter, encoding == CyclesEncoding::kAnnotation);
  }

  // Before the first launch; the default is kAuto.
  void set_layout(TraceLayout layout) { hardware_.set_layout(layout); }
  // kAuto's switch to the hardware-centric layout: from launch number
  // kAutoLaunchLimit + 1 on, or from the first launch after the trace has
  // kAutoTrackLimit tracks.
  static constexpr uint64_t kAutoLaunchLimit = perfetto::HardwareLayout::kAutoLaunchLimit;
  static constexpr uint64_t kAutoTrackLimit = perfetto::HardwareLayout::kAutoTrackLimit;
  // The layout of the latest launch (kLaunch or kHardware; before any
  // launch, what the first one will get).
  TraceLayout layout_used() const { return hardware_.layout_used(); }
  // Which layout was used, from which launch and why, in words: e.g.
  // "hardware-centric from launch 257 on (auto: more than 256 launches);
  // launch-centric before".
  std::string layout_description() const override { return hardware_.description(); }
  // Warp slices put on a "slot NN overlap" track (perfetto_hardware.h).
  uint64_t overlap_spans() const { return hardware_.overlap_spans(); }
  // Tracks described so far.
  uint64_t tracks() const { return tracks_.tracks(); }

  const std::string& path() const { return file_.path(); }
  // Bytes that reached the file.
  uint64_t bytes_written() const { return file_.bytes_written(); }

  PerfettoSink(const PerfettoSink&) = delete;
  PerfettoSink& operator=(const PerfettoSink&) = delete;

 private:
  PerfettoSink();

  bool failed() const { return !file_.ok(); }
  // The latest time written: the summary's time.
  uint64_t last_ns() const { return std::max(tracks_.last_ns(), sequences_.last_ns()); }

  perfetto::Process& ProcessOf(const trace::ProcessRecord& process);
  // The process's track, described (with the command known so far) on first use.
  uint64_t ProcessTrack(perfetto::Process& p);
  // A host thread's track (and its process's descriptor), described on first use.
  uint64_t HostThreadTrack(perfetto::Process& p, uint32_t tid, std::string_view name);

  // The open launch (announced now if OnLaunch did not come).
  perfetto::Launch& LaunchOf(const trace::LaunchRecord& launch);
  // The warp's state, its tracks described on first use.
  perfetto::Warp& DescribedWarp(perfetto::Launch& l, const trace::WarpRecord& warp);
  void DescribeWarp(perfetto::Launch& l, const trace::WarpRecord& warp);
  // The warp with the launch's open sequence, ending the sequence of the
  // launch's previous warp and starting one for this warp if it is another.
  perfetto::Warp& ActiveWarp(perfetto::Launch& l, const trace::WarpRecord& warp);
  perfetto::Warp& SwitchWarp(perfetto::Launch& l, const trace::WarpRecord& warp);
  // Lane n's tracks (n >= 1), described on first use.
  const perfetto::Lane& LaneOf(perfetto::Warp& w, uint32_t lane);
  // A counter sample on its counter track under the warp's (or slot's).
  void CounterSample(perfetto::Warp& w, const trace::InstantRecord& sample);
  void EndLaunch(uint64_t index);

  // Async spans: the track (and its "cycles" counter) of `warp` at `t` for
  // an end of a span (kHardware: a slot track whose slice of the warp holds
  // t, placing the warp as a record would where none does); the lane of
  // `a` that [begin, end] nests in or is free at begin (a new one if none).
  void WarpTrackAt(perfetto::Launch& l, const trace::WarpRecord& warp, uint64_t t, uint64_t* track, uint64_t* cycles);
  uint64_t AsyncLaneTrack(perfetto::AsyncTracks& a, uint64_t begin, uint64_t end);

  perfetto::Gpus gpus_;
  perfetto::Processes processes_;
  perfetto::Launches launches_;
  perfetto::Launch* last_launch_ = nullptr;  // the one the latest record was for
  uint64_t last_launch_index_ = 0;
  uint64_t run_track_ = 0;
  bool finished_ = false;

  // The parts, each on the ones before it.
  TraceFile file_;
  perfetto::TrackTree tracks_{file_};
  perfetto::WarpSequences sequences_{file_, tracks_};
  perfetto::HardwareLayout hardware_{tracks_, sequences_, launches_, gpus_};
};

}  // namespace smprof
