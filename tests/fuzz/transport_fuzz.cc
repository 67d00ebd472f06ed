// Fuzz target: hostile shared memory under transport::Consumer.
//
// One real run (Consumer::Create, unique id, one registry entry) lives for
// the whole process. Each input plays a producer gone bad: a real Producer
// attaches (so segment, registry entry and ring header are what the producer
// library makes), then the input overwrites what a producer can write
// (common/transport_layout.h) and the consumer polls:
//
//   [Plan (kPlanBytes) | ring bytes...]
//
// The ring bytes go into the data area from the consumer's read position on
// (wrapping at the physical end); write_pos covers them, or takes the plan's
// raw value. The plan's flags may also overwrite the shared read_pos and drop
// counters, and, before the consumer first maps the ring, its magic, version
// and capacity and the registry entry's ring_bytes and generation; or shrink
// the segment (ftruncate) so that ring reads raise SIGBUS.
//
// A model of the framing rules of transport.h (indices checked against the
// capacity; each header: known type, size >= 8, multiple of 8, <= the wire
// limit, inside the readable span) says which messages must be delivered,
// byte for byte, and whether the ring must be rejected; the consumer must
// agree, count each rejected ring once in framing_errors, report its end as
// unclean, and (stats() before the poll) report the same unread backlog. A
// ring that took an input cleanly takes the next one too, from where the
// consumer stopped reading, so inputs reach the physical end of the ring and
// wrap; a rejected or shrunk one is detached, reaped and replaced.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/transport.h"
#include "common/transport_layout.h"
#include "smprof/wire.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/support/wire_builders.h"

namespace smprof::fuzz {
namespace {

namespace internal = transport::internal;

constexpr uint64_t kCapacity = internal::kMinRingBytes;  // the smallest ring: 64 KiB
constexpr uint64_t kSegmentBytes = internal::kRingDataOffset + kCapacity;
constexpr uint64_t kPageBytes = 4096;

enum PlanFlags : uint32_t {
  kFreshRing = 1u << 0,        // a newly attached producer takes this input
  kRawWritePos = 1u << 1,      // write_pos = plan.write_pos (else: just past the ring bytes)
  kSharedReadPos = 1u << 2,    // shared read_pos = plan.read_pos (the consumer must ignore it)
  kDropCounts = 1u << 3,       // ring drop counters = plan.drops, aux64, ~plan.drops
  kMagic = 1u << 4,            // ring magic = aux64          (map time: implies kFreshRing)
  kVersion = 1u << 5,          // ring version = aux32        (map time)
  kHeaderCapacity = 1u << 6,   // ring capacity = aux64       (map time)
  kEntryRingBytes = 1u << 7,   // entry ring_bytes = aux64    (map time)
  kGeneration = 1u << 8,       // entry generation = aux32    (map time)
  kTruncate = 1u << 9,         // segment shrunk to aux32 % kSegmentBytes before the poll
};
constexpr uint32_t kMapTimeFlags = kMagic | kVersion | kHeaderCapacity | kEntryRingBytes | kGeneration;

// The first bytes of an input (missing bytes read as zero).
struct Plan {
  uint32_t flags;
  uint32_t aux32;
  uint64_t aux64;
  uint64_t write_pos;
  uint64_t read_pos;
  uint64_t drops;
};
constexpr size_t kPlanBytes = sizeof(Plan);
static_assert(kPlanBytes == 40 && kPlanBytes % wire::kMsgAlign == 0, "Plan layout");

void Require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "transport_fuzz: %s\n", what);
  std::abort();
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// What the framing rules say about a ring: the messages to deliver (offsets
// into the data area), then whether the ring is rejected. `backed` is how
// many segment bytes can be read without SIGBUS.
struct Expectation {
  std::vector<std::pair<uint64_t, uint32_t>> messages;
  bool reject = false;
  uint64_t unread_messages = 0;  // what stats() before the poll must report
  uint64_t unread_bytes = 0;
};

Expectation Model(const uint8_t* data, uint64_t r0, uint64_t w, uint64_t backed) {
  Expectation e;
  if (backed < internal::kRingDataOffset || w < r0 || w - r0 > kCapacity) {
    e.reject = true;
    return e;
  }
  uint64_t r = r0;
  uint64_t pads = 0;
  while (r < w) {
    const uint64_t offset = r & (kCapacity - 1);
    const uint64_t readable = std::min(w - r, kCapacity - offset);
    wire::MsgHeader h{};
    if (readable < sizeof(h) || internal::kRingDataOffset + offset + sizeof(h) > backed) break;
    std::memcpy(&h, data + offset, sizeof(h));
    if (h.type > wire::kMsgLastType || h.size < sizeof(h) || h.size % wire::kMsgAlign != 0 ||
        h.size > wire::kMaxMessageBytes || h.size > readable) {
      break;
    }
    if (h.type == wire::kMsgPad) {
      pads += h.size;
    } else {
      if (internal::kRingDataOffset + offset + h.size > backed) break;  // the copy faults
      e.messages.emplace_back(offset, h.size);
    }
    r += h.size;
  }
  e.reject = r != w;
  e.unread_messages = e.messages.size();
  e.unread_bytes = (w - r0) - pads;
  return e;
}

struct Counters {
  uint64_t inputs = 0;
  uint64_t rings = 0;
  uint64_t delivered = 0;
  uint64_t rejected = 0;
  uint64_t shrunk = 0;
  uint64_t wrapped = 0;  // inputs whose ring bytes crossed the physical end
};

class Harness {
 public:
  Harness() : run_("fuzz_" + std::to_string(getpid())) {
    transport::RemoveRunSegments(run_);  // left by an earlier process of this pid
    std::string error;
    transport::ConsumerOptions options;
    options.max_producers = 1;
    consumer_ = transport::Consumer::Create(run_, options, &error);
    if (!consumer_) Fail(error);
    const int fd = shm_open(("/" + transport::ControlSegmentName(run_)).c_str(), O_RDWR, 0);
    if (fd < 0) Fail("cannot open the control segment");
    control_bytes_ = internal::ControlSegmentBytes(1);
    void* map = mmap(nullptr, control_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) Fail("cannot map the control segment");
    control_ = static_cast<internal::ControlHeader*>(map);
  }

