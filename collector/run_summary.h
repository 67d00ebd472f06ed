// CollectorSummary: the run's outcome in one typed structure.
//
// The collector fills it; the trace writers put it into the trace; the
// collector writes it as JSON beside the trace (--summary), and smprof-run
// reads that file back with FromJson into the same structure, so both sides
// agree on one definition of every counter.
#pragma once

#include <cstdint>
#include <string>

#include "common/json.h"

namespace smprof {

struct CollectorSummary {
  std::string trace;       // where the trace is: the placed file, or the partial one after an error
  uint64_t processes = 0;  // producers seen
  uint64_t launches = 0;   // launches written
  // Device events written to the trace: a BEGIN/END pair counts 2, an
  // instant, a phase boundary (PHASE, PHASE_END) and an async BEGIN or END
  // 1, a 64-bit value's continuation 0.
  uint64_t events = 0;
  uint64_t lost_device_buffer = 0;
  uint64_t lost_device_unplaced = 0;
  // Events the producers dropped (ConsumerStats::producer_events_dropped),
  // including those they sent after the collector began its final drain
  // (Consumer::Close) and stats() read at the end of that drain.
  uint64_t lost_transport = 0;
  // Events the producers read back but never shipped (StatsMsg::events_lost_host).
  uint64_t lost_host = 0;
  // device buffer + unplaced + transport + host + orphan_events: every event
  // that was recorded on the GPU but is not in the trace.
  uint64_t lost_total = 0;
  uint64_t filtered_events = 0;
  uint64_t unattributed_events = 0;
  uint64_t malformed_messages = 0;
  // Events of an unknown (or already finalized) launch, e.g. of a LaunchMsg
  // the transport dropped: not in the trace, so counted in lost_total too.
  uint64_t orphan_events = 0;
  uint64_t unterminated_ranges = 0;  // phases still open at their launch's end included
  uint64_t unmatched_ends = 0;       // PHASE_ENDs with no phase open included
  // Async spans handed to the sinks (every AsyncSpanRecord); of them,
  // unterminated (no END: ended with the launch) and unmatched ends (an END
  // that closed nothing: spans of length 0). Async events beyond
  // kMaxAsyncEvents per launch are dropped (not in the trace, not in
  // `events`) and counted in async_dropped.
  uint64_t async_spans = 0;
  uint64_t async_unterminated = 0;
  uint64_t async_unmatched_ends = 0;
  uint64_t async_dropped = 0;
  uint64_t forced_drains = 0;
  // Of them, drains that switched arena segments: the application did not
  // wait for its kernels (HarvestMsg kHarvestSwitched).
  uint64_t switched_drains = 0;
  uint64_t harvests = 0;
  uint64_t framing_errors = 0;
  uint64_t producers_incomplete = 0;  // ended without a clean detach, or still attached at Finish
  uint64_t registry_full = 0;         // processes refused for lack of a registry entry (--max-producers)
  // Messages still unread in the rings when the final drain timed out: their
  // events are lost but cannot be counted (ConsumerStats::unread_messages).
  uint64_t transport_unread_messages = 0;
  // Launch calls of kernels that include the markers, and of those, the ones
  // SMPROF_KERNELS did not select (from the producers' StatsMsgs).
  uint64_t launches_opted_in = 0;
  uint64_t launches_not_selected = 0;
  // Launch API calls the injector forgot before their kernels shipped (its
  // limit per harvest cycle): those launches have no call in the trace.
  uint64_t host_calls_forgotten = 0;
  // Read-backs the producers skipped with every buffer still queued
  // (SMPROF_BACKLOG drop; StatsMsg::harvests_skipped).
  uint64_t harvests_skipped = 0;
  // [{"index", "name", "uuid", "pci_bus_id", "sm_count", "compute_capability",
  //   "sm_clock_khz", "timer_resolution_ns", "seen_as": [{"pid", "ordinal"}]}]
  nlohmann::json gpus = nlohmann::json::array();
  // [{"pid", "reason", "detail"}]: processes that told why they were not profiled.
  nlohmann::json not_profiled = nlohmann::json::array();
  // [{"pid", "detail"}]: GPU contexts in which a kernel's execution failed
  // (the error, the launches that may have failed, what could not be read).
  nlohmann::json kernel_failures = nlohmann::json::array();
  // The statistics files (stats_sink.h), "" when none were asked for or
  // writing them failed (stats_error says why).
  std::string stats_json;
  std::string stats_csv;
  std::string stats_error;
  // How the trace lays out warps (perfetto_sink.h: which layout, from which
  // launch on, and why).
  std::string layout;
  nlohmann::json run;   // the run's metadata from smprof-run (null if none came)
  nlohmann::json exit;  // how the program ended, from smprof-run (null if not told)
  // In the trace's summary instant only (not in ToJson):
  uint64_t unknown_names = 0;               // events written under "<unknown name #id>"
  uint64_t clamped_timestamps = 0;          // timestamps before the base, written as 0
  uint64_t transport_messages_dropped = 0;  // ConsumerStats::producer_messages_dropped
  uint64_t transport_unread_bytes = 0;      // ConsumerStats::unread_bytes
  // Times the collector's decoding thread waited for a sink thread to catch
  // up (AsyncSink::waits; the overflow policy of its queue is to wait).
  uint64_t sink_waits = 0;
  // The run's statistics (stats_report.h ToJson, compact text), so that the
  // trace answers `smprof stats` by itself; "" when none were computed.
  std::string statistics;
  // In ToJson only when writing the trace failed:
  bool trace_ok = true;  // false if writing the trace failed
  std::string trace_error;

  // {"trace", "processes", "launches", "events", "lost": {"device_buffer",
  // "device_unplaced", "transport", "host", "orphan", "total"}, "filtered_events",
  // ..., "producers_incomplete", "registry_full", "transport_unread_messages",
  // "launches_opted_in", "launches_not_selected", "host_calls_forgotten", "harvests_skipped",
  // "async_spans", "async_unterminated", "async_unmatched_ends", "async_dropped",
  // "gpus", "not_profiled", "kernel_failures",
  // "layout", "run", "exit"}, "stats" when statistics were written, plus "trace_error" when writing or placing the
  // trace failed (the trace then ends, still strict JSON, after the last event written whole, and "trace" names where
  // it is).
  nlohmann::json ToJson() const;
  // ToJson and the counters only the trace's summary instant carries.
  nlohmann::json ToTraceJson() const;
  // The inverse of ToJson (smprof-run reads the collector's summary with
  // it). False + *error naming the key on anything ToJson does not write.
  static bool FromJson(const nlohmann::json& j, CollectorSummary* out, std::string* error);
};

}  // namespace smprof
