#include "collector/perfetto_sink.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>

#include "collector/run_summary.h"
#include "collector/trace_labels.h"
#include "collector/trace_placement.h"
#include "smprof/wire.h"

namespace smprof {
namespace {

// Field numbers: perfetto/trace/trace_packet.proto and the messages it holds.
enum : uint32_t {
  kTracePacket = 1,
  // TracePacket
  kClockSnapshot = 6,
  kTimestamp = 8,
  kSequenceId = 10,
  kTrackEvent = 11,
  kInternedData = 12,
  kSequenceFlags = 13,
  kTimestampClockId = 58,
  kPacketDefaults = 59,
  kTrackDescriptor = 60,
  // ClockSnapshot.clocks / Clock
  kClocks = 1,
  kClockId = 1,
  kClockValue = 2,
  kClockIncremental = 3,
  // TracePacketDefaults (timestamp_clock_id is 58 there too)
  kTrackEventDefaults = 11,
  // TrackEventDefaults (the same numbers as in TrackEvent)
  kDefaultTrackUuid = 11,
  kExtraCounterTrackUuids = 31,
  // TrackDescriptor
  kUuid = 1,
  kTrackName = 2,
  kParentUuid = 5,
  kCounter = 8,
  kChildOrdering = 11,
  kSiblingOrderRank = 12,
  kDescription = 14,
  kCounterUnit = 3,
  // TrackEvent
  kDebugAnnotations = 4,
  kType = 9,
  kNameIid = 10,
  kEventTrackUuid = 11,
  kExtraCounterValues = 12,
  kEventName = 23,
  kCounterValue = 30,
  // DebugAnnotation
  kAnnotationNameIid = 1,
  kBoolValue = 2,
  kUintValue = 3,
  kIntValue = 4,
  kDoubleValue = 5,
  kStringValue = 6,
  kAnnotationName = 10,
  kDictEntries = 11,
  kArrayValues = 12,
  // InternedData; EventName and DebugAnnotationName are {iid 1, name 2}
  kEventNames = 2,
  kDebugAnnotationNames = 3,
  kIid = 1,
  kInternedName = 2,
};

enum : uint32_t { kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounterEvent = 4 };
constexpr uint32_t kSeqCleared = 1, kSeqNeedsState = 2;
constexpr uint32_t kBoottime = 6;           // BuiltinClock: trace time
constexpr uint32_t kIncrementalClock = 64;  // sequence-scoped
constexpr uint32_t kMainSequence = 1;
constexpr uint32_t kExplicitOrder = 3;  // TrackDescriptor.ChildTracksOrdering
constexpr uint32_t kUnitCount = 2;      // CounterDescriptor.Unit
constexpr size_t kWriteThreshold = 1u << 20;
constexpr size_t kMaxFastPacket = 64;  // see FastEvent
constexpr uint32_t kNoWarp = UINT32_MAX;

// Debug annotation names of warp events, interned on each warp sequence with
// these iids the first time it uses them.
enum : uint32_t { kCyclesIid = 1, kUnterminatedIid, kNoteIid, kErrorIid };
const char* const kAnnotationNames[] = {"cycles", "unterminated", "note", "smprof_error"};

// Ranks of a block's children: a warp, then its lanes.
constexpr uint32_t kLaneSlots = 1024;

int32_t Rank(int64_t v) { return static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)); }

// Writes a JSON value as the value of the DebugAnnotation being encoded:
// objects and arrays as nested entries (the trace processor flattens them
// into args "a.b" and "a[0]"), null as the string "null" (a name without a
// value would be dropped; legacy_json_value "null" crashes trace processor
// v58).
void JsonValue(proto::ProtoEncoder& e, const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::object:
      for (const auto& [key, item] : v.items()) {
        const auto entry = e.BeginNested(kDictEntries);
        e.Bytes(kAnnotationName, key);
        JsonValue(e, item);
        e.EndNested(entry);
      }
      break;
    case nlohmann::json::value_t::array:
      for (const auto& item : v) {
        const auto entry = e.BeginNested(kArrayValues);
        JsonValue(e, item);
        e.EndNested(entry);
      }
      break;
    case nlohmann::json::value_t::string:
      e.Bytes(kStringValue, v.get_ref<const std::string&>());
      break;
    case nlohmann::json::value_t::boolean:
      e.Varint(kBoolValue, v.get<bool>() ? 1 : 0);
      break;
    case nlohmann::json::value_t::number_unsigned:
      e.Varint(kUintValue, v.get<uint64_t>());
      break;
    case nlohmann::json::value_t::number_integer:
      e.Varint(kIntValue, static_cast<uint64_t>(v.get<int64_t>()));
      break;
    case nlohmann::json::value_t::number_float: {
      const double d = v.get<double>();
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof(bits));
      e.Fixed64(kDoubleValue, bits);
      break;
    }
    default:
      e.Bytes(kStringValue, "null");
      break;
  }
}

