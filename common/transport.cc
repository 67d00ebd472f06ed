// Shared-memory transport: implementation (protocol in transport.h, byte
// layout in transport_layout.h).
//
// Hazards handled here:
//  - tmpfs allocates lazily, so a store into a truncated but unbacked page
//    raises SIGBUS when /dev/shm is full. Segments are sized with
//    posix_fallocate, which fails cleanly (ENOSPC) at creation instead.
//  - A forked child inherits the Producer and its mappings. It must not write
//    the parent's ring nor detach it: every operation compares getpid() with
//    the attaching pid and, in a child, only counts the drop locally.
//  - Liveness is kill(pid, 0): a dead but unreaped child (zombie) still counts
//    as alive until its parent waits for it.
//  - The consumer owns read_pos: it keeps its own copy and never reads the
//    shared one back; write_pos, headers and drop counters are untrusted.
//  - Boost.Interprocess throws; every public entry point catches and turns
//    the exception into an error string or a false/zero result.
#include "common/transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include "common/transport_layout.h"
#include "smprof/wire.h"

namespace smprof::transport {

namespace bip = boost::interprocess;
using internal::ControlHeader;
using internal::RegistryEntry;
using internal::RingHeader;

namespace {

constexpr uint32_t kMaxMsgType = wire::kMsgStats;

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool ProcessAlive(uint32_t pid) {
  if (pid == 0) return false;
  return !(kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH);
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

uint64_t RoundUpRingBytes(size_t requested) {
  uint64_t bytes = internal::kMinRingBytes;
  while (bytes < requested && bytes < internal::kMaxRingBytes) bytes <<= 1;
  return bytes;
}

void RemoveSegment(const std::string& name) {
  try {
    bip::shared_memory_object::remove(name.c_str());
  } catch (const std::exception&) {
  }
}

// Gives the open segment `size` bytes of real tmpfs backing (see top comment).
// Returns 0 or an errno value.
int AllocateSegment(const bip::shared_memory_object& shm, uint64_t size) {
  const int fd = shm.get_mapping_handle().handle;
  return posix_fallocate(fd, 0, static_cast<off_t>(size));
}

std::string ShmPath(const std::string& name) { return "/dev/shm/" + name; }

// A ring name of `run_id`: "smprof-<run>-<digits>-<digits>".
bool IsRingNameOf(const std::string& name, const std::string& control) {
  if (name.size() <= control.size() || name.compare(0, control.size(), control) != 0) return false;
  size_t i = control.size();
  for (int part = 0; part < 2; ++part) {
    if (i >= name.size() || name[i] != '-') return false;
    ++i;
    const size_t digits_begin = i;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    if (i == digits_begin) return false;
  }
  return i == name.size();
}

}  // namespace

bool IsValidRunId(const std::string& run_id) {
  if (run_id.empty() || run_id.size() > 64) return false;
  return std::all_of(run_id.begin(), run_id.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

std::string ControlSegmentName(const std::string& run_id) { return "smprof-" + run_id; }

void RemoveRunSegments(const std::string& run_id) {
  if (!IsValidRunId(run_id)) return;
  const std::string control = ControlSegmentName(run_id);
  RemoveSegment(control);
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  std::vector<std::string> doomed;
  while (const dirent* ent = readdir(dir)) {
    const std::string name = ent->d_name;
    if (IsRingNameOf(name, control)) doomed.push_back(name);
  }
  closedir(dir);
  for (const std::string& name : doomed) RemoveSegment(name);
}

// ---------------------------------------------------------------------------
// Producer
// ---------------------------------------------------------------------------

struct Producer::Impl {
  ProducerOptions options;
  uint32_t pid = 0;  // attaching process
  uint32_t entry = 0;
  bip::mapped_region control_region;
  bip::mapped_region ring_region;
  ControlHeader* control = nullptr;
  RegistryEntry* reg = nullptr;
  RingHeader* ring = nullptr;
  uint8_t* data = nullptr;
  uint64_t capacity = 0;

  mutable std::mutex mu;
  uint64_t write_pos = 0;  // producer's own copy of ring->write_pos
  bool detached = false;
  ProducerStats stats;

  bool InOwner() const { return static_cast<uint32_t>(getpid()) == pid; }

  bool CollectorAlive() const {
    const uint64_t beat = control->heartbeat_ns.load(std::memory_order_acquire);
    const uint64_t now = MonotonicNs();
    const auto timeout_ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(options.collector_timeout).count());
    return beat >= now || now - beat < timeout_ns;
  }

  // Requires mu. `shared`: also count in the ring header for the collector.
  bool Drop(uint32_t size, uint64_t events, bool shared) {
    ++stats.messages_dropped;
    stats.bytes_dropped += size;
    stats.events_dropped += events;
    if (shared) {
      ring->messages_dropped.fetch_add(1, std::memory_order_relaxed);
      ring->bytes_dropped.fetch_add(size, std::memory_order_relaxed);
      ring->events_dropped.fetch_add(events, std::memory_order_relaxed);
    }
    return false;
  }
};

Producer::Producer() : impl_(std::make_unique<Impl>()) {}

Producer::~Producer() { Detach(); }

std::unique_ptr<Producer> Producer::Attach(const std::string& run_id, const ProducerOptions& options,
                                           std::string* error) {
  std::string scratch;
  std::string& err = error != nullptr ? *error : scratch;
  if (!IsValidRunId(run_id)) {
    err = "invalid smprof run id '" + run_id + "' (expected 1-64 characters of [A-Za-z0-9_-])";
    return nullptr;
  }
  const std::string control_name = ControlSegmentName(run_id);
  RegistryEntry* claimed = nullptr;
  std::string ring_name;
  try {
    std::unique_ptr<Producer> producer(new Producer());
    Impl& s = *producer->impl_;
    s.options = options;
    s.pid = static_cast<uint32_t>(getpid());
    {
      bip::shared_memory_object shm;
      try {
        bip::shared_memory_object opened(bip::open_only, control_name.c_str(), bip::read_write);
        shm.swap(opened);
      } catch (const bip::interprocess_exception& e) {
        if (e.get_error_code() == bip::not_found_error) {
          err = "no smprof collector for run '" + run_id + "' (" + ShmPath(control_name) +
                " does not exist): start the application under smprof-run";
        } else {
          err = "cannot open " + ShmPath(control_name) + ": " + e.what();
        }
        return nullptr;
      }
      bip::offset_t size = 0;
      if (!shm.get_size(size) || size < static_cast<bip::offset_t>(sizeof(ControlHeader))) {
        err = ShmPath(control_name) + " is not an initialised smprof control segment (" +
              std::to_string(size) + " bytes): remove it or use matching smprof builds";
        return nullptr;
      }
      bip::mapped_region region(shm, bip::read_write, 0, static_cast<size_t>(size));
      s.control_region.swap(region);
    }
    s.control = static_cast<ControlHeader*>(s.control_region.get_address());
    if (s.control->magic.load(std::memory_order_acquire) != internal::kControlMagic) {
      err = ShmPath(control_name) + " is not an smprof control segment (bad magic)";
      return nullptr;
    }
    if (s.control->version != wire::kTransportVersion) {
      err = "collector speaks transport v" + std::to_string(s.control->version) +
            ", this injector v" + std::to_string(wire::kTransportVersion) +
            ": use matching smprof builds";
      return nullptr;
    }
    const uint32_t max_producers = s.control->max_producers;
    if (max_producers > internal::kMaxProducers ||
        internal::ControlSegmentBytes(max_producers) > s.control_region.get_size()) {
      err = ShmPath(control_name) + " is corrupt (registry larger than the segment)";
      return nullptr;
    }

    RegistryEntry* entries = internal::Entries(s.control);
    for (uint32_t i = 0; i < max_producers && claimed == nullptr; ++i) {
      uint32_t expected = internal::kEntryFree;
      if (entries[i].state.compare_exchange_strong(expected, internal::kEntryClaimed,
                                                   std::memory_order_acq_rel)) {
        claimed = &entries[i];
        s.entry = i;
      }
    }
    if (claimed == nullptr) {
      s.control->registry_full.fetch_add(1, std::memory_order_relaxed);
      err = "smprof run '" + run_id + "' has all " + std::to_string(max_producers) +
            " producer registry entries in use: raise the collector's max producers";
      return nullptr;
    }
    const uint32_t generation = claimed->generation.fetch_add(1, std::memory_order_relaxed) + 1;
    claimed->pid.store(s.pid, std::memory_order_release);

    s.capacity = RoundUpRingBytes(options.ring_bytes);
    const uint64_t segment_bytes = internal::kRingDataOffset + s.capacity;
    ring_name = internal::RingSegmentName(run_id, s.entry, generation);
    bip::shared_memory_object shm;
    for (int attempt = 0;; ++attempt) {
      try {
        bip::shared_memory_object created(bip::create_only, ring_name.c_str(), bip::read_write,
                                          bip::permissions(0600));
        shm.swap(created);
        break;
      } catch (const bip::interprocess_exception& e) {
        // A stale segment of a crashed collector: names are never reused live.
        if (e.get_error_code() != bip::already_exists_error || attempt > 0) throw;
        RemoveSegment(ring_name);
      }
    }
    if (const int rc = AllocateSegment(shm, segment_bytes); rc != 0) {
      err = "cannot allocate " + std::to_string(segment_bytes) + " bytes for " + ShmPath(ring_name) +
            ": " + std::strerror(rc) + " (is /dev/shm full? lower the ring size)";
      RemoveSegment(ring_name);
      claimed->pid.store(0, std::memory_order_relaxed);
      claimed->state.store(internal::kEntryFree, std::memory_order_release);
      return nullptr;
    }
    bip::mapped_region region(shm, bip::read_write, 0, static_cast<size_t>(segment_bytes));
    s.ring_region.swap(region);
    s.ring = static_cast<RingHeader*>(s.ring_region.get_address());
    s.data = static_cast<uint8_t*>(s.ring_region.get_address()) + internal::kRingDataOffset;
    s.ring->magic = internal::kRingMagic;
    s.ring->version = wire::kTransportVersion;
    s.ring->pid = s.pid;
    s.ring->capacity = s.capacity;
    claimed->ring_bytes.store(s.capacity, std::memory_order_relaxed);
    claimed->state.store(internal::kEntryReady, std::memory_order_release);
    s.reg = claimed;  // from here on the destructor detaches it
    return producer;
  } catch (const std::exception& e) {
    err = "cannot attach to smprof run '" + run_id + "': " + e.what();
    if (claimed != nullptr) {
      if (!ring_name.empty()) RemoveSegment(ring_name);
      claimed->pid.store(0, std::memory_order_relaxed);
      claimed->state.store(internal::kEntryFree, std::memory_order_release);
    }
    return nullptr;
  }
}

bool Producer::Send(const void* message, uint32_t size, uint64_t events) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.detached || !s.InOwner()) return s.Drop(size, events, /*shared=*/false);
  if (s.ring->abandoned.load(std::memory_order_relaxed) != 0) return s.Drop(size, events, true);
  wire::MsgHeader header{};
  if (message == nullptr || size < sizeof(header) || size % wire::kMsgAlign != 0 ||
      size > wire::kMaxMessageBytes || size > s.capacity / 2) {
    return s.Drop(size, events, true);
  }
  std::memcpy(&header, message, sizeof(header));
  if (header.size != size || header.type == wire::kMsgPad || header.type > kMaxMsgType) {
    return s.Drop(size, events, true);
  }

