#include "collector/async_sink.h"

#include <chrono>

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

namespace smprof {
namespace {

// Names handed over by key: keys up to this bound (the builder's keys count
// the run's distinct names from 1); others travel with their event.
constexpr uint32_t kMaxKey = uint32_t{1} << 24;
// A batch is handed over at kBatchCommands commands, or at this much copied
// text or this many closures.
constexpr size_t kBatchText = size_t{1} << 20;
constexpr size_t kBatchCalls = 1024;
constexpr size_t kFreeBatches = 4;  // replayed batches kept for reuse

// Command::flags
constexpr uint8_t kInlineName = 1;  // name is text[name, name + name_len), not a key
constexpr uint8_t kFlagged = 2;     // slice: unterminated; instant: unmatched END
constexpr uint8_t kPhase = 4;       // slice: a phase
constexpr uint8_t kCounter = 8;     // kValue: a counter sample

constexpr uint32_t kNoWarp = UINT32_MAX;

}  // namespace

enum class AsyncSink::Op : uint8_t {
  kCall,     // calls[name]
  kName,     // name key `name` is text[a, a + name_len)
  kSelect,   // the next commands are for launches[name]'s warps[name_len]
  kWarp,     // OnWarp of the selected warp
  kNote,     // the next slice's note is text[a, a + name_len)
  kValue,    // the next slice's or instant's value is `a` (flags kCounter: a counter sample)
  kSlice,    // OnSlice: name, a = begin, b = end, cycles, lane, depth
  kInstant,  // OnInstant: name, a = ts
  kAsync,    // OnAsyncSpan: name, the rest in spans[a]
  kFlush,    // the target's Flush
};

struct AsyncSink::Command {
  Op op;
  uint8_t flags;
  uint32_t name;
  uint32_t name_len;
  uint32_t cycles;
  uint64_t a, b;
  uint32_t lane, depth;
};

// An async span but its name: its launch and warps by their index in the
// batch (kNoWarp: none).
struct AsyncSink::Span {
  uint32_t launch = 0;
  uint32_t begin_warp = kNoWarp, end_warp = kNoWarp;
  uint32_t token = 0;
  uint32_t block[3] = {0, 0, 0};
  uint64_t begin_ns = 0, end_ns = 0;
  uint64_t flow_id = 0;
};

struct AsyncSink::Batch {
  std::vector<Command> commands;
  std::string text;  // copied names and notes
  std::vector<std::function<void(trace::TraceSink&)>> calls;
  // kSelect's and kAsync's launches, kept alive with the batch.
  std::vector<std::shared_ptr<const trace::LaunchRecord>> launches;
  std::vector<trace::WarpRecord> warps;
  std::vector<Span> spans;

  bool empty() const { return commands.empty(); }
  bool full() const {
    return commands.size() >= kBatchCommands || text.size() >= kBatchText || calls.size() >= kBatchCalls;
  }
  void Clear() {
    commands.clear();
    text.clear();
    calls.clear();
    launches.clear();
    warps.clear();
    spans.clear();
  }
};

// The target's thread's state between commands.
struct AsyncSink::Replay {
  const trace::LaunchRecord* launch = nullptr;
  const trace::WarpRecord* warp = nullptr;
  std::string_view note;
  trace::UserValue value;
  std::vector<std::unique_ptr<std::string>> names;  // by key: one address for the run
};

// A target and its thread: its queue of batches (shared with the other
// targets') and where its replay stands.
struct AsyncSink::Lane {
  trace::TraceSink* target = nullptr;
  std::deque<std::shared_ptr<Batch>> queue;  // mu_
  uint64_t replayed = 0;                     // batches (mu_)
  Replay replay;                             // its thread's only
  std::atomic<uint64_t> busy_ns{0};          // replaying, in total
  std::thread thread;
};

AsyncSink::AsyncSink(trace::TraceSink* target, size_t max_batches)
    : AsyncSink(std::vector<trace::TraceSink*>{target}, max_batches) {}

AsyncSink::AsyncSink(std::vector<trace::TraceSink*> targets, size_t max_batches)
    : max_batches_(max_batches == 0 ? 1 : max_batches), batch_(std::make_shared<Batch>()) {
  batch_->commands.reserve(kBatchCommands);
  for (trace::TraceSink* t : targets) {
    lanes_.push_back(std::make_unique<Lane>());
    lanes_.back()->target = t;
  }
  for (auto& lane : lanes_) {
    Lane* l = lane.get();
    l->thread = std::thread([this, l] { Run(*l); });
  }
}

AsyncSink::~AsyncSink() {
  Drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& lane : lanes_) lane->thread.join();
}

