#include "injector/harvester.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <unordered_set>

#include "common/names.h"
#include "injector/kernel_table.h"
#include "injector/log.h"

namespace smprof::injector {
namespace {

uint64_t Warps(const KernelRecord& r) {
  return (uint64_t{r.block[0]} * r.block[1] * r.block[2] + 31) / 32 * r.grid[0] * r.grid[1] * r.grid[2];
}

// Calls fn(chunk header, event) for every used event slot of a read-back,
// without decoding: a scan of chunk headers and event words. Only for
// chunks in host memory (DeviceContext::Staged says).
template <typename Fn>
void ForEachUsedSlot(const ArenaSnapshot& snap, Fn fn) {
  for (uint32_t c = 0; c < snap.used_chunks; ++c) {
    const uint8_t* chunk = snap.chunks.data() + static_cast<size_t>(c) * snap.chunk_bytes;
    wire::ChunkHeader h;
    std::memcpy(&h, chunk, sizeof(h));
    for (size_t at = sizeof(h); at + sizeof(wire::Event) <= snap.chunk_bytes; at += sizeof(wire::Event)) {
      wire::Event e;
      std::memcpy(&e, chunk + at, sizeof(e));
      if (e.info != 0) fn(h, e);
    }
  }
}

// The events of a read-back (used slots, valid or not).
uint64_t EventsIn(const ArenaSnapshot& snap) {
  uint64_t events = 0;
  ForEachUsedSlot(snap, [&](const wire::ChunkHeader&, const wire::Event&) { ++events; });
  return events;
}

// Marker names of events by (name generation, address), each read once
// through `read(generation, address)`; most events repeat a few names, and
// those skip the map.
class EventNames {
 public:
  using Key = std::pair<uint64_t, uint64_t>;
  EventNames() { std::fill(std::begin(recent_), std::end(recent_), Key(UINT64_MAX, UINT64_MAX)); }
  template <typename Read>
  void Add(const WarpSegment& s, const std::vector<DecodedEvent>& events, Read read) {
    for (const DecodedEvent& e : events) {
      const Key key(s.name_generation, s.name_base + static_cast<int64_t>(e.name_offset));
      Key& slot = recent_[(key.second >> 3) & 15];
      if (slot == key) continue;
      slot = key;
      if (names_.count(key) == 0) names_.emplace(key, read(key.first, key.second));
    }
  }
  const std::string& At(uint64_t generation, uint64_t address) { return names_[Key(generation, address)]; }

