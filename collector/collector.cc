#include "collector/collector.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <deque>
#include <thread>

#include "collector/intake.h"
#include "collector/json_sink.h"
#include "collector/message_pipe.h"
#include "collector/perfetto_sink.h"
#include "collector/stats_report.h"
#include "collector/trace_placement.h"
#include "collector/trace_writer.h"
#include "common/logging.h"

namespace smprof {
namespace {

// Threads a large read-back is decoded on: half the cores, 1 to 8 (the
// application runs beside the collector).
unsigned AssemblerThreads() { return std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u); }

// While the trace is finished after the application ended: a progress line
// when it takes longer than this, then every kProgressEvery.
constexpr auto kFirstProgress = std::chrono::seconds(2);
constexpr auto kProgressEvery = std::chrono::seconds(5);

}  // namespace

TraceFormat TraceFormatOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = name.find_last_of('.');
  std::string ext = dot == std::string::npos ? "" : name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "json" ? TraceFormat::kJson : TraceFormat::kPerfetto;
}

std::unique_ptr<Collector> Collector::Create(const CollectorOptions& options, std::string* error) {
  const bool direct = IsStreamPath(options.trace_path);
  const std::string written = direct ? options.trace_path : PartialPath(options.trace_path);
  const bool exclusive = !direct && !options.overwrite;
  std::unique_ptr<trace::TraceSink> sink;
  if (TraceFormatOf(options.trace_path) == TraceFormat::kJson) {
    auto writer = TraceWriter::Open(written, error, exclusive);
    if (writer) sink = std::make_unique<JsonSink>(std::move(writer));
  } else {
    TraceLayout layout = TraceLayout::kAuto;
    if (!ParseTraceLayout(options.layout, &layout)) {
      *error = "unknown trace layout '" + options.layout + "': use launch, hardware or auto";
      return nullptr;
    }
    PerfettoSink::CyclesEncoding cycles = PerfettoSink::CyclesEncoding::kNone;
    if (!PerfettoSink::ParseCyclesEncoding(options.trace_cycles, &cycles)) {
      *error = "unknown trace cycles '" + options.trace_cycles + "': use none, counter or args";
      return nullptr;
    }
    auto proto = PerfettoSink::Open(written, exclusive, error);
    if (proto) {
      proto->set_layout(layout);
      proto->set_cycles_encoding(cycles);
    }
    sink = std::move(proto);
  }
  if (!sink) return nullptr;
  return std::unique_ptr<Collector>(new Collector(options, std::move(sink), written));
}

Collector::Collector(CollectorOptions options, std::unique_ptr<trace::TraceSink> trace, std::string trace_written)
    : options_(std::move(options)), trace_(std::move(trace)), trace_written_(std::move(trace_written)) {
  using SinkThreads = CollectorOptions::SinkThreads;
  const bool threads = options_.sink_threads == SinkThreads::kOn ||
                       (options_.sink_threads == SinkThreads::kAuto &&
                        std::thread::hardware_concurrency() >= CollectorOptions::kSinkThreadCores);
  std::vector<trace::TraceSink*> sinks{trace_.get()};
  if (options_.stats) {
    stats_ = std::make_unique<stats::StatsSink>(std::string());  // named once the trace is placed
    sinks.push_back(stats_.get());
  }
  if (threads) {
    async_ = std::make_unique<AsyncSink>(sinks);
    sinks = {async_.get()};
  }
  builder_ = std::make_unique<TraceBuilder>(std::move(sinks), options_.logger);
  const auto build = [this](const transport::ProducerInfo& producer, const uint8_t* data, uint32_t size) {
    builder_->HandleMessage(producer, data, size);
  };
  if (threads) pipe_ = std::make_unique<MessagePipe>(build);
  assembler_ = std::make_unique<LaunchAssembler>(
      [this, build](const transport::ProducerInfo& producer, const uint8_t* data, uint32_t size) {
        if (pipe_) {
          pipe_->Send(producer, data, size);
        } else {
          build(producer, data, size);
        }
      },
      AssemblerThreads(), options_.logger);
  summary_.trace = options_.trace_path;
}

// The assembler, the builder's thread, the builder and the sink threads go
// before the stages they call.
Collector::~Collector() {
  assembler_.reset();
  pipe_.reset();
  builder_.reset();
  async_.reset();
}

void Collector::OnBuilderThread(std::function<void()> call) {
  if (pipe_) {
    pipe_->Call(std::move(call));
  } else {
    call();
  }
}

Collector::StageTimes Collector::stage_times() const {
  StageTimes t;
  if (pipe_) {
    t.builder = pipe_->busy_seconds();
    t.builder_waits = pipe_->waits();
  }
  if (async_) {
    t.sinks = async_->busy_seconds();
    t.sink_waits = async_->waits();
  }
  return t;
}

const CollectorSummary& Collector::counters() {
  if (pipe_) pipe_->Drain();
  return builder_->counters();
}

void Collector::HandleMessage(const transport::ProducerInfo& producer, const uint8_t* data, uint32_t size) {
  if (!finished_) assembler_->HandleMessage(producer, data, size);
}