// --- the calling thread ----------------------------------------------------

// Every call starts here, so that the commands of one call (a selection, a
// name, a note and the event) go into one batch.
void AsyncSink::Room() {
  if (batch_->full()) HandOver();
}

AsyncSink::Command& AsyncSink::Append() {
  static_assert(sizeof(Command) <= 40, "one or two commands per event: keep them small");
  batch_->commands.push_back(Command{});
  return batch_->commands.back();
}

void AsyncSink::Call(std::function<void(trace::TraceSink&)> call) {
  Room();
  Command& c = Append();
  c.op = Op::kCall;
  c.name = static_cast<uint32_t>(batch_->calls.size());
  batch_->calls.push_back(std::move(call));
}

uint32_t AsyncSink::Stash(std::string_view text) {
  const size_t at = batch_->text.size();
  batch_->text.append(text.data(), text.size());
  return static_cast<uint32_t>(at);
}

const trace::LaunchRecord* AsyncSink::LaunchCopy(const trace::LaunchRecord& launch) {
  if (last_launch_ != nullptr && last_index_ == launch.index) return last_launch_;
  auto& slot = launches_[launch.index];
  if (!slot) slot = std::make_shared<const trace::LaunchRecord>(launch);  // a launch never announced
  last_launch_ = slot.get();
  last_index_ = launch.index;
  return last_launch_;
}

void AsyncSink::SelectWarp(const trace::LaunchRecord& launch, const trace::WarpRecord& warp) {
  const trace::LaunchRecord* copy = LaunchCopy(launch);
  const trace::WarpRecord& s = selected_warp_;
  if (warp_selected_ && selected_launch_ == copy && s.index == warp.index && s.sm == warp.sm && s.warp == warp.warp &&
      s.hw_warp == warp.hw_warp && s.block[0] == warp.block[0] && s.block[1] == warp.block[1] &&
      s.block[2] == warp.block[2]) {
    return;
  }
  Command& c = Append();
  c.op = Op::kSelect;
  c.name = static_cast<uint32_t>(batch_->launches.size());
  c.name_len = static_cast<uint32_t>(batch_->warps.size());
  batch_->launches.push_back(launches_[launch.index]);
  batch_->warps.push_back(warp);
  selected_launch_ = copy;
  selected_warp_ = warp;
  warp_selected_ = true;
}

AsyncSink::Command& AsyncSink::AppendEvent(Op op, std::string_view name, uint32_t key, bool flagged) {
  uint32_t inline_len = 0;
  const uint32_t ref = NameRef(name, key, &inline_len);
  Command& c = Append();
  c.op = op;
  c.flags = static_cast<uint8_t>((key == 0 || key >= kMaxKey ? kInlineName : 0) | (flagged ? kFlagged : 0));
  c.name = ref;
  c.name_len = inline_len;
  return c;
}

uint32_t AsyncSink::NameRef(std::string_view name, uint32_t key, uint32_t* inline_len) {
  if (key != 0 && key < kMaxKey) {
    if (keys_sent_.size() <= key) keys_sent_.resize(static_cast<size_t>(key) + 1, false);
    if (!keys_sent_[key]) {
      keys_sent_[key] = true;
      Command& c = Append();
      c.op = Op::kName;
      c.name = key;
      c.name_len = static_cast<uint32_t>(name.size());
      c.a = Stash(name);
    }
    *inline_len = 0;
    return key;
  }
  *inline_len = static_cast<uint32_t>(name.size());
  return Stash(name);
}

