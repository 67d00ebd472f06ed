// The injector's private logger: never spdlog's default registry (the
// application may use spdlog too). Messages go to stderr prefixed "smprof:".
#pragma once

#include <spdlog/logger.h>

#include <string>

namespace smprof::injector {

spdlog::logger& Log();
// Applies SMPROF_LOG_LEVEL; returns false (and keeps "warn") for an unknown level.
bool SetLogLevel(const std::string& level);

}  // namespace smprof::injector
