#include "collector/clock_map.h"

#include <algorithm>
#include <cmath>

namespace smprof::arena {

void ClockMap::AddAnchor(uint16_t sm, uint64_t clock, uint64_t time_ns) {
  if (sms_.size() <= sm) sms_.resize(static_cast<size_t>(sm) + 1);
  sms_[sm].anchors.push_back({clock, time_ns});
}

void ClockMap::Build() {
  for (Sm& sm : sms_) {
    if (sm.anchors.empty()) continue;
    std::sort(sm.anchors.begin(), sm.anchors.end(), [](const Anchor& a, const Anchor& b) { return a.clock < b.clock; });
    sm.cycles_per_ns = fallback_;
    const Anchor& first = sm.anchors.front();
    const Anchor& last = sm.anchors.back();
    if (last.time_ns > first.time_ns && last.time_ns - first.time_ns >= kMinFitSpanNs) {
      const double rate =
          static_cast<double>(last.clock - first.clock) / static_cast<double>(last.time_ns - first.time_ns);
      // A rate far from the fallback means the anchors are not what they seem
      // (an SM id reused across a reset, corrupt headers): keep the fallback.
      if (std::isfinite(rate) && (fallback_ <= 0 || (rate > fallback_ / 4 && rate < fallback_ * 4))) {
        sm.cycles_per_ns = rate;
      }
    }
    sm.ns_per_cycle = 1.0 / sm.cycles_per_ns;
  }
}

// Every event goes through here once or twice: a multiplication by the
// inverse rate and an inline rounding (half away from zero, as llround)
// rather than a division and a libm call, which took half the mapping time.
inline int64_t ClockMap::Through(const Anchor& a, uint64_t clock, double ns_per_cycle) {
  // Differences only: absolute times (~1.8e18 ns) do not fit a double exactly.
  const double delta = static_cast<double>(static_cast<int64_t>(clock - a.clock)) * ns_per_cycle;
  const double rounded = delta < 0 ? delta - 0.5 : delta + 0.5;
  // Anchors are untrusted (the collector reads a producer's bytes): a step
  // out of range is clamped and the sum wraps, so nothing overflows; the
  // time is then as wrong as the anchor, and the launch matcher's problem.
  constexpr double kLimit = 4e18;
  const int64_t step = rounded >= kLimit    ? int64_t{4'000'000'000'000'000'000}
                       : rounded <= -kLimit ? -int64_t{4'000'000'000'000'000'000}
                                            : static_cast<int64_t>(rounded);
  return static_cast<int64_t>(a.time_ns + static_cast<uint64_t>(step));
}

ClockMap::Cursor::Cursor(const ClockMap& map, uint16_t sm)
    : map_(map),
      sm_(sm < map.sms_.size() && !map.sms_[sm].anchors.empty() && map.sms_[sm].cycles_per_ns > 0 ? &map.sms_[sm]
                                                                                                  : nullptr) {}

uint64_t ClockMap::Cursor::ToNs(uint64_t clock) {
  if (sm_ == nullptr) return 0;
  const Sm& sm = *static_cast<const Sm*>(sm_);
  const std::vector<Anchor>& anchors = sm.anchors;
  const double rate = sm.cycles_per_ns;
  const double ns_per_cycle = sm.ns_per_cycle;
  // The nearest anchor at or before the clock: moves forward with the run.
  size_t nearest = nearest_;
  if (nearest == SIZE_MAX || clock < anchors[nearest].clock ||
      (nearest + 1 < anchors.size() && anchors[nearest + 1].clock <= clock)) {
    if (nearest != SIZE_MAX && clock >= anchors[nearest].clock) {
      while (nearest + 1 < anchors.size() && anchors[nearest + 1].clock <= clock) ++nearest;
    } else {
      auto next = std::upper_bound(anchors.begin(), anchors.end(), clock,
                                   [](uint64_t c, const Anchor& a) { return c < a.clock; });
      nearest = next == anchors.begin() ? 0 : static_cast<size_t>(next - anchors.begin()) - 1;
    }
  }
  if (nearest != nearest_) {
    nearest_ = nearest;
    ranked_.clear();
    const size_t lo = nearest > kNeighbours ? nearest - kNeighbours : 0;
    const size_t hi = std::min(anchors.size(), nearest + kNeighbours + 1);
    const Anchor& n = anchors[nearest];
    for (size_t i = lo; i < hi; ++i) {
      if (i == nearest) continue;
      const double difference = static_cast<double>(static_cast<int64_t>(anchors[i].time_ns - n.time_ns)) -
                                static_cast<double>(static_cast<int64_t>(anchors[i].clock - n.clock)) * ns_per_cycle;
      ranked_.emplace_back(difference, static_cast<uint32_t>(i));
    }
    std::sort(ranked_.begin(), ranked_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  }
  const int64_t base = Through(anchors[nearest], clock, ns_per_cycle);
  int64_t best = base;
  const int64_t span = static_cast<int64_t>(kNeighbourSpanNs * rate);
  for (const auto& [difference, i] : ranked_) {
    // Its estimate is base + difference within 1 ns of rounding (2 for
    // margin): none of the rest can exceed the best found.
    if (difference + 2.0 < static_cast<double>(best - base)) break;
    const int64_t gap = static_cast<int64_t>(clock - anchors[i].clock);
    if (std::llabs(gap) > span) continue;
    const int64_t estimate = Through(anchors[i], clock, ns_per_cycle);
    if (estimate > best && estimate - base <= kMaxTickNs) best = estimate;
  }
  return best < 0 ? 0 : static_cast<uint64_t>(best);
}

uint64_t ClockMap::ToNs(uint16_t sm, uint64_t clock) const {
  if (sm >= sms_.size() || sms_[sm].anchors.empty() || sms_[sm].cycles_per_ns <= 0) return 0;
  const std::vector<Anchor>& anchors = sms_[sm].anchors;
  const double rate = sms_[sm].cycles_per_ns;
  const double ns_per_cycle = sms_[sm].ns_per_cycle;
  auto next =
      std::upper_bound(anchors.begin(), anchors.end(), clock, [](uint64_t c, const Anchor& a) { return c < a.clock; });
  const size_t nearest = next == anchors.begin() ? 0 : static_cast<size_t>(next - anchors.begin()) - 1;
  const auto through = [&](const Anchor& a) { return Through(a, clock, ns_per_cycle); };
  // Each anchor's %globaltimer reading is its true time rounded down to a
  // tick, so each gives a lower bound; the tightest of the anchors near the
  // event (where the rate's error does not matter) is the estimate.
  const int64_t base = through(anchors[nearest]);
  int64_t best = base;
  const size_t lo = nearest > kNeighbours ? nearest - kNeighbours : 0;
  const size_t hi = std::min(anchors.size(), nearest + kNeighbours + 1);
  for (size_t i = lo; i < hi; ++i) {
    const int64_t gap = static_cast<int64_t>(clock - anchors[i].clock);
    if (std::llabs(gap) > static_cast<int64_t>(kNeighbourSpanNs * rate)) continue;
    // An estimate more than a tick from the nearest anchor's is not rounding:
    // the anchors disagree (a corrupt header), so it is not trusted.
    const int64_t estimate = through(anchors[i]);
    if (estimate > best && estimate - base <= kMaxTickNs) best = estimate;
  }
  return best < 0 ? 0 : static_cast<uint64_t>(best);
}

double ClockMap::CyclesPerNs(uint16_t sm) const {
  return sm < sms_.size() && !sms_[sm].anchors.empty() ? sms_[sm].cycles_per_ns : fallback_;
}

}  // namespace smprof::arena
