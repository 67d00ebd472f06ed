#include "injector/profiler.h"

#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/cuda_tools.h"
#include "common/names.h"
#include "common/transport.h"
#include "injector/calibration.h"
#include "injector/config.h"
#include "injector/harvest.h"
#include "injector/host_calls.h"
#include "injector/log.h"
#include "injector/shipper.h"
#include "smprof/wire.h"

extern char** environ;

namespace smprof::injector {
namespace {

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

// smprof's own driver and CUPTI calls re-enter the callback: ignore them.
thread_local int t_in_smprof = 0;

// Set in a forked child (pthread_atfork), which must not touch the parent's
// profiler: cheaper on every callback than comparing getpid(), a system call.
std::atomic<bool> g_forked{false};
void OnForkChild() { g_forked.store(true, std::memory_order_relaxed); }
struct InSmprof {
  InSmprof() { ++t_in_smprof; }
  ~InSmprof() { --t_in_smprof; }
};

// Each error site logs its first few failures, then every 1000th.
bool CheckCu(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  static std::mutex mu;
  static auto* counts = new std::unordered_map<const char*, uint64_t>();
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(mu);
    n = ++(*counts)[what];
  }
  if (n <= 3 || n % 1000 == 0) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    Log().error("{} failed: {} (occurrence {})", what, name ? name : "unknown error", n);
  }
  return false;
}
#define SMPROF_CU(call) CheckCu((call), #call)

bool CheckCupti(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  Log().error("{} failed: {}", what, text ? text : "unknown CUPTI error");
  return false;
}

// Lets smprof's memory operations run while the application captures a graph
// in global mode on this thread (gpu-facts: relaxed mode keeps the capture valid).
class RelaxedCapture {
 public:
  RelaxedCapture() { cuThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { cuThreadExchangeStreamCaptureMode(&mode_); }

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

class ScopedContext {
 public:
  explicit ScopedContext(CUcontext ctx) {
    CUcontext current = nullptr;
    cuCtxGetCurrent(&current);
    ok_ = current == ctx || (pushed_ = cuCtxPushCurrent(ctx) == CUDA_SUCCESS);
  }
  ~ScopedContext() {
    CUcontext popped;
    if (pushed_) cuCtxPopCurrent(&popped);
  }
  bool ok() const { return ok_; }

 private:
  bool pushed_ = false;
  bool ok_ = false;
};

uint64_t Warps(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) {
  return (uint64_t{bx} * by * bz + 31) / 32 * gx * gy * gz;
}

// A process-unique id for the calling thread (std::thread::id values are
// reused after a thread exits; these never are).
uint64_t ThreadToken() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t token = next.fetch_add(1);
  return token;
}

// Waits for `stream` to finish until `deadline`. Never blocks for longer: the
// work may wait on something a blocked application thread would launch.
bool WaitIdle(CUstream stream, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const CUresult r = cuStreamQuery(stream);
    if (r == CUDA_SUCCESS) return true;
    if (r != CUDA_ERROR_NOT_READY || std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

uint64_t GpuNow() {
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  return t;
}

uint64_t RealtimeNow() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

constexpr int kAbi = static_cast<int>(wire::kArenaAbiVersion);

std::string ArenaSymbol(int version) { return "_ZN6smprof6detail7g_arenaILi" + std::to_string(version) + "EEE"; }

std::string NameBaseSymbol(int version) {
  return "_ZN6smprof6detail11g_name_baseILi" + std::to_string(version) + "EEE";
}

// One thread stores %globaltimer; CUPTI's record of this kernel relates the
// two clocks. A second entry measures the smallest %globaltimer step (the
// minimum of 8 steps: a step seen whole starts and ends at a change). PTX, so
// the driver compiles it for whatever GPU is present.
constexpr char kProbeName[] = "smprof_clock_probe";
constexpr char kTimerStepName[] = "smprof_timer_step";
constexpr char kProbePtx[] = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry smprof_clock_probe(.param .u64 out)
{
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u64 %rd3, %globaltimer;
  st.global.u64 [%rd2], %rd3;
  ret;
}
.visible .entry smprof_timer_step(.param .u64 out)
{
  .reg .b64 %rd<8>;
  .reg .b32 %r<2>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u64 %rd7, -1;
  mov.u32 %r1, 0;
$L_step:
  mov.u64 %rd3, %globaltimer;
$L_first_change:
  mov.u64 %rd4, %globaltimer;
  setp.eq.u64 %p1, %rd4, %rd3;
  @%p1 bra $L_first_change;
$L_second_change:
  mov.u64 %rd5, %globaltimer;
  setp.eq.u64 %p1, %rd5, %rd4;
  @%p1 bra $L_second_change;
  sub.u64 %rd6, %rd5, %rd4;
  min.u64 %rd7, %rd7, %rd6;
  add.u32 %r1, %r1, 1;
  setp.lt.u32 %p1, %r1, 8;
  @%p1 bra $L_step;
  st.global.u64 [%rd2], %rd7;
  ret;
}
)";

std::string ReadCmdline() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\0') s.pop_back();
  std::replace(s.begin(), s.end(), '\0', ' ');
  return s;
}

class ProducerSink : public MessageSink {
 public:
  explicit ProducerSink(transport::Producer* producer) : producer_(producer) {}
  bool Send(const void* data, uint32_t size, uint64_t events) override { return producer_->Send(data, size, events); }

 private:
  transport::Producer* producer_;
};

// ---------------------------------------------------------------------------
// CUPTI kernel activity: the records that name launches and separate replays
// ---------------------------------------------------------------------------

class ActivityStore {
 public:
  // Only kernels of opted-in modules are kept; the rest are never needed.
  void Track(const std::string& mangled) {
    std::lock_guard<std::mutex> lock(mu_);
    tracked_.insert(mangled);
  }

  void Add(const CUpti_ActivityKernel10& k) {
    std::lock_guard<std::mutex> lock(mu_);
    if (k.name == nullptr || tracked_.count(k.name) == 0) return;
    if (records_.size() >= kMaxRecords) {
      ++dropped_;
      return;
    }
    KernelRecord r;
    r.grid_id = static_cast<uint64_t>(k.gridId);
    r.start_ns = k.start;
    r.end_ns = k.end;
    r.correlation_id = k.correlationId;
    r.stream_id = k.streamId;
    r.device = k.deviceId;
    r.context_id = k.contextId;
    r.graph_id = k.graphId;
    r.grid[0] = k.gridX, r.grid[1] = k.gridY, r.grid[2] = k.gridZ;
    r.block[0] = k.blockX, r.block[1] = k.blockY, r.block[2] = k.blockZ;
    r.dynamic_smem = k.dynamicSharedMemory;
    r.static_smem = k.staticSharedMemory;
    r.registers = k.registersPerThread;
    r.name = k.name;
    records_.push_back(std::move(r));
  }

  // Removes and returns the records of a context that ended by `until`.
  std::vector<KernelRecord> Take(uint32_t context_id, uint64_t until) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<KernelRecord> taken;
    auto keep = std::stable_partition(records_.begin(), records_.end(), [&](const KernelRecord& r) {
      return !(r.context_id == context_id && r.end_ns <= until);
    });
    taken.assign(std::make_move_iterator(keep), std::make_move_iterator(records_.end()));
    records_.erase(keep, records_.end());
    return taken;
  }

  uint64_t dropped() const {
    std::lock_guard<std::mutex> lock(mu_);
    return dropped_;
  }

 private:
  static constexpr size_t kMaxRecords = 4u << 20;
  mutable std::mutex mu_;
  std::unordered_set<std::string> tracked_;
  std::vector<KernelRecord> records_;
  uint64_t dropped_ = 0;
};

