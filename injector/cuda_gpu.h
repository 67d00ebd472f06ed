// CudaGpu: the Gpu interface on the CUDA driver and CUPTI (see gpu.h).
//
// Every memory operation runs in relaxed stream-capture mode, so smprof's own
// copies never break an application's global-mode capture on the same
// thread; errors are logged once per call site, then every 1000th; waits poll
// with a deadline. Per context it keeps the clock probes (a PTX module loaded
// at setup, on its own stream).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "injector/gpu.h"

namespace smprof::injector {

class CudaGpu final : public Gpu {
 public:
  // `on_first_device`: runs once, before the first device is set up (CUPTI's
  // kernel records start there: every launch pays for them).
  explicit CudaGpu(std::function<void()> on_first_device);
  ~CudaGpu() override;

  uint64_t Now() override;
  bool PushContext(GpuCtx ctx) override;
  void PopContext() override;
  bool SetUpDevice(DeviceFacts* facts) override;
  bool DeviceMemory(uint64_t* free_bytes, uint64_t* total_bytes) override;
  bool Allocate(size_t bytes, DevPtr* ptr) override;
  void Free(DevPtr ptr) override;
  void* AllocatePinned(size_t bytes) override;
  void FreePinned(void* ptr) override;
  bool CreateStream(GpuStream* stream) override;
  void DestroyStream(GpuStream stream) override;
  bool CopyToDevice(DevPtr dst, const void* src, size_t bytes, GpuStream stream) override;
  bool CopyToHost(void* dst, DevPtr src, size_t bytes, GpuStream stream) override;
  bool CopyOnDevice(DevPtr dst, DevPtr src, size_t bytes, GpuStream stream) override;
  bool Fill(DevPtr dst, uint8_t value, size_t bytes, GpuStream stream) override;
  bool Wait(GpuStream stream, std::chrono::nanoseconds timeout) override;
  StreamState Query(GpuStream stream) override;
  bool CreateEvent(GpuEvent* event) override;
  void DestroyEvent(GpuEvent event) override;
  bool RecordEvent(GpuEvent event, GpuStream stream) override;
  StreamState QueryEvent(GpuEvent event) override;
  bool WaitEvent(GpuEvent event, std::chrono::nanoseconds timeout) override;
  bool Capturing(GpuStream stream) override;
  bool SynchronizeContext() override;
  GpuCtx StreamContext(GpuStream stream) override;
  bool FunctionModule(GpuFunction f, GpuModule* module) override;
  Lookup ModuleGlobal(GpuModule module, const char* name, DevPtr* ptr, size_t* bytes) override;
  std::string ReadString(DevPtr address, GpuStream stream) override;
  bool ProbeClock(uint64_t* globaltimer, uint64_t* launched_ns) override;
  bool GraphKernels(void* graph, std::vector<GraphKernel>* kernels) override;
  void FlushActivity(bool incomplete_too, bool if_free = false) override;
  std::string ExecutionError(int result) override;

 private:
  struct Probes;
  std::function<void()> on_first_device_;
  std::once_flag first_device_;
  std::mutex mu_;
  std::unordered_map<GpuCtx, std::unique_ptr<Probes>> probes_;
};

}  // namespace smprof::injector
