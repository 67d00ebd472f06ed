// What a trace records about its run, so that a reader of the file alone can
// tell what was run and how: the command line, the working directory, the
// wall-clock start, smprof's version and git revision, every setting with its
// value and where it came from, the options, the CUDA-related environment and
// what smprof-run set for the program; and, after the run, how the program
// ended. smprof-run sends both to the collector (control_channel.h), which
// writes them into the trace and the summary.
//
// The environment is not recorded whole (it may hold secrets): only the
// variables that change what CUDA or smprof do (CUDA_*, NVIDIA_*, SMPROF_*).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "runner/run_options.h"

namespace smprof::runner {

struct RunContext {
  std::vector<std::string> argv;  // smprof-run's own command line
  std::string cwd;
  std::string host;
  uint64_t start_unix_ns = 0;
  std::string run_id;
  std::string output;                                              // the trace path asked for
  Environment environment;                                         // smprof-run's environment
  std::vector<std::pair<std::string, std::string>> app_variables;  // set for the program
  // --serve: the process served and its command line (what "command" records).
  int64_t caller_pid = 0;
  std::vector<std::string> caller_command;
};

// {"command", "smprof_run", "cwd", "host", "start_time" (ISO 8601 UTC),
//  "start_unix_ns", "smprof_version", "smprof_revision", "run_id", "output",
//  "settings": {VAR: {"value", "source"}}, "options": {...},
//  "environment": {...}, "program_environment": {...}}
// With --serve, "command" is the caller's command line, "caller_pid" its pid,
// and "program_environment" holds what the caller was told to set.
nlohmann::json RunMetadata(const RunOptions& options, const RunContext& context);

// How a --serve run ended: {"status": "stopped"} (the caller said "stop"),
// {"status": "caller_gone"} (stdin ended or the caller exited without it), or
// {"status": "signal", "signal": N, "signal_name": "SIGTERM"} (smprof-run was
// told to stop).
nlohmann::json ServeExitMetadata(bool stopped, int signal);

// How the program ended, from its wait status: {"status": "exited",
// "code": N} or {"status": "killed", "signal": N, "signal_name": "...",
// "code": 128+N}.
nlohmann::json ExitMetadata(int wait_status);

// Whether an environment variable belongs in RunMetadata's "environment".
bool IsRecordedVariable(const std::string& name);

}  // namespace smprof::runner
