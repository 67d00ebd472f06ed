// Perfetto's own trace processor imports protobuf traces written with
// smprof's encoder: the packet layout the trace writer is built on (one
// packet sequence per warp track, interned names, an incremental clock and
// track defaults, so an event costs ~12 bytes) read back by the engine the
// Perfetto UI runs. Skips visibly where ../shared/tools/perfetto is absent
// (a user's own clone).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "collector/proto_encoder.h"
#include "collector/proto_reader.h"
#include "tests/support/subprocess.h"

namespace smprof {
namespace {

using proto::ProtoEncoder;

std::string TraceProcessor() {
  const char* src = std::getenv("SMPROF_SOURCE_DIR");
  const std::string path = std::string(src ? src : ".") + "/../shared/tools/perfetto/trace_processor_shell";
  return access(path.c_str(), X_OK) == 0 ? path : std::string();
}

// Runs one query; returns the CSV lines after the header.
std::vector<std::string> Query(const std::string& tp, const std::string& trace, const std::string& sql) {
  char templ[] = "/tmp/smprof-tp-XXXXXX";
  const int fd = mkstemp(templ);
  close(fd);
  testing::ProcessSpec spec;
  spec.argv = {tp, "-Q", sql, trace};
  spec.stdout_path = templ;
  spec.stderr_path = "/dev/null";
  EXPECT_EQ(testing::RunProcess(spec, std::chrono::seconds(60)), 0) << sql;
  std::ifstream in(templ);
  std::vector<std::string> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) rows.push_back(line);
  unlink(templ);
  return rows;
}

// TracePacket fields (perfetto/trace/trace_packet.proto).
enum : uint32_t {
  kPacket = 1, kTimestamp = 8, kSequenceId = 10, kTrackEvent = 11, kInternedData = 12, kSequenceFlags = 13,
  kClockSnapshot = 6, kTimestampClockId = 58, kPacketDefaults = 59, kTrackDescriptor = 60,
};
constexpr uint32_t kIncrementalClock = 64;  // sequence-scoped clock ids are 64-127
constexpr uint64_t kT0 = 1'000'000'000;

struct Writer {
  ProtoEncoder e;
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

// 64 warps x 50 iterations of load (100 ns) / compute (250 ns) / tick.
std::string WriteTrace(bool flags, double* bytes_per_event) {
  Writer w;
  w.Descriptor(1, 0, 77, -1, "GPU 0 | test");
  constexpr int kWarps = 64, kIters = 50;
  for (int warp = 0; warp < kWarps; ++warp) w.Descriptor(100 + warp, 1, 77, warp + 1, "warp " + std::to_string(warp));
  for (int warp = 0; warp < kWarps; ++warp) {
    const uint32_t seq = 1 + warp;
    w.StartSequence(seq, 100 + warp, {"load", "compute", "tick"});
    w.Event(seq, 10 + warp, 1, 1, flags);  // first BEGIN 10+warp ns after kT0
    for (int i = 0; i < kIters; ++i) {
      if (i > 0) w.Event(seq, 40, 1, 1, flags);
      w.Event(seq, 100, 2, 0, flags);
      w.Event(seq, 0, 1, 2, flags);  // compute begins when load ends: END written first
      w.Event(seq, 250, 2, 0, flags);
      w.Event(seq, 5, 3, 3, flags);
    }
  }
  *bytes_per_event = static_cast<double>(w.event_bytes) / static_cast<double>(w.events);
  char templ[] = "/tmp/smprof-pftrace-XXXXXX";
  const int fd = mkstemp(templ);
  close(fd);
  std::ofstream(templ, std::ios::binary) << w.e.bytes();
  // Our own reader walks every packet of what we wrote.
  proto::ProtoReader r(w.e.bytes());
  proto::Field f;
  size_t packets = 0;
  while (r.Next(&f)) packets += f.number == kPacket;
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(packets, 1u + kWarps + kWarps + w.events);
  return templ;
}

void ExpectImported(const std::string& tp, const std::string& trace) {
  EXPECT_TRUE(Query(tp, trace,
                    "select name, idx, value from stats where value > 0 and severity in ('error', 'data_loss')")
                  .empty());
  EXPECT_EQ(Query(tp, trace, "select count(*) from slice where name = 'load' and dur = 100"),
            std::vector<std::string>{"3200"});
  EXPECT_EQ(Query(tp, trace, "select count(*) from slice where name = 'compute' and dur = 250"),
            std::vector<std::string>{"3200"});
  EXPECT_EQ(Query(tp, trace, "select count(*) from slice where name = 'tick' and dur = 0"),
            std::vector<std::string>{"3200"});
  // Warp 5's first load starts at kT0 + 15 ns on its own thread track.
  EXPECT_EQ(Query(tp, trace,
                  "select s.ts, t.name from slice s join thread_track tt on s.track_id = tt.id "
                  "join thread t using (utid) where t.tid = 6 order by s.ts limit 1"),
            std::vector<std::string>{"1000000015,\"warp 5\""});
  EXPECT_EQ(Query(tp, trace, "select count(distinct track_id) from slice"), std::vector<std::string>{"64"});
}

TEST(PerfettoImport, CompactEventPacketsImportExactly) {
  const std::string tp = TraceProcessor();
  if (tp.empty()) GTEST_SKIP() << "../shared/tools/perfetto/trace_processor_shell is absent: import check skipped";
  double with_flags = 0, without_flags = 0;
  const std::string a = WriteTrace(true, &with_flags);
  const std::string b = WriteTrace(false, &without_flags);
  std::printf("bytes per event packet: %.2f with SEQ_NEEDS_INCREMENTAL_STATE on each, %.2f without\n", with_flags,
              without_flags);
  ExpectImported(tp, a);
  ExpectImported(tp, b);
  EXPECT_LE(without_flags, 12.0);
  unlink(a.c_str());
  unlink(b.c_str());
}

}  // namespace
}  // namespace smprof
