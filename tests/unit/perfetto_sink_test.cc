// PerfettoSink driven with synthetic records, its output read back two
// ways: by smprof's checker (perfetto_check: sequences, interning, LIFO,
// per-track counts) and by a decoder in this file that resolves every event
// as Perfetto's trace processor does (sequence state, incremental and
// absolute clocks, interned names, annotations, extra counter values,
// events sorted by time per track), so tests compare what comes out with
// what went in: the track tree, slices with their times, depths, args and
// exact cycles (paired with the "cycles" counter values as the header
// says), instants, counters. Also: warps interleaved and warps that come
// back after another (fresh sequences, ENDs left for later), the
// out-of-order case, write errors (a cut file is a prefix of whole
// packets), a killed writer's prefix.
#include "collector/perfetto_sink.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "collector/perfetto_check.h"
#include "collector/proto_reader.h"
#include "collector/run_summary.h"
#include "tests/support/sink_runs.h"

namespace smprof {
namespace {

using proto::Field;
using proto::ProtoReader;

// --- a decoder that resolves events as the trace processor does ------------

struct DecodedTrack {
  std::string name;
  uint64_t parent = 0;
  int64_t rank = 0;
  bool counter = false;
};

struct DecodedEvent {
  uint64_t track = 0;
  uint32_t type = 0;
  uint64_t ts = 0;
  std::string name;
  std::map<std::string, std::string> args;  // flattened: "a.b", "a[0]"
  int64_t value = 0;                        // counters
  int64_t cycles = -1;                      // instants: the value paired from the "cycles" counter
  size_t order = 0;                         // file position
  std::vector<uint64_t> flows, terminating;  // flow_ids, terminating_flow_ids
};

struct DecodedSlice {
  std::string name;
  uint64_t ts = 0, dur = 0;
  uint32_t depth = 0;
  std::map<std::string, std::string> args;
  size_t order = 0;     // the BEGIN's file position
  int64_t cycles = -1;  // paired from the track's "cycles" counter; -1: none
};

struct Decoded {
  std::map<uint64_t, DecodedTrack> tracks;
  std::vector<DecodedEvent> events;
  std::map<uint64_t, std::vector<DecodedSlice>> slices;    // by track, by time
  std::map<uint64_t, std::vector<DecodedEvent>> instants;  // by track, by time
  std::map<uint64_t, std::vector<DecodedEvent>> counters;  // by track, by time
  std::vector<std::string> errors;
  std::set<uint32_t> sequences;

  uint64_t Track(const std::string& name, uint64_t parent) const {
    for (const auto& [uuid, t] : tracks) {
      if (t.name == name && t.parent == parent) return uuid;
    }
    return 0;
  }
  uint64_t Track(const std::string& name) const {
    for (const auto& [uuid, t] : tracks) {
      if (t.name == name) return uuid;
    }
    return 0;
  }
  // The counter values of `track`'s "cycles" child.
  std::vector<int64_t> Cycles(uint64_t track) const {
    std::vector<int64_t> values;
    const auto it = counters.find(Track("cycles", track));
    if (it != counters.end()) {
      for (const DecodedEvent& e : it->second) values.push_back(e.value);
    }
    return values;
  }
};

class Decoder {
 public:
  Decoded Run(std::string_view trace) {
    ProtoReader r(trace);
    Field f;
    while (r.Next(&f)) {
      if (f.number != 1) d_.errors.push_back("top-level field " + std::to_string(f.number));
      Packet(f.bytes);
    }
    if (!r.ok()) d_.errors.push_back("malformed trace");
    // As the trace processor: every event sorted by (time, file position).
    std::vector<DecodedEvent> sorted = d_.events;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const DecodedEvent& a, const DecodedEvent& b) { return a.ts < b.ts; });
    std::map<uint64_t, std::vector<size_t>> open;  // track -> slice indices
    for (const DecodedEvent& e : sorted) {
      if (d_.tracks.count(e.track) == 0) d_.errors.push_back("no descriptor for track " + std::to_string(e.track));
      auto& stack = open[e.track];
      auto& slices = d_.slices[e.track];
      if (e.type == 1) {
        stack.push_back(slices.size());
        slices.push_back({e.name, e.ts, 0, static_cast<uint32_t>(stack.size() - 1), e.args, e.order});
      } else if (e.type == 2) {
        if (stack.empty()) {
          d_.errors.push_back("END without BEGIN on " + d_.tracks[e.track].name);
          continue;
        }
        DecodedSlice& s = slices[stack.back()];
        s.dur = e.ts - s.ts;
        for (const auto& [k, v] : e.args) s.args[k] = v;
        stack.pop_back();
      } else if (e.type == 3) {
        d_.instants[e.track].push_back(e);
      } else if (e.type == 4) {
        if (!d_.tracks[e.track].counter) d_.errors.push_back("counter value on " + d_.tracks[e.track].name);
        d_.counters[e.track].push_back(e);
      }
    }
    for (const auto& [track, stack] : open) {
      if (!stack.empty()) d_.errors.push_back("open slice on " + d_.tracks[track].name);
    }
    for (auto it = d_.slices.begin(); it != d_.slices.end();) {
      it = it->second.empty() ? d_.slices.erase(it) : std::next(it);
    }
    PairCycles();
    return std::move(d_);
  }

  // As the header's query: on each track with a "cycles" child, the slice
  // rows the trace processor makes (closed slices and instants, by time,
  // then BEGIN order) and the counter's values (by time, then file order)
  // pair up time by time, in order; every row must get one.
  void PairCycles() {
    for (const auto& [uuid, t] : d_.tracks) {
      if (!t.counter || t.name != "cycles") continue;
      struct Row {
        uint64_t ts;
        size_t order;
        int64_t* cycles;
      };
      std::vector<Row> rows;
      for (DecodedSlice& s : d_.slices[t.parent]) {
        if (s.args.count("unterminated") == 0) rows.push_back({s.ts, s.order, &s.cycles});
      }
      for (DecodedEvent& e : d_.instants[t.parent]) rows.push_back({e.ts, e.order, &e.cycles});
      std::sort(rows.begin(), rows.end(),
                [](const Row& a, const Row& b) { return std::tie(a.ts, a.order) < std::tie(b.ts, b.order); });
      static const std::vector<DecodedEvent> kNone;
      const auto found = d_.counters.find(uuid);
      const std::vector<DecodedEvent>& values = found != d_.counters.end() ? found->second : kNone;
      const std::string where = "cycles of " + d_.tracks[t.parent].name + ": ";
      if (values.size() != rows.size()) {
        d_.errors.push_back(where + std::to_string(values.size()) + " values for " + std::to_string(rows.size()) +
                            " slices");
        continue;
      }
      for (size_t i = 0; i < rows.size(); ++i) {
        if (values[i].ts != rows[i].ts) {
          d_.errors.push_back(where + "a value at " + std::to_string(values[i].ts) + " for a slice at " +
                              std::to_string(rows[i].ts));
          break;
        }
        *rows[i].cycles = values[i].value;
      }
    }
    for (auto it = d_.slices.begin(); it != d_.slices.end();) {
      it = it->second.empty() ? d_.slices.erase(it) : std::next(it);
    }
    for (auto it = d_.instants.begin(); it != d_.instants.end();) {
      it = it->second.empty() ? d_.instants.erase(it) : std::next(it);
    }
  }

 private:
  struct Sequence {
    std::map<uint64_t, std::string> names, annotation_names;
    uint64_t track = 0;
    std::vector<uint64_t> counter_tracks;  // TrackEventDefaults.extra_counter_track_uuids
    uint32_t clock = 0;
    std::map<uint32_t, uint64_t> incremental;
  };

