// Benchmark: how fast one core encodes trace events as Perfetto protobuf
// packets, and how many bytes each takes, with the packet layout
// tests/e2e/perfetto_import_test.cc proves Perfetto imports exactly (one
// sequence per warp, interned names, an incremental clock, the warp's track
// as the default: each event is timestamp delta + sequence id + type +
// name). Reference: a JSON "X"/"i" line per event as the JSON trace writes
// them today, formatted with snprintf. Then the real writer: a large run
// (16 launches x 4096 warps) delivered to PerfettoSink through the TraceSink
// interface as the collector delivers it (warps interleaved, a chunk of
// records each), written to /dev/null; an event is a BEGIN or an END (2 per
// slice) or an instant, and bytes/event counts the whole file (descriptors,
// sequence starts, interned names, CUPTI slices included).
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

// A GEMM-like run: per warp a prologue, then iterations of
// mainloop > {load_tile, mma} with a tma_arrive instant every 4th, then an
// epilogue; durations from a cheap LCG (load 64-575 ns, mma 128-1151 ns),
// SM cycles at 1.755 GHz. Records come 8 iterations per warp at a time.
SinkFigures DrivePerfettoSink(long events) {
  constexpr int kLaunches = 16, kSinkWarps = 4096, kChunk = 8;
  const long iterations = std::max(1L, events / (kLaunches * kSinkWarps) * 4 / 25);  // 6.25 events each
  std::string error;
  auto sink = smprof::PerfettoSink::Open("/dev/null", false, &error);
  if (!sink) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(1);
  }
  SinkFigures f;
  uint32_t lcg = 12345;
  const auto next = [&lcg] { return (lcg = lcg * 1664525u + 1013904223u) >> 8; };
  const auto slice = [&](std::string_view name, uint64_t b, uint64_t e, uint32_t depth) {
    smprof::trace::SliceRecord s;
    s.name = name;
    s.begin_ns = b;
    s.end_ns = e;
    s.cycles = static_cast<uint32_t>((e - b) * 1755 / 1000);
    s.depth = depth;
    return s;
  };
  f.seconds = Seconds([&] {
    for (int li = 0; li < kLaunches; ++li) {
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
      std::vector<smprof::trace::WarpRecord> warps(kSinkWarps);
      std::vector<uint64_t> t(kSinkWarps);
      for (int wi = 0; wi < kSinkWarps; ++wi) {
        smprof::trace::WarpRecord& w = warps[wi];
        w.index = wi;
        w.sm = static_cast<uint16_t>(wi / 8 % 132);
        w.block[0] = wi / 8;
        w.warp = static_cast<uint16_t>(wi % 8);
        sink->OnWarp(l, w);
        t[wi] = l.start_ns + 100 + (next() & 1023);
        sink->OnSlice(l, w, slice("prologue", t[wi], t[wi] + 200, 0));
        t[wi] += 210;
        f.events += 2;
      }
      for (long it = 0; it < iterations; it += kChunk) {
        for (int wi = 0; wi < kSinkWarps; ++wi) {
          const smprof::trace::WarpRecord& w = warps[wi];
          for (long k = it; k < std::min(iterations, it + kChunk); ++k) {
            const uint64_t b = t[wi], load = 64 + (next() & 511), mma = 128 + (next() & 1023);
            sink->OnSlice(l, w, slice("mainloop", b, b + load + mma + 20, 0));
            sink->OnSlice(l, w, slice("load_tile", b + 5, b + 5 + load, 1));
            if (k % 4 == 3) {
              smprof::trace::InstantRecord i;
              i.name = "tma_arrive";
              i.ts_ns = b + 5 + load;
              sink->OnInstant(l, w, i);
              ++f.events;
            }
            sink->OnSlice(l, w, slice("mma", b + 10 + load, b + 10 + load + mma, 1));
            t[wi] = b + load + mma + 20 + (next() & 63);
            f.events += 6;
          }
        }
      }
      for (int wi = 0; wi < kSinkWarps; ++wi) {
        sink->OnSlice(l, warps[wi], slice("epilogue", t[wi], t[wi] + 300, 0));
        f.events += 2;
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
  std::printf("trace encoding on one core, %ld events, %d warp sequences\n", events, kWarps);
  std::printf("%-32s %12s %14s %14s\n", "format", "M events/s", "bytes/event", "x JSON speed");
  std::printf("%-32s %12.1f %14.2f %14.2f\n", "Perfetto protobuf (ProtoEncoder)", events / proto_s / 1e6,
              static_cast<double>(proto_bytes) / events, json_s / proto_s);
  std::printf("%-32s %12.1f %14.2f %14.2f\n", "JSON line (snprintf reference)", events / json_s / 1e6,
              static_cast<double>(json_bytes) / events, 1.0);
  const SinkFigures sink = DrivePerfettoSink(events);
  const double sink_rate = static_cast<double>(sink.events) / sink.seconds;
  std::printf("%-32s %12.1f %14.2f %14.2f\n", "PerfettoSink (TraceSink calls)", sink_rate / 1e6,
              static_cast<double>(sink.bytes) / static_cast<double>(sink.events), sink_rate / (events / json_s));
  std::printf("(PerfettoSink: %llu events, 16 launches x 4096 warps, %.1f MB)\n",
              static_cast<unsigned long long>(sink.events), static_cast<double>(sink.bytes) / 1e6);
  return 0;
}
