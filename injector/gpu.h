// Gpu: every CUDA driver and CUPTI call the injector's logic makes, behind
// one narrow interface.
//
// The launch policy, the device contexts (arena, publication, drains) and the
// harvester talk to the GPU only through this class, so they run in CPU
// tests against tests/fakes/fake_gpu.h, which keeps "device memory" in host
// memory and lets a test run a "kernel" by writing chunks into it. The real
// implementation (cuda_gpu.cc) holds the error checks (logged once per site,
// then rate-limited), the relaxed capture mode around smprof's own memory
// operations, and the bounded waits.
//
// Handles are opaque pointers with the driver's values (a GpuStream is a
// CUstream, kPerThreadStream is CU_STREAM_PER_THREAD). Every call acts on the
// calling thread's current context unless it takes one; ContextScope makes a
// context current for a scope (a harvest on a worker thread needs it).
// All calls are asynchronous unless they say they wait; a wait always has a
// deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "injector/shipper.h"  // DeviceInfo

namespace smprof::injector {

using DevPtr = uint64_t;
using GpuCtx = void*;
using GpuStream = void*;
using GpuModule = void*;
using GpuFunction = void*;  // a CUfunction or, from runtime launches, a CUkernel
using GpuEvent = void*;

// CU_STREAM_LEGACY and CU_STREAM_PER_THREAD, as the driver spells them.
inline GpuStream const kLegacyStream = reinterpret_cast<GpuStream>(0x1);
inline GpuStream const kPerThreadStream = reinterpret_cast<GpuStream>(0x2);

enum class StreamState {
  kIdle,       // all work done
  kBusy,       // work pending
  kCapturing,  // the application captures a graph on it: never queried, synchronised or written to
  kGone,       // an invalid handle, or an error
};

enum class Lookup { kFound, kNotFound, kError };

// A kernel node of a CUDA graph (child graphs included).
struct GraphKernel {
  GpuFunction function = nullptr;  // a CUfunction, or a CUkernel
  std::string symbol;              // mangled name
  uint64_t warps = 0;
};

// What a context's device is and how its clocks relate (measured at setup).
struct DeviceFacts {
  DeviceInfo info;
  uint32_t context_id = 0;     // CUPTI's id: kernel records name their context by it
  double cycles_per_ns = 1.0;  // SM clock in GHz: measured, else nominal
};

// How long smprof waits for a copy of its own on a private stream: it needs
// no SM, only a copy engine the application may keep busy for a while.
inline constexpr std::chrono::seconds kOwnCopyTimeout{10};

class Gpu {
 public:
  virtual ~Gpu() = default;

  // The clock of CUPTI's kernel records (ns).
  virtual uint64_t Now() = 0;

  // Makes `ctx` current on the calling thread; false if it cannot.
  virtual bool PushContext(GpuCtx ctx) = 0;
  virtual void PopContext() = 0;

  // Describes the current context's device and measures its timer and
  // marker costs (a few hundred microseconds of GPU time, waited for briefly).
  virtual bool SetUpDevice(DeviceFacts* facts) = 0;

  // The current context's device memory: free and total bytes.
  virtual bool DeviceMemory(uint64_t* free_bytes, uint64_t* total_bytes) = 0;
  virtual bool Allocate(size_t bytes, DevPtr* ptr) = 0;
  virtual void Free(DevPtr ptr) = 0;
  // Page-locked host memory the GPU copies into asynchronously; nullptr on failure.
  virtual void* AllocatePinned(size_t bytes) = 0;
  virtual void FreePinned(void* ptr) = 0;
  virtual bool CreateStream(GpuStream* stream) = 0;  // non-blocking, private to smprof
  virtual void DestroyStream(GpuStream stream) = 0;

