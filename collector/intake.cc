#include "collector/intake.h"

#include <unistd.h>

#include <algorithm>

namespace smprof {
namespace {

constexpr auto kIdleSleep = std::chrono::milliseconds(1);

}  // namespace

uint64_t Intake::DefaultBudget() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  const uint64_t memory = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  return std::max<uint64_t>(memory / 4, uint64_t{256} << 20);
}

Intake::Intake(transport::Consumer& consumer, uint64_t budget_bytes)
    : consumer_(consumer), budget_(budget_bytes), thread_([this] { Run(); }) {}

Intake::~Intake() {
  stop_.store(true, std::memory_order_release);
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Intake::Run() {
  const auto on_message = [this](const transport::ProducerInfo& producer, const uint8_t* data, uint32_t size) {
    Item item;
    item.producer = producer;
    item.message.assign(data, data + size);
    std::lock_guard<std::mutex> lock(mu_);
    queued_ += size;
    total_ += size;
    queue_.push_back(std::move(item));
  };
  const auto on_end = [this](const transport::ProducerInfo& producer, bool clean) {
    Item item;
    item.producer = producer;
    item.end = true;
    item.clean = clean;
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(item));
  };
  std::chrono::steady_clock::time_point deadline{};
  bool closing = false;
  while (!stop_.load(std::memory_order_acquire)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_ && !closing) {
        closing = true;
        deadline = std::chrono::steady_clock::now() + timeout_;
        consumer_.Close();
      }
    }
    size_t n = 0;
    if (queued_bytes() < budget_) {
      n = consumer_.Poll(on_message, on_end);
    } else {
      consumer_.Beat();  // full: producers wait for room, knowing the collector lives
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_ = consumer_.stats();
    }
    if (n != 0) cv_.notify_all();
    if (closing && n == 0 && (consumer_.Idle() || std::chrono::steady_clock::now() >= deadline)) {
      drained_.store(consumer_.Idle(), std::memory_order_release);
      break;
    }
    if (n == 0) std::this_thread::sleep_for(kIdleSleep);
  }
  ended_.store(true, std::memory_order_release);
  cv_.notify_all();
}

bool Intake::Pop(std::deque<Item>* batch, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [this] { return !queue_.empty() || ended_.load(std::memory_order_acquire); });
  if (queue_.empty()) return !ended_.load(std::memory_order_acquire);
  for (const Item& item : queue_) queued_ -= item.message.size();
  if (batch->empty()) {
    batch->swap(queue_);
  } else {
    std::move(queue_.begin(), queue_.end(), std::back_inserter(*batch));
    queue_.clear();
  }
  return true;
}

void Intake::Close(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  closing_ = true;
  timeout_ = timeout;
}

transport::ConsumerStats Intake::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

uint64_t Intake::queued_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

uint64_t Intake::total_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

}  // namespace smprof
