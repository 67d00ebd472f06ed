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
//    launch after the trace has kAutoTrackLimit (100,000) tracks. The sink
//    streams and cannot know the run's size beforehand: launches before the
//    switch keep their tracks. An instant "layout: ..." on "smprof run" at
//    the first launch (and at the switch) says which layout, from which
//    launch, and why; layout_description() says the same for the summary.
//
// Slots stay strictly nested. Two warps that follow each other on a slot
// may overlap by a few ns after clock mapping, and a warp's records may
// arrive after another warp took its slot: so a warp's slice goes on the
// first of "slot 05", "slot 05 overlap", "slot 05 overlap 2", ... (siblings,
// each with its own lanes) that is free at its first record's time t:
// unused, or its latest warp's records all end at or before t. That warp's
// slice (and its ranges' pending ENDs) is then closed at once, at its last
// record's end: a record of its that comes later (or one that starts before
// its slice, after a flushed long episode) opens a new slice of the warp on
// a free track, the same way. Times are never changed (no clamping);
// overlap_spans() counts the slices put on overlap tracks.
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
//                                     its slices' SM cycles (below)
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
// Packet sequences: sequence 1 carries every descriptor and every event
// that is not a warp's, with absolute timestamps (trace time: the records'
// ns as given) and inline names. A warp's events go on a sequence of its
// own, started by a packet that defines the sequence-scoped incremental
// clock 64 as BOOTTIME (6) through a snapshot {64: 0, 6: 0} (so trace time
// is unchanged; a snapshot restarts the clock) and sets the defaults: the
// warp's track, and its "cycles" counter track as the extra counter. It
// clears the incremental state on a new sequence id; a reused id keeps its
// interned names (new defaults keep them: Perfetto's
// PacketSequenceStateGeneration::OnNewTracePacketDefaults), unless more
// than kMaxKeptNames piled up, so a warp interns only names its sequence
// has not seen. Its
// events are then timestamp delta + sequence id + type + interned name (+
// cycles): ~11 bytes an END, ~13 a BEGIN or an instant, 3 more a BEGIN
// with a cycles counter value (11.6 bytes an event on bench/trace_encode.cc's
// large run without cycles, 13.3 with, all packets counted). Names are
// interned per sequence the first time it uses them.
//
// Few sequences open at once: the collector hands a launch's warps one after
// another, so when a record of another warp of the launch arrives, the
// warp that had the launch's open sequence is (almost always) complete: its
// sequence ends there and its id is reused by the next sequence to start,
// so ids stay as small as the number of open launches (one varint byte). A
// warp whose records come back later gets a sequence again (the same
// tracks; the sequence's start sets its defaults and restarts the clock). An
// ended sequence's pending ENDs (below) are not written when it ends: a record
// of its warp may yet begin at such an END's time inside that slice, and the
// trace processor orders equal times by file position. They stay with the
// warp, written by its next sequence, or at the launch's end on sequence 1
// (absolute time, explicit track: ~18 bytes each, about one per warp).
//
// Cycles, exact, with CyclesEncoding::kCounter (the sink's default;
// smprof-run's is kNone, --trace-cycles): every closed slice's SM-cycle count is the value of its
// BEGIN on the "cycles" counter track child of the slice's track (the
// warp's, or a lane's), as TrackEvent.extra_counter_values (3 bytes: one
// key, a 2-byte varint below 16384 cycles); the warp's counter comes from
// the sequence's TrackEventDefaults.extra_counter_track_uuids, a lane's is
// named on the event. Every instant of a warp carries 0 on it too (2
// bytes), so on each warp and lane track the counter holds exactly one
// value per slice row the trace processor makes of it (closed slices and
// instants; unterminated slices, which have no cycles, carry none and keep
// their annotations "unterminated" and "note"): the k-th value at time t on
// the counter is the k-th slice (by id: BEGINs are imported in file order,
// and equal times keep it) that starts at t on the track:
//   select s.id, s.name, cast(c.value as int) as cycles
//   from (select id, name, track_id, ts, row_number() over
//           (partition by track_id, ts order by id) as k from slice
//         where extract_arg(arg_set_id, 'debug.unterminated') is null) s
//   join track ct on ct.parent_id = s.track_id and ct.name = 'cycles'
//   join (select track_id, ts, value, row_number() over
//           (partition by track_id, ts order by id) as k from counter) c
//     on c.track_id = ct.id and c.ts = s.ts and c.k = s.k
// (at the BEGIN rather than the END: same bytes, and ENDs at one time leave
// the file in an order the slice table does not keep). The alternative,
// CyclesEncoding::kAnnotation, writes the count as the BEGIN's debug
// annotation "cycles" (an arg of the slice: debug.cycles; ~7 bytes).
//
// The device API's records (docs/device-api.md):
//  * A value (SliceRecord/InstantRecord::value, not a counter) is the debug
//    annotation "value" (int_value; its name interned like the others) on
//    the slice's BEGIN or on the instant: 6 bytes for a value below 64, up
//    to 13 for a negative one. Such a record is built in packet_ rather
//    than by FastEvent; records without one take FastEvent's path and cost
//    exactly what they did (one more test of a flag).
//  * A counter sample (value.counter) is no instant but a TYPE_COUNTER
//    event {track_uuid, counter_value} on the warp's sequence at its time
//    (ENDs before it settled first, like an instant's), on the counter
//    track named after the marker under the warp's track (hardware: the
//    slot's), described on first use per (track, name): ~15 bytes. It
//    carries no cycles value (it is no slice row). (A user counter named
//    "cycles" beside the cycles counter makes the query below ambiguous.)
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
// TrackEvent has no complete-slice type and deltas cannot go backwards, so
// a slice (which arrives whole, in start order per warp) is written as its
// BEGIN at once while its END waits in a small per-warp list ordered by end
// time (inner slices first on equal ends). Before any packet at time t the
// ENDs before t are written, and before a slice's BEGIN at t also the ENDs
// at t on its lane but those of the slices enclosing it. What is still
// pending at OnLaunchEnd is written then (see above), which also releases
// the launch's state: memory is bounded by the open launches. A record
// earlier than its sequence's last timestamp (allowed after a flushed long
// episode) is written with timestamp_clock_id 6 and its absolute time,
// which leaves the incremental clock where it was.
//
// Streaming: packets are appended to one buffer and written out whole (at
// 1 MiB and on Flush), so a killed writer leaves a valid trace: a prefix of
// whole packets, every event after its track's descriptor. On a write error
// the file is cut after the last packet that reached it whole, error() says
// so, nothing more is written and Finish returns false.
//
// Single-threaded: the collector owns the sink.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "collector/proto_encoder.h"
#include "collector/trace_sink.h"

