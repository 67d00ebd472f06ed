#include "injector/profiler.h"

#include <algorithm>

#include "injector/log.h"

namespace smprof::injector {
namespace {

// The API call in progress on this thread, from its enter callback to its
// exit: a launch of recording work (context set), or a synchronising call.
struct CallInProgress {
  void* context = nullptr;  // Profiler::Context of a recording launch
  HostCalls* host_calls = nullptr;
  uint64_t correlation_id = 0;
  uint64_t start_ns = 0;
  wire::HostApi api = wire::kApiNone;
  ClaimRates* rates = nullptr;  // the launched function's (a kernel launch)
  const KernelClass* kernel = nullptr;  // the launched kernel (a kernel launch)
};
thread_local CallInProgress t_call;
// The launch gate this thread holds between a launch's API enter and exit.
thread_local DeviceContext* t_gate_held = nullptr;

// The context this thread used last (most threads use one).
struct ContextCache {
  uint64_t profiler = 0;
  uint64_t generation = 0;
  GpuCtx ctx = nullptr;
  void* context = nullptr;
};
thread_local ContextCache t_context;

// The graph this thread replayed last (replays of one graph in a loop take no
// lock). Valid while `generation` is the profiler's graph generation: every
// instantiation and destruction bumps it. The plan is not owned: a graph is
// not destroyed while it is being launched.
struct GraphCache {
  uint64_t profiler = 0;
  uint64_t generation = 0;
  void* exec = nullptr;
  const void* plan = nullptr;
};
thread_local GraphCache t_graph;

ArenaOptions ArenaOptionsOf(const Settings& s, uint64_t bounce_bytes) {
  ArenaOptions o;
  o.bounce_bytes = bounce_bytes;
  o.buffer_bytes = s.buffer_mb == kAutoBufferMb ? 0 : uint64_t{s.buffer_mb} << 20;
  o.chunk_bytes = s.chunk_bytes;
  o.warp_mask = s.warp_mask;
  o.high_water_percent = s.high_water_percent;
  return o;
}

void ReleaseGate() {
  if (t_gate_held != nullptr) {
    t_gate_held->UnlockGate();
    t_gate_held = nullptr;
  }
}

void HoldGate(DeviceContext& device) {
  if (t_gate_held == nullptr) {
    device.LockGate();
    t_gate_held = &device;
  }
}

}  // namespace

Profiler::Profiler(Gpu& gpu, const Settings& settings, Shipper& shipper, unsigned harvest_threads,
                   uint64_t bounce_bytes)
    : gpu_(gpu),
      settings_(settings),
      arena_options_(ArenaOptionsOf(settings, bounce_bytes)),
      shipper_(shipper),
      launch_counters_(settings_.launches),
      kernels_(gpu,
               [this](KernelClass* k) {
                 k->selected = settings_.kernels.selects_all() || settings_.kernels.Matches(k->demangled);
                 k->launch_items = settings_.launches.ItemsFor(k->demangled);
                 activity_.Track(k->mangled);
               }),
      harvester_(
          gpu, activity_, kernels_, shipper, ship_mu_, [this](wire::StatsMsg* s) { FillStats(s); }, harvest_threads,
          settings_.backlog),
      window_open_(settings_.capture_range != CaptureRange::kProfilerApi) {
  activity_.Track(kClockProbeKernel);
  activity_.Track(kTimerStepKernel);
}

Profiler::~Profiler() = default;

void Profiler::SendNotice(wire::NoticeKind kind, const std::string& text) {
  std::lock_guard<std::mutex> lock(ship_mu_);
  shipper_.SendNotice(kind, text);
}

Profiler::Context* Profiler::ContextFor(GpuCtx ctx, bool create) {
  const uint64_t generation = context_generation_.load(std::memory_order_acquire);
  if (t_context.profiler == id_ && t_context.generation == generation && t_context.ctx == ctx) {
    return static_cast<Context*>(t_context.context);
  }
  Context* found = nullptr;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = contexts_.find(ctx);
    if (it != contexts_.end()) {
      known = true;
      found = it->second;
    }
  }
  if (!known) {
    if (!create) return nullptr;
    // Set up outside the lock (it runs kernels); a context that fails is
    // remembered as nullptr and never tried again.
    auto made = std::make_unique<Context>(gpu_, ctx, arena_options_);
    const bool ok = made->device.SetUp();
    bool announce = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto [it, inserted] = contexts_.emplace(ctx, ok ? made.get() : nullptr);
      if (inserted && ok) {
        for (const EarlyQuiet& q : early_quiet_[ctx]) made->device.AdoptQuietLaunch(q.stream, q.per_thread, q.thread);
        early_quiet_.erase(ctx);
        all_contexts_.push_back(std::move(made));
        announce = true;
      }
      found = it->second;
    }
    if (announce) {  // before any of its launches can be shipped (they ship after a harvest of it)
      std::lock_guard<std::mutex> ship(ship_mu_);
      shipper_.SendDevice(found->device.facts().info);
    }
  }
  if (found != nullptr && !found->device.usable()) found = nullptr;
  t_context = ContextCache{id_, generation, ctx, found};
  return found;
}

