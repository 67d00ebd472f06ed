// WarpSequences: a warp's events, each warp on a packet sequence of its own.
//
// A sequence starts with a packet that defines the sequence-scoped
// incremental clock 64 as BOOTTIME (6) through a snapshot {64: 0, 6: 0} (so
// trace time is unchanged; a snapshot restarts the clock) and sets the
// defaults: the warp's track, and its "cycles" counter track as the extra
// counter. It clears the incremental state on a new sequence id; a reused
// id keeps its interned names (new defaults keep them: Perfetto's
// PacketSequenceStateGeneration::OnNewTracePacketDefaults), unless more
// than kMaxKeptNames piled up, so a warp interns only names its sequence
// has not seen. Its events are then timestamp delta + sequence id + type +
// interned name (+ cycles): ~11 bytes an END, ~13 a BEGIN or an instant, 3
// more a BEGIN with a cycles counter value (11.6 bytes an event on
// bench/trace_encode.cc's large run without cycles, 13.3 with, all packets
// counted). Names are interned per sequence the first time it uses them:
// event names by a run-wide id (NameId), debug annotation names ("cycles",
// "unterminated", "note", "smprof_error", "value") by fixed iids.
//
// Few sequences are open at once: the collector hands a launch's warps one
// after another, so the sink ends a warp's sequence when a record of
// another warp of the launch arrives, and the ended id goes to the next
// sequence to start: ids stay as small as the number of open launches (one
// varint byte). A warp whose records come back later gets a sequence again
// (the same tracks; the start sets its defaults and restarts the clock).
//
// TrackEvent has no complete-slice type and deltas cannot go backwards, so
// a slice (which arrives whole, in start order per warp) is written as its
// BEGIN at once while its END waits in a small per-warp list ordered by
// end time (inner slices first on equal ends). Before any packet at time t
// the ENDs before t are written, and before a slice's BEGIN at t also the
// ENDs at t on its lane but those of the slices enclosing it. An ended
// sequence's pending ENDs are not written when it ends: a record of its
// warp may yet begin at such an END's time inside that slice, and the trace
// processor orders equal times by file position. They stay with the warp,
// written by its next sequence, or at its end (WriteEnds) on sequence 1
// (absolute time, explicit track: ~18 bytes each, about one per warp). A
// record earlier than its sequence's last timestamp (allowed after a
// flushed long episode) is written with timestamp_clock_id 6 and its
// absolute time, which leaves the incremental clock where it was.
//
// Cycles, exact, as a counter (PerfettoSink::CyclesEncoding::kCounter):
// every closed slice's SM-cycle count is the value of its BEGIN on the
// "cycles" counter track child of the slice's track (the warp's, or a
// lane's), as TrackEvent.extra_counter_values (3 bytes: one key, a 2-byte
// varint below 16384 cycles); the warp's counter comes from the sequence's
// TrackEventDefaults.extra_counter_track_uuids, a lane's is named on the
// event. Every instant of a warp carries 0 on it too (2 bytes), so on each
// warp and lane track the counter holds exactly one value per slice row the
// trace processor makes of it (closed slices and instants; unterminated
// slices, which have no cycles, carry none and keep their annotations
// "unterminated" and "note"): the k-th value at time t on the counter is
// the k-th slice (by id: BEGINs are imported in file order, and equal times
// keep it) that starts at t on the track:
//   select s.id, s.name, cast(c.value as int) as cycles
//   from (select id, name, track_id, ts, row_number() over
//           (partition by track_id, ts order by id) as k from slice
//         where extract_arg(arg_set_id, 'debug.unterminated') is null) s
//   join track ct on ct.parent_id = s.track_id and ct.name = 'cycles'
//   join (select track_id, ts, value, row_number() over
//           (partition by track_id, ts order by id) as k from counter) c
//     on c.track_id = ct.id and c.ts = s.ts and c.k = s.k
// (at the BEGIN rather than the END: same bytes, and ENDs at one time leave
// the file in an order the slice table does not keep). As an annotation
// (kAnnotation), the count is the BEGIN's debug annotation "cycles" (an arg
// of the slice: debug.cycles; ~7 bytes).
//
// A record's value (SliceRecord/InstantRecord::value, not a counter) is the
// debug annotation "value" (int_value) on the slice's BEGIN or on the
// instant: 6 bytes for a value below 64, up to 13 for a negative one. A
// record with a value, a name to intern or an annotation is built in an
// encoder; the common ones (FastEvent) are encoded in place in the trace
// file, and cost exactly that (one more test of a flag for the value). A
// counter sample is no instant but a TYPE_COUNTER event {track_uuid,
// counter_value} on the warp's sequence at its time (ENDs before it settled
// first, like an instant's): ~15 bytes, no cycles value (it is no slice
// row).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "collector/perfetto_annotations.h"
#include "collector/perfetto_fields.h"
#include "collector/perfetto_tracks.h"
#include "collector/proto_encoder.h"
#include "collector/trace_file.h"
#include "collector/trace_sink.h"

