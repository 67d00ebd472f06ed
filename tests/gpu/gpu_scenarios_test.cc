// GPU tests: run tests/gpu/apps under the real smprof-run and check the trace
// against the exact event counts documented in apps/kernels_opted.cu and
// apps/kernels_recorder.cu, the GPU identity smprof records, and smprof's
// behaviour beside other CUDA tools (compute-sanitizer, Nsight Compute,
// torch.profiler).
//
// Without a GPU every test skips with a visible message; with
// SMPROF_REQUIRE_GPU=1 a missing GPU (or tool) fails instead, so that a run
// meant to prove the GPU path cannot pass by skipping (scripts/test.sh sets
// it where nvidia-smi sees a GPU).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collector/perfetto_check.h"
#include "common/json.h"
#include "tests/support/subprocess.h"
#include "tests/support/trace_processor.h"

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
  std::vector<json> events;  // X, i, C (counters), b/e (async spans) and s/f (flows) events
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

// Reads the JSON trace at `trace` into `run`'s process names, launch groups
// and summary (a trace cut short is closed first; none reads as empty).
void ParseTrace(const std::string& trace, ProfiledRun* run) {
  std::string text = Slurp(trace);
  if (text.empty()) text = "[]";  // a run smprof stepped aside from writes no trace
  while (!text.empty() && (text.back() == '\n' || text.back() == ',')) text.pop_back();
  if (!text.empty() && text.back() != ']') text += "]";
  const json events = json::parse(text, nullptr, false);
  EXPECT_TRUE(events.is_array()) << "trace " << trace << " does not parse";
  if (!events.is_array()) return;
  std::map<int64_t, std::string> process_names;
  for (const json& e : events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") {
      process_names[e["pid"].get<int64_t>()] = e["args"]["name"].get<std::string>();
    }
  }
  for (const auto& [pid, name] : process_names) {
    if (!name.empty() && name[0] == '#') run->launches[pid].name = name;
  }
  run->process_names = process_names;
  for (const json& e : events) {
    if (!e.contains("pid") || !e.contains("tid")) continue;
    const int64_t pid = e["pid"].get<int64_t>();
    const std::string ph = e.value("ph", "");
    if (ph == "i" && e.value("name", "").find("summary") != std::string::npos) run->summary_event = e["args"];
    auto it = run->launches.find(pid);
    if (it == run->launches.end()) continue;
    Thread& t = it->second.threads[e["tid"].get<int64_t>()];
    if (ph == "M" && e.value("name", "") == "thread_name") t.name = e["args"]["name"].get<std::string>();
    if (ph == "X" || ph == "i" || ph == "C" || ph == "b" || ph == "e" || ph == "s" || ph == "f") t.events.push_back(e);
  }
}

// Runs `[outer] smprof-run <args> -- [app_prefix] <app>` (`app`: a program of
// the build's bin/ and its arguments) and parses the trace.
ProfiledRun ProfileApp(const std::string& app, const std::string& args = "", const std::string& app_prefix = "",
                       const std::string& outer = "") {
  char dir_template[] = "/tmp/smprof-gpu-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string trace = dir + "/trace.json";
  const std::string err = dir + "/stderr.txt";
  const std::string cmd = outer + " " + BuildDir() + "/bin/smprof-run -o " + trace + " " + args + " -- " + app_prefix +
                          " " + BuildDir() + "/bin/" + app;
  ProfiledRun run;
  run.exit_code = Shell(cmd, dir + "/stdout.txt", err);
  run.stderr_text = Slurp(err);
  run.stdout_text = Slurp(dir + "/stdout.txt");
  ParseTrace(trace, &run);
  return run;
}

// Runs `[outer] smprof-run <args> -- [app_prefix] smprof_gpu_scenarios <scenario>`
// and parses the trace.
ProfiledRun Profile(const std::string& scenario, const std::string& args = "", const std::string& app_prefix = "",
                    const std::string& outer = "") {
  return ProfileApp("smprof_gpu_scenarios " + scenario, args, app_prefix, outer);
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

// The default protobuf trace holds the same events as the JSON trace the
// other scenarios check: "basic" and "streams" written as .pftrace, decoded
// with smprof's own reader (collector/perfetto_check.h: every sequence,
// interned name, descriptor and nesting checked), exact counts per track.
TEST(GpuScenarios, ProtobufTracesHoldTheExactEvents) {
  REQUIRE_GPU();
  const auto profile = [](const std::string& scenario) {
    char dir_template[] = "/tmp/smprof-gpu-pb-XXXXXX";
    const std::string dir = mkdtemp(dir_template);
    const std::string trace = dir + "/trace.pftrace";
    const int rc = Shell(BuildDir() + "/bin/smprof-run -o " + trace + " -- " + BuildDir() +
                             "/bin/smprof_gpu_scenarios " + scenario,
                         dir + "/stdout.txt", dir + "/stderr.txt");
    EXPECT_EQ(rc, 0) << Slurp(dir + "/stderr.txt");
    EXPECT_TRUE(Slurp(trace + ".stats.json").find("\"kernels\"") != std::string::npos) << "no statistics beside";
    return smprof::perfetto::CheckTrace(Slurp(trace));
  };
  const auto starts = [](const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; };
  {
    const auto t = profile("basic");
    EXPECT_TRUE(t.errors.empty()) << t.errors[0];
    int launches = 0, warps = 0;
    for (const auto& [uuid, track] : t.tracks) {
      if (starts(track.name, "#")) {
        ++launches;
        EXPECT_NE(track.name.find("marker_grid"), std::string::npos) << track.name;
        EXPECT_EQ(track.slices, 1u) << "the CUPTI span on " << track.name;
      } else if (starts(track.name, "warp ")) {
        ++warps;
        EXPECT_EQ(track.names.at("outer"), 1u) << track.name;
        EXPECT_EQ(track.names.at("inner"), 1u) << track.name;
        EXPECT_EQ(track.names.at("tick"), 3u) << track.name;
        EXPECT_EQ(track.slices, 2u) << track.name;
        EXPECT_EQ(track.instants, 3u) << track.name;
        EXPECT_EQ(track.open, 0u) << track.name;
      }
    }
    EXPECT_EQ(launches, 1);
    EXPECT_EQ(warps, 16);
  }
  {
    const auto t = profile("streams");
    EXPECT_TRUE(t.errors.empty()) << t.errors[0];
    int launches = 0;
    std::multiset<uint64_t> steps;  // per warp
    for (const auto& [uuid, track] : t.tracks) {
      if (starts(track.name, "#") && track.name.find("count_kernel") != std::string::npos) ++launches;
      if (starts(track.name, "warp ")) steps.insert(track.instants);
    }
    EXPECT_EQ(launches, 12);
    std::multiset<uint64_t> expected;  // 12 launches of 10..21 steps, 4 warps each
    for (uint64_t n = 10; n < 22; ++n) expected.insert({n, n, n, n});
    EXPECT_EQ(steps, expected);
  }
}

// The host side in the protobuf trace, imported by Perfetto's trace
// processor ($SMPROF_TRACE_PROCESSOR or the one beside the source tree): each
// launch API call on its thread with a flow arrow to its kernel that starts
// after the call began (one clock), a graph's kernels chained after their
// cuGraphLaunch, harvests inside the synchronising call that ran them, a
// forced drain inside the launch call it stalled.
TEST(GpuScenarios, HostCallsAndHarvestsAreOnTheApplicationThreads) {
  REQUIRE_GPU();
  const std::string tp = smprof::testing::TraceProcessor();
  SKIP_UNLESS(!tp.empty(), "no trace processor (set SMPROF_TRACE_PROCESSOR)");
  const auto profile = [](const std::string& scenario, const std::string& args) {
    char dir_template[] = "/tmp/smprof-gpu-host-XXXXXX";
    const std::string trace = std::string(mkdtemp(dir_template)) + "/trace.pftrace";
    const int rc = Shell(BuildDir() + "/bin/smprof-run -o " + trace + " " + args + " -- " + BuildDir() +
                             "/bin/smprof_gpu_scenarios " + scenario,
                         trace + ".out", trace + ".err");
    EXPECT_EQ(rc, 0) << Slurp(trace + ".err");
    return trace;
  };
  using smprof::testing::Query;
  const auto one = [&](const std::string& trace, const std::string& sql) {
    const auto rows = Query(tp, trace, sql);
    return rows.size() == 1 ? rows[0] : std::string("rows: ") + std::to_string(rows.size());
  };
  const std::string errors =
      "select count(*) from stats where value > 0 and severity in ('error', 'data_loss')";
  const std::string flows =
      "select count(*) from flow f join slice o on f.slice_out = o.id join slice i on f.slice_in = i.id ";
  const std::string on_threads = "select count(*) from slice s join thread_track tt on s.track_id = tt.id ";
  {
    const std::string t = profile("basic", "");
    EXPECT_EQ(one(t, errors), "0");
    EXPECT_EQ(one(t, flows + "where o.name like 'cuLaunchKernel%' and i.name like '%marker_grid%'"), "1");
    EXPECT_EQ(one(t, flows + "where o.ts > i.ts"), "0") << "a kernel starts before its launch call";
    EXPECT_EQ(one(t, on_threads + "where s.name like 'harvest:%'"), one(t, "select count(*) from slice where name "
                                                                           "like 'harvest:%' and depth = 0 and "
                                                                           "track_id not in (select id from "
                                                                           "thread_track)"));
  }
  {
    const std::string t = profile("graph", "");
    EXPECT_EQ(one(t, errors), "0");
    EXPECT_EQ(one(t, on_threads + "where s.name like 'cuGraphLaunch%'"), "3");
    EXPECT_EQ(one(t, flows + "where o.name like 'cuGraphLaunch%' and i.name like '%graph_k1%'"), "3");
    EXPECT_EQ(one(t, flows + "where o.name like '%graph_k1%' and i.name like '%graph_k2%'"), "3");
    EXPECT_EQ(one(t, flows + "where o.ts > i.ts"), "0");
    // The run's synchronising calls that harvested, each around its harvest.
    EXPECT_NE(one(t, on_threads + "join slice h on h.parent_id = s.id where h.name = 'harvest: sync' and "
                                  "(s.name like 'cu%Synchronize%' or s.name like 'cuMemcpy%')"),
              "0");
  }
  {
    const std::string t = profile("highwater", "--buffer-mb 2");
    EXPECT_EQ(one(t, errors), "0");
    EXPECT_NE(one(t, on_threads + "join slice d on d.parent_id = s.id where "
                                  "d.name = 'forced drain: buffer high-water' and s.name like 'cuLaunchKernel%'"),
              "0");
    EXPECT_EQ(one(t, flows + "where o.name like 'cuLaunchKernel%' and i.name like '%flood%'"), "12");
  }
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

// Excluded kernels record nothing on the GPU: nothing of other_b is
// recorded, so nothing is filtered on the host either.
TEST(GpuScenarios, ExcludedKernelsRecordNothing) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("filter", "--kernels 'gemm*' --log-level info");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_EQ(GroupsOf(run, "gemm_like_a").size(), 2u);
  EXPECT_EQ(SummaryNumber(run, R"((\d+) events from)"), 2 * 4 * 6);
  // The run summary in the trace counts what the host filtered.
  EXPECT_EQ(run.summary_event.value("filtered_events", -1), 0) << run.summary_event.dump();
}

TEST(GpuScenarios, LaunchRangesProfileOnlyTheChosenLaunches) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("ranges", "--launches 'gemm_like_a:2-4+8'");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_EQ(GroupsOf(run, "gemm_like_a").size(), 4u);
  EXPECT_EQ(GroupsOf(run, "other_b").size(), 4u);  // no item matches it: not limited
  EXPECT_EQ(SummaryNumber(run, R"((\d+) events from)"), 4 * 4 * 6 + 4 * 4 * 9);
  EXPECT_EQ(run.summary_event.value("filtered_events", -1), 0) << run.summary_event.dump();
}