  const uint64_t mask = s.capacity - 1;
  const uint64_t w = s.write_pos;
  const uint64_t tail = s.capacity - (w & mask);  // multiple of 8, >= 8
  const uint64_t need = size <= tail ? size : tail + size;
  const auto deadline = std::chrono::steady_clock::now() + s.options.max_wait;
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    const uint64_t r = s.ring->read_pos.load(std::memory_order_acquire);
    if (r > w || w - r > s.capacity) return s.Drop(size, events, true);  // corrupt index
    if (s.capacity - (w - r) >= need) break;
    if (!s.CollectorAlive() || std::chrono::steady_clock::now() >= deadline) {
      return s.Drop(size, events, true);
    }
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(5));
  }

  uint64_t offset = w & mask;
  if (size > tail) {
    const wire::MsgHeader pad{wire::kMsgPad, static_cast<uint32_t>(tail)};
    std::memcpy(s.data + offset, &pad, sizeof(pad));
    offset = 0;
  }
  std::memcpy(s.data + offset, message, size);
  s.write_pos = w + need;
  s.ring->write_pos.store(s.write_pos, std::memory_order_release);
  ++s.stats.messages_sent;
  return true;
}

void Producer::Detach() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.detached) return;
  s.detached = true;
  if (s.reg == nullptr || !s.InOwner()) return;  // a forked child never detaches the parent
  s.ring->detached.store(1, std::memory_order_release);
  s.reg->state.store(internal::kEntryDetached, std::memory_order_release);
}

