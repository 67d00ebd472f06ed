// Benchmark: how fast one core encodes trace events as Perfetto protobuf
// packets, and how many bytes each takes, with the packet layout
// tests/e2e/perfetto_import_test.cc proves Perfetto imports exactly (one
// sequence per warp, interned names, an incremental clock, the warp's track
// as the default: each event is timestamp delta + sequence id + type +
// name). Reference: a JSON "X"/"i" line per event as the JSON trace writes
// them today, formatted with snprintf. Then the real writer: a large run
// (16 launches x 4096 warps) delivered to PerfettoSink through the TraceSink
// interface, written to /dev/null, the records arriving as the collector
// hands them (a launch's warps one after another) and, as a worst case,
// with every warp of a launch interleaved (8 iterations each in turn); each
// as smprof-run writes it by default (the ranges' SM cycles left to the
// statistics) and with the cycles in the trace (--trace-cycles counter or
// args). An
// event is a BEGIN or an END (2 per slice) or an instant, and bytes/event
// counts the whole file (descriptors, sequence starts, interned names,
// CUPTI slices included).
//   smprof_bench_trace_encode [events (default 20000000)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "collector/perfetto_sink.h"
#include "collector/proto_encoder.h"
#include "collector/run_summary.h"

namespace {

constexpr int kWarps = 4096;

template <typename F>
double Seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct SinkFigures {
  uint64_t events = 0, bytes = 0;
  double seconds = 0;
};

// How the records of a launch's warps reach the sink.
enum class Arrival {
  kWarpAfterWarp,  // as the collector hands them: all of warp 1, then warp 2, ...
  kInterleaved,    // worst case: every warp open at once, 8 iterations each in turn
};

// One warp of a GEMM-like kernel: a prologue, then iterations of
// mainloop > {load_tile, mma} with a tma_arrive instant every 4th, then an
// epilogue; durations from a cheap LCG seeded per warp (load 64-575 ns, mma
// 128-1151 ns), so both arrivals send the same records; SM cycles at
// 1.755 GHz.
class WarpRecords {
 public:
  WarpRecords(uint64_t launch_start, int launch, int warp) : lcg_(12345u + 7919u * launch + 104729u * warp) {
    record_.index = warp;
    record_.sm = static_cast<uint16_t>(warp / 8 % 132);
    record_.block[0] = warp / 8;
    record_.warp = static_cast<uint16_t>(warp % 8);
    t_ = launch_start + 100 + (Next() & 1023);
  }
  const smprof::trace::WarpRecord& record() const { return record_; }

  uint64_t Prologue(smprof::PerfettoSink& sink, const smprof::trace::LaunchRecord& l) {
    sink.OnWarp(l, record_);
    sink.OnSlice(l, record_, Slice("prologue", t_, t_ + 200, 0));
    t_ += 210;
    return 2;
  }
  // Iterations [first, last).
  uint64_t Iterations(smprof::PerfettoSink& sink, const smprof::trace::LaunchRecord& l, long first, long last) {
    uint64_t events = 0;
    for (long k = first; k < last; ++k) {
      const uint64_t b = t_, load = 64 + (Next() & 511), mma = 128 + (Next() & 1023);
      sink.OnSlice(l, record_, Slice("mainloop", b, b + load + mma + 20, 0));
      sink.OnSlice(l, record_, Slice("load_tile", b + 5, b + 5 + load, 1));
      if (k % 4 == 3) {
        smprof::trace::InstantRecord i;
        i.name = "tma_arrive";
        i.ts_ns = b + 5 + load;
        sink.OnInstant(l, record_, i);
        ++events;
      }
      sink.OnSlice(l, record_, Slice("mma", b + 10 + load, b + 10 + load + mma, 1));
      t_ = b + load + mma + 20 + (Next() & 63);
      events += 6;
    }
    return events;
  }
  uint64_t Epilogue(smprof::PerfettoSink& sink, const smprof::trace::LaunchRecord& l) {
    sink.OnSlice(l, record_, Slice("epilogue", t_, t_ + 300, 0));
    return 2;
  }

