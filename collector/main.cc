// smprof-collector: receives one run's messages through shared memory and
// writes its trace (Perfetto protobuf, or JSON for *.json). Started by
// smprof-run; see collector.h.
//
// Exit codes: 0 done (trace and summary written), 1 runtime error (the message
// names the fix), 2 bad arguments.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "collector/collector.h"
#include "collector/heap_policy.h"
#include "collector/perfetto_sink.h"
#include "common/logging.h"
#include "common/settings.h"
#include "common/transport.h"
#include "common/transport_layout.h"

namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "used from a signal handler");

void OnSignal(int) { g_stop.store(true, std::memory_order_relaxed); }

constexpr char kUsage[] =
    "usage: smprof-collector --run-id ID --output PATH [options]\n"
    "\n"
    "Receives the messages of one smprof run through shared memory and writes one\n"
    "trace: native Perfetto protobuf, or Chrome/Perfetto JSON when PATH ends in\n"
    ".json. Runs until SIGTERM/SIGINT or until the control\n"
    "channel closes, then closes the run (producers drop and count what they send\n"
    "from then on) and drains it. The trace is written to PATH.partial and moved\n"
    "to PATH when complete, never over an existing file unless --force.\n"
    "\n"
    "  --run-id ID             run id, 1-64 characters of [A-Za-z0-9_-]\n"
    "  --output PATH           trace file to write (*.json: JSON; else protobuf)\n"
    "  --force                 replace an existing PATH (and PATH.partial)\n"
    "  --summary PATH          also write the run summary as JSON here\n"
    "  --progress              say on stderr how far the trace is while it is finished\n"
    "                          after the run's programs have exited (from 2 s on)\n"
    "  --stats                 also write the run's statistics beside the trace:\n"
    "                          PATH.stats.json and PATH.stats.csv\n"
    "  --summary-fd N          ... or to this file descriptor (from its start)\n"
    "  --control-fd N          read smprof-run's control messages (run metadata,\n"
    "                          exit status) from fd N; its end stops the run\n"
    "  --ready-fd N            write \"ready\\n\" to fd N once accepting producers, then close it\n"
    "  --max-producers N       processes attached at once, 1 to 65536 (default 1024)\n"
    "  --drain-timeout-ms N    after the stop signal, wait at most this long for\n"
    "                          producers to finish (default 5000)\n"
    "  --log-level L           trace|debug|info|warn|error|critical|off (default warn)\n"
    "  --layout L              protobuf track layout: launch|hardware|auto (default auto)\n"
    "  --trace-cycles HOW      per-range SM cycles in a protobuf trace: none|counter|args (default none)\n"
    "  --sink-threads WHEN     trace builder, writer and statistics on threads of their own:\n"
    "                          auto (4 or more cores)|on|off (default auto)\n"
    "  --help                  show this help\n";

int Usage(const std::string& problem) {
  std::fprintf(stderr, "smprof-collector: %s\n\n%s", problem.c_str(), kUsage);
  return 2;
}

// Every number smprof reads goes through the one parser (common/settings.h).
bool ParseUint(const std::string& text, uint64_t max, uint64_t* out) {
  std::string ignored;
  return smprof::ParseWholeNumber(text, 0, max, out, &ignored);
}

struct Args {
  std::string run_id;
  std::string output;
  std::string summary;
  bool stats = false;
  bool progress = false;
  std::string layout = "auto";
  std::string trace_cycles = "none";
  std::string sink_threads = "auto";
  int summary_fd = -1;
  int control_fd = -1;
  bool force = false;
  int ready_fd = -1;
  uint32_t max_producers = 1024;
  uint64_t drain_timeout_ms = 5000;
  std::string log_level = "warn";
};

