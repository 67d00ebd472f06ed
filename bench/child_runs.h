// What the side-by-side benchmarks share: they run themselves as children
// (plainly, under a reference, under smprof-run) and read back the
// "<key> <value>" lines each child prints.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace smprof::bench {

// Runs `args` with stdout into a pipe; returns its "<key> <value>" lines, and
// in *wall (if set) the seconds it ran. Exits when the child fails.
inline std::map<std::string, double> RunChild(const std::vector<std::string>& args, double* wall = nullptr) {
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  std::map<std::string, double> out;
  FILE* f = fdopen(fds[0], "r");
  char key[64];
  double value = 0;
  while (std::fscanf(f, "%63s %lf", key, &value) == 2) out[key] = value;
  std::fclose(f);
  int status = 0;
  waitpid(pid, &status, 0);
  if (wall != nullptr) *wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "FAILED: %s exited with status %d\n", args[0].c_str(), status);
    std::exit(1);
  }
  return out;
}

// Seconds on the steady clock.
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// This program's path, to run itself.
inline std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) std::exit(1);
  buf[n] = '\0';
  return buf;
}

}  // namespace smprof::bench
