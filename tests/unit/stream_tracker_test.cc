// StreamTracker: what a read-back must see finished.
#include "injector/stream_tracker.h"

#include <gtest/gtest.h>

#include <vector>

namespace smprof::injector {
namespace {

GpuStream S(uintptr_t n) { return reinterpret_cast<GpuStream>(n); }

TEST(StreamTracker, BusyStreamsOnceEachAndPerThreadStreamsByThread) {
  StreamTracker t;
  t.NoteBusy(S(1), false, 7);
  t.NoteBusy(S(1), false, 8);
  t.NoteBusy(S(2), false, 7);
  t.NoteBusy(nullptr, true, 7);
  StreamTracker::Work mine = t.WorkFor(7);
  EXPECT_EQ(mine.streams, (std::vector<GpuStream>{S(1), S(2), kPerThreadStream}));
  EXPECT_FALSE(mine.other_threads);
  EXPECT_FALSE(mine.orphaned);
  // Another thread cannot query thread 7's per-thread stream.
  StreamTracker::Work theirs = t.WorkFor(9);
  EXPECT_EQ(theirs.streams, (std::vector<GpuStream>{S(1), S(2)}));
  EXPECT_TRUE(theirs.other_threads);
}

TEST(StreamTracker, QuietStreamsCountOnlyOnceAModuleIsLit) {
  StreamTracker t;
  EXPECT_FALSE(t.QuietBecomeBusy());
  t.NoteQuiet(S(3), false, 1);
  t.NoteQuiet(nullptr, true, 4);
  EXPECT_TRUE(t.WorkFor(1).streams.empty());
  EXPECT_FALSE(t.busy(S(3)));
  EXPECT_TRUE(t.QuietBecomeBusy());
  EXPECT_TRUE(t.busy(S(3)));
  EXPECT_TRUE(t.WorkFor(1).other_threads);  // thread 4's per-thread stream
  EXPECT_EQ(t.WorkFor(4).streams, (std::vector<GpuStream>{S(3), kPerThreadStream}));
}

TEST(StreamTracker, ADestroyedStreamWithWorkLeftIsOrphanedUntilCleared) {
  StreamTracker t;
  t.NoteBusy(S(1), false, 1);
  t.NoteBusy(S(2), false, 1);
  t.Destroyed(S(1), /*idle=*/true);
  EXPECT_FALSE(t.WorkFor(1).orphaned);
  t.Destroyed(S(2), /*idle=*/false);
  const StreamTracker::Work w = t.WorkFor(1);
  EXPECT_TRUE(w.orphaned);
  EXPECT_TRUE(w.streams.empty());
  t.NoteQuiet(S(5), false, 1);
  t.Clear();
  EXPECT_FALSE(t.WorkFor(1).orphaned);
  EXPECT_FALSE(t.QuietBecomeBusy());
}

}  // namespace
}  // namespace smprof::injector
