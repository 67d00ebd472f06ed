#include "injector/harvester.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>

#include "injector/chunk_scan.h"
#include "injector/kernel_table.h"
#include "injector/log.h"

namespace smprof::injector {
namespace {

uint64_t Warps(const KernelRecord& r) {
  return (uint64_t{r.block[0]} * r.block[1] * r.block[2] + 31) / 32 * r.grid[0] * r.grid[1] * r.grid[2];
}

// A scan of a read-back's chunks in host memory (DeviceContext::Staged says
// whether they are; a read-back visited through the page-locked buffers
// has none: then nothing).
ChunkScanner ScanHostChunks(const ArenaSnapshot& snap) {
  ChunkScanner scanner(snap.chunk_bytes, snap.used_chunks);
  if (snap.chunks.data() != nullptr && snap.chunks.size() >= uint64_t{snap.used_chunks} * snap.chunk_bytes) {
    scanner.Add(snap.chunks.data(), snap.used_chunks, nullptr);
  }
  return scanner;
}

uint32_t Micros(uint64_t from, uint64_t to) {
  return static_cast<uint32_t>(std::min<uint64_t>((to - std::min(to, from)) / 1000, UINT32_MAX));
}

}  // namespace

unsigned QuarterOfTheCores() { return std::clamp(std::thread::hardware_concurrency() / 4, 1u, kMaxHarvestThreads); }
unsigned HalfOfTheCores() { return std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u); }

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
  // (mu_) The name addresses its scan found so far: published piece by
  // piece, before its chunks leave the staging area, so that an unload reads
  // them whether it finds the chunks still staged or not.
  std::vector<uint64_t> name_addresses;
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
  // (ship turn) names sent to the collector, by (generation, address).
  std::set<std::pair<uint64_t, uint64_t>> names_shipped;
  // (take turn) the kernel and launched warps of recent grid ids, from their
  // records: what a read-back's warps teach (a record may come a harvest
  // after its events). Bounded: cleared past kRecentGrids.
  struct Grid {
    KernelClass* kernel = nullptr;
    uint64_t launched_warps = 0;
    ClaimRates* rates = nullptr;  // the compiled function's (its launches, not a graph's)
  };
  std::unordered_map<uint64_t, Grid> recent_grids;
  // (ship turn) Grids named after their launch calls when read running
  // (NameRunningLaunchesLocked): a record CUPTI hands over for one later is
  // not shipped again.
  std::set<uint64_t> named_running;
  bool ended = false;  // (mu_) the context is gone: no GPU access
  // (mu_) The context's launch calls (from its read-backs): a final harvest,
  // which reads nothing back, decides with them which records are wanted.
  HostCalls* host_calls = nullptr;
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
      scan_threads_(HalfOfTheCores()),
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
  const bool force = mode == HarvestMode::kForce || mode == HarvestMode::kRunning;
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
    // While earlier read-backs fill the device's staging area, this one
    // would be copied to host memory on this thread, slowly (host_buffer.h);
    // the harvest threads free a slice sooner as they fetch. Waiting for one
    // is bounded by what that copy would take.
    if (state->out > 0 && !device->StagingHasRoom()) {
      const auto copy_time = std::max<std::chrono::microseconds>(
          kMinStagingWait, std::chrono::microseconds(device->ProjectedReadBackBytes() / (kDirectCopyBytesPerSecond / 1000000)));
      cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + copy_time),
                     [&] { return state->out == 0 || stop_ || device->StagingHasRoom(); });
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
  // CUPTI hands over a buffer of kernel records only when all of them are
  // complete: the program's next launch (one that runs on, or hangs) would
  // hold back the records of the kernels this synchronisation waited for.
  // Flushed now, they ship with their events, whatever the program does next.
  if (reason == wire::kHarvestSync) gpu_.FlushActivity(/*incomplete_too=*/false, /*if_free=*/true);
  const uint64_t end = gpu_.Now();
  // A harvest cycle of the context's calls ends with each read-back (the
  // calls of this one's launches stay until the queue has shipped it).
  if (target.host_calls != nullptr) target.host_calls->EndHarvest();
  job->device = device;
  job->host_calls = target.host_calls;
  job->has_snapshot = true;
  job->reason = job->snapshot.switched ? wire::kHarvestHighWater : reason;
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
    const auto collect = [&](const ArenaSnapshot& snap) {
      const ChunkScanner found = ScanHostChunks(snap);
      addresses.insert(found.name_addresses().begin(), found.name_addresses().end());
    };
    const auto scan = [&](Job* job) {
      if (job != nullptr && job->device == device && job->has_snapshot && job->name_generation == generation) {
        // Staged chunks come to host memory now, on this thread: the staging
        // area goes with the context, and the names are in the chunks.
        device->FetchAtUnload(&job->snapshot, collect);
        addresses.insert(job->name_addresses.begin(), job->name_addresses.end());
      }
    };
    for (const auto& job : queue_) scan(job.get());
    for (Job* job : processing_) scan(job);
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
      const uint64_t events = job->device->Staged(job->snapshot) ? 0 : ScanHostChunks(job->snapshot).events();
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