namespace smprof {

// Where PerfettoSink puts the warps (see above).
enum class TraceLayout { kLaunch, kHardware, kAuto };

// "launch", "hardware" or "auto"; nullptr for another word.
const char* TraceLayoutName(TraceLayout layout);
bool ParseTraceLayout(std::string_view word, TraceLayout* layout);

class PerfettoSink : public trace::TraceSink {
 public:
  // How a closed slice's SM cycles are written (see above).
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
  std::string error() const override { return error_; }

  // "none", "counter" or "args"; false for another word.
  static bool ParseCyclesEncoding(std::string_view word, CyclesEncoding* encoding);
  // Before the first warp record; the sink's default is kCounter (smprof-run's
  // is kNone: see common/settings.cc).
  void set_cycles_encoding(CyclesEncoding encoding) {
    counters_ = encoding == CyclesEncoding::kCounter;
    annotate_cycles_ = encoding == CyclesEncoding::kAnnotation;
  }

  // Before the first launch; the default is kAuto.
  void set_layout(TraceLayout layout) { layout_ = layout; }
  // kAuto's switch to the hardware-centric layout: from launch number
  // kAutoLaunchLimit + 1 on, or from the first launch after the trace has
  // kAutoTrackLimit tracks.
  static constexpr uint64_t kAutoLaunchLimit = 256;
  static constexpr uint64_t kAutoTrackLimit = 100000;
  // The layout of the latest launch (kLaunch or kHardware; before any
  // launch, what the first one will get).
  TraceLayout layout_used() const;
  // Which layout was used, from which launch and why, in words: e.g.
  // "hardware-centric from launch 257 on (auto: more than 256 launches);
  // launch-centric before".
  std::string layout_description() const override;
  // Warp slices put on a "slot NN overlap" track (see above).
  uint64_t overlap_spans() const { return overlap_spans_; }
  // Tracks described so far.
  uint64_t tracks() const { return next_uuid_ - 1; }

  const std::string& path() const { return path_; }
  // Bytes that reached the file.
  uint64_t bytes_written() const { return written_; }

  PerfettoSink(const PerfettoSink&) = delete;
  PerfettoSink& operator=(const PerfettoSink&) = delete;

 private:
  struct PendingEnd;
  struct Lane;
  struct Warp;
  struct Launch;
  struct Gpu;
  struct Process;
  struct Slot;
  struct UserCounter;
  struct AsyncLane;
  struct AsyncTracks;
  class Annotations;

  PerfettoSink(int fd, std::string path);

