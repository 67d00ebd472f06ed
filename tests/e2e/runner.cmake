# End-to-end tests of the real smprof-run binary (with the real collector).
# The test binary is also the program run (SMPROF_RUN_TEST_HELPER): a producer.
smprof_add_test(smprof_run_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/smprof_run_test.cc
  LIBS smprof::common smprof::collector smprof_json LABELS e2e)
add_dependencies(smprof_run_test smprof-run smprof_preload smprof_inject)
if(TARGET smprof-collector)
  add_dependencies(smprof_run_test smprof-collector)
endif()

# The signal tests once more under nohup (SIGHUP ignored from the start): a
# test that assumed a terminal's dispositions used to hang here for 120 s.
add_test(NAME e2e.smprof_run_signal_tests_under_nohup
  COMMAND nohup $<TARGET_FILE:smprof_run_test> --gtest_filter=SmprofRunTest.*Sig*)
set_tests_properties(e2e.smprof_run_signal_tests_under_nohup PROPERTIES LABELS e2e TIMEOUT 90
  ENVIRONMENT "SMPROF_BUILD_DIR=${PROJECT_BINARY_DIR};SMPROF_SOURCE_DIR=${PROJECT_SOURCE_DIR}")

# A stand-in libcupti that is always held by someone, and a client of it:
# the preload shim must name the client when smprof is the holder.
add_library(smprof_test_fake_cupti SHARED fake_cupti/fake_cupti.cc)
target_include_directories(smprof_test_fake_cupti PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
set_target_properties(smprof_test_fake_cupti PROPERTIES OUTPUT_NAME cupti SOVERSION 99
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib/fake_cupti)
add_executable(smprof_fake_cupti_client fake_cupti/fake_cupti_client.cc)
target_include_directories(smprof_fake_cupti_client PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(smprof_fake_cupti_client PRIVATE smprof_test_fake_cupti)
add_dependencies(smprof_run_test smprof_fake_cupti_client)
