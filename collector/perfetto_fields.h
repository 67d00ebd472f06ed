// The words of Perfetto's trace format the Perfetto writer uses: field
// numbers of perfetto/trace/trace_packet.proto and the messages it holds,
// and the values of the enums among them. In one place so that every part
// of the writer (perfetto_tracks, perfetto_sequences, perfetto_hardware)
// spells a field the same way.
#pragma once

#include <cstdint>

namespace smprof::perfetto {

enum : uint32_t {
  kTracePacket = 1,
  // TracePacket
  kClockSnapshot = 6,
  kTimestamp = 8,
  kSequenceId = 10,
  kTrackEvent = 11,
  kInternedData = 12,
  kSequenceFlags = 13,
  kTimestampClockId = 58,
  kPacketDefaults = 59,
  kTrackDescriptor = 60,
  // ClockSnapshot.clocks / Clock
  kClocks = 1,
  kClockId = 1,
  kClockValue = 2,
  kClockIncremental = 3,
  // TracePacketDefaults (timestamp_clock_id is 58 there too)
  kTrackEventDefaults = 11,
  // TrackEventDefaults (the same numbers as in TrackEvent)
  kDefaultTrackUuid = 11,
  kExtraCounterTrackUuids = 31,
  // TrackDescriptor
  kUuid = 1,
  kTrackName = 2,
  kProcessDescriptor = 3,
  kThreadDescriptor = 4,
  kParentUuid = 5,
  kCounter = 8,
  kChildOrdering = 11,
  kSiblingOrderRank = 12,
  kDescription = 14,
  kCounterUnit = 3,
  // TrackEvent
  kDebugAnnotations = 4,
  kType = 9,
  kNameIid = 10,
  kEventTrackUuid = 11,
  kExtraCounterValues = 12,
  kEventName = 23,
  kCounterValue = 30,
  kFlowIds = 47,
  kTerminatingFlowIds = 48,
  // ProcessDescriptor / ThreadDescriptor
  kDescriptorPid = 1,
  kDescriptorTid = 2,
  kThreadName = 5,
  kProcessName = 6,
  // DebugAnnotation
  kAnnotationNameIid = 1,
  kBoolValue = 2,
  kUintValue = 3,
  kIntValue = 4,
  kDoubleValue = 5,
  kStringValue = 6,
  kAnnotationName = 10,
  kDictEntries = 11,
  kArrayValues = 12,
  // InternedData; EventName and DebugAnnotationName are {iid 1, name 2}
  kEventNames = 2,
  kDebugAnnotationNames = 3,
  kIid = 1,
  kInternedName = 2,
};

// TrackEvent.Type
enum : uint32_t { kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounterEvent = 4 };
// TracePacket.SequenceFlags
constexpr uint32_t kSeqCleared = 1, kSeqNeedsState = 2;
constexpr uint32_t kBoottime = 6;           // BuiltinClock: trace time
constexpr uint32_t kIncrementalClock = 64;  // sequence-scoped
constexpr uint32_t kExplicitOrder = 3;      // TrackDescriptor.ChildTracksOrdering
constexpr uint32_t kUnitCount = 2;          // CounterDescriptor.Unit

// The sequence of the track descriptors and of every event that is not a
// warp's (perfetto_tracks.h).
constexpr uint32_t kMainSequence = 1;

}  // namespace smprof::perfetto
