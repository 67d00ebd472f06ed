// Launch selection (see launch_filter.h for the spec syntax).
//
// An item's pattern is validated and matched by a KernelFilter of that one
// pattern, so --launches and --kernels read a glob the same way. The spec is
// split on unescaped commas (as SMPROF_KERNELS is); an item is split at its
// last unescaped ':', since a pattern may hold "::" but ranges never hold ':'.
#include "common/launch_filter.h"

#include <algorithm>

#include "common/settings.h"

namespace smprof {
namespace {

std::string Quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

// A launch index: digits only, below kOpenEnd. *too_large: digits, but not.
bool ParseIndex(std::string_view text, uint64_t* value, bool* too_large) {
  if (!IsDecimalDigits(text)) return false;
  uint64_t v = 0;
  for (char c : text) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (LaunchFilter::kOpenEnd - 1 - d) / 10) {
      *too_large = true;
      return false;
    }
    v = v * 10 + d;
  }
  *value = v;
  return true;
}

// Parses "N", "N-M" or "N-" of `item` into *range.
bool ParseRange(std::string_view text, std::string_view item, LaunchFilter::Range* range, std::string* error) {
  bool too_large = false;
  const auto not_a_range = [&] {
    if (too_large) {
      *error = "launch index in " + Quoted(text) + " in item " + Quoted(item) + " is too large: use at most " +
               std::to_string(LaunchFilter::kOpenEnd - 1) + ", or N- for every launch from N on";
    } else {
      *error = Quoted(text) + " in item " + Quoted(item) +
               " is not a launch range: use N, N-M or N- (0-based launch indices, digits only), joined by '+'";
    }
    return false;
  };
  if (text.empty()) {
    *error = "empty launch range in item " + Quoted(item) + ": give N, N-M or N- after the ':' and between any '+'";
    return false;
  }
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos) {
    if (!ParseIndex(text, &range->first, &too_large)) return not_a_range();
    range->last = range->first;
    return true;
  }
  if (!ParseIndex(text.substr(0, dash), &range->first, &too_large)) return not_a_range();
  const std::string_view last = text.substr(dash + 1);
  if (last.empty()) {
    range->last = LaunchFilter::kOpenEnd;
    return true;
  }
  if (!ParseIndex(last, &range->last, &too_large)) return not_a_range();
  if (range->last < range->first) {
    *error = "range " + std::string(text) + " in item " + Quoted(item) + " is reversed: write it as " +
             std::string(last) + "-" + std::string(text.substr(0, dash));
    return false;
  }
  return true;
}

