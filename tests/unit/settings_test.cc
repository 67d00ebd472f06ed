// The one settings table (common/settings.h): every setting is complete, its
// parser accepts exactly its documented range, and the text a setting is
// passed on as parses back to the same value.
#include "common/settings.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace smprof {
namespace {

TEST(SettingsTest, TableIsCompleteAndUnique) {
  std::set<std::string> variables, options;
  std::set<char> shorts;
  std::set<Setting> ids;
  for (const SettingSpec& s : AllSettings()) {
    EXPECT_EQ(std::string(s.variable).rfind("SMPROF_", 0), 0u) << s.variable;
    EXPECT_TRUE(variables.insert(s.variable).second) << s.variable;
    EXPECT_TRUE(ids.insert(s.id).second) << s.variable;
    if (s.option != nullptr) {
      EXPECT_TRUE(options.insert(s.option).second) << s.option;
    }
    if (s.short_option != 0) {
      EXPECT_TRUE(shorts.insert(s.short_option).second) << s.short_option;
    }
    EXPECT_NE(std::string(s.help), "") << s.variable;
    EXPECT_NE(std::string(s.default_text), "") << s.variable;
    EXPECT_NE(std::string(s.value_name), "") << s.variable;
    EXPECT_EQ(&SpecOf(s.id), &s);
  }
  EXPECT_EQ(ids.size(), 13u) << "a Setting is missing from the table";
  EXPECT_EQ(FindSettingByOption("buffer-mb")->id, Setting::kBufferMb);
  EXPECT_EQ(FindSettingByShortOption('k')->id, Setting::kKernels);
  EXPECT_EQ(FindSettingByOption("launches")->id, Setting::kLaunches);
  EXPECT_EQ(FindSettingByOption("capture-range")->id, Setting::kCaptureRange);
  EXPECT_EQ(FindSettingByOption("nope"), nullptr);
  EXPECT_EQ(FindSettingByShortOption('z'), nullptr);
}

TEST(SettingsTest, DefaultsAreTheDocumentedOnes) {
  const Settings s;
  for (const SettingSpec& spec : AllSettings()) {
    const std::string text = SettingText(spec.id, s);
    if (!text.empty()) {
      EXPECT_EQ(text, spec.default_text) << spec.variable;
    }
  }
  EXPECT_TRUE(s.kernels.selects_all());
  EXPECT_TRUE(s.launches.limits_nothing());
  EXPECT_EQ(s.capture_range, CaptureRange::kNone);
  EXPECT_EQ(s.warp_mask, 0xffffffffu);
}

TEST(SettingsTest, RangesAndRoundTrip) {
  struct Case {
    Setting setting;
    const char* good_low;
    const char* good_high;
    const char* bad_low;
    const char* bad_high;
  };
  for (const Case& c :
       {Case{Setting::kBufferMb, "1", "4096", "0", "4097"}, Case{Setting::kShmMb, "1", "4096", "0", "4097"},
        Case{Setting::kChunkBytes, "256", "65536", "128", "131072"},
        Case{Setting::kHighWater, "10", "95", "9", "96"}}) {
    const char* var = SpecOf(c.setting).variable;
    for (const char* good : {c.good_low, c.good_high}) {
      Settings s;
      std::string error;
      ASSERT_TRUE(ParseSetting(c.setting, good, var, &s, &error)) << var << "=" << good << ": " << error;
      EXPECT_EQ(SettingText(c.setting, s), good);
    }
    for (const char* bad : {c.bad_low, c.bad_high}) {
      Settings s;
      std::string error;
      EXPECT_FALSE(ParseSetting(c.setting, bad, var, &s, &error)) << var << "=" << bad;
      EXPECT_EQ(error.rfind(std::string(var) + ": ", 0), 0u) << error;
      EXPECT_NE(error.find("out of range"), std::string::npos) << error;
    }
  }
}

TEST(SettingsTest, AutomaticBufferIsAPowerOfTwoShareOfTheFreeMemory) {
  constexpr uint64_t kMiB = uint64_t{1} << 20, kGiB = uint64_t{1} << 30;
  EXPECT_EQ(AutoBufferBytes(140 * kGiB), 2048 * kMiB);  // an idle H200: capped
  EXPECT_EQ(AutoBufferBytes(64 * kGiB), 2048 * kMiB);   // exactly 1/32
  EXPECT_EQ(AutoBufferBytes(63 * kGiB), 1024 * kMiB);   // rounded down to a power of two
  EXPECT_EQ(AutoBufferBytes(12 * kGiB), 256 * kMiB);
  EXPECT_EQ(AutoBufferBytes(100 * kMiB), 16 * kMiB);  // a nearly full GPU: the floor
  EXPECT_EQ(AutoBufferBytes(0), 16 * kMiB);
  Settings s;
  std::string error;
  ASSERT_TRUE(ParseSetting(Setting::kBufferMb, "8", "SMPROF_BUFFER_MB", &s, &error)) << error;
  ASSERT_TRUE(ParseSetting(Setting::kBufferMb, "auto", "SMPROF_BUFFER_MB", &s, &error)) << error;
  EXPECT_EQ(s.buffer_mb, kAutoBufferMb);
  EXPECT_EQ(SettingText(Setting::kBufferMb, s), "auto");
  EXPECT_FALSE(ParseSetting(Setting::kBufferMb, "2GB", "SMPROF_BUFFER_MB", &s, &error));
  EXPECT_NE(error.find("or auto"), std::string::npos) << error;
}

TEST(SettingsTest, BadValueLeavesSettingsUnchanged) {
  Settings s;
  std::string error;
  ASSERT_TRUE(ParseSetting(Setting::kWarps, "0-3", "--warps", &s, &error));
  EXPECT_FALSE(ParseSetting(Setting::kWarps, "0,99", "--warps", &s, &error));
  EXPECT_EQ(s.warps_spec, "0-3");
  EXPECT_EQ(s.warp_mask, 0xfu);
  EXPECT_FALSE(ParseSetting(Setting::kKernels, "a[", "-k", &s, &error));
  EXPECT_TRUE(s.kernels.selects_all());
}

TEST(SettingsTest, Layouts) {
  Settings s;
  std::string error;
  for (const char* good : {"launch", "hardware", "auto"}) {
    ASSERT_TRUE(ParseSetting(Setting::kLayout, good, "--layout", &s, &error)) << good << ": " << error;
    EXPECT_EQ(SettingText(Setting::kLayout, s), good);
  }
  EXPECT_FALSE(ParseSetting(Setting::kLayout, "sm", "SMPROF_LAYOUT", &s, &error));
  EXPECT_EQ(error, "SMPROF_LAYOUT: unknown layout \"sm\": use launch, hardware or auto");
  EXPECT_EQ(s.layout, "auto");
}

TEST(SettingsTest, TraceCycles) {
  Settings s;
  EXPECT_EQ(s.trace_cycles, "none");
  std::string error;
  for (const char* good : {"counter", "args", "none"}) {
    ASSERT_TRUE(ParseSetting(Setting::kTraceCycles, good, "--trace-cycles", &s, &error)) << good << ": " << error;
    EXPECT_EQ(SettingText(Setting::kTraceCycles, s), good);
  }
  EXPECT_FALSE(ParseSetting(Setting::kTraceCycles, "all", "SMPROF_TRACE_CYCLES", &s, &error));
  EXPECT_EQ(error, "SMPROF_TRACE_CYCLES: unknown trace cycles \"all\": use none, counter or args");
  EXPECT_EQ(s.trace_cycles, "none");
}

TEST(SettingsTest, Backlog) {
  Settings s;
  EXPECT_EQ(s.backlog, Backlog::kWait);
  std::string error;
  ASSERT_TRUE(ParseSetting(Setting::kBacklog, "drop", "--backlog", &s, &error)) << error;
  EXPECT_EQ(s.backlog, Backlog::kDrop);
  EXPECT_EQ(SettingText(Setting::kBacklog, s), "drop");
  EXPECT_FALSE(ParseSetting(Setting::kBacklog, "block", "SMPROF_BACKLOG", &s, &error));
  EXPECT_EQ(error, "SMPROF_BACKLOG: unknown backlog \"block\": use wait or drop");
  EXPECT_EQ(s.backlog, Backlog::kDrop);
  ASSERT_TRUE(ParseSetting(Setting::kBacklog, "wait", "--backlog", &s, &error)) << error;
  EXPECT_EQ(SettingText(Setting::kBacklog, s), "wait");
}

TEST(SettingsTest, Launches) {
  Settings s;
  std::string error;
  ASSERT_TRUE(ParseSetting(Setting::kLaunches, "attn*:0,gemm*:100-", "--launches", &s, &error)) << error;
  EXPECT_EQ(SettingText(Setting::kLaunches, s), "attn*:0,gemm*:100-");
  EXPECT_EQ(s.launches.item_count(), 2u);
  EXPECT_EQ(s.launches.ItemsFor("void gemm_tiled<64>(float*)"), std::vector<uint32_t>{1});
  // A bad spec names the source and leaves the setting as it was.
  EXPECT_FALSE(ParseSetting(Setting::kLaunches, "gemm*", "SMPROF_LAUNCHES", &s, &error));
  EXPECT_EQ(error, "SMPROF_LAUNCHES: item \"gemm*\" has no launch range: write PATTERN:RANGES, e.g. gemm*:0-9");
  EXPECT_EQ(s.launches_spec, "attn*:0,gemm*:100-");
  EXPECT_EQ(s.launches.item_count(), 2u);
  // Empty: every launch again (as SMPROF_KERNELS).
  ASSERT_TRUE(ParseSetting(Setting::kLaunches, "", "--launches", &s, &error)) << error;
  EXPECT_TRUE(s.launches.limits_nothing());
  EXPECT_EQ(SettingText(Setting::kLaunches, s), "");
}

TEST(SettingsTest, CaptureRange) {
  Settings s;
  EXPECT_EQ(SettingText(Setting::kCaptureRange, s), "none");
  std::string error;
  ASSERT_TRUE(ParseSetting(Setting::kCaptureRange, "cudaProfilerApi", "--capture-range", &s, &error)) << error;
  EXPECT_EQ(s.capture_range, CaptureRange::kProfilerApi);
  EXPECT_EQ(SettingText(Setting::kCaptureRange, s), "cudaProfilerApi");
  for (const char* bad : {"cudaprofilerapi", "NONE", "nvtx", ""}) {
    EXPECT_FALSE(ParseSetting(Setting::kCaptureRange, bad, "SMPROF_CAPTURE_RANGE", &s, &error)) << bad;
    EXPECT_EQ(error,
              std::string("SMPROF_CAPTURE_RANGE: unknown capture range \"") + bad + "\": use none or cudaProfilerApi");
  }
  EXPECT_EQ(s.capture_range, CaptureRange::kProfilerApi);
  ASSERT_TRUE(ParseSetting(Setting::kCaptureRange, "none", "--capture-range", &s, &error)) << error;
  EXPECT_EQ(s.capture_range, CaptureRange::kNone);
}

TEST(SettingsTest, WholeNumbers) {
  uint64_t v = 0;
  std::string error;
  EXPECT_TRUE(ParseWholeNumber("007", 0, 10, &v, &error));
  EXPECT_EQ(v, 7u);
  EXPECT_TRUE(ParseWholeNumber("18446744073709551615", 0, UINT64_MAX, &v, &error));
  EXPECT_EQ(v, UINT64_MAX);
  EXPECT_FALSE(ParseWholeNumber("18446744073709551616", 0, UINT64_MAX, &v, &error));
  EXPECT_NE(error.find("out of range"), std::string::npos);
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1.0", "0x10", "1e3"}) {
    EXPECT_FALSE(ParseWholeNumber(bad, 0, 100, &v, &error)) << bad;
    EXPECT_NE(error.find("not a positive whole number"), std::string::npos) << bad;
  }
}