namespace smprof::perfetto {

// A track a warp's events go on (the warp's own, its slot's, or a sibling
// lane's) and that track's "cycles" counter (0: none, cycles not written
// as counter values).
struct Lane {
  uint64_t track = 0;  // 0: not described yet
  uint64_t cycles = 0;
};

// The END of a slice whose BEGIN is written.
struct PendingEnd {
  uint64_t end_ns;
  uint32_t lane;
  uint32_t depth;
  // Whether it is written before `o`: earliest end first, the deeper slice
  // first on equal ends.
  bool Before(const PendingEnd& o) const { return end_ns != o.end_ns ? end_ns < o.end_ns : depth > o.depth; }
};

// A warp's sequence while it has one, and the ENDs the warp owes.
struct WarpSequence {
  // Pending ENDs, the next to write at the back. Slices on a lane nest, so
  // a new END almost always goes at the back: kept sorted by insertion.
  // They outlive the sequence.
  std::vector<PendingEnd> ends;
  uint32_t id = 0;                // 0: none
  uint32_t annotation_names = 0;  // bit iid-1 set: that debug annotation name is interned
  uint64_t last_ns = 0;           // the incremental clock's value
  std::vector<uint32_t> names;    // run-wide name ids; the sequence's iid is index + 1
};

class WarpSequences {
 public:
  WarpSequences(TraceFile& file, TrackTree& tracks) : file_(file), tracks_(tracks) {}

  // How a closed slice's SM cycles are written: on the "cycles" counters,
  // as the BEGIN's annotation, or (neither) not at all. Before the first
  // event.
  void set_cycles(bool counters, bool annotation) {
    counters_ = counters;
    annotate_cycles_ = annotation;
  }
  bool cycles_counters() const { return counters_; }

  // Starts a sequence for a warp, `warp` (its track and counter) the
  // defaults: the id of the latest ended sequence, keeping what that one
  // interned (unless too much), else a new id.
  void Start(WarpSequence& s, const Lane& warp);
  // Ends it; its pending ENDs stay.
  void End(WarpSequence& s);

  // A warp's records, on its open sequence, in start order; `lanes` are the
  // warp's lanes n >= 1 at n - 1 (for the pending ENDs on them). A slice
  // goes on `lane` (nullptr: the warp's track), its BEGIN now, its END
  // pending. Inline: the per-record path (below the class).
  [[gnu::always_inline]] void Slice(WarpSequence& s, const std::vector<Lane>& lanes, const Lane* lane,
                                    const trace::SliceRecord& slice);
  [[gnu::always_inline]] void Instant(WarpSequence& s, const std::vector<Lane>& lanes,
                                      const trace::InstantRecord& instant);
  // A counter sample: `value` on the counter track `track`.
  void CounterSample(WarpSequence& s, const std::vector<Lane>& lanes, uint64_t track, uint64_t ts_ns, int64_t value);
  // The BEGIN of a slice on the warp's track, named inline, with `args`
  // (and 0 on the cycles counter: one value per slice row).
  void BeginNamedSlice(WarpSequence& s, uint64_t ts_ns, std::string_view name, const Annotations& args);
  // Writes the pending ENDs of `s` (after every other event of its warp):
  // on its sequence when it has one, else on sequence 1 on their tracks (the
  // warp's `track`, or a lane's).
  void WriteEnds(WarpSequence& s, uint64_t track, const std::vector<Lane>& lanes);
  // An END at `ts_ns` on the warp's `track`, on the same terms.
  void EndSlice(WarpSequence& s, uint64_t track, uint64_t ts_ns);

