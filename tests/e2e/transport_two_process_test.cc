// Two-process tests of the shared-memory transport: the test process is the
// Consumer, fork()ed children are Producers that run the real Attach/Send path
// against a small ring, so wrap-around and backpressure happen for real.
#include "common/transport.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "smprof/wire.h"

namespace smprof::transport {
namespace {

constexpr size_t kRingBytes = 64u << 10;
constexpr auto kSafetyNet = std::chrono::seconds(240);  // only against hangs

std::string UniqueRunId() {
  static int counter = 0;
  return "te_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
}

// Message `seq` of producer `child`: deterministic size (8..~3 KiB, some
// above 1 KiB) and content, so the parent can check every byte.
uint32_t MessageSize(uint32_t child, uint64_t seq) {
  const uint64_t h = (seq + 1) * 0x9E3779B97F4A7C15ull + child * 0x632BE59BD9B4E019ull;
  const uint32_t limit = (h >> 60) < 2 ? 3000u : 200u;
  return wire::PaddedSize(24 + static_cast<uint32_t>((h >> 20) % limit));
}

uint8_t PayloadByte(uint32_t child, uint64_t seq, uint32_t i) {
  return static_cast<uint8_t>(seq * 31 + i * 13 + child * 101 + (i >> 7));
}

std::vector<uint8_t> BuildMessage(uint32_t child, uint64_t seq) {
  const uint32_t size = MessageSize(child, seq);
  std::vector<uint8_t> m(size);
  const wire::MsgHeader h{wire::kMsgWarpEvents, size};
  std::memcpy(m.data(), &h, sizeof(h));
  std::memcpy(m.data() + 8, &seq, sizeof(seq));
  std::memcpy(m.data() + 16, &child, sizeof(child));
  for (uint32_t i = 20; i < size; ++i) m[i] = PayloadByte(child, seq, i);
  return m;
}

// Runs in the forked child; returns the exit status. Never returns to gtest.
[[noreturn]] void RunChild(const std::string& run_id, uint32_t child, uint64_t count, bool detach) {
  ProducerOptions options;
  options.ring_bytes = kRingBytes;
  options.max_wait = std::chrono::seconds(30);  // backpressure, never drops while the parent polls
  std::string error;
  auto producer = Producer::Attach(run_id, options, &error);
  if (producer == nullptr) {
    fprintf(stderr, "child %u: %s\n", child, error.c_str());
    _exit(2);
  }
  for (uint64_t seq = 0; seq < count; ++seq) {
    const std::vector<uint8_t> m = BuildMessage(child, seq);
    if (!producer->Send(m.data(), static_cast<uint32_t>(m.size()), 1)) {
      fprintf(stderr, "child %u: message %llu dropped\n", child, static_cast<unsigned long long>(seq));
      _exit(3);
    }
  }
  if (detach) producer->Detach();
  _exit(0);  // without Detach: the producer "crashes" with its ring attached
}

bool RingSegmentsLeft(const std::string& run_id) {
  const std::string prefix = ControlSegmentName(run_id) + "-";
  bool found = false;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return false;
  while (const dirent* ent = readdir(dir)) {
    if (std::string(ent->d_name).compare(0, prefix.size(), prefix) == 0) found = true;
  }
  closedir(dir);
  return found;
}

struct ChildState {
  uint32_t child = 0;
  uint64_t next_seq = 0;
  int ends = 0;
  bool clean = false;
  uint64_t mismatches = 0;
};

// Polls until every child has ended, reaping exited children on the way (a
// zombie still counts as alive). Returns false only when the safety net hits.
class Harness {
 public:
  explicit Harness(std::string run_id) : run_id_(std::move(run_id)) {
    std::string error;
    consumer_ = Consumer::Create(run_id_, ConsumerOptions{}, &error);
    EXPECT_NE(consumer_, nullptr) << error;
  }
  ~Harness() {
    consumer_.reset();
    RemoveRunSegments(run_id_);
  }

  void Spawn(uint32_t child, uint64_t count, bool detach) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) RunChild(run_id_, child, count, detach);
    children_[pid].child = child;
  }

