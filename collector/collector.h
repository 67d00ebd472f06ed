// The collector: transport messages in, one Perfetto JSON trace out.
//
// Data flow: transport::Consumer::Poll -> Collector::HandleMessage ->
// MessageDecoder (validation; rejects are counted as malformed) -> per
// producer state -> TraceWriter (streams the file; see trace_writer.h).
// Single-threaded: Run() and the Handle*/Finish calls happen on one thread.
//
// State is per producer, keyed by (registry entry, pid): an entry is reused
// by another process after on_end, and that process starts from scratch.
// A producer holds its marker names (NameMsg id -> bytes), its open launches
// (launch_id -> warp tracks with their stacks of open BEGINs), its latest
// StatsMsg and what its HarvestMsgs reported.
//
// Streaming: nothing waits for a harvest except what needs its end. A
// LaunchMsg writes its JSON process and CUPTI kernel slice at once; each END
// closes the most recent open BEGIN of the same name on that warp's track and
// becomes an X event immediately; instants are written as they come. A
// HarvestMsg (or the producer's end, or Finish) finalizes the producer's open
// launches: still-open BEGINs become X events flagged "unterminated", and the
// tracks get their sort order. Memory is bounded by the open BEGINs, not by
// the events.
//
// Trace layout (JSON pids are synthetic):
//   pid 1          "smprof run": the run's metadata (command, options,
//                  environment, version; from smprof-run over the control
//                  channel) as an instant at time 0, and the summary (with
//                  the exit status and the GPUs) as the last event.
//   pid 2..9, ...  one per producer process: "harvests" thread (harvest
//                  instants, device-loss counter, notices of why it was not
//                  profiled). The first 8 producers get 2..9; later ones
//                  share the launch counter below.
//   GPU processes  one per physical GPU of the run (keyed by UUID, else PCI
//                  address), however many processes use it and whatever
//                  ordinal each gives it: its identity and timing facts (an
//                  instant at time 0 on tid 0 "identity", and the process
//                  labels), and one thread per (process, stream) with every
//                  profiled kernel span on it. Sorted first.
//   pid 10, 11 ... one per launch, in arrival order: tid 1 "kernel (CUPTI)",
//                  tids 2.. one per (sm, block, warp) in arrival order. The
//                  label names the run-wide GPU index and the process's
//                  ordinal: "#3 gemm | GPU 1 (cuda:0) | stream 7 | ...".
// Timestamps are rebased: base = gpu_time_ns of the first ProcessMsg - 1 s
// (or, if a timestamp must be written before any ProcessMsg, that timestamp
// - 1 s). Anything earlier is clamped to 0 and counted.
//
// Every loss reaches the trace and the summary: device drops (arena full,
// slot table too small) per harvest as a counter track and in the summary,
// transport drops from ConsumerStats, malformed messages, orphan events
// (unknown launch), unmatched ENDs, unterminated BEGINs, incomplete producers.
// lost.total counts every recorded event that is not in the trace: device
// buffer + unplaced + transport + orphan.
//
// Open BEGINs are indexed per warp by name, so an END finds its BEGIN in O(1)
// however many are open; at most 65536 are kept open per warp, beyond which
// the oldest is written as unterminated (its END, if it comes, is unmatched).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collector/control_channel.h"
#include "collector/run_summary.h"
#include "collector/message_decoder.h"
#include "collector/trace_writer.h"
#include "common/transport.h"

namespace spdlog {
class logger;
}

namespace smprof {

struct CollectorOptions {
  // Where the finished trace goes; it is written to PartialPath(trace_path)
  // first (trace_placement.h).
  std::string trace_path;
  bool overwrite = false;                  // replace an existing trace_path (and partial file)
  std::shared_ptr<spdlog::logger> logger;  // null: no logging
};

class Collector {
 public:
  // Opens the trace file. nullptr + *error (naming the fix) on failure.
  static std::unique_ptr<Collector> Create(const CollectorOptions& options, std::string* error);
  ~Collector();

  void HandleMessage(const transport::ProducerInfo& producer, const uint8_t* data, uint32_t size);
  void HandleProducerEnd(const transport::ProducerInfo& producer, bool clean);
  void SetTransportStats(const transport::ConsumerStats& stats);
  // A control message from smprof-run (control_channel.h): {"run": ...} is
  // written into the trace at once, {"exit": ...} goes into the summary.
  void HandleControl(const nlohmann::json& message);

