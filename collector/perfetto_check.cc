#include "collector/perfetto_check.h"

#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "collector/perfetto_fields.h"
#include "collector/proto_encoder.h"
#include "collector/proto_reader.h"

namespace smprof::perfetto {
namespace {

using proto::Field;
using proto::ProtoReader;

constexpr uint32_t kFirstSequenceClock = 64, kLastSequenceClock = 127;

struct Sequence {
  bool cleared = false;
  std::unordered_map<uint64_t, std::string> names;  // interned event names
  uint64_t default_track = 0;
  uint32_t default_clock = 0;
  std::unordered_map<uint32_t, uint64_t> incremental;  // clock id -> last value
};

struct OpenSlice {
  std::string name;
  uint64_t ts;
};

class Checker {
 public:
  TraceSummary Run(std::string_view trace) {
    // Descriptors may come anywhere in the file: read them first.
    Walk(trace, /*descriptors=*/true);
    Walk(trace, /*descriptors=*/false);
    for (auto& [uuid, open] : open_) {
      auto it = summary_.tracks.find(uuid);
      if (it != summary_.tracks.end()) it->second.open += open.size();
    }
    return std::move(summary_);
  }

 private:
  void Error(std::string what) {
    if (summary_.errors.size() < 100) summary_.errors.push_back(std::move(what));
  }

  void Walk(std::string_view trace, bool descriptors) {
    ProtoReader r(trace);
    Field f;
    uint64_t index = 0;
    while (r.Next(&f)) {
      if (f.number != kTracePacket || f.type != proto::kLengthDelimited) {
        if (descriptors) Error("a top-level field that is not Trace.packet: " + std::to_string(f.number));
        continue;
      }
      if (descriptors) {
        ++summary_.packets;
        Descriptor(f.bytes);
      } else {
        Packet(f.bytes, index);
      }
      ++index;
    }
    if (!r.ok() && descriptors) Error("the trace ends inside a packet or is not protobuf");
  }

  void Descriptor(std::string_view packet) {
    ProtoReader r(packet);
    Field f;
    while (r.Next(&f)) {
      if (f.number != kTrackDescriptor) continue;
      ++summary_.descriptors;
      uint64_t uuid = 0;
      std::string name;
      bool thread = false, has_pid = false, has_tid = false, counter = false;
      ProtoReader d(f.bytes);
      Field g;
      while (d.Next(&g)) {
        if (g.number == kUuid) uuid = g.value;
        if (g.number == kTrackName) name = std::string(g.bytes);
        if (g.number == kCounter) counter = true;
        if (g.number == kProcessDescriptor || g.number == kThreadDescriptor) {
          thread = g.number == kThreadDescriptor;
          ProtoReader p(g.bytes);
          Field h;
          while (p.Next(&h)) {
            if (h.number == kDescriptorPid) has_pid = true;
            if (h.number == kDescriptorTid && thread) has_tid = true;
            if ((h.number == kProcessName && !thread) || (h.number == kThreadName && thread)) {
              if (name.empty()) name = std::string(h.bytes);
            }
          }
        }
      }
      if (uuid == 0) Error("a track descriptor without a uuid");
      if (thread && !(has_pid && has_tid)) Error("thread track " + std::to_string(uuid) + " lacks pid or tid");
      summary_.tracks[uuid].name = name;
      summary_.tracks[uuid].counter = counter;
    }
  }

  void Packet(std::string_view packet, uint64_t index) {
    uint32_t seq_id = 0, flags = 0, clock_id = 0;
    bool has_ts = false;
    uint64_t ts = 0;
    std::string_view event, interned, defaults, snapshot;
    ProtoReader r(packet);
    Field f;
    while (r.Next(&f)) {
      switch (f.number) {
        case kTimestamp:
          has_ts = true;
          ts = f.value;
          break;
        case kSequenceId: seq_id = static_cast<uint32_t>(f.value); break;
        case kSequenceFlags: flags = static_cast<uint32_t>(f.value); break;
        case kTimestampClockId: clock_id = static_cast<uint32_t>(f.value); break;
        case kTrackEvent: event = f.bytes; break;
        case kInternedData: interned = f.bytes; break;
        case kPacketDefaults: defaults = f.bytes; break;
        case kClockSnapshot: snapshot = f.bytes; break;
        default: break;
      }
    }
    if (!r.ok()) Error("packet " + std::to_string(index) + " is malformed");
    Sequence& s = sequences_[seq_id];
    if (flags & kSeqCleared) s = Sequence{true};
    if (!snapshot.empty()) Snapshot(snapshot, &s);
    if (!defaults.empty()) Defaults(defaults, &s);
    if (!interned.empty()) {
      if (seq_id == 0 || !s.cleared) Error("packet " + std::to_string(index) + ": interned data before CLEARED");
      Interned(interned, &s);
    }
    if (event.empty()) return;
    ++summary_.track_events;
    const std::string where = "track event in packet " + std::to_string(index);
    if (seq_id == 0) return Error(where + " has no trusted_packet_sequence_id");
    if (!has_ts) return Error(where + " has no timestamp");
    const uint32_t clock = clock_id != 0 ? clock_id : s.default_clock;
    if (clock >= kFirstSequenceClock && clock <= kLastSequenceClock) {
      auto it = s.incremental.find(clock);
      if (it == s.incremental.end()) return Error(where + " uses incremental clock " + std::to_string(clock) +
                                                  " before a snapshot defines it");
      it->second += ts;
      ts = it->second;
    }
    Event(event, s, ts, where);
  }

