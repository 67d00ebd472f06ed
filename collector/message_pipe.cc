#include "collector/message_pipe.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <utility>

namespace smprof {

// Messages back to back in `bytes`; `entries` in the order sent, a closure
// entry pointing into `calls`.
struct MessagePipe::Batch {
  struct Entry {
    transport::ProducerInfo producer;
    uint32_t size;      // 0: a call
    uint64_t position;  // offset in `bytes`, or index in `calls`
  };
  std::vector<uint8_t> bytes;
  std::vector<Entry> entries;
  std::vector<std::function<void()>> calls;

  void Clear() {
    bytes.clear();
    entries.clear();
    calls.clear();
  }
};

MessagePipe::MessagePipe(Handler handler, size_t max_batches)
    : handler_(std::move(handler)), max_batches_(max_batches == 0 ? 1 : max_batches) {
  thread_ = std::thread([this] { Run(); });
}

MessagePipe::~MessagePipe() {
  Drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

MessagePipe::Batch& MessagePipe::Current() {
  if (!current_) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      current_ = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (!current_) {
    current_ = std::make_unique<Batch>();
    current_->bytes.reserve(kBatchBytes);
  }
  return *current_;
}

void MessagePipe::Send(const transport::ProducerInfo& producer, const uint8_t* data, uint32_t size) {
  if (size == 0) return;
  Batch& b = Current();
  b.entries.push_back(Batch::Entry{producer, size, b.bytes.size()});
  b.bytes.insert(b.bytes.end(), data, data + size);
  if (b.bytes.size() >= kBatchBytes) HandOver();
}

void MessagePipe::Call(std::function<void()> call) {
  Batch& b = Current();
  b.entries.push_back(Batch::Entry{transport::ProducerInfo{}, 0, b.calls.size()});
  b.calls.push_back(std::move(call));
}

void MessagePipe::HandOver() {
  if (!current_ || current_->entries.empty()) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (queue_.size() >= max_batches_) {
    ++waits_;
    cv_.wait(lock, [&] { return queue_.size() < max_batches_; });
  }
  queue_.push_back(std::move(current_));
  lock.unlock();
  cv_.notify_all();
}

void MessagePipe::Flush() { HandOver(); }

void MessagePipe::Drain() {
  HandOver();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

std::string MessagePipe::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void MessagePipe::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    std::unique_ptr<Batch> batch = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool failed = !error_.empty();
    lock.unlock();
    cv_.notify_all();  // room for the sender
    std::string error;
    const auto started = std::chrono::steady_clock::now();
    if (!failed) {
      try {
        for (const Batch::Entry& e : batch->entries) {
          if (e.size == 0) {
            batch->calls[e.position]();
          } else {
            handler_(e.producer, batch->bytes.data() + e.position, e.size);
          }
        }
      } catch (const std::exception& ex) {
        error = ex.what();
      } catch (...) {
        error = "unknown exception";
      }
    }
    batch->Clear();
    busy_ns_.fetch_add(
        static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count()),
        std::memory_order_relaxed);
    lock.lock();
    if (!error.empty() && error_.empty()) error_ = std::move(error);
    free_.push_back(std::move(batch));
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace smprof
