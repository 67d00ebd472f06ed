// Injector configuration from the environment: defaults, valid values, and
// one clear error per bad value.
#include "injector/config.h"

#include <gtest/gtest.h>

#include <map>

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
  EXPECT_EQ(c.buffer_bytes, 64ull << 20);
  EXPECT_EQ(c.chunk_bytes, 1024u);
  EXPECT_EQ(c.warp_mask, 0xffffffffu);
  EXPECT_TRUE(c.kernels_valid);
  EXPECT_TRUE(c.kernels.selects_all());
}

TEST(InjectorConfig, ValidValues) {
  std::vector<std::string> errors;
  const Config c = Load({{"SMPROF_BUFFER_MB", "8"},
                         {"SMPROF_CHUNK_BYTES", "4096"},
                         {"SMPROF_WARPS", "0,4-5,40"},
                         {"SMPROF_HIGH_WATER", "50"},
                         {"SMPROF_KERNELS", "gemm*,!gemm_slow"}},
                        &errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(c.buffer_bytes, 8ull << 20);
  EXPECT_EQ(c.chunk_bytes, 4096u);
  EXPECT_EQ(c.warp_mask, (1u << 0) | (1u << 4) | (1u << 5) | (1u << 31));
  EXPECT_EQ(c.high_water_percent, 50u);
  EXPECT_TRUE(c.kernels.Matches("gemm_fast(float*)"));
  EXPECT_TRUE(c.kernels.Matches("void ns::gemm_tiled<64>(float const*, int)"));
  EXPECT_FALSE(c.kernels.Matches("gemm_slow(float*)"));
}

TEST(InjectorConfig, BadValuesKeepDefaultsWithOneErrorEach) {
  std::vector<std::string> errors;
  const Config c = Load({{"SMPROF_BUFFER_MB", "lots"},
                         {"SMPROF_CHUNK_BYTES", "1000"},
                         {"SMPROF_WARPS", "3-1"},
                         {"SMPROF_HIGH_WATER", "99"}},
                        &errors);
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_NE(errors[0].find("SMPROF_BUFFER_MB"), std::string::npos);
  EXPECT_EQ(c.buffer_bytes, 64ull << 20);
  EXPECT_EQ(c.chunk_bytes, 1024u);
  EXPECT_EQ(c.warp_mask, 0xffffffffu);
  EXPECT_EQ(c.high_water_percent, 75u);
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