void Collector::HandleProducerEnd(const transport::ProducerInfo& producer, bool clean) {
  if (finished_) return;
  assembler_->HandleProducerEnd(producer);
  OnBuilderThread([this, producer, clean] { builder_->HandleProducerEnd(producer, clean); });
  FlushTrace();
}

void Collector::FlushTrace() {
  OnBuilderThread([this] {
    if (async_) {
      async_->Flush();
    } else {
      trace_->Flush();
    }
  });
  if (pipe_) pipe_->Flush();
}

void Collector::SetTransportStats(const transport::ConsumerStats& stats) { transport_stats_ = stats; }

void Collector::HandleControl(const nlohmann::json& message) {
  if (finished_) return;
  if (auto run = message.find("run"); run != message.end() && run->is_object()) {
    OnBuilderThread([this, run = *run] { builder_->HandleRun(run); });
  }
  if (auto exit = message.find("exit"); exit != message.end() && exit->is_object()) summary_.exit = *exit;
}

bool Collector::Run(transport::Consumer& consumer, const std::atomic<bool>& stop,
                    std::chrono::milliseconds drain_timeout, ControlChannel* control) {
  const auto on_control = [this](const nlohmann::json& message) { HandleControl(message); };
  bool control_open = control != nullptr;
  Intake intake(consumer, options_.queue_bytes != 0 ? options_.queue_bytes : Intake::DefaultBudget());
  std::deque<Intake::Item> batch;
  uint64_t processed = 0;
  const auto process = [&] {
    for (const Intake::Item& item : batch) {
      if (item.end) {
        HandleProducerEnd(item.producer, item.clean);
      } else {
        HandleMessage(item.producer, item.message, item.size);
        processed += item.size;
      }
      intake.Release(item);
    }
    const bool any = !batch.empty();
    batch.clear();
    SetTransportStats(intake.stats());
    if (any) FlushTrace();
  };
  constexpr auto kWait = std::chrono::milliseconds(2);
  while (!stop.load(std::memory_order_relaxed)) {
    // The control channel's end is the stop signal too; messages it
    // delivered before closing are handled first.
    if (control_open && !(control_open = control->Poll(on_control))) break;
    intake.Pop(&batch, kWait);
    process();
  }
  if (control_open) control->Poll(on_control);  // an "exit" sent just before SIGTERM
  // Final drain: producers drop (and count) what they send from now on, so
  // the drain ends; what is still unread when it times out is counted too.
  // What the intake queued is processed to the end, however long it takes:
  // the application is gone, the trace is finished now.
  intake.Close(drain_timeout);
  const auto finishing = std::chrono::steady_clock::now();
  auto next_report = finishing + kFirstProgress;
  while (intake.Pop(&batch, kWait)) {
    process();
    if (options_.progress && std::chrono::steady_clock::now() >= next_report) {
      next_report = std::chrono::steady_clock::now() + kProgressEvery;
      const uint64_t total = intake.total_bytes();
      std::fprintf(stderr, "smprof: finishing the trace: %.0f of %.0f MB shipped processed (%.0f%%), %.0f s\n",
                   processed / 1e6, total / 1e6, total != 0 ? 100.0 * processed / total : 100.0,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - finishing).count());
    }
  }
  process();
  return intake.drained();
}

CollectorSummary Collector::Finish() {
  if (finished_) return summary_;
  finished_ = true;
  assembler_->Finish();
  std::string pipe_error;
  if (pipe_) {
    pipe_->Drain();
    pipe_error = pipe_->error();
  }
  builder_->Finish(transport_stats_, &summary_);
  // From here on the sinks are used on this thread.
  std::string replay_error;
  CollectorSummary& s = summary_;
  if (async_) {
    async_->Drain();
    replay_error = async_->replay_error();
    s.sink_waits = async_->waits();
  }
  if (stats_) {
    s.statistics = stats::ToJson(stats_->Build(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  s.layout = trace_->layout_description();
  if (replay_error.empty()) replay_error = pipe_error;
  s.trace_ok = trace_->Finish(s) && replay_error.empty();
  s.trace_error = replay_error.empty() ? trace_->error() : replay_error;
  s.trace = trace_written_;
  const bool placed = trace_written_ == options_.trace_path;  // written directly (IsStreamPath)
  if (s.trace_ok && !placed &&
      !PlaceTrace(trace_written_, options_.trace_path, options_.overwrite, &s.trace, &s.trace_error)) {
    s.trace_ok = false;
  }
  if (!s.trace_ok && options_.logger) options_.logger->error("{}", s.trace_error);
  // Beside the trace where it landed (a numbered name, or the partial file
  // after an error), so they can never be another run's.
  if (const std::string base = StatsBase(s.trace); stats_ && !base.empty()) {
    stats_->SetBase(base);
    if (stats_->Finish(s)) {
      s.stats_json = stats_->json_path();
      s.stats_csv = stats_->csv_path();
    } else {
      s.stats_error = stats_->error();
      if (options_.logger) options_.logger->error("{}", s.stats_error);
    }
  }
  return s;
}

}  // namespace smprof
