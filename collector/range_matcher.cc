#include "collector/range_matcher.h"

#include <algorithm>
#include <type_traits>

namespace smprof {

// --- the name index -------------------------------------------------------------

size_t RangeMatcher::TopIndex::Home(uint32_t name_id) const {
  return static_cast<size_t>((uint64_t{name_id} * 0x9E3779B97F4A7C15ull) >> 32) & (slots_.size() - 1);
}

uint32_t RangeMatcher::TopIndex::Find(uint32_t name_id) const {
  if (slots_.empty()) return kNone;
  const size_t mask = slots_.size() - 1;
  for (size_t i = Home(name_id);; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.pos == kNone) return kNone;
    if (s.name_id == name_id) return s.pos;
  }
}

uint32_t& RangeMatcher::TopIndex::At(uint32_t name_id) {
  if (2 * (used_ + 1) > slots_.size()) Grow();
  const size_t mask = slots_.size() - 1;
  for (size_t i = Home(name_id);; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.pos == kNone) {
      s.name_id = name_id;
      ++used_;
      return s.pos;
    }
    if (s.name_id == name_id) return s.pos;
  }
}

void RangeMatcher::TopIndex::Erase(uint32_t name_id) {
  if (slots_.empty()) return;
  const size_t mask = slots_.size() - 1;
  size_t hole = Home(name_id);
  for (;; hole = (hole + 1) & mask) {
    if (slots_[hole].pos == kNone) return;
    if (slots_[hole].name_id == name_id) break;
  }
  // Shift back every later entry of the run that may move into the hole:
  // one whose home is not cyclically in (hole, j].
  for (size_t j = (hole + 1) & mask; slots_[j].pos != kNone; j = (j + 1) & mask) {
    const size_t home = Home(slots_[j].name_id);
    const bool stays = hole < j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole].pos = kNone;
  --used_;
}

void RangeMatcher::TopIndex::Clear() {
  if (slots_.size() > 4 * kKeptCapacity) {
    std::vector<Slot>().swap(slots_);
  } else {
    for (Slot& s : slots_) s.pos = kNone;
  }
  used_ = 0;
}

void RangeMatcher::TopIndex::Grow() {
  std::vector<Slot> old(std::max<size_t>(16, 2 * slots_.size()), Slot{0, kNone});
  old.swap(slots_);
  used_ = 0;
  for (const Slot& s : old) {
    if (s.pos != kNone) At(s.name_id) = s.pos;
  }
}

// --- open BEGINs ---------------------------------------------------------------
// Oldest first. `top_` maps a name to its most recent open BEGIN and each
// BEGIN links to the previous open one of its name. A BEGIN closed below the
// top leaves a dead slot; dead slots at the top are popped at once and the
// rest compacted away once they outnumber the open ones.

// Every BEGIN comes here: the new elements are written field by field in
// place. Built as temporaries on the stack and copied in, they cost a
// store-forwarding stall per 16 bytes copied (most of this function's time).
template <bool kPhase>
void RangeMatcher::Push(uint32_t name_id, uint64_t ns, uint32_t cycles) {
  const auto pos = static_cast<uint32_t>(open_.size());
  uint32_t prev = kNone;
  if constexpr (kPhase) {
    phase_pos_ = pos;
  } else {
    uint32_t& top = top_.At(name_id);
    prev = top;
    top = pos;
  }
  const auto slot = static_cast<uint32_t>(episode_.size());
  // Settle writes the rest (value, value_flags, phase) when the range closes.
  Record& r = episode_.emplace_back();
  r.kind = Kind::kSlice;
  r.why = Why::kNone;
  r.name_id = name_id;
  r.begin_ns = ns;
  r.end_ns = ns;
  r.cycles = 0;
  r.lane = kNone;
  r.depth = 0;
  r.order = slot;
  Open& o = open_.emplace_back();
  o.name_id = name_id;
  o.prev_same = prev;
  o.begin_ns = ns;
  o.begin_cycles = cycles;
  o.slot = slot;
  o.live = true;
  o.early = false;
  o.phase = kPhase;
  ++live_;
  ++reserved_;
}

uint32_t RangeMatcher::Find(uint32_t name_id) const { return top_.Find(name_id); }

