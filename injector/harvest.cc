#include "injector/harvest.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "injector/clock_map.h"

namespace smprof::injector {
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
// SM's counter; the sort is stable, so recording order breaks ties).
void MergeWarps(Launch* launch) {
  auto key = [](const LaunchEvents& w) {
    const WarpSegment& s = *w.segment;
    return std::make_tuple(s.block[2], s.block[1], s.block[0], s.warp);
  };
  std::stable_sort(launch->warps.begin(), launch->warps.end(),
                   [&](const LaunchEvents& a, const LaunchEvents& b) { return key(a) < key(b); });
  std::vector<LaunchEvents> merged;
  merged.reserve(launch->warps.size());
  for (LaunchEvents& w : launch->warps) {
    if (merged.empty() || key(merged.back()) != key(w)) {
      merged.push_back(std::move(w));
      continue;
    }
    std::vector<DecodedEvent>& into = merged.back().events;
    into.insert(into.end(), w.events.begin(), w.events.end());
    merged.back().chunks += w.chunks;
  }
  const auto by_clock = [](const DecodedEvent& a, const DecodedEvent& b) { return a.clock < b.clock; };
  for (LaunchEvents& w : merged) {
    // A warp's chunks follow each other: usually in order already.
    if (!std::is_sorted(w.events.begin(), w.events.end(), by_clock)) {
      std::stable_sort(w.events.begin(), w.events.end(), by_clock);
    }
  }
  launch->warps = std::move(merged);
}

}  // namespace

namespace internal {

bool WellFormedEvent(uint32_t kind_flags) {
  // The flags each kind may carry (docs/device-api.md).
  constexpr uint32_t kValue = wire::kEventHasValue | wire::kEventWideValue;
  static constexpr uint32_t kAllowed[wire::kMaxEventKind + 1] = {
      0,                                                     // 0: none
      wire::kEventNameValue,                                 // BEGIN
      kValue | wire::kEventNameValue,                        // END
      kValue | wire::kEventCounter | wire::kEventNameValue,  // INSTANT
      wire::kEventNameValue,                                 // PHASE
      0,                                                     // PHASE_END
      0,                                                     // ASYNC_BEGIN
      0,                                                     // ASYNC_END
      0,                                                     // VALUE_HIGH: only after its event
  };
  const uint32_t kind = kind_flags & wire::kEventKindMask;
  const uint32_t flags = kind_flags & wire::kEventFlagsMask;
  if (kind < wire::kEventBegin || kind >= wire::kEventValueHigh || (flags & ~kAllowed[kind]) != 0) return false;
  const bool has_value = (flags & wire::kEventHasValue) != 0;
  if (!has_value && (flags & (wire::kEventWideValue | wire::kEventCounter)) != 0) return false;
  return !(has_value && (flags & wire::kEventNameValue) != 0);
}

}  // namespace internal

namespace {

// The events of a chunk of 16-byte Events (the CUDA C++ markers).
void DecodeEvents(const uint8_t* base, uint32_t chunk_bytes, WarpSegment* segment, DecodeStats* stats) {
  const uint32_t capacity = chunk_bytes / sizeof(wire::Event);
  segment->events.reserve(capacity - wire::kChunkHeaderSlots);
  for (uint32_t i = wire::kChunkHeaderSlots; i < capacity; ++i) {
    wire::Event e;
    std::memcpy(&e, base + static_cast<uint64_t>(i) * sizeof(wire::Event), sizeof(e));
    if (e.info == 0) {
      if (e.clock_lo != 0 || e.name_offset != 0 || e.value != 0) ++stats->malformed_events;
      continue;  // unused slot
    }
    const uint32_t kind_flags = e.info & (wire::kEventKindMask | wire::kEventFlagsMask);
    if (!internal::WellFormedEvent(kind_flags)) {
      ++stats->malformed_events;  // a stray continuation among them
      continue;
    }
    DecodedEvent d;
    d.clock = wire::EventClock(e);
    d.name_offset = e.name_offset;
    d.info = kind_flags;
    d.value = e.value;
    if ((kind_flags & wire::kEventWideValue) != 0) {
      // Its continuation is the next slot of the chunk (record.cuh never splits the pair).
      wire::Event high{};
      if (i + 1 < capacity)
        std::memcpy(&high, base + static_cast<uint64_t>(i + 1) * sizeof(wire::Event), sizeof(high));
      if ((high.info & (wire::kEventKindMask | wire::kEventFlagsMask)) != wire::kEventValueHigh) {
        ++stats->malformed_events;
        continue;
      }
      d.value_high = high.value;
      ++i;
    }
    segment->events.push_back(d);
  }
}

// The events of a kChunkCompact chunk. Clocks are 32 bits: the first event
// is read relative to the anchor (it may precede it: a marker reads the clock
// before it claims the chunk), each later one forward from its predecessor.
void DecodeCompactEvents(const uint8_t* base, uint32_t chunk_bytes, WarpSegment* segment, DecodeStats* stats) {
  const uint32_t capacity = chunk_bytes / sizeof(wire::CompactEvent);
  uint64_t clock = segment->anchor_clock;
  bool first = true;
  for (uint32_t i = wire::kCompactHeaderSlots; i < capacity; ++i) {
    wire::CompactEvent e;
    std::memcpy(&e, base + static_cast<uint64_t>(i) * sizeof(e), sizeof(e));
    if (e.tag == 0) {
      if (e.clock_lo != 0) ++stats->malformed_events;
      continue;  // unused slot
    }
    const uint32_t kind_flags = e.tag & (wire::kEventKindMask | wire::kEventFlagsMask);
    const bool value_follows = (e.tag & wire::kCompactValueFollows) != 0;
    const bool has_value = (kind_flags & (wire::kEventHasValue | wire::kEventNameValue)) != 0 ||
                           (kind_flags & wire::kEventKindMask) == wire::kEventAsyncBegin ||
                           (kind_flags & wire::kEventKindMask) == wire::kEventAsyncEnd;
    if (!internal::WellFormedEvent(kind_flags) || value_follows != has_value ||
        (value_follows && i + 1 >= capacity)) {
      ++stats->malformed_events;
      continue;
    }
    const uint32_t delta = e.clock_lo - static_cast<uint32_t>(clock);
    clock += first ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(delta))) : delta;
    first = false;
    DecodedEvent d;
    d.clock = clock;
    d.name_offset = static_cast<int32_t>((e.tag & ~wire::kCompactValueFollows) >> wire::kCompactNameShift);
    d.info = kind_flags;
    if (value_follows) {
      wire::CompactEvent v;
      std::memcpy(&v, base + static_cast<uint64_t>(++i) * sizeof(v), sizeof(v));
      d.value = v.clock_lo;
      if ((kind_flags & wire::kEventWideValue) != 0) d.value_high = v.tag;
    }
    segment->events.push_back(d);
  }
}

}  // namespace

