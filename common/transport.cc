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
//  - A producer can ftruncate its ring segment while the consumer has it
//    mapped; touching the lost pages raises SIGBUS. The consumer touches ring
//    memory only inside Guarded() (sigsetjmp target + an armed address range),
//    with its SIGBUS handler installed for the duration of Poll/stats()
//    (reference counted, previous action saved, chained and restored). The
//    handler jumps back only for a kernel-raised fault inside the armed range
//    on the faulting thread; any other SIGBUS goes to the previous action.
#include "common/transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
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

constexpr uint32_t kMaxMsgType = wire::kMsgLastType;

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

constexpr uint64_t kBeatIntervalNs = 100'000'000;  // heartbeat refresh during a drain

// ---- SIGBUS guard ---------------------------------------------------------

struct BusJump {
  sigjmp_buf env;
  volatile sig_atomic_t armed;
  const volatile char* lo;  // armed address range [lo, hi)
  const volatile char* hi;
  sigset_t mask;  // the thread's signal mask when its SigbusScope began
};
thread_local BusJump t_bus{};

std::mutex g_bus_mu;
int g_bus_users = 0;             // SigbusScopes alive, all threads
struct sigaction g_bus_prev {};  // the action ours replaced; read by the handler

void OnSigbus(int sig, siginfo_t* info, void* context) {
  BusJump& j = t_bus;
  const auto* addr = static_cast<const volatile char*>(info != nullptr ? info->si_addr : nullptr);
  if (j.armed != 0 && info != nullptr && info->si_code > 0 && addr >= j.lo && addr < j.hi) {
    j.armed = 0;
    siglongjmp(j.env, 1);
  }
  // Not ours: behave as the previous action would have.
  const struct sigaction& prev = g_bus_prev;
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler == SIG_IGN && info != nullptr && info->si_code <= 0) return;  // sent, ignored
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // Default action (a hardware fault cannot be ignored either): die of it.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGBUS, &dfl, nullptr);
  raise(SIGBUS);  // SA_NODEFER: delivered now
}

// Keeps OnSigbus installed while alive (nesting and threads share one install).
class SigbusScope {
 public:
  SigbusScope() {
    pthread_sigmask(SIG_SETMASK, nullptr, &t_bus.mask);
    std::lock_guard<std::mutex> lock(g_bus_mu);
    if (g_bus_users++ != 0) return;
    struct sigaction ours {};
    ours.sa_sigaction = OnSigbus;
    ours.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    sigaction(SIGBUS, &ours, &g_bus_prev);
  }
  ~SigbusScope() {
    std::lock_guard<std::mutex> lock(g_bus_mu);
    if (--g_bus_users == 0) sigaction(SIGBUS, &g_bus_prev, nullptr);
  }
  SigbusScope(const SigbusScope&) = delete;
  SigbusScope& operator=(const SigbusScope&) = delete;
};

