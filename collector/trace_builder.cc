#include "collector/trace_builder.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iterator>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "collector/async_matcher.h"
#include "collector/name_format.h"
#include "collector/trace_labels.h"
#include "common/logging.h"
#include "common/names.h"

namespace smprof {
namespace {

constexpr uint64_t kBaseOffsetNs = 1000000000ull;  // base = first GPU time - 1 s
constexpr uint64_t kMalformedLogLimit = 20;

uint64_t SatAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

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

}  // namespace internal

// --- state ------------------------------------------------------------------

struct TraceBuilder::Warp {
  trace::WarpRecord record;
  RangeMatcher ranges;
};

struct TraceBuilder::Launch {
  // Ordered like the order to show warps in: (sm, block z, y, x, warp).
  using WarpKey = std::tuple<uint16_t, uint32_t, uint32_t, uint32_t, uint16_t>;
  trace::LaunchRecord record;
  uint64_t end_abs = 0;  // absolute, for unterminated ranges
  std::map<WarpKey, Warp> warps;  // node-stable: async spans point at the records
  AsyncMatcher async;
};

// One physical GPU of the run, however many processes use it.
struct TraceBuilder::Gpu {
  trace::GpuRecord record;  // record.facts is the summary's "gpus" entry, "seen_as" growing
};

struct TraceBuilder::Producer {
  transport::ProducerInfo info{};
  trace::ProcessRecord record;
  bool have_process = false;
  bool named = false;
  uint64_t last_ns = 0;                      // latest absolute timestamp seen from this producer
  std::unordered_map<uint32_t, Name> names;  // node-stable: the cache below points into it
  // NameOf's cache: a few names are looked up for every record.
  struct CachedName {
    uint32_t id = 0;
    const Name* name = nullptr;
  };
  CachedName name_cache[64];
  // Formatted names: (name id << 32 | integer) -> id of the rendered name
  // in `names`, from kMaxWireNameId + 1; the name ids that have some.
  std::unordered_map<uint64_t, uint32_t> rendered;
  std::unordered_set<uint32_t> formats;
  uint32_t next_rendered = kMaxWireNameId + 1;
  bool rendered_full_logged = false;
  std::map<uint32_t, std::string> threads;         // host tid -> name (ThreadMsg)
  std::map<uint32_t, std::string> gpu_of_ordinal;  // CUDA ordinal in this process -> Gpu key
  std::map<uint64_t, Launch> launches;             // announced, not yet ended
  bool have_stats = false;
  wire::StatsMsg stats{};
  uint64_t harvest_dropped = 0;
  uint64_t harvest_unplaced = 0;
  uint64_t harvests = 0;
  uint64_t forced_drains = 0;
  uint64_t switched_drains = 0;  // of them, segments switched (HarvestMsg kHarvestSwitched)
  // Run-wide keys of this producer's latest API calls, by correlation id
  // (the newest kCallKeysKept: a graph's kernels arrive in one harvest).
  std::unordered_map<uint64_t, uint64_t> call_keys;
  std::deque<uint64_t> call_key_order;

