// Test helper: Perfetto's own trace processor (../shared/tools/perfetto,
// beside the source tree), to import the traces smprof writes and query
// them with SQL. Tests skip visibly when it is absent.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace smprof::testing {

// Its path ($SMPROF_TRACE_PROCESSOR, else the one beside the source tree),
// or "" when it is not there.
inline std::string TraceProcessor() {
  const char* env = std::getenv("SMPROF_TRACE_PROCESSOR");
  const std::string path = env != nullptr && env[0] != '\0'
                               ? std::string(env)
                               : std::string(SMPROF_SOURCE_DIR) + "/../shared/tools/perfetto/trace_processor_shell";
  return access(path.c_str(), X_OK) == 0 ? path : std::string();
}

// Runs one query on `trace`; returns the CSV lines after the header (an
// empty list, with a test failure, if the processor fails).
inline std::vector<std::string> Query(const std::string& tp, const std::string& trace, const std::string& sql,
                                      std::chrono::seconds timeout = std::chrono::seconds(60)) {
  char templ[] = "/tmp/smprof-tp-XXXXXX";
  const int fd = mkstemp(templ);
  close(fd);
  ProcessSpec spec;
  spec.argv = {tp, "-Q", sql, trace};
  spec.stdout_path = templ;
  spec.stderr_path = "/dev/null";
  const int rc = RunProcess(spec, timeout);
  std::vector<std::string> rows;
  if (rc != 0) {
    ADD_FAILURE() << "trace processor exit " << rc << " on " << trace << ": " << sql;
  } else {
    std::ifstream in(templ);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) rows.push_back(line);
  }
  unlink(templ);
  return rows;
}

}  // namespace smprof::testing
