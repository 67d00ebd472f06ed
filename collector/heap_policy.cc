#include "collector/heap_policy.h"

#include <malloc.h>

namespace smprof {

bool RetainFreedMemory() {
  // Fixed thresholds also end glibc's dynamic adjustment of them.
  const bool trim = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kRetainedBytes)) == 1;
  const bool mmap = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kRetainedBytes)) == 1;
  return trim && mmap;
}

}  // namespace smprof