  ~Harness() {
    if (producer_) Release();
    consumer_.reset();
    munmap(control_, control_bytes_);
    transport::RemoveRunSegments(run_);
  }

  void Run(const Plan& plan, const uint8_t* bytes, size_t size);
  const Counters& counters() const { return counters_; }

  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

 private:
  [[noreturn]] static void Fail(const std::string& why) {
    std::fprintf(stderr, "transport_fuzz: %s\n", why.c_str());
    std::abort();
  }
  internal::RegistryEntry& entry() { return internal::Entries(control_)[0]; }
  internal::RingHeader* ring() { return reinterpret_cast<internal::RingHeader*>(ring_map_); }
  uint8_t* ring_data() { return ring_map_ + internal::kRingDataOffset; }

  void Attach();
  void Release();
  size_t Poll(std::vector<std::vector<uint8_t>>* delivered);

  std::string run_;
  std::unique_ptr<transport::Consumer> consumer_;
  internal::ControlHeader* control_ = nullptr;
  size_t control_bytes_ = 0;
  std::unique_ptr<transport::Producer> producer_;
  std::string ring_name_;
  int ring_fd_ = -1;
  uint8_t* ring_map_ = nullptr;
  bool mapped_by_consumer_ = false;  // the consumer has polled this ring
  bool shrunk_ = false;
  uint64_t base_ = 0;  // the consumer's read position in this ring
  uint64_t ends_clean_ = 0;
  uint64_t ends_unclean_ = 0;
  Counters counters_;
};

void Harness::Attach() {
  std::string error;
  transport::ProducerOptions options;
  options.ring_bytes = kCapacity;
  producer_ = transport::Producer::Attach(run_, options, &error);
  if (!producer_) Fail(error);
  ring_name_ = internal::RingSegmentName(run_, 0, entry().generation.load());
  ring_fd_ = shm_open(("/" + ring_name_).c_str(), O_RDWR, 0);
  if (ring_fd_ < 0) Fail("cannot open " + ring_name_);
  void* map = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, ring_fd_, 0);
  if (map == MAP_FAILED) Fail("cannot map " + ring_name_);
  ring_map_ = static_cast<uint8_t*>(map);
  mapped_by_consumer_ = false;
  shrunk_ = false;
  base_ = 0;
  ++counters_.rings;
}

// Detaches the producer; the next poll must free the registry entry.
void Harness::Release() {
  if (shrunk_) {
    // Detach writes the header; the consumer, if it still reads the ring,
    // must find nothing new in the zeros that came back.
    if (ftruncate(ring_fd_, static_cast<off_t>(kSegmentBytes)) != 0) Fail("cannot restore the ring's size");
    ring()->write_pos.store(base_);
  }
  producer_->Detach();
  producer_.reset();
  const uint64_t clean_before = ends_clean_;
  const bool healthy = mapped_by_consumer_;
  Require(Poll(nullptr) == 0, "a detached ring delivered new messages");
  Require(ends_clean_ == clean_before + (healthy ? 1 : 0), "a clean detach was not reported once");
  Require(entry().state.load() == internal::kEntryFree, "the registry entry was not freed");
  shm_unlink(("/" + ring_name_).c_str());  // the consumer may have unlinked another generation
  munmap(ring_map_, kSegmentBytes);
  close(ring_fd_);
  ring_map_ = nullptr;
  ring_fd_ = -1;
}