// Charges the time since the last mark to a harvest stage (HarvestMsg::stage_us).
class Harvester::StageClock {
 public:
  StageClock(Gpu& gpu, uint32_t* stage_us) : gpu_(gpu), stage_us_(stage_us), last_(gpu.Now()) {}
  void Mark(wire::HarvestStage stage) {
    const uint64_t now = gpu_.Now();
    stage_us_[stage] += Micros(last_, now);
    last_ = now;
  }

 private:
  Gpu& gpu_;
  uint32_t* stage_us_;
  uint64_t last_;
};

// A job's harvest, stage by stage; the take and ship stages run in read
// order (turns), so the collector gets each read-back's messages together.
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
  if (gone && job.has_snapshot && device->Staged(job.snapshot)) {
    // The context went with the chunks still on it (the unload's own copy
    // failed): its buffer holds an older read-back's bytes, never to ship.
    job.snapshot.used_chunks = 0;
    Log().warn("GPU {}: a read-back was still in device memory when its context ended; its events are lost",
               device->facts().info.ordinal);
  }
  StageClock clock(gpu_, job.host.stage_us);

  if (!WaitTurn(take_turn_, job.seq)) return;
  clock.Mark(wire::kStageOther);  // the earlier read-backs' turns
  TakenRecords taken = TakeRecords(job, *state, gone);
  EndTurn(&take_turn_);
  clock.Mark(wire::kStageClock);

  if (!WaitTurn(ship_turn_, job.seq)) return;
  clock.Mark(wire::kStageOther);
  struct ShipTurn {
    Harvester* h;
    ~ShipTurn() { h->EndTurn(&h->ship_turn_); }
  } ship_turn{this};
  if (!state->named_running.empty()) {
    auto& s = taken.shipped;
    s.erase(std::remove_if(s.begin(), s.end(),
                           [&](const Shipper::Record& r) { return state->named_running.count(r.record->grid_id) != 0; }),
            s.end());
  }
  if (!taken.shipped.empty()) {
    std::lock_guard<std::mutex> lock(ship_mu_);
    shipper_.SendRecords(device->facts().info.ordinal, device->facts().context_id, taken.shipped);
  }
  ChunkScanner scanner(job.snapshot.chunk_bytes, job.snapshot.used_chunks);
  if (job.has_snapshot) ShipChunks(job, &scanner, clock);
  std::vector<std::pair<uint64_t, std::string>> names;
  for (uint64_t address : scanner.name_addresses()) {
    if (state->names_shipped.count({job.name_generation, address}) != 0) continue;
    names.emplace_back(address, ReadName(*state, device, job.name_generation, address));
  }
  TeachClaims(*state, scanner, job.snapshot.chunk_bytes);
  clock.Mark(wire::kStageDecode);
  std::lock_guard<std::mutex> lock(ship_mu_);
  if (job.has_snapshot && job.snapshot.running) NameRunningLaunchesLocked(job, *state, scanner, taken);
  ShipHarvestLocked(job, *state, scanner, names, taken.probed, clock);
  const ArenaSnapshot& snap = job.snapshot;
  const auto& us = job.host.stage_us;
  Log().debug(
      "harvest on GPU {} ({}): {} chunks ({} empty, {} MB written), {} records, {} events, {} dropped; us: wait {} "
      "copy {} clock {} decode {} ship {} other {}",
      device->facts().info.ordinal, static_cast<int>(job.reason), snap.used_chunks, scanner.empty_chunks(),
      scanner.used_bytes() >> 20, taken.records.size(), scanner.events(), snap.dropped_events, us[wire::kStageWait],
      us[wire::kStageCopy], us[wire::kStageClock], us[wire::kStageDecode], us[wire::kStageShip],
      us[wire::kStageOther]);
  SendStatsLocked();
}

