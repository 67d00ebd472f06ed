// Intake: the transport drained on a thread of its own, into a queue the
// collector's processing thread takes from.
//
// Producers ship read-backs as fast as the GPU records them; decoding and
// writing the trace may be slower. The intake keeps reading the rings so
// that producers (and the applications they live in) do not wait for the
// processing: what they shipped waits here, in host memory, and the trace
// can be finished after they have exited.
//
// Overflow policy: at most `budget_bytes` of messages are queued; past it
// the intake stops reading (refreshing the heartbeat alone, so producers
// know the collector lives), the rings fill, and producers wait for room
// (transport.h: a read-back waits longer than other messages before it is
// dropped and counted). Memory is bounded by the budget plus the rings.
//
// Thread-safe: the intake thread is the consumer's only user (Poll, Close,
// stats); Pop is for one processing thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "common/transport.h"

namespace smprof {

class Intake {
 public:
  struct Item {
    transport::ProducerInfo producer{};
    std::vector<uint8_t> message;  // empty for a producer's end
    bool end = false;              // the producer ended (after its last message)
    bool clean = false;            // ... by detaching
  };

  // Starts reading `consumer` (which must outlive the intake).
  Intake(transport::Consumer& consumer, uint64_t budget_bytes);
  ~Intake();  // stops reading (no final drain unless Close was called)

  // Appends what is queued to *batch, waiting up to `wait` for something.
  // False once the intake has ended (Close's drain is over) and nothing is
  // left.
  bool Pop(std::deque<Item>* batch, std::chrono::milliseconds wait);

  // Starts the final drain: the consumer is closed (producers drop and count
  // what they send from now on) and read until it is idle or `timeout`
  // passes. Returns at once.
  void Close(std::chrono::milliseconds timeout);
  // The final drain is over; drained(): the consumer went idle.
  bool ended() const { return ended_.load(std::memory_order_acquire); }
  bool drained() const { return drained_.load(std::memory_order_acquire); }

  // The consumer's counters as of the intake's last read.
  transport::ConsumerStats stats() const;
  // Bytes queued now, and ever.
  uint64_t queued_bytes() const;
  uint64_t total_bytes() const;

  // Default budget: a quarter of the machine's memory, at least 256 MiB.
  static uint64_t DefaultBudget();

  Intake(const Intake&) = delete;
  Intake& operator=(const Intake&) = delete;

 private:
  void Run();

  transport::Consumer& consumer_;
  const uint64_t budget_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  uint64_t queued_ = 0, total_ = 0;
  transport::ConsumerStats stats_;
  bool closing_ = false;
  std::chrono::milliseconds timeout_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> ended_{false};
  std::atomic<bool> drained_{false};
  std::thread thread_;
};

}  // namespace smprof
