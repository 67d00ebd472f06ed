// smprof-run: runs a program under smprof and writes one trace per run.
//
// Process layout:
//   smprof-run ──fork/exec──> smprof-collector   (own process group; dies with
//        │                                        us via PR_SET_PDEATHSIG)
//        └─────fork/execvp──> program            (our process group; CUDA loads
//                                                 the injector through
//                                                 CUDA_INJECTION64_PATH)
// Order: the collector must be ready (it created the run's control segment
// and wrote "ready\n" to the ready pipe) before the program starts, or the
// program's first producer would find no run. The collector is stopped with
// SIGTERM only after the program has exited; it then drains every ring and
// writes the trace and the summary file.
//
// Descendants: smprof-run is a child subreaper (PR_SET_CHILD_SUBREAPER), so
// processes the program leaves behind are reparented to it. After the program
// exits it keeps reaping them (at most kDescendantTimeout) before it stops the
// collector, so what they record still reaches the trace; any still running
// then are named in one line.
//
// Signals: Ctrl-C reaches the program directly (same foreground group), so we
// ignore SIGINT and let the program decide; the collector is in another group
// and keeps running so the trace is finished. SIGTERM/SIGHUP/SIGQUIT sent to
// us are forwarded to the program. A signal that was ignored when smprof-run
// started (nohup, a background job) stays ignored, here and in the children.
// The forwarded signals are blocked across fork, and a signal that came before
// the program started stops the run without starting it. The program is waited
// for without reaping it (WNOWAIT), and its pid is cleared with the signals
// blocked before it is reaped, so the handler never signals a reused pid.
// Children restore the other default dispositions and the mask before exec.
//
// A collector that had to be killed (or died) may leave the trace cut inside
// an event: smprof-run cuts it after the last whole one and closes the array.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "collector/trace_writer.h"
#include "common/transport.h"
#include "runner/run_options.h"

extern char** environ;

namespace smprof::runner {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitCollectorFailed = 1;
constexpr std::chrono::seconds kReadyTimeout{10};
constexpr std::chrono::seconds kCollectorStopTimeout{30};
constexpr std::chrono::seconds kDescendantTimeout{10};
constexpr int kForwardedSignals[] = {SIGTERM, SIGHUP, SIGQUIT};

volatile sig_atomic_t g_app_pid = 0;
volatile sig_atomic_t g_pending_signal = 0;
// Signals ignored when smprof-run started: never handled nor reset here.
bool g_ignored_at_start[NSIG] = {};

void RecordIgnoredSignals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    struct sigaction old {};
    g_ignored_at_start[sig] = sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN;
  }
}

void ForwardSignal(int sig) {
  const pid_t pid = g_app_pid;
  if (pid > 0) {
    kill(pid, sig);
  } else {
    g_pending_signal = sig;
  }
}

void Error(const std::string& message) { std::fprintf(stderr, "smprof-run: %s\n", message.c_str()); }

bool IsFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string Absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  std::string dir = cwd;
  if (path.rfind("./", 0) == 0) return dir + path.substr(1);
  return dir + "/" + path;
}

std::string SelfDirectory() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  return Dirname(std::string(buf, static_cast<size_t>(n)));
}

// Finds a helper: the environment override if set (it must exist), else the
// first existing candidate. On failure *error names what was tried and the fix.
bool FindHelper(const Environment& env, const char* env_var, const std::vector<std::string>& candidates,
                const std::string& what, std::string* path, std::string* error) {
  if (auto it = env.find(env_var); it != env.end() && !it->second.empty()) {
    if (IsFile(it->second)) {
      *path = Absolute(it->second);
      return true;
    }
    *error = std::string(env_var) + "=" + it->second + " does not exist: point it at " + what +
             " or unset it";
    return false;
  }
  for (const std::string& c : candidates) {
    if (IsFile(c)) {
      *path = c;
      return true;
    }
  }
  std::string tried;
  for (const std::string& c : candidates) tried += (tried.empty() ? "" : ", ") + c;
  *error = what + " not found (looked for " + tried + "): build smprof (cmake --build <build dir>) " +
           "and run this smprof-run from its bin/ directory, or set " + env_var + "=<path>";
  return false;
}

