// Benchmark: the whole path, device -> injector -> shared memory ->
// collector -> trace, on a kernel that records as densely as a GEMM's inner
// loop (issue 8's throughput, stall and timing figures).
//
//   smprof_bench_end_to_end [launches (default 10)] [ranges per warp (default 512)]
//                           [blocks per SM (default 8)] [buffer MB (default 1024)]
//
// The program runs itself three times as a child: plainly, and under
// `smprof-run` with each backlog policy, `--backlog wait` (every event kept,
// the application held while the host catches up) and `--backlog drop` (never
// held longer than the copy; what overflows the arena dropped, counted)
// (protobuf trace, statistics beside it; smprof-run from $SMPROF_RUN, else
// the one beside this binary). The child launches e2e_ranges, 256-thread
// blocks whose every warp records `ranges` ranges around a few FMAs, in two
// phases:
//   synced   each launch between two CUDA events, then cudaEventSynchronize:
//            the event-timed kernel duration, and the harvest at each sync;
//   burst    the same launches back to back with one synchronisation at the
//            end: the arena fills and forced drains come at launch time.
// It prints its own wall time and, per phase, the longest launch call and
// the longest synchronisation call (where the application is held); with
// SMPROF_BENCH_VERBOSE set, every synced launch's figures on stderr. The
// parent prints the runs side by side with:
//   - the application's wall time, plain and profiled, and their ratios;
//   - smprof-run's wall time (until the trace is written), the events the
//     statistics counted and lost, and the end-to-end rate: events per
//     second of time smprof added (smprof-run wall - plain application wall);
//   - the event-timed kernel duration against the CUPTI-timed one (the
//     trace's kernel spans, from the statistics): they agree when nothing
//     outside the kernel shows up in an event-timed launch.
#include <cuda_runtime.h>
#include <smprof/smprof.cuh>

#include "bench/child_runs.h"
#include "bench/cuda_check.h"
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

using smprof::bench::Now;

__global__ void e2e_ranges(float* out, int ranges) {
  float a = threadIdx.x, b = 1.0001f;
  for (int r = 0; r < ranges; ++r) {
    SMPROF_RANGE("step") {
#pragma unroll
      for (int i = 0; i < 8; ++i) a = a * b + 0.5f;
    }
  }
  if (a == 42.0f) out[0] = a;  // keeps the loop
}

__global__ void e2e_warm_up() { SMPROF_INSTANT("warm"); }


int Child(int launches, int ranges, int blocks_per_sm) {
  const double start = Now();
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int blocks = sms * blocks_per_sm;
  float* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  e2e_warm_up<<<1, 32, 0, s>>>();  // module loaded, arena set up
  CHECK(cudaStreamSynchronize(s));

  // SMPROF_BENCH_VERBOSE: each synced launch's figures on stderr.
  const bool verbose = std::getenv("SMPROF_BENCH_VERBOSE") != nullptr;
  double longest_launch = 0, longest_sync = 0, event_ms_sum = 0, event_ms_min = 1e30;
  for (int i = 0; i < launches; ++i) {
    CHECK(cudaEventRecord(e0, s));
    const double l0 = Now();
    e2e_ranges<<<blocks, 256, 0, s>>>(out, ranges);
    const double l1 = Now();
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaEventSynchronize(e1));
    const double l2 = Now();
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    event_ms_sum += ms;
    event_ms_min = std::min<double>(event_ms_min, ms);
    longest_launch = std::max(longest_launch, l1 - l0);
    longest_sync = std::max(longest_sync, l2 - l1);
    if (verbose) {
      std::fprintf(stderr, "synced launch %d: launch call %.3f ms, event-timed %.3f ms, record + sync %.3f ms\n", i,
                   (l1 - l0) * 1e3, ms, (l2 - l1) * 1e3);
    }
  }
  std::printf("synced-launch-max-ms %.4f\nsynced-sync-max-ms %.4f\n", longest_launch * 1e3, longest_sync * 1e3);
  std::printf("event-ms-mean %.5f\nevent-ms-min %.5f\n", event_ms_sum / launches, event_ms_min);

  double burst_launch = 0;
  const double b0 = Now();
  for (int i = 0; i < launches; ++i) {
    const double l0 = Now();
    e2e_ranges<<<blocks, 256, 0, s>>>(out, ranges);
    burst_launch = std::max(burst_launch, Now() - l0);
  }
  const double b1 = Now();
  CHECK(cudaStreamSynchronize(s));
  const double b2 = Now();
  std::printf("burst-launch-max-ms %.4f\nburst-sync-ms %.4f\nburst-ms %.4f\n", burst_launch * 1e3, (b2 - b1) * 1e3,
              (b2 - b0) * 1e3);
  std::printf("events %.0f\n", 2.0 * ranges * (blocks * 8.0) * (2.0 * launches) + 1);
  CHECK(cudaFree(out));
  std::printf("app-wall-s %.5f\n", Now() - start);
  return 0;
}

}  // namespace

