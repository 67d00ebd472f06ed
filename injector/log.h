// The injector's private logger: never spdlog's default registry (the
// application may use spdlog too). Messages go to stderr prefixed "smprof:".
#pragma once

#include <string>

#include "common/logging.h"

namespace smprof::injector {

spdlog::logger& Log();
// Applies SMPROF_LOG_LEVEL, already validated by common/settings (an unknown
// level keeps "warn").
void SetLogLevel(const std::string& level);

}  // namespace smprof::injector
