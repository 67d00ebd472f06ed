// GPU tests: run tests/gpu/apps under the real smprof-run and check the trace
// against the exact event counts documented in apps/kernels_opted.cu, the
// GPU identity smprof records, and smprof's behaviour beside other CUDA
// tools (compute-sanitizer, Nsight Compute, torch.profiler).
//
// Without a GPU every test skips with a visible message; with
// SMPROF_REQUIRE_GPU=1 a missing GPU (or tool) fails instead, so that a run
// meant to prove the GPU path cannot pass by skipping (scripts/test.sh sets
// it where nvidia-smi sees a GPU).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace {

using nlohmann::json;

std::string BuildDir() {
  const char* d = std::getenv("SMPROF_BUILD_DIR");
  return d ? d : ".";
}

// Runs `command` through /bin/sh with its stdout and stderr in files: its
// own process group, default signal dispositions, and the whole group killed
// after `timeout` (tests/support/subprocess.h). Returns the exit code (-1 on
// timeout).
int Shell(const std::string& command, const std::string& out_path, const std::string& err_path,
          std::chrono::seconds timeout = std::chrono::seconds(300)) {
  smprof::testing::ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", command};
  spec.stdout_path = out_path;
  spec.stderr_path = err_path;
  return smprof::testing::RunProcess(spec, timeout);
}

bool Succeeds(const std::string& command) { return Shell(command, "/dev/null", "/dev/null") == 0; }

int GpuCount() {
  char templ[] = "/tmp/smprof-gpus-XXXXXX";
  const int fd = mkstemp(templ);
  if (fd < 0) return 0;
  close(fd);
  Shell("nvidia-smi -L", templ, "/dev/null");
  std::ifstream in(templ);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind("GPU ", 0) == 0;
  unlink(templ);
  return n;
}