using smprof::bench::RunChild;
using smprof::bench::SelfPath;

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--child") == 0) {
    return Child(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]));
  }
  const std::string launches = argc > 1 ? argv[1] : "10";
  const std::string ranges = argc > 2 ? argv[2] : "512";
  const std::string blocks = argc > 3 ? argv[3] : "8";
  const std::string buffer_mb = argc > 4 ? argv[4] : "1024";
  const std::string self = SelfPath();
  const char* env = std::getenv("SMPROF_RUN");
  const std::string run = env != nullptr ? env : self.substr(0, self.rfind('/') + 1) + "smprof-run";
  double plain_wall = 0;
  const auto plain = RunChild({self, "--child", launches, ranges, blocks}, &plain_wall);

  // One profiled run per backlog policy (SMPROF_BACKLOG: wait holds the
  // application while the host catches up, drop never holds it longer than
  // the copy).
  struct Profiled {
    std::map<std::string, double> child;
    double wall = 0, events = 0, lost = -1, trace_bytes = 0, span_ns = 0, kernel_launches = 0;
  };
  const auto profile = [&](const char* backlog, Profiled* out) {
    const std::string trace = "/tmp/smprof-bench-e2e-" + std::to_string(getpid()) + ".pftrace";
    out->child = RunChild({run, "-q", "--force", "-o", trace, "--buffer-mb", buffer_mb, "--backlog", backlog, "--",
                           self, "--child", launches, ranges, blocks},
                          &out->wall);
    nlohmann::json stats;
    try {
      std::ifstream in(trace + ".stats.json");
      in >> stats;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "FAILED: reading %s.stats.json: %s\n", trace.c_str(), e.what());
      return false;
    }
    std::ifstream trace_file(trace, std::ios::binary | std::ios::ate);
    out->trace_bytes = static_cast<double>(trace_file.tellg());
    for (const char* suffix : {"", ".stats.json", ".stats.csv"}) unlink((trace + suffix).c_str());
    for (const auto& k : stats["kernels"]) {
      if (k["kernel"].get<std::string>().find("e2e_ranges") == std::string::npos) continue;
      out->span_ns += k["span_ns"].get<double>();
      out->kernel_launches += k["launches"].get<double>();
    }
    out->events = 2 * stats["slices"].get<double>() + stats["instants"].get<double>();
    out->lost = stats["lost_events"].is_number() ? stats["lost_events"].get<double>() : -1;
    return true;
  };
  Profiled wait, drop;
  if (!profile("wait", &wait) || !profile("drop", &drop)) return 1;

  std::printf("end to end: %s launches x 2 phases, %s ranges per warp, %s blocks of 8 warps per SM, %s MB arena\n",
              launches.c_str(), ranges.c_str(), blocks.c_str(), buffer_mb.c_str());
  std::printf("%-40s %10s %12s %7s %12s %7s\n", "measure", "plain", "backlog wait", "ratio", "backlog drop", "ratio");
  const auto row = [&](const char* name, const char* key) {
    const double a = plain.at(key), b = wait.child.at(key), c = drop.child.at(key);
    std::printf("%-40s %10.3f %12.3f %7.2f %12.3f %7.2f\n", name, a, b, a > 0 ? b / a : 0.0, c, a > 0 ? c / a : 0.0);
  };
  row("application wall time (s)", "app-wall-s");
  row("synced: longest launch call (ms)", "synced-launch-max-ms");
  row("synced: longest sync call (ms)", "synced-sync-max-ms");
  row("synced: event-timed kernel, mean (ms)", "event-ms-mean");
  row("synced: event-timed kernel, min (ms)", "event-ms-min");
  row("burst: longest launch call (ms)", "burst-launch-max-ms");
  row("burst: final sync (ms)", "burst-sync-ms");
  row("burst: whole phase (ms)", "burst-ms");
  const double expected = wait.child.at("events");
  bool exact = true;
  for (const auto& [name, r] : {std::pair<const char*, const Profiled&>{"wait", wait}, {"drop", drop}}) {
    const double added = r.wall - plain.at("app-wall-s");
    std::printf("backlog %s: smprof-run wall time, until the trace is written: %.3f s (%.2fx the plain application)\n",
                name, r.wall, r.wall / plain.at("app-wall-s"));
    std::printf("backlog %s: events: %.0f in the statistics (%.0f recorded by the kernels), %.0f lost; trace %.1f MB, "
                "%.2f B/event\n",
                name, r.events, expected, r.lost, r.trace_bytes / 1e6, r.trace_bytes / std::max(1.0, r.events));
    std::printf("backlog %s: end-to-end rate: %.1f M events per second of added time (%.3f s added)\n", name,
                r.events / added / 1e6, added);
    if (r.kernel_launches > 0) {
      std::printf("backlog %s: CUPTI-timed kernel, mean over its %.0f launches: %.5f ms; event-timed (synced) / "
                  "CUPTI-timed: %.3f (min %.3f)\n",
                  name, r.kernel_launches, r.span_ns / r.kernel_launches / 1e6,
                  r.child.at("event-ms-mean") / (r.span_ns / r.kernel_launches / 1e6),
                  r.child.at("event-ms-min") / (r.span_ns / r.kernel_launches / 1e6));
    }
    // wait keeps every event; drop keeps or counts every one.
    exact &= r.lost >= 0 && (name == std::string("wait") ? r.lost == 0 && r.events == expected
                                                         : r.events + r.lost == expected);
  }
  std::printf("(targets, issue 8: >= 50 M events/s end to end; no stall beyond the copy; event- and CUPTI-timed agree)\n");
  return exact ? 0 : 2;
}
