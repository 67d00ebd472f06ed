// Byte layout of the transport's shared-memory segments (see transport.h).
//
// Internal to common/transport.cc; tests include it to play a hostile peer.
// Every struct is standard layout, uses only always-lock-free atomics, and is
// valid when all-zero (a freshly allocated segment is zero-filled), so no
// constructor ever runs on shared memory.
//
// Control segment `smprof-<run>`:
//   [ControlHeader | RegistryEntry x max_producers]
// Ring segment `smprof-<run>-<entry>-<generation>`:
//   [RingHeader (kRingDataOffset bytes) | data (capacity bytes)]
//
// ControlHeader::magic and ::version sit at offsets 0 and 8 in every version,
// so mismatched builds can always recognise each other and say so.
//
// Registry entry life cycle (state):
//   free --CAS by producer--> claimed --release store--> ready
//   ready --producer Detach (release)--> detached
//   claimed|ready|detached --consumer, after reaping--> free
// The producer bumps `generation` and stores `pid` (release) right after the
// claim, before creating its ring; the consumer reads them after an acquire
// load of `state`. A producer that dies between its claim and the pid store
// leaves its entry claimed with pid 0 for the rest of the run (Idle ignores it).
//
// Where a producer counts a drop (the consumer adds all of them up):
//   - in its RingHeader while it owns an attached ring (also once the ring is
//     abandoned: the consumer keeps the header mapped until it frees the entry);
//   - in ControlHeader::late_* after Detach or in a forked child, whose ring
//     the consumer may already have reaped (a child never writes ring memory).
//
// Shutdown handshake (ControlHeader::closed, RingHeader::sending), a Dekker
// pair of sequentially consistent accesses:
//   producer Send: sending = 1; if (closed) drop; else write, commit write_pos;
//                  sending = 0 (release)
//   consumer Close: closed = 1; then per ring: if sending == 0, drain up to a
//                  write_pos snapshot taken after that load: the ring is final.
// Either the consumer sees a Send in flight (and drains again later) or the
// Send sees `closed` and drops; no message is committed unseen.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace smprof::transport::internal {

inline constexpr uint64_t kControlMagic = 0x4c52544352504d53ull;  // "SMPRCTRL"
inline constexpr uint64_t kRingMagic = 0x474e495252504d53ull;     // "SMPRRING"

inline constexpr uint64_t kMinRingBytes = 64u << 10;
inline constexpr uint64_t kMaxRingBytes = 1ull << 32;  // 4 GiB: SMPROF_SHM_MB <= 4096

// Ring capacity for a requested size: the next power of two, at least
// kMinRingBytes; 0 when the request exceeds kMaxRingBytes.
inline uint64_t RingCapacityFor(uint64_t requested) {
  if (requested > kMaxRingBytes) return 0;
  uint64_t bytes = kMinRingBytes;
  while (bytes < requested) bytes <<= 1;
  return bytes;
}
inline constexpr uint32_t kMaxProducers = 1u << 16;

enum EntryState : uint32_t {
  kEntryFree = 0,
  kEntryClaimed = 1,
  kEntryReady = 2,
  kEntryDetached = 3,
};

struct ControlHeader {
  std::atomic<uint64_t> magic;  // stored last by the collector (release)
  uint32_t version;             // wire::kTransportVersion
  uint32_t collector_pid;
  uint32_t max_producers;       // RegistryEntry count following the header
  std::atomic<uint32_t> closed;  // consumer: 1 (seq_cst) from Consumer::Close on
  std::atomic<uint64_t> heartbeat_ns;   // CLOCK_MONOTONIC; refreshed by Poll and during drains
  std::atomic<uint64_t> registry_full;  // producers that found no free entry
  // Drops counted by producers without an attached ring of their own (after
  // Detach, in a forked child); the consumer adds them to its stats.
  std::atomic<uint64_t> late_messages_dropped;
  std::atomic<uint64_t> late_bytes_dropped;
  std::atomic<uint64_t> late_events_dropped;
  uint64_t reserved1[8];
};

struct RegistryEntry {
  std::atomic<uint32_t> state;       // EntryState
  std::atomic<uint32_t> pid;         // producer process; 0 while being claimed
  std::atomic<uint32_t> generation;  // bumped on every claim; names the ring
  uint32_t reserved0;
  std::atomic<uint64_t> ring_bytes;  // data capacity of the ring
  uint64_t reserved1;
};

// Written by the producer before its entry becomes ready, except the atomics.
struct RingHeader {
  uint64_t magic;     // kRingMagic
  uint32_t version;   // wire::kTransportVersion
  uint32_t pid;
  uint64_t capacity;  // data bytes; power of two
  uint64_t reserved0[5];
  alignas(64) std::atomic<uint64_t> write_pos;  // producer: release; consumer: acquire
  alignas(64) std::atomic<uint64_t> read_pos;   // consumer: release; producer: acquire
  alignas(64) std::atomic<uint64_t> messages_dropped;  // producer only
  std::atomic<uint64_t> bytes_dropped;
  std::atomic<uint64_t> events_dropped;
  std::atomic<uint32_t> detached;   // producer: 1 after Detach
  std::atomic<uint32_t> abandoned;  // consumer: 1 once the ring failed validation
  std::atomic<uint32_t> sending;    // producer: 1 (seq_cst) while a Send may commit
};

inline constexpr size_t kRingDataOffset = 256;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "lock-free 64-bit atomics required");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "lock-free 32-bit atomics required");
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4,
              "atomics must have the size of their value");
static_assert(std::is_standard_layout_v<ControlHeader> && std::is_standard_layout_v<RegistryEntry> &&
                  std::is_standard_layout_v<RingHeader>,
              "shared-memory structs must be standard layout");
static_assert(std::is_trivially_destructible_v<ControlHeader> &&
                  std::is_trivially_destructible_v<RegistryEntry> &&
                  std::is_trivially_destructible_v<RingHeader>,
              "shared-memory structs are never destroyed");
static_assert(sizeof(ControlHeader) == 128 && offsetof(ControlHeader, version) == 8 &&
                  offsetof(ControlHeader, closed) == 20,
              "ControlHeader layout");
static_assert(sizeof(RegistryEntry) == 32, "RegistryEntry layout");
static_assert(offsetof(RingHeader, write_pos) == 64 && offsetof(RingHeader, read_pos) == 128 &&
                  sizeof(RingHeader) <= kRingDataOffset,
              "RingHeader layout");

inline size_t ControlSegmentBytes(uint32_t max_producers) {
  return sizeof(ControlHeader) + size_t{max_producers} * sizeof(RegistryEntry);
}

inline RegistryEntry* Entries(ControlHeader* header) {
  return reinterpret_cast<RegistryEntry*>(reinterpret_cast<char*>(header) + sizeof(ControlHeader));
}

inline std::string RingSegmentName(const std::string& run_id, uint32_t entry, uint32_t generation) {
  return "smprof-" + run_id + "-" + std::to_string(entry) + "-" + std::to_string(generation);
}

}  // namespace smprof::transport::internal