void AsyncSink::OnRun(const nlohmann::json& run) {
  Call([run](trace::TraceSink& t) { t.OnRun(run); });
}

void AsyncSink::OnGpu(const trace::GpuRecord& gpu) {
  Call([gpu](trace::TraceSink& t) { t.OnGpu(gpu); });
}

void AsyncSink::OnProcess(const trace::ProcessRecord& process) {
  Call([process](trace::TraceSink& t) { t.OnProcess(process); });
}

void AsyncSink::OnProcessNamed(const trace::ProcessRecord& process) {
  Call([process](trace::TraceSink& t) { t.OnProcessNamed(process); });
}

void AsyncSink::OnNotice(const trace::ProcessRecord& process, uint64_t ts_ns, std::string_view reason,
                         std::string_view detail) {
  Call([process, ts_ns, reason = std::string(reason), detail = std::string(detail)](trace::TraceSink& t) {
    t.OnNotice(process, ts_ns, reason, detail);
  });
}

void AsyncSink::OnHarvest(const trace::ProcessRecord& process, const trace::HarvestRecord& harvest) {
  Call([process, harvest](trace::TraceSink& t) { t.OnHarvest(process, harvest); });
}

void AsyncSink::OnProcessLost(const trace::ProcessRecord& process, uint64_t ts_ns) {
  Call([process, ts_ns](trace::TraceSink& t) { t.OnProcessLost(process, ts_ns); });
}

void AsyncSink::OnLaunch(const trace::LaunchRecord& launch) {
  auto copy = std::make_shared<const trace::LaunchRecord>(launch);
  launches_[launch.index] = copy;
  last_launch_ = copy.get();
  last_index_ = launch.index;
  Call([copy](trace::TraceSink& t) { t.OnLaunch(*copy); });
}

void AsyncSink::OnWarp(const trace::LaunchRecord& launch, const trace::WarpRecord& warp) {
  Room();
  SelectWarp(launch, warp);
  Append().op = Op::kWarp;
}

void AsyncSink::OnSlice(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                        const trace::SliceRecord& slice) {
  Room();
  SelectWarp(launch, warp);
  if (!slice.note.empty()) {
    const uint32_t at = Stash(slice.note);
    Command& n = Append();
    n.op = Op::kNote;
    n.a = at;
    n.name_len = static_cast<uint32_t>(slice.note.size());
  }
  if (slice.value.present) AppendValue(slice.value);
  Command& c = AppendEvent(Op::kSlice, slice.name, slice.name_key, slice.unterminated);
  if (slice.phase) c.flags |= kPhase;
  c.cycles = slice.cycles;
  c.a = slice.begin_ns;
  c.b = slice.end_ns;
  c.lane = slice.lane;
  c.depth = slice.depth;
}

void AsyncSink::OnInstant(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                          const trace::InstantRecord& instant) {
  Room();
  SelectWarp(launch, warp);
  if (instant.value.present) AppendValue(instant.value);
  AppendEvent(Op::kInstant, instant.name, instant.name_key, instant.unmatched_end).a = instant.ts_ns;
}

void AsyncSink::AppendValue(const trace::UserValue& value) {
  Command& v = Append();
  v.op = Op::kValue;
  v.flags = value.counter ? kCounter : 0;
  v.a = static_cast<uint64_t>(value.value);
}

void AsyncSink::OnAsyncSpan(const trace::LaunchRecord& launch, const trace::AsyncSpanRecord& span) {
  Room();
  LaunchCopy(launch);
  Span s;
  s.launch = static_cast<uint32_t>(batch_->launches.size());
  batch_->launches.push_back(launches_[launch.index]);
  for (const auto& [warp, index] : {std::pair{span.begin_warp, &s.begin_warp}, std::pair{span.end_warp, &s.end_warp}}) {
    if (warp == nullptr) continue;
    *index = static_cast<uint32_t>(batch_->warps.size());
    batch_->warps.push_back(*warp);
  }
  s.token = span.token;
  std::copy(span.block, span.block + 3, s.block);
  s.begin_ns = span.begin_ns;
  s.end_ns = span.end_ns;
  s.flow_id = span.flow_id;
  AppendEvent(Op::kAsync, span.name, span.name_key, false).a = batch_->spans.size();
  batch_->spans.push_back(s);
}