void DecodeChunks(const uint8_t* chunks, uint32_t num_chunks, uint32_t chunk_bytes, std::vector<WarpSegment>* out,
                  DecodeStats* stats) {
  for (uint32_t c = 0; c < num_chunks; ++c) {
    const uint8_t* base = chunks + static_cast<uint64_t>(c) * chunk_bytes;
    wire::ChunkHeader header;
    std::memcpy(&header, base, sizeof(header));
    ++stats->chunks;
    if (header.magic != wire::kChunkMagic || chunk_bytes < sizeof(wire::ChunkHeader)) {
      const bool empty =
          chunk_bytes >= sizeof(header) && std::all_of(base, base + sizeof(header), [](uint8_t b) { return b == 0; });
      ++(empty ? stats->empty_chunks : stats->malformed_chunks);
      continue;
    }
    WarpSegment segment;
    segment.grid_id = header.grid_id;
    segment.name_base = header.name_base;
    segment.block[0] = header.block_x;
    segment.block[1] = header.block_y;
    segment.block[2] = header.block_z;
    segment.sm = header.sm;
    segment.warp = header.warp;
    segment.hw_warp = header.hw_warp;
    segment.flags = header.flags;
    segment.cluster = header.cluster & wire::kClusterShapeMask;
    segment.anchor_clock = header.anchor_clock;
    segment.anchor_time_ns = header.anchor_time_ns;
    if ((header.flags & wire::kChunkCompact) != 0)
      DecodeCompactEvents(base, chunk_bytes, &segment, stats);
    else
      DecodeEvents(base, chunk_bytes, &segment, stats);
    stats->events += segment.events.size();
    if (!segment.events.empty()) out->push_back(std::move(segment));
  }
}

namespace {

ClockMap BuildClockMap(const std::vector<WarpSegment>& segments, double fallback_cycles_per_ns) {
  ClockMap map(fallback_cycles_per_ns);
  for (const WarpSegment& s : segments) map.AddAnchor(s.sm, s.anchor_clock, s.anchor_time_ns);
  map.Build();
  return map;
}

void MapRange(const ClockMap& map, WarpSegment* begin, WarpSegment* end) {
  // One cursor per SM, kept across its segments: a segment's events follow
  // its own anchor, and a cursor re-ranks neighbours only when it moves.
  std::vector<std::unique_ptr<ClockMap::Cursor>> cursors;
  for (WarpSegment* s = begin; s != end; ++s) {
    if (cursors.size() <= s->sm) cursors.resize(static_cast<size_t>(s->sm) + 1);
    if (!cursors[s->sm]) cursors[s->sm] = std::make_unique<ClockMap::Cursor>(map, s->sm);
    ClockMap::Cursor& cursor = *cursors[s->sm];
    for (DecodedEvent& e : s->events) e.time_ns = cursor.ToNs(e.clock);
  }
}

// Runs part(i) for i in [0, parts): part 0 on this thread, the others on
// threads started for the call.
template <typename Part>
void RunParts(unsigned parts, Part&& part) {
  std::vector<std::thread> helpers;
  helpers.reserve(parts > 0 ? parts - 1 : 0);
  for (unsigned i = 1; i < parts; ++i) helpers.emplace_back([&part, i] { part(i); });
  part(0);
  for (std::thread& t : helpers) t.join();
}

}  // namespace

