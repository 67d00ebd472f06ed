// Injector configuration, read once from the environment at injection time.
//
// Every bad value produces one error line naming the variable and the fix,
// and keeps the default; a bad SMPROF_KERNELS turns profiling off (the
// application runs unprofiled) because guessing the user's selection would
// profile the wrong kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/kernel_filter.h"

namespace smprof::injector {

struct Config {
  std::string run_id;              // SMPROF_RUN_ID (set by smprof-run)
  KernelFilter kernels;            // SMPROF_KERNELS
  bool kernels_valid = true;
  uint64_t buffer_bytes = 64ull << 20;  // SMPROF_BUFFER_MB, per context
  uint32_t chunk_bytes = 1024;          // SMPROF_CHUNK_BYTES
  uint32_t warp_mask = 0xffffffffu;     // SMPROF_WARPS
  uint32_t high_water_percent = 75;     // SMPROF_HIGH_WATER
  uint64_t shm_bytes = 32ull << 20;     // SMPROF_SHM_MB
  std::string log_level = "warn";       // SMPROF_LOG_LEVEL
};

using GetEnv = std::function<const char*(const char*)>;

Config LoadConfig(const GetEnv& getenv_fn, std::vector<std::string>* errors);

// "0,4-7,31" -> bit mask over warp indices within a block (31 stands for 31
// and above). Returns false with *error on bad input.
bool ParseWarpList(const std::string& spec, uint32_t* mask, std::string* error);

}  // namespace smprof::injector
