// smprof-run -> collector: newline-separated JSON objects on a pipe
// (--control-fd).
//
//   {"run": {...}}   the run's metadata (command, options, environment,
//                    version), once, before the program starts
//   {"exit": {...}}  how the program ended, once, after it ended
//   end of file      the run is over: the collector drains and finishes, as
//                    on SIGTERM. smprof-run closing (or dying) closes the pipe,
//                    so the collector never outlives the run by more than its
//                    drain.
//
// smprof-run is trusted, but its lines are still checked: anything that is
// not a JSON object on a line of at most kMaxLineBytes is counted and skipped.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/json.h"

namespace smprof {

class ControlChannel {
 public:
  static constexpr size_t kMaxLineBytes = 4u << 20;

  // Takes ownership of `fd` (the read end of the pipe) and makes it non-blocking.
  explicit ControlChannel(int fd);
  ~ControlChannel();

  // Reads what is available and calls `on_message` for each complete line
  // that is a JSON object. Returns false once the writer has closed the pipe
  // (every line before that was delivered) or reading failed.
  bool Poll(const std::function<void(const nlohmann::json&)>& on_message);

  uint64_t malformed_lines() const { return malformed_; }

  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

 private:
  void Deliver(std::string_view line, const std::function<void(const nlohmann::json&)>& on_message);

  int fd_;
  bool open_ = true;
  bool skipping_ = false;  // inside a line longer than kMaxLineBytes
  std::string pending_;
  uint64_t malformed_ = 0;
};

}  // namespace smprof
