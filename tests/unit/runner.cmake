# Unit tests of kernel names, the kernel and launch filters, smprof-run's options,
# its helper paths and its --serve protocol.
smprof_add_test(names_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/names_test.cc
  LIBS smprof::common LABELS unit)
smprof_add_test(kernel_filter_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernel_filter_test.cc
  LIBS smprof::common LABELS unit)
smprof_add_test(launch_filter_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/launch_filter_test.cc
  LIBS smprof::common Threads::Threads LABELS unit)
smprof_add_test(run_options_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/run_options_test.cc
  LIBS smprof_runner_lib LABELS unit)
smprof_add_test(install_layout_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/install_layout_test.cc
  LIBS smprof_runner_lib LABELS unit)
include(SmprofInstallDirs)
target_compile_definitions(install_layout_test PRIVATE
  SMPROF_TEST_INSTALL_BINDIR="${SMPROF_INSTALL_BINDIR}"
  SMPROF_TEST_INSTALL_HELPER_EXECDIR="${SMPROF_INSTALL_HELPER_EXECDIR}"
  SMPROF_TEST_INSTALL_HELPER_LIBDIR="${SMPROF_INSTALL_HELPER_LIBDIR}")
smprof_add_test(settings_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/settings_test.cc
  LIBS smprof::common LABELS unit)
smprof_add_test(cuda_tools_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_tools_test.cc
  LIBS smprof::common LABELS unit)
smprof_add_test(serve_session_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/serve_session_test.cc
  LIBS smprof_runner_lib Threads::Threads LABELS unit)
