// MessagePipe: messages and calls reach the pipe's thread in the order they
// were made, nothing is lost under back-pressure, a failure is kept.
#include "collector/message_pipe.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace smprof {
namespace {

std::vector<uint8_t> Message(uint32_t value, uint32_t size) {
  std::vector<uint8_t> m(size, static_cast<uint8_t>(value));
  std::memcpy(m.data(), &value, sizeof(value));
  return m;
}

TEST(MessagePipe, MessagesAndCallsArriveInOrderOnThePipesThread) {
  std::vector<std::string> seen;  // the pipe's thread only, until Drain
  std::thread::id handler_thread;
  MessagePipe pipe([&](const transport::ProducerInfo& p, const uint8_t* data, uint32_t size) {
    handler_thread = std::this_thread::get_id();
    uint32_t value = 0;
    std::memcpy(&value, data, sizeof(value));
    ASSERT_EQ(size, 16 + value % 100);
    for (uint32_t i = sizeof(value); i < size; ++i) ASSERT_EQ(data[i], static_cast<uint8_t>(value)) << value;
    seen.push_back("m" + std::to_string(p.pid) + ":" + std::to_string(value));
  });
  std::vector<std::string> expected;
  for (uint32_t i = 0; i < 5000; ++i) {
    const std::vector<uint8_t> m = Message(i, 16 + i % 100);
    pipe.Send(transport::ProducerInfo{1, 7 + i % 3}, m.data(), static_cast<uint32_t>(m.size()));
    expected.push_back("m" + std::to_string(7 + i % 3) + ":" + std::to_string(i));
    if (i % 1000 == 999) {
      pipe.Call([&seen, i] { seen.push_back("call " + std::to_string(i)); });
      expected.push_back("call " + std::to_string(i));
    }
    if (i % 1500 == 0) pipe.Flush();
  }
  pipe.Drain();
  EXPECT_EQ(seen, expected);
  EXPECT_NE(handler_thread, std::this_thread::get_id());
  EXPECT_EQ(pipe.error(), "");
}

// A slow handler holds the sender once max_batches batches wait; every
// message still arrives, and the sender was held (waits() > 0).
TEST(MessagePipe, ASlowHandlerHoldsTheSenderAndLosesNothing) {
  std::atomic<uint64_t> handled{0};
  std::atomic<bool> release{false};
  MessagePipe pipe(
      [&](const transport::ProducerInfo&, const uint8_t*, uint32_t) {
        while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        handled.fetch_add(1);
      },
      /*max_batches=*/1);
  // Each message is a quarter of a batch: 4 fill one.
  const std::vector<uint8_t> m = Message(1, MessagePipe::kBatchBytes / 4);
  std::atomic<bool> sent{false};
  std::thread sender([&] {
    for (int i = 0; i < 16; ++i) pipe.Send(transport::ProducerInfo{0, 1}, m.data(), static_cast<uint32_t>(m.size()));
    sent = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(sent.load()) << "16 messages (4 batches) passed a pipe of 1 batch with its handler held";
  release = true;
  sender.join();
  pipe.Drain();
  EXPECT_EQ(handled.load(), 16u);
  EXPECT_GT(pipe.waits(), 0u);
}

TEST(MessagePipe, AFailureIsKeptAndLaterWorkIsSkipped) {
  int after = 0;
  MessagePipe pipe([&](const transport::ProducerInfo&, const uint8_t*, uint32_t) { ++after; });
  pipe.Call([] { throw std::runtime_error("the builder failed"); });
  pipe.Drain();
  const std::vector<uint8_t> m = Message(3, 32);
  pipe.Send(transport::ProducerInfo{0, 1}, m.data(), static_cast<uint32_t>(m.size()));
  pipe.Drain();
  EXPECT_EQ(pipe.error(), "the builder failed");
  EXPECT_EQ(after, 0);
}

// The destructor hands over and handles what was sent before it returns.
TEST(MessagePipe, DestructionHandlesWhatWasSent) {
  int handled = 0;
  {
    MessagePipe pipe([&](const transport::ProducerInfo&, const uint8_t*, uint32_t) { ++handled; });
    const std::vector<uint8_t> m = Message(5, 64);
    for (int i = 0; i < 10; ++i) pipe.Send(transport::ProducerInfo{0, 1}, m.data(), static_cast<uint32_t>(m.size()));
  }
  EXPECT_EQ(handled, 10);
}

}  // namespace
}  // namespace smprof
