// smprof-run's command line and environment, as a library so that tests can
// parse without running anything.
//
// Precedence: an option beats the matching SMPROF_* environment variable,
// which beats the built-in default. Each setting's text is taken from the
// winning source and parsed once, by common/settings (the parser the injector
// uses too), so that a bad value stops smprof-run before anything runs
// instead of being ignored later inside the application.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/settings.h"

namespace smprof::runner {

using Environment = std::map<std::string, std::string>;

struct RunOptions {
  std::string output;  // empty: DefaultOutputPath()
  bool force = false;  // overwrite an existing output file
  bool preload = false;
  bool quiet = false;
  Settings settings;
  // Where each setting given by an option or the environment came from:
  // "--buffer-mb", "-k" or "SMPROF_BUFFER_MB". Settings left at their
  // default are absent, and are not passed to the application.
  std::map<Setting, std::string> sources;
  std::vector<std::string> program;  // program and its arguments
  // --serve: no program; smprof-run serves the run to its caller, a process
  // that loads the injector itself (smprof.profile() in Python), until its
  // standard input ends (see runner/serve_session.h).
  bool serve = false;
  int64_t serve_pid = 0;  // --serve-pid: the process served (0: smprof-run's parent)
};

enum class ParseOutcome {
  kRun,      // options and program are valid
  kServe,    // options are valid and --serve was given (no program)
  kHelp,     // print HelpText() to stdout, exit 0
  kVersion,  // print VersionText() to stdout, exit 0
  kError,    // print "smprof-run: <error>" (and for kUsage the usage), exit 2
  kUsage,    // no program given
};

// Parses argv[1..] (`args` excludes argv[0]) against `env`. On kError/kUsage
// `*error` is a one-line message naming the fix.
ParseOutcome ParseRunOptions(const std::vector<std::string>& args, const Environment& env, RunOptions* options,
                             std::string* error);

std::string UsageText();
std::string HelpText();
std::string VersionText();

// "smprof-<program basename>-<YYYYmmdd-HHMMSS>-<pid>.json" for the local
// time `now` and smprof-run's pid: two runs started in the same second in one
// directory get different names.
std::string DefaultOutputPath(const std::string& program, int64_t now_unix_seconds, int64_t pid);

// The SMPROF_* values to pass to the application: every setting in
// options.sources, as SettingText writes it.
std::vector<std::pair<std::string, std::string>> SettingVariables(const RunOptions& options);

// The variables a process that loads the injector itself needs (--serve):
// SMPROF_RUN_ID, SMPROF_INJECTOR (`injector`) and SettingVariables(). Not
// CUDA_INJECTION64_PATH nor LD_PRELOAD: those make the driver and the dynamic
// linker load smprof, which only a program started by smprof-run needs.
std::vector<std::pair<std::string, std::string>> InjectorEnvironment(const RunOptions& options,
                                                                     const std::string& run_id,
                                                                     const std::string& injector);

// The variables to set in the application's environment: InjectorEnvironment()
// and the two that load smprof. `ld_preload` is the
// application's current LD_PRELOAD (empty if unset). The preload shim goes
// first in LD_PRELOAD (and with --preload the injector after it);
// CUDA_INJECTION64_PATH names the injector, which the driver loads at cuInit.
struct Helpers {
  std::string injector;  // libsmprof_inject.so
  std::string preload;   // libsmprof_preload.so
};
std::vector<std::pair<std::string, std::string>> AppEnvironment(const RunOptions& options, const std::string& run_id,
                                                                const Helpers& helpers, const std::string& ld_preload);

}  // namespace smprof::runner
