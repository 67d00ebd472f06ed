// AsyncSink: trace sinks run on threads of their own.
//
// The collector's one thread decoded messages, matched ranges and encoded the
// trace and the statistics in turn; the sinks took about half of its time
// per event. An AsyncSink in front of them makes that a pipeline: the
// builder's thread appends each call once to a batch (a compact command for
// the per-event calls, a copied closure for the rare ones) and each target's
// thread replays the same batches on its target in the order the calls were
// made, so every target sees exactly the calls, records and order it would
// have seen directly (trace_sink.h's guarantees hold unchanged).
//
// What the records point to is copied, since it is valid only during the
// call: a launch's record once per launch (kept until its OnLaunchEnd has
// been replayed), the warp's record when the calls move to another warp, an
// event's name once per run-wide name key (SliceRecord::name_key; names
// without a key are copied with their event). Names handed to a target stay
// at one address for the whole run, which the Perfetto writer's name cache
// relies on.
//
// A slice or an instant is one command, as it was before values existed (a
// phase is a flag bit of it); a value (UserValue, a counter sample's too)
// travels as a kValue command just before its event, only when present. An
// async span is one kAsync command (its name as an event's) with its record
// in the batch's list of spans, its warps copied into the batch's warps and
// its launch held by the batch, so the target's AsyncSpanRecord points into
// the batch while it is replayed.
//
// Overflow policy: at most `max_batches` filled batches wait for any one
// target's thread; a call that fills one more blocks the calling thread
// until the slowest target catches up (back-pressure reaches the transport's
// rings and the producers, as a slow sink did before). Nothing is dropped.
// Memory: max_batches x (kBatchCommands commands of 40 bytes + copied names).
//
// Flush hands the batch over with a flush of every target and returns
// whether a target has failed so far (as far as its thread has got); Drain
// waits until every call made has been replayed by every target. After
// Drain, and until the next call, the targets may be used directly on the
// calling thread (Finish does: it drains and then finishes them there).
//
// Calls come from one thread at a time (the builder's).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collector/trace_sink.h"

namespace smprof {

class AsyncSink : public trace::TraceSink {
 public:
  static constexpr size_t kBatchCommands = 8192;
  static constexpr size_t kMaxBatches = 64;

  // `target` is not owned and must outlive this sink.
  explicit AsyncSink(trace::TraceSink* target, size_t max_batches = kMaxBatches);
  // Several targets, each on a thread of its own, replaying the same
  // batches: the calling thread builds each command once for all of them.
  explicit AsyncSink(std::vector<trace::TraceSink*> targets, size_t max_batches = kMaxBatches);
  // Replays what is queued, then stops the threads.
  ~AsyncSink() override;

  void OnRun(const nlohmann::json& run) override;
  void OnGpu(const trace::GpuRecord& gpu) override;
  void OnProcess(const trace::ProcessRecord& process) override;
  void OnProcessNamed(const trace::ProcessRecord& process) override;
  void OnNotice(const trace::ProcessRecord& process, uint64_t ts_ns, std::string_view reason,
                std::string_view detail) override;
  void OnHarvest(const trace::ProcessRecord& process, const trace::HarvestRecord& harvest) override;
  void OnProcessLost(const trace::ProcessRecord& process, uint64_t ts_ns) override;
  void OnLaunch(const trace::LaunchRecord& launch) override;
  void OnWarp(const trace::LaunchRecord& launch, const trace::WarpRecord& warp) override;
  void OnSlice(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
               const trace::SliceRecord& slice) override;
  void OnInstant(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                 const trace::InstantRecord& instant) override;
  void OnAsyncSpan(const trace::LaunchRecord& launch, const trace::AsyncSpanRecord& span) override;
  void OnLaunchEnd(const trace::LaunchRecord& launch, const uint32_t* warps_in_order, size_t warp_count) override;

  bool Flush() override;
  // Drains, then finishes the targets on this thread (in order).
  bool Finish(const CollectorSummary& summary) override;
  // What a replay threw, else the first target's that is not empty, once
  // drained (these drain first).
  std::string error() const override;
  std::string layout_description() const override;
  // What a replay threw ("" if nothing did).
  std::string replay_error() const;

  // Waits until every target has replayed every call made so far.
  void Drain();
  // Batches handed over so far, and how often a call waited for room.
  uint64_t batches() const { return batches_; }
  uint64_t waits() const { return waits_.load(std::memory_order_relaxed); }
  // How long each target's thread has spent replaying, in target order.
  std::vector<double> busy_seconds() const;

  AsyncSink(const AsyncSink&) = delete;
  AsyncSink& operator=(const AsyncSink&) = delete;

 private:
  enum class Op : uint8_t;
  struct Command;
  struct Span;
  struct Batch;
  struct Replay;
  struct Lane;

  void Room();
  Command& Append();
  void Call(std::function<void(trace::TraceSink&)> call);
  // The targets' copy of `launch` (made on first use).
  const trace::LaunchRecord* LaunchCopy(const trace::LaunchRecord& launch);
  // Switches the replay to `launch`'s `warp` unless it is there already.
  void SelectWarp(const trace::LaunchRecord& launch, const trace::WarpRecord& warp);
  // The name's key for the command, defining it for the target first; or,
  // for a name without a usable key, its bytes in the batch (*inline_len).
  uint32_t NameRef(std::string_view name, uint32_t key, uint32_t* inline_len);
  // An event's command (its name as NameRef gives it, `flagged` as the
  // record's unterminated or unmatched-end flag); the caller sets the rest.
  Command& AppendEvent(Op op, std::string_view name, uint32_t key, bool flagged);
  // A kValue command: the value of the event appended next.
  void AppendValue(const trace::UserValue& value);
  uint32_t Stash(std::string_view text);
  void HandOver();
  bool RoomInEveryLane() const;  // mu_ held
  void Run(Lane& lane);

  const size_t max_batches_;

  // The calling thread's side.
  std::shared_ptr<Batch> batch_;
  std::unordered_map<uint64_t, std::shared_ptr<const trace::LaunchRecord>> launches_;  // by index
  const trace::LaunchRecord* last_launch_ = nullptr;  // what launches_[last_index_] holds
  uint64_t last_index_ = 0;
  const trace::LaunchRecord* selected_launch_ = nullptr;  // the replay's current warp
  trace::WarpRecord selected_warp_;
  bool warp_selected_ = false;
  std::vector<bool> keys_sent_;  // name keys defined for the target
  uint64_t batches_ = 0;
  std::atomic<uint64_t> waits_{0};

  // Shared with the targets' threads.
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<std::unique_ptr<Lane>> lanes_;  // a target each; their queues: mu_
  std::vector<std::shared_ptr<Batch>> free_;  // replayed by every lane, for reuse
  uint64_t handed_ = 0;                       // batches
  bool stop_ = false;
  std::atomic<bool> failed_{false};  // a target's Flush said false, or a replay threw
  std::string replay_error_;         // what a replay threw (mu_)
};

}  // namespace smprof
