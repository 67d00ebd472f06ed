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

#include "collector/proto_reader.h"
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
  kProcessDescriptor = 3,
  kThreadDescriptor = 4,
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
  kFlowIds = 47,
  kTerminatingFlowIds = 48,
  // ProcessDescriptor / ThreadDescriptor
  kDescriptorPid = 1,
  kDescriptorTid = 2,
  kThreadName = 5,
  kProcessName = 6,
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
constexpr uint32_t kUnknownGpu = UINT32_MAX;  // kHardware: launches of an undescribed GPU
constexpr uint32_t kOverlapSlots = 16;        // ranks of a slot's overlap tracks

// Debug annotation names of warp events, interned on each warp sequence with
// these iids the first time it uses them.
enum : uint32_t { kCyclesIid = 1, kUnterminatedIid, kNoteIid, kErrorIid, kValueIid };
const char* const kAnnotationNames[] = {"cycles", "unterminated", "note", "smprof_error", "value"};

// Async spans' flows: their ids with this bit, apart from the launch calls'.
constexpr uint64_t kAsyncFlow = uint64_t{1} << 63;

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

// A counter of the user's (a counter sample's marker name) under a warp's
// or a slot's track.
struct PerfettoSink::UserCounter {
  uint32_t name = 0;  // run-wide name id
  uint64_t track = 0;
};

// An "async" track of a block (kLaunch) or an SM (kHardware), or one of its
// sibling lanes, with the spans on it that may still enclose a later one.
struct PerfettoSink::AsyncLane {
  uint64_t track = 0;
  uint64_t last_begin = 0;     // the latest span's begin: spans on a lane come in begin order
  std::vector<uint64_t> ends;  // the ends of the nested spans that may be open, innermost at the back
};

struct PerfettoSink::AsyncTracks {
  uint64_t parent = 0;  // the block's track, or the SM's
  std::vector<AsyncLane> lanes;
};

// kHardware: a track of a warp slot ("slot 05", or one of its overlap
// siblings) with its lanes, and the warp whose slice is open on it.
struct PerfettoSink::Slot {
  uint64_t parent = 0;  // the SM's track
  uint64_t track = 0, cycles = 0;
  std::string name;
  int64_t rank = 0;
  std::vector<Lane> lanes;  // lane n at n - 1
  std::vector<UserCounter> counters;
  bool used = false;
  uint64_t busy_until = 0;  // the latest end of its warps' records
  uint64_t launch = 0;      // the open warp slice's launch index and warp (kNoWarp: none)
  uint32_t warp = kNoWarp;
};

// A warp of an open launch: its tracks, its sequence while it has one.
struct PerfettoSink::Warp {
  bool described = false;
  uint64_t track = 0;  // launch-centric: its track; hardware: its slot track's (0: not placed yet)
  uint64_t block_track = 0;
  uint64_t cycles = 0;  // the "cycles" counter track (0: CyclesEncoding::kAnnotation)
  uint16_t warp = 0;
  std::vector<Lane> lanes;            // lane n at n - 1 (launch-centric)
  std::vector<UserCounter> counters;  // launch-centric
  // kHardware: where it is and its warp slice (the latest one's time span
  // on `slot` once closed).
  uint16_t sm = 0, hw_warp = 0;
  uint32_t block[3] = {0, 0, 0};
  Slot* slot = nullptr;
  bool span_open = false;
  uint64_t span_begin = 0;
  uint64_t closed_begin = 0, closed_end = 0;
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
  uint64_t index = 0;     // LaunchRecord::index
  bool hardware = false;  // TraceLayout of this launch
  Gpu* gpu = nullptr;     // kHardware: where its slots are
  std::string title;      // kHardware: its warp slices' name, "#id label"
  uint64_t launch_id = 0;
  uint32_t pid = 0;
  uint64_t track = 0;
  uint32_t process = 0;
  uint32_t grid[3] = {0, 0, 0};
  uint64_t events = 0;                         // device events written (a closed slice is two)
  std::unordered_map<uint32_t, uint64_t> sms;  // SM -> track
  std::map<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>, uint64_t> blocks;  // (sm, z, y, x) -> track
  std::vector<Warp> warps;                                                        // by WarpRecord::index
  uint32_t current = kNoWarp;  // the warp with the launch's open sequence
  std::map<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>, AsyncTracks> async;  // as `blocks` (kLaunch)
};