bool Required() {
  const char* v = std::getenv("SMPROF_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

// Skips visibly without a GPU; with SMPROF_REQUIRE_GPU=1 that is a failure.
#define REQUIRE_GPU()                                                                         \
  do {                                                                                        \
    if (GpuCount() == 0) {                                                                    \
      if (Required()) FAIL() << "no NVIDIA GPU here (SMPROF_REQUIRE_GPU=1 forbids skipping)"; \
      GTEST_SKIP() << "no NVIDIA GPU here (nvidia-smi -L failed): GPU test skipped "          \
                      "(set SMPROF_REQUIRE_GPU=1 to make this a failure)";                    \
    }                                                                                         \
  } while (0)

// Skips visibly when the machine lacks what one test needs beyond a GPU (a
// second GPU, a tool): that is the machine, not a broken setup.
#define SKIP_UNLESS(ok, why)                       \
  do {                                             \
    if (!(ok)) GTEST_SKIP() << why << ": skipped"; \
  } while (0)

struct Thread {
  std::string name;
  std::vector<json> events;  // X and i events
};
struct LaunchGroup {
  std::string name;
  std::map<int64_t, Thread> threads;
  int Warps() const { return static_cast<int>(threads.size()) - 1; }  // minus the CUPTI kernel track
};
struct ProfiledRun {
  int exit_code = -1;
  std::string stderr_text;
  std::string stdout_text;
  std::map<int64_t, std::string> process_names;  // every process track, by pid
  std::map<int64_t, LaunchGroup> launches;       // pid -> group, launch groups only
  json summary_event;                            // the run summary instant's args
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `[outer] smprof-run <args> -- [app_prefix] smprof_gpu_scenarios <scenario>`
// and parses the trace.
ProfiledRun Profile(const std::string& scenario, const std::string& args = "", const std::string& app_prefix = "",
                    const std::string& outer = "") {
  char dir_template[] = "/tmp/smprof-gpu-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string trace = dir + "/trace.json";
  const std::string err = dir + "/stderr.txt";
  const std::string cmd = outer + " " + BuildDir() + "/bin/smprof-run -o " + trace + " " + args + " -- " + app_prefix +
                          " " + BuildDir() + "/bin/smprof_gpu_scenarios " + scenario;
  ProfiledRun run;
  run.exit_code = Shell(cmd, dir + "/stdout.txt", err);
  run.stderr_text = Slurp(err);
  run.stdout_text = Slurp(dir + "/stdout.txt");
  std::string text = Slurp(trace);
  if (text.empty()) text = "[]";  // a run smprof stepped aside from writes no trace
  while (!text.empty() && (text.back() == '\n' || text.back() == ',')) text.pop_back();
  if (!text.empty() && text.back() != ']') text += "]";
  const json events = json::parse(text, nullptr, false);
  EXPECT_TRUE(events.is_array()) << "trace " << trace << " does not parse";
  if (!events.is_array()) return run;
  std::map<int64_t, std::string> process_names;
  for (const json& e : events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") {
      process_names[e["pid"].get<int64_t>()] = e["args"]["name"].get<std::string>();
    }
  }
  for (const auto& [pid, name] : process_names) {
    if (!name.empty() && name[0] == '#') run.launches[pid].name = name;
  }
  run.process_names = process_names;
  for (const json& e : events) {
    if (!e.contains("pid") || !e.contains("tid")) continue;
    const int64_t pid = e["pid"].get<int64_t>();
    const std::string ph = e.value("ph", "");
    if (ph == "i" && e.value("name", "").find("summary") != std::string::npos) run.summary_event = e["args"];
    auto it = run.launches.find(pid);
    if (it == run.launches.end()) continue;
    Thread& t = it->second.threads[e["tid"].get<int64_t>()];
    if (ph == "M" && e.value("name", "") == "thread_name") t.name = e["args"]["name"].get<std::string>();
    if (ph == "X" || ph == "i") t.events.push_back(e);
  }
  return run;
}

bool IsWarp(const Thread& t) { return t.name.find("warp") != std::string::npos; }

int Count(const Thread& t, const std::string& ph, const std::string& name) {
  int n = 0;
  for (const json& e : t.events) n += e.value("ph", "") == ph && e.value("name", "") == name;
  return n;
}

// Every marker event of a launch lies inside the kernel's CUPTI span: the
// injector maps %globaltimer onto CUPTI's clock (1 ns of rounding allowed).
void ExpectEventsInsideKernelSpan(const LaunchGroup& g) {
  const json* kernel = nullptr;
  for (const auto& [tid, t] : g.threads) {
    for (const json& e : t.events) {
      if (!IsWarp(t) && e.value("ph", "") == "X") kernel = &e;
    }
  }
  ASSERT_NE(kernel, nullptr) << g.name;
  const double start = (*kernel)["ts"].get<double>() - 0.001;
  const double end = start + (*kernel)["dur"].get<double>() + 0.002;
  for (const auto& [tid, t] : g.threads) {
    if (!IsWarp(t)) continue;
    for (const json& e : t.events) {
      EXPECT_GE(e["ts"].get<double>(), start) << g.name << " " << e.dump();
      EXPECT_LE(e["ts"].get<double>() + e.value("dur", 0.0), end) << g.name << " " << e.dump();
    }
  }
}

// The launch groups whose name contains `kernel`.
std::vector<const LaunchGroup*> GroupsOf(const ProfiledRun& run, const std::string& kernel) {
  std::vector<const LaunchGroup*> out;
  for (const auto& [pid, g] : run.launches) {
    if (g.name.find(kernel) != std::string::npos) out.push_back(&g);
  }
  return out;
}

// A number from smprof-run's summary line ("smprof: profiled ..."), e.g.
// SummaryNumber(run, R"(lost (\d+) events)").
long SummaryNumber(const ProfiledRun& run, const std::string& pattern) {
  std::smatch line;
  if (!std::regex_search(run.stderr_text, line, std::regex("smprof: profiled [^\n]*"))) return -1;
  const std::string text = line.str();
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stol(m[1]);
}

TEST(GpuScenarios, BasicCountsNamesAndUnoptedModule) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("basic");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  ASSERT_EQ(run.launches.size(), 1u) << "only marker_grid opted in; plain_kernel must not appear";
  const LaunchGroup& g = run.launches.begin()->second;
  EXPECT_NE(g.name.find("marker_grid"), std::string::npos) << g.name;
  EXPECT_NE(g.name.find("GPU"), std::string::npos);
  EXPECT_NE(g.name.find("stream"), std::string::npos);
  EXPECT_NE(g.name.find("grid(4,1,1) block(128,1,1)"), std::string::npos) << g.name;
  ASSERT_EQ(g.Warps(), 16);
  ExpectEventsInsideKernelSpan(g);
  for (const auto& [tid, t] : g.threads) {
    if (!IsWarp(t)) {
      EXPECT_EQ(Count(t, "X", "marker_grid(int*)"), 1) << "CUPTI kernel span on " << t.name;
      continue;
    }
    EXPECT_EQ(Count(t, "X", "outer"), 1) << t.name;
    EXPECT_EQ(Count(t, "X", "inner"), 1) << t.name;
    EXPECT_EQ(Count(t, "i", "tick"), 3) << t.name;
    EXPECT_EQ(t.events.size(), 5u) << t.name;
    // inner nests in outer, ticks inside outer
    const json* outer = nullptr;
    for (const json& e : t.events) {
      if (e["name"] == "outer") outer = &e;
    }
    ASSERT_NE(outer, nullptr);
    const double o0 = (*outer)["ts"].get<double>(), o1 = o0 + (*outer)["dur"].get<double>();
    for (const json& e : t.events) {
      const double ts = e["ts"].get<double>();
      EXPECT_GE(ts, o0) << e.dump();
      EXPECT_LE(ts + e.value("dur", 0.0), o1 + 1e-9) << e.dump();
    }
  }
  EXPECT_EQ(SummaryNumber(run, R"(profiled (\d+) launch)"), 1);
  EXPECT_EQ(SummaryNumber(run, R"((\d+) events from)"), 16 * 7);
  EXPECT_EQ(SummaryNumber(run, R"(lost (\d+) events)"), 0);
}

TEST(GpuScenarios, ConcurrentStreamsOfOneModuleAreAttributedExactly) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("streams");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const auto groups = GroupsOf(run, "count_kernel");
  ASSERT_EQ(groups.size(), 12u);
  std::multiset<int> counts;
  std::set<std::string> streams;
  for (const LaunchGroup* g : groups) {
    ASSERT_EQ(g->Warps(), 4) << g->name;
    ExpectEventsInsideKernelSpan(*g);
    int n = -1;
    for (const auto& [tid, t] : g->threads) {
      if (!IsWarp(t)) continue;
      const int c = Count(t, "i", "step");
      if (n == -1) n = c;
      EXPECT_EQ(c, n) << "warps of one launch disagree: events attributed to the wrong launch in " << g->name;
    }
    counts.insert(n);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(g->name, m, std::regex("stream (\\d+)")));
    streams.insert(m[1]);
  }
  std::multiset<int> expected;
  for (int n = 10; n < 22; ++n) expected.insert(n);
  EXPECT_EQ(counts, expected);
  // The scenario only proves something if launches really ran concurrently.
  std::vector<std::pair<double, double>> spans;
  for (const LaunchGroup* g : groups) {
    for (const auto& [tid, t] : g->threads) {
      for (const json& e : t.events) {
        if (!IsWarp(t) && e.value("ph", "") == "X") {
          spans.emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
        }
      }
    }
  }
  int overlapping = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    for (size_t j = i + 1; j < spans.size(); ++j) {
      overlapping += spans[i].first < spans[j].second && spans[j].first < spans[i].second;
    }
  }
  EXPECT_GT(overlapping, 0) << "no two count_kernel launches overlapped in time";
  EXPECT_EQ(streams.size(), 4u);
  EXPECT_EQ(SummaryNumber(run, R"(lost (\d+) events)"), 0);
}

