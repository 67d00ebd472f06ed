#include "injector/harvester.h"

#include <algorithm>

#include "common/names.h"
#include "injector/kernel_table.h"
#include "injector/log.h"

namespace smprof::injector {
namespace {

uint64_t Warps(const KernelRecord& r) {
  return (uint64_t{r.block[0]} * r.block[1] * r.block[2] + 31) / 32 * r.grid[0] * r.grid[1] * r.grid[2];
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
  wire::HarvestReason reason = wire::kHarvestSync;
  HarvestHost host;  // the application thread's part is filled in
};

// What the harvest thread keeps per context.
struct Harvester::ContextState {
  int64_t clock_offset = 0;
  std::unordered_map<uint64_t, std::string> names;  // device address -> marker name
  std::vector<ArenaSnapshot> free;                  // buffers to reuse (mu_)
  size_t out = 0;                                   // snapshots queued or being processed (mu_)
  size_t queued = 0;                                // jobs queued or being processed (mu_)
  // Held from a read-back until its job is queued: jobs are processed in the
  // order of their reads, so a harvest never takes a later one's records.
  std::mutex order;
};

Harvester::Harvester(Gpu& gpu, ActivityStore& activity, KernelTable& kernels, Shipper& shipper, std::mutex& ship_mu,
                     StatsFiller fill_stats)
    : gpu_(gpu),
      activity_(activity),
      kernels_(kernels),
      shipper_(shipper),
      ship_mu_(ship_mu),
      fill_stats_(std::move(fill_stats)) {}

Harvester::~Harvester() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
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
  {
    // A buffer for the copy: when all of this context's are queued, wait for
    // the harvest thread (the overflow policy); a non-forced harvest skips.
    std::unique_lock<std::mutex> lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    ContextState& state = StateOf(device);
    const auto available = [&] { return state.out < kSnapshotsPerContext || stop_; };
    if (!available()) {
      if (!force && reason == wire::kHarvestSync) {
        cv_.wait_until(lock, std::chrono::steady_clock::now() + std::chrono::seconds(5), available);
      } else {
        cv_.wait_until(lock, deadline, available);
      }
      if (!available()) return false;
    }
    ++state.out;
    if (!state.free.empty()) {
      job->snapshot = std::move(state.free.back());
      state.free.pop_back();
    }
  }
  ContextState* state;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state = &StateOf(device);
  }
  std::unique_lock<std::mutex> order(state->order, std::defer_lock);
  const bool ordered = force ? LockBefore(order, deadline) : order.try_lock();
  const ReadBack read = ordered ? device->Read(mode, deadline, &job->snapshot) : ReadBack::kBusy;
  if (read != ReadBack::kDone) {
    std::lock_guard<std::mutex> lock(mu_);
    ContextState& state = StateOf(device);
    --state.out;
    if (read != ReadBack::kFailed) state.free.push_back(std::move(job->snapshot));
    cv_.notify_all();
    if (read == ReadBack::kBusy && reason == wire::kHarvestHighWater) {
      Log().warn("GPU {}: recording work did not finish in time for a drain; events may be dropped",
                 device->facts().info.ordinal);
    }
    return false;
  }
  const uint64_t end = gpu_.Now();
  job->device = device;
  job->host_calls = target.host_calls;
  job->has_snapshot = true;
  job->reason = reason;
  NoteCurrentThread();
  job->host.begin_ns = begin;
  job->host.end_ns = end;
  job->host.tid = CurrentTid();
  job->host.call = call;
  job->host.stage_us[wire::kStageWait] = Micros(begin, job->snapshot.wait_end_ns);
  job->host.stage_us[wire::kStageCopy] = Micros(job->snapshot.wait_end_ns, end);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++state->queued;
    queue_.push_back(std::move(job));
  }
  order.unlock();
  cv_.notify_all();
  return true;
}

bool Harvester::Flush(const DeviceContext* device, bool final, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (final && device != nullptr && thread_.joinable()) {
    auto job = std::make_unique<Job>();
    job->device = const_cast<DeviceContext*>(device);
    job->final = true;
    ++StateOf(device).queued;
    queue_.push_back(std::move(job));
    cv_.notify_all();
  }
  const auto drained = [&] {
    if (device == nullptr) return queue_.empty() && busy_ == 0;
    auto it = states_.find(device);
    return it == states_.end() || it->second->queued == 0;
  };
  return cv_.wait_until(lock, deadline, drained);
}

void Harvester::Forget(const DeviceContext* device) {
  std::lock_guard<std::mutex> lock(mu_);
  // The state itself stays (a late harvest call may still hold it); its
  // buffers and names go.
  auto it = states_.find(device);
  if (it == states_.end()) return;
  it->second->free.clear();
  it->second->names.clear();
}

void Harvester::ForgetNames(const DeviceContext* device) {
  std::lock_guard<std::mutex> lock(mu_);
  StateOf(device).names.clear();
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
    lock.unlock();
    try {
      Process(*job);
    } catch (const std::exception& e) {
      Log().error("a harvest failed with an internal error ({}); its events are lost", e.what());
    } catch (...) {
      Log().error("a harvest failed with an internal error; its events are lost");
    }
    lock.lock();
    --busy_;
    ContextState& state = StateOf(job->device);
    --state.queued;
    if (job->has_snapshot) {
      --state.out;
      state.free.push_back(std::move(job->snapshot));
    }
    cv_.notify_all();
  }
}

