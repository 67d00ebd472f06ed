// smprof-run option parsing (see run_options.h).
#include "runner/run_options.h"

#include <ctime>

#include "common/kernel_filter.h"

#ifndef SMPROF_VERSION
#define SMPROF_VERSION "unknown"
#endif

namespace smprof::runner {
namespace {

bool IsDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Parses a warp index of ValidateWarps; false if not a number in 0..31.
bool ParseWarpIndex(const std::string& what, const std::string& list, const std::string& text,
                    uint32_t* value, std::string* error) {
  if (!IsDigits(text)) {
    *error = what + ": \"" + text + "\" in \"" + list +
             "\" is not a warp index: use numbers and ranges without spaces, such as 0,4-7";
    return false;
  }
  if (text.size() > 2 || std::stoul(text) > kMaxWarpIndex) {
    *error = what + ": warp index " + text + " in \"" + list + "\" is out of range: use 0-" +
             std::to_string(kMaxWarpIndex) + " (a block has at most 32 warps)";
    return false;
  }
  *value = static_cast<uint32_t>(std::stoul(text));
  return true;
}

bool ValidateKernels(const std::string& what, const std::string& spec, std::string* error) {
  std::string filter_error;
  if (KernelFilter::Parse(spec, &filter_error)) return true;
  *error = what + ": " + filter_error;
  return false;
}

bool IsPowerOfTwo(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

// One option of the table below.
struct OptionSpec {
  char short_name;  // 0: none
  const char* long_name;
  bool takes_value;
};

constexpr OptionSpec kOptions[] = {
    {'o', "output", true},      {'k', "kernels", true},    {0, "buffer-mb", true},
    {0, "warps", true},         {0, "shm-mb", true},       {0, "preload", false},
    {0, "log-level", true},     {'q', "quiet", false},     {'h', "help", false},
    {0, "version", false},
};

const OptionSpec* FindLong(const std::string& name) {
  for (const OptionSpec& o : kOptions) {
    if (name == o.long_name) return &o;
  }
  return nullptr;
}

const OptionSpec* FindShort(char c) {
  for (const OptionSpec& o : kOptions) {
    if (o.short_name != 0 && o.short_name == c) return &o;
  }
  return nullptr;
}

}  // namespace

bool ParseBoundedUint(const std::string& what, const std::string& text, uint32_t min, uint32_t max,
                      uint32_t* value, std::string* error) {
  const std::string range = "give a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  if (!IsDigits(text)) {
    *error = what + ": \"" + text + "\" is not a positive whole number: " + range;
    return false;
  }
  size_t first = text.find_first_not_of('0');
  const std::string digits = first == std::string::npos ? "0" : text.substr(first);
  if (digits.size() > 10 || std::stoull(digits) < min || std::stoull(digits) > max) {
    *error = what + ": " + text + " is out of range: " + range;
    return false;
  }
  *value = static_cast<uint32_t>(std::stoull(digits));
  return true;
}

bool ValidateWarps(const std::string& what, const std::string& text, std::string* error) {
  if (text.empty()) {
    *error = what + ": empty warp list: give indices such as 0,4-7, or leave it out to record every warp";
    return false;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    if (item.empty()) {
      *error = what + ": empty item in \"" + text + "\": remove the extra comma";
      return false;
    }
    const size_t dash = item.find('-');
    uint32_t lo = 0;
    uint32_t hi = 0;
    if (dash == std::string::npos) {
      if (!ParseWarpIndex(what, text, item, &lo, error)) return false;
    } else {
      if (!ParseWarpIndex(what, text, item.substr(0, dash), &lo, error) ||
          !ParseWarpIndex(what, text, item.substr(dash + 1), &hi, error)) {
        return false;
      }
      if (hi < lo) {
        *error = what + ": range " + item + " in \"" + text + "\" is reversed: write it as " +
                 std::to_string(hi) + "-" + std::to_string(lo);
        return false;
      }
    }
    start = comma + 1;
  }
  return true;
}

bool ValidateLogLevel(const std::string& what, const std::string& text, std::string* error) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "off"}) {
    if (text == level) return true;
  }
  *error = what + ": unknown log level \"" + text + "\": use trace, debug, info, warn, error or off";
  return false;
}

