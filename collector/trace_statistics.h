// Reads the run statistics a finished trace carries: the collector writes
// them (stats_report.h ToJson, as compact JSON text) into the trace's last
// event, the "smprof run summary" instant, as its "statistics" argument, in
// both formats. `smprof stats` reads them from there when no .stats.json
// lies beside the trace. A trace whose run was killed has no summary: then
// *error says so.
#pragma once

#include <string>

namespace smprof {

bool ReadTraceStatistics(const std::string& path, std::string* statistics_json, std::string* error);

}  // namespace smprof