TEST(GpuScenarios, KernelFilterSelectsByDemangledName) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("filter", "--kernels 'gemm*'");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_EQ(GroupsOf(run, "other_b").size(), 0u);
  const auto groups = GroupsOf(run, "gemm_like_a");
  ASSERT_EQ(groups.size(), 2u);
  for (const LaunchGroup* g : groups) {
    ASSERT_EQ(g->Warps(), 4);
    for (const auto& [tid, t] : g->threads) {
      if (!IsWarp(t)) continue;
      EXPECT_EQ(Count(t, "i", "a_step"), 6);
    }
  }
  const ProfiledRun excluded = Profile("filter", "--kernels '!gemm*'");
  ASSERT_EQ(excluded.exit_code, 0) << excluded.stderr_text;
  EXPECT_EQ(GroupsOf(excluded, "gemm_like_a").size(), 0u);
  EXPECT_EQ(GroupsOf(excluded, "other_b").size(), 2u);
}

TEST(GpuScenarios, CapturedGraphReplaysKeepEveryEvent) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("graph");
  ASSERT_EQ(run.exit_code, 0) << "capture must keep working under smprof: " << run.stderr_text;
  const auto k1 = GroupsOf(run, "graph_k1");
  const auto k2 = GroupsOf(run, "graph_k2");
  ASSERT_EQ(k1.size(), 3u);
  ASSERT_EQ(k2.size(), 3u);
  for (const LaunchGroup* g : k1) {
    ASSERT_EQ(g->Warps(), 4) << g->name;
    ExpectEventsInsideKernelSpan(*g);
    for (const auto& [tid, t] : g->threads) {
      if (!IsWarp(t)) continue;
      EXPECT_EQ(Count(t, "i", "g1"), 5) << g->name;
    }
  }
  for (const LaunchGroup* g : k2) {
    ASSERT_EQ(g->Warps(), 3) << g->name;
    ExpectEventsInsideKernelSpan(*g);
    for (const auto& [tid, t] : g->threads) {
      if (!IsWarp(t)) continue;
      EXPECT_EQ(Count(t, "X", "g2"), 1) << g->name;
    }
  }
  EXPECT_EQ(SummaryNumber(run, R"(lost (\d+) events)"), 0);
}