TEST(GpuScenarios, CaptureRangeFollowsCudaProfilerStartAndStop) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("profiler-window", "--capture-range cudaProfilerApi");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_EQ(GroupsOf(run, "gemm_like_a").size(), 3u);
  const ProfiledRun all = Profile("profiler-window");
  EXPECT_EQ(GroupsOf(all, "gemm_like_a").size(), 8u);
}

// 4 threads x 2 streams, 100,000 launches, a synchronisation every 1,000
// launches per thread: every launch keeps its CUPTI record (kernel name,
// stream, geometry), every event arrives.
TEST(GpuScenarios, EveryLaunchIsAttributedUnderMultiThreadedLoad) {
  REQUIRE_GPU();
  char dir_template[] = "/tmp/smprof-gpu-mt-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string trace = dir + "/trace.pftrace";
  constexpr long kLaunches = 100000;
  const int rc = Shell(BuildDir() + "/bin/smprof-run -o " + trace + " -- " + BuildDir() +
                           "/bin/smprof_gpu_scenarios many-threads " + std::to_string(kLaunches),
                       dir + "/stdout.txt", dir + "/stderr.txt");
  const std::string err = Slurp(dir + "/stderr.txt");
  ASSERT_EQ(rc, 0) << err;
  const json stats = json::parse(Slurp(trace + ".stats.json"), nullptr, false);
  ASSERT_TRUE(stats.is_object()) << "no statistics beside " << trace;
  long count_launches = 0, other = 0;
  for (const json& k : stats["kernels"]) {
    const std::string name = k["kernel"].get<std::string>();
    (name.find("count_kernel") != std::string::npos ? count_launches : other) += k["launches"].get<long>();
    EXPECT_EQ(name.find("no CUPTI record"), std::string::npos) << name;
  }
  EXPECT_EQ(count_launches, kLaunches);
  EXPECT_EQ(other, 0);
  EXPECT_EQ(stats["instants"].get<long>(), kLaunches * 2 * 2);
  EXPECT_EQ(stats["lost_events"].get<long>(), 0);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(err, m, std::regex(R"(profiled (\d+) launch)"))) << err;
  EXPECT_EQ(std::stol(m[1]), kLaunches);
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

// --launches counts each graph replay as one launch of each of its kernels
// (the captured launches do not count): 'graph_k1:1-2,graph_k2:2' keeps k1 of
// replays 1 and 2 and k2 of replay 2. Replay 0 records nothing; in replay 1
// k2 records with its module (lit for k1) and is dropped on the host.
TEST(GpuScenarios, LaunchRangesChooseGraphReplays) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("graph", "--launches 'graph_k1:1-2,graph_k2:2'");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_EQ(GroupsOf(run, "graph_k1").size(), 2u);
  EXPECT_EQ(GroupsOf(run, "graph_k2").size(), 1u);
  EXPECT_EQ(SummaryNumber(run, R"(profiled (\d+) launch)"), 3) << run.stderr_text;
  EXPECT_EQ(SummaryNumber(run, R"((\d+) events from)"), 2 * 4 * 5 + 3 * 2) << run.stderr_text;
  EXPECT_EQ(SummaryNumber(run, R"(lost (\d+) events)"), 0) << run.stderr_text;
  EXPECT_EQ(run.summary_event.value("filtered_events", -1), 3 * 2) << run.summary_event.dump();
}

// Four launches of one_range (4 warps, one "work" range each), synchronised;
// then the program dies (scenario "die" in scenarios_main.cu). What the
// synchronisation waited for is in the trace, named, whatever comes next.
void ExpectTheSynchronisedLaunches(const ProfiledRun& run) {
  EXPECT_NE(run.stdout_text.find("good done"), std::string::npos) << run.stderr_text;
  const auto groups = GroupsOf(run, "one_range");
  EXPECT_EQ(groups.size(), 4u) << run.stderr_text;
  for (const LaunchGroup* g : groups) {
    EXPECT_EQ(g->Warps(), 4) << g->name;
    int ranges = 0;
    for (const auto& [tid, t] : g->threads) ranges += Count(t, "X", "work");
    EXPECT_EQ(ranges, 4) << g->name;
  }
  EXPECT_EQ(GroupsOf(run, "no CUPTI record").size(), 0u) << run.stderr_text;
}

TEST(GpuScenarios, AProgramKilledAfterASynchronisationKeepsItsEvents) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("die kill");
  EXPECT_EQ(run.exit_code, 137) << run.stderr_text;
  ExpectTheSynchronisedLaunches(run);
}

// Killed 100 ms after the synchronisation: its read-back was shipped by then.
TEST(GpuScenarios, AProgramKilled100MsAfterASynchronisationKeepsItsEvents) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("die kill-soon");
  EXPECT_EQ(run.exit_code, 137) << run.stderr_text;
  ExpectTheSynchronisedLaunches(run);
}

// A kernel that writes through a bad pointer: the synchronisation fails, the
// program exits 3; the faulting launch is named, the earlier ones kept.
TEST(GpuScenarios, AKernelFaultIsNamedAndTheEventsBeforeItKept) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("die fault");
  EXPECT_EQ(run.exit_code, 3) << run.stderr_text;
  ExpectTheSynchronisedLaunches(run);
  EXPECT_NE(run.stderr_text.find("a kernel failed: GPU 0: a synchronisation returned CUDA_ERROR_ILLEGAL_ADDRESS"),
            std::string::npos)
      << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("may have failed (not known to have finished): fault_write(int*) (launch call"),
            std::string::npos)
      << run.stderr_text;
  EXPECT_EQ(run.stderr_text.find("one_range(int*) (launch call"), std::string::npos) << run.stderr_text;
}

// A kernel that spins after the synchronised launches; the program is
// terminated (SIGTERM through smprof-run) while it waits for it. The last
// harvest reads the spinning kernel's arena as far as its warps wrote
// (stuck_warps: per block, warp 0 in "mma" after a "load", warp 1 after a
// "load", warp 2 nothing). Never having ended, it has no CUPTI record: it is
// named after its launch call.
TEST(GpuScenarios, AProgramTerminatedInAHangShowsWhereItsWarpsAre) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("die hang", "", "", "timeout -s TERM 6");
  EXPECT_EQ(run.exit_code, 124) << run.stderr_text;
  ExpectTheSynchronisedLaunches(run);
  const auto stuck = GroupsOf(run, "stuck_warps");
  ASSERT_EQ(stuck.size(), 1u) << run.stderr_text;
  int loads = 0, open_mma = 0, warps = 0;
  for (const auto& [tid, t] : stuck[0]->threads) {
    loads += Count(t, "X", "load");
    warps += Count(t, "X", "load") == 1;
    for (const json& e : t.events) {
      open_mma += e.value("name", "") == "mma" && e.contains("args") && e["args"].value("unterminated", false);
    }
  }
  EXPECT_EQ(loads, 4);
  EXPECT_EQ(warps, 4);  // warps 0 and 1 of both blocks; warp 2 wrote nothing
  EXPECT_EQ(open_mma, 2);
  // smprof-run's statistics list where the two warps were.
  const size_t list = run.stderr_text.find("ranges never ended: where warps were");
  ASSERT_NE(list, std::string::npos) << run.stderr_text;
  int rows = 0;
  for (size_t at = list; (at = run.stderr_text.find("stuck_warps         mma", at)) != std::string::npos; ++at) ++rows;
  EXPECT_EQ(rows, 2) << run.stderr_text;
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

