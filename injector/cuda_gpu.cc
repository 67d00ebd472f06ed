#include "injector/cuda_gpu.h"

#include <cuda.h>
#include <cupti.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "injector/calibration.h"
#include "injector/kernel_table.h"
#include "injector/log.h"

namespace smprof::injector {
namespace {

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

// Lets smprof's memory operations run while the application captures a graph
// in global mode on this thread (gpu-facts: relaxed mode keeps the capture valid).
class RelaxedCapture {
 public:
  RelaxedCapture() { cuThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { cuThreadExchangeStreamCaptureMode(&mode_); }

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

CUstream S(GpuStream s) { return static_cast<CUstream>(s); }

// Whether each PushContext of this thread pushed (or found the context current).
thread_local std::vector<bool> t_pushed;

// One thread stores %globaltimer; CUPTI's record of this kernel relates the
// two clocks. A second entry measures the smallest %globaltimer step (the
// minimum of 8 steps: a step seen whole starts and ends at a change). PTX, so
// the driver compiles it for whatever GPU is present.
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

// The %globaltimer step (32 ns on Hopper, 1 us on some GPUs) bounds how
// finely event times can be read.
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

}  // namespace

// The probes of one context, loaded at its setup.
struct CudaGpu::Probes {
  CUmodule module = nullptr;
  CUfunction clock = nullptr;
  CUstream stream = nullptr;  // own stream: a probe stuck behind a persistent kernel blocks nothing
  CUdeviceptr out = 0;        // two 64-bit slots
  uint64_t* pinned = nullptr;
};

CudaGpu::CudaGpu(std::function<void()> on_first_device) : on_first_device_(std::move(on_first_device)) {}
CudaGpu::~CudaGpu() = default;  // leaky in the injector; probes are left to the driver

uint64_t CudaGpu::Now() {
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  return t;
}

bool CudaGpu::PushContext(GpuCtx ctx) {
  CUcontext current = nullptr;
  cuCtxGetCurrent(&current);
  if (current == static_cast<CUcontext>(ctx)) {
    t_pushed.push_back(false);
    return true;
  }
  if (cuCtxPushCurrent(static_cast<CUcontext>(ctx)) != CUDA_SUCCESS) return false;
  t_pushed.push_back(true);
  return true;
}

void CudaGpu::PopContext() {
  if (t_pushed.empty()) return;
  const bool pushed = t_pushed.back();
  t_pushed.pop_back();
  CUcontext popped;
  if (pushed) cuCtxPopCurrent(&popped);
}

bool CudaGpu::SetUpDevice(DeviceFacts* facts) {
  std::call_once(first_device_, [this] {
    if (on_first_device_) on_first_device_();
  });
  RelaxedCapture relaxed;
  CUdevice dev;
  CUcontext ctx = nullptr;
  if (!SMPROF_CU(cuCtxGetDevice(&dev)) || !SMPROF_CU(cuCtxGetCurrent(&ctx))) return false;
  DeviceInfo device = DescribeDevice(dev);
  cuptiGetContextId(ctx, &facts->context_id);
  auto probes = std::make_unique<Probes>();
  CUfunction timer_step = nullptr;
  if (!SMPROF_CU(cuStreamCreate(&probes->stream, CU_STREAM_NON_BLOCKING)) ||
      !SMPROF_CU(cuMemAlloc(&probes->out, 2 * sizeof(uint64_t))) ||
      !SMPROF_CU(cuMemHostAlloc(reinterpret_cast<void**>(&probes->pinned), 2 * sizeof(uint64_t), 0)) ||
      !SMPROF_CU(cuModuleLoadData(&probes->module, kProbePtx)) ||
      !SMPROF_CU(cuModuleGetFunction(&probes->clock, probes->module, kClockProbeKernel)) ||
      !SMPROF_CU(cuModuleGetFunction(&timer_step, probes->module, kTimerStepKernel))) {
    probes->clock = nullptr;
    Log().warn("GPU {}: the clock probe did not load; event times are aligned from launches alone", device.ordinal);
  } else {
    // Waited for briefly: if the GPU is too busy to run it now, the trace
    // says "not measured".
    CUdeviceptr out = probes->out + sizeof(uint64_t);
    void* args[] = {&out};
    probes->pinned[1] = 0;
    if (SMPROF_CU(cuLaunchKernel(timer_step, 1, 1, 1, 1, 1, 1, 0, probes->stream, args, nullptr)) &&
        SMPROF_CU(cuMemcpyDtoHAsync(&probes->pinned[1], out, sizeof(uint64_t), probes->stream)) &&
        Wait(probes->stream, std::chrono::milliseconds(100))) {
      device.timer_resolution_ns = static_cast<uint32_t>(std::min<uint64_t>(probes->pinned[1], UINT32_MAX));
    }
  }
  facts->cycles_per_ns = device.sm_clock_khz / 1e6;
  if (probes->stream != nullptr) {
    std::string why;
    const auto wait = [this](CUstream s) { return Wait(s, std::chrono::milliseconds(300)); };
    const int abi = static_cast<int>(wire::kArenaAbiVersion);
    if (Calibrate(probes->stream, KernelTable::ArenaSymbol(abi), wait, &device.calibration, &why)) {
      const Calibration& cal = device.calibration;
      if (cal.sm_clock_khz != 0) facts->cycles_per_ns = cal.sm_clock_khz / 1e6;
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
  facts->info = device;
  std::lock_guard<std::mutex> lock(mu_);
  probes_[ctx] = std::move(probes);
  return true;
}

bool CudaGpu::DeviceMemory(uint64_t* free_bytes, uint64_t* total_bytes) {
  size_t free = 0, total = 0;
  if (!SMPROF_CU(cuMemGetInfo(&free, &total))) return false;
  *free_bytes = free;
  *total_bytes = total;
  return true;
}

bool CudaGpu::Allocate(size_t bytes, DevPtr* ptr) {
  RelaxedCapture relaxed;
  CUdeviceptr p = 0;
  if (!SMPROF_CU(cuMemAlloc(&p, bytes))) return false;
  *ptr = p;
  return true;
}

void CudaGpu::Free(DevPtr ptr) {
  RelaxedCapture relaxed;
  cuMemFree(ptr);
}

void* CudaGpu::AllocatePinned(size_t bytes) {
  RelaxedCapture relaxed;
  void* p = nullptr;
  return cuMemHostAlloc(&p, bytes, 0) == CUDA_SUCCESS ? p : nullptr;
}

void CudaGpu::FreePinned(void* ptr) {
  RelaxedCapture relaxed;
  cuMemFreeHost(ptr);
}

bool CudaGpu::CreateStream(GpuStream* stream) {
  RelaxedCapture relaxed;
  CUstream s = nullptr;
  if (!SMPROF_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))) return false;
  *stream = s;
  return true;
}

void CudaGpu::DestroyStream(GpuStream stream) {
  RelaxedCapture relaxed;
  cuStreamDestroy(S(stream));
}

bool CudaGpu::CopyToDevice(DevPtr dst, const void* src, size_t bytes, GpuStream stream) {
  RelaxedCapture relaxed;
  return SMPROF_CU(cuMemcpyHtoDAsync(dst, src, bytes, S(stream)));
}

bool CudaGpu::CopyToHost(void* dst, DevPtr src, size_t bytes, GpuStream stream) {
  RelaxedCapture relaxed;
  return SMPROF_CU(cuMemcpyDtoHAsync(dst, src, bytes, S(stream)));
}

bool CudaGpu::CopyOnDevice(DevPtr dst, DevPtr src, size_t bytes, GpuStream stream) {
  RelaxedCapture relaxed;
  return SMPROF_CU(cuMemcpyDtoDAsync(dst, src, bytes, S(stream)));
}

bool CudaGpu::Fill(DevPtr dst, uint8_t value, size_t bytes, GpuStream stream) {
  RelaxedCapture relaxed;
  return SMPROF_CU(cuMemsetD8Async(dst, value, bytes, S(stream)));
}

namespace {
// Polls `query` until it stops saying CUDA_ERROR_NOT_READY: never blocks past
// the deadline, since the work may wait on something a blocked application
// thread would launch.
template <typename Query>
bool PollUntilDone(Query query, std::chrono::nanoseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int spins = 0;; ++spins) {
    const CUresult r = query();
    if (r == CUDA_SUCCESS) return true;
    if (r != CUDA_ERROR_NOT_READY || std::chrono::steady_clock::now() >= deadline) return false;
    if (spins < 64) {
      std::this_thread::yield();  // smprof's own short copies finish in microseconds
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(spins < 256 ? 20 : 200));
    }
  }
}
}  // namespace

bool CudaGpu::Wait(GpuStream stream, std::chrono::nanoseconds timeout) {
  RelaxedCapture relaxed;
  return PollUntilDone([stream] { return cuStreamQuery(S(stream)); }, timeout);
}

bool CudaGpu::CreateEvent(GpuEvent* event) {
  CUevent e = nullptr;
  if (!SMPROF_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING))) return false;
  *event = e;
  return true;
}