  virtual bool CopyToDevice(DevPtr dst, const void* src, size_t bytes, GpuStream stream) = 0;
  virtual bool CopyToHost(void* dst, DevPtr src, size_t bytes, GpuStream stream) = 0;
  virtual bool CopyOnDevice(DevPtr dst, DevPtr src, size_t bytes, GpuStream stream) = 0;
  virtual bool Fill(DevPtr dst, uint8_t value, size_t bytes, GpuStream stream) = 0;
  // Waits until `stream` is idle or `timeout` passes (false: not idle, or an error).
  virtual bool Wait(GpuStream stream, std::chrono::nanoseconds timeout) = 0;
  virtual StreamState Query(GpuStream stream) = 0;
  // Events mark a point in a stream's order: RecordEvent puts `event` after
  // the work queued on `stream` so far (again and again: each record
  // replaces the last); QueryEvent says whether that work has finished
  // (kIdle), not yet (kBusy) or cannot tell (kGone); WaitEvent waits for it,
  // until `timeout` (false: not finished, or an error).
  virtual bool CreateEvent(GpuEvent* event) = 0;
  virtual void DestroyEvent(GpuEvent event) = 0;
  virtual bool RecordEvent(GpuEvent event, GpuStream stream) = 0;
  virtual StreamState QueryEvent(GpuEvent event) = 0;
  virtual bool WaitEvent(GpuEvent event, std::chrono::nanoseconds timeout) = 0;
  virtual bool Capturing(GpuStream stream) = 0;
  virtual bool SynchronizeContext() = 0;
  // The context that owns `stream` (nullptr if unknown).
  virtual GpuCtx StreamContext(GpuStream stream) = 0;

  // The module of a launched function (a CUkernel is resolved in the current context).
  virtual bool FunctionModule(GpuFunction f, GpuModule* module) = 0;
  virtual Lookup ModuleGlobal(GpuModule module, const char* name, DevPtr* ptr, size_t* bytes) = 0;
  // The NUL-terminated string at a device address (at most 64 KiB), read on
  // `stream` and waited for; "" if unreadable.
  virtual std::string ReadString(DevPtr address, GpuStream stream) = 0;

  // Runs the clock probe (one thread storing %globaltimer) in the current
  // context and waits for it briefly. On success *globaltimer is what it
  // stored and *launched_ns when it was launched: its kernel record (named
  // kClockProbeKernel) relates the two clocks.
  virtual bool ProbeClock(uint64_t* globaltimer, uint64_t* launched_ns) = 0;
  // The kernel nodes of a graph (`graph` is a CUgraph).
  virtual bool GraphKernels(void* graph, std::vector<GraphKernel>* kernels) = 0;
  // Delivers the kernel records CUPTI holds now (to the ActivityStore).
  // `incomplete_too`: also buffers holding records of kernels still running
  // (CUPTI then gives them zero times, and never the real ones): only when
  // no kernel can be running any more (the final harvest).
  // One flush runs at a time; `if_free`: return at once when one runs (a
  // flush from an application's thread, inside a driver API callback).
  virtual void FlushActivity(bool incomplete_too, bool if_free = false) = 0;
  // What a driver call's `result` says when a kernel's execution failed
  // (an illegal address, a trap, an assert): its name and description; ""
  // for success and for any other error.
  virtual std::string ExecutionError(int result) = 0;
};

// Kernel names of the injector's own probes, left out of every trace.
inline constexpr char kClockProbeKernel[] = "smprof_clock_probe";
inline constexpr char kTimerStepKernel[] = "smprof_timer_step";

// Marks the calling thread as inside smprof for a scope: CUPTI callbacks
// caused by smprof's own driver calls (they re-enter the subscriber) are
// ignored. The harvest thread holds one for its whole life.
class OwnCalls {
 public:
  OwnCalls() { ++depth(); }
  ~OwnCalls() { --depth(); }
  OwnCalls(const OwnCalls&) = delete;
  OwnCalls& operator=(const OwnCalls&) = delete;
  static bool active() { return depth() > 0; }

 private:
  static int& depth() {
    static thread_local int d = 0;
    return d;
  }
};

// A process-unique id for an object that thread-local caches are keyed by (an
// address may be reused by the next object; these never are).
inline uint64_t NewInstanceId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// Takes `lock`'s mutex before `deadline`, polling (a timed lock: the waits of
// a guest must be bounded). Polls rather than using timed mutexes, whose
// clock-based waits sanitizers do not follow.
template <typename Lock>
bool LockBefore(Lock& lock, std::chrono::steady_clock::time_point deadline) {
  for (int tries = 0;; ++tries) {
    if (lock.try_lock()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (tries < 16) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

// Makes a context current for a scope.
class ContextScope {
 public:
  ContextScope(Gpu& gpu, GpuCtx ctx) : gpu_(gpu), ok_(gpu.PushContext(ctx)) {}
  ~ContextScope() {
    if (ok_) gpu_.PopContext();
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  bool ok() const { return ok_; }

 private:
  Gpu& gpu_;
  bool ok_;
};

}  // namespace smprof::injector