constexpr size_t kActivityBufferBytes = 8u << 20;

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
void CUPTIAPI OnBufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size, size_t valid);

// ---------------------------------------------------------------------------
// Per-context state: the arena and what ran on it since the last harvest
// ---------------------------------------------------------------------------

// Asynchronous device-to-host copies land here, never on a stack: a copy that
// outlives the wait for it (the GPU was busy) must not write into a frame
// that is gone.
struct PinnedScratch {
  uint32_t next_chunk;  // ArenaHeader::next_chunk, sampled by Poll
  uint32_t reserved;
  uint64_t probe_time;  // the clock probe's %globaltimer
  uint64_t timer_step;  // the smallest %globaltimer step the timer probe saw
};

struct ContextState {
  CUcontext ctx = nullptr;
  uint32_t device = 0;
  uint32_t context_id = 0;
  bool failed = false;
  bool destroyed = false;

  CUdeviceptr arena = 0;
  wire::ArenaRef ref{};       // what modules get (arena filled in last)
  CUstream stream = nullptr;  // private, non-blocking
  CUevent poll_event = nullptr;
  PinnedScratch* pinned = nullptr;  // pinned host memory the GPU copies into asynchronously
  bool poll_issued = false;
  std::chrono::steady_clock::time_point last_poll{};

  // Held shared by launches of profiled kernels (API enter..exit) and
  // exclusively by a harvest.
  std::shared_timed_mutex gate;

  std::mutex mu;                                        // guards the fields below; never held across a driver call
  std::vector<CUstream> busy_streams;                   // streams with profiled work since the last harvest
  std::vector<uint64_t> ptds_users;                     // ThreadToken()s with profiled work on their per-thread stream
  bool orphaned_work = false;                           // a busy stream was destroyed before its work ended
  uint64_t pending = 0;                                 // profiled launches since the last harvest
  double projected_chunks = 0;                          // chunks the launches since the last harvest may claim
  std::unordered_map<CUmodule, CUdeviceptr> published;  // module -> its g_arena constant
  // A module was unloaded: handles in `published` may be stale (or reused by
  // a new module), so they are resolved again before the next write.
  bool published_stale = false;
  // Serialises harvests of this context from start to shipping, so two
  // threads never split one harvest's CUPTI records between them.
  std::timed_mutex harvest_mu;

  // Clock probe: a one-thread kernel that stores %globaltimer, whose CUPTI
  // record gives the offset between the two clocks (see EstimateClockOffset).
  CUmodule probe_module = nullptr;
  CUfunction probe = nullptr;
  CUstream probe_stream = nullptr;  // own stream: a probe stuck behind a persistent kernel blocks nothing
  int64_t clock_offset = 0;
  // The SM clock in GHz (calibration kernel, else the nominal clock rate):
  // event cycles map to ns with it where an SM's anchors span too little time.
  double cycles_per_ns = 0;
  std::unordered_map<uint64_t, std::string> names;  // device address -> marker name
  // Launch API calls of profiled kernels, until the harvest that ships them.
  HostCalls host_calls;
};

// When a harvest may read the arena.
enum class HarvestMode {
  kIfIdle,         // the application synchronised a stream or event: only if all profiled work is done
  kContextSynced,  // the application synchronised the context: likewise, but work on streams smprof
                   // cannot query (other threads' per-thread streams, destroyed streams) is done too
  kForce,          // wait for the profiled work (high-water mark, module unload, context teardown, exit)
};

struct FunctionInfo {
  bool opted_in = false;
  bool selected = false;  // by SMPROF_KERNELS (opted-in functions only)
  CUmodule module = nullptr;
};

struct FunctionKey {
  CUcontext ctx;
  CUfunction f;
  bool operator==(const FunctionKey& o) const { return ctx == o.ctx && f == o.f; }
};
struct FunctionKeyHash {
  size_t operator()(const FunctionKey& k) const { return std::hash<void*>()(k.ctx) * 31 + std::hash<void*>()(k.f); }
};

// ---------------------------------------------------------------------------
// The profiler
// ---------------------------------------------------------------------------

class Profiler {
 public:
  Config config;
  std::unique_ptr<transport::Producer> producer;
  std::unique_ptr<ProducerSink> sink;
  std::unique_ptr<Shipper> shipper;
  std::mutex ship_mu;  // guards shipper and stats
  wire::StatsMsg stats{};
  ActivityStore activity;
  std::atomic<bool> shutting_down{false};
  std::atomic<uint64_t> launches_opted_in{0};
  std::atomic<uint64_t> launches_not_selected{0};
  uint64_t host_calls_forgotten_ended = 0;  // of destroyed contexts (under mu)
  std::atomic<bool> activity_enabled{false};
  CUpti_SubscriberHandle subscriber = nullptr;
  pid_t pid = 0;

  std::mutex mu;                                          // guards the maps below; never held across a driver call
  std::unordered_map<CUcontext, ContextState*> contexts;  // leaky: states are never freed
  std::unordered_map<FunctionKey, FunctionInfo, FunctionKeyHash> functions;
  std::unordered_map<std::string, bool> selection;  // mangled name -> selected
  // Chunks per warp each kernel claimed at its last harvest: sizes the
  // projected fill that triggers a drain before launches overrun the arena.
  std::unordered_map<std::string, double> chunks_per_warp;

  double ChunksPerWarp(const char* mangled) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = chunks_per_warp.find(mangled ? mangled : "");
    return it == chunks_per_warp.end() ? 1.0 : it->second;
  }

  bool Selected(const std::string& mangled) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = selection.find(mangled);
      if (it != selection.end()) return it->second;
    }
    const bool selected = config.settings.kernels.selects_all() || config.settings.kernels.Matches(Demangle(mangled));
    std::lock_guard<std::mutex> lock(mu);
    selection.emplace(mangled, selected);
    return selected;
  }

  ContextState* FindContext(CUcontext ctx) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = contexts.find(ctx);
    return it == contexts.end() ? nullptr : it->second;
  }

  FunctionInfo LookupFunction(CUcontext ctx, CUfunction f, const char* symbol);
  ContextState* ContextFor(CUcontext ctx);
  bool CreateArena(ContextState* cs);
  void ReleaseArena(ContextState* cs);
  bool Publish(ContextState* cs, CUmodule module);
  void Poll(ContextState* cs);
  bool NeedsDrain(ContextState* cs, double chunks);
  void NoteLaunch(ContextState* cs, CUstream stream, bool per_thread_stream, double chunks);
  void NoteStreamDestroy(ContextState* cs, CUstream stream);
  bool Quiesce(ContextState* cs, HarvestMode mode, std::chrono::steady_clock::time_point deadline);
  std::vector<CUdeviceptr> PublishedGlobals(ContextState* cs);
  // `call`: the synchronising API call whose exit runs it (api kApiNone: none).
  void Harvest(ContextState* cs, wire::HarvestReason reason, HarvestMode mode, const wire::HostCall& call = {});
  std::string ReadName(ContextState* cs, uint64_t address);
  void EnableActivity();
  void SendStats();
};

Profiler* g_profiler = nullptr;                    // leaky singleton, set once by Start()
thread_local ContextState* t_gate_held = nullptr;  // launch gate held between API enter and exit

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kActivityBufferBytes));
  *size = *buffer ? kActivityBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI OnBufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  try {
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && g_profiler != nullptr) {
        g_profiler->activity.Add(*reinterpret_cast<const CUpti_ActivityKernel10*>(record));
      }
    }
  } catch (...) {
    Log().error("CUPTI kernel records lost after an internal error");
  }
  std::free(buffer);
}

