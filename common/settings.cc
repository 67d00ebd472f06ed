// The settings table and its parsers (see settings.h).
#include "common/settings.h"

#include <initializer_list>
#include <optional>

namespace smprof {
namespace {

constexpr uint32_t kMinBufferMb = 1, kMaxBufferMb = 4096;  // chunk offsets in a segment are 32-bit
constexpr uint32_t kMinChunkBytes = 256, kMaxChunkBytes = 65536;
constexpr uint32_t kMinHighWater = 10, kMaxHighWater = 95;
constexpr uint32_t kMinShmMb = 1, kMaxShmMb = 4096;

const std::vector<SettingSpec> kSettings = {
    {Setting::kKernels, "SMPROF_KERNELS", "kernels", 'k', "LIST", "all opted-in kernels",
     "kernels to profile: comma-separated globs (* ? [a-z] [!x]) over\n"
     "demangled names, '!' excludes, '\\' escapes; a pattern matches the\n"
     "full signature, \"ns::name<T>\" or the bare name, e.g. 'gemm*,!*_debug'"},
    {Setting::kLaunches, "SMPROF_LAUNCHES", "launches", 0, "SPEC", "every launch",
     "which launches of the selected kernels to profile: comma-separated\n"
     "PATTERN:RANGES items, PATTERN a glob as in --kernels (no '!'), RANGES\n"
     "N, N-M or N- joined by '+', counting from 0 the launches of all the\n"
     "kernels PATTERN matches in the order the program issues them; a\n"
     "kernel no item matches is not limited; a CUDA graph replay counts as\n"
     "one launch of each kernel among its nodes. E.g. 'gemm*:10-12' (the\n"
     "11th to 13th gemm launches), 'attn*:0,gemm*:100-', 'gemm*:0-2+10-12'"},
    {Setting::kCaptureRange, "SMPROF_CAPTURE_RANGE", "capture-range", 0, "MODE", "none",
     "when launches are profiled: none (from the start) or cudaProfilerApi\n"
     "(only between the program's cudaProfilerStart() and\n"
     "cudaProfilerStop() calls, as nsys --capture-range=cudaProfilerApi)"},
    {Setting::kBufferMb, "SMPROF_BUFFER_MB", "buffer-mb", 0, "N", "auto",
     "device event buffer per GPU context in MiB, 1-4096, or auto: 1/32 of\n"
     "the GPU's free memory when profiling starts, rounded down to a power\n"
     "of two, 16-2048 MiB (a staging copy of it takes as much again)"},
    {Setting::kWarps, "SMPROF_WARPS", "warps", 0, "LIST", "all warps",
     "warp indices within a block that record, e.g. 0,4-7; each 0-31"},
    {Setting::kShmMb, "SMPROF_SHM_MB", "shm-mb", 0, "N", "32",
     "shared-memory transport ring per process in MiB, 1-4096"},
    {Setting::kLogLevel, "SMPROF_LOG_LEVEL", "log-level", 0, "LEVEL", "warn", "trace, debug, info, warn, error or off"},
    {Setting::kLayout, "SMPROF_LAYOUT", "layout", 0, "WHICH", "auto",
     "protobuf trace layout: launch (a track tree per launch: SM > block >\n"
     "warp), hardware (GPU > SM > warp slot, each launch's warps as slices\n"
     "on the slots: tracks bounded by the hardware) or auto (launch, then\n"
     "hardware once a run has many launches; the trace says when)"},
    {Setting::kTraceCycles, "SMPROF_TRACE_CYCLES", "trace-cycles", 0, "HOW", "none",
     "each range's exact SM cycles in a protobuf trace: none (the statistics\n"
     "have them; ~12 bytes an event), counter (a \"cycles\" counter value per\n"
     "range; ~1.7 bytes an event more) or args (a slice argument; ~3.4 more)"},
    {Setting::kSinkThreads, "SMPROF_SINK_THREADS", nullptr, 0, "WHEN", "auto",
     "the collector's trace builder, trace writer and statistics each on a\n"
     "thread of its own, beside the thread that decodes read-backs: auto (on\n"
     "machines of 4 or more cores), on or off; the trace is the same byte for\n"
     "byte"},
    {Setting::kBacklog, "SMPROF_BACKLOG", "backlog", 0, "POLICY", "wait",
     "when the host falls behind the GPU (every read-back buffer queued):\n"
     "wait (hold the application's synchronisation or launch until one is\n"
     "free: every event kept) or drop (never hold it longer than the copy:\n"
     "the events stay in the device buffer, what no longer fits is dropped\n"
     "there and counted)"},
    {Setting::kChunkBytes, "SMPROF_CHUNK_BYTES", nullptr, 0, "N", "65536",
     "largest device chunk size in bytes, a power of two 256-65536. Chunks\n"
     "start at 1024 (or this, if smaller), smaller for launches that would\n"
     "not fit; they double for warps of many events (each chunk claim stalls\n"
     "its warp) while a doubling saves a quarter of the claims and fits, and\n"
     "halve for warps of few events while no kernel would claim more"},
    {Setting::kHighWater, "SMPROF_HIGH_WATER", nullptr, 0, "N", "75",
     "percent of the device buffer, 10-95, at which a drain is forced"},
};

// Parses one warp index of `list`; false with *error if not a number in 0..31.
bool ParseWarpIndex(std::string_view list, std::string_view text, uint32_t* value, std::string* error) {
  if (!IsDecimalDigits(text)) {
    *error = "\"" + std::string(text) + "\" in \"" + std::string(list) +
             "\" is not a warp index: use numbers and ranges without spaces, such as 0,4-7";
    return false;
  }
  uint64_t v = 0;
  std::string ignored;
  if (!ParseWholeNumber(text, 0, kMaxWarpIndex, &v, &ignored)) {
    *error = "warp index " + std::string(text) + " in \"" + std::string(list) + "\" is out of range: use 0-" +
             std::to_string(kMaxWarpIndex) + " (a block has at most 32 warps)";
    return false;
  }
  *value = static_cast<uint32_t>(v);
  return true;
}

// One of `words`; false with *error naming them otherwise.
bool ParseWord(std::string_view text, const char* what, std::initializer_list<const char*> words, std::string* out,
               std::string* error) {
  for (const char* w : words) {
    if (text == w) {
      *out = std::string(text);
      return true;
    }
  }
  std::string choices;
  size_t i = 0;
  for (const char* w : words) {
    choices += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ");
    choices += w;
    ++i;
  }
  *error = std::string("unknown ") + what + " \"" + std::string(text) + "\": use " + choices;
  return false;
}

bool ParseBounded(std::string_view text, uint32_t min, uint32_t max, uint32_t* out, std::string* error) {
  uint64_t v = 0;
  if (!ParseWholeNumber(text, min, max, &v, error)) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

const std::vector<SettingSpec>& AllSettings() { return kSettings; }

const SettingSpec& SpecOf(Setting setting) {
  for (const SettingSpec& s : kSettings) {
    if (s.id == setting) return s;
  }
  return kSettings.front();  // unreachable: every Setting is in the table (settings_test checks)
}

const SettingSpec* FindSettingByOption(std::string_view long_option) {
  for (const SettingSpec& s : kSettings) {
    if (s.option != nullptr && long_option == s.option) return &s;
  }
  return nullptr;
}

const SettingSpec* FindSettingByShortOption(char short_option) {
  for (const SettingSpec& s : kSettings) {
    if (s.short_option != 0 && s.short_option == short_option) return &s;
  }
  return nullptr;
}

bool IsDecimalDigits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

bool ParseWholeNumber(std::string_view text, uint64_t min, uint64_t max, uint64_t* value, std::string* error) {
  const std::string range = "give a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  if (!IsDecimalDigits(text)) {
    *error = "\"" + std::string(text) + "\" is not a positive whole number: " + range;
    return false;
  }
  const size_t first = text.find_first_not_of('0');
  const std::string_view digits = first == std::string_view::npos ? std::string_view("0") : text.substr(first);
  uint64_t v = 0;
  bool overflow = false;
  for (char c : digits) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) {
      overflow = true;
      break;
    }
    v = v * 10 + d;
  }
  if (overflow || v < min || v > max) {
    *error = std::string(text) + " is out of range: " + range;
    return false;
  }
  *value = v;
  return true;
}