void Profiler::NoteEarlyQuietLaunch(GpuCtx ctx, GpuStream stream, bool per_thread) {
  thread_local struct {
    uint64_t profiler = 0;
    GpuCtx ctx = nullptr;
    GpuStream stream = nullptr;
    bool per_thread = false;
  } last;
  if (last.profiler == id_ && last.ctx == ctx && last.stream == stream && last.per_thread == per_thread) return;
  const uint64_t thread = ThreadToken();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto known = contexts_.find(ctx);
    if (known != contexts_.end()) {  // set up meanwhile
      if (known->second != nullptr) known->second->device.AdoptQuietLaunch(stream, per_thread, thread);
      return;
    }
    auto& notes = early_quiet_[ctx];
    const bool seen = std::any_of(notes.begin(), notes.end(), [&](const EarlyQuiet& q) {
      return q.per_thread == per_thread && (per_thread ? q.thread == thread : q.stream == stream);
    });
    if (!seen) notes.push_back(EarlyQuiet{stream, per_thread, thread});
  }
  last = {id_, ctx, stream, per_thread};
}

bool Profiler::TakeLaunch(KernelClass* kernel) {
  if (kernel->launch_items.empty()) return true;
  return settings_.launches.Take(kernel->launch_items, launch_counters_);
}

DeviceContext::Module* Profiler::ModuleOf(Context& c, const KernelInfo& info) {
  void* slot = info.module_slot.load(std::memory_order_acquire);
  if (slot == nullptr) {
    slot = c.device.FindModule(info.module, info.arena_global, info.kernel->selected);
    info.module_slot.store(slot, std::memory_order_release);
  }
  return static_cast<DeviceContext::Module*>(slot);
}

namespace {

// The chunks `warps` warps of `kernel` may claim at the context's chunk
// size, from what it claimed per warp at its last harvest.
double Projected(const KernelInfo& info, uint64_t warps, const DeviceContext& device) {
  return std::min(static_cast<double>(warps) * info.claims.at(device.chunk_class()),
                  static_cast<double>(device.num_chunks()));
}

}  // namespace

