#include "injector/activity_store.h"

#include <algorithm>
#include <iterator>

namespace smprof::injector {

void ActivityStore::Track(const std::string& mangled) {
  std::lock_guard<std::mutex> lock(mu_);
  tracked_.insert(mangled);
}

bool ActivityStore::Tracked(const char* mangled) const {
  if (mangled == nullptr) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return tracked_.count(mangled) != 0;
}

void ActivityStore::Add(KernelRecord record) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tracked_.count(record.name) == 0) return;
  if (records_.size() >= kMaxRecords) {
    ++dropped_;
    return;
  }
  records_.push_back(std::move(record));
}

std::vector<KernelRecord> ActivityStore::Take(uint32_t context_id, uint64_t until, uint64_t correlation_limit) {
  std::lock_guard<std::mutex> lock(mu_);
  auto keep = std::stable_partition(records_.begin(), records_.end(), [&](const KernelRecord& r) {
    return !(r.context_id == context_id && r.end_ns <= until &&
             (correlation_limit == 0 || r.correlation_id < correlation_limit));
  });
  std::vector<KernelRecord> taken(std::make_move_iterator(keep), std::make_move_iterator(records_.end()));
  records_.erase(keep, records_.end());
  uint64_t& through = taken_through_[context_id];
  for (const KernelRecord& r : taken) through = std::max(through, r.correlation_id);
  return taken;
}

uint64_t ActivityStore::TakenThrough(uint32_t context_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = taken_through_.find(context_id);
  return it != taken_through_.end() ? it->second : 0;
}

std::vector<KernelRecord> ActivityStore::TakeNamed(uint32_t context_id, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto keep = std::stable_partition(records_.begin(), records_.end(),
                                    [&](const KernelRecord& r) { return !(r.context_id == context_id && r.name == name); });
  std::vector<KernelRecord> taken(std::make_move_iterator(keep), std::make_move_iterator(records_.end()));
  records_.erase(keep, records_.end());
  return taken;
}

uint64_t ActivityStore::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

size_t ActivityStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

}  // namespace smprof::injector
