#include "collector/launch_matcher.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "common/run_parts.h"

namespace smprof::arena {
namespace {

// CUPTI's start/end and %globaltimer share a clock but not a sampling point:
// events may sit a tick outside the record's interval.
constexpr uint64_t kSlackNs = 2000;

uint64_t Distance(uint64_t t, const KernelRecord& r) {
  if (t + kSlackNs < r.start_ns) return r.start_ns - t;
  if (t > r.end_ns + kSlackNs) return t - r.end_ns;
  return 0;
}

// One entry per warp: the events of all its chunks, in %clock64 order (one
// SM's counter; the sort is stable, so recording order breaks ties), their
// times moved by `clock_offset`. The warps are put in order on this thread;
// their events are merged and moved on up to `threads` threads.
void MergeWarps(Launch* launch, int64_t clock_offset, unsigned threads) {
  auto key = [](const LaunchEvents& w) {
    const WarpSegment& s = *w.segment;
    return std::make_tuple(s.block[2], s.block[1], s.block[0], s.warp);
  };
  std::vector<LaunchEvents>& warps = launch->warps;
  std::stable_sort(warps.begin(), warps.end(),
                   [&](const LaunchEvents& a, const LaunchEvents& b) { return key(a) < key(b); });
  std::vector<size_t> first;  // where each warp's chunks begin in `warps`
  for (size_t i = 0; i < warps.size(); ++i) {
    if (i == 0 || key(warps[i - 1]) != key(warps[i])) first.push_back(i);
  }
  const size_t n = first.size();
  first.push_back(warps.size());
  const auto by_clock = [](const DecodedEvent& a, const DecodedEvent& b) { return a.clock < b.clock; };
  const unsigned parts = PartsFor(threads, launch->event_count, kEventsPerMergeThread);
  RunParts(parts, [&](unsigned part) {
    for (size_t g = n * part / parts; g < n * (part + 1) / parts; ++g) {
      LaunchEvents& into = warps[first[g]];
      for (size_t i = first[g] + 1; i < first[g + 1]; ++i) {
        into.events.insert(into.events.end(), warps[i].events.begin(), warps[i].events.end());
        into.chunks += warps[i].chunks;
      }
      // A warp's chunks follow each other: usually in order already.
      if (!std::is_sorted(into.events.begin(), into.events.end(), by_clock)) {
        std::stable_sort(into.events.begin(), into.events.end(), by_clock);
      }
      for (DecodedEvent& e : into.events) e.time_ns += static_cast<uint64_t>(clock_offset);
    }
  });
  std::vector<LaunchEvents> merged;
  merged.reserve(n);
  for (size_t g = 0; g < n; ++g) merged.push_back(std::move(warps[first[g]]));
  warps = std::move(merged);
}

}  // namespace

int64_t EstimateClockOffset(const std::vector<WarpSegment>& segments, const std::vector<KernelRecord>& records,
                            int64_t estimate) {
  std::unordered_map<uint64_t, int> records_per_grid;
  for (const KernelRecord& r : records) ++records_per_grid[r.grid_id];
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> span;  // grid id -> first, last event
  for (const WarpSegment& s : segments) {
    auto [it, fresh] = span.try_emplace(s.grid_id, UINT64_MAX, 0);
    for (const DecodedEvent& e : s.events) {
      it->second.first = std::min(it->second.first, e.time_ns);
      it->second.second = std::max(it->second.second, e.time_ns);
    }
  }
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  for (const KernelRecord& r : records) {
    auto it = span.find(r.grid_id);
    if (records_per_grid[r.grid_id] != 1 || it == span.end()) continue;
    lo = std::max(lo, static_cast<int64_t>(r.start_ns - it->second.first));
    hi = std::min(hi, static_cast<int64_t>(r.end_ns - it->second.second));
  }
  if (lo > hi) return estimate;  // inconsistent (clock drift): trust the probe
  return std::clamp(estimate, lo, hi);
}

std::vector<Launch> MatchLaunches(std::vector<WarpSegment>* segments, const std::vector<KernelRecord>& records,
                                  int64_t clock_offset, MatchStats* stats, std::vector<const WarpSegment*>* unmatched,
                                  std::vector<size_t>* unused, unsigned threads) {
  std::unordered_map<uint64_t, std::vector<size_t>> by_grid;  // grid id -> record indexes
  for (size_t i = 0; i < records.size(); ++i) by_grid[records[i].grid_id].push_back(i);

  std::vector<Launch> launches(records.size());
  std::vector<char> keep(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    launches[i].record = records[i];
    keep[i] = records[i].wanted() ? 1 : 0;
  }
  std::map<uint64_t, Launch> synthetic;       // grid id -> launch without a record
  std::vector<char> touched(records.size());  // received an event (kept or filtered)

  for (WarpSegment& segment : *segments) {
    auto it = by_grid.find(segment.grid_id);
    if (it == by_grid.end() && unmatched != nullptr) {
      unmatched->push_back(&segment);
      continue;
    }
    if (it == by_grid.end()) {
      Launch& launch = synthetic[segment.grid_id];
      KernelRecord& r = launch.record;
      if (launch.warps.empty()) {
        r.grid_id = segment.grid_id;
        r.start_ns = UINT64_MAX;
        launch.flags = wire::kLaunchNoActivity;
      }
      launch.warps.push_back({&segment, std::move(segment.events), 1});
      for (const DecodedEvent& e : launch.warps.back().events) {  // times move in MergeWarps
        const uint64_t t = e.time_ns + static_cast<uint64_t>(clock_offset);
        r.start_ns = std::min(r.start_ns, t);
        r.end_ns = std::max(r.end_ns, t);
      }
      launch.event_count += launch.warps.back().events.size();
      stats->unattributed += launch.warps.back().events.size();
      continue;
    }
    const std::vector<size_t>& candidates = it->second;
    if (candidates.size() == 1) {  // the common case: one launch has this grid id
      const size_t only = candidates.front();
      touched[only] = 1;
      if (!keep[only]) {
        stats->filtered += segment.events.size();
        continue;
      }
      Launch& launch = launches[only];
      launch.event_count += segment.events.size();
      launch.warps.push_back({&segment, std::move(segment.events), 1});
      continue;
    }
    // Graph replays share the grid id: each event goes to the replay whose
    // span holds it; events of one segment usually belong to one launch.
    size_t current = SIZE_MAX;
    for (const DecodedEvent& e : segment.events) {
      const uint64_t t = e.time_ns + static_cast<uint64_t>(clock_offset);  // moved in MergeWarps
      size_t best = candidates.front();
      uint64_t best_distance = UINT64_MAX;
      for (size_t idx : candidates) {
        const uint64_t d = Distance(t, records[idx]);
        if (d < best_distance) {
          best = idx;
          best_distance = d;
        }
      }
      Launch& launch = launches[best];
      touched[best] = 1;
      if (!keep[best]) {
        ++stats->filtered;
        continue;
      }
      if (best != current || launch.warps.empty() || launch.warps.back().segment != &segment) {
        launch.warps.push_back({&segment, {}, 1});
        launch.warps.back().events.reserve(segment.events.size());
        current = best;
      }
      launch.warps.back().events.push_back(e);
      ++launch.event_count;
    }
  }

  if (unused != nullptr) {
    for (size_t i = 0; i < records.size(); ++i) {
      if (!touched[i]) unused->push_back(i);
    }
  }
  std::vector<Launch> result;
  for (Launch& l : launches) {
    if (l.event_count > 0) result.push_back(std::move(l));
  }
  for (auto& [grid, launch] : synthetic) result.push_back(std::move(launch));
  for (Launch& l : result) MergeWarps(&l, clock_offset, threads);
  for (const Launch& l : result) stats->events += l.event_count;
  std::stable_sort(result.begin(), result.end(), [](const Launch& a, const Launch& b) {
    return std::tie(a.record.start_ns, a.record.correlation_id) < std::tie(b.record.start_ns, b.record.correlation_id);
  });
  return result;
}

}  // namespace smprof::arena
