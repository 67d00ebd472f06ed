// smprof-run --serve's protocol with its caller (see serve_session.h).
#include "runner/serve_session.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <ctime>
#include <fstream>
#include <iterator>

#include "common/json.h"

namespace smprof::runner {
namespace {

// Keys in the order written: "ready" or "done" first.
std::string JsonLine(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// Takes the complete lines off the front of `text`: true if one is "stop".
bool TakeStopLine(std::string* text) {
  bool stop = false;
  for (size_t end; (end = text->find('\n')) != std::string::npos; text->erase(0, end + 1)) {
    std::string line = text->substr(0, end);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    stop |= line == "stop";
  }
  constexpr size_t kLongestLine = 4096;  // anything longer is no "stop": drop it, keep the bound
  if (text->size() > kLongestLine) text->clear();
  return stop;
}

// A descriptor that becomes readable when `pid` exits (zombie included), or
// -1 where the kernel has none (before Linux 5.3).
int ExitDescriptor(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

// Without an exit descriptor: whether `pid` still runs. A caller that was
// our parent is gone once we have been reparented.
bool StillRunning(pid_t pid, pid_t parent_at_start) {
  if (pid == parent_at_start && getppid() != parent_at_start) return false;
  return kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace

std::string ReadyLine(const std::vector<std::pair<std::string, std::string>>& vars) {
  nlohmann::ordered_json env = nlohmann::ordered_json::object();
  for (const auto& [name, value] : vars) env[name] = value;
  return JsonLine({{"ready", true}, {"env", env}});
}

std::string DoneLine(const ServeResult& r) {
  return JsonLine({{"done", true},
                   {"ok", r.ok},
                   {"trace", r.trace},
                   {"stats_json", r.stats_json},
                   {"stats_csv", r.stats_csv},
                   {"launches", r.launches},
                   {"events", r.events},
                   {"lost_events", r.lost_events}});
}

ServeEnd WaitForCaller(int input, pid_t caller, const volatile sig_atomic_t& pending_signal, const sigset_t& signals) {
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &signals, &old);
  sigset_t waiting = old;  // as before, but the signals in `signals` unblocked
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sigismember(&signals, sig) == 1) sigdelset(&waiting, sig);
  }
  const pid_t parent = getppid();
  const int exited = ExitDescriptor(caller);
  constexpr timespec kCheckEvery{0, 200 * 1000 * 1000};  // without an exit descriptor
  ServeEnd end;
  std::string text;
  for (;;) {
    if (pending_signal != 0) {
      end.signal = pending_signal;
      break;
    }
    pollfd fds[2] = {{input, POLLIN, 0}, {exited, POLLIN, 0}};  // a negative fd is skipped
    const int n = ppoll(fds, 2, exited >= 0 ? nullptr : &kCheckEvery, &waiting);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (fds[0].revents != 0) {
      char buf[512];
      const ssize_t got = read(input, buf, sizeof(buf));
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) break;  // the end of the input: the caller is gone
      text.append(buf, static_cast<size_t>(got));
      if (TakeStopLine(&text)) {
        end.stopped = true;
        break;
      }
    }
    if (exited >= 0 ? fds[1].revents != 0 : !StillRunning(caller, parent)) break;
  }
  if (exited >= 0) close(exited);
  // A signal that came with the end of the input is still pending: a ppoll
  // that returns ready descriptors restores the mask without delivering it.
  // Unblocking delivers it, before pthread_sigmask returns; then it counts.
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!end.stopped && end.signal == 0) end.signal = pending_signal;
  return end;
}

std::vector<std::string> CommandLineOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    args.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return args;
}

}  // namespace smprof::runner
