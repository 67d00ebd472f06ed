// Launch matching: warp segments and CUPTI's kernel records in, profiled
// launches out.
//
//   EstimateClockOffset
//                   %globaltimer and CUPTI's timestamps share an epoch but not
//                   an origin (CUPTI maps GPU time onto CLOCK_REALTIME; ~100 us
//                   apart on H200). The probe kernel's offset, clamped into the
//                   range every unambiguous launch allows (its events must lie
//                   inside its CUPTI span), maps event times onto CUPTI's clock.
//   MatchLaunches   WarpSegments + kernel records -> Launches. A chunk names
//                   its launch by %gridid, which graph replays reuse, so each
//                   *event* is assigned to the record of that grid id whose
//                   [start, end] contains its timestamp (the nearest one
//                   otherwise). Grid ids without any record become synthetic
//                   launches flagged kLaunchNoActivity. The chunks of one warp
//                   (a profiling context's and the shared-memory cursor's,
//                   several when a warp fills more than one) are merged into one
//                   event list in %clock64 order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector/arena_decoder.h"
#include "smprof/wire.h"

namespace smprof::arena {

// What CUPTI said about one kernel execution, and what the injector knew of
// its launch (wire::KernelRecordEntry: its kernel, whether it was profiled,
// its API call), with where it ran.
struct KernelRecord : wire::KernelRecordEntry {
  KernelRecord() : wire::KernelRecordEntry{} {}
  uint32_t device = 0;
  uint32_t context_id = 0;
  // Profiled (wire::kRecordWanted): its events are kept, else filtered.
  bool wanted() const { return (flags & wire::kRecordWanted) != 0; }
  // Not CUPTI's (wire::kRecordRunning): the kernel was read while running.
  bool running() const { return (flags & wire::kRecordRunning) != 0; }
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
  std::vector<LaunchEvents> warps;  // one per warp
  uint64_t event_count = 0;
};

struct MatchStats {
  uint64_t events = 0;        // events in returned launches
  uint64_t filtered = 0;      // events of records that are not wanted
  uint64_t unattributed = 0;  // events under synthetic (no record) launches
};

// The offset to add to event times, given an estimate (from the probe kernel)
// and the constraint from each launch whose grid id has a single record.
int64_t EstimateClockOffset(const std::vector<WarpSegment>& segments, const std::vector<KernelRecord>& records,
                            int64_t estimate);

// Returns launches sorted by start time, with event times moved onto CUPTI's
// clock by `clock_offset`: each wanted record that received events, and one
// synthetic launch per grid id that has events but no record. Launches that
// recorded nothing are left out. The events of the segments placed in
// launches are moved there (their `events` are left empty; the segments stay
// the warps' identities). Events of records that are not wanted count as
// filtered.
//
// CUPTI delivers records late at times: with `unmatched` set, segments whose
// grid id has no record are put there (times not moved) instead of becoming
// synthetic launches, for the caller to match at a later harvest; `unused`
// receives the indexes of records that received no event (their events may
// come with a later harvest's segments).
//
// The chunks of a launch's warps are merged, and their times moved, on up to
// `threads` threads (the calling one and threads started for the call) when
// the launch has at least kEventsPerMergeThread events per thread.
inline constexpr uint64_t kEventsPerMergeThread = uint64_t{1} << 20;
std::vector<Launch> MatchLaunches(std::vector<WarpSegment>* segments, const std::vector<KernelRecord>& records,
                                  int64_t clock_offset, MatchStats* stats,
                                  std::vector<const WarpSegment*>* unmatched = nullptr,
                                  std::vector<size_t>* unused = nullptr, unsigned threads = 1);

}  // namespace smprof::arena
