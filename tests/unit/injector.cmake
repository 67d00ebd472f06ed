smprof_add_test(injector_core_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/chunk_scan_test.cc ${CMAKE_CURRENT_LIST_DIR}/shipper_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/injector_config_test.cc ${CMAKE_CURRENT_LIST_DIR}/host_calls_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/chunk_sizing_test.cc ${CMAKE_CURRENT_LIST_DIR}/termination_test.cc
  LIBS smprof_injector_core
  LABELS unit)

# libsmprof_inject.so is a guest in the application: it exports its entry
# points only (InitializeInjection, smprof_inject_stop) and needs no shared
# spdlog, fmt or Boost at run time.
add_test(NAME injector.exports_only_its_entry_point
  COMMAND ${CMAKE_COMMAND} -DLIBRARY=$<TARGET_FILE:smprof_inject>
          -P ${CMAKE_CURRENT_LIST_DIR}/check_injector_exports.cmake)
set_tests_properties(injector.exports_only_its_entry_point PROPERTIES LABELS unit)

# The launch policy, device contexts and harvester against a fake GPU
# (tests/fakes/fake_gpu.h): CUPTI callbacks are the test's calls, and what
# the injector ships is assembled into launches by the collector's first
# stage (collector/launch_assembler.h).
smprof_add_test(injector_logic_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/profiler_test.cc ${CMAKE_CURRENT_LIST_DIR}/host_buffer_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/stream_tracker_test.cc ${CMAKE_CURRENT_LIST_DIR}/module_switch_test.cc
  LIBS smprof_injector_logic smprof::collector
  LABELS unit)
