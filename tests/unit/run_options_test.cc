// smprof-run option parsing: each option, environment precedence, ranges,
// '--' and pass-through of the program's own arguments.
#include "runner/run_options.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace smprof::runner {
namespace {

using Args = std::vector<std::string>;

struct Parsed {
  ParseOutcome outcome;
  RunOptions options;
  std::string error;
};

Parsed Parse(const Args& args, const Environment& env = {}) {
  Parsed p;
  p.outcome = ParseRunOptions(args, env, &p.options, &p.error);
  return p;
}

std::string AppEnv(const RunOptions& o, const std::string& name) {
  for (const auto& [var, value] : SettingVariables(o)) {
    if (var == name) return value;
  }
  return "<unset>";
}

TEST(RunOptionsTest, Defaults) {
  Parsed p = Parse({"./app"});
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.program, Args{"./app"});
  EXPECT_EQ(p.options.output, "");
  EXPECT_EQ(p.options.settings.kernels_spec, "");
  EXPECT_EQ(p.options.settings.launches_spec, "");
  EXPECT_TRUE(p.options.settings.launches.limits_nothing());
  EXPECT_EQ(p.options.settings.capture_range, CaptureRange::kNone);
  EXPECT_EQ(p.options.settings.buffer_mb, kAutoBufferMb);
  EXPECT_EQ(p.options.settings.warps_spec, "");
  EXPECT_EQ(p.options.settings.shm_mb, 32u);
  EXPECT_EQ(p.options.settings.log_level, "warn");
  EXPECT_FALSE(p.options.preload);
  EXPECT_FALSE(p.options.quiet);
  EXPECT_FALSE(p.options.force);
  EXPECT_TRUE(SettingVariables(p.options).empty());
}

TEST(RunOptionsTest, EachOption) {
  Parsed p = Parse({"-o", "t.json", "-k", "gemm*", "--launches", "gemm*:10-12", "--capture-range", "cudaProfilerApi",
                    "--buffer-mb", "128", "--warps", "0,4-7", "--shm-mb", "8", "--preload", "--log-level", "debug",
                    "-q", "./app"});
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.output, "t.json");
  EXPECT_EQ(p.options.settings.kernels_spec, "gemm*");
  EXPECT_EQ(p.options.settings.launches_spec, "gemm*:10-12");
  EXPECT_EQ(p.options.settings.launches.item_count(), 1u);
  EXPECT_EQ(p.options.settings.capture_range, CaptureRange::kProfilerApi);
  EXPECT_EQ(p.options.settings.buffer_mb, 128u);
  EXPECT_EQ(p.options.settings.warps_spec, "0,4-7");
  EXPECT_EQ(p.options.settings.shm_mb, 8u);
  EXPECT_TRUE(p.options.preload);
  EXPECT_EQ(p.options.settings.log_level, "debug");
  EXPECT_TRUE(p.options.quiet);
  EXPECT_EQ(AppEnv(p.options, "SMPROF_KERNELS"), "gemm*");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_LAUNCHES"), "gemm*:10-12");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_CAPTURE_RANGE"), "cudaProfilerApi");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_BUFFER_MB"), "128");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_WARPS"), "0,4-7");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_SHM_MB"), "8");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_LOG_LEVEL"), "debug");
}

TEST(RunOptionsTest, LongFormsAndAttachedValues) {
  Parsed p = Parse({"--output=a.json", "--kernels=x,y", "--launches=x:0+2,y:1-", "--capture-range=none",
                    "--buffer-mb=1", "--shm-mb=4096", "--quiet", "--log-level=off", "./app"});
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.output, "a.json");
  EXPECT_EQ(p.options.settings.kernels_spec, "x,y");
  EXPECT_EQ(p.options.settings.launches_spec, "x:0+2,y:1-");
  EXPECT_EQ(p.options.sources.at(Setting::kCaptureRange), "--capture-range");
  EXPECT_EQ(p.options.settings.buffer_mb, 1u);
  EXPECT_EQ(p.options.settings.shm_mb, 4096u);
  EXPECT_TRUE(p.options.quiet);
  EXPECT_EQ(p.options.settings.log_level, "off");

  p = Parse({"-ob.json", "-kgemm", "--output", "c.json", "./app"});  // later wins
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.output, "c.json");
  EXPECT_EQ(p.options.settings.kernels_spec, "gemm");
}

