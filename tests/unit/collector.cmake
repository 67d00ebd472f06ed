# Collector library: decoder (incl. fuzz loop), trace writer, collector fed in-process.
smprof_add_test(arena_decoder_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/arena_decoder_test.cc ${CMAKE_CURRENT_LIST_DIR}/launch_assembler_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(intake_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/intake_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(message_decoder_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/message_decoder_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(trace_writer_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace_writer_test.cc
  LIBS smprof::collector smprof_json
  LABELS unit)
smprof_add_test(collector_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/collector_test.cc
  LIBS smprof::collector smprof_json
  LABELS unit)
smprof_add_test(control_channel_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/control_channel_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(proto_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/proto_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(perfetto_check_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/perfetto_check_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(run_stats_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/run_stats_test.cc
  LIBS smprof::collector smprof_json
  LABELS unit)
smprof_add_test(perfetto_sink_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/perfetto_sink_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(range_matcher_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/range_matcher_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(trace_repair_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace_repair_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(async_sink_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/async_sink_test.cc
  LIBS smprof::collector smprof_json
  LABELS unit)
smprof_add_test(name_format_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/name_format_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(async_matcher_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/async_matcher_test.cc
  LIBS smprof::collector
  LABELS unit)

# The Python package's CPU tests (python/tests), on a run written through the
# collector's real sinks (tests/support/write_stats_run.cc) and read back with
# the built `smprof`, and smprof.profile() under the built smprof-run --serve
# (with the CUDA toolkit's stub libcuda.so, where it has one, the injector is
# loaded and started in the test's process).
add_executable(smprof_test_stats_run ${CMAKE_CURRENT_LIST_DIR}/../support/write_stats_run.cc)
target_include_directories(smprof_test_stats_run PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(smprof_test_stats_run PRIVATE smprof::collector)
smprof_host_flags(smprof_test_stats_run)
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME python.unit
    COMMAND ${Python3_EXECUTABLE} -m unittest discover -v -s ${PROJECT_SOURCE_DIR}/python/tests -t ${PROJECT_SOURCE_DIR}/python)
  set(_python_env "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;SMPROF_BUILD_DIR=${PROJECT_BINARY_DIR}"
    "SMPROF_TEST_STATS_RUN=$<TARGET_FILE:smprof_test_stats_run>")
  if(EXISTS "${CUDAToolkit_LIBRARY_DIR}/stubs/libcuda.so")
    list(APPEND _python_env "SMPROF_TEST_CUDA_STUB=${CUDAToolkit_LIBRARY_DIR}/stubs/libcuda.so")
  endif()
  set_tests_properties(python.unit PROPERTIES LABELS unit ENVIRONMENT "${_python_env}")
  set_property(TEST python.unit APPEND PROPERTY DEPENDS smprof_test_stats_run)
endif()
smprof_add_test(message_pipe_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/message_pipe_test.cc
  LIBS smprof::collector
  LABELS unit)
