#include "collector/clock_map.h"

#include <algorithm>
#include <cmath>

#include "common/run_parts.h"

namespace smprof::arena {

void ClockMap::AddAnchor(uint16_t sm, uint64_t clock, uint64_t time_ns) {
  if (sms_.size() <= sm) sms_.resize(static_cast<size_t>(sm) + 1);
  sms_[sm].anchors.push_back({clock, time_ns});
}

void ClockMap::Build(unsigned threads) {
  const size_t n = sms_.size();
  const unsigned parts = PartsFor(threads, n, 1);
  RunParts(parts, [&](unsigned i) {
    for (size_t sm = n * i / parts; sm < n * (i + 1) / parts; ++sm) BuildSm(&sms_[sm], fallback_);
  });
}

void ClockMap::BuildSm(Sm* sm, double fallback) {
  if (sm->anchors.empty()) return;
  std::vector<Anchor>& anchors = sm->anchors;
  std::sort(anchors.begin(), anchors.end(), [](const Anchor& a, const Anchor& b) { return a.clock < b.clock; });
  sm->cycles_per_ns = fallback;
  const Anchor& first = anchors.front();
  const Anchor& last = anchors.back();
  if (last.time_ns > first.time_ns && last.time_ns - first.time_ns >= kMinFitSpanNs) {
    const double rate =
        static_cast<double>(last.clock - first.clock) / static_cast<double>(last.time_ns - first.time_ns);
    // A rate far from the fallback means the anchors are not what they seem
    // (an SM id reused across a reset, corrupt headers): keep the fallback.
    if (std::isfinite(rate) && (fallback <= 0 || (rate > fallback / 4 && rate < fallback * 4))) {
      sm->cycles_per_ns = rate;
    }
  }
  sm->ns_per_cycle = 1.0 / sm->cycles_per_ns;
  if (!(sm->cycles_per_ns > 0)) return;  // unknown: ToNs maps nothing
  // Each anchor's rivals. A neighbour whose estimate is below the nearest's
  // by more than the rounding (1 ns; 2 for margin) never wins, nor does one
  // above it by more than kMaxTickNs (rejected as a disagreeing anchor), nor
  // one farther than the span from every clock the anchor is nearest to
  // ([its clock, the next anchor's); any clock before the first anchor).
  const auto span = static_cast<uint64_t>(kNeighbourSpanNs * sm->cycles_per_ns);
  sm->first_rival.assign(anchors.size() + 1, 0);
  sm->rivals.clear();
  for (size_t a = 0; a < anchors.size(); ++a) {
    sm->first_rival[a] = static_cast<uint32_t>(sm->rivals.size());
    const size_t lo = a > kNeighbours ? a - kNeighbours : 0;
    const size_t hi = std::min(anchors.size(), a + kNeighbours + 1);
    const Anchor& n = anchors[a];
    const uint64_t first_clock = a == 0 ? 0 : n.clock;
    const uint64_t last_clock = a + 1 < anchors.size() ? anchors[a + 1].clock - 1 : UINT64_MAX;
    for (size_t i = lo; i < hi; ++i) {
      if (i == a) continue;
      const uint64_t c = anchors[i].clock;
      if ((c > last_clock && c - last_clock > span) || (c < first_clock && first_clock - c > span)) continue;
      const double difference =
          static_cast<double>(static_cast<int64_t>(anchors[i].time_ns - n.time_ns)) -
          static_cast<double>(static_cast<int64_t>(anchors[i].clock - n.clock)) * sm->ns_per_cycle;
      if (difference < -kRoundingMarginNs || difference > static_cast<double>(kMaxTickNs) + kRoundingMarginNs) {
        continue;
      }
      sm->rivals.push_back(Rival{c, static_cast<float>(difference), static_cast<uint32_t>(i)});
    }
    std::sort(sm->rivals.begin() + sm->first_rival[a], sm->rivals.end(),
              [](const Rival& x, const Rival& y) { return x.difference > y.difference; });
  }
  sm->first_rival[anchors.size()] = static_cast<uint32_t>(sm->rivals.size());
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

size_t ClockMap::Nearest(const Sm& sm, uint64_t clock, size_t hint) {
  const std::vector<Anchor>& anchors = sm.anchors;
  if (hint != SIZE_MAX && clock >= anchors[hint].clock) {  // moves forward with a run
    while (hint + 1 < anchors.size() && anchors[hint + 1].clock <= clock) ++hint;
    return hint;
  }
  auto next =
      std::upper_bound(anchors.begin(), anchors.end(), clock, [](uint64_t c, const Anchor& a) { return c < a.clock; });
  return next == anchors.begin() ? 0 : static_cast<size_t>(next - anchors.begin()) - 1;
}

// Each anchor's %globaltimer reading is its true time rounded down to a tick,
// so each gives a lower bound; the tightest of the anchors near the event
// (where the rate's error does not matter) is the estimate. An estimate more
// than a tick above the nearest anchor's is not rounding: the anchors
// disagree (a corrupt header), so it is not trusted.
uint64_t ClockMap::Estimate(const Sm& sm, size_t nearest, uint64_t clock) {
  const std::vector<Anchor>& anchors = sm.anchors;
  const int64_t base = Through(anchors[nearest], clock, sm.ns_per_cycle);
  int64_t best = base;
  const int64_t span = static_cast<int64_t>(kNeighbourSpanNs * sm.cycles_per_ns);
  const Rival* rival = sm.rivals.data() + sm.first_rival[nearest];
  const Rival* end = sm.rivals.data() + sm.first_rival[nearest + 1];
  for (; rival != end; ++rival) {
    // Its estimate is base + difference within the rounding: none of the
    // rest can exceed the best found.
    if (static_cast<double>(rival->difference) + kRoundingMarginNs < static_cast<double>(best - base)) break;
    const int64_t gap = static_cast<int64_t>(clock - rival->clock);
    if (std::llabs(gap) > span) continue;
    const int64_t estimate = Through(anchors[rival->anchor], clock, sm.ns_per_cycle);
    if (estimate > best && estimate - base <= kMaxTickNs) best = estimate;
  }
  return best < 0 ? 0 : static_cast<uint64_t>(best);
}

ClockMap::Cursor::Cursor(const ClockMap& map, uint16_t sm)
    : sm_(sm < map.sms_.size() && !map.sms_[sm].anchors.empty() && map.sms_[sm].cycles_per_ns > 0 ? &map.sms_[sm]
                                                                                                  : nullptr) {}

uint64_t ClockMap::Cursor::ToNs(uint64_t clock) {
  if (sm_ == nullptr) return 0;
  const Sm& sm = *static_cast<const Sm*>(sm_);
  nearest_ = Nearest(sm, clock, nearest_);
  return Estimate(sm, nearest_, clock);
}

uint64_t ClockMap::ToNs(uint16_t sm, uint64_t clock) const {
  if (sm >= sms_.size() || sms_[sm].anchors.empty() || sms_[sm].cycles_per_ns <= 0) return 0;
  return Estimate(sms_[sm], Nearest(sms_[sm], clock, SIZE_MAX), clock);
}

double ClockMap::CyclesPerNs(uint16_t sm) const {
  return sm < sms_.size() && !sms_[sm].anchors.empty() ? sms_[sm].cycles_per_ns : fallback_;
}

}  // namespace smprof::arena