  // Run-wide id of a name: from the cache of the latest names' addresses,
  // verified by content, so a repeated name costs no hashing.
  uint32_t NameId(std::string_view name) {
    const CachedName& c = name_cache_[(reinterpret_cast<uintptr_t>(name.data()) >> 3) & 255];
    if (c.data != nullptr && c.data == name.data() && c.size == name.size() && SameBytes(c.known, name)) {
      return c.id;  // the same bytes still (a caller may reuse its buffer for another name)
    }
    return LookUpName(name);
  }

  // The latest time of an event written here.
  uint64_t last_ns() const { return last_ns_; }

  WarpSequences(const WarpSequences&) = delete;
  WarpSequences& operator=(const WarpSequences&) = delete;

 private:
  // Writes the pending ENDs of `s` before `t`, and those at t on `lane` at
  // `depth` or deeper (the ENDs a slice beginning there must follow). With
  // kAnyLane, only those before t.
  static constexpr uint32_t kAnyLane = UINT32_MAX;
  void SettleEnds(WarpSequence& s, const std::vector<Lane>& lanes, uint64_t t, uint32_t lane, uint32_t depth);
  static void PushEnd(WarpSequence& s, const PendingEnd& end);
  void WriteEnd(WarpSequence& s, const std::vector<Lane>& lanes, const PendingEnd& end);

  // Slice and Instant for a record with a value, a name to intern or an
  // annotation: the packet built in packet_.
  void SlicePacket(WarpSequence& s, const Lane* lane, const trace::SliceRecord& slice, uint32_t iid, bool fresh,
                   uint32_t new_names);
  void InstantPacket(WarpSequence& s, const trace::InstantRecord& instant, std::string_view name, uint32_t iid,
                     bool fresh, uint32_t new_names);
  // Opens a warp packet at `t`: timestamp (delta, or absolute on clock 6
  // when `t` precedes the sequence's last one) and sequence id.
  proto::ProtoEncoder::Nested BeginWarpPacket(WarpSequence& s, uint64_t t);
  // Adds to the warp packet being built the interned data it needs: event
  // name `iid` (0: none) and the debug annotation names in the bit set
  // `annotation_names` (bit iid - 1).
  void Intern(WarpSequence& s, uint32_t iid, std::string_view name, uint32_t annotation_names);
  // A whole packet for the common events (a BEGIN with its cycles, an END,
  // an instant; nothing to intern), encoded in place in the trace file with
  // its lengths known beforehand: ProtoEncoder's nested messages reserve a
  // length and move the payload back over it, and the packet would then be
  // copied, which together cost more than such an event's fields (same
  // bytes either way). `lane` nullptr: the warp's default track (and
  // counter). With `has_cycles`, `cycles` as the encoding says (an
  // instant's 0 only as a counter value).
  [[gnu::always_inline]] void FastEvent(WarpSequence& s, uint64_t t, uint32_t type, uint32_t iid, const Lane* lane,
                                        bool has_cycles, uint32_t cycles);
  // The same fields of a BEGIN or an instant built in packet_.
  void EventCycles(const Lane* lane, uint32_t type, uint32_t cycles);
  // The BEGIN's or the instant's debug annotation "value" (interned).
  void ValueAnnotation(int64_t value);
  // Ends the packet being built in packet_ and appends it to the file.
  void EndPacket(proto::ProtoEncoder::Nested packet);

  // Debug annotation names of warp events, interned on each warp sequence
  // with these iids the first time it uses them (kAnnotationNames).
  enum : uint32_t { kCyclesIid = 1, kUnterminatedIid, kNoteIid, kErrorIid, kValueIid };
  static constexpr size_t kMaxFastPacket = 64;  // see FastEvent