// 2048 warps of 2 events in a 1 MiB arena: one 1 KiB chunk per warp would
// not fit (1023 do); the arena's chunk size follows the launch.
TEST(GpuScenarios, ManySmallWarpsFitASmallArena) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("small-warps", "--buffer-mb 1");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_EQ(SummaryNumber(run, R"(lost (\d+) events)"), 0) << run.stderr_text;
  EXPECT_EQ(SummaryNumber(run, R"((\d+) events from)"), 3L * 2048 * 2);
  const auto groups = GroupsOf(run, "flood");
  ASSERT_EQ(groups.size(), 3u);
  for (const LaunchGroup* g : groups) EXPECT_EQ(g->Warps(), 2048) << g->name;
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

// A 64 MiB buffer is two segments: back-to-back launches on one stream
// switch segments at their drains instead of waiting for the kernels queued
// before; each segment is read back once its kernels finished. Every event
// is kept, and each launch has all of its warps (9 M events: a protobuf
// trace, read by the trace processor, and the run's own summary lines).
TEST(GpuScenarios, DrainsSwitchSegmentsAndKeepEveryEvent) {
  REQUIRE_GPU();
  const std::string tp = smprof::testing::TraceProcessor();
  SKIP_UNLESS(!tp.empty(), "no trace processor (set SMPROF_TRACE_PROCESSOR)");
  char dir_template[] = "/tmp/smprof-gpu-segments-XXXXXX";
  const std::string trace = std::string(mkdtemp(dir_template)) + "/trace.pftrace";
  const int rc = Shell(BuildDir() + "/bin/smprof-run --buffer-mb 64 -o " + trace + " -- " + BuildDir() +
                           "/bin/smprof_gpu_scenarios segments",
                       trace + ".out", trace + ".err");
  const std::string err = Slurp(trace + ".err");
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("profiled 24 launches, 9123840 events from 1 process(es); lost 0 events"), std::string::npos)
      << err;
  EXPECT_NE(err.find("kernel flood: 24 launches, 25,344 warps recorded"), std::string::npos) << err;
  const auto rows = smprof::testing::Query(tp, trace,
                                           "select extract_arg(arg_set_id, 'debug.switched_drains'), "
                                           "extract_arg(arg_set_id, 'debug.unattributed_events') from slice "
                                           "where name = 'smprof run summary'");
  ASSERT_EQ(rows.size(), 1u);
  const size_t comma = rows[0].find(',');
  ASSERT_NE(comma, std::string::npos) << rows[0];
  EXPECT_GE(std::atoi(rows[0].substr(0, comma).c_str()), 2) << rows[0];
  EXPECT_EQ(rows[0].substr(comma + 1), "0") << rows[0];
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

// ---------------------------------------------------------------------------
// The recorder's delicate paths (apps/kernels_recorder.cu, arena ABI 2): each
// kernel, with and without SMPROF_CONTEXT(), must record exactly the events
// documented there: none lost, none duplicated, ranges closed and nested.
// ---------------------------------------------------------------------------

// A warp track's label: "SM nnn | block (x,y,z) | warp w"; warp -1 if it is not one.
struct WarpLabel {
  int sm = -1, x = -1, y = -1, z = -1, warp = -1;
};

WarpLabel ParseWarpLabel(const std::string& name) {
  static const std::regex re(R"(SM (\d+) \| block \((\d+),(\d+),(\d+)\) \| warp (\d+))");
  WarpLabel l;
  std::smatch m;
  if (!std::regex_search(name, m, re)) return l;
  l.sm = std::stoi(m[1]);
  l.x = std::stoi(m[2]);
  l.y = std::stoi(m[3]);
  l.z = std::stoi(m[4]);
  l.warp = std::stoi(m[5]);
  return l;
}

// Events of a track by "<ph> <name>": "X part" (a completed range), "i p" (an instant).
using EventCounts = std::map<std::string, int>;

EventCounts CountsOf(const Thread& t) {
  EventCounts c;
  for (const json& e : t.events) ++c[e.value("ph", "") + " " + e.value("name", "")];
  return c;
}

std::string Describe(const EventCounts& c) {
  std::string s = "{";
  for (const auto& [k, n] : c) s += (s.size() > 1 ? ", " : "") + k + ": " + std::to_string(n);
  return s + "}";
}

// What the device recorded for these events: a range is a BEGIN and an END
// (smprof-run's "N events" counts both).
long Recorded(const EventCounts& c) {
  long n = 0;
  for (const auto& [k, count] : c) n += (k.rfind("X ", 0) == 0 ? 2L : 1L) * count;
  return n;
}

// The kernel's launch groups whose name contains `kernel`; exactly `n` of them.
std::vector<const LaunchGroup*> ExactlyGroups(const ProfiledRun& run, const std::string& kernel, size_t n) {
  const auto groups = GroupsOf(run, kernel);
  EXPECT_EQ(groups.size(), n) << kernel;
  return groups.size() == n ? groups : std::vector<const LaunchGroup*>{};
}

// Checks the warp tracks of one launch: one track per (block, warp) for blocks
// 0..blocks-1 (1-D grid) and exactly the warp indices `warps`, each with
// exactly `expected(warp)` and nothing else; all inside the kernel's span.
// Returns the launch's recorded events.
long ExpectWarpTracks(const LaunchGroup& g, int blocks, const std::set<int>& warps,
                      const std::function<EventCounts(int warp)>& expected) {
  EXPECT_EQ(g.Warps(), blocks * static_cast<int>(warps.size())) << g.name;
  std::set<std::pair<int, int>> seen;
  long recorded = 0;
  for (const auto& [tid, t] : g.threads) {
    if (!IsWarp(t)) continue;
    const WarpLabel l = ParseWarpLabel(t.name);
    if (l.warp < 0) {
      ADD_FAILURE() << "not a warp label: " << t.name;
      continue;
    }
    EXPECT_TRUE(seen.insert({l.x, l.warp}).second) << "two tracks for one warp: " << t.name << " in " << g.name;
    EXPECT_TRUE(l.x >= 0 && l.x < blocks && l.y == 0 && l.z == 0) << t.name;
    EXPECT_EQ(warps.count(l.warp), 1u) << "a warp that must not record: " << t.name << " in " << g.name;
    const EventCounts got = CountsOf(t);
    const EventCounts want = expected(l.warp);
    EXPECT_EQ(got, want) << g.name << " | " << t.name << ": got " << Describe(got) << ", want " << Describe(want);
    recorded += Recorded(got);
  }
  ExpectEventsInsideKernelSpan(g);
  return recorded;
}

// Two ranges of one warp either nest or are disjoint. Their ends are mapped
// from cycles to ns through the chunk anchors of the SM, each quantised to
// one 32-ns %globaltimer tick, so two times mapped through different anchors
// may be off by up to that much: overlaps up to 64 ns (0.064 us) are allowed.
constexpr double kNestSlackUs = 0.064;

// Ranges nest and close: no range written as unterminated, no END without
// its BEGIN, and every completed range carries its length in SM cycles.
void ExpectRangesClosed(const ProfiledRun& run) {
  for (const auto& [pid, g] : run.launches) {
    for (const auto& [tid, t] : g.threads) {
      if (!IsWarp(t)) continue;
      std::vector<std::pair<double, double>> ranges;
      for (const json& e : t.events) {
        EXPECT_EQ(e.value("name", "").find("(end without begin)"), std::string::npos)
            << g.name << " | " << t.name << ": " << e.dump();
        if (e.value("ph", "") != "X") continue;
        const json args = e.value("args", json::object());
        EXPECT_FALSE(args.value("unterminated", false)) << g.name << " | " << t.name << ": " << e.dump();
        EXPECT_TRUE(args.contains("cycles") && args["cycles"].is_number() && args["cycles"].get<double>() >= 0)
            << "a completed range without args.cycles: " << e.dump();
        const double ts = e["ts"].get<double>();
        ranges.emplace_back(ts, ts + e.value("dur", 0.0));
      }
      for (size_t i = 0; i < ranges.size(); ++i) {
        for (size_t j = i + 1; j < ranges.size(); ++j) {
          const auto [a0, a1] = ranges[i];
          const auto [b0, b1] = ranges[j];
          const bool disjoint = a1 <= b0 + kNestSlackUs || b1 <= a0 + kNestSlackUs;
          const bool a_in_b = b0 <= a0 + kNestSlackUs && a1 <= b1 + kNestSlackUs;
          const bool b_in_a = a0 <= b0 + kNestSlackUs && b1 <= a1 + kNestSlackUs;
          EXPECT_TRUE(disjoint || a_in_b || b_in_a)
              << "ranges overlap without nesting on " << t.name << " in " << g.name << ": [" << a0 << ", " << a1
              << "] and [" << b0 << ", " << b1 << "]";
        }
      }
    }
  }
  ASSERT_TRUE(run.summary_event.is_object()) << "no run summary in the trace";
  EXPECT_EQ(run.summary_event.value("unterminated_ranges", -1), 0) << run.summary_event.dump();
  EXPECT_EQ(run.summary_event.value("unmatched_ends", -1), 0) << run.summary_event.dump();
}