void CudaGpu::DestroyEvent(GpuEvent event) { cuEventDestroy(static_cast<CUevent>(event)); }

bool CudaGpu::RecordEvent(GpuEvent event, GpuStream stream) {
  RelaxedCapture relaxed;
  return SMPROF_CU(cuEventRecord(static_cast<CUevent>(event), S(stream)));
}

StreamState CudaGpu::QueryEvent(GpuEvent event) {
  const CUresult r = cuEventQuery(static_cast<CUevent>(event));
  if (r == CUDA_SUCCESS) return StreamState::kIdle;
  return r == CUDA_ERROR_NOT_READY ? StreamState::kBusy : StreamState::kGone;
}

bool CudaGpu::WaitEvent(GpuEvent event, std::chrono::nanoseconds timeout) {
  return PollUntilDone([event] { return cuEventQuery(static_cast<CUevent>(event)); }, timeout);
}

StreamState CudaGpu::Query(GpuStream stream) {
  if (Capturing(stream)) return StreamState::kCapturing;
  RelaxedCapture relaxed;
  const CUresult r = cuStreamQuery(S(stream));
  if (r == CUDA_SUCCESS) return StreamState::kIdle;
  return r == CUDA_ERROR_NOT_READY ? StreamState::kBusy : StreamState::kGone;
}

