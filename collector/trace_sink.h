// TraceSink: what happened in a run, as the trace builder tells the writers.
//
// The collector separates what happened from how it is written (as Kineto's
// ActivityLogger does): TraceBuilder (trace_builder.h) turns validated
// transport messages into the records below, with every name resolved, every
// time on the trace's clock (nanoseconds since the trace base) and every
// range matched, and hands them to one or more sinks: the JSON writer, the
// Perfetto protobuf writer, the statistics. A sink never sees wire structs.
//
// Order guarantees (what a streaming writer may rely on):
//  * OnGpu precedes every launch on that GPU; OnProcess precedes everything
//    of that process (its command may be "?" when the process never said it;
//    OnProcessNamed follows once it does).
//  * OnLaunch precedes the launch's warps; OnWarp precedes the warp's
//    slices and instants; the launch's async spans (matched across its
//    warps) follow its last slice or instant; OnLaunchEnd comes once, after
//    the last of them.
//  * Per warp, slices and instants come in order of their start time (ties:
//    the enclosing slice first), except after a flush of a very long
//    episode (TraceBuilder says when), where a slice may start before the
//    previous record of its warp. On each lane of a warp, slices nest:
//    a slice is either inside or entirely after the slices before it on
//    that lane. Lane 0 holds everything that nests; ranges that overlap a
//    range on lane 0 without nesting go to lanes 1, 2, ...
//  * Timestamps never precede 0 and a slice never ends before it begins.
// Records and the string_views in them are valid only during the call.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/json.h"
#include "smprof/wire.h"

namespace smprof {

struct CollectorSummary;

namespace trace {

// One physical GPU of the run (however many processes use it).
struct GpuRecord {
  uint32_t index = 0;  // run-wide, in order of first appearance
  std::string name;
  std::string uuid;        // "GPU-...", or "" when not reported
  std::string pci_bus_id;  // "0000:19:00.0", or ""
  uint32_t sm_count = 0;
  uint32_t cc_major = 0, cc_minor = 0;
  uint32_t sm_clock_khz = 0;           // as the driver reports it
  uint32_t sm_clock_measured_khz = 0;  // by the calibration kernel (0: not measured)
  uint32_t timer_resolution_ns = 0;    // %globaltimer step (0: not measured)
  // The run summary's "gpus" entry (identity, clocks, marker costs), for
  // writers that show the facts as arguments.
  nlohmann::json facts;
};

// One profiled process (a producer).
struct ProcessRecord {
  uint32_t index = 0;  // run-wide, in order of first appearance
  uint32_t pid = 0;
  std::string command;  // a label: the command line, NULs as spaces, at most 80 bytes; "?" if unknown
};

// An application thread's driver API call (trace time; the CUPTI clock, like
// the kernel spans).
struct HostCall {
  const char* api = nullptr;  // "cuLaunchKernel", ...; nullptr: no call known (nothing else set)
  uint64_t begin_ns = 0, end_ns = 0;
  uint32_t tid = 0;
  std::string thread;  // the thread's name ("" when it was not reported)
};

// One kernel launch with its CUPTI record.
struct LaunchRecord {
  uint64_t index = 0;     // run-wide, in order of arrival
  uint32_t process = 0;   // ProcessRecord::index
  uint32_t pid = 0;
  uint64_t launch_id = 0;  // the process's own id, shown as "#id"
  std::string kernel;      // the name as reported (mangled or demangled)
  std::string label;       // the qualified name (common/names.h): what filters match
  int32_t gpu = -1;        // GpuRecord::index, -1 if the process never described its device
  uint32_t device = 0;     // the CUDA ordinal in its process
  uint64_t stream = 0;
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint64_t start_ns = 0, end_ns = 0;  // the CUPTI span (or bounds from events, see flags)
  uint32_t flags = 0;                 // wire::LaunchFlags
  uint64_t correlation_id = 0, grid_id = 0, graph_id = 0;
  uint32_t registers = 0, dynamic_smem = 0, static_smem = 0;
  // The API call that launched it: for a graph's kernels, their cuGraphLaunch
  // (shared by them; `call_key` is the same for every launch of one call).
  HostCall call;
  uint64_t call_key = 0;    // run-wide id of the call (0: none), e.g. for flow arrows
  bool call_first = false;  // the first launch of its call to arrive: writers draw the call with it
};

// One warp of a launch that recorded events.
struct WarpRecord {
  uint32_t index = 0;  // in its launch, in order of arrival
  uint16_t sm = 0;
  uint32_t block[3] = {0, 0, 0};
  uint16_t warp = 0;     // the warp's index in its block
  uint16_t hw_warp = 0;  // %warpid: its slot on the SM
  bool program = false;  // a Triton kernel's: the block is its program (tl.program_id)
  uint16_t cluster = 0;  // a Triton program's cluster shape (wire::ClusterExtent): 0 is one CTA
};

// A user value recorded with a marker (wire::kEventHasValue): the END's value
// on a slice, or an instant's. Shown as a signed integer of the width the
// device recorded (32-bit values sign-extended).
struct UserValue {
  bool present = false;
  // A sample of the counter named after the marker (wire::kEventCounter):
  // writers show it on a counter track of that name under the warp, not as
  // an instant; the statistics summarise it under that name.
  bool counter = false;
  int64_t value = 0;
};

struct SliceRecord {
  std::string_view name;
  // A run-wide key of the name's text (the same text, the same key), for
  // sinks that index by name; 0: not given (key by the text).
  uint32_t name_key = 0;
  uint64_t begin_ns = 0, end_ns = 0;
  uint32_t cycles = 0;  // SM cycles between BEGIN and END (exact; 0 for unterminated)
  uint32_t lane = 0;    // 0, or a sibling lane (see above)
  uint32_t depth = 0;   // nesting depth on its lane (0 = outermost)
  bool unterminated = false;  // no END came: ends with the launch (or the warp's last event)
  std::string_view note;      // why, for unterminated slices; may be empty
  bool phase = false;         // a phase (SMPROF_PHASE): ended by the warp's next phase or PHASE_END
  UserValue value;            // carried by its END
};

struct InstantRecord {
  std::string_view name;
  uint32_t name_key = 0;  // as SliceRecord::name_key
  uint64_t ts_ns = 0;
  bool unmatched_end = false;  // an END without a BEGIN, shown as an instant
  UserValue value;             // value.counter: a counter sample, not an instant
};

// A span begun on one warp and ended on another (or the same) warp of one
// block (SMPROF_ASYNC_BEGIN / SMPROF_ASYNC_END with the same name and
// token): an END closes the oldest span of its (block, name, token) open
// when it was recorded. Handed on after the launch's last warp record and
// before OnLaunchEnd, in order of begin time. Warps are given by their
// WarpRecord as handed to OnWarp.
struct AsyncSpanRecord {
  std::string_view name;
  uint32_t name_key = 0;  // as SliceRecord::name_key
  uint32_t token = 0;
  uint32_t block[3] = {0, 0, 0};
  uint64_t begin_ns = 0, end_ns = 0;  // end_ns >= begin_ns
  // The warps that began and ended it; nullptr for a missing end (an
  // unterminated span: ends with the launch) or a missing begin (an END
  // that closed nothing: begin_ns == end_ns).
  const WarpRecord* begin_warp = nullptr;
  const WarpRecord* end_warp = nullptr;
  // Run-wide, unique per span, from 1: a writer's flow id between the two
  // warps (writers keep it apart from other flows they draw).
  uint64_t flow_id = 0;
  bool unterminated() const { return end_warp == nullptr && begin_warp != nullptr; }
  bool unmatched_end() const { return begin_warp == nullptr; }
};

struct HarvestRecord {
  uint64_t ts_ns = 0;
  uint32_t reason = 0;  // wire::HarvestReason
  uint32_t device = 0;
  uint64_t dropped_events = 0;   // in this harvest
  uint64_t unplaced_events = 0;  // in this harvest
  uint64_t lost_so_far = 0;      // the process's device losses up to and including it
  uint32_t chunks_used = 0;      // how full the device arena was: chunks claimed ...
  uint32_t chunks_total = 0;     // ... of its chunks (0: not known)
  uint32_t chunks_empty = 0;     // of the claimed ones, never written (at most chunks_used)
  // On the host (tid 0: not reported): the harvest ran on thread `tid` from
  // host_begin_ns to host_end_ns, inside `call`'s exit when a synchronising
  // API call triggered it (call.api nullptr otherwise; call.end_ns is then
  // the API's return: the harvest's end).
  uint32_t tid = 0;
  std::string thread;
  uint64_t host_begin_ns = 0, host_end_ns = 0;
  HostCall call;
  uint32_t stage_us[wire::kHarvestStages] = {};  // where the host span went (wire::HarvestStage)
};

class TraceSink {
 public:
  virtual ~TraceSink() = default;

