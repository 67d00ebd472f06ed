# End-to-end tests of the real smprof-run binary (with the real collector).
smprof_add_test(smprof_run_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/smprof_run_test.cc
  LIBS nlohmann_json::nlohmann_json LABELS e2e)
add_dependencies(smprof_run_test smprof-run)
if(TARGET smprof-collector)
  add_dependencies(smprof_run_test smprof-collector)
endif()
