#include "collector/perfetto_tracks.h"

#include <algorithm>
#include <cstdint>

#include "collector/perfetto_fields.h"

namespace smprof::perfetto {
namespace {

int32_t Rank(int64_t v) { return static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)); }

}  // namespace

void TrackTree::EndPacket(proto::ProtoEncoder::Nested packet) {
  packet_.EndNested(packet);
  file_.Append(packet_.bytes());
  packet_.Clear();
  file_.RecordEnd();
}

template <typename Fields>
uint64_t TrackTree::Describe(Fields&& fields) {
  const uint64_t uuid = next_uuid_++;
  const auto p = packet_.BeginNested(kTracePacket);
  packet_.Varint(kSequenceId, kMainSequence);
  const auto d = packet_.BeginNested(kTrackDescriptor);
  packet_.Varint(kUuid, uuid);
  fields();
  packet_.EndNested(d);
  EndPacket(p);
  return uuid;
}

uint64_t TrackTree::NewTrack(uint64_t parent, std::string_view name, int64_t rank, bool ordered_children,
                             std::string_view description) {
  return Describe([&] {
    if (parent != 0) packet_.Varint(kParentUuid, parent);
    packet_.Bytes(kTrackName, name);
    if (!description.empty()) packet_.Bytes(kDescription, description);
    if (ordered_children) packet_.Varint(kChildOrdering, kExplicitOrder);
    packet_.Varint(kSiblingOrderRank, static_cast<uint64_t>(static_cast<int64_t>(Rank(rank))));
  });
}

uint64_t TrackTree::NewCounterTrack(uint64_t parent, std::string_view name) {
  return Describe([&] {
    packet_.Varint(kParentUuid, parent);
    packet_.Bytes(kTrackName, name);
    const auto c = packet_.BeginNested(kCounter);
    packet_.Varint(kCounterUnit, kUnitCount);
    packet_.EndNested(c);
  });
}

uint64_t TrackTree::NewProcessTrack(uint32_t pid, std::string_view name) {
  return Describe([&] {
    const auto pd = packet_.BeginNested(kProcessDescriptor);
    packet_.Varint(kDescriptorPid, pid);
    packet_.Bytes(kProcessName, name);
    packet_.EndNested(pd);
  });
}

uint64_t TrackTree::NewThreadTrack(uint32_t pid, uint32_t tid, std::string_view name) {
  return Describe([&] {
    const auto td = packet_.BeginNested(kThreadDescriptor);
    packet_.Varint(kDescriptorPid, pid);
    packet_.Varint(kDescriptorTid, tid);
    packet_.Bytes(kThreadName, name);
    packet_.EndNested(td);
  });
}

TrackTree::EventPacket TrackTree::BeginEvent(uint64_t track, uint32_t type, uint64_t ts_ns) {
  last_ns_ = std::max(last_ns_, ts_ns);
  EventPacket e;
  e.packet = packet_.BeginNested(kTracePacket);
  packet_.Varint(kTimestamp, ts_ns);
  packet_.Varint(kSequenceId, kMainSequence);
  e.event = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, type);
  packet_.Varint(kEventTrackUuid, track);
  return e;
}

void TrackTree::EndEvent(EventPacket e) {
  packet_.EndNested(e.event);
  EndPacket(e.packet);
}

void TrackTree::Event(uint64_t track, uint32_t type, std::string_view name, uint64_t ts_ns, const Annotations* args,
                      uint64_t flow) {
  const EventPacket e = BeginEvent(track, type, ts_ns);
  if (type != kSliceEnd) packet_.Bytes(kEventName, name);
  if (args != nullptr) args->WriteTo(packet_);
  if (flow != 0) packet_.Fixed64(kFlowIds, flow);
  EndEvent(e);
}

void TrackTree::Slice(uint64_t track, std::string_view name, uint64_t begin_ns, uint64_t end_ns,
                      const Annotations* args, uint64_t flow) {
  Event(track, kSliceBegin, name, begin_ns, args, flow);
  Event(track, kSliceEnd, {}, std::max(begin_ns, end_ns), nullptr);
}

void TrackTree::Counter(uint64_t track, uint64_t ts_ns, uint64_t value) {
  const EventPacket e = BeginEvent(track, kCounterEvent, ts_ns);
  packet_.Varint(kCounterValue, std::min<uint64_t>(value, INT64_MAX));
  EndEvent(e);
}

void TrackTree::FlowInstant(uint64_t track, uint64_t cycles, std::string_view name, uint64_t ts_ns, uint64_t flow,
                            bool terminating) {
  const EventPacket e = BeginEvent(track, kInstant, ts_ns);
  packet_.Bytes(kEventName, name);
  if (cycles != 0) {
    packet_.Varint(kExtraCounterTrackUuids, cycles);
    packet_.Varint(kExtraCounterValues, 0);
  }
  if (flow != 0) packet_.Fixed64(terminating ? kTerminatingFlowIds : kFlowIds, flow);
  EndEvent(e);
}

}  // namespace smprof::perfetto