void AsyncSink::OnLaunchEnd(const trace::LaunchRecord& launch, const uint32_t* warps_in_order, size_t warp_count) {
  const trace::LaunchRecord* copy = LaunchCopy(launch);
  std::shared_ptr<const trace::LaunchRecord> keep = launches_[launch.index];
  std::vector<uint32_t> order(warps_in_order, warps_in_order + warp_count);
  Call([keep = std::move(keep), order = std::move(order)](trace::TraceSink& t) {
    t.OnLaunchEnd(*keep, order.data(), order.size());
  });
  // The copy lives on in the batches that name it; a later call for this
  // index (none from the builder) would get a new one.
  launches_.erase(launch.index);
  last_launch_ = nullptr;
  if (selected_launch_ == copy) warp_selected_ = false;
}

bool AsyncSink::Flush() {
  Room();
  Append().op = Op::kFlush;
  HandOver();
  return !failed_.load(std::memory_order_relaxed);
}

bool AsyncSink::Finish(const CollectorSummary& summary) {
  Drain();
  bool ok = true;
  for (auto& lane : lanes_) ok = lane->target->Finish(summary) && ok;
  return ok && replay_error().empty();
}

std::string AsyncSink::replay_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return replay_error_;
}

std::string AsyncSink::error() const {
  // Draining changes nothing the caller can observe but the time it takes.
  const_cast<AsyncSink*>(this)->Drain();
  if (std::string e = replay_error(); !e.empty()) return e;
  for (const auto& lane : lanes_) {
    if (std::string e = lane->target->error(); !e.empty()) return e;
  }
  return std::string();
}

std::string AsyncSink::layout_description() const {
  const_cast<AsyncSink*>(this)->Drain();
  for (const auto& lane : lanes_) {
    if (std::string d = lane->target->layout_description(); !d.empty()) return d;
  }
  return std::string();
}

bool AsyncSink::RoomInEveryLane() const {
  for (const auto& lane : lanes_) {
    if (lane->queue.size() >= max_batches_) return false;
  }
  return true;
}

void AsyncSink::HandOver() {
  if (batch_->empty()) return;
  std::shared_ptr<Batch> next;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!RoomInEveryLane()) {
      waits_.fetch_add(1, std::memory_order_relaxed);
      cv_.wait(lock, [this] { return RoomInEveryLane(); });
    }
    for (auto& lane : lanes_) lane->queue.push_back(batch_);
    batch_.reset();
    ++handed_;
    if (!free_.empty()) {
      next = std::move(free_.back());
      free_.pop_back();
    }
  }
  cv_.notify_all();
  ++batches_;
  if (!next) {
    next = std::make_shared<Batch>();
    next->commands.reserve(kBatchCommands);
  }
  batch_ = std::move(next);
  // A new batch names its launch again before its first event.
  warp_selected_ = false;
}

void AsyncSink::Drain() {
  HandOver();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] {
    for (const auto& lane : lanes_) {
      if (lane->replayed != handed_) return false;
    }
    return true;
  });
}

// --- the target's thread ---------------------------------------------------

std::vector<double> AsyncSink::busy_seconds() const {
  std::vector<double> seconds;
  for (const auto& lane : lanes_) seconds.push_back(lane->busy_ns.load(std::memory_order_relaxed) / 1e9);
  return seconds;
}