  // Device totals: the latest StatsMsg, unless the harvests seen since say more.
  uint64_t dropped() const { return std::max(have_stats ? stats.events_dropped_device : 0, harvest_dropped); }
  uint64_t unplaced() const { return std::max(have_stats ? stats.events_unplaced_device : 0, harvest_unplaced); }
  uint64_t filtered() const { return have_stats ? stats.events_filtered : 0; }
  uint64_t opted_in() const { return have_stats ? stats.launches_opted_in : 0; }
  uint64_t not_selected() const { return have_stats ? stats.launches_not_selected : 0; }
  uint64_t calls_forgotten() const { return have_stats ? stats.host_calls_forgotten : 0; }
  uint64_t lost_host() const { return have_stats ? stats.events_lost_host : 0; }
  uint64_t harvests_skipped() const { return have_stats ? stats.harvests_skipped : 0; }
  uint64_t unattributed() const { return have_stats ? stats.events_unattributed : 0; }
  uint64_t all_harvests() const { return std::max(have_stats ? stats.harvests : 0, harvests); }
  uint64_t all_forced() const { return std::max(have_stats ? stats.forced_drains : 0, forced_drains); }
};

// --- TraceBuilder -----------------------------------------------------------

TraceBuilder::TraceBuilder(std::vector<trace::TraceSink*> sinks, std::shared_ptr<spdlog::logger> logger)
    : sinks_(std::move(sinks)), logger_(std::move(logger)) {}

TraceBuilder::~TraceBuilder() = default;

uint64_t TraceBuilder::Rel(uint64_t ns) {
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

void TraceBuilder::Touch(uint64_t rel_ns) { last_rel_ns_ = std::max(last_rel_ns_, rel_ns); }

const TraceBuilder::Name& TraceBuilder::NameOf(Producer& p, uint32_t name_id) {
  Producer::CachedName& c = p.name_cache[(name_id * 0x9E3779B1u) >> 26];
  if (c.name != nullptr && c.id == name_id) return *c.name;
  auto it = p.names.find(name_id);
  if (it != p.names.end()) {
    c = {name_id, &it->second};
    return it->second;
  }
  ++summary_.unknown_names;
  unknown_name_.text = "<unknown name #" + std::to_string(name_id) + ">";
  unknown_name_.key = KeyOf(unknown_name_.text);
  return unknown_name_;
}

uint32_t TraceBuilder::KeyOf(const std::string& text) {
  return name_keys_.try_emplace(text, static_cast<uint32_t>(name_keys_.size() + 1)).first->second;
}

uint32_t TraceBuilder::RenderedId(Producer& p, uint32_t name_id, uint32_t integer) {
  const uint64_t key = (uint64_t{name_id} << 32) | integer;
  auto it = p.rendered.find(key);
  if (it != p.rendered.end()) return it->second;
  if (p.rendered.size() >= kMaxRenderedNames) {
    if (logger_ && !p.rendered_full_logged) {
      logger_->warn("pid {}: more than {} names formatted with an integer; the rest keep their format", p.info.pid,
                    kMaxRenderedNames);
    }
    p.rendered_full_logged = true;
    return name_id;
  }
  std::string text = RenderName(NameOf(p, name_id).text, integer);
  const uint32_t id = p.next_rendered++;
  Name& n = p.names[id];
  n.text = std::move(text);
  n.key = KeyOf(n.text);
  p.rendered.emplace(key, id);
  p.formats.insert(name_id);
  return id;
}

void TraceBuilder::OnName(Producer& p, const DecodedMessage& m) {
  const uint32_t id = m.name.name_id;
  Name& n = p.names[id];  // a new text for a known id replaces it in place
  n.text = std::string(m.text);
  n.key = KeyOf(n.text);
  // Names rendered from its old text are rendered again when next used
  // (those already handed on keep theirs).
  if (p.formats.erase(id) != 0) {
    for (auto it = p.rendered.begin(); it != p.rendered.end();) {
      it = (it->first >> 32) == id ? p.rendered.erase(it) : std::next(it);
    }
  }
}

TraceBuilder::Producer& TraceBuilder::GetProducer(const transport::ProducerInfo& info) {
  auto& slot = producers_[{info.entry, info.pid}];
  if (!slot) {
    slot = std::make_unique<Producer>();
    slot->info = info;
    slot->record.index = next_process_++;
    slot->record.pid = info.pid;
    slot->record.command = "?";
    ++summary_.processes;
    for (trace::TraceSink* s : sinks_) s->OnProcess(slot->record);
    if (logger_) logger_->info("producer pid {} attached (registry entry {})", info.pid, info.entry);
  }
  return *slot;
}

void TraceBuilder::NameProcess(Producer& p) {
  if (p.named) return;
  p.named = true;
  for (trace::TraceSink* s : sinks_) s->OnProcessNamed(p.record);
}

void TraceBuilder::CountMalformed(const Producer& p, const char* why, uint32_t type) {
  ++summary_.malformed_messages;
  if (!logger_) return;
  if (malformed_logged_ < kMalformedLogLimit) {
    logger_->warn("pid {}: malformed message (type {}): {}", p.info.pid, type, why);
  } else if (malformed_logged_ == kMalformedLogLimit) {
    logger_->warn("further malformed messages are counted, not logged");
  }
  ++malformed_logged_;
}

void TraceBuilder::HandleMessage(const transport::ProducerInfo& info, const uint8_t* data, uint32_t size) {
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
      OnName(p, m);
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
      p.have_stats = true;
      p.stats = m.stats;
      break;
    case wire::kMsgNotice:
      OnNotice(p, m);
      break;
    case wire::kMsgThread:
      p.threads[m.thread.tid] = std::string(m.text);
      break;
    case wire::kMsgKernelName:
    case wire::kMsgMarkerName:
    case wire::kMsgRecords:
    case wire::kMsgChunks:
      // Read-backs are the assembler's (launch_assembler.h): one reaching
      // the builder came without it.
      CountMalformed(p, "read-back message past the launch assembler", m.type);
      break;
  }
}

trace::HostCall TraceBuilder::Call(const Producer& p, const wire::HostCall& c) {
  trace::HostCall r;
  r.api = internal::HostApiName(c.api);  // the decoder let only known ones through
  if (r.api == nullptr) return r;
  r.begin_ns = Rel(c.start_ns);
  r.end_ns = std::max(r.begin_ns, Rel(c.end_ns));
  r.tid = c.tid;
  r.thread = ThreadName(p, c.tid);
  return r;
}

std::string TraceBuilder::ThreadName(const Producer& p, uint32_t tid) {
  auto it = p.threads.find(tid);
  return it != p.threads.end() ? it->second : std::string();
}

void TraceBuilder::OnNotice(Producer& p, const DecodedMessage& m) {
  const std::string detail(m.text);
  const char* reason = internal::NoticeReason(m.notice.kind);
  if (m.notice.kind == wire::kNoticeKernelFailed) {
    summary_.kernel_failures.push_back({{"pid", p.record.pid}, {"detail", detail}});
  } else {
    summary_.not_profiled.push_back({{"pid", p.record.pid}, {"reason", reason}, {"detail", detail}});
  }
  const uint64_t ts = p.last_ns != 0 ? Rel(p.last_ns) : last_rel_ns_;
  for (trace::TraceSink* s : sinks_) s->OnNotice(p.record, ts, reason, detail);
  Touch(ts);
}

void TraceBuilder::OnProcess(Producer& p, const DecodedMessage& m) {
  if (p.have_process) {
    CountMalformed(p, "second ProcessMsg", m.type);
    return;
  }
  p.have_process = true;
  p.record.pid = m.process.pid;
  const std::string cmd = internal::CommandLabel(m.text);
  p.record.command = cmd.empty() ? "?" : cmd;
  if (!have_base_) {
    have_base_ = true;
    base_ns_ = m.process.gpu_time_ns > kBaseOffsetNs ? m.process.gpu_time_ns - kBaseOffsetNs : 0;
  }
  NameProcess(p);
}

void TraceBuilder::OnDevice(Producer& p, const DecodedMessage& m) {
  const wire::DeviceMsg& d = m.device;
  const std::string uuid = internal::UuidText(d.uuid);
  const std::string pci = internal::PciBusIdText(d.pci_domain, d.pci_bus, d.pci_device);
  const std::string key = IdentityKey(uuid, pci, p.record.pid, d.device);
  p.gpu_of_ordinal[d.device] = key;
  auto& slot = gpus_[key];
  if (!slot) {
    slot = std::make_unique<Gpu>();
    trace::GpuRecord& g = slot->record;
    g.index = static_cast<uint32_t>(gpu_order_.size());
    gpu_order_.push_back(slot.get());
    g.name = m.text.empty() ? std::string("unnamed GPU") : std::string(m.text);
    g.uuid = uuid;
    g.pci_bus_id = pci;
    g.sm_count = d.sm_count;
    g.cc_major = d.cc_major;
    g.cc_minor = d.cc_minor;
    g.sm_clock_khz = d.sm_clock_khz;
    g.sm_clock_measured_khz = d.sm_clock_measured_khz;
    g.timer_resolution_ns = d.timer_resolution_ns;
    g.facts = {{"index", g.index},
               {"name", g.name},
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
                 {"idle", d.cost_idle_centicycles / 100.0}}}};
    for (trace::TraceSink* s : sinks_) s->OnGpu(g);
    g.facts["seen_as"] = nlohmann::json::array();
  }
  nlohmann::json& seen = slot->record.facts["seen_as"];
  const nlohmann::json as = {{"pid", p.record.pid}, {"ordinal", d.device}, {"buffer_mib", d.buffer_mib}};
  if (std::find(seen.begin(), seen.end(), as) == seen.end()) seen.push_back(as);
}

