// Benchmark: how fast one core encodes trace events as Perfetto protobuf
// packets, and how many bytes each takes, with the packet layout
// tests/e2e/perfetto_import_test.cc proves Perfetto imports exactly (one
// sequence per warp, interned names, an incremental clock, the warp's track
// as the default: each event is timestamp delta + sequence id + type +
// name). Reference: a JSON "X"/"i" line per event as the JSON trace writes
// them today, formatted with snprintf.
//   smprof_bench_trace_encode [events (default 20000000)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "collector/proto_encoder.h"

namespace {

constexpr int kWarps = 4096;

template <typename F>
double Seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
  return 0;
}
