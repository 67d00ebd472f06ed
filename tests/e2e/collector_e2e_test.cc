// End-to-end: the real smprof-collector binary, fed through the real
// shared-memory transport by this process and by a forked child, stopped with
// SIGTERM (clean drain) or SIGKILL (the trace must still be a valid prefix).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collector/trace_placement.h"
#include "common/json.h"
#include "common/transport.h"
#include "smprof/wire.h"
#include "tests/support/subprocess.h"
#include "tests/support/wire_builders.h"

namespace smprof {
namespace {

using nlohmann::json;
using testing::Bytes;
using testing::Ev;
using testing::Name;
using testing::Process;

constexpr uint64_t kT0 = 5000000000ull;
// Safety nets only: nothing asserts on how long things take.
constexpr auto kSafetyTimeout = std::chrono::seconds(60);

// --- message builders (tests/support/wire_builders.h, with this file's defaults) ---

Bytes Launch(uint64_t id, std::string_view kernel) {
  wire::LaunchMsg m = testing::LaunchFields(id, kT0 + 1000, kT0 + 100000);
  m.grid[0] = 1;
  m.block[0] = 32;
  return testing::Launch(m, kernel);
}

Bytes Warp(uint64_t launch, const std::vector<wire::WireEvent>& events) {
  return testing::Warp(launch, 0, 0, 0, events);
}

// `t` relative to kT0.
Bytes Harvest(uint64_t t, uint64_t dropped) { return testing::Harvest(kT0 + t, wire::kHarvestSync, dropped); }

// --- process helpers ---------------------------------------------------------

std::string BuildDir() {
  const char* dir = std::getenv("SMPROF_BUILD_DIR");
  return dir ? dir : ".";
}

std::string CollectorBinary() { return BuildDir() + "/bin/smprof-collector"; }

std::string UniqueRunId(const char* tag) {
  static int counter = 0;
  return std::string("e2e-coll-") + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs the collector with `args`; stdout/stderr go to `log_path` when given.
// If `ready_fd` is non-null, a pipe is passed as --ready-fd and its read end
// returned there.
pid_t Spawn(std::vector<std::string> args, int* ready_fd, const std::string& log_path = "") {
  int fds[2] = {-1, -1};
  if (ready_fd != nullptr) {
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    args.push_back("--ready-fd");
    args.push_back(std::to_string(fds[1]));
  }
  const std::string binary = CollectorBinary();
  const pid_t pid = fork();
  if (pid == 0) {
    // As tests/support/subprocess.h: own process group (WaitExit kills it
    // whole) and the signal dispositions of a terminal, even under nohup.
    setpgid(0, 0);
    smprof::testing::ResetSignalsInChild({});
    if (ready_fd != nullptr) fcntl(fds[1], F_SETFD, 0);  // inherited across exec
    if (!log_path.empty()) {
      const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (log >= 0) {
        dup2(log, 1);
        dup2(log, 2);
      }
    }
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  if (ready_fd != nullptr) {
    close(fds[1]);
    *ready_fd = fds[0];
  }
  return pid;
}

// What the collector wrote to the ready pipe before closing it.
std::string WaitReady(int fd) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + kSafetyTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[64];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;  // closed
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return got;
}

// Exit code, 128 + signal, or -1 if it had to be killed by the safety net.
int WaitExit(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + kSafetyTimeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -2;
}

std::unique_ptr<transport::Producer> Attach(const std::string& run_id) {
  transport::ProducerOptions options;
  options.ring_bytes = 1u << 20;
  options.max_wait = std::chrono::milliseconds(5000);
  std::string error;
  auto producer = transport::Producer::Attach(run_id, options, &error);
  EXPECT_NE(producer, nullptr) << error;
  return producer;
}

bool SendAll(transport::Producer& p, const std::vector<Bytes>& messages) {
  bool ok = true;
  for (const Bytes& m : messages) ok = p.Send(m.data(), static_cast<uint32_t>(m.size()), 0) && ok;
  return ok;
}

std::vector<json> Select(const json& trace, const std::function<bool(const json&)>& pred) {
  std::vector<json> out;
  for (const json& e : trace) {
    if (pred(e)) out.push_back(e);
  }
  return out;
}

// JSON pid of the process whose process_name is `name` (-1 if none).
int PidNamed(const json& trace, const std::string& name) {
  for (const json& e : trace) {
    if (e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == name) return e["pid"];
  }
  return -1;
}

class CollectorE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "collector_e2e_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    mkdir(dir_.c_str(), 0755);
    trace_ = dir_ + "/trace.json";
    summary_ = dir_ + "/summary.json";
  }
  void TearDown() override {
    if (!run_id_.empty()) transport::RemoveRunSegments(run_id_);
    std::error_code ignored;  // a failed test keeps its files to look at
    if (!HasFailure()) std::filesystem::remove_all(dir_, ignored);
  }

