# End-to-end tests of the real smprof-run binary (with the real collector).
# The test binary is also the program run (SMPROF_RUN_TEST_HELPER): a producer.
smprof_add_test(smprof_run_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/smprof_run_test.cc
  LIBS smprof::common nlohmann_json::nlohmann_json LABELS e2e)
add_dependencies(smprof_run_test smprof-run)
if(TARGET smprof-collector)
  add_dependencies(smprof_run_test smprof-collector)
endif()