bool CudaGpu::Capturing(GpuStream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return cuStreamIsCapturing(S(stream), &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool CudaGpu::SynchronizeContext() {
  RelaxedCapture relaxed;
  return SMPROF_CU(cuCtxSynchronize());
}

GpuCtx CudaGpu::StreamContext(GpuStream stream) {
  CUcontext owner = nullptr;
  return cuStreamGetCtx(S(stream), &owner) == CUDA_SUCCESS ? owner : nullptr;
}

// Runtime launches hand CUPTI a CUkernel (gpu-facts): cuFuncGetModule then
// fails with INVALID_HANDLE and the context's CUfunction is needed first.
bool CudaGpu::FunctionModule(GpuFunction f, GpuModule* module) {
  CUmodule m = nullptr;
  if (cuFuncGetModule(&m, static_cast<CUfunction>(f)) != CUDA_SUCCESS) {
    CUfunction func = nullptr;
    if (cuKernelGetFunction(&func, static_cast<CUkernel>(f)) != CUDA_SUCCESS ||
        cuFuncGetModule(&m, func) != CUDA_SUCCESS) {
      return false;
    }
  }
  *module = m;
  return true;
}

Lookup CudaGpu::ModuleGlobal(GpuModule module, const char* name, DevPtr* ptr, size_t* bytes) {
  CUdeviceptr p = 0;
  size_t n = 0;
  const CUresult r = cuModuleGetGlobal(&p, &n, static_cast<CUmodule>(module), name);
  if (r == CUDA_ERROR_NOT_FOUND) return Lookup::kNotFound;
  if (r != CUDA_SUCCESS) return Lookup::kError;
  *ptr = p;
  *bytes = n;
  return Lookup::kFound;
}

std::string CudaGpu::ReadString(DevPtr address, GpuStream stream) {
  RelaxedCapture relaxed;
  std::string text;
  CUdeviceptr base = 0;
  size_t size = 0;
  if (cuMemGetAddressRange(&base, &size, address) != CUDA_SUCCESS || address < base || address >= base + size) {
    return text;
  }
  constexpr size_t kStep = 256, kMax = 64u << 10;
  std::vector<char> buf(kStep);
  for (uint64_t at = address; at < base + size && text.size() < kMax; at += kStep) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kStep, base + size - at));
    if (!SMPROF_CU(cuMemcpyDtoHAsync(buf.data(), at, n, S(stream))) ||
        !Wait(stream, std::chrono::seconds(10))) {
      break;
    }
    const char* end = static_cast<const char*>(std::memchr(buf.data(), '\0', n));
    text.append(buf.data(), end ? static_cast<size_t>(end - buf.data()) : n);
    if (end) break;
  }
  return text;
}