  void Packet(std::string_view packet) {
    uint64_t ts = 0;
    bool has_ts = false;
    uint32_t seq = 0, flags = 0, clock = 0;
    std::string_view event, interned, defaults, snapshot, descriptor;
    ProtoReader r(packet);
    Field f;
    while (r.Next(&f)) {
      switch (f.number) {
        case 8:
          ts = f.value, has_ts = true;
          break;
        case 10:
          seq = static_cast<uint32_t>(f.value);
          break;
        case 13:
          flags = static_cast<uint32_t>(f.value);
          break;
        case 58:
          clock = static_cast<uint32_t>(f.value);
          break;
        case 11:
          event = f.bytes;
          break;
        case 12:
          interned = f.bytes;
          break;
        case 59:
          defaults = f.bytes;
          break;
        case 6:
          snapshot = f.bytes;
          break;
        case 60:
          descriptor = f.bytes;
          break;
        default:
          d_.errors.push_back("unexpected packet field " + std::to_string(f.number));
      }
    }
    if (seq != 0) d_.sequences.insert(seq);
    Sequence& s = seqs_[seq];
    if (flags & 1) s = Sequence();
    if (!descriptor.empty()) Descriptor(descriptor);
    if (!snapshot.empty()) {
      ForEach(snapshot, 1, [&](std::string_view clock_msg) {
        uint32_t id = 0;
        uint64_t value = 0;
        bool incremental = false;
        ForFields(clock_msg, [&](const Field& g) {
          if (g.number == 1) id = static_cast<uint32_t>(g.value);
          if (g.number == 2) value = g.value;
          if (g.number == 3) incremental = g.value != 0;
        });
        if (id == 6 && value != 0) d_.errors.push_back("BOOTTIME snapshot not at 0");
        if (incremental) s.incremental[id] = value;
      });
    }
    if (!defaults.empty()) {
      ForFields(defaults, [&](const Field& g) {
        if (g.number == 58) s.clock = static_cast<uint32_t>(g.value);
        if (g.number == 11) {
          s.counter_tracks.clear();
          ForFields(g.bytes, [&](const Field& h) {
            if (h.number == 11) s.track = h.value;
            if (h.number == 31) s.counter_tracks.push_back(h.value);
          });
        }
      });
    }
    if (!interned.empty()) {
      ForFields(interned, [&](const Field& g) {
        if (g.number != 2 && g.number != 3) return;
        uint64_t iid = 0;
        std::string name;
        ForFields(g.bytes, [&](const Field& h) {
          if (h.number == 1) iid = h.value;
          if (h.number == 2) name = std::string(h.bytes);
        });
        (g.number == 2 ? s.names : s.annotation_names)[iid] = name;
      });
    }
    if (event.empty()) return;
    if (!has_ts || seq == 0) return d_.errors.push_back("event without timestamp or sequence");
    const uint32_t c = clock != 0 ? clock : s.clock;
    if (c == 64) {
      s.incremental[64] += ts;
      ts = s.incremental[64];
    } else if (c != 0 && c != 6) {
      d_.errors.push_back("clock " + std::to_string(c));
    }
    DecodedEvent e;
    e.ts = ts;
    e.track = s.track;
    e.order = d_.events.size();
    std::vector<uint64_t> counter_tracks;
    std::vector<int64_t> counter_values;
    ForFields(event, [&](const Field& g) {
      switch (g.number) {
        case 9:
          e.type = static_cast<uint32_t>(g.value);
          break;
        case 10:
          if (s.names.count(g.value) == 0) d_.errors.push_back("name iid " + std::to_string(g.value) + " not interned");
          e.name = s.names[g.value];
          break;
        case 23:
          e.name = std::string(g.bytes);
          break;
        case 11:
          e.track = g.value;
          break;
        case 30:
          e.value = static_cast<int64_t>(g.value);
          break;
        case 4:
          Annotation(g.bytes, "", s, &e.args);
          break;
        case 31:
          counter_tracks.push_back(g.value);
          break;
        case 12:
          counter_values.push_back(static_cast<int64_t>(g.value));
          break;
        case 47:
          e.flows.push_back(g.value);
          break;
        case 48:
          e.terminating.push_back(g.value);
          break;
        default:
          d_.errors.push_back("unexpected track event field " + std::to_string(g.number));
      }
    });
    const size_t order = e.order;
    d_.events.push_back(std::move(e));
    // Extra counter values: on the event's tracks, else the defaults'.
    if (counter_tracks.empty()) counter_tracks = s.counter_tracks;
    if (counter_values.size() > counter_tracks.size()) {
      return d_.errors.push_back("extra counter values without their tracks");
    }
    for (size_t i = 0; i < counter_values.size(); ++i) {
      DecodedEvent value;
      value.type = 4;
      value.ts = ts;
      value.track = counter_tracks[i];
      value.value = counter_values[i];
      value.order = order;
      d_.events.push_back(std::move(value));
    }
  }

  void Descriptor(std::string_view bytes) {
    DecodedTrack t;
    uint64_t uuid = 0;
    ForFields(bytes, [&](const Field& g) {
      if (g.number == 1) uuid = g.value;
      if (g.number == 2) t.name = std::string(g.bytes);
      if (g.number == 5) t.parent = g.value;
      if (g.number == 8) t.counter = true;
      if (g.number == 12) t.rank = static_cast<int32_t>(static_cast<uint32_t>(g.value));
    });
    if (d_.tracks.count(uuid) != 0) d_.errors.push_back("track " + std::to_string(uuid) + " described twice");
    d_.tracks[uuid] = t;
  }

  // One DebugAnnotation, flattened into `out` under `prefix`.
  void Annotation(std::string_view bytes, const std::string& prefix, const Sequence& s,
                  std::map<std::string, std::string>* out) {
    std::string name, value;
    bool has_value = false;
    std::vector<std::string_view> dict, array;
    ForFields(bytes, [&](const Field& g) {
      switch (g.number) {
        case 1:
          name = s.annotation_names.count(g.value) ? s.annotation_names.at(g.value) : "?iid";
          break;
        case 10:
          name = std::string(g.bytes);
          break;
        case 2:
          value = g.value ? "true" : "false", has_value = true;
          break;
        case 3:
          value = std::to_string(g.value), has_value = true;
          break;
        case 4:
          value = std::to_string(static_cast<int64_t>(g.value)), has_value = true;
          break;
        case 5: {
          double v;
          std::memcpy(&v, &g.value, sizeof(v));
          std::ostringstream o;
          o << v;
          value = o.str(), has_value = true;
          break;
        }
        case 6:
          value = std::string(g.bytes), has_value = true;
          break;
        case 11:
          dict.push_back(g.bytes);
          break;
        case 12:
          array.push_back(g.bytes);
          break;
        default:
          d_.errors.push_back("unexpected annotation field " + std::to_string(g.number));
      }
    });
    const std::string key = prefix + name;
    if (has_value) (*out)[key] = value;
    for (std::string_view entry : dict) Annotation(entry, key + ".", s, out);
    for (size_t i = 0; i < array.size(); ++i) Annotation(array[i], key + "[" + std::to_string(i) + "]", s, out);
  }

  template <typename F>
  static void ForFields(std::string_view bytes, F&& f) {
    ProtoReader r(bytes);
    Field g;
    while (r.Next(&g)) f(g);
  }
  template <typename F>
  static void ForEach(std::string_view bytes, uint32_t number, F&& f) {
    ForFields(bytes, [&](const Field& g) {
      if (g.number == number) f(g.bytes);
    });
  }

  Decoded d_;
  std::map<uint32_t, Sequence> seqs_;
};

Decoded Decode(std::string_view trace) { return Decoder().Run(trace); }

std::string Errors(const std::vector<std::string>& errors) {
  std::string out;
  for (const std::string& e : errors) out += e + "\n";
  return out;
}

class PerfettoSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/smprof-psink-XXXXXX";
    const int fd = mkstemp(templ);
    ASSERT_GE(fd, 0);
    close(fd);
    path_ = templ;
  }
  void TearDown() override { unlink(path_.c_str()); }

  std::string ReadTrace() const {
    std::ifstream in(path_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::unique_ptr<PerfettoSink> OpenSink() {
    std::string error;
    auto sink = PerfettoSink::Open(path_, false, &error);
    EXPECT_NE(sink, nullptr) << error;
    return sink;
  }

  // Finishes `sink`; the trace must pass smprof's own checker. Decoded.
  Decoded FinishAndDecode(PerfettoSink& sink) {
    EXPECT_TRUE(sink.Finish(CollectorSummary())) << sink.error();
    const std::string trace = ReadTrace();
    const perfetto::TraceSummary check = perfetto::CheckTrace(trace);
    EXPECT_TRUE(check.errors.empty()) << Errors(check.errors);
    return Decode(trace);
  }

  void RandomRunRoundTrips(int chunk);

  std::string path_;
};

TEST_F(PerfettoSinkTest, WritesTheLaunchCentricTrackTree) {
  auto sink = OpenSink();
  testing::WriteSmallRun(*sink);
  CollectorSummary summary;
  summary.launches = 2;
  summary.events = 16;
  summary.unknown_names = 1;
  ASSERT_TRUE(sink->Finish(summary)) << sink->error();
  const std::string trace = ReadTrace();
  EXPECT_EQ(sink->bytes_written(), trace.size());

  // smprof's checker: no errors, and its per-track counts.
  const perfetto::TraceSummary check = perfetto::CheckTrace(trace);
  EXPECT_TRUE(check.errors.empty()) << Errors(check.errors);
  std::map<std::string, std::tuple<uint64_t, uint64_t, uint64_t>> counts;  // name -> slices, instants, open
  for (const auto& [uuid, t] : check.tracks) {
    auto& c = counts[t.name];
    std::get<0>(c) += t.slices;
    std::get<1>(c) += t.instants;
    std::get<2>(c) += t.open;
  }
  using C = std::tuple<uint64_t, uint64_t, uint64_t>;
  EXPECT_EQ(counts["smprof run"], C(0, 3, 0));  // metadata, layout, summary
  EXPECT_EQ(counts[testing::kSinkGpuTrack], C(0, 1, 0));
  EXPECT_EQ(counts["pid 4242 | cuda:1 | stream 7"], C(2, 0, 0));
  EXPECT_EQ(counts["smprof | ./app --n 3 | pid 4242"], C(0, 4, 0));
  EXPECT_EQ(counts["warp 0"], C(4 + 2 + 1, 1, 0));  // three tracks of that name
  EXPECT_EQ(counts["warp 0 lane 1"], C(1, 0, 0));
  EXPECT_EQ(counts["warp 1"], C(1, 1, 0));
  const std::string launch_name = testing::SinkLaunchTrack(7, 0);
  EXPECT_EQ(counts[launch_name], C(1, 0, 0));

  // The tree, as the decoder resolves it.
  const Decoded d = Decode(trace);
  ASSERT_TRUE(d.errors.empty()) << Errors(d.errors);
  const uint64_t run = d.Track("smprof run", 0);
  const uint64_t gpu = d.Track(testing::kSinkGpuTrack, 0);
  const uint64_t launch = d.Track(launch_name, gpu);
  const uint64_t sm12 = d.Track("SM 012", launch), sm3 = d.Track("SM 003", launch);
  const uint64_t block = d.Track("block (1,0,0)", sm12);
  const uint64_t warp0 = d.Track("warp 0", block), warp1 = d.Track("warp 1", block);
  const uint64_t lane1 = d.Track("warp 0 lane 1", block);
  const uint64_t other = d.Track("warp 0", d.Track("block (0,1,0)", sm3));
  const uint64_t stream = d.Track("pid 4242 | cuda:1 | stream 7", gpu);
  const uint64_t proc = d.Track("smprof | ./app --n 3 | pid 4242", 0);
  for (uint64_t t : {run, gpu, launch, sm12, sm3, block, warp0, warp1, lane1, other, stream, proc}) EXPECT_NE(t, 0u);
  // Explicit order: SM 3 before SM 12; a warp's lane right after the warp.
  EXPECT_LT(d.tracks.at(sm3).rank, d.tracks.at(sm12).rank);
  EXPECT_LT(d.tracks.at(warp0).rank, d.tracks.at(lane1).rank);
  EXPECT_LT(d.tracks.at(lane1).rank, d.tracks.at(warp1).rank);
  EXPECT_LT(d.tracks.at(stream).rank, d.tracks.at(launch).rank);

  // The checker's names per track (it reads the same uuids).
  EXPECT_EQ(check.tracks.at(warp0).names,
            (std::map<std::string, uint64_t>{{"epilogue", 1}, {"load", 1}, {"mainloop", 1}, {"mma", 1}, {"tick", 1}}));
  EXPECT_EQ(check.tracks.at(lane1).names, (std::map<std::string, uint64_t>{{"copy", 1}}));
  EXPECT_EQ(check.tracks.at(other).names, (std::map<std::string, uint64_t>{{"load", 2}}));

  // Warp 0: times, durations, depths, cycles (from the warp's counter, not args).
  const auto& s0 = d.slices.at(warp0);
  ASSERT_EQ(s0.size(), 4u);
  const std::vector<std::tuple<std::string, uint64_t, uint64_t, uint32_t>> want = {
      {"mainloop", 1100, 3900, 0}, {"load", 1100, 400, 1}, {"mma", 1500, 2500, 1}, {"epilogue", 5000, 1000, 0}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(std::make_tuple(s0[i].name, s0[i].ts, s0[i].dur, s0[i].depth), want[i]);
    EXPECT_EQ(s0[i].cycles, static_cast<int64_t>(2 * std::get<2>(want[i])));
    EXPECT_EQ(s0[i].args.count("cycles"), 0u);
  }
  // The counter: one value per slice row at its start (the tick's 0 among them).
  EXPECT_TRUE(d.tracks.at(d.Track("cycles", warp0)).counter);
  EXPECT_EQ(d.Cycles(warp0), (std::vector<int64_t>{7800, 800, 5000, 0, 2000}));
  ASSERT_EQ(d.slices.at(lane1).size(), 1u);
  EXPECT_EQ(d.slices.at(lane1)[0].name, "copy");
  EXPECT_EQ(d.slices.at(lane1)[0].dur, 3700u);
  EXPECT_EQ(d.slices.at(lane1)[0].cycles, 7400);
  EXPECT_EQ(d.Cycles(lane1), std::vector<int64_t>{7400});
  EXPECT_EQ(d.Cycles(other), (std::vector<int64_t>{200, 400}));
  ASSERT_EQ(d.instants.at(warp0).size(), 1u);
  EXPECT_EQ(d.instants.at(warp0)[0].name, "tick");
  EXPECT_EQ(d.instants.at(warp0)[0].ts, 2000u);
  EXPECT_EQ(d.instants.at(warp0)[0].cycles, 0);

  // Warp 1: the unmatched end and the unterminated slice.
  ASSERT_EQ(d.instants.at(warp1).size(), 1u);
  EXPECT_EQ(d.instants.at(warp1)[0].name, "load (end without begin)");
  EXPECT_EQ(d.instants.at(warp1)[0].args.at("smprof_error"), "unmatched end");
  const DecodedSlice& open = d.slices.at(warp1).at(0);
  EXPECT_EQ(open.dur, 9000u - 1300u);
  EXPECT_EQ(open.args.at("unterminated"), "true");
  EXPECT_EQ(open.args.at("note"), "the process ended without detaching");
  EXPECT_EQ(open.cycles, -1);
  EXPECT_EQ(open.args.count("cycles"), 0u);
  EXPECT_EQ(d.Cycles(warp1), std::vector<int64_t>{0});  // the unmatched end's, as an instant

  // The CUPTI slice and the stream's spans.
  const DecodedSlice& kernel = d.slices.at(launch).at(0);
  EXPECT_EQ(kernel.name, "_Z4gemmILi128EEvPfS0_");
  EXPECT_EQ(kernel.ts, 1000u);
  EXPECT_EQ(kernel.dur, 8000u);
  EXPECT_EQ(kernel.args.at("launch_id"), "7");
  EXPECT_EQ(kernel.args.at("grid[0]"), "4");
  EXPECT_EQ(kernel.args.at("block[0]"), "128");
  EXPECT_EQ(kernel.args.at("correlation_id"), "99");
  EXPECT_EQ(kernel.args.at("gpu_name"), "NVIDIA H100");
  EXPECT_EQ(kernel.args.at("pid"), "4242");
  ASSERT_EQ(d.slices.at(stream).size(), 2u);
  EXPECT_EQ(d.slices.at(stream)[1].name, "gemm<128>");
  EXPECT_EQ(d.slices.at(stream)[1].args.at("launch_id"), "8");

  // Run metadata, GPU facts (nested objects flattened), the summary at the end.
  const auto& run_instants = d.instants.at(run);
  ASSERT_EQ(run_instants.size(), 3u);
  EXPECT_EQ(run_instants[0].name, "smprof run");
  EXPECT_EQ(run_instants[0].ts, 0u);
  EXPECT_EQ(run_instants[0].args.at("command[1]"), "--n");
  EXPECT_EQ(run_instants[0].args.at("options.overwrite"), "true");
  // kAuto: launch-centric for a small run, said at the first launch.
  EXPECT_EQ(run_instants[1].name, "layout: launch-centric");
  EXPECT_EQ(run_instants[1].ts, 1000u);
  EXPECT_EQ(run_instants[1].args.at("requested"), "auto");
  EXPECT_EQ(run_instants[1].args.at("from_launch"), "1");
  EXPECT_EQ(sink->layout_used(), TraceLayout::kLaunch);
  EXPECT_EQ(sink->layout_description().rfind("launch-centric (auto: ", 0), 0u) << sink->layout_description();
  EXPECT_EQ(run_instants[2].name, "smprof run summary");
  EXPECT_EQ(run_instants[2].ts, 12700u);
  EXPECT_EQ(run_instants[2].args.at("launches"), "2");
  EXPECT_EQ(run_instants[2].args.at("unknown_names"), "1");
  EXPECT_EQ(run_instants[2].args.at("lost.total"), "0");
  const DecodedEvent& identity = d.instants.at(gpu).at(0);
  EXPECT_EQ(identity.name, "GPU 0 identity");
  EXPECT_EQ(identity.args.at("marker_cost_cycles.default"), "12.5");
  EXPECT_EQ(identity.args.count("seen_as"), 0u);

  // The process: harvests, notice, lost; the counters.
  std::vector<std::string> names;
  for (const DecodedEvent& e : d.instants.at(proc)) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"harvest: sync", "forced drain: buffer high-water", "not profiled",
                                             "process lost"}));
  EXPECT_EQ(d.instants.at(proc)[0].args.at("dropped_events"), "3");
  EXPECT_EQ(d.instants.at(proc)[2].args.at("reason"), "stepped_aside");
  const uint64_t lost = d.Track("events lost (device buffer)", proc);
  const uint64_t harvested = d.Track("events harvested", proc);
  ASSERT_TRUE(d.tracks.at(lost).counter);
  ASSERT_TRUE(d.tracks.at(harvested).counter);
  std::vector<std::pair<uint64_t, int64_t>> values;
  for (const DecodedEvent& e : d.counters.at(harvested)) values.emplace_back(e.ts, e.value);
  // Launch 7: 7 closed slices (2 events each), 1 unterminated, 2 instants; launch 8: one slice.
  EXPECT_EQ(values, (std::vector<std::pair<uint64_t, int64_t>>{{9500, 7 * 2 + 1 + 2}, {12500, 2}}));
  EXPECT_EQ(d.counters.at(lost).size(), 2u);
  EXPECT_EQ(d.counters.at(lost)[1].value, 3);

  // Warps one after another: each warp's sequence ends when the next warp's
  // records come, and the next reuses its id.
  EXPECT_EQ(d.sequences, (std::set<uint32_t>{1, 2}));
}

