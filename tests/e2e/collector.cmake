# The real smprof-collector binary fed through the real shared-memory transport.
smprof_add_test(collector_e2e_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/collector_e2e_test.cc
  LIBS smprof::common smprof::collector smprof_json
  LABELS e2e)
add_dependencies(collector_e2e_test smprof-collector smprof)

# Protobuf traces written with smprof's encoder, imported by Perfetto's trace processor.
smprof_add_test(perfetto_import_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/perfetto_import_test.cc
  LIBS smprof::collector
  LABELS e2e)

# One run through the collector library in both formats, imported by the real trace processor.
smprof_add_test(trace_import_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace_import_test.cc
  LIBS smprof::collector
  LABELS e2e)