void Profiler::OnLaunchEnter(const LaunchCall& call) {
  t_call = CallInProgress{};
  if (call.function == nullptr) return EnterGraphLaunch(call);
  const KernelInfo* info = kernels_.Find(call.ctx, call.function, call.symbol);
  if (!info->opted_in) return;
  launches_opted_in_.fetch_add(1, std::memory_order_relaxed);
  // A launch captured into a graph is not counted: the graph's replays are.
  const bool wanted = window_open_.load(std::memory_order_relaxed) && info->kernel->selected &&
                      (info->kernel->launch_items.empty() ||
                       gpu_.Capturing(call.per_thread ? kPerThreadStream : call.stream) || TakeLaunch(info->kernel));
  if (!wanted) launches_not_selected_.fetch_add(1, std::memory_order_relaxed);
  Context* c = ContextFor(call.ctx, /*create=*/wanted);
  if (c == nullptr) {
    if (!wanted) NoteEarlyQuietLaunch(call.ctx, call.stream, call.per_thread);
    return;
  }
  DeviceContext& device = c->device;
  const GpuStream stream = call.per_thread ? kPerThreadStream : call.stream;

  if (!wanted) {
    device.AwaitSwitch(call.stream, call.per_thread);
    // Records nothing unless its module records: then the launch is darkened
    // in stream order, or tracked (its events are filtered on the host).
    DeviceContext::Module* m = device.all_dark() ? nullptr : ModuleOf(*c, *info);
    if (m == nullptr || !device.lit(m)) {
      device.NoteQuietLaunch(call.stream, call.per_thread);
      return;
    }
    const bool capturing = gpu_.Capturing(stream);
    if (device.DarkenInStreamOrder(m, call.stream, call.per_thread, capturing)) return;
    HoldGate(device);
    if (!capturing) device.NoteLaunch(m, call.stream, call.per_thread, 0);
    return;
  }

  DeviceContext::Module* m = ModuleOf(*c, *info);
  const uint64_t start_ns = gpu_.Now();
  const bool capturing = gpu_.Capturing(stream);
  if (!capturing) {
    // A drain below may just teach what the kernel claims per warp.
    KeepRoom(*c, Projected(*info, call.warps, device), stream, call);
  }
  HoldGate(device);
  const ClaimRates& claims = info->claims;
  device.SizeChunks([&](int chunk_class) { return static_cast<double>(call.warps) * claims.at(chunk_class); },
                    claims.shrink_floor());
  if (!device.Light(m, stream, capturing) || capturing) return;  // a captured launch records with its graph
  device.NoteLaunch(m, call.stream, call.per_thread, Projected(*info, call.warps, device), &info->claims, call.warps);
  t_call = CallInProgress{c, &c->host_calls, call.correlation_id, start_ns, call.api, &info->claims, info->kernel};
}