// Appends `v` as a varint at `p`; returns the end.
inline char* PutVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

// Whether `known` starts with the bytes of `name`, compared 8 at a time.
inline bool SameBytes(const char* known, std::string_view name) {
  size_t i = 0;
  for (; i + 8 <= name.size(); i += 8) {
    uint64_t a, b;
    std::memcpy(&a, known + i, 8);
    std::memcpy(&b, name.data() + i, 8);
    if (a != b) return false;
  }
  for (; i < name.size(); ++i) {
    if (known[i] != name[i]) return false;
  }
  return true;
}

// The one-byte key of a field numbered below 16.
constexpr char Key(uint32_t field, uint32_t type) { return static_cast<char>((field << 3) | type); }

// Length of the longest prefix of `bytes` made of whole Trace.packet fields.
size_t WholePackets(std::string_view bytes) {
  size_t pos = 0, whole = 0;
  while (pos < bytes.size()) {
    ++pos;  // the tag (0x0a): every top-level field is a packet
    uint64_t len = 0;
    for (int shift = 0;; shift += 7) {
      if (pos >= bytes.size()) return whole;
      const auto b = static_cast<unsigned char>(bytes[pos++]);
      len |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (b < 0x80) break;
    }
    if (len > bytes.size() - pos) return whole;
    pos += len;
    whole = pos;
  }
  return whole;
}

}  // namespace

// Debug annotations of a sequence-1 event (inline names), encoded before
// the event's packet is opened.
class PerfettoSink::Annotations {
 public:
  Annotations& Uint(std::string_view name, uint64_t v) {
    Entry(name, [&] { e_.Varint(kUintValue, v); });
    return *this;
  }
  Annotations& Bool(std::string_view name, bool v) {
    Entry(name, [&] { e_.Varint(kBoolValue, v ? 1 : 0); });
    return *this;
  }
  Annotations& String(std::string_view name, std::string_view v) {
    Entry(name, [&] { e_.Bytes(kStringValue, v); });
    return *this;
  }
  Annotations& Json(std::string_view name, const nlohmann::json& v) {
    Entry(name, [&] { JsonValue(e_, v); });
    return *this;
  }
  // Each member of a JSON object as one annotation (but `skip`).
  Annotations& Members(const nlohmann::json& object, std::string_view skip = {}) {
    if (!object.is_object()) return Json("value", object);
    for (const auto& [key, value] : object.items()) {
      if (key != skip) Json(key, value);
    }
    return *this;
  }

  // Appends them to the TrackEvent being encoded in `out`.
  void WriteTo(proto::ProtoEncoder& out) const {
    size_t start = 0;
    for (const size_t end : ends_) {
      out.Bytes(kDebugAnnotations, e_.bytes().substr(start, end - start));
      start = end;
    }
  }

 private:
  template <typename F>
  void Entry(std::string_view name, F&& value) {
    e_.Bytes(kAnnotationName, name);
    value();
    ends_.push_back(e_.size());
  }

  proto::ProtoEncoder e_;  // the DebugAnnotation messages, back to back
  std::vector<size_t> ends_;
};

// The END of a slice whose BEGIN is written.
struct PerfettoSink::PendingEnd {
  uint64_t end_ns;
  uint32_t lane;
  uint32_t depth;
  // Whether it is written before `o`: earliest end first, the deeper slice
  // first on equal ends.
  bool Before(const PendingEnd& o) const { return end_ns != o.end_ns ? end_ns < o.end_ns : depth > o.depth; }
};

// A sibling lane of a warp: its track and that track's "cycles" counter.
struct PerfettoSink::Lane {
  uint64_t track = 0;   // 0: not described yet
  uint64_t cycles = 0;  // 0: CyclesEncoding::kAnnotation
};

// A warp of an open launch: its tracks, its sequence while it has one.
struct PerfettoSink::Warp {
  uint64_t track = 0;  // 0: not described yet
  uint64_t block_track = 0;
  uint64_t cycles = 0;  // the "cycles" counter track (0: CyclesEncoding::kAnnotation)
  uint16_t warp = 0;
  std::vector<Lane> lanes;  // lane n at n - 1
  // Pending ENDs, the next to write at the back. Slices on a lane nest, so
  // a new END almost always goes at the back: kept sorted by insertion.
  // They outlive the sequence (see the header).
  std::vector<PendingEnd> ends;
  // The open sequence and its incremental state.
  uint32_t seq = 0;               // 0: none
  uint32_t annotation_names = 0;  // bit iid-1 set: that debug annotation name is interned
  uint64_t last_ns = 0;           // the incremental clock's value
  std::vector<uint32_t> names;    // run-wide name ids; the sequence's iid is index + 1
};