  uint32_t LookUpName(std::string_view name);
  // The sequence's iid of a name; *fresh when the packet must intern it.
  static uint32_t NameIid(WarpSequence& s, uint32_t name_id, bool* fresh);
  // Whether `known` starts with the bytes of `name`, compared 8 at a time.
  static bool SameBytes(const char* known, std::string_view name) {
    size_t i = 0;
    for (; i + 8 <= name.size(); i += 8) {
      uint64_t a, b;
      std::memcpy(&a, known + i, 8);
      std::memcpy(&b, name.data() + i, 8);
      if (a != b) return false;
    }
    for (; i < name.size(); ++i) {
      if (known[i] != name[i]) return false;
    }
    return true;
  }

  TraceFile& file_;
  TrackTree& tracks_;  // sequence 1: the ENDs of an ended sequence
  // Packets with something to intern or annotate are built here; FastEvent's
  // in place in the file.
  proto::ProtoEncoder packet_;
  bool counters_ = true;          // PerfettoSink::CyclesEncoding::kCounter
  bool annotate_cycles_ = false;  // PerfettoSink::CyclesEncoding::kAnnotation
  uint64_t last_ns_ = 0;

  uint32_t next_id_ = 2;            // 1 is the main sequence
  std::vector<uint32_t> free_ids_;  // ids of ended sequences, the last ended at the back
  // What an ended sequence interned, by id: the next warp on that id keeps it.
  struct KeptNames {
    std::vector<uint32_t> names;  // run-wide name ids; iid = index + 1
    uint32_t annotation_names = 0;
  };
  std::vector<KeptNames> kept_;
  static constexpr size_t kMaxKeptNames = 64;  // more: the id starts cleared (NameIid scans them)

