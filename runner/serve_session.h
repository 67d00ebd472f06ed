// smprof-run --serve: the run's side of a caller that profiles itself.
//
// A normal run starts the program with the variables that load smprof. With
// --serve there is no program: the caller (smprof.profile() in Python) loads
// the injector into its own process. The protocol, over smprof-run's stdin
// and stdout (stderr carries the usual messages and summary):
//
//   smprof-run -> caller   {"ready": true, "env": {NAME: VALUE, ...}}\n
//                          once the collector listens; the caller sets these
//                          variables, loads env["SMPROF_INJECTOR"] and calls
//                          InitializeInjection()
//   caller -> smprof-run   "stop\n" after smprof_inject_stop() returned (the
//                          last harvest is shipped), then closes stdin
//   smprof-run -> caller   {"done": true, "trace": PATH, ...}\n once the trace
//                          is complete
//
// The serving also ends when stdin ends without "stop", or when the caller
// exits (a process it forked may still hold the pipe open): the caller is
// gone, and the trace holds what it shipped. A forwarded signal (SIGTERM,
// SIGHUP, SIGQUIT) ends it too. Either way the run is then finished like one
// whose program exited.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace smprof::runner {

// The ready line, newline included: `vars` as a JSON object under "env".
std::string ReadyLine(const std::vector<std::pair<std::string, std::string>>& vars);

// What the caller learns at the end, as the done line (newline included).
struct ServeResult {
  bool ok = false;  // the collector finished and summarised the run
  std::string trace;
  std::string stats_json;  // "" when no statistics were written
  std::string stats_csv;
  uint64_t launches = 0;
  uint64_t events = 0;
  uint64_t lost_events = 0;
};
std::string DoneLine(const ServeResult& result);

// How the serving ended.
struct ServeEnd {
  bool stopped = false;  // the caller wrote "stop"
  int signal = 0;        // a signal in `signals` ended it (its number)
};

// Waits until `input` holds a line "stop", reaches its end (or fails), the
// process `caller` exits, or `pending_signal` becomes non-zero. The signals
// in `signals` are blocked except while waiting, so one that sets
// `pending_signal` is never missed; one that came with the end of the input
// or the caller's exit is reported too.
ServeEnd WaitForCaller(int input, pid_t caller, const volatile sig_atomic_t& pending_signal, const sigset_t& signals);

// The command line of process `pid` (/proc/PID/cmdline); empty if it is gone
// or has none.
std::vector<std::string> CommandLineOf(pid_t pid);

}  // namespace smprof::runner