bool Producer::collector_alive() const {
  const Impl& s = *impl_;
  return s.control != nullptr && s.CollectorAlive();
}

ProducerStats Producer::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

// ---------------------------------------------------------------------------
// Consumer
// ---------------------------------------------------------------------------

namespace {

struct Slot {
  enum Phase { kUnmapped, kMapped, kAbandoned };
  Phase phase = kUnmapped;
  uint32_t pid = 0;
  std::string name;
  bip::mapped_region region;
  RingHeader* ring = nullptr;
  const uint8_t* data = nullptr;
  uint64_t capacity = 0;
  uint64_t read_pos = 0;  // authoritative; mirrored to ring->read_pos
};

}  // namespace

struct Consumer::Impl {
  std::string run_id;
  std::string control_name;
  bip::mapped_region control_region;
  ControlHeader* control = nullptr;
  RegistryEntry* entries = nullptr;
  uint32_t max_producers = 0;
  std::vector<Slot> slots;
  std::vector<uint8_t> copy;  // private copy of the message being delivered
  uint64_t since_beat = 0;    // messages since the heartbeat was last refreshed mid-drain
  ConsumerStats totals;       // messages, bytes, framing errors, seen; drops of gone rings

  void FreeEntry(RegistryEntry& e) {
    e.pid.store(0, std::memory_order_relaxed);
    e.ring_bytes.store(0, std::memory_order_relaxed);
    e.state.store(internal::kEntryFree, std::memory_order_release);
  }

