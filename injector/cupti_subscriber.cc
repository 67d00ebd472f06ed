#include "injector/cupti_subscriber.h"

#include <cuda.h>
#include <cupti.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>

#include "injector/log.h"

namespace smprof::injector {
namespace {

Profiler* g_profiler = nullptr;  // set once by Subscribe
CUpti_SubscriberHandle g_subscriber = nullptr;
std::atomic<bool> g_stopped{false};

// Set in a forked child, which must not touch the parent's profiler.
std::atomic<bool> g_forked{false};
void OnForkChild() { g_forked.store(true, std::memory_order_relaxed); }

bool CheckCupti(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  Log().error("{} failed: {}", what, text ? text : "unknown CUPTI error");
  return false;
}

uint64_t Warps(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) {
  return (uint64_t{bx} * by * bz + 31) / 32 * gx * gy * gz;
}

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

// What a driver call returned, at its exit (a CUresult).
int Result(const CUpti_CallbackData* cb) {
  return cb->functionReturnValue != nullptr ? static_cast<int>(*static_cast<const CUresult*>(cb->functionReturnValue))
                                            : 0;
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

// CUPTI's activity buffers. Small on purpose: the first launch after each
// flush (every harvest flushes) waits while CUPTI sets up a fresh buffer, for
// a time that grows with its size (H100: ~0.9 ms for 8 MiB, ~0.15 ms for
// 1 MiB, ~0.05 ms for 64 KiB; docs/performance.md), and that wait lands
// between the application's events around the launch. What CUPTI spends per
// record is the same at any size.
constexpr size_t kActivityBufferBytes = 64u << 10;

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kActivityBufferBytes));
  *size = *buffer ? kActivityBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI OnBufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  try {
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || g_profiler == nullptr) continue;
      const auto& k = *reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      // A record flushed while its kernel ran has no times (and is never
      // sent again): its events wait, then ship unattributed (counted).
      if (k.start == 0 || k.end < k.start) {
        Log().debug("CUPTI kernel record {} incomplete: ignored", k.correlationId);
        continue;
      }
      if (!g_profiler->activity().Tracked(k.name)) continue;
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
      g_profiler->activity().Add(std::move(r));
    }
  } catch (...) {
    Log().error("CUPTI kernel records lost after an internal error");
  }
  std::free(buffer);
}

LaunchCall Launch(const CUpti_CallbackData* cb, CUpti_CallbackId cbid, CUfunction f, CUstream stream, uint64_t warps) {
  LaunchCall call;
  call.ctx = cb->context;
  call.function = f;
  call.symbol = cb->symbolName;
  call.stream = stream;
  call.per_thread = IsPerThread(cbid, stream);
  call.warps = warps;
  call.correlation_id = cb->correlationId;
  call.api = ApiOf(cbid);
  return call;
}

