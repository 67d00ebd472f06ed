// Splitting one piece of work over threads started for it: the injector's
// chunk scan and the collector's decoding and clock mapping divide a
// read-back into contiguous parts this way, each merged in order afterwards.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace smprof {

// How many parts `work` units make at `per_part` or more each: 1 to `threads`.
inline unsigned PartsFor(unsigned threads, uint64_t work, uint64_t per_part) {
  return static_cast<unsigned>(std::max<uint64_t>(1, std::min<uint64_t>(threads, work / per_part)));
}

// Runs part(i) for i in [0, parts): part 0 on this thread, the others on
// threads started for the call; returns when all are done.
template <typename Part>
void RunParts(unsigned parts, Part&& part) {
  std::vector<std::thread> helpers;
  helpers.reserve(parts > 0 ? parts - 1 : 0);
  for (unsigned i = 1; i < parts; ++i) helpers.emplace_back([&part, i] { part(i); });
  part(0);
  for (std::thread& t : helpers) t.join();
}

}  // namespace smprof
