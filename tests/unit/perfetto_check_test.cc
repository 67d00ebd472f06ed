// smprof's own checker of Perfetto protobuf traces: what it accepts, and
// each mistake the trace processor would only report in its stats table.
#include "collector/perfetto_check.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "tests/support/perfetto_builder.h"

namespace smprof::perfetto {
namespace {

using testing::kT0;
using testing::PerfettoBuilder;

// Two warp tracks under one process: warp 0 has a range around an instant,
// warp 1 two ranges.
PerfettoBuilder GoodTrace() {
  PerfettoBuilder b;
  b.Descriptor(1, 0, 7, -1, "GPU 0");
  b.Descriptor(10, 1, 7, 1, "warp 0");
  b.Descriptor(11, 1, 7, 2, "warp 1");
  b.StartSequence(1, 10, {"load", "tick"});
  b.Event(1, 5, 1, 1, false);
  b.Event(1, 10, 3, 2, false);
  b.Event(1, 20, 2, 0, false);
  b.StartSequence(2, 11, {"load"});
  b.Event(2, 100, 1, 1, true);
  b.Event(2, 50, 2, 0, true);
  b.Event(2, 0, 1, 1, true);
  b.Event(2, 50, 2, 0, true);
  return b;
}

// A counter track (uuid 20) under warp 0's.
void CounterDescriptor(PerfettoBuilder* b) {
  const auto p = b->e.BeginNested(1);
  const auto d = b->e.BeginNested(60);
  b->e.Varint(1, 20);
  b->e.Varint(5, 10);
  b->e.Bytes(2, "inflight");
  const auto c = b->e.BeginNested(8);
  b->e.EndNested(c);
  b->e.EndNested(d);
  b->e.EndNested(p);
}

// An event of sequence 1000 at kT0 + `t` on `track`: `type`, and with
// `flow_field` (47 or 48; 0: none) flow id 7; a COUNTER's value 5.
void MainEvent(PerfettoBuilder* b, uint64_t t, uint64_t track, uint32_t type, uint32_t flow_field = 0) {
  const auto p = b->e.BeginNested(1);
  b->e.Varint(8, kT0 + t);
  b->e.Varint(10, 1000);
  const auto te = b->e.BeginNested(11);
  b->e.Varint(9, type);
  b->e.Varint(11, track);
  if (type == 4) b->e.Varint(30, 5);
  if (type != 4) b->e.Bytes(23, "stage");
  if (flow_field != 0) b->e.Fixed64(flow_field, 7);
  b->e.EndNested(te);
  b->e.EndNested(p);
}

std::string AllErrors(const TraceSummary& s) {
  std::string out;
  for (const std::string& e : s.errors) out += e + "\n";
  return out;
}

TEST(PerfettoCheck, SummarisesAWellFormedTrace) {
  const PerfettoBuilder b = GoodTrace();
  const TraceSummary s = CheckTrace(b.e.bytes());
  EXPECT_TRUE(s.errors.empty()) << AllErrors(s);
  EXPECT_EQ(s.descriptors, 3u);
  EXPECT_EQ(s.track_events, 7u);
  const TrackSummary& w0 = s.tracks.at(10);
  EXPECT_EQ(w0.name, "warp 0");
  EXPECT_EQ(w0.slices, 1u);
  EXPECT_EQ(w0.instants, 1u);
  EXPECT_EQ(w0.first_ns, kT0 + 5);
  EXPECT_EQ(w0.last_ns, kT0 + 35);
  const TrackSummary& w1 = s.tracks.at(11);
  EXPECT_EQ(w1.names.at("load"), 2u);
  EXPECT_EQ(w1.last_ns, kT0 + 200);
  EXPECT_EQ(s.tracks.at(1).name, "GPU 0");
}

// Counter values on a counter track, a flow from an instant on warp 0 to
// one on warp 1.
TEST(PerfettoCheck, AcceptsCountersAndFlows) {
  PerfettoBuilder b = GoodTrace();
  CounterDescriptor(&b);
  MainEvent(&b, 30, 20, 4);
  MainEvent(&b, 40, 20, 4);
  MainEvent(&b, 50, 10, 3, 47);
  MainEvent(&b, 60, 11, 3, 48);
  const TraceSummary s = CheckTrace(b.e.bytes());
  EXPECT_TRUE(s.errors.empty()) << AllErrors(s);
  EXPECT_TRUE(s.tracks.at(20).counter);
  EXPECT_FALSE(s.tracks.at(10).counter);
  EXPECT_EQ(s.tracks.at(20).counter_values, 2u);
  EXPECT_EQ(s.tracks.at(20).name, "inflight");
  EXPECT_EQ(s.flows, 1u);
  EXPECT_EQ(s.tracks.at(11).instants, 1u);
}

TEST(PerfettoCheck, ReportsWhatTheTraceProcessorWouldDrop) {
  struct Case {
    const char* what;
    void (*add)(PerfettoBuilder*);
    const char* error;
  } cases[] = {
      {"an END with nothing open", [](PerfettoBuilder* b) { b->Event(1, 1, 2, 0, false); }, "no open slice"},
      {"a name never interned", [](PerfettoBuilder* b) { b->Event(1, 1, 3, 9, false); }, "not interned"},
      {"a sequence never cleared", [](PerfettoBuilder* b) { b->Event(5, 1, 3, 1, false); },
       "not interned on its sequence"},
      {"an incremental clock never defined",
       [](PerfettoBuilder* b) {
         const auto p = b->e.BeginNested(1);
         b->e.Varint(8, 3);
         b->e.Varint(10, 6);
         b->e.Varint(58, 64);
         const auto te = b->e.BeginNested(11);
         b->e.Varint(9, 3);
         b->e.Varint(11, 10);
         b->e.EndNested(te);
         b->e.EndNested(p);
       },
       "before a snapshot defines it"},
      {"a thread track without tid",
       [](PerfettoBuilder* b) {
         const auto p = b->e.BeginNested(1);
         const auto d = b->e.BeginNested(60);
         b->e.Varint(1, 99);
         const auto t = b->e.BeginNested(4);
         b->e.Varint(1, 7);
         b->e.EndNested(t);
         b->e.EndNested(d);
         b->e.EndNested(p);
       },
       "lacks pid or tid"},
      {"an event without a sequence id",
       [](PerfettoBuilder* b) {
         const auto p = b->e.BeginNested(1);
         b->e.Varint(8, kT0);
         const auto te = b->e.BeginNested(11);
         b->e.Varint(9, 3);
         b->e.Varint(11, 10);
         b->e.EndNested(te);
         b->e.EndNested(p);
       },
       "no trusted_packet_sequence_id"},
      {"an event on a track nobody described",
       [](PerfettoBuilder* b) {
         const auto p = b->e.BeginNested(1);
         b->e.Varint(8, 3);
         b->e.Varint(10, 1);
         const auto te = b->e.BeginNested(11);
         b->e.Varint(9, 3);
         b->e.Varint(11, 12345);
         b->e.EndNested(te);
         b->e.EndNested(p);
       },
       "has no descriptor"},
      {"a counter value on a track without a CounterDescriptor", [](PerfettoBuilder* b) { MainEvent(b, 30, 10, 4); },
       "a counter value on track 10"},
      {"an instant on a counter track",
       [](PerfettoBuilder* b) {
         CounterDescriptor(b);
         MainEvent(b, 30, 20, 3);
       },
       "a slice or instant on counter track 20"},
      {"a flow that ends before anything began it",
       [](PerfettoBuilder* b) {
         MainEvent(b, 30, 11, 3, 48);
         MainEvent(b, 40, 10, 3, 47);
       },
       "flow 7 ends but never began"},
      {"a truncated packet",
       [](PerfettoBuilder* b) {
         const auto p = b->e.BeginNested(1);
         b->e.Varint(8, 3);
         b->e.EndNested(p);
         b->e.Bytes(1, std::string("\x40", 1));  // a timestamp tag with no value
       },
       "malformed"},
  };
  for (const Case& c : cases) {
    PerfettoBuilder b = GoodTrace();
    c.add(&b);
    const TraceSummary s = CheckTrace(b.e.bytes());
    EXPECT_NE(AllErrors(s).find(c.error), std::string::npos) << c.what << ":\n" << AllErrors(s);
  }
}

TEST(PerfettoCheck, CountsSlicesLeftOpen) {
  PerfettoBuilder b = GoodTrace();
  b.Event(1, 1, 1, 1, false);
  const TraceSummary s = CheckTrace(b.e.bytes());
  EXPECT_TRUE(s.errors.empty()) << AllErrors(s);
  EXPECT_EQ(s.tracks.at(10).open, 1u);
}

// Every prefix of a trace (a writer killed mid-packet) is read without
// reading past it: the prefixes that end between packets check clean, the
// others report the cut.
TEST(PerfettoCheck, EveryPrefixIsReadSafely) {
  const PerfettoBuilder b = GoodTrace();
  const std::string_view all = b.e.bytes();
  size_t clean = 0;
  for (size_t n = 0; n <= all.size(); ++n) {
    const TraceSummary s = CheckTrace(all.substr(0, n));
    clean += s.errors.empty();
  }
  // Whole-packet prefixes check clean: 0 bytes plus one per packet (3
  // descriptors, 2 sequence starts, 7 events); slices a prefix leaves open
  // are counted, not errors.
  EXPECT_EQ(clean, 1u + 3 + 2 + 7);
}

}  // namespace
}  // namespace smprof::perfetto