void TraceBuilder::OnLaunch(Producer& p, const DecodedMessage& m) {
  const wire::LaunchMsg& msg = m.launch;
  if (p.launches.count(msg.launch_id) != 0) {
    CountMalformed(p, "duplicate launch id", m.type);
    return;
  }
  Launch& l = p.launches[msg.launch_id];
  l.end_abs = msg.end_ns;
  p.last_ns = std::max(p.last_ns, msg.end_ns);
  ++summary_.launches;

  trace::LaunchRecord& r = l.record;
  r.index = next_launch_++;
  r.process = p.record.index;
  r.pid = p.record.pid;
  r.launch_id = msg.launch_id;
  r.kernel = m.text.empty() ? std::string("<unnamed kernel>") : std::string(m.text);
  r.label = KernelLabel(r.kernel);
  auto git = p.gpu_of_ordinal.find(msg.device);
  if (git != p.gpu_of_ordinal.end()) {
    auto g = gpus_.find(git->second);
    if (g != gpus_.end()) r.gpu = static_cast<int32_t>(g->second->record.index);
  }
  r.device = msg.device;
  r.stream = msg.stream_id;
  std::copy(msg.grid, msg.grid + 3, r.grid);
  std::copy(msg.block, msg.block + 3, r.block);
  r.start_ns = Rel(msg.start_ns);
  r.end_ns = std::max(r.start_ns, Rel(msg.end_ns));
  r.flags = msg.flags;
  r.correlation_id = msg.correlation_id;
  r.grid_id = msg.grid_id;
  r.graph_id = msg.graph_id;
  r.registers = msg.registers;
  r.dynamic_smem = msg.dynamic_smem;
  r.static_smem = msg.static_smem;
  r.call = Call(p, msg.call);
  if (r.call.api != nullptr) {
    // One key per call of the producer: a graph's kernels share theirs.
    auto [it, fresh] = p.call_keys.try_emplace(msg.correlation_id, next_call_key_);
    if (fresh) {
      ++next_call_key_;
      p.call_key_order.push_back(msg.correlation_id);
      if (p.call_key_order.size() > kCallKeysKept) {
        p.call_keys.erase(p.call_key_order.front());
        p.call_key_order.pop_front();
      }
    }
    r.call_key = it->second;
    r.call_first = fresh;
  }
  Touch(r.end_ns);
  for (trace::TraceSink* s : sinks_) s->OnLaunch(r);
}

