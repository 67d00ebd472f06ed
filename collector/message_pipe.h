// MessagePipe: the launch assembler's output, handed in order to the thread
// that builds the trace.
//
// The collector's stages ran on one thread: the assembler (matching a
// read-back's segments with their launches and framing their events) and the
// builder (range matching, handing records to the sinks) took about equal
// shares of it. A pipe between them makes two stages of a pipeline: the
// calling thread copies each framed message into a batch (a few MiB of
// messages back to back) and the pipe's thread hands them to the handler in
// the order they were sent. Other work for the builder's thread (a producer's
// end, a control message, a flush) goes through the same batches as a
// closure (Call), so it happens exactly between the messages it was called
// between.
//
// Overflow policy: at most `max_batches` filled batches wait; a Send or Call
// that fills one more blocks the calling thread until the handler catches up
// (back-pressure reaches the intake, its budget and the producers, as a slow
// builder did before). Nothing is dropped. Memory: max_batches x about
// kBatchBytes, plus the batch being filled.
//
// What a closure throws is kept (error()) and ends the pipe's work: later
// messages are discarded, Drain returns. Calls come from one thread at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/transport.h"

namespace smprof {

class MessagePipe {
 public:
  using Handler = std::function<void(const transport::ProducerInfo&, const uint8_t* data, uint32_t size)>;

  static constexpr size_t kBatchBytes = size_t{4} << 20;
  static constexpr size_t kMaxBatches = 8;

  explicit MessagePipe(Handler handler, size_t max_batches = kMaxBatches);
  // Hands over what was sent, waits until it has been handled, then stops
  // the thread.
  ~MessagePipe();

  // Copies the message; the handler gets it on the pipe's thread.
  void Send(const transport::ProducerInfo& producer, const uint8_t* data, uint32_t size);
  // Runs `call` on the pipe's thread after the messages sent before it.
  void Call(std::function<void()> call);
  // Hands over the batch being filled (the thread then need not wait for
  // more before handling it).
  void Flush();
  // Flushes and waits until everything sent or called has been handled.
  // Afterwards, until the next Send or Call, what the handler uses may be
  // used from the calling thread.
  void Drain();

  // What a handler or call threw, "" if nothing did (read after Drain).
  std::string error() const;
  // How often a Send or Call waited for room.
  uint64_t waits() const { return waits_; }
  // How long the pipe's thread has spent handling, in total.
  double busy_seconds() const { return busy_ns_.load(std::memory_order_relaxed) / 1e9; }

  MessagePipe(const MessagePipe&) = delete;
  MessagePipe& operator=(const MessagePipe&) = delete;

 private:
  struct Batch;
  Batch& Current();
  void HandOver();
  void Run();

  Handler handler_;
  const size_t max_batches_;
  std::unique_ptr<Batch> current_;  // the calling thread's
  uint64_t waits_ = 0;              // the calling thread's

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Batch>> queue_;  // filled, waiting (mu_)
  std::vector<std::unique_ptr<Batch>> free_;  // handled, for reuse (mu_)
  bool busy_ = false;                         // the thread is handling a batch (mu_)
  bool stop_ = false;                         // (mu_)
  std::string error_;                         // (mu_)
  std::atomic<uint64_t> busy_ns_{0};
  std::thread thread_;
};

}  // namespace smprof
