// HostCalls: a context's launch API calls by correlation id, kept for the
// harvest cycle in progress and the kCycles - 1 before; the thread-name registry.
#include "injector/host_calls.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <thread>

namespace smprof::injector {
namespace {

TEST(HostCalls, KeepsACallForKCyclesHarvestCycles) {
  constexpr size_t k = HostCalls::kCycles;
  HostCalls calls;
  calls.Add(7, wire::HostCall{100, 200, 42, wire::kApiLaunchKernel});
  EXPECT_EQ(calls.Find(7).end_ns, 200u);
  EXPECT_EQ(calls.Find(8).api, wire::kApiNone);
  EXPECT_EQ(calls.Find(8).tid, 0u);
  calls.EndHarvest();  // its kernel may be decoded a few harvests later
  EXPECT_EQ(calls.Find(7).api, wire::kApiLaunchKernel);
  calls.Add(9, wire::HostCall{300, 400, 42, wire::kApiGraphLaunch});
  for (size_t i = 2; i < k; ++i) calls.EndHarvest();
  EXPECT_EQ(calls.Find(7).api, wire::kApiLaunchKernel);  // k - 1 cycles ended: still kept
  calls.EndHarvest();
  EXPECT_EQ(calls.Find(7).api, wire::kApiNone);
  EXPECT_EQ(calls.Find(9).start_ns, 300u);
  EXPECT_EQ(calls.size(), 1u);
  calls.EndHarvest();
  EXPECT_EQ(calls.size(), 0u);
  EXPECT_EQ(calls.forgotten(), 0u);  // dropped by harvests, not at the limit
}

TEST(HostCalls, WithoutHarvestsTheOldestCallsAreForgottenAndCounted) {
  HostCalls calls;
  const uint64_t n = HostCalls::kMaxCalls;
  const uint64_t k = HostCalls::kCycles;
  for (uint64_t id = 0; id < k * n; ++id) calls.Add(id, wire::HostCall{id, id + 1, 1, wire::kApiLaunchKernel});
  EXPECT_EQ(calls.forgotten(), 0u);  // cycles ended early; all are kept
  EXPECT_EQ(calls.Find(0).start_ns, 0u);
  EXPECT_EQ(calls.Find(0).api, wire::kApiLaunchKernel);
  calls.Add(k * n, wire::HostCall{1, 2, 1, wire::kApiLaunchKernel});
  EXPECT_EQ(calls.forgotten(), n);  // the first cycle's calls
  EXPECT_EQ(calls.Find(0).api, wire::kApiNone);
  EXPECT_EQ(calls.Find(n).start_ns, n);
  EXPECT_EQ(calls.Find(k * n).api, wire::kApiLaunchKernel);
  EXPECT_EQ(calls.size(), (k - 1) * n + 1);
}

TEST(HostCalls, ExclusionsAreKeptAndForgottenWithTheirCycle) {
  HostCalls calls;
  int gemm = 0, other = 0;  // kernel identities
  calls.Add(5, wire::HostCall{1, 2, 1, wire::kApiGraphLaunch});
  calls.Exclude(5, &other);
  EXPECT_TRUE(calls.Excludes(5, &other));
  EXPECT_FALSE(calls.Excludes(5, &gemm));
  EXPECT_FALSE(calls.Excludes(6, &other));
  for (size_t i = 1; i < HostCalls::kCycles; ++i) calls.EndHarvest();
  EXPECT_TRUE(calls.Excludes(5, &other));  // as long as the call is kept
  calls.EndHarvest();
  EXPECT_EQ(calls.Find(5).api, wire::kApiNone);
  EXPECT_FALSE(calls.Excludes(5, &other));
}

TEST(HostCalls, ThreadsNoteTheirOwnNames) {
  uint32_t tid = 0;
  std::thread t([&] {
    pthread_setname_np(pthread_self(), "smprof-worker");
    NoteCurrentThread();
    pthread_setname_np(pthread_self(), "renamed");
    NoteCurrentThread();  // noted once: the first name stays
    tid = CurrentTid();
  });
  t.join();
  EXPECT_NE(tid, 0u);
  EXPECT_NE(tid, CurrentTid());
  EXPECT_EQ(ThreadName(tid), "smprof-worker");
  EXPECT_EQ(ThreadName(0), "");
}

}  // namespace
}  // namespace smprof::injector