// Sorts and merges overlapping or adjacent ranges.
std::vector<LaunchFilter::Range> Merge(std::vector<LaunchFilter::Range> ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const LaunchFilter::Range& a, const LaunchFilter::Range& b) { return a.first < b.first; });
  std::vector<LaunchFilter::Range> merged;
  for (const LaunchFilter::Range& r : ranges) {
    if (!merged.empty() && (merged.back().last == LaunchFilter::kOpenEnd || r.first <= merged.back().last + 1)) {
      merged.back().last = std::max(merged.back().last, r.last);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

bool InRange(const std::vector<LaunchFilter::Range>& ranges, uint64_t index) {
  for (const LaunchFilter::Range& r : ranges) {
    if (index < r.first) return false;  // sorted: no later range holds it
    if (index <= r.last) return true;
  }
  return false;
}

}  // namespace

std::optional<LaunchFilter> LaunchFilter::Parse(std::string_view spec, std::string* error) {
  LaunchFilter filter;
  filter.spec_ = std::string(spec);
  if (TrimSpecItem(spec).empty()) return filter;

  size_t start = 0;
  for (size_t i = 0; i <= spec.size(); ++i) {
    if (i < spec.size() && !(spec[i] == ',' && !IsEscapedAt(spec, i))) continue;
    const std::string_view item = TrimSpecItem(spec.substr(start, i - start));
    const size_t column = start + 1;
    start = i + 1;
    if (item.empty()) {
      *error = "empty item at character " + std::to_string(column) + " in " + Quoted(spec) + ": remove the extra comma";
      return std::nullopt;
    }

    size_t colon = std::string_view::npos;
    for (size_t j = item.size(); j-- > 0;) {
      if (item[j] == ':' && !IsEscapedAt(item, j)) {
        colon = j;
        break;
      }
    }
    // "ns::gemm" alone: the ':' found is the namespace's, not a range's.
    const bool namespace_colon = colon != std::string_view::npos && colon > 0 && item[colon - 1] == ':' &&
                                 (colon + 1 == item.size() || item[colon + 1] < '0' || item[colon + 1] > '9');
    if (colon == std::string_view::npos || namespace_colon) {
      *error =
          "item " + Quoted(item) + " has no launch range: write PATTERN:RANGES, e.g. " + std::string(item) + ":0-9";
      return std::nullopt;
    }
    const std::string_view pattern = TrimSpecItem(item.substr(0, colon));
    const std::string_view ranges = TrimSpecItem(item.substr(colon + 1));
    if (pattern.empty()) {
      *error = "empty pattern in item " + Quoted(item) + ": name the kernels before the ':', e.g. gemm*" +
               std::string(item.substr(colon)) + " (or *" + std::string(item.substr(colon)) + " for every kernel)";
      return std::nullopt;
    }
    if (pattern.front() == '!') {
      *error = "'!' in item " + Quoted(item) +
               ": launch ranges cannot exclude; leave the kernels out with --kernels '" + std::string(pattern) +
               "' (or write \\! for a literal '!')";
      return std::nullopt;
    }
    std::optional<KernelFilter> match = KernelFilter::Parse(pattern, error);
    if (!match) {
      *error = "in item " + Quoted(item) + ": " + *error;
      return std::nullopt;
    }

    Item parsed;
    parsed.pattern = std::string(pattern);
    parsed.match = std::move(*match);
    std::vector<Range> parts;
    size_t from = 0;
    for (size_t j = 0; j <= ranges.size(); ++j) {
      if (j < ranges.size() && ranges[j] != '+') continue;
      Range r;
      if (!ParseRange(ranges.substr(from, j - from), item, &r, error)) return std::nullopt;
      parts.push_back(r);
      from = j + 1;
    }
    parsed.ranges = Merge(std::move(parts));
    const uint64_t last = parsed.ranges.back().last;
    parsed.end = last == kOpenEnd ? kOpenEnd : last + 1;
    filter.items_.push_back(std::move(parsed));
  }
  return filter;
}

std::vector<uint32_t> LaunchFilter::ItemsFor(std::string_view demangled_name) const {
  std::vector<uint32_t> items;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (items_[i].match.Matches(demangled_name)) items.push_back(static_cast<uint32_t>(i));
  }
  return items;
}

bool LaunchFilter::Take(const std::vector<uint32_t>& items, LaunchCounters& counters) const {
  if (items.empty()) return true;
  bool taken = false;
  for (uint32_t item : items) {
    if (item >= items_.size() || item >= counters.size_) continue;
    const uint64_t index = counters.counters_[item].next.fetch_add(1, std::memory_order_relaxed);
    // Every item counts the launch, so no early exit once one takes it.
    taken = InRange(items_[item].ranges, index) || taken;
  }
  return taken;
}

bool LaunchFilter::Exhausted(const std::vector<uint32_t>& items, const LaunchCounters& counters) const {
  if (items.empty()) return false;
  for (uint32_t item : items) {
    if (item >= items_.size() || item >= counters.size_) continue;
    const uint64_t end = items_[item].end;
    if (end == kOpenEnd || counters.counters_[item].next.load(std::memory_order_relaxed) < end) return false;
  }
  return true;
}

LaunchCounters::LaunchCounters(const LaunchFilter& filter)
    : size_(filter.item_count()), counters_(std::make_unique<Counter[]>(filter.item_count())) {}

uint64_t LaunchCounters::taken(uint32_t item) const {
  return item < size_ ? counters_[item].next.load(std::memory_order_relaxed) : 0;
}

}  // namespace smprof