ParseOutcome ParseRunOptions(const std::vector<std::string>& args, const Environment& env,
                             RunOptions* options, std::string* error) {
  *options = RunOptions();
  std::map<std::string, bool> given;  // long option name -> seen
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program ("-" included)

    const OptionSpec* spec = nullptr;
    std::string value;
    bool has_value = false;
    std::string shown;  // the option as the user wrote it, for errors
    if (arg[1] == '-') {
      const size_t eq = arg.find('=');
      const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      shown = "--" + name;
      spec = FindLong(name);
      if (spec != nullptr && eq != std::string::npos) {
        if (!spec->takes_value) {
          *error = shown + " takes no value: write " + shown + " alone";
          return ParseOutcome::kError;
        }
        value = arg.substr(eq + 1);
        has_value = true;
      }
    } else {
      shown = arg.substr(0, 2);
      spec = FindShort(arg[1]);
      if (spec != nullptr && arg.size() > 2) {
        if (!spec->takes_value) {
          *error = "unknown option '" + arg + "': give short options separately (see smprof-run --help)";
          return ParseOutcome::kError;
        }
        value = arg.substr(2);
        has_value = true;
      }
    }
    if (spec == nullptr) {
      *error = "unknown option '" + arg +
               "': see smprof-run --help (put -- before the program if its name starts with '-')";
      return ParseOutcome::kError;
    }
    if (spec->takes_value && !has_value) {
      if (i + 1 >= args.size()) {
        *error = shown + " needs a value: see smprof-run --help";
        return ParseOutcome::kError;
      }
      value = args[++i];
    }

    const std::string name = spec->long_name;
    given[name] = true;
    if (name == "help") return ParseOutcome::kHelp;
    if (name == "version") return ParseOutcome::kVersion;
    if (name == "output") {
      if (value.empty()) {
        *error = shown + " needs a file name";
        return ParseOutcome::kError;
      }
      options->output = value;
    } else if (name == "kernels") {
      if (!ValidateKernels(shown, value, error)) return ParseOutcome::kError;
      options->kernels = value;
      options->app_env[kEnvKernels] = value;
    } else if (name == "buffer-mb") {
      if (!ParseBoundedUint(shown, value, kMinBufferMb, kMaxBufferMb, &options->buffer_mb, error)) {
        return ParseOutcome::kError;
      }
      options->app_env[kEnvBufferMb] = std::to_string(options->buffer_mb);
    } else if (name == "warps") {
      if (!ValidateWarps(shown, value, error)) return ParseOutcome::kError;
      options->warps = value;
      options->app_env[kEnvWarps] = value;
    } else if (name == "shm-mb") {
      if (!ParseBoundedUint(shown, value, kMinShmMb, kMaxShmMb, &options->shm_mb, error)) {
        return ParseOutcome::kError;
      }
      options->app_env[kEnvShmMb] = std::to_string(options->shm_mb);
    } else if (name == "log-level") {
      if (!ValidateLogLevel(shown, value, error)) return ParseOutcome::kError;
      options->log_level = value;
      options->app_env[kEnvLogLevel] = value;
    } else if (name == "preload") {
      options->preload = true;
    } else if (name == "quiet") {
      options->quiet = true;
    }
  }
  options->program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  // Environment values that no option overrides; empty counts as unset.
  auto from_env = [&](const char* var, const char* option) -> const std::string* {
    if (given[option]) return nullptr;
    auto it = env.find(var);
    if (it == env.end() || it->second.empty()) return nullptr;
    return &it->second;
  };
  if (const std::string* v = from_env(kEnvKernels, "kernels")) {
    if (!ValidateKernels(kEnvKernels, *v, error)) return ParseOutcome::kError;
    options->kernels = *v;
    options->app_env[kEnvKernels] = *v;
  }
  if (const std::string* v = from_env(kEnvBufferMb, "buffer-mb")) {
    if (!ParseBoundedUint(kEnvBufferMb, *v, kMinBufferMb, kMaxBufferMb, &options->buffer_mb, error)) {
      return ParseOutcome::kError;
    }
    options->app_env[kEnvBufferMb] = *v;
  }
  if (const std::string* v = from_env(kEnvWarps, "warps")) {
    if (!ValidateWarps(kEnvWarps, *v, error)) return ParseOutcome::kError;
    options->warps = *v;
    options->app_env[kEnvWarps] = *v;
  }
  if (const std::string* v = from_env(kEnvShmMb, "shm-mb")) {
    if (!ParseBoundedUint(kEnvShmMb, *v, kMinShmMb, kMaxShmMb, &options->shm_mb, error)) {
      return ParseOutcome::kError;
    }
    options->app_env[kEnvShmMb] = *v;
  }
  if (const std::string* v = from_env(kEnvLogLevel, "log-level")) {
    if (!ValidateLogLevel(kEnvLogLevel, *v, error)) return ParseOutcome::kError;
    options->log_level = *v;
    options->app_env[kEnvLogLevel] = *v;
  }
  if (const std::string* v = from_env(kEnvChunkBytes, "")) {
    uint32_t chunk = 0;
    if (!ParseBoundedUint(kEnvChunkBytes, *v, kMinChunkBytes, kMaxChunkBytes, &chunk, error)) {
      return ParseOutcome::kError;
    }
    if (!IsPowerOfTwo(chunk)) {
      *error = std::string(kEnvChunkBytes) + ": " + *v +
               " is not a power of two: use 256, 512, 1024, ... 65536";
      return ParseOutcome::kError;
    }
    options->app_env[kEnvChunkBytes] = *v;
  }
  if (const std::string* v = from_env(kEnvHighWater, "")) {
    uint32_t percent = 0;
    if (!ParseBoundedUint(kEnvHighWater, *v, kMinHighWater, kMaxHighWater, &percent, error)) {
      return ParseOutcome::kError;
    }
    options->app_env[kEnvHighWater] = *v;
  }

  if (options->program.empty()) {
    *error = "no program given: write smprof-run [options] [--] program [args...]";
    return ParseOutcome::kUsage;
  }
  return ParseOutcome::kRun;
}

