// Fuzz target: untrusted transport messages into MessageDecoder::Decode and
// a real Collector.
//
// An input is one message, or a stream of framed messages (each header's
// size leads to the next and the last ends the input exactly), as a ring
// would deliver them. The whole input, and each frame of a stream, is decoded
// from a buffer that ends exactly where the message ends (libFuzzer's and the
// standalone driver's), and on success every decoded field, each text byte and
// each event are read, so ASan flags any over-read, and the decoder's
// promises are checked: the type is the header's, the size is aligned and in
// range, text and events lie inside the message, event kinds are valid and
// every 64-bit value has its continuation right after it.
//
// The same messages then go through Collector::HandleMessage under one fixed
// producer, which ends (HandleProducerEnd) after each input, so inputs share
// no producer state. A collector writes its trace into a private temporary
// directory and is finished, its trace deleted, and replaced every
// kInputsPerCollector inputs (creating one per input would dominate the run
// time; a crash in Finish therefore depends on the inputs before it). Its
// malformed-message count must cover every message fed to it that Decode
// rejected (it also counts some that decode, e.g. a second ProcessMsg).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collector/collector.h"
#include "collector/message_decoder.h"
#include "smprof/wire.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/support/arena_builder.h"
#include "tests/support/wire_builders.h"

namespace smprof::fuzz {
namespace {

constexpr uint64_t kInputsPerCollector = 256;
constexpr transport::ProducerInfo kProducer{0, 4242};

// wire::kMsgPad has no struct of its own; testing::Frame wants one.
struct PadMsg {
  wire::MsgHeader h;
};

void Require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "message_decoder_fuzz: %s\n", what);
  std::abort();
}

struct Counters {
  uint64_t inputs = 0;
  uint64_t streams = 0;
  uint64_t frames = 0;  // messages decoded as parts of streams
  uint64_t status[kNumDecodeStatus] = {};
  uint64_t collectors = 0;
  uint64_t collector_malformed = 0;  // messages the collectors counted as malformed
};

Counters g_counters;
volatile uint64_t g_sink;  // keeps the reads of decoded data alive

