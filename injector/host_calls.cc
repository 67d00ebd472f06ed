#include "injector/host_calls.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace smprof::injector {

void HostCalls::Add(uint64_t correlation_id, const wire::HostCall& call, ClaimRates* rates,
                    const KernelClass* kernel) {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_.calls.size() >= kMaxCalls) EndCycle(/*early=*/true);
  current_.calls[correlation_id] = Call{call, rates, kernel};
}

std::vector<std::pair<uint64_t, HostCalls::Call>> HostCalls::After(uint64_t correlation_id) const {
  std::vector<std::pair<uint64_t, Call>> out;
  std::lock_guard<std::mutex> lock(mu_);
  const auto add = [&](const Cycle& cycle) {
    for (const auto& [id, call] : cycle.calls) {
      if (id > correlation_id) out.emplace_back(id, call);
    }
  };
  add(current_);
  for (const Cycle& cycle : previous_) add(cycle);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

void HostCalls::Exclude(uint64_t correlation_id, const void* kernel) {
  std::lock_guard<std::mutex> lock(mu_);
  current_.excluded.emplace(correlation_id, kernel);
}

const HostCalls::Call* HostCalls::FindLocked(uint64_t correlation_id) const {
  auto it = current_.calls.find(correlation_id);
  if (it != current_.calls.end()) return &it->second;
  for (const auto& cycle : previous_) {
    it = cycle.calls.find(correlation_id);
    if (it != cycle.calls.end()) return &it->second;
  }
  return nullptr;
}

HostCalls::Call HostCalls::Lookup(uint64_t correlation_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Call* found = FindLocked(correlation_id);
  return found != nullptr ? *found : Call{};
}

bool HostCalls::Excludes(uint64_t correlation_id, const void* kernel) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto in = [&](const Cycle& cycle) {
    if (cycle.excluded.empty()) return false;
    auto [first, last] = cycle.excluded.equal_range(correlation_id);
    return std::any_of(first, last, [&](const auto& entry) { return entry.second == kernel; });
  };
  return in(current_) || std::any_of(previous_.begin(), previous_.end(), in);
}

void HostCalls::EndHarvest() {
  std::lock_guard<std::mutex> lock(mu_);
  EndCycle(/*early=*/false);
}

void HostCalls::EndCycle(bool early) {
  previous_.push_front(std::move(current_));
  current_ = Cycle{};
  while (previous_.size() >= kCycles) {
    if (early) forgotten_ += previous_.back().calls.size();
    previous_.pop_back();
  }
}

uint64_t HostCalls::forgotten() const {
  std::lock_guard<std::mutex> lock(mu_);
  return forgotten_;
}

size_t HostCalls::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = current_.calls.size();
  for (const auto& cycle : previous_) n += cycle.calls.size();
  return n;
}

namespace {

std::mutex g_threads_mu;
std::unordered_map<uint32_t, std::string>& Threads() {
  static auto* threads = new std::unordered_map<uint32_t, std::string>();  // outlives exit handlers
  return *threads;
}

}  // namespace

uint32_t CurrentTid() {
  thread_local const uint32_t tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  return tid;
}

void NoteCurrentThread() {
  thread_local bool noted = false;
  if (noted) return;
  noted = true;
  char name[64] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0) name[0] = '\0';
  std::lock_guard<std::mutex> lock(g_threads_mu);
  Threads()[CurrentTid()] = name;
}

std::string ThreadName(uint32_t tid) {
  std::lock_guard<std::mutex> lock(g_threads_mu);
  auto it = Threads().find(tid);
  return it != Threads().end() ? it->second : std::string();
}

}  // namespace smprof::injector