// smprof-run's summary line: exactly these launches and events, nothing lost.
void ExpectExactTotals(const ProfiledRun& run, long launches, long recorded) {
  EXPECT_EQ(SummaryNumber(run, R"(profiled (\d+) launch)"), launches) << run.stderr_text;
  EXPECT_EQ(SummaryNumber(run, R"((\d+) events from)"), recorded) << run.stderr_text;
  EXPECT_EQ(SummaryNumber(run, R"(lost (\d+) events)"), 0) << run.stderr_text;
}

// The two variants of a kernel template, as they appear in demangled names.
const std::vector<std::string> kVariants = {"<true>", "<false>"};

// 1. Lanes 0-15 and 16-31 at different markers record one event each, beside
// the context's register cursor; the converged markers around them once.
TEST(GpuScenarios, RecorderDivergentHalvesRecordOneEventPerHalf) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("recorder-divergent-halves");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  static constexpr int kIterations = 5;  // the scenario's
  long total = 0;
  for (const std::string& variant : kVariants) {
    for (const LaunchGroup* g : ExactlyGroups(run, "divergent_halves" + variant, 1)) {
      const long recorded = ExpectWarpTracks(*g, 4, {0, 1}, [](int) {
        return EventCounts{{"i enter", 1},        {"X halves", 1},         {"i lo", kIterations},
                           {"i hi", kIterations}, {"i both", kIterations}, {"i leave", 1}};
      });
      EXPECT_EQ(recorded, 8L * (3 * kIterations + 4)) << g->name;
      total += recorded;
    }
  }
  ExpectRangesClosed(run);
  ExpectExactTotals(run, 2, 2L * 8 * (3 * kIterations + 4));
  EXPECT_EQ(total, 2L * 8 * (3 * kIterations + 4));
}

// 2. Lanes that return early leave the rest of the warp marking (diverged);
// a warp that returns before any marker has no track.
TEST(GpuScenarios, RecorderEarlyExitingLanesAndWarps) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("recorder-early-exit");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  for (const std::string& variant : kVariants) {
    for (const LaunchGroup* g : ExactlyGroups(run, "early_exit" + variant, 1)) {
      // Warp 2 returned before any marker: ExpectWarpTracks rejects a track of it.
      const long recorded = ExpectWarpTracks(*g, 4, {0, 1, 3}, [](int) {
        return EventCounts{{"i before", 1}, {"i loop", 6}, {"X tail", 1}, {"i tail_tick", 2}, {"i after", 1}};
      });
      EXPECT_EQ(recorded, 4L * 3 * 12) << g->name;
    }
  }
  ExpectRangesClosed(run);
  ExpectExactTotals(run, 2, 2L * 4 * 3 * 12);
}

// 3. Blocks whose last warp is partial (48 = 32 + 16, 100 = 3 x 32 + 4 threads).
TEST(GpuScenarios, RecorderPartialWarps) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("recorder-partial-warps");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const auto per_warp = [](int) { return EventCounts{{"X part", 1}, {"i p", 4}, {"i even", 1}, {"i odd", 1}}; };
  for (const std::string& variant : kVariants) {
    int launches = 0;
    for (const LaunchGroup* g : ExactlyGroups(run, "partial_warps" + variant, 2)) {
      if (g->name.find("block(48,1,1)") != std::string::npos) {
        EXPECT_EQ(ExpectWarpTracks(*g, 3, {0, 1}, per_warp), 3L * 2 * 8) << g->name;
        ++launches;
      } else if (g->name.find("block(100,1,1)") != std::string::npos) {
        EXPECT_EQ(ExpectWarpTracks(*g, 3, {0, 1, 2, 3}, per_warp), 3L * 4 * 8) << g->name;
        ++launches;
      } else {
        ADD_FAILURE() << "unexpected launch shape: " << g->name;
      }
    }
    EXPECT_EQ(launches, 2) << variant;
  }
  ExpectRangesClosed(run);
  ExpectExactTotals(run, 4, 2L * (3 * 2 + 3 * 4) * 8);
}

// 4. Blocks of 1024 threads: 32 warps each, warp 31 included.
TEST(GpuScenarios, RecorderBlocksOf1024Threads) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("recorder-big-blocks");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  std::set<int> all_warps;
  for (int w = 0; w < 32; ++w) all_warps.insert(w);
  for (const std::string& variant : kVariants) {
    for (const LaunchGroup* g : ExactlyGroups(run, "big_blocks" + variant, 1)) {
      EXPECT_NE(g->name.find("grid(3,1,1) block(1024,1,1)"), std::string::npos) << g->name;
      const auto per_warp = [](int) { return EventCounts{{"X big", 1}, {"i b", 3}, {"i lane5", 1}}; };
      const long recorded = ExpectWarpTracks(*g, 3, all_warps, per_warp);
      EXPECT_EQ(recorded, 3L * 32 * 6) << g->name;
    }
  }
  ExpectRangesClosed(run);
  ExpectExactTotals(run, 2, 2L * 3 * 32 * 6);
}

// 5. 2000 markers per warp: many chunks per warp, and with a context two
// chunks filling at once (converged "even", diverged "odd"), which the host
// must merge by time. Once with the default chunk size (SMPROF_CHUNK_BYTES,
// 1024 bytes: 61 events per chunk) and once with the smallest (256 bytes: 13
// events per chunk, 154 chunks per warp).
TEST(GpuScenarios, RecorderManyMarkersPerWarpSpanManyChunksInOrder) {
  REQUIRE_GPU();
  static constexpr int kMarkers = 2000;  // the scenario's
  for (const std::string prefix : {"", "env SMPROF_CHUNK_BYTES=256"}) {
    SCOPED_TRACE(prefix.empty() ? "default chunk size" : prefix);
    const ProfiledRun run = Profile("recorder-many-markers", "", prefix);
    ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
    for (const std::string& variant : kVariants) {
      const auto many = [](int) { return EventCounts{{"i m", kMarkers}}; };
      for (const LaunchGroup* g : ExactlyGroups(run, "many_markers" + variant, 1)) {
        EXPECT_EQ(ExpectWarpTracks(*g, 4, {0, 1, 2, 3}, many), 16L * kMarkers) << g->name;
      }
      const auto interleaved = [](int) { return EventCounts{{"i even", kMarkers / 2}, {"i odd", kMarkers / 2}}; };
      for (const LaunchGroup* g : ExactlyGroups(run, "interleaved_markers" + variant, 1)) {
        EXPECT_EQ(ExpectWarpTracks(*g, 2, {0, 1}, interleaved), 4L * kMarkers) << g->name;
        for (const auto& [tid, t] : g->threads) {
          if (!IsWarp(t)) continue;
          // The collector writes a warp's instants in the order the injector
          // merged them: that order must already be the order in time ...
          int out_of_order = 0;
          for (size_t i = 1; i < t.events.size(); ++i) {
            out_of_order += t.events[i]["ts"].get<double>() < t.events[i - 1]["ts"].get<double>();
          }
          EXPECT_EQ(out_of_order, 0) << "events of " << t.name << " in " << g->name << " are not merged by time";
          // ... and in time the two kinds alternate, "even" first, with no
          // two events at one time (200 spin cycles lie between them).
          std::vector<const json*> by_time;
          for (const json& e : t.events) by_time.push_back(&e);
          std::stable_sort(by_time.begin(), by_time.end(), [](const json* a, const json* b) {
            return (*a)["ts"].get<double>() < (*b)["ts"].get<double>();
          });
          int misplaced = 0, ties = 0;
          std::string first_misplaced;
          for (size_t i = 0; i < by_time.size(); ++i) {
            const std::string want = i % 2 == 0 ? "even" : "odd";
            if ((*by_time[i])["name"] != want) {
              if (misplaced++ == 0) first_misplaced = "#" + std::to_string(i) + ": " + by_time[i]->dump();
            }
            if (i > 0) ties += (*by_time[i])["ts"].get<double>() == (*by_time[i - 1])["ts"].get<double>();
          }
          EXPECT_EQ(misplaced, 0) << t.name << " in " << g->name << ", first " << first_misplaced;
          EXPECT_EQ(ties, 0) << t.name << " in " << g->name;
        }
      }
    }
    ExpectRangesClosed(run);
    ExpectExactTotals(run, 4, 2L * 16 * kMarkers + 2L * 4 * kMarkers);
  }
}

// --- The device API (tests/gpu/apps/kernels_device_api.cu) -------------------
// One run of the "device-api" scenario: every kernel with and without a
// context on 2 blocks of 4 warps, 40 iterations each.
constexpr int kApiBlocks = 2;
constexpr int kApiIterations = 40;
const std::set<int> kAllFourWarps = {0, 1, 2, 3};

