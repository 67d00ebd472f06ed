#include "injector/stream_tracker.h"

#include <algorithm>

namespace smprof::injector {
namespace {

template <typename T>
void AddOnce(std::vector<T>* set, T value) {
  if (std::find(set->begin(), set->end(), value) == set->end()) set->push_back(value);
}

}  // namespace

void StreamTracker::NoteBusy(GpuStream stream, bool per_thread, uint64_t thread) {
  if (per_thread) {
    AddOnce(&busy_threads_, thread);
  } else {
    AddOnce(&busy_streams_, stream);
  }
}

void StreamTracker::NoteQuiet(GpuStream stream, bool per_thread, uint64_t thread) {
  if (per_thread) {
    AddOnce(&quiet_threads_, thread);
  } else {
    AddOnce(&quiet_streams_, stream);
  }
}

bool StreamTracker::QuietBecomeBusy() {
  for (GpuStream s : quiet_streams_) AddOnce(&busy_streams_, s);
  for (uint64_t thread : quiet_threads_) AddOnce(&busy_threads_, thread);
  return !quiet_streams_.empty() || !quiet_threads_.empty();
}

bool StreamTracker::busy(GpuStream stream) const {
  return std::find(busy_streams_.begin(), busy_streams_.end(), stream) != busy_streams_.end();
}

void StreamTracker::Destroyed(GpuStream stream, bool idle) {
  busy_streams_.erase(std::remove(busy_streams_.begin(), busy_streams_.end(), stream), busy_streams_.end());
  orphaned_ |= !idle;
}

StreamTracker::Work StreamTracker::WorkFor(uint64_t thread) const {
  Work w;
  w.streams = busy_streams_;
  w.orphaned = orphaned_;
  for (uint64_t t : busy_threads_) {
    if (t == thread) {
      w.streams.push_back(kPerThreadStream);  // the thread's own per-thread stream
    } else {
      w.other_threads = true;
    }
  }
  return w;
}

void StreamTracker::Clear() {
  busy_streams_.clear();
  busy_threads_.clear();
  quiet_streams_.clear();
  quiet_threads_.clear();
  orphaned_ = false;
}

}  // namespace smprof::injector