 private:
  uint32_t Next() { return (lcg_ = lcg_ * 1664525u + 1013904223u) >> 8; }
  static smprof::trace::SliceRecord Slice(std::string_view name, uint64_t b, uint64_t e, uint32_t depth) {
    smprof::trace::SliceRecord s;
    s.name = name;
    s.begin_ns = b;
    s.end_ns = e;
    s.cycles = static_cast<uint32_t>((e - b) * 1755 / 1000);
    s.depth = depth;
    return s;
  }

  uint32_t lcg_;
  uint64_t t_ = 0;
  smprof::trace::WarpRecord record_;
};

constexpr int kSinkLaunches = 16, kSinkWarps = 4096;

// A large run (kSinkLaunches x kSinkWarps warps, ~`events` in all) through
// the TraceSink calls, written to /dev/null.
SinkFigures DrivePerfettoSink(long events, Arrival arrival, smprof::PerfettoSink::CyclesEncoding cycles) {
  constexpr long kChunk = 8;
  const long iterations = std::max(1L, events / (kSinkLaunches * kSinkWarps) * 4 / 25);  // 6.25 events each
  std::string error;
  auto sink = smprof::PerfettoSink::Open("/dev/null", false, &error);
  if (!sink) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(1);
  }
  sink->set_cycles_encoding(cycles);
  SinkFigures f;
  f.seconds = Seconds([&] {
    for (int li = 0; li < kSinkLaunches; ++li) {
      smprof::trace::LaunchRecord l;
      l.index = li;
      l.launch_id = li;
      l.kernel = "_Z4gemmILi128ELi128EEvPKfS1_Pfiii";
      l.label = "gemm<128, 128>";
      l.gpu = -1;
      l.grid[0] = kSinkWarps / 8, l.grid[1] = 1, l.grid[2] = 1;
      l.block[0] = 256, l.block[1] = 1, l.block[2] = 1;
      l.start_ns = 1000000ull * li;
      l.end_ns = l.start_ns + 900000;
      sink->OnLaunch(l);
      if (arrival == Arrival::kWarpAfterWarp) {
        for (int wi = 0; wi < kSinkWarps; ++wi) {
          WarpRecords w(l.start_ns, li, wi);
          f.events += w.Prologue(*sink, l);
          f.events += w.Iterations(*sink, l, 0, iterations);
          f.events += w.Epilogue(*sink, l);
          if (wi % 256 == 255) sink->Flush();  // as after a poll
        }
      } else {
        std::vector<WarpRecords> warps;
        warps.reserve(kSinkWarps);
        for (int wi = 0; wi < kSinkWarps; ++wi) {
          warps.emplace_back(l.start_ns, li, wi);
          f.events += warps.back().Prologue(*sink, l);
        }
        for (long it = 0; it < iterations; it += kChunk) {
          for (WarpRecords& w : warps) f.events += w.Iterations(*sink, l, it, std::min(iterations, it + kChunk));
          sink->Flush();
        }
        for (WarpRecords& w : warps) f.events += w.Epilogue(*sink, l);
      }
      sink->OnLaunchEnd(l, nullptr, 0);
      sink->Flush();
    }
    sink->Finish(smprof::CollectorSummary());
  });
  f.bytes = sink->bytes_written();
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const long events = argc > 1 ? std::atol(argv[1]) : 20000000L;
  if (events <= 0) {
    std::fprintf(stderr, "usage: %s [events > 0]\n", argv[0]);
    return 2;
  }
  smprof::proto::ProtoEncoder e;
  size_t proto_bytes = 0;
  const double proto_s = Seconds([&] {
    for (long i = 0; i < events; ++i) {
      if (e.size() > (1u << 22)) {  // flush to the file writer every 4 MB
        proto_bytes += e.size();
        e.Clear();
      }
      const uint32_t warp = static_cast<uint32_t>(i % kWarps);
      const auto p = e.BeginNested(1);
      e.Varint(8, 40 + (i & 63));  // timestamp delta, ns
      e.Varint(10, 1 + warp);      // trusted_packet_sequence_id
      const auto te = e.BeginNested(11);
      const uint32_t type = 1 + static_cast<uint32_t>(i % 3);
      e.Varint(9, type);
      if (type != 2) e.Varint(10, 1 + (i & 7));  // name_iid
      e.EndNested(te);
      e.EndNested(p);
    }
    proto_bytes += e.size();
  });
  std::string json;
  size_t json_bytes = 0;
  const double json_s = Seconds([&] {
    char line[256];
    for (long i = 0; i < events; ++i) {
      if (json.size() > (1u << 22)) {
        json_bytes += json.size();
        json.clear();
      }
      const uint64_t ts = 1000000 + static_cast<uint64_t>(i) * 40;
      const int n = std::snprintf(line, sizeof(line),
                                  "{\"ph\":\"X\",\"pid\":%u,\"tid\":%u,\"cat\":\"smprof\",\"name\":\"n%ld\",\"ts\":%llu.%03llu,"
                                  "\"dur\":0.%03ld,\"args\":{\"cycles\":%ld}},\n",
                                  12u, static_cast<unsigned>(i % kWarps), i & 7,
                                  static_cast<unsigned long long>(ts / 1000), static_cast<unsigned long long>(ts % 1000),
                                  i & 511, i & 1023);
      json.append(line, static_cast<size_t>(n));
    }
    json_bytes += json.size();
  });
  std::printf("trace encoding on one core, %ld events (ProtoEncoder: %d warp sequences open at once)\n", events,
              kWarps);
  std::printf("%-32s %12s %14s %14s\n", "format", "M events/s", "bytes/event", "x JSON speed");
  std::printf("%-32s %12.1f %14.2f %14.2f\n", "Perfetto protobuf (ProtoEncoder)", events / proto_s / 1e6,
              static_cast<double>(proto_bytes) / events, json_s / proto_s);
  std::printf("%-32s %12.1f %14.2f %14.2f\n", "JSON line (snprintf reference)", events / json_s / 1e6,
              static_cast<double>(json_bytes) / events, 1.0);
  using Cycles = smprof::PerfettoSink::CyclesEncoding;
  const struct {
    const char* name;
    Arrival arrival;
    Cycles cycles;
  } rows[] = {
      {"PerfettoSink, warp after warp", Arrival::kWarpAfterWarp, Cycles::kNone},
      {"  + cycles as a counter value", Arrival::kWarpAfterWarp, Cycles::kCounter},
      {"  + cycles as slice args", Arrival::kWarpAfterWarp, Cycles::kAnnotation},
      {"PerfettoSink, interleaved warps", Arrival::kInterleaved, Cycles::kNone},
      {"  + cycles as a counter value", Arrival::kInterleaved, Cycles::kCounter},
  };
  uint64_t sink_events = 0;
  for (const auto& row : rows) {
    const SinkFigures sink = DrivePerfettoSink(events, row.arrival, row.cycles);
    const double sink_rate = static_cast<double>(sink.events) / sink.seconds;
    std::printf("%-32s %12.1f %14.2f %14.2f\n", row.name, sink_rate / 1e6,
                static_cast<double>(sink.bytes) / static_cast<double>(sink.events), sink_rate / (events / json_s));
    sink_events = sink.events;
  }
  std::printf("(PerfettoSink: %llu events each, %d launches x %d warps, through the TraceSink calls to /dev/null;\n"
              " by default the ranges' cycles are left to the statistics; --trace-cycles counter|args adds them;\n"
              " target <= 12 bytes/event at >= 50 M events/s warp after warp, by default)\n",
              static_cast<unsigned long long>(sink_events), kSinkLaunches, kSinkWarps);
  return 0;
}
