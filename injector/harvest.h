// Harvest: from raw arena bytes and CUPTI kernel records to profiled launches.
//
// Pure functions, no CUDA: the injector copies the used chunks of an arena to
// host memory (see context.cc) and hands them here; tests hand in bytes they
// wrote themselves.
//
//   DecodeChunks    arena chunks -> WarpSegments (one per chunk), validated:
//                   a chunk without kChunkMagic, an event with an unknown kind
//                   or a zero timestamp before the end of the chunk is counted
//                   as malformed and skipped, never trusted.
//   EstimateClockOffset
//                   %globaltimer and CUPTI's timestamps share an epoch but not
//                   an origin (CUPTI maps GPU time onto CLOCK_REALTIME; ~100 us
//                   apart on H200). The probe kernel's offset, clamped into the
//                   range every unambiguous launch allows (its events must lie
//                   inside its CUPTI span), maps event times onto CUPTI's clock.
//   MatchLaunches   WarpSegments + kernel activity records -> Launches.
//                   A chunk names its launch by %gridid, which graph replays
//                   reuse, so each *event* is assigned to the record of that
//                   grid id whose [start, end] contains its timestamp (the
//                   nearest one otherwise). Grid ids without any record become
//                   synthetic launches flagged kLaunchNoActivity.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "smprof/wire.h"

namespace smprof::injector {

struct WarpSegment {
  uint64_t grid_id = 0;
  uint64_t anchor = 0;  // module g_arena address: names are anchor + offset
  uint32_t block[3] = {0, 0, 0};
  uint16_t sm = 0;
  uint16_t warp = 0;
  std::vector<wire::Event> events;  // recording order
};

struct DecodeStats {
  uint64_t chunks = 0;
  uint64_t events = 0;
  uint64_t malformed_chunks = 0;
  uint64_t malformed_events = 0;
};

// `chunks` holds `num_chunks` chunks of `chunk_bytes` each (a power of two
// >= 64). Appends one segment per valid, non-empty chunk.
void DecodeChunks(const uint8_t* chunks, uint32_t num_chunks, uint32_t chunk_bytes,
                  std::vector<WarpSegment>* out, DecodeStats* stats);

// What CUPTI said about one kernel execution.
struct KernelRecord {
  uint64_t grid_id = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t correlation_id = 0;
  uint64_t stream_id = 0;
  uint32_t device = 0;
  uint32_t context_id = 0;
  uint32_t graph_id = 0;
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t dynamic_smem = 0;
  uint32_t static_smem = 0;
  uint32_t registers = 0;
  std::string name;  // mangled, as CUPTI reports it
};

struct LaunchEvents {
  const WarpSegment* segment = nullptr;
  std::vector<wire::Event> events;
};

struct Launch {
  KernelRecord record;
  uint32_t flags = 0;  // wire::LaunchFlags
  std::vector<LaunchEvents> warps;  // grouped by segment, recording order kept
  uint64_t event_count = 0;
};

struct MatchStats {
  uint64_t events = 0;           // events in returned launches
  uint64_t filtered = 0;         // events of kernels `selected` rejected
  uint64_t unattributed = 0;     // events under synthetic (no record) launches
};

// The offset to add to event times, given an estimate (from the probe kernel)
// and the constraint from each launch whose grid id has a single record.
int64_t EstimateClockOffset(const std::vector<WarpSegment>& segments, const std::vector<KernelRecord>& records,
                            int64_t estimate);

// Returns launches sorted by start time, with event times moved onto CUPTI's
// clock by `clock_offset`: each record of a selected kernel that received
// events, and one synthetic launch per grid id that has events but no record.
// Launches that recorded nothing are left out. `selected(mangled_name)`
// decides whether a kernel's events are kept (others count as filtered).
std::vector<Launch> MatchLaunches(const std::vector<WarpSegment>& segments,
                                  const std::vector<KernelRecord>& records,
                                  const std::function<bool(const std::string&)>& selected,
                                  int64_t clock_offset, MatchStats* stats);

}  // namespace smprof::injector
