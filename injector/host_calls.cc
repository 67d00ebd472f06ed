#include "injector/host_calls.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace smprof::injector {

void HostCalls::Add(uint64_t correlation_id, const wire::HostCall& call) {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_.size() >= kMaxCalls) EndCycle(/*early=*/true);
  current_[correlation_id] = call;
}

wire::HostCall HostCalls::Find(uint64_t correlation_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = current_.find(correlation_id);
  if (it != current_.end()) return it->second;
  for (const auto& cycle : previous_) {
    it = cycle.find(correlation_id);
    if (it != cycle.end()) return it->second;
  }
  return wire::HostCall{};
}

void HostCalls::EndHarvest() {
  std::lock_guard<std::mutex> lock(mu_);
  EndCycle(/*early=*/false);
}

void HostCalls::EndCycle(bool early) {
  previous_.push_front(std::move(current_));
  current_.clear();
  while (previous_.size() >= kCycles) {
    if (early) forgotten_ += previous_.back().size();
    previous_.pop_back();
  }
}

uint64_t HostCalls::forgotten() const {
  std::lock_guard<std::mutex> lock(mu_);
  return forgotten_;
}

size_t HostCalls::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = current_.size();
  for (const auto& cycle : previous_) n += cycle.size();
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