struct PerfettoSink::Launch {
  uint64_t track = 0;
  uint32_t process = 0;
  uint32_t grid[3] = {0, 0, 0};
  uint64_t events = 0;                         // device events written (a closed slice is two)
  std::unordered_map<uint32_t, uint64_t> sms;  // SM -> track
  std::map<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>, uint64_t> blocks;  // (sm, z, y, x) -> track
  std::vector<Warp> warps;                                                        // by WarpRecord::index
  uint32_t current = kNoWarp;  // the warp with the launch's open sequence
};

struct PerfettoSink::Gpu {
  uint64_t track = 0;
  std::string name, uuid, pci_bus_id;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> streams;  // (pid, stream) -> track
};

struct PerfettoSink::Process {
  trace::ProcessRecord record;  // as known so far
  uint64_t track = 0;           // 0: not described yet
  uint64_t lost_track = 0, harvested_track = 0;
  uint64_t events = 0;  // device events written since the previous harvest
};

// --- opening, writing out --------------------------------------------------

std::unique_ptr<PerfettoSink> PerfettoSink::Open(const std::string& path, bool exclusive, std::string* error) {
  const int fd = OpenTraceFile(path, exclusive, /*read_back=*/false, error);
  if (fd < 0) return nullptr;
  std::unique_ptr<PerfettoSink> sink(new PerfettoSink(fd, path));
  if (!sink->Flush()) {
    if (error) *error = sink->error();
    return nullptr;
  }
  return sink;
}

PerfettoSink::PerfettoSink(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
  run_track_ = NewTrack(0, "smprof run", -2000, false);
}

PerfettoSink::~PerfettoSink() {
  if (fd_ >= 0) {
    WriteOut();
    ::close(fd_);
  }
}

void PerfettoSink::Grow(size_t n) {
  const size_t cap = std::max(out_cap_ * 2, out_size_ + n);
  std::unique_ptr<char[]> out(new char[cap]);
  if (out_size_ != 0) std::memcpy(out.get(), out_.get(), out_size_);
  out_ = std::move(out);
  out_cap_ = cap;
}

void PerfettoSink::EndPacket(proto::ProtoEncoder::Nested packet) {
  packet_.EndNested(packet);
  const std::string_view bytes = packet_.bytes();
  std::memcpy(Room(bytes.size()), bytes.data(), bytes.size());
  out_size_ += bytes.size();
  packet_.Clear();
  if (out_size_ >= kWriteThreshold) WriteOut();
}

bool PerfettoSink::Flush() {
  if (fd_ >= 0) WriteOut();
  return !failed();
}

void PerfettoSink::WriteOut() {
  const std::string_view bytes(out_.get(), out_size_);
  size_t done = 0;
  while (!failed() && done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      FailWrite(n < 0 ? errno : ENOSPC, bytes, done);
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (!failed()) written_ += done;
  out_size_ = 0;  // after an error, output is discarded rather than kept
}

void PerfettoSink::FailWrite(int err, std::string_view bytes, size_t done) {
  error_ = "writing trace file '" + path_ + "': " + std::strerror(err);
  // The buffer holds whole packets: the file ends inside one unless the
  // failed write began or ended at a packet boundary.
  const size_t whole = WholePackets(bytes.substr(0, done));
  if (whole == done) {
    error_ += "; the trace ends after the last packet written whole";
  } else if (::ftruncate(fd_, static_cast<off_t>(written_ + whole)) == 0) {
    error_ += "; the trace was cut after the last packet written whole";
  } else {
    error_ += "; the trace may end inside a packet";
  }
  written_ += whole;
}

// --- tracks and sequence-1 events ------------------------------------------

uint64_t PerfettoSink::NewTrack(uint64_t parent, std::string_view name, int64_t rank, bool ordered_children,
                                std::string_view description) {
  const uint64_t uuid = next_uuid_++;
  const auto p = packet_.BeginNested(kTracePacket);
  packet_.Varint(kSequenceId, kMainSequence);
  const auto d = packet_.BeginNested(kTrackDescriptor);
  packet_.Varint(kUuid, uuid);
  if (parent != 0) packet_.Varint(kParentUuid, parent);
  packet_.Bytes(kTrackName, name);
  if (!description.empty()) packet_.Bytes(kDescription, description);
  if (ordered_children) packet_.Varint(kChildOrdering, kExplicitOrder);
  packet_.Varint(kSiblingOrderRank, static_cast<uint64_t>(static_cast<int64_t>(Rank(rank))));
  packet_.EndNested(d);
  EndPacket(p);
  return uuid;
}

uint64_t PerfettoSink::NewCounterTrack(uint64_t parent, std::string_view name) {
  const uint64_t uuid = next_uuid_++;
  const auto p = packet_.BeginNested(kTracePacket);
  packet_.Varint(kSequenceId, kMainSequence);
  const auto d = packet_.BeginNested(kTrackDescriptor);
  packet_.Varint(kUuid, uuid);
  packet_.Varint(kParentUuid, parent);
  packet_.Bytes(kTrackName, name);
  const auto c = packet_.BeginNested(kCounter);
  packet_.Varint(kCounterUnit, kUnitCount);
  packet_.EndNested(c);
  packet_.EndNested(d);
  EndPacket(p);
  return uuid;
}

void PerfettoSink::MainEvent(uint64_t track, uint32_t type, std::string_view name, uint64_t ts_ns,
                             const Annotations* args) {
  last_ns_ = std::max(last_ns_, ts_ns);
  const auto p = packet_.BeginNested(kTracePacket);
  packet_.Varint(kTimestamp, ts_ns);
  packet_.Varint(kSequenceId, kMainSequence);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, type);
  packet_.Varint(kEventTrackUuid, track);
  if (type != kSliceEnd) packet_.Bytes(kEventName, name);
  if (args != nullptr) args->WriteTo(packet_);
  packet_.EndNested(te);
  EndPacket(p);
}