void TraceBuilder::Emit(Producer& p, const Launch& l, Warp& w) {
  for (const RangeMatcher::Record& e : w.ranges.ready()) {
    const Name& name = NameOf(p, e.name_id);
    if (e.kind == RangeMatcher::Kind::kInstant || e.kind == RangeMatcher::Kind::kUnmatchedEnd) {
      trace::InstantRecord r;
      r.name = name.text;
      r.name_key = name.key;
      r.ts_ns = Rel(e.begin_ns);
      r.unmatched_end = e.kind == RangeMatcher::Kind::kUnmatchedEnd;
      if (e.value_flags != 0) {
        r.value.present = true;
        r.value.counter = (e.value_flags & RangeMatcher::kValueCounter) != 0;
        r.value.value = e.value;
      }
      Touch(r.ts_ns);
      for (trace::TraceSink* s : sinks_) s->OnInstant(l.record, w.record, r);
      continue;
    }
    trace::SliceRecord r;
    r.name = name.text;
    r.name_key = name.key;
    r.begin_ns = Rel(e.begin_ns);
    r.end_ns = std::max(r.begin_ns, Rel(e.end_ns));
    r.cycles = e.cycles;
    r.lane = e.lane;
    r.depth = e.depth;
    r.unterminated = e.kind == RangeMatcher::Kind::kUnterminated;
    r.phase = e.phase;
    if (e.value_flags != 0) {
      r.value.present = true;
      r.value.value = e.value;
    }
    if (e.why == RangeMatcher::Why::kTooManyOpen) r.note = internal::kNoteTooManyOpen;
    if (e.why == RangeMatcher::Why::kProducerLost) r.note = internal::kNoteProducerLost;
    Touch(r.end_ns);
    for (trace::TraceSink* s : sinks_) s->OnSlice(l.record, w.record, r);
  }
  w.ranges.ClearReady();
}

