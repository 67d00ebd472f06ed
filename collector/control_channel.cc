#include "collector/control_channel.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace smprof {

ControlChannel::ControlChannel(int fd) : fd_(fd) {
  const int flags = fcntl(fd_, F_GETFL);
  if (flags >= 0) fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
}

ControlChannel::~ControlChannel() {
  if (fd_ >= 0) close(fd_);
}

void ControlChannel::Deliver(std::string_view line, const std::function<void(const nlohmann::json&)>& on_message) {
  if (line.empty()) return;
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    ++malformed_;
    return;
  }
  on_message(j);
}

bool ControlChannel::Poll(const std::function<void(const nlohmann::json&)>& on_message) {
  if (!open_) return false;
  char buf[64 << 10];
  for (;;) {
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) break;  // end of file or a read error: the run is over either way
    for (ssize_t i = 0; i < n; ++i) {
      const char c = buf[i];
      if (c != '\n') {
        if (skipping_) continue;
        if (pending_.size() >= kMaxLineBytes) {
          skipping_ = true;
          ++malformed_;
          pending_.clear();
          continue;
        }
        pending_.push_back(c);
        continue;
      }
      if (!skipping_) Deliver(pending_, on_message);
      skipping_ = false;
      pending_.clear();
    }
  }
  if (!skipping_ && !pending_.empty()) Deliver(pending_, on_message);  // a last line without '\n'
  pending_.clear();
  open_ = false;
  return false;
}

}  // namespace smprof