void Profiler::EnableActivity() {
  if (activity_enabled.exchange(true)) return;
  CheckCupti(cuptiActivityRegisterCallbacks(OnBufferRequested, OnBufferCompleted), "cuptiActivityRegisterCallbacks");
  CheckCupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
}

FunctionInfo Profiler::LookupFunction(CUcontext ctx, CUfunction f, const char* symbol) {
  const FunctionKey key{ctx, f};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = functions.find(key);
    if (it != functions.end()) return it->second;
  }
  FunctionInfo info;
  // Runtime launches hand CUPTI a CUkernel (gpu-facts): cuFuncGetModule then
  // fails with INVALID_HANDLE and the context's CUfunction is needed first.
  CUmodule module = nullptr;
  if (cuFuncGetModule(&module, f) != CUDA_SUCCESS) {
    CUfunction func = nullptr;
    if (cuKernelGetFunction(&func, reinterpret_cast<CUkernel>(f)) != CUDA_SUCCESS ||
        cuFuncGetModule(&module, func) != CUDA_SUCCESS) {
      module = nullptr;
    }
  }
  if (module != nullptr) {
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    const CUresult r = cuModuleGetGlobal(&ptr, &bytes, module, ArenaSymbol(kAbi).c_str());
    if (r == CUDA_SUCCESS && bytes == sizeof(wire::ArenaRef)) {
      info.opted_in = true;
    } else if (r == CUDA_SUCCESS) {
      Log().error("kernel {} has an smprof arena of {} bytes, expected {}: rebuild it against this smprof",
                  symbol ? symbol : "?", bytes, sizeof(wire::ArenaRef));
    } else {
      for (int v = 1; v <= 16; ++v) {
        if (v == kAbi) continue;
        if (cuModuleGetGlobal(&ptr, &bytes, module, ArenaSymbol(v).c_str()) == CUDA_SUCCESS) {
          Log().warn("kernel {} was built with smprof device ABI v{}, this injector speaks v{}: rebuild it",
                     symbol ? symbol : "?", v, kAbi);
          break;
        }
      }
    }
  }
  info.module = module;
  if (info.opted_in) {
    const std::string mangled = symbol ? symbol : "";
    activity.Track(mangled);
    info.selected = Selected(mangled);
    Log().debug("kernel {} opted in, {}", Demangle(mangled), info.selected ? "selected" : "not selected");
  }
  std::lock_guard<std::mutex> lock(mu);
  functions.emplace(key, info);
  return info;
}

ContextState* Profiler::ContextFor(CUcontext ctx) {
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = contexts.find(ctx);
    if (it != contexts.end()) return it->second->failed || it->second->destroyed ? nullptr : it->second;
  }
  auto* cs = new ContextState();
  cs->ctx = ctx;
  cs->failed = !CreateArena(cs);
  ContextState* winner;
  {
    std::lock_guard<std::mutex> lock(mu);
    winner = contexts.emplace(ctx, cs).first->second;
  }
  if (winner != cs) {  // another thread created the context's arena first
    ReleaseArena(cs);
    delete cs;
  } else if (cs->failed) {
    ReleaseArena(cs);
  }
  return winner->failed ? nullptr : winner;
}

// Frees what CreateArena allocated (also a partial allocation).
void Profiler::ReleaseArena(ContextState* cs) {
  if (cs->arena != 0) cuMemFree(cs->arena);
  if (cs->pinned != nullptr) cuMemFreeHost(cs->pinned);
  if (cs->poll_event != nullptr) cuEventDestroy(cs->poll_event);
  if (cs->stream != nullptr) cuStreamDestroy(cs->stream);
  if (cs->probe_module != nullptr) cuModuleUnload(cs->probe_module);
  if (cs->probe_stream != nullptr) cuStreamDestroy(cs->probe_stream);
  cs->probe_stream = nullptr;
  cs->arena = 0;
  cs->pinned = nullptr;
  cs->poll_event = nullptr;
  cs->stream = nullptr;
  cs->probe_module = nullptr;
}

