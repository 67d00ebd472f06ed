// A reference injection library for bench/launch_cost.cu: what any
// CUPTI-based tool pays per launch before it does anything of its own.
//
// Loaded through CUDA_INJECTION64_PATH like libsmprof_inject.so, it makes the
// same subscription a tracer in Kineto's or smprof's design needs, and
// nothing else: the driver API callbacks smprof enables (launches, graph
// launches, synchronisations), with a callback that returns at once, and
// CUPTI's CONCURRENT_KERNEL activity records, whose buffers are walked and
// freed. The difference between a program under this library and the same
// program plain is the floor a CUPTI subscriber cannot go below; smprof's
// own cost is what it adds above it.
#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {

std::atomic<unsigned long long> g_records{0};

void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 8u << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = *buffer ? kBytes : 0;
  *max_records = 0;
}

void CUPTIAPI OnBufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) g_records.fetch_add(1);
  std::free(buffer);
}

void AtExit() { cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); }

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  CUpti_SubscriberHandle subscriber;
  if (cuptiSubscribe(&subscriber, OnCallback, nullptr) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cupti floor: cuptiSubscribe failed\n");
    return 1;
  }
  const CUpti_CallbackId ids[] = {
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,         CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,            CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2,      CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
      CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz, CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
  };
  for (CUpti_CallbackId id : ids) cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  cuptiActivityRegisterCallbacks(OnBufferRequested, OnBufferCompleted);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  std::atexit(AtExit);
  return 1;
}
