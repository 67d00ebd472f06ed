#include "collector/collector.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "collector/trace_placement.h"
#include "common/names.h"

namespace smprof {
namespace {

constexpr uint64_t kBaseOffsetNs = 1000000000ull;  // base = first GPU time - 1 s
constexpr uint32_t kLastProducerPid = 9;           // producers get 2..9 first
constexpr uint64_t kMalformedLogLimit = 20;
constexpr size_t kCmdlineLabelBytes = 80;
// Open BEGINs kept per warp track; beyond, the oldest is written as unterminated.
constexpr size_t kMaxOpenBegins = size_t{1} << 16;

uint64_t SatAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// Command line label: NULs as spaces, at most kCmdlineLabelBytes, not cut
// inside a UTF-8 sequence.
std::string CmdlineLabel(std::string_view raw) {
  std::string s(raw);
  std::replace(s.begin(), s.end(), '\0', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (s.size() > kCmdlineLabelBytes) {
    size_t cut = kCmdlineLabelBytes;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s.resize(cut);
  }
  return s;
}

// The name a launch is shown under: the qualified kernel name (common/names,
// the parser the kernel filter matches against), else the text as it came.
std::string KernelLabel(std::string_view full) {
  const KernelNameForms forms = SplitKernelName(full);
  if (!forms.qualified.empty()) return forms.qualified;
  return full.empty() ? std::string("<unnamed kernel>") : std::string(full);
}

// What identifies a physical GPU across processes: the UUID, else the PCI
// address, else nothing better than the producer's own ordinal.
std::string IdentityKey(const std::string& uuid, const std::string& pci, uint32_t pid, uint32_t ordinal) {
  if (!uuid.empty()) return uuid;
  if (!pci.empty()) return "pci " + pci;
  return "pid " + std::to_string(pid) + " cuda:" + std::to_string(ordinal);
}

// Each member of a JSON object as an arg (but `skip`), invalid UTF-8 replaced.
JsonArgs ArgsOf(const nlohmann::json& object, std::string_view skip = {}) {
  JsonArgs args;
  for (const auto& [name, value] : object.items()) {
    if (name != skip) args.Raw(name, value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return args;
}

const char* NoticeReason(uint32_t kind) {
  switch (kind) {
    case wire::kNoticeCuptiUnavailable:
      return "cupti_unavailable";
    case wire::kNoticeSteppedAside:
      return "stepped_aside";
    case wire::kNoticeBadSettings:
      return "bad_settings";
    default:
      return "unknown";
  }
}

std::string Dim3(const uint32_t v[3]) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "(%u,%u,%u)", v[0], v[1], v[2]);
  return buf;
}

}  // namespace

namespace internal {

std::string UuidText(const uint8_t uuid[16]) {
  bool any = false;
  for (int i = 0; i < 16; ++i) any = any || uuid[i] != 0;
  if (!any) return "";
  std::string out = "GPU-";
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    std::snprintf(hex, sizeof(hex), "%02x", uuid[i]);
    out += hex;
  }
  return out;
}

std::string PciBusIdText(uint32_t domain, uint32_t bus, uint32_t device) {
  if (domain == 0 && bus == 0 && device == 0) return "";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.0", domain, bus, device);
  return buf;
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
  const uint32_t unknown = flags & ~(wire::kLaunchNoActivity | wire::kLaunchFromGraph | wire::kLaunchForcedDrain);
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

}  // namespace internal

// --- state ------------------------------------------------------------------

// The open BEGINs of one warp, oldest first. An END closes the most recent
// open BEGIN of its name: `top` maps a name to that BEGIN's position and each
// BEGIN links to the previous open one of its name, so an END costs one hash
// lookup however many BEGINs are open. A BEGIN closed below the top of the
// stack leaves a dead slot; dead slots at the top are popped at once and the
// rest compacted away once they outnumber the open ones.
struct Collector::WarpTrack {
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Open {
    uint32_t name_id;
    uint32_t prev_same;  // position of the previous open BEGIN of this name, or kNone
    uint64_t begin_ns;
    uint32_t begin_cycles;  // %clock64 bits 0-31 at the BEGIN
    bool live;
  };
  uint32_t tid = 0;
  uint64_t last_ns = 0;                        // latest event time seen on this warp (absolute)
  std::vector<Open> open;                      // BEGINs, oldest first; closed ones are dead until removed
  size_t live = 0;                             // live entries of `open`
  size_t bottom = 0;                           // no live entry below this position
  std::unordered_map<uint32_t, uint32_t> top;  // name -> position of its latest open BEGIN