// The identity and timing facts of `dev` (the timer step is measured later).
DeviceInfo DescribeDevice(CUdevice dev) {
  DeviceInfo d;
  d.ordinal = static_cast<uint32_t>(dev);  // a CUdevice is its ordinal in this process
  const auto attribute = [dev](CUdevice_attribute a) {
    int v = 0;
    return cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS && v > 0 ? static_cast<uint32_t>(v) : 0u;
  };
  d.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  d.cc_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  d.cc_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  d.pci_domain = attribute(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
  d.pci_bus = attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  d.pci_device = attribute(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
  d.sm_clock_khz = attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  CUuuid uuid{};
  if (cuDeviceGetUuid(&uuid, dev) == CUDA_SUCCESS) std::memcpy(d.uuid, uuid.bytes, sizeof(d.uuid));
  char name[256] = {};
  cuDeviceGetName(name, sizeof(name), dev);
  d.name = name;
  return d;
}

bool Profiler::CreateArena(ContextState* cs) {
  RelaxedCapture relaxed;
  CUdevice dev;
  if (!SMPROF_CU(cuCtxGetDevice(&dev))) return false;
  DeviceInfo device = DescribeDevice(dev);
  cs->device = device.ordinal;
  cuptiGetContextId(cs->ctx, &cs->context_id);

  const uint64_t buffer_bytes = config.buffer_bytes();
  if (!SMPROF_CU(cuStreamCreate(&cs->stream, CU_STREAM_NON_BLOCKING)) ||
      !SMPROF_CU(cuEventCreate(&cs->poll_event, CU_EVENT_DISABLE_TIMING)) ||
      !SMPROF_CU(cuMemHostAlloc(reinterpret_cast<void**>(&cs->pinned), sizeof(PinnedScratch), 0)) ||
      !SMPROF_CU(cuMemAlloc(&cs->arena, buffer_bytes))) {
    Log().error("could not allocate {} MB of device memory for profiling on GPU {}: lower SMPROF_BUFFER_MB",
                buffer_bytes >> 20, device.ordinal);
    return false;
  }
  // Chunks are aligned to their size: the recorder tells a full chunk by its
  // cursor reaching a multiple of chunk_bytes.
  const uint64_t chunk = config.settings.chunk_bytes;
  const uint64_t chunks_offset = (cs->arena + sizeof(wire::ArenaHeader) + chunk - 1) / chunk * chunk - cs->arena;
  const uint64_t num_chunks = std::min<uint64_t>((buffer_bytes - chunks_offset) / chunk, 0x7fffffffu);
  *cs->pinned = PinnedScratch{};
  wire::ArenaHeader header{};
  header.magic = wire::kArenaMagic;
  header.abi_version = wire::kArenaAbiVersion;
  header.chunk_bytes = static_cast<uint32_t>(chunk);
  header.num_chunks = static_cast<uint32_t>(num_chunks);
  header.chunks_offset = chunks_offset;
  if (!SMPROF_CU(cuMemsetD8Async(cs->arena, 0, buffer_bytes, cs->stream)) ||
      !SMPROF_CU(cuMemcpyHtoDAsync(cs->arena, &header, sizeof(header), cs->stream)) ||
      !SMPROF_CU(cuStreamSynchronize(cs->stream))) {
    return false;
  }
  cs->ref.arena = cs->arena;
  cs->ref.chunks = cs->arena + chunks_offset;
  cs->ref.num_chunks = header.num_chunks;
  cs->ref.chunk_shift = static_cast<uint32_t>(__builtin_ctzll(chunk));
  cs->ref.warp_mask = config.settings.warp_mask;
  cs->ref.epoch = 1;
  EnableActivity();
  activity.Track(kProbeName);
  activity.Track(kTimerStepName);
  CUfunction timer_step = nullptr;
  if (!SMPROF_CU(cuStreamCreate(&cs->probe_stream, CU_STREAM_NON_BLOCKING)) ||
      !SMPROF_CU(cuModuleLoadData(&cs->probe_module, kProbePtx)) ||
      !SMPROF_CU(cuModuleGetFunction(&cs->probe, cs->probe_module, kProbeName)) ||
      !SMPROF_CU(cuModuleGetFunction(&timer_step, cs->probe_module, kTimerStepName))) {
    cs->probe = nullptr;
    Log().warn("GPU {}: the clock probe did not load; event times are aligned from launches alone", device.ordinal);
  } else {
    // The %globaltimer step (32 ns on Hopper, 1 us on some GPUs) bounds how
    // finely event times can be read. On the probe stream, waited for briefly:
    // if the GPU is too busy to run it now, the trace says "not measured".
    CUdeviceptr out = cs->arena + offsetof(wire::ArenaHeader, reserved2) + sizeof(uint64_t);
    void* args[] = {&out};
    if (SMPROF_CU(cuLaunchKernel(timer_step, 1, 1, 1, 1, 1, 1, 0, cs->probe_stream, args, nullptr)) &&
        SMPROF_CU(cuMemcpyDtoHAsync(&cs->pinned->timer_step, out, sizeof(uint64_t), cs->probe_stream)) &&
        WaitIdle(cs->probe_stream, std::chrono::steady_clock::now() + std::chrono::milliseconds(100))) {
      device.timer_resolution_ns = static_cast<uint32_t>(std::min<uint64_t>(cs->pinned->timer_step, UINT32_MAX));
    }
  }
  cs->cycles_per_ns = device.sm_clock_khz / 1e6;
  if (cs->probe_stream != nullptr) {
    std::string why;
    const auto wait = [](CUstream s) {
      return WaitIdle(s, std::chrono::steady_clock::now() + std::chrono::milliseconds(300));
    };
    if (Calibrate(cs->probe_stream, ArenaSymbol(kAbi), wait, &device.calibration, &why)) {
      const Calibration& cal = device.calibration;
      if (cal.sm_clock_khz != 0) cs->cycles_per_ns = cal.sm_clock_khz / 1e6;
      Log().info("GPU {}: SM clock {} MHz measured; a marker costs {:.1f} cycles with a context, {:.1f} without, "
                 "{:.1f} diverged, {:.1f} idle",
                 device.ordinal, cal.sm_clock_khz / 1000, cal.cost_context_centicycles / 100.0,
                 cal.cost_default_centicycles / 100.0, cal.cost_diverged_centicycles / 100.0,
                 cal.cost_idle_centicycles / 100.0);
    } else {
      Log().warn("GPU {}: the calibration kernel did not run ({}); the trace has no measured marker cost",
                 device.ordinal, why);
    }
  }
  if (cs->cycles_per_ns <= 0) cs->cycles_per_ns = 1.0;  // no clock rate at all: cycles read as ns
  {
    std::lock_guard<std::mutex> lock(ship_mu);
    shipper->SendDevice(device);
  }
  Log().info("GPU {} ({}): {} MB arena, {} chunks of {} bytes", device.ordinal, device.name, buffer_bytes >> 20,
             num_chunks, chunk);
  return true;
}

// Makes `module` see the arena. Called with the context's launch gate held
// shared, so no harvest (which bumps the epoch) runs meanwhile.
bool Profiler::Publish(ContextState* cs, CUmodule module) {
  {
    std::lock_guard<std::mutex> lock(cs->mu);
    if (!cs->published_stale && cs->published.count(module)) return true;
  }
  // Names are stored relative to g_name_base: check the module has it too.
  CUdeviceptr base = 0;
  size_t base_bytes = 0;
  if (!SMPROF_CU(cuModuleGetGlobal(&base, &base_bytes, module, NameBaseSymbol(kAbi).c_str()))) return false;
  RelaxedCapture relaxed;
  CUdeviceptr global = 0;
  size_t bytes = 0;
  if (!SMPROF_CU(cuModuleGetGlobal(&global, &bytes, module, ArenaSymbol(kAbi).c_str()))) return false;
  // Everything but `arena` first, then `arena`: a kernel of this module that
  // is already running sees either nothing or a complete reference.
  const wire::ArenaRef ref = cs->ref;
  const size_t rest = sizeof(wire::ArenaRef) - sizeof(uint64_t);
  if (!SMPROF_CU(
          cuMemcpyHtoDAsync(global + sizeof(uint64_t), reinterpret_cast<const char*>(&ref) + 8, rest, cs->stream)) ||
      !SMPROF_CU(cuStreamSynchronize(cs->stream)) ||
      !SMPROF_CU(cuMemcpyHtoDAsync(global, &ref.arena, sizeof(uint64_t), cs->stream)) ||
      !SMPROF_CU(cuStreamSynchronize(cs->stream))) {
    return false;
  }
  std::lock_guard<std::mutex> lock(cs->mu);
  cs->published[module] = global;
  return true;
}

// Asynchronously samples the arena fill level, at most every 100 us; the
// sample is read by NeedsDrain at the next launch.
void Profiler::Poll(ContextState* cs) {
  const auto now = std::chrono::steady_clock::now();
  if (now - cs->last_poll < std::chrono::microseconds(100)) return;
  if (cs->poll_issued && cuEventQuery(cs->poll_event) != CUDA_SUCCESS) return;
  cs->last_poll = now;
  RelaxedCapture relaxed;
  cs->poll_issued = SMPROF_CU(cuMemcpyDtoHAsync(&cs->pinned->next_chunk,
                                                cs->arena + offsetof(wire::ArenaHeader, next_chunk), 4, cs->stream)) &&
                    SMPROF_CU(cuEventRecord(cs->poll_event, cs->stream));
}

// High-water test before a launch of about `chunks` chunks: the sampled fill
// lags behind queued launches, so the projection from the launches since the
// last harvest counts too.
bool Profiler::NeedsDrain(ContextState* cs, double chunks) {
  const double limit = static_cast<double>(cs->ref.num_chunks) * config.settings.high_water_percent / 100.0;
  const uint32_t sampled = __atomic_load_n(&cs->pinned->next_chunk, __ATOMIC_RELAXED);
  std::lock_guard<std::mutex> lock(cs->mu);
  if (cs->pending == 0) return false;
  return sampled >= limit || cs->projected_chunks + chunks > limit;
}

void Profiler::NoteLaunch(ContextState* cs, CUstream stream, bool per_thread_stream, double chunks) {
  std::lock_guard<std::mutex> lock(cs->mu);
  ++cs->pending;
  cs->projected_chunks += chunks;
  if (per_thread_stream) {
    const uint64_t self = ThreadToken();
    if (std::find(cs->ptds_users.begin(), cs->ptds_users.end(), self) == cs->ptds_users.end()) {
      cs->ptds_users.push_back(self);
    }
  } else if (std::find(cs->busy_streams.begin(), cs->busy_streams.end(), stream) == cs->busy_streams.end()) {
    cs->busy_streams.push_back(stream);
  }
}

// A destroyed stream can no longer be queried: forget it, and if its work may
// still be running, only a context-wide synchronisation proves it done.
void Profiler::NoteStreamDestroy(ContextState* cs, CUstream stream) {
  {
    std::lock_guard<std::mutex> lock(cs->mu);
    if (std::find(cs->busy_streams.begin(), cs->busy_streams.end(), stream) == cs->busy_streams.end()) return;
  }
  const bool idle = cuStreamQuery(stream) == CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(cs->mu);
  cs->busy_streams.erase(std::remove(cs->busy_streams.begin(), cs->busy_streams.end(), stream), cs->busy_streams.end());
  cs->orphaned_work |= !idle;
}

// Called with the launch gate held exclusively: no profiled launch can be
// enqueued meanwhile. True when no profiled kernel of the context can still
// be running. kForce waits, but only until `deadline`.
//
// A capturing stream is never queried or synchronised (that would invalidate
// the application's capture); work on it is not executing anyway, but the
// stream may also hold earlier eager work, so a capturing stream counts as busy.
bool Profiler::Quiesce(ContextState* cs, HarvestMode mode, std::chrono::steady_clock::time_point deadline) {
  std::vector<CUstream> streams;
  bool other_threads = false;
  bool orphaned;
  {
    std::lock_guard<std::mutex> lock(cs->mu);
    streams = cs->busy_streams;
    orphaned = cs->orphaned_work;
    for (uint64_t token : cs->ptds_users) {
      if (token == ThreadToken()) {
        streams.push_back(CU_STREAM_PER_THREAD);  // this thread's own per-thread stream
      } else {
        other_threads = true;
      }
    }
  }
  if (orphaned || other_threads) {
    // Only the application's own context synchronisation proves such work
    // done; smprof repeats it to cover launches that raced it. Without one,
    // the harvest waits for a later synchronisation (or is lost at exit).
    return mode == HarvestMode::kContextSynced && SMPROF_CU(cuCtxSynchronize());
  }
  for (CUstream s : streams) {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (cuStreamIsCapturing(s, &capture) != CUDA_SUCCESS || capture != CU_STREAM_CAPTURE_STATUS_NONE) return false;
    if (mode == HarvestMode::kForce ? !WaitIdle(s, deadline) : cuStreamQuery(s) != CUDA_SUCCESS) return false;
  }
  return true;
}

std::string Profiler::ReadName(ContextState* cs, uint64_t address) {
  {
    std::lock_guard<std::mutex> lock(cs->mu);
    auto it = cs->names.find(address);
    if (it != cs->names.end()) return it->second;
  }
  std::string name;
  CUdeviceptr base = 0;
  size_t size = 0;
  if (cuMemGetAddressRange(&base, &size, address) == CUDA_SUCCESS && address >= base && address < base + size) {
    constexpr size_t kStep = 256, kMax = 64u << 10;
    std::vector<char> buf(kStep);
    for (uint64_t at = address; at < base + size && name.size() < kMax; at += kStep) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kStep, base + size - at));
      if (!SMPROF_CU(cuMemcpyDtoHAsync(buf.data(), at, n, cs->stream)) || !SMPROF_CU(cuStreamSynchronize(cs->stream))) {
        break;
      }
      const char* end = static_cast<const char*>(std::memchr(buf.data(), '\0', n));
      name.append(buf.data(), end ? static_cast<size_t>(end - buf.data()) : n);
      if (end) break;
    }
  }
  if (name.empty()) name = fmt::format("<unreadable name at 0x{:x}>", address);
  std::lock_guard<std::mutex> lock(cs->mu);
  cs->names.emplace(address, name);
  return name;
}