// A graph launch records the nodes of the kernels it takes: each replay
// counts as one launch of every selected kernel among its nodes (however many
// nodes it has), so --launches ranges choose replays. A graph instantiated
// before smprof saw it records whole when any module with a selected kernel
// is known (its nodes are unknown, so they count nothing).
void Profiler::EnterGraphLaunch(const LaunchCall& call) {
  const GraphPlan* plan = nullptr;
  const uint64_t generation = graph_generation_.load(std::memory_order_acquire);
  if (t_graph.profiler == id_ && t_graph.generation == generation && t_graph.exec == call.graph_exec) {
    plan = static_cast<const GraphPlan*>(t_graph.plan);
  } else {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = graphs_.find(call.graph_exec);
      if (it != graphs_.end()) plan = it->second.get();
    }
    t_graph = GraphCache{id_, generation, call.graph_exec, plan};
  }
  if (plan != nullptr && plan->kernels.empty()) return;  // no kernel node opted in
  if (plan != nullptr) launches_opted_in_.fetch_add(1, std::memory_order_relaxed);
  // Which of the plan's selected kernels this replay takes.
  char taken_inline[32];
  std::vector<char> taken_heap;
  char* taken = taken_inline;
  bool wanted = window_open_.load(std::memory_order_relaxed);
  if (wanted && plan != nullptr) {
    const size_t n = plan->selected.size();
    if (n > sizeof(taken_inline)) {
      taken_heap.resize(n);
      taken = taken_heap.data();
    }
    wanted = false;
    for (size_t k = 0; k < n; ++k) {
      taken[k] = TakeLaunch(plan->selected[k]) ? 1 : 0;
      wanted |= taken[k] != 0;
    }
  }
  const auto takes = [&](const KernelClass* kernel) {
    const auto at = std::find(plan->selected.begin(), plan->selected.end(), kernel);
    return at != plan->selected.end() && taken[at - plan->selected.begin()] != 0;
  };
  if (!wanted && plan != nullptr) launches_not_selected_.fetch_add(1, std::memory_order_relaxed);
  Context* c = ContextFor(call.ctx, /*create=*/wanted && plan != nullptr);
  if (c == nullptr) return;
  DeviceContext& device = c->device;
  const GpuStream stream = call.per_thread ? kPerThreadStream : call.stream;
  if (!wanted) {
    device.AwaitSwitch(call.stream, call.per_thread);
    if (device.all_dark()) {
      device.NoteQuietLaunch(call.stream, call.per_thread);
      return;
    }
    const bool capturing = gpu_.Capturing(stream);
    if (plan != nullptr) {  // darken its nodes' lit modules in stream order, as for a kernel launch
      bool dark = true;
      for (const KernelInfo* k : plan->kernels) {
        dark &= device.DarkenInStreamOrder(ModuleOf(*c, *k), call.stream, call.per_thread, capturing);
      }
      if (dark) return;
    }
    HoldGate(device);  // nodes of lit modules record: the harvest must wait for them
    if (!capturing) device.NoteLaunch(nullptr, call.stream, call.per_thread, 0);
    return;
  }
  const uint64_t start_ns = gpu_.Now();
  const bool capturing = gpu_.Capturing(stream);
  std::vector<DeviceContext::Module*> modules;
  std::vector<size_t> recording_nodes;  // every node of a module that records may claim chunks
  if (plan != nullptr) {
    for (size_t i = 0; i < plan->kernels.size(); ++i) {
      const KernelInfo& k = *plan->kernels[i];
      DeviceContext::Module* m = ModuleOf(*c, k);
      if (takes(k.kernel) && std::find(modules.begin(), modules.end(), m) == modules.end()) modules.push_back(m);
    }
    for (size_t i = 0; i < plan->kernels.size(); ++i) {
      const KernelInfo& k = *plan->kernels[i];
      if (std::find(modules.begin(), modules.end(), ModuleOf(*c, k)) == modules.end()) continue;
      recording_nodes.push_back(i);
      // A selected kernel this replay does not take records with its module:
      // its events are dropped on the host (counted as filtered).
      if (k.kernel->selected && !takes(k.kernel) && !capturing) c->host_calls.Exclude(call.correlation_id, k.kernel);
    }
  }
  const auto chunks_at = [&](int chunk_class) {
    double sum = 0;
    for (size_t i : recording_nodes) {
      sum += static_cast<double>(plan->warps[i]) * plan->kernels[i]->kernel->claims.at(chunk_class);
    }
    return sum;
  };
  double chunks = std::min(chunks_at(device.chunk_class()), static_cast<double>(device.num_chunks()));
  if (!capturing) KeepRoom(*c, chunks, stream, call);
  HoldGate(device);
  device.SizeChunks(chunks_at, kChunkClasses);  // a graph's mix of kernels never shrinks the size
  chunks = std::min(chunks_at(device.chunk_class()), static_cast<double>(device.num_chunks()));
  bool lit = true;
  if (plan == nullptr) {
    lit = device.LightSelected(stream, capturing);
  } else {
    for (DeviceContext::Module* m : modules) lit &= device.Light(m, stream, capturing);
  }
  if (!lit || capturing) return;
  device.NoteLaunch(nullptr, call.stream, call.per_thread, chunks);
  t_call = CallInProgress{c, &c->host_calls, call.correlation_id, start_ns, call.api};
}

void Profiler::OnGraphExecCreated(GpuCtx ctx, void* graph, void* exec) {
  std::vector<GraphKernel> nodes;
  auto plan = std::make_shared<GraphPlan>();
  if (gpu_.GraphKernels(graph, &nodes)) {
    for (const GraphKernel& node : nodes) {
      const KernelInfo* info = kernels_.Find(ctx, node.function, node.symbol.c_str());
      if (!info->opted_in) continue;
      plan->kernels.push_back(info);
      plan->warps.push_back(node.warps);
      if (info->kernel->selected &&
          std::find(plan->selected.begin(), plan->selected.end(), info->kernel) == plan->selected.end()) {
        plan->selected.push_back(info->kernel);
      }
    }
  } else {
    return;  // unknown: its launches light every module with a selected kernel
  }
  std::lock_guard<std::mutex> lock(mu_);
  graphs_[exec] = std::move(plan);
  graph_generation_.fetch_add(1, std::memory_order_acq_rel);
}

