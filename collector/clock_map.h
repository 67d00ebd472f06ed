// ClockMap: from an SM's %clock64 cycles to the GPU's %globaltimer nanoseconds.
//
// Events are stamped with %clock64, a per-SM cycle counter (cycle-exact
// durations; SMs' counters are not synchronised). Every chunk header carries an
// anchor: %clock64 and %globaltimer read back to back when the chunk was
// claimed. An event maps through the nearest anchor of its SM at or before it
// (the first anchor if none is): anchor time + cycles since the anchor / rate.
// The rate of an SM is fitted from its first and last anchors when they are
// at least kMinFitSpanNs apart (the SM clock changes with load and power), and
// is the measured (calibration kernel) or nominal clock rate otherwise. The
// result lags true time by at most the %globaltimer quantisation (one tick,
// 32 ns on Hopper), the same bound a %globaltimer stamp has, and by less
// where several anchors are near.
//
// Speed (the harvest maps every event): an anchor's estimate differs from the
// nearest anchor's by its time difference minus its cycle difference over
// the rate, give or take one ns of rounding, whatever the event's clock. So
// for each nearest anchor the neighbours are ranked once by that difference
// (Cursor keeps the ranking of the anchor it last used), and an event
// computes the exact estimate only of the neighbours that could still be the
// largest: usually one or two multiplications instead of up to 33. The result is
// the same as evaluating every neighbour (tests/unit/arena_decoder_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace smprof::arena {

class ClockMap {
 public:
  // `fallback_cycles_per_ns`: the SM clock in GHz, used where an SM's anchors
  // span too little time to fit its own rate.
  explicit ClockMap(double fallback_cycles_per_ns) : fallback_(fallback_cycles_per_ns) {}

  void AddAnchor(uint16_t sm, uint64_t clock, uint64_t time_ns);
  // Sorts the anchors and fits each SM's rate; call once, after the last AddAnchor.
  void Build();
  // `clock` of an event on `sm`, in %globaltimer ns. An SM without anchors
  // cannot be mapped: returns 0 (callers count such events as malformed).
  uint64_t ToNs(uint16_t sm, uint64_t clock) const;
  // The same result for a run of events of one SM (fastest when their clocks
  // increase, as within a chunk).
  class Cursor {
   public:
    Cursor(const ClockMap& map, uint16_t sm);
    uint64_t ToNs(uint64_t clock);

   private:
    const ClockMap& map_;
    const void* sm_;  // ClockMap::Sm, nullptr when unknown
    size_t nearest_ = SIZE_MAX;
    std::vector<std::pair<double, uint32_t>> ranked_;  // (difference, anchor index), largest first
  };
  // The rate used for `sm` (cycles per ns); the fallback for unknown SMs.
  double CyclesPerNs(uint16_t sm) const;

  static constexpr uint64_t kMinFitSpanNs = 20000;
  static constexpr size_t kNeighbours = 16;
  static constexpr double kNeighbourSpanNs = 10000;
  static constexpr int64_t kMaxTickNs = 1000;  // the coarsest %globaltimer step seen on NVIDIA GPUs

 private:
  struct Anchor {
    uint64_t clock;
    uint64_t time_ns;
  };
  struct Sm {
    std::vector<Anchor> anchors;  // by clock after Build
    double cycles_per_ns = 0;
    double ns_per_cycle = 0;  // its inverse
  };
  friend class Cursor;
  // The exact estimate of `clock` through anchor `a` (ns, may be negative).
  static int64_t Through(const Anchor& a, uint64_t clock, double ns_per_cycle);
  double fallback_;
  std::vector<Sm> sms_;  // by SM id (ids are small: a GPU's SM count); no anchors: unknown
};

}  // namespace smprof::arena