void MapEventClocks(std::vector<WarpSegment>* segments, double fallback_cycles_per_ns) {
  const ClockMap map = BuildClockMap(*segments, fallback_cycles_per_ns);
  MapRange(map, segments->data(), segments->data() + segments->size());
}

unsigned QuarterOfTheCores() { return std::clamp(std::thread::hardware_concurrency() / 4, 1u, kMaxHarvestThreads); }

void DecodeAndMapClocks(const uint8_t* chunks, uint32_t num_chunks, uint32_t chunk_bytes, double fallback_cycles_per_ns,
                        unsigned threads, std::vector<WarpSegment>* out, DecodeStats* stats) {
  const unsigned parts = std::max(1u, std::min(threads, num_chunks / kChunksPerDecodeThread));
  const size_t first = out->size();
  if (parts == 1) {
    DecodeChunks(chunks, num_chunks, chunk_bytes, out, stats);
  } else {
    // Contiguous ranges of chunks, concatenated in order: what one pass appends.
    std::vector<std::vector<WarpSegment>> decoded(parts);
    std::vector<DecodeStats> part_stats(parts);
    RunParts(parts, [&](unsigned i) {
      const uint32_t begin = static_cast<uint32_t>(uint64_t{num_chunks} * i / parts);
      const uint32_t end = static_cast<uint32_t>(uint64_t{num_chunks} * (i + 1) / parts);
      DecodeChunks(chunks + uint64_t{begin} * chunk_bytes, end - begin, chunk_bytes, &decoded[i], &part_stats[i]);
    });
    size_t total = first;
    for (const auto& d : decoded) total += d.size();
    out->reserve(total);
    for (unsigned i = 0; i < parts; ++i) {
      std::move(decoded[i].begin(), decoded[i].end(), std::back_inserter(*out));
      stats->chunks += part_stats[i].chunks;
      stats->events += part_stats[i].events;
      stats->empty_chunks += part_stats[i].empty_chunks;
      stats->malformed_chunks += part_stats[i].malformed_chunks;
      stats->malformed_events += part_stats[i].malformed_events;
    }
  }
  // The map needs every anchor; the times are then independent per segment
  // (a cursor's result does not depend on where it was before).
  const ClockMap map = BuildClockMap(*out, fallback_cycles_per_ns);
  WarpSegment* base = out->data() + first;
  const size_t n = out->size() - first;
  RunParts(parts, [&](unsigned i) { MapRange(map, base + n * i / parts, base + n * (i + 1) / parts); });
}

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
                                  const std::function<bool(const KernelRecord&)>& selected, int64_t clock_offset,
                                  MatchStats* stats, std::vector<const WarpSegment*>* unmatched,
                                  std::vector<size_t>* unused) {
  std::unordered_map<uint64_t, std::vector<size_t>> by_grid;  // grid id -> record indexes
  for (size_t i = 0; i < records.size(); ++i) by_grid[records[i].grid_id].push_back(i);

  std::vector<Launch> launches(records.size());
  std::vector<char> keep(records.size());  // selected(name), asked once per record
  for (size_t i = 0; i < records.size(); ++i) {
    launches[i].record = records[i];
    keep[i] = selected(records[i]) ? 1 : 0;
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
      for (DecodedEvent& e : launch.warps.back().events) {
        e.time_ns += static_cast<uint64_t>(clock_offset);
        r.start_ns = std::min(r.start_ns, e.time_ns);
        r.end_ns = std::max(r.end_ns, e.time_ns);
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
      for (DecodedEvent& e : launch.warps.back().events) e.time_ns += static_cast<uint64_t>(clock_offset);
      continue;
    }
    // Graph replays share the grid id: each event goes to the replay whose
    // span holds it; events of one segment usually belong to one launch.
    size_t current = SIZE_MAX;
    for (DecodedEvent e : segment.events) {
      e.time_ns += static_cast<uint64_t>(clock_offset);
      size_t best = candidates.front();
      uint64_t best_distance = UINT64_MAX;
      for (size_t idx : candidates) {
        const uint64_t d = Distance(e.time_ns, records[idx]);
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
  for (Launch& l : result) MergeWarps(&l);
  for (const Launch& l : result) stats->events += l.event_count;
  std::stable_sort(result.begin(), result.end(), [](const Launch& a, const Launch& b) {
    return std::tie(a.record.start_ns, a.record.correlation_id) < std::tie(b.record.start_ns, b.record.correlation_id);
  });
  return result;
}

}  // namespace smprof::injector
