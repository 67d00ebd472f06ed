#include "collector/async_matcher.h"

#include <algorithm>

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
  const auto same_group = [](const Event& a, const Event& b) {
    return a.block[0] == b.block[0] && a.block[1] == b.block[1] && a.block[2] == b.block[2] && a.name_id == b.name_id &&
           a.token == b.token;
  };
  // Stable: events equal in every key keep their order of arrival.
  std::stable_sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
    if (a.block[2] != b.block[2]) return a.block[2] < b.block[2];
    if (a.block[1] != b.block[1]) return a.block[1] < b.block[1];
    if (a.block[0] != b.block[0]) return a.block[0] < b.block[0];
    if (a.name_id != b.name_id) return a.name_id < b.name_id;
    if (a.token != b.token) return a.token < b.token;
    if (a.ns != b.ns) return a.ns < b.ns;
    return !a.end && b.end;  // a BEGIN before an END at the same time
  });
  std::vector<const Event*> open;  // the group's BEGINs, oldest first from `head`
  for (size_t at = 0; at < events_.size();) {
    size_t next = at;
    open.clear();
    size_t head = 0;
    for (; next < events_.size() && same_group(events_[next], events_[at]); ++next) {
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