void PerfettoSink::Counter(uint64_t track, uint64_t ts_ns, uint64_t value) {
  last_ns_ = std::max(last_ns_, ts_ns);
  const auto p = packet_.BeginNested(kTracePacket);
  packet_.Varint(kTimestamp, ts_ns);
  packet_.Varint(kSequenceId, kMainSequence);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, kCounterEvent);
  packet_.Varint(kEventTrackUuid, track);
  packet_.Varint(kCounterValue, std::min<uint64_t>(value, INT64_MAX));
  packet_.EndNested(te);
  EndPacket(p);
}

// --- run, GPUs, processes --------------------------------------------------

void PerfettoSink::OnRun(const nlohmann::json& run) {
  if (failed() || finished_) return;
  Annotations args;
  args.Members(run);
  MainEvent(run_track_, kInstant, "smprof run", 0, &args);
}

void PerfettoSink::OnGpu(const trace::GpuRecord& gpu) {
  if (failed() || finished_) return;
  auto& g = gpus_[gpu.index];
  g = std::make_unique<Gpu>();
  g->name = gpu.name;
  g->uuid = gpu.uuid;
  g->pci_bus_id = gpu.pci_bus_id;
  g->track =
      NewTrack(0, internal::GpuTitle(gpu), -1000 + static_cast<int64_t>(gpu.index), true, internal::GpuFactsLine(gpu));
  Annotations args;
  args.Members(gpu.facts, "seen_as");
  MainEvent(g->track, kInstant, "GPU " + std::to_string(gpu.index) + " identity", 0, &args);
}

PerfettoSink::Process& PerfettoSink::ProcessOf(const trace::ProcessRecord& process) {
  auto& p = processes_[process.index];
  if (!p) {
    p = std::make_unique<Process>();
    p->record = process;
  }
  return *p;
}

uint64_t PerfettoSink::ProcessTrack(Process& p) {
  if (p.track == 0) {
    p.track = NewTrack(0, internal::ProcessTitle(p.record), static_cast<int64_t>(p.record.index), false);
  }
  return p.track;
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
    MainEvent(p.track, kInstant, "process named", last_ns_, &args);
  }
}

void PerfettoSink::OnNotice(const trace::ProcessRecord& process, uint64_t ts_ns, std::string_view reason,
                            std::string_view detail) {
  if (failed() || finished_) return;
  Annotations args;
  args.String("reason", reason).String("detail", detail);
  MainEvent(ProcessTrack(ProcessOf(process)), kInstant, "not profiled", ts_ns, &args);
}

void PerfettoSink::OnHarvest(const trace::ProcessRecord& process, const trace::HarvestRecord& harvest) {
  if (failed() || finished_) return;
  Process& p = ProcessOf(process);
  const uint64_t track = ProcessTrack(p);
  Annotations args;
  args.Uint("device", harvest.device)
      .Uint("dropped_events", harvest.dropped_events)
      .Uint("unplaced_events", harvest.unplaced_events);
  MainEvent(track, kInstant, internal::HarvestReasonName(harvest.reason), harvest.ts_ns, &args);
  if (p.lost_track == 0) {
    p.lost_track = NewCounterTrack(track, "events lost (device buffer)");
    p.harvested_track = NewCounterTrack(track, "events harvested");
  }
  Counter(p.lost_track, harvest.ts_ns, harvest.lost_so_far);
  Counter(p.harvested_track, harvest.ts_ns, p.events);
  p.events = 0;
}

