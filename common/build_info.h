// What was built: smprof's version and the git revision of the source tree
// (generated at build time by cmake/SmprofBuildInfo.cmake), for --version and
// for the run metadata every trace records.
#pragma once

namespace smprof {

const char* BuildVersion();   // "0.1.0"
const char* BuildRevision();  // "1a2b3c4d5e6f", "1a2b3c4d5e6f-dirty" or "unknown"

}  // namespace smprof
