// Test helper: Perfetto protobuf traces written packet by packet with
// smprof's encoder (tests/e2e/perfetto_import_test.cc,
// tests/unit/perfetto_check_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector/proto_encoder.h"

namespace smprof::testing {

// TracePacket fields (perfetto/trace/trace_packet.proto).
enum PacketField : uint32_t {
  kPacket = 1, kTimestamp = 8, kSequenceId = 10, kTrackEvent = 11, kInternedData = 12, kSequenceFlags = 13,
  kClockSnapshot = 6, kTimestampClockId = 58, kPacketDefaults = 59, kTrackDescriptor = 60,
};
inline constexpr uint32_t kIncrementalClock = 64;  // sequence-scoped clock ids are 64-127
inline constexpr uint64_t kT0 = 1'000'000'000;

// Builds Perfetto protobuf traces packet by packet, the layout smprof's
// writer uses: track descriptors on their own sequence; one sequence per
// warp track, started by a packet that clears its state, starts an
// incremental clock at kT0, makes the warp's track the default and interns
// the names; then one small packet per event.
struct PerfettoBuilder {
  proto::ProtoEncoder e;
  size_t event_bytes = 0;
  size_t events = 0;

  void Descriptor(uint64_t uuid, uint64_t parent, int pid, int tid, const std::string& name) {
    const auto p = e.BeginNested(kPacket);
    e.Varint(kSequenceId, 1000);
    const auto d = e.BeginNested(kTrackDescriptor);
    e.Varint(1, uuid);
    if (parent != 0) e.Varint(5, parent);
    if (tid < 0) {
      const auto proc = e.BeginNested(3);
      e.Varint(1, pid);
      e.Bytes(6, name);
      e.EndNested(proc);
    } else {
      const auto thread = e.BeginNested(4);
      e.Varint(1, pid);
      e.Varint(2, tid);
      e.Bytes(5, name);
      e.EndNested(thread);
    }
    e.EndNested(d);
    e.EndNested(p);
  }

  // The first packet of a warp's sequence: clears its state, starts its
  // incremental clock at kT0, makes the warp's track the default, interns names.
  void StartSequence(uint32_t seq, uint64_t track, const std::vector<std::string>& names) {
    const auto p = e.BeginNested(kPacket);
    e.Varint(kSequenceId, seq);
    e.Varint(kSequenceFlags, 3);  // SEQ_INCREMENTAL_STATE_CLEARED | SEQ_NEEDS_INCREMENTAL_STATE
    const auto snap = e.BeginNested(kClockSnapshot);
    for (uint32_t id : {kIncrementalClock, 6u}) {  // 6: BOOTTIME, the trace clock
      const auto c = e.BeginNested(1);
      e.Varint(1, id);
      e.Varint(2, kT0);
      if (id == kIncrementalClock) e.Varint(3, 1);
      e.EndNested(c);
    }
    e.EndNested(snap);
    const auto defaults = e.BeginNested(kPacketDefaults);
    e.Varint(kTimestampClockId, kIncrementalClock);
    const auto te = e.BeginNested(11);
    e.Varint(11, track);
    e.EndNested(te);
    e.EndNested(defaults);
    const auto interned = e.BeginNested(kInternedData);
    for (size_t i = 0; i < names.size(); ++i) {
      const auto n = e.BeginNested(2);
      e.Varint(1, i + 1);
      e.Bytes(2, names[i]);
      e.EndNested(n);
    }
    e.EndNested(interned);
    e.EndNested(p);
  }

  // type: 1 begin, 2 end, 3 instant; name_iid 0 = none. `flags`: whether the
  // packet says SEQ_NEEDS_INCREMENTAL_STATE.
  void Event(uint32_t seq, uint64_t delta_ns, uint32_t type, uint64_t name_iid, bool flags) {
    const size_t before = e.size();
    const auto p = e.BeginNested(kPacket);
    e.Varint(kTimestamp, delta_ns);
    e.Varint(kSequenceId, seq);
    if (flags) e.Varint(kSequenceFlags, 2);
    const auto te = e.BeginNested(kTrackEvent);
    e.Varint(9, type);
    if (name_iid != 0) e.Varint(10, name_iid);
    e.EndNested(te);
    e.EndNested(p);
    event_bytes += e.size() - before;
    ++events;
  }
};

}  // namespace smprof::testing