void Dispatch(Profiler& p, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    const auto* rd = static_cast<const CUpti_ResourceData*>(data);
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED) {
      const auto* g = static_cast<const CUpti_GraphData*>(rd->resourceDescriptor);
      p.OnGraphExecCreated(rd->context, g->graph, g->graphExec);
    } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING) {
      const auto* g = static_cast<const CUpti_GraphData*>(rd->resourceDescriptor);
      p.OnGraphExecDestroy(g->graphExec);
    } else if (cbid == CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING) {
      p.OnModuleUnload(rd->context);
    } else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
      p.OnContextDestroy(rd->context);
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
      enter ? p.OnLaunchEnter(Launch(cb, cbid, a->f, a->hStream,
                                     Warps(a->gridDimX, a->gridDimY, a->gridDimZ, a->blockDimX, a->blockDimY,
                                           a->blockDimZ)))
            : p.OnLaunchExit(cb->correlationId);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
      const auto* a = static_cast<const cuLaunchCooperativeKernel_params*>(cb->functionParams);
      enter ? p.OnLaunchEnter(Launch(cb, cbid, a->f, a->hStream,
                                     Warps(a->gridDimX, a->gridDimY, a->gridDimZ, a->blockDimX, a->blockDimY,
                                           a->blockDimZ)))
            : p.OnLaunchExit(cb->correlationId);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
      const auto* a = static_cast<const cuLaunchKernelEx_params*>(cb->functionParams);
      const CUlaunchConfig* c = a->config;
      enter ? p.OnLaunchEnter(Launch(
                  cb, cbid, a->f, c ? c->hStream : nullptr,
                  c ? Warps(c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ) : 0))
            : p.OnLaunchExit(cb->correlationId);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz: {
      const auto* a = static_cast<const cuGraphLaunch_params*>(cb->functionParams);
      if (enter) {
        LaunchCall call = Launch(cb, cbid, nullptr, a->hStream, 0);
        call.graph_exec = a->hGraph;  // the CUgraphExec
        p.OnLaunchEnter(call);
      } else {
        p.OnLaunchExit(cb->correlationId);
      }
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2:
      enter ? p.OnSyncEnter(ApiOf(cbid)) : p.OnSyncExit(cb->context, ApiOf(cbid), true, Result(cb));
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds:
      enter ? p.OnSyncEnter(ApiOf(cbid)) : p.OnSyncExit(cb->context, ApiOf(cbid), false, Result(cb));
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy_v2:
      if (enter) p.OnStreamDestroy(static_cast<const cuStreamDestroy_v2_params*>(cb->functionParams)->hStream);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuProfilerStart:
      if (!enter) p.OnProfilerStart();
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuProfilerStop:
      if (enter) p.OnProfilerStop();
      break;
    default:
      break;
  }
}

void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  Profiler* p = g_profiler;
  if (p == nullptr || OwnCalls::active()) return;
  if (g_stopped.load(std::memory_order_relaxed) || g_forked.load(std::memory_order_relaxed)) {
    p->OnLaunchExit(0);  // a gate held since before the stop is released
    return;
  }
  OwnCalls guard;
  try {
    Dispatch(*p, domain, cbid, data);
  } catch (const std::exception& e) {
    p->OnLaunchExit(0);
    if (!g_stopped.exchange(true)) Log().error("profiling stops after an internal error: {}", e.what());
  } catch (...) {
    p->OnLaunchExit(0);
    if (!g_stopped.exchange(true)) Log().error("profiling stops after an unknown internal error");
  }
}

}  // namespace

bool Subscribe(Profiler* profiler, std::string* holder_out) {
  OwnCalls guard;
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {};
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "smprof";
  params.oldSubscriberName = holder;
  params.oldSubscriberSize = CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN;
  const CUptiResult r =
      cuptiSubscribe_v2(&g_subscriber, reinterpret_cast<CUpti_CallbackFunc>(OnCallback), nullptr, &params);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    *holder_out = holder[0] != '\0' ? std::string(holder) : std::string("another CUDA tool");
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
      CUPTI_DRIVER_TRACE_CBID_cuProfilerStart,
      CUPTI_DRIVER_TRACE_CBID_cuProfilerStop,
  };
  bool ok = true;
  for (CUpti_CallbackId id : driver_ids) {
    ok &= CheckCupti(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id), "cuptiEnableCallback");
  }
  ok &= CheckCupti(
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING),
      "cuptiEnableCallback(module unload)");
  ok &= CheckCupti(
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING),
      "cuptiEnableCallback(context destroy)");
  ok &= CheckCupti(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED),
                   "cuptiEnableCallback(graph exec created)");
  ok &= CheckCupti(
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING),
      "cuptiEnableCallback(graph exec destroy)");
  if (!ok) {
    cuptiUnsubscribe(g_subscriber);
    return false;
  }
  pthread_atfork(nullptr, nullptr, OnForkChild);
  g_profiler = profiler;
  return true;
}

void StopCallbacks() { g_stopped.store(true); }

std::atomic<bool> g_records_enabled{false};

void EnableKernelRecords() {
  if (g_records_enabled.exchange(true)) return;
  OwnCalls guard;
  CheckCupti(cuptiActivityRegisterCallbacks(OnBufferRequested, OnBufferCompleted), "cuptiActivityRegisterCallbacks");
  CheckCupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
}

void DisableKernelRecords() {
  if (!g_records_enabled.load()) return;
  OwnCalls guard;
  CheckCupti(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable(CONCURRENT_KERNEL)");
}

}  // namespace smprof::injector