size_t Harness::Poll(std::vector<std::vector<uint8_t>>* delivered) {
  return consumer_->Poll(
      [delivered](const transport::ProducerInfo& info, const uint8_t* data, uint32_t size) {
        Require(info.entry == 0 && info.pid == static_cast<uint32_t>(getpid()), "wrong producer info");
        Require(delivered != nullptr, "a message from a ring being released");
        delivered->emplace_back(data, data + size);
      },
      [this](const transport::ProducerInfo&, bool clean) { ++(clean ? ends_clean_ : ends_unclean_); });
}

void Harness::Run(const Plan& plan, const uint8_t* bytes, size_t size) {
  ++counters_.inputs;
  const bool fresh = (plan.flags & (kFreshRing | kMapTimeFlags)) != 0;
  if (fresh || !producer_ || !mapped_by_consumer_) {
    if (producer_) Release();
    Attach();
  }

  // The ring bytes, from the consumer's read position on.
  const auto n = static_cast<uint64_t>(std::min<size_t>(size, kCapacity));
  const uint64_t offset = base_ & (kCapacity - 1);
  const uint64_t first = std::min(n, kCapacity - offset);
  std::memcpy(ring_data() + offset, bytes, first);
  std::memcpy(ring_data(), bytes + first, n - first);
  if (first < n) ++counters_.wrapped;
  const uint64_t w = (plan.flags & kRawWritePos) != 0 ? plan.write_pos : base_ + n;
  ring()->write_pos.store(w, std::memory_order_release);
  if ((plan.flags & kSharedReadPos) != 0) ring()->read_pos.store(plan.read_pos);
  if ((plan.flags & kDropCounts) != 0) {
    ring()->messages_dropped.store(plan.drops);
    ring()->bytes_dropped.store(plan.aux64);
    ring()->events_dropped.store(~plan.drops);
  }

  // Header and registry fields the consumer checks when it maps the ring.
  bool map_ok = true;
  bool header_mapped = true;  // the consumer finds the segment and maps its header
  if (!mapped_by_consumer_) {
    if ((plan.flags & kMagic) != 0) ring()->magic = plan.aux64;
    if ((plan.flags & kVersion) != 0) ring()->version = plan.aux32;
    if ((plan.flags & kHeaderCapacity) != 0) ring()->capacity = plan.aux64;
    if ((plan.flags & kEntryRingBytes) != 0) entry().ring_bytes.store(plan.aux64);
    if ((plan.flags & kGeneration) != 0) entry().generation.store(plan.aux32);
    const uint64_t entry_bytes = entry().ring_bytes.load();
    header_mapped = internal::RingSegmentName(run_, 0, entry().generation.load()) == ring_name_;
    map_ok = header_mapped && ring()->magic == internal::kRingMagic &&
             ring()->version == wire::kTransportVersion && ring()->capacity == entry_bytes &&
             IsPowerOfTwo(entry_bytes) && entry_bytes >= internal::kMinRingBytes &&
             entry_bytes <= internal::kMaxRingBytes && kSegmentBytes >= internal::kRingDataOffset + entry_bytes;
  }

  // Shrinking the segment: pages past the new size fault; the rest of the
  // last page reads as zeros, write_pos included (the model reads our own
  // mapping, up to the end of that page). A ring the consumer maps now is
  // too small: it is rejected, its header mapped if 256 bytes are left.
  uint64_t backed = kSegmentBytes;
  uint64_t w_seen = w;
  if ((plan.flags & kTruncate) != 0) {
    const uint64_t bytes_left = plan.aux32 % kSegmentBytes;
    if (ftruncate(ring_fd_, static_cast<off_t>(bytes_left)) != 0) Fail("ftruncate failed");
    shrunk_ = true;
    ++counters_.shrunk;
    backed = (bytes_left + kPageBytes - 1) / kPageBytes * kPageBytes;
    if (backed != 0) w_seen = ring()->write_pos.load();
    if (!mapped_by_consumer_) {
      map_ok = false;
      header_mapped = header_mapped && bytes_left >= internal::kRingDataOffset;
    }
    header_mapped = header_mapped && backed != 0;
  }
  const Expectation expect =
      map_ok ? Model(ring_data(), base_, w_seen, backed) : Expectation{{}, true, 0, 0};

  // stats() walks the unread backlog of a mapped ring with the same rules.
  const transport::ConsumerStats before = consumer_->stats();
  if (mapped_by_consumer_ && !shrunk_) {
    Require(before.unread_messages == expect.unread_messages,
            "stats() counts another number of unread messages than the framing rules");
    Require(before.unread_bytes == expect.unread_bytes,
            "stats() counts other unread bytes than the framing rules");
  }
  const uint64_t unclean_before = ends_unclean_;
  std::vector<std::vector<uint8_t>> delivered;
  const size_t n_delivered = Poll(&delivered);
  const transport::ConsumerStats after = consumer_->stats();

  Require(n_delivered == delivered.size() && delivered.size() == expect.messages.size(),
          "the consumer delivered another number of messages than the framing rules allow");
  for (size_t i = 0; i < delivered.size(); ++i) {
    const auto [at, bytes_at] = expect.messages[i];
    Require(delivered[i].size() == bytes_at &&
                std::memcmp(delivered[i].data(), ring_data() + at, bytes_at) == 0,
            "a delivered message differs from the ring's bytes");
  }
  Require(after.messages - before.messages == delivered.size(), "delivered messages not counted");
  Require(after.framing_errors - before.framing_errors == (expect.reject ? 1u : 0u),
          "a rejected ring was not counted once in framing_errors");
  Require(ends_unclean_ - unclean_before == (expect.reject ? 1u : 0u),
          "a rejected ring's end was not reported once as unclean");
  if (header_mapped) {
    Require(ring()->abandoned.load() == (expect.reject ? 1u : 0u), "the ring's abandoned flag is wrong");
  }
  counters_.delivered += delivered.size();
  mapped_by_consumer_ = true;
  if (expect.reject) {
    ++counters_.rejected;
    mapped_by_consumer_ = false;  // abandoned: the next input needs a new ring
  }
  base_ = w_seen;
  if (shrunk_ || expect.reject) Release();
}

