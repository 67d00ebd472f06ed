#include "injector/termination.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>

namespace smprof::injector::termination {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
// The program ends this long after the signal at the latest.
constexpr std::chrono::seconds kLongestShipping{10};

int g_pipe[2] = {-1, -1};
pid_t g_pid = 0;
std::atomic<int64_t> g_first_ms{0};  // when the first signal came (CLOCK_MONOTONIC)
// A signal this long after the first ends the process at once.
constexpr std::chrono::milliseconds kRepeatAfter{1000};
std::function<void(int)>* g_on_signal = nullptr;  // leaky: the thread may outlive every destructor

// Restores the default action and raises `sig` for the process: it ends as
// if nothing had caught the signal (from the handler, as it returns).
void RaiseDefault(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  kill(getpid(), sig);
}

int64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void OnSignal(int sig) {
  const int saved = errno;
  const int64_t now = MonotonicMs();
  int64_t first = 0;
  if (getpid() != g_pid) {
    RaiseDefault(sig);  // a forked child: at once
  } else if (!g_first_ms.compare_exchange_strong(first, now)) {
    // The same signal often comes twice at once (smprof-run forwards what a
    // job scheduler or timeout also sends to the whole process group): only
    // one a while after the first is a second request.
    if (now - first >= kRepeatAfter.count()) RaiseDefault(sig);
  } else {
    const unsigned char byte = static_cast<unsigned char>(sig);
    if (write(g_pipe[1], &byte, 1) != 1) RaiseDefault(sig);
  }
  errno = saved;
}

void Watch() {
  pthread_setname_np(pthread_self(), "smprof-signal");
  // No signal is delivered to this thread: the program's threads take them.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  unsigned char byte = 0;
  ssize_t n;
  do {
    n = read(g_pipe[0], &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) return;
  std::thread([sig = byte] {
    std::this_thread::sleep_for(kLongestShipping);
    RaiseDefault(sig);
  }).detach();
  (*g_on_signal)(byte);
  // This thread blocks every signal: another one takes it, and the process ends.
  RaiseDefault(byte);
}

}  // namespace

int Install(std::function<void(int)> on_signal) {
  if (g_on_signal != nullptr || pipe2(g_pipe, O_CLOEXEC) != 0) return 0;
  g_pid = getpid();
  g_on_signal = new std::function<void(int)>(std::move(on_signal));
  int taken = 0;
  for (int sig : kSignals) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;
    const bool default_action = (old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_DFL;
    if (!default_action) continue;
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(sig, &sa, nullptr) == 0) ++taken;
  }
  if (taken > 0) std::thread(Watch).detach();
  return taken;
}

}  // namespace smprof::injector::termination
