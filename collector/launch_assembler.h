// LaunchAssembler: arena read-backs in, profiled launches out.
//
// An injected process ships what it reads back from the GPU as it is: per
// read-back of a GPU context, the CUPTI kernel records it took (RecordsMsg,
// with each launch's API call and whether it was profiled), the names they
// use (KernelNameMsg, MarkerNameMsg), the chunks (ChunksMsg, one or more) and
// a HarvestMsg that closes it (wire.h). The assembler, the collector's first
// stage, turns each read-back into launches: decodes the chunks and maps
// their clocks (arena_decoder.h), matches them with the records
// (launch_matcher.h), names their events, and hands on, in order, a
// LaunchMsg and its WarpEventsMsgs per launch (NameMsgs before first uses)
// and then the HarvestMsg, to the next stage (the trace builder). Every other
// message passes through unchanged, except StatsMsg, which gets the
// assembler's counters (events filtered, unattributed, malformed) and
// launches profiled: the producer counts what it shipped, the assembler what
// it made of it.
//
// Events whose CUPTI record has not come wait for later read-backs of their
// context (and records for their events), up to kCarryHarvests read-backs;
// then, at a final harvest (kHarvestFinal) or when the producer ends, they
// ship under synthetic launches (kLaunchNoActivity), counted as unattributed.
// CUPTI hands a kernel's record over only with a whole activity buffer, so
// under back-to-back launches a record can come a read-back or two late.
// Overflow policy: at most as many events wait per context as its read-back
// held (and at least kMaxCarriedEvents); past it the oldest ship at once,
// unattributed.
//
// Everything is untrusted: messages are validated (message_decoder.h), chunk
// bytes by the decoder; a record or name that is missing is reported as such
// in the trace (unnamed kernel, unreadable name), never guessed.
// Single-threaded; a large read-back is decoded on up to `threads` threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/transport.h"

namespace spdlog {
class logger;
}

namespace smprof {
namespace arena {
struct Launch;
}

class LaunchAssembler {
 public:
  // Where launches and passed-through messages go (the next stage).
  using Next = std::function<void(const transport::ProducerInfo&, const uint8_t* data, uint32_t size)>;

  LaunchAssembler(Next next, unsigned threads, std::shared_ptr<spdlog::logger> logger);
  ~LaunchAssembler();

  void HandleMessage(const transport::ProducerInfo& producer, const uint8_t* data, uint32_t size);
  // The producer is gone: what waits for a record ships without one. Call
  // before the next stage learns of the end.
  void HandleProducerEnd(const transport::ProducerInfo& producer);
  // The run ends: HandleProducerEnd for every producer still known.
  void Finish();

  // Read-back messages that failed validation or named a context out of
  // order (counted as malformed by the next stage too when passed on).
  uint64_t rejected() const { return rejected_; }

  static constexpr int kCarryHarvests = 4;
  static constexpr size_t kMaxCarriedEvents = size_t{1} << 22;
  // Events per WarpEventsMsg before a warp is split into several messages.
  static constexpr uint32_t kMaxEventsPerMessage = 4096;
  static constexpr uint64_t kEventsPerFrameThread = uint64_t{1} << 18;

  LaunchAssembler(const LaunchAssembler&) = delete;
  LaunchAssembler& operator=(const LaunchAssembler&) = delete;

 private:
  struct Context;
  struct Producer;

  Producer& ProducerOf(const transport::ProducerInfo& info);
  // Decodes and matches what `context` holds and hands the launches on;
  // returns how many.
  size_t Assemble(Producer& p, Context& c, bool final, uint32_t reason);
  // Hands on `launches` in start order: each LaunchMsg, then its warps'
  // WarpEventsMsgs, each after the NameMsgs of the names it uses first (the
  // order one thread would give); the messages are framed on up to
  // `threads_` threads when there are kEventsPerFrameThread events a thread.
  void Emit(Producer& p, const Context& c, const std::vector<arena::Launch>& launches, uint32_t extra_flags);
  void SendLaunch(Producer& p, const Context& c, const arena::Launch& launch, uint64_t launch_id,
                  uint32_t extra_flags);
  void SendName(Producer& p, uint32_t id, const std::string& text);

  Next next_;
  const unsigned threads_;
  std::shared_ptr<spdlog::logger> logger_;
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<Producer>> producers_;
  uint64_t rejected_ = 0;
};

}  // namespace smprof
