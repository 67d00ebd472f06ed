#include "collector/run_stats.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace smprof::stats {
namespace {

// Histogram buckets: values below 64 each have their own; above, 64 buckets
// per power of two [2^e, 2^(e+1)), each 2^(e-6) wide. A bucket's midpoint is
// then within half a width, 1/128 of its lower bound, of any value in it.
constexpr int kSubBits = 6;
constexpr uint64_t kSub = uint64_t{1} << kSubBits;

size_t BucketOf(uint64_t v) {
  if (v < kSub) return static_cast<size_t>(v);
  const int e = 63 - __builtin_clzll(v);
  const uint64_t m = v >> (e - kSubBits);  // in [64, 128)
  return static_cast<size_t>(kSub + static_cast<uint64_t>(e - kSubBits) * kSub + (m - kSub));
}

uint64_t BucketMidpoint(size_t bucket) {
  if (bucket < kSub) return bucket;
  const uint64_t e = (bucket - kSub) / kSub + kSubBits;
  const uint64_t m = kSub + (bucket - kSub) % kSub;
  const uint64_t width = uint64_t{1} << (e - kSubBits);
  return m * width + width / 2;
}

// One unit of one region: every sample while there are at most
// kExactSamples, then a histogram. count, total, min and max stay exact.
class Distribution {
 public:
  void Add(uint64_t v) {
    ++count_;
    total_ += v;
    min_ = std::min(min_, v);
    max_ = std::max(max_, v);
    if (count_ <= kExactSamples) {
      samples_.push_back(v);
      return;
    }
    if (!samples_.empty()) {
      for (uint64_t s : samples_) AddToHistogram(s);
      std::vector<uint64_t>().swap(samples_);
    }
    AddToHistogram(v);
  }

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ != 0 ? min_ : 0; }
  bool exact() const { return count_ <= kExactSamples; }

  // Sorts the samples kept (their order does not matter to anything else).
  Durations Summarize() {
    Durations d;
    d.total = total_;
    d.max = max_;
    if (count_ == 0) return d;
    d.mean = static_cast<double>(total_) / static_cast<double>(count_);
    std::sort(samples_.begin(), samples_.end());
    d.p50 = Percentile(50);
    d.p95 = Percentile(95);
    return d;
  }

 private:
  void AddToHistogram(uint64_t v) {
    const size_t b = BucketOf(v);
    if (b >= buckets_.size()) buckets_.resize(b + 1, 0);
    ++buckets_[b];
  }

  // Nearest rank: the sample of rank ceil(pct/100 * count) (1-based).
  uint64_t Percentile(uint64_t pct) const {
    const uint64_t rank = (pct * count_ + 99) / 100;
    if (exact()) return samples_[rank - 1];
    uint64_t seen = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      seen += buckets_[b];
      if (seen >= rank) return std::clamp(BucketMidpoint(b), min_, max_);
    }
    return max_;
  }

  uint64_t count_ = 0, total_ = 0, min_ = UINT64_MAX, max_ = 0;
  std::vector<uint64_t> samples_;  // while exact()
  std::vector<uint64_t> buckets_;  // once not
};

struct RegionAcc {
  uint64_t unterminated = 0;
  Distribution ns, cycles;
  std::unordered_map<uint64_t, uint64_t> sm_totals;  // SmKey -> ns
  uint64_t warps = 0, warp_sum = 0, warp_max = 0;
  WarpLocation warp_max_at;
};

struct InstantAcc {
  uint64_t count = 0, unmatched_ends = 0;
};

__extension__ using Int128 = __int128;

struct ValueAcc {
  uint64_t count = 0;
  int64_t min = 0, max = 0;
  Int128 sum = 0;  // exact: 2^64 values of 2^63 fit
  void Add(int64_t v) {
    min = count == 0 ? v : std::min(min, v);
    max = count == 0 ? v : std::max(max, v);
    ++count;
    sum += v;
  }
};

struct AsyncAcc {
  Distribution ns;
  uint64_t unterminated = 0, unmatched_ends = 0;
};

// A region's key: its name id, and whether it is a phase.
uint64_t RegionKey(uint32_t id, bool phase) { return uint64_t{id} | (uint64_t{phase} << 32); }