// The clock probe relates %globaltimer to CUPTI's clock (given up when the
// GPU is too busy to run it now); then the records of the kernels that ended
// before this read-back (a final harvest: all of them), each marked wanted
// or not, and each recent grid's kernel and launched warps noted for
// teaching chunk sizes. Wanted launches are those whose API call was noted;
// a graph's kernel nodes share their cuGraphLaunch's, and are kept if their
// kernel is selected and the replay took it (not excluded by the call).
Harvester::TakenRecords Harvester::TakeRecords(Job& job, ContextState& state, bool gone) {
  DeviceContext* device = job.device;
  uint64_t probe_time = 0, probe_launched = 0;
  bool probed = !gone && job.has_snapshot && gpu_.ProbeClock(&probe_time, &probe_launched);
  // A kernel launched after the read-back may be running: only complete records now.
  gpu_.FlushActivity(/*incomplete_too=*/job.final);
  const uint32_t context_id = device->facts().context_id;
  const std::vector<KernelRecord> probes = activity_.TakeNamed(context_id, kClockProbeKernel);
  activity_.TakeNamed(context_id, kTimerStepKernel);
  const KernelRecord* probe = nullptr;
  for (const KernelRecord& r : probes) {
    if (r.start_ns >= probe_launched && (probe == nullptr || r.start_ns < probe->start_ns)) probe = &r;
  }
  TakenRecords taken;
  taken.probed = probed && probe != nullptr;
  if (taken.probed) state.clock_offset = static_cast<int64_t>((probe->start_ns + probe->end_ns) / 2 - probe_time);
  taken.records = job.has_snapshot ? activity_.Take(context_id, job.snapshot.time_ns, job.snapshot.correlation_limit)
                                   : activity_.Take(context_id, gpu_.Now());
  HostCalls* calls = job.host_calls;
  taken.shipped.resize(taken.records.size());
  for (size_t i = 0; i < taken.records.size(); ++i) {
    const KernelRecord& r = taken.records[i];
    KernelClass* kernel = kernels_.FindClass(r.name);
    const HostCalls::Call found = calls != nullptr ? calls->Lookup(r.correlation_id) : HostCalls::Call{};
    const wire::HostCall& call = found.call;
    Shipper::Record& shipped = taken.shipped[i];
    shipped.record = &r;
    shipped.call = call;
    shipped.wanted = kernel != nullptr && kernel->selected && call.api != wire::kApiNone &&
                     (r.graph_id == 0 || !calls->Excludes(r.correlation_id, kernel));
    if (kernel == nullptr) continue;
    if (state.recent_grids.size() >= kRecentGrids) state.recent_grids.clear();
    ContextState::Grid& g = state.recent_grids[r.grid_id];
    if (g.kernel != kernel) {
      g = ContextState::Grid{kernel, 0, found.rates};  // none for a graph's launch (HostCalls::Add)
    } else if (g.rates != found.rates) {
      g.rates = nullptr;  // a grid id of launches of several functions (graph replays): the name's alone
    }
    g.launched_warps += Warps(r);
  }
  if (job.has_snapshot && job.snapshot.running && calls != nullptr) {
    for (const auto& [grid, g] : state.recent_grids) taken.known_grids.insert(grid);
    for (const KernelRecord& r : taken.records) taken.known_grids.insert(r.grid_id);
    for (const auto& [correlation, found] : calls->After(activity_.TakenThrough(context_id))) {
      if (found.kernel != nullptr) taken.outstanding.emplace_back(correlation, found);
    }
  }
  return taken;
}

// Kernels read while still running (the process about to end) have no
// CUPTI record: their grids, which no record named, are paired with the
// kernel launches after the last whose record came, both in launch order
// (a context's grid ids grow with its launches), when they are as many;
// else they stay unnamed. Each gets a record of its own (kRecordRunning).
void Harvester::NameRunningLaunchesLocked(const Job& job, ContextState& state, const ChunkScanner& scanner,
                                          const TakenRecords& taken) {
  std::vector<uint64_t> grids;
  for (const auto& [grid, warps] : scanner.TallyByGrid()) {
    if (taken.known_grids.count(grid) == 0) grids.push_back(grid);
  }
  if (grids.empty()) return;
  if (grids.size() != taken.outstanding.size()) {
    Log().info("GPU {}: {} kernels read while running, {} launches without a record: they stay unnamed",
               job.device->facts().info.ordinal, grids.size(), taken.outstanding.size());
    return;
  }
  std::sort(grids.begin(), grids.end());
  std::vector<KernelRecord> records(grids.size());
  std::vector<Shipper::Record> shipped(grids.size());
  for (size_t i = 0; i < grids.size(); ++i) {
    const auto& [correlation, found] = taken.outstanding[i];
    KernelRecord& r = records[i];
    r.grid_id = grids[i];
    r.correlation_id = correlation;
    r.start_ns = found.call.start_ns;
    r.end_ns = std::max(found.call.start_ns, job.snapshot.time_ns);
    r.flags = wire::kRecordRunning;
    r.context_id = job.device->facts().context_id;
    r.name = found.kernel->mangled;
    shipped[i] = Shipper::Record{&r, true, found.call};
    state.named_running.insert(grids[i]);
  }
  shipper_.SendRecords(job.device->facts().info.ordinal, job.device->facts().context_id, shipped);
}

