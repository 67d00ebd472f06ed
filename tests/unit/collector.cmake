# Collector library: decoder (incl. fuzz loop), trace writer, collector fed in-process.
smprof_add_test(message_decoder_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/message_decoder_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(trace_writer_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace_writer_test.cc
  LIBS smprof::collector nlohmann_json::nlohmann_json
  LABELS unit)
smprof_add_test(collector_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/collector_test.cc
  LIBS smprof::collector nlohmann_json::nlohmann_json
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
  LIBS smprof::collector nlohmann_json::nlohmann_json
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
  LIBS smprof::collector nlohmann_json::nlohmann_json
  LABELS unit)
smprof_add_test(name_format_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/name_format_test.cc
  LIBS smprof::collector
  LABELS unit)
smprof_add_test(async_matcher_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/async_matcher_test.cc
  LIBS smprof::collector
  LABELS unit)
