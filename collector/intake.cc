#include "collector/intake.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "smprof/wire.h"

namespace smprof {
namespace {

constexpr auto kIdleSleep = std::chrono::milliseconds(1);
constexpr size_t kSpareBlocks = 2;  // kept mapped for reuse

// `touch`: every page faulted in now (the preparer's thread), so that the
// copies into it run at memory speed (faulting while copying cost the
// intake two thirds of its speed).
uint8_t* MapBlock(bool touch) {
  void* p = mmap(nullptr, Intake::kBlockBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#if defined(MADV_HUGEPAGE)
  madvise(p, Intake::kBlockBytes, MADV_HUGEPAGE);  // a hint: 2 MiB faults where the kernel allows
#endif
  auto* block = static_cast<uint8_t*>(p);
  if (touch) {
    for (size_t at = 0; at < Intake::kBlockBytes; at += 4096) block[at] = 0;
  }
  return block;
}

}  // namespace

uint64_t Intake::DefaultBudget() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  const uint64_t memory = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  return std::max<uint64_t>(memory / 4, uint64_t{256} << 20);
}

Intake::Intake(transport::Consumer& consumer, uint64_t budget_bytes)
    : consumer_(consumer),
      budget_(std::max<uint64_t>(budget_bytes, 2 * kBlockBytes)),
      thread_([this] { Run(); }),
      preparer_([this] { Prepare(); }) {}

Intake::~Intake() {
  {
    std::lock_guard<std::mutex> lock(mu_);  // the preparer checks it under the lock
    stop_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  prepare_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (preparer_.joinable()) preparer_.join();
  for (Block& b : blocks_) {
    if (b.data != nullptr) munmap(b.data, kBlockBytes);
  }
  for (uint8_t* data : ready_) munmap(data, kBlockBytes);
}

void Intake::Prepare() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Once blocks are in demand, keep kReadyBlocks ahead, within the budget.
    prepare_cv_.wait(lock, [this] {
      return stop_.load(std::memory_order_acquire) || ended_.load(std::memory_order_acquire) ||
             (wanted_ready_ && ready_.size() < kReadyBlocks && mapped_ + kBlockBytes <= budget_);
    });
    if (stop_.load(std::memory_order_acquire) || ended_.load(std::memory_order_acquire)) return;
    mapped_ += kBlockBytes;  // counted while it is prepared
    lock.unlock();
    uint8_t* data = MapBlock(/*touch=*/true);
    lock.lock();
    if (data == nullptr) {
      mapped_ -= kBlockBytes;
      wanted_ready_ = false;  // no memory now: the intake maps its own, or spills
      continue;
    }
    ready_.push_back(data);
  }
}

uint8_t* Intake::Place(uint32_t size) {
  if (current_ != UINT32_MAX && blocks_[current_].used + size <= kBlockBytes) {
    Block& b = blocks_[current_];
    uint8_t* at = b.data + b.used;
    b.used += size;
    return at;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (current_ != UINT32_MAX) {
    blocks_[current_].current = false;
    if (blocks_[current_].pending == 0) FreeBlockLocked(current_);
  }
  current_ = UINT32_MAX;
  uint32_t index;
  if (!spare_.empty()) {
    index = spare_.back();
    spare_.pop_back();
  } else {
    uint8_t* data = nullptr;
    if (!ready_.empty()) {
      data = ready_.back();
      ready_.pop_back();
    } else {
      data = MapBlock(/*touch=*/false);
      if (data == nullptr) return nullptr;  // the transport's own copy, then a heap copy (Run)
      mapped_ += kBlockBytes;
    }
    wanted_ready_ = true;
    prepare_cv_.notify_one();
    auto free_slot = std::find_if(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.data == nullptr; });
    if (free_slot == blocks_.end()) free_slot = blocks_.insert(blocks_.end(), Block{});
    free_slot->data = data;
    index = static_cast<uint32_t>(free_slot - blocks_.begin());
  }
  Block& b = blocks_[index];
  b.used = size;
  b.pending = 0;
  b.current = true;
  current_ = index;
  return b.data;
}

void Intake::FreeBlockLocked(uint32_t index) {
  Block& b = blocks_[index];
  b.used = 0;
  if (spare_.size() < kSpareBlocks && mapped_ <= budget_) {
    spare_.push_back(index);
    return;
  }
  munmap(b.data, kBlockBytes);
  b.data = nullptr;
  mapped_ -= kBlockBytes;
}

void Intake::Run() {
  // Where the message being delivered went: a block, or (none could be
  // mapped) the transport's own copy, copied into the item's heap buffer.
  uint32_t placed_in = UINT32_MAX;
  const auto place = [&](uint32_t size) -> uint8_t* {
    uint8_t* at = Place(size);
    placed_in = at != nullptr ? current_ : UINT32_MAX;
    return at;
  };
  const auto on_message = [&](const transport::ProducerInfo& producer, const uint8_t* data, uint32_t size) {
    Item item;
    item.producer = producer;
    item.size = size;
    item.block = placed_in;
    if (placed_in != UINT32_MAX) {
      item.message = data;
    } else {
      item.spilled.assign(data, data + size);
      item.message = item.spilled.data();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (item.block != UINT32_MAX) ++blocks_[item.block].pending;
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
    bool full;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_ && !closing) {
        closing = true;
        deadline = std::chrono::steady_clock::now() + timeout_;
        consumer_.Close();
      }
      // Full: past the budget (one poll may place what a ring holds beyond
      // it), or no block may be mapped and the current one may not take the
      // largest message.
      const uint64_t held = mapped_ - (spare_.size() + ready_.size()) * kBlockBytes;  // blocks with messages in them
      full = held > budget_ ||
             (held + kBlockBytes > budget_ && spare_.empty() &&
              (current_ == UINT32_MAX || blocks_[current_].used + wire::kMaxMessageBytes > kBlockBytes));
    }
    size_t n = 0;
    if (!full) {
      n = consumer_.Poll(place, on_message, on_end);
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  prepare_cv_.notify_all();
}

bool Intake::Pop(std::deque<Item>* batch, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [this] { return !queue_.empty() || ended_.load(std::memory_order_acquire); });
  if (queue_.empty()) return !ended_.load(std::memory_order_acquire);
  for (const Item& item : queue_) queued_ -= item.size;
  std::move(queue_.begin(), queue_.end(), std::back_inserter(*batch));
  queue_.clear();
  return true;
}

void Intake::Release(const Item& item) {
  if (item.end || item.block == UINT32_MAX) return;  // nothing kept, or kept by the item
  std::lock_guard<std::mutex> lock(mu_);
  Block& b = blocks_[item.block];
  if (--b.pending == 0 && !b.current) FreeBlockLocked(item.block);
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
