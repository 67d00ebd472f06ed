// Benchmark: the host side of the record path after the device -> host copy,
// stage by stage, each on one core, then the ship -> shared memory ->
// collector part as it runs (a producer thread and the collector's thread).
// Issue 30's target is >= 100 M events/s end to end on the 16-core GPU
// machine.
//
// A synthetic arena shaped like one launch of smprof_example_gemm 1024: 2048
// warps over 132 SMs, 258 events each (load/compute ranges and an instant),
// in 1 KiB chunks (61 events each) claimed as warps fill them, with clock
// anchors at 1.98 GHz on a 32 ns %globaltimer tick, repeated for `launches`
// launches. The stages are the real functions:
//   injector (chunk_scan.h)  ChunkScanner: the names, the written bytes of
//                            each chunk and what each warp claimed
//   ship (shipper.h)         the read-back as it is: records, names, chunks,
//                            the harvest (framing and copies) into memory
//   transport                the framed messages through a real shared-memory
//                            ring (transport.h), consumer doing nothing;
//                            then into the collector's intake (intake.h),
//                            which copies them into its blocks
//   collector (arena_decoder.h, launch_matcher.h)
//                            DecodeChunks, MapEventClocks, EstimateClockOffset,
//                            MatchLaunches alone, one thread
//   collect                  Collector::HandleMessage for every message (the
//                            launch assembler: decode, match, launches; the
//                            builder: message decode, range matching; the
//                            Perfetto writer and statistics), then Finish
//                            (writes the statistics, places the trace); the
//                            trace goes to /tmp
//   ship->collect            a producer thread shipping through the ring to
//                            a consumer thread running the collector, as
//                            smprof-run does (wall time, Finish included)
//   The collector runs twice each time: on one thread, and with its
//   builder, trace writer and statistics on threads of their own (stage
//   threads, --sink-threads: what smprof-collector does on machines of 4
//   cores or more; the launch assembler stays on the calling thread). The
//   collector's rows run with its heap policy (heap_policy.h).
//   smprof_bench_host_pipeline [warps (2048)] [events per warp (258)] [launches (4)]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collector/arena_decoder.h"
#include "collector/collector.h"
#include "collector/heap_policy.h"
#include "collector/intake.h"
#include "collector/launch_matcher.h"
#include "common/transport.h"
#include "injector/chunk_scan.h"
#include "injector/harvester.h"
#include "injector/shipper.h"
#include "smprof/wire.h"