void PerfettoSink::OnProcessLost(const trace::ProcessRecord& process, uint64_t ts_ns) {
  if (failed() || finished_) return;
  Annotations args;
  args.String("smprof_error", "producer ended without a clean detach");
  MainEvent(ProcessTrack(ProcessOf(process)), kInstant, "process lost", ts_ns, &args);
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

  const auto git = launch.gpu >= 0 ? gpus_.find(static_cast<uint32_t>(launch.gpu)) : gpus_.end();
  Gpu* gpu = git != gpus_.end() ? git->second.get() : nullptr;
  l.track = NewTrack(gpu != nullptr ? gpu->track : 0, internal::LaunchTitle(launch),
                     static_cast<int64_t>(launch.start_ns / 1000), true);

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
  }
  const uint64_t end = std::max(launch.start_ns, launch.end_ns);
  MainEvent(l.track, kSliceBegin, launch.kernel, launch.start_ns, &args);
  MainEvent(l.track, kSliceEnd, {}, end, nullptr);

  // The same span on the GPU's track of the process's stream (a stream runs
  // one kernel at a time, so its spans never overlap).
  if (gpu != nullptr) {
    auto [it, inserted] = gpu->streams.try_emplace({launch.pid, launch.stream}, 0);
    if (inserted) {
      it->second = NewTrack(gpu->track,
                            "pid " + std::to_string(launch.pid) + " | cuda:" + std::to_string(launch.device) +
                                " | stream " + std::to_string(launch.stream),
                            INT32_MIN + static_cast<int64_t>(gpu->streams.size()), false);
    }
    Annotations span;
    span.Uint("launch_id", launch.launch_id).Uint("pid", launch.pid);
    MainEvent(it->second, kSliceBegin, launch.label, launch.start_ns, &span);
    MainEvent(it->second, kSliceEnd, {}, end, nullptr);
  }
}

inline PerfettoSink::Launch& PerfettoSink::LaunchOf(const trace::LaunchRecord& launch) {
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

  auto [sm, new_sm] = l.sms.try_emplace(warp.sm, 0);
  if (new_sm) {
    char name[16];
    std::snprintf(name, sizeof(name), "SM %03u", static_cast<unsigned>(warp.sm));
    sm->second = NewTrack(l.track, name, warp.sm, true);
  }
  auto [block, new_block] = l.blocks.try_emplace({warp.sm, warp.block[2], warp.block[1], warp.block[0]}, 0);
  if (new_block) {
    const uint64_t linear = warp.block[0] + static_cast<uint64_t>(l.grid[0]) *
                                                (warp.block[1] + static_cast<uint64_t>(l.grid[1]) * warp.block[2]);
    block->second = NewTrack(sm->second, "block " + internal::Dim3(warp.block),
                             static_cast<int64_t>(std::min<uint64_t>(linear, INT32_MAX)), true);
  }
  w.block_track = block->second;
  w.track =
      NewTrack(w.block_track, "warp " + std::to_string(warp.warp), static_cast<int64_t>(warp.warp) * kLaneSlots, false);
  if (counters_) w.cycles = NewCounterTrack(w.track, "cycles");
}

inline PerfettoSink::Warp& PerfettoSink::DescribedWarp(Launch& l, const trace::WarpRecord& warp) {
  if (warp.index >= l.warps.size() || l.warps[warp.index].track == 0) DescribeWarp(l, warp);
  return l.warps[warp.index];
}

inline PerfettoSink::Warp& PerfettoSink::ActiveWarp(Launch& l, const trace::WarpRecord& warp) {
  if (warp.index == l.current) return l.warps[warp.index];
  return SwitchWarp(l, warp);
}

PerfettoSink::Warp& PerfettoSink::SwitchWarp(Launch& l, const trace::WarpRecord& warp) {
  if (l.current != kNoWarp) EndSequence(l.warps[l.current]);
  Warp& w = DescribedWarp(l, warp);
  StartSequence(w);
  l.current = warp.index;
  return w;
}

void PerfettoSink::StartSequence(Warp& w) {
  if (free_seqs_.empty()) {
    w.seq = next_seq_++;
  } else {
    w.seq = free_seqs_.back();
    free_seqs_.pop_back();
  }
  // Clear the sequence (a reused id too), start clock 64 at BOOTTIME's 0,
  // make the warp's track the default and its counter the extra one.
  const auto p = packet_.BeginNested(kTracePacket);
  packet_.Varint(kSequenceId, w.seq);
  packet_.Varint(kSequenceFlags, kSeqCleared | kSeqNeedsState);
  const auto snapshot = packet_.BeginNested(kClockSnapshot);
  for (const uint32_t id : {kIncrementalClock, kBoottime}) {
    const auto c = packet_.BeginNested(kClocks);
    packet_.Varint(kClockId, id);
    packet_.Varint(kClockValue, 0);
    if (id == kIncrementalClock) packet_.Varint(kClockIncremental, 1);
    packet_.EndNested(c);
  }
  packet_.EndNested(snapshot);
  const auto defaults = packet_.BeginNested(kPacketDefaults);
  packet_.Varint(kTimestampClockId, kIncrementalClock);
  const auto te = packet_.BeginNested(kTrackEventDefaults);
  packet_.Varint(kDefaultTrackUuid, w.track);
  if (w.cycles != 0) packet_.Varint(kExtraCounterTrackUuids, w.cycles);
  packet_.EndNested(te);
  packet_.EndNested(defaults);
  EndPacket(p);
}

