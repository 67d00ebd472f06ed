// smprof-run option parsing (see run_options.h).
#include "runner/run_options.h"

#include <algorithm>
#include <ctime>
#include <tuple>

#include "common/build_info.h"

namespace smprof::runner {
namespace {

// smprof-run's own options; the settings' options come from common/settings.
struct OptionSpec {
  char short_name;  // 0: none
  const char* long_name;
  bool takes_value;
  const char* value_name;
  const char* help;
};

constexpr OptionSpec kOwnOptions[] = {
    {'o', "output", true, "PATH",
     "trace file (default: ./smprof-<program>-<YYYYmmdd-HHMMSS>-<pid>.pftrace);\n"
     "native Perfetto protobuf, or Chrome JSON when PATH ends in .json;\n"
     "statistics go beside it (PATH.stats.json, PATH.stats.csv);\n"
     "an existing file is an error unless --force"},
    {0, "force", false, nullptr, "overwrite an existing trace file"},
    {0, "preload", false, nullptr,
     "also preload the injector into every process (by default the\n"
     "driver loads it at cuInit through CUDA_INJECTION64_PATH)"},
    {'q', "quiet", false, nullptr, "print no summary"},
    {0, "serve", false, nullptr,
     "no program: start the collector, print the line\n"
     "{\"ready\": true, \"env\": {...}} to stdout (what the caller\n"
     "sets to load the injector itself), wait until stdin ends,\n"
     "a line \"stop\" comes or the caller exits, then end the run\n"
     "as after a program (smprof.profile() in Python uses it)"},
    {0, "serve-pid", true, "PID",
     "with --serve: the process served, whose command line the\n"
     "trace records and whose exit ends the run (default: the\n"
     "parent of smprof-run)"},
    {'h', "help", false, nullptr, "print this help"},
    {0, "version", false, nullptr, "print the version"},
};

const OptionSpec* FindOwnLong(const std::string& name) {
  for (const OptionSpec& o : kOwnOptions) {
    if (name == o.long_name) return &o;
  }
  return nullptr;
}

const OptionSpec* FindOwnShort(char c) {
  for (const OptionSpec& o : kOwnOptions) {
    if (o.short_name != 0 && o.short_name == c) return &o;
  }
  return nullptr;
}

// Help column layout: "  -k, --kernels LIST" padded to kHelpColumn, then the
// help text, continuation lines indented to the column.
constexpr size_t kHelpColumn = 23;

void AppendHelpEntry(std::string* out, std::string left, const std::string& text) {
  left.resize(std::max(left.size() + 1, kHelpColumn), ' ');
  *out += left;
  for (char c : text) {
    out->push_back(c);
    if (c == '\n') out->append(kHelpColumn, ' ');
  }
  out->push_back('\n');
}

std::string OptionLabel(char short_name, const char* long_name, const char* value_name) {
  std::string left = short_name != 0 ? std::string("  -") + short_name + ", " : std::string("      ");
  left += std::string("--") + long_name;
  if (value_name != nullptr) left += std::string(" ") + value_name;
  return left;
}

bool ParseServePid(const std::string& text, int64_t* pid) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  *pid = std::stoll(text);
  return *pid > 0;
}

// --serve runs no program, and the options that only concern one do not apply.
ParseOutcome CheckServeOptions(const RunOptions& options, std::string* error) {
  if (!options.serve) {
    *error = "--serve-pid needs --serve: write smprof-run --serve --serve-pid PID [options]";
    return ParseOutcome::kError;
  }
  if (!options.program.empty()) {
    *error = "--serve runs no program, but '" + options.program[0] +
             "' was given: drop it (the caller loads the injector itself), or drop --serve to run it";
    return ParseOutcome::kError;
  }
  if (options.preload) {
    *error = "--preload does not apply to --serve (the caller loads the injector itself): drop --preload";
    return ParseOutcome::kError;
  }
  return ParseOutcome::kServe;
}

}  // namespace