  void AddDrops(const Slot& slot) {
    totals.producer_messages_dropped += slot.ring->messages_dropped.load(std::memory_order_relaxed);
    totals.producer_bytes_dropped += slot.ring->bytes_dropped.load(std::memory_order_relaxed);
    totals.producer_events_dropped += slot.ring->events_dropped.load(std::memory_order_relaxed);
  }

  // Maps the ring of a ready (or already detached) entry and checks its
  // header. On failure slot.ring is still set when the header could be
  // mapped, so Abandon can tell the producer.
  bool Map(uint32_t index, Slot& slot) {
    RegistryEntry& e = entries[index];
    slot.pid = e.pid.load(std::memory_order_relaxed);
    slot.name = internal::RingSegmentName(run_id, index, e.generation.load(std::memory_order_relaxed));
    const uint64_t capacity = e.ring_bytes.load(std::memory_order_relaxed);
    const bool capacity_ok = IsPowerOfTwo(capacity) && capacity >= internal::kMinRingBytes &&
                             capacity <= internal::kMaxRingBytes;
    bool size_ok = false;
    try {
      bip::shared_memory_object shm(bip::open_only, slot.name.c_str(), bip::read_write);
      bip::offset_t size = 0;
      if (!shm.get_size(size) || static_cast<uint64_t>(size) < internal::kRingDataOffset) {
        return false;
      }
      size_ok = capacity_ok && static_cast<uint64_t>(size) >= internal::kRingDataOffset + capacity;
      const uint64_t map_bytes = internal::kRingDataOffset + (size_ok ? capacity : 0);
      bip::mapped_region region(shm, bip::read_write, 0, static_cast<size_t>(map_bytes));
      slot.region.swap(region);
    } catch (const std::exception&) {
      return false;
    }
    slot.ring = static_cast<RingHeader*>(slot.region.get_address());
    if (!size_ok || slot.ring->magic != internal::kRingMagic ||
        slot.ring->version != wire::kTransportVersion || slot.ring->capacity != capacity) {
      return false;
    }
    slot.data = static_cast<const uint8_t*>(slot.region.get_address()) + internal::kRingDataOffset;
    slot.capacity = capacity;
    slot.read_pos = 0;
    return true;
  }