void Profiler::OnGraphExecDestroy(void* exec) {
  std::lock_guard<std::mutex> lock(mu_);
  graphs_.erase(exec);
  graph_generation_.fetch_add(1, std::memory_order_acq_rel);
}

void Profiler::OnLaunchExit(uint64_t correlation_id) {
  if (correlation_id != 0 && t_call.host_calls != nullptr && t_call.correlation_id == correlation_id) {
    NoteCurrentThread();
    t_call.host_calls->Add(correlation_id,
                           wire::HostCall{t_call.start_ns, std::max(t_call.start_ns, gpu_.Now()), CurrentTid(),
                                          t_call.api},
                           t_call.rates, t_call.kernel);
  }
  t_call = CallInProgress{};
  ReleaseGate();
}

void Profiler::OnSyncEnter(wire::HostApi api) { t_call = CallInProgress{nullptr, nullptr, 0, gpu_.Now(), api}; }

void Profiler::OnSyncExit(GpuCtx ctx, wire::HostApi api, bool context_wide, int result) {
  wire::HostCall call{};
  if (t_call.context == nullptr && t_call.api == api && t_call.start_ns != 0) {
    call = wire::HostCall{t_call.start_ns, std::max(t_call.start_ns, gpu_.Now()), CurrentTid(), api};
  }
  t_call = CallInProgress{};
  Context* c = ContextFor(ctx, false);
  if (c == nullptr) return;
  if (result != 0) {
    const std::string error = gpu_.ExecutionError(result);
    if (!error.empty()) {
      ReportKernelFailure(*c, error);
      return;
    }
  }
  Harvest(*c, wire::kHarvestSync, context_wide ? HarvestMode::kContextSynced : HarvestMode::kIfIdle, call);
}

void Profiler::ReportKernelFailure(Context& c, const std::string& error) {
  // Once per context: given up, it is not found for later calls (ContextFor).
  if (!c.device.Abandon()) return;
  // Records of the kernels that did finish come first: each one taken by a
  // harvest marks its launch, and the ones before it, as done.
  gpu_.FlushActivity(/*incomplete_too=*/false, /*if_free=*/true);
  const uint64_t done = activity_.TakenThrough(c.device.facts().context_id);
  constexpr size_t kNamed = 8;
  std::string launches;
  size_t count = 0;
  for (const auto& [correlation, found] : c.host_calls.After(done)) {
    if (++count > kNamed) continue;
    launches += fmt::format("{}{} (launch call {})", launches.empty() ? "" : ", ",
                            found.kernel != nullptr ? found.kernel->demangled : std::string("a graph replay"),
                            correlation);
  }
  if (count > kNamed) launches += fmt::format(" and {} more", count - kNamed);
  const std::string text = fmt::format(
      "GPU {}: a synchronisation returned {}; {}; the context's device buffer can no longer be read: what those "
      "launches recorded is lost, what was read back before is kept",
      c.device.facts().info.ordinal, error,
      launches.empty() ? "no profiled launch was running"
                       : "profiled launches that may have failed (not known to have finished): " + launches);
  Log().warn("{}", text);
  SendNotice(wire::kNoticeKernelFailed, text);
}

void Profiler::Harvest(Context& c, wire::HarvestReason reason, HarvestMode mode, const wire::HostCall& call) {
  // A segment switched away from is read first; then the current one, but
  // for a drain (Drain decides).
  const bool retiring = c.device.retiring();
  const bool read = harvester_.Harvest(HarvestTarget{&c.device, &c.host_calls}, reason, mode, call);
  if (read && retiring && reason != wire::kHarvestHighWater && !c.device.retiring()) {
    harvester_.Harvest(HarvestTarget{&c.device, &c.host_calls}, reason, mode, call);
  }
}

void Profiler::KeepRoom(Context& c, double chunks, GpuStream stream, const LaunchCall& call) {
  DeviceContext& device = c.device;
  if (device.NeedsDrain(chunks)) {
    Drain(c, stream, call.per_thread, call.correlation_id);
  } else if (device.RetiredDone()) {
    Harvest(c, wire::kHarvestHighWater, HarvestMode::kIfIdle);
  }
  device.Poll();
}

