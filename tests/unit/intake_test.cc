// Intake: the transport read on a thread of its own into blocks, in order,
// with back-pressure once its budget is held.
#include "collector/intake.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "smprof/wire.h"

namespace smprof {
namespace {

std::vector<uint8_t> Message(uint32_t size, uint32_t seq) {
  std::vector<uint8_t> m(size);
  const wire::MsgHeader h{wire::kMsgChunks, size};
  std::memcpy(m.data(), &h, sizeof(h));
  for (uint32_t i = sizeof(h); i < size; ++i) m[i] = static_cast<uint8_t>(seq * 31 + i);
  return m;
}

class IntakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = "intake_" + std::to_string(getpid()) + "_" + std::to_string(counter_++);
    std::string error;
    consumer_ = transport::Consumer::Create(run_, {}, &error);
    ASSERT_NE(consumer_, nullptr) << error;
    transport::ProducerOptions options;
    options.ring_bytes = 8u << 20;
    producer_ = transport::Producer::Attach(run_, options, &error);
    ASSERT_NE(producer_, nullptr) << error;
  }
  void TearDown() override {
    producer_.reset();
    consumer_.reset();
    transport::RemoveRunSegments(run_);
  }
  static inline std::atomic<int> counter_{0};
  std::string run_;
  std::unique_ptr<transport::Consumer> consumer_;
  std::unique_ptr<transport::Producer> producer_;
};

// Messages arrive whole and in order, across more blocks than are ever held
// at once when each is released after processing.
TEST_F(IntakeTest, MessagesArriveWholeInOrderAndBlocksAreReused) {
  Intake intake(*consumer_, 4 * Intake::kBlockBytes);
  constexpr uint32_t kSize = 1u << 20;  // the largest message
  const uint32_t count = 3 * Intake::kBlockBytes / kSize;
  std::thread sender([&] {
    for (uint32_t i = 0; i < count; ++i) {
      const std::vector<uint8_t> m = Message(kSize, i);
      ASSERT_TRUE(producer_->Send(m.data(), kSize, 1, std::chrono::seconds(10))) << i;
    }
  });
  uint32_t seen = 0;
  std::deque<Intake::Item> batch;
  while (seen < count) {
    ASSERT_TRUE(intake.Pop(&batch, std::chrono::milliseconds(100)));
    for (const Intake::Item& item : batch) {
      ASSERT_FALSE(item.end);
      ASSERT_EQ(item.size, kSize);
      ASSERT_EQ(std::memcmp(item.message, Message(kSize, seen).data(), kSize), 0) << "message " << seen;
      ++seen;
      intake.Release(item);
    }
    batch.clear();
  }
  sender.join();
  EXPECT_EQ(intake.total_bytes(), uint64_t{count} * kSize);
  EXPECT_EQ(intake.queued_bytes(), 0u);
}

// With every block it may hold still unprocessed, the intake reads no more:
// the producer waits (and, past its wait, drops and counts) until the
// processing releases a block.
TEST_F(IntakeTest, AFullBudgetHoldsTheProducerUntilBlocksAreReleased) {
  Intake intake(*consumer_, 2 * Intake::kBlockBytes);
  constexpr uint32_t kSize = 1u << 20;
  const uint32_t fits = 2 * Intake::kBlockBytes / kSize;
  std::atomic<uint32_t> sent{0};
  std::thread sender([&] {
    for (uint32_t i = 0; i < fits + 16; ++i) {
      const std::vector<uint8_t> m = Message(kSize, i);
      if (producer_->Send(m.data(), kSize, 1, std::chrono::seconds(20))) ++sent;
    }
  });
  // Nothing released: the two blocks fill (one poll may take what the ring
  // holds beyond them: 8 messages), then the ring, then the producer waits.
  std::deque<Intake::Item> held;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (held.size() < fits && std::chrono::steady_clock::now() < until) {
    intake.Pop(&held, std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  intake.Pop(&held, std::chrono::milliseconds(10));
  EXPECT_GE(held.size(), fits);
  EXPECT_LE(held.size(), fits + 8) << "the intake read past its budget and a ring";
  EXPECT_LT(sent.load(), fits + 16);  // (the producer's stats wait for its Send in progress: read at the end)
  for (const Intake::Item& item : held) intake.Release(item);
  uint32_t got = static_cast<uint32_t>(held.size());
  std::deque<Intake::Item> more;
  while (got < fits + 16 && std::chrono::steady_clock::now() < until) {
    more.clear();
    intake.Pop(&more, std::chrono::milliseconds(50));
    for (const Intake::Item& item : more) {
      ++got;
      intake.Release(item);
    }
  }
  sender.join();
  EXPECT_EQ(got, fits + 16);
  EXPECT_EQ(producer_->stats().messages_dropped, 0u);
}

// Close drains what was sent before it; the producer's end comes after its
// last message, and Pop then reports the intake ended.
TEST_F(IntakeTest, CloseDrainsAndTheEndComesLast) {
  Intake intake(*consumer_, 4 * Intake::kBlockBytes);
  for (uint32_t i = 0; i < 5; ++i) {
    const std::vector<uint8_t> m = Message(4096, i);
    ASSERT_TRUE(producer_->Send(m.data(), 4096, 1));
  }
  producer_->Detach();
  intake.Close(std::chrono::seconds(5));
  std::deque<Intake::Item> items;
  while (intake.Pop(&items, std::chrono::milliseconds(50))) {
  }
  ASSERT_EQ(items.size(), 6u);
  for (size_t i = 0; i < 5; ++i) EXPECT_FALSE(items[i].end);
  EXPECT_TRUE(items[5].end);
  EXPECT_TRUE(items[5].clean);
  EXPECT_TRUE(intake.drained());
  for (const Intake::Item& item : items) intake.Release(item);
}

}  // namespace
}  // namespace smprof