  // Delivers every message committed before the write_pos snapshot. Returns
  // false on a framing error; messages before the bad one are delivered.
  bool Drain(uint32_t index, Slot& slot, const MessageFn& on_message, size_t* delivered) {
    const uint64_t w = slot.ring->write_pos.load(std::memory_order_acquire);
    uint64_t r = slot.read_pos;
    if (w < r || w - r > slot.capacity) return false;
    const ProducerInfo info{index, slot.pid};
    bool ok = true;
    while (r < w) {
      const uint64_t offset = r & (slot.capacity - 1);
      const uint64_t readable = std::min(w - r, slot.capacity - offset);
      wire::MsgHeader header{};
      if (readable < sizeof(header)) {
        ok = false;
        break;
      }
      std::memcpy(&header, slot.data + offset, sizeof(header));
      if (header.type > kMaxMsgType || header.size < sizeof(header) ||
          header.size % wire::kMsgAlign != 0 || header.size > wire::kMaxMessageBytes ||
          header.size > readable) {
        ok = false;
        break;
      }
      if (header.type != wire::kMsgPad) {
        copy.resize(header.size);
        std::memcpy(copy.data(), slot.data + offset, header.size);
        // The producer may rewrite the header under us: deliver what was checked.
        std::memcpy(copy.data(), &header, sizeof(header));
        ++totals.messages;
        totals.bytes += header.size;
        ++*delivered;
      }
      // The message is copied out: give its space back before handling it,
      // so a producer never waits on the collector's trace writing.
      r += header.size;
      slot.read_pos = r;
      slot.ring->read_pos.store(r, std::memory_order_release);
      if (header.type != wire::kMsgPad && on_message) {
        on_message(info, copy.data(), header.size);
        if ((++since_beat & 1023) == 0) control->heartbeat_ns.store(MonotonicNs(), std::memory_order_release);
      }
    }
    return ok;
  }

  void End(uint32_t index, Slot& slot, bool clean, const ProducerEndFn& on_end) {
    if (slot.ring != nullptr) AddDrops(slot);
    --totals.producers_active;
    if (on_end) on_end(ProducerInfo{index, slot.pid}, clean);
  }

  // Framing error or unusable ring: stop reading it for good. The entry stays
  // taken until the producer detaches or dies, so its slot is not reused
  // while the process may still write.
  void Abandon(uint32_t index, Slot& slot, const ProducerEndFn& on_end) {
    ++totals.framing_errors;
    if (slot.ring != nullptr) slot.ring->abandoned.store(1, std::memory_order_relaxed);
    End(index, slot, false, on_end);
    RemoveSegment(slot.name);
    bip::mapped_region().swap(slot.region);
    slot.ring = nullptr;
    slot.data = nullptr;
    slot.phase = Slot::kAbandoned;
  }

  void Reap(uint32_t index, Slot& slot, bool clean, const ProducerEndFn& on_end) {
    End(index, slot, clean, on_end);
    RemoveSegment(slot.name);
    slot = Slot{};
    FreeEntry(entries[index]);
  }
};

Consumer::Consumer() : impl_(std::make_unique<Impl>()) {}

Consumer::~Consumer() {
  if (impl_->control == nullptr) return;
  for (Slot& slot : impl_->slots) {
    if (!slot.name.empty()) RemoveSegment(slot.name);
  }
  RemoveSegment(impl_->control_name);
  RemoveRunSegments(impl_->run_id);
}

std::unique_ptr<Consumer> Consumer::Create(const std::string& run_id, const ConsumerOptions& options,
                                           std::string* error) {
  std::string scratch;
  std::string& err = error != nullptr ? *error : scratch;
  if (!IsValidRunId(run_id)) {
    err = "invalid smprof run id '" + run_id + "' (expected 1-64 characters of [A-Za-z0-9_-])";
    return nullptr;
  }
  if (options.max_producers == 0 || options.max_producers > internal::kMaxProducers) {
    err = "max producers must be 1.." + std::to_string(internal::kMaxProducers);
    return nullptr;
  }
  const std::string name = ControlSegmentName(run_id);
  bool created = false;
  try {
    bip::shared_memory_object shm;
    try {
      bip::shared_memory_object made(bip::create_only, name.c_str(), bip::read_write,
                                     bip::permissions(0600));
      shm.swap(made);
      created = true;
    } catch (const bip::interprocess_exception& e) {
      if (e.get_error_code() == bip::already_exists_error) {
        err = "a run with id " + run_id + " already exists; remove " + ShmPath(name) +
              " or choose another id";
      } else {
        err = "cannot create " + ShmPath(name) + ": " + e.what();
      }
      return nullptr;
    }
    const size_t bytes = internal::ControlSegmentBytes(options.max_producers);
    if (const int rc = AllocateSegment(shm, bytes); rc != 0) {
      err = "cannot allocate " + std::to_string(bytes) + " bytes for " + ShmPath(name) + ": " +
            std::strerror(rc) + " (is /dev/shm full?)";
      RemoveSegment(name);
      return nullptr;
    }
    std::unique_ptr<Consumer> consumer(new Consumer());
    Impl& s = *consumer->impl_;
    bip::mapped_region region(shm, bip::read_write, 0, bytes);
    s.control_region.swap(region);
    s.run_id = run_id;
    s.control_name = name;
    s.control = static_cast<ControlHeader*>(s.control_region.get_address());
    s.entries = internal::Entries(s.control);
    s.max_producers = options.max_producers;
    s.slots.resize(options.max_producers);
    s.control->version = wire::kTransportVersion;
    s.control->collector_pid = static_cast<uint32_t>(getpid());
    s.control->max_producers = options.max_producers;
    s.control->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
    s.control->magic.store(internal::kControlMagic, std::memory_order_release);
    return consumer;
  } catch (const std::exception& e) {
    err = "cannot create smprof run '" + run_id + "': " + e.what();
    if (created) RemoveSegment(name);
    return nullptr;
  }
}