// The published modules' g_arena addresses, resolved again after a module
// unload (a stale handle is dropped; a reused one gets the new module's
// address). Called with the launch gate held exclusively.
std::vector<CUdeviceptr> Profiler::PublishedGlobals(ContextState* cs) {
  std::unordered_map<CUmodule, CUdeviceptr> published;
  bool stale;
  {
    std::lock_guard<std::mutex> lock(cs->mu);
    published = cs->published;
    stale = cs->published_stale;
  }
  if (stale) {
    for (auto it = published.begin(); it != published.end();) {
      CUdeviceptr global = 0;
      size_t bytes = 0;
      if (cuModuleGetGlobal(&global, &bytes, it->first, ArenaSymbol(kAbi).c_str()) == CUDA_SUCCESS &&
          bytes == sizeof(wire::ArenaRef)) {
        it->second = global;
        ++it;
      } else {
        it = published.erase(it);
      }
    }
    std::lock_guard<std::mutex> lock(cs->mu);
    cs->published = published;
    cs->published_stale = false;
  }
  std::vector<CUdeviceptr> globals;
  for (const auto& [module, global] : published) globals.push_back(global);
  return globals;
}

// Reads and resets the arena when no kernel of the context can be writing it
// (see HarvestMode).
void Profiler::Harvest(ContextState* cs, wire::HarvestReason reason, HarvestMode mode, const wire::HostCall& call) {
  const bool force = mode == HarvestMode::kForce;
  {
    std::lock_guard<std::mutex> lock(cs->mu);
    if (cs->pending == 0 || cs->failed || cs->destroyed) return;
  }
  const uint64_t host_begin = GpuNow();  // the application's thread is held from here
  // A harvest already running on another thread collects this work too.
  std::unique_lock<std::timed_mutex> serial(cs->harvest_mu, std::defer_lock);
  if (!(force ? serial.try_lock_for(std::chrono::seconds(10)) : serial.try_lock())) return;
  ScopedContext scoped(cs->ctx);
  if (!scoped.ok()) return;
  RelaxedCapture relaxed;
  std::unique_lock<std::shared_timed_mutex> gate(cs->gate, std::defer_lock);
  if (!gate.try_lock_for(force ? std::chrono::seconds(10) : std::chrono::milliseconds(20))) {
    Log().debug("harvest skipped on GPU {}: launches in progress", cs->device);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cs->mu);
    if (cs->pending == 0) return;  // harvested while this thread waited
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        (reason == wire::kHarvestHighWater ? std::chrono::seconds(2) : std::chrono::seconds(5));
  if (!Quiesce(cs, mode, deadline)) {
    if (reason == wire::kHarvestHighWater) {
      Log().warn("GPU {}: profiled work did not finish in time for a drain; events may be dropped", cs->device);
    } else if (force) {
      // Teardown with kernels still running: give up on this context rather
      // than hold up the application's exit (again at every later callback).
      cs->failed = true;
      Log().warn("GPU {}: profiled kernels were still running at {}; their events are not collected", cs->device,
                 reason == wire::kHarvestExit ? "exit" : "teardown");
    }
    return;
  }
  const uint64_t harvest_time = GpuNow();
  HarvestHost host;  // where the application's thread spends the harvest
  host.begin_ns = host_begin;
  uint64_t stage_start = host_begin;
  // Ends stage `s` at `now`: its time since the previous stage ended.
  const auto stage = [&](wire::HarvestStage s, uint64_t now) {
    host.stage_us[s] += static_cast<uint32_t>(std::min<uint64_t>((now - std::min(now, stage_start)) / 1000, UINT32_MAX));
    stage_start = now;
  };
  stage(wire::kStageWait, harvest_time);
  wire::ArenaHeader header{};
  if (!SMPROF_CU(cuMemcpyDtoHAsync(&header, cs->arena, sizeof(header), cs->stream)) ||
      !SMPROF_CU(cuStreamSynchronize(cs->stream))) {
    return;
  }
  const uint32_t chunk_bytes = 1u << cs->ref.chunk_shift;
  const uint32_t used = std::min(header.next_chunk, cs->ref.num_chunks);
  std::vector<uint8_t> data(static_cast<size_t>(used) * chunk_bytes);
  // Zero what was used, and move every published module to a new epoch so
  // that cursors left in shared memory by earlier blocks never match again.
  // Copies and memsets only: they need no SM, so they finish even while
  // other kernels occupy the GPU.
  ++cs->ref.epoch;
  const std::vector<CUdeviceptr> globals = PublishedGlobals(cs);
  bool ok = (used == 0 || (SMPROF_CU(cuMemcpyDtoHAsync(data.data(), cs->ref.chunks, data.size(), cs->stream)) &&
                           SMPROF_CU(cuMemsetD8Async(cs->ref.chunks, 0, data.size(), cs->stream)))) &&
            SMPROF_CU(cuMemsetD8Async(cs->arena + offsetof(wire::ArenaHeader, next_chunk), 0,
                                      sizeof(wire::ArenaHeader) - offsetof(wire::ArenaHeader, next_chunk), cs->stream));
  for (CUdeviceptr global : globals) {
    ok = ok && SMPROF_CU(cuMemcpyHtoDAsync(global + offsetof(wire::ArenaRef, epoch), &cs->ref.epoch,
                                           sizeof(cs->ref.epoch), cs->stream));
  }
  if (!ok || !SMPROF_CU(cuStreamSynchronize(cs->stream))) {
    cs->failed = true;  // the arena may be half reset: stop using it
    Log().error("profiling stops on GPU {}: the profile buffer could not be read back", cs->device);
    return;
  }
  __atomic_store_n(&cs->pinned->next_chunk, 0u, __ATOMIC_RELAXED);
  {
    std::lock_guard<std::mutex> lock(cs->mu);
    cs->busy_streams.clear();
    cs->ptds_users.clear();
    cs->orphaned_work = false;
    cs->pending = 0;
    cs->projected_chunks = 0;
  }
  gate.unlock();
  stage(wire::kStageCopy, GpuNow());

  // The clock probe runs outside the gate on its own stream, and is given up
  // (this harvest keeps the previous offset) if the GPU is too busy to run it.
  const uint64_t probe_launched = GpuNow();
  CUdeviceptr probe_out = cs->arena + offsetof(wire::ArenaHeader, reserved2);
  void* probe_args[] = {&probe_out};
  const bool probed =
      cs->probe != nullptr &&
      SMPROF_CU(cuLaunchKernel(cs->probe, 1, 1, 1, 1, 1, 1, 0, cs->probe_stream, probe_args, nullptr)) &&
      SMPROF_CU(cuMemcpyDtoHAsync(&cs->pinned->probe_time, probe_out, sizeof(uint64_t), cs->probe_stream)) &&
      WaitIdle(cs->probe_stream, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));

  CheckCupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  std::vector<KernelRecord> records = activity.Take(cs->context_id, GpuNow());
  const KernelRecord* probe = nullptr;
  for (const KernelRecord& r : records) {
    if (r.name == kProbeName && r.start_ns >= probe_launched && (probe == nullptr || r.start_ns < probe->start_ns)) {
      probe = &r;
    }
  }
  if (probed && probe != nullptr) {
    cs->clock_offset = static_cast<int64_t>((probe->start_ns + probe->end_ns) / 2 - cs->pinned->probe_time);
  }
  records.erase(std::remove_if(records.begin(), records.end(),
                               [](const KernelRecord& r) { return r.name == kProbeName || r.name == kTimerStepName; }),
                records.end());
  stage(wire::kStageClock, GpuNow());

  std::vector<WarpSegment> segments;
  DecodeStats decode;
  DecodeChunks(data.data(), used, chunk_bytes, &segments, &decode);
  MapEventClocks(&segments, cs->cycles_per_ns);
  cs->clock_offset = EstimateClockOffset(segments, records, cs->clock_offset);
  MatchStats match;
  std::vector<Launch> launches = MatchLaunches(
      segments, records, [this](const std::string& n) { return Selected(n); }, cs->clock_offset, &match);
  for (Launch& l : launches) l.call = cs->host_calls.Find(l.record.correlation_id);
  cs->host_calls.EndHarvest();

  // Names are read from device memory, so before a module unload completes.
  std::unordered_map<uint64_t, std::string> names;
  for (const Launch& l : launches) {
    for (const LaunchEvents& w : l.warps) {
      for (const DecodedEvent& e : w.events) {
        const uint64_t address = w.segment->name_base + static_cast<int64_t>(e.name_offset);
        if (!names.count(address)) names.emplace(address, ReadName(cs, address));
      }
    }
  }
  {
    // What each kernel claimed per warp this time (0 for kernels whose
    // launches recorded nothing) sizes the drain projection of its next launch.
    std::unordered_map<std::string, double> learned;
    for (const KernelRecord& r : records) learned.emplace(r.name, 0.0);
    for (const Launch& l : launches) {
      const double warps = static_cast<double>(Warps(l.record.grid[0], l.record.grid[1], l.record.grid[2],
                                                     l.record.block[0], l.record.block[1], l.record.block[2]));
      if (warps > 0 && !l.record.name.empty()) learned[l.record.name] = l.warps.size() / warps;
    }
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [name, per_warp] : learned) chunks_per_warp[name] = per_warp;
  }
  stage(wire::kStageDecode, GpuNow());
  std::lock_guard<std::mutex> lock(ship_mu);
  shipper->SendLaunches(
      launches, reason == wire::kHarvestHighWater ? uint32_t{wire::kLaunchForcedDrain} : 0u,
      [&](uint64_t address) { return names[address]; },
      [](const std::string& mangled) { return mangled.empty() ? std::string("<unknown kernel>") : Demangle(mangled); });
  stage(wire::kStageShip, GpuNow());
  NoteCurrentThread();
  host.tid = CurrentTid();
  host.call = call;
  stage(wire::kStageOther, GpuNow());
  host.end_ns = stage_start;
  shipper->SendHarvest(harvest_time, cs->device, reason, header.dropped_events, header.unplaced_events, used,
                       cs->ref.num_chunks, host);
  stats.harvests += 1;
  stats.forced_drains += reason == wire::kHarvestHighWater ? 1 : 0;
  stats.events_dropped_device += header.dropped_events;
  stats.events_unplaced_device += header.unplaced_events;
  stats.events_filtered += match.filtered;
  stats.events_unattributed += match.unattributed;
  stats.events_malformed += decode.malformed_events;
  Log().debug("harvest on GPU {} ({}): {} chunks, {} launches, {} events, {} dropped", cs->device,
              static_cast<int>(reason), used, launches.size(), match.events, header.dropped_events);
  SendStats();
}