TEST_F(PerfettoSinkTest, CyclesAsAnnotationsWhenAsked) {
  auto sink = OpenSink();
  sink->set_cycles_encoding(PerfettoSink::CyclesEncoding::kAnnotation);
  testing::WriteSmallRun(*sink);
  const Decoded d = FinishAndDecode(*sink);
  ASSERT_TRUE(d.errors.empty()) << Errors(d.errors);
  EXPECT_EQ(d.Track("cycles"), 0u);  // no counter tracks
  const uint64_t block = d.Track("block (1,0,0)");
  const auto& s0 = d.slices.at(d.Track("warp 0", block));
  ASSERT_EQ(s0.size(), 4u);
  for (const DecodedSlice& s : s0) EXPECT_EQ(s.args.at("cycles"), std::to_string(2 * s.dur)) << s.name;
  EXPECT_EQ(d.slices.at(d.Track("warp 0 lane 1", block))[0].args.at("cycles"), "7400");
  const DecodedSlice& open = d.slices.at(d.Track("warp 1", block)).at(0);
  EXPECT_EQ(open.args.at("unterminated"), "true");
  EXPECT_EQ(open.args.count("cycles"), 0u);
}

// Warp 1 of a launch comes back after warp 0 did, twice: first with a
// zero-length slice and an instant at the very end of its open slice (which
// must stay inside it), then with a slice after it; warp 0 comes back last
// with nothing but an instant, its slice still open; a lane too.
TEST_F(PerfettoSinkTest, WarpsThatComeBackGetFreshSequences) {
  auto sink = OpenSink();
  const trace::LaunchRecord l = testing::SinkLaunch(0, 1, -1, 0, 100000);
  sink->OnLaunch(l);
  const trace::WarpRecord w0 = testing::SinkWarp(0, 0, 0, 0, 0), w1 = testing::SinkWarp(1, 0, 0, 0, 1);
  sink->OnWarp(l, w1);
  sink->OnSlice(l, w1, testing::SinkSlice("outer", 1000, 5000, 0));
  sink->OnSlice(l, w1, testing::SinkSlice("side", 1200, 6000, 0, 1));
  sink->OnWarp(l, w0);
  sink->OnSlice(l, w0, testing::SinkSlice("a", 100, 9000, 0));
  sink->OnSlice(l, w0, testing::SinkSlice("b", 200, 300, 1));
  sink->OnSlice(l, w1, testing::SinkSlice("inner", 5000, 5000, 1));
  sink->OnInstant(l, w1, testing::SinkInstant("tick", 5000));
  sink->OnSlice(l, w0, testing::SinkSlice("c", 8000, 9000, 1));
  sink->OnSlice(l, w1, testing::SinkSlice("after", 6000, 7000, 0));
  sink->OnInstant(l, w0, testing::SinkInstant("tick", 9000));
  sink->OnLaunchEnd(l, nullptr, 0);
  const Decoded d = FinishAndDecode(*sink);
  ASSERT_TRUE(d.errors.empty()) << Errors(d.errors);
  EXPECT_EQ(d.sequences, (std::set<uint32_t>{1, 2}));
  const auto slices = [&d](const std::string& name) {
    std::vector<std::tuple<std::string, uint64_t, uint64_t, uint32_t, int64_t>> got;
    for (const DecodedSlice& s : d.slices.at(d.Track(name))) got.emplace_back(s.name, s.ts, s.dur, s.depth, s.cycles);
    return got;
  };
  using S = std::vector<std::tuple<std::string, uint64_t, uint64_t, uint32_t, int64_t>>;
  EXPECT_EQ(slices("warp 1"), (S{{"outer", 1000, 4000, 0, 8000}, {"inner", 5000, 0, 1, 0}, {"after", 6000, 1000, 0, 2000}}));
  EXPECT_EQ(slices("warp 1 lane 1"), (S{{"side", 1200, 4800, 0, 9600}}));
  EXPECT_EQ(slices("warp 0"), (S{{"a", 100, 8900, 0, 17800}, {"b", 200, 100, 1, 200}, {"c", 8000, 1000, 1, 2000}}));
  // The instants and their 0s among the values, in order.
  EXPECT_EQ(d.Cycles(d.Track("warp 1")), (std::vector<int64_t>{8000, 0, 0, 2000}));
  EXPECT_EQ(d.Cycles(d.Track("warp 0")), (std::vector<int64_t>{17800, 200, 2000, 0}));
  // The tick at 5000 lies inside outer (ending at 5000): its END was left
  // for warp 1's next sequence, after the tick, not written when warp 0 came.
  const DecodedEvent& tick = d.instants.at(d.Track("warp 1")).at(0);
  size_t outer_end = 0;
  for (const DecodedEvent& e : d.events) {
    if (e.track == d.Track("warp 1") && e.type == 2 && e.ts == 5000) outer_end = std::max(outer_end, e.order);
  }
  EXPECT_LT(tick.order, outer_end);
}

TEST_F(PerfettoSinkTest, ProcessNamedAfterItsFirstEventKeepsItsFirstTitle) {
  // Perfetto keeps a track's first name: the title waits for the command
  // unless an event needs the track first; the command then comes as an instant.
  auto sink = OpenSink();
  trace::ProcessRecord p = testing::SinkProcess();
  p.command = "?";
  sink->OnProcess(p);
  sink->OnNotice(p, 50, "stepped_aside", "");
  sink->OnProcessNamed(testing::SinkProcess());
  ASSERT_TRUE(sink->Finish(CollectorSummary())) << sink->error();
  const Decoded d = Decode(ReadTrace());
  ASSERT_TRUE(d.errors.empty()) << Errors(d.errors);
  const uint64_t track = d.Track("smprof | ? | pid 4242", 0);
  ASSERT_NE(track, 0u);
  ASSERT_EQ(d.instants.at(track).size(), 2u);
  EXPECT_EQ(d.instants.at(track)[1].name, "process named");
  EXPECT_EQ(d.instants.at(track)[1].args.at("command"), "./app --n 3");
}

TEST_F(PerfettoSinkTest, OutOfOrderRecordsKeepTheirTimes) {
  auto sink = OpenSink();
  testing::WriteOutOfOrderRun(*sink);
  const Decoded d = FinishAndDecode(*sink);
  ASSERT_TRUE(d.errors.empty()) << Errors(d.errors);
  const uint64_t warp = d.Track("warp 0");
  // The launch is a root track (its process never described its GPU).
  EXPECT_EQ(d.tracks.at(d.Track(testing::SinkLaunchTrack(1, -1))).parent, 0u);
  std::vector<std::tuple<std::string, uint64_t, uint64_t>> got;
  for (const DecodedSlice& s : d.slices.at(warp)) got.emplace_back(s.name, s.ts, s.dur);
  EXPECT_EQ(got, (std::vector<std::tuple<std::string, uint64_t, uint64_t>>{
                     {"a", 1000, 1000}, {"late", 2200, 600}, {"b", 3000, 1000}, {"c", 4500, 500}}));
  EXPECT_EQ(d.instants.at(warp).at(0).ts, 2500u);
}