 private:
  std::map<Key, std::string> names_;
  Key recent_[16];
};

// The distinct name addresses (name base + offset) of the events in a read-back.
void CollectNameAddresses(const ArenaSnapshot& snap, std::unordered_set<uint64_t>* out) {
  ForEachUsedSlot(snap, [&](const wire::ChunkHeader& h, const wire::Event& e) {
    if (h.magic == wire::kChunkMagic) out->insert(h.name_base + static_cast<int64_t>(e.name_offset));
  });
}

uint32_t Micros(uint64_t from, uint64_t to) {
  return static_cast<uint32_t>(std::min<uint64_t>((to - std::min(to, from)) / 1000, UINT32_MAX));
}

}  // namespace

struct Harvester::Job {
  DeviceContext* device = nullptr;
  HostCalls* host_calls = nullptr;
  ArenaSnapshot snapshot;
  bool has_snapshot = false;
  bool final = false;
  uint64_t seq = 0;              // read order
  uint64_t name_generation = 0;  // of its context when read back
  wire::HarvestReason reason = wire::kHarvestSync;
  HarvestHost host;  // the application thread's part is filled in
};

// What the harvest thread keeps per context.
struct Harvester::ContextState {
  int64_t clock_offset = 0;
  // Marker names by (generation, device address); a module unload starts a
  // new generation. Read by the harvest thread, filled by it and by
  // ReadNamesBeforeUnload.
  std::mutex names_mu;
  std::map<std::pair<uint64_t, uint64_t>, std::string> names;
  std::atomic<uint64_t> name_generation{1};
  bool ended = false;  // (mu_) the context is gone: no GPU access
  // (mu_) The context's launch calls (from its read-backs): a final harvest,
  // which reads nothing back, decides with them which waiting events are wanted.
  HostCalls* host_calls = nullptr;
  // Carried between harvests (mu_): decoded segments without a record yet,
  // records without events yet, each with the harvests it has waited.
  std::vector<WarpSegment> carried_segments;
  std::vector<int> carried_segment_ages;
  std::vector<KernelRecord> carried_records;
  std::vector<int> carried_record_ages;
  std::vector<ArenaSnapshot> free;  // buffers to reuse (mu_)
  size_t out = 0;                   // snapshots queued or being processed (mu_)
  size_t queued = 0;                // jobs queued or being processed (mu_)
  // Held from a read-back until its job is queued: jobs are processed in the
  // order of their reads, so a harvest never takes a later one's records.
  std::mutex order;
};

Harvester::Harvester(Gpu& gpu, ActivityStore& activity, KernelTable& kernels, Shipper& shipper, std::mutex& ship_mu,
                     StatsFiller fill_stats, unsigned threads, Backlog backlog)
    : gpu_(gpu),
      activity_(activity),
      kernels_(kernels),
      shipper_(shipper),
      ship_mu_(ship_mu),
      fill_stats_(std::move(fill_stats)),
      thread_count_(threads != 0 ? threads : QuarterOfTheCores()),
      decode_threads_(QuarterOfTheCores()),
      backlog_(backlog) {}

Harvester::~Harvester() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void Harvester::StartThreads() {
  if (!threads_.empty()) return;
  for (unsigned i = 0; i < thread_count_; ++i) threads_.emplace_back([this] { Run(); });
}

void Harvester::Enqueue(std::unique_ptr<Job> job) {
  ContextState& state = StateOf(job->device);
  if (job->host_calls != nullptr) {
    state.host_calls = job->host_calls;
  } else {
    job->host_calls = state.host_calls;
  }
  job->seq = next_seq_++;
  ++state.queued;
  queue_.push_back(std::move(job));
  cv_.notify_all();
}

bool Harvester::WaitTurn(const uint64_t& turn, uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return turn == seq || stop_; });
  return !stop_;
}

void Harvester::AdvanceLocked(uint64_t* turn) {
  std::set<uint64_t>& abandoned = turn == &take_turn_ ? abandoned_take_ : abandoned_ship_;
  ++*turn;
  while (abandoned.erase(*turn) != 0) ++*turn;
}

void Harvester::EndTurn(uint64_t* turn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    AdvanceLocked(turn);
  }
  cv_.notify_all();
}

void Harvester::AbandonLocked(uint64_t seq) {
  for (uint64_t* turn : {&take_turn_, &ship_turn_}) {
    if (*turn == seq) {
      AdvanceLocked(turn);
    } else if (*turn < seq) {
      (turn == &take_turn_ ? abandoned_take_ : abandoned_ship_).insert(seq);
    }
  }
}

Harvester::ContextState& Harvester::StateOf(const DeviceContext* device) {
  auto& state = states_[device];
  if (!state) state = std::make_unique<ContextState>();
  return *state;
}

