#include "collector/perfetto_sink.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "collector/perfetto_annotations.h"
#include "collector/perfetto_fields.h"
#include "collector/proto_reader.h"
#include "collector/run_summary.h"
#include "collector/trace_labels.h"
#include "smprof/wire.h"

namespace smprof {

using perfetto::Annotations;
using perfetto::AsyncLane;
using perfetto::AsyncTracks;
using perfetto::Gpu;
using perfetto::kInstant;
using perfetto::kLaneSlots;
using perfetto::kNoWarp;
using perfetto::kSliceBegin;
using perfetto::kSliceEnd;
using perfetto::Lane;
using perfetto::Launch;
using perfetto::Process;
using perfetto::UserCounter;
using perfetto::Warp;

namespace {

// Async spans' flows: their ids with this bit, apart from the launch calls'.
constexpr uint64_t kAsyncFlow = uint64_t{1} << 63;

// The Perfetto format's cut (TraceFile::Format): the buffer holds whole
// packets, so the file ends inside one unless the failed write began or
// ended at a packet boundary.
std::string CutAfterLastPacket(int fd, uint64_t at, std::string_view reached, uint64_t* written) {
  const size_t whole = proto::WholePackets(reached);
  *written = at + whole;
  if (whole == reached.size()) return "; the trace ends after the last packet written whole";
  if (::ftruncate(fd, static_cast<off_t>(at + whole)) == 0) {
    return "; the trace was cut after the last packet written whole";
  }
  return "; the trace may end inside a packet";
}

constexpr TraceFile::Format kPerfettoFile{/*read_back=*/false, &CutAfterLastPacket};

}  // namespace

// --- opening, closing ------------------------------------------------------

std::unique_ptr<PerfettoSink> PerfettoSink::Open(const std::string& path, bool exclusive, std::string* error) {
  std::unique_ptr<PerfettoSink> sink(new PerfettoSink());
  if (!sink->file_.Open(path, exclusive, kPerfettoFile, error)) return nullptr;
  sink->run_track_ = sink->tracks_.NewTrack(0, "smprof run", -2000, false);
  if (!sink->Flush()) {
    if (error) *error = sink->error();
    return nullptr;
  }
  return sink;
}

PerfettoSink::PerfettoSink() = default;

PerfettoSink::~PerfettoSink() = default;

bool PerfettoSink::Flush() { return file_.Flush(); }

bool PerfettoSink::ParseCyclesEncoding(std::string_view word, CyclesEncoding* encoding) {
  if (word == "none") {
    *encoding = CyclesEncoding::kNone;
  } else if (word == "counter") {
    *encoding = CyclesEncoding::kCounter;
  } else if (word == "args") {
    *encoding = CyclesEncoding::kAnnotation;
  } else {
    return false;
  }
  return true;
}

// --- run, GPUs, processes --------------------------------------------------

void PerfettoSink::OnRun(const nlohmann::json& run) {
  if (failed() || finished_) return;
  Annotations args;
  args.Members(run);
  tracks_.Event(run_track_, kInstant, "smprof run", 0, &args);
}

void PerfettoSink::OnGpu(const trace::GpuRecord& gpu) {
  if (failed() || finished_) return;
  auto& g = gpus_[gpu.index];
  g = std::make_unique<Gpu>();
  g->name = gpu.name;
  g->uuid = gpu.uuid;
  g->pci_bus_id = gpu.pci_bus_id;
  g->track = tracks_.NewTrack(0, internal::GpuTitle(gpu), -1000 + static_cast<int64_t>(gpu.index), true,
                              internal::GpuFactsLine(gpu));
  Annotations args;
  args.Members(gpu.facts, "seen_as");
  tracks_.Event(g->track, kInstant, "GPU " + std::to_string(gpu.index) + " identity", 0, &args);
}

Process& PerfettoSink::ProcessOf(const trace::ProcessRecord& process) {
  auto& p = processes_[process.index];
  if (!p) {
    p = std::make_unique<Process>();
    p->record = process;
  }
  return *p;
}

uint64_t PerfettoSink::ProcessTrack(Process& p) {
  if (p.track == 0) {
    p.track = tracks_.NewTrack(0, internal::ProcessTitle(p.record), static_cast<int64_t>(p.record.index), false);
  }
  return p.track;
}

uint64_t PerfettoSink::HostThreadTrack(Process& p, uint32_t tid, std::string_view name) {
  auto [it, inserted] = p.threads.try_emplace(tid, 0);
  if (!inserted) return it->second;
  if (p.host_track == 0) p.host_track = tracks_.NewProcessTrack(p.record.pid, p.record.command);
  it->second = tracks_.NewThreadTrack(p.record.pid, tid, internal::HostThreadTitle(tid, name));
  return it->second;
}

void PerfettoSink::OnProcess(const trace::ProcessRecord& process) {
  if (failed() || finished_) return;
  Process& p = ProcessOf(process);
  // Perfetto keeps a track's first name: an unknown command waits for
  // OnProcessNamed, or for the first event on the track.
  if (process.command != "?") ProcessTrack(p);
}

void PerfettoSink::OnProcessNamed(const trace::ProcessRecord& process) {
  if (failed() || finished_) return;
  Process& p = ProcessOf(process);
  p.record = process;  // the pid too: the process's own may differ from the one it attached with
  if (p.track == 0) {
    ProcessTrack(p);
  } else {
    // Named after an event needed the track: the name cannot change now.
    Annotations args;
    args.String("command", process.command);
    tracks_.Event(p.track, kInstant, "process named", last_ns(), &args);
  }
}

void PerfettoSink::OnNotice(const trace::ProcessRecord& process, uint64_t ts_ns, std::string_view reason,
                            std::string_view detail) {
  if (failed() || finished_) return;
  Annotations args;
  args.String("reason", reason).String("detail", detail);
  tracks_.Event(ProcessTrack(ProcessOf(process)), kInstant, internal::NoticeTitle(reason), ts_ns, &args);
}

void PerfettoSink::OnHarvest(const trace::ProcessRecord& process, const trace::HarvestRecord& harvest) {
  if (failed() || finished_) return;
  Process& p = ProcessOf(process);
  const uint64_t track = ProcessTrack(p);
  Annotations args;
  args.Uint("device", harvest.device)
      .Uint("dropped_events", harvest.dropped_events)
      .Uint("unplaced_events", harvest.unplaced_events);
  tracks_.Event(track, kInstant, internal::HarvestReasonName(harvest.reason), harvest.ts_ns, &args);
  if (p.lost_track == 0) {
    p.lost_track = tracks_.NewCounterTrack(track, "events lost (device buffer)");
    p.harvested_track = tracks_.NewCounterTrack(track, "events harvested");
  }
  tracks_.Counter(p.lost_track, harvest.ts_ns, harvest.lost_so_far);
  tracks_.Counter(p.harvested_track, harvest.ts_ns, p.events);
  p.events = 0;
  if (harvest.chunks_total != 0) {
    if (p.fill_track == 0) p.fill_track = tracks_.NewCounterTrack(track, "arena fill (%)");
    tracks_.Counter(p.fill_track, harvest.ts_ns, harvest.chunks_used * uint64_t{100} / harvest.chunks_total);
  }
  // The harvest on the host: inside the synchronising call that ran it.
  if (harvest.tid != 0) {
    const uint64_t thread = HostThreadTrack(p, harvest.tid, harvest.thread);
    if (harvest.call.api != nullptr) {
      tracks_.Event(thread, kSliceBegin, harvest.call.api, harvest.call.begin_ns, nullptr);
    }
    Annotations host;
    host.Uint("device", harvest.device)
        .Uint("chunks_used", harvest.chunks_used)
        .Uint("chunks_total", harvest.chunks_total)
        .Uint("chunks_empty", harvest.chunks_empty);
    for (uint32_t s = 0; s < wire::kHarvestStages; ++s) host.Uint(internal::HarvestStageArg(s), harvest.stage_us[s]);
    tracks_.Slice(thread, internal::HarvestReasonName(harvest.reason), harvest.host_begin_ns, harvest.host_end_ns,
                  &host);
    if (harvest.call.api != nullptr) tracks_.Event(thread, kSliceEnd, {}, harvest.call.end_ns, nullptr);
  }
}

void PerfettoSink::OnProcessLost(const trace::ProcessRecord& process, uint64_t ts_ns) {
  if (failed() || finished_) return;
  Annotations args;
  args.String("smprof_error", "producer ended without a clean detach");
  tracks_.Event(ProcessTrack(ProcessOf(process)), kInstant, "process lost", ts_ns, &args);
}

// --- launches and warps ----------------------------------------------------

void PerfettoSink::OnLaunch(const trace::LaunchRecord& launch) {
  if (failed() || finished_) return;
  auto& slot = launches_[launch.index];
  slot = std::make_unique<Launch>();
  Launch& l = *slot;
  last_launch_ = &l;
  last_launch_index_ = launch.index;
  l.process = launch.process;
  std::copy(launch.grid, launch.grid + 3, l.grid);
  l.index = launch.index;
  l.hardware = hardware_.Choose(launch, run_track_);
  l.launch_id = launch.launch_id;
  l.pid = launch.pid;

  const auto git = launch.gpu >= 0 ? gpus_.find(static_cast<uint32_t>(launch.gpu)) : gpus_.end();
  Gpu* gpu = git != gpus_.end() ? git->second.get() : nullptr;
  if (l.hardware) {
    l.gpu = &hardware_.GpuOf(launch);
    l.title = "#" + std::to_string(launch.launch_id) + " " + launch.label;
  } else {
    l.track = tracks_.NewTrack(gpu != nullptr ? gpu->track : 0, internal::LaunchTitle(launch),
                               static_cast<int64_t>(launch.start_ns / 1000), true);
  }

  Annotations args;
  args.Uint("launch_id", launch.launch_id)
      .Json("grid", {launch.grid[0], launch.grid[1], launch.grid[2]})
      .Json("block", {launch.block[0], launch.block[1], launch.block[2]})
      .Uint("device", launch.device)
      .Uint("stream", launch.stream)
      .Uint("correlation_id", launch.correlation_id)
      .Uint("grid_id", launch.grid_id)
      .Uint("graph_id", launch.graph_id)
      .Uint("registers", launch.registers)
      .Uint("dynamic_smem", launch.dynamic_smem)
      .Uint("static_smem", launch.static_smem)
      .Uint("pid", launch.pid)
      .Json("flags", nlohmann::json::parse(internal::LaunchFlagsJson(launch.flags)));
  if (gpu != nullptr) {
    args.Uint("gpu", static_cast<uint32_t>(launch.gpu))
        .String("gpu_name", gpu->name)
        .String("gpu_uuid", gpu->uuid)
        .String("gpu_pci_bus_id", gpu->pci_bus_id);
  }
  if (launch.flags & wire::kLaunchNoActivity) {
    args.String("note",
                "CUPTI reported no activity for this kernel: start and end are bounds taken from "
                "its recorded events");
  } else if (launch.flags & wire::kLaunchRunning) {
    args.String("note", internal::kRunningLaunchNote);
  }
  // The launch API call (once per call), a flow arrow from it to the
  // kernel's span: the launch's own track, else its stream's.
  const uint64_t flow = launch.call.api != nullptr ? launch.call_key : 0;
  if (flow != 0 && launch.call_first) {
    auto pit = processes_.find(launch.process);
    if (pit != processes_.end()) {
      Annotations call;
      call.Uint("correlation_id", launch.correlation_id);
      tracks_.Slice(HostThreadTrack(*pit->second, launch.call.tid, launch.call.thread), launch.call.api,
                    launch.call.begin_ns, launch.call.end_ns, &call, flow);
    }
  }
  if (!l.hardware) {
    tracks_.Slice(l.track, launch.kernel, launch.start_ns, launch.end_ns, &args, flow);
  } else {
    gpu = l.gpu;  // an undescribed GPU's streams too
  }

  // The same span on the GPU's track of the process's stream (a stream runs
  // one kernel at a time, so its spans never overlap); with the launch's
  // args when it has no track of its own.
  if (gpu != nullptr) {
    auto [it, inserted] = gpu->streams.try_emplace({launch.pid, launch.stream}, 0);
    if (inserted) {
      it->second = tracks_.NewTrack(gpu->track,
                                    "pid " + std::to_string(launch.pid) + " | cuda:" + std::to_string(launch.device) +
                                        " | stream " + std::to_string(launch.stream),
                                    INT32_MIN + static_cast<int64_t>(gpu->streams.size()), false);
    }
    Annotations span;
    if (l.hardware) {
      args.String("kernel", launch.kernel);
    } else {
      span.Uint("launch_id", launch.launch_id).Uint("pid", launch.pid);
    }
    tracks_.Slice(it->second, launch.label, launch.start_ns, launch.end_ns, l.hardware ? &args : &span,
                  l.hardware ? flow : 0);
  }
}

inline Launch& PerfettoSink::LaunchOf(const trace::LaunchRecord& launch) {
  if (last_launch_ != nullptr && last_launch_index_ == launch.index) return *last_launch_;
  auto it = launches_.find(launch.index);
  if (it == launches_.end()) {
    OnLaunch(launch);  // not announced: announce it now
    it = launches_.find(launch.index);
  }
  last_launch_ = it->second.get();
  last_launch_index_ = launch.index;
  return *last_launch_;
}

void PerfettoSink::OnWarp(const trace::LaunchRecord& launch, const trace::WarpRecord& warp) {
  if (failed() || finished_) return;
  DescribedWarp(LaunchOf(launch), warp);
}

void PerfettoSink::DescribeWarp(Launch& l, const trace::WarpRecord& warp) {
  if (warp.index >= l.warps.size()) l.warps.resize(static_cast<size_t>(warp.index) + 1);
  Warp& w = l.warps[warp.index];
  w.warp = warp.warp;
  w.described = true;
  if (l.hardware) {  // placed at its first record
    w.sm = warp.sm;
    w.hw_warp = warp.hw_warp;
    std::copy(warp.block, warp.block + 3, w.block);
    return;
  }

  auto [sm, new_sm] = l.sms.try_emplace(warp.sm, 0);
  if (new_sm) {
    char name[16];
    std::snprintf(name, sizeof(name), "SM %03u", static_cast<unsigned>(warp.sm));
    sm->second = tracks_.NewTrack(l.track, name, warp.sm, true);
  }
  auto [block, new_block] = l.blocks.try_emplace({warp.sm, warp.block[2], warp.block[1], warp.block[0]}, 0);
  if (new_block) {
    const uint64_t linear = warp.block[0] + static_cast<uint64_t>(l.grid[0]) *
                                                (warp.block[1] + static_cast<uint64_t>(l.grid[1]) * warp.block[2]);
    block->second = tracks_.NewTrack(sm->second, internal::BlockLabel(warp),
                                     static_cast<int64_t>(std::min<uint64_t>(linear, INT32_MAX)), true);
  }
  w.block_track = block->second;
  w.track = tracks_.NewTrack(w.block_track, "warp " + std::to_string(warp.warp),
                             static_cast<int64_t>(warp.warp) * kLaneSlots, false);
  if (sequences_.cycles_counters()) w.cycles = tracks_.NewCounterTrack(w.track, "cycles");
}

inline Warp& PerfettoSink::DescribedWarp(Launch& l, const trace::WarpRecord& warp) {
  if (warp.index >= l.warps.size() || !l.warps[warp.index].described) DescribeWarp(l, warp);
  return l.warps[warp.index];
}

inline Warp& PerfettoSink::ActiveWarp(Launch& l, const trace::WarpRecord& warp) {
  if (warp.index == l.current) return l.warps[warp.index];
  return SwitchWarp(l, warp);
}

Warp& PerfettoSink::SwitchWarp(Launch& l, const trace::WarpRecord& warp) {
  if (l.current != kNoWarp) sequences_.End(l.warps[l.current].seq);
  Warp& w = DescribedWarp(l, warp);
  l.current = warp.index;
  // A warp without a slice yet gets its sequence when placed.
  if (!l.hardware || w.span_open) sequences_.Start(w.seq, Lane{w.track, w.cycles});
  return w;
}

const Lane& PerfettoSink::LaneOf(Warp& w, uint32_t lane) {
  std::vector<Lane>& lanes = perfetto::LanesOf(w);
  if (lanes.size() < lane) lanes.resize(lane);
  Lane& l = lanes[lane - 1];
  if (l.track == 0 && w.slot != nullptr) {
    hardware_.DescribeLane(*w.slot, lane, &l);
  } else if (l.track == 0) {
    l.track = tracks_.NewTrack(w.block_track, "warp " + std::to_string(w.warp) + " lane " + std::to_string(lane),
                               static_cast<int64_t>(w.warp) * kLaneSlots + std::min(lane, kLaneSlots - 1), false);
    if (sequences_.cycles_counters()) l.cycles = tracks_.NewCounterTrack(l.track, "cycles");
  }
  return l;
}

// --- records ---------------------------------------------------------------

void PerfettoSink::OnSlice(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                           const trace::SliceRecord& slice) {
  if (failed() || finished_) return;
  Launch& l = LaunchOf(launch);
  Warp& w = ActiveWarp(l, warp);
  hardware_.Place(l, warp.index, w, slice.begin_ns, std::max(slice.begin_ns, slice.end_ns));
  const Lane* const lane = slice.lane != 0 ? &LaneOf(w, slice.lane) : nullptr;
  l.events += slice.unterminated ? 1 : 2;
  sequences_.Slice(w.seq, perfetto::LanesOf(w), lane, slice);
}

void PerfettoSink::OnInstant(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                             const trace::InstantRecord& instant) {
  if (failed() || finished_) return;
  Launch& l = LaunchOf(launch);
  Warp& w = ActiveWarp(l, warp);
  hardware_.Place(l, warp.index, w, instant.ts_ns, instant.ts_ns);
  ++l.events;
  if (instant.value.counter && instant.value.present) return CounterSample(w, instant);
  sequences_.Instant(w.seq, perfetto::LanesOf(w), instant);
}

void PerfettoSink::CounterSample(Warp& w, const trace::InstantRecord& sample) {
  const uint32_t name = sequences_.NameId(sample.name);
  std::vector<UserCounter>& counters = w.slot != nullptr ? w.slot->counters : w.counters;
  uint64_t track = 0;
  for (const UserCounter& c : counters) {
    if (c.name == name) track = c.track;
  }
  if (track == 0) {
    track = tracks_.NewCounterTrack(w.track, sample.name);
    counters.push_back(UserCounter{name, track});
  }
  sequences_.CounterSample(w.seq, perfetto::LanesOf(w), track, sample.ts_ns, sample.value.value);
}

// The order of the warps is not needed: their tracks were ranked by their
// keys as they were created.
void PerfettoSink::OnLaunchEnd(const trace::LaunchRecord& launch, const uint32_t* /*warps_in_order*/,
                               size_t /*warp_count*/) {
  if (failed() || finished_) return;
  EndLaunch(launch.index);
}

void PerfettoSink::EndLaunch(uint64_t index) {
  auto it = launches_.find(index);
  if (it == launches_.end()) return;
  Launch& l = *it->second;
  for (Warp& w : l.warps) {
    if (l.hardware) {
      if (w.span_open) hardware_.CloseSpan(w);
    } else {
      sequences_.WriteEnds(w.seq, w.track, w.lanes);
    }
    if (w.seq.id != 0) sequences_.End(w.seq);
  }
  auto p = processes_.find(l.process);
  if (p != processes_.end()) p->second->events += l.events;
  if (last_launch_ == &l) last_launch_ = nullptr;
  launches_.erase(it);
}

// --- async spans -----------------------------------------------------------

void PerfettoSink::OnAsyncSpan(const trace::LaunchRecord& launch, const trace::AsyncSpanRecord& span) {
  if (failed() || finished_) return;
  const trace::WarpRecord* const some = span.begin_warp != nullptr ? span.begin_warp : span.end_warp;
  if (some == nullptr) return;
  Launch& l = LaunchOf(launch);
  const uint64_t end_ns = std::max(span.begin_ns, span.end_ns);
  // Its ends on the warps' tracks first: in the hardware-centric layout they
  // may place a warp (its slice's BEGIN then precedes them in the file).
  uint64_t begin_track = 0, begin_cycles = 0, end_track = 0, end_cycles = 0;
  if (span.begin_warp != nullptr) WarpTrackAt(l, *span.begin_warp, span.begin_ns, &begin_track, &begin_cycles);
  if (span.end_warp != nullptr) WarpTrackAt(l, *span.end_warp, end_ns, &end_track, &end_cycles);
  l.events += (span.begin_warp != nullptr ? 1 : 0) + (span.end_warp != nullptr ? 1 : 0);  // its device events

  AsyncTracks* tracks;
  if (l.hardware) {
    tracks = &l.gpu->async[some->sm];
    if (tracks->parent == 0) tracks->parent = hardware_.SmTrack(*l.gpu, some->sm);
  } else {
    tracks = &l.async[{some->sm, span.block[2], span.block[1], span.block[0]}];
    if (tracks->parent == 0) tracks->parent = DescribedWarp(l, *some).block_track;
  }
  Annotations args;
  args.Uint("token", span.token);
  if (span.begin_warp != nullptr) args.Uint("begin_warp", span.begin_warp->warp);
  if (span.end_warp != nullptr) args.Uint("end_warp", span.end_warp->warp);
  if (l.hardware) {
    args.Uint("launch_id", l.launch_id).Uint("pid", l.pid).Json("block", {span.block[0], span.block[1], span.block[2]});
  }
  if (span.unmatched_end()) {
    args.String("smprof_error", "unmatched end");
  } else if (span.unterminated()) {
    args.Bool("unterminated", true);
  }
  tracks_.Slice(AsyncLaneTrack(*tracks, span.begin_ns, end_ns), span.name, span.begin_ns, end_ns, &args);

  // Each end carries 0 on its track's "cycles" counter, like every instant
  // there (one value per slice row).
  const bool counters = sequences_.cycles_counters();
  const uint64_t flow = begin_track != 0 && end_track != 0 ? kAsyncFlow | span.flow_id : 0;
  if (begin_track != 0) {
    tracks_.FlowInstant(begin_track, counters ? begin_cycles : 0, span.name, span.begin_ns, flow, false);
  }
  if (end_track != 0) tracks_.FlowInstant(end_track, counters ? end_cycles : 0, span.name, end_ns, flow, true);
}

void PerfettoSink::WarpTrackAt(Launch& l, const trace::WarpRecord& warp, uint64_t t, uint64_t* track,
                               uint64_t* cycles) {
  Warp* w = &DescribedWarp(l, warp);
  if (l.hardware) {
    if (w->span_open && t >= w->span_begin) {
      w->slot->busy_until = std::max(w->slot->busy_until, t);  // its slice ends at t at the earliest
    } else if (w->span_open || w->slot == nullptr || t < w->closed_begin || t > w->closed_end) {
      // Not inside a slice of the warp: a slice of its own, as for a record.
      w = &ActiveWarp(l, warp);
      hardware_.Place(l, warp.index, *w, t, t);
    }
    *track = w->slot->track;
    *cycles = w->slot->cycles;
    return;
  }
  *track = w->track;
  *cycles = w->cycles;
}

uint64_t PerfettoSink::AsyncLaneTrack(AsyncTracks& a, uint64_t begin, uint64_t end) {
  size_t i = 0;
  for (;; ++i) {
    if (i == a.lanes.size()) {
      a.lanes.emplace_back();
      const uint32_t n = static_cast<uint32_t>(i);
      a.lanes[i].track = tracks_.NewTrack(a.parent, n == 0 ? std::string("async") : "async lane " + std::to_string(n),
                                          -static_cast<int64_t>(kLaneSlots) + std::min(n, kLaneSlots - 1), false);
    }
    AsyncLane& lane = a.lanes[i];
    if (begin < lane.last_begin) continue;  // would go back in time on it
    while (!lane.ends.empty() && lane.ends.back() <= begin) lane.ends.pop_back();
    if (lane.ends.empty() || end <= lane.ends.back()) break;  // free, or nests
  }
  AsyncLane& lane = a.lanes[i];
  lane.last_begin = begin;
  lane.ends.push_back(end);
  return lane.track;
}

// --- the end ---------------------------------------------------------------

bool PerfettoSink::Finish(const CollectorSummary& summary) {
  if (finished_) return !failed();
  while (!launches_.empty() && !failed()) EndLaunch(launches_.begin()->first);
  for (auto& [index, p] : processes_) {
    if (!failed()) ProcessTrack(*p);
  }
  if (!failed()) {
    Annotations args;
    args.Members(summary.ToTraceJson());
    if (!summary.statistics.empty()) args.String("statistics", summary.statistics);
    tracks_.Event(run_track_, kInstant, "smprof run summary", last_ns(), &args);
  }
  finished_ = true;
  return file_.Close();
}

}  // namespace smprof
