// TrackTree: the tracks of a Perfetto trace, and the events of sequence 1.
//
// Every track is a TrackDescriptor packet on sequence 1 (kMainSequence),
// written when the track is made and so before any event on it; uuids count
// from 1, so tracks() is the number made. Plain named tracks nest through
// parent_uuid (no process or thread descriptors for the GPU side: Perfetto
// would show their children as siblings), each with a sibling_order_rank
// computed from its key as it is made; a parent made with ordered children
// asks for that explicit order. Counter tracks count plain units. Process
// and thread tracks (ProcessDescriptor, ThreadDescriptor) hold the
// application's host threads.
//
// Sequence 1 also carries every event that is not a warp's (launch and
// stream slices, harvests, notices, counters, async spans) and the ENDs a
// warp's sequence left behind (perfetto_sequences.h): absolute timestamps
// (trace time: ns as given), explicit track uuids, inline names and
// annotations. Such events are few, so their size matters little.
//
// Packets are built in an encoder of their own and appended to the trace
// file whole.
#pragma once

#include <cstdint>
#include <string_view>

#include "collector/perfetto_annotations.h"
#include "collector/proto_encoder.h"
#include "collector/trace_file.h"

namespace smprof::perfetto {

// Ranks of a track's lane siblings: a warp's (or a slot's) track at k *
// kLaneSlots, its lane n right after it at k * kLaneSlots + n.
constexpr uint32_t kLaneSlots = 1024;

class TrackTree {
 public:
  explicit TrackTree(TraceFile& file) : file_(file) {}

  // A named track under `parent` (0: a root) ranked `rank` among its
  // siblings (clamped to int32); its own children in their ranks' order
  // when `ordered_children`. Returns its uuid.
  uint64_t NewTrack(uint64_t parent, std::string_view name, int64_t rank, bool ordered_children,
                    std::string_view description = {});
  uint64_t NewCounterTrack(uint64_t parent, std::string_view name);
  // The track of a host process, and of one of its threads.
  uint64_t NewProcessTrack(uint32_t pid, std::string_view name);
  uint64_t NewThreadTrack(uint32_t pid, uint32_t tid, std::string_view name);

  // An event at absolute `ts_ns` on `track` (kSliceEnd: without its name);
  // `flow` (0: none) as its flow id.
  void Event(uint64_t track, uint32_t type, std::string_view name, uint64_t ts_ns, const Annotations* args,
             uint64_t flow = 0);
  // A whole slice: its BEGIN, then its END at `end_ns` (at the BEGIN if
  // earlier).
  void Slice(uint64_t track, std::string_view name, uint64_t begin_ns, uint64_t end_ns, const Annotations* args,
             uint64_t flow = 0);
  void Counter(uint64_t track, uint64_t ts_ns, uint64_t value);
  // An instant carrying 0 on `cycles` (its track's "cycles" counter: one
  // value per slice row; 0: none), `flow` (0: none) as its flow id or, when
  // `terminating`, its terminating flow id.
  void FlowInstant(uint64_t track, uint64_t cycles, std::string_view name, uint64_t ts_ns, uint64_t flow,
                   bool terminating);

  // Tracks made so far.
  uint64_t tracks() const { return next_uuid_ - 1; }
  // The latest time of an event written here.
  uint64_t last_ns() const { return last_ns_; }

  TrackTree(const TrackTree&) = delete;
  TrackTree& operator=(const TrackTree&) = delete;

 private:
  // A TrackDescriptor packet with a new uuid (returned); `fields()` writes
  // the descriptor's fields after the uuid.
  template <typename Fields>
  uint64_t Describe(Fields&& fields);
  // Ends the packet being built and appends it to the file.
  void EndPacket(proto::ProtoEncoder::Nested packet);
  // A sequence-1 TrackEvent packet of `type` at `ts_ns` on `track`, open
  // for the event's other fields; EndEvent closes both and appends it.
  struct EventPacket {
    proto::ProtoEncoder::Nested packet;
    proto::ProtoEncoder::Nested event;
  };
  EventPacket BeginEvent(uint64_t track, uint32_t type, uint64_t ts_ns);
  void EndEvent(EventPacket e);

  TraceFile& file_;
  proto::ProtoEncoder packet_;
  uint64_t next_uuid_ = 1;
  uint64_t last_ns_ = 0;
};

}  // namespace smprof::perfetto