  void Snapshot(std::string_view snapshot, Sequence* s) {
    ProtoReader r(snapshot);
    Field f;
    while (r.Next(&f)) {
      if (f.number != kClocks) continue;
      uint32_t id = 0;
      uint64_t value = 0;
      bool incremental = false;
      ProtoReader c(f.bytes);
      Field g;
      while (c.Next(&g)) {
        if (g.number == kClockId) id = static_cast<uint32_t>(g.value);
        if (g.number == kClockValue) value = g.value;
        if (g.number == kClockIncremental) incremental = g.value != 0;
      }
      if (incremental) s->incremental[id] = value;
    }
  }

  void Defaults(std::string_view defaults, Sequence* s) {
    ProtoReader r(defaults);
    Field f;
    while (r.Next(&f)) {
      if (f.number == kTimestampClockId) s->default_clock = static_cast<uint32_t>(f.value);
      if (f.number != kTrackEventDefaults) continue;
      ProtoReader d(f.bytes);
      Field g;
      while (d.Next(&g)) {
        if (g.number == kDefaultTrackUuid) s->default_track = g.value;
      }
    }
  }

  void Interned(std::string_view interned, Sequence* s) {
    ProtoReader r(interned);
    Field f;
    while (r.Next(&f)) {
      if (f.number != kEventNames) continue;
      uint64_t iid = 0;
      std::string name;
      ProtoReader n(f.bytes);
      Field g;
      while (n.Next(&g)) {
        if (g.number == kIid) iid = g.value;
        if (g.number == kInternedName) name = std::string(g.bytes);
      }
      if (iid == 0) Error("an interned event name with iid 0");
      s->names[iid] = std::move(name);
    }
  }

  void Event(std::string_view event, const Sequence& s, uint64_t ts, const std::string& where) {
    uint32_t type = 0;
    uint64_t track = s.default_track, name_iid = 0;
    std::string name;
    ProtoReader r(event);
    Field f;
    while (r.Next(&f)) {
      if (f.number == kType) type = static_cast<uint32_t>(f.value);
      if (f.number == kEventTrackUuid) track = f.value;
      if (f.number == kNameIid) name_iid = f.value;
      if (f.number == kEventName) name = std::string(f.bytes);
      if (f.number == kFlowIds) flows_.insert(f.value);  // begins the flow, or continues it
      if (f.number == kTerminatingFlowIds) {
        if (flows_.erase(f.value) == 0) Error(where + ": flow " + std::to_string(f.value) + " ends but never began");
        ++summary_.flows;
      }
    }
    if (name_iid != 0) {
      auto it = s.names.find(name_iid);
      if (!s.cleared || it == s.names.end()) return Error(where + ": name iid " + std::to_string(name_iid) +
                                                          " is not interned on its sequence");
      name = it->second;
    }
    auto t = summary_.tracks.find(track);
    if (t == summary_.tracks.end()) return Error(where + ": track " + std::to_string(track) + " has no descriptor");
    TrackSummary& ts_track = t->second;
    if (ts_track.counter != (type == kCounterEvent)) {
      return Error(where +
                   (type == kCounterEvent ? ": a counter value on track " : ": a slice or instant on counter track ") +
                   std::to_string(track));
    }
    ts_track.first_ns = std::min(ts_track.first_ns, ts);
    ts_track.last_ns = std::max(ts_track.last_ns, ts);
    std::vector<OpenSlice>& open = open_[track];
    switch (type) {
      case kSliceBegin:
        open.push_back({name, ts});
        break;
      case kSliceEnd:
        if (open.empty()) return Error(where + ": SLICE_END with no open slice on track " + std::to_string(track));
        if (ts < open.back().ts) Error(where + ": a slice ends before it begins");
        ++ts_track.slices;
        ++ts_track.names[open.back().name];
        open.pop_back();
        break;
      case kInstant:
        ++ts_track.instants;
        ++ts_track.names[name];
        break;
      case kCounterEvent:
        ++ts_track.counter_values;
        break;
      default:
        Error(where + ": type " + std::to_string(type));
    }
  }

  TraceSummary summary_;
  std::unordered_map<uint32_t, Sequence> sequences_;
  std::unordered_map<uint64_t, std::vector<OpenSlice>> open_;
  std::unordered_set<uint64_t> flows_;  // begun (flow_ids), not yet terminated
};

}  // namespace

TraceSummary CheckTrace(std::string_view trace) { return Checker().Run(trace); }

}  // namespace smprof::perfetto
