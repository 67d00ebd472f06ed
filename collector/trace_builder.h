// TraceBuilder: validated transport messages in, what happened out.
//
// Data flow: Collector (the poll loop) -> TraceBuilder::HandleMessage ->
// MessageDecoder (rejects are counted as malformed) -> per producer state ->
// trace::TraceSink records (trace_sink.h) to every sink: the trace writer
// and the statistics. The builder owns the model (producers, GPUs, launches,
// warps and their open ranges, the time base, loss accounting); how anything
// is laid out in a file is the sinks' business.
//
// State is per producer, keyed by (registry entry, pid): an entry is reused
// by another process after on_end, and that process starts from scratch. A
// producer holds its marker names (NameMsg id -> bytes), its open launches
// (launch_id -> warps, each with a RangeMatcher), its latest StatsMsg and
// what its HarvestMsgs reported.
//
// Streaming: a LaunchMsg is handed on at once; a warp's ranges as soon as
// its RangeMatcher releases them (when no range is open on the warp). A
// HarvestMsg (or the producer's end, or Finish) ends the producer's open
// launches: still-open BEGINs become unterminated slices ending with the
// launch. Memory is bounded by the open launches' open episodes.
//
// The device API (docs/device-api.md): per warp, in recording order, one
// switch on the event's kind word takes plain BEGIN, END and INSTANT (no
// flags) straight to the RangeMatcher; everything else (values, counters,
// formatted names, phases, async spans) goes through OnMarker:
//  * kEventNameValue: the name is rendered with its integer (name_format.h)
//    once per producer and distinct (name id, integer), and gets an id of
//    its own above kMaxWireNameId (at most kMaxRenderedNames per producer;
//    beyond, the format's own name is used, logged once);
//  * values: 32-bit ones sign-extended, a kEventWideValue event's
//    continuation (the next WireEvent, which the decoder guarantees) folded
//    in; counter samples marked;
//  * phases: the RangeMatcher's, apart from ranges;
//  * async BEGIN/END: collected per launch (AsyncMatcher) and matched when
//    the launch ends; the spans go to the sinks after the launch's last warp
//    record and before OnLaunchEnd, with run-wide flow ids from 1.
//
// Time: records carry nanoseconds since the trace base = gpu_time_ns of the
// first ProcessMsg - 1 s (or, if a timestamp comes before any ProcessMsg,
// that timestamp - 1 s). Anything earlier is clamped to 0 and counted.
//
// Every loss is counted in the summary: device drops (arena full, slot table
// too small) from harvests and StatsMsgs, transport drops, malformed
// messages, orphan events (unknown launch), unmatched ENDs, unterminated
// BEGINs, incomplete producers.
//
// Single-threaded.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collector/message_decoder.h"
#include "collector/range_matcher.h"
#include "collector/run_summary.h"
#include "collector/trace_sink.h"
#include "common/json.h"
#include "common/transport.h"

namespace spdlog {
class logger;
}

namespace smprof {

class TraceBuilder {
 public:
  // Distinct names a producer may have rendered from a format and an integer.
  static constexpr size_t kMaxRenderedNames = size_t{1} << 16;

  // `sinks` are not owned and must outlive the builder; `logger` may be null.
  TraceBuilder(std::vector<trace::TraceSink*> sinks, std::shared_ptr<spdlog::logger> logger);
  ~TraceBuilder();

  void HandleMessage(const transport::ProducerInfo& producer, const uint8_t* data, uint32_t size);
  void HandleProducerEnd(const transport::ProducerInfo& producer, bool clean);
  // smprof-run's metadata of the run.
  void HandleRun(const nlohmann::json& run);

  // Ends every producer still attached (counted incomplete) and completes
  // the counters in `summary` from the builder's totals and `transport`.
  // Call once; later messages are ignored.
  void Finish(const transport::ConsumerStats& transport, CollectorSummary* summary);

  // Counters so far (device totals are complete only after Finish).
  const CollectorSummary& counters() const { return summary_; }
  // The latest trace time handed to a sink.
  uint64_t last_ns() const { return last_rel_ns_; }

  TraceBuilder(const TraceBuilder&) = delete;
  TraceBuilder& operator=(const TraceBuilder&) = delete;

 private:
  struct Producer;
  struct Launch;
  struct Warp;
  struct Gpu;
  struct Name {
    std::string text;
    uint32_t key = 0;  // trace::SliceRecord::name_key
  };