void TraceBuilder::OnWarpEvents(Producer& p, const DecodedMessage& m) {
  const wire::WarpEventsMsg& msg = m.warp_events;
  auto lit = p.launches.find(msg.launch_id);
  if (lit == p.launches.end()) {
    summary_.orphan_events += m.event_count;
    if (logger_ && m.event_count != 0) {
      logger_->debug("pid {}: {} events of unknown launch {} dropped", p.info.pid, m.event_count, msg.launch_id);
    }
    return;
  }
  Launch& l = lit->second;
  const Launch::WarpKey key{msg.sm, msg.block[2], msg.block[1], msg.block[0], msg.warp};
  auto [wit, inserted] = l.warps.try_emplace(key);
  Warp& w = wit->second;
  if (inserted) {
    if (!spare_matchers_.empty()) {
      w.ranges = std::move(spare_matchers_.back());
      spare_matchers_.pop_back();
    }
    w.record.index = static_cast<uint32_t>(l.warps.size() - 1);
    w.record.sm = msg.sm;
    std::copy(msg.block, msg.block + 3, w.record.block);
    w.record.warp = msg.warp;
    w.record.hw_warp = msg.hw_warp;
    w.record.program = (msg.flags & wire::kWarpTritonProgram) != 0;
    w.record.cluster = w.record.program ? (msg.flags >> wire::kWarpClusterShift) & wire::kClusterShapeMask : 0;
    for (trace::TraceSink* s : sinks_) s->OnWarp(l.record, w.record);
  }
  for (uint32_t i = 0; i < m.event_count; ++i) {
    const wire::WireEvent e = m.event(i);
    p.last_ns = std::max(p.last_ns, e.time_ns);
    // The whole word: a flag or another kind goes to OnMarker. BEGIN and
    // END as BeginRange and EndRange do, written out: this is the hot path.
    switch (e.kind) {
      case wire::kEventBegin:
        if (w.ranges.open() >= RangeMatcher::kMaxOpen) {  // the oldest range is closed, unterminated
          ++summary_.unterminated_ranges;
          ++summary_.events;
        }
        w.ranges.Begin(e.name_id, e.time_ns, e.cycles);
        break;
      case wire::kEventEnd: {
        const size_t before = w.ranges.open();
        w.ranges.End(e.name_id, e.time_ns, e.cycles);
        if (w.ranges.open() < before) {
          summary_.events += 2;
        } else {
          ++summary_.unmatched_ends;
          ++summary_.events;
        }
        break;
      }
      case wire::kEventInstant:
        w.ranges.Instant(e.name_id, e.time_ns);
        ++summary_.events;
        break;
      default:
        OnMarker(p, l, w, m, &i, e);
        break;
    }
    if (!w.ranges.ready().empty()) Emit(p, l, w);
  }
}