void Profiler::SendStats() {
  const ShipperCounters& c = shipper->counters();
  stats.launches_profiled = c.launches;
  stats.events_recorded = c.events;
  stats.messages_dropped = c.messages_dropped;
  stats.events_dropped_transport = c.events_dropped;
  stats.launches_opted_in = launches_opted_in.load(std::memory_order_relaxed);
  stats.launches_not_selected = launches_not_selected.load(std::memory_order_relaxed);
  stats.host_calls_forgotten = host_calls_forgotten_ended;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [ctx, cs] : contexts) stats.host_calls_forgotten += cs->host_calls.forgotten();
  }
  shipper->SendStats(stats);
}

// ---------------------------------------------------------------------------
// Callbacks
// ---------------------------------------------------------------------------

bool IsPerThread(CUpti_CallbackId cbid, CUstream stream) {
  if (stream == CU_STREAM_PER_THREAD) return true;
  if (stream != nullptr) return false;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
      return true;
    default:
      return false;
  }
}

bool IsCapturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// The driver API call of a callback id, as the wire names it.
wire::HostApi ApiOf(CUpti_CallbackId cbid) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel: return wire::kApiLaunchKernel;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: return wire::kApiLaunchKernelPtsz;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx: return wire::kApiLaunchKernelEx;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: return wire::kApiLaunchKernelExPtsz;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel: return wire::kApiLaunchCooperativeKernel;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: return wire::kApiLaunchCooperativeKernelPtsz;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch: return wire::kApiGraphLaunch;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz: return wire::kApiGraphLaunchPtsz;
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2: return wire::kApiCtxSynchronize;
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize: return wire::kApiStreamSynchronize;
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz: return wire::kApiStreamSynchronizePtsz;
    case CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize: return wire::kApiEventSynchronize;
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2: return wire::kApiMemcpyDtoH;
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds: return wire::kApiMemcpyDtoHPtds;
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy: return wire::kApiMemcpy;
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds: return wire::kApiMemcpyPtds;
    default: return wire::kApiNone;
  }
}