bool ParseWarpList(std::string_view text, uint32_t* mask, std::string* error) {
  if (text.empty()) {
    *error = "empty warp list: give indices such as 0,4-7, or leave it out to record every warp";
    return false;
  }
  uint32_t result = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = text.substr(start, comma - start);
    if (item.empty()) {
      *error = "empty item in \"" + std::string(text) + "\": remove the extra comma";
      return false;
    }
    const size_t dash = item.find('-');
    uint32_t lo = 0;
    uint32_t hi = 0;
    if (dash == std::string_view::npos) {
      if (!ParseWarpIndex(text, item, &lo, error)) return false;
      hi = lo;
    } else {
      if (!ParseWarpIndex(text, item.substr(0, dash), &lo, error) ||
          !ParseWarpIndex(text, item.substr(dash + 1), &hi, error)) {
        return false;
      }
      if (hi < lo) {
        *error = "range " + std::string(item) + " in \"" + std::string(text) + "\" is reversed: write it as " +
                 std::to_string(hi) + "-" + std::to_string(lo);
        return false;
      }
    }
    for (uint32_t w = lo; w <= hi; ++w) result |= 1u << w;
    start = comma + 1;
  }
  *mask = result;
  return true;
}

const char* BacklogText(Backlog backlog) { return backlog == Backlog::kDrop ? "drop" : "wait"; }

