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
// bytes and the events it carried) where the collector reads the counts. A
// producer never blocks for long and never blocks at all once the collector is
// gone. Every Send checks the heartbeat and the run's `closed` flag, full ring
// or not: once the collector is gone or has closed the run, Send drops and
// counts at once instead of writing into a ring nobody will read.
//
// Heartbeat: Poll refreshes it on entry and, while delivering, whenever
// 100 ms have passed since the last refresh (clock read after every message),
// so a slow on_message handler does not make producers think the collector
// died. Only a single handler call longer than collector_timeout can.
//
// Shutdown: the collector calls Consumer::Close() when it begins its final
// drain. Sends that start after it are dropped and counted; a Send already in
// flight commits, and later Polls deliver it (see the handshake in
// transport_layout.h). So after Close(), Poll until Idle(): then every message
// ever committed has been delivered, and stats() counts every drop the
// producers recorded up to that read. Idle() after Close() does not wait for
// live producers to detach: nothing more can arrive from them.
//
// Loss accounting: ConsumerStats::producer_*_dropped sums the producers' own
// drop counts, including drops after their ring was abandoned, after Detach
// and in forked children. unread_messages/unread_bytes are what is committed
// in mapped rings but not yet delivered, as of the stats() call: what
// destroying the Consumer then would discard. After a complete final drain
// they are zero.
//
// The consumer treats every byte of shared memory as hostile: indices are
// snapshotted once and checked against the capacity, each message header is
// checked (type known, size >= 8, multiple of 8, <= wire::kMaxMessageBytes,
// inside the readable span) before the message is copied out. A ring that
// fails a framing check is abandoned (counted), never read past. A producer
// may also shrink its ring segment (ftruncate) under the consumer's mapping:
// every access of ring memory runs under a SIGBUS guard (a thread-local
// sigsetjmp target; the process's previous SIGBUS action is chained for any
// other fault and restored when no Poll/stats() is running), and a ring that
// faults is abandoned like a framing error.
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

#include "common/message_fields.h"

namespace smprof::transport {

// Valid run ids are 1-64 characters of [A-Za-z0-9_-].
bool IsValidRunId(const std::string& run_id);
std::string ControlSegmentName(const std::string& run_id);
// Removes every segment of the run that is left in /dev/shm (best effort).
void RemoveRunSegments(const std::string& run_id);

struct ProducerOptions {
  // Rounded up to a power of two, >= 64 KiB; at most 4 GiB (Attach fails above).
  size_t ring_bytes = 32u << 20;
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
  // such run, run closed, registry full, ring above 4 GiB, /dev/shm full,
  // version mismatch).
  static std::unique_ptr<Producer> Attach(const std::string& run_id, const ProducerOptions& options,
                                          std::string* error);
  ~Producer();  // Detach()

  // Appends one framed message (`size` bytes starting with a wire::MsgHeader
  // whose size field equals `size`). `events` is how many events the message
  // carries, for loss accounting. Returns false if the message was dropped
  // (malformed, detached, collector gone or closed, ring full past max_wait).
  // Thread-safe.
  bool Send(const void* message, uint32_t size, uint64_t events);
  // The same, waiting up to `max_wait` for room (while the collector is alive).
  bool Send(const void* message, uint32_t size, uint64_t events, std::chrono::milliseconds max_wait);
  // One message made of `count` parts copied in order (the first begins
  // with its MsgHeader; the sizes add up to `size`), straight into the ring.
  using Part = MessagePart;
  bool Send(const Part* parts, size_t count, uint32_t size, uint64_t events, std::chrono::milliseconds max_wait);

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
  // Committed to mapped rings but not delivered yet, as of this stats() call
  // (what destroying the Consumer now would discard; pads not counted).
  uint64_t unread_messages = 0;
  uint64_t unread_bytes = 0;
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
  // on_end once per producer after its last message (detached, its process
  // died, or its ring was abandoned: clean_detach false). Returns the number
  // of messages delivered. Not thread-safe (one polling thread).
  size_t Poll(const MessageFn& on_message, const ProducerEndFn& on_end = nullptr);
  // The same, copying each message to where `place(size)` says (memory of
  // the caller's, at least `size` bytes; nullptr: the private copy) instead
  // of the private copy: one copy from the ring to where it is kept.
  using PlaceFn = std::function<uint8_t*(uint32_t size)>;
  size_t Poll(const PlaceFn& place, const MessageFn& on_message, const ProducerEndFn& on_end);

  // Refreshes the heartbeat alone: a consumer that holds back from reading
  // (its queue is full) stays alive to producers, which wait for room.
  void Beat();

  // Starts the final drain: from now on producers drop and count new
  // messages and Attach fails. Messages committed (or being committed) before
  // are still delivered by Poll: Poll until Idle(). Idempotent.
  void Close();
  bool closed() const;

  // True when no registered producer is still attached and alive, and all
  // rings are drained. After Close(): true once every ring is drained and has
  // no Send in flight, even if its producer is still alive.
  bool Idle() const;

  // Totals, live drop counts, and the unread_* backlog (reads the rings).
  ConsumerStats stats() const;

  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

 private:
  Consumer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace smprof::transport
