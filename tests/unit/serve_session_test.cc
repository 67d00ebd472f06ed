// smprof-run --serve's protocol (runner/serve_session.h): the ready and done
// lines, and each way the wait for the caller ends (a "stop" line, the end of
// stdin, the caller's exit, a signal), on pipes and forked processes.
#include "runner/serve_session.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "common/json.h"

namespace smprof::runner {
namespace {

volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

class Pipe {
 public:
  Pipe() { EXPECT_EQ(pipe2(fds_, O_CLOEXEC), 0); }
  ~Pipe() {
    CloseWrite();
    if (fds_[0] >= 0) close(fds_[0]);
  }
  int read_end() const { return fds_[0]; }
  void Write(const std::string& text) { ASSERT_EQ(write(fds_[1], text.data(), text.size()), (ssize_t)text.size()); }
  void CloseWrite() {
    if (fds_[1] >= 0) close(fds_[1]);
    fds_[1] = -1;
  }

 private:
  int fds_[2] = {-1, -1};
};

sigset_t Forwarded() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  return set;
}

TEST(ServeSessionTest, ReadyLineIsOneJsonLineWithTheVariables) {
  const std::string line = ReadyLine({{"SMPROF_RUN_ID", "1-ab"}, {"SMPROF_INJECTOR", "/x/lib\"q.so"}});
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_EQ(line.rfind("{\"ready\":true,", 0), 0u) << line;
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["env"]["SMPROF_RUN_ID"], "1-ab");
  EXPECT_EQ(j["env"]["SMPROF_INJECTOR"], "/x/lib\"q.so");
  EXPECT_EQ(j["env"].size(), 2u);
}

TEST(ServeSessionTest, DoneLineSaysWhereTheFilesAre) {
  ServeResult r;
  r.ok = true;
  r.trace = "/t/a.pftrace";
  r.stats_json = "/t/a.pftrace.stats.json";
  r.launches = 3;
  r.events = 40;
  const std::string line = DoneLine(r);
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_EQ(line.rfind("{\"done\":true,", 0), 0u) << line;
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["trace"], "/t/a.pftrace");
  EXPECT_EQ(j["stats_json"], "/t/a.pftrace.stats.json");
  EXPECT_EQ(j["stats_csv"], "");
  EXPECT_EQ(j["launches"], 3);
  EXPECT_EQ(j["events"], 40);
  EXPECT_EQ(j["lost_events"], 0);
}

TEST(ServeSessionTest, StopLineEndsTheWait) {
  Pipe in;
  in.Write("hello\nsto");
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    in.Write("p\r\n");
  });
  const ServeEnd end = WaitForCaller(in.read_end(), getpid(), g_signal, Forwarded());
  later.join();
  EXPECT_TRUE(end.stopped);
  EXPECT_EQ(end.signal, 0);
}

TEST(ServeSessionTest, EndOfInputWithoutStopIsACallerGone) {
  Pipe in;
  in.Write("stopping\n");  // not "stop"
  in.CloseWrite();
  const ServeEnd end = WaitForCaller(in.read_end(), getpid(), g_signal, Forwarded());
  EXPECT_FALSE(end.stopped);
  EXPECT_EQ(end.signal, 0);
}

// The caller exits while another process (one it forked) keeps the pipe open.
TEST(ServeSessionTest, CallersExitEndsTheWaitWhileThePipeStaysOpen) {
  Pipe in;
  const pid_t caller = fork();
  ASSERT_GE(caller, 0);
  if (caller == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    _exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  const ServeEnd end = WaitForCaller(in.read_end(), caller, g_signal, Forwarded());
  EXPECT_FALSE(end.stopped);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  int status = 0;
  EXPECT_EQ(waitpid(caller, &status, 0), caller);
}

TEST(ServeSessionTest, SignalEndsTheWait) {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  g_signal = 0;
  Pipe in;
  const pthread_t self = pthread_self();
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pthread_kill(self, SIGUSR1);
  });
  const ServeEnd end = WaitForCaller(in.read_end(), getpid(), g_signal, Forwarded());
  later.join();
  EXPECT_EQ(end.signal, SIGUSR1);
  EXPECT_FALSE(end.stopped);
  // A signal that came before the wait is not missed either.
  const ServeEnd again = WaitForCaller(in.read_end(), getpid(), g_signal, Forwarded());
  EXPECT_EQ(again.signal, SIGUSR1);
  sigaction(SIGUSR1, &old, nullptr);
  g_signal = 0;
}

TEST(ServeSessionTest, CommandLineOfAProcess) {
  const std::vector<std::string> self = CommandLineOf(getpid());
  ASSERT_FALSE(self.empty());
  EXPECT_NE(self[0].find("serve_session_test"), std::string::npos) << self[0];
  EXPECT_TRUE(CommandLineOf(999999999).empty());
}

}  // namespace
}  // namespace smprof::runner
