// StreamTracker: which of the application's streams may hold recording work
// of a context since its last read-back.
//
// A read-back may reset the arena only when no kernel that can record is
// still queued or running (DeviceContext::Read). Streams are tracked by
// handle; the per-thread default stream, one handle naming every thread's
// own, by thread (ThreadToken). Three sources of work:
//   - busy: a recording launch was queued there (NoteBusy);
//   - quiet: an unwanted launch of an opted-in kernel while its module was
//     dark (NoteQuiet). A module lit later may make it record, so lighting
//     turns every quiet stream busy (QuietBecomeBusy);
//   - orphaned: a busy stream was destroyed before its work ended; only a
//     context synchronisation proves that work done.
// Pending tells what a read-back must see finished (WorkFor); Clear starts
// the next generation.
//
// Not thread-safe: its owner's lock (DeviceContext::mu_) guards every call.
#pragma once

#include <cstdint>
#include <vector>

#include "injector/gpu.h"

namespace smprof::injector {

class StreamTracker {
 public:
  void NoteBusy(GpuStream stream, bool per_thread, uint64_t thread);
  void NoteQuiet(GpuStream stream, bool per_thread, uint64_t thread);
  // Every quiet stream counts as busy from now on; false if there was none.
  bool QuietBecomeBusy();
  bool busy(GpuStream stream) const;
  // A busy stream was destroyed; `idle`: its work had ended.
  void Destroyed(GpuStream stream, bool idle);

  // What a read-back on `thread` must see finished: the busy streams (the
  // thread's own per-thread stream as kPerThreadStream), and whether work
  // of other threads' per-thread streams or of destroyed streams is pending
  // (neither can be queried).
  struct Work {
    std::vector<GpuStream> streams;
    bool other_threads = false;
    bool orphaned = false;
  };
  Work WorkFor(uint64_t thread) const;
  // A read-back took everything: nothing is pending.
  void Clear();

 private:
  std::vector<GpuStream> busy_streams_;
  std::vector<uint64_t> busy_threads_;  // threads with recording work on their per-thread stream
  bool orphaned_ = false;
  std::vector<GpuStream> quiet_streams_;
  std::vector<uint64_t> quiet_threads_;
};

}  // namespace smprof::injector