  // Starts the collector and waits for "ready". Its output goes to `log`
  // when given.
  pid_t StartCollector(const char* tag, const std::string& log = "") {
    run_id_ = UniqueRunId(tag);
    int ready = -1;
    const pid_t pid = Spawn({"--run-id", run_id_, "--output", trace_, "--summary", summary_, "--stats",
                             "--drain-timeout-ms", "20000", "--log-level", "info"},
                            &ready, log);
    EXPECT_GT(pid, 0);
    EXPECT_EQ(WaitReady(ready), "ready\n");
    return pid;
  }

  std::string dir_, trace_, summary_, run_id_;
};

TEST_F(CollectorE2eTest, TwoProcessesMalformedInputAndCleanShutdown) {
  const pid_t collector = StartCollector("main");

  // This process: one launch, a range and an instant, malformed messages
  // inside valid framing, events of an unknown launch, a lossy harvest.
  auto producer = Attach(run_id_);
  ASSERT_NE(producer, nullptr);
  const uint32_t self = static_cast<uint32_t>(getpid());
  Bytes bad_name = Name(2, "abc");
  bad_name[12] = 40;  // name_len past the end of the message
  Bytes long_harvest = Harvest(1, 0);
  long_harvest.resize(long_harvest.size() + 8, 0);
  const uint32_t long_size = static_cast<uint32_t>(long_harvest.size());
  std::memcpy(long_harvest.data() + 4, &long_size, 4);
  const Bytes bad_kind = Warp(1, {{kT0 + 3000, 1, 0}});
  ASSERT_TRUE(
      SendAll(*producer, {
                             Process(self, kT0, "e2e-parent"),
                             Name(1, "work"),
                             Launch(1, "kparent(int)"),
                             Warp(1, {Ev(kT0 + 2000, 1, wire::kEventBegin),
                                      Ev(kT0 + 2500, 1, wire::kEventInstant),
                                      Ev(kT0 + 4000, 1, wire::kEventEnd)}),
                             bad_name,
                             long_harvest,
                             bad_kind,
                             Warp(42, {Ev(kT0 + 5000, 1, wire::kEventInstant), Ev(kT0 + 5001, 1, wire::kEventInstant)}),
                             Harvest(200000, 3),
                         }));

  // A forked child: its own producer, its own names and launch ids.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string error;
    transport::ProducerOptions options;
    options.ring_bytes = 1u << 20;
    auto p = transport::Producer::Attach(run_id_, options, &error);
    if (!p) _exit(10);
    const uint32_t me = static_cast<uint32_t>(getpid());
    const bool ok = SendAll(*p, {Process(me, kT0 + 10, "e2e-child"), Name(1, "child-work"), Launch(1, "kchild(int)"),
                                 Warp(1, {Ev(kT0 + 3000, 1, wire::kEventInstant)}), Harvest(300000, 0)});
    p->Detach();
    _exit(ok ? 0 : 11);
  }
  EXPECT_EQ(WaitExit(child), 0);
  producer->Detach();

  ASSERT_EQ(kill(collector, SIGTERM), 0);
  ASSERT_EQ(WaitExit(collector), 0);

  const json summary = json::parse(ReadFile(summary_));
  EXPECT_EQ(summary["trace"], trace_);
  EXPECT_EQ(summary["processes"], 2);
  EXPECT_EQ(summary["launches"], 2);
  EXPECT_EQ(summary["events"], 4);
  EXPECT_EQ(summary["malformed_messages"], 3);
  EXPECT_EQ(summary["orphan_events"], 2);
  EXPECT_EQ(summary["unmatched_ends"], 0);
  EXPECT_EQ(summary["unterminated_ranges"], 0);
  EXPECT_EQ(summary["harvests"], 2);
  EXPECT_EQ(summary["lost"]["device_buffer"], 3);
  EXPECT_EQ(summary["lost"]["transport"], 0);
  EXPECT_EQ(summary["lost"].value("orphan", -1), 2);
  EXPECT_EQ(summary["lost"]["total"], 5);
  EXPECT_EQ(summary["framing_errors"], 0);
  EXPECT_EQ(summary["producers_incomplete"], 0);

