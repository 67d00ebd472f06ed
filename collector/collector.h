// The collector: transport messages in, one trace (and its statistics) out.
//
// The composition root of the collector process: polls the transport
// (Run), hands messages to the LaunchAssembler (launch_assembler.h: arena
// read-backs into launches), which hands them to the TraceBuilder
// (trace_builder.h: what happened), which hands records to the sinks (how
// it is written): the trace
// writer chosen by CollectorOptions::format (json_sink.h; the Perfetto
// protobuf writer) and, when asked, the statistics (stats_sink.h). Finish
// completes the summary, closes the sinks and moves the trace into place
// (trace_placement.h).
//
// Run() and the Handle*/Finish calls happen on one thread. With sink
// threads (CollectorOptions::sink_threads), the builder runs on a thread of
// its own behind a MessagePipe (message_pipe.h) and each sink on a thread of
// its own behind one AsyncSink (async_sink.h), so that assembling launches,
// range matching, encoding the trace and the statistics overlap as stages
// of a pipeline; every stage sees the same calls in the same order either
// way.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collector/async_sink.h"
#include "collector/control_channel.h"
#include "collector/launch_assembler.h"
#include "collector/message_pipe.h"
#include "collector/run_summary.h"
#include "collector/stats_sink.h"
#include "collector/trace_builder.h"
#include "collector/trace_sink.h"
#include "common/json.h"
#include "common/transport.h"

namespace spdlog {
class logger;
}

namespace smprof {

// The trace format follows the file name: "*.json" is the Chrome/Perfetto
// JSON format (json_sink.h), anything else native Perfetto protobuf
// (perfetto_sink.h; ".pftrace" by convention).
enum class TraceFormat { kJson, kPerfetto };
TraceFormat TraceFormatOf(const std::string& path);

struct CollectorOptions {
  // Where the finished trace goes; it is written to PartialPath(trace_path)
  // first (trace_placement.h).
  std::string trace_path;
  bool overwrite = false;                  // replace an existing trace_path (and partial file)
  std::shared_ptr<spdlog::logger> logger;  // null: no logging
  // Also write the run's statistics beside the trace where it is finally
  // placed: <trace>.stats.json and .stats.csv (stats_sink.h, StatsBase).
  bool stats = false;
  // The protobuf trace's track layout: "launch", "hardware" or "auto"
  // (perfetto_sink.h); the JSON trace is always launch-centric.
  std::string layout = "auto";
  // Per-range SM cycles in a protobuf trace: "none", "counter" or "args"
  // (PerfettoSink::CyclesEncoding).
  std::string trace_cycles = "none";
  // Run the trace builder, the trace writer and the statistics on threads
  // of their own: kAuto does when the machine has at least kSinkThreadCores
  // cores.
  enum class SinkThreads { kAuto, kOn, kOff };
  SinkThreads sink_threads = SinkThreads::kAuto;
  static constexpr unsigned kSinkThreadCores = 4;
  // Messages read from the transport and not processed yet, at most (0:
  // Intake::DefaultBudget); past it producers wait (intake.h).
  uint64_t queue_bytes = 0;
  // Say on stderr how far the trace is when finishing it outlasts the
  // application by more than a moment.
  bool progress = false;
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

  // Reads the transport on a thread of its own (intake.h) and handles what
  // it queued, until `stop` or until `control` (if given) is closed; then
  // closes the consumer (producers drop and count what they send from then
  // on), drains it until it is idle or `drain_timeout` passes, and handles
  // everything queued to the end (the application is gone: the trace is
  // finished now, with progress lines on stderr when asked). Takes the final
  // transport stats (drops, unread backlog). Flushes the trace after each
  // non-empty batch. Returns true if the consumer went idle (everything
  // drained).
  bool Run(transport::Consumer& consumer, const std::atomic<bool>& stop, std::chrono::milliseconds drain_timeout,
           ControlChannel* control = nullptr);

  // Finalizes every producer still known (counted incomplete), writes the
  // summary process, closes the trace and moves it into place
  // (trace_placement.h). Call once.
  CollectorSummary Finish();

  // With sink threads: how long the builder's thread and each sink's (the
  // trace writer, then the statistics) have been busy, in seconds; empty
  // without. Where the collector's time per event goes (the slowest stage
  // sets its pace).
  struct StageTimes {
    double builder = 0;
    std::vector<double> sinks;
    uint64_t builder_waits = 0;  // times the assembler waited for the builder's thread
    uint64_t sink_waits = 0;     // times the builder waited for a sink's thread
  };
  StageTimes stage_times() const;

  // Counters so far (trace/device totals are complete only after Finish);
  // waits until the builder has handled every message handed in.
  const CollectorSummary& counters();

  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

 private:
  Collector(CollectorOptions options, std::unique_ptr<trace::TraceSink> trace, std::string trace_written);
  // Writes out what the trace writer buffers (on its thread, with sink threads).
  void FlushTrace();
  // Runs `call` where the builder runs: on the pipe's thread, after the
  // messages handed in before (at once without one).
  void OnBuilderThread(std::function<void()> call);

  CollectorOptions options_;
  std::unique_ptr<trace::TraceSink> trace_;  // the trace writer
  std::unique_ptr<stats::StatsSink> stats_;  // null unless options.stats
  // With sink threads: in front of trace_ and stats_, a thread each (null without).
  std::unique_ptr<AsyncSink> async_;
  std::unique_ptr<TraceBuilder> builder_;
  // With sink threads: the builder runs on a thread of its own, behind this.
  std::unique_ptr<MessagePipe> pipe_;
  std::unique_ptr<LaunchAssembler> assembler_;  // in front of builder_ (and pipe_)
  transport::ConsumerStats transport_stats_;
  CollectorSummary summary_;
  std::string trace_written_;  // where the trace writer writes (the partial file, or the stream)
  bool finished_ = false;
};

}  // namespace smprof