std::string Harvester::ReadName(ContextState& state, DeviceContext* device, uint64_t address) {
  auto it = state.names.find(address);
  if (it != state.names.end()) return it->second;
  std::string name = gpu_.ReadString(address, device->stream());
  if (name.empty()) name = fmt::format("<unreadable name at 0x{:x}>", address);
  return state.names.emplace(address, std::move(name)).first->second;
}

void Harvester::Process(Job& job) {
  DeviceContext* device = job.device;
  ContextState* state;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state = &StateOf(device);
  }
  if (!job.has_snapshot) return;  // a final flush: nothing is carried over between harvests yet
  ContextScope scope(gpu_, device->ctx());
  if (!scope.ok()) return;
  uint64_t stage_start = gpu_.Now();
  const auto stage = [&](wire::HarvestStage s) {
    const uint64_t now = gpu_.Now();
    job.host.stage_us[s] += Micros(stage_start, now);
    stage_start = now;
  };

  // The clock probe relates %globaltimer to CUPTI's clock; given up (the
  // previous offset stays) when the GPU is too busy to run it now.
  uint64_t probe_time = 0, probe_launched = 0;
  const bool probed = gpu_.ProbeClock(&probe_time, &probe_launched);
  gpu_.FlushActivity();
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
  // Only kernels that ended before the read-back: later ones belong to later harvests.
  std::vector<KernelRecord> records = activity_.Take(context_id, job.snapshot.time_ns);
  stage(wire::kStageClock);

  const ArenaSnapshot& snap = job.snapshot;
  std::vector<WarpSegment> segments;
  DecodeStats decode;
  DecodeChunks(snap.chunks.data(), snap.used_chunks, snap.chunk_bytes, &segments, &decode);
  MapEventClocks(&segments, device->facts().cycles_per_ns);
  state->clock_offset = EstimateClockOffset(segments, records, state->clock_offset);
  // Wanted launches are those whose API call was noted; a graph's kernel
  // nodes share their cuGraphLaunch's, and are kept if their kernel is selected.
  HostCalls* calls = job.host_calls;
  const auto wanted = [&](const KernelRecord& r) {
    const KernelClass* kernel = kernels_.FindClass(r.name);
    return kernel != nullptr && kernel->selected && calls != nullptr &&
           calls->Find(r.correlation_id).api != wire::kApiNone;
  };
  MatchStats match;
  static const std::string kUnwanted = "\x01unwanted";
  for (KernelRecord& r : records) {
    if (!wanted(r)) r.name += kUnwanted;
  }
  std::vector<Launch> launches = MatchLaunches(
      segments, records,
      [](const std::string& name) {
        return name.size() < kUnwanted.size() || name.compare(name.size() - kUnwanted.size(), kUnwanted.size(), kUnwanted) != 0;
      },
      state->clock_offset, &match);
  for (Launch& l : launches) {
    if (calls != nullptr) l.call = calls->Find(l.record.correlation_id);
  }
  if (calls != nullptr) calls->EndHarvest();

  // Names are read from device memory, so before a module unload completes.
  std::unordered_map<uint64_t, std::string> names;
  for (const Launch& l : launches) {
    for (const LaunchEvents& w : l.warps) {
      for (const DecodedEvent& e : w.events) {
        const uint64_t address = w.segment->name_base + static_cast<int64_t>(e.name_offset);
        if (!names.count(address)) names.emplace(address, ReadName(*state, device, address));
      }
    }
  }
  // What each kernel claimed per warp this time sizes the drain projection
  // of its next launch.
  for (const Launch& l : launches) {
    const double warps = static_cast<double>(Warps(l.record));
    if (warps <= 0 || l.record.name.empty()) continue;
    if (KernelClass* kernel = kernels_.FindClass(l.record.name)) {
      kernel->chunks_per_warp.store(l.warps.size() / warps, std::memory_order_relaxed);
    }
  }
  stage(wire::kStageDecode);

  std::lock_guard<std::mutex> lock(ship_mu_);
  shipper_.SendLaunches(
      launches, job.reason == wire::kHarvestHighWater ? uint32_t{wire::kLaunchForcedDrain} : 0u,
      [&](uint64_t address) { return names[address]; },
      [](const std::string& mangled) { return mangled.empty() ? std::string("<unknown kernel>") : Demangle(mangled); });
  stage(wire::kStageShip);
  shipper_.SendHarvest(snap.time_ns, device->facts().info.ordinal, job.reason, snap.dropped_events,
                       snap.unplaced_events, snap.used_chunks, snap.total_chunks, job.host);
  stats_.harvests += 1;
  stats_.forced_drains += job.reason == wire::kHarvestHighWater ? 1 : 0;
  stats_.events_dropped_device += snap.dropped_events;
  stats_.events_unplaced_device += snap.unplaced_events;
  stats_.events_filtered += match.filtered;
  stats_.events_unattributed += match.unattributed;
  stats_.events_malformed += decode.malformed_events;
  Log().debug("harvest on GPU {} ({}): {} chunks, {} launches, {} events, {} dropped", device->facts().info.ordinal,
              static_cast<int>(job.reason), snap.used_chunks, launches.size(), match.events, snap.dropped_events);
  SendStatsLocked();
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
  stats_.events_dropped_transport = c.events_dropped;
  wire::StatsMsg stats = stats_;
  if (fill_stats_) fill_stats_(&stats);
  shipper_.SendStats(stats);
}

}  // namespace smprof::injector
