smprof_add_test(transport_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/transport_test.cc
  LIBS smprof_common
  LABELS unit)
