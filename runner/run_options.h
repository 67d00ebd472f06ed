// smprof-run's command line and environment, as a library so that tests can
// parse without running anything.
//
// Precedence: an option beats the matching SMPROF_* environment variable,
// which beats the built-in default. Every value is validated here, whichever
// source it came from, so that a bad value stops smprof-run before anything
// runs instead of being ignored later inside the application.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace smprof::runner {

using Environment = std::map<std::string, std::string>;

// Environment variables smprof reads (documented in HelpText()).
inline constexpr const char* kEnvKernels = "SMPROF_KERNELS";
inline constexpr const char* kEnvBufferMb = "SMPROF_BUFFER_MB";
inline constexpr const char* kEnvWarps = "SMPROF_WARPS";
inline constexpr const char* kEnvShmMb = "SMPROF_SHM_MB";
inline constexpr const char* kEnvLogLevel = "SMPROF_LOG_LEVEL";
inline constexpr const char* kEnvChunkBytes = "SMPROF_CHUNK_BYTES";
inline constexpr const char* kEnvHighWater = "SMPROF_HIGH_WATER";
inline constexpr const char* kEnvRunId = "SMPROF_RUN_ID";
inline constexpr const char* kEnvInjector = "SMPROF_INJECTOR";
inline constexpr const char* kEnvCollector = "SMPROF_COLLECTOR";

// Ranges (inclusive).
inline constexpr uint32_t kMinBufferMb = 1, kMaxBufferMb = 4095, kDefaultBufferMb = 64;
inline constexpr uint32_t kMinShmMb = 1, kMaxShmMb = 4096, kDefaultShmMb = 32;
inline constexpr uint32_t kMinChunkBytes = 256, kMaxChunkBytes = 65536, kDefaultChunkBytes = 1024;
inline constexpr uint32_t kMinHighWater = 10, kMaxHighWater = 95, kDefaultHighWater = 75;
inline constexpr uint32_t kMaxWarpIndex = 31;  // 1024 threads per block

struct RunOptions {
  std::string output;      // empty: DefaultOutputPath()
  std::string kernels;     // empty: every kernel
  uint32_t buffer_mb = kDefaultBufferMb;
  std::string warps;       // empty: every warp (the option itself rejects "")
  uint32_t shm_mb = kDefaultShmMb;
  std::string log_level = "warn";
  bool preload = false;
  bool quiet = false;
  // Values passed to the application as SMPROF_* variables: every value given
  // by an option or found in the environment (validated), by variable name.
  std::map<std::string, std::string> app_env;
  std::vector<std::string> program;  // program and its arguments
};

enum class ParseOutcome {
  kRun,      // options and program are valid
  kHelp,     // print HelpText() to stdout, exit 0
  kVersion,  // print VersionText() to stdout, exit 0
  kError,    // print "smprof-run: <error>" (and for kUsage the usage), exit 2
  kUsage,    // no program given
};

// Parses argv[1..] (`args` excludes argv[0]) against `env`. On kError/kUsage
// `*error` is a one-line message naming the fix.
ParseOutcome ParseRunOptions(const std::vector<std::string>& args, const Environment& env,
                             RunOptions* options, std::string* error);

std::string UsageText();
std::string HelpText();
std::string VersionText();

// "smprof-<program basename>-<YYYYmmdd-HHMMSS>.json" for the local time `now`.
std::string DefaultOutputPath(const std::string& program, int64_t now_unix_seconds);

// Validators shared by option and environment parsing; `what` names the
// source ("--buffer-mb" or "SMPROF_BUFFER_MB") in the error.
bool ParseBoundedUint(const std::string& what, const std::string& text, uint32_t min, uint32_t max,
                      uint32_t* value, std::string* error);
bool ValidateWarps(const std::string& what, const std::string& text, std::string* error);
bool ValidateLogLevel(const std::string& what, const std::string& text, std::string* error);

// The variables to set in the application's environment. `ld_preload` is the
// application's current LD_PRELOAD (empty if unset). With --preload the
// injector goes first in LD_PRELOAD; otherwise CUDA_INJECTION64_PATH names it.
std::vector<std::pair<std::string, std::string>> AppEnvironment(const RunOptions& options,
                                                                const std::string& run_id,
                                                                const std::string& injector_path,
                                                                const std::string& ld_preload);

}  // namespace smprof::runner