// The chunks, piece by piece as they come to host memory, each scanned (the
// names its events use, how much of each chunk was written, what each warp
// claimed) and shipped up to its written bytes.
void Harvester::ShipChunks(Job& job, ChunkScanner* scanner, StageClock& clock) {
  DeviceContext* device = job.device;
  const ArenaSnapshot& snap = job.snapshot;
  const uint32_t ordinal = device->facts().info.ordinal;
  const uint32_t context_id = device->facts().context_id;
  const auto generation = static_cast<uint32_t>(job.name_generation);
  std::vector<uint32_t> used;
  device->VisitChunks(&job.snapshot, [&](const uint8_t* chunks, uint32_t count) {
    clock.Mark(wire::kStageCopy);
    used.clear();
    const uint64_t events_before = scanner->events();
    const size_t names_before = scanner->name_addresses().size();
    scanner->Add(chunks, count, &used, scan_threads_);
    if (scanner->name_addresses().size() != names_before) {
      std::lock_guard<std::mutex> lock(mu_);  // an unload reads them (ReadNamesBeforeUnload)
      job.name_addresses.assign(scanner->name_addresses().begin(), scanner->name_addresses().end());
    }
    clock.Mark(wire::kStageDecode);
    std::lock_guard<std::mutex> lock(ship_mu_);
    shipper_.SendChunks(ordinal, context_id, generation, snap.chunk_bytes, chunks, used,
                        scanner->events() - events_before);
    clock.Mark(wire::kStageShip);
  });
  job.snapshot.retired = HostBuffer();
}

// What each kernel's warps claimed sizes the chunks of its next launches:
// the kernel name's rates, and the compiled function's where the grid was
// one function's launch.
void Harvester::TeachClaims(ContextState& state, const ChunkScanner& scanner, uint32_t chunk_bytes) {
  if (chunk_bytes == 0) return;
  const uint32_t one_in = scanner.tally_one_in();
  for (const auto& [grid, warps] : scanner.TallyByGrid()) {
    auto it = state.recent_grids.find(grid);
    if (it == state.recent_grids.end() || it->second.launched_warps < one_in) continue;
    ClaimTally tally(chunk_bytes);
    for (const WarpTally& w : warps) tally.AddWarp(w.events, w.chunks);
    tally.Teach(it->second.launched_warps / one_in, &it->second.kernel->claims);
    if (it->second.rates != nullptr) tally.Teach(it->second.launched_warps / one_in, it->second.rates);
  }
}

// The names (read while the modules that wrote them were loaded), then the
// harvest that closes the read-back, and the counters.
void Harvester::ShipHarvestLocked(Job& job, ContextState& state, const ChunkScanner& scanner,
                                  const std::vector<std::pair<uint64_t, std::string>>& names, bool probed,
                                  StageClock& clock) {
  const DeviceContext* device = job.device;
  const uint32_t context_id = device->facts().context_id;
  for (const auto& [address, name] : names) {
    state.names_shipped.emplace(job.name_generation, address);
    shipper_.SendMarkerName(context_id, static_cast<uint32_t>(job.name_generation), address, name);
  }
  const uint32_t flags = (job.final ? uint32_t{wire::kHarvestFinal} : 0u) |
                         (probed ? uint32_t{wire::kHarvestProbed} : 0u) |
                         (job.has_snapshot && job.snapshot.switched ? uint32_t{wire::kHarvestSwitched} : 0u);
  clock.Mark(wire::kStageShip);
  const ArenaSnapshot& snap = job.snapshot;
  shipper_.SendHarvest(job.has_snapshot ? snap.time_ns : gpu_.Now(), device->facts().info.ordinal, context_id,
                       job.reason, snap.dropped_events, snap.unplaced_events, snap.used_chunks, snap.total_chunks,
                       static_cast<uint32_t>(scanner.empty_chunks()), flags, state.clock_offset, job.host);
  stats_.harvests += job.has_snapshot ? 1 : 0;
  stats_.forced_drains += job.reason == wire::kHarvestHighWater ? 1 : 0;
  stats_.events_dropped_device += snap.dropped_events;
  stats_.events_unplaced_device += snap.unplaced_events;
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
        events += ScanHostChunks(job->snapshot).events();
      }
    };
    for (const auto& job : queue_) count(job.get());
    for (const Job* job : processing_) count(job);
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
  stats_.events_recorded = c.events;
  stats_.messages_dropped = c.messages_dropped;
  wire::StatsMsg stats = stats_;
  stats.events_dropped_transport += c.events_dropped;
  stats.harvests_skipped = skipped_.load(std::memory_order_relaxed);
  if (fill_stats_) fill_stats_(&stats);
  shipper_.SendStats(stats);
}

}  // namespace smprof::injector