struct KernelAcc {
  uint64_t launches = 0, warps = 0, span_ns = 0, warp_time_ns = 0;
  std::map<uint64_t, RegionAcc> regions;  // by RegionKey
  std::map<uint32_t, InstantAcc> instants;
  std::map<std::pair<uint32_t, ValueStats::Source>, ValueAcc> values;  // by name id and source
  std::map<uint32_t, AsyncAcc> async;                                  // by name id
};

// A region as one warp saw it: the region's accumulator (found once per
// warp, not per slice) and the warp's total of its terminated slices.
struct WarpRegion {
  uint64_t key = 0;             // RegionKey
  RegionAcc* region = nullptr;  // in KernelAcc::regions (std::map: stable)
  bool terminated = false;      // a terminated slice was seen: the total counts
  uint64_t ns = 0;
};

struct WarpAcc {
  bool seen = false;  // OnWarp or a record came for it
  WarpLocation where;
  bool has_top = false;  // a top-level slice was seen
  uint64_t top_end = 0;  // the latest end of one
  uint32_t top_name = 0;
  std::vector<WarpRegion> regions;  // few: searched linearly
};

struct LaunchAcc {
  const std::string* kernel_name = nullptr;
  KernelAcc* kernel = nullptr;
  uint32_t pid = 0;
  uint64_t launch_id = 0;
  int32_t gpu = -1;
  uint64_t start_ns = 0, end_ns = 0;
  std::vector<WarpAcc> warps;  // by WarpRecord::index (dense: in order of arrival)
  uint64_t warp_count = 0;     // of them seen
};

uint64_t SmKey(int32_t gpu, uint32_t sm) { return (uint64_t{static_cast<uint32_t>(gpu)} << 32) | sm; }

using GapKey = std::tuple<uint64_t, uint64_t, const std::string&, uint32_t, uint64_t, uint32_t, uint32_t, uint32_t,
                          uint32_t, uint32_t>;

GapKey GapOrder(const Gap& g) {
  const WarpLocation& w = g.where;
  return GapKey(~g.length_ns, g.start_ns, g.kernel, w.pid, w.launch_id, w.sm, w.block[2], w.block[1], w.block[0],
                w.warp);
}

// Longer first, then earlier, then by place: a total order, so the gaps kept
// do not depend on the order of equal candidates.
bool GapBefore(const Gap& a, const Gap& b) { return GapOrder(a) < GapOrder(b); }

// Earlier first.
bool OpenRangeBefore(const OpenRange& a, const OpenRange& b) { return a.since_ns < b.since_ns; }

// Keeps in `heap` (at least one kept) the `kept` items that come first by
// `before`: a heap whose front is the one to drop next.
template <typename T, typename Before>
void KeepFirst(std::vector<T>* heap, size_t kept, T item, Before before) {
  if (heap->size() < kept) {
    heap->push_back(std::move(item));
  } else if (before(item, heap->front())) {
    std::pop_heap(heap->begin(), heap->end(), before);
    heap->back() = std::move(item);
  } else {
    return;
  }
  std::push_heap(heap->begin(), heap->end(), before);
}

}  // namespace

struct StatsBuilder::State {
  size_t gaps_kept = 0;
  std::map<std::string, uint32_t, std::less<>> name_ids;
  std::vector<std::string> names;
  std::map<std::string, KernelAcc, std::less<>> kernels;
  std::unordered_map<uint64_t, LaunchAcc> launches;  // open ones, by LaunchRecord::index
  LaunchAcc* last_launch = nullptr;                  // the latest looked up (records come launch by launch)
  uint64_t last_launch_index = 0;
  std::vector<uint32_t> id_of_key;                   // SliceRecord::name_key -> name id (kNoId: not yet)
  static constexpr uint32_t kNoId = UINT32_MAX;
  std::vector<Gap> gaps;                             // a heap whose front is the gap to drop first
  std::vector<OpenRange> open_ranges;                // a heap whose front is the latest
  uint64_t slices = 0, unterminated = 0, instants = 0, async_spans = 0;

