// ActivityStore: CUPTI's kernel records, from delivery to the harvest that
// matches them with events.
//
// A harvest takes the records that ended before its read-back (the kernels
// whose events it holds, and late records of earlier ones), never later ones:
// the harvest thread may run while the application launches on.
//
// CUPTI delivers records asynchronously, on its own thread, in buffers (see
// cupti_subscriber.cc); only kernels of opted-in modules (Track) and the
// injector's probes are kept. A harvest takes a context's records that ended
// by a time; records that arrive later wait for the next harvest (the
// harvester carries events whose record is missing over to it).
//
// Overflow policy: at most kMaxRecords are held; past it a record is dropped
// and counted (dropped()); its launch's events then ship without launch
// details. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace smprof::injector {

// What CUPTI said about one kernel execution.
struct KernelRecord {
  uint64_t grid_id = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t correlation_id = 0;
  uint64_t stream_id = 0;
  uint32_t device = 0;
  uint32_t context_id = 0;
  uint32_t graph_id = 0;
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t dynamic_smem = 0;
  uint32_t static_smem = 0;
  uint32_t registers = 0;
  std::string name;  // mangled, as CUPTI reports it
};

class ActivityStore {
 public:
  // Records of kernels named `mangled` are kept from now on.
  void Track(const std::string& mangled);
  bool Tracked(const char* mangled) const;

  void Add(KernelRecord record);
  // Removes and returns the records of a context that ended by `until`.
  std::vector<KernelRecord> Take(uint32_t context_id, uint64_t until);
  // Removes and returns a context's records of kernels named `name`.
  std::vector<KernelRecord> TakeNamed(uint32_t context_id, const std::string& name);

  uint64_t dropped() const;
  size_t size() const;

  static constexpr size_t kMaxRecords = size_t{4} << 20;

 private:
  mutable std::mutex mu_;
  std::unordered_set<std::string> tracked_;
  std::vector<KernelRecord> records_;
  uint64_t dropped_ = 0;
};

}  // namespace smprof::injector