// The API call in progress on this thread, from its enter callback to its
// exit: a launch of profiled work (cs set), or a synchronising call.
struct CallInProgress {
  ContextState* cs = nullptr;
  uint64_t correlation_id = 0;
  uint64_t start_ns = 0;
  wire::HostApi api = wire::kApiNone;
};
thread_local CallInProgress t_call;

// Launch API enter: drain if the arena is nearly full, take the gate (held
// until API exit), make the kernel's module see the arena, note the work.
void OnLaunchEnter(Profiler& p, const CUpti_CallbackData* cb, CUpti_CallbackId cbid, CUfunction f, CUstream stream,
                   uint64_t warps) {
  ContextState* cs = nullptr;
  CUmodule module = nullptr;
  t_call = CallInProgress{};
  if (f != nullptr) {
    const FunctionInfo info = p.LookupFunction(cb->context, f, cb->symbolName);
    if (!info.opted_in) return;
    p.launches_opted_in.fetch_add(1, std::memory_order_relaxed);
    if (!info.selected) p.launches_not_selected.fetch_add(1, std::memory_order_relaxed);
    cs = p.ContextFor(cb->context);
    if (cs == nullptr) return;
    module = info.module;
  } else {  // graph launch: any captured kernel may record
    cs = p.FindContext(cb->context);
    if (cs == nullptr || cs->failed || cs->destroyed) return;
  }
  // The chunks this launch may claim, from what the kernel claimed last time
  // (a drain below may just have taught that).
  const auto projected = [&] {
    return f == nullptr ? 0.0
                        : std::min(static_cast<double>(warps) * p.ChunksPerWarp(cb->symbolName),
                                   static_cast<double>(cs->ref.num_chunks));
  };
  const uint64_t start_ns = GpuNow();
  const bool per_thread = IsPerThread(cbid, stream);
  const bool capturing = IsCapturing(per_thread ? CU_STREAM_PER_THREAD : stream);
  if (!capturing) {
    if (p.NeedsDrain(cs, projected())) p.Harvest(cs, wire::kHarvestHighWater, HarvestMode::kForce);
    p.Poll(cs);
  }
  const double chunks = capturing ? 0.0 : projected();
  if (t_gate_held == nullptr) {
    cs->gate.lock_shared();
    t_gate_held = cs;
  }
  if (module != nullptr && !p.Publish(cs, module)) return;
  if (!capturing) {
    p.NoteLaunch(cs, stream, per_thread, chunks);
    t_call = CallInProgress{cs, cb->correlationId, start_ns, ApiOf(cbid)};
  }
}

// Launch API exit (`cb` null: leaving after an error): the call is noted
// for the harvest that ships its kernel, the gate released.
void OnLaunchExit(const CUpti_CallbackData* cb = nullptr) {
  if (cb != nullptr && t_call.cs != nullptr && t_call.correlation_id == cb->correlationId) {
    NoteCurrentThread();
    t_call.cs->host_calls.Add(t_call.correlation_id,
                              wire::HostCall{t_call.start_ns, GpuNow(), CurrentTid(), t_call.api});
  }
  t_call = CallInProgress{};
  if (t_gate_held != nullptr) {
    t_gate_held->gate.unlock_shared();
    t_gate_held = nullptr;
  }
}

// A synchronising call's enter: when it began. Its exit may harvest.
void OnSyncEnter(CUpti_CallbackId cbid) { t_call = CallInProgress{nullptr, 0, GpuNow(), ApiOf(cbid)}; }

// The call a synchronising API's exit harvests in.
wire::HostCall SyncCall(CUpti_CallbackId cbid) {
  const wire::HostApi api = ApiOf(cbid);
  if (t_call.cs != nullptr || t_call.api != api || t_call.start_ns == 0) return wire::HostCall{};
  const wire::HostCall call{t_call.start_ns, std::max(t_call.start_ns, GpuNow()), CurrentTid(), api};
  t_call = CallInProgress{};
  return call;
}

void Dispatch(Profiler* p, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);

// No exception may cross into CUPTI and the application: the first one turns
// profiling off for the rest of the process.
void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  Profiler* p = g_profiler;
  if (p == nullptr || t_in_smprof > 0) return;
  try {
    Dispatch(p, domain, cbid, data);
  } catch (const std::exception& e) {
    OnLaunchExit();
    if (!p->shutting_down.exchange(true)) Log().error("profiling stops after an internal error: {}", e.what());
  } catch (...) {
    OnLaunchExit();
    if (!p->shutting_down.exchange(true)) Log().error("profiling stops after an unknown internal error");
  }
}

void Dispatch(Profiler* p, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (p->shutting_down.load(std::memory_order_relaxed) || g_forked.load(std::memory_order_relaxed)) {
    OnLaunchExit();
    return;
  }
  InSmprof guard;
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    const auto* rd = static_cast<const CUpti_ResourceData*>(data);
    ContextState* cs = p->FindContext(rd->context);
    if (cs == nullptr) return;
    if (cbid == CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING) {
      p->Harvest(cs, wire::kHarvestModuleUnload, HarvestMode::kForce);
      // Handles of the unloading module may be reused by the next one.
      std::lock_guard<std::mutex> lock(p->mu);
      for (auto it = p->functions.begin(); it != p->functions.end();) {
        it = it->first.ctx == rd->context ? p->functions.erase(it) : std::next(it);
      }
      std::lock_guard<std::mutex> cs_lock(cs->mu);
      cs->published_stale = true;
      cs->names.clear();
    } else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
      p->Harvest(cs, wire::kHarvestContextDestroy, HarvestMode::kForce);
      cs->destroyed = true;
      std::lock_guard<std::mutex> lock(p->mu);
      for (auto it = p->functions.begin(); it != p->functions.end();) {
        it = it->first.ctx == rd->context ? p->functions.erase(it) : std::next(it);
      }
      p->host_calls_forgotten_ended += cs->host_calls.forgotten();
      p->contexts.erase(rd->context);
    }
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  const bool enter = cb->callbackSite == CUPTI_API_ENTER;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
      const auto* a = static_cast<const cuLaunchKernel_params*>(cb->functionParams);
      enter ? OnLaunchEnter(*p, cb, cbid, a->f, a->hStream,
                            Warps(a->gridDimX, a->gridDimY, a->gridDimZ, a->blockDimX, a->blockDimY, a->blockDimZ))
            : OnLaunchExit(cb);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
      const auto* a = static_cast<const cuLaunchCooperativeKernel_params*>(cb->functionParams);
      enter ? OnLaunchEnter(*p, cb, cbid, a->f, a->hStream,
                            Warps(a->gridDimX, a->gridDimY, a->gridDimZ, a->blockDimX, a->blockDimY, a->blockDimZ))
            : OnLaunchExit(cb);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
      const auto* a = static_cast<const cuLaunchKernelEx_params*>(cb->functionParams);
      const CUlaunchConfig* c = a->config;
      enter ? OnLaunchEnter(
                  *p, cb, cbid, a->f, c ? c->hStream : nullptr,
                  c ? Warps(c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ) : 0)
            : OnLaunchExit(cb);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz: {
      const auto* a = static_cast<const cuGraphLaunch_params*>(cb->functionParams);
      enter ? OnLaunchEnter(*p, cb, cbid, nullptr, a->hStream, 0) : OnLaunchExit(cb);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2:
      if (enter) {
        OnSyncEnter(cbid);
      } else if (ContextState* cs = p->FindContext(cb->context)) {
        p->Harvest(cs, wire::kHarvestSync, HarvestMode::kContextSynced, SyncCall(cbid));
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy_v2:
      if (enter) {
        const auto* a = static_cast<const cuStreamDestroy_v2_params*>(cb->functionParams);
        CUcontext owner = nullptr;
        if (cuStreamGetCtx(a->hStream, &owner) == CUDA_SUCCESS) {
          if (ContextState* cs = p->FindContext(owner)) p->NoteStreamDestroy(cs, a->hStream);
        }
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds:
      if (enter) {
        OnSyncEnter(cbid);
      } else if (ContextState* cs = p->FindContext(cb->context)) {
        p->Harvest(cs, wire::kHarvestSync, HarvestMode::kIfIdle, SyncCall(cbid));
      }
      break;
    default:
      break;
  }
}

// Subscribes under the name "smprof", so that a tool refused after us can
// name us (the preload shim relies on it). When another tool holds CUPTI,
// says which (CUPTI names it) in one line and in a notice for the summary.
bool Subscribe(Profiler& p) {
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {};
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "smprof";
  params.oldSubscriberName = holder;
  params.oldSubscriberSize = CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN;
  const CUptiResult r =
      cuptiSubscribe_v2(&p.subscriber, reinterpret_cast<CUpti_CallbackFunc>(OnCallback), nullptr, &params);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    const std::string tool = holder[0] != '\0' ? std::string(holder) : std::string("another CUDA tool");
    Log().error(
        "{} holds CUPTI in pid {} (CUPTI takes one subscriber): smprof does not profile this process; "
        "run it without that tool to profile it with smprof",
        tool, p.pid);
    std::lock_guard<std::mutex> lock(p.ship_mu);
    p.shipper->SendNotice(wire::kNoticeCuptiUnavailable, tool);
    return false;
  }
  if (!CheckCupti(r, "cuptiSubscribe_v2")) return false;
  const CUpti_CallbackId driver_ids[] = {
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
      CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2,
      CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
      CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
      CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
      CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds,
      CUPTI_DRIVER_TRACE_CBID_cuMemcpy,
      CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds,
      CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy,
      CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy_v2,
  };
  bool ok = true;
  for (CUpti_CallbackId id : driver_ids) {
    ok &= CheckCupti(cuptiEnableCallback(1, p.subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id), "cuptiEnableCallback");
  }
  ok &= CheckCupti(
      cuptiEnableCallback(1, p.subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING),
      "cuptiEnableCallback(module unload)");
  ok &= CheckCupti(
      cuptiEnableCallback(1, p.subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING),
      "cuptiEnableCallback(context destroy)");
  if (!ok) cuptiUnsubscribe(p.subscriber);
  return ok;
}

