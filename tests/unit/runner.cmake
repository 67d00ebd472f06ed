# Unit tests of kernel names, the kernel filter and smprof-run's options.
smprof_add_test(names_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/names_test.cc
  LIBS smprof::common LABELS unit)
smprof_add_test(kernel_filter_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernel_filter_test.cc
  LIBS smprof::common LABELS unit)
smprof_add_test(run_options_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/run_options_test.cc
  LIBS smprof_runner_lib LABELS unit)