std::string UsageText() {
  return "usage: smprof-run [options] [--] program [args...]\n"
         "Try 'smprof-run --help' for the options.\n";
}

std::string VersionText() { return std::string("smprof-run ") + SMPROF_VERSION + "\n"; }

std::string HelpText() {
  return R"(usage: smprof-run [options] [--] program [args...]

Runs the program with smprof injected and writes one Perfetto-loadable JSON
trace of the regions its CUDA kernels mark (kernels opt in by including
<smprof/smprof.cuh>). The first argument that is not an option, or the one
after --, is the program; everything after it is passed to the program.
Exits with the program's exit status (128+N if signal N killed it), or 2 for
a usage error, 1 if the collector cannot start. Processes the program leaves
running are waited for (up to 10 s) so that their events reach the trace.

Options (an option overrides the environment variable named with it):
  -o, --output PATH    trace file (default: ./smprof-<program>-<YYYYmmdd-HHMMSS>.json)
  -k, --kernels LIST   kernels to profile: comma-separated globs (* ? [a-z] [!x])
                       over demangled names, '!' excludes, '\' escapes; a pattern
                       matches the full signature, "ns::name<T>" or the bare
                       name, e.g. 'gemm*,!*_debug'. Default: all (SMPROF_KERNELS)
      --buffer-mb N    device event buffer per GPU context in MiB, 1-4095
                       (default 64) (SMPROF_BUFFER_MB)
      --warps LIST     warp indices within a block that record, e.g. 0,4-7;
                       0-31 (default: all warps) (SMPROF_WARPS)
      --shm-mb N       shared-memory transport ring per process in MiB, 1-4096
                       (default 32) (SMPROF_SHM_MB)
      --preload        inject via LD_PRELOAD instead of CUDA_INJECTION64_PATH
      --log-level L    trace|debug|info|warn|error|off (default warn) (SMPROF_LOG_LEVEL)
  -q, --quiet          print no summary
  -h, --help           print this help
      --version        print the version

Environment variables smprof reads:
  SMPROF_KERNELS       as --kernels
  SMPROF_BUFFER_MB     as --buffer-mb
  SMPROF_WARPS         as --warps
  SMPROF_SHM_MB        as --shm-mb
  SMPROF_LOG_LEVEL     as --log-level
  SMPROF_CHUNK_BYTES   device chunk size in bytes, a power of two 256-65536
                       (default 1024)
  SMPROF_HIGH_WATER    percent of the device buffer, 10-95 (default 75), at which
                       a drain is forced
  SMPROF_RUN_ID        set by smprof-run for the program (internal; do not set)
  SMPROF_INJECTOR      path of libsmprof_inject.so (default: ../lib next to smprof-run)
  SMPROF_COLLECTOR     path of smprof-collector (default: next to smprof-run)

Open the trace at https://ui.perfetto.dev.
)";
}

std::string DefaultOutputPath(const std::string& program, int64_t now_unix_seconds) {
  std::string base = program.substr(program.find_last_of('/') == std::string::npos
                                        ? 0
                                        : program.find_last_of('/') + 1);
  if (base.empty()) base = "app";
  const time_t t = static_cast<time_t>(now_unix_seconds);
  struct tm local {};
  localtime_r(&t, &local);
  char stamp[32];
  strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  return "smprof-" + base + "-" + stamp + ".json";
}

std::vector<std::pair<std::string, std::string>> AppEnvironment(const RunOptions& options,
                                                                const std::string& run_id,
                                                                const std::string& injector_path,
                                                                const std::string& ld_preload) {
  std::vector<std::pair<std::string, std::string>> vars;
  vars.emplace_back(kEnvRunId, run_id);
  if (options.preload) {
    vars.emplace_back("LD_PRELOAD", ld_preload.empty() ? injector_path : injector_path + ":" + ld_preload);
  } else {
    vars.emplace_back("CUDA_INJECTION64_PATH", injector_path);
  }
  for (const auto& [name, value] : options.app_env) vars.emplace_back(name, value);
  return vars;
}

}  // namespace smprof::runner