const char* CaptureRangeText(CaptureRange range) {
  return range == CaptureRange::kProfilerApi ? "cudaProfilerApi" : "none";
}

bool IsLogLevel(std::string_view text) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "off"}) {
    if (text == level) return true;
  }
  return false;
}

bool ParseSetting(Setting setting, std::string_view text, std::string_view source, Settings* settings,
                  std::string* error) {
  std::string why;
  Settings s = *settings;
  bool ok = false;
  switch (setting) {
    case Setting::kKernels: {
      std::optional<KernelFilter> filter = KernelFilter::Parse(text, &why);
      if ((ok = filter.has_value())) {
        s.kernels = std::move(*filter);
        s.kernels_spec = std::string(text);
      }
      break;
    }
    case Setting::kLaunches: {
      std::optional<LaunchFilter> filter = LaunchFilter::Parse(text, &why);
      if ((ok = filter.has_value())) {
        s.launches = std::move(*filter);
        s.launches_spec = std::string(text);
      }
      break;
    }
    case Setting::kCaptureRange:
      if (text == CaptureRangeText(CaptureRange::kNone)) {
        s.capture_range = CaptureRange::kNone;
        ok = true;
      } else if (text == CaptureRangeText(CaptureRange::kProfilerApi)) {
        s.capture_range = CaptureRange::kProfilerApi;
        ok = true;
      } else {
        why = "unknown capture range \"" + std::string(text) + "\": use none or cudaProfilerApi";
      }
      break;
    case Setting::kBufferMb:
      if (text == "auto") {
        s.buffer_mb = kAutoBufferMb;
        ok = true;
      } else if (IsDecimalDigits(text)) {
        ok = ParseBounded(text, kMinBufferMb, kMaxBufferMb, &s.buffer_mb, &why);
      } else {
        why = "\"" + std::string(text) + "\" is not a size in MiB: give a whole number from " +
              std::to_string(kMinBufferMb) + " to " + std::to_string(kMaxBufferMb) + ", or auto";
      }
      break;
    case Setting::kChunkBytes:
      ok = ParseBounded(text, kMinChunkBytes, kMaxChunkBytes, &s.chunk_bytes, &why);
      if (ok && (s.chunk_bytes & (s.chunk_bytes - 1)) != 0) {
        ok = false;
        why = std::string(text) + " is not a power of two: use 256, 512, 1024, ... 65536";
      }
      break;
    case Setting::kWarps:
      if ((ok = ParseWarpList(text, &s.warp_mask, &why))) s.warps_spec = std::string(text);
      break;
    case Setting::kHighWater:
      ok = ParseBounded(text, kMinHighWater, kMaxHighWater, &s.high_water_percent, &why);
      break;
    case Setting::kShmMb:
      ok = ParseBounded(text, kMinShmMb, kMaxShmMb, &s.shm_mb, &why);
      break;
    case Setting::kLayout:
      ok = ParseWord(text, "layout", {"launch", "hardware", "auto"}, &s.layout, &why);
      break;
    case Setting::kTraceCycles:
      ok = ParseWord(text, "trace cycles", {"none", "counter", "args"}, &s.trace_cycles, &why);
      break;
    case Setting::kSinkThreads:
      ok = ParseWord(text, "sink threads", {"auto", "on", "off"}, &s.sink_threads, &why);
      break;
    case Setting::kBacklog: {
      std::string word;
      if ((ok = ParseWord(text, "backlog", {"wait", "drop"}, &word, &why))) {
        s.backlog = word == "drop" ? Backlog::kDrop : Backlog::kWait;
      }
      break;
    }
    case Setting::kLogLevel:
      if ((ok = IsLogLevel(text))) {
        s.log_level = std::string(text);
      } else {
        why = "unknown log level \"" + std::string(text) + "\": use " + kLogLevelsText;
      }
      break;
  }
  if (!ok) {
    *error = std::string(source) + ": " + why;
    return false;
  }
  *settings = std::move(s);
  return true;
}