uint64_t Fold(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// Decodes [data, data + size) and, on success, reads and checks everything
// the result refers to. Returns whether Decode accepted it.
bool DecodeAndTouch(const uint8_t* data, uint32_t size) {
  DecodedMessage m;
  const DecodeStatus status = MessageDecoder::Decode(data, size, &m);
  const auto index = static_cast<size_t>(status);
  Require(index < kNumDecodeStatus, "Decode returned an unknown status");
  ++g_counters.status[index];
  Require(DecodeStatusName(status) != nullptr, "DecodeStatusName returned null");
  if (status != DecodeStatus::kOk) return false;

  wire::MsgHeader h;
  std::memcpy(&h, data, sizeof(h));
  Require(m.type == h.type && h.type <= wire::kMsgLastType, "decoded type differs from the header");
  Require(h.size == size && size % wire::kMsgAlign == 0 && size <= wire::kMaxMessageBytes,
          "accepted a message of a bad size");
  const auto* begin = reinterpret_cast<const char*>(data);
  const char* end = begin + size;
  Require(m.text.empty() || (m.text.data() >= begin && m.text.size() <= size &&
                             m.text.data() + m.text.size() <= end),
          "text outside the message");
  const auto* events = reinterpret_cast<const char*>(m.events);
  Require(m.event_count == 0 ||
              (events >= begin && m.event_count <= size / sizeof(wire::WireEvent) &&
               events + size_t{m.event_count} * sizeof(wire::WireEvent) <= end),
          "events outside the message");
  Require(m.type == wire::kMsgWarpEvents || m.event_count == 0, "events in a message without any");
  const auto* payload = reinterpret_cast<const char*>(m.payload);
  Require(m.payload == nullptr || (payload >= begin && payload <= end), "payload outside the message");
  Require(m.payload == nullptr || m.type == wire::kMsgRecords || m.type == wire::kMsgChunks,
          "a payload in a message without one");

  uint64_t h64 = Fold(0xcbf29ce484222325ull, &m, sizeof(m));  // every fixed field
  h64 = Fold(h64, m.text.data(), m.text.size());
  bool want_high = false;  // the event before was wide
  for (uint32_t i = 0; i < m.event_count; ++i) {
    const wire::WireEvent e = m.event(i);
    const uint32_t kind = e.kind & wire::kEventKindMask;
    Require(kind >= wire::kEventBegin && kind <= wire::kMaxEventKind &&
                (e.kind & ~(wire::kEventKindMask | wire::kEventFlagsMask)) == 0,
            "accepted an event of a bad kind");
    Require((kind == wire::kEventValueHigh) == want_high, "accepted a continuation out of place");
    Require(e.name_id <= kMaxWireNameId, "accepted a name id in the collector's range");
    want_high = (e.kind & wire::kEventWideValue) != 0;
    h64 = Fold(h64, &e, sizeof(e));
  }
  Require(!want_high, "accepted a wide event without its continuation");
  if (m.type == wire::kMsgRecords) {
    Require(payload + size_t{m.records.count} * sizeof(wire::KernelRecordEntry) <= end, "records outside the message");
    for (uint32_t i = 0; i < m.records.count; ++i) {
      const wire::KernelRecordEntry r = m.record(i);
      Require(r.end_ns >= r.start_ns, "accepted a record ending before it starts");
      h64 = Fold(h64, &r, sizeof(r));
    }
  }
  if (m.type == wire::kMsgChunks) h64 = Fold(h64, m.payload, static_cast<size_t>(end - payload));
  g_sink = h64;
  return true;
}

// The frames of a stream of at least two messages that ends exactly at
// `size`, or nothing.
std::vector<std::pair<size_t, uint32_t>> SplitStream(const uint8_t* data, size_t size) {
  std::vector<std::pair<size_t, uint32_t>> frames;
  size_t at = 0;
  while (size - at >= sizeof(wire::MsgHeader)) {
    wire::MsgHeader h;
    std::memcpy(&h, data + at, sizeof(h));
    if (h.size < sizeof(h) || h.size % wire::kMsgAlign != 0 || h.size > size - at) break;
    frames.emplace_back(at, h.size);
    at += h.size;
  }
  if (at != size || frames.size() < 2) frames.clear();
  return frames;
}

class CollectorBatch {
 public:
  CollectorBatch() {
    char dir[] = "/tmp/smprof-fuzz-XXXXXX";
    Require(mkdtemp(dir) != nullptr, "cannot create a temporary directory in /tmp");
    dir_ = dir;
  }
  ~CollectorBatch() {
    if (collector_) Finish();
    rmdir(dir_.c_str());
  }

  void Feed(const uint8_t* data, uint32_t size, bool decoded) {
    Get().HandleMessage(kProducer, data, size);
    ++messages_;
    if (!decoded) ++rejected_;
  }
  void EndInput(bool clean) {
    Get().HandleProducerEnd(kProducer, clean);
    if (++inputs_ < kInputsPerCollector) return;
    const CollectorSummary summary = Finish();
    Require(summary.malformed_messages >= rejected_ && summary.malformed_messages <= messages_,
            "the collector's malformed count misses messages Decode rejected");
    // As collector/main.cc prints it: producers' strings need not be UTF-8.
    g_sink = summary.ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
    ++g_counters.collectors;
    g_counters.collector_malformed += summary.malformed_messages;
    inputs_ = 0;
    messages_ = 0;
    rejected_ = 0;
  }

  CollectorBatch(const CollectorBatch&) = delete;
  CollectorBatch& operator=(const CollectorBatch&) = delete;

 private:
  Collector& Get() {
    if (!collector_) {
      std::string error;
      CollectorOptions options;
      options.trace_path = dir_ + "/trace.json";
      collector_ = Collector::Create(options, &error);
      if (!collector_) {
        std::fprintf(stderr, "message_decoder_fuzz: %s\n", error.c_str());
        std::abort();
      }
    }
    return *collector_;
  }
  // Finishes the collector and deletes its trace.
  CollectorSummary Finish() {
    CollectorSummary summary = collector_->Finish();
    collector_.reset();
    unlink(summary.trace.c_str());
    return summary;
  }

  std::string dir_;
  std::unique_ptr<Collector> collector_;
  uint64_t inputs_ = 0;
  uint64_t messages_ = 0;  // messages fed
  uint64_t rejected_ = 0;  // of those, rejected by Decode
};

CollectorBatch g_batch;

}  // namespace

