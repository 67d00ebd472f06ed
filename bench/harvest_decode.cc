// Benchmark: the host side of one harvest after the copy, stage by stage, on
// one core (issue 8: "decode" took 90 % of the example's harvest time on the
// H100). A synthetic arena shaped like one launch of smprof_example_gemm
// 1024: 2048 warps over 132 SMs, 258 events each (load/compute ranges and an
// instant), in 1 KiB chunks (61 events each) claimed as warps fill them,
// with clock anchors at 1.98 GHz on a 32 ns %globaltimer tick. Each stage is the injector's own function
// (injector/harvest.h), then the name lookup the injector does per event
// (a hash map from name address to name), then what shipping copies (one
// WireEvent per event). Prints ns per event per stage.
//   smprof_bench_harvest_decode [warps (default 2048)] [events per warp (default 258)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "injector/harvest.h"
#include "smprof/wire.h"

namespace {

using smprof::injector::DecodeChunks;
using smprof::injector::DecodeStats;
using smprof::injector::KernelRecord;
using smprof::injector::Launch;
using smprof::injector::MatchStats;
using smprof::injector::WarpSegment;
namespace wire = smprof::wire;

constexpr uint32_t kChunk = 1024;
constexpr uint32_t kSlots = kChunk / 16;
constexpr uint64_t kGrid = 77;
constexpr uint64_t kNameBase = 0x7f0000001000ull;

template <typename F>
double Seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The arena: warps claim chunks in an interleaved order, as warps of many
// SMs do; each chunk's anchor is its claim time.
std::vector<uint8_t> BuildArena(uint32_t warps, uint32_t events_per_warp, uint32_t* chunks_used) {
  const uint32_t per_chunk = kSlots - wire::kChunkHeaderSlots;
  const uint32_t chunks_per_warp = (events_per_warp + per_chunk - 1) / per_chunk;
  const uint32_t total = warps * chunks_per_warp;
  std::vector<uint8_t> bytes(static_cast<size_t>(total) * kChunk, 0);
  uint32_t next = 0;
  for (uint32_t round = 0; round < chunks_per_warp; ++round) {
    for (uint32_t w = 0; w < warps; ++w) {
      const uint32_t c = next++;
      const uint16_t sm = static_cast<uint16_t>(w / 16 % 132);
      const uint64_t clock0 = 1000000ull + w * 37ull + round * per_chunk * 1300ull;
      wire::ChunkHeader h{};
      h.grid_id = kGrid;
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
                            static_cast<uint32_t>(clock >> 32 << wire::kEventClockShift) | kind,
                            static_cast<uint32_t>(name), 0};
        std::memcpy(bytes.data() + static_cast<size_t>(c) * kChunk + (wire::kChunkHeaderSlots + i) * 16, &e,
                    sizeof(e));
      }
    }
  }
  *chunks_used = total;
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t warps = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 2048;
  const uint32_t per_warp = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 258;
  uint32_t used = 0;
  const std::vector<uint8_t> arena = BuildArena(warps, per_warp, &used);
  const double events = static_cast<double>(warps) * per_warp;

  std::vector<WarpSegment> segments;
  DecodeStats decode;
  const double t_decode = Seconds([&] { DecodeChunks(arena.data(), used, kChunk, &segments, &decode); });
  const double t_map = Seconds([&] { smprof::injector::MapEventClocks(&segments, 1.98); });
  std::vector<KernelRecord> records(1);
  records[0].grid_id = kGrid;
  records[0].start_ns = 5000000000ull;
  records[0].end_ns = 5000000000ull + 10000000000ull;
  records[0].correlation_id = 1;
  records[0].name = "_Z10gemm_tiledPKfS0_Pfi";
  int64_t offset = 0;
  const double t_offset =
      Seconds([&] { offset = smprof::injector::EstimateClockOffset(segments, records, 0); });
  MatchStats match;
  std::vector<Launch> launches;
  // Selection as the injector answers it: a lookup by mangled name under a
  // mutex (and, there, the launch's API call).
  std::mutex selection_mu;
  const std::unordered_map<std::string, bool> selection = {{records[0].name, true}};
  const double t_match = Seconds([&] {
    launches = smprof::injector::MatchLaunches(
        segments, records,
        [&](const smprof::injector::KernelRecord& r) {
          std::lock_guard<std::mutex> lock(selection_mu);
          return selection.at(r.name);
        },
        offset, &match);
  });
  std::unordered_map<uint64_t, std::string> names;
  const double t_names = Seconds([&] {
    for (const Launch& l : launches) {
      for (const auto& w : l.warps) {
        for (const auto& e : w.events) {
          const uint64_t address = w.segment->name_base + static_cast<int64_t>(e.name_offset);
          if (!names.count(address)) names.emplace(address, "name");
        }
      }
    }
  });
  std::vector<wire::WireEvent> out;
  const double t_ship = Seconds([&] {
    for (const Launch& l : launches) {
      for (const auto& w : l.warps) {
        for (const auto& e : w.events) {
          out.push_back({e.time_ns, static_cast<uint32_t>(e.clock), 1, e.info & 0xfu, e.value});
        }
      }
    }
  });
  if (decode.events != static_cast<uint64_t>(events) || match.events != static_cast<uint64_t>(events)) {
    std::fprintf(stderr, "FAILED: decoded %llu and matched %llu of %.0f events\n",
                 static_cast<unsigned long long>(decode.events), static_cast<unsigned long long>(match.events),
                 events);
    return 1;
  }
  std::printf("harvest host stages, one core: %u warps x %u events = %.0f events in %u chunks of %u bytes\n", warps,
              per_warp, events, used, kChunk);
  std::printf("%-34s %10s %12s\n", "stage", "ms", "ns/event");
  const struct {
    const char* name;
    double s;
  } rows[] = {{"DecodeChunks", t_decode},        {"MapEventClocks", t_map},
              {"EstimateClockOffset", t_offset}, {"MatchLaunches", t_match},
              {"name lookup per event", t_names}, {"WireEvent copy (shipping)", t_ship}};
  double total = 0;
  for (const auto& r : rows) {
    std::printf("%-34s %10.2f %12.1f\n", r.name, r.s * 1e3, r.s * 1e9 / events);
    total += r.s;
  }
  std::printf("%-34s %10.2f %12.1f\n", "total", total * 1e3, total * 1e9 / events);
  return 0;
}