// Runs `f`, which may touch shared memory in [base, base + bytes) and nothing
// else that can fault; returns false if that memory raised SIGBUS (then `f`
// stopped part way). Requires a live SigbusScope; not reentrant. `f` must not
// own resources (a jump skips destructors).
template <typename F>
bool Guarded(const void* base, size_t bytes, F&& f) {
  BusJump& j = t_bus;
  j.lo = static_cast<const volatile char*>(base);
  j.hi = j.lo + bytes;
  if (sigsetjmp(j.env, 0) != 0) {
    // The jump skipped the handler's return, which would have restored the
    // signal mask: OnSigbus blocks nothing (SA_NODEFER, empty sa_mask), but
    // a wrapper around it may (TSan's blocks every signal). Not saved by
    // sigsetjmp, which would cost a system call per access.
    pthread_sigmask(SIG_SETMASK, &j.mask, nullptr);
    return false;
  }
  j.armed = 1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  f();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  j.armed = 0;
  return true;
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

  bool Closed() const { return control->closed.load(std::memory_order_seq_cst) != 0; }

  enum class Where { kRing, kControl };
  // Requires mu. Counts locally and where the collector reads it: the ring
  // header while this process owns an attached ring, else the run's control
  // header (after Detach, in a forked child: the ring may be reaped already,
  // and a child never writes the parent's ring).
  bool Drop(uint32_t size, uint64_t events, Where where) {
    ++stats.messages_dropped;
    stats.bytes_dropped += size;
    stats.events_dropped += events;
    if (where == Where::kRing) {
      ring->messages_dropped.fetch_add(1, std::memory_order_relaxed);
      ring->bytes_dropped.fetch_add(size, std::memory_order_relaxed);
      ring->events_dropped.fetch_add(events, std::memory_order_relaxed);
    } else if (control != nullptr) {
      control->late_messages_dropped.fetch_add(1, std::memory_order_relaxed);
      control->late_bytes_dropped.fetch_add(size, std::memory_order_relaxed);
      control->late_events_dropped.fetch_add(events, std::memory_order_relaxed);
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
    if (s.Closed()) {
      err = "smprof collector for run '" + run_id + "' is shutting down: start the application "
            "under a new smprof-run";
      return nullptr;
    }
    if (internal::RingCapacityFor(options.ring_bytes) == 0) {
      err = "smprof ring of " + std::to_string(options.ring_bytes) + " bytes exceeds the " +
            std::to_string(internal::kMaxRingBytes >> 20) + " MiB limit: lower SMPROF_SHM_MB";
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

    s.capacity = internal::RingCapacityFor(options.ring_bytes);
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
  return Send(message, size, events, impl_->options.max_wait);
}

bool Producer::Send(const void* message, uint32_t size, uint64_t events, std::chrono::milliseconds max_wait) {
  const Part part{message, size};
  return Send(&part, 1, size, events, max_wait);
}

bool Producer::Send(const Part* parts, size_t count, uint32_t size, uint64_t events,
                    std::chrono::milliseconds max_wait) {
  using Where = Impl::Where;
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.detached || !s.InOwner()) return s.Drop(size, events, Where::kControl);
  wire::MsgHeader header{};
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += parts[i].bytes;
  if (count == 0 || parts[0].data == nullptr || parts[0].bytes < sizeof(header) || total != size ||
      size % wire::kMsgAlign != 0 || size > wire::kMaxMessageBytes || size > s.capacity / 2) {
    return s.Drop(size, events, Where::kRing);
  }
  std::memcpy(&header, parts[0].data, sizeof(header));
  if (header.size != size || header.type == wire::kMsgPad || header.type > kMaxMsgType) {
    return s.Drop(size, events, Where::kRing);
  }

  // Shutdown handshake (transport_layout.h): announce the Send, then look at
  // `closed`; both seq_cst. Cleared (release) after the commit or the drop.
  s.ring->sending.store(1, std::memory_order_seq_cst);
  struct Clear {
    RingHeader* ring;
    ~Clear() { ring->sending.store(0, std::memory_order_release); }
  } clear{s.ring};
  if (s.Closed() || !s.CollectorAlive() ||
      s.ring->abandoned.load(std::memory_order_relaxed) != 0) {
    return s.Drop(size, events, Where::kRing);
  }

  const uint64_t mask = s.capacity - 1;
  const uint64_t w = s.write_pos;
  const uint64_t tail = s.capacity - (w & mask);  // multiple of 8, >= 8
  const uint64_t need = size <= tail ? size : tail + size;
  const auto deadline = std::chrono::steady_clock::now() + max_wait;
  // Naps stay short: the consumer frees a ring of tens of MiB in a few
  // milliseconds, and a sender that sleeps past that leaves it idle.
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    const uint64_t r = s.ring->read_pos.load(std::memory_order_acquire);
    if (r > w || w - r > s.capacity) return s.Drop(size, events, Where::kRing);  // corrupt index
    if (s.capacity - (w - r) >= need) break;
    if (!s.CollectorAlive() || std::chrono::steady_clock::now() >= deadline) {
      return s.Drop(size, events, Where::kRing);
    }
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::microseconds(400));
  }

  uint64_t offset = w & mask;
  if (size > tail) {
    const wire::MsgHeader pad{wire::kMsgPad, static_cast<uint32_t>(tail)};
    std::memcpy(s.data + offset, &pad, sizeof(pad));
    offset = 0;
  }
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(s.data + offset, parts[i].data, parts[i].bytes);
    offset += parts[i].bytes;
  }
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

