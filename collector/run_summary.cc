#include "collector/run_summary.h"

#include <utility>

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
               {"host", lost_host},
               {"orphan", orphan_events},
               {"total", lost_total}};
  j["filtered_events"] = filtered_events;
  j["unattributed_events"] = unattributed_events;
  j["malformed_messages"] = malformed_messages;
  j["orphan_events"] = orphan_events;
  j["unterminated_ranges"] = unterminated_ranges;
  j["unmatched_ends"] = unmatched_ends;
  j["forced_drains"] = forced_drains;
  j["switched_drains"] = switched_drains;
  j["harvests"] = harvests;
  j["framing_errors"] = framing_errors;
  j["producers_incomplete"] = producers_incomplete;
  j["registry_full"] = registry_full;
  j["transport_unread_messages"] = transport_unread_messages;
  j["launches_opted_in"] = launches_opted_in;
  j["launches_not_selected"] = launches_not_selected;
  j["host_calls_forgotten"] = host_calls_forgotten;
  j["harvests_skipped"] = harvests_skipped;
  j["async_spans"] = async_spans;
  j["async_unterminated"] = async_unterminated;
  j["async_unmatched_ends"] = async_unmatched_ends;
  j["async_dropped"] = async_dropped;
  j["gpus"] = gpus;
  j["not_profiled"] = not_profiled;
  j["kernel_failures"] = kernel_failures;
  if (!stats_json.empty() || !stats_error.empty()) {
    j["stats"] = {{"json", stats_json}, {"csv", stats_csv}};
    if (!stats_error.empty()) j["stats"]["error"] = stats_error;
  }
  j["layout"] = layout;
  j["run"] = run;
  j["exit"] = exit;
  if (!trace_ok) j["trace_error"] = trace_error;
  return j;
}

nlohmann::json CollectorSummary::ToTraceJson() const {
  nlohmann::json j = ToJson();
  j["unknown_names"] = unknown_names;
  j["clamped_timestamps"] = clamped_timestamps;
  j["transport_messages_dropped"] = transport_messages_dropped;
  j["transport_unread_bytes"] = transport_unread_bytes;
  j["sink_waits"] = sink_waits;
  return j;
}

namespace {

// Reads `key` of `j` into `out`; false + *error when present with another type.
bool Get(const nlohmann::json& j, const char* key, uint64_t* out, std::string* error) {
  auto it = j.find(key);
  if (it == j.end()) {
    *error = std::string("the summary has no \"") + key + "\"";
    return false;
  }
  if (!it->is_number_unsigned()) {
    *error = std::string("the summary's \"") + key + "\" is not a count";
    return false;
  }
  *out = it->get<uint64_t>();
  return true;
}

bool Get(const nlohmann::json& j, const char* key, std::string* out, std::string* error) {
  auto it = j.find(key);
  if (it == j.end()) return true;  // optional
  if (!it->is_string()) {
    *error = std::string("the summary's \"") + key + "\" is not a string";
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

}  // namespace

bool CollectorSummary::FromJson(const nlohmann::json& j, CollectorSummary* out, std::string* error) {
  if (!j.is_object()) {
    *error = "the summary is not a JSON object";
    return false;
  }
  CollectorSummary s;
  const nlohmann::json lost = j.value("lost", nlohmann::json::object());
  if (!lost.is_object()) {
    *error = "the summary's \"lost\" is not an object";
    return false;
  }
  const bool ok =
      Get(j, "trace", &s.trace, error) && Get(j, "processes", &s.processes, error) &&
      Get(j, "launches", &s.launches, error) && Get(j, "events", &s.events, error) &&
      Get(lost, "device_buffer", &s.lost_device_buffer, error) &&
      Get(lost, "device_unplaced", &s.lost_device_unplaced, error) &&
      Get(lost, "transport", &s.lost_transport, error) &&
      (!lost.contains("host") || Get(lost, "host", &s.lost_host, error)) &&  // traces before it had none
      Get(lost, "total", &s.lost_total, error) && Get(j, "filtered_events", &s.filtered_events, error) &&
      Get(j, "unattributed_events", &s.unattributed_events, error) &&
      Get(j, "malformed_messages", &s.malformed_messages, error) && Get(j, "orphan_events", &s.orphan_events, error) &&
      Get(j, "unterminated_ranges", &s.unterminated_ranges, error) &&
      Get(j, "unmatched_ends", &s.unmatched_ends, error) && Get(j, "forced_drains", &s.forced_drains, error) &&
      Get(j, "harvests", &s.harvests, error) && Get(j, "framing_errors", &s.framing_errors, error) &&
      Get(j, "producers_incomplete", &s.producers_incomplete, error) &&
      Get(j, "registry_full", &s.registry_full, error) &&
      Get(j, "transport_unread_messages", &s.transport_unread_messages, error) &&
      Get(j, "launches_opted_in", &s.launches_opted_in, error) &&
      Get(j, "launches_not_selected", &s.launches_not_selected, error) &&
      Get(j, "trace_error", &s.trace_error, error) && Get(j, "layout", &s.layout, error);
  if (!ok) return false;
  // Optional: summaries from before it was counted.
  if (j.contains("host_calls_forgotten") && !Get(j, "host_calls_forgotten", &s.host_calls_forgotten, error)) {
    return false;
  }
  if (j.contains("harvests_skipped") && !Get(j, "harvests_skipped", &s.harvests_skipped, error)) return false;
  if (j.contains("switched_drains") && !Get(j, "switched_drains", &s.switched_drains, error)) return false;
  const std::pair<const char*, uint64_t*> async[] = {{"async_spans", &s.async_spans},
                                                     {"async_unterminated", &s.async_unterminated},
                                                     {"async_unmatched_ends", &s.async_unmatched_ends},
                                                     {"async_dropped", &s.async_dropped}};
  for (const auto& [key, field] : async) {
    if (j.contains(key) && !Get(j, key, field, error)) return false;
  }
  s.gpus = j.value("gpus", nlohmann::json::array());
  s.not_profiled = j.value("not_profiled", nlohmann::json::array());
  s.kernel_failures = j.value("kernel_failures", nlohmann::json::array());
  if (!s.gpus.is_array() || !s.not_profiled.is_array() || !s.kernel_failures.is_array()) {
    *error = "the summary's \"gpus\", \"not_profiled\" or \"kernel_failures\" is not an array";
    return false;
  }
  if (auto stats = j.find("stats"); stats != j.end()) {
    if (!stats->is_object() || !Get(*stats, "json", &s.stats_json, error) || !Get(*stats, "csv", &s.stats_csv, error) ||
        !Get(*stats, "error", &s.stats_error, error)) {
      if (error->empty()) *error = "the summary's \"stats\" is not an object";
      return false;
    }
  }
  s.run = j.value("run", nlohmann::json());
  s.exit = j.value("exit", nlohmann::json());
  s.trace_ok = !j.contains("trace_error");
  *out = std::move(s);
  return true;
}

}  // namespace smprof