// The pending ENDs stay with the warp (see the header).
void PerfettoSink::EndSequence(Warp& w) {
  free_seqs_.push_back(w.seq);
  w.seq = 0;
  w.annotation_names = 0;
  w.last_ns = 0;
  w.names.clear();
}

const PerfettoSink::Lane& PerfettoSink::LaneOf(Warp& w, uint32_t lane) {
  if (w.lanes.size() < lane) w.lanes.resize(lane);
  Lane& l = w.lanes[lane - 1];
  if (l.track == 0) {
    l.track = NewTrack(w.block_track, "warp " + std::to_string(w.warp) + " lane " + std::to_string(lane),
                       static_cast<int64_t>(w.warp) * kLaneSlots + std::min(lane, kLaneSlots - 1), false);
    if (counters_) l.cycles = NewCounterTrack(l.track, "cycles");
  }
  return l;
}

// --- names -----------------------------------------------------------------

inline uint32_t PerfettoSink::NameId(std::string_view name) {
  const CachedName& c = name_cache_[(reinterpret_cast<uintptr_t>(name.data()) >> 3) & 255];
  if (c.data != nullptr && c.data == name.data() && c.size == name.size() && SameBytes(c.known, name)) {
    return c.id;  // the same bytes still (a caller may reuse its buffer for another name)
  }
  return LookUpName(name);
}

uint32_t PerfettoSink::LookUpName(std::string_view name) {
  auto it = name_ids_.find(name);
  uint32_t id;
  if (it != name_ids_.end()) {
    id = it->second;
  } else {
    id = static_cast<uint32_t>(names_.size());
    names_.emplace_back(name);
    name_ids_.emplace(names_.back(), id);
  }
  name_cache_[(reinterpret_cast<uintptr_t>(name.data()) >> 3) & 255] =
      CachedName{name.data(), name.size(), id, names_[id].data()};
  return id;
}

inline uint32_t PerfettoSink::NameIid(Warp& w, uint32_t name_id, bool* fresh) {
  for (size_t i = 0; i < w.names.size(); ++i) {
    if (w.names[i] == name_id) return static_cast<uint32_t>(i + 1);
  }
  w.names.push_back(name_id);
  *fresh = true;
  return static_cast<uint32_t>(w.names.size());
}

// --- warp events -----------------------------------------------------------

proto::ProtoEncoder::Nested PerfettoSink::BeginWarpPacket(Warp& w, uint64_t t) {
  last_ns_ = std::max(last_ns_, t);
  const auto p = packet_.BeginNested(kTracePacket);
  if (t >= w.last_ns) {
    packet_.Varint(kTimestamp, t - w.last_ns);
    w.last_ns = t;
  } else {
    packet_.Varint(kTimestamp, t);
    packet_.Varint(kTimestampClockId, kBoottime);
  }
  packet_.Varint(kSequenceId, w.seq);
  return p;
}

void PerfettoSink::Intern(Warp& w, uint32_t iid, std::string_view name, uint32_t annotation_names) {
  if (iid == 0 && annotation_names == 0) return;
  const auto interned = packet_.BeginNested(kInternedData);
  if (iid != 0) {
    const auto n = packet_.BeginNested(kEventNames);
    packet_.Varint(kIid, iid);
    packet_.Bytes(kInternedName, name);
    packet_.EndNested(n);
  }
  for (uint32_t a = kCyclesIid; a <= kErrorIid; ++a) {
    if (!(annotation_names & (1u << (a - 1)))) continue;
    const auto n = packet_.BeginNested(kDebugAnnotationNames);
    packet_.Varint(kIid, a);
    packet_.Bytes(kInternedName, kAnnotationNames[a - 1]);
    packet_.EndNested(n);
  }
  packet_.EndNested(interned);
  w.annotation_names |= annotation_names;
}