TEST(GpuScenarios, OverflowIsCountedExactly) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("overflow", "--buffer-mb 1");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const long events = SummaryNumber(run, R"((\d+) events from)");
  const long lost = SummaryNumber(run, R"(lost (\d+) events)");
  const long device = SummaryNumber(run, R"(device buffer (\d+))");
  EXPECT_GT(lost, 0);
  EXPECT_EQ(lost, device) << run.stderr_text;
  EXPECT_EQ(events + lost, 2L * 264 * 8 * 1000) << run.stderr_text;
  int recorded = 0;
  for (const auto& [pid, g] : run.launches) {
    for (const auto& [tid, t] : g.threads) recorded += Count(t, "i", "flood");
  }
  EXPECT_EQ(recorded, events);
}

TEST(GpuScenarios, HighWaterForcesDrainsInsteadOfDropping) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("highwater", "--buffer-mb 2");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_EQ(SummaryNumber(run, R"(lost (\d+) events)"), 0) << run.stderr_text;
  EXPECT_EQ(SummaryNumber(run, R"((\d+) events from)"), 12L * 528 * 20);
  EXPECT_GE(run.summary_event.value("forced_drains", 0), 1) << run.summary_event.dump();
  EXPECT_EQ(GroupsOf(run, "flood").size(), 12u);
}

TEST(GpuScenarios, NonZeroExitWithoutSyncKeepsEventsAndExitCode) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("exit7");
  EXPECT_EQ(run.exit_code, 7) << run.stderr_text;
  const auto groups = GroupsOf(run, "marker_grid");
  ASSERT_EQ(groups.size(), 1u) << "the exit harvest must ship the last launch";
  EXPECT_EQ(groups[0]->Warps(), 16);
}

// Per-warp "step" counts of every count_kernel launch, sorted.
std::multiset<int> StepCounts(const ProfiledRun& run) {
  std::multiset<int> counts;
  for (const LaunchGroup* g : GroupsOf(run, "count_kernel")) {
    EXPECT_EQ(g->Warps(), 4) << g->name;
    for (const auto& [tid, t] : g->threads) {
      if (IsWarp(t)) counts.insert(Count(t, "i", "step"));
    }
  }
  return counts;
}

TEST(GpuScenarios, StreamDestroyedWhileBusyIsHarvestedAtDeviceSync) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("destroyed-stream");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_EQ(StepCounts(run), (std::multiset<int>{8, 8, 8, 8}));
  EXPECT_EQ(SummaryNumber(run, R"(lost (\d+) events)"), 0);
}

TEST(GpuScenarios, PerThreadDefaultStreamsOfSeveralThreads) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("threads");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_EQ(StepCounts(run), (std::multiset<int>{5, 5, 5, 5, 7, 7, 7, 7}));
  EXPECT_EQ(SummaryNumber(run, R"(lost (\d+) events)"), 0);
}