namespace {

using smprof::arena::DecodeStats;
using smprof::arena::Launch;
using smprof::arena::MatchStats;
using smprof::arena::WarpSegment;
namespace wire = smprof::wire;
namespace transport = smprof::transport;

constexpr uint32_t kChunk = 1024;
constexpr uint32_t kSlots = kChunk / 16;
constexpr uint64_t kFirstGrid = 77;
constexpr uint64_t kNameBase = 0x7f0000001000ull;
constexpr uint64_t kCyclesPerLaunch = 20000000000ull;  // ~10 s apart

template <typename F>
double Seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The arena: warps claim chunks in an interleaved order, as warps of many
// SMs do; each chunk's anchor is its claim time. One launch after another.
std::vector<uint8_t> BuildArena(uint32_t warps, uint32_t events_per_warp, uint32_t launches, uint32_t* chunks_used) {
  const uint32_t per_chunk = kSlots - wire::kChunkHeaderSlots;
  const uint32_t chunks_per_warp = (events_per_warp + per_chunk - 1) / per_chunk;
  const uint32_t total = warps * chunks_per_warp * launches;
  std::vector<uint8_t> bytes(static_cast<size_t>(total) * kChunk, 0);
  uint32_t next = 0;
  for (uint32_t launch = 0; launch < launches; ++launch) {
    for (uint32_t round = 0; round < chunks_per_warp; ++round) {
      for (uint32_t w = 0; w < warps; ++w) {
        const uint32_t c = next++;
        const uint16_t sm = static_cast<uint16_t>(w / 16 % 132);
        const uint64_t clock0 = 1000000ull + launch * kCyclesPerLaunch + w * 37ull + round * per_chunk * 1300ull;
        wire::ChunkHeader h{};
        h.grid_id = kFirstGrid + launch;
        h.name_base = kNameBase;
        h.block_x = w / 8;
        h.sm = sm;
        h.warp = static_cast<uint8_t>(w % 8);
        h.magic = wire::kChunkMagic;
        h.hw_warp = static_cast<uint8_t>(w % 64);
        h.anchor_clock = clock0;
        // %globaltimer ticks every 32 ns (Hopper): an anchor reads its tick.
        h.anchor_time_ns = (5000000000ull + static_cast<uint64_t>(clock0 / 1.98)) / 32 * 32;
        std::memcpy(bytes.data() + static_cast<size_t>(c) * kChunk, &h, sizeof(h));
        for (uint32_t i = 0; i < per_chunk; ++i) {
          const uint32_t k = round * per_chunk + i;
          if (k >= events_per_warp) break;
          const uint64_t clock = clock0 + i * 1300ull;
          // load B, load E, compute B, compute E, ..., an instant every 64th.
          const uint32_t kind = k % 64 == 63 ? wire::kEventInstant : (k % 2 == 0 ? wire::kEventBegin : wire::kEventEnd);
          const int32_t name = static_cast<int32_t>((k / 2 % 2) * 8 + (kind == wire::kEventInstant ? 16 : 0));
          const wire::Event e{static_cast<uint32_t>(clock),
                              static_cast<uint32_t>(clock >> 32 << wire::kEventClockShift) | kind, name, 0};
          std::memcpy(bytes.data() + static_cast<size_t>(c) * kChunk + (wire::kChunkHeaderSlots + i) * 16, &e,
                      sizeof(e));
        }
      }
    }
  }
  *chunks_used = total;
  return bytes;
}

// Keeps every framed message the shipper sends, back to back.
class MemorySink : public smprof::injector::MessageSink {
 public:
  bool Send(const void* data, uint32_t size, uint64_t /*events*/) override {
    offsets.push_back(bytes.size());
    bytes.insert(bytes.end(), static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
    return true;
  }
  std::vector<uint8_t> bytes;
  std::vector<size_t> offsets;
};

std::string NameAt(uint64_t address) {
  switch (address - kNameBase) {
    case 0:
      return "load";
    case 8:
      return "compute";
    default:
      return "tile_done";
  }
}

// The messages of one process: who it is, its GPU, one read-back as the
// injector ships it (its records, the names its scan found, the chunks, the
// harvest).
void Ship(smprof::injector::MessageSink* sink, const std::vector<smprof::injector::KernelRecord>& records,
          const smprof::injector::ChunkScanner& scan, const std::vector<uint32_t>& used,
          const std::vector<uint8_t>& arena, uint32_t chunks) {
  smprof::injector::Shipper shipper(sink);
  shipper.SendProcess(4242, 1, 1700000000000000000ull, 4000000000ull, "bench");
  smprof::injector::DeviceInfo device;
  device.sm_count = 132;
  device.sm_clock_khz = 1980000;
  device.name = "synthetic";
  shipper.SendDevice(device);
  std::vector<smprof::injector::Shipper::Record> shipped;
  for (const auto& r : records) shipped.push_back({&r, true, wire::HostCall{}});
  shipper.SendRecords(0, 1, shipped);
  for (uint64_t address : scan.name_addresses()) shipper.SendMarkerName(1, 1, address, NameAt(address));
  shipper.SendChunks(0, 1, 1, kChunk, arena.data(), used, scan.events());
  smprof::injector::HarvestHost host;
  shipper.SendHarvest(records.back().end_ns, 0, 1, wire::kHarvestSync, 0, 0, chunks, chunks,
                      static_cast<uint32_t>(scan.empty_chunks()), wire::kHarvestFinal | wire::kHarvestProbed, 0, host);
}

std::unique_ptr<smprof::Collector> OpenCollector(const std::string& path,
                                                 smprof::CollectorOptions::SinkThreads threads) {
  smprof::CollectorOptions options;
  options.sink_threads = threads;
  options.trace_path = path;
  options.overwrite = true;
  options.stats = true;
  std::string error;
  auto collector = smprof::Collector::Create(options, &error);
  if (!collector) {
    std::fprintf(stderr, "FAILED: %s\n", error.c_str());
    std::exit(1);
  }
  return collector;
}

struct Row {
  const char* name;
  double seconds;
};

}  // namespace

int main(int argc, char** argv) {
  const uint32_t warps = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 2048;
  const uint32_t per_warp = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 258;
  const uint32_t launch_count = argc > 3 ? static_cast<uint32_t>(std::atoi(argv[3])) : 4;
  uint32_t used = 0;
  const std::vector<uint8_t> arena = BuildArena(warps, per_warp, launch_count, &used);
  const double events = static_cast<double>(warps) * per_warp * launch_count;

  std::vector<smprof::injector::KernelRecord> records(launch_count);
  std::vector<smprof::arena::KernelRecord> matched_records(launch_count);
  for (uint32_t l = 0; l < launch_count; ++l) {
    smprof::injector::KernelRecord& r = records[l];
    r.grid_id = kFirstGrid + l;
    r.start_ns = 5000000000ull + static_cast<uint64_t>(l * kCyclesPerLaunch / 1.98);
    r.end_ns = r.start_ns + 9000000000ull;
    r.correlation_id = 1 + l;
    r.stream_id = 7;
    r.grid[0] = warps / 8;
    r.block[0] = 256;
    r.name = "_Z10gemm_tiledPKfS0_Pfi";
    smprof::arena::KernelRecord& m = matched_records[l];
    m.grid_id = r.grid_id;
    m.start_ns = r.start_ns;
    m.end_ns = r.end_ns;
    m.correlation_id = r.correlation_id;
    m.flags = wire::kRecordWanted;
  }

  // The injector: a scan of the read-back, then the messages it ships.
  smprof::injector::ChunkScanner scan(kChunk, used);
  std::vector<uint32_t> used_bytes;
  used_bytes.reserve(used);
  const double t_scan = Seconds([&] { scan.Add(arena.data(), used, &used_bytes); });
  // The same split over as many threads as a harvest scans a piece on.
  const unsigned scan_threads = smprof::injector::HalfOfTheCores();
  double t_scan_split = 0;
  {
    smprof::injector::ChunkScanner split(kChunk, used);
    std::vector<uint32_t> split_used;
    t_scan_split = Seconds([&] { split.Add(arena.data(), used, &split_used, scan_threads); });
  }
  MemorySink shipped;  // room for everything: the bench measures the shipper, not vector growth
  shipped.bytes.reserve(arena.size() + (64u << 20));
  shipped.offsets.reserve(arena.size() / smprof::injector::Shipper::kChunkMessageBytes + 1024);
  const double t_ship = Seconds([&] { Ship(&shipped, records, scan, used_bytes, arena, used); });
  if (scan.events() != static_cast<uint64_t>(events)) {
    std::fprintf(stderr, "FAILED: the scan found %llu of %.0f events\n",
                 static_cast<unsigned long long>(scan.events()), events);
    return 1;
  }

  // From here on the process keeps freed memory as smprof-collector does
  // (heap_policy.h); the injector's rows above ran with the allocator's
  // defaults, as the injector does in the application.
  if (!smprof::RetainFreedMemory()) std::fprintf(stderr, "note: the allocator keeps its default thresholds\n");

  // The collector's stages alone (the assembler runs them, on one thread each here).
  std::vector<WarpSegment> segments;
  DecodeStats decode;
  const double t_decode = Seconds([&] { smprof::arena::DecodeChunks(arena.data(), used, kChunk, &segments, &decode); });
  const double t_map = Seconds([&] { smprof::arena::MapEventClocks(&segments, 1.98); });
  int64_t offset = 0;
  const double t_offset = Seconds([&] { offset = smprof::arena::EstimateClockOffset(segments, matched_records, 0); });
  MatchStats match;
  std::vector<Launch> launches;
  const double t_match =
      Seconds([&] { launches = smprof::arena::MatchLaunches(&segments, matched_records, offset, &match); });
  if (decode.events != static_cast<uint64_t>(events) || match.events != static_cast<uint64_t>(events)) {
    std::fprintf(stderr, "FAILED: decoded %llu and matched %llu of %.0f events\n",
                 static_cast<unsigned long long>(decode.events), static_cast<unsigned long long>(match.events), events);
    return 1;
  }

  // The messages through a shared-memory ring (the consumer only counts).
  const std::string run = "bench-" + std::to_string(getpid());
  std::string error;
  struct Connection {
    std::unique_ptr<transport::Consumer> consumer;
    std::unique_ptr<transport::Producer> producer;
  };
  const auto connect = [&](const std::string& id, const transport::ProducerOptions& po) {
    Connection c;
    c.consumer = transport::Consumer::Create(id, {}, &error);
    if (c.consumer) c.producer = transport::Producer::Attach(id, po, &error);
    if (!c.producer) {
      std::fprintf(stderr, "FAILED: %s\n", error.c_str());
      std::exit(1);
    }
    return c;
  };
  // Every framed message, in order, on a thread of its own (join it).
  const auto start_sending = [&](transport::Producer& producer) {
    return std::thread([&] {
      for (size_t i = 0; i < shipped.offsets.size(); ++i) {
        const size_t end = i + 1 < shipped.offsets.size() ? shipped.offsets[i + 1] : shipped.bytes.size();
        producer.Send(shipped.bytes.data() + shipped.offsets[i], static_cast<uint32_t>(end - shipped.offsets[i]), 0);
      }
    });
  };
  const auto expect_no_drops = [](const transport::Producer& producer) {
    const transport::ProducerStats ps = producer.stats();
    if (ps.messages_dropped != 0) {
      std::fprintf(stderr, "FAILED: the ring dropped %llu messages\n",
                   static_cast<unsigned long long>(ps.messages_dropped));
      std::exit(1);
    }
  };
  auto ring_seconds = [&](const std::function<void(const uint8_t*, uint32_t)>& handle) {
    transport::ProducerOptions po;
    po.ring_bytes = 64u << 20;
    Connection c = connect(run, po);
    uint64_t delivered = 0;
    const double s = Seconds([&] {
      std::thread sender = start_sending(*c.producer);
      while (delivered < shipped.offsets.size()) {
        delivered += c.consumer->Poll(
            [&](const transport::ProducerInfo&, const uint8_t* data, uint32_t size) { handle(data, size); });
      }
      sender.join();
    });
    expect_no_drops(*c.producer);
    return s;
  };
  const double t_ring = ring_seconds([](const uint8_t*, uint32_t) {});

  // The same through the collector's intake, which copies what it reads
  // into its blocks (fresh memory, as in a run that stages gigabytes) for a
  // processing thread that only releases it; the ring at smprof's default
  // size, warmed by one pass first.
  const auto intake_seconds = [&] {
    Connection c = connect(run + "-intake", {});
    smprof::Intake intake(*c.consumer, smprof::Intake::DefaultBudget());
    const auto pass = [&] {
      std::thread sender = start_sending(*c.producer);
      size_t delivered = 0;
      std::deque<smprof::Intake::Item> batch;
      while (delivered < shipped.offsets.size()) {
        intake.Pop(&batch, std::chrono::milliseconds(10));
        for (const auto& item : batch) {
          delivered += item.end ? 0 : 1;
          intake.Release(item);
        }
        batch.clear();
      }
      sender.join();
    };
    pass();
    const double s = Seconds(pass);
    expect_no_drops(*c.producer);
    return s;
  };
  const double t_intake = intake_seconds();

  // The collector's work: every message, then Finish (which, with stage
  // threads, waits for them to catch up), in one thread or with the builder,
  // the trace writer and the statistics on threads of their own
  // (message_pipe.h, async_sink.h), each thread's busy time said.
  const std::string trace = "/tmp/smprof-bench-host-pipeline-" + std::to_string(getpid()) + ".pftrace";
  const transport::ProducerInfo info{0, 4242};
  using SinkThreads = smprof::CollectorOptions::SinkThreads;
  smprof::Collector::StageTimes stages;  // of the run with stage threads
  const auto collect = [&](SinkThreads threads, double* handle_seconds, double* finish_seconds) {
    auto collector = OpenCollector(trace, threads);
    *handle_seconds = Seconds([&] {
      for (size_t i = 0; i < shipped.offsets.size(); ++i) {
        const size_t end = i + 1 < shipped.offsets.size() ? shipped.offsets[i + 1] : shipped.bytes.size();
        collector->HandleMessage(info, shipped.bytes.data() + shipped.offsets[i],
                                 static_cast<uint32_t>(end - shipped.offsets[i]));
      }
      collector->HandleProducerEnd(info, true);
    });
    smprof::CollectorSummary summary;
    *finish_seconds = Seconds([&] { summary = collector->Finish(); });
    if (threads == SinkThreads::kOn) stages = collector->stage_times();
    if (!summary.trace_ok || summary.events != static_cast<uint64_t>(events)) {
      std::fprintf(stderr, "FAILED: the collector wrote %llu of %.0f events (%s)\n",
                   static_cast<unsigned long long>(summary.events), events, summary.trace_error.c_str());
      std::exit(1);
    }
  };
  double t_collect = 0, t_finish = 0, t_collect_async = 0, t_finish_async = 0;
  collect(SinkThreads::kOff, &t_collect, &t_finish);
  collect(SinkThreads::kOn, &t_collect_async, &t_finish_async);

  // Shipping and collecting as they run: a producer thread, the collector's thread.
  const auto pipe = [&](SinkThreads threads) {
    auto piped = OpenCollector(trace, threads);
    double t = ring_seconds([&](const uint8_t* data, uint32_t size) { piped->HandleMessage(info, data, size); });
    piped->HandleProducerEnd(info, true);
    t += Seconds([&] { piped->Finish(); });
    return t;
  };
  const double t_pipe = pipe(SinkThreads::kOff);
  const double t_pipe_async = pipe(SinkThreads::kOn);
  std::remove(trace.c_str());
  for (const char* suffix : {".stats.json", ".stats.csv"}) std::remove((trace + suffix).c_str());

  std::printf(
      "host pipeline, %u launches x %u warps x %u events = %.0f events (%u chunks of %u bytes, %.1f MB shipped)\n",
      launch_count, warps, per_warp, events, used, kChunk, shipped.bytes.size() / 1e6);
  std::printf("%-44s %10s %10s %12s\n", "stage (one thread each)", "ms", "ns/event", "M events/s");
  const Row rows[] = {{"injector: ChunkScanner", t_scan},
                      {"injector: ChunkScanner, split (below)", t_scan_split},
                      {"injector: ship (Shipper into memory)", t_ship},
                      {"transport: ring, consumer idle (2 threads)", t_ring},
                      {"transport: ring -> intake blocks (3 threads)", t_intake},
                      {"collector: DecodeChunks", t_decode},
                      {"collector: MapEventClocks", t_map},
                      {"collector: EstimateClockOffset", t_offset},
                      {"collector: MatchLaunches", t_match},
                      {"collector: HandleMessage", t_collect},
                      {"collector: Finish", t_finish},
                      {"collector: both", t_collect + t_finish},
                      {"collector, stage threads (4): HandleMessage", t_collect_async},
                      {"  its builder thread, busy", stages.builder},
                      {"  its trace writer thread, busy", stages.sinks.size() > 0 ? stages.sinks[0] : 0},
                      {"  its statistics thread, busy", stages.sinks.size() > 1 ? stages.sinks[1] : 0},
                      {"collector, stage threads (4): both", t_collect_async + t_finish_async},
                      {"ship -> ring -> collector (2 threads)", t_pipe},
                      {"ship -> ring -> collector, stage threads (5)", t_pipe_async}};
  for (const Row& r : rows) {
    std::printf("%-44s %10.2f %10.1f %12.1f\n", r.name, r.seconds * 1e3, r.seconds * 1e9 / events,
                events / r.seconds / 1e6);
  }
  std::printf("(stage threads: the assembler waited for the builder %llu times, the builder for a sink %llu times)\n",
              static_cast<unsigned long long>(stages.builder_waits),
              static_cast<unsigned long long>(stages.sink_waits));
  std::printf("(the scan split over %u threads, as a harvest thread splits a piece of %llu KiB or more)\n",
              scan_threads, static_cast<unsigned long long>(smprof::injector::ChunkScanner::kBytesPerThread >> 10));
  const double injector = t_scan + t_ship;
  std::printf("%-44s %10.2f %10.1f %12.1f\n", "injector total (one harvest thread)", injector * 1e3,
              injector * 1e9 / events, events / injector / 1e6);
  return 0;
}
