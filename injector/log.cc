#include "injector/log.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace smprof::injector {

spdlog::logger& Log() {
  // Leaky: usable from atexit handlers and callbacks during teardown.
  static spdlog::logger* logger = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto* l = new spdlog::logger("smprof", std::move(sink));
    l->set_pattern("smprof[%P]: %^%l%$: %v");
    l->set_level(spdlog::level::warn);
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return *logger;
}

void SetLogLevel(const std::string& level) {
  const auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") return;
  Log().set_level(parsed);
}

}  // namespace smprof::injector
