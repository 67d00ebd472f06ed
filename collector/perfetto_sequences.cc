#include "collector/perfetto_sequences.h"

#include <algorithm>
#include <cstdint>

#include "collector/perfetto_fields.h"

namespace smprof::perfetto {
namespace {

// The debug annotation names of iids kCyclesIid to kValueIid, in order.
const char* const kAnnotationNames[] = {"cycles", "unterminated", "note", "smprof_error", "value"};

}  // namespace

// --- sequence ids ----------------------------------------------------------

void WarpSequences::Start(WarpSequence& s, const Lane& warp) {
  bool clear = true;
  if (free_ids_.empty()) {
    s.id = next_id_++;
  } else {
    s.id = free_ids_.back();
    free_ids_.pop_back();
    // A reused id keeps what its sequence interned (a few names, unless
    // they have piled up): the warp takes them over.
    KeptNames& kept = kept_[s.id];
    if (kept.names.size() <= kMaxKeptNames) {
      clear = false;
      s.names.swap(kept.names);
      s.annotation_names = kept.annotation_names;
    }
    kept = KeptNames();
  }
  // Clear a new sequence, restart clock 64 at BOOTTIME's 0, make the warp's
  // track the default and its counter the extra one.
  const auto p = packet_.BeginNested(kTracePacket);
  packet_.Varint(kSequenceId, s.id);
  packet_.Varint(kSequenceFlags, clear ? kSeqCleared | kSeqNeedsState : kSeqNeedsState);
  const auto snapshot = packet_.BeginNested(kClockSnapshot);
  for (const uint32_t id : {kIncrementalClock, kBoottime}) {
    const auto c = packet_.BeginNested(kClocks);
    packet_.Varint(kClockId, id);
    packet_.Varint(kClockValue, 0);
    if (id == kIncrementalClock) packet_.Varint(kClockIncremental, 1);
    packet_.EndNested(c);
  }
  packet_.EndNested(snapshot);
  const auto defaults = packet_.BeginNested(kPacketDefaults);
  packet_.Varint(kTimestampClockId, kIncrementalClock);
  const auto te = packet_.BeginNested(kTrackEventDefaults);
  packet_.Varint(kDefaultTrackUuid, warp.track);
  if (warp.cycles != 0) packet_.Varint(kExtraCounterTrackUuids, warp.cycles);
  packet_.EndNested(te);
  packet_.EndNested(defaults);
  EndPacket(p);
}

void WarpSequences::End(WarpSequence& s) {
  free_ids_.push_back(s.id);
  if (kept_.size() <= s.id) kept_.resize(static_cast<size_t>(s.id) + 1);
  kept_[s.id].names.swap(s.names);
  kept_[s.id].annotation_names = s.annotation_names;
  s.id = 0;
  s.annotation_names = 0;
  s.last_ns = 0;
  s.names.clear();
}

// --- names -----------------------------------------------------------------

uint32_t WarpSequences::LookUpName(std::string_view name) {
  auto it = name_ids_.find(name);
  uint32_t id;
  if (it != name_ids_.end()) {
    id = it->second;
  } else {
    id = static_cast<uint32_t>(names_.size());
    names_.emplace_back(name);
    name_ids_.emplace(names_.back(), id);
  }
  name_cache_[(reinterpret_cast<uintptr_t>(name.data()) >> 3) & 255] =
      CachedName{name.data(), name.size(), id, names_[id].data()};
  return id;
}

// --- packets ---------------------------------------------------------------

void WarpSequences::EndPacket(proto::ProtoEncoder::Nested packet) {
  packet_.EndNested(packet);
  file_.Append(packet_.bytes());
  packet_.Clear();
  file_.RecordEnd();
}

proto::ProtoEncoder::Nested WarpSequences::BeginWarpPacket(WarpSequence& s, uint64_t t) {
  last_ns_ = std::max(last_ns_, t);
  const auto p = packet_.BeginNested(kTracePacket);
  if (t >= s.last_ns) {
    packet_.Varint(kTimestamp, t - s.last_ns);
    s.last_ns = t;
  } else {
    packet_.Varint(kTimestamp, t);
    packet_.Varint(kTimestampClockId, kBoottime);
  }
  packet_.Varint(kSequenceId, s.id);
  return p;
}

void WarpSequences::Intern(WarpSequence& s, uint32_t iid, std::string_view name, uint32_t annotation_names) {
  if (iid == 0 && annotation_names == 0) return;
  const auto interned = packet_.BeginNested(kInternedData);
  if (iid != 0) {
    const auto n = packet_.BeginNested(kEventNames);
    packet_.Varint(kIid, iid);
    packet_.Bytes(kInternedName, name);
    packet_.EndNested(n);
  }
  for (uint32_t a = kCyclesIid; a <= kValueIid; ++a) {
    if (!(annotation_names & (1u << (a - 1)))) continue;
    const auto n = packet_.BeginNested(kDebugAnnotationNames);
    packet_.Varint(kIid, a);
    packet_.Bytes(kInternedName, kAnnotationNames[a - 1]);
    packet_.EndNested(n);
  }
  packet_.EndNested(interned);
  s.annotation_names |= annotation_names;
}

void WarpSequences::EventCycles(const Lane* lane, uint32_t type, uint32_t cycles) {
  if (counters_) {
    if (lane != nullptr) packet_.Varint(kExtraCounterTrackUuids, lane->cycles);
    packet_.Varint(kExtraCounterValues, cycles);
  } else if (annotate_cycles_ && type == kSliceBegin) {
    const auto a = packet_.BeginNested(kDebugAnnotations);
    packet_.Varint(kAnnotationNameIid, kCyclesIid);
    packet_.Varint(kUintValue, cycles);
    packet_.EndNested(a);
  }
}

void WarpSequences::ValueAnnotation(int64_t value) {
  const auto a = packet_.BeginNested(kDebugAnnotations);
  packet_.Varint(kAnnotationNameIid, kValueIid);
  packet_.Varint(kIntValue, static_cast<uint64_t>(value));
  packet_.EndNested(a);
}

// --- pending ENDs ----------------------------------------------------------

inline void WarpSequences::WriteEnd(WarpSequence& s, const std::vector<Lane>& lanes, const PendingEnd& end) {
  FastEvent(s, end.end_ns, kSliceEnd, 0, end.lane != 0 ? &lanes[end.lane - 1] : nullptr, false, 0);
}

void WarpSequences::SettleEnds(WarpSequence& s, const std::vector<Lane>& lanes, uint64_t t, uint32_t lane,
                               uint32_t depth) {
  while (!s.ends.empty() && s.ends.back().end_ns < t) {
    WriteEnd(s, lanes, s.ends.back());
    s.ends.pop_back();
  }
  if (lane == kAnyLane) return;
  // Ends at t: those of `lane` that do not enclose the slice beginning at t
  // (deepest first, in their order). The others wait: a slice at t may
  // still begin inside them, and other lanes are other tracks.
  held_.clear();
  while (!s.ends.empty() && s.ends.back().end_ns == t) {
    const PendingEnd end = s.ends.back();
    s.ends.pop_back();
    if (end.lane == lane && end.depth >= depth) {
      WriteEnd(s, lanes, end);
    } else {
      held_.push_back(end);
    }
  }
  s.ends.insert(s.ends.end(), held_.rbegin(), held_.rend());
}

void WarpSequences::WriteEnds(WarpSequence& s, uint64_t track, const std::vector<Lane>& lanes) {
  if (s.id != 0) {
    for (auto end = s.ends.rbegin(); end != s.ends.rend(); ++end) WriteEnd(s, lanes, *end);
  } else {
    // Left by an ended sequence: after every other event of the warp.
    for (auto end = s.ends.rbegin(); end != s.ends.rend(); ++end) {
      tracks_.Event(end->lane != 0 ? lanes[end->lane - 1].track : track, kSliceEnd, {}, end->end_ns, nullptr);
    }
  }
  s.ends.clear();
}

void WarpSequences::EndSlice(WarpSequence& s, uint64_t track, uint64_t ts_ns) {
  if (s.id != 0) {
    FastEvent(s, ts_ns, kSliceEnd, 0, nullptr, false, 0);
  } else {
    tracks_.Event(track, kSliceEnd, {}, ts_ns, nullptr);
  }
}

// --- records ---------------------------------------------------------------

void WarpSequences::SlicePacket(WarpSequence& s, const Lane* lane, const trace::SliceRecord& slice, uint32_t iid,
                                bool fresh, uint32_t new_names) {
  const auto p = BeginWarpPacket(s, slice.begin_ns);
  Intern(s, fresh ? iid : 0, slice.name, new_names);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, kSliceBegin);
  packet_.Varint(kNameIid, iid);
  if (lane != nullptr) packet_.Varint(kEventTrackUuid, lane->track);
  if (!slice.unterminated) {
    EventCycles(lane, kSliceBegin, slice.cycles);
  } else {
    const auto a = packet_.BeginNested(kDebugAnnotations);
    packet_.Varint(kAnnotationNameIid, kUnterminatedIid);
    packet_.Varint(kBoolValue, 1);
    packet_.EndNested(a);
    if (!slice.note.empty()) {
      const auto n = packet_.BeginNested(kDebugAnnotations);
      packet_.Varint(kAnnotationNameIid, kNoteIid);
      packet_.Bytes(kStringValue, slice.note);
      packet_.EndNested(n);
    }
  }
  if (slice.value.present) ValueAnnotation(slice.value.value);
  packet_.EndNested(te);
  EndPacket(p);
}