// Random nesting on two lanes with ties everywhere, warps one after another
// (`chunk` 0) or interleaved, `chunk` records each in turn (every warp's
// sequence ended and started again each turn, ENDs left for later): every
// slice comes back with its name, time, duration, depth and exact cycles,
// every instant with its time (and its 0 on the counter).
void PerfettoSinkTest::RandomRunRoundTrips(int chunk) {
  auto sink = OpenSink();
  constexpr int kWarps = 40;
  const testing::SentRun sent = testing::WriteRandomRun(*sink, 12345, 3, kWarps, chunk);
  const Decoded d = FinishAndDecode(*sink);
  ASSERT_TRUE(d.errors.empty()) << Errors(d.errors);
  EXPECT_EQ(d.sequences, (std::set<uint32_t>{1, 2}));  // one open at a time, its id reused

  // Warp track -> (launch, block, warp) through the parents (block > SM > launch).
  const auto path = [&d](uint64_t warp) {
    const uint64_t block = d.tracks.at(warp).parent;
    const uint64_t launch = d.tracks.at(d.tracks.at(block).parent).parent;
    return std::make_tuple(d.tracks.at(launch).name, d.tracks.at(block).name, d.tracks.at(warp).name);
  };
  std::vector<testing::SentSlice> got;
  for (const auto& [track, slices] : d.slices) {
    if (d.tracks.at(track).name.rfind("warp ", 0) != 0) continue;
    const auto [launch, block, warp] = path(track);
    for (const DecodedSlice& s : slices) {
      got.push_back({launch, block, warp, s.ts, s.dur, s.depth, s.name});
      EXPECT_EQ(s.cycles, static_cast<int64_t>(2 * s.dur));
    }
  }
  std::sort(got.begin(), got.end());
  ASSERT_EQ(got.size(), sent.slices.size());
  EXPECT_GT(got.size(), 10000u);
  size_t first = 0;
  while (first < got.size() && got[first] == sent.slices[first]) ++first;
  if (first < got.size()) {
    const testing::SentSlice &g = got[first], &w = sent.slices[first];
    ADD_FAILURE() << "slice " << first << " differs: got " << g.warp << " " << g.name << " " << g.ts << "+" << g.dur
                  << " depth " << g.depth << ", want " << w.warp << " " << w.name << " " << w.ts << "+" << w.dur
                  << " depth " << w.depth;
  }
  std::vector<testing::SentInstant> instants;
  for (const auto& [track, events] : d.instants) {
    if (track == d.Track("smprof run", 0)) continue;  // the summary
    const auto [launch, block, warp] = path(track);
    for (const DecodedEvent& e : events) {
      EXPECT_EQ(e.name, "tick");
      EXPECT_EQ(e.cycles, 0);
      instants.push_back({launch, block, warp, e.ts});
    }
  }
  std::sort(instants.begin(), instants.end());
  EXPECT_EQ(instants, sent.instants);
}

TEST_F(PerfettoSinkTest, RandomNestedSlicesRoundTripWarpAfterWarp) { RandomRunRoundTrips(0); }
TEST_F(PerfettoSinkTest, RandomNestedSlicesRoundTripInterleaved) { RandomRunRoundTrips(7); }
TEST_F(PerfettoSinkTest, RandomNestedSlicesRoundTripComingBackOften) { RandomRunRoundTrips(1); }

// The bytes of `trace` up to the last whole packet at or before `limit`.
std::string WholePacketPrefix(const std::string& trace, size_t limit) {
  size_t keep = 0;
  ProtoReader r(trace);
  Field f;
  size_t pos = 0;
  while (r.Next(&f)) {
    pos = static_cast<size_t>(f.bytes.data() + f.bytes.size() - trace.data());
    if (pos > limit) break;
    keep = pos;
  }
  return trace.substr(0, keep);
}

// Enough records to pass the 1 MiB write threshold several times.
void WriteManyEvents(trace::TraceSink& sink) {
  for (int li = 0; li < 4; ++li) {
    const trace::LaunchRecord l = testing::SinkLaunch(li, li, -1, 0, 1u << 30);
    sink.OnLaunch(l);
    for (uint32_t wi = 0; wi < 256; ++wi) {
      const trace::WarpRecord w = testing::SinkWarp(wi, wi % 16, wi / 16, 0, 0);
      sink.OnWarp(l, w);
      for (uint64_t i = 0; i < 300; ++i) {
        sink.OnSlice(l, w, testing::SinkSlice(i % 2 ? "load" : "compute", 1000 + i * 100, 1050 + i * 100, 0));
      }
      sink.Flush();
    }
    sink.OnLaunchEnd(l, nullptr, 0);
  }
}

TEST_F(PerfettoSinkTest, WriteErrorCutsAfterLastWholePacket) {
  {
    auto sink = OpenSink();
    WriteManyEvents(*sink);
    ASSERT_TRUE(sink->Finish(CollectorSummary()));
  }
  const std::string full = ReadTrace();
  ASSERT_GT(full.size(), 3u << 20);
  for (const size_t limit : {size_t{100}, size_t{4099}, (size_t{1} << 20) + 12345, full.size() - 1}) {
    SCOPED_TRACE("RLIMIT_FSIZE " + std::to_string(limit));
    unlink(path_.c_str());
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Past the limit write(2) fails with EFBIG instead of raising SIGXFSZ.
      signal(SIGXFSZ, SIG_IGN);
      const rlimit rl{limit, limit};
      if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
      std::string err;
      auto sink = PerfettoSink::Open(path_, false, &err);
      if (!sink) _exit(11);
      WriteManyEvents(*sink);
      const bool ok = sink->Finish(CollectorSummary());
      const bool named = sink->error().find("File too large") != std::string::npos &&
                         sink->error().find("last packet written whole") != std::string::npos;
      _exit(!ok && named ? 0 : 12);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 0);
    const std::string text = ReadTrace();
    EXPECT_EQ(text, WholePacketPrefix(full, limit));
    // A prefix of whole packets: every event's track and names defined.
    const perfetto::TraceSummary check = perfetto::CheckTrace(text);
    EXPECT_TRUE(check.errors.empty()) << Errors(check.errors);
  }
}

TEST_F(PerfettoSinkTest, FullDeviceIsRefusedAtOpenWithTheReason) {
  // Open writes the first descriptor, so an unwritable file fails there.
  std::string error;
  EXPECT_EQ(PerfettoSink::Open("/dev/full", false, &error), nullptr);
  EXPECT_NE(error.find("'/dev/full': No space left on device"), std::string::npos) << error;
}

TEST_F(PerfettoSinkTest, KilledWriterLeavesWholePackets) {
  // What reached the file at each Flush is a valid trace on its own.
  auto sink = OpenSink();
  const trace::LaunchRecord l = testing::SinkLaunch(0, 1, -1, 0, 1u << 30);
  sink->OnLaunch(l);
  const trace::WarpRecord w = testing::SinkWarp(0, 0, 0, 0, 0);
  sink->OnWarp(l, w);
  sink->OnSlice(l, w, testing::SinkSlice("outer", 100, 900, 0));
  sink->OnSlice(l, w, testing::SinkSlice("inner", 200, 300, 1));
  ASSERT_TRUE(sink->Flush());
  const std::string prefix = ReadTrace();
  EXPECT_EQ(prefix.size(), sink->bytes_written());
  const perfetto::TraceSummary check = perfetto::CheckTrace(prefix);
  EXPECT_TRUE(check.errors.empty()) << Errors(check.errors);
  // The BEGINs are there; their ENDs wait for later time or the launch's end.
  uint64_t open = 0, slices = 0;
  for (const auto& [uuid, t] : check.tracks) open += t.open, slices += t.slices;
  EXPECT_EQ(open, 2u);
  EXPECT_EQ(slices, 1u);  // the CUPTI slice
}

TEST_F(PerfettoSinkTest, OpenNamesThePathAndHonoursExclusive) {
  std::string error;
  EXPECT_EQ(PerfettoSink::Open(path_, true, &error), nullptr);
  EXPECT_NE(error.find("already exists"), std::string::npos) << error;
  EXPECT_EQ(PerfettoSink::Open("/nonexistent-dir/t.pftrace", false, &error), nullptr);
  EXPECT_NE(error.find("/nonexistent-dir/t.pftrace"), std::string::npos) << error;
}


// --- the hardware-centric layout --------------------------------------------

using SliceRow = std::tuple<std::string, uint64_t, uint64_t, uint32_t>;  // name, ts, dur, depth
std::vector<SliceRow> Rows(const Decoded& d, uint64_t track) {
  std::vector<SliceRow> rows;
  const auto it = d.slices.find(track);
  if (it == d.slices.end()) return rows;
  for (const DecodedSlice& s : it->second) rows.emplace_back(s.name, s.ts, s.dur, s.depth);
  return rows;
}

