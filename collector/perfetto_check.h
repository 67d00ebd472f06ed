// PerfettoCheck: smprof's own reading of a Perfetto protobuf trace.
//
// Walks every packet with ProtoReader (no Perfetto code involved) and checks
// what Perfetto's trace processor needs but only reports in its stats table:
// every track event has a sequence id and a timestamp; a sequence is
// cleared (SEQ_INCREMENTAL_STATE_CLEARED) before it relies on interned data
// or defaults; every interned name is defined before its use in the current
// generation of its sequence; every track an event lands on has a
// descriptor; thread descriptors carry pid and tid; slices on a track close
// in LIFO order; counter values only on counter tracks (a CounterDescriptor),
// slices and instants only on others; a flow terminated
// (terminating_flow_ids) only after an event in file order began it
// (flow_ids). Incremental clocks (ClockSnapshot clocks 64-127 marked
// is_incremental and selected per packet or by the sequence's defaults) are
// accumulated so that the summary holds absolute times. Used by the tests on
// every protobuf trace smprof writes, with or without the trace processor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace smprof::perfetto {

struct TrackSummary {
  std::string name;                      // descriptor name, or the thread/process name
  uint64_t slices = 0;                   // closed BEGIN/END pairs
  uint64_t instants = 0;
  uint64_t open = 0;                     // BEGINs never closed
  bool counter = false;                  // a counter track
  uint64_t counter_values = 0;
  std::map<std::string, uint64_t> names;  // slice and instant names -> count
  uint64_t first_ns = UINT64_MAX;
  uint64_t last_ns = 0;
};

struct TraceSummary {
  uint64_t packets = 0;
  uint64_t track_events = 0;
  uint64_t descriptors = 0;
  uint64_t flows = 0;                       // terminated (terminating_flow_ids)
  std::map<uint64_t, TrackSummary> tracks;  // by uuid: every track with a descriptor
  std::vector<std::string> errors;          // empty for a trace Perfetto imports without loss
};

TraceSummary CheckTrace(std::string_view trace);

}  // namespace smprof::perfetto