void WarpSequences::InstantPacket(WarpSequence& s, const trace::InstantRecord& instant, std::string_view name,
                                  uint32_t iid, bool fresh, uint32_t new_names) {
  const auto p = BeginWarpPacket(s, instant.ts_ns);
  Intern(s, fresh ? iid : 0, name, new_names);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, kInstant);
  packet_.Varint(kNameIid, iid);
  EventCycles(nullptr, kInstant, 0);
  if (instant.unmatched_end) {
    const auto a = packet_.BeginNested(kDebugAnnotations);
    packet_.Varint(kAnnotationNameIid, kErrorIid);
    packet_.Bytes(kStringValue, "unmatched end");
    packet_.EndNested(a);
  }
  if (instant.value.present) ValueAnnotation(instant.value.value);
  packet_.EndNested(te);
  EndPacket(p);
}

// Like an instant (the ENDs before it first), but a TYPE_COUNTER event on
// the counter's own track: no name, no cycles.
void WarpSequences::CounterSample(WarpSequence& s, const std::vector<Lane>& lanes, uint64_t track, uint64_t ts_ns,
                                  int64_t value) {
  SettleEnds(s, lanes, ts_ns, kAnyLane, 0);
  const auto p = BeginWarpPacket(s, ts_ns);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, kCounterEvent);
  packet_.Varint(kEventTrackUuid, track);
  packet_.Varint(kCounterValue, static_cast<uint64_t>(value));
  packet_.EndNested(te);
  EndPacket(p);
}

void WarpSequences::BeginNamedSlice(WarpSequence& s, uint64_t ts_ns, std::string_view name, const Annotations& args) {
  const auto p = BeginWarpPacket(s, ts_ns);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, kSliceBegin);
  packet_.Bytes(kEventName, name);
  args.WriteTo(packet_);
  if (counters_) packet_.Varint(kExtraCounterValues, 0);  // one value per slice row (see the header)
  packet_.EndNested(te);
  EndPacket(p);
}

}  // namespace smprof::perfetto
