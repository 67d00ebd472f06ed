// ActivityStore: CUPTI's kernel records, from delivery to the harvest that
// matches them with events.
//
// A harvest takes the records that ended before its read-back (the kernels
// whose events it holds, and late records of earlier ones), never later ones:
// the harvest thread may run while the application launches on. The read-back
// of a segment switched away from takes only the records of launches before
// the switch (by correlation id): later ones wrote the next segment.
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
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "smprof/wire.h"

namespace smprof::injector {

// What CUPTI said about one kernel execution: the fields the collector
// receives (kernel_id, flags and call are the shipper's to fill), where it
// ran, and the kernel's mangled name.
struct KernelRecord : wire::KernelRecordEntry {
  KernelRecord() : wire::KernelRecordEntry{} {}
  uint32_t device = 0;
  uint32_t context_id = 0;
  std::string name;  // mangled, as CUPTI reports it
};

class ActivityStore {
 public:
  // Records of kernels named `mangled` are kept from now on.
  void Track(const std::string& mangled);
  bool Tracked(const char* mangled) const;

  void Add(KernelRecord record);
  // Removes and returns the records of a context that ended by `until`,
  // of calls before `correlation_limit` (0: any).
  std::vector<KernelRecord> Take(uint32_t context_id, uint64_t until, uint64_t correlation_limit = 0);
  // The highest correlation id of a context's records taken by Take: its
  // launch calls up to it are known to have finished (0: none yet).
  uint64_t TakenThrough(uint32_t context_id) const;
  // Removes and returns a context's records of kernels named `name`.
  std::vector<KernelRecord> TakeNamed(uint32_t context_id, const std::string& name);

  uint64_t dropped() const;
  size_t size() const;

  static constexpr size_t kMaxRecords = size_t{4} << 20;

 private:
  mutable std::mutex mu_;
  std::unordered_set<std::string> tracked_;
  std::vector<KernelRecord> records_;
  std::unordered_map<uint32_t, uint64_t> taken_through_;
  uint64_t dropped_ = 0;
};

}  // namespace smprof::injector
