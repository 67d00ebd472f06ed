#include "collector/run_summary.h"

namespace smprof {

nlohmann::json CollectorSummary::ToJson() const {
  nlohmann::json j;
  j["trace"] = trace;
  j["processes"] = processes;
  j["launches"] = launches;
  j["events"] = events;
  j["lost"] = {{"device_buffer", lost_device_buffer},
               {"device_unplaced", lost_device_unplaced},
               {"transport", lost_transport},
               {"orphan", orphan_events},
               {"total", lost_total}};
  j["filtered_events"] = filtered_events;
  j["unattributed_events"] = unattributed_events;
  j["malformed_messages"] = malformed_messages;
  j["orphan_events"] = orphan_events;
  j["unterminated_ranges"] = unterminated_ranges;
  j["unmatched_ends"] = unmatched_ends;
  j["forced_drains"] = forced_drains;
  j["harvests"] = harvests;
  j["framing_errors"] = framing_errors;
  j["producers_incomplete"] = producers_incomplete;
  j["registry_full"] = registry_full;
  j["transport_unread_messages"] = transport_unread_messages;
  j["launches_opted_in"] = launches_opted_in;
  j["launches_not_selected"] = launches_not_selected;
  j["gpus"] = gpus;
  j["not_profiled"] = not_profiled;
  if (!stats_json.empty() || !stats_error.empty()) {
    j["stats"] = {{"json", stats_json}, {"csv", stats_csv}};
    if (!stats_error.empty()) j["stats"]["error"] = stats_error;
  }
  j["run"] = run;
  j["exit"] = exit;
  if (!trace_ok) j["trace_error"] = trace_error;
  return j;
}

}  // namespace smprof
