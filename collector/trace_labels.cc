#include "collector/trace_labels.h"

#include <algorithm>
#include <cstdio>

#include "collector/trace_writer.h"
#include "smprof/wire.h"

namespace smprof::internal {

std::string CommandLabel(std::string_view raw) {
  constexpr size_t kMaxBytes = 80;
  std::string s(raw);
  std::replace(s.begin(), s.end(), '\0', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (s.size() > kMaxBytes) {
    size_t cut = kMaxBytes;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s.resize(cut);
  }
  return s;
}

std::string Dim3(const uint32_t v[3]) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "(%u,%u,%u)", v[0], v[1], v[2]);
  return buf;
}

std::string LaunchTitle(const trace::LaunchRecord& l) {
  const std::string ordinal = "cuda:" + std::to_string(l.device);
  const std::string where = l.gpu >= 0 ? "GPU " + std::to_string(l.gpu) + " (" + ordinal + ")" : ordinal;
  return "#" + std::to_string(l.launch_id) + " " + l.label + " | " + where + " | stream " + std::to_string(l.stream) +
         " | grid" + Dim3(l.grid) + " block" + Dim3(l.block) + " | pid " + std::to_string(l.pid);
}

std::string BlockLabel(const trace::WarpRecord& w) {
  if (!w.program) return "block " + Dim3(w.block);
  if (w.cluster == 0) return "program " + Dim3(w.block);
  uint32_t program[3];
  uint32_t rank = 0;
  for (int axis = 2; axis >= 0; --axis) {
    const uint32_t extent = wire::ClusterExtent(w.cluster, axis);
    program[axis] = w.block[axis] / extent;
    rank = rank * extent + w.block[axis] % extent;
  }
  return "program " + Dim3(program) + " cta " + std::to_string(rank);
}

std::string WarpTitle(const trace::WarpRecord& w) {
  char sm[16];
  std::snprintf(sm, sizeof(sm), "SM %03u | ", static_cast<unsigned>(w.sm));
  return sm + BlockLabel(w) + " | warp " + std::to_string(w.warp);
}

std::string GpuTitle(const trace::GpuRecord& g) {
  std::string label = "GPU " + std::to_string(g.index) + " | " + g.name;
  if (!g.pci_bus_id.empty()) label += " | " + g.pci_bus_id;
  if (!g.uuid.empty()) label += " | " + g.uuid;
  return label;
}

std::string GpuFactsLine(const trace::GpuRecord& g) {
  char facts[160];
  std::snprintf(facts, sizeof(facts), "%u SMs, sm_%u%u, SM clock %u MHz, %%globaltimer step %s", g.sm_count, g.cc_major,
                g.cc_minor, g.sm_clock_khz / 1000,
                g.timer_resolution_ns != 0 ? (std::to_string(g.timer_resolution_ns) + " ns").c_str() : "not measured");
  return facts;
}

std::string ProcessTitle(const trace::ProcessRecord& p) {
  return "smprof | " + p.command + " | pid " + std::to_string(p.pid);
}

std::string LaunchFlagsJson(uint32_t flags) {
  std::string out = "[";
  auto add = [&out](std::string_view word) {
    if (out.size() > 1) out.push_back(',');
    AppendJsonString(&out, word);
  };
  if (flags & wire::kLaunchNoActivity) add("no_activity");
  if (flags & wire::kLaunchFromGraph) add("graph");
  if (flags & wire::kLaunchForcedDrain) add("forced_drain");
  if (flags & wire::kLaunchRunning) add("running");
  const uint32_t unknown =
      flags & ~(wire::kLaunchNoActivity | wire::kLaunchFromGraph | wire::kLaunchForcedDrain | wire::kLaunchRunning);
  if (unknown != 0) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "0x%x", unknown);
    add(buf);
  }
  out.push_back(']');
  return out;
}

std::string HarvestReasonName(uint32_t reason) {
  switch (reason) {
    case wire::kHarvestSync:
      return "harvest: sync";
    case wire::kHarvestHighWater:
      return "forced drain: buffer high-water";
    case wire::kHarvestModuleUnload:
      return "harvest: module unload";
    case wire::kHarvestContextDestroy:
      return "harvest: context destroy";
    case wire::kHarvestExit:
      return "harvest: exit";
    default:
      return "harvest: reason " + std::to_string(reason);
  }
}

const char* HostApiName(uint32_t api) {
  static constexpr const char* kNames[] = {
      nullptr,
      "cuLaunchKernel",
      "cuLaunchKernel_ptsz",
      "cuLaunchKernelEx",
      "cuLaunchKernelEx_ptsz",
      "cuLaunchCooperativeKernel",
      "cuLaunchCooperativeKernel_ptsz",
      "cuGraphLaunch",
      "cuGraphLaunch_ptsz",
      "cuCtxSynchronize",
      "cuStreamSynchronize",
      "cuStreamSynchronize_ptsz",
      "cuEventSynchronize",
      "cuMemcpyDtoH",
      "cuMemcpyDtoH_ptds",
      "cuMemcpy",
      "cuMemcpy_ptds",
  };
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == wire::kApiLast + 1, "a name per HostApi");
  return api <= wire::kApiLast ? kNames[api] : nullptr;
}

const char* HarvestStageArg(uint32_t stage) {
  static constexpr const char* kNames[] = {"wait_us", "copy_us", "clock_us", "decode_us", "ship_us", "other_us"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == wire::kHarvestStages, "a name per HarvestStage");
  return stage < wire::kHarvestStages ? kNames[stage] : "?";
}

std::string HostThreadTitle(uint32_t tid, std::string_view name) {
  return (name.empty() ? std::string("thread") : std::string(name)) + " " + std::to_string(tid);
}

const char* NoticeTitle(std::string_view reason) {
  return reason == "kernel_failed" ? "kernel failed" : "not profiled";
}

const char* NoticeReason(uint32_t kind) {
  switch (kind) {
    case wire::kNoticeCuptiUnavailable:
      return "cupti_unavailable";
    case wire::kNoticeSteppedAside:
      return "stepped_aside";
    case wire::kNoticeBadSettings:
      return "bad_settings";
    case wire::kNoticeKernelFailed:
      return "kernel_failed";
    default:
      return "unknown";
  }
}

}  // namespace smprof::internal
