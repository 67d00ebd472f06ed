// smprof-run: runs a program under smprof and writes one trace per run.
//
// Process layout:
//   smprof-run ──fork/exec──> smprof-collector   (own process group; dies with
//        │        control pipe ──>                 us: PR_SET_PDEATHSIG, and the
//        │        <── summary (memfd)              control pipe closes)
//        └─────fork/execvp──> program            (our process group; CUDA loads
//                                                 the injector through
//                                                 CUDA_INJECTION64_PATH; every
//                                                 process preloads the shim)
// Order: the collector must be ready (it created the run's control segment
// and wrote "ready\n" to the ready pipe) before the program starts, or the
// program's first producer would find no run. smprof-run sends the run's
// metadata over the control pipe, runs the program, sends its exit status
// and closes the pipe: that is the collector's signal to drain every ring,
// finish the trace, move it into place and write the summary into a memfd
// (an anonymous file: nothing is left on disk whatever happens to us).
//
// Output: the trace is written to <output>.partial and renamed when complete
// (collector/trace_placement.h); an existing <output> stops the run before
// the program starts unless --force. A program that cannot be started gets
// its error line and nothing else: no summary, no trace.
//
// Other CUDA tools: when one already injects into this run (ncu or nsys
// started smprof-run), smprof steps aside: it execs the program unprofiled;
// when the program starts one (smprof-run -- ncu ./app), the preload shim
// steps aside in that tool's process (injector/preload_shim.cc).
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
// SIGPIPE is ignored here (a dead collector must not kill us through the
// control pipe) and restored for the children. The forwarded signals are
// blocked across fork, and a signal that came before the program started
// stops the run without starting it. The program is waited for without
// reaping it (WNOWAIT), and its pid is cleared with the signals blocked
// before it is reaped, so the handler never signals a reused pid.
//
// --serve: no program. The process that started smprof-run (or --serve-pid)
// loads the injector itself; smprof-run does what it does for a program up
// to starting it, hands the caller the variables through its stdout, waits
// for the caller to finish (runner/serve_session.h), then ends the run as
// after a program's exit.
//
// A collector that had to be killed (or died) leaves <output>.partial, maybe
// cut inside an event: smprof-run cuts it after the last whole one, closes
// the array and says where it is.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collector/collector.h"
#include "collector/stats_report.h"
#include "collector/trace_placement.h"
#include "collector/trace_repair.h"
#include "collector/trace_writer.h"
#include "common/cuda_tools.h"
#include "common/json.h"
#include "common/transport.h"
#include "runner/install_layout.h"
#include "runner/run_metadata.h"
#include "runner/run_options.h"
#include "runner/serve_session.h"

extern char** environ;