struct Drops {
  uint64_t messages = 0;
  uint64_t bytes = 0;
  uint64_t events = 0;
};

struct Slot {
  enum Phase { kUnmapped, kMapped, kAbandoned };
  Phase phase = kUnmapped;
  uint32_t pid = 0;
  std::string name;
  // The whole segment; kept mapped after abandonment, until the entry is
  // freed, so drops the producer counts later still reach the stats.
  bip::mapped_region region;
  RingHeader* ring = nullptr;
  const uint8_t* data = nullptr;  // null unless readable (kMapped)
  uint64_t capacity = 0;
  uint64_t read_pos = 0;  // authoritative; mirrored to ring->read_pos
  bool sealed = false;    // after Close: drained with no Send in flight, so final
  mutable bool header_faulted = false;  // the header raised SIGBUS: never touch it again
  mutable Drops drops;                  // last drop counts read from the header

  // Runs `f` on this ring's memory under the SIGBUS guard.
  template <typename F>
  bool Touch(F&& f) const {
    return Guarded(region.get_address(), region.get_size(), std::forward<F>(f));
  }

  // The producer's drop counts (the last good values if the header faults).
  Drops ReadDrops() const {
    if (ring == nullptr || header_faulted) return drops;
    Drops d;
    if (!Touch([&] {
          d.messages = ring->messages_dropped.load(std::memory_order_relaxed);
          d.bytes = ring->bytes_dropped.load(std::memory_order_relaxed);
          d.events = ring->events_dropped.load(std::memory_order_relaxed);
        })) {
      header_faulted = true;
      return drops;
    }
    drops = d;
    return d;
  }
};

void AddDrops(const Drops& d, ConsumerStats* out) {
  out->producer_messages_dropped += d.messages;
  out->producer_bytes_dropped += d.bytes;
  out->producer_events_dropped += d.events;
}

bool HeaderOk(const wire::MsgHeader& h, uint64_t readable) {
  return h.type <= kMaxMsgType && h.size >= sizeof(h) && h.size % wire::kMsgAlign == 0 &&
         h.size <= wire::kMaxMessageBytes && h.size <= readable;
}

}  // namespace

struct Consumer::Impl {
  std::string run_id;
  std::string control_name;
  bip::mapped_region control_region;
  ControlHeader* control = nullptr;
  RegistryEntry* entries = nullptr;
  uint32_t max_producers = 0;
  bool closed = false;
  std::vector<Slot> slots;
  std::vector<uint8_t> copy;  // private copy of the message being delivered
  uint64_t last_beat_ns = 0;  // when this consumer last stored the heartbeat
  ConsumerStats totals;       // messages, bytes, framing errors, seen; drops of freed rings

  void Beat(uint64_t now) {
    control->heartbeat_ns.store(now, std::memory_order_release);
    last_beat_ns = now;
  }

  void FreeEntry(RegistryEntry& e) {
    e.pid.store(0, std::memory_order_relaxed);
    e.ring_bytes.store(0, std::memory_order_relaxed);
    e.state.store(internal::kEntryFree, std::memory_order_release);
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
    bool header_ok = false;
    if (!slot.Touch([&] {
          header_ok = slot.ring->magic == internal::kRingMagic &&
                      slot.ring->version == wire::kTransportVersion &&
                      slot.ring->capacity == capacity;
        })) {
      slot.header_faulted = true;  // shrunk since get_size
      return false;
    }
    if (!size_ok || !header_ok) return false;
    slot.data = static_cast<const uint8_t*>(slot.region.get_address()) + internal::kRingDataOffset;
    slot.capacity = capacity;
    slot.read_pos = 0;
    return true;
  }