bool CudaGpu::ProbeClock(uint64_t* globaltimer, uint64_t* launched_ns) {
  RelaxedCapture relaxed;
  CUcontext ctx = nullptr;
  cuCtxGetCurrent(&ctx);
  Probes* p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = probes_.find(ctx);
    if (it == probes_.end() || it->second->clock == nullptr) return false;
    p = it->second.get();
  }
  *launched_ns = Now();
  CUdeviceptr out = p->out;
  void* args[] = {&out};
  p->pinned[0] = 0;
  if (!SMPROF_CU(cuLaunchKernel(p->clock, 1, 1, 1, 1, 1, 1, 0, p->stream, args, nullptr)) ||
      !SMPROF_CU(cuMemcpyDtoHAsync(&p->pinned[0], out, sizeof(uint64_t), p->stream)) ||
      !Wait(p->stream, std::chrono::milliseconds(100))) {
    return false;
  }
  *globaltimer = p->pinned[0];
  return true;
}

bool CudaGpu::GraphKernels(void* graph, std::vector<GraphKernel>* kernels) {
  size_t count = 0;
  if (cuGraphGetNodes(static_cast<CUgraph>(graph), nullptr, &count) != CUDA_SUCCESS) return false;
  std::vector<CUgraphNode> nodes(count);
  if (count > 0 && cuGraphGetNodes(static_cast<CUgraph>(graph), nodes.data(), &count) != CUDA_SUCCESS) return false;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    if (cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) return false;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraph child = nullptr;
      if (cuGraphChildGraphNodeGetGraph(node, &child) != CUDA_SUCCESS || !GraphKernels(child, kernels)) return false;
      continue;
    }
    if (type != CU_GRAPH_NODE_TYPE_KERNEL) continue;
    CUDA_KERNEL_NODE_PARAMS params{};
    if (cuGraphKernelNodeGetParams(node, &params) != CUDA_SUCCESS) return false;
    GraphKernel k;
    const char* name = nullptr;
    if (params.func != nullptr) {
      k.function = params.func;
      cuFuncGetName(&name, params.func);
    } else if (params.kern != nullptr) {
      k.function = params.kern;
      cuKernelGetName(&name, params.kern);
    } else {
      continue;
    }
    k.symbol = name != nullptr ? name : "";
    k.warps = (uint64_t{params.blockDimX} * params.blockDimY * params.blockDimZ + 31) / 32 * params.gridDimX *
              params.gridDimY * params.gridDimZ;
    kernels->push_back(std::move(k));
  }
  return true;
}

void CudaGpu::FlushActivity(bool incomplete_too, bool if_free) {
  // Flushes from several application threads at once, inside their driver
  // API callbacks, beside launches on other threads, crashed the process
  // (H200, CUPTI 13.0: four threads synchronising streams every 1,000
  // launches): one at a time, and never waiting inside a callback.
  static std::mutex flushing;
  std::unique_lock<std::mutex> lock(flushing, std::defer_lock);
  if (if_free) {
    if (!lock.try_lock()) return;
  } else {
    lock.lock();
  }
  cuptiActivityFlushAll(incomplete_too ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
}

std::string CudaGpu::ExecutionError(int result) {
  switch (static_cast<CUresult>(result)) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
      break;
    default:
      return "";
  }
  const char* name = nullptr;
  const char* text = nullptr;
  cuGetErrorName(static_cast<CUresult>(result), &name);
  cuGetErrorString(static_cast<CUresult>(result), &text);
  return std::string(name != nullptr ? name : "CUDA error " + std::to_string(result)) +
         (text != nullptr ? std::string(": ") + text : std::string());
}

}  // namespace smprof::injector