  // Event names, run-wide; name_cache_ remembers where the latest views
  // pointed.
  std::deque<std::string> names_;
  std::unordered_map<std::string_view, uint32_t> name_ids_;
  struct CachedName {
    const char* data = nullptr;  // where the caller's view pointed
    size_t size = 0;
    uint32_t id = 0;
    const char* known = nullptr;  // names_[id]
  };
  CachedName name_cache_[256];
  std::string scratch_;           // "<name> (end without begin)"
  std::vector<PendingEnd> held_;  // SettleEnds' ENDs at t that wait
};

// --- the per-record path ----------------------------------------------------
//
// Inline: PerfettoSink::OnSlice and OnInstant take it in whole, FastEvent
// too (the call itself would cost a quarter of it). Only a record that
// builds its packet in packet_ leaves it.

namespace internal {

// Appends `v` as a varint at `p`; returns the end.
inline char* PutVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

// The one-byte key of a field numbered below 16.
constexpr char Key(uint32_t field, uint32_t type) { return static_cast<char>((field << 3) | type); }

}  // namespace internal

inline void WarpSequences::Slice(WarpSequence& s, const std::vector<Lane>& lanes, const Lane* lane,
                                 const trace::SliceRecord& slice) {
  bool fresh = false;
  const uint32_t iid = NameIid(s, NameId(slice.name), &fresh);
  uint32_t want = slice.unterminated ? (1u << (kUnterminatedIid - 1)) | (slice.note.empty() ? 0 : 1u << (kNoteIid - 1))
                                     : (annotate_cycles_ ? 1u << (kCyclesIid - 1) : 0);
  if (slice.value.present) want |= 1u << (kValueIid - 1);
  const uint32_t new_names = want & ~s.annotation_names;
  SettleEnds(s, lanes, slice.begin_ns, slice.lane, slice.depth);
  PushEnd(s, PendingEnd{std::max(slice.begin_ns, slice.end_ns), slice.lane, slice.depth});
  if (!fresh && new_names == 0 && !slice.unterminated && !slice.value.present) {
    return FastEvent(s, slice.begin_ns, kSliceBegin, iid, lane, true, slice.cycles);
  }
  SlicePacket(s, lane, slice, iid, fresh, new_names);
}

inline void WarpSequences::Instant(WarpSequence& s, const std::vector<Lane>& lanes,
                                   const trace::InstantRecord& instant) {
  std::string_view name = instant.name;
  if (instant.unmatched_end) {
    scratch_.assign(instant.name);
    scratch_ += " (end without begin)";
    name = scratch_;
  }
  bool fresh = false;
  const uint32_t iid = NameIid(s, NameId(name), &fresh);
  const uint32_t new_names =
      ((instant.unmatched_end ? 1u << (kErrorIid - 1) : 0) | (instant.value.present ? 1u << (kValueIid - 1) : 0)) &
      ~s.annotation_names;
  // Only the ENDs before it: an instant at a slice's last nanosecond stays
  // inside the slice (it may have been recorded there, and a zero-length
  // slice after it may still nest in that one).
  SettleEnds(s, lanes, instant.ts_ns, kAnyLane, 0);
  // With counters, its 0 cycles: one value per slice row (see above).
  if (!fresh && !instant.unmatched_end && !instant.value.present) {
    return FastEvent(s, instant.ts_ns, kInstant, iid, nullptr, counters_, 0);
  }
  InstantPacket(s, instant, name, iid, fresh, new_names);
}

inline uint32_t WarpSequences::NameIid(WarpSequence& s, uint32_t name_id, bool* fresh) {
  for (size_t i = 0; i < s.names.size(); ++i) {
    if (s.names[i] == name_id) return static_cast<uint32_t>(i + 1);
  }
  s.names.push_back(name_id);
  *fresh = true;
  return static_cast<uint32_t>(s.names.size());
}

inline void WarpSequences::PushEnd(WarpSequence& s, const PendingEnd& end) {
  if (s.ends.empty() || !s.ends.back().Before(end)) return s.ends.push_back(end);
  auto at = s.ends.end() - 1;
  while (at != s.ends.begin() && (at - 1)->Before(end)) --at;
  s.ends.insert(at, end);
}

inline void WarpSequences::FastEvent(WarpSequence& s, uint64_t t, uint32_t type, uint32_t iid, const Lane* lane,
                                     bool has_cycles, uint32_t cycles) {
  using internal::Key;
  using internal::PutVarint;
  last_ns_ = std::max(last_ns_, t);
  // At most 2 + (11 + 3 + 6) + 2 + (2 + 6 + 11 + (12 + 6 | 7)) = 61 bytes:
  // both lengths fit one byte.
  char* const packet = file_.Room(kMaxFastPacket);
  *packet = Key(kTracePacket, proto::kLengthDelimited);
  char* const packet_size = packet + 1;
  char* p = packet + 2;
  *p++ = Key(kTimestamp, proto::kVarint);
  if (t >= s.last_ns) {
    p = PutVarint(p, t - s.last_ns);
    s.last_ns = t;
  } else {
    p = PutVarint(p, t);
    p = PutVarint(p, (kTimestampClockId << 3) | proto::kVarint);
    *p++ = static_cast<char>(kBoottime);
  }
  *p++ = Key(kSequenceId, proto::kVarint);
  p = PutVarint(p, s.id);
  *p++ = Key(kTrackEvent, proto::kLengthDelimited);
  char* const te_size = p++;
  *p++ = Key(kType, proto::kVarint);
  *p++ = static_cast<char>(type);
  if (iid != 0) {
    *p++ = Key(kNameIid, proto::kVarint);
    p = PutVarint(p, iid);
  }
  if (lane != nullptr) {
    *p++ = Key(kEventTrackUuid, proto::kVarint);
    p = PutVarint(p, lane->track);
  }
  if (has_cycles) {
    if (counters_) {
      if (lane != nullptr) {
        p = PutVarint(p, (kExtraCounterTrackUuids << 3) | proto::kVarint);
        p = PutVarint(p, lane->cycles);
      }
      *p++ = Key(kExtraCounterValues, proto::kVarint);
      p = PutVarint(p, cycles);
    } else if (annotate_cycles_) {
      *p++ = Key(kDebugAnnotations, proto::kLengthDelimited);
      char* const a_size = p++;
      *p++ = Key(kAnnotationNameIid, proto::kVarint);
      *p++ = static_cast<char>(kCyclesIid);
      *p++ = Key(kUintValue, proto::kVarint);
      p = PutVarint(p, cycles);
      *a_size = static_cast<char>(p - a_size - 1);
    }
  }
  *te_size = static_cast<char>(p - te_size - 1);
  *packet_size = static_cast<char>(p - packet_size - 1);
  file_.Commit(static_cast<size_t>(p - packet));
  file_.RecordEnd();
}

}  // namespace smprof::perfetto