  bool failed() const { return !error_.empty(); }
  // A TrackDescriptor packet on sequence 1 with a new uuid (returned);
  // `fields()` writes the descriptor's fields after the uuid.
  template <typename Fields>
  uint64_t DescribeTrack(Fields&& fields);
  uint64_t NewTrack(uint64_t parent, std::string_view name, int64_t rank, bool ordered_children,
                    std::string_view description = {});
  uint64_t NewCounterTrack(uint64_t parent, std::string_view name);
  // An event of sequence 1 at absolute `ts_ns` on `track`; `flow` (0:
  // none) as its flow id.
  void MainEvent(uint64_t track, uint32_t type, std::string_view name, uint64_t ts_ns, const Annotations* args,
                 uint64_t flow = 0);
  // A host thread's track (and its process's descriptor), described on first use.
  uint64_t HostThreadTrack(Process& p, uint32_t tid, std::string_view name);
  // A whole slice on a host thread's track.
  void HostSlice(uint64_t track, std::string_view name, uint64_t begin_ns, uint64_t end_ns, const Annotations* args,
                 uint64_t flow = 0);
  void Counter(uint64_t track, uint64_t ts_ns, uint64_t value);

  Process& ProcessOf(const trace::ProcessRecord& process);
  // The process's track, described (with the command known so far) on first use.
  uint64_t ProcessTrack(Process& p);
  // The open launch (announced now if OnLaunch did not come).
  Launch& LaunchOf(const trace::LaunchRecord& launch);
  // The warp's state, its tracks described on first use.
  Warp& DescribedWarp(Launch& l, const trace::WarpRecord& warp);
  void DescribeWarp(Launch& l, const trace::WarpRecord& warp);
  // The warp with the launch's open sequence, ending the sequence of the
  // launch's previous warp and starting one for this warp if it is another.
  Warp& ActiveWarp(Launch& l, const trace::WarpRecord& warp);
  Warp& SwitchWarp(Launch& l, const trace::WarpRecord& warp);
  void StartSequence(Warp& w);
  void EndSequence(Warp& w);
  // Lane n's tracks (n >= 1), described on first use.
  const Lane& LaneOf(Warp& w, uint32_t lane);
  // The lanes of `w`: its own (launch-centric), or its slot track's.
  static std::vector<Lane>& LanesOf(Warp& w);
  // The launch-centric decision for the launch about to be announced, and
  // the "layout" instant when it changes.
  bool ChooseHardware(const trace::LaunchRecord& launch);
  // kHardware: the GPU a launch's slots are under (an undescribed one for
  // a launch whose process never described its device).
  Gpu& HardwareGpu(const trace::LaunchRecord& launch);
  // kHardware: the track of SM `sm` under `g`, described on first use.
  uint64_t SmTrack(Gpu& g, uint16_t sm);
  // kHardware: before a record of `w` spanning [begin, end]: opens its
  // warp slice on a free slot track if it has none that can hold it, and
  // extends the track's busy time.
  void PlaceRecord(Launch& l, uint32_t index, Warp& w, uint64_t begin, uint64_t end);
  void OpenSpan(Launch& l, uint32_t index, Warp& w, uint64_t t);
  // Writes the pending ENDs of `w` and its warp slice's END.
  void CloseSpan(Warp& w);
  void EndLaunch(uint64_t index);

  // The BEGIN's or the instant's debug annotation "value" (interned).
  void ValueAnnotation(int64_t value);
  // A counter sample on its counter track under the warp's (or slot's).
  void CounterSample(Launch& l, Warp& w, const trace::InstantRecord& sample);
  // Async spans: the track (and its "cycles" counter) of `warp` at `t` for
  // an end of a span (kHardware: a slot track whose slice of the warp holds
  // t, placing the warp as a record would where none does); the lane of
  // `a` that [begin, end] nests in or is free at begin (a new one if none);
  // an end's instant on sequence 1, `flow` as its flow id or, when
  // `terminating`, its terminating flow id.
  void WarpTrackAt(Launch& l, const trace::WarpRecord& warp, uint64_t t, uint64_t* track, uint64_t* cycles);
  uint64_t AsyncLaneTrack(AsyncTracks& a, uint64_t begin, uint64_t end);
  void AsyncEnd(uint64_t track, uint64_t cycles, std::string_view name, uint64_t ts_ns, uint64_t flow,
                bool terminating);

  // Run-wide id of an event name: from name_cache_, else LookUpName.
  uint32_t NameId(std::string_view name);
  uint32_t LookUpName(std::string_view name);
  // The warp sequence's iid of a name; *fresh when the packet must intern it.
  static uint32_t NameIid(Warp& w, uint32_t name_id, bool* fresh);