// Inlined into its three callers: the call itself would cost a quarter of it.
[[gnu::always_inline]] inline void PerfettoSink::FastEvent(Warp& w, uint64_t t, uint32_t type, uint32_t iid,
                                                           const Lane* lane, bool has_cycles, uint32_t cycles) {
  last_ns_ = std::max(last_ns_, t);
  // At most 2 + (11 + 3 + 6) + 2 + (2 + 6 + 11 + (12 + 6 | 7)) = 61 bytes:
  // both lengths fit one byte.
  char* const packet = Room(kMaxFastPacket);
  *packet = Key(kTracePacket, proto::kLengthDelimited);
  char* const packet_size = packet + 1;
  char* p = packet + 2;
  *p++ = Key(kTimestamp, proto::kVarint);
  if (t >= w.last_ns) {
    p = PutVarint(p, t - w.last_ns);
    w.last_ns = t;
  } else {
    p = PutVarint(p, t);
    p = PutVarint(p, (kTimestampClockId << 3) | proto::kVarint);
    *p++ = static_cast<char>(kBoottime);
  }
  *p++ = Key(kSequenceId, proto::kVarint);
  p = PutVarint(p, w.seq);
  *p++ = Key(kTrackEvent, proto::kLengthDelimited);
  char* const te_size = p++;
  *p++ = Key(kType, proto::kVarint);
  *p++ = static_cast<char>(type);
  if (iid != 0) {
    *p++ = Key(kNameIid, proto::kVarint);
    p = PutVarint(p, iid);
  }
  if (lane != nullptr) {
    *p++ = Key(kEventTrackUuid, proto::kVarint);
    p = PutVarint(p, lane->track);
  }
  if (has_cycles) {
    if (counters_) {
      if (lane != nullptr) {
        p = PutVarint(p, (kExtraCounterTrackUuids << 3) | proto::kVarint);
        p = PutVarint(p, lane->cycles);
      }
      *p++ = Key(kExtraCounterValues, proto::kVarint);
      p = PutVarint(p, cycles);
    } else {
      *p++ = Key(kDebugAnnotations, proto::kLengthDelimited);
      char* const a_size = p++;
      *p++ = Key(kAnnotationNameIid, proto::kVarint);
      *p++ = static_cast<char>(kCyclesIid);
      *p++ = Key(kUintValue, proto::kVarint);
      p = PutVarint(p, cycles);
      *a_size = static_cast<char>(p - a_size - 1);
    }
  }
  *te_size = static_cast<char>(p - te_size - 1);
  *packet_size = static_cast<char>(p - packet_size - 1);
  out_size_ += static_cast<size_t>(p - packet);
  if (out_size_ >= kWriteThreshold) WriteOut();
}

void PerfettoSink::EventCycles(const Lane* lane, uint32_t type, uint32_t cycles) {
  if (counters_) {
    if (lane != nullptr) packet_.Varint(kExtraCounterTrackUuids, lane->cycles);
    packet_.Varint(kExtraCounterValues, cycles);
  } else if (type == kSliceBegin) {
    const auto a = packet_.BeginNested(kDebugAnnotations);
    packet_.Varint(kAnnotationNameIid, kCyclesIid);
    packet_.Varint(kUintValue, cycles);
    packet_.EndNested(a);
  }
}

inline void PerfettoSink::WriteEnd(Warp& w, const PendingEnd& end) {
  FastEvent(w, end.end_ns, kSliceEnd, 0, end.lane != 0 ? &w.lanes[end.lane - 1] : nullptr, false, 0);
}

inline void PerfettoSink::PushEnd(Warp& w, const PendingEnd& end) {
  if (w.ends.empty() || !w.ends.back().Before(end)) return w.ends.push_back(end);
  auto at = w.ends.end() - 1;
  while (at != w.ends.begin() && (at - 1)->Before(end)) --at;
  w.ends.insert(at, end);
}

void PerfettoSink::SettleEnds(Warp& w, uint64_t t, uint32_t lane, uint32_t depth) {
  while (!w.ends.empty() && w.ends.back().end_ns < t) {
    WriteEnd(w, w.ends.back());
    w.ends.pop_back();
  }
  if (lane == kAnyLane) return;
  // Ends at t: those of `lane` that do not enclose the slice beginning at t
  // (deepest first, in their order). The others wait: a slice at t may
  // still begin inside them, and other lanes are other tracks.
  held_.clear();
  while (!w.ends.empty() && w.ends.back().end_ns == t) {
    const PendingEnd end = w.ends.back();
    w.ends.pop_back();
    if (end.lane == lane && end.depth >= depth) {
      WriteEnd(w, end);
    } else {
      held_.push_back(end);
    }
  }
  w.ends.insert(w.ends.end(), held_.rbegin(), held_.rend());
}