TEST(GpuScenarios, DriverApiModuleAndLaunch) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("driver-api " + BuildDir() + "/bin/smprof_driver_module.fatbin");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const auto groups = GroupsOf(run, "driver_kernel");
  ASSERT_EQ(groups.size(), 1u) << run.stderr_text;
  ASSERT_EQ(groups[0]->Warps(), 4);
  ExpectEventsInsideKernelSpan(*groups[0]);
  for (const auto& [tid, t] : groups[0]->threads) {
    if (!IsWarp(t)) continue;
    EXPECT_EQ(Count(t, "i", "drv"), 9) << t.name;
  }
}

TEST(GpuScenarios, WarpSelectionRecordsOnlyChosenWarps) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("basic", "--warps 0,3");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  ASSERT_EQ(run.launches.size(), 1u);
  const LaunchGroup& g = run.launches.begin()->second;
  ASSERT_EQ(g.Warps(), 8) << "warps 0 and 3 of 4 blocks";
  for (const auto& [tid, t] : g.threads) {
    if (!IsWarp(t)) continue;
    const bool chosen = t.name.find("warp 0") != std::string::npos || t.name.find("warp 3") != std::string::npos;
    EXPECT_TRUE(chosen) << t.name;
    EXPECT_EQ(t.events.size(), 5u) << t.name;
  }
}

TEST(GpuScenarios, PreloadInjectionWorksToo) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("basic", "--preload");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  ASSERT_EQ(GroupsOf(run, "marker_grid").size(), 1u) << run.stderr_text;
  EXPECT_EQ(SummaryNumber(run, R"((\d+) events from)"), 16 * 7);
}

TEST(GpuScenarios, ProcessesOfOneRunShareOneTrace) {
  REQUIRE_GPU();
  // sh runs two copies of the app at once; both inherit the injection.
  const ProfiledRun run = Profile("basic", "", "sh -c '\"$0\" basic & \"$0\" basic; wait'");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_EQ(SummaryNumber(run, R"(from (\d+) process)"), 2) << run.stderr_text;
  const auto groups = GroupsOf(run, "marker_grid");
  ASSERT_EQ(groups.size(), 2u);
  std::set<std::string> pids;
  for (const LaunchGroup* g : groups) {
    EXPECT_EQ(g->Warps(), 16);
    pids.insert(g->name.substr(g->name.rfind("pid ")));
  }
  EXPECT_EQ(pids.size(), 2u) << "the two launches must come from two processes";
}

// No hint after "holds CUPTI" that would send the user looking for a GPU.
void ExpectNoMisleadingHint(const ProfiledRun& run) {
  EXPECT_EQ(run.stderr_text.find("driver"), std::string::npos) << run.stderr_text;
  EXPECT_EQ(run.stderr_text.find("opts in"), std::string::npos) << run.stderr_text;
  EXPECT_EQ(run.stderr_text.find("started CUDA"), std::string::npos) << run.stderr_text;
}

TEST(GpuScenarios, CuptiHeldByAnotherToolIsOneClearLineAndTheAppRuns) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("cupti-taken");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("holds CUPTI in pid"), std::string::npos) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("was not profiled:"), std::string::npos) << run.stderr_text;
  ExpectNoMisleadingHint(run);
  EXPECT_EQ(run.launches.size(), 0u);
}

// compute-sanitizer, in either order: the application runs, smprof says in
// one line that the sanitizer holds CUPTI, and nothing misleading follows.
TEST(GpuScenarios, ComputeSanitizerInEitherOrder) {
  REQUIRE_GPU();
  SKIP_UNLESS(Succeeds("command -v compute-sanitizer"), "compute-sanitizer is not installed");
  for (const bool sanitizer_outside : {false, true}) {
    const ProfiledRun run =
        sanitizer_outside ? Profile("basic", "", "", "compute-sanitizer") : Profile("basic", "", "compute-sanitizer");
    EXPECT_EQ(run.exit_code, 0) << run.stderr_text << run.stdout_text;
    const std::string all = run.stdout_text + run.stderr_text;
    EXPECT_NE(all.find("ERROR SUMMARY: 0 errors"), std::string::npos) << all;
    EXPECT_NE(run.stderr_text.find("holds CUPTI in pid"), std::string::npos) << run.stderr_text;
    ExpectNoMisleadingHint(run);
  }
}