  void Push(uint32_t name_id, uint64_t begin_ns, uint32_t begin_cycles) {
    const uint32_t pos = static_cast<uint32_t>(open.size());
    auto [it, inserted] = top.try_emplace(name_id, pos);
    const uint32_t prev = inserted ? kNone : it->second;
    it->second = pos;
    open.push_back({name_id, prev, begin_ns, begin_cycles, true});
    ++live;
  }

  // The position of the most recent open BEGIN of `name_id`, or kNone.
  uint32_t Find(uint32_t name_id) const {
    auto it = top.find(name_id);
    return it == top.end() ? kNone : it->second;
  }

  // Closes the BEGIN at `pos`: the latest open one of its name, or the
  // oldest open BEGIN of all (Oldest()). A link to the latter from a newer
  // BEGIN of its name is dropped lazily: a dead link target means no older
  // open BEGIN of that name (nothing below the oldest is open).
  void Close(uint32_t pos) {
    Open& o = open[pos];
    o.live = false;
    --live;
    auto it = top.find(o.name_id);
    if (it->second == pos) {
      if (o.prev_same == kNone || !open[o.prev_same].live) {
        top.erase(it);
      } else {
        it->second = o.prev_same;
      }
    }
    while (!open.empty() && !open.back().live) open.pop_back();
    if (live == 0) {
      open.clear();
      bottom = 0;
    } else if (open.size() >= 64 && open.size() - live > live) {
      Compact();
    }
  }

  // Position of the oldest open BEGIN (live != 0).
  uint32_t Oldest() {
    while (!open[bottom].live) ++bottom;
    return static_cast<uint32_t>(bottom);
  }

  void Compact() {
    std::vector<Open> kept;
    kept.reserve(live);
    top.clear();
    for (const Open& o : open) {
      if (!o.live) continue;
      const uint32_t pos = static_cast<uint32_t>(kept.size());
      auto [it, inserted] = top.try_emplace(o.name_id, pos);
      kept.push_back({o.name_id, inserted ? kNone : it->second, o.begin_ns, o.begin_cycles, true});
      it->second = pos;
    }
    open.swap(kept);
    bottom = 0;
  }

  void Clear() {
    open.clear();
    top.clear();
    live = 0;
    bottom = 0;
  }
};

struct Collector::Launch {
  // Ordered like the final track order: (sm, block z, y, x, warp).
  using WarpKey = std::tuple<uint16_t, uint32_t, uint32_t, uint32_t, uint16_t>;
  uint64_t launch_id = 0;
  uint32_t json_pid = 0;
  uint64_t end_ns = 0;
  uint32_t flags = 0;
  uint32_t next_tid = 2;
  std::map<WarpKey, WarpTrack> warps;
};

// One physical GPU of the run, however many processes use it.
struct Collector::Gpu {
  uint32_t index = 0;  // run-wide, in order of first appearance
  uint32_t json_pid = 0;
  nlohmann::json facts;  // the summary's "gpus" entry, "seen_as" growing
  // (producer pid, stream) -> tid of the thread holding that stream's kernel spans
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> stream_tids;
  uint32_t next_tid = 1;
};

struct Collector::Producer {
  transport::ProducerInfo info{};
  uint32_t json_pid = 0;
  bool have_process = false;
  bool named = false;
  uint32_t pid = 0;  // ProcessMsg pid (info.pid until one arrives)
  std::string cmdline;
  uint64_t last_ns = 0;  // latest absolute timestamp seen from this producer
  std::map<uint32_t, std::string> names;
  std::map<uint32_t, std::string> gpu_of_ordinal;  // CUDA ordinal in this process -> Gpu key
  std::map<uint64_t, Launch> launches;             // announced, not yet finalized
  bool have_stats = false;
  wire::StatsMsg stats{};
  uint64_t harvest_dropped = 0;
  uint64_t harvest_unplaced = 0;
  uint64_t harvests = 0;
  uint64_t forced_drains = 0;