  const std::string text = ReadFile(trace_);
  ASSERT_GE(text.size(), 4u);
  EXPECT_EQ(text.substr(text.size() - 3), "\n]\n");
  const json trace = json::parse(text);
  const int parent_track = PidNamed(trace, "smprof | e2e-parent | pid " + std::to_string(self));
  const int child_track = PidNamed(trace, "smprof | e2e-child | pid " + std::to_string(child));
  EXPECT_GE(parent_track, 2);
  EXPECT_GE(child_track, 2);
  const int parent_launch =
      PidNamed(trace, "#1 kparent | cuda:0 | stream 0 | grid(1,1,1) block(32,1,1) | pid " + std::to_string(self));
  const int child_launch =
      PidNamed(trace, "#1 kchild | cuda:0 | stream 0 | grid(1,1,1) block(32,1,1) | pid " + std::to_string(child));
  ASSERT_GE(parent_launch, 10);
  ASSERT_GE(child_launch, 10);

  const auto parent_x = Select(trace, [&](const json& e) { return e["pid"] == parent_launch && e["ph"] == "X"; });
  ASSERT_EQ(parent_x.size(), 2u);  // kernel + "work"
  EXPECT_EQ(parent_x[0]["name"], "kparent(int)");
  EXPECT_EQ(parent_x[1]["name"], "work");
  EXPECT_DOUBLE_EQ(parent_x[1]["dur"].get<double>(), 2.0);
  const auto child_i = Select(trace, [&](const json& e) { return e["pid"] == child_launch && e["ph"] == "i"; });
  ASSERT_EQ(child_i.size(), 1u);
  EXPECT_EQ(child_i[0]["name"], "child-work");
  const auto counter = Select(trace, [&](const json& e) { return e["ph"] == "C"; });
  ASSERT_EQ(counter.size(), 1u);
  EXPECT_EQ(counter[0]["pid"], parent_track);
  EXPECT_EQ(counter[0]["args"]["lost"], 3);

  // The summary is also in the trace.
  const auto run = Select(trace, [](const json& e) { return e["pid"] == 1 && e["ph"] == "i"; });
  ASSERT_EQ(run.size(), 1u);
  EXPECT_EQ(run[0]["args"]["malformed_messages"], 3);
  EXPECT_EQ(run[0]["args"]["lost"]["device_buffer"], 3);

  // The run's shared memory is gone.
  EXPECT_NE(access(("/dev/shm/" + transport::ControlSegmentName(run_id_)).c_str(), F_OK), 0);