TEST(RunOptionsTest, HelpAndVersion) {
  EXPECT_EQ(Parse({"-h"}).outcome, ParseOutcome::kHelp);
  EXPECT_EQ(Parse({"--help"}).outcome, ParseOutcome::kHelp);
  EXPECT_EQ(Parse({"-q", "--help", "./app"}).outcome, ParseOutcome::kHelp);
  EXPECT_EQ(Parse({"--version"}).outcome, ParseOutcome::kVersion);
  EXPECT_EQ(VersionText().rfind("smprof-run ", 0), 0u);
  // After the program, --help belongs to the program.
  Parsed p = Parse({"./app", "--help"});
  ASSERT_EQ(p.outcome, ParseOutcome::kRun);
  EXPECT_EQ(p.options.program, (Args{"./app", "--help"}));
}

// --serve: no program; the settings and output as for a run.
TEST(RunOptionsTest, Serve) {
  Parsed p = Parse({"--serve", "-o", "t.pftrace", "-k", "matmul*", "--warps", "0-3", "--force", "-q"},
                   {{"SMPROF_BUFFER_MB", "16"}});
  ASSERT_EQ(p.outcome, ParseOutcome::kServe) << p.error;
  EXPECT_TRUE(p.options.serve);
  EXPECT_EQ(p.options.serve_pid, 0);
  EXPECT_TRUE(p.options.program.empty());
  EXPECT_EQ(p.options.output, "t.pftrace");
  EXPECT_TRUE(p.options.force);
  EXPECT_TRUE(p.options.quiet);
  EXPECT_EQ(p.options.settings.kernels_spec, "matmul*");
  EXPECT_EQ(p.options.settings.buffer_mb, 16u);

  p = Parse({"-o", "t.pftrace", "--serve", "--serve-pid", "4242", "--"});
  ASSERT_EQ(p.outcome, ParseOutcome::kServe) << p.error;
  EXPECT_EQ(p.options.serve_pid, 4242);
  EXPECT_EQ(Parse({"--serve-pid=7", "--serve"}).options.serve_pid, 7);
  EXPECT_EQ(Parse({"--serve"}).outcome, ParseOutcome::kServe);
  // A bad setting stops it as it stops a run.
  p = Parse({"--serve", "--kernels", "gemm["});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_NE(p.error.find("--kernels"), std::string::npos) << p.error;
}

TEST(RunOptionsTest, ServeRefusesWhatDoesNotApply) {
  Parsed p = Parse({"--serve", "./app", "x"});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_NE(p.error.find("--serve runs no program, but './app' was given"), std::string::npos) << p.error;
  p = Parse({"--serve", "--", "./app"});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  p = Parse({"--serve", "--preload"});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_NE(p.error.find("--preload does not apply to --serve"), std::string::npos) << p.error;
  p = Parse({"--serve-pid", "12", "./app"});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_NE(p.error.find("--serve-pid needs --serve"), std::string::npos) << p.error;
  for (const char* bad : {"0", "-3", "abc", "12x", "", "1234567890"}) {
    p = Parse({"--serve", "--serve-pid", bad});
    EXPECT_EQ(p.outcome, ParseOutcome::kError) << bad;
    EXPECT_NE(p.error.find("--serve-pid needs a process id (a positive integer)"), std::string::npos) << p.error;
  }
  EXPECT_NE(UsageText().find("smprof-run --serve"), std::string::npos);
}

// Each option is looked for as it appears in an option line ("  -o, --output
// PATH"), so a short option cannot pass by being a substring of a long one.
TEST(RunOptionsTest, HelpDocumentsEveryOptionAndVariable) {
  const std::string help = HelpText();
  const auto has_line = [&](const std::string& start) { return help.find("\n" + start) != std::string::npos; };
  for (const char* line : {"  -o, --output PATH ", "      --force ", "      --preload ", "  -q, --quiet ",
                           "      --serve ", "      --serve-pid PID ", "  -h, --help ", "      --version "}) {
    EXPECT_TRUE(has_line(line)) << "no help line starting \"" << line << "\"";
  }
  for (const SettingSpec& s : AllSettings()) {
    EXPECT_TRUE(has_line(std::string("  ") + s.variable + " ")) << s.variable;
    if (s.option == nullptr) continue;
    const std::string start = s.short_option != 0 ? std::string("  -") + s.short_option + ", --" : "      --";
    EXPECT_TRUE(has_line(start + s.option + " " + s.value_name + " ")) << s.option;
    EXPECT_NE(help.find(std::string("(") + s.variable + ")"), std::string::npos) << s.variable;
  }
  for (const char* word : {"SMPROF_RUN_ID", "SMPROF_INJECTOR", "SMPROF_PRELOAD", "SMPROF_COLLECTOR",
                           "CUDA_INJECTION64_PATH", "LD_PRELOAD", "ui.perfetto.dev", ".partial"}) {
    EXPECT_NE(help.find(word), std::string::npos) << word;
  }
  // The check itself must be able to fail.
  EXPECT_FALSE(has_line("  -x, --no-such-option "));
}