const ProfiledRun& DeviceApiRun() {
  static const ProfiledRun run = Profile("device-api");
  return run;
}

// The values (args.value, or a counter's one arg) of a warp's events "<ph> <name>", sorted.
std::vector<int64_t> ValuesOf(const Thread& t, const std::string& ph, const std::string& name) {
  std::vector<int64_t> out;
  for (const json& e : t.events) {
    if (e.value("ph", "") != ph || e.value("name", "") != name) continue;
    const json args = e.value("args", json::object());
    if (ph == "C") {
      EXPECT_EQ(args.size(), 1u) << e.dump();
      if (!args.empty()) out.push_back(args.begin()->get<int64_t>());
    } else {
      EXPECT_TRUE(args.contains("value")) << e.dump();
      if (args.contains("value")) out.push_back(args["value"].get<int64_t>());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GpuScenarios, DeviceApiPhasesPredicatesWarpChoiceAndNames) {
  REQUIRE_GPU();
  const ProfiledRun& run = DeviceApiRun();
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  static constexpr int n = kApiIterations;
  for (const std::string& variant : kVariants) {
    for (const LaunchGroup* g : ExactlyGroups(run, "api_phases" + variant, 1)) {
      ExpectWarpTracks(*g, kApiBlocks, kAllFourWarps, [](int) { return EventCounts{{"X load", n}, {"X mma", n}}; });
    }
    for (const LaunchGroup* g : ExactlyGroups(run, "api_predicates" + variant, 1)) {
      ExpectWarpTracks(*g, kApiBlocks, kAllFourWarps, [](int warp) {
        EventCounts c{{"i even", (n + 1) / 2}, {"X odd", n / 2}, {"i lane 5", n}, {"i low half", n}};
        c[warp == 0 ? "i leader" : warp == 1 ? "i warp 1" : "i warps 2-3"] = n;
        return c;
      });
    }
    for (const LaunchGroup* g : ExactlyGroups(run, "api_names" + variant, 1)) {
      ExpectWarpTracks(*g, kApiBlocks, kAllFourWarps, [](int) {
        EventCounts c{{"X stage 0", (n + 2) / 3}, {"X stage 1", (n + 1) / 3}, {"X stage 2", n / 3}};
        for (int i = 0; i < n; ++i) {
          char tile[16];
          std::snprintf(tile, sizeof(tile), "i tile 0x%02x", i + 10);
          c[tile] = 1;
          c["X step " + std::to_string(i)] = 1;
        }
        return c;
      });
    }
  }
  for (const LaunchGroup* g : ExactlyGroups(run, "api_kernel_scope", 1)) {
    ExpectWarpTracks(*g, kApiBlocks, kAllFourWarps, [](int) { return EventCounts{{"X kernel", 1}, {"i work", n}}; });
  }
  ExpectRangesClosed(run);
  // Per warp: phases 2n + 1 (one event per boundary), predicates 4.5n, values
  // 5n, names 4n + 1; per block of the async kernel 2n + 2; SMPROF_KERNEL
  // n + 2 (one variant).
  const long per_variant_warps = kApiBlocks * 4;
  const long recorded = 2 * per_variant_warps * ((2 * n + 1) + (9 * n / 2) + 5 * n + (4 * n + 1)) +
                        2 * kApiBlocks * (2 * n + 2) + per_variant_warps * (n + 2);
  ExpectExactTotals(run, 11, recorded);
}

TEST(GpuScenarios, DeviceApiValuesAndCountersAreExact) {
  REQUIRE_GPU();
  const ProfiledRun& run = DeviceApiRun();
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  static constexpr int n = kApiIterations;
  std::vector<int64_t> v32, v64, ends;
  for (int i = 0; i < n; ++i) {
    v32.push_back(i - 2);
    v64.push_back((int64_t{i} << 33) + 5);
    ends.push_back(3 * i);
  }
  for (const std::string& variant : kVariants) {
    for (const LaunchGroup* g : ExactlyGroups(run, "api_values" + variant, 1)) {
      ExpectWarpTracks(*g, kApiBlocks, kAllFourWarps, [](int) {
        return EventCounts{{"i v32", n}, {"i v64", n}, {"X r", n}, {"C count", n}};
      });
      for (const auto& [tid, t] : g->threads) {
        if (!IsWarp(t)) continue;
        const int warp = ParseWarpLabel(t.name).warp;
        std::vector<int64_t> counts;
        for (int i = 0; i < n; ++i) counts.push_back(warp * 1000 + i);
        EXPECT_EQ(ValuesOf(t, "i", "v32"), v32) << t.name;
        EXPECT_EQ(ValuesOf(t, "i", "v64"), v64) << t.name;  // 64-bit: two slots each, across chunk boundaries
        EXPECT_EQ(ValuesOf(t, "X", "r"), ends) << t.name;
        EXPECT_EQ(ValuesOf(t, "C", "count"), counts) << t.name;
      }
    }
  }
}

TEST(GpuScenarios, DeviceApiAsyncSpansLinkTheWarpsOfABlock) {
  REQUIRE_GPU();
  const ProfiledRun& run = DeviceApiRun();
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  static constexpr int n = kApiIterations;
  for (const std::string& variant : kVariants) {
    for (const LaunchGroup* g : ExactlyGroups(run, "api_async" + variant, 1)) {
      // Warp 0 begins every span, warp 1 ends "stage", warp 2 ends "stray";
      // warp 3 records nothing. Ends are instants on the warps' threads,
      // linked by a flow ("s" on warp 0, "f" on warp 1).
      ExpectWarpTracks(*g, kApiBlocks, {0, 1, 2}, [](int warp) {
        if (warp == 0) {
          return EventCounts{{"i stage", n},  {"b stage", n},  {"s stage", n},
                             {"i orphan", 1}, {"b orphan", 1}, {"e orphan", 1}};
        }
        if (warp == 1) return EventCounts{{"i stage", n}, {"e stage", n}, {"f stage", n}};
        return EventCounts{{"i stray", 1}, {"b stray", 1}, {"e stray", 1}};
      });
      std::map<std::string, int> flows_out, flows_in;
      for (const auto& [tid, t] : g->threads) {
        if (!IsWarp(t)) continue;
        const WarpLabel l = ParseWarpLabel(t.name);
        std::map<uint64_t, double> begun;
        for (const json& e : t.events) {
          const std::string ph = e.value("ph", "");
          const json args = e.value("args", json::object());
          if (ph == "b" && e.value("name", "") == "stage") {
            EXPECT_EQ(args.value("begin_warp", -1), 0) << e.dump();
            EXPECT_EQ(args.value("end_warp", -1), 1) << e.dump();
            EXPECT_LT(args.value("token", 99), 4) << e.dump();
          }
          if (ph == "b" && e.value("name", "") == "orphan") {
            EXPECT_TRUE(args.value("unterminated", false)) << e.dump();
          }
          if (ph == "b" && e.value("name", "") == "stray") {
            EXPECT_EQ(args.value("smprof_error", ""), "unmatched end") << e.dump();
          }
          if (ph == "s") ++flows_out[std::to_string(l.x) + ":" + e.at("id").dump()];
          if (ph == "f") ++flows_in[std::to_string(l.x) + ":" + e.at("id").dump()];
        }
      }
      // Every flow begins on warp 0 and ends on warp 1 of the same block, once.
      EXPECT_EQ(flows_out.size(), static_cast<size_t>(kApiBlocks * n));
      EXPECT_EQ(flows_out, flows_in);
    }
  }
  ASSERT_TRUE(run.summary_event.is_object());
  // Spans counted with the unterminated ones and the unmatched ends: per block n + 2.
  EXPECT_EQ(run.summary_event.value("async_spans", -1), 2 * kApiBlocks * (n + 2)) << run.summary_event.dump();
  EXPECT_EQ(run.summary_event.value("async_unterminated", -1), 2 * kApiBlocks) << run.summary_event.dump();
  EXPECT_EQ(run.summary_event.value("async_unmatched_ends", -1), 2 * kApiBlocks) << run.summary_event.dump();
}

// -rdc: a device function of one translation unit (every kind of marker,
// through the context it is given) called from a template kernel of another
// (tests/compile/multi_tu_a.cu, multi_tu_b.cu), one warp each.
TEST(GpuScenarios, DeviceApiAcrossSeparatelyCompiledUnits) {
  REQUIRE_GPU();
  const ProfiledRun run = ProfileApp("smprof_multi_tu_rdc");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  for (const LaunchGroup* g : ExactlyGroups(run, "multi_tu_a", 1)) {
    ExpectWarpTracks(*g, 1, {0}, [](int) { return EventCounts{{"i a", 1}}; });
  }
  for (const LaunchGroup* g : ExactlyGroups(run, "multi_tu_b<3>", 1)) {
    ExpectWarpTracks(*g, 1, {0}, [](int) {
      return EventCounts{{"X kernel", 1}, {"X b stage 3", 1}, {"X a phase", 1}, {"i a", 1},      {"C a counter", 1},
                         {"i a span", 2}, {"b a span", 1},    {"e a span", 1},  {"s a span", 1}, {"f a span", 1}};
    });
    for (const auto& [tid, t] : g->threads) {
      if (!IsWarp(t)) continue;
      EXPECT_EQ(ValuesOf(t, "i", "a"), std::vector<int64_t>{1}) << t.name;
      EXPECT_EQ(ValuesOf(t, "C", "a counter"), std::vector<int64_t>{int64_t{1} << 40}) << t.name;
    }
  }
  // 1 + (kernel 2, stage 2, phase 2, a 1, counter 1, span 2).
  ExpectExactTotals(run, 2, 11);
}

// The device API example (device/examples/pipelined_gemm.cu), n = 256: 8 K
// tiles, 64 blocks of a producer warp and 4 consumer warps, one launch.
TEST(GpuScenarios, DeviceApiExamplePipelineShowsItsStagesAndHandOffs) {
  REQUIRE_GPU();
  const ProfiledRun run = ProfileApp("smprof_example_pipeline 256 1");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text << run.stdout_text;
  static constexpr int kTiles = 8, kBlocks = 64;
  const auto groups = ExactlyGroups(run, "gemm_pipelined", 1);
  if (groups.empty()) return;
  const LaunchGroup& g = *groups[0];
  EXPECT_EQ(g.Warps(), kBlocks * 5) << g.name;
  std::vector<int64_t> bytes;
  for (int t = 1; t <= kTiles; ++t) bytes.push_back(int64_t{t} * 2 * 32 * 32 * 4);
  int flows = 0;
  for (const auto& [tid, t] : g.threads) {
    if (!IsWarp(t)) continue;
    const int warp = ParseWarpLabel(t.name).warp;
    EventCounts got = CountsOf(t);
    for (const char* ph : {"s ", "f "}) {  // flows, counted below
      for (auto it = got.begin(); it != got.end();) {
        if (it->first.rfind(ph, 0) == 0) {
          flows += it->second;
          it = got.erase(it);
        } else {
          ++it;
        }
      }
    }
    EventCounts want{{"X kernel", 1}};
    if (warp == 0) {
      want["X wait empty"] = kTiles;
      want["X load"] = kTiles;
      want["C bytes loaded"] = kTiles;
      want["i stage"] = kTiles;  // the spans' begins
      want["b stage"] = kTiles;
      EXPECT_EQ(ValuesOf(t, "C", "bytes loaded"), bytes) << t.name;
    } else {
      want["X wait full"] = kTiles;
      for (int k = 0; k < kTiles; ++k) want["X mma k=" + std::to_string(k)] = 1;
      if (warp == 1) {
        want["i stage"] = kTiles;  // the spans' ends
        want["e stage"] = kTiles;
        want["i first tile"] = 1;
      }
    }
    EXPECT_EQ(got, want) << t.name << ": got " << Describe(got) << ", want " << Describe(want);
  }
  EXPECT_EQ(flows, 2 * kBlocks * kTiles);
  ExpectRangesClosed(run);
}

// 6. Device functions (not inlined) called from converged and from divergent
// code: one taking the context by reference, one without a context parameter.
TEST(GpuScenarios, RecorderDeviceFunctionsFromConvergedAndDivergentCode) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("recorder-device-functions");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const auto with_context = [](int) {
    return EventCounts{{"X kernel", 1}, {"X fn_ctx", 6}, {"i fn_ctx_tick", 6}, {"i fn_plain", 6}};
  };
  for (const LaunchGroup* g : ExactlyGroups(run, "device_functions<true>", 1)) {
    EXPECT_EQ(ExpectWarpTracks(*g, 2, {0, 1}, with_context), 4L * 26) << g->name;
  }
  const auto without_context = [](int) { return EventCounts{{"X kernel", 1}, {"i fn_plain", 6}}; };
  for (const LaunchGroup* g : ExactlyGroups(run, "device_functions<false>", 1)) {
    EXPECT_EQ(ExpectWarpTracks(*g, 2, {0, 1}, without_context), 4L * 8) << g->name;
  }
  ExpectRangesClosed(run);
  ExpectExactTotals(run, 2, 4L * 26 + 4L * 8);
}

// The GPU's identity facts in the run summary (gpus[0]).
const json& FirstGpu(const ProfiledRun& run) {
  static const json kNone = json::object();
  if (!run.summary_event.is_object() || !run.summary_event.contains("gpus") || run.summary_event["gpus"].empty()) {
    return kNone;
  }
  return run.summary_event["gpus"][0];
}

// 7. A range's args.cycles is its exact length in SM cycles. Each range
// spins N cycles (clock64() from t0 until t0 + N; the kernel reports the
// cycles S each spin really took, first to last clock read: N plus the
// loop's overshoot), so cycles >= S exactly, and the rest, cycles - S, is
// what the two markers put inside the range: the BEGIN's work after its late
// clock read (event assembly, the store, a taken branch to the join and the
// reconvergence barrier as the compiler lays them out) and the END's before
// its clock read (its idle test). It must stay within kInRangeCycles, which
// the test prints with cycles - N (H100: markers' share 99-182 cycles over
// three builds, cycles - N 111-212; the issue's target of 2 % of N for
// N >= 10k is 200, met by some builds and not others: docs/performance.md). Each range's
// dur (us) x sm_clock_measured_khz / 1000 must agree with cycles within
// max(2 %, 16 cycles) for the 10k and 100k ranges (1k cycles is ~0.5 us, of
// which one 32-ns anchor tick is already 6 %).
TEST(GpuScenarios, RecorderRangeCyclesAreExact) {
  REQUIRE_GPU();
  char dir_template[] = "/tmp/smprof-spins-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string spins_path = dir + "/spins.txt";
  const ProfiledRun run = Profile("recorder-cycle-ranges " + spins_path);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const json& gpu = FirstGpu(run);
  const double khz = gpu.value("sm_clock_measured_khz", 0.0);
  ASSERT_GT(khz, 0) << "no measured SM clock: " << gpu.dump();
  constexpr double kInRangeCycles = 192;
  const std::vector<std::string> names = {"spin1k", "spin10k", "spin100k"};
  const std::map<std::string, double> spins = {{"spin1k", 1000}, {"spin10k", 10000}, {"spin100k", 100000}};
  std::map<std::pair<int, std::string>, double> spun;  // (block, name) -> cycles the spin took
  {
    std::ifstream in(spins_path);
    int b, i;
    unsigned long long cycles;
    while (in >> b >> i >> cycles) {
      ASSERT_TRUE(i >= 0 && i < 3) << spins_path;
      spun[{b, names[i]}] = static_cast<double>(cycles);
    }
    ASSERT_EQ(spun.size(), 8u * 3) << spins_path;
  }
  for (const LaunchGroup* g : ExactlyGroups(run, "cycle_ranges", 1)) {
    const auto per_warp = [](int) {
      return EventCounts{{"i warmup", 1}, {"X spin1k", 1}, {"X spin10k", 1}, {"X spin100k", 1}};
    };
    EXPECT_EQ(ExpectWarpTracks(*g, 8, {0}, per_warp), 8L * 7) << g->name;
    // name -> min, max of cycles - N and of cycles - S
    std::map<std::string, std::pair<double, double>> over, inside;
    std::map<std::string, double> worst_dur;  // name -> max |dur cycles - cycles|
    for (const auto& [tid, t] : g->threads) {
      if (!IsWarp(t)) continue;
      int block = -1;
      ASSERT_EQ(std::sscanf(t.name.c_str(), "SM %*d | block (%d", &block), 1) << t.name;
      for (const json& e : t.events) {
        const auto spin = spins.find(e.value("name", ""));
        if (e.value("ph", "") != "X" || spin == spins.end()) continue;
        const double n = spin->second;
        const auto s = spun.find({block, spin->first});
        ASSERT_NE(s, spun.end()) << t.name << " " << spin->first;
        const json args = e.value("args", json::object());
        if (!args.contains("cycles") || !args["cycles"].is_number()) {
          ADD_FAILURE() << "no args.cycles: " << e.dump();
          continue;
        }
        const double cycles = args["cycles"].get<double>();
        EXPECT_GE(cycles, s->second) << t.name << ": spun " << s->second << ": " << e.dump();
        EXPECT_LE(cycles - s->second, kInRangeCycles) << t.name << ": spun " << s->second << ": " << e.dump();
        const auto widen = [](auto& m, const std::string& key, double v) {
          auto [it, fresh] = m.try_emplace(key, v, v);
          it->second.first = std::min(it->second.first, v);
          it->second.second = std::max(it->second.second, v);
        };
        widen(over, spin->first, cycles - n);
        widen(inside, spin->first, cycles - s->second);
        const double dur_cycles = e["dur"].get<double>() * khz / 1000.0;
        worst_dur[spin->first] = std::max(worst_dur[spin->first], std::abs(dur_cycles - cycles));
        if (n >= 10000) {
          EXPECT_NEAR(dur_cycles, cycles, std::max(0.02 * cycles, 16.0))
              << t.name << ": dur " << e["dur"] << " us at " << khz << " kHz: " << e.dump();
        }
      }
    }
    for (const auto& [name, mm] : over) {
      std::printf("%s: cycles - N in [%.0f, %.0f]; cycles - spun (the markers' share) in [%.0f, %.0f]; "
                  "|dur x clock - cycles| <= %.1f cycles (%.0f kHz)\n",
                  name.c_str(), mm.first, mm.second, inside[name].first, inside[name].second, worst_dur[name], khz);
    }
    EXPECT_EQ(over.size(), 3u);
  }
  ExpectRangesClosed(run);
  ExpectExactTotals(run, 1, 8L * 7);
}

// 8. Marker times on every SM agree with %globaltimer read by the kernel
// itself right before each marker, up to one constant offset (the trace's
// origin and the injector's %globaltimer-to-CUPTI offset): each difference
// lies within two %globaltimer ticks of the median difference. One tick of
// quantisation is in the kernel's own reading, one in the chunk anchor the
// marker's cycles are mapped through (64 ns on H100/H200, whose ticks are 32
// ns; 2 x timer_resolution_ns where a GPU reports coarser ticks), plus 16 ns
// for the varying gap between the two readings.
TEST(GpuScenarios, RecorderTimesAgreeWithGlobaltimerAcrossSms) {
  REQUIRE_GPU();
  char dir_template[] = "/tmp/smprof-ticks-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string ticks_path = dir + "/ticks.txt";
  const ProfiledRun run = Profile("recorder-cross-sm " + ticks_path);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const json& gpu = FirstGpu(run);
  const int sms = gpu.value("sm_count", 0);
  ASSERT_GT(sms, 0) << gpu.dump();
  static constexpr int kTicks = 8, kWarps = 4;  // the scenario's
  const int blocks = 4 * sms;
  // (block, warp) -> the kernel's %globaltimer reading before tick i.
  std::map<std::pair<int, int>, std::vector<int64_t>> readings;
  {
    std::ifstream in(ticks_path);
    int b, w, i;
    unsigned long long ns;
    int lines = 0;
    while (in >> b >> w >> i >> ns) {
      auto& v = readings[{b, w}];
      if (v.empty()) v.assign(kTicks, -1);
      ASSERT_TRUE(i >= 0 && i < kTicks) << "line " << lines;
      v[i] = static_cast<int64_t>(ns);
      ++lines;
    }
    ASSERT_EQ(lines, blocks * kWarps * kTicks) << ticks_path;
  }
  long recorded = 0;
  std::set<int> sms_seen;
  std::vector<int64_t> diffs;      // trace ns - %globaltimer ns, one per tick
  std::vector<std::string> where;  // which tick each is
  for (const LaunchGroup* g : ExactlyGroups(run, "cross_sm_ticks", 1)) {
    std::set<int> warps;
    for (int w = 0; w < kWarps; ++w) warps.insert(w);
    recorded = ExpectWarpTracks(*g, blocks, warps, [](int) { return EventCounts{{"i tick", kTicks}}; });
    for (const auto& [tid, t] : g->threads) {
      if (!IsWarp(t)) continue;
      const WarpLabel l = ParseWarpLabel(t.name);
      sms_seen.insert(l.sm);
      const auto it = readings.find({l.x, l.warp});
      if (it == readings.end()) {
        ADD_FAILURE() << "no readings for " << t.name;
        continue;
      }
      std::vector<int64_t> ts;
      for (const json& e : t.events) {
        if (e.value("ph", "") == "i" && e.value("name", "") == "tick") {
          ts.push_back(std::llround(e["ts"].get<double>() * 1000.0));  // us with 3 decimals -> ns
        }
      }
      std::sort(ts.begin(), ts.end());
      if (ts.size() != static_cast<size_t>(kTicks)) continue;  // ExpectWarpTracks reported it
      for (int i = 0; i < kTicks; ++i) {
        diffs.push_back(ts[i] - it->second[i]);
        where.push_back(t.name + " tick " + std::to_string(i));
      }
    }
  }
  ASSERT_EQ(diffs.size(), static_cast<size_t>(blocks) * kWarps * kTicks);
  std::vector<int64_t> sorted = diffs;
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  const int64_t offset = sorted[sorted.size() / 2];
  const int64_t tick = std::max<int64_t>(32, gpu.value("timer_resolution_ns", 32));
  // The two readings are also a few instructions apart (the kernel's
  // %globaltimer, then the marker's %clock64), and that gap varies with
  // scheduling: 16 ns on top (seen: max 60-67 ns on H100).
  const int64_t tolerance = 2 * tick + 16;
  int64_t worst = 0;
  size_t worst_at = 0, beyond = 0;
  for (size_t k = 0; k < diffs.size(); ++k) {
    const int64_t dev = std::llabs(diffs[k] - offset);
    if (dev > worst) {
      worst = dev;
      worst_at = k;
    }
    beyond += dev > tolerance;
  }
  std::printf(
      "cross-SM ticks: %zu on %zu SMs; trace - %%globaltimer = %lld ns + dev, max |dev| %lld ns (at %s), "
      "%zu beyond %lld ns\n",
      diffs.size(), sms_seen.size(), static_cast<long long>(offset), static_cast<long long>(worst),
      where[worst_at].c_str(), beyond, static_cast<long long>(tolerance));
  EXPECT_EQ(beyond, 0u) << "max |dev| " << worst << " ns at " << where[worst_at];
  EXPECT_GT(sms_seen.size(), 1u) << "the ticks ran on one SM only: nothing across SMs was compared";
  ExpectRangesClosed(run);
  ExpectExactTotals(run, 1, static_cast<long>(blocks) * kWarps * kTicks);
  EXPECT_EQ(recorded, static_cast<long>(blocks) * kWarps * kTicks);
}

// 9. The injector's calibration kernel measured the SM clock and the cost of a
// marker on this GPU.
TEST(GpuScenarios, RecorderCalibrationFactsAreRecorded) {
  REQUIRE_GPU();
  const ProfiledRun run = Profile("basic");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const json& g = FirstGpu(run);
  ASSERT_TRUE(g.contains("sm_clock_measured_khz") && g["sm_clock_measured_khz"].is_number()) << g.dump();
  const double nominal = g.value("sm_clock_khz", 0.0);
  const double measured = g["sm_clock_measured_khz"].get<double>();
  EXPECT_GT(nominal, 0) << g.dump();
  EXPECT_GE(measured, 0.7 * nominal) << g.dump();
  EXPECT_LE(measured, 1.3 * nominal) << g.dump();
  ASSERT_TRUE(g.contains("marker_cost_cycles") && g["marker_cost_cycles"].is_object()) << g.dump();
  const json& cost = g["marker_cost_cycles"];
  for (const char* key : {"context", "default", "diverged", "idle"}) {
    EXPECT_TRUE(cost.contains(key) && cost[key].is_number()) << key << ": " << cost.dump();
  }
  EXPECT_GT(cost.value("context", 0.0), 0) << cost.dump();
  EXPECT_GT(cost.value("default", 0.0), 0) << cost.dump();
  std::printf("SM clock: nominal %.0f kHz, measured %.0f kHz (%.1f %%); marker cost (cycles per event): %s\n", nominal,
              measured, nominal > 0 ? 100.0 * measured / nominal : 0.0, cost.dump().c_str());
}

// --- Triton (python/smprof/triton) ------------------------------------------

// python3 with torch (CUDA) and triton, and smprof's package on its path
// (SMPROF_PYTHON_DIR, else this source tree's python/).
std::string PythonDir() {
  const char* d = std::getenv("SMPROF_PYTHON_DIR");
  return d ? d : SMPROF_SOURCE_DIR "/python";
}
std::string TritonPython() { return "env PYTHONPATH=" + PythonDir() + " python3"; }
bool HaveTriton() {
  return Succeeds(TritonPython() + " -c 'import torch, triton, smprof.triton; assert torch.cuda.is_available()'");
}

// The program index (x) in a Triton warp's track name, "... | program (x,y,z) ...";
// -1 without one.
long ProgramOf(const Thread& t) {
  const size_t at = t.name.find("program (");
  return at == std::string::npos ? -1 : std::stol(t.name.substr(at + 9));
}

// The warp index at the end of a warp's track name, "... | warp w"; -1 without one.
long WarpOf(const Thread& t) {
  const size_t at = t.name.rfind("| warp ");
  return at == std::string::npos ? -1 : std::stol(t.name.substr(at + 7));
}

// tkern of apps/triton_app.py: grid 6 x 4 warps; per warp 3 "load" ranges
// (END values 0, 1, 2), "store", "tile" (a 64-bit value: program << 32 | 7),
// a "ctr" counter sample (program * 10), phases "step 0" and "step 1".
void ExpectTkernLaunch(const LaunchGroup& g) {
  EXPECT_EQ(g.Warps(), 6 * 4) << g.name;
  for (const auto& [tid, t] : g.threads) {
    if (!IsWarp(t)) continue;
    EXPECT_NE(t.name.find("| program ("), std::string::npos) << t.name;
    EXPECT_EQ(Count(t, "X", "load"), 3) << t.name;
    EXPECT_EQ(Count(t, "X", "store"), 1) << t.name;
    EXPECT_EQ(Count(t, "X", "step 0"), 1) << t.name;
    EXPECT_EQ(Count(t, "X", "step 1"), 1) << t.name;
    EXPECT_EQ(Count(t, "i", "tile"), 1) << t.name;
    EXPECT_EQ(Count(t, "C", "ctr"), 1) << t.name;
    const long program = ProgramOf(t);
    std::vector<long> ends;
    for (const json& e : t.events) {
      const json args = e.value("args", json::object());
      if (e.value("name", "") == "load" && args.contains("value")) ends.push_back(args["value"].get<long>());
      if (e.value("name", "") == "tile") {
        EXPECT_EQ(args.value("value", -1L), (program << 32) | 7) << t.name;
      }
    }
    EXPECT_EQ(ends, (std::vector<long>{0, 1, 2})) << t.name;
  }
}

TEST(GpuScenarios, TritonKernelOnTwoStreamsHasExactCountsPerLaunch) {
  REQUIRE_GPU();
  SKIP_UNLESS(HaveTriton(), "python3 with torch, triton and smprof's package");
  const ProfiledRun run = ProfileApp("smprof_triton_app.py streams 3", "", TritonPython());
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_NE(run.stdout_text.find("ok"), std::string::npos) << run.stdout_text;
  const auto groups = GroupsOf(run, "tkern");
  ASSERT_EQ(groups.size(), 6u);
  std::map<std::string, int> per_stream;
  for (const LaunchGroup* g : groups) {
    ExpectTkernLaunch(*g);
    const size_t at = g->name.find("stream ");
    ASSERT_NE(at, std::string::npos) << g->name;
    ++per_stream[g->name.substr(at, g->name.find(' ', at + 7) - at)];
  }
  EXPECT_EQ(per_stream.size(), 2u);
  for (const auto& [stream, n] : per_stream) EXPECT_EQ(n, 3) << stream;
  EXPECT_EQ(run.summary_event.value("lost", json::object()).value("total", -1), 0) << run.summary_event.dump();
}

TEST(GpuScenarios, TritonKernelInACudaGraphHasExactCountsPerReplay) {
  REQUIRE_GPU();
  SKIP_UNLESS(HaveTriton(), "python3 with torch, triton and smprof's package");
  const ProfiledRun run = ProfileApp("smprof_triton_app.py graph 4", "", TritonPython());
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_NE(run.stdout_text.find("ok"), std::string::npos) << run.stdout_text;
  const auto groups = GroupsOf(run, "tkern");
  ASSERT_EQ(groups.size(), 5u);  // the launch before the capture, then 4 replays
  for (const LaunchGroup* g : groups) ExpectTkernLaunch(*g);
}

TEST(GpuScenarios, TritonAndCudaKernelsShareOneTraceAndTheKernelFilter) {
  REQUIRE_GPU();
  SKIP_UNLESS(HaveTriton(), "python3 with torch, triton and smprof's package");
  const ProfiledRun run = ProfileApp("smprof_triton_app.py mixed", "", TritonPython());
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const auto triton = GroupsOf(run, "tkern");
  const auto cuda = GroupsOf(run, "driver_kernel");
  ASSERT_EQ(triton.size(), 2u);
  ASSERT_EQ(cuda.size(), 2u);
  for (const LaunchGroup* g : triton) ExpectTkernLaunch(*g);
  for (const LaunchGroup* g : cuda) {
    EXPECT_EQ(g->Warps(), 2 * 2) << g->name;
    for (const auto& [tid, t] : g->threads) {
      if (!IsWarp(t)) continue;
      EXPECT_EQ(Count(t, "i", "drv"), 5) << t.name;
      EXPECT_NE(t.name.find("| block ("), std::string::npos) << t.name;
    }
  }
  // The kernel filter selects the Triton kernel: the CUDA one records nothing.
  const ProfiledRun filtered = ProfileApp("smprof_triton_app.py mixed", "--kernels tkern", TritonPython());
  ASSERT_EQ(filtered.exit_code, 0) << filtered.stderr_text;
  EXPECT_EQ(GroupsOf(filtered, "tkern").size(), 2u);
  EXPECT_EQ(GroupsOf(filtered, "driver_kernel").size(), 0u);
  EXPECT_EQ(filtered.summary_event.value("launches_not_selected", -1), 2) << filtered.summary_event.dump();
  EXPECT_EQ(filtered.summary_event.value("filtered_events", -1), 0) << filtered.summary_event.dump();
}

TEST(GpuScenarios, TritonMarkersCompileOutWithoutABuffer) {
  REQUIRE_GPU();
  SKIP_UNLESS(HaveTriton(), "python3 with torch, triton and smprof's package");
  const ProfiledRun run = ProfileApp("smprof_triton_app.py off", "", TritonPython());
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text << run.stdout_text;
  EXPECT_NE(run.stdout_text.find("smprof globals in PTX: False"), std::string::npos) << run.stdout_text;
  EXPECT_EQ(GroupsOf(run, "tkern").size(), 0u);
}

// okern of apps/triton_app.py: markers with "who records" options (on_warp,
// on_warps, per_block, when), grid 3 x 4 warps.
TEST(GpuScenarios, TritonMarkerOptionsChooseWhichWarpsRecord) {
  REQUIRE_GPU();
  SKIP_UNLESS(HaveTriton(), "python3 with torch, triton and smprof's package");
  const ProfiledRun run = ProfileApp("smprof_triton_app.py options", "", TritonPython());
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_NE(run.stdout_text.find("ok"), std::string::npos) << run.stdout_text;
  const auto groups = GroupsOf(run, "okern");
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0]->Warps(), 3 * 4);
  for (const auto& [tid, t] : groups[0]->threads) {
    if (!IsWarp(t)) continue;
    const long program = ProgramOf(t);
    const long warp = WarpOf(t);
    ASSERT_TRUE(program >= 0 && warp >= 0) << t.name;
    EXPECT_EQ(Count(t, "i", "all"), 1) << t.name;
    EXPECT_EQ(Count(t, "i", "w0"), warp == 0 ? 1 : 0) << t.name;
    EXPECT_EQ(Count(t, "i", "w23"), warp >= 2 ? 1 : 0) << t.name;
    EXPECT_EQ(Count(t, "X", "odd"), warp == 1 ? 2 : 0) << t.name;
    EXPECT_EQ(Count(t, "i", "never"), 0) << t.name;
    EXPECT_EQ(Count(t, "C", "prog"), program == 1 ? 4 : 0) << t.name;
  }
  EXPECT_EQ(run.summary_event.value("lost", json::object()).value("total", -1), 0) << run.summary_event.dump();
}