  // Delivers every message committed before the write_pos snapshot. Returns
  // false on a framing error or a fault (SIGBUS); messages before the bad one
  // are delivered.
  bool Drain(uint32_t index, Slot& slot, const PlaceFn& place, const MessageFn& on_message, size_t* delivered) {
    uint64_t w = 0;
    if (!slot.Touch([&] { w = slot.ring->write_pos.load(std::memory_order_acquire); })) return false;
    uint64_t r = slot.read_pos;
    if (w < r || w - r > slot.capacity) return false;
    const ProducerInfo info{index, slot.pid};
    while (r < w) {
      const uint64_t offset = r & (slot.capacity - 1);
      const uint64_t readable = std::min(w - r, slot.capacity - offset);
      if (readable < sizeof(wire::MsgHeader)) return false;
      wire::MsgHeader header{};
      if (!slot.Touch([&] { std::memcpy(&header, slot.data + offset, sizeof(header)); })) return false;
      if (!HeaderOk(header, readable)) return false;
      const bool message = header.type != wire::kMsgPad;
      uint8_t* to = nullptr;
      if (message && place) to = place(header.size);
      if (message && to == nullptr) {
        copy.resize(header.size);
        to = copy.data();
      }
      // Copy the message out, then give its space back before handling it,
      // so a producer never waits on the collector's trace writing.
      const uint64_t next = r + header.size;
      if (!slot.Touch([&] {
            if (message) std::memcpy(to, slot.data + offset, header.size);
            slot.ring->read_pos.store(next, std::memory_order_release);
          })) {
        return false;
      }
      r = next;
      slot.read_pos = r;
      if (!message) continue;
      // The producer may rewrite the header under us: deliver what was checked.
      std::memcpy(to, &header, sizeof(header));
      ++totals.messages;
      totals.bytes += header.size;
      ++*delivered;
      if (on_message) on_message(info, to, header.size);
      // A slow handler must not let the heartbeat go stale (transport.h).
      const uint64_t now = MonotonicNs();
      if (now - last_beat_ns >= kBeatIntervalNs) Beat(now);
    }
    return true;
  }

  // Adds what a live ring holds undelivered to out->unread_*.
  void CountUnread(const Slot& slot, ConsumerStats* out) const {
    if (slot.phase != Slot::kMapped || slot.data == nullptr) return;
    uint64_t w = 0;
    if (!slot.Touch([&] { w = slot.ring->write_pos.load(std::memory_order_acquire); })) return;
    const uint64_t r0 = slot.read_pos;
    if (w < r0 || w - r0 > slot.capacity) return;  // corrupt: the next Poll abandons it
    uint64_t r = r0;
    uint64_t messages = 0;
    uint64_t bytes = 0;
    slot.Touch([&] {
      while (r < w) {
        const uint64_t offset = r & (slot.capacity - 1);
        const uint64_t readable = std::min(w - r, slot.capacity - offset);
        wire::MsgHeader header{};
        if (readable < sizeof(header)) return;
        std::memcpy(&header, slot.data + offset, sizeof(header));
        if (!HeaderOk(header, readable)) return;
        if (header.type != wire::kMsgPad) {
          ++messages;
          bytes += header.size;
        }
        r += header.size;
      }
    });
    out->unread_messages += messages;
    out->unread_bytes += bytes + (w > r ? w - r : 0);  // an unparseable rest counts as bytes
  }

  void End(uint32_t index, Slot& slot, bool clean, const ProducerEndFn& on_end) {
    --totals.producers_active;
    if (on_end) on_end(ProducerInfo{index, slot.pid}, clean);
  }