bool Harvester::Harvest(HarvestTarget target, wire::HarvestReason reason, HarvestMode mode,
                        const wire::HostCall& call) {
  DeviceContext* device = target.device;
  if (device == nullptr || !device->has_pending()) return false;
  const uint64_t begin = gpu_.Now();  // the application's thread is held from here
  const bool force = mode == HarvestMode::kForce;
  const auto deadline = std::chrono::steady_clock::now() +
                        (reason == wire::kHarvestHighWater ? std::chrono::seconds(2) : std::chrono::seconds(5));
  auto job = std::make_unique<Job>();
  ContextState* state;
  {
    // A buffer for the copy: when all of this context's are queued, wait for
    // a harvest thread, or skip (the overflow policy, harvester.h).
    std::unique_lock<std::mutex> lock(mu_);
    StartThreads();
    state = &StateOf(device);
    const auto available = [&] { return state->out < kSnapshotsPerContext || stop_; };
    // The last read-back before the arena (exit) or the names (unload,
    // context end) go takes a buffer of its own if it must: one more than
    // the bound, once, rather than lose what the arena holds.
    const bool last_chance =
        reason == wire::kHarvestExit || reason == wire::kHarvestModuleUnload || reason == wire::kHarvestContextDestroy;
    if (!available() && !last_chance && backlog_ == Backlog::kDrop) {
      skipped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (!available() && !last_chance) {
      if (!force && reason == wire::kHarvestSync) {
        cv_.wait_until(lock, std::chrono::steady_clock::now() + std::chrono::seconds(5), available);
      } else {
        cv_.wait_until(lock, deadline, available);
      }
      if (!available()) return false;
    }
    ++state->out;
    if (!state->free.empty()) {
      job->snapshot = std::move(state->free.back());
      state->free.pop_back();
    }
  }
  std::unique_lock<std::mutex> order(state->order, std::defer_lock);
  const bool ordered = force ? LockBefore(order, deadline) : order.try_lock();
  const ReadBack read = ordered ? device->Read(mode, deadline, &job->snapshot) : ReadBack::kBusy;
  if (read != ReadBack::kDone) {
    std::lock_guard<std::mutex> lock(mu_);
    --state->out;
    if (read != ReadBack::kFailed) state->free.push_back(std::move(job->snapshot));
    cv_.notify_all();
    if (read == ReadBack::kBusy && reason == wire::kHarvestHighWater) {
      Log().warn("GPU {}: recording work did not finish in time for a drain; events may be dropped",
                 device->facts().info.ordinal);
    } else if (read == ReadBack::kBusy && force) {
      // Teardown with kernels still running: give up on this context rather
      // than hold up the application's exit (again at every later callback).
      device->Abandon();
      Log().warn("GPU {}: profiled kernels were still running at {}; their events are not collected",
                 device->facts().info.ordinal, reason == wire::kHarvestExit ? "exit" : "teardown");
    }
    return false;
  }
  const uint64_t end = gpu_.Now();
  // A harvest cycle of the context's calls ends with each read-back (the
  // calls of this one's launches stay until the queue has shipped it).
  if (target.host_calls != nullptr) target.host_calls->EndHarvest();
  job->device = device;
  job->host_calls = target.host_calls;
  job->has_snapshot = true;
  job->reason = reason;
  job->name_generation = state->name_generation.load(std::memory_order_acquire);
  NoteCurrentThread();
  job->host.begin_ns = begin;
  job->host.end_ns = end;
  job->host.tid = CurrentTid();
  job->host.call = call;
  job->host.stage_us[wire::kStageWait] = Micros(begin, job->snapshot.wait_end_ns);
  job->host.stage_us[wire::kStageCopy] = Micros(job->snapshot.wait_end_ns, end);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Enqueue(std::move(job));
  }
  order.unlock();
  return true;
}

bool Harvester::Flush(const DeviceContext* device, bool final, std::chrono::milliseconds stall) {
  std::unique_lock<std::mutex> lock(mu_);
  if (final && device != nullptr && !threads_.empty()) {
    auto job = std::make_unique<Job>();
    job->device = const_cast<DeviceContext*>(device);
    job->final = true;
    job->reason = wire::kHarvestExit;
    job->name_generation = StateOf(device).name_generation.load(std::memory_order_acquire);
    Enqueue(std::move(job));
  }
  const auto drained = [&] {
    if (device == nullptr) return queue_.empty() && busy_ == 0;
    auto it = states_.find(device);
    return it == states_.end() || it->second->queued == 0;
  };
  // As long as harvests keep finishing: a large backlog (a few 2 GB
  // read-backs) takes longer than any fixed deadline to ship.
  for (;;) {
    const uint64_t finished = finished_;
    if (cv_.wait_for(lock, stall, [&] { return drained() || finished_ != finished; })) {
      if (drained()) return true;
      continue;
    }
    return false;
  }
}