  bool RunUntilAllEnded() {
    const auto deadline = std::chrono::steady_clock::now() + kSafetyNet;
    size_t ended = 0;
    uint64_t polls = 0;
    while (ended < children_.size() || !consumer_->Idle()) {
      if (std::chrono::steady_clock::now() > deadline) {
        // A hung child must not outlive the test (nor hang the wait below).
        for (const auto& [pid, state] : children_) kill(pid, SIGKILL);
        pid_t pid;
        int status = 0;
        while ((pid = waitpid(-1, &status, 0)) > 0) exit_status_[pid] = status;
        return false;
      }
      const size_t n = consumer_->Poll(
          [this](const ProducerInfo& info, const uint8_t* data, uint32_t size) {
            OnMessage(info, data, size);
          },
          [this, &ended](const ProducerInfo& info, bool clean) {
            ChildState& c = children_[static_cast<pid_t>(info.pid)];
            ++c.ends;
            c.clean = clean;
            ++ended;
          });
      int status = 0;
      pid_t pid;
      while ((pid = waitpid(-1, &status, WNOHANG)) > 0) exit_status_[pid] = status;
      // Now and then a slow poll, so the producers find the ring full and wait.
      if (n == 0 || ++polls % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    pid_t pid;
    int status = 0;
    while ((pid = waitpid(-1, &status, 0)) > 0) exit_status_[pid] = status;
    return true;
  }

  void OnMessage(const ProducerInfo& info, const uint8_t* data, uint32_t size) {
    auto it = children_.find(static_cast<pid_t>(info.pid));
    if (it == children_.end() || size < 24) {
      ++unknown_;
      return;
    }
    ChildState& c = it->second;
    const std::vector<uint8_t> want = BuildMessage(c.child, c.next_seq);
    if (size != want.size() || std::memcmp(data, want.data(), size) != 0) ++c.mismatches;
    ++c.next_seq;
  }

  Consumer& consumer() { return *consumer_; }
  std::map<pid_t, ChildState>& children() { return children_; }
  int exit_status(pid_t pid) { return exit_status_.count(pid) ? exit_status_[pid] : -1; }
  uint64_t unknown() const { return unknown_; }
  const std::string& run_id() const { return run_id_; }

 private:
  std::string run_id_;
  std::unique_ptr<Consumer> consumer_;
  std::map<pid_t, ChildState> children_;
  std::map<pid_t, int> exit_status_;
  uint64_t unknown_ = 0;
};

void ExpectExitedZero(Harness& h, pid_t pid) {
  const int status = h.exit_status(pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child " << pid << " status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << pid;
}

TEST(TransportTwoProcessTest, HundredThousandMessagesArriveIntactAndInOrder) {
  constexpr uint64_t kCount = 100000;
  Harness h(UniqueRunId());
  ASSERT_NO_FATAL_FAILURE(h.Spawn(0, kCount, /*detach=*/true));
  ASSERT_TRUE(h.RunUntilAllEnded()) << "safety net: producer never ended";
  ASSERT_EQ(h.children().size(), 1u);
  auto& [pid, c] = *h.children().begin();
  ExpectExitedZero(h, pid);
  EXPECT_EQ(c.next_seq, kCount);
  EXPECT_EQ(c.mismatches, 0u);
  EXPECT_EQ(c.ends, 1);
  EXPECT_TRUE(c.clean);
  EXPECT_EQ(h.unknown(), 0u);

  const ConsumerStats s = h.consumer().stats();
  EXPECT_EQ(s.messages, kCount);
  EXPECT_EQ(s.producer_messages_dropped, 0u);
  EXPECT_EQ(s.producer_events_dropped, 0u);
  EXPECT_EQ(s.framing_errors, 0u);
  uint64_t bytes = 0;
  for (uint64_t seq = 0; seq < kCount; ++seq) bytes += MessageSize(0, seq);
  EXPECT_EQ(s.bytes, bytes);
  EXPECT_GT(bytes, 20 * kRingBytes);  // the ring wrapped many times
  EXPECT_FALSE(RingSegmentsLeft(h.run_id()));
}

TEST(TransportTwoProcessTest, ProducerExitingWithoutDetachIsDrainedThenReapedUnclean) {
  constexpr uint64_t kCount = 1000;
  Harness h(UniqueRunId());
  ASSERT_NO_FATAL_FAILURE(h.Spawn(7, kCount, /*detach=*/false));
  ASSERT_TRUE(h.RunUntilAllEnded()) << "safety net: dead producer never reaped";
  auto& [pid, c] = *h.children().begin();
  ExpectExitedZero(h, pid);
  EXPECT_EQ(c.next_seq, kCount);
  EXPECT_EQ(c.mismatches, 0u);
  EXPECT_EQ(c.ends, 1);
  EXPECT_FALSE(c.clean);
  EXPECT_EQ(h.consumer().stats().framing_errors, 0u);
  EXPECT_EQ(h.consumer().stats().producers_active, 0u);
  EXPECT_FALSE(RingSegmentsLeft(h.run_id()));  // unlinked by the reaper, not the destructor
}

TEST(TransportTwoProcessTest, ConcurrentProducersKeepTheirOwnOrder) {
  constexpr uint32_t kChildren = 4;
  constexpr uint64_t kCount = 20000;
  Harness h(UniqueRunId());
  for (uint32_t i = 0; i < kChildren; ++i) ASSERT_NO_FATAL_FAILURE(h.Spawn(i, kCount, true));
  ASSERT_TRUE(h.RunUntilAllEnded()) << "safety net: producers never ended";
  ASSERT_EQ(h.children().size(), kChildren);
  for (auto& [pid, c] : h.children()) {
    ExpectExitedZero(h, pid);
    EXPECT_EQ(c.next_seq, kCount) << "child " << c.child;
    EXPECT_EQ(c.mismatches, 0u) << "child " << c.child;
    EXPECT_EQ(c.ends, 1) << "child " << c.child;
    EXPECT_TRUE(c.clean) << "child " << c.child;
  }
  const ConsumerStats s = h.consumer().stats();
  EXPECT_EQ(s.messages, kChildren * kCount);
  EXPECT_EQ(s.producers_seen, kChildren);
  EXPECT_EQ(s.producer_messages_dropped, 0u);
  EXPECT_EQ(h.unknown(), 0u);
  EXPECT_FALSE(RingSegmentsLeft(h.run_id()));
}

// The collector closes the run while a producer process is still sending
// into a small ring under backpressure: every message the producer's Send
// accepted is delivered by the final drain (Poll until Idle), and every other
// one is counted as dropped. Nothing is lost uncounted.
TEST(TransportTwoProcessTest, CloseMidStreamDeliversOrCountsEveryMessage) {
  constexpr uint64_t kCount = 20000;
  constexpr uint64_t kCloseAfter = 2000;
  const std::string run_id = UniqueRunId();
  std::string error;
  auto consumer = Consumer::Create(run_id, ConsumerOptions{}, &error);
  ASSERT_NE(consumer, nullptr) << error;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    ProducerOptions options;
    options.ring_bytes = kRingBytes;
    options.max_wait = std::chrono::seconds(30);
    auto producer = Producer::Attach(run_id, options, &error);
    if (producer == nullptr) _exit(2);
    uint64_t counts[2] = {0, 0};  // accepted, dropped
    for (uint64_t seq = 0; seq < kCount; ++seq) {
      const std::vector<uint8_t> m = BuildMessage(0, counts[0]);
      ++counts[producer->Send(m.data(), static_cast<uint32_t>(m.size()), 1) ? 0 : 1];
    }
    producer->Detach();
    _exit(write(fds[1], counts, sizeof(counts)) == sizeof(counts) ? 0 : 4);
  }
  close(fds[1]);

  uint64_t delivered = 0;
  uint64_t mismatches = 0;
  const auto on_message = [&](const ProducerInfo&, const uint8_t* data, uint32_t size) {
    const std::vector<uint8_t> want = BuildMessage(0, delivered);
    if (size != want.size() || std::memcmp(data, want.data(), size) != 0) ++mismatches;
    ++delivered;
  };
  const auto deadline = std::chrono::steady_clock::now() + kSafetyNet;
  while (delivered < kCloseAfter && std::chrono::steady_clock::now() < deadline) {
    if (consumer->Poll(on_message) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_GE(delivered, kCloseAfter) << "safety net";
  consumer->Close();
  while (!consumer->Idle() && std::chrono::steady_clock::now() < deadline) {
    if (consumer->Poll(on_message) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_TRUE(consumer->Idle()) << "safety net";
  const uint64_t final_drain = delivered;

  uint64_t counts[2] = {0, 0};
  ASSERT_EQ(read(fds[0], counts, sizeof(counts)), static_cast<ssize_t>(sizeof(counts)));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  consumer->Poll(on_message);  // reaps the detached producer

  EXPECT_EQ(delivered, final_drain);  // nothing arrived after Idle
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(counts[0] + counts[1], kCount);
  EXPECT_EQ(delivered, counts[0]);
  EXPECT_GT(counts[1], 0u);  // the ring holds far fewer than kCount - kCloseAfter
  const ConsumerStats s = consumer->stats();
  EXPECT_EQ(s.messages, counts[0]);
  EXPECT_EQ(s.producer_messages_dropped, counts[1]);
  EXPECT_EQ(s.producer_events_dropped, counts[1]);
  EXPECT_EQ(s.unread_messages, 0u);
  EXPECT_EQ(s.framing_errors, 0u);
  consumer.reset();
  EXPECT_FALSE(RingSegmentsLeft(run_id));
}

}  // namespace
}  // namespace smprof::transport