void TraceBuilder::BeginRange(Warp& w, uint32_t name_id, const wire::WireEvent& e) {
  if (w.ranges.open() >= RangeMatcher::kMaxOpen) {  // the oldest range is closed, unterminated
    ++summary_.unterminated_ranges;
    ++summary_.events;
  }
  w.ranges.Begin(name_id, e.time_ns, e.cycles);
}

void TraceBuilder::EndRange(Warp& w, uint32_t name_id, const wire::WireEvent& e, RangeMatcher::Value value) {
  const size_t before = w.ranges.open();
  w.ranges.End(name_id, e.time_ns, e.cycles, value);
  if (w.ranges.open() < before) {
    summary_.events += 2;
  } else {
    ++summary_.unmatched_ends;
    ++summary_.events;
  }
}

void TraceBuilder::OnMarker(Producer& p, Launch& l, Warp& w, const DecodedMessage& m, uint32_t* i,
                            const wire::WireEvent& e) {
  // The decoder admitted only the flags each kind takes, and a wide
  // event's continuation right after it.
  const uint32_t flags = e.kind & wire::kEventFlagsMask;
  const uint32_t name_id = (flags & wire::kEventNameValue) != 0 ? RenderedId(p, e.name_id, e.value) : e.name_id;
  RangeMatcher::Value value{0, 0};
  if ((flags & wire::kEventHasValue) != 0) {
    value.flags = RangeMatcher::kValuePresent;
    if ((flags & wire::kEventCounter) != 0) value.flags |= RangeMatcher::kValueCounter;
    value.value = static_cast<int32_t>(e.value);  // sign-extended
    if ((flags & wire::kEventWideValue) != 0 && *i + 1 < m.event_count) {
      ++*i;
      value.value = static_cast<int64_t>((uint64_t{m.event(*i).value} << 32) | e.value);
    }
  }
  switch (e.kind & wire::kEventKindMask) {
    case wire::kEventBegin:
      BeginRange(w, name_id, e);
      break;
    case wire::kEventEnd:
      EndRange(w, name_id, e, value);
      break;
    case wire::kEventInstant:
      w.ranges.Instant(name_id, e.time_ns, value);
      ++summary_.events;
      break;
    case wire::kEventPhase:
      if (!w.ranges.phase_open() && w.ranges.open() >= RangeMatcher::kMaxOpen) {
        ++summary_.unterminated_ranges;  // the oldest range is closed, unterminated
        ++summary_.events;
      }
      w.ranges.Phase(name_id, e.time_ns, e.cycles);
      ++summary_.events;
      break;
    case wire::kEventPhaseEnd:
      if (!w.ranges.PhaseEnd(name_id, e.time_ns, e.cycles)) ++summary_.unmatched_ends;
      ++summary_.events;
      break;
    case wire::kEventAsyncBegin:
    case wire::kEventAsyncEnd:
      if (l.async.Add((e.kind & wire::kEventKindMask) == wire::kEventAsyncEnd, w.record, name_id, e.value, e.time_ns)) {
        ++summary_.events;
      }
      break;
    default:
      break;  // a continuation is consumed with its event
  }
}

void TraceBuilder::EmitAsync(Producer& p, Launch& l, uint64_t end_abs) {
  summary_.async_dropped += l.async.dropped();
  if (l.async.held() == 0) return;
  std::vector<AsyncMatcher::Span> spans;
  l.async.Match(end_abs, &spans);
  for (const AsyncMatcher::Span& s : spans) {
    const Name& name = NameOf(p, s.name_id);
    trace::AsyncSpanRecord r;
    r.name = name.text;
    r.name_key = name.key;
    r.token = s.token;
    std::copy(s.block, s.block + 3, r.block);
    r.begin_ns = Rel(s.begin_ns);
    r.end_ns = std::max(r.begin_ns, Rel(s.end_ns));
    r.begin_warp = s.begin_warp;
    r.end_warp = s.end_warp;
    r.flow_id = next_flow_id_++;
    ++summary_.async_spans;
    if (r.unterminated()) ++summary_.async_unterminated;
    if (r.unmatched_end()) ++summary_.async_unmatched_ends;
    Touch(r.end_ns);
    for (trace::TraceSink* sink : sinks_) sink->OnAsyncSpan(l.record, r);
  }
}

