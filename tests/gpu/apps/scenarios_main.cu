// The GPU tests' application: plain CUDA host code, one scenario per run.
// It knows nothing about smprof; tests/gpu/gpu_scenarios_test.cc runs it
// under smprof-run and checks the trace against the counts documented in
// kernels_opted.cu and kernels_recorder.cu.
#include <cuda.h>
#include <cuda_profiler_api.h>
#include <cupti.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/gpu/apps/kernels.h"

#define CHECK(call)                                                                                 \
  do {                                                                                              \
    cudaError_t err_ = (call);                                                                      \
    if (err_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(90);                                                                                \
    }                                                                                               \
  } while (0)

namespace {

int Basic() {  // marker_grid 4x128 (16 warps x 7 events) + a kernel of the plain module
  int* out;
  CHECK(cudaMalloc(&out, sizeof(int)));
  CHECK(cudaMemset(out, 0, sizeof(int)));
  LaunchMarkerGrid(4, 128, out, nullptr);
  LaunchPlain(out, nullptr);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int host = 0;
  CHECK(cudaMemcpy(&host, out, sizeof(int), cudaMemcpyDeviceToHost));
  return host == 4 * 128 * 2 ? 0 : 91;
}

int Streams() {  // 4 streams x 3 launches of count_kernel(n = 10..21), 2x64 threads (4 warps)
  std::vector<cudaStream_t> streams(4);
  for (auto& s : streams) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int n = 10;
  for (int round = 0; round < 3; ++round) {
    for (auto& s : streams) LaunchCount(2, 64, n++, 300000, s);
  }
  CHECK(cudaGetLastError());
  for (auto& s : streams) CHECK(cudaStreamSynchronize(s));
  for (auto& s : streams) CHECK(cudaStreamDestroy(s));
  return 0;
}

int Filter() {  // gemm_like_a(6) and other_b(9) twice each, 2x64 threads
  for (int i = 0; i < 2; ++i) {
    LaunchGemmLikeA(6, nullptr);
    LaunchOtherB(9, nullptr);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return 0;
}

int Graph() {  // graph of graph_k1 (2x64: 4 warps x 5) -> graph_k2 (3x32: 3 warps x 2), replayed 3 times
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  LaunchGraphK1(s);
  LaunchGraphK2(s);
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(s));
  return 0;
}

int Overflow() {  // 2 launches of flood(1000) on 264x256 threads: 2112 warps x 1000 events each
  for (int i = 0; i < 2; ++i) {
    LaunchFlood(264, 256, 1000, 0, nullptr);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
  }
  return 0;
}

int SmallWarps() {  // 3 launches of flood(2) on 256x256 threads (2048 warps x 2 events), a sync after each
  for (int i = 0; i < 3; ++i) {
    LaunchFlood(256, 256, 2, 0, nullptr);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
  }
  return 0;
}

int HighWater() {  // 12 launches of flood(20) on 66x256 (528 warps x 20), no sync until the end
  for (int i = 0; i < 12; ++i) LaunchFlood(66, 256, 20, 2000000, nullptr);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return 0;
}

// 24 launches of flood(360) on 132x256 (1056 warps x 360, ~6 MB each) on
// one stream, each spinning 2 ms after its events so that the GPU runs
// behind the launches: the first, synchronised (its harvest teaches what the
// kernel claims a warp), then 23 back to back, no sync until the end.
int Segments(int threads, int events) {
  LaunchFlood(132, threads, events, 2000000, nullptr);
  CHECK(cudaDeviceSynchronize());
  for (int i = 1; i < 24; ++i) LaunchFlood(132, threads, events, 2000000, nullptr);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return 0;
}

int DestroyedStream() {  // count_kernel(8) on a stream destroyed while it runs, then a device sync
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  LaunchCount(2, 64, 8, 200000, s);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaDeviceSynchronize());
  return 0;
}

