// End-to-end: the real smprof-run binary with the real smprof-collector on
// programs that never load CUDA. Checks exit codes, the trace file and how it
// is named and placed, the summary lines and hints, the run metadata, signal
// handling, processes that outlive the program, a collector that dies
// mid-write, smprof-run itself killed, stepping aside for other CUDA tools,
// --serve (the test process plays the caller that profiles itself), and that
// nothing (shared memory, temporary files) is left behind.
//
// This binary doubles as a program for smprof-run: with SMPROF_RUN_TEST_HELPER
// set it plays a producer (see RunHelper) instead of running the tests.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collector/perfetto_check.h"
#include "collector/trace_placement.h"
#include "common/json.h"
#include "common/transport.h"
#include "smprof/wire.h"
#include "tests/support/subprocess.h"
#include "tests/support/wire_builders.h"

namespace {

// --- helper program ------------------------------------------------------------

constexpr uint64_t kT0 = 5000000000ull;

// Sends `messages` as a producer of run `run_id` (by default the one in
// SMPROF_RUN_ID); false on failure.
bool SendAsProducer(const std::vector<smprof::testing::Bytes>& messages,
                    const char* run_id = std::getenv("SMPROF_RUN_ID")) {
  if (run_id == nullptr) return false;
  smprof::transport::ProducerOptions options;
  options.ring_bytes = 1u << 20;
  std::string error;
  auto producer = smprof::transport::Producer::Attach(run_id, options, &error);
  if (!producer) {
    std::fprintf(stderr, "helper: %s\n", error.c_str());
    return false;
  }
  bool ok = true;
  for (const auto& m : messages) ok = producer->Send(m.data(), static_cast<uint32_t>(m.size()), 0) && ok;
  producer->Detach();
  return ok;
}

// SMPROF_RUN_TEST_HELPER=orphan: exits at once, leaving a child that, once
// orphaned (and a moment later, so that a runner not waiting for it would
// already be stopping the collector), records one launch with 3 events.
// SMPROF_RUN_TEST_HELPER=malformed: sends a malformed message and 2 events of
// a launch never announced.
// SMPROF_RUN_TEST_HELPER=cuda-no-markers / not-selected / cupti-held: what a
// CUDA process's injector reports when it profiled nothing, and why.
[[noreturn]] void RunHelper(const std::string& mode) {
  using namespace smprof;
  const uint32_t self = static_cast<uint32_t>(getpid());
  if (mode == "orphan") {
    const pid_t parent = getpid();
    const pid_t child = fork();
    if (child != 0) _exit(child > 0 ? 0 : 20);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (getppid() == parent && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const uint32_t me = static_cast<uint32_t>(getpid());
    const bool ok = SendAsProducer({
        smprof::testing::Process(me, kT0, "orphan"),
        smprof::testing::Name(1, "late"),
        smprof::testing::Launch(1, kT0 + 1000, kT0 + 100000, "void korphan()"),
        smprof::testing::Warp(1, 0, 0, 0,
                              {smprof::testing::Ev(kT0 + 2000, 1, wire::kEventBegin),
                               smprof::testing::Ev(kT0 + 3000, 1, wire::kEventEnd),
                               smprof::testing::Ev(kT0 + 3500, 1, wire::kEventInstant)}),
        smprof::testing::Harvest(kT0 + 200000, wire::kHarvestSync, 0),
    });
    _exit(ok ? 0 : 21);
  }
  if (mode == "cuda-no-markers" || mode == "not-selected") {
    wire::StatsMsg stats{};
    stats.launches_opted_in = mode == "not-selected" ? 4 : 0;
    stats.launches_not_selected = stats.launches_opted_in;
    _exit(SendAsProducer({smprof::testing::Process(self, kT0, mode), smprof::testing::Stats(stats)}) ? 0 : 24);
  }
  if (mode == "cupti-held") {
    _exit(SendAsProducer({smprof::testing::Process(self, kT0, mode),
                          smprof::testing::Notice(wire::kNoticeCuptiUnavailable, "CUPTI for compute-sanitizer")})
              ? 0
              : 25);
  }
  if (mode == "malformed") {
    smprof::testing::Bytes bad_name = smprof::testing::Name(2, "abc");
    bad_name[12] = 40;  // name_len past the end of the message
    const bool ok = SendAsProducer({
        smprof::testing::Process(self, kT0, "malformed"),
        bad_name,
        smprof::testing::Warp(42, 0, 0, 0,
                              {smprof::testing::Ev(kT0 + 5000, 1, wire::kEventInstant), smprof::testing::Ev(kT0 + 5001, 1, wire::kEventInstant)}),
    });
    _exit(ok ? 0 : 22);
  }
  _exit(23);
}

const bool g_helper = [] {
  if (const char* mode = std::getenv("SMPROF_RUN_TEST_HELPER")) RunHelper(mode);
  return false;
}();

namespace fs = std::filesystem;
using smprof::NumberedPath;
using smprof::PartialPath;

// Safety net only: a hung run fails the test instead of hanging ctest.
constexpr std::chrono::seconds kRunTimeout{120};

// Every variable smprof-run reads; unset in the child unless a test sets it.
const std::vector<std::string> kSmprofVars = {
    "SMPROF_KERNELS",     "SMPROF_BUFFER_MB",      "SMPROF_WARPS",  "SMPROF_SHM_MB",   "SMPROF_LOG_LEVEL",
    "SMPROF_CHUNK_BYTES", "SMPROF_HIGH_WATER",     "SMPROF_RUN_ID", "SMPROF_INJECTOR", "SMPROF_PRELOAD",
    "SMPROF_COLLECTOR",   "CUDA_INJECTION64_PATH", "LD_PRELOAD"};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct RunResult {
  int exit_code = -1;  // 128+N if killed by signal N
  std::string out;
  std::string err;
  std::vector<std::string> leftover_segments;  // /dev/shm/smprof-<pid>-*
};

class SmprofRunTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* build = std::getenv("SMPROF_BUILD_DIR");
    ASSERT_NE(build, nullptr) << "SMPROF_BUILD_DIR is not set; run through ctest";
    smprof_run_ = fs::path(build) / "bin" / "smprof-run";
    ASSERT_TRUE(fs::exists(smprof_run_)) << smprof_run_ << " is missing: build target smprof-run";
    ASSERT_TRUE(fs::exists(fs::path(build) / "bin" / "smprof-collector"))
        << "smprof-collector is missing: build target smprof-collector";

    char templ[] = "/tmp/smprof-run-e2e-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
    work_ = dir_ / "work";
    fs::create_directory(work_);

    // The injector may not be built; a non-CUDA program never loads it.
    const fs::path injector = fs::path(build) / "lib" / "libsmprof_inject.so";
    if (!fs::exists(injector)) {
      fake_injector_ = dir_ / "libsmprof_inject.so";
      std::ofstream(fake_injector_).flush();
    }
  }

  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  smprof::testing::ProcessSpec Spec(const std::vector<std::string>& args,
                                    const std::vector<std::pair<std::string, std::string>>& env,
                                    const std::vector<int>& ignored) {
    smprof::testing::ProcessSpec spec;
    spec.argv = {smprof_run_.string()};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.cwd = work_.string();
    spec.unset_env = kSmprofVars;
    if (!fake_injector_.empty()) spec.env.emplace_back("SMPROF_INJECTOR", fake_injector_.string());
    spec.env.insert(spec.env.end(), env.begin(), env.end());
    spec.ignored_signals = ignored;
    spec.stdout_path = (dir_ / "stdout.txt").string();
    spec.stderr_path = (dir_ / "stderr.txt").string();
    return spec;
  }