TEST_F(PerfettoSinkTest, HardwareLayoutPutsWarpsOnTheirSlots) {
  auto sink = OpenSink();
  sink->set_layout(TraceLayout::kHardware);
  testing::WriteSmallRun(*sink);
  const Decoded d = FinishAndDecode(*sink);
  ASSERT_TRUE(d.errors.empty()) << Errors(d.errors);

  const uint64_t gpu = d.Track(testing::kSinkGpuTrack, 0);
  const uint64_t sm12 = d.Track("SM 012", gpu), sm3 = d.Track("SM 003", gpu), sm5 = d.Track("SM 005", gpu);
  const uint64_t slot = d.Track("slot 00", sm12), overlap = d.Track("slot 00 overlap", sm12);
  const uint64_t lane = d.Track("slot 00 lane 1", sm12);
  for (uint64_t t : {gpu, sm12, sm3, sm5, slot, overlap, lane}) EXPECT_NE(t, 0u);
  // No launch track: nothing named after the launch, no block or warp tracks.
  EXPECT_EQ(d.Track(testing::SinkLaunchTrack(7, 0)), 0u);
  EXPECT_EQ(d.Track("block (1,0,0)"), 0u);
  EXPECT_EQ(d.Track("warp 0"), 0u);
  EXPECT_LT(d.tracks.at(slot).rank, d.tracks.at(lane).rank);
  EXPECT_LT(d.tracks.at(lane).rank, d.tracks.at(overlap).rank);

  // Warp 0 of #7: its slice from its first record to its last, ranges inside.
  EXPECT_EQ(Rows(d, slot), (std::vector<SliceRow>{{"#7 gemm<128>", 1100, 4900, 0},
                                                  {"mainloop", 1100, 3900, 1},
                                                  {"load", 1100, 400, 2},
                                                  {"mma", 1500, 2500, 2},
                                                  {"epilogue", 5000, 1000, 1}}));
  const DecodedSlice& span = d.slices.at(slot).at(0);
  EXPECT_EQ(span.args.at("launch_id"), "7");
  EXPECT_EQ(span.args.at("pid"), "4242");
  EXPECT_EQ(span.args.at("block[0]"), "1");
  EXPECT_EQ(span.args.at("warp"), "0");
  EXPECT_EQ(span.cycles, 0);  // one counter value per slice row
  EXPECT_EQ(d.slices.at(slot).at(1).cycles, 2 * 3900);
  EXPECT_EQ(Rows(d, lane), (std::vector<SliceRow>{{"copy", 1800, 3700, 0}}));
  ASSERT_EQ(d.instants.at(slot).size(), 1u);
  EXPECT_EQ(d.instants.at(slot)[0].name, "tick");
  // Warp 1 of #7 has the same slot (hw_warp 0) while warp 0 runs: the overlap track.
  EXPECT_EQ(Rows(d, overlap), (std::vector<SliceRow>{{"#7 gemm<128>", 1200, 7800, 0}, {"mainloop", 1300, 7700, 1}}));
  EXPECT_EQ(d.slices.at(overlap).at(0).args.at("warp"), "1");
  EXPECT_EQ(d.slices.at(overlap).at(1).args.at("unterminated"), "true");
  EXPECT_EQ(sink->overlap_spans(), 1u);
  EXPECT_EQ(Rows(d, d.Track("slot 00", sm3)),
            (std::vector<SliceRow>{{"#7 gemm<128>", 2000, 300, 0}, {"load", 2000, 100, 1}, {"load", 2100, 200, 1}}));
  EXPECT_EQ(Rows(d, d.Track("slot 00", sm5)), (std::vector<SliceRow>{{"#8 gemm<128>", 10100, 100, 0}, {"load", 10100, 100, 1}}));

  // Each launch once as a whole, on its stream, with the launch's args.
  const uint64_t stream = d.Track("pid 4242 | cuda:1 | stream 7", gpu);
  ASSERT_EQ(d.slices.at(stream).size(), 2u);
  EXPECT_EQ(d.slices.at(stream)[0].args.at("launch_id"), "7");
  EXPECT_EQ(d.slices.at(stream)[0].args.at("registers"), "64");
  EXPECT_EQ(d.slices.at(stream)[0].args.at("kernel"), "_Z4gemmILi128EEvPfS0_");
  // Said once, at the first launch.
  const auto& run = d.instants.at(d.Track("smprof run", 0));
  ASSERT_GE(run.size(), 2u);
  EXPECT_EQ(run[1].name, "layout: hardware-centric");
  EXPECT_EQ(run[1].args.at("reason"), "asked for");
  EXPECT_EQ(sink->layout_used(), TraceLayout::kHardware);
  EXPECT_EQ(sink->layout_description(), "hardware-centric (asked for)");
}

// --- the device API's records (issue 9) --------------------------------------

using Point = std::pair<uint64_t, int64_t>;  // ts, value

std::vector<Point> Values(const Decoded& d, uint64_t counter_track) {
  std::vector<Point> points;
  const auto it = d.counters.find(counter_track);
  if (it == d.counters.end()) return points;
  for (const DecodedEvent& e : it->second) points.emplace_back(e.ts, e.value);
  return points;
}

using InstantRow = std::pair<uint64_t, std::string>;  // ts, name
std::vector<InstantRow> Instants(const Decoded& d, uint64_t track) {
  std::vector<InstantRow> rows;
  const auto it = d.instants.find(track);
  if (it == d.instants.end()) return rows;
  for (const DecodedEvent& e : it->second) rows.emplace_back(e.ts, e.name);
  return rows;
}

// Each flow id with the tracks and times of the event that starts it
// (flow_ids) and of the one that ends it (terminating_flow_ids).
using FlowEnds = std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>;  // from track, ts, to track, ts
std::map<uint64_t, FlowEnds> Flows(const Decoded& d) {
  std::map<uint64_t, FlowEnds> flows;
  for (const DecodedEvent& e : d.events) {
    for (const uint64_t id : e.flows) {
      std::get<0>(flows[id]) = e.track;
      std::get<1>(flows[id]) = e.ts;
    }
    for (const uint64_t id : e.terminating) {
      std::get<2>(flows[id]) = e.track;
      std::get<3>(flows[id]) = e.ts;
    }
  }
  return flows;
}

constexpr uint64_t kAsyncFlow = uint64_t{1} << 63;

// What both layouts write alike for WriteDeviceApiRun's launch 7: values as
// args, counter samples as counter values, not instants.
void ExpectValuesAndCounters(const Decoded& d, uint64_t warp0, uint64_t warp1) {
  const auto& s0 = d.slices.at(warp0);
  const auto mma = std::find_if(s0.begin(), s0.end(), [](const DecodedSlice& s) { return s.name == "mma"; });
  ASSERT_NE(mma, s0.end());
  EXPECT_EQ(mma->args.at("value"), "42");
  EXPECT_EQ(mma->cycles, 1800);
  const auto load = std::find_if(s0.begin(), s0.end(), [](const DecodedSlice& s) { return s.name == "load"; });
  ASSERT_NE(load, s0.end());
  EXPECT_EQ(std::make_tuple(load->ts, load->dur, load->cycles), std::make_tuple(2000u, 1000u, int64_t{2000}));
  EXPECT_EQ(load->args.count("value"), 0u);  // a phase: a plain slice
  const auto& s1 = d.slices.at(warp1);
  const auto wait = std::find_if(s1.begin(), s1.end(), [](const DecodedSlice& s) { return s.name == "wait"; });
  ASSERT_NE(wait, s1.end());
  EXPECT_EQ(wait->args.at("value"), "1099511627776");
  for (const DecodedEvent& e : d.instants.at(warp0)) {
    if (e.name == "tile") {
      EXPECT_EQ(e.args.at("value"), "-7");
    }
  }
  const DecodedEvent& x = d.instants.at(warp1).at(0);
  EXPECT_EQ(x.name, "x (end without begin)");
  EXPECT_EQ(x.args, (std::map<std::string, std::string>{{"smprof_error", "unmatched end"}, {"value", "9"}}));
  // No instant, anywhere, for a counter sample.
  for (const auto& [track, instants] : d.instants) {
    for (const DecodedEvent& e : instants) EXPECT_NE(e.name, "inflight");
  }
}