  // The statistics beside the trace, read by `smprof stats` (given the
  // trace) and compared with themselves by `smprof diff`.
  EXPECT_EQ(summary["stats"]["json"], trace_ + ".stats.json");
  EXPECT_EQ(summary["stats"]["csv"], trace_ + ".stats.csv");
  const std::string smprof = BuildDir() + "/bin/smprof";
  const auto run_json = [&](const std::string& args) {
    const std::string out = dir_ + "/cli.out";
    EXPECT_EQ(std::system((smprof + " " + args + " > " + out).c_str()), 0) << args;
    return json::parse(ReadFile(out), nullptr, false);
  };
  const json stats = run_json("stats --json " + trace_);
  ASSERT_TRUE(stats.is_object()) << ReadFile(dir_ + "/cli.out");
  EXPECT_EQ(stats["launches"], 2);
  EXPECT_EQ(stats["slices"], 1);
  bool found = false;
  for (const json& k : stats["kernels"]) {
    if (k["kernel"] != "kparent") continue;
    ASSERT_EQ(k["regions"].size(), 1u) << k.dump();
    const json& r = k["regions"][0];
    EXPECT_EQ(r["name"], "work");
    EXPECT_EQ(r["count"], 1);
    EXPECT_EQ(r["ns"]["total"], 2000);
    EXPECT_EQ(r["ns"]["p95"], 2000);
    found = true;
  }
  EXPECT_TRUE(found) << stats.dump();
  const json diff = run_json("diff --json " + trace_ + " " + trace_ + ".stats.json");
  ASSERT_TRUE(diff.is_object()) << ReadFile(dir_ + "/cli.out");
  ASSERT_EQ(diff["regions"].size(), 1u) << diff.dump();
  EXPECT_EQ(diff["regions"][0]["status"], "both");
  EXPECT_DOUBLE_EQ(diff["regions"][0]["speedup"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(diff["regions"][0]["p95_change_pct"].get<double>(), 0.0);
  // Without the file beside it, the trace's own copy answers the same.
  ASSERT_EQ(unlink((trace_ + ".stats.json").c_str()), 0);
  EXPECT_EQ(run_json("stats --json " + trace_), stats);
  // A trace without statistics (cut before its summary): exit 1, saying so.
  const std::string whole = ReadFile(trace_);
  std::ofstream(dir_ + "/cut.json") << whole.substr(0, whole.rfind("smprof run summary"));
  EXPECT_NE(std::system((smprof + " stats " + dir_ + "/cut.json 2> " + dir_ + "/cli.err").c_str()), 0);
  EXPECT_NE(ReadFile(dir_ + "/cli.err").find("holds no statistics"), std::string::npos) << ReadFile(dir_ + "/cli.err");
}

TEST_F(CollectorE2eTest, KilledCollectorLeavesAValidPrefix) {
  const pid_t collector = StartCollector("kill");
  auto producer = Attach(run_id_);
  ASSERT_NE(producer, nullptr);
  ASSERT_TRUE(SendAll(
      *producer,
      {Process(static_cast<uint32_t>(getpid()), kT0, "e2e-killed"), Name(1, "step"), Launch(1, "void kk()"),
       Warp(1,
            {Ev(kT0 + 2000, 1, wire::kEventBegin), Ev(kT0 + 3000, 1, wire::kEventEnd), Ev(kT0 + 3500, 1, wire::kEventBegin)}),
       Harvest(200000, 0)}));
  // The harvest is flushed right after it is handled; wait until it is on disk.
  const auto deadline = std::chrono::steady_clock::now() + kSafetyTimeout;
  while (ReadFile(PartialPath(trace_)).find("harvest: sync") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(kill(collector, SIGKILL), 0);
  EXPECT_EQ(WaitExit(collector), 128 + SIGKILL);
  producer.reset();

  // A killed collector leaves its trace under the partial name, never at
  // the final one: a file at --output is always a whole trace.
  EXPECT_FALSE(std::ifstream(trace_).good());
  const std::string text = ReadFile(PartialPath(trace_));
  ASSERT_NE(text.find("harvest: sync"), std::string::npos) << text;
  EXPECT_FALSE(json::accept(text));  // the array was never closed
  json trace;
  ASSERT_NO_THROW(trace = json::parse(text + "]")) << text;
  ASSERT_TRUE(trace.is_array());
  const auto x = Select(trace, [](const json& e) { return e["ph"] == "X" && e["name"] == "step"; });
  ASSERT_EQ(x.size(), 2u);  // the closed range and the unterminated one
  EXPECT_EQ(x[1]["args"]["unterminated"], true);
}

// The launcher gone before it read "ready" (smprof-run killed while the
// collector started): no program will run, and the trace the collector had
// begun is finished and put in place, not left behind as PATH.partial.
TEST_F(CollectorE2eTest, LauncherGoneBeforeReadyFinishesTheTraceEmpty) {
  run_id_ = UniqueRunId("gone");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);  // inherited by the collector
  close(fds[0]);            // no reader from the start: writing "ready" fails with EPIPE
  const std::string log = dir_ + "/collector.log";
  const pid_t collector = Spawn(
      {"--run-id", run_id_, "--output", trace_, "--summary", summary_, "--ready-fd", std::to_string(fds[1])}, nullptr,
      log);
  close(fds[1]);
  ASSERT_GT(collector, 0);
  EXPECT_EQ(WaitExit(collector), 1);
  EXPECT_NE(ReadFile(log).find("cannot write to --ready-fd"), std::string::npos) << ReadFile(log);
  EXPECT_TRUE(json::accept(ReadFile(trace_))) << ReadFile(trace_);
  EXPECT_FALSE(std::ifstream(PartialPath(trace_)).good());
  const json summary = json::parse(ReadFile(summary_));
  EXPECT_EQ(summary["trace"], trace_);
  EXPECT_EQ(summary["events"], 0);
}

// On SIGTERM the collector closes the run: a producer that is still attached
// (and never detaches) cannot keep the drain going until its timeout, and
// what it sends from then on is refused.
TEST_F(CollectorE2eTest, StopClosesTheRunForProducersStillAttached) {
  const std::string log = dir_ + "/collector.log";
  const pid_t collector = StartCollector("close", log);
  auto producer = Attach(run_id_);
  ASSERT_NE(producer, nullptr);
  ASSERT_TRUE(SendAll(*producer, {Process(static_cast<uint32_t>(getpid()), kT0, "e2e-open"), Name(1, "step"),
                                  Launch(1, "void ko()"), Warp(1, {Ev(kT0 + 2000, 1, wire::kEventInstant)})}));
  ASSERT_EQ(kill(collector, SIGTERM), 0);
  EXPECT_EQ(WaitExit(collector), 0);
  const std::string text = ReadFile(log);
  EXPECT_EQ(text.find("drain timeout"), std::string::npos) << text;
  const json summary = json::parse(ReadFile(summary_));
  EXPECT_EQ(summary["events"], 1);
  EXPECT_EQ(summary["transport_unread_messages"], 0);
  const Bytes late = Warp(1, {Ev(kT0 + 3000, 1, wire::kEventInstant)});
  EXPECT_FALSE(producer->Send(late.data(), static_cast<uint32_t>(late.size()), 1));
  EXPECT_EQ(producer->stats().events_dropped, 1u);
}

TEST(CollectorCliTest, BadArgumentsExit2) {
  const std::string log = ::testing::TempDir() + "collector_cli_" + std::to_string(getpid()) + ".log";
  EXPECT_EQ(WaitExit(Spawn({"--output", "/tmp/x.json"}, nullptr, log)), 2);
  EXPECT_NE(ReadFile(log).find("--run-id"), std::string::npos);
  EXPECT_EQ(WaitExit(Spawn({"--run-id", "bad/id", "--output", "/tmp/x.json"}, nullptr, log)), 2);
  EXPECT_EQ(WaitExit(Spawn({"--run-id", "ok", "--output", "/tmp/x.json", "--bogus", "1"}, nullptr, log)), 2);
  EXPECT_EQ(WaitExit(Spawn({"--run-id", "ok", "--output", "/tmp/x.json", "--drain-timeout-ms", "x"}, nullptr, log)), 2);
  EXPECT_EQ(WaitExit(Spawn({"--run-id", "ok", "--output", "/tmp/x.json", "--layout", "sm"}, nullptr, log)), 2);
  // The transport's registry holds at most 65536 entries.
  for (const char* n : {"0", "65537", "1048576"}) {
    EXPECT_EQ(WaitExit(Spawn({"--run-id", "ok", "--output", "/tmp/x.json", "--max-producers", n}, nullptr, log)), 2)
        << n;
    EXPECT_NE(ReadFile(log).find("1 to 65536"), std::string::npos) << ReadFile(log);
  }
  EXPECT_EQ(WaitExit(Spawn({"--help"}, nullptr, log)), 0);
  EXPECT_NE(ReadFile(log).find("usage: smprof-collector"), std::string::npos);
  unlink(log.c_str());
}

TEST(CollectorCliTest, UnwritableOutputExits1NamingTheFix) {
  const std::string log = ::testing::TempDir() + "collector_cli_out_" + std::to_string(getpid()) + ".log";
  const std::string run_id = UniqueRunId("out");
  EXPECT_EQ(WaitExit(Spawn({"--run-id", run_id, "--output", "/nonexistent-smprof-dir/t.json"}, nullptr, log)), 1);
  const std::string err = ReadFile(log);
  EXPECT_NE(err.find("/nonexistent-smprof-dir/t.json"), std::string::npos) << err;
  EXPECT_NE(err.find("--output"), std::string::npos) << err;
  // Nothing of the run is left behind.
  EXPECT_NE(access(("/dev/shm/" + transport::ControlSegmentName(run_id)).c_str(), F_OK), 0);
  unlink(log.c_str());
}

TEST(CollectorCliTest, DuplicateRunIdExits1) {
  const std::string run_id = UniqueRunId("dup");
  std::string error;
  auto consumer = transport::Consumer::Create(run_id, {}, &error);
  ASSERT_NE(consumer, nullptr) << error;
  const std::string log = ::testing::TempDir() + "collector_cli_dup_" + std::to_string(getpid()) + ".log";
  const std::string out = ::testing::TempDir() + "collector_cli_dup_" + std::to_string(getpid()) + ".json";
  EXPECT_EQ(WaitExit(Spawn({"--run-id", run_id, "--output", out}, nullptr, log)), 1);
  EXPECT_NE(ReadFile(log).find(run_id), std::string::npos);
  unlink(log.c_str());
  unlink(out.c_str());
}

}  // namespace
}  // namespace smprof
