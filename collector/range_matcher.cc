#include "collector/range_matcher.h"

#include <algorithm>

namespace smprof {

// --- open BEGINs ---------------------------------------------------------------
// Oldest first. `top_` maps a name to its most recent open BEGIN and each
// BEGIN links to the previous open one of its name. A BEGIN closed below the
// top leaves a dead slot; dead slots at the top are popped at once and the
// rest compacted away once they outnumber the open ones.

void RangeMatcher::Push(uint32_t name_id, uint64_t ns, uint32_t cycles) {
  const auto pos = static_cast<uint32_t>(open_.size());
  auto [it, inserted] = top_.try_emplace(name_id, pos);
  const uint32_t prev = inserted ? kNone : it->second;
  it->second = pos;
  open_.push_back({name_id, prev, ns, cycles, true, false});
  ++live_;
}

uint32_t RangeMatcher::Find(uint32_t name_id) const {
  auto it = top_.find(name_id);
  return it == top_.end() ? kNone : it->second;
}

// Closes the BEGIN at `pos`: the latest open one of its name, or the oldest
// of all (Oldest()). A link to the latter from a newer BEGIN of its name is
// dropped lazily: a dead link target means no older open BEGIN of that name.
void RangeMatcher::Close(uint32_t pos) {
  Open& o = open_[pos];
  o.live = false;
  --live_;
  auto it = top_.find(o.name_id);
  if (it->second == pos) {
    if (o.prev_same == kNone || !open_[o.prev_same].live) {
      top_.erase(it);
    } else {
      it->second = o.prev_same;
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
  return static_cast<uint32_t>(bottom_);
}

void RangeMatcher::Compact() {
  std::vector<Open> kept;
  kept.reserve(live_);
  top_.clear();
  for (const Open& o : open_) {
    if (!o.live) continue;
    const auto pos = static_cast<uint32_t>(kept.size());
    auto [it, inserted] = top_.try_emplace(o.name_id, pos);
    kept.push_back(o);
    kept.back().prev_same = inserted ? kNone : it->second;
    it->second = pos;
  }
  open_.swap(kept);
  bottom_ = 0;
}

// --- events --------------------------------------------------------------------

void RangeMatcher::Begin(uint32_t name_id, uint64_t ns, uint32_t cycles) {
  last_ns_ = std::max(last_ns_, ns);
  if (live_ >= kMaxOpen) {
    const uint32_t oldest = Oldest();
    const Open o = open_[oldest];
    Close(oldest);
    Buffer({Kind::kUnterminated, Why::kTooManyOpen, o.name_id, o.begin_ns, std::max(o.begin_ns, ns), 0, 0, 0},
           o.early);
  }
  Push(name_id, ns, cycles);
}

void RangeMatcher::End(uint32_t name_id, uint64_t ns, uint32_t cycles) {
  last_ns_ = std::max(last_ns_, ns);
  const uint32_t pos = Find(name_id);
  if (pos == kNone) {
    Buffer({Kind::kUnmatchedEnd, Why::kNone, name_id, ns, ns, 0, 0, 0}, false);
  } else {
    const Open o = open_[pos];
    Close(pos);
    Buffer({Kind::kSlice, Why::kNone, name_id, o.begin_ns, std::max(o.begin_ns, ns), cycles - o.begin_cycles, 0, 0},
           o.early);
  }
  if (live_ == 0) Release();
}

void RangeMatcher::Instant(uint32_t name_id, uint64_t ns) {
  last_ns_ = std::max(last_ns_, ns);
  Buffer({Kind::kInstant, Why::kNone, name_id, ns, ns, 0, 0, 0}, false);
  if (live_ == 0) Release();
}

void RangeMatcher::CloseAll(uint64_t end_ns, Why why) {
  // Innermost first: all end at the same time, so they still nest.
  while (live_ != 0) {
    const auto pos = static_cast<uint32_t>(open_.size() - 1);  // the top is always live
    const Open o = open_[pos];
    Close(pos);
    Buffer({Kind::kUnterminated, why, o.name_id, o.begin_ns, std::max(o.begin_ns, end_ns), 0, 0, 0}, o.early);
  }
  Release();
}

void RangeMatcher::Buffer(const Record& r, bool early) {
  if (!early) {
    episode_.push_back(r);
    if (episode_.size() >= kMaxBuffered) {
      // Write the episode out now: what is still open may start before it.
      for (Open& o : open_) o.early = o.early || o.live;
      if (early_lane_ == kNone) early_lane_ = std::max<uint32_t>(1, static_cast<uint32_t>(lanes_.size()));
      Release();
    }
    return;
  }
  // A range open across an early write-out: on its own lane, as it closes.
  ready_.push_back(r);
  ready_.back().lane = early_lane_;
}

void RangeMatcher::Release() {
  if (episode_.empty()) return;
  // Start order; the longer first on equal starts (the enclosing one), else
  // recording order.
  std::stable_sort(episode_.begin(), episode_.end(), [](const Record& a, const Record& b) {
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
  });
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
    ready_.push_back(r);
  }
  episode_.clear();
}

}  // namespace smprof