  // Takes the ring's final drop counts, unmaps it and frees the entry.
  void Free(uint32_t index, Slot& slot) {
    AddDrops(slot.ReadDrops(), &totals);
    slot = Slot{};
    FreeEntry(entries[index]);
  }

  // Framing error, fault or unusable ring: stop reading it for good. The entry
  // stays taken until the producer detaches or dies, so its slot is not
  // reused while the process may still write; the header stays mapped so the
  // drops it counts meanwhile are still read.
  void Abandon(uint32_t index, Slot& slot, const ProducerEndFn& on_end) {
    ++totals.framing_errors;
    if (slot.ring != nullptr && !slot.header_faulted &&
        !slot.Touch([&] { slot.ring->abandoned.store(1, std::memory_order_relaxed); })) {
      slot.header_faulted = true;
    }
    End(index, slot, false, on_end);
    RemoveSegment(slot.name);
    slot.data = nullptr;
    slot.phase = Slot::kAbandoned;
  }

  void Reap(uint32_t index, Slot& slot, bool clean, const ProducerEndFn& on_end) {
    End(index, slot, clean, on_end);
    RemoveSegment(slot.name);
    Free(index, slot);
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

void Consumer::Beat() { impl_->Beat(MonotonicNs()); }

size_t Consumer::Poll(const MessageFn& on_message, const ProducerEndFn& on_end) {
  return Poll(PlaceFn(), on_message, on_end);
}

size_t Consumer::Poll(const PlaceFn& place, const MessageFn& on_message, const ProducerEndFn& on_end) {
  Impl& s = *impl_;
  const SigbusScope bus;
  s.Beat(MonotonicNs());
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
      if (state != internal::kEntryReady || !ProcessAlive(slot.pid)) s.Free(i, slot);
      continue;
    }
    // Decide before the write_pos snapshot: a detached or dead producer
    // writes nothing after it, so draining up to the snapshot is final.
    const bool detached = state == internal::kEntryDetached;
    const bool dead = !detached && !ProcessAlive(slot.pid);
    // Likewise after Close, once no Send is in flight (transport_layout.h).
    bool seal = false;
    if (s.closed && !slot.sealed) {
      uint32_t sending = 1;
      if (!slot.Touch([&] { sending = slot.ring->sending.load(std::memory_order_seq_cst); })) {
        s.Abandon(i, slot, on_end);
        continue;
      }
      seal = sending == 0;
    }
    if (!s.Drain(i, slot, place, on_message, &delivered)) {
      s.Abandon(i, slot, on_end);
      continue;
    }
    if (seal) slot.sealed = true;
    if (detached || dead) s.Reap(i, slot, detached, on_end);
  }
  return delivered;
}

void Consumer::Close() {
  Impl& s = *impl_;
  s.closed = true;
  s.control->closed.store(1, std::memory_order_seq_cst);
}

bool Consumer::closed() const { return impl_->closed; }

bool Consumer::Idle() const {
  const Impl& s = *impl_;
  for (uint32_t i = 0; i < s.max_producers; ++i) {
    const Slot& slot = s.slots[i];
    if (slot.phase == Slot::kMapped) {
      if (s.closed && slot.sealed) continue;  // final: nothing more can arrive
      return false;                           // not reaped yet
    }
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
  const SigbusScope bus;
  ConsumerStats out = s.totals;
  for (const Slot& slot : s.slots) {
    if (slot.phase == Slot::kUnmapped) continue;
    AddDrops(slot.ReadDrops(), &out);
    s.CountUnread(slot, &out);
  }
  out.producer_messages_dropped += s.control->late_messages_dropped.load(std::memory_order_relaxed);
  out.producer_bytes_dropped += s.control->late_bytes_dropped.load(std::memory_order_relaxed);
  out.producer_events_dropped += s.control->late_events_dropped.load(std::memory_order_relaxed);
  out.registry_full = s.control->registry_full.load(std::memory_order_relaxed);
  return out;
}

}  // namespace smprof::transport