TEST(RunOptionsTest, MissingProgramIsUsage) {
  for (const Args& args : {Args{}, Args{"-q"}, Args{"--"}, Args{"-o", "x.json", "--"}}) {
    Parsed p = Parse(args);
    EXPECT_EQ(p.outcome, ParseOutcome::kUsage);
    EXPECT_NE(p.error.find("no program"), std::string::npos) << p.error;
  }
  EXPECT_NE(UsageText().find("usage: smprof-run"), std::string::npos);
}

TEST(RunOptionsTest, DoubleDashEndsOptions) {
  Parsed p = Parse({"-q", "--", "--weird-name", "-o", "x"});
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.program, (Args{"--weird-name", "-o", "x"}));
  EXPECT_EQ(p.options.output, "");
  // A second "--" belongs to the program.
  p = Parse({"--", "./app", "--", "-x"});
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.program, (Args{"./app", "--", "-x"}));
}

TEST(RunOptionsTest, ProgramArgumentsThatLookLikeOptionsPassThrough) {
  Parsed p = Parse({"-k", "gemm", "python3", "-o", "out", "--kernels", "!!!", "-q", "--buffer-mb", "0"});
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.settings.kernels_spec, "gemm");
  EXPECT_FALSE(p.options.quiet);
  EXPECT_EQ(p.options.output, "");
  EXPECT_EQ(p.options.settings.buffer_mb, kAutoBufferMb);
  EXPECT_EQ(p.options.program, (Args{"python3", "-o", "out", "--kernels", "!!!", "-q", "--buffer-mb", "0"}));
  // A lone "-" is a program name, not an option.
  p = Parse({"-", "a"});
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.program, (Args{"-", "a"}));
}

TEST(RunOptionsTest, UnknownOrIncompleteOptions) {
  Parsed p = Parse({"--frobnicate", "./app"});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_NE(p.error.find("unknown option '--frobnicate'"), std::string::npos) << p.error;
  EXPECT_EQ(Parse({"-x", "./app"}).outcome, ParseOutcome::kError);
  EXPECT_EQ(Parse({"-qh", "./app"}).outcome, ParseOutcome::kError);
  p = Parse({"-o"});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_NE(p.error.find("-o needs a value"), std::string::npos) << p.error;
  p = Parse({"--buffer-mb"});
  EXPECT_NE(p.error.find("--buffer-mb needs a value"), std::string::npos) << p.error;
  p = Parse({"--quiet=yes", "./app"});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_NE(p.error.find("takes no value"), std::string::npos) << p.error;
  EXPECT_EQ(Parse({"-o", "", "./app"}).outcome, ParseOutcome::kError);
}

TEST(RunOptionsTest, NumbersOutOfRange) {
  struct Case {
    Args args;
    const char* expect;
  };
  for (const Case& c : {
           Case{{"--buffer-mb", "0", "a"}, "out of range"},
           Case{{"--buffer-mb", "4097", "a"}, "out of range"},
           Case{{"--buffer-mb", "99999999999999999999", "a"}, "out of range"},
           Case{{"--buffer-mb", "-1", "a"}, "is not a size in MiB"},
           Case{{"--buffer-mb", "12MB", "a"}, "is not a size in MiB"},
           Case{{"--buffer-mb", "", "a"}, "is not a size in MiB"},
           Case{{"--buffer-mb", " 5", "a"}, "is not a size in MiB"},
           Case{{"--shm-mb", "0", "a"}, "out of range"},
           Case{{"--shm-mb", "4097", "a"}, "out of range"},
           Case{{"--shm-mb", "1.5", "a"}, "not a positive whole number"},
       }) {
    Parsed p = Parse(c.args);
    EXPECT_EQ(p.outcome, ParseOutcome::kError) << c.args[0] << " " << c.args[1];
    EXPECT_NE(p.error.find(c.expect), std::string::npos) << p.error;
    EXPECT_NE(p.error.find(c.args[0]), std::string::npos) << p.error;  // names the option
    EXPECT_NE(p.error.find("give a whole number from"), std::string::npos) << p.error;
  }
  Parsed p = Parse({"--buffer-mb", "4096", "--shm-mb", "007", "a"});
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.settings.buffer_mb, 4096u);
  EXPECT_EQ(p.options.settings.shm_mb, 7u);
}

