// Termination (injector/termination.h) in forked children: a signal left at
// its default runs the last harvest first and ends the process as the
// signal would have; a program's own handling of a signal stays its own.
#include "injector/termination.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

namespace smprof::injector {
namespace {

struct Ended {
  int status = 0;
  std::string said;  // what the child wrote to the pipe
};

// Runs `child(fd)` in a forked process (fd: a pipe's write end), which then
// waits to be ended; returns its wait status and what it wrote.
Ended RunChild(const std::function<void(int fd)>& child) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    child(fds[1]);
    for (int i = 0; i < 200; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    _exit(0);
  }
  close(fds[1]);
  Ended e;
  char buf[256];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) e.said.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  EXPECT_EQ(waitpid(pid, &e.status, 0), pid);
  return e;
}

// Async-signal-safe: also from the program's own handler.
void Say(int fd, const char* text) {
  if (write(fd, text, strlen(text)) < 0) _exit(91);
}

int g_fd = -1;

TEST(TerminationTest, ASignalAtItsDefaultShipsFirstAndEndsTheProcessWithIt) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const Ended e = RunChild([sig](int fd) {
      g_fd = fd;
      if (termination::Install([](int s) { Say(g_fd, ("shipped " + std::to_string(s)).c_str()); }) != 3) _exit(90);
      kill(getpid(), sig);
    });
    ASSERT_TRUE(WIFSIGNALED(e.status)) << sig << " status " << e.status;
    EXPECT_EQ(WTERMSIG(e.status), sig);
    EXPECT_EQ(e.said, "shipped " + std::to_string(sig));
  }
}

TEST(TerminationTest, TheProgramsOwnHandlerAndIgnoredSignalsStayTheirs) {
  const Ended e = RunChild([](int fd) {
    g_fd = fd;
    signal(SIGTERM, [](int) {
      Say(g_fd, "own");
      _exit(7);
    });
    signal(SIGHUP, SIG_IGN);
    if (termination::Install([](int) { Say(g_fd, "shipped"); }) != 1) _exit(90);  // SIGINT only
    kill(getpid(), SIGHUP);  // ignored
    kill(getpid(), SIGTERM);
  });
  ASSERT_TRUE(WIFEXITED(e.status)) << e.status;
  EXPECT_EQ(WEXITSTATUS(e.status), 7);
  EXPECT_EQ(e.said, "own");
}

// A process forked after Install has no thread to ship with: it ends at once.
TEST(TerminationTest, AForkedProcessEndsAtOnce) {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer holds signals back for delivery at its own safe points,
  // which a process forked from a multi-threaded one may never reach.
  GTEST_SKIP() << "signals in a process forked from a multi-threaded one under ThreadSanitizer";
#endif
  const Ended e = RunChild([](int fd) {
    g_fd = fd;
    termination::Install([](int) { Say(g_fd, "shipped"); });
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      kill(getpid(), SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(2));
      _exit(0);
    }
    int status = 0;
    waitpid(grandchild, &status, 0);
    Say(fd, WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM ? "grandchild ended" : "grandchild lived");
    _exit(0);
  });
  ASSERT_TRUE(WIFEXITED(e.status)) << e.status;
  EXPECT_EQ(e.said, "grandchild ended");
}

// A signal a second after the first ends the process at once; one at the
// same moment (sent to the process and to its group) does not.
TEST(TerminationTest, ASecondSignalDoesNotWaitForTheHarvest) {
  const auto start = std::chrono::steady_clock::now();
  const Ended e = RunChild([](int fd) {
    g_fd = fd;
    termination::Install([](int) {
      Say(g_fd, "harvesting");
      std::this_thread::sleep_for(std::chrono::seconds(5));
      Say(g_fd, " done");
    });
    kill(getpid(), SIGTERM);
    kill(getpid(), SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    Say(g_fd, ", still shipping");
    kill(getpid(), SIGTERM);
  });
  ASSERT_TRUE(WIFSIGNALED(e.status)) << e.status;
  EXPECT_EQ(WTERMSIG(e.status), SIGTERM);
  EXPECT_EQ(e.said, "harvesting, still shipping");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

}  // namespace
}  // namespace smprof::injector
