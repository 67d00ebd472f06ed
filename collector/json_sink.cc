#include "collector/json_sink.h"

#include <algorithm>
#include <climits>

#include "collector/run_summary.h"
#include "collector/trace_labels.h"
#include "smprof/wire.h"

namespace smprof {
namespace {

constexpr uint32_t kRunPid = 1;
constexpr uint32_t kLastProcessPid = 9;           // processes get 2..9 first
constexpr uint32_t kInitThreadTid = 0xFFFFFFFEu;  // host tid 1, whose JSON tid is the "harvests" thread's

// Each member of a JSON object as an arg (but `skip`), invalid UTF-8 replaced.
JsonArgs ArgsOf(const nlohmann::json& object, std::string_view skip = {}) {
  JsonArgs args;
  for (const auto& [name, value] : object.items()) {
    if (name != skip) args.Raw(name, value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return args;
}

}  // namespace

JsonSink::JsonSink(std::unique_ptr<TraceWriter> writer) : writer_(std::move(writer)) {
  writer_->ProcessName(kRunPid, "smprof run");
  writer_->ProcessSortIndex(kRunPid, -2000);
  writer_->ThreadName(kRunPid, 1, "run");
}

void JsonSink::OnRun(const nlohmann::json& run) {
  // At time 0, before everything else: a reader of a partial trace (the run
  // was killed) still sees what was run and how.
  const JsonArgs args = ArgsOf(run);
  writer_->Instant(kRunPid, 1, "smprof run", 0, &args);
  if (auto command = run.find("command"); command != run.end() && command->is_array()) {
    std::string text;
    for (const auto& word : *command) {
      if (word.is_string()) text += (text.empty() ? "" : " ") + word.get<std::string>();
    }
    writer_->ProcessLabels(kRunPid, internal::CommandLabel(text));
  }
}

void JsonSink::OnGpu(const trace::GpuRecord& gpu) {
  GpuTracks& g = gpus_[gpu.index];
  g.pid = AllocatePid();
  g.record = gpu;
  writer_->ProcessName(g.pid, internal::GpuTitle(gpu));
  writer_->ProcessSortIndex(g.pid, -1000 + static_cast<int64_t>(gpu.index));
  writer_->ProcessLabels(g.pid, internal::GpuFactsLine(gpu));
  // The labels are a viewer's nicety; the facts themselves, as queryable
  // args, go on an instant at time 0 (Perfetto keeps args, not labels).
  const JsonArgs args = ArgsOf(gpu.facts, "seen_as");
  writer_->ThreadName(g.pid, 0, "identity");
  writer_->Instant(g.pid, 0, "GPU " + std::to_string(gpu.index) + " identity", 0, &args);
}

void JsonSink::OnProcess(const trace::ProcessRecord& process) {
  const uint32_t pid = next_process_pid_ <= kLastProcessPid ? next_process_pid_++ : AllocatePid();
  process_pids_[process.index] = pid;
  writer_->ProcessSortIndex(pid, pid);
  writer_->ThreadName(pid, 1, "harvests");
}

void JsonSink::OnProcessNamed(const trace::ProcessRecord& process) {
  writer_->ProcessName(process_pids_[process.index], internal::ProcessTitle(process));
}

void JsonSink::OnNotice(const trace::ProcessRecord& process, uint64_t ts_ns, std::string_view reason,
                        std::string_view detail) {
  JsonArgs args;
  args.String("reason", reason).String("detail", detail);
  writer_->Instant(process_pids_[process.index], 1, internal::NoticeTitle(reason), ts_ns, &args);
  Touch(ts_ns);
}

uint32_t JsonSink::HostTid(uint32_t process, uint32_t tid, std::string_view name) {
  // Its own tid, but 1 (a container's init), which is the "harvests" thread.
  const uint32_t json_tid = tid != 1 ? tid : kInitThreadTid;
  if (host_tids_.insert({process, json_tid}).second) {
    const uint32_t pid = process_pids_[process];
    writer_->ThreadName(pid, json_tid, internal::HostThreadTitle(tid, name));
    writer_->ThreadSortIndex(pid, json_tid, static_cast<int64_t>(host_tids_.size()) + 1);
  }
  return json_tid;
}

void JsonSink::OnHarvest(const trace::ProcessRecord& process, const trace::HarvestRecord& h) {
  const uint32_t pid = process_pids_[process.index];
  JsonArgs args;
  args.Uint("device", h.device).Uint("dropped_events", h.dropped_events).Uint("unplaced_events", h.unplaced_events);
  writer_->Instant(pid, 1, internal::HarvestReasonName(h.reason), h.ts_ns, &args);
  if (h.tid != 0) {
    const uint32_t tid = HostTid(process.index, h.tid, h.thread);
    if (h.call.api != nullptr) {
      writer_->Complete(pid, tid, h.call.api, h.call.begin_ns, h.call.end_ns - h.call.begin_ns, nullptr);
    }
    JsonArgs host;
    host.Uint("device", h.device)
        .Uint("chunks_used", h.chunks_used)
        .Uint("chunks_total", h.chunks_total)
        .Uint("chunks_empty", h.chunks_empty);
    for (uint32_t s = 0; s < wire::kHarvestStages; ++s) host.Uint(internal::HarvestStageArg(s), h.stage_us[s]);
    writer_->Complete(pid, tid, internal::HarvestReasonName(h.reason), h.host_begin_ns, h.host_end_ns - h.host_begin_ns,
                      &host);
    Touch(std::max(h.host_end_ns, h.call.end_ns));
  }
  if (h.chunks_total != 0) {
    JsonArgs fill;
    fill.Uint("percent", h.chunks_used * uint64_t{100} / h.chunks_total);
    writer_->Counter(pid, "arena fill", h.ts_ns, fill);
  }
  if (h.dropped_events != 0 || h.unplaced_events != 0) {
    JsonArgs lost;
    lost.Uint("lost", h.lost_so_far);
    writer_->Counter(pid, "events lost (device buffer)", h.ts_ns, lost);
  }
  Touch(h.ts_ns);
  writer_->Flush();
}

void JsonSink::OnProcessLost(const trace::ProcessRecord& process, uint64_t ts_ns) {
  JsonArgs args;
  args.String("smprof_error", "producer ended without a clean detach");
  writer_->Instant(process_pids_[process.index], 1, "process lost", ts_ns, &args);
  Touch(ts_ns);
  writer_->Flush();
}

void JsonSink::OnLaunch(const trace::LaunchRecord& l) {
  LaunchTracks& t = launches_[l.index];
  t.pid = AllocatePid();
  writer_->ProcessName(t.pid, internal::LaunchTitle(l));
  writer_->ProcessSortIndex(t.pid, static_cast<int64_t>(std::min<uint64_t>(l.start_ns / 1000, INT32_MAX)));
  writer_->ThreadName(t.pid, 1, "kernel (CUPTI)");

  JsonArgs args;
  args.Uint("launch_id", l.launch_id)
      .Uint3("grid", l.grid)
      .Uint3("block", l.block)
      .Uint("device", l.device)
      .Uint("stream", l.stream)
      .Uint("correlation_id", l.correlation_id)
      .Uint("grid_id", l.grid_id)
      .Uint("graph_id", l.graph_id)
      .Uint("registers", l.registers)
      .Uint("dynamic_smem", l.dynamic_smem)
      .Uint("static_smem", l.static_smem)
      .Uint("pid", l.pid)
      .Raw("flags", internal::LaunchFlagsJson(l.flags));
  auto gpu = l.gpu >= 0 ? gpus_.find(static_cast<uint32_t>(l.gpu)) : gpus_.end();
  if (gpu != gpus_.end()) {
    args.Uint("gpu", gpu->first)
        .String("gpu_name", gpu->second.record.name)
        .String("gpu_uuid", gpu->second.record.uuid)
        .String("gpu_pci_bus_id", gpu->second.record.pci_bus_id);
  }
  if (l.flags & wire::kLaunchNoActivity) {
    args.String("note",
                "CUPTI reported no activity for this kernel: start and end are bounds taken from "
                "its recorded events");
  } else if (l.flags & wire::kLaunchRunning) {
    args.String("note", internal::kRunningLaunchNote);
  }
  // The launch API call (once per call) and its flow arrow to this span.
  JsonFlow flow;
  if (l.call.api != nullptr) {
    if (l.call_first) {
      const uint32_t pid = process_pids_[l.process];
      JsonArgs call;
      call.Uint("correlation_id", l.correlation_id);
      writer_->Complete(pid, HostTid(l.process, l.call.tid, l.call.thread), l.call.api, l.call.begin_ns,
                        l.call.end_ns - l.call.begin_ns, &call, {l.call_key, false, true});
      Touch(l.call.end_ns);
    }
    flow = {l.call_key, true, true};
  }
  writer_->Complete(t.pid, 1, l.kernel, l.start_ns, l.end_ns - l.start_ns, &args, flow);
  Touch(l.end_ns);

  // The same span on the physical GPU's track: one thread per process stream
  // (a stream runs one kernel at a time, so its spans never overlap).
  if (gpu != gpus_.end()) {
    GpuTracks& g = gpu->second;
    auto [it, inserted] = g.stream_tids.try_emplace({l.pid, l.stream}, g.next_tid);
    if (inserted) {
      ++g.next_tid;
      writer_->ThreadName(g.pid, it->second,
                          "pid " + std::to_string(l.pid) + " | cuda:" + std::to_string(l.device) + " | stream " +
                              std::to_string(l.stream));
    }
    JsonArgs span;
    span.Uint("launch_id", l.launch_id).Uint("pid", l.pid);
    writer_->Complete(g.pid, it->second, l.label, l.start_ns, l.end_ns - l.start_ns, &span);
  }
}

void JsonSink::OnWarp(const trace::LaunchRecord& launch, const trace::WarpRecord& warp) {
  LaunchTracks& t = launches_[launch.index];
  if (t.warp_tids.size() <= warp.index) t.warp_tids.resize(warp.index + 1, 0);
  if (t.warp_titles.size() <= warp.index) t.warp_titles.resize(warp.index + 1);
  t.warp_tids[warp.index] = t.next_tid++;
  t.warp_titles[warp.index] = internal::WarpTitle(warp);
  writer_->ThreadName(t.pid, t.warp_tids[warp.index], t.warp_titles[warp.index]);
}

uint32_t JsonSink::WarpTid(const trace::LaunchRecord& launch, LaunchTracks& t, const trace::WarpRecord& warp) {
  if (warp.index >= t.warp_tids.size() || t.warp_tids[warp.index] == 0) OnWarp(launch, warp);
  return t.warp_tids[warp.index];
}

uint32_t JsonSink::WarpTid(LaunchTracks& t, const trace::WarpRecord& warp, uint32_t lane) {
  if (lane == 0) return t.warp_tids[warp.index];
  auto [it, inserted] = t.lanes.try_emplace({warp.index, lane}, t.next_tid);
  if (inserted) {
    ++t.next_tid;
    writer_->ThreadName(t.pid, it->second, internal::WarpTitle(warp) + " | lane " + std::to_string(lane));
  }
  return it->second;
}

void JsonSink::OnSlice(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                       const trace::SliceRecord& slice) {
  LaunchTracks& t = launches_[launch.index];
  JsonArgs args;
  if (slice.unterminated) {
    args.Bool("unterminated", true);
    if (!slice.note.empty()) args.String("note", slice.note);
  } else {
    // SM cycles, exact: both ends were stamped by one SM's %clock64 (ranges
    // shorter than 2^32 cycles, about 2 s).
    args.Uint("cycles", slice.cycles);
  }
  if (slice.value.present) args.Int("value", slice.value.value);
  writer_->Complete(t.pid, WarpTid(t, warp, slice.lane), slice.name, slice.begin_ns, slice.end_ns - slice.begin_ns,
                    &args);
  Touch(slice.end_ns);
}

void JsonSink::OnInstant(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                         const trace::InstantRecord& instant) {
  LaunchTracks& t = launches_[launch.index];
  const uint32_t tid = t.warp_tids[warp.index];
  if (instant.value.counter && instant.value.present) {
    // Perfetto makes a counter track per (process, name, key): the warp's title as the key.
    JsonArgs sample;
    sample.Int(t.warp_titles[warp.index], instant.value.value);
    writer_->Counter(t.pid, tid, instant.name, instant.ts_ns, sample);
  } else if (instant.unmatched_end) {
    JsonArgs args;
    args.String("smprof_error", "unmatched end");
    if (instant.value.present) args.Int("value", instant.value.value);
    writer_->Instant(t.pid, tid, std::string(instant.name) + " (end without begin)", instant.ts_ns, &args);
  } else if (instant.value.present) {
    JsonArgs args;
    args.Int("value", instant.value.value);
    writer_->Instant(t.pid, tid, instant.name, instant.ts_ns, &args);
  } else {
    writer_->Instant(t.pid, tid, instant.name, instant.ts_ns, nullptr);
  }
  Touch(instant.ts_ns);
}

void JsonSink::OnAsyncSpan(const trace::LaunchRecord& launch, const trace::AsyncSpanRecord& span) {
  const trace::WarpRecord* const some = span.begin_warp != nullptr ? span.begin_warp : span.end_warp;
  if (some == nullptr) return;
  LaunchTracks& t = launches_[launch.index];
  const uint32_t begin_tid = span.begin_warp != nullptr ? WarpTid(launch, t, *span.begin_warp) : 0;
  const uint32_t end_tid = span.end_warp != nullptr ? WarpTid(launch, t, *span.end_warp) : begin_tid;
  const uint64_t end_ns = std::max(span.begin_ns, span.end_ns);
  JsonArgs args;
  args.Uint("token", span.token);
  if (span.begin_warp != nullptr) args.Uint("begin_warp", span.begin_warp->warp);
  if (span.end_warp != nullptr) args.Uint("end_warp", span.end_warp->warp);
  if (span.unmatched_end()) {
    args.String("smprof_error", "unmatched end");
  } else if (span.unterminated()) {
    args.Bool("unterminated", true);
  }
  writer_->Async('b', t.pid, span.begin_warp != nullptr ? begin_tid : end_tid, span.name, span.begin_ns, span.flow_id,
                 &args);
  writer_->Async('e', t.pid, end_tid, span.name, end_ns, span.flow_id, nullptr);
  // Its ends on the warps' threads, the flow from one to the other.
  if (span.begin_warp != nullptr) writer_->Instant(t.pid, begin_tid, span.name, span.begin_ns, nullptr);
  if (span.end_warp != nullptr) writer_->Instant(t.pid, end_tid, span.name, end_ns, nullptr);
  if (span.begin_warp != nullptr && span.end_warp != nullptr) {
    writer_->Flow('s', t.pid, begin_tid, span.name, span.begin_ns, span.flow_id);
    writer_->Flow('f', t.pid, end_tid, span.name, end_ns, span.flow_id);
  }
  Touch(end_ns);
}

void JsonSink::OnLaunchEnd(const trace::LaunchRecord& launch, const uint32_t* warps_in_order, size_t warp_count) {
  auto it = launches_.find(launch.index);
  if (it == launches_.end()) return;
  LaunchTracks& t = it->second;
  writer_->ThreadSortIndex(t.pid, 1, 0);
  int64_t index = 1;
  for (size_t i = 0; i < warp_count; ++i) {
    const uint32_t w = warps_in_order[i];
    writer_->ThreadSortIndex(t.pid, t.warp_tids[w], index++);
    for (auto lane = t.lanes.lower_bound({w, 0}); lane != t.lanes.end() && lane->first.first == w; ++lane) {
      writer_->ThreadSortIndex(t.pid, lane->second, index++);
    }
  }
  launches_.erase(it);
}

bool JsonSink::Flush() { return writer_->Flush(); }

bool JsonSink::Finish(const CollectorSummary& summary) {
  nlohmann::json args = summary.ToTraceJson();
  if (!summary.statistics.empty()) args["statistics"] = summary.statistics;
  const JsonArgs summary_args = ArgsOf(args);
  writer_->Instant(kRunPid, 1, "smprof run summary", last_ns_, &summary_args);
  return writer_->Finish();
}

}  // namespace smprof