std::string SettingText(Setting setting, const Settings& s) {
  switch (setting) {
    case Setting::kKernels:
      return s.kernels_spec;
    case Setting::kLaunches:
      return s.launches_spec;
    case Setting::kCaptureRange:
      return CaptureRangeText(s.capture_range);
    case Setting::kBufferMb:
      return s.buffer_mb == kAutoBufferMb ? "auto" : std::to_string(s.buffer_mb);
    case Setting::kChunkBytes:
      return std::to_string(s.chunk_bytes);
    case Setting::kWarps:
      return s.warps_spec;
    case Setting::kHighWater:
      return std::to_string(s.high_water_percent);
    case Setting::kShmMb:
      return std::to_string(s.shm_mb);
    case Setting::kLogLevel:
      return s.log_level;
    case Setting::kLayout:
      return s.layout;
    case Setting::kTraceCycles:
      return s.trace_cycles;
    case Setting::kSinkThreads:
      return s.sink_threads;
    case Setting::kBacklog:
      return BacklogText(s.backlog);
  }
  return "";
}

uint64_t AutoBufferBytes(uint64_t free_bytes) {
  const uint64_t share = free_bytes / kAutoBufferShare;
  uint64_t bytes = kAutoBufferMinBytes;
  while (bytes * 2 <= share && bytes * 2 <= kAutoBufferMaxBytes) bytes *= 2;
  return bytes;
}

Settings LoadSettings(const GetEnv& getenv_fn, std::vector<std::string>* errors, bool* selection_valid) {
  Settings s;
  *selection_valid = true;
  for (const SettingSpec& spec : kSettings) {
    const char* text = getenv_fn(spec.variable);
    if (text == nullptr || *text == '\0') continue;
    std::string error;
    if (ParseSetting(spec.id, text, spec.variable, &s, &error)) continue;
    if (spec.id == Setting::kKernels || spec.id == Setting::kLaunches) {
      *selection_valid = false;
      errors->push_back(error + "; profiling is off for this run");
    } else {
      const std::string kept = SettingText(spec.id, s);
      errors->push_back(error + "; using " + (kept.empty() ? spec.default_text : kept));
    }
  }
  return s;
}

}  // namespace smprof
