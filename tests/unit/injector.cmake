smprof_add_test(injector_core_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/harvest_test.cc ${CMAKE_CURRENT_LIST_DIR}/shipper_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/injector_config_test.cc
  LIBS smprof_injector_core
  LABELS unit)
