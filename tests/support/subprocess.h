// Test-only: running a program the way every test that spawns processes must.
//
//  - The child gets default signal dispositions and an empty signal mask
//    (except the signals a test asks to keep ignored): a test run under nohup
//    or from a background job must behave as in a terminal.
//  - The child leads its own process group, and on timeout the whole group
//    is killed: nothing a hung child started outlives the test.
//
// Header-only; used by the e2e and GPU tests.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace smprof::testing {

struct ProcessSpec {
  std::vector<std::string> argv;                         // argv[0] is run through execvp
  std::vector<std::pair<std::string, std::string>> env;  // set in the child
  std::vector<std::string> unset_env;                    // removed in the child
  std::vector<int> ignored_signals;                      // SIG_IGN in the child (nohup-like)
  std::string cwd;                                       // "" = the test's
  std::string stdout_path;                               // "" = inherited
  std::string stderr_path;                               // "" = inherited
  int stdin_fd = -1;                                     // >= 0: the child's stdin (e.g. a pipe's end)
  int stdout_fd = -1;                                    // >= 0: the child's stdout, instead of stdout_path
};

// In a forked child: every catchable signal to its default, empty mask, then
// the signals in `ignored` ignored.
inline void ResetSignalsInChild(const std::vector<int>& ignored) {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) std::signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : ignored) std::signal(sig, SIG_IGN);
}

// Starts `spec` as the leader of a new process group; -1 on failure.
inline pid_t StartProcess(const ProcessSpec& spec) {
  const pid_t pid = fork();
  if (pid != 0) {
    if (pid > 0) setpgid(pid, pid);  // also here, so kill(-pid) works at once
    return pid;
  }
  setpgid(0, 0);
  ResetSignalsInChild(spec.ignored_signals);
  if (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0) _exit(200);
  for (const std::string& name : spec.unset_env) unsetenv(name.c_str());
  for (const auto& [name, value] : spec.env) setenv(name.c_str(), value.c_str(), 1);
  for (const auto& [from, fd] :
       {std::make_pair(spec.stdin_fd, STDIN_FILENO), std::make_pair(spec.stdout_fd, STDOUT_FILENO)}) {
    if (from >= 0 && dup2(from, fd) < 0) _exit(201);
  }
  for (const auto& [path, fd] : {std::make_pair(spec.stdout_fd >= 0 ? std::string() : spec.stdout_path, STDOUT_FILENO),
                                 std::make_pair(spec.stderr_path, STDERR_FILENO)}) {
    if (path.empty()) continue;
    const int out = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || dup2(out, fd) < 0) _exit(201);
    close(out);
  }
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  _exit(202);
}

// Exit code of `pid` (128+N if signal N killed it). After `timeout` its whole
// process group is killed and -1 returned.
inline int WaitProcess(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline int RunProcess(const ProcessSpec& spec, std::chrono::seconds timeout) {
  const pid_t pid = StartProcess(spec);
  return pid < 0 ? -1 : WaitProcess(pid, timeout);
}

}  // namespace smprof::testing