void Harvester::ReadNamesBeforeUnload(DeviceContext* device) {
  std::unordered_set<uint64_t> addresses;
  ContextState* state;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state = &StateOf(device);
    generation = state->name_generation.load(std::memory_order_acquire);
    const auto collect = [&](const ArenaSnapshot& snap) { CollectNameAddresses(snap, &addresses); };
    const auto scan = [&](Job* job) {
      if (job != nullptr && job->device == device && job->has_snapshot && job->name_generation == generation) {
        // Staged chunks come to host memory now, on this thread: the staging
        // area goes with the context, and the names are in the chunks.
        device->FetchAtUnload(&job->snapshot, collect);
      }
    };
    for (const auto& job : queue_) scan(job.get());
    for (Job* job : processing_) scan(job);
    // Events that wait for their CUPTI record are named when they ship.
    for (const WarpSegment& s : state->carried_segments) {
      if (s.name_generation != generation) continue;
      for (const DecodedEvent& e : s.events) addresses.insert(s.name_base + static_cast<int64_t>(e.name_offset));
    }
  }
  for (uint64_t address : addresses) ReadName(*state, device, generation, address);
  state->name_generation.fetch_add(1, std::memory_order_acq_rel);
}

void Harvester::EndContext(DeviceContext* device) {
  std::lock_guard<std::mutex> lock(mu_);
  ContextState& state = StateOf(device);
  state.ended = true;
  state.free.clear();
  if (threads_.empty()) return;
  auto job = std::make_unique<Job>();
  job->device = device;
  job->final = true;
  job->reason = wire::kHarvestContextDestroy;
  Enqueue(std::move(job));
}

void Harvester::Run() {
  OwnCalls own;  // this thread's driver calls are smprof's
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    std::unique_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    processing_.push_back(job.get());
    lock.unlock();
    bool failed = false;
    try {
      Process(*job);
    } catch (const std::exception& e) {
      failed = true;
      Log().error("a harvest failed with an internal error ({}); its events are lost (counted)", e.what());
    } catch (...) {
      failed = true;
      Log().error("a harvest failed with an internal error; its events are lost (counted)");
    }
    if (failed && job->has_snapshot) {
      const uint64_t events = EventsIn(job->snapshot);
      std::lock_guard<std::mutex> ship_lock(ship_mu_);
      stats_.events_lost_host += events;
    }
    lock.lock();
    processing_.erase(std::find(processing_.begin(), processing_.end(), job.get()));
    if (failed) AbandonLocked(job->seq);  // the later jobs must not wait for its turns
    --busy_;
    ++finished_;
    ContextState& state = StateOf(job->device);
    --state.queued;
    if (job->has_snapshot) {
      --state.out;
      if (!state.ended) state.free.push_back(std::move(job->snapshot));
    }
    cv_.notify_all();
  }
}

std::string Harvester::ReadName(ContextState& state, DeviceContext* device, uint64_t generation, uint64_t address) {
  const auto key = std::make_pair(generation, address);
  {
    std::lock_guard<std::mutex> lock(state.names_mu);
    auto it = state.names.find(key);
    if (it != state.names.end()) return it->second;
  }
  // Only while the modules of that generation are loaded, and the context lives.
  std::string name;
  bool gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone = state.ended;
  }
  if (!gone && generation == state.name_generation.load(std::memory_order_acquire)) {
    name = gpu_.ReadString(address, device->stream());
  }
  if (name.empty()) name = fmt::format("<unreadable name at 0x{:x}>", address);
  std::lock_guard<std::mutex> lock(state.names_mu);
  return state.names.emplace(key, std::move(name)).first->second;  // an unload's read may have come first
}