void TraceBuilder::EndLaunch(Producer& p, Launch& l, bool producer_lost) {
  const bool no_activity = (l.record.flags & wire::kLaunchNoActivity) != 0;
  std::vector<uint32_t> order;
  order.reserve(l.warps.size());
  uint64_t last_ns = l.async.last_ns();  // the launch's latest event
  for (auto& [key, w] : l.warps) {
    const size_t open = w.ranges.open();
    summary_.unterminated_ranges += open;
    summary_.events += open - (w.ranges.phase_open() ? 1 : 0);  // a PHASE counted as it came
    last_ns = std::max(last_ns, w.ranges.last_ns());
    const uint64_t end = no_activity ? w.ranges.last_ns() : std::max(l.end_abs, w.ranges.last_ns());
    w.ranges.CloseAll(end, producer_lost ? RangeMatcher::Why::kProducerLost : RangeMatcher::Why::kNone);
    Emit(p, l, w);
    order.push_back(w.record.index);
    if (spare_matchers_.size() < kSpareMatchers) {
      w.ranges.Reset();
      spare_matchers_.push_back(std::move(w.ranges));
    }
  }
  EmitAsync(p, l, no_activity ? last_ns : std::max(l.end_abs, last_ns));
  for (trace::TraceSink* s : sinks_) s->OnLaunchEnd(l.record, order.data(), order.size());
}

void TraceBuilder::OnHarvest(Producer& p, const DecodedMessage& m) {
  const wire::HarvestMsg& msg = m.harvest;
  for (auto& [id, l] : p.launches) EndLaunch(p, l, false);
  p.launches.clear();

  ++p.harvests;
  if (msg.reason == wire::kHarvestHighWater) ++p.forced_drains;
  if ((msg.flags & wire::kHarvestSwitched) != 0) ++p.switched_drains;
  p.harvest_dropped = SatAdd(p.harvest_dropped, msg.dropped_events);
  p.harvest_unplaced = SatAdd(p.harvest_unplaced, msg.unplaced_events);
  p.last_ns = std::max(p.last_ns, msg.time_ns);

  trace::HarvestRecord h;
  h.ts_ns = Rel(msg.time_ns);
  h.reason = msg.reason;
  h.device = msg.device;
  h.dropped_events = msg.dropped_events;
  h.unplaced_events = msg.unplaced_events;
  h.lost_so_far = SatAdd(p.harvest_dropped, p.harvest_unplaced);
  h.chunks_used = std::min(msg.chunks_used, msg.chunks_total);  // untrusted input
  h.chunks_total = msg.chunks_total;
  h.chunks_empty = std::min(msg.chunks_empty, h.chunks_used);
  if (msg.host_tid != 0) {
    h.tid = msg.host_tid;
    h.thread = ThreadName(p, msg.host_tid);
    h.host_begin_ns = Rel(msg.host_begin_ns);
    h.host_end_ns = std::max(h.host_begin_ns, Rel(msg.host_end_ns));
    h.call = Call(p, msg.call);
    if (h.call.api != nullptr) h.call.end_ns = std::max(h.call.end_ns, h.host_end_ns);
    std::copy(msg.stage_us, msg.stage_us + wire::kHarvestStages, h.stage_us);
  }
  Touch(h.ts_ns);
  for (trace::TraceSink* s : sinks_) s->OnHarvest(p.record, h);
  if (logger_ && (msg.dropped_events != 0 || msg.unplaced_events != 0)) {
    logger_->warn("pid {}: device buffer lost {} events ({} unplaced) in one harvest", p.record.pid, msg.dropped_events,
                  msg.unplaced_events);
  }
}