// Returns -1 to continue, else the exit code.
int ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--force") {
      args->force = true;
      continue;
    }
    if (arg == "--stats") {
      args->stats = true;
      continue;
    }
    if (arg == "--progress") {
      args->progress = true;
      continue;
    }
    std::string value;
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return Usage("missing value for " + arg);
    }
    uint64_t n = 0;
    if (arg == "--run-id") {
      args->run_id = value;
    } else if (arg == "--output") {
      args->output = value;
    } else if (arg == "--summary") {
      args->summary = value;

    } else if (arg == "--ready-fd" || arg == "--summary-fd" || arg == "--control-fd") {
      if (!ParseUint(value, INT32_MAX, &n)) return Usage("bad " + arg + " '" + value + "'");
      (arg == "--ready-fd"     ? args->ready_fd
       : arg == "--summary-fd" ? args->summary_fd
                               : args->control_fd) = static_cast<int>(n);
    } else if (arg == "--max-producers") {
      if (!ParseUint(value, smprof::transport::internal::kMaxProducers, &n) || n == 0) {
        return Usage("bad --max-producers '" + value + "' (1 to " +
                     std::to_string(smprof::transport::internal::kMaxProducers) + ")");
      }
      args->max_producers = static_cast<uint32_t>(n);
    } else if (arg == "--drain-timeout-ms") {
      if (!ParseUint(value, 86400000, &n)) return Usage("bad --drain-timeout-ms '" + value + "'");
      args->drain_timeout_ms = n;
    } else if (arg == "--log-level") {
      args->log_level = value;
    } else if (arg == "--layout") {
      if (value != "launch" && value != "hardware" && value != "auto") {
        return Usage("bad --layout '" + value + "': use launch, hardware or auto");
      }
      args->layout = value;
    } else if (arg == "--trace-cycles") {
      smprof::PerfettoSink::CyclesEncoding encoding;
      if (!smprof::PerfettoSink::ParseCyclesEncoding(value, &encoding)) {
        return Usage("bad --trace-cycles '" + value + "': use none, counter or args");
      }
      args->trace_cycles = value;
    } else if (arg == "--sink-threads") {
      if (value != "auto" && value != "on" && value != "off") {
        return Usage("bad --sink-threads '" + value + "': use auto, on or off");
      }
      args->sink_threads = value;
    } else {
      return Usage("unknown option '" + arg + "'");
    }
  }
  if (args->run_id.empty()) return Usage("--run-id is required");
  if (!smprof::transport::IsValidRunId(args->run_id)) {
    return Usage("invalid --run-id '" + args->run_id + "' (1-64 characters of [A-Za-z0-9_-])");
  }
  if (args->output.empty()) return Usage("--output is required");
  if (!smprof::IsLogLevel(args->log_level)) {
    return Usage("bad --log-level '" + args->log_level + "': use " + smprof::kLogLevelsText);
  }
  return -1;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  const int parsed = ParseArgs(argc, argv, &args);
  if (parsed >= 0) return parsed;

  // A private logger: never spdlog's default registry.
  auto logger = std::make_shared<spdlog::logger>("smprof-collector", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("smprof-collector: [%l] %v");
  logger->set_level(spdlog::level::from_str(args.log_level));
  logger->flush_on(spdlog::level::warn);
  if (!smprof::RetainFreedMemory()) logger->debug("the allocator keeps its default thresholds");

  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Past RLIMIT_FSIZE a write fails with EFBIG (and the trace is closed after
  // its last whole event) instead of the signal killing us mid-object.
  signal(SIGXFSZ, SIG_IGN);

  std::string error;
  smprof::transport::ConsumerOptions consumer_options;
  consumer_options.max_producers = args.max_producers;
  auto consumer = smprof::transport::Consumer::Create(args.run_id, consumer_options, &error);
  if (!consumer) {
    std::fprintf(stderr, "smprof-collector: %s\n", error.c_str());
    return 1;
  }
  smprof::CollectorOptions options;
  options.trace_path = args.output;
  options.overwrite = args.force;
  options.logger = logger;
  options.stats = args.stats;
  options.progress = args.progress;
  options.layout = args.layout;
  options.trace_cycles = args.trace_cycles;
  options.sink_threads = args.sink_threads == "on"    ? smprof::CollectorOptions::SinkThreads::kOn
                         : args.sink_threads == "off" ? smprof::CollectorOptions::SinkThreads::kOff
                                                      : smprof::CollectorOptions::SinkThreads::kAuto;
  auto collector = smprof::Collector::Create(options, &error);
  if (!collector) {
    std::fprintf(stderr, "smprof-collector: %s\n", error.c_str());
    return 1;
  }

  // A launcher that is gone before it read "ready" (smprof-run killed while
  // we started) will start no program: the run ends here, but the trace
  // file already exists, so it is finished and put in place like any other
  // rather than left behind as PATH.partial.
  int rc = 0;
  if (args.ready_fd >= 0) {
    const bool ok = WriteAll(args.ready_fd, "ready\n", 6);
    const int saved = errno;
    ::close(args.ready_fd);
    if (!ok) {
      std::fprintf(stderr, "smprof-collector: cannot write to --ready-fd %d: %s; finishing the trace empty\n",
                   args.ready_fd, std::strerror(saved));
      g_stop.store(true, std::memory_order_relaxed);
      rc = 1;
    }
  }
  if (rc == 0) logger->info("run '{}' ready, writing {}", args.run_id, args.output);

  std::unique_ptr<smprof::ControlChannel> control;
  if (args.control_fd >= 0) control = std::make_unique<smprof::ControlChannel>(args.control_fd);
  const bool drained =
      collector->Run(*consumer, g_stop, std::chrono::milliseconds(args.drain_timeout_ms), control.get());
  if (!drained) {
    logger->warn(
        "drain timeout ({} ms) passed with producers still attached; their data is "
        "incomplete",
        args.drain_timeout_ms);
  }
  const smprof::CollectorSummary summary = collector->Finish();
  const std::string text = summary.ToJson().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  logger->info("summary: {}", text);

  if (!summary.trace_ok) {
    std::fprintf(stderr, "smprof-collector: %s (check free space and permissions)\n", summary.trace_error.c_str());
    rc = 1;
  }
  if (!args.summary.empty()) {
    std::ofstream out(args.summary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::fprintf(stderr, "smprof-collector: cannot write summary '%s' (choose a writable --summary path)\n",
                   args.summary.c_str());
      rc = 1;
    }
  }
  if (args.summary_fd >= 0 && !WriteAll(args.summary_fd, text.data(), text.size())) {
    std::fprintf(stderr, "smprof-collector: cannot write the summary to --summary-fd %d: %s\n", args.summary_fd,
                 std::strerror(errno));
    rc = 1;
  }
  if (summary.transport_unread_messages != 0) {
    logger->warn("{} messages were still unread when the drain stopped; their events are lost",
                 summary.transport_unread_messages);
  }
  if (summary.lost_total != 0) {
    logger->warn("{} events lost (device buffer {}, unplaced {}, transport {}, not shipped {}, orphan {})",
                 summary.lost_total, summary.lost_device_buffer, summary.lost_device_unplaced, summary.lost_transport,
                 summary.lost_host, summary.orphan_events);
  }
  return rc;
}