  uint32_t NameId(std::string_view name) {
    auto it = name_ids.find(name);
    if (it != name_ids.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(names.size());
    names.emplace_back(name);
    name_ids.emplace(names.back(), id);
    return id;
  }

  // The name id of a record's name, by its key when it has one.
  uint32_t NameIdOf(std::string_view name, uint32_t key) {
    if (key == 0) return NameId(name);
    if (key < id_of_key.size() && id_of_key[key] != kNoId) return id_of_key[key];
    if (key >= id_of_key.size()) id_of_key.resize(static_cast<size_t>(key) + 1, kNoId);
    return id_of_key[key] = NameId(name);
  }

  LaunchAcc& Launch(const trace::LaunchRecord& launch) {
    if (last_launch == nullptr || last_launch_index != launch.index) {
      last_launch = &Open(launch);
      last_launch_index = launch.index;
    }
    last_launch->start_ns = launch.start_ns;
    last_launch->end_ns = launch.end_ns;
    return *last_launch;
  }

  // The launch's accumulator, created at its first record.
  LaunchAcc& Open(const trace::LaunchRecord& launch) {
    auto [it, added] = launches.try_emplace(launch.index);
    LaunchAcc& l = it->second;
    if (added) {
      const std::string& label = launch.label.empty() ? launch.kernel : launch.label;
      auto k = kernels.find(label);
      if (k == kernels.end()) k = kernels.emplace(label, KernelAcc()).first;
      l.kernel_name = &k->first;
      l.kernel = &k->second;
      l.pid = launch.pid;
      l.launch_id = launch.launch_id;
      l.gpu = launch.gpu;
    }
    return l;
  }

  void Forget(uint64_t launch_index) {
    launches.erase(launch_index);
    if (last_launch_index == launch_index) last_launch = nullptr;
  }

  WarpAcc& Warp(LaunchAcc& l, const trace::WarpRecord& warp) {
    if (warp.index >= l.warps.size()) l.warps.resize(static_cast<size_t>(warp.index) + 1);
    WarpAcc& acc = l.warps[warp.index];
    if (!acc.seen) {
      acc.seen = true;
      ++l.warp_count;
      WarpLocation& w = acc.where;
      w.pid = l.pid;
      w.launch_id = l.launch_id;
      w.gpu = l.gpu;
      w.sm = warp.sm;
      std::copy(warp.block, warp.block + 3, w.block);
      w.warp = warp.warp;
    }
    return acc;
  }

  WarpRegion& Region(LaunchAcc& l, WarpAcc& w, uint64_t key) {
    for (WarpRegion& r : w.regions) {
      if (r.key == key) return r;
    }
    w.regions.push_back({key, &l.kernel->regions[key], false, 0});
    return w.regions.back();
  }

  void OfferGap(const LaunchAcc& l, const WarpAcc& w, uint32_t after, uint64_t begin_ns) {
    if (gaps_kept == 0) return;
    const uint64_t length = begin_ns - w.top_end;
    if (gaps.size() == gaps_kept && length < gaps.front().length_ns) return;
    KeepFirst(&gaps, gaps_kept, Gap{*l.kernel_name, w.where, names[w.top_name], names[after], w.top_end, length},
              GapBefore);
  }

  void OfferOpenRange(const LaunchAcc& l, const WarpAcc& w, uint32_t region, uint64_t since_ns) {
    if (open_ranges.size() == kOpenRangesKept && since_ns >= open_ranges.front().since_ns) return;
    KeepFirst(&open_ranges, kOpenRangesKept, OpenRange{*l.kernel_name, w.where, names[region], since_ns},
              OpenRangeBefore);
  }

  // Folds a launch into its kernel: its span and its warps' totals.
  void Close(LaunchAcc& l) {
    KernelAcc& k = *l.kernel;
    const uint64_t span = l.end_ns > l.start_ns ? l.end_ns - l.start_ns : 0;
    ++k.launches;
    k.warps += l.warp_count;
    k.span_ns += span;
    k.warp_time_ns += span * l.warp_count;
    for (const WarpAcc& w : l.warps) {
      for (const WarpRegion& wr : w.regions) {
        if (!wr.terminated) continue;
        RegionAcc& r = *wr.region;
        r.sm_totals[SmKey(l.gpu, w.where.sm)] += wr.ns;
        ++r.warps;
        r.warp_sum += wr.ns;
        if (r.warps == 1 || wr.ns > r.warp_max) {
          r.warp_max = wr.ns;
          r.warp_max_at = w.where;
        }
      }
    }
  }
};

StatsBuilder::StatsBuilder(size_t gaps_kept) : state_(std::make_unique<State>()) { state_->gaps_kept = gaps_kept; }

StatsBuilder::~StatsBuilder() = default;

void StatsBuilder::OnLaunch(const trace::LaunchRecord& launch) { state_->Launch(launch); }

void StatsBuilder::OnWarp(const trace::LaunchRecord& launch, const trace::WarpRecord& warp) {
  State& s = *state_;
  s.Warp(s.Launch(launch), warp);
}

void StatsBuilder::OnSlice(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                           const trace::SliceRecord& slice) {
  State& s = *state_;
  LaunchAcc& l = s.Launch(launch);
  WarpAcc& w = s.Warp(l, warp);
  const uint32_t id = s.NameIdOf(slice.name, slice.name_key);
  WarpRegion& wr = s.Region(l, w, RegionKey(id, slice.phase));
  if (slice.value.present) l.kernel->values[{id, ValueStats::Source::kSlice}].Add(slice.value.value);
  RegionAcc& r = *wr.region;
  ++s.slices;
  if (slice.unterminated) {
    ++r.unterminated;
    ++s.unterminated;
    s.OfferOpenRange(l, w, id, slice.begin_ns);
  } else {
    const uint64_t ns = slice.end_ns > slice.begin_ns ? slice.end_ns - slice.begin_ns : 0;
    r.ns.Add(ns);
    r.cycles.Add(slice.cycles);
    wr.terminated = true;
    wr.ns += ns;  // into the SM's and the warp's totals when the launch closes
  }
  if (slice.lane == 0 && slice.depth == 0) {
    if (w.has_top && slice.begin_ns > w.top_end) s.OfferGap(l, w, id, slice.begin_ns);
    if (!w.has_top || slice.end_ns >= w.top_end) {
      w.top_end = slice.end_ns;
      w.top_name = id;
    }
    w.has_top = true;
  }
}

void StatsBuilder::OnInstant(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                             const trace::InstantRecord& instant) {
  State& s = *state_;
  LaunchAcc& l = s.Launch(launch);
  s.Warp(l, warp);
  const uint32_t id = s.NameIdOf(instant.name, instant.name_key);
  if (instant.value.counter) {  // a counter sample: not an instant
    l.kernel->values[{id, ValueStats::Source::kCounter}].Add(instant.value.value);
    return;
  }
  if (instant.value.present) l.kernel->values[{id, ValueStats::Source::kInstant}].Add(instant.value.value);
  InstantAcc& i = l.kernel->instants[id];
  ++i.count;
  if (instant.unmatched_end) ++i.unmatched_ends;
  ++s.instants;
}

void StatsBuilder::OnAsyncSpan(const trace::LaunchRecord& launch, const trace::AsyncSpanRecord& span) {
  State& s = *state_;
  AsyncAcc& a = s.Launch(launch).kernel->async[s.NameIdOf(span.name, span.name_key)];
  ++s.async_spans;
  if (span.unmatched_end()) {
    ++a.unmatched_ends;
  } else if (span.unterminated()) {
    ++a.unterminated;
  } else {
    a.ns.Add(span.end_ns > span.begin_ns ? span.end_ns - span.begin_ns : 0);
  }
}

void StatsBuilder::OnLaunchEnd(const trace::LaunchRecord& launch) {
  State& s = *state_;
  s.Close(s.Launch(launch));
  s.Forget(launch.index);
}

RunStats StatsBuilder::Build() {
  State& s = *state_;
  std::vector<uint64_t> open;
  for (const auto& [index, l] : s.launches) open.push_back(index);
  std::sort(open.begin(), open.end());
  for (uint64_t index : open) s.Close(s.launches.at(index));
  s.launches.clear();
  s.last_launch = nullptr;

  RunStats run;
  run.slices = s.slices;
  run.unterminated = s.unterminated;
  run.instants = s.instants;
  run.async_spans = s.async_spans;
  for (auto& [name, k] : s.kernels) {
    KernelStats ks;
    ks.kernel = name;
    ks.launches = k.launches;
    ks.warps = k.warps;
    ks.span_ns = k.span_ns;
    ks.warp_time_ns = k.warp_time_ns;
    run.launches += k.launches;
    for (auto& [region, r] : k.regions) {
      RegionStats rs;
      rs.name = s.names[static_cast<uint32_t>(region)];
      rs.phase = (region >> 32) != 0;
      rs.count = r.ns.count();
      rs.unterminated = r.unterminated;
      rs.exact = r.ns.exact();
      rs.ns = r.ns.Summarize();
      rs.cycles = r.cycles.Summarize();
      if (k.warp_time_ns > 0) {
        rs.share = static_cast<double>(rs.ns.total) / static_cast<double>(k.warp_time_ns);
      }
      uint64_t busiest_key = 0;
      for (const auto& [key, total] : r.sm_totals) {
        const bool first = rs.per_sm.units == 0;
        if (first || total > rs.per_sm.max_ns || (total == rs.per_sm.max_ns && key < busiest_key)) {
          rs.per_sm.max_ns = total;
          busiest_key = key;
        }
        ++rs.per_sm.units;
      }
      if (rs.per_sm.units > 0) {
        rs.per_sm.mean_ns = static_cast<double>(rs.ns.total) / static_cast<double>(rs.per_sm.units);
        rs.busiest_gpu = static_cast<int32_t>(static_cast<uint32_t>(busiest_key >> 32));
        rs.busiest_sm = static_cast<uint32_t>(busiest_key);
      }
      rs.per_warp.units = r.warps;
      rs.per_warp.max_ns = r.warp_max;
      if (r.warps > 0) rs.per_warp.mean_ns = static_cast<double>(r.warp_sum) / static_cast<double>(r.warps);
      rs.slowest_warp = r.warp_max_at;
      ks.regions.push_back(std::move(rs));
    }
    std::sort(ks.regions.begin(), ks.regions.end(), [](const RegionStats& a, const RegionStats& b) {
      return std::tie(b.ns.total, a.name, a.phase) < std::tie(a.ns.total, b.name, b.phase);
    });
    for (const auto& [id_source, v] : k.values) {
      ValueStats vs;
      vs.name = s.names[id_source.first];
      vs.source = id_source.second;
      vs.count = v.count;
      vs.min = v.min;
      vs.max = v.max;
      vs.sum = static_cast<int64_t>(std::clamp<Int128>(v.sum, INT64_MIN, INT64_MAX));
      vs.mean = static_cast<double>(v.sum) / static_cast<double>(v.count);
      ks.values.push_back(std::move(vs));
    }
    std::sort(ks.values.begin(), ks.values.end(), [](const ValueStats& a, const ValueStats& b) {
      return std::tie(a.name, a.source) < std::tie(b.name, b.source);
    });
    for (auto& [id, a] : k.async) {
      AsyncStats as;
      as.name = s.names[id];
      as.count = a.ns.count();
      as.unterminated = a.unterminated;
      as.unmatched_ends = a.unmatched_ends;
      as.exact = a.ns.exact();
      as.min_ns = a.ns.min();
      as.ns = a.ns.Summarize();
      ks.async.push_back(std::move(as));
    }
    std::sort(ks.async.begin(), ks.async.end(), [](const AsyncStats& a, const AsyncStats& b) {
      return std::tie(b.ns.total, a.name) < std::tie(a.ns.total, b.name);
    });
    for (const auto& [id, i] : k.instants) ks.instants.push_back({s.names[id], i.count, i.unmatched_ends});
    std::sort(ks.instants.begin(), ks.instants.end(),
              [](const InstantStats& a, const InstantStats& b) { return a.name < b.name; });
    run.kernels.push_back(std::move(ks));
  }
  std::sort(run.kernels.begin(), run.kernels.end(), [](const KernelStats& a, const KernelStats& b) {
    return std::tie(b.span_ns, a.kernel) < std::tie(a.span_ns, b.kernel);
  });
  run.gaps = s.gaps;
  std::sort(run.gaps.begin(), run.gaps.end(), GapBefore);
  run.open_ranges = s.open_ranges;
  std::stable_sort(run.open_ranges.begin(), run.open_ranges.end(), OpenRangeBefore);
  return run;
}

}  // namespace smprof::stats