std::string MakeRunId() {
  uint32_t random = 0;
  if (getrandom(&random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
    random = static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
             static_cast<uint32_t>(getpid()) * 2654435761u;
  }
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", random);
  return std::to_string(getpid()) + "-" + hex;
}

// In a child between fork and exec: default dispositions (except for signals
// ignored when smprof-run started, which stay ignored), empty mask.
void ResetSignalsForExec() {
  if (!g_ignored_at_start[SIGINT]) std::signal(SIGINT, SIG_DFL);
  for (int sig : kForwardedSignals) {
    if (!g_ignored_at_start[sig]) std::signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

pid_t WaitFor(pid_t pid, int* status) {
  pid_t r;
  do {
    r = waitpid(pid, status, 0);
  } while (r < 0 && errno == EINTR);
  return r;
}

struct Collector {
  pid_t pid = -1;
  bool reaped = false;  // it exited while we waited for descendants
  int status = 0;       // its wait status, once reaped
};

// Starts the collector and waits for "ready\n". Returns false after printing
// why (the collector prints its own error to our stderr).
bool StartCollector(const std::string& path, const std::string& run_id, const std::string& output,
                    const std::string& summary, const std::string& log_level, Collector* collector) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) {
    Error(std::string("cannot create a pipe: ") + std::strerror(errno));
    return false;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    Error(std::string("cannot fork: ") + std::strerror(errno));
    close(ready[0]);
    close(ready[1]);
    return false;
  }
  if (pid == 0) {
    setpgid(0, 0);  // out of the terminal's foreground group: Ctrl-C does not stop the trace
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // we died before the prctl
    ResetSignalsForExec();
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) {
      dup2(null_fd, STDIN_FILENO);
      if (null_fd != STDIN_FILENO) close(null_fd);
    }
    fcntl(ready[1], F_SETFD, 0);
    const std::string fd = std::to_string(ready[1]);
    std::vector<std::string> args = {path,        "--run-id",    run_id, "--output",    output,
                                     "--summary", summary,       "--ready-fd", fd, "--log-level",
                                     log_level};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    dprintf(STDERR_FILENO, "smprof-run: cannot run the collector '%s': %s\n", path.c_str(), std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists whichever runs first
  collector->pid = pid;
  close(ready[1]);

  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + kReadyTimeout;
  bool ok = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      Error("the collector did not become ready within " + std::to_string(kReadyTimeout.count()) +
            " s; rerun with --log-level debug to see why");
      break;
    }
    pollfd p{ready[0], POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[64];
    const ssize_t n = read(ready[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int status = 0;
      WaitFor(pid, &status);
      collector->pid = -1;
      Error("the collector failed to start (exit status " + std::to_string(ExitCodeOf(status)) +
            "); see its message above");
      break;
    }
    got.append(buf, static_cast<size_t>(n));
    if (got.find("ready\n") != std::string::npos) {
      ok = true;
      break;
    }
  }
  close(ready[0]);
  if (!ok && collector->pid > 0) {
    kill(-collector->pid, SIGKILL);
    int status = 0;
    WaitFor(collector->pid, &status);
    collector->pid = -1;
  }
  return ok;
}

// Cuts the trace after its last whole event and closes the array, after the
// collector was killed or died (the writer could not do it).
void RepairTrace(const std::string& output) {
  if (!IsFile(output)) return;
  bool repaired = false;
  std::string error;
  if (!RepairTraceFile(output, &repaired, &error)) {
    Error(error);
  } else if (repaired) {
    Error("the trace was cut after its last whole event and closed: it holds what the collector "
          "wrote until then");
  }
}

// SIGTERMs the collector and waits for it. Returns false if it had to be
// killed or failed; if it was killed or died by a signal, repairs `output`.
bool StopCollector(Collector* collector, const std::string& output) {
  int status = collector->status;
  if (!collector->reaped) {
    if (collector->pid <= 0) return false;
    kill(collector->pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + kCollectorStopTimeout;
    while (true) {
      const pid_t r = waitpid(collector->pid, &status, WNOHANG);
      if (r == collector->pid || (r < 0 && errno != EINTR)) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        kill(-collector->pid, SIGKILL);
        WaitFor(collector->pid, &status);
        collector->pid = -1;
        Error("the collector did not finish within " +
              std::to_string(kCollectorStopTimeout.count()) + " s and was killed");
        RepairTrace(output);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  collector->pid = -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Error("the collector ended with status " + std::to_string(ExitCodeOf(status)) +
          "; the trace may be incomplete");
    if (!WIFEXITED(status)) RepairTrace(output);
    return false;
  }
  return true;
}

// Our children other than `except`: /proc/self/task/<pid>/children, or a scan
// of /proc where the kernel lacks that file.
std::vector<pid_t> Children(pid_t except) {
  std::vector<pid_t> out;
  const pid_t self = getpid();
  std::ifstream list("/proc/self/task/" + std::to_string(self) + "/children");
  if (list) {
    for (long pid = 0; list >> pid;) {
      if (pid != except) out.push_back(static_cast<pid_t>(pid));
    }
    return out;
  }
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == except) continue;
    std::ifstream stat_file(std::string("/proc/") + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 1));
    std::string state;
    long ppid = 0;
    if (fields >> state >> ppid && ppid == self) out.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return out;
}

// After the program exited: reaps the processes it left behind (reparented to
// us, the subreaper) until none remains, `timeout` passes or a forwarded
// signal arrives. Returns how many are still running. Reaps the collector too
// if it exits meanwhile (recorded in *collector).
size_t WaitForDescendants(Collector* collector, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r;
    while ((r = waitpid(-1, &status, WNOHANG)) > 0) {
      if (r == collector->pid) {
        collector->reaped = true;
        collector->status = status;
      }
    }
    if (collector->reaped) return 0;  // nothing more can reach the trace
    const size_t left = Children(collector->pid).size();
    if (left == 0 || g_pending_signal != 0 || std::chrono::steady_clock::now() >= deadline) {
      return left;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

constexpr int kNotStarted = -2;

// Runs the program; returns its wait status, -1 if it could not be forked, or
// kNotStarted if a forwarded signal came first (g_pending_signal).
int RunProgram(const RunOptions& options, const std::vector<std::pair<std::string, std::string>>& vars) {
  sigset_t block;
  sigset_t old;
  sigemptyset(&block);
  for (int sig : kForwardedSignals) sigaddset(&block, sig);
  sigprocmask(SIG_BLOCK, &block, &old);
  // Checked with the signals blocked: one that comes later is delivered after
  // g_app_pid is set, and forwarded.
  if (g_pending_signal != 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    return kNotStarted;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    Error(std::string("cannot fork: ") + std::strerror(errno));
    return -1;
  }
  if (pid == 0) {
    ResetSignalsForExec();
    for (const auto& [name, value] : vars) setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    for (const std::string& a : options.program) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    dprintf(STDERR_FILENO, "smprof-run: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  g_app_pid = pid;
  sigprocmask(SIG_SETMASK, &old, nullptr);
  // Wait without reaping: the pid stays ours (a zombie) until g_app_pid is
  // cleared with the signals blocked, so the handler never signals a reused pid.
  siginfo_t info {};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  sigprocmask(SIG_BLOCK, &block, nullptr);
  g_app_pid = 0;
  sigprocmask(SIG_SETMASK, &old, nullptr);
  int status = 0;
  WaitFor(pid, &status);
  return status;
}

uint64_t Count(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer()) return it->get<int64_t>() < 0 ? 0 : static_cast<uint64_t>(it->get<int64_t>());
  if (it->is_array() || it->is_object()) return it->size();
  return 0;
}

void PrintSummary(const std::string& summary_path, const std::string& output, const RunOptions& options) {
  std::ifstream in(summary_path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json summary = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  std::string trace = output;
  if (summary.is_discarded() || !summary.is_object()) {
    Error("the collector wrote no summary; the trace may be incomplete");
  } else {
    if (auto it = summary.find("trace"); it != summary.end() && it->is_string()) {
      trace = Absolute(it->get<std::string>());
    }
    if (options.quiet) return;
    const nlohmann::json lost = summary.value("lost", nlohmann::json::object());
    const uint64_t orphan = Count(lost, "orphan");
    const std::string orphan_text =
        orphan == 0 ? "" : ", orphan " + std::to_string(orphan);  // events of a lost launch
    std::fprintf(stderr,
                 "smprof: profiled %llu launches, %llu events from %llu process(es); lost %llu events "
                 "(device buffer %llu, unplaced %llu, transport %llu%s)\n",
                 static_cast<unsigned long long>(Count(summary, "launches")),
                 static_cast<unsigned long long>(Count(summary, "events")),
                 static_cast<unsigned long long>(Count(summary, "processes")),
                 static_cast<unsigned long long>(Count(lost, "total")),
                 static_cast<unsigned long long>(Count(lost, "device_buffer")),
                 static_cast<unsigned long long>(Count(lost, "device_unplaced")),
                 static_cast<unsigned long long>(Count(lost, "transport")), orphan_text.c_str());
    // Losses that are not counted in events: each is named when non-zero.
    std::string problems;
    for (const char* key : {"producers_incomplete", "framing_errors", "malformed_messages",
                            "orphan_events", "registry_full", "transport_unread_messages"}) {
      const uint64_t n = Count(summary, key);
      if (n != 0) problems += (problems.empty() ? "" : ", ") + std::string(key) + " " + std::to_string(n);
    }
    if (!problems.empty()) {
      std::fprintf(stderr, "smprof: warning: %s; the trace may be missing data\n", problems.c_str());
    }
    if (auto it = summary.find("trace_error"); it != summary.end() && it->is_string()) {
      std::fprintf(stderr, "smprof: warning: writing the trace failed: %s\n",
                   it->get<std::string>().c_str());
    }
  }
  if (options.quiet) return;
  std::fprintf(stderr, "smprof: trace: %s (open it at https://ui.perfetto.dev)\n", trace.c_str());
  if (!summary.is_discarded() && Count(summary, "launches") == 0) {
    std::string check = "check SMPROF_KERNELS";
    if (!options.kernels.empty()) check += " (now \"" + options.kernels + "\")";
    std::fprintf(stderr,
                 "smprof: no kernel was profiled: kernels opt in by including <smprof/smprof.cuh> and "
                 "marking regions; %s; needs a CUDA GPU and driver\n",
                 check.c_str());
  }
}

Environment ReadEnvironment() {
  Environment env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    env.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

int Main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const Environment env = ReadEnvironment();
  RunOptions options;
  std::string error;
  switch (ParseRunOptions(args, env, &options, &error)) {
    case ParseOutcome::kHelp:
      std::fputs(HelpText().c_str(), stdout);
      return 0;
    case ParseOutcome::kVersion:
      std::fputs(VersionText().c_str(), stdout);
      return 0;
    case ParseOutcome::kUsage:
      Error(error);
      std::fputs(UsageText().c_str(), stderr);
      return kExitUsage;
    case ParseOutcome::kError:
      Error(error);
      return kExitUsage;
    case ParseOutcome::kRun:
      break;
  }

  const std::string self_dir = SelfDirectory();
  const std::string prefix = Dirname(self_dir);
  std::string injector;
  std::string collector_path;
  if (!FindHelper(env, kEnvInjector,
                  {prefix + "/lib/libsmprof_inject.so", prefix + "/lib64/libsmprof_inject.so",
                   prefix + "/lib/smprof/libsmprof_inject.so"},
                  "the injector libsmprof_inject.so", &injector, &error) ||
      !FindHelper(env, kEnvCollector,
                  {self_dir + "/smprof-collector", prefix + "/libexec/smprof/smprof-collector"},
                  "the collector smprof-collector", &collector_path, &error)) {
    Error(error);
    return kExitUsage;
  }

  const std::string output =
      Absolute(options.output.empty() ? DefaultOutputPath(options.program[0], std::time(nullptr)) : options.output);
  if (!IsDirectory(Dirname(output))) {
    Error("cannot write the trace to " + output + ": directory " + Dirname(output) +
          " does not exist; create it or choose another --output");
    return kExitUsage;
  }

  std::string summary_path;
  {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/smprof-summary-XXXXXX";
    const int fd = mkstemp(templ.data());
    if (fd < 0) {
      Error("cannot create a temporary file " + templ + ": " + std::strerror(errno) + "; set TMPDIR");
      return kExitCollectorFailed;
    }
    close(fd);
    summary_path = templ;
  }

  // From here on: Ctrl-C is the program's business; forward the others,
  // except those ignored when we started (nohup), which stay ignored.
  RecordIgnoredSignals();
  std::signal(SIGINT, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = ForwardSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwardedSignals) {
    if (!g_ignored_at_start[sig]) sigaction(sig, &sa, nullptr);
  }
  // Processes the program leaves behind become our children, so we can wait
  // for them (and their events) before stopping the collector.
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  const std::string run_id = MakeRunId();
  Collector collector;
  int exit_code = kExitCollectorFailed;
  if (StartCollector(collector_path, run_id, output, summary_path, options.log_level, &collector)) {
    const char* preload = std::getenv("LD_PRELOAD");
    const int status = RunProgram(options, AppEnvironment(options, run_id, injector, preload ? preload : ""));
    if (status == kNotStarted) {
      exit_code = 128 + g_pending_signal;  // asked to stop before the program started
      StopCollector(&collector, output);
    } else {
      exit_code = status < 0 ? kExitCollectorFailed : ExitCodeOf(status);
      const size_t left = WaitForDescendants(&collector, kDescendantTimeout);
      if (left != 0) {
        std::fprintf(stderr,
                     "smprof: %zu process(es) of the run still running; events they record from now "
                     "on are not in the trace\n",
                     left);
      }
      StopCollector(&collector, output);
      PrintSummary(summary_path, output, options);
    }
  }
  transport::RemoveRunSegments(run_id);
  unlink(summary_path.c_str());
  return exit_code;
}

}  // namespace
}  // namespace smprof::runner

int main(int argc, char** argv) { return smprof::runner::Main(argc, argv); }