TargetInfo GetTargetInfo() {
  using namespace smprof::testing;
  // One seed per builder of tests/support/wire_builders.h (add one for a new
  // builder; new message types are reached anyway through header rewrites),
  // boundary-sized ones, and streams like a process would send.
  const std::vector<wire::WireEvent> events = {
      Ev(110, 1, wire::kEventBegin), Ev(115, 2, wire::kEventInstant), Ev(120, 1, wire::kEventEnd),
      Ev(130, 3, wire::kEventBegin), Ev(140, 9, wire::kEventEnd)};
  wire::StatsMsg stats{};
  stats.launches_profiled = 1;
  stats.events_recorded = events.size();
  stats.harvests = 1;
  wire::LaunchMsg flagged = LaunchFields(2, 200, 900);
  flagged.flags = wire::kLaunchNoActivity | wire::kLaunchFromGraph | wire::kLaunchForcedDrain;
  flagged.grid_id = 77;
  std::vector<Bytes> messages = {
      Process(1234, 5'000'000'000ull, "./app --flag value", 1, 1'700'000'000'000'000'000ull),
      Device(0, "NVIDIA H200", 0xab, 0x19),
      Name(1, "load"),
      Name(2, "mainloop done"),
      Name(3, "compute"),
      Launch(1, 100, 500, "void ns::gemm<128>(float const*, float*, int)"),
      Launch(flagged, "k"),
      Warp(1, 5, 1, 0, events),
      Warp(2, 0, 0, 31, {}),
      Harvest(600, wire::kHarvestSync, 3, 1),
      Stats(stats),
      Notice(wire::kNoticeSteppedAside, "another CUDA tool"),
      Frame(PadMsg{}, wire::kMsgPad),
      Name(4, std::string(kMaxStringBytes, 'n')),
  };
  // A read-back as the injector ships it: a kernel's name, its record, a
  // marker name, its chunks (whole, and each up to its written bytes), the
  // harvest that closes it.
  ArenaBuilder arena(3);
  const uint32_t chunk = arena.Claim(77, 0, 0, 5, 0x1000, 1000, 5000);
  arena.Add(chunk, 1010, 16, wire::kEventBegin);
  arena.Add(chunk, 1020, 16, wire::kEventEnd, 7);
  arena.Add(chunk, 1030, 32, wire::kEventInstant | wire::kEventHasValue | wire::kEventWideValue, 1);
  arena.Add(chunk, 1030, 0, wire::kEventValueHigh, 2);
  arena.ClaimUnwritten();
  Bytes used_bytes;  // the same chunks as kChunksUsedBytes parts
  {
    wire::ChunksMsg m{};
    m.chunk_bytes = arena.chunk_bytes();
    m.count = 2;
    m.context_id = 1;
    m.name_generation = 1;
    m.flags = wire::kChunksUsedBytes;
    const wire::ChunkBytes first{48 + 4 * 16, 0}, second{0, 0};
    std::string tail(reinterpret_cast<const char*>(&first), sizeof(first));
    tail.append(reinterpret_cast<const char*>(arena.data()), first.bytes);
    tail.append(reinterpret_cast<const char*>(&second), sizeof(second));
    used_bytes = Frame(m, wire::kMsgChunks, tail);
  }
  const std::vector<uint8_t> whole(arena.bytes().begin(), arena.bytes().begin() + 2 * arena.chunk_bytes());
  const std::vector<Bytes> read_back = {KernelName(1, "void ns::gemm<128>(float const*, float*, int)"),
                                        Records(0, 1, {Record(77, 900, 9000, 5, 1)}),
                                        MarkerName(1, 1, 0x1010, "load"),
                                        MarkerName(1, 1, 0x1020, "value"),
                                        Chunks(0, 1, arena.chunk_bytes(), whole),
                                        used_bytes,
                                        ReadBackHarvest(9500, 0, 1, wire::kHarvestSync, 2, wire::kHarvestProbed, -100),
                                        ReadBackHarvest(9600, 0, 1, wire::kHarvestExit, 0, wire::kHarvestFinal)};
  messages.insert(messages.end(), read_back.begin(), read_back.end());
  std::vector<Bytes> seeds = messages;
  Bytes shipped;
  for (const Bytes& m : read_back) shipped.insert(shipped.end(), m.begin(), m.end());
  seeds.push_back(shipped);
  Bytes session;
  for (const Bytes& m : messages) {
    if (m.size() < 4096) session.insert(session.end(), m.begin(), m.end());
  }
  seeds.push_back(session);
  // A launch's events without the launch, and an END before its BEGIN.
  Bytes orphans = Warp(9, 1, 0, 0, events);
  const Bytes reversed = Warp(1, 1, 0, 1, {Ev(300, 1, wire::kEventEnd), Ev(310, 1, wire::kEventBegin)});
  orphans.insert(orphans.end(), reversed.begin(), reversed.end());
  seeds.push_back(orphans);
  return TargetInfo{"message_decoder_fuzz", 0, wire::kMaxMessageBytes + 64, std::move(seeds)};
}

std::string TargetSummary() {
  const Counters& c = g_counters;
  std::string s = "message_decoder_fuzz: " + std::to_string(c.inputs) + " inputs (" +
                  std::to_string(c.streams) + " streams of " + std::to_string(c.frames) +
                  " messages); decode results:";
  for (int i = 0; i < kNumDecodeStatus; ++i) {
    s += std::string(i == 0 ? " " : ", ") + DecodeStatusName(static_cast<DecodeStatus>(i)) + " " +
         std::to_string(c.status[i]);
  }
  s += "; " + std::to_string(c.collectors) + " collectors finished, counting " +
       std::to_string(c.collector_malformed) + " messages malformed";
  return s;
}

}  // namespace smprof::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace smprof::fuzz;
  using smprof::wire::kMaxMessageBytes;
  ++g_counters.inputs;
  // Larger inputs only repeat the kTooLarge check; uint32_t sizes from here on.
  const auto whole = static_cast<uint32_t>(size < kMaxMessageBytes + 64 ? size : kMaxMessageBytes + 64);
  const bool decoded = DecodeAndTouch(data, whole);
  const auto frames = SplitStream(data, whole);
  if (frames.empty()) {
    g_batch.Feed(data, whole, decoded);
  } else {
    ++g_counters.streams;
    for (const auto& [at, bytes] : frames) {
      ++g_counters.frames;
      g_batch.Feed(data + at, bytes, DecodeAndTouch(data + at, bytes));
    }
  }
  g_batch.EndInput(whole == 0 || (data[whole - 1] & 1) != 0);
  return 0;
}