  RunResult Collect(pid_t pid, int exit_code) {
    RunResult result;
    if (exit_code == -1) {
      ADD_FAILURE() << "smprof-run did not finish within " << kRunTimeout.count() << " s; its process group was killed";
    }
    result.exit_code = exit_code;
    result.out = ReadFile(dir_ / "stdout.txt");
    result.err = ReadFile(dir_ / "stderr.txt");
    result.leftover_segments = Segments(pid);
    return result;
  }

  static std::vector<std::string> Segments(pid_t pid) {
    std::vector<std::string> found;
    const std::string prefix = "smprof-" + std::to_string(pid) + "-";
    for (const auto& entry : fs::directory_iterator("/dev/shm")) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) == 0) found.push_back(name);
    }
    return found;
  }

  // Runs smprof-run with `args` in work_, with `env` added and the signals in
  // `ignored` ignored (as nohup or a shell's background job would).
  RunResult Run(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env = {},
                const std::vector<int>& ignored = {}) {
    const pid_t pid = smprof::testing::StartProcess(Spec(args, env, ignored));
    EXPECT_GT(pid, 0);
    if (pid <= 0) return {};
    return Collect(pid, smprof::testing::WaitProcess(pid, kRunTimeout));
  }

  // smprof-run --serve with pipes for its stdin and stdout, as a caller holds them.
  struct Serving {
    pid_t pid = -1;
    int to_stdin = -1;     // the write end of its stdin
    int from_stdout = -1;  // the read end of its stdout
  };
  Serving StartServing(const std::vector<std::string>& args,
                       const std::vector<std::pair<std::string, std::string>>& env = {}) {
    int in[2];
    int out[2];
    Serving s;
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2 failed";
      return s;
    }
    smprof::testing::ProcessSpec spec = Spec(args, env, {});
    spec.stdin_fd = in[0];
    spec.stdout_fd = out[1];
    s.pid = smprof::testing::StartProcess(spec);
    close(in[0]);
    close(out[1]);
    s.to_stdin = in[1];
    s.from_stdout = out[0];
    EXPECT_GT(s.pid, 0);
    return s;
  }

  // Closes the caller's ends and waits for smprof-run.
  RunResult FinishServing(Serving* s) {
    if (s->to_stdin >= 0) close(s->to_stdin);
    if (s->from_stdout >= 0) close(s->from_stdout);
    s->to_stdin = s->from_stdout = -1;
    if (s->pid <= 0) return {};
    return Collect(s->pid, smprof::testing::WaitProcess(s->pid, kRunTimeout));
  }

  // One line (newline included) from `fd`; what came before the end of the
  // stream or `timeout` otherwise.
  static std::string ReadLine(int fd, std::chrono::seconds timeout = std::chrono::seconds(30)) {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (line.empty() || line.back() != '\n') {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char c = 0;
      if (read(fd, &c, 1) != 1) break;
      line.push_back(c);
    }
    return line;
  }

  // The trace files (*.json) smprof-run left in work_.
  std::vector<fs::path> Traces() const {
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(work_)) {
      if (entry.path().extension() == ".pftrace") found.push_back(entry.path());
    }
    std::sort(found.begin(), found.end());
    return found;
  }

  static nlohmann::json ParseTrace(const fs::path& path) {
    std::string text = ReadFile(path);
    nlohmann::json trace = nlohmann::json::parse(text, nullptr, false);
    if (trace.is_discarded()) trace = nlohmann::json::parse(text + "]", nullptr, false);  // unterminated array
    return trace;
  }

  fs::path smprof_run_;
  fs::path dir_;
  fs::path work_;
  fs::path fake_injector_;
};

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST_F(SmprofRunTest, NonCudaProgramKeepsExitCodeAndWritesTrace) {
  const fs::path trace = dir_ / "t.json";
  RunResult r = Run({"-o", trace.string(), "/bin/sh", "-c", "exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  ASSERT_TRUE(fs::exists(trace)) << r.err;
  const nlohmann::json j = ParseTrace(trace);
  ASSERT_FALSE(j.is_discarded()) << ReadFile(trace);
  EXPECT_TRUE(j.is_array());
  EXPECT_TRUE(Contains(r.err, "smprof: profiled 0 launches, ")) << r.err;
  EXPECT_TRUE(Contains(r.err, " process(es); lost 0 events (device buffer 0, unplaced 0, transport 0)")) << r.err;
  EXPECT_TRUE(Contains(r.err, "smprof: trace: " + trace.string() + " (open it at https://ui.perfetto.dev)")) << r.err;
  // No process started CUDA: that is what the hint says, and nothing about
  // opting kernels in (which was not the problem).
  EXPECT_TRUE(Contains(r.err, "smprof: no process of the run started CUDA")) << r.err;
  EXPECT_FALSE(Contains(r.err, "<smprof/smprof.cuh>")) << r.err;
  EXPECT_EQ(Contains(r.err, "no NVIDIA driver"), !fs::exists("/proc/driver/nvidia/version")) << r.err;
  EXPECT_TRUE(r.leftover_segments.empty()) << r.leftover_segments.front();
}

// A process that used CUDA but launched no opted-in kernel is told that, not
// that it needs a GPU and a driver.
TEST_F(SmprofRunTest, HintNamesWhatWasMissingWhenCudaRan) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  RunResult r = Run({"-o", (dir_ / "a.json").string(), self}, {{"SMPROF_RUN_TEST_HELPER", "cuda-no-markers"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err,
                       "smprof: no kernel that opts in was launched: kernels opt in by including "
                       "<smprof/smprof.cuh>"))
      << r.err;
  EXPECT_FALSE(Contains(r.err, "driver")) << r.err;

  r = Run({"-o", (dir_ / "b.json").string(), "-k", "gemm*", self}, {{"SMPROF_RUN_TEST_HELPER", "not-selected"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err,
                       "smprof: SMPROF_KERNELS (now \"gemm*\") selected none of the 4 launches of "
                       "opted-in kernels"))
      << r.err;
  EXPECT_FALSE(Contains(r.err, "driver")) << r.err;

  // The hint names each setting that chose launches, and what to check.
  r = Run({"-o", (dir_ / "c.json").string(), "--launches", "gemm*:100-", "--capture-range", "cudaProfilerApi", self},
          {{"SMPROF_RUN_TEST_HELPER", "not-selected"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err,
                       "smprof: SMPROF_LAUNCHES (now \"gemm*:100-\") and SMPROF_CAPTURE_RANGE (now cudaProfilerApi) "
                       "selected none of the 4 launches of opted-in kernels: check the launch ranges against how "
                       "often the kernels ran and that the program calls cudaProfilerStart() (smprof-run --help)"))
      << r.err;
}

// Another tool holding CUPTI: one line naming it, and no misleading hint.
TEST_F(SmprofRunTest, ProcessNotProfiledSaysWhyAndNothingElse) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  RunResult r = Run({"-o", (dir_ / "c.json").string(), self}, {{"SMPROF_RUN_TEST_HELPER", "cupti-held"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, " was not profiled: CUPTI for compute-sanitizer holds CUPTI\n")) << r.err;
  EXPECT_FALSE(Contains(r.err, "driver")) << r.err;
  EXPECT_FALSE(Contains(r.err, "opts in")) << r.err;
  EXPECT_FALSE(Contains(r.err, "started CUDA")) << r.err;
}

TEST_F(SmprofRunTest, QuietPrintsNoSummary) {
  const fs::path trace = dir_ / "q.json";
  RunResult r = Run({"-q", "-o", trace.string(), "/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(Contains(r.err, "smprof:")) << r.err;
  EXPECT_TRUE(fs::exists(trace));
  EXPECT_TRUE(r.leftover_segments.empty());
}

TEST_F(SmprofRunTest, DefaultOutputNameInCurrentDirectory) {
  RunResult r = Run({"/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::vector<fs::path> traces = Traces();
  ASSERT_EQ(traces.size(), 1u) << r.err;
  EXPECT_EQ(traces[0].filename().string().rfind("smprof-sh-", 0), 0u) << traces[0];
  EXPECT_TRUE(Contains(r.err, "smprof: trace: " + traces[0].string())) << r.err;
  const auto check = smprof::perfetto::CheckTrace(ReadFile(traces[0]));
  EXPECT_TRUE(check.errors.empty()) << check.errors[0];
  EXPECT_GT(check.packets, 0u);
  // The trace and its statistics beside it (the statistics table is not
  // printed for a run without launches).
  EXPECT_EQ(std::distance(fs::directory_iterator(work_), fs::directory_iterator()), 3) << "the trace and its stats";
  const std::string base = traces[0].string();
  EXPECT_TRUE(fs::exists(base + ".stats.json")) << base;
  EXPECT_TRUE(fs::exists(base + ".stats.csv")) << base;
  EXPECT_FALSE(Contains(r.err, "smprof stats:")) << r.err;
}

// Two runs started in the same second in one directory: two names, two
// complete traces (they used to share one name and write one corrupt file).
TEST_F(SmprofRunTest, ConcurrentRunsGetTheirOwnDefaultNames) {
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    auto spec = Spec({"/bin/sh", "-c", "sleep 0.3"}, {}, {});
    spec.stderr_path = (dir_ / ("err" + std::to_string(i))).string();
    pids.push_back(smprof::testing::StartProcess(spec));
  }
  for (pid_t pid : pids) EXPECT_EQ(smprof::testing::WaitProcess(pid, kRunTimeout), 0);
  const std::vector<fs::path> traces = Traces();
  ASSERT_EQ(traces.size(), 2u);
  for (const fs::path& t : traces) {
    const auto check = smprof::perfetto::CheckTrace(ReadFile(t));
    EXPECT_TRUE(check.errors.empty() && check.packets > 0) << t;
  }
}

TEST_F(SmprofRunTest, ExistingTraceIsKeptUnlessForced) {
  const fs::path trace = work_ / "t.json";
  const fs::path marker = dir_ / "ran";
  std::ofstream(trace) << "precious";
  RunResult r = Run({"-o", trace.string(), "/bin/sh", "-c", "touch " + marker.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "smprof-run: " + trace.string() +
                                  " already exists: choose another --output, or "
                                  "pass --force to overwrite it"))
      << r.err;
  EXPECT_FALSE(fs::exists(marker)) << "the program must not run";
  EXPECT_EQ(ReadFile(trace), "precious");

  r = Run({"--force", "-o", trace.string(), "/bin/sh", "-c", "touch " + marker.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(marker));
  EXPECT_TRUE(nlohmann::json::accept(ReadFile(trace)));
}

TEST_F(SmprofRunTest, DevNullDiscardsTheTraceAndADirectoryIsRefused) {
  RunResult r = Run({"-o", "/dev/null", "/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "smprof: trace: /dev/null ")) << r.err;
  EXPECT_FALSE(fs::exists("/dev/null.partial"));
  r = Run({"-o", dir_.string(), "/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, dir_.string() + " is a directory")) << r.err;
}

// A file created at the output path while the program runs is not replaced:
// the trace goes beside it, and the summary says where.
TEST_F(SmprofRunTest, FileCreatedDuringTheRunIsNotReplaced) {
  const fs::path trace = work_ / "t.json";
  RunResult r = Run({"-o", trace.string(), "/bin/sh", "-c", "echo mine > " + trace.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(trace), "mine\n");
  const fs::path beside = NumberedPath(trace.string(), 2);
  EXPECT_TRUE(nlohmann::json::accept(ReadFile(beside)));
  EXPECT_TRUE(Contains(r.err, "smprof: trace: " + beside.string())) << r.err;
  EXPECT_TRUE(Contains(r.err, trace.string() + " appeared during the run")) << r.err;
}

// smprof-run killed outright: the collector still finishes the trace and
// puts it in place, and nothing else is left (no summary file, no shared
// memory, no partial file).
TEST_F(SmprofRunTest, KilledSmprofRunLeavesTheTraceAndNothingElse) {
  const fs::path trace = work_ / "k.json";
  auto before = [] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(fs::temp_directory_path())) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> tmp_before = before();
  const pid_t pid = smprof::testing::StartProcess(Spec({"-o", trace.string(), "/bin/sh", "-c", "sleep 30"}, {}, {}));
  ASSERT_GT(pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(PartialPath(trace.string())) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(fs::exists(PartialPath(trace.string())));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  EXPECT_EQ(smprof::testing::WaitProcess(pid, kRunTimeout), 128 + SIGKILL);
  kill(-pid, SIGKILL);  // the program (sleep), in smprof-run's process group
  while (!fs::exists(trace) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  while (!Segments(pid).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(nlohmann::json::accept(ReadFile(trace)));
  EXPECT_FALSE(fs::exists(PartialPath(trace.string())));
  EXPECT_TRUE(Segments(pid).empty());
  std::vector<std::string> tmp_added;
  const std::vector<std::string> tmp_after = before();
  std::set_difference(tmp_after.begin(), tmp_after.end(), tmp_before.begin(), tmp_before.end(),
                      std::back_inserter(tmp_added));
  for (const std::string& name : tmp_added) EXPECT_EQ(name.find("smprof-summary"), std::string::npos) << name;
}

TEST_F(SmprofRunTest, ProgramKilledBySignalGives128PlusSignal) {
  const fs::path trace = dir_ / "k.json";
  RunResult r = Run({"-o", trace.string(), "/bin/sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_TRUE(fs::exists(trace));
  EXPECT_TRUE(r.leftover_segments.empty());
}

// A program that cannot be started gets its one error line: no profiling
// summary, no hint, no trace file.
TEST_F(SmprofRunTest, ProgramThatCannotStartGetsOnlyItsError) {
  RunResult r = Run({"/nonexistent/smprof-no-such-program", "x"});
  EXPECT_EQ(r.exit_code, 127) << r.err;
  EXPECT_EQ(r.err, "smprof-run: cannot run '/nonexistent/smprof-no-such-program': No such file or directory\n");
  EXPECT_TRUE(r.leftover_segments.empty());
  EXPECT_EQ(fs::directory_iterator(work_), fs::directory_iterator()) << "no trace of a run that never started";

  const fs::path not_executable = dir_ / "data.txt";
  std::ofstream(not_executable) << "hello";
  r = Run({not_executable.string()});
  EXPECT_EQ(r.exit_code, 126) << r.err;
  EXPECT_EQ(r.err, "smprof-run: cannot run '" + not_executable.string() + "': Permission denied\n");
  EXPECT_EQ(fs::directory_iterator(work_), fs::directory_iterator());

  // A program that itself exits with 127 is a program that ran.
  r = Run({"/bin/sh", "-c", "exit 127"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_TRUE(Contains(r.err, "smprof: profiled 0 launches")) << r.err;
}

TEST_F(SmprofRunTest, BadKernelSpecRunsNothing) {
  const fs::path marker = dir_ / "marker";
  const std::string touch = "touch " + marker.string();
  RunResult r = Run({"--kernels", "gemm[", "/bin/sh", "-c", touch});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("smprof-run: --kernels: unterminated '['", 0), 0u) << r.err;
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_TRUE(fs::is_empty(work_));  // no trace either

  r = Run({"/bin/sh", "-c", touch}, {{"SMPROF_KERNELS", "a,,b"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("smprof-run: SMPROF_KERNELS: empty pattern", 0), 0u) << r.err;
  EXPECT_FALSE(fs::exists(marker));

  r = Run({"--buffer-mb", "0", "/bin/sh", "-c", touch});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "--buffer-mb")) << r.err;
  EXPECT_FALSE(fs::exists(marker));
}

TEST_F(SmprofRunTest, NoProgramPrintsUsage) {
  RunResult r = Run({});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "usage: smprof-run")) << r.err;
  r = Run({"-q", "--"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "usage: smprof-run")) << r.err;
}

TEST_F(SmprofRunTest, HelpMentionsEveryOptionAndVariable) {
  RunResult r = Run({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  // Whole option lines, so that "-o" cannot pass as a piece of "--output".
  for (const char* line : {"\n  -o, --output PATH ", "\n  -k, --kernels LIST ", "\n      --buffer-mb N ",
                           "\n      --warps LIST ", "\n      --shm-mb N ", "\n      --force ", "\n      --preload ",
                           "\n      --log-level LEVEL ", "\n  -q, --quiet ", "\n  -h, --help ", "\n      --version "}) {
    EXPECT_TRUE(Contains(r.out, line)) << line;
  }
  for (const char* var :
       {"SMPROF_KERNELS", "SMPROF_BUFFER_MB", "SMPROF_WARPS", "SMPROF_SHM_MB", "SMPROF_LOG_LEVEL", "SMPROF_CHUNK_BYTES",
        "SMPROF_HIGH_WATER", "SMPROF_RUN_ID", "SMPROF_INJECTOR", "SMPROF_PRELOAD", "SMPROF_COLLECTOR"}) {
    EXPECT_TRUE(Contains(r.out, std::string("\n  ") + var + " ")) << var;
  }
  r = Run({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("smprof-run ", 0), 0u) << r.out;
  EXPECT_TRUE(Contains(r.out, "(")) << "the version names the git revision: " << r.out;
}

// A reader of the trace alone can tell what was run and how.
TEST_F(SmprofRunTest, TraceRecordsTheRunAndHowItEnded) {
  const fs::path trace = dir_ / "meta.json";
  RunResult r = Run({"-o", trace.string(), "-k", "gemm*", "/bin/sh", "-c", "exit 3"},
                    {{"SMPROF_BUFFER_MB", "16"}, {"CUDA_VISIBLE_DEVICES", "1"}, {"SECRET_TOKEN", "hunter2"}});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const nlohmann::json t = ParseTrace(trace);
  ASSERT_TRUE(t.is_array()) << ReadFile(trace);
  const nlohmann::json* run = nullptr;
  for (const auto& e : t) {
    if (e.value("name", "") == "smprof run" && e.value("ph", "") == "i") run = &e;
  }
  ASSERT_NE(run, nullptr) << ReadFile(trace);
  const nlohmann::json& a = (*run)["args"];
  EXPECT_EQ(a["command"], nlohmann::json::parse(R"(["/bin/sh", "-c", "exit 3"])"));
  EXPECT_EQ(a["smprof_run"][1], "-o");
  EXPECT_EQ(a["cwd"], work_.string());
  EXPECT_EQ(a["settings"]["SMPROF_KERNELS"], nlohmann::json::parse(R"({"value": "gemm*", "source": "-k"})"));
  EXPECT_EQ(a["settings"]["SMPROF_BUFFER_MB"],
            nlohmann::json::parse(R"({"value": "16", "source": "SMPROF_BUFFER_MB"})"));
  EXPECT_EQ(a["settings"]["SMPROF_SHM_MB"], nlohmann::json::parse(R"({"value": "32", "source": "default"})"));
  EXPECT_EQ(a["environment"]["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_FALSE(a["environment"].contains("SECRET_TOKEN"));
  EXPECT_EQ(a["program_environment"]["SMPROF_KERNELS"], "gemm*");
  EXPECT_FALSE(a["smprof_version"].get<std::string>().empty());
  EXPECT_FALSE(a["smprof_revision"].get<std::string>().empty());
  const std::string start = a["start_time"];
  EXPECT_EQ(start.size(), std::string("2026-11-23T12:51:53.123Z").size()) << start;
  EXPECT_EQ(start.back(), 'Z') << start;
  const nlohmann::json& summary = t.back()["args"];
  EXPECT_EQ(summary["exit"], nlohmann::json::parse(R"({"status": "exited", "code": 3})"));
  EXPECT_EQ(summary["run"]["command"], a["command"]);
  EXPECT_TRUE(summary["gpus"].is_array());
}

// Started by another tool that injects into its targets (ncu, nsys):
// smprof-run steps aside rather than make that tool fail.
TEST_F(SmprofRunTest, AnotherToolsInjectionMakesSmprofStepAside) {
  const fs::path marker = dir_ / "ran";
  struct Case {
    std::string variable, value, tool, evidence;
  };
  const std::string ncu_dir = "/opt/nvidia/nsight-compute/2025.3.1/target/linux-desktop-glibc_2_11_3-x64/";
  for (const Case& c : std::vector<Case>{
           {"CUDA_INJECTION64_PATH", ncu_dir + "libcuda-injection.so", "Nsight Compute (ncu)", ""},
           {"LD_PRELOAD", ncu_dir + "libInterceptorInjectionTarget.so", "Nsight Compute (ncu)", ""},
           // What ncu's targets really see (seen on the GPU machine: no
           // LD_PRELOAD, no CUDA_INJECTION64_PATH).
           {"NV_NSIGHT_INJECTION_TRANSPORT_TYPE", "uds", "an Nsight tool (Nsight Compute or Nsight Systems)",
            "NV_NSIGHT_INJECTION_TRANSPORT_TYPE=uds"}}) {
    fs::remove(marker);
    RunResult r = Run({"/bin/sh", "-c", "touch " + marker.string() + "; exit 4"}, {{c.variable, c.value}});
    EXPECT_EQ(r.exit_code, 4) << r.err;
    EXPECT_TRUE(fs::exists(marker)) << "the program runs, unprofiled";
    EXPECT_TRUE(Contains(r.err, "smprof: " + c.tool + " injects into this run (" +
                                    (c.evidence.empty() ? c.value : c.evidence) +
                                    "): smprof steps aside; the program runs unprofiled and no trace is written\n"))
        << r.err;
    size_t smprof_lines = 0;
    for (size_t at = r.err.find("smprof"); at != std::string::npos; at = r.err.find("smprof", at + 1)) {
      smprof_lines += at == 0 || r.err[at - 1] == '\n';
    }
    EXPECT_EQ(smprof_lines, 1u) << r.err;
    EXPECT_TRUE(Traces().empty());
  }
}

// The program is a tool front end that refuses CUDA_INJECTION64_PATH (ncu):
// the preload shim clears smprof's injection in it before it looks.
TEST_F(SmprofRunTest, ToolFrontendStartedByTheProgramGetsACleanEnvironment) {
  const fs::path ncu = dir_ / "ncu";  // a shell named like Nsight Compute's front end
  fs::copy_file("/bin/sh", ncu);
  const fs::path seen = dir_ / "seen.txt";
  RunResult r = Run({"-o", (dir_ / "n.json").string(), ncu.string(), "-c",
                     "echo \"${CUDA_INJECTION64_PATH-unset}|${LD_PRELOAD-unset}\" > " + seen.string()},
                    {{"LD_PRELOAD", "/lib/x86_64-linux-gnu/libc.so.6"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(seen), "unset|/lib/x86_64-linux-gnu/libc.so.6\n") << r.err;
  EXPECT_TRUE(Contains(r.err,
                       " runs Nsight Compute (ncu), which injects into the processes it starts: smprof "
                       "steps aside"))
      << r.err;

  // A front end that is a script (its process is the shell running it).
  const fs::path nsys = dir_ / "nsys";
  std::ofstream(nsys) << "#!/bin/sh\necho \"${CUDA_INJECTION64_PATH-unset}\" > " << seen.string() << "\n";
  fs::permissions(nsys, fs::perms::owner_all);
  r = Run({"-o", (dir_ / "s.json").string(), nsys.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(seen), "unset\n") << r.err;
  EXPECT_TRUE(Contains(r.err, " runs Nsight Systems (nsys), which injects")) << r.err;
}

TEST_F(SmprofRunTest, ProgramGetsEnvironmentAndItsOwnArguments) {
  const fs::path seen = dir_ / "seen.txt";
  const std::string script =
      "printf '%s\\n' \"$SMPROF_RUN_ID\" \"$CUDA_INJECTION64_PATH\" \"$SMPROF_KERNELS\" \"$SMPROF_WARPS\" "
      "\"$SMPROF_BUFFER_MB\" \"$@\" > " +
      seen.string();
  RunResult r = Run({"-q", "-o", (dir_ / "e.json").string(), "-k", "gemm*", "--warps", "0,4-7", "/bin/sh", "-c", script,
                     "sh", "-o", "--kernels", "--"},
                    {{"SMPROF_BUFFER_MB", "16"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines;
  std::istringstream in(ReadFile(seen));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 8u) << ReadFile(seen);
  // Run id: "<pid>-<8 hex>".
  const size_t dash = lines[0].find('-');
  ASSERT_NE(dash, std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].size() - dash - 1, 8u) << lines[0];
  EXPECT_EQ(lines[0].find_first_not_of("0123456789abcdef-"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1][0], '/') << lines[1];
  EXPECT_NE(lines[1].find("libsmprof_inject.so"), std::string::npos) << lines[1];
  if (!fake_injector_.empty()) {
    EXPECT_EQ(lines[1], fake_injector_.string());
  }
  EXPECT_EQ(lines[2], "gemm*");
  EXPECT_EQ(lines[3], "0,4-7");
  EXPECT_EQ(lines[4], "16");
  EXPECT_EQ(lines[5], "-o");
  EXPECT_EQ(lines[6], "--kernels");
  EXPECT_EQ(lines[7], "--");
  EXPECT_TRUE(r.leftover_segments.empty());
}

TEST_F(SmprofRunTest, SigintIsLeftToTheProgram) {
  // The program sends SIGINT to smprof-run, which must ignore it and keep waiting.
  RunResult r = Run({"-q", "-o", (dir_ / "i.json").string(), "/bin/sh", "-c", "kill -INT $PPID; exit 5"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "i.json"));
}

TEST_F(SmprofRunTest, SigtermIsForwardedToTheProgram) {
  // The program asks smprof-run to stop; the forwarded SIGTERM runs its trap.
  RunResult r = Run({"-q", "-o", (dir_ / "f.json").string(), "/bin/sh", "-c",
                     "trap 'exit 7' TERM; kill -TERM $PPID; while :; do sleep 0.05; done"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "f.json"));
  EXPECT_TRUE(r.leftover_segments.empty());
}

TEST_F(SmprofRunTest, IgnoredSignalsStayIgnored) {
  // Started under nohup (SIGHUP ignored) from a background job (SIGINT
  // ignored): neither is forwarded nor reset to default for the program.
  RunResult r = Run(
      {"-q", "-o", (dir_ / "n.json").string(), "/bin/sh", "-c", "kill -HUP $PPID; kill -HUP $$; kill -INT $$; exit 4"},
      {}, {SIGHUP, SIGINT});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "n.json"));
  EXPECT_TRUE(r.leftover_segments.empty());
  // Not ignored at start: SIGHUP is forwarded (and default in the program).
  r = Run({"-q", "-o", (dir_ / "h.json").string(), "/bin/sh", "-c", "kill -HUP $PPID; while :; do sleep 0.05; done"});
  EXPECT_EQ(r.exit_code, 128 + SIGHUP) << r.err;
}

// The program exits at once; its orphaned child records a launch afterwards.
// smprof-run (a subreaper) waits for it, so its events are in the trace.
TEST_F(SmprofRunTest, ProcessesThatOutliveTheProgramStillReachTheTrace) {
  const fs::path trace = dir_ / "o.json";
  RunResult r =
      Run({"-o", trace.string(), fs::read_symlink("/proc/self/exe").string()}, {{"SMPROF_RUN_TEST_HELPER", "orphan"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "smprof: profiled 1 launches, 3 events from 1 process(es); lost 0 events")) << r.err;
  EXPECT_FALSE(Contains(r.err, "still running")) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(trace), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << ReadFile(trace);
  int late = 0;
  for (const auto& e : j) late += e.value("name", "") == "late" ? 1 : 0;
  EXPECT_EQ(late, 2);  // the range and the instant
  EXPECT_TRUE(r.leftover_segments.empty());
}

// A descendant still running 10 s after the program exited is reported, and
// the run ends anyway.
TEST_F(SmprofRunTest, DescendantStillRunningIsReported) {
  const fs::path pid_file = dir_ / "sleeper.pid";
  RunResult r = Run({"-o", (dir_ / "s.json").string(), "/bin/sh", "-c",
                     "sleep 100 </dev/null >/dev/null 2>&1 & echo $! > " + pid_file.string() + "; exit 6"});
  const std::string pid_text = ReadFile(pid_file);
  if (!pid_text.empty()) kill(std::stoi(pid_text), SIGKILL);
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_TRUE(Contains(r.err,
                       "smprof: 1 process(es) of the run still running; events they record from now on "
                       "are not in the trace\n"))
      << r.err;
  EXPECT_TRUE(Contains(r.err, "smprof: profiled 0 launches")) << r.err;
  EXPECT_FALSE(ParseTrace(dir_ / "s.json").is_discarded());
}

TEST_F(SmprofRunTest, LossesWithoutEventCountsAreNamed) {
  const fs::path trace = dir_ / "w.json";
  RunResult r = Run({"-o", trace.string(), fs::read_symlink("/proc/self/exe").string()},
                    {{"SMPROF_RUN_TEST_HELPER", "malformed"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Events of an unknown launch are lost, and say so.
  EXPECT_TRUE(Contains(r.err, "; lost 2 events (device buffer 0, unplaced 0, transport 0, orphan 2)\n")) << r.err;
  EXPECT_TRUE(Contains(r.err,
                       "smprof: warning: malformed_messages 1, orphan_events 2; the trace may be missing "
                       "data\n"))
      << r.err;
}

// Another CUPTI client in the program (Kineto under torch.profiler) is
// refused because smprof holds CUPTI: the preload shim names it in one line.
// A client refused by some other holder is not smprof's business.
TEST_F(SmprofRunTest, CuptiClientRefusedBecauseOfSmprofIsNamed) {
  const std::string client = (fs::path(std::getenv("SMPROF_BUILD_DIR")) / "bin" / "smprof_fake_cupti_client").string();
  RunResult r = Run({"-o", (dir_ / "c1.json").string(), client});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cuptiSubscribe: 39\n");  // the client still gets CUPTI's own answer
  EXPECT_TRUE(Contains(r.err,
                       ": smprof_fake_cupti_client could not subscribe to CUPTI, which smprof holds in this "
                       "run (CUPTI allows one subscriber), so that tool (torch.profiler, say) records no GPU "
                       "activity here; to use it, run the program without smprof-run\n"))
      << r.err;

  r = Run({"-o", (dir_ / "c2.json").string(), client}, {{"FAKE_CUPTI_HOLDER", "CUPTI for compute-sanitizer"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(Contains(r.err, "could not subscribe")) << r.err;
}

TEST_F(SmprofRunTest, TraceOfADeadCollectorIsClosedAndKeptAsPartial) {
  // A stand-in collector: writes a trace cut inside its second event (under
  // the partial name, as the real one does), says ready, and dies by SIGKILL
  // when asked to stop.
  const fs::path fake = dir_ / "fake-collector.sh";
  std::ofstream(fake) << "#!/bin/sh\n"
                         "while [ $# -gt 0 ]; do\n"
                         "  case \"$1\" in --output) out=$2; shift 2;; --ready-fd) fd=$2; shift 2;; *) shift;; esac\n"
                         "done\n"
                         "printf '[\\n{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"}\"}},"
                         "\\n{\"ph\":\"i\",\"pid\":1,\"na' > \"$out.partial\"\n"
                         "trap 'kill -KILL $$' TERM\n"
                         "eval \"echo ready >&$fd\"\n"
                         "while :; do sleep 0.05; done\n";
  fs::permissions(fake, fs::perms::owner_all);
  const fs::path trace = dir_ / "d.json";
  RunResult r = Run({"-o", trace.string(), "/bin/sh", "-c", "exit 0"}, {{"SMPROF_COLLECTOR", fake.string()}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "the collector ended with status 137")) << r.err;
  EXPECT_TRUE(Contains(r.err, "the trace is incomplete: " + PartialPath(trace.string()) +
                                  " holds what the collector wrote until then (cut after its last whole event "
                                  "and closed)"))
      << r.err;
  EXPECT_FALSE(fs::exists(trace)) << "the final name is for complete traces only";
  const std::string text = ReadFile(PartialPath(trace.string()));
  EXPECT_EQ(text, "[\n{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"}\"}}\n]\n");
  EXPECT_TRUE(nlohmann::json::accept(text)) << text;
}

TEST_F(SmprofRunTest, SignalBeforeTheProgramStartsRunsNothing) {
  // The stand-in collector sends SIGTERM to smprof-run before saying ready.
  const fs::path fake = dir_ / "fake-collector.sh";
  std::ofstream(fake) << "#!/bin/sh\n"
                         "while [ $# -gt 0 ]; do\n"
                         "  case \"$1\" in --output) out=$2; shift 2;; --ready-fd) fd=$2; shift 2;; *) shift;; esac\n"
                         "done\n"
                         "printf '[\\n' > \"$out\"\n"
                         "trap 'printf \"\\\\n]\\\\n\" >> \"$out\"; exit 0' TERM\n"
                         "kill -TERM $PPID\n"
                         "eval \"echo ready >&$fd\"\n"
                         "while :; do sleep 0.05; done\n";
  fs::permissions(fake, fs::perms::owner_all);
  const fs::path marker = dir_ / "ran";
  RunResult r = Run({"-q", "-o", (dir_ / "p.json").string(), "/bin/sh", "-c", "touch " + marker.string()},
                    {{"SMPROF_COLLECTOR", fake.string()}});
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_FALSE(fs::exists(marker));
}

TEST_F(SmprofRunTest, MissingHelpersAreExplained) {
  RunResult r = Run({"/bin/sh", "-c", "exit 0"}, {{"SMPROF_INJECTOR", "/nonexistent/libsmprof_inject.so"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "SMPROF_INJECTOR=/nonexistent/libsmprof_inject.so does not exist")) << r.err;
  r = Run({"/bin/sh", "-c", "exit 0"}, {{"SMPROF_COLLECTOR", "/nonexistent/smprof-collector"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "SMPROF_COLLECTOR")) << r.err;
  EXPECT_TRUE(fs::is_empty(work_));
}

TEST_F(SmprofRunTest, UnwritableOutputDirectoryIsRejected) {
  RunResult r = Run({"-o", "/nonexistent/dir/t.json", "/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "does not exist")) << r.err;
}

// --- --serve -----------------------------------------------------------------

// The run metadata (the "smprof run" instant's args) and the summary (the last
// event's args) of a JSON trace.
std::pair<nlohmann::json, nlohmann::json> RunAndSummary(const nlohmann::json& trace) {
  nlohmann::json run;
  for (const auto& e : trace) {
    if (e.value("name", "") == "smprof run" && e.value("ph", "") == "i") run = e["args"];
  }
  return {run, trace.empty() ? nlohmann::json() : trace.back()["args"]};
}

// The caller (this test process, smprof-run's parent) gets the variables of
// the run, ships to it as its injector would, says "stop", and gets the trace.
TEST_F(SmprofRunTest, ServeHandsTheCallerTheRunAndFinishesItOnStop) {
  const fs::path trace = dir_ / "serve.json";
  Serving s = StartServing({"--serve", "-o", trace.string(), "-k", "gemm*"}, {{"SMPROF_BUFFER_MB", "16"}});
  const std::string ready_text = ReadLine(s.from_stdout);
  const nlohmann::json ready = nlohmann::json::parse(ready_text, nullptr, false);
  ASSERT_TRUE(ready.is_object()) << ready_text;
  EXPECT_EQ(ready_text.rfind("{\"ready\":true,", 0), 0u) << ready_text;
  const nlohmann::json& env = ready["env"];
  const std::string run_id = env.value("SMPROF_RUN_ID", "");
  EXPECT_FALSE(run_id.empty()) << ready_text;
  EXPECT_TRUE(fs::exists(env.value("SMPROF_INJECTOR", ""))) << ready_text;
  EXPECT_EQ(env.value("SMPROF_KERNELS", ""), "gemm*");
  EXPECT_EQ(env.value("SMPROF_BUFFER_MB", ""), "16");
  EXPECT_FALSE(env.contains("CUDA_INJECTION64_PATH")) << ready_text;
  EXPECT_FALSE(env.contains("LD_PRELOAD")) << ready_text;
  EXPECT_EQ(env.size(), 4u) << ready_text;

  const uint32_t self = static_cast<uint32_t>(getpid());
  namespace t = smprof::testing;
  ASSERT_TRUE(SendAsProducer(
      {t::Process(self, kT0, "caller"), t::Name(1, "served"), t::Launch(1, kT0 + 1000, kT0 + 100000, "void kgemm()"),
       t::Warp(1, 0, 0, 0,
               {t::Ev(kT0 + 2000, 1, smprof::wire::kEventBegin), t::Ev(kT0 + 3000, 1, smprof::wire::kEventEnd),
                t::Ev(kT0 + 3500, 1, smprof::wire::kEventInstant)}),
       t::Harvest(kT0 + 200000, smprof::wire::kHarvestSync, 0)},
      run_id.c_str()));
  ASSERT_EQ(write(s.to_stdin, "stop\n", 5), 5);
  const std::string done_text = ReadLine(s.from_stdout);
  RunResult r = FinishServing(&s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json done = nlohmann::json::parse(done_text, nullptr, false);
  ASSERT_TRUE(done.is_object()) << done_text;
  EXPECT_EQ(done["done"], true);
  EXPECT_EQ(done["ok"], true);
  EXPECT_EQ(done["trace"], trace.string());
  EXPECT_EQ(done["stats_json"], trace.string() + ".stats.json");
  EXPECT_EQ(done["launches"], 1);
  EXPECT_EQ(done["events"], 3);
  EXPECT_TRUE(Contains(r.err, "smprof: profiled 1 launches, 3 events from 1 process(es); lost 0 events")) << r.err;
  EXPECT_TRUE(Contains(r.err, "smprof: trace: " + trace.string())) << r.err;
  EXPECT_TRUE(r.leftover_segments.empty());

  const auto [run, summary] = RunAndSummary(ParseTrace(trace));
  std::vector<std::string> cmdline;
  std::stringstream own(ReadFile("/proc/self/cmdline"));
  for (std::string arg; std::getline(own, arg, '\0');) cmdline.push_back(arg);
  EXPECT_EQ(run["command"], nlohmann::json(cmdline)) << run.dump();
  EXPECT_EQ(run["caller_pid"], getpid());
  EXPECT_EQ(run["options"]["serve"], true);
  EXPECT_EQ(run["program_environment"]["SMPROF_RUN_ID"], run_id);
  EXPECT_EQ(summary["exit"], nlohmann::json::parse(R"({"status": "stopped"})"));
}

// The end of stdin without "stop", or the caller's exit while its pipe stays
// open (a process it forked holds it): the caller is gone, the run ends.
TEST_F(SmprofRunTest, ServeEndsWhenTheCallerIsGone) {
  Serving s = StartServing({"--serve", "-q", "-o", (dir_ / "eof.json").string()});
  EXPECT_FALSE(ReadLine(s.from_stdout).empty());
  close(s.to_stdin);
  s.to_stdin = -1;
  const std::string done = ReadLine(s.from_stdout);
  RunResult r = FinishServing(&s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(done, nullptr, false).value("ok", false)) << done;
  EXPECT_EQ(RunAndSummary(ParseTrace(dir_ / "eof.json")).second["exit"],
            nlohmann::json::parse(R"({"status": "caller_gone"})"));

  const pid_t caller = fork();
  ASSERT_GE(caller, 0);
  if (caller == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    _exit(0);
  }
  s = StartServing({"--serve", "--serve-pid", std::to_string(caller), "-o", (dir_ / "exit.json").string()});
  EXPECT_FALSE(ReadLine(s.from_stdout).empty());
  int status = 0;
  EXPECT_EQ(waitpid(caller, &status, 0), caller);
  const std::string exit_done = ReadLine(s.from_stdout);  // stdin still open
  r = FinishServing(&s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(exit_done, nullptr, false).value("ok", false)) << exit_done;
  const auto [run, summary] = RunAndSummary(ParseTrace(dir_ / "exit.json"));
  EXPECT_EQ(run["caller_pid"], caller);
  EXPECT_EQ(summary["exit"], nlohmann::json::parse(R"({"status": "caller_gone"})"));
  EXPECT_TRUE(Contains(r.err, "smprof: profiled 0 launches")) << r.err;
}

TEST_F(SmprofRunTest, ServeEndsOnSigterm) {
  Serving s = StartServing({"--serve", "-q", "-o", (dir_ / "term.json").string()});
  EXPECT_FALSE(ReadLine(s.from_stdout).empty());
  kill(s.pid, SIGTERM);
  RunResult r = FinishServing(&s);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_EQ(RunAndSummary(ParseTrace(dir_ / "term.json")).second["exit"],
            nlohmann::json::parse(R"({"status": "signal", "signal": 15, "signal_name": "SIGTERM"})"));
  EXPECT_TRUE(r.leftover_segments.empty());
}

// What stops a run before its program starts stops --serve before the ready
// line: the caller reads the end of stdout and the exit status.
TEST_F(SmprofRunTest, ServeErrorsComeBeforeTheReadyLine) {
  const fs::path trace = work_ / "t.pftrace";
  std::ofstream(trace) << "precious";
  RunResult r = Run({"--serve", "-o", trace.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(Contains(r.err, trace.string() + " already exists: choose another --output, or pass --force")) << r.err;
  EXPECT_EQ(ReadFile(trace), "precious");

  r = Run({"--serve", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(Contains(r.err, "--serve runs no program, but '/bin/true' was given")) << r.err;

  r = Run({"--serve", "--serve-pid", "999999999"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(Contains(r.err, "--serve-pid 999999999: no such process")) << r.err;

  r = Run({"--serve", "-o", (dir_ / "c.json").string()}, {{"SMPROF_COLLECTOR", "/nonexistent/smprof-collector"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(Contains(r.err, "SMPROF_COLLECTOR")) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "c.json"));
}

}  // namespace
