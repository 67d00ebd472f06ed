// Injector configuration, read once from the environment at injection time
// through the shared settings table (common/settings.h): a value means the
// same here as in smprof-run, which validated it before the program started.
//
// Every bad value produces one error line naming the variable and the fix,
// and keeps the default; a bad SMPROF_KERNELS turns profiling off (the
// application runs unprofiled) because guessing the user's selection would
// profile the wrong kernels.
#pragma once

#include <string>
#include <vector>

#include "common/settings.h"

namespace smprof::injector {

struct Config {
  std::string run_id;  // SMPROF_RUN_ID (set by smprof-run)
  Settings settings;
  bool kernels_valid = true;

  uint64_t shm_bytes() const { return uint64_t{settings.shm_mb} << 20; }
};

Config LoadConfig(const GetEnv& getenv_fn, std::vector<std::string>* errors);

}  // namespace smprof::injector