ParseOutcome ParseRunOptions(const std::vector<std::string>& args, const Environment& env, RunOptions* options,
                             std::string* error) {
  *options = RunOptions();
  // The text of each setting given as an option (the last one wins), with
  // the option as the user wrote it.
  std::map<Setting, std::pair<std::string, std::string>> given;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program ("-" included)

    const OptionSpec* own = nullptr;
    const SettingSpec* setting = nullptr;
    std::string value;
    bool has_value = false;
    std::string shown;  // the option as the user wrote it, for errors
    if (arg[1] == '-') {
      const size_t eq = arg.find('=');
      const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      shown = "--" + name;
      own = FindOwnLong(name);
      setting = FindSettingByOption(name);
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        has_value = true;
      }
    } else {
      shown = arg.substr(0, 2);
      own = FindOwnShort(arg[1]);
      setting = FindSettingByShortOption(arg[1]);
      if (arg.size() > 2) {
        if (own != nullptr && !own->takes_value) {
          *error = "unknown option '" + arg + "': give short options separately (see smprof-run --help)";
          return ParseOutcome::kError;
        }
        value = arg.substr(2);
        has_value = true;
      }
    }
    if (own == nullptr && setting == nullptr) {
      *error =
          "unknown option '" + arg + "': see smprof-run --help (put -- before the program if its name starts with '-')";
      return ParseOutcome::kError;
    }
    const bool takes_value = setting != nullptr || own->takes_value;
    if (!takes_value && has_value) {
      *error = shown + " takes no value: write " + shown + " alone";
      return ParseOutcome::kError;
    }
    if (takes_value && !has_value) {
      if (i + 1 >= args.size()) {
        *error = shown + " needs a value: see smprof-run --help";
        return ParseOutcome::kError;
      }
      value = args[++i];
    }
    if (setting != nullptr) {
      given[setting->id] = {shown, value};
      continue;
    }
    const std::string name = own->long_name;
    if (name == "help") return ParseOutcome::kHelp;
    if (name == "version") return ParseOutcome::kVersion;
    if (name == "output") {
      if (value.empty()) {
        *error = shown + " needs a file name";
        return ParseOutcome::kError;
      }
      options->output = value;
    } else if (name == "force") {
      options->force = true;
    } else if (name == "preload") {
      options->preload = true;
    } else if (name == "quiet") {
      options->quiet = true;
    } else if (name == "serve") {
      options->serve = true;
    } else if (name == "serve-pid") {
      if (!ParseServePid(value, &options->serve_pid)) {
        *error = shown + " needs a process id (a positive integer), got '" + value + "'";
        return ParseOutcome::kError;
      }
    }
  }
  options->program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  // Each setting once: the option if given, else its variable (empty counts
  // as unset), else the default.
  for (const SettingSpec& spec : AllSettings()) {
    std::string source;
    std::string text;
    if (auto it = given.find(spec.id); it != given.end()) {
      std::tie(source, text) = it->second;
    } else if (auto var = env.find(spec.variable); var != env.end() && !var->second.empty()) {
      source = spec.variable;
      text = var->second;
    } else {
      continue;
    }
    if (!ParseSetting(spec.id, text, source, &options->settings, error)) return ParseOutcome::kError;
    options->sources[spec.id] = source;
  }

  if (options->serve || options->serve_pid != 0) return CheckServeOptions(*options, error);
  if (options->program.empty()) {
    *error = "no program given: write smprof-run [options] [--] program [args...]";
    return ParseOutcome::kUsage;
  }
  return ParseOutcome::kRun;
}

std::string UsageText() {
  return "usage: smprof-run [options] [--] program [args...]\n"
         "       smprof-run --serve [--serve-pid PID] [options]\n"
         "Try 'smprof-run --help' for the options.\n";
}

std::string VersionText() { return std::string("smprof-run ") + BuildVersion() + " (" + BuildRevision() + ")\n"; }

std::string HelpText() {
  std::string help = R"(usage: smprof-run [options] [--] program [args...]
       smprof-run --serve [--serve-pid PID] [options]

Runs the program with smprof injected and writes one Perfetto trace of the
regions its CUDA kernels mark and of the launch calls and harvests on its
threads (kernels opt in by including <smprof/smprof.cuh>), with statistics. The first argument that is not an option, or the one
after --, is the program; everything after it is passed to the program.
Exits with the program's exit status (128+N if signal N killed it), 127 or
126 if it cannot be started, 2 for a usage error, 1 if the collector cannot
start. Processes the program leaves running are waited for (up to 10 s) so
that their events reach the trace.

The trace is written to PATH.partial and renamed to PATH when it is complete;
a run that is killed leaves PATH.partial, readable as it is. smprof-run never
overwrites a file without --force: an existing PATH stops it before the
program starts, and a file created at PATH during the run makes the trace land
at PATH-2 (the summary names it).

With --serve there is no program: the caller profiles itself (Python:
`with smprof.profile("t.pftrace"): ...`). smprof-run checks the output and
starts the collector as for a program, prints the JSON line
{"ready": true, "env": {...}} to stdout, and waits. The caller sets those
variables in its own environment, loads the injector (SMPROF_INJECTOR) and
calls its InitializeInjection(); to end, it calls smprof_inject_stop() and
writes "stop" to smprof-run's stdin (or closes it; the caller's exit ends the
run too). smprof-run then finishes the trace, prints the summary to stderr,
writes the JSON line {"done": true, "trace": PATH, ...} to stdout and exits 0
(1 if the collector failed). Errors before the ready line exit 2 or 1 as
above, without it.