void ShutdownAtExit() { Shutdown(); }
bool StartOnce();
void ShutdownOnce();

}  // namespace

bool Start() {
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return g_profiler != nullptr;
  try {
    return StartOnce();
  } catch (const std::exception& e) {
    Log().error("not profiling: {}", e.what());
  } catch (...) {
    Log().error("not profiling: unknown internal error");
  }
  return false;
}

void Shutdown() {
  try {
    ShutdownOnce();
  } catch (...) {
    Log().error("the last harvest failed with an internal error; events since the previous one are lost");
  }
}

namespace {

// The path of this library, as the dynamic linker loaded it.
std::string OwnPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&OwnPath), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// Another CUDA tool that injects into this process (cuda_tools.h), or "".
std::string InjectingTool() {
  const char* injection = std::getenv("CUDA_INJECTION64_PATH");
  const char* preload = std::getenv("LD_PRELOAD");
  std::string_view evidence;
  const std::string own = OwnPath();
  const std::string_view tool =
      cuda_tools::InjectingTool(injection ? injection : "", preload ? preload : "", environ, own, &evidence);
  if (tool.empty()) return "";
  return std::string(tool) + " (" + std::string(evidence) + ")";
}

// Attaches to the run and subscribes to CUPTI. A process that is not
// profiled for a reason the user should hear about (a bad setting, another
// tool) still attaches, long enough to tell the collector why.
bool StartOnce() {
  InSmprof guard;
  auto* p = new Profiler();
  std::vector<std::string> errors;
  p->config = LoadConfig([](const char* n) { return std::getenv(n); }, &errors);
  SetLogLevel(p->config.settings.log_level);
  for (const std::string& e : errors) Log().error("{}", e);
  if (p->config.run_id.empty()) {
    Log().warn(
        "SMPROF_RUN_ID is not set, so no collector is listening: start the application with "
        "`smprof-run ./app`; running unprofiled");
    return false;
  }
  transport::ProducerOptions options;
  options.ring_bytes = p->config.shm_bytes();
  std::string error;
  p->producer = transport::Producer::Attach(p->config.run_id, options, &error);
  if (!p->producer) {
    Log().error("cannot reach the smprof collector: {}; running unprofiled", error);
    return false;
  }
  p->sink = std::make_unique<ProducerSink>(p->producer.get());
  p->shipper = std::make_unique<Shipper>(p->sink.get(), ThreadName);
  p->pid = getpid();
  pthread_atfork(nullptr, nullptr, OnForkChild);
  const std::string tool = InjectingTool();
  // cuptiGetTimestamp would start CUPTI; a process smprof leaves alone gets
  // the host clock (CUPTI's timestamps are on the same epoch).
  const bool leave_alone = !p->config.kernels_valid || !tool.empty();
  p->shipper->SendProcess(static_cast<uint32_t>(p->pid), static_cast<uint32_t>(getppid()), RealtimeNow(),
                          leave_alone ? RealtimeNow() : GpuNow(), ReadCmdline());
  if (!p->config.kernels_valid) {
    const auto bad = std::find_if(errors.begin(), errors.end(),
                                  [](const std::string& e) { return e.rfind("SMPROF_KERNELS", 0) == 0; });
    p->shipper->SendNotice(wire::kNoticeBadSettings, bad != errors.end() ? *bad : std::string("SMPROF_KERNELS"));
    p->producer->Detach();
    return false;
  }
  if (!tool.empty()) {
    Log().warn("{} injects into pid {}: smprof steps aside and does not profile it", tool, p->pid);
    p->shipper->SendNotice(wire::kNoticeSteppedAside, tool);
    p->producer->Detach();
    return false;
  }
  if (!Subscribe(*p)) {
    p->producer->Detach();
    return false;
  }
  g_profiler = p;
  std::atexit(ShutdownAtExit);
  Log().info("profiling (run {}, kernels '{}')", p->config.run_id, p->config.settings.kernels_spec);
  return true;
}

void ShutdownOnce() {
  Profiler* p = g_profiler;
  static std::atomic<bool> once{false};
  if (p == nullptr || getpid() != p->pid || once.exchange(true)) return;
  InSmprof guard;
  std::vector<ContextState*> contexts;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    for (auto& [ctx, cs] : p->contexts) contexts.push_back(cs);
  }
  // Other threads' launches still take the gate during this last harvest;
  // only afterwards does the profiler stop looking at callbacks.
  for (ContextState* cs : contexts) {
    if (!cs->destroyed) p->Harvest(cs, wire::kHarvestExit, HarvestMode::kForce);
  }
  p->shutting_down.store(true);
  {
    std::lock_guard<std::mutex> lock(p->ship_mu);
    p->SendStats();
  }
  if (uint64_t lost = p->activity.dropped()) {
    Log().warn("{} CUPTI kernel records were not kept (store full); their events appear without launch details", lost);
  }
  p->producer->Detach();
}

}  // namespace
}  // namespace smprof::injector
