#include "common/build_info.h"

#include "smprof_build_info.h"  // generated

namespace smprof {

const char* BuildVersion() { return SMPROF_BUILD_VERSION; }
const char* BuildRevision() { return SMPROF_BUILD_REVISION; }

}  // namespace smprof
