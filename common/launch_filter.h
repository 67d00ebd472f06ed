// Launch selection: SMPROF_LAUNCHES / smprof-run --launches.
//
// A spec is a comma-separated list of items PATTERN:RANGES. PATTERN is a
// kernel-name glob exactly as in SMPROF_KERNELS (kernel_filter.h: '*', '?',
// '[...]', '\' escapes, matched against the full signature, the qualified
// name and the base name), without '!'. RANGES is one or more launch ranges
// joined by '+': N (the Nth launch), N-M (N to M inclusive) or N- (N and
// every later one). Examples: 'gemm*:10-12', 'attn*:0,gemm*:100-',
// 'gemm*:0-2+10-12' (the same as 'gemm*:0-2,gemm*:10-12').
//
// Indices are 0-based. Each item counts the launches of all the kernels its
// pattern matches together, in the order the caller takes them (the order the
// application issues them), like ncu's --launch-skip/--launch-count. A kernel
// that no item matches is not limited; a launch of a kernel that several items
// match is taken when it is in range for any of them, each item counting its
// own launches. An empty spec limits nothing.
//
// Design: parsing and matching (LaunchFilter, immutable once parsed, read by
// any thread) are kept apart from counting (LaunchCounters, one atomic counter
// per item), so the launch hot path is one relaxed fetch_add per matching item
// plus a scan of that item's few sorted ranges: no lock, no allocation. The
// caller matches names once per kernel (ItemsFor) and keeps the item list.
//
// Used by the injector: no exceptions thrown on purpose, no global state.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/kernel_filter.h"

namespace smprof {

class LaunchCounters;

class LaunchFilter {
 public:
  // Returns nullopt and a one-line *error naming the bad item (or pattern)
  // and the fix: empty item, missing ':RANGES', a number that is not one,
  // reversed range, empty pattern, '!' pattern, malformed glob.
  static std::optional<LaunchFilter> Parse(std::string_view spec, std::string* error);

  // Limits nothing.
  LaunchFilter() = default;

  bool limits_nothing() const { return items_.empty(); }
  size_t item_count() const { return items_.size(); }
  const std::string& spec() const { return spec_; }

  // The indices of the items whose pattern matches the kernel, ascending;
  // empty: the kernel is not limited by this filter. Call once per kernel
  // and keep the result (it matches globs).
  std::vector<uint32_t> ItemsFor(std::string_view demangled_name) const;

  // One launch of a kernel whose ItemsFor() is `items`: takes the next launch
  // index of every item in `items` and says whether the launch is in range for
  // any of them. Thread-safe and lock-free; `counters` must have been made for
  // this filter. An empty `items` (a kernel not limited) returns true and
  // counts nothing. Under concurrent launches each item still hands out every
  // index exactly once (so each takes exactly its ranges' launches); with
  // several items per kernel, which launch gets which index of each item
  // follows the threads' order.
  bool Take(const std::vector<uint32_t>& items, LaunchCounters& counters) const;

  // True when no later launch of the kernel can be in range: every item in
  // `items` has only closed ranges and has counted past the last of them.
  // False for an empty `items` (never limited). Thread-safe; a Take racing
  // with it may already have been counted or not.
  bool Exhausted(const std::vector<uint32_t>& items, const LaunchCounters& counters) const;

  // Launch indices an item takes, inclusive; an open range ends at kOpenEnd.
  struct Range {
    uint64_t first = 0;
    uint64_t last = 0;
    bool operator==(const Range& o) const { return first == o.first && last == o.last; }
  };
  static constexpr uint64_t kOpenEnd = UINT64_MAX;
  // The item's ranges, sorted, overlapping and adjacent ones merged (tests,
  // logs). `item` < item_count().
  const std::vector<Range>& RangesOf(uint32_t item) const { return items_[item].ranges; }
  const std::string& PatternOf(uint32_t item) const { return items_[item].pattern; }

 private:
  struct Item {
    std::string pattern;        // as written (escapes kept), trimmed
    KernelFilter match;         // the pattern alone: the matching of SMPROF_KERNELS
    std::vector<Range> ranges;  // sorted, disjoint, not adjacent
    uint64_t end = 0;           // first index never in range again; kOpenEnd: never
  };
  std::string spec_;
  std::vector<Item> items_;
};

// The launch counts of one filter's items: one atomic counter per item, each
// on its own cache line so that kernels of different items launched from
// different threads do not share one. Not copyable or movable (atomics):
// make it once next to the filter it counts for.
class LaunchCounters {
 public:
  explicit LaunchCounters(const LaunchFilter& filter);
  LaunchCounters(const LaunchCounters&) = delete;
  LaunchCounters& operator=(const LaunchCounters&) = delete;

  size_t size() const { return size_; }
  // Launches item `item` has counted so far (0 for an item out of range).
  uint64_t taken(uint32_t item) const;

 private:
  friend class LaunchFilter;
  struct alignas(64) Counter {
    std::atomic<uint64_t> next{0};
  };
  size_t size_ = 0;
  std::unique_ptr<Counter[]> counters_;
};

}  // namespace smprof
