// Shared-memory transport between injected processes and the collector.
//
// Design
// ------
// One run (one `smprof-run`) has one id, [A-Za-z0-9_-]{1,64}. The collector
// creates the *control segment* `smprof-<run>` (mode 0600, fails if it
// exists). It holds a registry of producer entries and the collector's
// heartbeat. Every injected process (a Producer) claims a registry entry with a
// CAS, creates its own *ring segment* `smprof-<run>-<entry>-<generation>` (0600)
// holding one single-producer/single-consumer byte ring, and publishes the
// entry as ready with a release store. The collector (the Consumer) polls the
// registry, maps ready rings, and drains them.
//
// Why one ring per process: a producer that crashes mid-write, or is killed
// while holding a lock, can only stall its own ring; no cross-process lock
// exists anywhere. Within a process, Producer serialises threads with a
// std::mutex.
//
// Ring protocol (in the ring segment; offsets are byte counters that only grow):
//   producer: write message bytes at write_pos % capacity, then
//             write_pos.store(release)          pairs with consumer acquire load
//   consumer: read write_pos (acquire) once per poll, copy each message out of
//             shared memory, validate the copy, then
//             read_pos.store(release)           pairs with producer acquire load
// A message never wraps: when it does not fit before the end, the producer
// writes a kMsgPad message covering the tail and starts at offset 0.
//
// Overflow policy: when the ring is full the producer waits (sleeping, with
// backoff) only while the collector's heartbeat is fresh, and at most
// `max_wait` per message; then it drops the message and counts it (messages,
// bytes and the events it carried) in the ring header, where the collector
// reads the counts. A producer never blocks for long and never blocks at all
// once the collector is gone.
//
// The consumer treats every byte of shared memory as hostile: indices are
// snapshotted once and checked against the capacity, each message header is
// checked (type known, size >= 8, multiple of 8, <= wire::kMaxMessageBytes,
// inside the readable span) before the message is copied out. A ring that
// fails a framing check is abandoned (counted), never read past.
//
// Teardown: Producer::Detach marks the entry detached. The consumer unlinks a
// ring segment once it is detached (or its pid is dead) and drained, and frees
// the registry entry for reuse. The consumer's destructor unlinks everything of
// the run, so no segment outlives the collector.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace smprof::transport {

// Valid run ids are 1-64 characters of [A-Za-z0-9_-].
bool IsValidRunId(const std::string& run_id);
std::string ControlSegmentName(const std::string& run_id);
// Removes every segment of the run that is left in /dev/shm (best effort).
void RemoveRunSegments(const std::string& run_id);

struct ProducerOptions {
  size_t ring_bytes = 32u << 20;  // rounded up to a power of two, >= 64 KiB
  std::chrono::milliseconds max_wait{200};  // per message, while the collector is alive
  std::chrono::milliseconds collector_timeout{2000};  // heartbeat older than this = gone
};

struct ProducerStats {
  uint64_t messages_sent = 0;
  uint64_t messages_dropped = 0;
  uint64_t bytes_dropped = 0;
  uint64_t events_dropped = 0;
};

class Producer {
 public:
  // Claims a registry entry of the run and creates this process's ring.
  // Returns nullptr with a one-line *error naming the fix on failure (no
  // such run, registry full, /dev/shm full, version mismatch).
  static std::unique_ptr<Producer> Attach(const std::string& run_id, const ProducerOptions& options,
                                          std::string* error);
  ~Producer();  // Detach()

  // Appends one framed message (`size` bytes starting with a wire::MsgHeader
  // whose size field equals `size`). `events` is how many events the message
  // carries, for loss accounting. Returns false if the message was dropped.
  // Thread-safe.
  bool Send(const void* message, uint32_t size, uint64_t events);

  // Marks the ring complete; later Sends are dropped and counted. Idempotent.
  void Detach();

  bool collector_alive() const;
  ProducerStats stats() const;

  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

 private:
  Producer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct ProducerInfo {
  uint32_t entry;  // registry index; unique among live producers
  uint32_t pid;
};

struct ConsumerStats {
  uint64_t producers_seen = 0;
  uint64_t producers_active = 0;
  uint64_t messages = 0;
  uint64_t bytes = 0;
  uint64_t framing_errors = 0;        // rings abandoned for a bad header or index
  uint64_t producer_messages_dropped = 0;  // sum of the producers' own drop counts
  uint64_t producer_bytes_dropped = 0;
  uint64_t producer_events_dropped = 0;
  uint64_t registry_full = 0;         // producers refused for lack of an entry
};

struct ConsumerOptions {
  uint32_t max_producers = 1024;  // registry entries (live processes at once)
};

class Consumer {
 public:
  // Creates the control segment. nullptr + one-line *error on failure.
  static std::unique_ptr<Consumer> Create(const std::string& run_id, const ConsumerOptions& options,
                                          std::string* error);
  ~Consumer();  // unlinks every segment of the run

  using MessageFn = std::function<void(const ProducerInfo&, const uint8_t* data, uint32_t size)>;
  using ProducerEndFn = std::function<void(const ProducerInfo&, bool clean_detach)>;

  // Refreshes the heartbeat, maps newly ready rings, and delivers each framed
  // message (a private copy; valid during the call) in ring order. Calls
  // on_end once per producer after its last message (detached, or its
  // process died). Returns the number of messages delivered.
  size_t Poll(const MessageFn& on_message, const ProducerEndFn& on_end = nullptr);

  // True when no registered producer is still attached and alive, and all
  // rings are drained.
  bool Idle() const;

  ConsumerStats stats() const;

  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

 private:
  Consumer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace smprof::transport