// Closes the BEGIN at `pos`: the latest open one of its name, or the oldest
// of all (Oldest()). A link to the latter from a newer BEGIN of its name is
// dropped lazily: a dead link target means no older open BEGIN of that name.
void RangeMatcher::Close(uint32_t pos) {
  Open& o = open_[pos];
  o.live = false;
  --live_;
  if (o.phase) {
    phase_pos_ = kNone;
  } else if (top_.Find(o.name_id) == pos) {
    if (o.prev_same == kNone || !open_[o.prev_same].live) {
      top_.Erase(o.name_id);
    } else {
      top_.At(o.name_id) = o.prev_same;
    }
  }
  while (!open_.empty() && !open_.back().live) open_.pop_back();
  if (live_ == 0) {
    open_.clear();
    bottom_ = 0;
  } else if (open_.size() >= 64 && open_.size() - live_ > live_) {
    Compact();
  }
}

uint32_t RangeMatcher::Oldest() {
  while (!open_[bottom_].live) ++bottom_;
  size_t pos = bottom_;
  while (!open_[pos].live || open_[pos].phase) ++pos;
  return static_cast<uint32_t>(pos);
}

void RangeMatcher::EvictIfFull(uint64_t ns) {
  if (live_ < kMaxOpen) return;
  const uint32_t oldest = Oldest();
  const Open o = open_[oldest];
  Close(oldest);
  Settle(o, Kind::kUnterminated, Why::kTooManyOpen, std::max(o.begin_ns, ns), 0, Value{});
}

void RangeMatcher::Compact() {
  std::vector<Open> kept;
  kept.reserve(live_);
  top_.Clear();
  for (const Open& o : open_) {
    if (!o.live) continue;
    const auto pos = static_cast<uint32_t>(kept.size());
    kept.push_back(o);
    if (o.phase) {
      phase_pos_ = pos;
      continue;
    }
    uint32_t& top = top_.At(o.name_id);
    kept.back().prev_same = top;
    top = pos;
  }
  open_.swap(kept);
  bottom_ = 0;
}

// --- events --------------------------------------------------------------------

void RangeMatcher::Begin(uint32_t name_id, uint64_t ns, uint32_t cycles) {
  last_ns_ = std::max(last_ns_, ns);
  EvictIfFull(ns);
  Push<false>(name_id, ns, cycles);
}

void RangeMatcher::End(uint32_t name_id, uint64_t ns, uint32_t cycles, Value value) {
  last_ns_ = std::max(last_ns_, ns);
  const uint32_t pos = Find(name_id);
  if (pos == kNone) {
    Append(Kind::kUnmatchedEnd, name_id, ns, value);
  } else {
    const Open o = open_[pos];
    Close(pos);
    Settle(o, Kind::kSlice, Why::kNone, std::max(o.begin_ns, ns), cycles - o.begin_cycles, value);
  }
  if (live_ == 0) Release();
}

void RangeMatcher::Instant(uint32_t name_id, uint64_t ns, Value value) {
  last_ns_ = std::max(last_ns_, ns);
  Append(Kind::kInstant, name_id, ns, value);
  if (live_ == 0) Release();
}

void RangeMatcher::Phase(uint32_t name_id, uint64_t ns, uint32_t cycles) {
  last_ns_ = std::max(last_ns_, ns);
  if (phase_pos_ != kNone) {
    const Open o = open_[phase_pos_];
    Close(phase_pos_);
    Settle(o, Kind::kSlice, Why::kNone, std::max(o.begin_ns, ns), cycles - o.begin_cycles, Value{});
  }
  EvictIfFull(ns);
  Push<true>(name_id, ns, cycles);
}

bool RangeMatcher::PhaseEnd(uint32_t name_id, uint64_t ns, uint32_t cycles) {
  last_ns_ = std::max(last_ns_, ns);
  const bool open = phase_pos_ != kNone;
  if (open) {
    const Open o = open_[phase_pos_];
    Close(phase_pos_);
    Settle(o, Kind::kSlice, Why::kNone, std::max(o.begin_ns, ns), cycles - o.begin_cycles, Value{});
  } else {
    Append(Kind::kUnmatchedEnd, name_id, ns, Value{});
  }
  if (live_ == 0) Release();
  return open;
}

void RangeMatcher::CloseAll(uint64_t end_ns, Why why) {
  // Innermost first: all end at the same time, so they still nest.
  while (live_ != 0) {
    const auto pos = static_cast<uint32_t>(open_.size() - 1);  // the top is always live
    const Open o = open_[pos];
    Close(pos);
    Settle(o, Kind::kUnterminated, why, std::max(o.begin_ns, end_ns), 0, Value{});
  }
  Release();
}

