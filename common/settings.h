// Every SMPROF_* setting, defined once: its variable, its smprof-run option,
// its default, its range, its parser and its help text.
//
// smprof-run reads a setting from its option or, failing that, from the
// environment, and stops on a bad value; the injector reads the same variable
// from the application's environment with the same parser, and on a bad value
// logs the same message and keeps the default (except SMPROF_KERNELS and
// SMPROF_LAUNCHES: see LoadSettings). So a value means the same thing wherever it is read, and the
// help text, the run metadata and the application's environment all come from
// this table.
//
// Used by the injector: no exceptions thrown on purpose, no global state
// beyond the constant table.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/kernel_filter.h"
#include "common/launch_filter.h"

namespace smprof {

enum class Setting {
  kKernels,
  kLaunches,
  kCaptureRange,
  kBufferMb,
  kChunkBytes,
  kWarps,
  kHighWater,
  kShmMb,
  kLogLevel,
  kLayout,
  kTraceCycles,
  kSinkThreads,
  kBacklog,
};

struct SettingSpec {
  Setting id;
  const char* variable;      // "SMPROF_BUFFER_MB"
  const char* option;        // smprof-run's long option without "--", or nullptr
  char short_option;         // 0: none
  const char* value_name;    // in the help: "N", "LIST", "LEVEL"
  const char* default_text;  // in the help and the run metadata
  const char* help;          // one sentence or a few lines, no default, no variable name
};

// The table, in help order.
const std::vector<SettingSpec>& AllSettings();
const SettingSpec& SpecOf(Setting setting);
// nullptr when no setting has this option.
const SettingSpec* FindSettingByOption(std::string_view long_option);
const SettingSpec* FindSettingByShortOption(char short_option);

// SMPROF_CAPTURE_RANGE: when the application's launches are profiled.
enum class CaptureRange {
  kNone,         // "none": from the start
  kProfilerApi,  // "cudaProfilerApi": only between cudaProfilerStart() and cudaProfilerStop()
};

// SMPROF_BACKLOG: what a harvest does when every read-back buffer of its
// context is still queued for the harvest threads (the host behind the GPU).
enum class Backlog {
  kWait,  // "wait": hold the application until a buffer is free; every event is kept
  kDrop,  // "drop": skip the read-back; the events stay in the device buffer, and what
          // does not fit there is dropped on the device, counted
};
const char* BacklogText(Backlog backlog);

// SMPROF_BUFFER_MB=auto (the default): the device buffer is sized from the
// GPU's free memory when a context starts profiling (AutoBufferBytes).
inline constexpr uint32_t kAutoBufferMb = 0;
inline constexpr uint64_t kAutoBufferMinBytes = uint64_t{16} << 20;
inline constexpr uint64_t kAutoBufferMaxBytes = uint64_t{2048} << 20;
inline constexpr uint64_t kAutoBufferShare = 32;  // of the free memory
// The automatic device buffer for `free_bytes` of free device memory: 1/32
// of it rounded down to a power of two, within [16 MiB, 2048 MiB]. The
// staging copy takes as much again, so profiling takes at most 1/16 of what
// was free (or 32 MiB on a nearly full GPU).
uint64_t AutoBufferBytes(uint64_t free_bytes);

// Values of every setting; the defaults are the documented ones.
struct Settings {
  std::string kernels_spec;  // as written; empty: every kernel
  KernelFilter kernels;
  std::string launches_spec;  // as written; empty: every launch of every selected kernel
  LaunchFilter launches;      // which launches of the selected kernels (launch_filter.h)
  CaptureRange capture_range = CaptureRange::kNone;
  uint32_t buffer_mb = kAutoBufferMb;  // MiB per GPU context; kAutoBufferMb: sized from the device (AutoBufferBytes)
  uint32_t chunk_bytes = 65536;      // the largest device chunk size
  std::string warps_spec;            // as written; empty: every warp
  uint32_t warp_mask = 0xffffffffu;  // bit w: warp w of each block records
  uint32_t high_water_percent = 75;
  uint32_t shm_mb = 32;
  std::string log_level = "warn";
  std::string layout = "auto";        // trace layout: "launch", "hardware" or "auto"
  std::string trace_cycles = "none";  // per-slice SM cycles in a protobuf trace: "none", "counter" or "args"
  std::string sink_threads = "auto";  // the collector's builder, writer and statistics on threads: "auto", "on", "off"
  Backlog backlog = Backlog::kWait;
};

// Parses `text` as the value of `setting` into *settings. On a bad value
// returns false and sets *error to "<source>: <what is wrong and the fix>",
// where `source` names where the text came from ("--buffer-mb",
// "SMPROF_BUFFER_MB"); *settings is then unchanged.
bool ParseSetting(Setting setting, std::string_view text, std::string_view source, Settings* settings,
                  std::string* error);

// The value of `setting` as text that ParseSetting reads back to the same
// value ("" for a list setting that selects everything).
std::string SettingText(Setting setting, const Settings& settings);

using GetEnv = std::function<const char*(const char*)>;

// Reads every setting from the environment (an empty variable counts as
// unset). A bad value keeps the default and adds ParseSetting's message to
// *errors, except a bad SMPROF_KERNELS or SMPROF_LAUNCHES (what to profile),
// which sets *selection_valid false: profiling the wrong kernels or launches
// would be worse than profiling none.
Settings LoadSettings(const GetEnv& getenv_fn, std::vector<std::string>* errors, bool* selection_valid);

// --- parsers, shared by everything that reads numbers or lists -----------------

// True when `text` is one or more of the characters 0-9 and nothing else.
bool IsDecimalDigits(std::string_view text);

// A decimal whole number in [min, max], digits only (leading zeros allowed).
// On failure *error says "\"x\" is not a positive whole number: give a whole
// number from min to max" or "x is out of range: give ...".
bool ParseWholeNumber(std::string_view text, uint64_t min, uint64_t max, uint64_t* value, std::string* error);

inline constexpr uint32_t kMaxWarpIndex = 31;  // 1024 threads per block

// "0,4-7,31" -> mask of warp indices 0..31. On failure *error names the bad
// item and the fix (out of range, reversed range, empty item, not a number).
bool ParseWarpList(std::string_view text, uint32_t* mask, std::string* error);

// trace, debug, info, warn, error, off.
bool IsLogLevel(std::string_view text);
inline constexpr const char* kLogLevelsText = "trace, debug, info, warn, error or off";

// "none" or "cudaProfilerApi" (exactly; nsys's spelling).
const char* CaptureRangeText(CaptureRange range);

// --- variables that are not settings: set by smprof-run or pointing at its parts

inline constexpr const char* kEnvRunId = "SMPROF_RUN_ID";         // set by smprof-run for the program
inline constexpr const char* kEnvInjector = "SMPROF_INJECTOR";    // path of libsmprof_inject.so
inline constexpr const char* kEnvPreload = "SMPROF_PRELOAD";      // path of libsmprof_preload.so
inline constexpr const char* kEnvCollector = "SMPROF_COLLECTOR";  // path of smprof-collector

}  // namespace smprof