  // Device totals: the latest StatsMsg, unless the harvests seen since say more.
  uint64_t dropped() const { return std::max(have_stats ? stats.events_dropped_device : 0, harvest_dropped); }
  uint64_t unplaced() const { return std::max(have_stats ? stats.events_unplaced_device : 0, harvest_unplaced); }
  uint64_t filtered() const { return have_stats ? stats.events_filtered : 0; }
  uint64_t opted_in() const { return have_stats ? stats.launches_opted_in : 0; }
  uint64_t not_selected() const { return have_stats ? stats.launches_not_selected : 0; }
  uint64_t unattributed() const { return have_stats ? stats.events_unattributed : 0; }
  uint64_t all_harvests() const { return std::max(have_stats ? stats.harvests : 0, harvests); }
  uint64_t all_forced() const { return std::max(have_stats ? stats.forced_drains : 0, forced_drains); }
};

// --- Collector --------------------------------------------------------------

std::unique_ptr<Collector> Collector::Create(const CollectorOptions& options, std::string* error) {
  const bool direct = IsStreamPath(options.trace_path);
  auto writer = TraceWriter::Open(direct ? options.trace_path : PartialPath(options.trace_path), error,
                                  /*exclusive=*/!direct && !options.overwrite);
  if (!writer) return nullptr;
  return std::unique_ptr<Collector>(new Collector(options, std::move(writer)));
}

Collector::Collector(CollectorOptions options, std::unique_ptr<TraceWriter> writer)
    : options_(std::move(options)), writer_(std::move(writer)) {
  summary_.trace = options_.trace_path;
  writer_->ProcessName(1, "smprof run");
  writer_->ProcessSortIndex(1, -2000);
  writer_->ThreadName(1, 1, "run");
}

Collector::~Collector() = default;

uint64_t Collector::Rel(uint64_t ns) {
  if (!have_base_) {
    have_base_ = true;
    base_ns_ = ns > kBaseOffsetNs ? ns - kBaseOffsetNs : 0;
  }
  if (ns < base_ns_) {
    ++summary_.clamped_timestamps;
    return 0;
  }
  return ns - base_ns_;
}

void Collector::Touch(uint64_t rel_ns) { last_rel_ns_ = std::max(last_rel_ns_, rel_ns); }

uint32_t Collector::AllocateLaunchPid() { return next_launch_pid_++; }

uint32_t Collector::LabelPid(const Producer& p) const { return p.have_process ? p.pid : p.info.pid; }

std::string_view Collector::NameOf(const Producer& p, uint32_t name_id) {
  auto it = p.names.find(name_id);
  if (it != p.names.end()) return it->second;
  ++summary_.unknown_names;
  unknown_name_ = "<unknown name #" + std::to_string(name_id) + ">";
  return unknown_name_;
}

Collector::Producer& Collector::GetProducer(const transport::ProducerInfo& info) {
  auto& slot = producers_[{info.entry, info.pid}];
  if (!slot) {
    slot = std::make_unique<Producer>();
    slot->info = info;
    slot->pid = info.pid;
    slot->json_pid = next_producer_pid_ <= kLastProducerPid ? next_producer_pid_++ : AllocateLaunchPid();
    ++summary_.processes;
    writer_->ProcessSortIndex(slot->json_pid, slot->json_pid);
    writer_->ThreadName(slot->json_pid, 1, "harvests");
    if (options_.logger) {
      options_.logger->info("producer pid {} attached (registry entry {})", info.pid, info.entry);
    }
  }
  return *slot;
}

void Collector::NameProducerTrack(Producer& p) {
  if (p.named) return;
  p.named = true;
  std::string cmd = p.have_process ? CmdlineLabel(p.cmdline) : std::string();
  if (cmd.empty()) cmd = "?";
  writer_->ProcessName(p.json_pid, "smprof | " + cmd + " | pid " + std::to_string(LabelPid(p)));
}

void Collector::CountMalformed(const Producer& p, const char* why, uint32_t type) {
  ++summary_.malformed_messages;
  if (!options_.logger) return;
  if (malformed_logged_ < kMalformedLogLimit) {
    options_.logger->warn("pid {}: malformed message (type {}): {}", p.info.pid, type, why);
  } else if (malformed_logged_ == kMalformedLogLimit) {
    options_.logger->warn("further malformed messages are counted, not logged");
  }
  ++malformed_logged_;
}

void Collector::HandleMessage(const transport::ProducerInfo& info, const uint8_t* data, uint32_t size) {
  if (finished_) return;
  Producer& p = GetProducer(info);
  DecodedMessage m;
  const DecodeStatus status = MessageDecoder::Decode(data, size, &m);
  if (status != DecodeStatus::kOk) {
    uint32_t type = 0;
    if (data != nullptr && size >= sizeof(type)) std::memcpy(&type, data, sizeof(type));
    CountMalformed(p, DecodeStatusName(status), type);
    return;
  }
  switch (m.type) {
    case wire::kMsgPad:
      break;
    case wire::kMsgProcess:
      OnProcess(p, m);
      break;
    case wire::kMsgDevice:
      OnDevice(p, m);
      break;
    case wire::kMsgName:
      p.names[m.name.name_id] = std::string(m.text);
      break;
    case wire::kMsgLaunch:
      OnLaunch(p, m);
      break;
    case wire::kMsgWarpEvents:
      OnWarpEvents(p, m);
      break;
    case wire::kMsgHarvest:
      OnHarvest(p, m);
      break;
    case wire::kMsgStats:
      OnStats(p, m);
      break;
    case wire::kMsgNotice:
      OnNotice(p, m);
      break;
  }
}

void Collector::OnStats(Producer& p, const DecodedMessage& m) {
  p.have_stats = true;
  p.stats = m.stats;
}

void Collector::OnNotice(Producer& p, const DecodedMessage& m) {
  const std::string detail(m.text);
  summary_.not_profiled.push_back({{"pid", LabelPid(p)}, {"reason", NoticeReason(m.notice.kind)}, {"detail", detail}});
  const uint64_t ts = p.last_ns != 0 ? Rel(p.last_ns) : last_rel_ns_;
  JsonArgs args;
  args.String("reason", NoticeReason(m.notice.kind)).String("detail", detail);
  writer_->Instant(p.json_pid, 1, "not profiled", ts, &args);
  Touch(ts);
}

void Collector::OnProcess(Producer& p, const DecodedMessage& m) {
  if (p.have_process) {
    CountMalformed(p, "second ProcessMsg", m.type);
    return;
  }
  p.have_process = true;
  p.pid = m.process.pid;
  p.cmdline = std::string(m.text);
  if (!have_base_) {
    have_base_ = true;
    base_ns_ = m.process.gpu_time_ns > kBaseOffsetNs ? m.process.gpu_time_ns - kBaseOffsetNs : 0;
  }
  NameProducerTrack(p);
}

void Collector::OnDevice(Producer& p, const DecodedMessage& m) {
  const wire::DeviceMsg& d = m.device;
  const std::string uuid = internal::UuidText(d.uuid);
  const std::string pci = internal::PciBusIdText(d.pci_domain, d.pci_bus, d.pci_device);
  const std::string key = IdentityKey(uuid, pci, LabelPid(p), d.device);
  p.gpu_of_ordinal[d.device] = key;
  auto& slot = gpus_[key];
  if (!slot) {
    slot = std::make_unique<Gpu>();
    Gpu& g = *slot;
    g.index = static_cast<uint32_t>(gpu_order_.size());
    g.json_pid = AllocateLaunchPid();
    gpu_order_.push_back(&g);
    const std::string name = m.text.empty() ? std::string("unnamed GPU") : std::string(m.text);
    g.facts = {{"index", g.index},
               {"name", name},
               {"uuid", uuid},
               {"pci_bus_id", pci},
               {"sm_count", d.sm_count},
               {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
               {"sm_clock_khz", d.sm_clock_khz},
               {"sm_clock_measured_khz", d.sm_clock_measured_khz},
               {"timer_resolution_ns", d.timer_resolution_ns},
               {"marker_cost_cycles",
                {{"context", d.cost_context_centicycles / 100.0},
                 {"default", d.cost_default_centicycles / 100.0},
                 {"diverged", d.cost_diverged_centicycles / 100.0},
                 {"idle", d.cost_idle_centicycles / 100.0}}},
               {"seen_as", nlohmann::json::array()}};
    std::string label = "GPU " + std::to_string(g.index) + " | " + name;
    if (!pci.empty()) label += " | " + pci;
    if (!uuid.empty()) label += " | " + uuid;
    writer_->ProcessName(g.json_pid, label);
    writer_->ProcessSortIndex(g.json_pid, -1000 + static_cast<int64_t>(g.index));
    char facts[160];
    std::snprintf(facts, sizeof(facts), "%u SMs, sm_%u%u, SM clock %u MHz, %%globaltimer step %s", d.sm_count,
                  d.cc_major, d.cc_minor, d.sm_clock_khz / 1000,
                  d.timer_resolution_ns != 0 ? (std::to_string(d.timer_resolution_ns) + " ns").c_str()
                                             : "not measured");
    writer_->ProcessLabels(g.json_pid, facts);
    // The labels are a viewer's nicety; the facts themselves, as queryable
    // args, go on an instant at time 0 (Perfetto keeps args, not labels).
    const JsonArgs args = ArgsOf(g.facts, "seen_as");
    writer_->ThreadName(g.json_pid, 0, "identity");
    writer_->Instant(g.json_pid, 0, "GPU " + std::to_string(g.index) + " identity", 0, &args);
  }
  nlohmann::json& seen = slot->facts["seen_as"];
  const nlohmann::json as = {{"pid", LabelPid(p)}, {"ordinal", d.device}};
  if (std::find(seen.begin(), seen.end(), as) == seen.end()) seen.push_back(as);
}

Collector::Gpu* Collector::GpuOf(const Producer& p, uint32_t ordinal) {
  auto it = p.gpu_of_ordinal.find(ordinal);
  if (it == p.gpu_of_ordinal.end()) return nullptr;
  auto g = gpus_.find(it->second);
  return g == gpus_.end() ? nullptr : g->second.get();
}

void Collector::OnLaunch(Producer& p, const DecodedMessage& m) {
  const wire::LaunchMsg& msg = m.launch;
  if (p.launches.count(msg.launch_id) != 0) {
    CountMalformed(p, "duplicate launch id", m.type);
    return;
  }
  Launch& l = p.launches[msg.launch_id];
  l.launch_id = msg.launch_id;
  l.json_pid = AllocateLaunchPid();
  l.end_ns = msg.end_ns;
  l.flags = msg.flags;
  p.last_ns = std::max(p.last_ns, msg.end_ns);
  ++summary_.launches;

  const std::string full = m.text.empty() ? std::string("<unnamed kernel>") : std::string(m.text);
  const std::string kernel = KernelLabel(full);
  const uint64_t ts = Rel(msg.start_ns);
  const uint64_t end = Rel(msg.end_ns);
  Touch(end);

  Gpu* gpu = GpuOf(p, msg.device);
  const std::string ordinal = "cuda:" + std::to_string(msg.device);
  const std::string where = gpu != nullptr ? "GPU " + std::to_string(gpu->index) + " (" + ordinal + ")" : ordinal;
  writer_->ProcessName(l.json_pid, "#" + std::to_string(msg.launch_id) + " " + kernel + " | " + where + " | stream " +
                                       std::to_string(msg.stream_id) + " | grid" + Dim3(msg.grid) + " block" +
                                       Dim3(msg.block) + " | pid " + std::to_string(LabelPid(p)));
  writer_->ProcessSortIndex(l.json_pid, static_cast<int64_t>(std::min<uint64_t>(ts / 1000, INT32_MAX)));
  writer_->ThreadName(l.json_pid, 1, "kernel (CUPTI)");

  JsonArgs args;
  args.Uint("launch_id", msg.launch_id)
      .Uint3("grid", msg.grid)
      .Uint3("block", msg.block)
      .Uint("device", msg.device)
      .Uint("stream", msg.stream_id)
      .Uint("correlation_id", msg.correlation_id)
      .Uint("grid_id", msg.grid_id)
      .Uint("graph_id", msg.graph_id)
      .Uint("registers", msg.registers)
      .Uint("dynamic_smem", msg.dynamic_smem)
      .Uint("static_smem", msg.static_smem)
      .Uint("pid", LabelPid(p))
      .Raw("flags", internal::LaunchFlagsJson(msg.flags));
  if (gpu != nullptr) {
    args.Uint("gpu", gpu->index)
        .String("gpu_name", gpu->facts["name"].get<std::string>())
        .String("gpu_uuid", gpu->facts["uuid"].get<std::string>())
        .String("gpu_pci_bus_id", gpu->facts["pci_bus_id"].get<std::string>());
  }
  if (msg.flags & wire::kLaunchNoActivity) {
    args.String("note",
                "CUPTI reported no activity for this kernel: start and end are bounds taken from "
                "its recorded events");
  }
  writer_->Complete(l.json_pid, 1, full, ts, end - ts, &args);

  // The same span on the physical GPU's track: one thread per process stream
  // (a stream runs one kernel at a time, so its spans never overlap).
  if (gpu != nullptr) {
    auto [it, inserted] = gpu->stream_tids.try_emplace({LabelPid(p), msg.stream_id}, gpu->next_tid);
    if (inserted) {
      ++gpu->next_tid;
      writer_->ThreadName(
          gpu->json_pid, it->second,
          "pid " + std::to_string(LabelPid(p)) + " | " + ordinal + " | stream " + std::to_string(msg.stream_id));
    }
    JsonArgs span;
    span.Uint("launch_id", msg.launch_id).Uint("pid", LabelPid(p));
    writer_->Complete(gpu->json_pid, it->second, kernel, ts, end - ts, &span);
  }
}

void Collector::OnWarpEvents(Producer& p, const DecodedMessage& m) {
  const wire::WarpEventsMsg& msg = m.warp_events;
  auto lit = p.launches.find(msg.launch_id);
  if (lit == p.launches.end()) {
    summary_.orphan_events += m.event_count;
    if (options_.logger && m.event_count != 0) {
      options_.logger->debug("pid {}: {} events of unknown launch {} dropped", p.info.pid, m.event_count,
                             msg.launch_id);
    }
    return;
  }
  Launch& l = lit->second;
  const Launch::WarpKey key{msg.sm, msg.block[2], msg.block[1], msg.block[0], msg.warp};
  auto [wit, inserted] = l.warps.try_emplace(key);
  WarpTrack& w = wit->second;
  if (inserted) {
    w.tid = l.next_tid++;
    char label[96];
    std::snprintf(label, sizeof(label), "SM %03u | block (%u,%u,%u) | warp %u", static_cast<unsigned>(msg.sm),
                  msg.block[0], msg.block[1], msg.block[2], static_cast<unsigned>(msg.warp));
    writer_->ThreadName(l.json_pid, w.tid, label);
  }
  for (uint32_t i = 0; i < m.event_count; ++i) {
    const wire::WireEvent e = m.event(i);
    w.last_ns = std::max(w.last_ns, e.time_ns);
    p.last_ns = std::max(p.last_ns, e.time_ns);
    switch (e.kind & wire::kEventKindMask) {
      case wire::kEventBegin:
        if (w.live >= kMaxOpenBegins) {
          // Bounded memory: the oldest open BEGIN is written as unterminated.
          const uint32_t oldest = w.Oldest();
          WriteUnterminated(p, l, w, w.open[oldest].name_id, w.open[oldest].begin_ns,
                            "more than " + std::to_string(kMaxOpenBegins) +
                                " ranges were open on this warp; the oldest was closed here");
          w.Close(oldest);
        }
        w.Push(e.name_id, e.time_ns, e.cycles);
        break;
      case wire::kEventEnd: {
        const uint32_t pos = w.Find(e.name_id);
        if (pos != WarpTrack::kNone) {
          const uint64_t ts = Rel(w.open[pos].begin_ns);
          const uint64_t end = std::max(ts, Rel(e.time_ns));
          // SM cycles, exact: both ends were stamped by one SM's %clock64
          // (ranges shorter than 2^32 cycles, about 2 s).
          JsonArgs args;
          args.Uint("cycles", e.cycles - w.open[pos].begin_cycles);
          writer_->Complete(l.json_pid, w.tid, NameOf(p, e.name_id), ts, end - ts, &args);
          Touch(end);
          summary_.events += 2;
          w.Close(pos);
        } else {
          JsonArgs args;
          args.String("smprof_error", "unmatched end");
          const uint64_t ts = Rel(e.time_ns);
          writer_->Instant(l.json_pid, w.tid, std::string(NameOf(p, e.name_id)) + " (end without begin)", ts, &args);
          Touch(ts);
          ++summary_.unmatched_ends;
          ++summary_.events;
        }
        break;
      }
      case wire::kEventInstant: {
        const uint64_t ts = Rel(e.time_ns);
        writer_->Instant(l.json_pid, w.tid, NameOf(p, e.name_id), ts, nullptr);
        Touch(ts);
        ++summary_.events;
        break;
      }
      default:
        break;  // the decoder admits no other kind
    }
  }
}

void Collector::WriteUnterminated(Producer& p, const Launch& l, const WarpTrack& w, uint32_t name_id, uint64_t begin_ns,
                                  const std::string& note) {
  const bool no_activity = (l.flags & wire::kLaunchNoActivity) != 0;
  const uint64_t end_abs = no_activity ? w.last_ns : std::max(l.end_ns, w.last_ns);
  JsonArgs args;
  args.Bool("unterminated", true);
  if (!note.empty()) args.String("note", note);
  const uint64_t ts = Rel(begin_ns);
  const uint64_t end = std::max(ts, Rel(end_abs));
  writer_->Complete(l.json_pid, w.tid, NameOf(p, name_id), ts, end - ts, &args);
  Touch(end);
  ++summary_.unterminated_ranges;
  ++summary_.events;
}

void Collector::FinalizeLaunch(Producer& p, Launch& l, bool producer_lost) {
  const std::string note = producer_lost ? "the process ended without detaching" : "";
  for (auto& [key, w] : l.warps) {
    // Innermost first, all ending at the same time, so they still nest.
    for (auto it = w.open.rbegin(); it != w.open.rend(); ++it) {
      if (it->live) WriteUnterminated(p, l, w, it->name_id, it->begin_ns, note);
    }
    w.Clear();
  }
  writer_->ThreadSortIndex(l.json_pid, 1, 0);
  int64_t index = 1;
  for (const auto& [key, w] : l.warps) writer_->ThreadSortIndex(l.json_pid, w.tid, index++);
}

void Collector::OnHarvest(Producer& p, const DecodedMessage& m) {
  const wire::HarvestMsg& msg = m.harvest;
  for (auto& [id, l] : p.launches) FinalizeLaunch(p, l, false);
  p.launches.clear();

  ++p.harvests;
  if (msg.reason == wire::kHarvestHighWater) ++p.forced_drains;
  p.harvest_dropped = SatAdd(p.harvest_dropped, msg.dropped_events);
  p.harvest_unplaced = SatAdd(p.harvest_unplaced, msg.unplaced_events);
  p.last_ns = std::max(p.last_ns, msg.time_ns);

  const uint64_t ts = Rel(msg.time_ns);
  Touch(ts);
  JsonArgs args;
  args.Uint("device", msg.device)
      .Uint("dropped_events", msg.dropped_events)
      .Uint("unplaced_events", msg.unplaced_events);
  writer_->Instant(p.json_pid, 1, internal::HarvestReasonName(msg.reason), ts, &args);
  if (msg.dropped_events != 0 || msg.unplaced_events != 0) {
    JsonArgs lost;
    lost.Uint("lost", SatAdd(p.harvest_dropped, p.harvest_unplaced));
    writer_->Counter(p.json_pid, "events lost (device buffer)", ts, lost);
    if (options_.logger) {
      options_.logger->warn("pid {}: device buffer lost {} events ({} unplaced) in one harvest", LabelPid(p),
                            msg.dropped_events, msg.unplaced_events);
    }
  }
  writer_->Flush();
}

void Collector::EndProducer(Producer& p, bool clean) {
  for (auto& [id, l] : p.launches) FinalizeLaunch(p, l, !clean);
  p.launches.clear();
  NameProducerTrack(p);
  if (!clean) {
    ++summary_.producers_incomplete;
    const uint64_t ts = p.last_ns != 0 ? Rel(p.last_ns) : last_rel_ns_;
    JsonArgs args;
    args.String("smprof_error", "producer ended without a clean detach");
    writer_->Instant(p.json_pid, 1, "process lost", ts, &args);
    Touch(ts);
    if (options_.logger) {
      options_.logger->warn("producer pid {} ended without detaching; its data may be incomplete", LabelPid(p));
    }
  }
  ended_dropped_ = SatAdd(ended_dropped_, p.dropped());
  ended_unplaced_ = SatAdd(ended_unplaced_, p.unplaced());
  ended_filtered_ = SatAdd(ended_filtered_, p.filtered());
  ended_unattributed_ = SatAdd(ended_unattributed_, p.unattributed());
  ended_forced_ = SatAdd(ended_forced_, p.all_forced());
  ended_harvests_ = SatAdd(ended_harvests_, p.all_harvests());
  ended_opted_in_ = SatAdd(ended_opted_in_, p.opted_in());
  ended_not_selected_ = SatAdd(ended_not_selected_, p.not_selected());
  writer_->Flush();
}

void Collector::HandleProducerEnd(const transport::ProducerInfo& info, bool clean) {
  if (finished_) return;
  Producer& p = GetProducer(info);
  EndProducer(p, clean);
  producers_.erase({info.entry, info.pid});
}

void Collector::SetTransportStats(const transport::ConsumerStats& stats) { transport_stats_ = stats; }

void Collector::HandleControl(const nlohmann::json& message) {
  if (finished_) return;
  if (auto run = message.find("run"); run != message.end() && run->is_object()) {
    summary_.run = *run;
    // At time 0, before everything else: a reader of a partial trace (the run
    // was killed) still sees what was run and how.
    const JsonArgs args = ArgsOf(*run);
    writer_->Instant(1, 1, "smprof run", 0, &args);
    if (auto command = run->find("command"); command != run->end() && command->is_array()) {
      std::string text;
      for (const auto& word : *command) {
        if (word.is_string()) text += (text.empty() ? "" : " ") + word.get<std::string>();
      }
      writer_->ProcessLabels(1, CmdlineLabel(text));
    }
  }
  if (auto exit = message.find("exit"); exit != message.end() && exit->is_object()) summary_.exit = *exit;
}

bool Collector::Run(transport::Consumer& consumer, const std::atomic<bool>& stop,
                    std::chrono::milliseconds drain_timeout, ControlChannel* control) {
  const auto on_control = [this](const nlohmann::json& message) { HandleControl(message); };
  bool control_open = control != nullptr;
  const auto on_message = [this](const transport::ProducerInfo& info, const uint8_t* data, uint32_t size) {
    HandleMessage(info, data, size);
  };
  const auto on_end = [this](const transport::ProducerInfo& info, bool clean) { HandleProducerEnd(info, clean); };
  const auto poll = [&] {
    const size_t n = consumer.Poll(on_message, on_end);
    SetTransportStats(consumer.stats());
    if (n != 0) writer_->Flush();
    return n;
  };
  constexpr auto kIdleSleep = std::chrono::milliseconds(2);
  while (!stop.load(std::memory_order_relaxed)) {
    // The control channel's end is the stop signal too; messages it
    // delivered before closing are handled first.
    if (control_open && !(control_open = control->Poll(on_control))) break;
    if (poll() == 0) std::this_thread::sleep_for(kIdleSleep);
  }
  if (control_open) control->Poll(on_control);  // an "exit" sent just before SIGTERM
  // Final drain: producers drop (and count) what they send from now on, so
  // the drain ends; what is still unread when it times out is counted too.
  consumer.Close();
  const auto deadline = std::chrono::steady_clock::now() + drain_timeout;
  bool drained = false;
  for (;;) {
    const size_t n = poll();
    if (n == 0 && consumer.Idle()) {
      drained = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    if (n == 0) std::this_thread::sleep_for(kIdleSleep);
  }
  SetTransportStats(consumer.stats());
  return drained;
}

CollectorSummary Collector::Finish() {
  if (finished_) return summary_;
  while (!producers_.empty()) {
    auto it = producers_.begin();
    EndProducer(*it->second, /*clean=*/false);
    producers_.erase(it);
  }
  finished_ = true;

  CollectorSummary& s = summary_;
  s.lost_device_buffer = ended_dropped_;
  s.lost_device_unplaced = ended_unplaced_;
  s.lost_transport = transport_stats_.producer_events_dropped;
  s.transport_unread_messages = transport_stats_.unread_messages;
  s.lost_total =
      SatAdd(SatAdd(SatAdd(s.lost_device_buffer, s.lost_device_unplaced), s.lost_transport), s.orphan_events);
  s.filtered_events = ended_filtered_;
  s.unattributed_events = ended_unattributed_;
  s.forced_drains = ended_forced_;
  s.harvests = ended_harvests_;
  s.framing_errors = transport_stats_.framing_errors;
  s.registry_full = transport_stats_.registry_full;
  s.launches_opted_in = ended_opted_in_;
  s.launches_not_selected = ended_not_selected_;
  s.gpus = nlohmann::json::array();
  for (const Gpu* g : gpu_order_) s.gpus.push_back(g->facts);

  nlohmann::json args = s.ToJson();
  args["unknown_names"] = s.unknown_names;
  args["clamped_timestamps"] = s.clamped_timestamps;
  args["transport_messages_dropped"] = transport_stats_.producer_messages_dropped;
  args["transport_unread_bytes"] = transport_stats_.unread_bytes;
  const JsonArgs summary_args = ArgsOf(args);
  writer_->Instant(1, 1, "smprof run summary", last_rel_ns_, &summary_args);
  s.trace_ok = writer_->Finish();
  s.trace_error = writer_->error();
  s.trace = writer_->path();
  const bool placed = writer_->path() == options_.trace_path;  // written directly (IsStreamPath)
  if (s.trace_ok && !placed &&
      !PlaceTrace(writer_->path(), options_.trace_path, options_.overwrite, &s.trace, &s.trace_error)) {
    s.trace_ok = false;
  }
  if (!s.trace_ok && options_.logger) options_.logger->error("{}", s.trace_error);
  return s;
}

}  // namespace smprof