TEST(RunOptionsTest, Warps) {
  for (const char* ok : {"0", "31", "0,4-7", "0-31", "5-5", "3,1"}) {
    Parsed p = Parse({"--warps", ok, "a"});
    EXPECT_EQ(p.outcome, ParseOutcome::kRun) << ok << ": " << p.error;
  }
  struct Case {
    const char* warps;
    const char* expect;
  };
  for (const Case& c : {Case{"32", "out of range"}, Case{"0,100", "out of range"}, Case{"7-4", "write it as 4-7"},
                        Case{"0,,1", "remove the extra comma"}, Case{"0,", "remove the extra comma"},
                        Case{"x", "not a warp index"}, Case{"1-", "not a warp index"}, Case{"-1", "not a warp index"},
                        Case{"1, 2", "without spaces"}, Case{"", "empty warp list"}}) {
    Parsed p = Parse({"--warps", c.warps, "a"});
    EXPECT_EQ(p.outcome, ParseOutcome::kError) << c.warps;
    EXPECT_NE(p.error.find(c.expect), std::string::npos) << c.warps << ": " << p.error;
    EXPECT_EQ(p.error.rfind("--warps: ", 0), 0u) << p.error;
  }
}

TEST(RunOptionsTest, LogLevel) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "off"}) {
    EXPECT_EQ(Parse({"--log-level", level, "a"}).outcome, ParseOutcome::kRun) << level;
  }
  Parsed p = Parse({"--log-level", "verbose", "a"});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_NE(p.error.find("trace, debug, info, warn, error or off"), std::string::npos) << p.error;
}

TEST(RunOptionsTest, KernelSpecIsValidated) {
  Parsed p = Parse({"--kernels", "gemm[", "a"});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_EQ(p.error.rfind("--kernels: ", 0), 0u) << p.error;
  EXPECT_NE(p.error.find("unterminated '['"), std::string::npos) << p.error;
  p = Parse({"-k", "a,,b", "a"});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_EQ(p.error.rfind("-k: ", 0), 0u) << p.error;
  p = Parse({"a"}, {{"SMPROF_KERNELS", "gemm,,x"}});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_EQ(p.error.rfind("SMPROF_KERNELS: empty pattern", 0), 0u) << p.error;
}

TEST(RunOptionsTest, LaunchSpecIsValidated) {
  struct Case {
    Args args;
    const char* expect;
  };
  for (const Case& c : {
           Case{{"--launches", "gemm*", "a"}, "--launches: item \"gemm*\" has no launch range"},
           Case{{"--launches", "gemm:3-1", "a"}, "--launches: range 3-1 in item \"gemm:3-1\" is reversed"},
           Case{{"--launches", "gemm:1,,x:2", "a"}, "--launches: empty item"},
           Case{{"--launches", "!gemm:0", "a"}, "--launches: '!' in item"},
           Case{{"--launches=:4", "a"}, "--launches: empty pattern"},
           Case{{"--capture-range", "nvtx", "a"},
                "--capture-range: unknown capture range \"nvtx\": use none or cudaProfilerApi"},
       }) {
    Parsed p = Parse(c.args);
    EXPECT_EQ(p.outcome, ParseOutcome::kError) << c.args[0];
    EXPECT_EQ(p.error.rfind(c.expect, 0), 0u) << p.error;
  }
  Parsed p = Parse({"a"}, {{"SMPROF_LAUNCHES", "attn*:0,gemm*:100-"}, {"SMPROF_CAPTURE_RANGE", "cudaProfilerApi"}});
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.settings.launches.item_count(), 2u);
  EXPECT_EQ(p.options.settings.capture_range, CaptureRange::kProfilerApi);
  EXPECT_EQ(p.options.sources.at(Setting::kLaunches), "SMPROF_LAUNCHES");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_LAUNCHES"), "attn*:0,gemm*:100-");
  p = Parse({"a"}, {{"SMPROF_LAUNCHES", "gemm"}});
  EXPECT_EQ(p.outcome, ParseOutcome::kError);
  EXPECT_EQ(p.error.rfind("SMPROF_LAUNCHES: item \"gemm\" has no launch range", 0), 0u) << p.error;
}