Harness& GetHarness() {
  static Harness harness;
  return harness;
}

Bytes Input(uint32_t flags, const std::vector<Bytes>& messages, uint64_t write_pos = 0) {
  Plan plan{};
  plan.flags = flags;
  plan.write_pos = write_pos;
  Bytes out(kPlanBytes);
  std::memcpy(out.data(), &plan, sizeof(plan));
  for (const Bytes& m : messages) out.insert(out.end(), m.begin(), m.end());
  return out;
}

// wire::kMsgPad has no struct of its own; testing::Frame wants one.
struct PadMsg {
  wire::MsgHeader h;
};

}  // namespace

TargetInfo GetTargetInfo() {
  using namespace smprof::testing;
  const std::vector<Bytes> session = {
      Process(77, 5'000'000'000ull, "./app"),
      Name(1, "load"),
      Launch(1, 100, 500, "k"),
      Warp(1, 0, 0, 0, {{110, 1, wire::kEventBegin}, {120, 1, wire::kEventEnd}}),
      Harvest(600, wire::kHarvestSync, 0),
      Notice(wire::kNoticeBadSettings, "SMPROF_BUFFER_MB=0"),
  };
  const Bytes pad8 = Frame(PadMsg{}, wire::kMsgPad);
  // Most of a ring of padding: inputs after it reach the physical end.
  const Bytes big_pad = Frame(PadMsg{}, wire::kMsgPad, std::string(kCapacity - 4096 - 8, '\0'));
  std::vector<Bytes> seeds = {
      Input(0, session),
      Input(kFreshRing, session),
      Input(0, {big_pad, session[1]}),
      Input(0, {pad8, session[2], pad8}),
      Input(kDropCounts | kSharedReadPos, {session[3]}),
      Input(0, {}),
      Input(kRawWritePos, {session[1]}, 8),
      Input(kTruncate | kFreshRing, session),
      Input(kHeaderCapacity | kEntryRingBytes, session),
  };
  return TargetInfo{"transport_fuzz", kPlanBytes, kPlanBytes + kCapacity, std::move(seeds)};
}

std::string TargetSummary() {
  const Counters& c = GetHarness().counters();
  return "transport_fuzz: " + std::to_string(c.inputs) + " inputs on " + std::to_string(c.rings) +
         " rings (" + std::to_string(c.wrapped) + " wrapped at the ring's end); " +
         std::to_string(c.delivered) + " messages delivered, " + std::to_string(c.rejected) +
         " rings rejected and counted, " + std::to_string(c.shrunk) + " shrunk under the consumer";
}

}  // namespace smprof::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace smprof::fuzz;
  Plan plan{};
  std::memcpy(&plan, data, std::min(size, kPlanBytes));
  const size_t skip = std::min(size, kPlanBytes);
  GetHarness().Run(plan, data + skip, size - skip);
  return 0;
}