  // Polls until `stop` or until `control` (if given) is closed, then closes
  // the consumer (producers drop and count what they send from then on) and
  // keeps polling until it is idle or `drain_timeout` passes; then takes the
  // final transport stats (drops, unread backlog). Flushes the trace after
  // each non-empty poll. Returns true if the consumer went idle (everything
  // drained).
  bool Run(transport::Consumer& consumer, const std::atomic<bool>& stop, std::chrono::milliseconds drain_timeout,
           ControlChannel* control = nullptr);

  // Finalizes every producer still known (counted incomplete), writes the
  // summary process, closes the trace and moves it into place
  // (trace_placement.h). Call once.
  CollectorSummary Finish();

  // Counters so far (trace/device totals are complete only after Finish).
  const CollectorSummary& counters() const { return summary_; }

  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

 private:
  struct Producer;
  struct Launch;
  struct WarpTrack;
  struct Gpu;

  Collector(CollectorOptions options, std::unique_ptr<TraceWriter> writer);

  Producer& GetProducer(const transport::ProducerInfo& info);
  uint32_t AllocateLaunchPid();
  uint64_t Rel(uint64_t ns);
  void Touch(uint64_t rel_ns);
  // Valid until the next call.
  std::string_view NameOf(const Producer& p, uint32_t name_id);
  uint32_t LabelPid(const Producer& p) const;
  void NameProducerTrack(Producer& p);

  void OnProcess(Producer& p, const DecodedMessage& m);
  void OnDevice(Producer& p, const DecodedMessage& m);
  void OnNotice(Producer& p, const DecodedMessage& m);
  void OnStats(Producer& p, const DecodedMessage& m);
  // The GPU a producer calls `ordinal`, or nullptr if it never described it.
  Gpu* GpuOf(const Producer& p, uint32_t ordinal);
  void OnLaunch(Producer& p, const DecodedMessage& m);
  void OnWarpEvents(Producer& p, const DecodedMessage& m);
  void OnHarvest(Producer& p, const DecodedMessage& m);
  // Writes an open BEGIN as an "unterminated" X event ending with the launch.
  void WriteUnterminated(Producer& p, const Launch& l, const WarpTrack& w, uint32_t name_id, uint64_t begin_ns,
                         const std::string& note);
  void FinalizeLaunch(Producer& p, Launch& l, bool producer_lost);
  void EndProducer(Producer& p, bool clean);
  void CountMalformed(const Producer& p, const char* why, uint32_t type);

  CollectorOptions options_;
  std::unique_ptr<TraceWriter> writer_;
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<Producer>> producers_;
  std::map<std::string, std::unique_ptr<Gpu>> gpus_;  // by IdentityKey (collector.cc)
  std::vector<Gpu*> gpu_order_;                       // by run-wide index
  transport::ConsumerStats transport_stats_;
  CollectorSummary summary_;
  // Device totals of producers already ended.
  uint64_t ended_dropped_ = 0, ended_unplaced_ = 0, ended_filtered_ = 0, ended_unattributed_ = 0, ended_forced_ = 0,
           ended_harvests_ = 0, ended_opted_in_ = 0, ended_not_selected_ = 0;
  bool have_base_ = false;
  uint64_t base_ns_ = 0;
  uint64_t last_rel_ns_ = 0;  // latest timestamp (or slice end) written
  uint32_t next_producer_pid_ = 2;
  uint32_t next_launch_pid_ = 10;
  uint64_t malformed_logged_ = 0;
  std::string unknown_name_;  // NameOf's storage for "<unknown name #id>"
  bool finished_ = false;
};

namespace internal {

// "GPU-947b83bb-8731-7741-a02a-793ceeabd47e" (as nvidia-smi writes it), or ""
// for an all-zero UUID (not reported).
std::string UuidText(const uint8_t uuid[16]);
// "0000:19:00.0", or "" when no PCI address was reported.
std::string PciBusIdText(uint32_t domain, uint32_t bus, uint32_t device);

// LaunchFlags as words: "no_activity", "graph", "forced_drain", unknown bits
// as "0x...".
std::string LaunchFlagsJson(uint32_t flags);

// "harvest: sync", "forced drain: buffer high-water", ...
std::string HarvestReasonName(uint32_t reason);

}  // namespace internal
}  // namespace smprof