TEST(RunOptionsTest, EnvironmentIsReadAndValidated) {
  const Environment env = {{"SMPROF_KERNELS", "reduce*"}, {"SMPROF_BUFFER_MB", "256"},
                           {"SMPROF_WARPS", "1-2"},       {"SMPROF_SHM_MB", "16"},
                           {"SMPROF_LOG_LEVEL", "info"},  {"SMPROF_CHUNK_BYTES", "4096"},
                           {"SMPROF_HIGH_WATER", "50"},   {"UNRELATED", "x"}};
  Parsed p = Parse({"a"}, env);
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.settings.kernels_spec, "reduce*");
  EXPECT_EQ(p.options.settings.buffer_mb, 256u);
  EXPECT_EQ(p.options.settings.warps_spec, "1-2");
  EXPECT_EQ(p.options.settings.shm_mb, 16u);
  EXPECT_EQ(p.options.settings.log_level, "info");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_CHUNK_BYTES"), "4096");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_HIGH_WATER"), "50");
  EXPECT_EQ(AppEnv(p.options, "UNRELATED"), "<unset>");

  struct Case {
    const char* var;
    const char* value;
    const char* expect;
  };
  for (const Case& c :
       {Case{"SMPROF_BUFFER_MB", "0", "out of range"}, Case{"SMPROF_BUFFER_MB", "lots", "is not a size in MiB"},
        Case{"SMPROF_SHM_MB", "5000", "out of range"}, Case{"SMPROF_WARPS", "40", "out of range"},
        Case{"SMPROF_LOG_LEVEL", "loud", "unknown log level"}, Case{"SMPROF_CHUNK_BYTES", "1000", "not a power of two"},
        Case{"SMPROF_CHUNK_BYTES", "128", "out of range"}, Case{"SMPROF_CHUNK_BYTES", "131072", "out of range"},
        Case{"SMPROF_HIGH_WATER", "9", "out of range"}, Case{"SMPROF_HIGH_WATER", "96", "out of range"},
        Case{"SMPROF_KERNELS", "x[", "unterminated"}}) {
    Parsed bad = Parse({"a"}, {{c.var, c.value}});
    EXPECT_EQ(bad.outcome, ParseOutcome::kError) << c.var << "=" << c.value;
    EXPECT_EQ(bad.error.rfind(std::string(c.var) + ": ", 0), 0u) << bad.error;
    EXPECT_NE(bad.error.find(c.expect), std::string::npos) << bad.error;
  }
  for (const char* chunk : {"256", "1024", "65536"}) {
    EXPECT_EQ(Parse({"a"}, {{"SMPROF_CHUNK_BYTES", chunk}}).outcome, ParseOutcome::kRun) << chunk;
  }
  // Empty counts as unset.
  EXPECT_EQ(Parse({"a"}, {{"SMPROF_BUFFER_MB", ""}}).outcome, ParseOutcome::kRun);
}

TEST(RunOptionsTest, OptionsOverrideEnvironment) {
  const Environment env = {{"SMPROF_KERNELS", "reduce*"},
                           {"SMPROF_BUFFER_MB", "256"},
                           {"SMPROF_WARPS", "1"},
                           {"SMPROF_SHM_MB", "16"},
                           {"SMPROF_LOG_LEVEL", "info"}};
  Parsed p =
      Parse({"-k", "gemm", "--buffer-mb", "8", "--warps", "3", "--shm-mb", "2", "--log-level", "error", "a"}, env);
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.settings.kernels_spec, "gemm");
  EXPECT_EQ(p.options.settings.buffer_mb, 8u);
  EXPECT_EQ(p.options.settings.warps_spec, "3");
  EXPECT_EQ(p.options.settings.shm_mb, 2u);
  EXPECT_EQ(p.options.settings.log_level, "error");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_KERNELS"), "gemm");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_BUFFER_MB"), "8");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_WARPS"), "3");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_SHM_MB"), "2");
  EXPECT_EQ(AppEnv(p.options, "SMPROF_LOG_LEVEL"), "error");

  // An option also hides an invalid environment value it overrides.
  p = Parse({"--buffer-mb", "8", "-k", "x", "a"}, {{"SMPROF_BUFFER_MB", "0"}, {"SMPROF_KERNELS", "[["}});
  EXPECT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
}

