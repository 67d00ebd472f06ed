// AsyncSink: a sink behind it sees exactly the calls it would have seen
// directly, in order, with the same records (values, phases and async
// spans included); a plain record is one command, a value one more; a
// collector with sink threads writes the same bytes as one without.
#include "collector/async_sink.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collector/collector.h"
#include "collector/run_summary.h"
#include "tests/support/wire_builders.h"

namespace smprof {
namespace {

std::string WarpText(const trace::WarpRecord& w) {
  std::ostringstream o;
  o << "warp#" << w.index << " sm" << w.sm << " b(" << w.block[0] << "," << w.block[1] << "," << w.block[2] << ") w"
    << w.warp << " hw" << w.hw_warp;
  return o.str();
}

std::string ValueText(const trace::UserValue& v) {
  if (!v.present) return v.counter || v.value != 0 ? " (absent value set?)" : "";
  return (v.counter ? " counter " : " value ") + std::to_string(v.value);
}

std::string LaunchText(const trace::LaunchRecord& l) {
  std::ostringstream o;
  o << "launch#" << l.index << " id" << l.launch_id << " " << l.kernel << "|" << l.label << " gpu" << l.gpu << " s"
    << l.stream << " [" << l.start_ns << "," << l.end_ns << "] call " << (l.call.api ? l.call.api : "-") << " "
    << l.call.thread << " key" << l.call_key << (l.call_first ? " first" : "");
  return o.str();
}

// Writes down every call, field by field.
class RecordingSink : public trace::TraceSink {
 public:
  void OnRun(const nlohmann::json& run) override { log.push_back("run " + run.dump()); }
  void OnGpu(const trace::GpuRecord& g) override { log.push_back("gpu " + g.name + " " + g.facts.dump()); }
  void OnProcess(const trace::ProcessRecord& p) override { log.push_back("process " + p.command); }
  void OnProcessNamed(const trace::ProcessRecord& p) override { log.push_back("named " + p.command); }
  void OnNotice(const trace::ProcessRecord& p, uint64_t ts, std::string_view reason, std::string_view detail) override {
    log.push_back("notice " + p.command + " " + std::to_string(ts) + " " + std::string(reason) + " " +
                  std::string(detail));
  }
  void OnHarvest(const trace::ProcessRecord& p, const trace::HarvestRecord& h) override {
    log.push_back("harvest " + std::to_string(p.index) + " " + std::to_string(h.ts_ns) + " " + h.thread + " " +
                  std::to_string(h.stage_us[1]));
  }
  void OnProcessLost(const trace::ProcessRecord& p, uint64_t ts) override {
    log.push_back("lost " + std::to_string(p.index) + " " + std::to_string(ts));
  }
  void OnLaunch(const trace::LaunchRecord& l) override { log.push_back("launch " + LaunchText(l)); }
  void OnWarp(const trace::LaunchRecord& l, const trace::WarpRecord& w) override {
    log.push_back("warp " + LaunchText(l) + " " + WarpText(w));
  }
  void OnSlice(const trace::LaunchRecord& l, const trace::WarpRecord& w, const trace::SliceRecord& s) override {
    std::ostringstream o;
    o << "slice " << LaunchText(l) << " " << WarpText(w) << " " << s.name << " k" << s.name_key << " [" << s.begin_ns
      << "," << s.end_ns << "] c" << s.cycles << " l" << s.lane << " d" << s.depth
      << (s.unterminated ? " unterminated " : " ") << s.note << (s.phase ? " phase" : "") << ValueText(s.value);
    log.push_back(o.str());
    if (s.name_key != 0) Address(s.name_key, s.name.data());
  }
  void OnInstant(const trace::LaunchRecord& l, const trace::WarpRecord& w, const trace::InstantRecord& i) override {
    std::ostringstream o;
    o << "instant " << LaunchText(l) << " " << WarpText(w) << " " << i.name << " k" << i.name_key << " " << i.ts_ns
      << (i.unmatched_end ? " unmatched" : "") << ValueText(i.value);
    log.push_back(o.str());
    if (i.name_key != 0) Address(i.name_key, i.name.data());
  }
  void OnAsyncSpan(const trace::LaunchRecord& l, const trace::AsyncSpanRecord& a) override {
    std::ostringstream o;
    o << "async " << LaunchText(l) << " " << a.name << " k" << a.name_key << " t" << a.token << " b(" << a.block[0]
      << "," << a.block[1] << "," << a.block[2] << ") [" << a.begin_ns << "," << a.end_ns << "] from "
      << (a.begin_warp != nullptr ? WarpText(*a.begin_warp) : "-") << " to "
      << (a.end_warp != nullptr ? WarpText(*a.end_warp) : "-") << " flow " << a.flow_id;
    log.push_back(o.str());
    if (a.name_key != 0) Address(a.name_key, a.name.data());
  }
  void OnLaunchEnd(const trace::LaunchRecord& l, const uint32_t* order, size_t n) override {
    std::string s = "end " + LaunchText(l);
    for (size_t i = 0; i < n; ++i) s += " " + std::to_string(order[i]);
    log.push_back(s);
  }
  bool Flush() override {
    log.push_back("flush");
    return flush_ok;
  }
  bool Finish(const CollectorSummary& s) override {
    log.push_back("finish " + std::to_string(s.events));
    return true;
  }