// tkern with num_ctas=2: each program is a cluster of two CTAs. Every CTA's
// warps record tkern's events under "program (p,0,0) cta r", p the program id
// the kernel itself recorded (the "tile" value), r its rank in the cluster.
TEST(GpuScenarios, TritonClusterProgramsNameTheirProgramAndCta) {
  REQUIRE_GPU();
  SKIP_UNLESS(HaveTriton(), "python3 with torch, triton and smprof's package");
  const ProfiledRun run = ProfileApp("smprof_triton_app.py clusters", "", TritonPython());
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_NE(run.stdout_text.find("ok"), std::string::npos) << run.stdout_text;
  const auto groups = GroupsOf(run, "tkern");
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0]->Warps(), 6 * 2 * 4);
  std::set<std::string> seen;
  for (const auto& [tid, t] : groups[0]->threads) {
    if (!IsWarp(t)) continue;
    const long program = ProgramOf(t);
    const size_t cta = t.name.find(") cta ");
    const long warp = WarpOf(t);
    ASSERT_TRUE(program >= 0 && program < 6 && cta != std::string::npos && warp >= 0) << t.name;
    const long rank = std::stol(t.name.substr(cta + 6));
    EXPECT_TRUE(rank == 0 || rank == 1) << t.name;
    EXPECT_TRUE(seen.insert(std::to_string(program) + "/" + std::to_string(rank) + "/" + std::to_string(warp)).second)
        << "two tracks for " << t.name;
    EXPECT_EQ(Count(t, "X", "load"), 3) << t.name;
    EXPECT_EQ(Count(t, "i", "tile"), 1) << t.name;
    for (const json& e : t.events) {
      if (e.value("name", "") == "tile") {
        EXPECT_EQ(e.value("args", json::object()).value("value", -1L), (program << 32) | 7) << t.name;
      }
    }
  }
  EXPECT_EQ(seen.size(), 6u * 2 * 4);
  EXPECT_EQ(run.summary_event.value("lost", json::object()).value("total", -1), 0) << run.summary_event.dump();
}

