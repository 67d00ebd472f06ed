#include "collector/perfetto_hardware.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "collector/perfetto_annotations.h"
#include "collector/perfetto_fields.h"

namespace smprof {

const char* TraceLayoutName(TraceLayout layout) {
  switch (layout) {
    case TraceLayout::kLaunch:
      return "launch";
    case TraceLayout::kHardware:
      return "hardware";
    case TraceLayout::kAuto:
      return "auto";
  }
  return nullptr;
}

bool ParseTraceLayout(std::string_view word, TraceLayout* layout) {
  for (const TraceLayout l : {TraceLayout::kLaunch, TraceLayout::kHardware, TraceLayout::kAuto}) {
    if (word == TraceLayoutName(l)) {
      *layout = l;
      return true;
    }
  }
  return false;
}

namespace perfetto {
namespace {

constexpr uint32_t kUnknownGpu = UINT32_MAX;  // launches of an undescribed GPU
constexpr uint32_t kOverlapSlots = 16;        // ranks of a slot's overlap tracks

}  // namespace

// --- the choice ------------------------------------------------------------

TraceLayout HardwareLayout::layout_used() const {
  if (last_hardware_ >= 0) return last_hardware_ == 1 ? TraceLayout::kHardware : TraceLayout::kLaunch;
  return layout_ == TraceLayout::kHardware ? TraceLayout::kHardware : TraceLayout::kLaunch;
}

std::string HardwareLayout::description() const {
  const char* used = layout_used() == TraceLayout::kHardware ? "hardware-centric" : "launch-centric";
  if (last_hardware_ < 0) return std::string(used) + " (" + TraceLayoutName(layout_) + "; no launch)";
  if (switched_at_ > 1) {
    return std::string(used) + " from launch " + std::to_string(switched_at_) + " on (" + switch_reason_ +
           "); launch-centric before";
  }
  return std::string(used) + " (" + switch_reason_ + ")";
}

bool HardwareLayout::Choose(const trace::LaunchRecord& launch, uint64_t run_track) {
  ++launches_seen_;
  bool hardware = false;
  std::string reason;
  switch (layout_) {
    case TraceLayout::kLaunch:
      reason = "asked for";
      break;
    case TraceLayout::kHardware:
      hardware = true;
      reason = "asked for";
      break;
    case TraceLayout::kAuto:
      if (last_hardware_ == 1) {
        hardware = true;  // once switched, for the rest of the run
      } else if (launches_seen_ > kAutoLaunchLimit) {
        hardware = true;
        reason = "auto: more than " + std::to_string(kAutoLaunchLimit) + " launches";
      } else if (tracks_.tracks() >= kAutoTrackLimit) {
        hardware = true;
        reason = "auto: more than " + std::to_string(kAutoTrackLimit) + " tracks";
      } else {
        reason = "auto: launch-centric up to " + std::to_string(kAutoLaunchLimit) + " launches and " +
                 std::to_string(kAutoTrackLimit) + " tracks, hardware-centric beyond";
      }
      break;
  }
  if (last_hardware_ != (hardware ? 1 : 0)) {
    last_hardware_ = hardware ? 1 : 0;
    switched_at_ = launches_seen_;
    switch_reason_ = reason;
    Annotations args;
    args.String("layout", hardware ? "hardware" : "launch")
        .String("requested", TraceLayoutName(layout_))
        .Uint("from_launch", launches_seen_)
        .Uint("launch_id", launch.launch_id)
        .Uint("pid", launch.pid)
        .String("reason", reason);
    tracks_.Event(run_track, kInstant, hardware ? "layout: hardware-centric" : "layout: launch-centric",
                  launch.start_ns, &args);
  }
  return hardware;
}

// --- GPUs, SMs, slots ------------------------------------------------------

Gpu& HardwareLayout::GpuOf(const trace::LaunchRecord& launch) {
  if (launch.gpu >= 0) {
    const auto it = gpus_.find(static_cast<uint32_t>(launch.gpu));
    if (it != gpus_.end()) return *it->second;
  }
  auto& g = gpus_[kUnknownGpu];
  if (!g) {
    g = std::make_unique<Gpu>();
    g->track = tracks_.NewTrack(0, "GPU ? | not described by its process", -1, true);
  }
  return *g;
}

uint64_t HardwareLayout::SmTrack(Gpu& g, uint16_t sm) {
  auto [it, inserted] = g.sms.try_emplace(sm, 0);
  if (inserted) {
    char name[16];
    std::snprintf(name, sizeof(name), "SM %03u", static_cast<unsigned>(sm));
    it->second = tracks_.NewTrack(g.track, name, sm, true);
  }
  return it->second;
}

void HardwareLayout::DescribeLane(const Slot& s, uint32_t n, Lane* lane) {
  lane->track =
      tracks_.NewTrack(s.parent, s.name + " lane " + std::to_string(n), s.rank + std::min(n, kLaneSlots - 1), false);
  if (sequences_.cycles_counters()) lane->cycles = tracks_.NewCounterTrack(lane->track, "cycles");
}

// --- warp slices -----------------------------------------------------------

void HardwareLayout::OpenSpan(Launch& l, uint32_t index, Warp& w, uint64_t t) {
  if (w.span_open) CloseSpan(w);
  Gpu& g = *l.gpu;
  auto& list = g.slots[(static_cast<uint32_t>(w.sm) << 16) | w.hw_warp];
  Slot* slot = nullptr;
  for (size_t i = 0; slot == nullptr; ++i) {
    if (i == list.size()) {
      auto s = std::make_unique<Slot>();
      char name[48];
      if (i == 0) {
        std::snprintf(name, sizeof(name), "slot %02u", static_cast<unsigned>(w.hw_warp));
      } else if (i == 1) {
        std::snprintf(name, sizeof(name), "slot %02u overlap", static_cast<unsigned>(w.hw_warp));
      } else {
        std::snprintf(name, sizeof(name), "slot %02u overlap %zu", static_cast<unsigned>(w.hw_warp), i);
      }
      s->parent = SmTrack(g, w.sm);
      s->name = name;
      s->rank = (static_cast<int64_t>(w.hw_warp) * kOverlapSlots + std::min<size_t>(i, kOverlapSlots - 1)) * kLaneSlots;
      s->track = tracks_.NewTrack(s->parent, s->name, s->rank, false);
      if (sequences_.cycles_counters()) s->cycles = tracks_.NewCounterTrack(s->track, "cycles");
      list.push_back(std::move(s));
    }
    Slot& c = *list[i];
    if (c.used && t < c.busy_until) continue;  // taken at t
    if (c.warp != kNoWarp) {                   // its warp's records all end by t: its slice ends
      const auto it = launches_.find(c.launch);
      if (it != launches_.end() && c.warp < it->second->warps.size()) {
        Warp& o = it->second->warps[c.warp];
        if (o.span_open && o.slot == &c) CloseSpan(o);
      }
      c.warp = kNoWarp;
    }
    slot = &c;
    if (i > 0) ++overlap_spans_;
  }
  slot->used = true;
  slot->launch = l.index;
  slot->warp = index;
  slot->busy_until = std::max(slot->busy_until, t);
  w.slot = slot;
  w.track = slot->track;
  w.cycles = slot->cycles;
  w.span_open = true;
  w.span_begin = t;
  // A sequence whose defaults are the slot's track (Place follows the
  // sink's choice of the launch's warp: `w` has the launch's sequence, or
  // none yet).
  if (w.seq.id != 0) sequences_.End(w.seq);
  sequences_.Start(w.seq, Lane{w.track, w.cycles});

  Annotations args;
  args.Uint("launch_id", l.launch_id)
      .Uint("pid", l.pid)
      .Json("block", {w.block[0], w.block[1], w.block[2]})
      .Uint("warp", w.warp);
  sequences_.BeginNamedSlice(w.seq, t, l.title, args);
}

void HardwareLayout::CloseSpan(Warp& w) {
  Slot& s = *w.slot;
  const uint64_t end = std::max(s.busy_until, w.span_begin);
  sequences_.WriteEnds(w.seq, s.track, s.lanes);
  sequences_.EndSlice(w.seq, s.track, end);
  w.span_open = false;
  w.closed_begin = w.span_begin;
  w.closed_end = end;
  s.warp = kNoWarp;
}

}  // namespace perfetto
}  // namespace smprof
