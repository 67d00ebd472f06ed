// Benchmark: the cost of one smprof marker on the recording lane.
//
// Each warp times a loop of N markers with clock64() on its lane 0 and the
// same loop without markers; (marked - empty) / N is the per-event cost in
// SM cycles. Run it twice, side by side:
//   ./smprof_bench_event_cost              markers inactive: one load + branch
//   smprof-run -- ./smprof_bench_event_cost  markers recording
// Configurations: one warp on one SM (no contention), one warp per SM, and
// a full GPU (every SM filled with 1024-thread blocks).
#include <smprof/smprof.cuh>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));             \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

constexpr int kEvents = 64;

__global__ void marked_loop(long long* cycles) {
  const long long t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < kEvents; ++i) {
    SMPROF_INSTANT("bench");
    asm volatile("" ::: "memory");
  }
  const long long t1 = clock64();
  if (threadIdx.x % 32 == 0) cycles[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = t1 - t0;
}

__global__ void empty_loop(long long* cycles) {
  const long long t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < kEvents; ++i) asm volatile("" ::: "memory");
  const long long t1 = clock64();
  if (threadIdx.x % 32 == 0) cycles[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = t1 - t0;
}

struct Result {
  double median_cycles;
  double mean_cycles;
};

Result Measure(void (*kernel)(long long*), int blocks, int threads, long long* d, int reps) {
  const int warps = blocks * threads / 32;
  std::vector<long long> all;
  std::vector<long long> h(warps);
  for (int r = 0; r < reps; ++r) {
    kernel<<<blocks, threads>>>(d);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h.data(), d, warps * sizeof(long long), cudaMemcpyDeviceToHost));
    if (r > 0) all.insert(all.end(), h.begin(), h.end());  // first run warms up
  }
  std::sort(all.begin(), all.end());
  double sum = 0;
  for (long long v : all) sum += static_cast<double>(v);
  return {static_cast<double>(all[all.size() / 2]), sum / static_cast<double>(all.size())};
}

int main() {
  int sms = 0, clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  long long* d;
  CHECK(cudaMalloc(&d, 1 << 20));
  struct Config {
    const char* name;
    int blocks, threads;
  } configs[] = {{"1 warp", 1, 32}, {"1 warp/SM", sms, 32}, {"full GPU", sms * 2, 1024}};
  std::printf("smprof event cost: %d events per warp per run, %d SMs, clock %.0f MHz\n", kEvents, sms,
              clock_khz / 1000.0);
  std::printf("%-12s %14s %14s %16s %12s\n", "config", "empty cyc/it", "marker cyc/it", "cost cyc/event",
              "cost ns");
  for (const Config& c : configs) {
    const Result e = Measure(empty_loop, c.blocks, c.threads, d, 6);
    const Result m = Measure(marked_loop, c.blocks, c.threads, d, 6);
    const double cost = (m.median_cycles - e.median_cycles) / kEvents;
    std::printf("%-12s %14.1f %14.1f %16.1f %12.1f\n", c.name, e.median_cycles / kEvents, m.median_cycles / kEvents,
                cost, cost / (clock_khz / 1e6));
  }
  CHECK(cudaFree(d));
  return 0;
}
