# SMPROF_REQUIRE_GPU=1 must turn a GPU test's skip into a failure, so that a
# run meant to prove the GPU path cannot pass by skipping. Checked where there
# is no GPU (CI); on a GPU machine the GPU tests themselves run under it.
#   cmake -DTEST_BINARY=<gpu_scenarios_test> -P check_required_gpu.cmake
execute_process(COMMAND nvidia-smi -L RESULT_VARIABLE have_gpu OUTPUT_QUIET ERROR_QUIET)
if(have_gpu EQUAL 0)
  message("a GPU is present: the gpu tests run under SMPROF_REQUIRE_GPU=1 themselves; nothing to check here")
  return()
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env SMPROF_REQUIRE_GPU=0 ${TEST_BINARY}
                        --gtest_filter=GpuScenarios.BasicCountsNamesAndUnoptedModule
                RESULT_VARIABLE skipped_rc OUTPUT_VARIABLE skipped_out ERROR_VARIABLE skipped_out)
if(NOT skipped_rc EQUAL 0 OR NOT skipped_out MATCHES "SKIPPED")
  message(FATAL_ERROR "without SMPROF_REQUIRE_GPU the test should skip visibly:\n${skipped_out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env SMPROF_REQUIRE_GPU=1 ${TEST_BINARY}
                        --gtest_filter=GpuScenarios.BasicCountsNamesAndUnoptedModule
                RESULT_VARIABLE required_rc OUTPUT_VARIABLE required_out ERROR_VARIABLE required_out)
if(required_rc EQUAL 0 OR NOT required_out MATCHES "SMPROF_REQUIRE_GPU=1 forbids skipping")
  message(FATAL_ERROR "with SMPROF_REQUIRE_GPU=1 and no GPU the test must fail:\n${required_out}")
endif()
message("skips without SMPROF_REQUIRE_GPU, fails with SMPROF_REQUIRE_GPU=1")