size_t Consumer::Poll(const MessageFn& on_message, const ProducerEndFn& on_end) {
  Impl& s = *impl_;
  s.control->heartbeat_ns.store(MonotonicNs(), std::memory_order_release);
  size_t delivered = 0;
  for (uint32_t i = 0; i < s.max_producers; ++i) {
    RegistryEntry& e = s.entries[i];
    Slot& slot = s.slots[i];
    const uint32_t state = e.state.load(std::memory_order_acquire);
    if (slot.phase == Slot::kUnmapped) {
      if (state == internal::kEntryClaimed) {
        // Died between claiming and publishing: clean up behind it.
        const uint32_t pid = e.pid.load(std::memory_order_acquire);
        if (pid != 0 && !ProcessAlive(pid)) {
          RemoveSegment(internal::RingSegmentName(s.run_id, i,
                                                  e.generation.load(std::memory_order_relaxed)));
          s.FreeEntry(e);
        }
        continue;
      }
      if (state != internal::kEntryReady && state != internal::kEntryDetached) continue;
      ++s.totals.producers_seen;
      ++s.totals.producers_active;
      const bool mapped = s.Map(i, slot);
      slot.phase = Slot::kMapped;
      if (!mapped) {
        s.Abandon(i, slot, on_end);
        continue;
      }
    }
    if (slot.phase == Slot::kAbandoned) {
      if (state != internal::kEntryReady || !ProcessAlive(slot.pid)) {
        slot = Slot{};
        s.FreeEntry(e);
      }
      continue;
    }
    // Decide before the write_pos snapshot: a detached or dead producer
    // writes nothing after it, so draining up to the snapshot is final.
    const bool detached = state == internal::kEntryDetached;
    const bool dead = !detached && !ProcessAlive(slot.pid);
    if (!s.Drain(i, slot, on_message, &delivered)) {
      s.Abandon(i, slot, on_end);
      continue;
    }
    if (detached || dead) s.Reap(i, slot, detached, on_end);
  }
  return delivered;
}

bool Consumer::Idle() const {
  const Impl& s = *impl_;
  for (uint32_t i = 0; i < s.max_producers; ++i) {
    const Slot& slot = s.slots[i];
    if (slot.phase == Slot::kMapped) return false;  // not reaped yet
    const uint32_t state = s.entries[i].state.load(std::memory_order_acquire);
    const uint32_t pid =
        slot.phase == Slot::kAbandoned ? slot.pid : s.entries[i].pid.load(std::memory_order_acquire);
    switch (state) {
      case internal::kEntryClaimed:
        if (ProcessAlive(pid)) return false;
        break;
      case internal::kEntryReady:
        if (slot.phase != Slot::kAbandoned || ProcessAlive(pid)) return false;
        break;
      case internal::kEntryDetached:
        if (slot.phase != Slot::kAbandoned) return false;  // Poll has yet to drain and reap it
        break;
      default:
        break;
    }
  }
  return true;
}

ConsumerStats Consumer::stats() const {
  const Impl& s = *impl_;
  ConsumerStats out = s.totals;
  for (const Slot& slot : s.slots) {
    if (slot.phase != Slot::kMapped || slot.ring == nullptr) continue;
    out.producer_messages_dropped += slot.ring->messages_dropped.load(std::memory_order_relaxed);
    out.producer_bytes_dropped += slot.ring->bytes_dropped.load(std::memory_order_relaxed);
    out.producer_events_dropped += slot.ring->events_dropped.load(std::memory_order_relaxed);
  }
  out.registry_full = s.control->registry_full.load(std::memory_order_relaxed);
  return out;
}

}  // namespace smprof::transport