void Harvester::Process(Job& job) {
  DeviceContext* device = job.device;
  ContextState* state;
  bool gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state = &StateOf(device);
    gone = state->ended;
  }
  std::optional<ContextScope> scope;
  if (!gone) scope.emplace(gpu_, device->ctx());
  if (scope && !scope->ok()) gone = true;
  // The chunks to host memory first, if they wait on the device (an unload
  // may have fetched them already). A buffer that was too small goes now.
  if (!gone && job.has_snapshot) {
    device->Fetch(&job.snapshot);
    job.snapshot.retired = HostBuffer();
  } else if (job.has_snapshot && device->Staged(job.snapshot)) {
    // The context went with the chunks still on it (the unload's own copy
    // failed): its buffer holds an older read-back's bytes, never to decode.
    job.snapshot.used_chunks = 0;
    Log().warn("GPU {}: a read-back was still in device memory when its context ended; its events are lost",
               device->facts().info.ordinal);
  }
  uint64_t stage_start = gpu_.Now();
  const auto stage = [&](wire::HarvestStage s) {
    const uint64_t now = gpu_.Now();
    job.host.stage_us[s] += Micros(stage_start, now);
    stage_start = now;
  };

  // A final harvest ships everything that waits for a record, and a harvest
  // before it puts what it leaves waiting back only at its ship turn: so a
  // final one takes after every earlier one has shipped (its ship turn is
  // then already its own).
  if (job.final && !WaitTurn(ship_turn_, job.seq)) return;
  // In read order: the clock probe relates %globaltimer to CUPTI's clock
  // (given up, the previous offset stays, when the GPU is too busy to run it
  // now); the records of the kernels that ended before this read-back.
  if (!WaitTurn(take_turn_, job.seq)) return;
  std::vector<WarpSegment> carried;
  std::vector<int> carried_ages, record_ages;
  std::vector<KernelRecord> carried_records;
  {
    std::lock_guard<std::mutex> lock(mu_);
    carried.swap(state->carried_segments);
    carried_ages.swap(state->carried_segment_ages);
    carried_records.swap(state->carried_records);
    record_ages.swap(state->carried_record_ages);
  }
  uint64_t probe_time = 0, probe_launched = 0;
  const bool probed = !gone && job.has_snapshot && gpu_.ProbeClock(&probe_time, &probe_launched);
  // A kernel launched after the read-back may be running: only complete records now.
  gpu_.FlushActivity(/*incomplete_too=*/job.final);
  const uint32_t context_id = device->facts().context_id;
  const std::vector<KernelRecord> probes = activity_.TakeNamed(context_id, kClockProbeKernel);
  activity_.TakeNamed(context_id, kTimerStepKernel);
  const KernelRecord* probe = nullptr;
  for (const KernelRecord& r : probes) {
    if (r.start_ns >= probe_launched && (probe == nullptr || r.start_ns < probe->start_ns)) probe = &r;
  }
  if (probed && probe != nullptr) {
    state->clock_offset = static_cast<int64_t>((probe->start_ns + probe->end_ns) / 2 - probe_time);
  }
  int64_t clock_offset = state->clock_offset;
  // Only kernels that ended before the read-back: later ones belong to later
  // harvests. Records carried from earlier harvests come first.
  std::vector<KernelRecord> records = std::move(carried_records);
  {
    std::vector<KernelRecord> taken = activity_.Take(context_id, job.has_snapshot ? job.snapshot.time_ns : gpu_.Now());
    records.insert(records.end(), std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end()));
  }
  record_ages.resize(records.size(), 0);
  EndTurn(&take_turn_);
  stage(wire::kStageClock);

  const ArenaSnapshot& snap = job.snapshot;
  std::vector<WarpSegment> segments;
  DecodeStats decode;
  if (job.has_snapshot) {
    DecodeAndMapClocks(snap.chunks.data(), snap.used_chunks, snap.chunk_bytes, device->facts().cycles_per_ns,
                       decode_threads_, &segments, &decode);
  }
  const size_t fresh_segments = segments.size();
  for (WarpSegment& s : segments) s.name_generation = job.name_generation;  // carried ones keep theirs
  segments.insert(segments.end(), std::make_move_iterator(carried.begin()), std::make_move_iterator(carried.end()));
  carried_ages.insert(carried_ages.begin(), fresh_segments, 0);  // ages line up with `segments`
  clock_offset = EstimateClockOffset(segments, records, clock_offset);
  // Wanted launches are those whose API call was noted; a graph's kernel
  // nodes share their cuGraphLaunch's, and are kept if their kernel is
  // selected and the replay took it (not excluded by the call).
  HostCalls* calls = job.host_calls;
  const auto wanted = [&](const KernelRecord& r) {
    const KernelClass* kernel = kernels_.FindClass(r.name);
    return kernel != nullptr && kernel->selected && calls != nullptr &&
           calls->Find(r.correlation_id).api != wire::kApiNone &&
           (r.graph_id == 0 || !calls->Excludes(r.correlation_id, kernel));
  };
  MatchStats match;
  std::vector<const WarpSegment*> unmatched;
  std::vector<size_t> unused;
  std::vector<Launch> launches = MatchLaunches(&segments, records, wanted, clock_offset, &match, &unmatched, &unused);
  // Segments still without a record wait (a bounded number of harvests and
  // events); the rest ship now under synthetic launches.
  std::vector<WarpSegment> waiting, given_up;
  std::vector<int> waiting_ages;
  size_t waiting_events = 0;
  const size_t carry_limit = std::max<size_t>(
      kMaxCarriedEvents, static_cast<size_t>(snap.total_chunks) * snap.chunk_bytes / sizeof(wire::Event));
  for (const WarpSegment* s : unmatched) {
    const int age = carried_ages[static_cast<size_t>(s - segments.data())] + 1;
    if (job.final || age > kCarryHarvests || waiting_events + s->events.size() > carry_limit) {
      given_up.push_back(*s);
    } else {
      waiting.push_back(*s);
      waiting_ages.push_back(age);
      waiting_events += s->events.size();
    }
  }
  // Segments that start to wait are named now, while the memory of their
  // modules is surely there: an unload reads the names of what waits in the
  // context, but not of what a harvest has taken from it and still holds;
  // that harvest then finds the names cached.
  const auto read_name = [&](uint64_t generation, uint64_t address) {
    return ReadName(*state, device, generation, address);
  };
  {
    EventNames waiting_names;
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (waiting_ages[i] == 1) waiting_names.Add(waiting[i], waiting[i].events, read_name);  // else named before
    }
  }
  if (!given_up.empty()) {
    std::vector<Launch> synthetic = MatchLaunches(&given_up, {}, wanted, clock_offset, &match);
    for (Launch& l : synthetic) launches.push_back(std::move(l));
    std::stable_sort(launches.begin(), launches.end(), [](const Launch& a, const Launch& b) {
      return std::tie(a.record.start_ns, a.record.correlation_id) <
             std::tie(b.record.start_ns, b.record.correlation_id);
    });
  }
  std::vector<KernelRecord> waiting_records;
  std::vector<int> waiting_record_ages;
  for (size_t i : unused) {
    const int age = record_ages[i] + 1;
    if (!job.final && age <= kCarryHarvests) {
      waiting_records.push_back(records[i]);
      waiting_record_ages.push_back(age);
    } else if (KernelClass* kernel = kernels_.FindClass(records[i].name); kernel != nullptr && wanted(records[i])) {
      kernel->claims.set_all(0);  // it records nothing
    }
  }
  for (Launch& l : launches) {
    if (calls != nullptr) l.call = calls->Find(l.record.correlation_id);
  }

  // Names are read from device memory, so before a module unload completes;
  // by generation too (events that waited across an unload may share an
  // address with a later module's).
  EventNames names;
  for (const Launch& l : launches) {
    for (const LaunchEvents& w : l.warps) names.Add(*w.segment, w.events, read_name);
  }
  // What each kernel claimed per warp this time sizes the chunks and the
  // drain projection of its next launch (0 above, for kernels whose records
  // waited for events in vain).
  for (const Launch& l : launches) {
    const uint64_t warps = Warps(l.record);
    if (warps == 0 || l.record.name.empty() || job.snapshot.chunk_bytes == 0) continue;
    if (KernelClass* kernel = kernels_.FindClass(l.record.name)) {
      ClaimTally tally(job.snapshot.chunk_bytes);
      for (const LaunchEvents& w : l.warps) tally.AddWarp(w.events.size(), w.chunks);
      tally.Teach(warps, &kernel->claims);
    }
  }
  stage(wire::kStageDecode);

  // In read order: launch ids increase with time across harvests.
  if (!WaitTurn(ship_turn_, job.seq)) return;
  struct ShipTurn {
    Harvester* h;
    ~ShipTurn() { h->EndTurn(&h->ship_turn_); }
  } ship_turn{this};
  state->clock_offset = clock_offset;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < waiting.size(); ++i) {
      state->carried_segments.push_back(std::move(waiting[i]));
      state->carried_segment_ages.push_back(waiting_ages[i]);
    }
    for (size_t i = 0; i < waiting_records.size(); ++i) {
      state->carried_records.push_back(std::move(waiting_records[i]));
      state->carried_record_ages.push_back(waiting_record_ages[i]);
    }
  }
  std::lock_guard<std::mutex> lock(ship_mu_);
  if (!job.has_snapshot && launches.empty()) {  // a final flush with nothing left to ship
    if (match.filtered != 0) {
      stats_.events_filtered += match.filtered;
      SendStatsLocked();
    }
    return;
  }
  shipper_.SendLaunches(
      launches, job.reason == wire::kHarvestHighWater ? uint32_t{wire::kLaunchForcedDrain} : 0u,
      [&](uint64_t generation, uint64_t address) { return names.At(generation, address); },
      [](const std::string& mangled) { return mangled.empty() ? std::string("<unknown kernel>") : Demangle(mangled); });
  stage(wire::kStageShip);
  // A final flush closes the launches it shipped (events that waited for a
  // record) with a harvest of its own: it read nothing back.
  shipper_.SendHarvest(job.has_snapshot ? snap.time_ns : gpu_.Now(), device->facts().info.ordinal, job.reason,
                       snap.dropped_events, snap.unplaced_events, snap.used_chunks, snap.total_chunks,
                       static_cast<uint32_t>(decode.empty_chunks), job.host);  // at most used_chunks
  stats_.harvests += job.has_snapshot ? 1 : 0;
  stats_.forced_drains += job.reason == wire::kHarvestHighWater ? 1 : 0;
  stats_.events_dropped_device += snap.dropped_events;
  stats_.events_unplaced_device += snap.unplaced_events;
  stats_.events_filtered += match.filtered;
  stats_.events_unattributed += match.unattributed;
  stats_.events_malformed += decode.malformed_events;
  Log().debug("harvest on GPU {} ({}): {} chunks ({} empty, {} malformed), {} launches, {} events, {} dropped",
              device->facts().info.ordinal, static_cast<int>(job.reason), snap.used_chunks, decode.empty_chunks,
              decode.malformed_chunks, launches.size(), match.events, snap.dropped_events);
  SendStatsLocked();
}

