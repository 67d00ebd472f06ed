// Termination: a program ended by SIGTERM, SIGINT or SIGHUP first ships
// what it recorded.
//
// Those signals end a program without running its exit handlers, so the
// events its kernels wrote since the last read-back, and the read-backs
// still queued, would die with it. Install() takes each of them whose
// disposition is the default (a program's own handler, or a signal it
// ignores, stays as it is; one it installs later replaces this one). The
// handler only writes the signal's number to a pipe (async-signal-safe);
// a thread of its own reads it, calls `on_signal` (the injector's last
// harvest, which reads even kernels still running), restores the default
// and raises the signal again: the program ends as it would have, with the
// same status, once what it recorded is shipped (10 s at most). A signal
// a second or more after the first, or one in a process forked from this one
// (which has no such thread), ends the process at once; one sooner is the
// same signal sent twice (to the process and to its group).
#pragma once

#include <functional>

namespace smprof::injector::termination {

// Takes the signals the process leaves at their default; starts the thread
// that calls `on_signal(signal)` once, on the first of them. Returns how
// many signals it took. Call once.
int Install(std::function<void(int)> on_signal);

}  // namespace smprof::injector::termination