  Producer& GetProducer(const transport::ProducerInfo& info);
  uint64_t Rel(uint64_t ns);
  void Touch(uint64_t rel_ns);
  // Valid until the next call.
  const Name& NameOf(Producer& p, uint32_t name_id);
  uint32_t KeyOf(const std::string& text);
  // The id of `name_id` rendered with `integer` (kEventNameValue).
  uint32_t RenderedId(Producer& p, uint32_t name_id, uint32_t integer);
  void OnName(Producer& p, const DecodedMessage& m);
  void NameProcess(Producer& p);
  void CountMalformed(const Producer& p, const char* why, uint32_t type);

  void OnProcess(Producer& p, const DecodedMessage& m);
  void OnDevice(Producer& p, const DecodedMessage& m);
  void OnNotice(Producer& p, const DecodedMessage& m);
  void OnLaunch(Producer& p, const DecodedMessage& m);
  void OnWarpEvents(Producer& p, const DecodedMessage& m);
  // Any event but a plain BEGIN, END or INSTANT; advances *i past a
  // continuation it consumes.
  void OnMarker(Producer& p, Launch& l, Warp& w, const DecodedMessage& m, uint32_t* i, const wire::WireEvent& e);
  void BeginRange(Warp& w, uint32_t name_id, const wire::WireEvent& e);
  void EndRange(Warp& w, uint32_t name_id, const wire::WireEvent& e, RangeMatcher::Value value);
  // Matches the launch's async events and hands the spans on.
  void EmitAsync(Producer& p, Launch& l, uint64_t end_abs);
  void OnHarvest(Producer& p, const DecodedMessage& m);
  trace::HostCall Call(const Producer& p, const wire::HostCall& c);
  static std::string ThreadName(const Producer& p, uint32_t tid);
  // Hands the ranges `w` has ready to the sinks.
  void Emit(Producer& p, const Launch& l, Warp& w);
  void EndLaunch(Producer& p, Launch& l, bool producer_lost);
  void EndProducer(Producer& p, bool clean);

  std::vector<trace::TraceSink*> sinks_;
  std::shared_ptr<spdlog::logger> logger_;
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<Producer>> producers_;
  std::map<std::string, std::unique_ptr<Gpu>> gpus_;  // by identity (trace_builder.cc)
  std::vector<Gpu*> gpu_order_;                       // by run-wide index
  CollectorSummary summary_;
  // Device totals of producers already ended.
  uint64_t ended_dropped_ = 0, ended_unplaced_ = 0, ended_filtered_ = 0, ended_unattributed_ = 0, ended_forced_ = 0,
           ended_harvests_ = 0, ended_opted_in_ = 0, ended_not_selected_ = 0, ended_calls_forgotten_ = 0,
           ended_lost_host_ = 0, ended_skipped_ = 0, ended_switched_ = 0;
  bool have_base_ = false;
  uint64_t base_ns_ = 0;
  uint64_t last_rel_ns_ = 0;  // latest timestamp (or slice end) handed on
  uint32_t next_process_ = 0;
  uint64_t next_launch_ = 0;
  uint64_t next_call_key_ = 1;
  uint64_t next_flow_id_ = 1;  // trace::AsyncSpanRecord::flow_id
  static constexpr size_t kCallKeysKept = 65536;
  uint64_t malformed_logged_ = 0;
  Name unknown_name_;                                    // NameOf's storage for "<unknown name #id>"
  std::unordered_map<std::string, uint32_t> name_keys_;  // text -> key (from 1)
  // Matchers of ended warps, their buffers kept for new warps. Bounded: at
  // most kSpareMatchers, each keeping room for RangeMatcher::kKeptCapacity
  // records per buffer (about 50 KB), so at most ~100 MB however large the
  // run; a warp that needs more grows its own buffers and gives them back.
  std::vector<RangeMatcher> spare_matchers_;
  static constexpr size_t kSpareMatchers = 2048;
  bool finished_ = false;
};

namespace internal {

// "GPU-947b83bb-8731-7741-a02a-793ceeabd47e" (as nvidia-smi writes it), or ""
// for an all-zero UUID (not reported).
std::string UuidText(const uint8_t uuid[16]);
// "0000:19:00.0", or "" when no PCI address was reported.
std::string PciBusIdText(uint32_t domain, uint32_t bus, uint32_t device);

}  // namespace internal
}  // namespace smprof