void PerfettoSink::OnSlice(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                           const trace::SliceRecord& slice) {
  if (failed() || finished_) return;
  Launch& l = LaunchOf(launch);
  Warp& w = ActiveWarp(l, warp);
  const Lane* const lane = slice.lane != 0 ? &LaneOf(w, slice.lane) : nullptr;
  bool fresh = false;
  const uint32_t iid = NameIid(w, NameId(slice.name), &fresh);
  const uint32_t want = slice.unterminated
                            ? (1u << (kUnterminatedIid - 1)) | (slice.note.empty() ? 0 : 1u << (kNoteIid - 1))
                            : (counters_ ? 0 : 1u << (kCyclesIid - 1));
  const uint32_t new_names = want & ~w.annotation_names;
  SettleEnds(w, slice.begin_ns, slice.lane, slice.depth);
  PushEnd(w, PendingEnd{std::max(slice.begin_ns, slice.end_ns), slice.lane, slice.depth});
  l.events += slice.unterminated ? 1 : 2;
  if (!fresh && new_names == 0 && !slice.unterminated) {
    return FastEvent(w, slice.begin_ns, kSliceBegin, iid, lane, true, slice.cycles);
  }

  const auto p = BeginWarpPacket(w, slice.begin_ns);
  Intern(w, fresh ? iid : 0, slice.name, new_names);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, kSliceBegin);
  packet_.Varint(kNameIid, iid);
  if (lane != nullptr) packet_.Varint(kEventTrackUuid, lane->track);
  if (!slice.unterminated) {
    EventCycles(lane, kSliceBegin, slice.cycles);
  } else {
    const auto a = packet_.BeginNested(kDebugAnnotations);
    packet_.Varint(kAnnotationNameIid, kUnterminatedIid);
    packet_.Varint(kBoolValue, 1);
    packet_.EndNested(a);
    if (!slice.note.empty()) {
      const auto n = packet_.BeginNested(kDebugAnnotations);
      packet_.Varint(kAnnotationNameIid, kNoteIid);
      packet_.Bytes(kStringValue, slice.note);
      packet_.EndNested(n);
    }
  }
  packet_.EndNested(te);
  EndPacket(p);
}

void PerfettoSink::OnInstant(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                             const trace::InstantRecord& instant) {
  if (failed() || finished_) return;
  Launch& l = LaunchOf(launch);
  Warp& w = ActiveWarp(l, warp);
  std::string_view name = instant.name;
  if (instant.unmatched_end) {
    scratch_.assign(instant.name);
    scratch_ += " (end without begin)";
    name = scratch_;
  }
  bool fresh = false;
  const uint32_t iid = NameIid(w, NameId(name), &fresh);
  const uint32_t new_names = instant.unmatched_end ? (1u << (kErrorIid - 1)) & ~w.annotation_names : 0;
  // Only the ENDs before it: an instant at a slice's last nanosecond stays
  // inside the slice (it may have been recorded there, and a zero-length
  // slice after it may still nest in that one).
  SettleEnds(w, instant.ts_ns, kAnyLane, 0);
  ++l.events;
  // With counters, its 0 cycles: one value per slice row (see the header).
  if (!fresh && !instant.unmatched_end) return FastEvent(w, instant.ts_ns, kInstant, iid, nullptr, counters_, 0);

  const auto p = BeginWarpPacket(w, instant.ts_ns);
  Intern(w, fresh ? iid : 0, name, new_names);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, kInstant);
  packet_.Varint(kNameIid, iid);
  EventCycles(nullptr, kInstant, 0);
  if (instant.unmatched_end) {
    const auto a = packet_.BeginNested(kDebugAnnotations);
    packet_.Varint(kAnnotationNameIid, kErrorIid);
    packet_.Bytes(kStringValue, "unmatched end");
    packet_.EndNested(a);
  }
  packet_.EndNested(te);
  EndPacket(p);
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
    if (w.seq != 0) {
      for (auto end = w.ends.rbegin(); end != w.ends.rend(); ++end) WriteEnd(w, *end);
      EndSequence(w);
    } else {
      // Left by an ended sequence: after every other event of the warp.
      for (auto end = w.ends.rbegin(); end != w.ends.rend(); ++end) {
        MainEvent(end->lane != 0 ? w.lanes[end->lane - 1].track : w.track, kSliceEnd, {}, end->end_ns, nullptr);
      }
    }
  }
  auto p = processes_.find(l.process);
  if (p != processes_.end()) p->second->events += l.events;
  if (last_launch_ == &l) last_launch_ = nullptr;
  launches_.erase(it);
}

// --- the end ---------------------------------------------------------------

bool PerfettoSink::Finish(const CollectorSummary& summary) {
  if (finished_) return !failed();
  while (!launches_.empty() && !failed()) EndLaunch(launches_.begin()->first);
  for (auto& [index, p] : processes_) {
    if (!failed()) ProcessTrack(*p);
  }
  if (!failed()) {
    nlohmann::json all = summary.ToJson();
    all["unknown_names"] = summary.unknown_names;
    all["clamped_timestamps"] = summary.clamped_timestamps;
    all["transport_messages_dropped"] = summary.transport_messages_dropped;
    all["transport_unread_bytes"] = summary.transport_unread_bytes;
    Annotations args;
    args.Members(all);
    MainEvent(run_track_, kInstant, "smprof run summary", last_ns_, &args);
  }
  finished_ = true;
  WriteOut();
  if (::close(fd_) != 0 && !failed()) error_ = "closing trace file '" + path_ + "': " + std::strerror(errno);
  fd_ = -1;
  return !failed();
}

}  // namespace smprof