namespace smprof::runner {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitCollectorFailed = 1;
constexpr int kExitNotFound = 127;  // as a shell says "command not found"
constexpr int kExitNotExecutable = 126;
constexpr std::chrono::seconds kReadyTimeout{10};
// The collector is killed when it makes no progress (uses no CPU) for this long.
constexpr std::chrono::seconds kCollectorStopTimeout{30};
constexpr std::chrono::seconds kDescendantTimeout{10};
constexpr int kForwardedSignals[] = {SIGTERM, SIGHUP, SIGQUIT};

volatile sig_atomic_t g_app_pid = 0;
volatile sig_atomic_t g_pending_signal = 0;
// Signals ignored when smprof-run started: never handled nor reset here.
bool g_ignored_at_start[NSIG] = {};

void RecordIgnoredSignals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) {
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

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

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

std::string CurrentDirectory() {
  char cwd[4096];
  return getcwd(cwd, sizeof(cwd)) != nullptr ? std::string(cwd) : std::string();
}

std::string Absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  const std::string dir = CurrentDirectory();
  if (dir.empty()) return path;
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
    *error = std::string(env_var) + "=" + it->second + " does not exist: point it at " + what + " or unset it";
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
           "or install it (cmake --install), and run that smprof-run, or set " + env_var + "=<path>";
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

uint64_t RealtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// In a child between fork and exec: default dispositions (except for signals
// ignored when smprof-run started, which stay ignored), empty mask.
void ResetSignalsForExec() {
  for (int sig : {SIGINT, SIGPIPE, SIGTERM, SIGHUP, SIGQUIT}) {
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

bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

struct Collector {
  pid_t pid = -1;
  bool reaped = false;  // it exited while we waited for descendants
  int status = 0;       // its wait status, once reaped
  int control = -1;     // write end of the control pipe; closing it stops the collector
};

// Starts the collector and waits for "ready\n". Returns false after printing
// why (the collector prints its own error to our stderr).
// With --serve (`serving`) the collector's stdout is our stderr: our stdout
// is the caller's pipe, whose end must come when we end.
bool StartCollector(const std::string& path, const std::string& run_id, const std::string& output, bool force,
                    int summary_fd, const Settings& settings, bool serving, bool progress, Collector* collector) {
  int ready[2];
  int control[2];
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(control, O_CLOEXEC) != 0) {
    Error(std::string("cannot create a pipe: ") + std::strerror(errno));
    return false;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    Error(std::string("cannot fork: ") + std::strerror(errno));
    for (int fd : {ready[0], ready[1], control[0], control[1]}) close(fd);
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
    if (serving) dup2(STDERR_FILENO, STDOUT_FILENO);
    for (int fd : {ready[1], control[0], summary_fd}) fcntl(fd, F_SETFD, 0);
    std::vector<std::string> args = {path,
                                     "--run-id",
                                     run_id,
                                     "--output",
                                     output,
                                     "--summary-fd",
                                     std::to_string(summary_fd),
                                     "--control-fd",
                                     std::to_string(control[0]),
                                     "--ready-fd",
                                     std::to_string(ready[1]),
                                     "--log-level",
                                     settings.log_level,
                                     "--layout",
                                     settings.layout,
                                     "--trace-cycles",
                                     settings.trace_cycles,
                                     "--sink-threads",
                                     settings.sink_threads};
    if (force) args.push_back("--force");
    if (progress) args.push_back("--progress");
    if (!StatsBase(output).empty()) args.push_back("--stats");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    dprintf(STDERR_FILENO, "smprof-run: cannot run the collector '%s': %s\n", path.c_str(), std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists whichever runs first
  collector->pid = pid;
  collector->control = control[1];
  close(ready[1]);
  close(control[0]);

  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + kReadyTimeout;
  bool ok = false;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
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
  if (!ok) {
    close(collector->control);
    collector->control = -1;
  }
  return ok;
}

// Sends one control message (control_channel.h). A collector that is gone
// cannot read it; its absence is reported when the collector is stopped.
void SendControl(Collector* collector, const nlohmann::json& message) {
  if (collector->control < 0) return;
  WriteAll(collector->control, message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

// After the collector was killed or died: the trace it was writing stays
// where it is, under its partial name, cut after its last whole event and
// closed. Says where.
void KeepPartialTrace(const std::string& output) {
  const std::string partial = PartialPath(output);
  if (!IsFile(partial)) return;
  bool repaired = false;
  std::string error;
  if (!RepairAnyTraceFile(partial, &repaired, &error)) {
    Error(error);
    return;
  }
  Error(std::string("the trace is incomplete: ") + partial + " holds what the collector wrote until then" +
        (!repaired                                     ? ""
         : TraceFormatOf(output) == TraceFormat::kJson ? " (cut after its last whole event and closed)"
                                                       : " (cut after its last whole packet)"));
}

// Closes the control pipe and sends SIGTERM (either one makes the collector
// drain, finish and exit; it reads what is left in the pipe first) and waits
// for it. Returns false if it had to be killed or failed.
// The CPU time `pid` used so far, in clock ticks (utime + stime of
// /proc/<pid>/stat); 0 if unreadable.
uint64_t ProcessCpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the command may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  // Fields 3.. after the command: state is field 3; utime and stime are 14 and 15.
  for (int i = 3; i <= 15 && (fields >> field); ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  return utime + stime;
}

bool StopCollector(Collector* collector, const std::string& output) {
  if (collector->control >= 0) {
    close(collector->control);
    collector->control = -1;
  }
  int status = collector->status;
  if (!collector->reaped) {
    if (collector->pid <= 0) return false;
    kill(collector->pid, SIGTERM);
    // It finishes the trace from what the program shipped, however long
    // that takes, as long as it works on it (its CPU time grows).
    uint64_t cpu = ProcessCpuTicks(collector->pid);
    auto deadline = std::chrono::steady_clock::now() + kCollectorStopTimeout;
    while (true) {
      const pid_t r = waitpid(collector->pid, &status, WNOHANG);
      if (r == collector->pid || (r < 0 && errno != EINTR)) break;
      const auto now = std::chrono::steady_clock::now();
      if (const uint64_t used = ProcessCpuTicks(collector->pid); used != cpu) {
        cpu = used;
        deadline = now + kCollectorStopTimeout;
      }
      if (now >= deadline) {
        kill(-collector->pid, SIGKILL);
        WaitFor(collector->pid, &status);
        collector->pid = -1;
        Error("the collector made no progress for " + std::to_string(kCollectorStopTimeout.count()) +
              " s and was killed");
        KeepPartialTrace(output);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  collector->pid = -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Error("the collector ended with status " + std::to_string(ExitCodeOf(status)));
    KeepPartialTrace(output);
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

struct ProgramResult {
  enum Kind { kRan, kNotStarted, kStopped, kForkFailed } kind = kForkFailed;
  int status = 0;      // kRan: its wait status
  int exec_error = 0;  // kNotStarted: execvp's errno
};

// Runs the program. kStopped if a forwarded signal came first
// (g_pending_signal). An execvp failure comes back through a close-on-exec
// pipe, so it is told apart from a program that exits with 127 itself.
ProgramResult RunProgram(const RunOptions& options, const std::vector<std::pair<std::string, std::string>>& vars) {
  ProgramResult result;
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    Error(std::string("cannot create a pipe: ") + std::strerror(errno));
    return result;
  }
  sigset_t block;
  sigset_t old;
  sigemptyset(&block);
  for (int sig : kForwardedSignals) sigaddset(&block, sig);
  sigprocmask(SIG_BLOCK, &block, &old);
  // Checked with the signals blocked: one that comes later is delivered after
  // g_app_pid is set, and forwarded.
  if (g_pending_signal != 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    close(exec_pipe[0]);
    close(exec_pipe[1]);
    result.kind = ProgramResult::kStopped;
    return result;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    Error(std::string("cannot fork: ") + std::strerror(errno));
    close(exec_pipe[0]);
    close(exec_pipe[1]);
    return result;
  }
  if (pid == 0) {
    close(exec_pipe[0]);
    ResetSignalsForExec();
    for (const auto& [name, value] : vars) setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    for (const std::string& a : options.program) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    const int err = errno;
    (void)!write(exec_pipe[1], &err, sizeof(err));
    _exit(kExitNotFound);
  }
  g_app_pid = pid;
  sigprocmask(SIG_SETMASK, &old, nullptr);
  close(exec_pipe[1]);
  int err = 0;
  ssize_t n;
  do {
    n = read(exec_pipe[0], &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  // Wait without reaping: the pid stays ours (a zombie) until g_app_pid is
  // cleared with the signals blocked, so the handler never signals a reused pid.
  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  sigprocmask(SIG_BLOCK, &block, nullptr);
  g_app_pid = 0;
  sigprocmask(SIG_SETMASK, &old, nullptr);
  WaitFor(pid, &result.status);
  if (n == static_cast<ssize_t>(sizeof(err))) {
    result.kind = ProgramResult::kNotStarted;
    result.exec_error = err;
  } else {
    result.kind = ProgramResult::kRan;
  }
  return result;
}

// For a run smprof steps aside from: becomes the program, with the
// environment as it is, so that it runs exactly as without smprof-run (the
// other tool follows the exec). Returns only if the program cannot start.
int ExecUnprofiled(const RunOptions& options) {
  std::vector<char*> argv;
  for (const std::string& a : options.program) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const int err = errno;
  Error("cannot run '" + options.program[0] + "': " + std::strerror(err));
  return err == ENOENT ? kExitNotFound : kExitNotExecutable;
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

std::string Text(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// The collector's summary (run_summary.h), or nullopt with the reason said.
std::optional<CollectorSummary> ReadSummary(int fd) {
  std::string text;
  char buf[64 << 10];
  off_t offset = 0;
  for (;;) {
    const ssize_t n = pread(fd, buf, sizeof(buf), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    offset += n;
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  CollectorSummary summary;
  std::string error;
  if (j.is_discarded() || !CollectorSummary::FromJson(j, &summary, &error)) {
    Error("the collector wrote no summary" + (error.empty() ? std::string() : " (" + error + ")") +
          "; the trace may be incomplete");
    return std::nullopt;
  }
  return summary;
}

bool HaveNvidiaDriver() { return access("/proc/driver/nvidia/version", F_OK) == 0; }

// Why nothing was profiled, from what the run reported (one line), or "".
std::string NothingProfiledHint(const CollectorSummary& summary, const RunOptions& options) {
  if (summary.launches != 0) return "";
  const uint64_t processes = summary.processes;
  const uint64_t not_profiled = summary.not_profiled.size();
  if (processes == 0) {
    return HaveNvidiaDriver()
               ? "no process of the run started CUDA, so there was nothing to profile"
               : "no process of the run started CUDA, and this machine has no NVIDIA driver "
                 "(/proc/driver/nvidia/version is missing): CUDA programs need an NVIDIA GPU and its driver";
  }
  if (not_profiled >= processes) return "";  // each said why, above
  const uint64_t opted_in = summary.launches_opted_in;
  if (opted_in == 0) {
    return "no kernel that opts in was launched: kernels opt in by including <smprof/smprof.cuh> and "
           "marking regions";
  }
  if (summary.launches_not_selected >= opted_in) {
    // The settings that choose launches and were given, each with its check.
    const Settings& s = options.settings;
    const bool by_launches = !s.launches_spec.empty();
    const bool by_capture = s.capture_range != CaptureRange::kNone;
    std::vector<std::string> what, checks;
    if (!s.kernels_spec.empty() || (!by_launches && !by_capture)) {
      what.push_back("SMPROF_KERNELS (now \"" + s.kernels_spec + "\")");
      checks.push_back("the patterns against the kernel names");
    }
    if (by_launches) {
      what.push_back("SMPROF_LAUNCHES (now \"" + s.launches_spec + "\")");
      checks.push_back("the launch ranges against how often the kernels ran");
    }
    if (by_capture) {
      what.push_back(std::string("SMPROF_CAPTURE_RANGE (now ") + CaptureRangeText(s.capture_range) + ")");
      checks.push_back("that the program calls cudaProfilerStart()");
    }
    const auto join = [](const std::vector<std::string>& parts) {
      std::string text;
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0) text += i + 1 == parts.size() ? " and " : ", ";
        text += parts[i];
      }
      return text;
    };
    return join(what) + " selected none of the " + std::to_string(opted_in) + " launches of opted-in kernels: check " +
           join(checks) + " (smprof-run --help)";
  }
  return "the selected kernels recorded no events: check SMPROF_WARPS (now \"" +
         (options.settings.warps_spec.empty() ? std::string("all") : options.settings.warps_spec) +
         "\") and that their markers run";
}

// For a trace too large to open: what it is, and how to narrow the next run.
void WarnIfTooLarge(const std::string& trace, const stats::RunStats& run) {
  struct stat st {};
  if (stat(trace.c_str(), &st) != 0) return;
  const std::string advice = stats::LargeTraceAdvice(static_cast<uint64_t>(st.st_size), run);
  if (!advice.empty()) std::fprintf(stderr, "smprof: %s\n", advice.c_str());
}

// The run's statistics table (collector/stats_report.h), read back from the
// file the collector wrote, and where the files are; then whether the trace
// is too large to open.
void PrintStats(const CollectorSummary& summary, const std::string& trace) {
  if (!summary.stats_error.empty()) {
    std::fprintf(stderr, "smprof: warning: writing the statistics failed: %s\n", summary.stats_error.c_str());
    return;
  }
  if (summary.stats_json.empty() || summary.launches == 0) return;  // nothing to tell; the files say the same
  stats::RunStats run;
  std::string error;
  if (!stats::ReadStatsFile(summary.stats_json, &run, &error)) {
    std::fprintf(stderr, "smprof: warning: cannot read the statistics back: %s\n", error.c_str());
    WarnIfTooLarge(trace, stats::RunStats{});
    return;
  }
  std::fputs(stats::RenderText(run).c_str(), stderr);
  std::fprintf(stderr, "smprof: statistics: %s, %s\n", Absolute(summary.stats_json).c_str(),
               Absolute(summary.stats_csv).c_str());
  WarnIfTooLarge(trace, run);
}

// The device buffer each profiled GPU context got, once per distinct size.
void PrintDeviceBuffers(const CollectorSummary& summary, const RunOptions& options) {
  std::vector<uint64_t> sizes;
  for (const nlohmann::json& gpu : summary.gpus) {
    const auto seen = gpu.find("seen_as");
    if (seen == gpu.end() || !seen->is_array()) continue;
    for (const nlohmann::json& as : *seen) {
      const uint64_t mib = Count(as, "buffer_mib");
      if (mib != 0 && std::find(sizes.begin(), sizes.end(), mib) == sizes.end()) sizes.push_back(mib);
    }
  }
  if (sizes.empty()) return;
  std::string text;
  for (size_t i = 0; i < sizes.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(sizes[i]) + " MiB";
  const bool automatic = options.settings.buffer_mb == kAutoBufferMb;
  std::fprintf(stderr, "smprof: device buffer per GPU context: %s (%s)\n", text.c_str(),
               automatic ? "--buffer-mb auto: 1/32 of the free memory, 16-2048 MiB" : "--buffer-mb");
}

// `finishing_s`: how long the trace took after the program and its
// processes had ended (negative: not measured).
void PrintSummary(const std::optional<CollectorSummary>& read, const std::string& output, const RunOptions& options,
                  double finishing_s) {
  if (!read) return;  // ReadSummary said why
  const CollectorSummary& summary = *read;
  const std::string trace = summary.trace.empty() ? output : Absolute(summary.trace);
  if (options.quiet) return;
  const uint64_t orphan = summary.orphan_events;
  const std::string orphan_text = orphan == 0 ? "" : ", orphan " + std::to_string(orphan);  // events of a lost launch
  // read back but not shipped: the program's exit could not wait
  const std::string host_text = summary.lost_host == 0 ? "" : ", not shipped " + std::to_string(summary.lost_host);
  std::fprintf(stderr,
               "smprof: profiled %llu launches, %llu events from %llu process(es); lost %llu events "
               "(device buffer %llu, unplaced %llu, transport %llu%s%s)\n",
               static_cast<unsigned long long>(summary.launches), static_cast<unsigned long long>(summary.events),
               static_cast<unsigned long long>(summary.processes), static_cast<unsigned long long>(summary.lost_total),
               static_cast<unsigned long long>(summary.lost_device_buffer),
               static_cast<unsigned long long>(summary.lost_device_unplaced),
               static_cast<unsigned long long>(summary.lost_transport), host_text.c_str(), orphan_text.c_str());
  PrintDeviceBuffers(summary, options);
  if (summary.harvests_skipped != 0) {
    std::fprintf(stderr,
                 "smprof: %llu read-backs skipped while the host was behind the GPU (--backlog drop): the application "
                 "was not held; what no longer fit in the device buffer is in \"device buffer\" above\n",
                 static_cast<unsigned long long>(summary.harvests_skipped));
  }
  // Losses that are not counted in events: each is named when non-zero.
  std::string problems;
  for (const auto& [key, n] : std::initializer_list<std::pair<const char*, uint64_t>>{
           {"producers_incomplete", summary.producers_incomplete},
           {"framing_errors", summary.framing_errors},
           {"malformed_messages", summary.malformed_messages},
           {"orphan_events", summary.orphan_events},
           {"registry_full", summary.registry_full},
           {"transport_unread_messages", summary.transport_unread_messages}}) {
    if (n != 0) problems += (problems.empty() ? "" : ", ") + std::string(key) + " " + std::to_string(n);
  }
  if (!problems.empty()) {
    std::fprintf(stderr, "smprof: warning: %s; the trace may be missing data\n", problems.c_str());
  }
  for (const nlohmann::json& n : summary.not_profiled) {
    const std::string reason = Text(n, "reason");
    const std::string detail = Text(n, "detail");
    const std::string why = reason == "cupti_unavailable" ? detail + " holds CUPTI"
                            : reason == "stepped_aside"   ? detail + " injects into it; smprof stepped aside"
                                                          : detail;
    std::fprintf(stderr, "smprof: pid %llu was not profiled: %s\n", static_cast<unsigned long long>(Count(n, "pid")),
                 why.c_str());
  }
  for (const nlohmann::json& n : summary.kernel_failures) {
    std::fprintf(stderr, "smprof: pid %llu: a kernel failed: %s\n", static_cast<unsigned long long>(Count(n, "pid")),
                 Text(n, "detail").c_str());
  }
  if (!summary.trace_ok) {
    std::fprintf(stderr, "smprof: warning: writing the trace failed: %s\n", summary.trace_error.c_str());
  }
  if (trace != output && trace != PartialPath(output)) {
    std::fprintf(stderr, "smprof: %s appeared during the run, so the trace was written beside it\n", output.c_str());
  }
  PrintStats(summary, trace);
  if (finishing_s >= 0.5) {
    std::fprintf(stderr, "smprof: the trace was finished %.1f s after the program ended (the program did not wait)\n",
                 finishing_s);
  }
  std::fprintf(stderr, "smprof: trace: %s (open it at https://ui.perfetto.dev)%s\n", trace.c_str(),
               summary.layout.empty() || summary.launches == 0 ? "" : ("; layout: " + summary.layout).c_str());
  const std::string hint = NothingProfiledHint(summary, options);
  if (!hint.empty()) std::fprintf(stderr, "smprof: %s\n", hint.c_str());
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

std::string Hostname() {
  char host[256] = {};
  return gethostname(host, sizeof(host) - 1) == 0 ? std::string(host) : std::string();
}

// Checks the trace path before anything starts. Prints why and returns false
// if the trace cannot go there.
bool CheckOutput(const std::string& output, bool force) {
  if (!IsDirectory(Dirname(output))) {
    Error("cannot write the trace to " + output + ": directory " + Dirname(output) +
          " does not exist; create it or choose another --output");
    return false;
  }
  if (IsDirectory(output)) {
    Error(output + " is a directory: give --output a file name");
    return false;
  }
  if (!force && Exists(output) && !IsStreamPath(output)) {
    Error(output + " already exists: choose another --output, or pass --force to overwrite it");
    return false;
  }
  return true;
}

// From here on: Ctrl-C is the program's business (with --serve, the
// caller's); forward the others, except those ignored when we started
// (nohup), which stay ignored.
void InstallSignalHandlers() {
  RecordIgnoredSignals();
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = ForwardSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwardedSignals) {
    if (!g_ignored_at_start[sig]) sigaction(sig, &sa, nullptr);
  }
}

// Runs the program, tells the collector how it ended, stops the collector and
// prints the summary. Returns smprof-run's exit status.
int RunAndReport(const RunOptions& options, const std::vector<std::pair<std::string, std::string>>& vars,
                 const std::string& output, int summary_fd, Collector* collector) {
  int exit_code = kExitCollectorFailed;
  const ProgramResult program = RunProgram(options, vars);
  switch (program.kind) {
    case ProgramResult::kNotStarted:
      // Nothing ran, so nothing was collected: the error line and no trace.
      Error("cannot run '" + options.program[0] + "': " + std::strerror(program.exec_error));
      exit_code = program.exec_error == ENOENT ? kExitNotFound : kExitNotExecutable;
      SendControl(collector, {{"exit", {{"status", "not_started"}, {"error", std::strerror(program.exec_error)}}}});
      if (StopCollector(collector, output)) {
        const std::optional<CollectorSummary> summary = ReadSummary(summary_fd);
        if (summary && summary->processes == 0) {
          for (const std::string& file : {summary->trace, summary->stats_json, summary->stats_csv}) {
            if (!file.empty()) unlink(file.c_str());
          }
        }
      }
      break;
    case ProgramResult::kStopped:
      exit_code = 128 + g_pending_signal;  // asked to stop before the program started
      SendControl(collector, {{"exit", {{"status", "not_started"}, {"signal", static_cast<int>(g_pending_signal)}}}});
      StopCollector(collector, output);
      break;
    case ProgramResult::kForkFailed:
      StopCollector(collector, output);
      break;
    case ProgramResult::kRan: {
      exit_code = ExitCodeOf(program.status);
      SendControl(collector, {{"exit", ExitMetadata(program.status)}});
      const size_t left = WaitForDescendants(collector, kDescendantTimeout);
      if (left != 0) {
        std::fprintf(stderr,
                     "smprof: %zu process(es) of the run still running; events they record from now "
                     "on are not in the trace\n",
                     left);
      }
      const auto program_end = std::chrono::steady_clock::now();
      StopCollector(collector, output);
      const double finishing = std::chrono::duration<double>(std::chrono::steady_clock::now() - program_end).count();
      PrintSummary(ReadSummary(summary_fd), output, options, finishing);
      break;
    }
  }
  return exit_code;
}

// --serve (serve_session.h): tells the caller what to set, waits until it is
// done, then finishes the run as after a program and tells the caller where
// the trace is. Returns 0, 1 if the collector failed, 128+N if signal N
// ended the serving.
int Serve(const RunOptions& options, const std::vector<std::pair<std::string, std::string>>& vars,
          const std::string& output, int summary_fd, pid_t caller, Collector* collector) {
  ServeEnd end;
  if (WriteAll(STDOUT_FILENO, ReadyLine(vars))) {
    sigset_t forwarded;
    sigemptyset(&forwarded);
    for (int sig : kForwardedSignals) sigaddset(&forwarded, sig);
    end = WaitForCaller(STDIN_FILENO, caller, g_pending_signal, forwarded);
  } else {
    Error(std::string("cannot write the ready line to stdout (") + std::strerror(errno) +
          "): the caller of smprof-run --serve must read its stdout");
  }
  SendControl(collector, {{"exit", ServeExitMetadata(end.stopped, end.signal)}});
  const bool stopped = StopCollector(collector, output);
  const std::optional<CollectorSummary> summary = ReadSummary(summary_fd);
  PrintSummary(summary, output, options, -1);
  ServeResult result;
  result.ok = stopped && summary.has_value();
  result.trace = summary && !summary->trace.empty() ? Absolute(summary->trace) : output;
  if (summary) {
    result.stats_json = summary->stats_json.empty() ? "" : Absolute(summary->stats_json);
    result.stats_csv = summary->stats_csv.empty() ? "" : Absolute(summary->stats_csv);
    result.launches = summary->launches;
    result.events = summary->events;
    result.lost_events = summary->lost_total;
  }
  WriteAll(STDOUT_FILENO, DoneLine(result));  // a caller that is gone does not read it
  if (end.signal != 0) return 128 + end.signal;
  return result.ok ? 0 : kExitCollectorFailed;
}

int Main(int argc, char** argv) {
  const uint64_t start_ns = RealtimeNs();
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
    case ParseOutcome::kServe:
      break;
  }

  const std::string self_dir = SelfDirectory();
  Helpers helpers;
  std::string collector_path;
  // --serve needs no preload shim: the caller loads the injector itself.
  if (!FindHelper(env, kEnvInjector, InjectorCandidates(self_dir), "the injector libsmprof_inject.so",
                  &helpers.injector, &error) ||
      (!options.serve && !FindHelper(env, kEnvPreload, PreloadCandidates(self_dir),
                                     "the preload shim libsmprof_preload.so", &helpers.preload, &error)) ||
      !FindHelper(env, kEnvCollector, CollectorCandidates(self_dir), "the collector smprof-collector", &collector_path,
                  &error)) {
    Error(error);
    return kExitUsage;
  }

  // The process served, and what it runs: the "program" of a --serve run.
  pid_t caller = 0;
  if (options.serve) caller = options.serve_pid != 0 ? static_cast<pid_t>(options.serve_pid) : getppid();
  if (options.serve && kill(caller, 0) != 0 && errno == ESRCH) {
    Error("--serve-pid " + std::to_string(caller) + ": no such process; give the pid of the process to serve");
    return kExitUsage;
  }
  const std::vector<std::string> caller_command = options.serve ? CommandLineOf(caller) : std::vector<std::string>();

  // Another tool already injects into this run (it started smprof-run):
  // smprof's injection would make it fail, so smprof steps aside. A --serve
  // caller's injector finds that tool itself and tells the trace.
  auto variable = [&](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  const std::string injection = variable("CUDA_INJECTION64_PATH");
  const std::string preload = variable("LD_PRELOAD");
  if (!options.serve) {
    std::string_view evidence;  // may point into `injection` or `preload`
    const std::string_view tool = cuda_tools::InjectingTool(injection, preload, environ, helpers.injector, &evidence);
    if (!tool.empty()) {
      std::fprintf(stderr,
                   "smprof: %.*s injects into this run (%.*s): smprof steps aside; the program runs unprofiled and "
                   "no trace is written\n",
                   static_cast<int>(tool.size()), tool.data(), static_cast<int>(evidence.size()), evidence.data());
      return ExecUnprofiled(options);
    }
  }

  const std::string name_from =
      options.serve ? (caller_command.empty() ? "caller" : caller_command[0]) : options.program[0];
  const std::string output =
      Absolute(options.output.empty() ? DefaultOutputPath(name_from, std::time(nullptr), getpid()) : options.output);
  if (!CheckOutput(output, options.force)) return kExitUsage;

  // The summary comes back in an anonymous file: nothing to clean up, ever.
  const int summary_fd = memfd_create("smprof-summary", MFD_CLOEXEC);
  if (summary_fd < 0) {
    Error(std::string("cannot create the summary file (memfd_create): ") + std::strerror(errno));
    return kExitCollectorFailed;
  }

  InstallSignalHandlers();
  // Processes the program leaves behind become our children, so we can wait
  // for them (and their events) before stopping the collector.
  if (!options.serve) prctl(PR_SET_CHILD_SUBREAPER, 1);

  const std::string run_id = MakeRunId();
  Collector collector;
  int exit_code = kExitCollectorFailed;
  if (StartCollector(collector_path, run_id, output, options.force, summary_fd, options.settings, options.serve,
                     /*progress=*/!options.quiet && !options.serve, &collector)) {
    const auto vars = options.serve ? InjectorEnvironment(options, run_id, helpers.injector)
                                    : AppEnvironment(options, run_id, helpers, preload);
    RunContext context;
    context.argv.assign(argv, argv + argc);
    context.cwd = CurrentDirectory();
    context.host = Hostname();
    context.start_unix_ns = start_ns;
    context.run_id = run_id;
    context.output = output;
    context.environment = env;
    context.app_variables = vars;
    context.caller_pid = caller;
    context.caller_command = caller_command;
    SendControl(&collector, {{"run", RunMetadata(options, context)}});
    exit_code = options.serve ? Serve(options, vars, output, summary_fd, caller, &collector)
                              : RunAndReport(options, vars, output, summary_fd, &collector);
  }
  transport::RemoveRunSegments(run_id);
  close(summary_fd);
  return exit_code;
}

}  // namespace
}  // namespace smprof::runner

int main(int argc, char** argv) { return smprof::runner::Main(argc, argv); }
