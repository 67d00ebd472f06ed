// AsyncMatcher: one launch's ASYNC_BEGIN/ASYNC_END events in, its async
// spans out (SMPROF_ASYNC_BEGIN on one warp, SMPROF_ASYNC_END with the same
// name and token on another warp, or the same, of the block).
//
// Data flow: the trace builder adds each event as its warp's message comes
// (warps arrive one after another, in no time order), and matches them all
// when the launch ends: only then is every END known. Matching is per
// (block, name, token), in time order, a BEGIN before an END at the same
// time, then in order of arrival: an END closes the oldest span still open
// (FIFO: a token reused by every iteration of a pipeline closes its spans
// in turn). A BEGIN left open is unterminated and ends with the launch; an
// END that finds none open is an unmatched end, a span of length 0 with no
// begin warp. Spans come out sorted by begin time (ties: by block, name,
// token, then arrival).
//
// Invariants: at most kMaxAsyncEvents events are held per launch; Add
// refuses the rest and counts them (dropped()). Warps are given as their
// trace::WarpRecord, which must outlive Match.
//
// Cost: 40 bytes per event held; Match sorts them once (n log n) and makes
// one pass; nothing is allocated per event beyond the vector's growth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collector/trace_sink.h"

namespace smprof {

inline constexpr size_t kMaxAsyncEvents = size_t{1} << 22;

class AsyncMatcher {
 public:
  struct Span {
    uint32_t name_id = 0;
    uint32_t token = 0;
    uint32_t block[3] = {0, 0, 0};
    uint64_t begin_ns = 0, end_ns = 0;              // end_ns >= begin_ns
    const trace::WarpRecord* begin_warp = nullptr;  // nullptr: an unmatched end
    const trace::WarpRecord* end_warp = nullptr;    // nullptr: unterminated
  };

  // False when kMaxAsyncEvents are held already: the event is dropped (counted).
  bool Add(bool end, const trace::WarpRecord& warp, uint32_t name_id, uint32_t token, uint64_t ns);

  // Matches every event held into `out` (replaced), sorted by begin time;
  // unterminated spans end at `launch_end_ns` (not before they begin).
  // Forgets the events (dropped() stays).
  void Match(uint64_t launch_end_ns, std::vector<Span>* out);

  size_t held() const { return events_.size(); }
  uint64_t dropped() const { return dropped_; }
  uint64_t last_ns() const { return last_ns_; }  // latest event time added

 private:
  struct Event {
    uint64_t ns;
    const trace::WarpRecord* warp;
    uint32_t block[3];
    uint32_t name_id;
    uint32_t token;
    bool end;
  };

  std::vector<Event> events_;  // in order of arrival
  uint64_t dropped_ = 0;
  uint64_t last_ns_ = 0;
};

}  // namespace smprof