int Threads() {  // two threads launch count_kernel(5) and (7) on their per-thread streams
  auto work = [](int n) {
    LaunchCount(2, 64, n, 100000, cudaStreamPerThread);
    if (cudaGetLastError() != cudaSuccess) std::exit(92);
  };
  std::thread a(work, 5), b(work, 7);
  a.join();
  b.join();
  CHECK(cudaDeviceSynchronize());
  return 0;
}

// 4 threads x 2 streams each: `launches` launches of count_kernel(2) on
// 1x64 threads (2 warps x 2 events) in all, each thread alternating its
// streams and synchronising both every 1,000 of its launches.
int ManyThreads(long launches) {
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([launches] {
      cudaStream_t s[2];
      for (auto& x : s) {
        if (cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking) != cudaSuccess) std::exit(93);
      }
      for (long i = 0; i < launches / kThreads; ++i) {
        LaunchCount(1, 64, 2, 0, s[i % 2]);
        if (i % 1000 == 999) {
          for (auto& x : s) {
            if (cudaStreamSynchronize(x) != cudaSuccess) std::exit(94);
          }
        }
      }
      for (auto& x : s) {
        if (cudaStreamSynchronize(x) != cudaSuccess || cudaStreamDestroy(x) != cudaSuccess) std::exit(95);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(cudaGetLastError());
  return 0;
}

// gemm_like_a(6) ten times and other_b(9) three times, interleaved, on one
// stream, synchronised once at the end (for --launches).
int Ranges() {
  for (int i = 0; i < 10; ++i) {
    LaunchGemmLikeA(6, nullptr);
    if (i % 3 == 0) LaunchOtherB(9, nullptr);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return 0;
}

// gemm_like_a(6) eight times; launches 3 to 5 between cudaProfilerStart and
// cudaProfilerStop (for --capture-range cudaProfilerApi).
int ProfilerWindow() {
  for (int i = 0; i < 8; ++i) {
    if (i == 3) CHECK(cudaProfilerStart());
    LaunchGemmLikeA(6, nullptr);
    if (i == 5) CHECK(cudaProfilerStop());
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return 0;
}

int DriverApi(const char* fatbin) {  // driver_kernel(9) on 2x64 threads through cuModuleLoad + cuLaunchKernel
  CHECK(cudaFree(nullptr));  // the runtime makes the primary context current
  CUmodule module;
  CUfunction f;
  if (cuModuleLoad(&module, fatbin) != CUDA_SUCCESS ||
      cuModuleGetFunction(&f, module, "driver_kernel") != CUDA_SUCCESS) {
    std::fprintf(stderr, "cannot load %s\n", fatbin);
    return 93;
  }
  int n = 9;
  void* args[] = {&n};
  if (cuLaunchKernel(f, 2, 1, 1, 64, 1, 1, 0, nullptr, args, nullptr) != CUDA_SUCCESS ||
      cuCtxSynchronize() != CUDA_SUCCESS) {
    return 94;
  }
  return cuModuleUnload(module) == CUDA_SUCCESS ? 0 : 95;
}

void CUPTIAPI IgnoreCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

int CuptiTaken() {  // the application holds CUPTI itself (like a framework profiler), then runs basic
  CUpti_SubscriberHandle subscriber;
  const CUptiResult r = cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(IgnoreCallback), nullptr);
  if (r != CUPTI_SUCCESS) {
    std::fprintf(stderr, "app: cuptiSubscribe failed (%d): someone else holds CUPTI\n", static_cast<int>(r));
    return 96;
  }
  return Basic();
}

int SilentBig() {  // 200 launches of a marker-free kernel of an opted-in module, then marker_grid, one sync
  int* out;
  CHECK(cudaMalloc(&out, sizeof(int)));
  for (int i = 0; i < 200; ++i) LaunchSilentBig(nullptr);
  LaunchMarkerGrid(4, 128, out, nullptr);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return 0;
}

int CaptureAfterEagerWork() {  // eager work on s, then s captures (relaxed mode) while another stream syncs
  cudaStream_t s, other;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  LaunchCount(2, 64, 3, 200000, s);
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  LaunchGraphK1(s);
  CHECK(cudaStreamSynchronize(other));  // a sync point while s captures
  cudaGraph_t graph;
  if (cudaStreamEndCapture(s, &graph) != cudaSuccess) {
    std::fprintf(stderr, "app: the capture was invalidated\n");
    return 97;
  }
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  return 0;
}

int UnloadThenReplay(const char* fatbin) {  // an unrelated module comes and goes, then 50 graph replays
  CHECK(cudaFree(nullptr));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  LaunchGraphK1(s);
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  CUmodule module;
  if (cuModuleLoad(&module, fatbin) != CUDA_SUCCESS || cuModuleUnload(module) != CUDA_SUCCESS) return 98;
  for (int i = 0; i < 50; ++i) {
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
  }
  return 0;
}

int ExitWhileRunning() {  // a profiled kernel still spinning when main returns
  int* flag;
  CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  int* device_flag;
  CHECK(cudaHostGetDevicePointer(&device_flag, flag, 0));
  LaunchWaitForFlag(device_flag, nullptr);
  CHECK(cudaGetLastError());
  return 0;
}

// one_range 4 times (2 blocks x 64 threads: 4 warps, one range each), a
// synchronisation ("good done" on stdout), then by `how`:
//   fault  fault_write writes through a bad pointer; the sync fails; exit 3
//   kill   SIGKILL two seconds later
//   kill-soon  SIGKILL 100 ms later
//   hang   stuck_warps (2 blocks x 3 warps) spins until killed; the program
//          waits for it
//   exit   returns 0 two seconds later (the reference)
int Die(const char* how) {
  int* out;
  CHECK(cudaMalloc(&out, sizeof(int)));
  CHECK(cudaMemset(out, 0, sizeof(int)));
  for (int i = 0; i < 4; ++i) LaunchOneRange(2, 64, out, nullptr);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::printf("good done\n");
  std::fflush(stdout);
  if (!std::strcmp(how, "fault")) {
    LaunchFaultWrite(reinterpret_cast<int*>(0x10), nullptr);
    const cudaError_t err = cudaDeviceSynchronize();
    std::fprintf(stderr, "fault: %s\n", cudaGetErrorString(err));
    return 3;
  }
  if (!std::strcmp(how, "hang")) {
    int* flag;
    CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
    *flag = 0;
    int* device_flag;
    CHECK(cudaHostGetDevicePointer(&device_flag, flag, 0));
    LaunchStuckWarps(2, device_flag, nullptr);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    return 0;
  }
  const bool soon = !std::strcmp(how, "kill-soon");
  std::this_thread::sleep_for(soon ? std::chrono::milliseconds(100) : std::chrono::milliseconds(2000));
  if (soon || !std::strcmp(how, "kill")) std::raise(SIGKILL);
  return 0;
}

int ExitNoSync(int code) {  // marker_grid, then exit without synchronising
  int* out;
  CHECK(cudaMalloc(&out, sizeof(int)));
  LaunchMarkerGrid(4, 128, out, nullptr);
  CHECK(cudaGetLastError());
  return code;
}

// --- The recorder's delicate paths (kernels_recorder.cu) ---------------------
// Each scenario launches its kernels with and without SMPROF_CONTEXT() on the
// default stream and synchronises once; the per-warp counts are documented in
// kernels_recorder.cu and checked by the GpuScenarios.Recorder* tests.

int* ZeroedInts(size_t n) {
  int* p;
  CHECK(cudaMalloc(&p, n * sizeof(int)));
  CHECK(cudaMemset(p, 0, n * sizeof(int)));
  return p;
}

int Finish(int* sink) {
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  if (sink != nullptr) CHECK(cudaFree(sink));
  return 0;
}

// Every device API kernel (kernels_device_api.cu): 2 blocks, 40 iterations.
int DeviceApi() {
  int* sink = ZeroedInts(128);
  LaunchDeviceApi(2, 40, sink, nullptr);
  return Finish(sink);
}

int RecorderDivergentHalves() {  // divergent_halves<true>, then <false>, (5 iterations) on 4x64 threads
  int* sink = ZeroedInts(4 * 64);
  for (const bool ctx : {true, false}) LaunchDivergentHalves(ctx, 4, 64, 5, sink, nullptr);
  return Finish(sink);
}

int RecorderEarlyExit() {  // early_exit<true>, then <false>, on 4x128 threads
  int* sink = ZeroedInts(4 * 128);
  for (const bool ctx : {true, false}) LaunchEarlyExit(ctx, 4, sink, nullptr);
  return Finish(sink);
}

int RecorderPartialWarps() {  // partial_warps<true|false> on 3x48, then on 3x100 threads
  int* sink = ZeroedInts(3 * 100);
  for (const int threads : {48, 100}) {
    for (const bool ctx : {true, false}) LaunchPartialWarps(ctx, 3, threads, sink, nullptr);
  }
  return Finish(sink);
}

int RecorderBigBlocks() {  // big_blocks<true>, then <false>, on 3x1024 threads
  int* sink = ZeroedInts(3 * 1024);
  for (const bool ctx : {true, false}) LaunchBigBlocks(ctx, 3, sink, nullptr);
  return Finish(sink);
}

// many_markers<true|false>(2000) on 4x128 threads, then interleaved_markers<true|false>(2000, 200 cycles)
// on 2x64 threads.
int RecorderManyMarkers() {
  for (const bool ctx : {true, false}) LaunchManyMarkers(ctx, 4, 128, 2000, nullptr);
  for (const bool ctx : {true, false}) LaunchInterleavedMarkers(ctx, 2, 64, 2000, 200, nullptr);
  return Finish(nullptr);
}

int RecorderDeviceFunctions() {  // device_functions<true>, then <false>, on 2x64 threads
  int* sink = ZeroedInts(2 * 64);
  for (const bool ctx : {true, false}) LaunchDeviceFunctions(ctx, 2, 64, sink, nullptr);
  return Finish(sink);
}

// cycle_ranges(1000, 10000, 100000) on 8x32 threads; writes one line per
// spin to `path`: "block i cycles", the cycles spin i really took.
int RecorderCycleRanges(const char* path) {
  constexpr int kBlocks = 8;
  unsigned long long* spun;
  CHECK(cudaMalloc(&spun, 3 * kBlocks * sizeof(unsigned long long)));
  LaunchCycleRanges(kBlocks, 1000, 10000, 100000, spun, nullptr);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  unsigned long long host[3 * kBlocks];
  CHECK(cudaMemcpy(host, spun, sizeof(host), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(spun));
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::fprintf(stderr, "app: cannot write %s\n", path);
    return 99;
  }
  for (int b = 0; b < kBlocks; ++b) {
    for (int i = 0; i < 3; ++i) std::fprintf(f, "%d %d %llu\n", b, i, host[3 * b + i]);
  }
  return std::fclose(f) == 0 ? 0 : 99;
}

// cross_sm_ticks(8) on (4 x SM count) x 128 threads; writes one line per tick to `path`:
// "block warp i globaltimer_ns", the %globaltimer read right before the tick's marker.
int RecorderCrossSm(const char* path) {
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int blocks = 4 * sms, threads = 128, warps = threads / 32, n = 8;
  const size_t count = static_cast<size_t>(blocks) * warps * n;
  unsigned long long* out;
  CHECK(cudaMalloc(&out, count * sizeof(unsigned long long)));
  CHECK(cudaMemset(out, 0, count * sizeof(unsigned long long)));
  LaunchCrossSmTicks(blocks, threads, n, out, nullptr);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> host(count);
  CHECK(cudaMemcpy(host.data(), out, count * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(out));
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::fprintf(stderr, "app: cannot write %s\n", path);
    return 99;
  }
  for (int b = 0; b < blocks; ++b) {
    for (int w = 0; w < warps; ++w) {
      for (int i = 0; i < n; ++i) {
        std::fprintf(f, "%d %d %d %llu\n", b, w, i, host[(static_cast<size_t>(b) * warps + w) * n + i]);
      }
    }
  }
  if (std::fclose(f) != 0) return 99;
  for (const unsigned long long t : host) {
    if (t == 0) return 89;  // a tick the kernel never wrote
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* scenario = argc > 1 ? argv[1] : "";
  if (!std::strcmp(scenario, "basic")) return Basic();
  if (!std::strcmp(scenario, "streams")) return Streams();
  if (!std::strcmp(scenario, "filter")) return Filter();
  if (!std::strcmp(scenario, "graph")) return Graph();
  if (!std::strcmp(scenario, "overflow")) return Overflow();
  if (!std::strcmp(scenario, "highwater")) return HighWater();
  if (!std::strcmp(scenario, "segments")) {
    return Segments(argc > 3 ? std::atoi(argv[2]) : 256, argc > 3 ? std::atoi(argv[3]) : 360);
  }
  if (!std::strcmp(scenario, "small-warps")) return SmallWarps();
  if (!std::strcmp(scenario, "exit7")) return ExitNoSync(7);
  if (!std::strcmp(scenario, "die") && argc > 2) return Die(argv[2]);
  if (!std::strcmp(scenario, "destroyed-stream")) return DestroyedStream();
  if (!std::strcmp(scenario, "threads")) return Threads();
  if (!std::strcmp(scenario, "many-threads")) return ManyThreads(argc > 2 ? std::atol(argv[2]) : 100000);
  if (!std::strcmp(scenario, "ranges")) return Ranges();
  if (!std::strcmp(scenario, "profiler-window")) return ProfilerWindow();
  if (!std::strcmp(scenario, "driver-api") && argc > 2) return DriverApi(argv[2]);
  if (!std::strcmp(scenario, "cupti-taken")) return CuptiTaken();
  if (!std::strcmp(scenario, "silent-big")) return SilentBig();
  if (!std::strcmp(scenario, "capture-after-eager")) return CaptureAfterEagerWork();
  if (!std::strcmp(scenario, "unload-replay") && argc > 2) return UnloadThenReplay(argv[2]);
  if (!std::strcmp(scenario, "exit-running")) return ExitWhileRunning();
  if (!std::strcmp(scenario, "device-api")) return DeviceApi();
  if (!std::strcmp(scenario, "recorder-divergent-halves")) return RecorderDivergentHalves();
  if (!std::strcmp(scenario, "recorder-early-exit")) return RecorderEarlyExit();
  if (!std::strcmp(scenario, "recorder-partial-warps")) return RecorderPartialWarps();
  if (!std::strcmp(scenario, "recorder-big-blocks")) return RecorderBigBlocks();
  if (!std::strcmp(scenario, "recorder-many-markers")) return RecorderManyMarkers();
  if (!std::strcmp(scenario, "recorder-device-functions")) return RecorderDeviceFunctions();
  if (!std::strcmp(scenario, "recorder-cycle-ranges") && argc > 2) return RecorderCycleRanges(argv[2]);
  if (!std::strcmp(scenario, "recorder-cross-sm") && argc > 2) return RecorderCrossSm(argv[2]);
  std::fprintf(
      stderr,
      "usage: %s basic|streams|filter|graph|overflow|highwater|segments [threads events]|small-warps|exit7|die fault|kill|kill-soon|hang|exit|destroyed-stream|threads|"
      "many-threads [launches]|ranges|profiler-window|driver-api "
      "<fatbin>|cupti-taken|silent-big|capture-after-eager|unload-replay <fatbin>|exit-running|"
      "device-api|recorder-divergent-halves|recorder-early-exit|recorder-partial-warps|recorder-big-blocks|"
      "recorder-many-markers|recorder-device-functions|recorder-cycle-ranges <file>|recorder-cross-sm <file>\n",
      argv[0]);
  return 2;
}
