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
// Build ranks each anchor's neighbours once by that difference, keeping only
// those that can ever win (within rounding of beating the nearest anchor by
// 0 to kMaxTickNs), and an event computes the exact estimate only of the
// neighbours that could still be the largest: usually one or two
// multiplications instead of up to 33. The result is the same as evaluating
// every neighbour (tests/unit/arena_decoder_test.cc). Build's ranking costs
// about 33 multiplications per anchor (per chunk), and 16 bytes per neighbour
// kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace smprof::arena {

class ClockMap {
 public:
  // `fallback_cycles_per_ns`: the SM clock in GHz, used where an SM's anchors
  // span too little time to fit its own rate.
  explicit ClockMap(double fallback_cycles_per_ns) : fallback_(fallback_cycles_per_ns) {}

  void AddAnchor(uint16_t sm, uint64_t clock, uint64_t time_ns);
  // Sorts the anchors, fits each SM's rate and ranks each anchor's
  // neighbours, the SMs split over up to `threads` threads; call once, after
  // the last AddAnchor.
  void Build(unsigned threads = 1);
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
    const void* sm_;  // ClockMap::Sm, nullptr when unknown
    size_t nearest_ = SIZE_MAX;
  };
  // The rate used for `sm` (cycles per ns); the fallback for unknown SMs.
  double CyclesPerNs(uint16_t sm) const;

  static constexpr uint64_t kMinFitSpanNs = 20000;
  static constexpr size_t kNeighbours = 16;
  static constexpr double kNeighbourSpanNs = 10000;
  static constexpr int64_t kMaxTickNs = 1000;  // the coarsest %globaltimer step seen on NVIDIA GPUs
  // How far an estimate may be from base + difference: one ns of rounding, doubled.
  static constexpr double kRoundingMarginNs = 2.0;

 private:
  struct Anchor {
    uint64_t clock;
    uint64_t time_ns;
  };
  // A neighbour that may give a larger estimate than the nearest anchor: its
  // clock (inline: most rivals of a clock are out of its span), its estimate
  // minus the nearest's (ns, within one of rounding) and its index.
  struct Rival {
    uint64_t clock;
    float difference;
    uint32_t anchor;
  };
  struct Sm {
    std::vector<Anchor> anchors;  // by clock after Build
    double cycles_per_ns = 0;
    double ns_per_cycle = 0;  // its inverse
    // Anchor i's rivals, largest difference first: rivals[first_rival[i] ..
    // first_rival[i + 1]).
    std::vector<uint32_t> first_rival;
    std::vector<Rival> rivals;
  };
  friend class Cursor;
  static void BuildSm(Sm* sm, double fallback);
  // The nearest anchor at or before `clock` (the first if none is), searched
  // from `hint` when it is one.
  static size_t Nearest(const Sm& sm, uint64_t clock, size_t hint);
  static uint64_t Estimate(const Sm& sm, size_t nearest, uint64_t clock);
  // The exact estimate of `clock` through anchor `a` (ns, may be negative).
  static int64_t Through(const Anchor& a, uint64_t clock, double ns_per_cycle);
  double fallback_;
  std::vector<Sm> sms_;  // by SM id (ids are small: a GPU's SM count); no anchors: unknown
};

}  // namespace smprof::arena