TEST_F(PerfettoSinkTest, DeviceApiRecordsInTheLaunchCentricLayout) {
  auto sink = OpenSink();
  sink->set_layout(TraceLayout::kLaunch);
  testing::WriteDeviceApiRun(*sink);
  const Decoded d = FinishAndDecode(*sink);
  // Errors include a slice row without its value on the "cycles" counter
  // (the async spans' instants carry a 0 like every instant).
  ASSERT_TRUE(d.errors.empty()) << Errors(d.errors);
  const uint64_t launch = d.Track(testing::SinkLaunchTrack(7, 0)), launch8 = d.Track(testing::SinkLaunchTrack(8, 0));
  const uint64_t block = d.Track("block (1,0,0)", d.Track("SM 012", launch));
  const uint64_t other = d.Track("block (0,1,0)", d.Track("SM 003", launch));
  const uint64_t block8 = d.Track("block (0,0,0)", d.Track("SM 012", launch8));
  const uint64_t warp0 = d.Track("warp 0", block), warp1 = d.Track("warp 1", block), warp2 = d.Track("warp 2", block);
  const uint64_t tma_warp = d.Track("warp 0", other), warp8 = d.Track("warp 0", block8);
  const uint64_t async = d.Track("async", block), lane1 = d.Track("async lane 1", block);
  for (uint64_t t : {launch, launch8, block, other, block8, warp0, warp1, warp2, tma_warp, warp8, async, lane1}) {
    ASSERT_NE(t, 0u);
  }
  EXPECT_EQ(d.Track("async lane 2"), 0u);
  // The block's async tracks first, then its warps.
  EXPECT_LT(d.tracks.at(async).rank, d.tracks.at(lane1).rank);
  EXPECT_LT(d.tracks.at(lane1).rank, d.tracks.at(warp0).rank);

  ExpectValuesAndCounters(d, warp0, warp1);
  // A counter track per (warp, name), under the warp.
  const uint64_t inflight0 = d.Track("inflight", warp0), inflight1 = d.Track("inflight", warp1);
  ASSERT_NE(inflight0, 0u);
  EXPECT_TRUE(d.tracks.at(inflight0).counter);
  EXPECT_EQ(Values(d, inflight0), (std::vector<Point>{{1200, 3}, {2600, 5}}));
  EXPECT_EQ(Values(d, inflight1), (std::vector<Point>{{1500, 1}}));
  EXPECT_EQ(Values(d, d.Track("inflight", warp8)), (std::vector<Point>{{10150, 2}}));
  // Launch 7's device events: 7 + 4 + 2 of its warps' records (a closed
  // slice is two, a counter sample one), 14 of its async spans.
  EXPECT_EQ(Values(d, d.Track("events harvested")), (std::vector<Point>{{9500, 7 + 4 + 2 + 14}}));

  // Spans on the block's async tracks, B (overlapping A) on a lane of its own.
  EXPECT_EQ(Rows(d, async), (std::vector<SliceRow>{{"stage", 1150, 650, 0},
                                                   {"stage", 1900, 600, 0},
                                                   {"copy", 2000, 200, 1},
                                                   {"stage", 3000, 6000, 0},
                                                   {"stage", 3200, 0, 1},
                                                   {"stage", 4500, 100, 1}}));
  EXPECT_EQ(Rows(d, lane1), (std::vector<SliceRow>{{"stage", 1600, 1900, 0}}));
  EXPECT_EQ(Rows(d, d.Track("async", other)), (std::vector<SliceRow>{{"tma", 2000, 50, 0}}));
  EXPECT_EQ(Rows(d, d.Track("async", block8)), (std::vector<SliceRow>{{"stage", 10100, 100, 0}}));
  using Args = std::map<std::string, std::string>;
  const auto& spans = d.slices.at(async);
  EXPECT_EQ(spans[0].args, (Args{{"token", "0"}, {"begin_warp", "0"}, {"end_warp", "1"}}));
  EXPECT_EQ(spans[2].args, (Args{{"token", "5"}, {"begin_warp", "1"}, {"end_warp", "0"}}));
  EXPECT_EQ(spans[3].args, (Args{{"token", "2"}, {"begin_warp", "0"}, {"unterminated", "true"}}));
  EXPECT_EQ(spans[4].args, (Args{{"token", "3"}, {"end_warp", "1"}, {"smprof_error", "unmatched end"}}));
  EXPECT_EQ(d.slices.at(lane1)[0].args, (Args{{"token", "1"}, {"begin_warp", "0"}, {"end_warp", "1"}}));

  // Their ends on the warps' tracks (with the warps' own instants), linked
  // by flows, but for the unterminated span and the unmatched end.
  EXPECT_EQ(Instants(d, warp0), (std::vector<InstantRow>{{1150, "stage"},
                                                         {1600, "stage"},
                                                         {1900, "stage"},
                                                         {2200, "copy"},
                                                         {2500, "tile"},
                                                         {3000, "stage"},
                                                         {4600, "stage"}}));
  EXPECT_EQ(Instants(d, warp1), (std::vector<InstantRow>{{1300, "x (end without begin)"},
                                                         {1800, "stage"},
                                                         {2000, "copy"},
                                                         {2500, "stage"},
                                                         {3200, "stage"},
                                                         {3500, "stage"}}));
  EXPECT_EQ(Instants(d, warp2), (std::vector<InstantRow>{{4500, "stage"}}));
  EXPECT_EQ(Instants(d, tma_warp), (std::vector<InstantRow>{{2000, "tma"}, {2050, "tma"}}));
  EXPECT_EQ(d.Cycles(warp0), (std::vector<int64_t>{1800, 0, 0, 0, 2000, 0, 0, 0, 0}));
  EXPECT_EQ(d.Cycles(warp2), (std::vector<int64_t>{0}));
  EXPECT_EQ(Flows(d), (std::map<uint64_t, FlowEnds>{{kAsyncFlow | 1, {warp0, 1150, warp1, 1800}},
                                                    {kAsyncFlow | 2, {warp0, 1600, warp1, 3500}},
                                                    {kAsyncFlow | 3, {warp0, 1900, warp1, 2500}},
                                                    {kAsyncFlow | 4, {warp1, 2000, warp0, 2200}},
                                                    {kAsyncFlow | 7, {tma_warp, 2000, tma_warp, 2050}},
                                                    {kAsyncFlow | 8, {warp2, 4500, warp0, 4600}},
                                                    {kAsyncFlow | 9, {warp8, 10100, warp8, 10200}}}));
}

TEST_F(PerfettoSinkTest, DeviceApiRecordsInTheHardwareCentricLayout) {
  auto sink = OpenSink();
  sink->set_layout(TraceLayout::kHardware);
  testing::WriteDeviceApiRun(*sink);
  const Decoded d = FinishAndDecode(*sink);
  ASSERT_TRUE(d.errors.empty()) << Errors(d.errors);
  const uint64_t sm12 = d.Track("SM 012"), sm3 = d.Track("SM 003");
  const uint64_t slot0 = d.Track("slot 00", sm12), slot1 = d.Track("slot 01", sm12), slot2 = d.Track("slot 02", sm12);
  const uint64_t tma_slot = d.Track("slot 00", sm3);
  const uint64_t async = d.Track("async", sm12), lane1 = d.Track("async lane 1", sm12);
  for (uint64_t t : {sm12, sm3, slot0, slot1, slot2, tma_slot, async, lane1}) ASSERT_NE(t, 0u);
  EXPECT_EQ(d.Track("slot 00 overlap"), 0u);
  EXPECT_LT(d.tracks.at(lane1).rank, d.tracks.at(slot0).rank);

  ExpectValuesAndCounters(d, slot0, slot1);
  // One counter track per (slot, name), shared by the launches.
  EXPECT_EQ(Values(d, d.Track("inflight", slot0)), (std::vector<Point>{{1200, 3}, {2600, 5}, {10150, 2}}));
  EXPECT_EQ(Values(d, d.Track("inflight", slot1)), (std::vector<Point>{{1500, 1}}));

  // Warp 0's slice reaches the end of span H (after its last record); warp
  // 2, which recorded nothing else, has a slice for H's begin.
  EXPECT_EQ(Rows(d, slot0), (std::vector<SliceRow>{{"#7 gemm<128>", 1100, 3500, 0},
                                                   {"mma", 1100, 900, 1},
                                                   {"load", 2000, 1000, 1},
                                                   {"#8 gemm<128>", 10100, 200, 0},
                                                   {"load", 10100, 200, 1}}));
  EXPECT_EQ(Rows(d, slot2), (std::vector<SliceRow>{{"#7 gemm<128>", 4500, 0, 0}}));
  EXPECT_EQ(d.slices.at(slot2)[0].args.at("warp"), "2");
  EXPECT_EQ(Instants(d, slot2), (std::vector<InstantRow>{{4500, "stage"}}));

  // The SM's async tracks, shared by the launches and blocks that ran there.
  EXPECT_EQ(Rows(d, async), (std::vector<SliceRow>{{"stage", 1150, 650, 0},
                                                   {"stage", 1900, 600, 0},
                                                   {"copy", 2000, 200, 1},
                                                   {"stage", 3000, 6000, 0},
                                                   {"stage", 3200, 0, 1},
                                                   {"stage", 4500, 100, 1},
                                                   {"stage", 10100, 100, 0}}));
  EXPECT_EQ(Rows(d, lane1), (std::vector<SliceRow>{{"stage", 1600, 1900, 0}}));
  EXPECT_EQ(Rows(d, d.Track("async", sm3)), (std::vector<SliceRow>{{"tma", 2000, 50, 0}}));
  using Args = std::map<std::string, std::string>;
  EXPECT_EQ(d.slices.at(async)[5].args, (Args{{"token", "9"},
                                              {"begin_warp", "2"},
                                              {"end_warp", "0"},
                                              {"launch_id", "7"},
                                              {"pid", "4242"},
                                              {"block[0]", "1"},
                                              {"block[1]", "0"},
                                              {"block[2]", "0"}}));
  EXPECT_EQ(d.slices.at(async)[6].args.at("launch_id"), "8");
  EXPECT_EQ(Flows(d), (std::map<uint64_t, FlowEnds>{{kAsyncFlow | 1, {slot0, 1150, slot1, 1800}},
                                                    {kAsyncFlow | 2, {slot0, 1600, slot1, 3500}},
                                                    {kAsyncFlow | 3, {slot0, 1900, slot1, 2500}},
                                                    {kAsyncFlow | 4, {slot1, 2000, slot0, 2200}},
                                                    {kAsyncFlow | 7, {tma_slot, 2000, tma_slot, 2050}},
                                                    {kAsyncFlow | 8, {slot2, 4500, slot0, 4600}},
                                                    {kAsyncFlow | 9, {slot0, 10100, slot0, 10200}}}));
}

