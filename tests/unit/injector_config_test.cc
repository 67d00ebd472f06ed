// Injector configuration from the environment: defaults, valid values, and
// one clear error per bad value, with the same rules as smprof-run (both read
// through common/settings).
#include <gtest/gtest.h>

#include <map>

#include "injector/config.h"

namespace smprof::injector {
namespace {

Config Load(const std::map<std::string, std::string>& env, std::vector<std::string>* errors) {
  return LoadConfig(
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      errors);
}

TEST(InjectorConfig, Defaults) {
  std::vector<std::string> errors;
  const Config c = Load({}, &errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(c.settings.buffer_mb, kAutoBufferMb);
  EXPECT_EQ(c.shm_bytes(), 32ull << 20);
  EXPECT_EQ(c.settings.chunk_bytes, 65536u);
  EXPECT_EQ(c.settings.warp_mask, 0xffffffffu);
  EXPECT_TRUE(c.kernels_valid);
  EXPECT_TRUE(c.settings.kernels.selects_all());
}

TEST(InjectorConfig, ValidValues) {
  std::vector<std::string> errors;
  const Config c = Load({{"SMPROF_RUN_ID", "12-ab"},
                         {"SMPROF_BUFFER_MB", "8"},
                         {"SMPROF_CHUNK_BYTES", "4096"},
                         {"SMPROF_WARPS", "0,4-5,31"},
                         {"SMPROF_HIGH_WATER", "50"},
                         {"SMPROF_KERNELS", "gemm*,!gemm_slow"}},
                        &errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(c.run_id, "12-ab");
  EXPECT_EQ(c.settings.buffer_mb, 8u);
  EXPECT_EQ(c.settings.chunk_bytes, 4096u);
  EXPECT_EQ(c.settings.warp_mask, (1u << 0) | (1u << 4) | (1u << 5) | (1u << 31));
  EXPECT_EQ(c.settings.high_water_percent, 50u);
  EXPECT_TRUE(c.settings.kernels.Matches("gemm_fast(float*)"));
  EXPECT_TRUE(c.settings.kernels.Matches("void ns::gemm_tiled<64>(float const*, int)"));
  EXPECT_FALSE(c.settings.kernels.Matches("gemm_slow(float*)"));
}

TEST(InjectorConfig, BadValuesKeepDefaultsWithOneErrorEach) {
  std::vector<std::string> errors;
  const Config c = Load({{"SMPROF_BUFFER_MB", "lots"},
                         {"SMPROF_CHUNK_BYTES", "1000"},
                         {"SMPROF_WARPS", "3-1"},
                         {"SMPROF_HIGH_WATER", "99"}},
                        &errors);
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_EQ(errors[0].rfind("SMPROF_BUFFER_MB: ", 0), 0u) << errors[0];
  EXPECT_NE(errors[0].find("is not a size in MiB"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("; using auto"), std::string::npos) << errors[0];
  EXPECT_EQ(c.settings.buffer_mb, kAutoBufferMb);
  EXPECT_EQ(c.settings.chunk_bytes, 65536u);
  EXPECT_EQ(c.settings.warp_mask, 0xffffffffu);
  EXPECT_EQ(c.settings.high_water_percent, 75u);
}

// One rule for warp indices everywhere: smprof-run rejects 40, so the
// injector does too (it used to map it to warp 31).
TEST(InjectorConfig, WarpIndexAbove31IsAnErrorAsInSmprofRun) {
  std::vector<std::string> errors;
  const Config c = Load({{"SMPROF_WARPS", "0,40"}}, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("out of range"), std::string::npos) << errors[0];
  EXPECT_EQ(c.settings.warp_mask, 0xffffffffu);
}

TEST(InjectorConfig, BadKernelPatternTurnsProfilingOff) {
  std::vector<std::string> errors;
  const Config c = Load({{"SMPROF_KERNELS", "gemm["}}, &errors);
  EXPECT_FALSE(c.kernels_valid);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("SMPROF_KERNELS"), std::string::npos);
  EXPECT_NE(errors[0].find("profiling is off"), std::string::npos);
}

}  // namespace
}  // namespace smprof::injector