// Nsight Compute refuses to run while CUDA_INJECTION64_PATH is set; smprof
// steps aside in either order and ncu profiles the kernel.
TEST(GpuScenarios, NsightComputeInEitherOrder) {
  REQUIRE_GPU();
  SKIP_UNLESS(Succeeds("command -v ncu"), "Nsight Compute (ncu) is not installed");
  for (const bool ncu_outside : {false, true}) {
    const ProfiledRun run = ncu_outside ? Profile("basic", "", "", "ncu -k regex:marker_grid -c 1")
                                        : Profile("basic", "", "ncu -k regex:marker_grid -c 1");
    const std::string all = run.stdout_text + run.stderr_text;
    EXPECT_EQ(run.exit_code, 0) << all;
    EXPECT_EQ(all.find("Another tool/injection"), std::string::npos) << all;
    EXPECT_NE(all.find("marker_grid"), std::string::npos) << "ncu profiled nothing: " << all;
    EXPECT_NE(all.find("smprof steps aside"), std::string::npos) << all;
  }
}

// torch.profiler under smprof-run: its CUPTI subscription is refused (smprof
// holds CUPTI), and the preload shim names that conflict in one line.
TEST(GpuScenarios, TorchProfilerConflictIsNamed) {
  REQUIRE_GPU();
  SKIP_UNLESS(Succeeds("python3 -c 'import torch; assert torch.cuda.is_available()'"),
              "python3 with a CUDA-enabled torch is not installed");
  char dir_template[] = "/tmp/smprof-torch-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  std::ofstream(dir + "/prof.py") << "import torch\n"
                                     "from torch.profiler import profile, ProfilerActivity\n"
                                     "a = torch.randn(256, 256, device='cuda')\n"
                                     "with profile(activities=[ProfilerActivity.CUDA]) as p:\n"
                                     "    (a @ a).sum().item()\n"
                                     "print('cuda events:', sum(1 for e in p.events() if e.device_type == "
                                     "torch.autograd.DeviceType.CUDA))\n";
  const int code = Shell(BuildDir() + "/bin/smprof-run -o " + dir + "/t.json -- python3 " + dir + "/prof.py",
                         dir + "/out.txt", dir + "/err.txt");
  const std::string err = Slurp(dir + "/err.txt");
  EXPECT_EQ(code, 0) << err;
  EXPECT_NE(err.find("could not subscribe to CUPTI, which smprof holds in this run"), std::string::npos) << err;
  EXPECT_NE(Slurp(dir + "/out.txt").find("cuda events:"), std::string::npos) << "the program ran to its end";
}

// Each physical GPU is named by UUID and PCI address, with what a reader needs
// to interpret times, and launches name it with the process's own ordinal.
TEST(GpuScenarios, GpuIdentityAndTimingFactsAreRecorded) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("basic");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  ASSERT_TRUE(run.summary_event.contains("gpus")) << run.summary_event.dump();
  const json& gpus = run.summary_event["gpus"];
  ASSERT_EQ(gpus.size(), 1u) << gpus.dump();
  const json& g = gpus[0];
  char templ[] = "/tmp/smprof-smi-XXXXXX";
  close(mkstemp(templ));
  Shell("nvidia-smi --query-gpu=uuid,pci.bus_id --format=csv,noheader -i 0", templ, "/dev/null");
  const std::string smi = Slurp(templ);
  unlink(templ);
  EXPECT_NE(smi.find(g.value("uuid", "?")), std::string::npos) << smi << " vs " << g.dump();
  const std::string pci = g.value("pci_bus_id", "?");  // nvidia-smi writes an 8-digit domain
  EXPECT_NE(smi.find(pci.substr(pci.find(':'))), std::string::npos) << smi << " vs " << g.dump();
  EXPECT_GT(g.value("sm_count", 0), 0);
  EXPECT_GT(g.value("sm_clock_khz", 0), 100000);
  EXPECT_GT(g.value("timer_resolution_ns", 0), 0) << "the %globaltimer step was not measured";
  EXPECT_LE(g.value("timer_resolution_ns", 0), 1000);
  EXPECT_EQ(g["seen_as"].size(), 1u);
  std::printf("GPU: %s\n", g.dump().c_str());
  int gpu_tracks = 0;
  for (const auto& [pid, name] : run.process_names) gpu_tracks += name.rfind("GPU 0 | ", 0) == 0;
  EXPECT_EQ(gpu_tracks, 1);
  ASSERT_EQ(run.launches.size(), 1u);
  EXPECT_NE(run.launches.begin()->second.name.find("| GPU 0 (cuda:0) |"), std::string::npos)
      << run.launches.begin()->second.name;
}

