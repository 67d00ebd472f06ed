// End-to-end: the real smprof-run binary with the real smprof-collector on
// programs that never load CUDA. Checks exit codes, the trace file, the
// summary lines, signal handling, processes that outlive the program, a
// collector that dies mid-write, and that no shared memory is left behind.
//
// This binary doubles as a program for smprof-run: with SMPROF_RUN_TEST_HELPER
// set it plays a producer (see RunHelper) instead of running the tests.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

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

#include <nlohmann/json.hpp>

#include "common/transport.h"
#include "smprof/wire.h"
#include "tests/support/wire_builders.h"

namespace {

// --- helper program ------------------------------------------------------------

constexpr uint64_t kT0 = 5000000000ull;

// Sends `messages` as a producer of the run in SMPROF_RUN_ID; false on failure.
bool SendAsProducer(const std::vector<smprof::testing::Bytes>& messages) {
  const char* run_id = std::getenv("SMPROF_RUN_ID");
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
                      {{kT0 + 2000, 1, wire::kEventBegin},
                       {kT0 + 3000, 1, wire::kEventEnd},
                       {kT0 + 3500, 1, wire::kEventInstant}}),
        smprof::testing::Harvest(kT0 + 200000, wire::kHarvestSync, 0),
    });
    _exit(ok ? 0 : 21);
  }
  if (mode == "malformed") {
    smprof::testing::Bytes bad_name = smprof::testing::Name(2, "abc");
    bad_name[12] = 40;  // name_len past the end of the message
    const bool ok = SendAsProducer({
        smprof::testing::Process(self, kT0, "malformed"),
        bad_name,
        smprof::testing::Warp(42, 0, 0, 0,
                      {{kT0 + 5000, 1, wire::kEventInstant}, {kT0 + 5001, 1, wire::kEventInstant}}),
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

// Safety net only: a hung run fails the test instead of hanging ctest.
constexpr std::chrono::seconds kRunTimeout{120};

// Every variable smprof-run reads; unset in the child unless a test sets it.
constexpr const char* kSmprofVars[] = {"SMPROF_KERNELS", "SMPROF_BUFFER_MB",  "SMPROF_WARPS",
                                       "SMPROF_SHM_MB",  "SMPROF_LOG_LEVEL",  "SMPROF_CHUNK_BYTES",
                                       "SMPROF_HIGH_WATER", "SMPROF_RUN_ID",  "SMPROF_INJECTOR",
                                       "SMPROF_COLLECTOR"};

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

  // Runs smprof-run with `args` in work_, with `env` added and the signals in
  // `ignored` ignored (as nohup or a shell's background job would).
  RunResult Run(const std::vector<std::string>& args,
                const std::vector<std::pair<std::string, std::string>>& env = {},
                const std::vector<int>& ignored = {}) {
    RunResult result;
    const fs::path out_path = dir_ / "stdout.txt";
    const fs::path err_path = dir_ / "stderr.txt";
    std::fflush(nullptr);  // or the child's freopen flushes our buffered output twice
    const pid_t pid = fork();
    if (pid == 0) {
      if (chdir(work_.c_str()) != 0) _exit(200);
      for (const char* var : kSmprofVars) unsetenv(var);
      if (!fake_injector_.empty()) setenv("SMPROF_INJECTOR", fake_injector_.c_str(), 1);
      for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
      for (int sig : ignored) signal(sig, SIG_IGN);
      if (!freopen(out_path.c_str(), "w", stdout) || !freopen(err_path.c_str(), "w", stderr)) _exit(201);
      std::vector<char*> argv = {const_cast<char*>(smprof_run_.c_str())};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(202);
    }
    EXPECT_GT(pid, 0);
    if (pid <= 0) return result;
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + kRunTimeout;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "smprof-run did not finish within " << kRunTimeout.count() << " s; killing it";
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result.out = ReadFile(out_path);
    result.err = ReadFile(err_path);
    const std::string prefix = "smprof-" + std::to_string(pid) + "-";
    for (const auto& entry : fs::directory_iterator("/dev/shm")) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) == 0) result.leftover_segments.push_back(name);
    }
    return result;
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
  EXPECT_TRUE(Contains(r.err, "smprof: trace: " + trace.string() + " (open it at https://ui.perfetto.dev)"))
      << r.err;
  EXPECT_TRUE(Contains(r.err, "smprof: no kernel was profiled")) << r.err;
  EXPECT_TRUE(Contains(r.err, "<smprof/smprof.cuh>")) << r.err;
  EXPECT_TRUE(Contains(r.err, "SMPROF_KERNELS")) << r.err;
  EXPECT_TRUE(r.leftover_segments.empty()) << r.leftover_segments.front();
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
  std::vector<std::string> traces;
  for (const auto& entry : fs::directory_iterator(work_)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("smprof-sh-", 0) == 0 && entry.path().extension() == ".json") traces.push_back(name);
  }
  ASSERT_EQ(traces.size(), 1u) << r.err;
  EXPECT_TRUE(Contains(r.err, "smprof: trace: " + (work_ / traces[0]).string())) << r.err;
  EXPECT_FALSE(ParseTrace(work_ / traces[0]).is_discarded());
}