uint64_t Harvester::CountUnshipped() {
  uint64_t events = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t staged = 0;
    const auto count = [&](const Job* job) {
      if (job == nullptr || !job->has_snapshot) return;
      // Chunks still on the device cannot be counted (contexts, and their
      // DeviceContexts, live as long as the profiler).
      if (job->device->Staged(job->snapshot)) {
        ++staged;
      } else {
        events += EventsIn(job->snapshot);
      }
    };
    for (const auto& job : queue_) count(job.get());
    for (const Job* job : processing_) count(job);
    for (const auto& [device, state] : states_) {
      for (const WarpSegment& s : state->carried_segments) events += s.events.size();
    }
    if (staged != 0) {
      Log().warn("{} read-backs were still in device memory at exit; their events are lost, uncounted", staged);
    }
  }
  std::lock_guard<std::mutex> lock(ship_mu_);
  stats_.events_lost_host += events;
  SendStatsLocked();
  return events;
}

void Harvester::SendStats() {
  std::lock_guard<std::mutex> lock(ship_mu_);
  SendStatsLocked();
}

void Harvester::SendStatsLocked() {
  const ShipperCounters& c = shipper_.counters();
  stats_.launches_profiled = c.launches;
  stats_.events_recorded = c.events;
  stats_.messages_dropped = c.messages_dropped;
  wire::StatsMsg stats = stats_;
  stats.events_dropped_transport += c.events_dropped;
  stats.harvests_skipped = skipped_.load(std::memory_order_relaxed);
  if (fill_stats_) fill_stats_(&stats);
  shipper_.SendStats(stats);
}

}  // namespace smprof::injector
