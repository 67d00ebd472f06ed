smprof_add_test(transport_two_process_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/transport_two_process_test.cc
  LIBS smprof_common
  LABELS e2e)