  // smprof-run's metadata of the run (command, options, environment).
  virtual void OnRun(const nlohmann::json& /*run*/) {}
  virtual void OnGpu(const GpuRecord& /*gpu*/) {}
  virtual void OnProcess(const ProcessRecord& /*process*/) {}
  virtual void OnProcessNamed(const ProcessRecord& /*process*/) {}
  // The process said why it is not profiled (wire::NoticeKind as a word).
  virtual void OnNotice(const ProcessRecord& /*process*/, uint64_t /*ts_ns*/, std::string_view /*reason*/,
                        std::string_view /*detail*/) {}
  virtual void OnHarvest(const ProcessRecord& /*process*/, const HarvestRecord& /*harvest*/) {}
  // The process ended without detaching; its data may be incomplete.
  virtual void OnProcessLost(const ProcessRecord& /*process*/, uint64_t /*ts_ns*/) {}

  virtual void OnLaunch(const LaunchRecord& /*launch*/) {}
  virtual void OnWarp(const LaunchRecord& /*launch*/, const WarpRecord& /*warp*/) {}
  virtual void OnSlice(const LaunchRecord& /*launch*/, const WarpRecord& /*warp*/, const SliceRecord& /*slice*/) {}
  virtual void OnInstant(const LaunchRecord& /*launch*/, const WarpRecord& /*warp*/, const InstantRecord& /*instant*/) {}
  virtual void OnAsyncSpan(const LaunchRecord& /*launch*/, const AsyncSpanRecord& /*span*/) {}
  // No more records of this launch. `warps_in_order` lists the launch's warp
  // indices sorted by (sm, block z, y, x, warp): the order to show them in.
  virtual void OnLaunchEnd(const LaunchRecord& /*launch*/, const uint32_t* /*warps_in_order*/, size_t /*warp_count*/) {}

  // Write out what is buffered (the collector calls it after each poll that
  // delivered messages). False once the sink failed (error() says why).
  virtual bool Flush() { return true; }
  // The run is over: write the summary, close. Called once. `summary` has
  // every counter; the sink sets nothing in it. False on failure.
  virtual bool Finish(const CollectorSummary& /*summary*/) { return true; }
  virtual std::string error() const { return std::string(); }
  // For a trace writer: how it lays out warps, for the run summary ("" for
  // sinks that write no trace).
  virtual std::string layout_description() const { return std::string(); }
};

}  // namespace trace
}  // namespace smprof