void TraceBuilder::EndProducer(Producer& p, bool clean) {
  for (auto& [id, l] : p.launches) EndLaunch(p, l, !clean);
  p.launches.clear();
  NameProcess(p);
  if (!clean) {
    ++summary_.producers_incomplete;
    const uint64_t ts = p.last_ns != 0 ? Rel(p.last_ns) : last_rel_ns_;
    for (trace::TraceSink* s : sinks_) s->OnProcessLost(p.record, ts);
    Touch(ts);
    if (logger_) logger_->warn("producer pid {} ended without detaching; its data may be incomplete", p.record.pid);
  }
  ended_dropped_ = SatAdd(ended_dropped_, p.dropped());
  ended_unplaced_ = SatAdd(ended_unplaced_, p.unplaced());
  ended_filtered_ = SatAdd(ended_filtered_, p.filtered());
  ended_unattributed_ = SatAdd(ended_unattributed_, p.unattributed());
  ended_forced_ = SatAdd(ended_forced_, p.all_forced());
  ended_switched_ = SatAdd(ended_switched_, p.switched_drains);
  ended_harvests_ = SatAdd(ended_harvests_, p.all_harvests());
  ended_opted_in_ = SatAdd(ended_opted_in_, p.opted_in());
  ended_not_selected_ = SatAdd(ended_not_selected_, p.not_selected());
  ended_calls_forgotten_ = SatAdd(ended_calls_forgotten_, p.calls_forgotten());
  ended_lost_host_ = SatAdd(ended_lost_host_, p.lost_host());
  ended_skipped_ = SatAdd(ended_skipped_, p.harvests_skipped());
}

void TraceBuilder::HandleProducerEnd(const transport::ProducerInfo& info, bool clean) {
  if (finished_) return;
  Producer& p = GetProducer(info);
  EndProducer(p, clean);
  producers_.erase({info.entry, info.pid});
}

void TraceBuilder::HandleRun(const nlohmann::json& run) {
  if (finished_) return;
  summary_.run = run;
  for (trace::TraceSink* s : sinks_) s->OnRun(run);
}

void TraceBuilder::Finish(const transport::ConsumerStats& transport, CollectorSummary* summary) {
  if (!finished_) {
    while (!producers_.empty()) {
      auto it = producers_.begin();
      EndProducer(*it->second, /*clean=*/false);
      producers_.erase(it);
    }
    finished_ = true;
  }
  CollectorSummary& s = summary_;
  s.lost_device_buffer = ended_dropped_;
  s.lost_device_unplaced = ended_unplaced_;
  s.lost_transport = transport.producer_events_dropped;
  s.lost_host = ended_lost_host_;
  s.transport_unread_messages = transport.unread_messages;
  s.transport_messages_dropped = transport.producer_messages_dropped;
  s.transport_unread_bytes = transport.unread_bytes;
  s.lost_total =
      SatAdd(SatAdd(SatAdd(SatAdd(s.lost_device_buffer, s.lost_device_unplaced), s.lost_transport), s.lost_host),
             s.orphan_events);
  s.filtered_events = ended_filtered_;
  s.unattributed_events = ended_unattributed_;
  s.forced_drains = ended_forced_;
  s.switched_drains = ended_switched_;
  s.harvests = ended_harvests_;
  s.framing_errors = transport.framing_errors;
  s.registry_full = transport.registry_full;
  s.launches_opted_in = ended_opted_in_;
  s.launches_not_selected = ended_not_selected_;
  s.host_calls_forgotten = ended_calls_forgotten_;
  s.harvests_skipped = ended_skipped_;
  s.gpus = nlohmann::json::array();
  for (const Gpu* g : gpu_order_) s.gpus.push_back(g->record.facts);
  // What the builder does not own (the trace's path, the exit status) stays.
  const std::string trace = summary->trace;
  const nlohmann::json exit = summary->exit;
  *summary = s;
  summary->trace = trace;
  summary->exit = exit;
}

}  // namespace smprof