Options (an option overrides the environment variable named with it):
)";
  for (const OptionSpec& o : kOwnOptions) {
    if (std::string(o.long_name) == "help") {
      // The settings' options come before help and version.
      for (const SettingSpec& s : AllSettings()) {
        if (s.option == nullptr) continue;
        AppendHelpEntry(&help, OptionLabel(s.short_option, s.option, s.value_name),
                        std::string(s.help) + "\n(default: " + s.default_text + ") (" + s.variable + ")");
      }
    }
    AppendHelpEntry(&help, OptionLabel(o.short_name, o.long_name, o.value_name), o.help);
  }
  help += "\nEnvironment variables smprof reads:\n";
  for (const SettingSpec& s : AllSettings()) {
    if (s.option != nullptr) {
      AppendHelpEntry(&help, std::string("  ") + s.variable, std::string("as --") + s.option);
    } else {
      AppendHelpEntry(&help, std::string("  ") + s.variable,
                      std::string(s.help) + "\n(default: " + s.default_text + ")");
    }
  }
  AppendHelpEntry(&help, std::string("  ") + kEnvRunId, "set by smprof-run for the program (internal; do not set)");
  AppendHelpEntry(&help, std::string("  ") + kEnvInjector,
                  "path of libsmprof_inject.so (default: found next to smprof-run)");
  AppendHelpEntry(&help, std::string("  ") + kEnvPreload,
                  "path of libsmprof_preload.so (default: found next to smprof-run)");
  AppendHelpEntry(&help, std::string("  ") + kEnvCollector,
                  "path of smprof-collector (default: found next to smprof-run)");
  help += R"(
smprof-run sets CUDA_INJECTION64_PATH and LD_PRELOAD for the program. When
another tool already injects into the run (Nsight Compute or Nsight Systems
started smprof-run), smprof-run steps aside: the program runs unprofiled.

Open the trace at https://ui.perfetto.dev.
)";
  return help;
}

std::string DefaultOutputPath(const std::string& program, int64_t now_unix_seconds, int64_t pid) {
  const size_t slash = program.find_last_of('/');
  std::string base = program.substr(slash == std::string::npos ? 0 : slash + 1);
  if (base.empty()) base = "app";
  const time_t t = static_cast<time_t>(now_unix_seconds);
  struct tm local {};
  localtime_r(&t, &local);
  char stamp[32];
  strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  return "smprof-" + base + "-" + stamp + "-" + std::to_string(pid) + ".pftrace";
}

std::vector<std::pair<std::string, std::string>> SettingVariables(const RunOptions& options) {
  std::vector<std::pair<std::string, std::string>> vars;
  for (const auto& [setting, source] : options.sources) {
    vars.emplace_back(SpecOf(setting).variable, SettingText(setting, options.settings));
  }
  return vars;
}

std::vector<std::pair<std::string, std::string>> InjectorEnvironment(const RunOptions& options,
                                                                     const std::string& run_id,
                                                                     const std::string& injector) {
  std::vector<std::pair<std::string, std::string>> vars;
  vars.emplace_back(kEnvRunId, run_id);
  vars.emplace_back(kEnvInjector, injector);
  for (auto& var : SettingVariables(options)) vars.push_back(std::move(var));
  return vars;
}

std::vector<std::pair<std::string, std::string>> AppEnvironment(const RunOptions& options, const std::string& run_id,
                                                                const Helpers& helpers, const std::string& ld_preload) {
  std::vector<std::pair<std::string, std::string>> vars = InjectorEnvironment(options, run_id, helpers.injector);
  vars.emplace_back("CUDA_INJECTION64_PATH", helpers.injector);
  std::string preload = helpers.preload;
  if (options.preload) preload += ":" + helpers.injector;
  if (!ld_preload.empty()) preload += ":" + ld_preload;
  vars.emplace_back("LD_PRELOAD", preload);
  return vars;
}

}  // namespace smprof::runner
