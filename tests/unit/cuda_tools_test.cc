// Recognising other CUDA tools (common/cuda_tools.h): their front ends,
// binaries or scripts, and their injection in a process's environment.
#include "common/cuda_tools.h"

#include <gtest/gtest.h>

namespace smprof::cuda_tools {
namespace {

TEST(CudaToolsTest, FrontEndsAsBinariesOrScripts) {
  EXPECT_EQ(FrontendToolOfProcess("/opt/nvidia/nsight-compute/2025.3.1/ncu", "ncu", "-c"), "Nsight Compute (ncu)");
  EXPECT_EQ(FrontendToolOfProcess("/usr/bin/bash", "bash", "/usr/local/cuda/bin/ncu"), "Nsight Compute (ncu)");
  EXPECT_EQ(FrontendToolOfProcess("/usr/bin/dash", "/bin/sh", "/opt/nsight-systems/bin/nsys"), "Nsight Systems (nsys)");
  EXPECT_EQ(FrontendToolOfProcess("/usr/bin/python3.12", "python3", "train.py"), "");
  // argv[1] counts only when the executable is an interpreter running it.
  EXPECT_EQ(FrontendToolOfProcess("/usr/bin/cat", "cat", "ncu"), "");
  EXPECT_EQ(FrontendToolOfProcess("/app/ncu-like", "ncu-like", ""), "");
}

TEST(CudaToolsTest, InjectionByAnotherTool) {
  std::string_view evidence;
  const char* const* kNoEnv = nullptr;
  EXPECT_EQ(InjectingTool("", "", kNoEnv, "/p/lib/smprof/libsmprof_inject.so", &evidence), "");
  EXPECT_EQ(InjectingTool("/p/lib/smprof/libsmprof_inject.so", "/p/lib/smprof/libsmprof_preload.so", kNoEnv,
                          "/p/lib/smprof/libsmprof_inject.so", &evidence),
            "");
  // The same library reached through another directory is still smprof's.
  EXPECT_EQ(InjectingTool("/other/libsmprof_inject.so", "", kNoEnv, "/p/lib/smprof/libsmprof_inject.so", &evidence),
            "");
  EXPECT_EQ(InjectingTool("/opt/x/libcuda-injection.so", "", kNoEnv, "", &evidence), "Nsight Compute (ncu)");
  EXPECT_EQ(evidence, "/opt/x/libcuda-injection.so");
  EXPECT_EQ(InjectingTool("/opt/x/libmytool.so", "", kNoEnv, "", &evidence), "another CUDA tool");
  EXPECT_EQ(InjectingTool("", "/a/libfoo.so:/opt/nsight-systems/target/libToolsInjection64.so", kNoEnv, "", &evidence),
            "Nsight Systems (nsys)");
  EXPECT_EQ(evidence, "/opt/nsight-systems/target/libToolsInjection64.so");
  EXPECT_EQ(InjectingTool("", "/a/libfoo.so /b/libbar.so", kNoEnv, "", &evidence), "");
  // Under ncu the program sees neither variable, only Nsight's own settings.
  const char* const env[] = {"PATH=/usr/bin", "NV_NSIGHT_INJECTION_TRANSPORT_TYPE=uds", nullptr};
  EXPECT_EQ(InjectingTool("", "", env, "", &evidence), "an Nsight tool (Nsight Compute or Nsight Systems)");
  EXPECT_EQ(evidence, "NV_NSIGHT_INJECTION_TRANSPORT_TYPE=uds");
  const char* const plain[] = {"PATH=/usr/bin", "NV_LIBNPP_VERSION=13.0", nullptr};
  EXPECT_EQ(InjectingTool("", "", plain, "", &evidence), "");
}

}  // namespace
}  // namespace smprof::cuda_tools