void AsyncSink::Run(Lane& lane) {
  trace::TraceSink& t = *lane.target;
  Replay& r = lane.replay;
  for (;;) {
    std::shared_ptr<Batch> b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !lane.queue.empty(); });
      if (lane.queue.empty()) return;  // stopping, nothing left
      b = std::move(lane.queue.front());
      lane.queue.pop_front();
    }
    cv_.notify_all();  // room for one more
    const auto started = std::chrono::steady_clock::now();
    try {
      const Batch& batch = *b;
      const char* text = batch.text.data();
      for (const Command& c : batch.commands) {
        switch (c.op) {
          case Op::kCall:
            batch.calls[c.name](t);
            break;
          case Op::kName:
            if (r.names.size() <= c.name) r.names.resize(static_cast<size_t>(c.name) + 1);
            r.names[c.name] = std::make_unique<std::string>(text + c.a, c.name_len);
            break;
          case Op::kSelect:
            r.launch = batch.launches[c.name].get();
            r.warp = &batch.warps[c.name_len];
            break;
          case Op::kWarp:
            t.OnWarp(*r.launch, *r.warp);
            break;
          case Op::kNote:
            r.note = std::string_view(text + c.a, c.name_len);
            break;
          case Op::kValue:
            r.value.present = true;
            r.value.counter = (c.flags & kCounter) != 0;
            r.value.value = static_cast<int64_t>(c.a);
            break;
          case Op::kSlice:
          case Op::kInstant:
          case Op::kAsync: {
            const std::string_view name = (c.flags & kInlineName) != 0 ? std::string_view(text + c.name, c.name_len)
                                                                       : std::string_view(*r.names[c.name]);
            if (c.op == Op::kSlice) {
              trace::SliceRecord s;
              s.name = name;
              s.name_key = (c.flags & kInlineName) != 0 ? 0 : c.name;
              s.begin_ns = c.a;
              s.end_ns = c.b;
              s.cycles = c.cycles;
              s.lane = c.lane;
              s.depth = c.depth;
              s.unterminated = (c.flags & kFlagged) != 0;
              s.phase = (c.flags & kPhase) != 0;
              s.note = r.note;
              s.value = r.value;
              r.note = {};
              r.value = {};
              t.OnSlice(*r.launch, *r.warp, s);
            } else if (c.op == Op::kInstant) {
              trace::InstantRecord i;
              i.name = name;
              i.name_key = (c.flags & kInlineName) != 0 ? 0 : c.name;
              i.ts_ns = c.a;
              i.unmatched_end = (c.flags & kFlagged) != 0;
              i.value = r.value;
              r.value = {};
              t.OnInstant(*r.launch, *r.warp, i);
            } else {
              const Span& s = batch.spans[c.a];
              trace::AsyncSpanRecord a;
              a.name = name;
              a.name_key = (c.flags & kInlineName) != 0 ? 0 : c.name;
              a.token = s.token;
              std::copy(s.block, s.block + 3, a.block);
              a.begin_ns = s.begin_ns;
              a.end_ns = s.end_ns;
              a.begin_warp = s.begin_warp != kNoWarp ? &batch.warps[s.begin_warp] : nullptr;
              a.end_warp = s.end_warp != kNoWarp ? &batch.warps[s.end_warp] : nullptr;
              a.flow_id = s.flow_id;
              t.OnAsyncSpan(*batch.launches[s.launch], a);
            }
            break;
          }
          case Op::kFlush:
            if (!t.Flush()) failed_.store(true, std::memory_order_relaxed);
            break;
        }
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      if (replay_error_.empty()) replay_error_ = std::string("trace sink failed: ") + e.what();
      failed_.store(true, std::memory_order_relaxed);
    }
    r.launch = nullptr;
    r.warp = nullptr;
    r.note = {};
    r.value = {};
    lane.busy_ns.fetch_add(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - started)
                                  .count()),
        std::memory_order_relaxed);
    {
      // The last lane to replay a batch gives it back for reuse.
      std::lock_guard<std::mutex> lock(mu_);
      if (b.use_count() == 1 && free_.size() < kFreeBatches) {
        b->Clear();
        free_.push_back(std::move(b));
      }
      b.reset();
      ++lane.replayed;
    }
    cv_.notify_all();
  }
}

}  // namespace smprof