void Profiler::Drain(Context& c, GpuStream stream, bool per_thread, uint64_t correlation_id) {
  DeviceContext& device = c.device;
  if (device.Switch(stream, per_thread, correlation_id)) return;
  if (device.retiring()) {
    // The other segment first (its kernels finish: the GPU is a segment
    // behind), then switch to it. When they do not in time, what no longer
    // fits is dropped on the device, counted.
    Harvest(c, wire::kHarvestHighWater, HarvestMode::kForce);
    if (device.retiring() || device.Switch(stream, per_thread, correlation_id)) return;
  }
  Harvest(c, wire::kHarvestHighWater, HarvestMode::kForce);
}

void Profiler::OnStreamDestroy(GpuStream stream) {
  Context* c = ContextFor(gpu_.StreamContext(stream), false);
  if (c != nullptr) c->device.NoteStreamDestroy(stream);
}

void Profiler::OnModuleUnload(GpuCtx ctx) {
  Context* c = ContextFor(ctx, false);
  if (c == nullptr) return;
  Harvest(*c, wire::kHarvestModuleUnload, HarvestMode::kForce);
  // Names are read from the module's memory: now, before it goes.
  harvester_.ReadNamesBeforeUnload(&c->device);
  c->device.ModulesMayBeStale();
  // Function handles may be reused by the next module. Graph plans keep
  // their kernels' entries (never freed): a graph of a module that stays
  // loaded still lights it.
  kernels_.ForgetContext(ctx);
}

void Profiler::OnContextDestroy(GpuCtx ctx) {
  Context* c = ContextFor(ctx, false);
  if (c != nullptr) {
    Harvest(*c, wire::kHarvestContextDestroy, HarvestMode::kForce);
    harvester_.ReadNamesBeforeUnload(&c->device);
    c->device.End();
    harvester_.EndContext(&c->device);
  }
  kernels_.ForgetContext(ctx);
  std::lock_guard<std::mutex> lock(mu_);
  if (c != nullptr) host_calls_forgotten_ended_ += c->host_calls.forgotten();
  contexts_.erase(ctx);
  context_generation_.fetch_add(1, std::memory_order_acq_rel);
}

void Profiler::OnProfilerStart() {
  if (settings_.capture_range == CaptureRange::kProfilerApi) window_open_.store(true, std::memory_order_relaxed);
}

void Profiler::OnProfilerStop() {
  if (settings_.capture_range == CaptureRange::kProfilerApi) window_open_.store(false, std::memory_order_relaxed);
}

void Profiler::Shutdown(bool terminating) {
  std::vector<Context*> contexts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [ctx, c] : contexts_) {
      if (c != nullptr) contexts.push_back(c);
    }
  }
  // Other threads' launches still take the gate during this last harvest.
  for (Context* c : contexts) {
    if (c->device.usable()) {
      Harvest(*c, wire::kHarvestExit, terminating ? HarvestMode::kRunning : HarvestMode::kForce);
    }
  }
  // As long as the harvests still queued keep finishing; a stall (a
  // collector that stopped reading) ends the wait.
  constexpr std::chrono::seconds kStall(30);
  for (Context* c : contexts) harvester_.Flush(&c->device, true, kStall);
  if (!harvester_.Flush(nullptr, false, kStall)) {
    const uint64_t lost = harvester_.CountUnshipped();
    Log().warn("the last harvests made no progress for 30 s: {} events are lost (counted)", lost);
  } else {
    harvester_.SendStats();
  }
  if (uint64_t lost = activity_.dropped()) {
    Log().warn("{} CUPTI kernel records were not kept (store full); their events appear without launch details", lost);
  }
}

void Profiler::FillStats(wire::StatsMsg* stats) {
  stats->launches_opted_in = launches_opted_in_.load(std::memory_order_relaxed);
  stats->launches_not_selected = launches_not_selected_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  stats->host_calls_forgotten = host_calls_forgotten_ended_;
  for (const auto& [ctx, c] : contexts_) {
    if (c != nullptr) stats->host_calls_forgotten += c->host_calls.forgotten();
  }
}

}  // namespace smprof::injector