TEST(SettingsTest, WarpLists) {
  uint32_t mask = 0;
  std::string error;
  EXPECT_TRUE(ParseWarpList("0,4-7,31", &mask, &error));
  EXPECT_EQ(mask, 0x800000f1u);
  EXPECT_TRUE(ParseWarpList("0-31", &mask, &error));
  EXPECT_EQ(mask, 0xffffffffu);
  EXPECT_FALSE(ParseWarpList("32", &mask, &error));
  EXPECT_NE(error.find("a block has at most 32 warps"), std::string::npos) << error;
}

TEST(SettingsTest, LoadFromEnvironmentUsesTheSameParser) {
  const std::map<std::string, std::string> env = {
      {"SMPROF_BUFFER_MB", "8"}, {"SMPROF_WARPS", "0,99"}, {"SMPROF_LOG_LEVEL", ""}, {"SMPROF_KERNELS", "x["}};
  std::vector<std::string> errors;
  bool kernels_valid = true;
  const Settings s = LoadSettings(
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      &errors, &kernels_valid);
  EXPECT_EQ(s.buffer_mb, 8u);
  EXPECT_EQ(s.warp_mask, 0xffffffffu);
  EXPECT_EQ(s.log_level, "warn");  // empty counts as unset
  EXPECT_FALSE(kernels_valid);
  ASSERT_EQ(errors.size(), 2u);
  // The same message smprof-run would print, plus what the injector does instead.
  Settings ignored;
  std::string runner_error;
  ParseSetting(Setting::kWarps, "0,99", "SMPROF_WARPS", &ignored, &runner_error);
  EXPECT_EQ(errors[1], runner_error + "; using all warps");
  EXPECT_NE(errors[0].find("profiling is off"), std::string::npos) << errors[0];
}

// A bad SMPROF_LAUNCHES, like a bad SMPROF_KERNELS, turns profiling off; a bad
// SMPROF_CAPTURE_RANGE keeps its default.
TEST(SettingsTest, BadLaunchSpecInTheEnvironmentTurnsProfilingOff) {
  const std::map<std::string, std::string> env = {{"SMPROF_LAUNCHES", "gemm:3-1"}, {"SMPROF_CAPTURE_RANGE", "nvtx"}};
  std::vector<std::string> errors;
  bool selection_valid = true;
  const Settings s = LoadSettings(
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      &errors, &selection_valid);
  EXPECT_FALSE(selection_valid);
  EXPECT_TRUE(s.launches.limits_nothing());
  EXPECT_EQ(s.capture_range, CaptureRange::kNone);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].rfind("SMPROF_LAUNCHES: range 3-1", 0), 0u) << errors[0];
  EXPECT_NE(errors[0].find("; profiling is off for this run"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1], "SMPROF_CAPTURE_RANGE: unknown capture range \"nvtx\": use none or cudaProfilerApi; using none");
}

}  // namespace
}  // namespace smprof