// Records are written field by field in place (see Push).
void RangeMatcher::Settle(const Open& o, Kind kind, Why why, uint64_t end_ns, uint32_t cycles, Value value) {
  // Open across an early write-out: on its own lane, as it closes.
  Record& r = o.early ? ready_.emplace_back() : episode_[o.slot];
  r.kind = kind;
  r.why = why;
  r.value_flags = value.flags;
  r.phase = o.phase;
  r.name_id = o.name_id;
  r.begin_ns = o.begin_ns;
  r.end_ns = end_ns;
  r.cycles = cycles;
  r.depth = 0;
  r.value = value.value;
  if (o.early) {
    r.lane = early_lane_;
    r.order = 0;
    return;
  }
  r.lane = 0;
  r.order = o.slot;
  --reserved_;
  WriteOutEarlyIfFull();
}

void RangeMatcher::Append(Kind kind, uint32_t name_id, uint64_t ns, Value value) {
  Record& r = episode_.emplace_back();
  r.kind = kind;
  r.why = Why::kNone;
  r.value_flags = value.flags;
  r.phase = false;
  r.name_id = name_id;
  r.begin_ns = ns;
  r.end_ns = ns;
  r.cycles = 0;
  r.lane = 0;
  r.depth = 0;
  r.order = static_cast<uint32_t>(episode_.size() - 1);
  r.value = value.value;
  WriteOutEarlyIfFull();
}

void RangeMatcher::WriteOutEarlyIfFull() {
  if (episode_.size() - reserved_ < kMaxBuffered) return;
  // Write the episode out now: what is still open may start before it, so
  // it leaves the episode (its reserved slots) and closes on a lane of its own.
  for (Open& o : open_) o.early = o.early || o.live;
  if (early_lane_ == kNone) early_lane_ = std::max<uint32_t>(1, static_cast<uint32_t>(lanes_.size()));
  episode_.erase(std::remove_if(episode_.begin(), episode_.end(), [](const Record& r) { return r.lane == kNone; }),
                 episode_.end());
  reserved_ = 0;
  Release();
}

void RangeMatcher::Release() {
  if (episode_.empty()) return;
  // Start order; the longer first on equal starts (the enclosing one), else
  // recording order. Slots are in recording order, which is start order
  // unless a warp's clock went backwards or equal starts are out of order.
  const auto before = [](const Record& a, const Record& b) {
    if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
    return a.end_ns != b.end_ns ? a.end_ns > b.end_ns : a.order < b.order;
  };
  if (!std::is_sorted(episode_.begin(), episode_.end(), before)) std::sort(episode_.begin(), episode_.end(), before);
  if (lanes_.empty()) lanes_.emplace_back();
  for (Record& r : episode_) {
    const bool slice = r.kind == Kind::kSlice || r.kind == Kind::kUnterminated;
    uint32_t lane = 0;
    for (;; ++lane) {
      if (lane == lanes_.size()) lanes_.emplace_back();
      if (lane == early_lane_) continue;
      std::vector<uint64_t>& open = lanes_[lane];
      while (!open.empty() && open.back() <= r.begin_ns) open.pop_back();
      // Instants stay on lane 0: a point nests anywhere.
      if (!slice || open.empty() || open.back() >= r.end_ns) break;
    }
    r.lane = lane;
    r.depth = static_cast<uint32_t>(lanes_[lane].size());
    if (slice) lanes_[lane].push_back(r.end_ns);
  }
  if (ready_.empty()) {
    ready_.swap(episode_);  // the usual case: no copy
  } else {
    ready_.insert(ready_.end(), episode_.begin(), episode_.end());
  }
  episode_.clear();
}

void RangeMatcher::Reset() {
  const auto keep = [](auto& v) {
    if (v.capacity() > kKeptCapacity) {
      std::remove_reference_t<decltype(v)>().swap(v);
    } else {
      v.clear();
    }
  };
  keep(open_);
  keep(episode_);
  keep(ready_);
  lanes_.clear();
  top_.Clear();
  live_ = 0;
  bottom_ = 0;
  reserved_ = 0;
  last_ns_ = 0;
  phase_pos_ = kNone;
  early_lane_ = kNone;
}

}  // namespace smprof
