#include "collector/arena_decoder.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>

#include "collector/clock_map.h"
#include "common/run_parts.h"

namespace smprof::arena {
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
// `used`: the chunk's bytes that were read (the rest were zero).
void DecodeEvents(const uint8_t* base, uint32_t used, WarpSegment* segment, DecodeStats* stats) {
  const uint32_t capacity = used / sizeof(wire::Event);
  if (capacity > wire::kChunkHeaderSlots) segment->events.reserve(capacity - wire::kChunkHeaderSlots);
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
void DecodeCompactEvents(const uint8_t* base, uint32_t used, WarpSegment* segment, DecodeStats* stats) {
  const uint32_t capacity = used / sizeof(wire::CompactEvent);
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

void DecodeChunk(ChunkPart chunk, uint32_t chunk_bytes, std::vector<WarpSegment>* out, DecodeStats* stats) {
  ++stats->chunks;
  wire::ChunkHeader header{};
  const uint32_t used = std::min(chunk.bytes, chunk_bytes);
  std::memcpy(&header, chunk.data, std::min<uint32_t>(used, sizeof(header)));
  if (header.magic != wire::kChunkMagic || used < sizeof(wire::ChunkHeader)) {
    const uint8_t* h = chunk.data;
    const bool empty = std::all_of(h, h + std::min<uint32_t>(used, sizeof(header)), [](uint8_t b) { return b == 0; });
    ++(empty ? stats->empty_chunks : stats->malformed_chunks);
    return;
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
    DecodeCompactEvents(chunk.data, used, &segment, stats);
  else
    DecodeEvents(chunk.data, used, &segment, stats);
  stats->events += segment.events.size();
  if (!segment.events.empty()) out->push_back(std::move(segment));
}

void DecodeChunks(const uint8_t* chunks, uint32_t num_chunks, uint32_t chunk_bytes, std::vector<WarpSegment>* out,
                  DecodeStats* stats) {
  for (uint32_t c = 0; c < num_chunks; ++c) {
    DecodeChunk(ChunkPart{chunks + static_cast<uint64_t>(c) * chunk_bytes, chunk_bytes}, chunk_bytes, out, stats);
  }
}

namespace {

ClockMap BuildClockMap(const std::vector<WarpSegment>& segments, double fallback_cycles_per_ns, unsigned threads) {
  ClockMap map(fallback_cycles_per_ns);
  for (const WarpSegment& s : segments) map.AddAnchor(s.sm, s.anchor_clock, s.anchor_time_ns);
  map.Build(PartsFor(threads, segments.size(), kSegmentsPerMapThread));
  return map;
}

void MapRange(const ClockMap& map, WarpSegment* begin, WarpSegment* end) {
  // One cursor per SM, kept across its segments: a segment's events follow
  // its own anchor, from which the cursor searches forward.
  std::vector<std::unique_ptr<ClockMap::Cursor>> cursors;
  for (WarpSegment* s = begin; s != end; ++s) {
    if (cursors.size() <= s->sm) cursors.resize(static_cast<size_t>(s->sm) + 1);
    if (!cursors[s->sm]) cursors[s->sm] = std::make_unique<ClockMap::Cursor>(map, s->sm);
    ClockMap::Cursor& cursor = *cursors[s->sm];
    for (DecodedEvent& e : s->events) e.time_ns = cursor.ToNs(e.clock);
  }
}

}  // namespace

void MapEventClocks(std::vector<WarpSegment>* segments, double fallback_cycles_per_ns, unsigned threads) {
  // The map needs every anchor; the times are then independent per segment
  // (a cursor's result does not depend on where it was before).
  const ClockMap map = BuildClockMap(*segments, fallback_cycles_per_ns, threads);
  WarpSegment* base = segments->data();
  const size_t n = segments->size();
  const unsigned parts = PartsFor(threads, n, kSegmentsPerMapThread);
  RunParts(parts, [&](unsigned i) { MapRange(map, base + n * i / parts, base + n * (i + 1) / parts); });
}

void DecodeChunks(const std::vector<ChunkPart>& chunks, uint32_t chunk_bytes, unsigned threads,
                  std::vector<WarpSegment>* out, DecodeStats* stats) {
  const size_t n = chunks.size();
  const unsigned parts = PartsFor(threads, n, kChunksPerDecodeThread);
  if (parts == 1) {
    for (const ChunkPart& c : chunks) DecodeChunk(c, chunk_bytes, out, stats);
    return;
  }
  // Contiguous ranges of chunks, concatenated in order: what one pass appends.
  std::vector<std::vector<WarpSegment>> decoded(parts);
  std::vector<DecodeStats> part_stats(parts);
  RunParts(parts, [&](unsigned i) {
    for (size_t c = n * i / parts; c < n * (i + 1) / parts; ++c) {
      DecodeChunk(chunks[c], chunk_bytes, &decoded[i], &part_stats[i]);
    }
  });
  size_t total = out->size();
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

}  // namespace smprof::arena
