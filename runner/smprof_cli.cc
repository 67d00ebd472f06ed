// smprof: reads what smprof-run wrote, without opening the trace in a viewer.
//
//   smprof stats RUN            the statistics of one run, as smprof-run printed them
//   smprof diff BEFORE AFTER    region by region: speedup, change of p95
//
// RUN is a trace (the statistics beside it, <trace>.stats.json, are read,
// else those the trace carries in its summary) or a .stats.json file itself. --json prints JSON instead of tables; --top N
// shows the N regions with the most time per kernel (default 10).
//
// Exit codes: 0 done, 1 a file cannot be read (the message names it and the
// fix), 2 bad arguments.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collector/stats_report.h"
#include "collector/trace_placement.h"
#include "collector/trace_statistics.h"
#include "common/json.h"
#include "common/settings.h"

namespace {

constexpr char kUsage[] =
    "usage: smprof stats [--json] [--top N] RUN\n"
    "       smprof diff [--json] BEFORE AFTER\n"
    "\n"
    "Reads the statistics smprof-run writes beside every trace (<trace>.stats.json):\n"
    "per kernel x region count, total, mean, p50, p95, max (ns and SM cycles),\n"
    "share of the kernel's warp time, per-SM and per-warp imbalance, and the\n"
    "largest gaps on warps.\n"
    "\n"
    "  stats RUN       print the statistics of one run; RUN is a trace (.pftrace\n"
    "                  or .json: the file beside it, else the trace's own copy)\n"
    "                  or its .stats.json file\n"
    "  diff A B        compare two runs region by region: speedup (mean A / mean B,\n"
    "                  above 1 means B is faster) and the change of p95\n"
    "  --json          print JSON instead of tables\n"
    "  --top N         regions shown per kernel (default 10; the files have all)\n"
    "  --help          show this help\n";

int Usage(const std::string& problem) {
  std::fprintf(stderr, "smprof: %s\n\n%s", problem.c_str(), kUsage);
  return 2;
}

bool IsFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The statistics of `run`: a .stats.json file, the one beside a trace, or
// the ones the trace itself carries (trace_statistics.h).
bool Load(const std::string& run, smprof::stats::RunStats* stats) {
  std::string error;
  const std::string beside = smprof::StatsBase(run) + ".stats.json";
  if (EndsWith(run, ".stats.json") || IsFile(beside)) {
    const std::string path = EndsWith(run, ".stats.json") ? run : beside;
    if (!smprof::stats::ReadStatsFile(path, stats, &error)) {
      std::fprintf(stderr, "smprof: %s\n", error.c_str());
      return false;
    }
    return true;
  }
  std::string text;
  if (!smprof::ReadTraceStatistics(run, &text, &error)) {
    std::fprintf(stderr, "smprof: no statistics for %s: %s\n", run.c_str(), error.c_str());
    return false;
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!smprof::stats::FromJson(j, stats, &error)) {
    std::fprintf(stderr, "smprof: the statistics in %s do not read: %s\n", run.c_str(), error.c_str());
    return false;
  }
  return true;
}

void PrintJson(const nlohmann::json& j) {
  std::puts(j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage("a command is required");
  const std::string command = args[0];
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  bool json = false;
  smprof::stats::TextOptions text;
  std::vector<std::string> files;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--top") {
      uint64_t n = 0;
      std::string why;
      if (i + 1 == args.size() || !smprof::ParseWholeNumber(args[i + 1], 1, 100000, &n, &why)) {
        return Usage("--top needs a number from 1 to 100000");
      }
      text.top_regions = static_cast<size_t>(n);
      ++i;
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a.rfind("--", 0) == 0) {
      return Usage("unknown option " + a);
    } else {
      files.push_back(a);
    }
  }
  if (command == "stats") {
    if (files.size() != 1) return Usage("stats takes one run");
    smprof::stats::RunStats run;
    if (!Load(files[0], &run)) return 1;
    if (json) {
      PrintJson(smprof::stats::ToJson(run));
    } else {
      std::fputs(smprof::stats::RenderText(run, text).c_str(), stdout);
    }
    return 0;
  }
  if (command == "diff") {
    if (files.size() != 2) return Usage("diff takes two runs: BEFORE AFTER");
    smprof::stats::RunStats a, b;
    if (!Load(files[0], &a) || !Load(files[1], &b)) return 1;
    const auto diff = smprof::stats::Diff(a, b);
    if (json) {
      PrintJson(smprof::stats::DiffToJson(diff));
    } else {
      std::fputs(smprof::stats::RenderDiff(diff).c_str(), stdout);
    }
    return 0;
  }
  return Usage("unknown command '" + command + "'");
}
