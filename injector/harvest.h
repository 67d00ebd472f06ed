// Harvest: from raw arena bytes and CUPTI kernel records to profiled launches.
//
// Pure functions, no CUDA: the injector copies the used chunks of an arena to
// host memory (see context.cc) and hands them here; tests hand in bytes they
// wrote themselves.
//
//   DecodeChunks    arena chunks -> WarpSegments (one per chunk), validated:
//                   a chunk without kChunkMagic, or an event with a kind or
//                   flags its kind does not take (docs/device-api.md), is
//                   counted as malformed and skipped, never trusted. A wide
//                   value's continuation slot is folded into its event
//                   (value_high); one out of place is malformed. Unused
//                   (all-zero) slots are skipped wherever they are: a warp
//                   that raced a claim on a diverged path, or a wide event
//                   that did not fit its chunk, may leave one.
//   MapEventClocks  each event's %clock64 -> %globaltimer ns, through the
//                   anchors of the chunks of its SM (injector/clock_map.h).
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
//                   synthetic launches flagged kLaunchNoActivity. The chunks
//                   of one warp (a profiling context's and the shared-memory
//                   cursor's, several when a warp fills more than one) are
//                   merged into one event list in %clock64 order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "smprof/wire.h"

namespace smprof::injector {

// One event as the host carries it.
struct DecodedEvent {
  uint64_t time_ns = 0;  // set by MapEventClocks, moved onto CUPTI's clock by MatchLaunches
  uint64_t clock = 0;    // %clock64 (56 bits)
  int32_t name_offset = 0;
  uint32_t info = 0;  // wire::EventKind | wire::EventFlags
  uint32_t value = 0;
  uint32_t value_high = 0;  // bits 32-63 of a wide value (wire::kEventWideValue), from its continuation slot
};

struct WarpSegment {
  uint64_t grid_id = 0;
  uint64_t name_base = 0;  // module g_name_base address: names are name_base + offset
  uint32_t block[3] = {0, 0, 0};
  uint16_t sm = 0;
  uint16_t warp = 0;
  uint8_t hw_warp = 0;  // %warpid
  uint8_t flags = 0;    // wire::ChunkFlags
  uint16_t cluster = 0;  // wire::ChunkHeader::cluster (masked to kClusterShapeMask)
  uint64_t anchor_clock = 0;
  uint64_t anchor_time_ns = 0;
  uint64_t name_generation = 0;      // of its context's modules when it was read back (harvester.h)
  std::vector<DecodedEvent> events;  // recording order
};

struct DecodeStats {
  uint64_t chunks = 0;
  uint64_t events = 0;
  uint64_t empty_chunks = 0;  // claimed but never written: a header of zeros (see DecodeChunks)
  uint64_t malformed_chunks = 0;
  uint64_t malformed_events = 0;
};

namespace internal {
// Whether an event's kind and flags (Event::info bits 0-7) go together; a
// continuation (kEventValueHigh) is well formed only after its wide event.
bool WellFormedEvent(uint32_t kind_flags);
}  // namespace internal

// `chunks` holds `num_chunks` chunks of `chunk_bytes` each (a power of two
// >= 64). Appends one segment per valid, non-empty chunk. A chunk whose
// header is all zero is empty, not malformed: a Triton warp claims its first
// chunk at the kernel's start (python/smprof/triton/_marker_ptx.py) and may
// then reach no marker; the arena is zero wherever nothing was written.
void DecodeChunks(const uint8_t* chunks, uint32_t num_chunks, uint32_t chunk_bytes, std::vector<WarpSegment>* out,
                  DecodeStats* stats);

// Sets every event's time_ns from its clock and the anchors of all segments
// on its SM; `fallback_cycles_per_ns` is the SM clock in GHz (measured, or
// nominal), used where an SM's anchors span too little time to fit a rate.
void MapEventClocks(std::vector<WarpSegment>* segments, double fallback_cycles_per_ns);

// DecodeChunks then MapEventClocks with the work split over up to `threads`
// threads (this one and threads - 1 started for the call) when there are at
// least kChunksPerDecodeThread chunks per thread: the same segments, in the
// same order, with the same times. A 2 GB read-back holds ~130 M events,
// about 8 s of decoding on one thread; the last read-back of a run is
// decoded while the application waits to exit.
void DecodeAndMapClocks(const uint8_t* chunks, uint32_t num_chunks, uint32_t chunk_bytes, double fallback_cycles_per_ns,
                        unsigned threads, std::vector<WarpSegment>* out, DecodeStats* stats);
inline constexpr uint32_t kChunksPerDecodeThread = 16384;

// A quarter of the machine's cores, 1 to kMaxHarvestThreads: how many
// harvest threads decode read-backs at once, and how many threads one large
// read-back is split over.
inline constexpr unsigned kMaxHarvestThreads = 4;
unsigned QuarterOfTheCores();

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

// The events of one warp in one launch, in %clock64 order. `segment` is the
// warp's first chunk (its identity: block, warp, SM, name base).
struct LaunchEvents {
  const WarpSegment* segment = nullptr;
  std::vector<DecodedEvent> events;
  uint32_t chunks = 1;  // the chunks they were read from
};

struct Launch {
  KernelRecord record;
  uint32_t flags = 0;               // wire::LaunchFlags
  wire::HostCall call{};            // the API call that launched it (injector/host_calls.h); api kApiNone: unknown
  std::vector<LaunchEvents> warps;  // one per warp
  uint64_t event_count = 0;
};

struct MatchStats {
  uint64_t events = 0;        // events in returned launches
  uint64_t filtered = 0;      // events of kernels `selected` rejected
  uint64_t unattributed = 0;  // events under synthetic (no record) launches
};

// The offset to add to event times, given an estimate (from the probe kernel)
// and the constraint from each launch whose grid id has a single record.
int64_t EstimateClockOffset(const std::vector<WarpSegment>& segments, const std::vector<KernelRecord>& records,
                            int64_t estimate);

// Returns launches sorted by start time, with event times moved onto CUPTI's
// clock by `clock_offset`: each record of a selected kernel that received
// events, and one synthetic launch per grid id that has events but no record.
// Launches that recorded nothing are left out. The events of the segments
// placed in launches are moved there (their `events` are left empty; the
// segments stay the warps' identities). `selected(record)` decides
// whether a launch's events are kept (others count as filtered); it is asked
// once per record.
//
// CUPTI delivers records late at times: with `unmatched` set, segments whose
// grid id has no record are put there (times not moved) instead of becoming
// synthetic launches, for the caller to match at a later harvest; `unused`
// receives the indexes of records that received no event (their events may
// come with a later harvest's segments).
std::vector<Launch> MatchLaunches(std::vector<WarpSegment>* segments, const std::vector<KernelRecord>& records,
                                  const std::function<bool(const KernelRecord&)>& selected, int64_t clock_offset,
                                  MatchStats* stats, std::vector<const WarpSegment*>* unmatched = nullptr,
                                  std::vector<size_t>* unused = nullptr);

}  // namespace smprof::injector