  // A keyed name is handed over at one address for the whole run.
  void Address(uint32_t key, const char* at) {
    if (addresses.size() <= key) addresses.resize(key + 1, nullptr);
    if (addresses[key] == nullptr) addresses[key] = at;
    if (addresses[key] != at) ++moved_names;
  }

  std::vector<std::string> log;
  std::vector<const char*> addresses;
  int moved_names = 0;
  bool flush_ok = true;
};

// A random but well-formed run: processes, launches with warps that emit
// slices and instants (keyed and unkeyed names, notes), harvests, flushes.
void Drive(trace::TraceSink& sink, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<std::string> names = {"load", "mma", "store", "epilogue", "a much longer region name ..."};
  trace::ProcessRecord proc;
  proc.index = 0;
  proc.pid = 42;
  proc.command = "app";
  sink.OnRun({{"command", "app --x"}});
  trace::GpuRecord gpu;
  gpu.name = "H100";
  gpu.facts = {{"index", 0}};
  sink.OnGpu(gpu);
  sink.OnProcess(proc);
  sink.OnProcessNamed(proc);
  uint64_t t = 1000;
  for (uint64_t launch = 0; launch < 40; ++launch) {
    trace::LaunchRecord l;
    l.index = launch;
    l.launch_id = launch + 1;
    l.kernel = "k" + std::to_string(launch % 3);
    l.label = l.kernel;
    l.gpu = 0;
    l.stream = launch % 2;
    l.start_ns = t;
    l.end_ns = t + 5000;
    if (launch % 4 == 0) {
      l.call.api = "cuLaunchKernel";
      l.call.thread = "main";
      l.call_key = launch;
      l.call_first = true;
    }
    sink.OnLaunch(l);
    const uint32_t warps = 1 + static_cast<uint32_t>(rng() % 300);
    std::vector<uint32_t> order;
    std::vector<trace::WarpRecord> records;
    for (uint32_t w = 0; w < warps; ++w) {
      trace::WarpRecord wr;
      wr.index = w;
      wr.sm = static_cast<uint16_t>(w % 7);
      wr.block[0] = w / 4;
      wr.block[1] = w % 3;
      wr.warp = static_cast<uint16_t>(w % 4);
      wr.hw_warp = static_cast<uint16_t>(w % 64);
      sink.OnWarp(l, wr);
      order.push_back(warps - 1 - w);
      const int events = static_cast<int>(rng() % 40);
      for (int e = 0; e < events; ++e) {
        const size_t n = rng() % names.size();
        if (rng() % 5 == 0) {
          trace::InstantRecord i;
          i.name = names[n];
          i.name_key = rng() % 8 == 0 ? 0 : static_cast<uint32_t>(n + 1);
          i.ts_ns = t + static_cast<uint64_t>(e) * 10;
          i.unmatched_end = rng() % 7 == 0;
          if (rng() % 3 == 0) {
            i.value.present = true;
            i.value.counter = !i.unmatched_end && rng() % 2 == 0;
            i.value.value = static_cast<int64_t>(rng());
          }
          sink.OnInstant(l, wr, i);
        } else {
          trace::SliceRecord s;
          const std::string unkeyed = names[n] + " #" + std::to_string(rng() % 1000);
          const bool keyed = rng() % 8 != 0;
          s.name = keyed ? std::string_view(names[n]) : std::string_view(unkeyed);
          s.name_key = keyed ? static_cast<uint32_t>(n + 1) : 0;
          s.begin_ns = t + static_cast<uint64_t>(e) * 10;
          s.end_ns = s.begin_ns + rng() % 100;
          s.cycles = static_cast<uint32_t>(rng());
          s.lane = static_cast<uint32_t>(rng() % 3);
          s.depth = static_cast<uint32_t>(rng() % 4);
          s.unterminated = rng() % 10 == 0;
          if (s.unterminated && rng() % 2 == 0) s.note = "too many open ranges";
          s.phase = rng() % 4 == 0;
          if (!s.unterminated && rng() % 3 == 0) {
            s.value.present = true;
            s.value.value = -static_cast<int64_t>(rng() % 1000);
          }
          sink.OnSlice(l, wr, s);
        }
      }
      records.push_back(wr);
    }
    // Async spans between the launch's warps: some without an end or a begin.
    const int spans = static_cast<int>(rng() % 20);
    for (int a = 0; a < spans; ++a) {
      const trace::WarpRecord* from = &records[rng() % records.size()];
      const trace::WarpRecord* to = &records[rng() % records.size()];
      const int kind = static_cast<int>(rng() % 6);
      trace::AsyncSpanRecord span;
      const size_t n = rng() % names.size();
      const std::string unkeyed = names[n] + " " + std::to_string(a);
      span.name = kind == 5 ? std::string_view(unkeyed) : std::string_view(names[n]);
      span.name_key = kind == 5 ? 0 : static_cast<uint32_t>(n + 1);
      span.token = static_cast<uint32_t>(rng() % 4);
      std::copy(from->block, from->block + 3, span.block);
      span.begin_ns = t + static_cast<uint64_t>(a) * 7;
      span.end_ns = span.begin_ns + rng() % 500;
      span.begin_warp = kind == 1 ? nullptr : from;
      span.end_warp = kind == 0 ? nullptr : to;
      span.flow_id = launch * 100 + static_cast<uint64_t>(a) + 1;
      sink.OnAsyncSpan(l, span);
    }
    sink.OnLaunchEnd(l, order.data(), order.size());
    t += 10000;
    if (launch % 5 == 4) {
      trace::HarvestRecord h;
      h.ts_ns = t;
      h.thread = "main";
      h.stage_us[1] = static_cast<uint32_t>(launch);
      sink.OnHarvest(proc, h);
      sink.OnNotice(proc, t, "reason", "detail " + std::to_string(launch));
    }
    if (rng() % 3 == 0) sink.Flush();
  }
  sink.OnProcessLost(proc, t);
  CollectorSummary summary;
  summary.events = 12345;
  sink.Finish(summary);
}

TEST(AsyncSinkTest, TheTargetSeesTheSameCallsInTheSameOrder) {
  for (const size_t max_batches : {size_t{1}, size_t{2}, AsyncSink::kMaxBatches}) {
    RecordingSink direct, behind;
    Drive(direct, 7);
    {
      AsyncSink async(&behind, max_batches);
      Drive(async, 7);
    }
    ASSERT_EQ(direct.log.size(), behind.log.size()) << "max_batches " << max_batches;
    for (size_t i = 0; i < direct.log.size(); ++i) {
      ASSERT_EQ(direct.log[i], behind.log[i]) << "call " << i << ", max_batches " << max_batches;
    }
    EXPECT_EQ(behind.moved_names, 0) << "a keyed name changed address";
  }
}

// Several targets replay the same batches, each on its own thread, each
// seeing every call (the collector puts the trace writer and the statistics
// behind one AsyncSink).
TEST(AsyncSinkTest, EveryTargetSeesTheSameCallsInTheSameOrder) {
  for (const size_t max_batches : {size_t{1}, AsyncSink::kMaxBatches}) {
    RecordingSink direct, first, second;
    Drive(direct, 5);
    {
      AsyncSink async(std::vector<trace::TraceSink*>{&first, &second}, max_batches);
      Drive(async, 5);
    }
    EXPECT_EQ(first.log, direct.log) << "max_batches " << max_batches;
    EXPECT_EQ(second.log, direct.log) << "max_batches " << max_batches;
    EXPECT_EQ(first.moved_names + second.moved_names, 0);
  }
}

// One launch, one warp, `n` slices of one keyed name, with or without a value.
uint64_t BatchesFor(size_t n, bool values) {
  RecordingSink target;
  AsyncSink async(&target);
  trace::LaunchRecord l;
  async.OnLaunch(l);
  trace::WarpRecord w;
  async.OnWarp(l, w);
  for (size_t i = 0; i < n; ++i) {
    trace::SliceRecord s;
    s.name = "load";
    s.name_key = 1;
    s.begin_ns = i;
    s.end_ns = i + 1;
    s.value.present = values;
    s.value.value = 3;
    async.OnSlice(l, w, s);
  }
  async.Drain();
  EXPECT_EQ(target.log.size(), n + 2);
  return async.batches();
}

// A record without a value is one command (its warp selected), as before;
// a value is one command more. Batches hold kBatchCommands commands (a new
// batch selects its warp again: one command).
TEST(AsyncSinkTest, APlainRecordIsOneCommandAValueOneMore) {
  constexpr size_t k = AsyncSink::kBatchCommands;
  // launch, select, warp, name, then slices; each later batch: select, slices.
  EXPECT_EQ(BatchesFor(k - 4, false), 1u);
  EXPECT_EQ(BatchesFor(k - 3, false), 2u);
  EXPECT_EQ(BatchesFor(k - 4 + (k - 1), false), 2u);
  EXPECT_EQ(BatchesFor(k - 4 + (k - 1) + 1, false), 3u);
  // Two commands a slice: (k - 4) / 2 fill the first batch, k / 2 the next
  // (1 + 2 j >= k).
  EXPECT_EQ(BatchesFor((k - 4) / 2, true), 1u);
  EXPECT_EQ(BatchesFor((k - 4) / 2 + 1, true), 2u);
  EXPECT_EQ(BatchesFor((k - 4) / 2 + k / 2, true), 2u);
  EXPECT_EQ(BatchesFor((k - 4) / 2 + k / 2 + 1, true), 3u);
}

TEST(AsyncSinkTest, ACallerWaitsWhenTheTargetFallsBehindAndNothingIsLost) {
  RecordingSink direct, behind;
  Drive(direct, 11);
  AsyncSink async(&behind, 1);
  Drive(async, 11);
  async.Drain();
  EXPECT_EQ(behind.log, direct.log);
  EXPECT_GT(async.batches(), 1u);
}

// The queue's overflow policy is to wait: how often the caller waited is
// counted (the collector puts it into the trace's summary: sink_waits).
TEST(AsyncSinkTest, WaitsForASlowTargetAreCounted) {
  struct SlowSink : RecordingSink {
    bool Flush() override {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return RecordingSink::Flush();
    }
  };
  SlowSink target;
  AsyncSink async(&target, 1);
  for (int i = 0; i < 4; ++i) async.Flush();  // a batch each; the target takes 20 ms a flush
  async.Drain();
  EXPECT_GE(async.waits(), 1u);
  EXPECT_EQ(target.log.size(), 4u);
}

TEST(AsyncSinkTest, FlushReportsAFailedTarget) {
  RecordingSink target;
  target.flush_ok = false;
  AsyncSink async(&target);
  async.Flush();  // replayed on the target's thread
  async.Drain();
  EXPECT_FALSE(async.Flush());
}

// --- the collector with and without sink threads ---------------------------

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A run of several launches of many warps, as messages.
std::vector<testing::Bytes> Messages() {
  using testing::Ev;
  constexpr uint64_t kT0 = 5000000000ull;
  std::vector<testing::Bytes> out;
  out.push_back(testing::Process(42, kT0, "app --n 3"));
  out.push_back(testing::Device(0, "NVIDIA H100", 0x47, 0x19));
  out.push_back(testing::Name(1, "load"));
  out.push_back(testing::Name(2, "compute"));
  out.push_back(testing::Name(3, "tile"));
  std::mt19937_64 rng(3);
  uint64_t t = kT0 + 1000;
  for (uint64_t launch = 1; launch <= 12; ++launch) {
    wire::LaunchMsg m = testing::LaunchFields(launch, t, t + 200000);
    m.grid[0] = 64;
    m.block[0] = 128;
    out.push_back(testing::Launch(m, "gemm(float*)"));
    for (uint16_t w = 0; w < 256; ++w) {
      std::vector<wire::WireEvent> events;
      uint64_t at = t + 100 + rng() % 1000;
      for (int k = 0; k < 20; ++k) {
        events.push_back(Ev(at, 1, wire::kEventBegin));
        events.push_back(Ev(at + 50, 1, wire::kEventEnd));
        events.push_back(Ev(at + 60, 2, wire::kEventBegin));
        if (k % 3 == 0) events.push_back(Ev(at + 70, 3, wire::kEventInstant));
        if (k % 7 != 6) events.push_back(Ev(at + 200, 2, wire::kEventEnd));  // some stay open
        at += 300;
      }
      out.push_back(testing::Warp(launch, static_cast<uint16_t>(w % 132), w / 4, w % 4, events));
    }
    t += 300000;
    if (launch % 3 == 0) out.push_back(testing::Harvest(t, wire::kHarvestSync, launch, 0, 100, 1000));
  }
  return out;
}

TEST(AsyncSinkTest, ACollectorWithSinkThreadsWritesTheSameBytes) {
  const std::string path = ::testing::TempDir() + "async_sink_test_" + std::to_string(getpid()) + ".pftrace";
  const std::vector<testing::Bytes> messages = Messages();
  std::string traces[2], stats[2];
  const CollectorOptions::SinkThreads modes[2] = {CollectorOptions::SinkThreads::kOff,
                                                  CollectorOptions::SinkThreads::kOn};
  for (int i = 0; i < 2; ++i) {
    CollectorOptions options;
    options.trace_path = path;
    options.stats = true;
    options.trace_cycles = "counter";
    options.sink_threads = modes[i];
    std::string error;
    auto c = Collector::Create(options, &error);
    ASSERT_NE(c, nullptr) << error;
    const transport::ProducerInfo p{0, 42};
    for (size_t m = 0; m < messages.size(); ++m) {
      c->HandleMessage(p, messages[m].data(), static_cast<uint32_t>(messages[m].size()));
      if (m % 500 == 0) c->HandleProducerEnd(transport::ProducerInfo{9, 9}, true);  // flushes on the way
    }
    c->HandleProducerEnd(p, true);
    const CollectorSummary s = c->Finish();
    ASSERT_TRUE(s.trace_ok) << s.trace_error;
    EXPECT_GT(s.events, 100000u);
    traces[i] = ReadFile(path);
    stats[i] = ReadFile(path + ".stats.json");
    for (const std::string& f : {path, path + ".stats.json", path + ".stats.csv"}) ::unlink(f.c_str());
  }
  EXPECT_GT(traces[0].size(), 1000000u);
  EXPECT_TRUE(traces[0] == traces[1]) << "the traces differ (" << traces[0].size() << " and " << traces[1].size()
                                      << " bytes)";
  EXPECT_EQ(stats[0], stats[1]);
}

}  // namespace
}  // namespace smprof
