#include "collector/async_matcher.h"

#include <algorithm>
#include <tuple>

namespace smprof {

bool AsyncMatcher::Add(bool end, const trace::WarpRecord& warp, uint32_t name_id, uint32_t token, uint64_t ns) {
  if (events_.size() >= kMaxAsyncEvents) {
    ++dropped_;
    return false;
  }
  last_ns_ = std::max(last_ns_, ns);
  Event& e = events_.emplace_back();
  e.ns = ns;
  e.warp = &warp;
  std::copy(warp.block, warp.block + 3, e.block);
  e.name_id = name_id;
  e.token = token;
  e.end = end;
  return true;
}

void AsyncMatcher::Match(uint64_t launch_end_ns, std::vector<Span>* out) {
  out->clear();
  const auto group = [](const Event& e) {
    return std::make_tuple(e.block[2], e.block[1], e.block[0], e.name_id, e.token);
  };
  // Stable: events equal in every key keep their order of arrival.
  std::stable_sort(events_.begin(), events_.end(), [&](const Event& a, const Event& b) {
    const auto ga = group(a), gb = group(b);
    if (ga != gb) return ga < gb;
    if (a.ns != b.ns) return a.ns < b.ns;
    return !a.end && b.end;
  });
  std::vector<const Event*> open;  // the group's BEGINs, oldest first from `head`
  for (size_t at = 0; at < events_.size();) {
    size_t next = at;
    open.clear();
    size_t head = 0;
    for (; next < events_.size() && group(events_[next]) == group(events_[at]); ++next) {
      const Event& e = events_[next];
      if (!e.end) {
        open.push_back(&e);
        continue;
      }
      Span& s = out->emplace_back();
      s.name_id = e.name_id;
      s.token = e.token;
      std::copy(e.block, e.block + 3, s.block);
      s.end_ns = e.ns;
      s.end_warp = e.warp;
      if (head < open.size()) {
        s.begin_ns = open[head]->ns;
        s.begin_warp = open[head]->warp;
        ++head;
      } else {
        s.begin_ns = e.ns;  // an unmatched end
      }
    }
    for (; head < open.size(); ++head) {  // unterminated
      const Event& b = *open[head];
      Span& s = out->emplace_back();
      s.name_id = b.name_id;
      s.token = b.token;
      std::copy(b.block, b.block + 3, s.block);
      s.begin_ns = b.ns;
      s.end_ns = std::max(b.ns, launch_end_ns);
      s.begin_warp = b.warp;
    }
    at = next;
  }
  std::stable_sort(out->begin(), out->end(), [](const Span& a, const Span& b) { return a.begin_ns < b.begin_ns; });
  events_.clear();
}

}  // namespace smprof
