#include "injector/calibration.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "injector/calibration_layout.h"
#include "smprof/wire.h"

namespace smprof::injector {
namespace {

#include "injector/calibration_fatbin.inc"  // smprof_calibration_fatbin, generated (injector/CMakeLists.txt)

using namespace calibration;  // NOLINT(google-build-using-namespace): the result slots

constexpr char kKernelName[] = "smprof_calibrate";
constexpr uint64_t kSpinNs = 200000;
// 8 chunks of 64 KiB after the aligned chunk 0: 7 for the recorder, the last
// for the kernel's results; one more chunk of room to align chunk 0.
constexpr uint32_t kChunkShift = 16;
constexpr uint32_t kChunks = 8;
constexpr size_t kArenaBytes = (kChunks + 1) << kChunkShift;

uint32_t Centicycles(uint64_t marked, uint64_t empty) {
  if (marked <= empty) return 0;
  return static_cast<uint32_t>(std::min<double>((marked - empty) * 100.0 / kEvents, UINT32_MAX));
}

// What the calibration holds while it runs; released only when nothing on
// the GPU can still use it.
struct Resources {
  CUmodule module = nullptr;
  CUdeviceptr arena = 0;
  unsigned long long* results = nullptr;  // pinned: 2 x kSlots
  bool releasable = true;
  ~Resources() {
    if (!releasable) return;
    if (results != nullptr) cuMemFreeHost(results);
    if (arena != 0) cuMemFree(arena);
    if (module != nullptr) cuModuleUnload(module);
  }
};

bool Fail(std::string* why, const char* what, CUresult r) {
  const char* text = nullptr;
  cuGetErrorName(r, &text);
  *why = std::string(what) + " failed: " + (text != nullptr ? text : "unknown error");
  return false;
}

}  // namespace

bool Calibrate(CUstream stream, const std::string& arena_symbol, const std::function<bool(CUstream)>& wait_idle,
               Calibration* out, std::string* why) {
  *out = Calibration{};
  // cuModuleLoadData wants the image 8-byte aligned; the generated array is a char array.
  std::vector<uint64_t> image((sizeof(smprof_calibration_fatbin) + 7) / 8);
  std::memcpy(image.data(), smprof_calibration_fatbin, sizeof(smprof_calibration_fatbin));
  Resources res;
  CUresult r;
  CUfunction kernel = nullptr;
  CUdeviceptr ref_address = 0;
  size_t ref_bytes = 0;
  if ((r = cuModuleLoadData(&res.module, image.data())) != CUDA_SUCCESS) return Fail(why, "loading the module", r);
  if ((r = cuModuleGetFunction(&kernel, res.module, kKernelName)) != CUDA_SUCCESS ||
      (r = cuModuleGetGlobal(&ref_address, &ref_bytes, res.module, arena_symbol.c_str())) != CUDA_SUCCESS) {
    return Fail(why, "finding the kernel", r);
  }
  if (ref_bytes != sizeof(wire::ArenaRef)) {
    *why = "the module's arena reference has an unexpected size";
    return false;
  }
  if ((r = cuMemAlloc(&res.arena, kArenaBytes)) != CUDA_SUCCESS ||
      (r = cuMemHostAlloc(reinterpret_cast<void**>(&res.results), 2 * kSlots * sizeof(unsigned long long), 0)) !=
          CUDA_SUCCESS) {
    return Fail(why, "allocating memory", r);
  }
  const uint64_t chunk = uint64_t{1} << kChunkShift;
  wire::ArenaRef ref{};
  ref.arena = res.arena;
  ref.chunks = (res.arena + sizeof(wire::ArenaHeader) + chunk - 1) / chunk * chunk;
  ref.num_chunks = kChunks - 1;  // the last chunk holds the results
  ref.chunk_shift = kChunkShift;
  ref.warp_mask = ~0u;
  ref.epoch = 1;
  static const wire::ArenaRef kIdle{};
  CUdeviceptr results = ref.chunks + (static_cast<uint64_t>(ref.num_chunks) << kChunkShift);
  uint64_t spin = kSpinNs;
  void* args[] = {&results, &spin};
  const bool queued =
      (r = cuMemsetD8Async(res.arena, 0, kArenaBytes, stream)) == CUDA_SUCCESS &&
      (r = cuMemcpyHtoDAsync(ref_address, &ref, sizeof(ref), stream)) == CUDA_SUCCESS &&
      (r = cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, stream, args, nullptr)) == CUDA_SUCCESS &&
      (r = cuMemcpyDtoHAsync(res.results, results, kSlots * sizeof(unsigned long long), stream)) == CUDA_SUCCESS &&
      (r = cuMemcpyHtoDAsync(ref_address, &kIdle, sizeof(kIdle), stream)) == CUDA_SUCCESS &&
      (r = cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, stream, args, nullptr)) == CUDA_SUCCESS &&
      (r = cuMemcpyDtoHAsync(res.results + kSlots, results, kSlots * sizeof(unsigned long long), stream)) ==
          CUDA_SUCCESS;
  if (!wait_idle(stream)) {
    res.releasable = false;  // the GPU may still run it: leave its memory be
    *why = queued ? "the GPU was too busy to run it" : "queueing it failed";
    return false;
  }
  if (!queued) return Fail(why, "queueing the calibration", r);
  const unsigned long long* rec = res.results;
  const unsigned long long* idle = res.results + kSlots;
  out->cost_context_centicycles = Centicycles(rec[kContext], rec[kEmpty]);
  out->cost_default_centicycles = Centicycles(rec[kDefault], rec[kEmpty]);
  out->cost_diverged_centicycles = Centicycles(rec[kDiverged], rec[kDivergedEmpty]);
  out->cost_idle_centicycles = Centicycles(idle[kDefault], idle[kEmpty]);
  if (rec[kTime1] > rec[kTime0] && rec[kClock1] > rec[kClock0]) {
    const double khz = static_cast<double>(rec[kClock1] - rec[kClock0]) * 1e6 /
                       static_cast<double>(rec[kTime1] - rec[kTime0]);
    out->sm_clock_khz = static_cast<uint32_t>(std::min<double>(khz + 0.5, UINT32_MAX));
  }
  return true;
}

}  // namespace smprof::injector