TEST_F(SmprofRunTest, ProgramKilledBySignalGives128PlusSignal) {
  const fs::path trace = dir_ / "k.json";
  RunResult r = Run({"-o", trace.string(), "/bin/sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_TRUE(fs::exists(trace));
  EXPECT_TRUE(r.leftover_segments.empty());
}

TEST_F(SmprofRunTest, MissingProgramGives127AndMessage) {
  const fs::path trace = dir_ / "m.json";
  RunResult r = Run({"-o", trace.string(), "/nonexistent/smprof-no-such-program", "x"});
  EXPECT_EQ(r.exit_code, 127) << r.err;
  EXPECT_TRUE(Contains(r.err, "smprof-run: cannot run '/nonexistent/smprof-no-such-program': No such file or "
                              "directory"))
      << r.err;
  EXPECT_TRUE(r.leftover_segments.empty());
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
  for (const char* word :
       {"--output", "-o,", "--kernels", "-k,", "--buffer-mb", "--warps", "--shm-mb", "--preload", "--log-level",
        "--quiet", "-q,", "--help", "-h,", "--version", "SMPROF_KERNELS", "SMPROF_BUFFER_MB", "SMPROF_WARPS",
        "SMPROF_SHM_MB", "SMPROF_LOG_LEVEL", "SMPROF_CHUNK_BYTES", "SMPROF_HIGH_WATER", "SMPROF_RUN_ID",
        "SMPROF_INJECTOR", "SMPROF_COLLECTOR"}) {
    EXPECT_TRUE(Contains(r.out, word)) << word;
  }
  r = Run({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("smprof-run ", 0), 0u) << r.out;
}

TEST_F(SmprofRunTest, ProgramGetsEnvironmentAndItsOwnArguments) {
  const fs::path seen = dir_ / "seen.txt";
  const std::string script =
      "printf '%s\\n' \"$SMPROF_RUN_ID\" \"$CUDA_INJECTION64_PATH\" \"$SMPROF_KERNELS\" \"$SMPROF_WARPS\" "
      "\"$SMPROF_BUFFER_MB\" \"$@\" > " +
      seen.string();
  RunResult r = Run({"-q", "-o", (dir_ / "e.json").string(), "-k", "gemm*", "--warps", "0,4-7", "/bin/sh", "-c",
                     script, "sh", "-o", "--kernels", "--"},
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
  RunResult r = Run({"-q", "-o", (dir_ / "n.json").string(), "/bin/sh", "-c",
                     "kill -HUP $PPID; kill -HUP $$; kill -INT $$; exit 4"},
                    {}, {SIGHUP, SIGINT});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "n.json"));
  EXPECT_TRUE(r.leftover_segments.empty());
  // Not ignored at start: SIGHUP is forwarded (and default in the program).
  r = Run({"-q", "-o", (dir_ / "h.json").string(), "/bin/sh", "-c",
           "kill -HUP $PPID; while :; do sleep 0.05; done"});
  EXPECT_EQ(r.exit_code, 128 + SIGHUP) << r.err;
}

// The program exits at once; its orphaned child records a launch afterwards.
// smprof-run (a subreaper) waits for it, so its events are in the trace.
TEST_F(SmprofRunTest, ProcessesThatOutliveTheProgramStillReachTheTrace) {
  const fs::path trace = dir_ / "o.json";
  RunResult r = Run({"-o", trace.string(), fs::read_symlink("/proc/self/exe").string()},
                    {{"SMPROF_RUN_TEST_HELPER", "orphan"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "smprof: profiled 1 launches, 3 events from 1 process(es); lost 0 events"))
      << r.err;
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
  EXPECT_TRUE(Contains(r.err, "; lost 2 events (device buffer 0, unplaced 0, transport 0, orphan 2)\n"))
      << r.err;
  EXPECT_TRUE(Contains(r.err,
                       "smprof: warning: malformed_messages 1, orphan_events 2; the trace may be missing "
                       "data\n"))
      << r.err;
}

TEST_F(SmprofRunTest, TraceOfADeadCollectorIsClosed) {
  // A stand-in collector: writes a trace cut inside its second event, says
  // ready, and dies by SIGKILL when asked to stop.
  const fs::path fake = dir_ / "fake-collector.sh";
  std::ofstream(fake) << "#!/bin/sh\n"
                         "while [ $# -gt 0 ]; do\n"
                         "  case \"$1\" in --output) out=$2; shift 2;; --ready-fd) fd=$2; shift 2;; *) shift;; esac\n"
                         "done\n"
                         "printf '[\\n{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"}\"}},"
                         "\\n{\"ph\":\"i\",\"pid\":1,\"na' > \"$out\"\n"
                         "trap 'kill -KILL $$' TERM\n"
                         "eval \"echo ready >&$fd\"\n"
                         "while :; do sleep 0.05; done\n";
  fs::permissions(fake, fs::perms::owner_all);
  const fs::path trace = dir_ / "d.json";
  RunResult r = Run({"-o", trace.string(), "/bin/sh", "-c", "exit 0"}, {{"SMPROF_COLLECTOR", fake.string()}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "the collector ended with status 137")) << r.err;
  EXPECT_TRUE(Contains(r.err, "the trace was cut after its last whole event and closed")) << r.err;
  const std::string text = ReadFile(trace);
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

}  // namespace