// A phase is a plain slice, and a record without a value costs what it did:
// the same bytes as the same records without the fields set.
TEST_F(PerfettoSinkTest, PhasesAndAbsentValuesWritePlainRecords) {
  const auto write = [this](bool marked) {
    auto sink = OpenSink();
    const trace::LaunchRecord l = testing::SinkLaunch(0, 1, -1, 0, 10000);
    sink->OnLaunch(l);
    const trace::WarpRecord w = testing::SinkWarp(0, 0, 0, 0, 0);
    sink->OnWarp(l, w);
    for (int i = 0; i < 3; ++i) {
      trace::SliceRecord s = testing::SinkSlice(i == 1 ? "mma" : "load", 1000 * i + 100, 1000 * i + 900, 0);
      s.phase = marked;
      s.value.counter = marked;  // not present: no value
      s.value.value = marked ? 5 : 0;
      sink->OnSlice(l, w, s);
      trace::InstantRecord t = testing::SinkInstant("tick", 1000 * i + 500);
      t.value.value = marked ? 5 : 0;
      sink->OnInstant(l, w, t);
    }
    sink->OnLaunchEnd(l, nullptr, 0);
    EXPECT_TRUE(sink->Finish(CollectorSummary()));
    return ReadTrace();
  };
  const std::string plain = write(false);
  EXPECT_GT(plain.size(), 0u);
  EXPECT_EQ(write(true), plain);
}

// A value costs its annotation and, once per sequence, its interned name.
TEST_F(PerfettoSinkTest, AValueCostsItsAnnotation) {
  const auto size = [this](int values) {
    auto sink = OpenSink();
    const trace::LaunchRecord l = testing::SinkLaunch(0, 1, -1, 0, 10000);
    sink->OnLaunch(l);
    const trace::WarpRecord w = testing::SinkWarp(0, 0, 0, 0, 0);
    sink->OnWarp(l, w);
    for (int i = 0; i < 4; ++i) {
      trace::SliceRecord s = testing::SinkSlice("load", 1000 * i + 100, 1000 * i + 900, 0);
      s.value.present = i < values;
      s.value.value = 100;
      sink->OnSlice(l, w, s);
    }
    sink->OnLaunchEnd(l, nullptr, 0);
    EXPECT_TRUE(sink->Finish(CollectorSummary()));
    return ReadTrace().size();
  };
  const size_t none = size(0), one = size(1), two = size(2);
  // {name_iid 5, int_value 100} in a DebugAnnotation: 2 + 2 + 2 bytes; the
  // interned name {iid 5, "value"}: 2 + 2 + 2 + 5 in the first packet's
  // interned data (whose length stays one byte).
  EXPECT_EQ(two - one, 6u);
  EXPECT_EQ(one - none, 6u + 11u);
}

// Two warps on one slot, one after the other: touching (same track, the
// first closed before the second begins), overlapping by 5 ns (the overlap
// track), the overlapping one handed first, a record that comes back after
// its slot was taken (a new slice of its warp elsewhere), and a later warp
// back on the slot.
TEST_F(PerfettoSinkTest, HardwareSlotsStayStrictlyNested) {
  auto sink = OpenSink();
  sink->set_layout(TraceLayout::kHardware);
  trace::GpuRecord g;
  g.index = 0;
  sink->OnGpu(g);
  const trace::WarpRecord w = [] {
    trace::WarpRecord r = testing::SinkWarp(0, 2, 0, 0, 0);
    r.hw_warp = 5;
    return r;
  }();
  auto run = [&](uint64_t index, uint64_t begin, uint64_t end, bool end_launch = true) {
    const trace::LaunchRecord l = testing::SinkLaunch(index, index + 1, 0, begin, end);
    sink->OnSlice(l, w, testing::SinkSlice("r", begin, end, 0));
    if (end_launch) sink->OnLaunchEnd(l, nullptr, 0);
    return l;
  };
  run(0, 1000, 2000);
  run(1, 2000, 3000);  // touches #1
  run(3, 3995, 5000);  // handed before #3, which it overlaps by 5 ns
  run(2, 3000, 4000);
  const trace::LaunchRecord open = run(4, 6000, 7000, false);
  run(5, 7000, 8000);  // takes the slot: #5's slice ends at 7000
  sink->OnSlice(open, w, testing::SinkSlice("late", 7500, 7600, 0));  // #5 comes back
  sink->OnLaunchEnd(open, nullptr, 0);
  const Decoded d = FinishAndDecode(*sink);
  ASSERT_TRUE(d.errors.empty()) << Errors(d.errors);
  const uint64_t sm = d.Track("SM 002");
  EXPECT_EQ(Rows(d, d.Track("slot 05", sm)), (std::vector<SliceRow>{{"#1 gemm<128>", 1000, 1000, 0},
                                                                     {"r", 1000, 1000, 1},
                                                                     {"#2 gemm<128>", 2000, 1000, 0},
                                                                     {"r", 2000, 1000, 1},
                                                                     {"#4 gemm<128>", 3995, 1005, 0},
                                                                     {"r", 3995, 1005, 1},
                                                                     {"#5 gemm<128>", 6000, 1000, 0},
                                                                     {"r", 6000, 1000, 1},
                                                                     {"#6 gemm<128>", 7000, 1000, 0},
                                                                     {"r", 7000, 1000, 1}}));
  EXPECT_EQ(Rows(d, d.Track("slot 05 overlap", sm)), (std::vector<SliceRow>{{"#3 gemm<128>", 3000, 1000, 0},
                                                                             {"r", 3000, 1000, 1},
                                                                             {"#5 gemm<128>", 7500, 100, 0},
                                                                             {"late", 7500, 100, 1}}));
  EXPECT_EQ(sink->overlap_spans(), 2u);
}

// The track count is the hardware's: the same for 10 and 2,000 launches.
TEST_F(PerfettoSinkTest, HardwareTrackCountIndependentOfLaunches) {
  std::vector<uint64_t> tracks;
  for (const uint64_t launches : {10u, 2000u}) {
    auto sink = OpenSink();
    sink->set_layout(TraceLayout::kHardware);
    testing::WriteManyLaunchesRun(*sink, launches, 4, 2);
    ASSERT_TRUE(sink->Finish(CollectorSummary())) << sink->error();
    const perfetto::TraceSummary check = perfetto::CheckTrace(ReadTrace());
    EXPECT_TRUE(check.errors.empty()) << Errors(check.errors);
    std::map<std::string, uint64_t> slices;
    for (const auto& [uuid, t] : check.tracks) {
      for (const auto& [name, n] : t.names) slices[name] += n;
    }
    EXPECT_EQ(slices["work"], launches);
    EXPECT_EQ(slices["load"], launches);
    EXPECT_EQ(slices["tick"], launches);
    EXPECT_EQ(slices["step"], launches);  // the stream spans
    EXPECT_EQ(sink->overlap_spans(), 0u);
    tracks.push_back(check.descriptors);
    EXPECT_EQ(check.descriptors, sink->tracks());
  }
  // run, GPU, 4 streams, process, 4 SMs, 8 slots with their counters.
  EXPECT_EQ(tracks[0], 1u + 1 + 4 + 1 + 4 + 8 * 2);
  EXPECT_EQ(tracks[1], tracks[0]);
}

TEST_F(PerfettoSinkTest, AutoLayoutSwitchesAfter256Launches) {
  auto sink = OpenSink();
  EXPECT_EQ(sink->layout_used(), TraceLayout::kLaunch);
  testing::WriteManyLaunchesRun(*sink, 300, 4, 2);
  ASSERT_TRUE(sink->Finish(CollectorSummary())) << sink->error();
  const Decoded d = Decode(ReadTrace());
  ASSERT_TRUE(d.errors.empty()) << Errors(d.errors);
  EXPECT_EQ(sink->layout_used(), TraceLayout::kHardware);
  EXPECT_EQ(sink->layout_description(),
            "hardware-centric from launch 257 on (auto: more than 256 launches); launch-centric before");
  size_t launch_tracks = 0, warp_slices = 0;
  for (const auto& [uuid, t] : d.tracks) launch_tracks += t.name.rfind("#", 0) == 0;
  for (const auto& [track, slices] : d.slices) {
    for (const DecodedSlice& s : slices) warp_slices += s.name.rfind("#", 0) == 0 && s.depth == 0;
  }
  EXPECT_EQ(launch_tracks, 256u);
  EXPECT_EQ(warp_slices, 300u - 256u);
  const auto& run = d.instants.at(d.Track("smprof run", 0));
  ASSERT_GE(run.size(), 2u);
  EXPECT_EQ(run[0].name, "layout: launch-centric");
  EXPECT_EQ(run[1].name, "layout: hardware-centric");
  EXPECT_EQ(run[1].ts, 1000u + 250 * 256);
  EXPECT_EQ(run[1].args.at("from_launch"), "257");
  EXPECT_EQ(run[1].args.at("launch_id"), "257");
  EXPECT_EQ(run[1].args.at("reason"), "auto: more than 256 launches");
}

TEST_F(PerfettoSinkTest, LayoutNamesParse) {
  TraceLayout l = TraceLayout::kAuto;
  EXPECT_TRUE(ParseTraceLayout("hardware", &l));
  EXPECT_EQ(l, TraceLayout::kHardware);
  EXPECT_TRUE(ParseTraceLayout("launch", &l));
  EXPECT_EQ(l, TraceLayout::kLaunch);
  EXPECT_FALSE(ParseTraceLayout("slots", &l));
  EXPECT_STREQ(TraceLayoutName(TraceLayout::kAuto), "auto");
}

}  // namespace
}  // namespace smprof
