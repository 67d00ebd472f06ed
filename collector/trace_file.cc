#include "collector/trace_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collector/trace_placement.h"

namespace smprof {

TraceFile::~TraceFile() {
  if (fd_ >= 0) {
    WriteOut();
    ::close(fd_);
  }
}

bool TraceFile::Open(const std::string& path, bool exclusive, const Format& format, std::string* error) {
  fd_ = OpenTraceFile(path, exclusive, format.read_back, error);
  if (fd_ < 0) return false;
  path_ = path;
  format_ = format;
  // A record or two past the threshold without growing.
  Grow(kWriteThreshold + (64u << 10));
  return true;
}

void TraceFile::Grow(size_t n) {
  const size_t cap = std::max(cap_ * 2, size_ + n);
  std::unique_ptr<char[]> data(new char[cap]);
  if (size_ != 0) std::memcpy(data.get(), data_.get(), size_);
  data_ = std::move(data);
  cap_ = cap;
}

bool TraceFile::Flush() {
  if (fd_ >= 0) WriteOut();
  return ok();
}

void TraceFile::WriteOut() {
  size_t done = 0;
  while (ok() && done < size_) {
    const ssize_t n = ::write(fd_, data_.get() + done, size_ - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      FailWrite(n < 0 ? errno : ENOSPC, done);
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (ok()) written_ += done;
  size_ = 0;  // after an error, output is discarded rather than kept
}

void TraceFile::FailWrite(int err, size_t done) {
  error_ = "writing trace file '" + path_ + "': " + std::strerror(err);
  const uint64_t at = written_;
  written_ += done;
  error_ += format_.cut(fd_, at, std::string_view(data_.get(), done), &written_);
}

bool TraceFile::Close() {
  if (fd_ < 0) return ok();
  WriteOut();
  if (::close(fd_) != 0 && ok()) error_ = "closing trace file '" + path_ + "': " + std::strerror(errno);
  fd_ = -1;
  return ok();
}

}  // namespace smprof