  // Writes the pending ENDs of `w` before `t`, and those at t on `lane` at
  // `depth` or deeper (the ENDs a slice beginning there must follow). With
  // kAnyLane, only those before t.
  static constexpr uint32_t kAnyLane = UINT32_MAX;
  void SettleEnds(Warp& w, uint64_t t, uint32_t lane, uint32_t depth);
  static void PushEnd(Warp& w, const PendingEnd& end);
  void WriteEnd(Warp& w, const PendingEnd& end);
  // Opens a warp packet at `t`: timestamp (delta, or absolute on clock 6
  // when `t` precedes the sequence's last one) and sequence id.
  proto::ProtoEncoder::Nested BeginWarpPacket(Warp& w, uint64_t t);
  // Adds to the warp packet being built the interned data it needs: event
  // name `iid` (0: none) and the debug annotation names in the bit set
  // `annotation_names` (bit iid - 1).
  void Intern(Warp& w, uint32_t iid, std::string_view name, uint32_t annotation_names);
  // A whole packet for the common events (a BEGIN with its cycles, an END,
  // an instant; nothing to intern), encoded in place in the output with its
  // lengths known beforehand: ProtoEncoder's nested messages reserve a
  // length and move the payload back over it, and the packet would then be
  // copied, which together cost more than such an event's fields (same
  // bytes either way). `lane` nullptr: the warp's default track (and
  // counter). With `has_cycles`, `cycles` as the encoding says (an
  // instant's 0 only as a counter value).
  void FastEvent(Warp& w, uint64_t t, uint32_t type, uint32_t iid, const Lane* lane, bool has_cycles,
                 uint32_t cycles);
  // The same fields of a BEGIN or an instant built in packet_.
  void EventCycles(const Lane* lane, uint32_t type, uint32_t cycles);
  // Ends the packet being built in packet_ and appends it to the output.
  void EndPacket(proto::ProtoEncoder::Nested packet);
  // Makes room for `n` more output bytes; returns where they go.
  char* Room(size_t n) {
    if (out_cap_ - out_size_ < n) Grow(n);
    return out_.get() + out_size_;
  }
  void Grow(size_t n);

  void WriteOut();
  void FailWrite(int err, std::string_view bytes, size_t done);

  int fd_;
  std::string path_;
  std::string error_;
  // Whole packets not yet written. Packets are built in `packet_` and
  // appended, but for FastEvent's, which are built in place.
  std::unique_ptr<char[]> out_;
  size_t out_size_ = 0, out_cap_ = 0;
  proto::ProtoEncoder packet_;
  uint64_t written_ = 0;
  bool finished_ = false;

  bool counters_ = true;          // CyclesEncoding::kCounter
  bool annotate_cycles_ = false;  // CyclesEncoding::kAnnotation
  TraceLayout layout_ = TraceLayout::kAuto;
  uint64_t launches_seen_ = 0;
  int last_hardware_ = -1;          // layout of the latest launch: -1 none yet, 0 launch, 1 hardware
  uint64_t switched_at_ = 0;        // launch number (1-based) of the latest change
  std::string switch_reason_;       // why
  uint64_t overlap_spans_ = 0;
  uint64_t next_uuid_ = 1;
  uint32_t next_seq_ = 2;            // 1 is the main sequence
  std::vector<uint32_t> free_seqs_;  // ids of ended warp sequences, the last ended at the back
  // What an ended sequence interned, by id: the next warp on that id keeps it.
  struct SeqNames {
    std::vector<uint32_t> names;  // run-wide name ids; iid = index + 1
    uint32_t annotation_names = 0;
  };
  std::vector<SeqNames> seq_names_;
  static constexpr size_t kMaxKeptNames = 64;  // more: the id starts cleared (NameIid scans them)
  uint64_t last_ns_ = 0;             // latest time written: the summary's time
  uint64_t run_track_ = 0;

  std::unordered_map<uint32_t, std::unique_ptr<Gpu>> gpus_;           // by GpuRecord::index
  std::unordered_map<uint32_t, std::unique_ptr<Process>> processes_;  // by ProcessRecord::index
  std::unordered_map<uint64_t, std::unique_ptr<Launch>> launches_;    // open, by LaunchRecord::index
  Launch* last_launch_ = nullptr;                                     // the one the latest record was for
  uint64_t last_launch_index_ = 0;

  // Event names, run-wide. `name_cache_` remembers where the latest views
  // pointed, verified by content, so a repeated name costs no hashing.
  std::deque<std::string> names_;
  std::unordered_map<std::string_view, uint32_t> name_ids_;
  struct CachedName {
    const char* data = nullptr;  // where the caller's view pointed
    size_t size = 0;
    uint32_t id = 0;
    const char* known = nullptr;  // names_[id]
  };
  CachedName name_cache_[256];
  std::string scratch_;           // "<name> (end without begin)"
  std::vector<PendingEnd> held_;  // SettleEnds' ENDs at t that wait
};

}  // namespace smprof
