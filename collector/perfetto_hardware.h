// The hardware-centric layout of a Perfetto trace, and the choice of layout.
//
// kHardware puts warps on GPU > "SM 012" > "slot 05": one track per warp
// slot (WarpRecord::hw_warp) of an SM, made once and shared by every launch,
// so the track count is bounded by the hardware and the slots show
// occupancy over time. A warp is a slice "#<launch_id> <label>" on its
// slot's track (args launch_id, pid, block [x,y,z], warp; 0 on the slot's
// "cycles" counter, like an instant) from its first record to its last, its
// ranges nested one level deeper; its lanes > 0 on "slot 05 lane n" beside
// the slot.
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
// overlap_spans() counts the slices put on overlap tracks. A slot's
// occupant is always a warp of an open launch with its slice open there:
// the launch's end closes its warps' slices.
//
// kAuto (the default) chooses per launch: launch-centric for the first
// kAutoLaunchLimit launches, hardware-centric from the next on, or from the
// first launch after the trace has kAutoTrackLimit tracks. The sink streams
// and cannot know the run's size beforehand: launches before the switch
// keep their tracks. An instant "layout: ..." on "smprof run" at the first
// launch (and at the switch) says which layout, from which launch, and why;
// description() says the same for the summary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "collector/perfetto_sequences.h"
#include "collector/perfetto_state.h"
#include "collector/perfetto_tracks.h"
#include "collector/trace_sink.h"

namespace smprof {

// Where PerfettoSink puts the warps (perfetto_sink.h).
enum class TraceLayout { kLaunch, kHardware, kAuto };

// "launch", "hardware" or "auto"; nullptr for another word.
const char* TraceLayoutName(TraceLayout layout);
bool ParseTraceLayout(std::string_view word, TraceLayout* layout);

namespace perfetto {

class HardwareLayout {
 public:
  static constexpr uint64_t kAutoLaunchLimit = 256;
  static constexpr uint64_t kAutoTrackLimit = 100000;

  // The launches whose warps hold slots, and the GPUs the slots are under.
  HardwareLayout(TrackTree& tracks, WarpSequences& sequences, const Launches& launches, Gpus& gpus)
      : tracks_(tracks), sequences_(sequences), launches_(launches), gpus_(gpus) {}

  // Before the first launch; the default is kAuto.
  void set_layout(TraceLayout layout) { layout_ = layout; }
  // Whether the launch about to be announced is hardware-centric; the
  // instant "layout: ..." on `run_track` when that changes.
  bool Choose(const trace::LaunchRecord& launch, uint64_t run_track);
  // The layout of the latest launch (kLaunch or kHardware; before any
  // launch, what the first one will get).
  TraceLayout layout_used() const;
  // Which layout was used, from which launch and why, in words.
  std::string description() const;
  // Warp slices put on a "slot NN overlap" track.
  uint64_t overlap_spans() const { return overlap_spans_; }

  // The GPU a launch's slots are under (an undescribed one for a launch
  // whose process never described its device).
  Gpu& GpuOf(const trace::LaunchRecord& launch);
  // The track of SM `sm` under `g`, made on first use.
  uint64_t SmTrack(Gpu& g, uint16_t sm);
  // Before a record of `w` (warp `index` of `l`, which has the launch's
  // sequence) spanning [begin, end]: opens its warp slice on a free slot
  // track if it has none that can hold it, and extends the track's busy
  // time. Nothing for a launch-centric launch.
  void Place(Launch& l, uint32_t index, Warp& w, uint64_t begin, uint64_t end) {
    if (!l.hardware) return;
    if (!w.span_open || begin < w.span_begin) OpenSpan(l, index, w, begin);
    if (end > w.slot->busy_until) w.slot->busy_until = end;
  }
  // Writes the pending ENDs of `w` and its warp slice's END.
  void CloseSpan(Warp& w);
  // Describes lane n (>= 1) of slot `s`: "slot 05 lane n" beside it.
  void DescribeLane(const Slot& s, uint32_t n, Lane* lane);

  HardwareLayout(const HardwareLayout&) = delete;
  HardwareLayout& operator=(const HardwareLayout&) = delete;

 private:
  void OpenSpan(Launch& l, uint32_t index, Warp& w, uint64_t t);

  TrackTree& tracks_;
  WarpSequences& sequences_;
  const Launches& launches_;
  Gpus& gpus_;

  TraceLayout layout_ = TraceLayout::kAuto;
  uint64_t launches_seen_ = 0;
  int last_hardware_ = -1;     // layout of the latest launch: -1 none yet, 0 launch, 1 hardware
  uint64_t switched_at_ = 0;   // launch number (1-based) of the latest change
  std::string switch_reason_;  // why
  uint64_t overlap_spans_ = 0;
};

}  // namespace perfetto
}  // namespace smprof