// Two processes pinned to two physical GPUs both call theirs cuda:0: the
// trace shows two GPUs, by UUID, and tells the launches apart.
TEST(GpuScenarios, TwoProcessesOnTwoGpusAreToldApart) {
  REQUIRE_GPU();
  SKIP_UNLESS(GpuCount() >= 2, "fewer than two GPUs here");
  const ProfiledRun run =
      Profile("basic", "", "sh -c 'CUDA_VISIBLE_DEVICES=0 \"$0\" basic & CUDA_VISIBLE_DEVICES=1 \"$0\" basic; wait'");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const json& gpus = run.summary_event["gpus"];
  ASSERT_EQ(gpus.size(), 2u) << gpus.dump();
  EXPECT_NE(gpus[0]["uuid"], gpus[1]["uuid"]);
  EXPECT_NE(gpus[0]["pci_bus_id"], gpus[1]["pci_bus_id"]);
  std::set<std::string> where;
  for (const auto& [pid, g] : run.launches) {
    std::smatch m;
    if (std::regex_search(g.name, m, std::regex(R"(\| (GPU \d+ \(cuda:\d+\)) \|)"))) where.insert(m[1]);
  }
  EXPECT_EQ(where, (std::set<std::string>{"GPU 0 (cuda:0)", "GPU 1 (cuda:0)"}));
}

TEST(GpuScenarios, SilentKernelsOfAnOptedInModuleDoNotForceDrains) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("silent-big");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  // At most one drain while smprof learns that silent_big records nothing.
  EXPECT_LE(run.summary_event.value("forced_drains", 99), 1) << run.summary_event.dump();
  ASSERT_EQ(GroupsOf(run, "marker_grid").size(), 1u);
  EXPECT_EQ(GroupsOf(run, "silent_big").size(), 0u) << "launches that recorded nothing have no group";
}

TEST(GpuScenarios, SyncWhileAnotherStreamCapturesKeepsTheCapture) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("capture-after-eager");
  ASSERT_EQ(run.exit_code, 0) << "the application's capture must survive smprof: " << run.stderr_text;
  EXPECT_EQ(StepCounts(run), (std::multiset<int>{3, 3, 3, 3}));
  const auto replay = GroupsOf(run, "graph_k1");
  ASSERT_EQ(replay.size(), 1u);
  EXPECT_EQ(replay[0]->Warps(), 4);
}

TEST(GpuScenarios, GraphReplaysAfterAModuleUnloadKeepEveryEvent) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("unload-replay " + BuildDir() + "/bin/smprof_driver_module.fatbin");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const auto groups = GroupsOf(run, "graph_k1");
  ASSERT_EQ(groups.size(), 51u);
  for (const LaunchGroup* g : groups) {
    ASSERT_EQ(g->Warps(), 4) << g->name;
    for (const auto& [tid, t] : g->threads) {
      if (!IsWarp(t)) continue;
      EXPECT_EQ(Count(t, "i", "g1"), 5) << g->name;
    }
  }
  EXPECT_EQ(SummaryNumber(run, R"((\d+) events from)"), 51L * 4 * 5);
  EXPECT_EQ(SummaryNumber(run, R"(lost (\d+) events)"), 0);
}

TEST(GpuScenarios, ExitWithAKernelStillRunningDoesNotHang) {
  REQUIRE_GPU();
  // The kernel never ends; the process must still exit (the harvest gives up
  // after its deadline). `timeout` turns a hang into exit code 124.
  const ProfiledRun run = Profile("exit-running", "", "timeout 60");
  EXPECT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("still running"), std::string::npos) << run.stderr_text;
}

TEST(GpuScenarios, BadKernelPatternInInjectorRunsUnprofiled) {
  REQUIRE_GPU();
  // smprof-run rejects a bad pattern itself; the injector must cope when a
  // process of the run sets one anyway: a clear error, and the app runs.
  const ProfiledRun run = Profile("basic", "", "env SMPROF_KERNELS='gemm['");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("SMPROF_KERNELS"), std::string::npos) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("profiling is off"), std::string::npos) << run.stderr_text;
  EXPECT_EQ(run.launches.size(), 0u);
}

}  // namespace
