#include "runner/run_metadata.h"

#include <sys/wait.h>

#include <cstring>
#include <ctime>

#include "common/build_info.h"
#include "common/settings.h"

namespace smprof::runner {

bool IsRecordedVariable(const std::string& name) {
  for (const char* prefix : {"CUDA_", "NVIDIA_", "SMPROF_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

nlohmann::json RunMetadata(const RunOptions& options, const RunContext& context) {
  nlohmann::json settings = nlohmann::json::object();
  for (const SettingSpec& spec : AllSettings()) {
    auto source = options.sources.find(spec.id);
    const bool given = source != options.sources.end();
    std::string value = SettingText(spec.id, options.settings);
    if (value.empty()) value = spec.default_text;
    settings[spec.variable] = {{"value", value}, {"source", given ? source->second : std::string("default")}};
  }
  nlohmann::json environment = nlohmann::json::object();
  for (const auto& [name, value] : context.environment) {
    if (IsRecordedVariable(name)) environment[name] = value;
  }
  nlohmann::json program_environment = nlohmann::json::object();
  for (const auto& [name, value] : context.app_variables) program_environment[name] = value;

  const time_t seconds = static_cast<time_t>(context.start_unix_ns / 1000000000ull);
  struct tm utc {};
  gmtime_r(&seconds, &utc);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<unsigned>(context.start_unix_ns / 1000000ull % 1000));
  nlohmann::json run = {
      {"command", options.serve ? context.caller_command : options.program},
      {"smprof_run", context.argv},
      {"cwd", context.cwd},
      {"host", context.host},
      {"start_time", stamp},
      {"start_unix_ns", context.start_unix_ns},
      {"smprof_version", BuildVersion()},
      {"smprof_revision", BuildRevision()},
      {"run_id", context.run_id},
      {"output", context.output},
      {"settings", settings},
      {"options",
       {{"force", options.force}, {"preload", options.preload}, {"quiet", options.quiet}, {"serve", options.serve}}},
      {"environment", environment},
      {"program_environment", program_environment}};
  if (options.serve) run["caller_pid"] = context.caller_pid;
  return run;
}

namespace {

std::string SignalName(int sig) {
  const char* name = sigabbrev_np(sig);
  return name != nullptr ? std::string("SIG") + name : std::to_string(sig);
}

}  // namespace

nlohmann::json ServeExitMetadata(bool stopped, int signal) {
  if (signal != 0) return {{"status", "signal"}, {"signal", signal}, {"signal_name", SignalName(signal)}};
  return {{"status", stopped ? "stopped" : "caller_gone"}};
}

nlohmann::json ExitMetadata(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return {{"status", "killed"}, {"signal", sig}, {"signal_name", SignalName(sig)}, {"code", 128 + sig}};
  }
  return {{"status", "exited"}, {"code", WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 1}};
}

}  // namespace smprof::runner