// smprof.profile() in a program not started under smprof-run: CUDA and the
// kernel are loaded before the block; the two launches inside it are traced.
TEST(GpuScenarios, PythonProfileBlockTracesTheLaunchesInsideIt) {
  REQUIRE_GPU();
  SKIP_UNLESS(HaveTriton(), "python3 with torch, triton and smprof's package");
  char dir_template[] = "/tmp/smprof-profile-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string trace = dir + "/block.json";
  const int code = Shell("env SMPROF_BUILD_DIR=" + BuildDir() + " " + TritonPython() + " " + BuildDir() +
                             "/bin/smprof_triton_app.py profile " + trace,
                         dir + "/out.txt", dir + "/err.txt");
  const std::string out = Slurp(dir + "/out.txt");
  ASSERT_EQ(code, 0) << Slurp(dir + "/err.txt") << out;
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
  ASSERT_FALSE(Slurp(trace).empty()) << "no trace at " << trace;
  ProfiledRun run;
  ParseTrace(trace, &run);
  int launches = 0;
  int loads = 0;
  for (const auto& [pid, group] : run.launches) {
    launches += group.name.find("tkern") != std::string::npos;
    for (const auto& [tid, thread] : group.threads) {
      for (const json& e : thread.events) loads += e.value("ph", "") == "X" && e.value("name", "") == "load";
    }
  }
  EXPECT_EQ(launches, 2);
  EXPECT_EQ(loads, 2 * 6 * 4 * 3);
}

}  // namespace