TEST(RunOptionsTest, DefaultOutputPath) {
  const std::string path = DefaultOutputPath("/usr/bin/python3", 1700000000, 4321);
  EXPECT_EQ(path.rfind("smprof-python3-", 0), 0u) << path;
  ASSERT_EQ(path.size(), std::string("smprof-python3-YYYYmmdd-HHMMSS-4321.pftrace").size()) << path;
  EXPECT_EQ(path.substr(path.size() - 13), "-4321.pftrace");
  const std::string stamp = path.substr(15, 15);
  for (size_t i = 0; i < stamp.size(); ++i) {
    if (i == 8) {
      EXPECT_EQ(stamp[i], '-') << path;
    } else {
      EXPECT_TRUE(stamp[i] >= '0' && stamp[i] <= '9') << path;
    }
  }
  // Two runs in the same second differ by their pid.
  EXPECT_NE(DefaultOutputPath("app", 1700000000, 1), DefaultOutputPath("app", 1700000000, 2));
  EXPECT_EQ(DefaultOutputPath("./app", 0, 1).rfind("smprof-app-", 0), 0u);
  EXPECT_EQ(DefaultOutputPath("app", 0, 1).rfind("smprof-app-", 0), 0u);
}

TEST(RunOptionsTest, Force) {
  EXPECT_TRUE(Parse({"--force", "a"}).options.force);
  EXPECT_EQ(Parse({"--force=yes", "a"}).outcome, ParseOutcome::kError);
}

TEST(RunOptionsTest, SourcesSayWhereEachSettingCameFrom) {
  Parsed p = Parse({"-k", "g*", "--buffer-mb=8", "a"}, {{"SMPROF_WARPS", "0"}, {"SMPROF_BUFFER_MB", "16"}});
  ASSERT_EQ(p.outcome, ParseOutcome::kRun) << p.error;
  EXPECT_EQ(p.options.sources.at(Setting::kKernels), "-k");
  EXPECT_EQ(p.options.sources.at(Setting::kBufferMb), "--buffer-mb");
  EXPECT_EQ(p.options.sources.at(Setting::kWarps), "SMPROF_WARPS");
  EXPECT_EQ(p.options.sources.count(Setting::kShmMb), 0u);
  EXPECT_EQ(p.options.settings.warp_mask, 1u);
}

TEST(RunOptionsTest, AppEnvironmentInjection) {
  RunOptions o;
  std::string error;
  ASSERT_TRUE(ParseSetting(Setting::kKernels, "gemm", "-k", &o.settings, &error)) << error;
  o.sources[Setting::kKernels] = "-k";
  const Helpers helpers{"/x/lib/smprof/libsmprof_inject.so", "/x/lib/smprof/libsmprof_preload.so"};
  auto vars = AppEnvironment(o, "123-abcdef01", helpers, "");
  auto find = [&](const std::string& name) -> std::string {
    auto it = std::find_if(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
    return it == vars.end() ? "<unset>" : it->second;
  };
  EXPECT_EQ(find("SMPROF_RUN_ID"), "123-abcdef01");
  EXPECT_EQ(find("SMPROF_INJECTOR"), helpers.injector);
  EXPECT_EQ(find("CUDA_INJECTION64_PATH"), helpers.injector);
  EXPECT_EQ(find("LD_PRELOAD"), helpers.preload);
  EXPECT_EQ(find("SMPROF_KERNELS"), "gemm");
  EXPECT_EQ(find("SMPROF_BUFFER_MB"), "<unset>");  // defaults are not passed

  vars = AppEnvironment(o, "r", helpers, "/y/other.so");
  EXPECT_EQ(find("LD_PRELOAD"), helpers.preload + ":/y/other.so");

  // --serve's caller loads the injector itself: nothing that loads smprof.
  vars = InjectorEnvironment(o, "123-abcdef01", helpers.injector);
  EXPECT_EQ(vars.size(), 3u);
  EXPECT_EQ(find("SMPROF_RUN_ID"), "123-abcdef01");
  EXPECT_EQ(find("SMPROF_INJECTOR"), helpers.injector);
  EXPECT_EQ(find("SMPROF_KERNELS"), "gemm");
  EXPECT_EQ(find("CUDA_INJECTION64_PATH"), "<unset>");
  EXPECT_EQ(find("LD_PRELOAD"), "<unset>");

  o.preload = true;
  vars = AppEnvironment(o, "r", helpers, "/y/other.so");
  EXPECT_EQ(find("LD_PRELOAD"), helpers.preload + ":" + helpers.injector + ":/y/other.so");
}

}  // namespace
}  // namespace smprof::runner