struct PerfettoSink::Gpu {
  uint64_t track = 0;
  std::string name, uuid, pci_bus_id;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> streams;  // (pid, stream) -> track
  // kHardware
  std::unordered_map<uint32_t, uint64_t> sms;                              // SM -> track
  std::unordered_map<uint32_t, std::vector<std::unique_ptr<Slot>>> slots;  // (sm << 16 | slot) -> its tracks
  std::unordered_map<uint32_t, AsyncTracks> async;                         // SM -> its async tracks
};

struct PerfettoSink::Process {
  trace::ProcessRecord record;  // as known so far
  uint64_t track = 0;           // 0: not described yet
  uint64_t lost_track = 0, harvested_track = 0, fill_track = 0;
  uint64_t events = 0;                             // device events written since the previous harvest
  uint64_t host_track = 0;                         // its process descriptor (0: none yet)
  std::unordered_map<uint32_t, uint64_t> threads;  // host tid -> thread track
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
  const size_t whole = proto::WholePackets(bytes.substr(0, done));
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

template <typename Fields>
uint64_t PerfettoSink::DescribeTrack(Fields&& fields) {
  const uint64_t uuid = next_uuid_++;
  const auto p = packet_.BeginNested(kTracePacket);
  packet_.Varint(kSequenceId, kMainSequence);
  const auto d = packet_.BeginNested(kTrackDescriptor);
  packet_.Varint(kUuid, uuid);
  fields();
  packet_.EndNested(d);
  EndPacket(p);
  return uuid;
}

uint64_t PerfettoSink::NewTrack(uint64_t parent, std::string_view name, int64_t rank, bool ordered_children,
                                std::string_view description) {
  return DescribeTrack([&] {
    if (parent != 0) packet_.Varint(kParentUuid, parent);
    packet_.Bytes(kTrackName, name);
    if (!description.empty()) packet_.Bytes(kDescription, description);
    if (ordered_children) packet_.Varint(kChildOrdering, kExplicitOrder);
    packet_.Varint(kSiblingOrderRank, static_cast<uint64_t>(static_cast<int64_t>(Rank(rank))));
  });
}

uint64_t PerfettoSink::NewCounterTrack(uint64_t parent, std::string_view name) {
  return DescribeTrack([&] {
    packet_.Varint(kParentUuid, parent);
    packet_.Bytes(kTrackName, name);
    const auto c = packet_.BeginNested(kCounter);
    packet_.Varint(kCounterUnit, kUnitCount);
    packet_.EndNested(c);
  });
}

void PerfettoSink::MainEvent(uint64_t track, uint32_t type, std::string_view name, uint64_t ts_ns,
                             const Annotations* args, uint64_t flow) {
  last_ns_ = std::max(last_ns_, ts_ns);
  const auto p = packet_.BeginNested(kTracePacket);
  packet_.Varint(kTimestamp, ts_ns);
  packet_.Varint(kSequenceId, kMainSequence);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, type);
  packet_.Varint(kEventTrackUuid, track);
  if (type != kSliceEnd) packet_.Bytes(kEventName, name);
  if (args != nullptr) args->WriteTo(packet_);
  if (flow != 0) packet_.Fixed64(kFlowIds, flow);
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

uint64_t PerfettoSink::HostThreadTrack(Process& p, uint32_t tid, std::string_view name) {
  auto [it, inserted] = p.threads.try_emplace(tid, 0);
  if (!inserted) return it->second;
  if (p.host_track == 0) {
    p.host_track = DescribeTrack([&] {
      const auto pd = packet_.BeginNested(kProcessDescriptor);
      packet_.Varint(kDescriptorPid, p.record.pid);
      packet_.Bytes(kProcessName, p.record.command);
      packet_.EndNested(pd);
    });
  }
  it->second = DescribeTrack([&] {
    const auto td = packet_.BeginNested(kThreadDescriptor);
    packet_.Varint(kDescriptorPid, p.record.pid);
    packet_.Varint(kDescriptorTid, tid);
    packet_.Bytes(kThreadName, internal::HostThreadTitle(tid, name));
    packet_.EndNested(td);
  });
  return it->second;
}

void PerfettoSink::HostSlice(uint64_t track, std::string_view name, uint64_t begin_ns, uint64_t end_ns,
                             const Annotations* args, uint64_t flow) {
  MainEvent(track, kSliceBegin, name, begin_ns, args, flow);
  MainEvent(track, kSliceEnd, {}, std::max(begin_ns, end_ns), nullptr);
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
  if (harvest.chunks_total != 0) {
    if (p.fill_track == 0) p.fill_track = NewCounterTrack(track, "arena fill (%)");
    Counter(p.fill_track, harvest.ts_ns, harvest.chunks_used * uint64_t{100} / harvest.chunks_total);
  }
  // The harvest on the host: inside the synchronising call that ran it.
  if (harvest.tid != 0) {
    const uint64_t thread = HostThreadTrack(p, harvest.tid, harvest.thread);
    if (harvest.call.api != nullptr) {
      MainEvent(thread, kSliceBegin, harvest.call.api, harvest.call.begin_ns, nullptr);
    }
    Annotations host;
    host.Uint("device", harvest.device)
        .Uint("chunks_used", harvest.chunks_used)
        .Uint("chunks_total", harvest.chunks_total)
        .Uint("chunks_empty", harvest.chunks_empty);
    for (uint32_t s = 0; s < wire::kHarvestStages; ++s) host.Uint(internal::HarvestStageArg(s), harvest.stage_us[s]);
    HostSlice(thread, internal::HarvestReasonName(harvest.reason), harvest.host_begin_ns, harvest.host_end_ns, &host);
    if (harvest.call.api != nullptr) MainEvent(thread, kSliceEnd, {}, harvest.call.end_ns, nullptr);
  }
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
  l.index = launch.index;
  l.hardware = ChooseHardware(launch);
  l.launch_id = launch.launch_id;
  l.pid = launch.pid;

  const auto git = launch.gpu >= 0 ? gpus_.find(static_cast<uint32_t>(launch.gpu)) : gpus_.end();
  Gpu* gpu = git != gpus_.end() ? git->second.get() : nullptr;
  if (l.hardware) {
    l.gpu = &HardwareGpu(launch);
    l.title = "#" + std::to_string(launch.launch_id) + " " + launch.label;
  } else {
    l.track = NewTrack(gpu != nullptr ? gpu->track : 0, internal::LaunchTitle(launch),
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
  }
  const uint64_t end = std::max(launch.start_ns, launch.end_ns);
  // The launch API call (once per call), a flow arrow from it to the
  // kernel's span: the launch's own track, else its stream's.
  const uint64_t flow = launch.call.api != nullptr ? launch.call_key : 0;
  if (flow != 0 && launch.call_first) {
    auto pit = processes_.find(launch.process);
    if (pit != processes_.end()) {
      Annotations call;
      call.Uint("correlation_id", launch.correlation_id);
      HostSlice(HostThreadTrack(*pit->second, launch.call.tid, launch.call.thread), launch.call.api,
                launch.call.begin_ns, launch.call.end_ns, &call, flow);
    }
  }
  if (!l.hardware) {
    MainEvent(l.track, kSliceBegin, launch.kernel, launch.start_ns, &args, flow);
    MainEvent(l.track, kSliceEnd, {}, end, nullptr);
  } else {
    gpu = l.gpu;  // an undescribed GPU's streams too
  }

  // The same span on the GPU's track of the process's stream (a stream runs
  // one kernel at a time, so its spans never overlap); with the launch's
  // args when it has no track of its own.
  if (gpu != nullptr) {
    auto [it, inserted] = gpu->streams.try_emplace({launch.pid, launch.stream}, 0);
    if (inserted) {
      it->second = NewTrack(gpu->track,
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
    MainEvent(it->second, kSliceBegin, launch.label, launch.start_ns, l.hardware ? &args : &span,
              l.hardware ? flow : 0);
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
    sm->second = NewTrack(l.track, name, warp.sm, true);
  }
  auto [block, new_block] = l.blocks.try_emplace({warp.sm, warp.block[2], warp.block[1], warp.block[0]}, 0);
  if (new_block) {
    const uint64_t linear = warp.block[0] + static_cast<uint64_t>(l.grid[0]) *
                                                (warp.block[1] + static_cast<uint64_t>(l.grid[1]) * warp.block[2]);
    block->second = NewTrack(sm->second, internal::BlockLabel(warp),
                             static_cast<int64_t>(std::min<uint64_t>(linear, INT32_MAX)), true);
  }
  w.block_track = block->second;
  w.track =
      NewTrack(w.block_track, "warp " + std::to_string(warp.warp), static_cast<int64_t>(warp.warp) * kLaneSlots, false);
  if (counters_) w.cycles = NewCounterTrack(w.track, "cycles");
}

inline PerfettoSink::Warp& PerfettoSink::DescribedWarp(Launch& l, const trace::WarpRecord& warp) {
  if (warp.index >= l.warps.size() || !l.warps[warp.index].described) DescribeWarp(l, warp);
  return l.warps[warp.index];
}

inline PerfettoSink::Warp& PerfettoSink::ActiveWarp(Launch& l, const trace::WarpRecord& warp) {
  if (warp.index == l.current) return l.warps[warp.index];
  return SwitchWarp(l, warp);
}

PerfettoSink::Warp& PerfettoSink::SwitchWarp(Launch& l, const trace::WarpRecord& warp) {
  if (l.current != kNoWarp) EndSequence(l.warps[l.current]);
  Warp& w = DescribedWarp(l, warp);
  l.current = warp.index;
  // A warp without a slice yet gets its sequence when placed (PlaceRecord).
  if (!l.hardware || w.span_open) StartSequence(w);
  return w;
}

void PerfettoSink::StartSequence(Warp& w) {
  bool clear = true;
  if (free_seqs_.empty()) {
    w.seq = next_seq_++;
  } else {
    w.seq = free_seqs_.back();
    free_seqs_.pop_back();
    // A reused id keeps what its sequence interned (a few names, unless
    // they have piled up): the warp takes them over.
    SeqNames& kept = seq_names_[w.seq];
    if (kept.names.size() <= kMaxKeptNames) {
      clear = false;
      w.names.swap(kept.names);
      w.annotation_names = kept.annotation_names;
    }
    kept = SeqNames();
  }
  // Clear a new sequence, restart clock 64 at BOOTTIME's 0, make the warp's
  // track the default and its counter the extra one.
  const auto p = packet_.BeginNested(kTracePacket);
  packet_.Varint(kSequenceId, w.seq);
  packet_.Varint(kSequenceFlags, clear ? kSeqCleared | kSeqNeedsState : kSeqNeedsState);
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
  if (seq_names_.size() <= w.seq) seq_names_.resize(static_cast<size_t>(w.seq) + 1);
  seq_names_[w.seq].names.swap(w.names);
  seq_names_[w.seq].annotation_names = w.annotation_names;
  w.seq = 0;
  w.annotation_names = 0;
  w.last_ns = 0;
  w.names.clear();
}

inline std::vector<PerfettoSink::Lane>& PerfettoSink::LanesOf(Warp& w) {
  return w.slot != nullptr ? w.slot->lanes : w.lanes;
}

const PerfettoSink::Lane& PerfettoSink::LaneOf(Warp& w, uint32_t lane) {
  std::vector<Lane>& lanes = LanesOf(w);
  if (lanes.size() < lane) lanes.resize(lane);
  Lane& l = lanes[lane - 1];
  if (l.track == 0 && w.slot != nullptr) {
    l.track = NewTrack(w.slot->parent, w.slot->name + " lane " + std::to_string(lane),
                       w.slot->rank + std::min(lane, kLaneSlots - 1), false);
    if (counters_) l.cycles = NewCounterTrack(l.track, "cycles");
  } else if (l.track == 0) {
    l.track = NewTrack(w.block_track, "warp " + std::to_string(w.warp) + " lane " + std::to_string(lane),
                       static_cast<int64_t>(w.warp) * kLaneSlots + std::min(lane, kLaneSlots - 1), false);
    if (counters_) l.cycles = NewCounterTrack(l.track, "cycles");
  }
  return l;
}

// --- the hardware-centric layout -------------------------------------------

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

const char* TraceLayoutName(TraceLayout layout) {
  switch (layout) {
    case TraceLayout::kLaunch:
      return "launch";
    case TraceLayout::kHardware:
      return "hardware";
    case TraceLayout::kAuto:
      return "auto";
  }
  return nullptr;
}

bool ParseTraceLayout(std::string_view word, TraceLayout* layout) {
  for (const TraceLayout l : {TraceLayout::kLaunch, TraceLayout::kHardware, TraceLayout::kAuto}) {
    if (word == TraceLayoutName(l)) {
      *layout = l;
      return true;
    }
  }
  return false;
}

TraceLayout PerfettoSink::layout_used() const {
  if (last_hardware_ >= 0) return last_hardware_ == 1 ? TraceLayout::kHardware : TraceLayout::kLaunch;
  return layout_ == TraceLayout::kHardware ? TraceLayout::kHardware : TraceLayout::kLaunch;
}

std::string PerfettoSink::layout_description() const {
  const char* used = layout_used() == TraceLayout::kHardware ? "hardware-centric" : "launch-centric";
  if (last_hardware_ < 0) return std::string(used) + " (" + TraceLayoutName(layout_) + "; no launch)";
  if (switched_at_ > 1) {
    return std::string(used) + " from launch " + std::to_string(switched_at_) + " on (" + switch_reason_ +
           "); launch-centric before";
  }
  return std::string(used) + " (" + switch_reason_ + ")";
}

bool PerfettoSink::ChooseHardware(const trace::LaunchRecord& launch) {
  ++launches_seen_;
  bool hardware = false;
  std::string reason;
  switch (layout_) {
    case TraceLayout::kLaunch:
      reason = "asked for";
      break;
    case TraceLayout::kHardware:
      hardware = true;
      reason = "asked for";
      break;
    case TraceLayout::kAuto:
      if (last_hardware_ == 1) {
        hardware = true;  // once switched, for the rest of the run
      } else if (launches_seen_ > kAutoLaunchLimit) {
        hardware = true;
        reason = "auto: more than " + std::to_string(kAutoLaunchLimit) + " launches";
      } else if (tracks() >= kAutoTrackLimit) {
        hardware = true;
        reason = "auto: more than " + std::to_string(kAutoTrackLimit) + " tracks";
      } else {
        reason = "auto: launch-centric up to " + std::to_string(kAutoLaunchLimit) + " launches and " +
                 std::to_string(kAutoTrackLimit) + " tracks, hardware-centric beyond";
      }
      break;
  }
  if (last_hardware_ != (hardware ? 1 : 0)) {
    last_hardware_ = hardware ? 1 : 0;
    switched_at_ = launches_seen_;
    switch_reason_ = reason;
    Annotations args;
    args.String("layout", hardware ? "hardware" : "launch")
        .String("requested", TraceLayoutName(layout_))
        .Uint("from_launch", launches_seen_)
        .Uint("launch_id", launch.launch_id)
        .Uint("pid", launch.pid)
        .String("reason", reason);
    MainEvent(run_track_, kInstant, hardware ? "layout: hardware-centric" : "layout: launch-centric", launch.start_ns,
              &args);
  }
  return hardware;
}

PerfettoSink::Gpu& PerfettoSink::HardwareGpu(const trace::LaunchRecord& launch) {
  if (launch.gpu >= 0) {
    const auto it = gpus_.find(static_cast<uint32_t>(launch.gpu));
    if (it != gpus_.end()) return *it->second;
  }
  auto& g = gpus_[kUnknownGpu];
  if (!g) {
    g = std::make_unique<Gpu>();
    g->track = NewTrack(0, "GPU ? | not described by its process", -1, true);
  }
  return *g;
}

inline void PerfettoSink::PlaceRecord(Launch& l, uint32_t index, Warp& w, uint64_t begin, uint64_t end) {
  if (!l.hardware) return;
  if (!w.span_open || begin < w.span_begin) OpenSpan(l, index, w, begin);
  if (end > w.slot->busy_until) w.slot->busy_until = end;
}

uint64_t PerfettoSink::SmTrack(Gpu& g, uint16_t sm) {
  auto [it, inserted] = g.sms.try_emplace(sm, 0);
  if (inserted) {
    char name[16];
    std::snprintf(name, sizeof(name), "SM %03u", static_cast<unsigned>(sm));
    it->second = NewTrack(g.track, name, sm, true);
  }
  return it->second;
}

void PerfettoSink::OpenSpan(Launch& l, uint32_t index, Warp& w, uint64_t t) {
  if (w.span_open) CloseSpan(w);
  Gpu& g = *l.gpu;
  auto& list = g.slots[(static_cast<uint32_t>(w.sm) << 16) | w.hw_warp];
  Slot* slot = nullptr;
  for (size_t i = 0; slot == nullptr; ++i) {
    if (i == list.size()) {
      auto s = std::make_unique<Slot>();
      char name[48];
      if (i == 0) {
        std::snprintf(name, sizeof(name), "slot %02u", static_cast<unsigned>(w.hw_warp));
      } else if (i == 1) {
        std::snprintf(name, sizeof(name), "slot %02u overlap", static_cast<unsigned>(w.hw_warp));
      } else {
        std::snprintf(name, sizeof(name), "slot %02u overlap %zu", static_cast<unsigned>(w.hw_warp), i);
      }
      s->parent = SmTrack(g, w.sm);
      s->name = name;
      s->rank = (static_cast<int64_t>(w.hw_warp) * kOverlapSlots + std::min<size_t>(i, kOverlapSlots - 1)) * kLaneSlots;
      s->track = NewTrack(s->parent, s->name, s->rank, false);
      if (counters_) s->cycles = NewCounterTrack(s->track, "cycles");
      list.push_back(std::move(s));
    }
    Slot& c = *list[i];
    if (c.used && t < c.busy_until) continue;  // taken at t
    if (c.warp != kNoWarp) {                   // its warp's records all end by t: its slice ends
      const auto it = launches_.find(c.launch);
      if (it != launches_.end() && c.warp < it->second->warps.size()) {
        Warp& o = it->second->warps[c.warp];
        if (o.span_open && o.slot == &c) CloseSpan(o);
      }
      c.warp = kNoWarp;
    }
    slot = &c;
    if (i > 0) ++overlap_spans_;
  }
  slot->used = true;
  slot->launch = l.index;
  slot->warp = index;
  slot->busy_until = std::max(slot->busy_until, t);
  w.slot = slot;
  w.track = slot->track;
  w.cycles = slot->cycles;
  w.span_open = true;
  w.span_begin = t;
  // A sequence whose defaults are the slot's track (PlaceRecord follows
  // ActiveWarp: `w` has the launch's sequence, or none yet).
  if (w.seq != 0) EndSequence(w);
  StartSequence(w);

  Annotations args;
  args.Uint("launch_id", l.launch_id)
      .Uint("pid", l.pid)
      .Json("block", {w.block[0], w.block[1], w.block[2]})
      .Uint("warp", w.warp);
  const auto p = BeginWarpPacket(w, t);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, kSliceBegin);
  packet_.Bytes(kEventName, l.title);
  args.WriteTo(packet_);
  if (counters_) packet_.Varint(kExtraCounterValues, 0);  // one value per slice row (see the header)
  packet_.EndNested(te);
  EndPacket(p);
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
  for (uint32_t a = kCyclesIid; a <= kValueIid; ++a) {
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
    } else if (annotate_cycles_) {
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
  } else if (annotate_cycles_ && type == kSliceBegin) {
    const auto a = packet_.BeginNested(kDebugAnnotations);
    packet_.Varint(kAnnotationNameIid, kCyclesIid);
    packet_.Varint(kUintValue, cycles);
    packet_.EndNested(a);
  }
}

inline void PerfettoSink::WriteEnd(Warp& w, const PendingEnd& end) {
  FastEvent(w, end.end_ns, kSliceEnd, 0, end.lane != 0 ? &LanesOf(w)[end.lane - 1] : nullptr, false, 0);
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
  PlaceRecord(l, warp.index, w, slice.begin_ns, std::max(slice.begin_ns, slice.end_ns));
  const Lane* const lane = slice.lane != 0 ? &LaneOf(w, slice.lane) : nullptr;
  bool fresh = false;
  const uint32_t iid = NameIid(w, NameId(slice.name), &fresh);
  uint32_t want = slice.unterminated ? (1u << (kUnterminatedIid - 1)) | (slice.note.empty() ? 0 : 1u << (kNoteIid - 1))
                                     : (annotate_cycles_ ? 1u << (kCyclesIid - 1) : 0);
  if (slice.value.present) want |= 1u << (kValueIid - 1);
  const uint32_t new_names = want & ~w.annotation_names;
  SettleEnds(w, slice.begin_ns, slice.lane, slice.depth);
  PushEnd(w, PendingEnd{std::max(slice.begin_ns, slice.end_ns), slice.lane, slice.depth});
  l.events += slice.unterminated ? 1 : 2;
  if (!fresh && new_names == 0 && !slice.unterminated && !slice.value.present) {
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
  if (slice.value.present) ValueAnnotation(slice.value.value);
  packet_.EndNested(te);
  EndPacket(p);
}

void PerfettoSink::OnInstant(const trace::LaunchRecord& launch, const trace::WarpRecord& warp,
                             const trace::InstantRecord& instant) {
  if (failed() || finished_) return;
  Launch& l = LaunchOf(launch);
  Warp& w = ActiveWarp(l, warp);
  PlaceRecord(l, warp.index, w, instant.ts_ns, instant.ts_ns);
  if (instant.value.counter && instant.value.present) return CounterSample(l, w, instant);
  std::string_view name = instant.name;
  if (instant.unmatched_end) {
    scratch_.assign(instant.name);
    scratch_ += " (end without begin)";
    name = scratch_;
  }
  bool fresh = false;
  const uint32_t iid = NameIid(w, NameId(name), &fresh);
  const uint32_t new_names =
      ((instant.unmatched_end ? 1u << (kErrorIid - 1) : 0) | (instant.value.present ? 1u << (kValueIid - 1) : 0)) &
      ~w.annotation_names;
  // Only the ENDs before it: an instant at a slice's last nanosecond stays
  // inside the slice (it may have been recorded there, and a zero-length
  // slice after it may still nest in that one).
  SettleEnds(w, instant.ts_ns, kAnyLane, 0);
  ++l.events;
  // With counters, its 0 cycles: one value per slice row (see the header).
  if (!fresh && !instant.unmatched_end && !instant.value.present) {
    return FastEvent(w, instant.ts_ns, kInstant, iid, nullptr, counters_, 0);
  }

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
  if (instant.value.present) ValueAnnotation(instant.value.value);
  packet_.EndNested(te);
  EndPacket(p);
}

void PerfettoSink::ValueAnnotation(int64_t value) {
  const auto a = packet_.BeginNested(kDebugAnnotations);
  packet_.Varint(kAnnotationNameIid, kValueIid);
  packet_.Varint(kIntValue, static_cast<uint64_t>(value));
  packet_.EndNested(a);
}

// On the warp's sequence, like its instants (the ENDs before it first), but
// a TYPE_COUNTER event on the counter's own track: no name, no cycles.
void PerfettoSink::CounterSample(Launch& l, Warp& w, const trace::InstantRecord& sample) {
  const uint32_t name = NameId(sample.name);
  std::vector<UserCounter>& counters = w.slot != nullptr ? w.slot->counters : w.counters;
  uint64_t track = 0;
  for (const UserCounter& c : counters) {
    if (c.name == name) track = c.track;
  }
  if (track == 0) {
    track = NewCounterTrack(w.track, sample.name);
    counters.push_back(UserCounter{name, track});
  }
  SettleEnds(w, sample.ts_ns, kAnyLane, 0);
  ++l.events;
  const auto p = BeginWarpPacket(w, sample.ts_ns);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, kCounterEvent);
  packet_.Varint(kEventTrackUuid, track);
  packet_.Varint(kCounterValue, static_cast<uint64_t>(sample.value.value));
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
    if (l.hardware) {
      if (w.span_open) CloseSpan(w);
      if (w.seq != 0) EndSequence(w);
      continue;
    }
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

// Writes out: after FastEvent, which it inlines.
void PerfettoSink::CloseSpan(Warp& w) {
  Slot& s = *w.slot;
  const uint64_t end = std::max(s.busy_until, w.span_begin);
  if (w.seq != 0) {
    for (auto e = w.ends.rbegin(); e != w.ends.rend(); ++e) WriteEnd(w, *e);
    FastEvent(w, end, kSliceEnd, 0, nullptr, false, 0);
  } else {
    for (auto e = w.ends.rbegin(); e != w.ends.rend(); ++e) {
      MainEvent(e->lane != 0 ? s.lanes[e->lane - 1].track : s.track, kSliceEnd, {}, e->end_ns, nullptr);
    }
    MainEvent(s.track, kSliceEnd, {}, end, nullptr);
  }
  w.ends.clear();
  w.span_open = false;
  w.closed_begin = w.span_begin;
  w.closed_end = end;
  s.warp = kNoWarp;
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
    if (tracks->parent == 0) tracks->parent = SmTrack(*l.gpu, some->sm);
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
  const uint64_t track = AsyncLaneTrack(*tracks, span.begin_ns, end_ns);
  MainEvent(track, kSliceBegin, span.name, span.begin_ns, &args);
  MainEvent(track, kSliceEnd, {}, end_ns, nullptr);

  const uint64_t flow = begin_track != 0 && end_track != 0 ? kAsyncFlow | span.flow_id : 0;
  if (begin_track != 0) AsyncEnd(begin_track, begin_cycles, span.name, span.begin_ns, flow, false);
  if (end_track != 0) AsyncEnd(end_track, end_cycles, span.name, end_ns, flow, true);
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
      PlaceRecord(l, warp.index, *w, t, t);
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
      a.lanes[i].track = NewTrack(a.parent, n == 0 ? std::string("async") : "async lane " + std::to_string(n),
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

void PerfettoSink::AsyncEnd(uint64_t track, uint64_t cycles, std::string_view name, uint64_t ts_ns, uint64_t flow,
                            bool terminating) {
  last_ns_ = std::max(last_ns_, ts_ns);
  const auto p = packet_.BeginNested(kTracePacket);
  packet_.Varint(kTimestamp, ts_ns);
  packet_.Varint(kSequenceId, kMainSequence);
  const auto te = packet_.BeginNested(kTrackEvent);
  packet_.Varint(kType, kInstant);
  packet_.Varint(kEventTrackUuid, track);
  packet_.Bytes(kEventName, name);
  if (counters_) {  // one value per slice row (see the header)
    packet_.Varint(kExtraCounterTrackUuids, cycles);
    packet_.Varint(kExtraCounterValues, 0);
  }
  if (flow != 0) packet_.Fixed64(terminating ? kTerminatingFlowIds : kFlowIds, flow);
  packet_.EndNested(te);
  EndPacket(p);
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
    MainEvent(run_track_, kInstant, "smprof run summary", last_ns_, &args);
  }
  finished_ = true;
  WriteOut();
  if (::close(fd_) != 0 && !failed()) error_ = "closing trace file '" + path_ + "': " + std::strerror(errno);
  fd_ = -1;
  return !failed();
}

}  // namespace smprof
