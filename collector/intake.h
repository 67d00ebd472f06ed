// Intake: the transport drained on a thread of its own, into a queue the
// collector's processing thread takes from.
//
// Producers ship read-backs as fast as the GPU records them; decoding and
// writing the trace may be slower. The intake keeps reading the rings so
// that producers (and the applications they live in) do not wait for the
// processing: what they shipped waits here, in host memory, and the trace
// can be finished after they have exited.
//
// Messages are copied once, from a ring into blocks of kBlockBytes (mapped
// with transparent huge pages where the kernel allows: a run may queue
// gigabytes, and faulting them in 4 KiB at a time cost as much as copying
// them); a block is unmapped, or kept for reuse, once every message in it has
// been processed (Release). Once blocks are in demand, a second thread keeps
// kReadyBlocks mapped and faulted in ahead of the intake, so that its copies
// never wait for the kernel to provide pages.
//
// Overflow policy: at most `budget_bytes` of blocks are held; past it the
// intake stops reading (refreshing the heartbeat alone, so producers know
// the collector lives), the rings fill, and producers wait for room
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
    const uint8_t* message = nullptr;  // valid until Release; null for a producer's end
    uint32_t size = 0;
    uint32_t block = UINT32_MAX;     // the block keeping it (UINT32_MAX: `spilled`, or none)
    std::vector<uint8_t> spilled;    // the message, when no block could be mapped
    bool end = false;                // the producer ended (after its last message)
    bool clean = false;              // ... by detaching
  };

  // Starts reading `consumer` (which must outlive the intake).
  Intake(transport::Consumer& consumer, uint64_t budget_bytes);
  ~Intake();  // stops reading (no final drain unless Close was called)

  // Appends what is queued to *batch, waiting up to `wait` for something.
  // False once the intake has ended (Close's drain is over) and nothing is
  // left. Each item is Released once processed.
  bool Pop(std::deque<Item>* batch, std::chrono::milliseconds wait);
  void Release(const Item& item);

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
  static constexpr size_t kBlockBytes = size_t{64} << 20;

  Intake(const Intake&) = delete;
  Intake& operator=(const Intake&) = delete;

 private:
  struct Block {
    uint8_t* data = nullptr;
    size_t used = 0;      // (intake thread)
    size_t pending = 0;   // messages placed in it and not released (mu_)
    bool current = false;  // messages are still placed in it (mu_)
  };
  void Run();
  void Prepare();  // the preparer thread
  // Where the next message of `size` bytes goes (intake thread; mu_ not held).
  uint8_t* Place(uint32_t size);
  void FreeBlockLocked(uint32_t index);  // mu_ held: nothing in it any more

  transport::Consumer& consumer_;
  const uint64_t budget_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  std::vector<Block> blocks_;     // index = Item::block
  std::vector<uint32_t> spare_;  // mapped, empty blocks for reuse (mu_)
  static constexpr size_t kReadyBlocks = 2;
  std::vector<uint8_t*> ready_;   // mapped and faulted in by the preparer, not in blocks_ yet (mu_)
  bool wanted_ready_ = false;     // blocks are in demand (mu_)
  std::condition_variable prepare_cv_;
  uint32_t current_ = UINT32_MAX;  // the block being filled (intake thread)
  uint64_t mapped_ = 0;             // bytes of blocks mapped (mu_)
  uint64_t queued_ = 0, total_ = 0;
  transport::ConsumerStats stats_;
  bool closing_ = false;
  std::chrono::milliseconds timeout_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> ended_{false};
  std::atomic<bool> drained_{false};
  std::thread thread_;
  std::thread preparer_;
};

}  // namespace smprof
