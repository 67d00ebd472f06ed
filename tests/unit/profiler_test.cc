// The injector's launch policy, device contexts and harvester on a fake GPU:
// CUPTI's callbacks are the test's calls, "kernels" write chunks into fake
// device memory (tests/fakes/fake_gpu.h), and the transport is a sink that
// decodes what was shipped.
#include "injector/profiler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "collector/launch_assembler.h"
#include "tests/fakes/fake_gpu.h"

namespace smprof::injector {
namespace {

using fake::FakeGpu;

// What the injector ships, assembled into launches by the collector's first
// stage (collector/launch_assembler.h) and decoded: launches by kernel name,
// events, the last stats.
class CaptureSink : public MessageSink {
 public:
  bool Send(const void* data, uint32_t size, uint64_t) override {
    std::unique_lock<std::mutex> lock(mu);
    ++held;
    cv.notify_all();
    cv.wait(lock, [&] { return !blocked; });
    --held;
    wire::MsgHeader h;
    std::memcpy(&h, data, sizeof(h));
    if (h.type == wire::kMsgRecords) {
      wire::RecordsMsg m;
      std::memcpy(&m, data, sizeof(m));
      records_in_read_back += m.count;
    } else if (h.type == wire::kMsgHarvest) {
      records_per_read_back.push_back(records_in_read_back);
      records_in_read_back = 0;
    }
    assembler.HandleMessage(kProducer, static_cast<const uint8_t*>(data), size);
    cv.notify_all();
    return true;
  }
  // An assembled message (mu held).
  void Capture(const void* data) {
    wire::MsgHeader h;
    std::memcpy(&h, data, sizeof(h));
    const auto* bytes = static_cast<const uint8_t*>(data);
    if (h.type == wire::kMsgLaunch) {
      wire::LaunchMsg m;
      std::memcpy(&m, data, sizeof(m));
      const std::string name(reinterpret_cast<const char*>(bytes + sizeof(m)), m.name_len);
      ++launches[name];
      launch_names[m.launch_id] = name;
      calls[name] += m.call.api != wire::kApiNone ? 1 : 0;
      flags[name] |= m.flags;
    } else if (h.type == wire::kMsgWarpEvents) {
      wire::WarpEventsMsg m;
      std::memcpy(&m, data, sizeof(m));
      events[launch_names[m.launch_id]] += m.count;
      launch_events[m.launch_id] += m.count;
      total_events += m.count;
    } else if (h.type == wire::kMsgStats) {
      std::memcpy(&stats, data, sizeof(stats));
    } else if (h.type == wire::kMsgHarvest) {
      wire::HarvestMsg m;
      std::memcpy(&m, data, sizeof(m));
      ++harvests[m.reason];
    } else if (h.type == wire::kMsgDevice) {
      wire::DeviceMsg m;
      std::memcpy(&m, data, sizeof(m));
      device_buffer_mib = m.buffer_mib;
    } else if (h.type == wire::kMsgNotice) {
      wire::NoticeMsg m;
      std::memcpy(&m, data, sizeof(m));
      notices.emplace_back(m.kind, std::string(reinterpret_cast<const char*>(bytes + sizeof(m)), m.text_len));
    } else if (h.type == wire::kMsgName) {
      wire::NameMsg m;
      std::memcpy(&m, data, sizeof(m));
      names.emplace_back(reinterpret_cast<const char*>(bytes + sizeof(m)), m.name_len);
    }
  }
  // Until the counters after the n-th read-back came (its last message).
  void WaitForHarvests(uint64_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return stats.harvests >= n; });
  }
  // Until a sender waits in a blocked Send.
  void WaitUntilASenderIsHeld() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return blocked && held > 0; });
  }
  void Block(bool b) {
    {
      std::lock_guard<std::mutex> lock(mu);
      blocked = b;
    }
    cv.notify_all();
  }

  static constexpr transport::ProducerInfo kProducer{1, 100};
  std::mutex mu;
  std::condition_variable cv;
  LaunchAssembler assembler{
      [this](const transport::ProducerInfo&, const uint8_t* data, uint32_t) { Capture(data); }, 1, nullptr};
  bool blocked = false;
  int held = 0;  // senders inside Send
  std::map<std::string, int> launches, calls;
  std::map<std::string, uint32_t> flags;
  std::map<std::string, uint64_t> events;
  std::map<uint64_t, std::string> launch_names;
  std::map<uint64_t, uint64_t> launch_events;  // by launch id
  // The kernel records each read-back shipped, as the injector sent them.
  std::vector<uint32_t> records_per_read_back;
  uint32_t records_in_read_back = 0;
  std::map<uint32_t, int> harvests;
  std::vector<std::string> names;
  std::vector<std::pair<uint32_t, std::string>> notices;  // kind, text
  uint64_t total_events = 0;
  uint32_t device_buffer_mib = 0;
  wire::StatsMsg stats{};
};

Settings MakeSettings(const std::string& kernels = "", const std::string& launches = "",
                      const std::string& capture = "none", uint32_t buffer_mb = 1) {
  Settings s;
  std::string error;
  EXPECT_TRUE(ParseSetting(Setting::kKernels, kernels, "test", &s, &error)) << error;
  EXPECT_TRUE(ParseSetting(Setting::kLaunches, launches, "test", &s, &error)) << error;
  EXPECT_TRUE(ParseSetting(Setting::kCaptureRange, capture, "test", &s, &error)) << error;
  s.buffer_mb = buffer_mb;
  return s;
}

// One profiled process: a fake GPU with one opted-in module holding two
// kernels (gemm, other), a module that did not opt in, and two streams.
class ProfilerTest : public ::testing::Test {
 protected:
  void Start(const Settings& settings, unsigned harvest_threads = 1, uint64_t bounce_bytes = 64u << 10) {
    shipper = std::make_unique<Shipper>(&sink);
    profiler = std::make_unique<Profiler>(gpu, settings, *shipper, harvest_threads, bounce_bytes);
  }
  void TearDown() override {
    if (profiler) profiler->Shutdown();
  }

  // A launch as the driver API makes it: enter, the kernel queued, exit.
  void LaunchOn(GpuFunction f, GpuModule m, const char* symbol, GpuStream stream, uint32_t warps = 8,
                uint32_t ranges = 4, bool deliver = true) {
    const uint64_t correlation = ++next_correlation;
    LaunchCall call;
    call.ctx = gpu.context;
    call.function = f;
    call.symbol = symbol;
    call.stream = stream;
    call.warps = warps;
    call.correlation_id = correlation;
    call.api = wire::kApiLaunchKernel;
    profiler->OnLaunchEnter(call);
    gpu.Launch(m, stream, symbol, correlation, warps, ranges, &profiler->activity(), deliver);
    profiler->OnLaunchExit(correlation);
  }
  // A graph launch (cuGraphLaunch): its kernel nodes each record `ranges` ranges per warp.
  void LaunchGraphOn(void* graph, void* exec, GpuStream stream, uint32_t ranges = 4) {
    const uint64_t correlation = ++next_correlation;
    LaunchCall call;
    call.ctx = gpu.context;
    call.stream = stream;
    call.correlation_id = correlation;
    call.api = wire::kApiGraphLaunch;
    call.graph_exec = exec;
    profiler->OnLaunchEnter(call);
    gpu.LaunchGraph(graph, stream, correlation, ranges, &profiler->activity());
    profiler->OnLaunchExit(correlation);
  }
  // A graph of `nodes` (function, warps) instantiated as `exec` (a made-up CUgraphExec), and its replays.
  struct Graph {
    void* graph;
    void* exec;
  };
  Graph Instantiate(std::vector<std::pair<GpuFunction, uint32_t>> nodes, uintptr_t exec) {
    Graph g{gpu.AddGraph(std::move(nodes)), reinterpret_cast<void*>(exec)};
    profiler->OnGraphExecCreated(gpu.context, g.graph, g.exec);
    return g;
  }
  void Replay(const Graph& g, int replays, GpuStream s) {
    for (int replay = 0; replay < replays; ++replay) LaunchGraphOn(g.graph, g.exec, s);
  }
  void Gemm(GpuStream s, uint32_t warps = 8, uint32_t ranges = 4) { LaunchOn(gemm, module, kGemm, s, warps, ranges); }
  void Other(GpuStream s, uint32_t warps = 8, uint32_t ranges = 4) {
    LaunchOn(other, module, kOther, s, warps, ranges);
  }
  void Sync() {
    profiler->OnSyncEnter(wire::kApiCtxSynchronize);
    profiler->OnSyncExit(gpu.context, wire::kApiCtxSynchronize, true);
  }
  void Finish() {
    profiler->Shutdown();
    profiler.reset();
  }
  void ExpectUnloadDuringAFetch(bool destroy_context);
  // Launches on `s` held past a drain, which switches segments (below).
  void ExpectADrainToSwitchSegmentsOn(GpuStream s);
  // A second opted-in module: its kernel stages() records "stage" ranges.
  void AddStages() {
    stages = gpu.AddModule(true, {"stage"});
    stages_kernel = gpu.AddFunction(stages, kStages);
  }
  void Stages(bool deliver = true) { LaunchOn(stages_kernel, stages, kStages, s1, 8, 4, deliver); }
  // A harvest of gemm held while shipping (its chunks already fetched: the
  // staging area is free), then a launch of stages(): the next read-back is
  // staged and queued behind the held one.
  void StagesBehindAHeldHarvest() {
    Start(MakeSettings());
    AddStages();
    Gemm(s1);
    sink.Block(true);
    Sync();
    sink.WaitUntilASenderIsHeld();
    Stages();
  }
  // One harvest thread, held after a first launch's read-back was fetched
  // (it pauses reading that launch's names); then two read-backs of 48
  // launches (384 chunks of the 1 MB arena's 960 each) are staged side by
  // side, not fetched: no room for a third.
  void FillTheStagingAreaBehindAHeldHarvest() {
    Start(MakeSettings(), /*harvest_threads=*/1);
    gpu.HoldStringReads(true);
    Gemm(s1);
    Sync();
    ASSERT_TRUE(gpu.WaitUntil([&] { return gpu.held_string_reads_locked() > 0; }, std::chrono::seconds(10)));
    EXPECT_EQ(gpu.device_copies(), 1u);
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 48; ++j) Gemm(s1);
      Sync();
    }
    EXPECT_EQ(gpu.device_copies(), 3u);
  }
  // Every name was read from live memory, `name` among them.
  void ExpectNamesReadable(const std::string& name) {
    EXPECT_NE(std::find(sink.names.begin(), sink.names.end(), name), sink.names.end());
    for (const std::string& n : sink.names) EXPECT_EQ(n.find("unreadable"), std::string::npos) << n;
  }
  // A launch whose record comes only with the final flush (see the tests).
  void ExpectALateLastRecordAttributes(bool destroy_context) {
    Start(MakeSettings());
    LaunchOn(gemm, module, kGemm, s1, 8, 4, /*deliver=*/false);
    Sync();                    // the record has not arrived: the events wait ...
    sink.WaitForHarvests(1);   // ... once the harvest thread has seen it missing
    gpu.DeliverLate(&profiler->activity());  // it comes with the final flush
    if (destroy_context) profiler->OnContextDestroy(gpu.context);
    Finish();
    EXPECT_EQ(sink.launches["gemm(float*)"], 1);
    EXPECT_EQ(sink.events["gemm(float*)"], 64u);
    EXPECT_EQ(sink.stats.events_unattributed, 0u);
    EXPECT_EQ(sink.stats.events_filtered, 0u);
    // Named from the module's memory, with the generation they were read back in.
    ASSERT_FALSE(sink.names.empty());
    for (const std::string& name : sink.names) EXPECT_EQ(name.find("unreadable"), std::string::npos) << name;
  }

  static constexpr const char* kGemm = "_Z4gemmPf";
  static constexpr const char* kOther = "_Z5otherPf";
  static constexpr const char* kStages = "_Z6stagesv";
  GpuModule stages = nullptr;
  GpuFunction stages_kernel = nullptr;
  FakeGpu gpu;
  CaptureSink sink;
  std::unique_ptr<Shipper> shipper;
  std::unique_ptr<Profiler> profiler;
  GpuModule module = gpu.AddModule(true);
  GpuModule plain_module = gpu.AddModule(false);
  GpuFunction gemm = gpu.AddFunction(module, kGemm);
  GpuFunction other = gpu.AddFunction(module, kOther);
  GpuFunction plain = gpu.AddFunction(plain_module, "_Z5plainv");
  GpuStream s1 = gpu.AddStream();
  GpuStream s2 = gpu.AddStream();
  uint64_t next_correlation = 100;
};

TEST_F(ProfilerTest, SelectedLaunchesShipEveryEventWithTheirCalls) {
  Start(MakeSettings());
  for (int i = 0; i < 3; ++i) Gemm(s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 3);
  EXPECT_EQ(sink.events["gemm(float*)"], 3u * 8 * 8);
  EXPECT_EQ(sink.calls["gemm(float*)"], 3);
  EXPECT_EQ(sink.stats.events_recorded, 3u * 8 * 8);
  EXPECT_EQ(sink.stats.events_filtered, 0u);
  EXPECT_EQ(sink.stats.events_unattributed, 0u);
  EXPECT_EQ(gpu.events_written(), 3u * 8 * 8);
}

// SMPROF_BUFFER_MB=auto: the arena (and its staging copy) from the free
// device memory, said in the device's announcement; a GPU that cannot give
// that much gets less.
TEST_F(ProfilerTest, AnAutomaticBufferIsSizedFromTheFreeDeviceMemory) {
  gpu.set_device_memory(uint64_t{3} << 30, uint64_t{16} << 30);  // 3 GiB free: 96 MiB share, 64 MiB
  gpu.largest_allocation_ = size_t{32} << 20;                     // ... but only 32 MiB can be had
  Start(MakeSettings("", "", "none", kAutoBufferMb));
  Gemm(s1);
  Sync();
  Finish();
  const std::vector<size_t> sizes = gpu.allocation_sizes();
  ASSERT_GE(sizes.size(), 2u);
  EXPECT_EQ(sizes[0], size_t{32} << 20);  // the arena: 64 MiB failed, 32 MiB taken
  EXPECT_EQ(sink.events["gemm(float*)"], 64u);
  EXPECT_EQ(sink.device_buffer_mib, 32u);
}

TEST_F(ProfilerTest, AnExplicitBufferSizeIsTakenAsGiven) {
  gpu.set_device_memory(uint64_t{96} << 30, uint64_t{141} << 30);
  Start(MakeSettings("", "", "none", 8));
  Gemm(s1);
  Sync();
  Finish();
  ASSERT_FALSE(gpu.allocation_sizes().empty());
  EXPECT_EQ(gpu.allocation_sizes()[0], size_t{8} << 20);
  EXPECT_EQ(sink.device_buffer_mib, 8u);
}

TEST_F(ProfilerTest, AKernelThatDidNotOptInCostsNoContext) {
  Start(MakeSettings());
  LaunchOn(plain, plain_module, "_Z5plainv", s1);
  Sync();
  Finish();
  EXPECT_TRUE(sink.launches.empty());
  EXPECT_EQ(sink.stats.launches_opted_in, 0u);
  EXPECT_EQ(sink.harvests.size(), 0u);
}

TEST_F(ProfilerTest, ExcludedKernelRecordsNothingOnTheGpu) {
  Start(MakeSettings("gemm"));
  Other(s1);  // its module is dark: the kernel reads a zero reference
  EXPECT_EQ(gpu.kernels_that_recorded(), 0u);
  Gemm(s1);
  Sync();
  Other(s1);  // dark again after the harvest
  Sync();
  Finish();
  EXPECT_EQ(gpu.kernels_run(), 3u);
  EXPECT_EQ(gpu.kernels_that_recorded(), 1u);
  EXPECT_EQ(gpu.events_written(), 64u);
  EXPECT_EQ(sink.launches["gemm(float*)"], 1);
  EXPECT_EQ(sink.launches.count("other(float*)"), 0u);
  EXPECT_EQ(sink.stats.events_filtered, 0u);
  EXPECT_EQ(sink.stats.launches_not_selected, 2u);
}

TEST_F(ProfilerTest, ExcludedLaunchAfterASelectedOneIsDarkenedInStreamOrder) {
  Start(MakeSettings("gemm"));
  gpu.Hold(s1);  // the GPU is behind: both kernels are queued when `other` is launched
  Gemm(s1);
  Other(s1);
  Gemm(s1);
  const auto copies = gpu.app_copies();
  ASSERT_EQ(copies.size(), 3u);  // light ahead of the gemm, darken ahead of `other`, light again
  for (const auto& c : copies) EXPECT_EQ(c.stream, s1);
  EXPECT_NE(copies[0].value, 0u);
  EXPECT_EQ(copies[1].value, 0u);
  EXPECT_NE(copies[2].value, 0u);
  gpu.Release(s1);
  Sync();
  Finish();
  EXPECT_EQ(gpu.kernels_that_recorded(), 2u);  // the gemms, not `other` between them
  EXPECT_EQ(sink.events["gemm(float*)"], 2u * 64);
  EXPECT_EQ(sink.stats.events_filtered, 0u);
}

TEST_F(ProfilerTest, ExcludedLaunchOnAnotherStreamRecordsAndIsFiltered) {
  Start(MakeSettings("gemm"));
  Gemm(s1);
  Other(s2);  // the module records for s1's gemm: `other` on s2 cannot be darkened in order
  Sync();
  Finish();
  EXPECT_EQ(gpu.kernels_that_recorded(), 2u);
  EXPECT_EQ(sink.launches["gemm(float*)"], 1);
  EXPECT_EQ(sink.launches.count("other(float*)"), 0u);
  EXPECT_EQ(sink.stats.events_filtered, 64u);
  EXPECT_EQ(sink.stats.events_recorded, 128u);  // every event read back ships; the collector filters
}

TEST_F(ProfilerTest, AnExcludedLaunchQueuedBeforeALightIsWaitedForAndFiltered) {
  Start(MakeSettings("gemm"));
  gpu.Hold(s2);
  Other(s2);  // queued while the module is dark; it runs after the gemm lit it
  Gemm(s1);
  Sync();  // s2 still runs `other`, which now records: no harvest yet
  EXPECT_EQ(sink.harvests.size(), 0u);
  gpu.Release(s2);
  Sync();
  Finish();
  EXPECT_EQ(gpu.kernels_that_recorded(), 2u);
  EXPECT_EQ(sink.launches["gemm(float*)"], 1);
  EXPECT_EQ(sink.launches.count("other(float*)"), 0u);
  EXPECT_EQ(sink.stats.events_filtered, 64u);
}

TEST_F(ProfilerTest, LaunchRangeProfilesOnlyTheChosenLaunches) {
  Start(MakeSettings("", "gemm:2-3"));
  for (int i = 0; i < 6; ++i) Gemm(s1);
  Other(s1);  // matches no item: not limited
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 2);
  EXPECT_EQ(sink.launches["other(float*)"], 1);
  EXPECT_EQ(gpu.kernels_that_recorded(), 3u);
  EXPECT_EQ(sink.stats.events_filtered, 0u);
  EXPECT_EQ(sink.stats.launches_not_selected, 4u);
}

TEST_F(ProfilerTest, CaptureWindowFollowsProfilerStartAndStop) {
  Start(MakeSettings("", "", "cudaProfilerApi"));
  Gemm(s1);
  profiler->OnProfilerStart();
  Gemm(s1);
  Gemm(s1);
  profiler->OnProfilerStop();
  Gemm(s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 2);
  EXPECT_EQ(gpu.kernels_that_recorded(), 2u);
}

TEST_F(ProfilerTest, ForcedDrainsKeepEveryEvent) {
  // 1 MiB arena of 1 KiB chunks: each launch of 200 warps takes 200 chunks,
  // so the high-water mark (75 %) forces a drain every few launches; three
  // harvest threads decode the read-backs at once and ship them in order.
  Start(MakeSettings(), /*harvest_threads=*/3);
  for (int i = 0; i < 20; ++i) Gemm(s1, 200, 4);
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 20)
      << "harvests " << sink.harvests.size() << " recorded " << gpu.kernels_that_recorded() << " filtered "
      << sink.stats.events_filtered << " unattributed " << sink.stats.events_unattributed << " dropped "
      << sink.stats.events_dropped_device << " written " << gpu.events_written();
  EXPECT_EQ(sink.events["gemm(float*)"], 20u * 200 * 8);
  EXPECT_GT(sink.stats.forced_drains, 0u);
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
}

// Every launch shipped with its record and all of its `events`.
void ExpectEveryLaunchWhole(const CaptureSink& sink, const std::string& kernel, int launches, uint64_t events) {
  EXPECT_EQ(sink.launches.at(kernel), launches);
  EXPECT_EQ(sink.events.at(kernel), static_cast<uint64_t>(launches) * events);
  EXPECT_EQ(sink.launch_events.size(), static_cast<size_t>(launches));
  for (const auto& [launch, count] : sink.launch_events) {
    EXPECT_EQ(sink.launch_names.at(launch), kernel);
    EXPECT_EQ(count, events) << "launch " << launch;
  }
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
  EXPECT_EQ(sink.stats.events_unattributed, 0u);
}

// A 64 MiB arena is two segments of 32 MiB (32,736 chunks of 1 KiB); launches
// of 8,192 warps take 8,192 chunks each, so the third would pass the
// high-water mark (75 %). The GPU is behind (the stream held): a drain that
// waited for the kernels would stall, a switch does not. The two queued
// kernels finish in the first segment, the third and fourth write the second;
// the synchronisation reads both back, each with its own launches' records
// (the later ones, done by then too, wait for their segment).
void ProfilerTest::ExpectADrainToSwitchSegmentsOn(GpuStream s) {
  Start(MakeSettings("", "", "none", 64));
  gpu.Hold(s);
  for (int i = 0; i < 4; ++i) Gemm(s, 8192, 4);
  EXPECT_EQ(gpu.events_recorded(), 1u);  // the switch
  EXPECT_EQ(gpu.kernels_run(), 0u);      // nothing was waited for
  gpu.Release(s);
  Sync();
  Finish();
  ExpectEveryLaunchWhole(sink, "gemm(float*)", 4, 8192u * 8);
  EXPECT_EQ(sink.stats.forced_drains, 1u);  // the switched segment's read-back
  EXPECT_EQ(gpu.kernels_that_recorded(), 4u);
  // Each segment's read-back took the records of its own launches.
  EXPECT_EQ(sink.records_per_read_back, (std::vector<uint32_t>{2, 2, 0}));  // then the final harvest
}

TEST_F(ProfilerTest, ADrainSwitchesSegmentsWhileTheKernelsBeforeItStillRun) { ExpectADrainToSwitchSegmentsOn(s1); }

// The legacy default stream (a null handle) switches segments like any other.
TEST_F(ProfilerTest, DrainsOnTheLegacyStreamSwitchSegments) { ExpectADrainToSwitchSegmentsOn(nullptr); }

// The second segment fills while the first one's kernels still run (the GPU
// a whole segment behind): the drain waits for them, boundedly, then reads
// the first back and switches to it. Here they never run in time: the drain
// gives up (a warning), the launches go on into the second segment, and once
// the GPU catches up nothing that fitted is lost.
TEST_F(ProfilerTest, ADrainWaitsForTheOtherSegmentOnlyWhenBothAreFull) {
  Start(MakeSettings("", "", "none", 64));
  gpu.Hold(s1);
  for (int i = 0; i < 6; ++i) Gemm(s1, 8192, 4);
  EXPECT_EQ(gpu.events_recorded(), 1u);  // one switch: the other segment is not free yet
  gpu.Release(s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 6);
  EXPECT_EQ(sink.events["gemm(float*)"] + sink.stats.events_dropped_device, 6u * 8192 * 8);
  EXPECT_EQ(sink.stats.events_unattributed, 0u);
}

// Kernels of the old segment finish; a later launch reads it back (a copy,
// no synchronisation), so the segment is free before the next drain needs
// it: several switches, each read back in turn, and nothing lost.
TEST_F(ProfilerTest, SwitchedSegmentsAreReadBackAtLaterLaunchesOnceTheirKernelsFinish) {
  Start(MakeSettings("", "", "none", 64));
  for (int i = 0; i < 16; ++i) {
    gpu.Hold(s1);
    Gemm(s1, 8192, 4);
    gpu.Release(s1);
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // the event is asked at most every 100 us
  }
  // How many drains there are depends on what the harvest threads taught
  // about the kernel's chunks meanwhile: at least two switches, and every
  // switched segment but the last read back before any synchronisation.
  const size_t switches = gpu.events_recorded();
  EXPECT_GE(switches, 2u);
  EXPECT_GE(gpu.device_copies(), switches - 1);
  Sync();
  Finish();
  ExpectEveryLaunchWhole(sink, "gemm(float*)", 16, 8192u * 8);
}

// Graph replays switch segments the same way.
TEST_F(ProfilerTest, GraphReplaysSwitchSegmentsWithoutWaiting) {
  Start(MakeSettings("", "", "none", 64));
  const Graph graph = Instantiate({{gemm, 8192}}, 0xE4);
  gpu.Hold(s1);
  Replay(graph, 5, s1);
  EXPECT_EQ(gpu.events_recorded(), 1u);
  EXPECT_EQ(gpu.kernels_run(), 0u);
  gpu.Release(s1);
  Sync();
  Finish();
  ExpectEveryLaunchWhole(sink, "gemm(float*)", 5, 8192u * 8);
}

// Recording work on two streams cannot be split by one stream's order: the
// drain reads back, as with one segment, and keeps every event.
TEST_F(ProfilerTest, WorkOnTwoStreamsDrainsByReadingBack) {
  Start(MakeSettings("", "", "none", 64));
  for (int i = 0; i < 6; ++i) Gemm(i % 2 == 0 ? s1 : s2, 8192, 4);
  Sync();
  Finish();
  EXPECT_EQ(gpu.events_recorded(), 0u);
  EXPECT_GT(sink.stats.forced_drains, 0u);
  ExpectEveryLaunchWhole(sink, "gemm(float*)", 6, 8192u * 8);
}

// After a switch on s1, a launch on s2 must not change a reference the
// kernels queued on s1 still read: it waits for the switch to pass.
TEST_F(ProfilerTest, ALaunchOnAnotherStreamAfterASwitchKeepsTheQueuedKernelsWhole) {
  Start(MakeSettings("", "", "none", 64));
  gpu.Hold(s1);
  for (int i = 0; i < 4; ++i) Gemm(s1, 8192, 4);
  ASSERT_EQ(gpu.events_recorded(), 1u);
  gpu.Release(s1);  // the switch passes: the launch below finds it done
  Gemm(s2, 8192, 4);
  Other(s2, 8192, 4);
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 5);
  EXPECT_EQ(sink.events["gemm(float*)"], 5u * 8192 * 8);
  EXPECT_EQ(sink.events["other(float*)"], 8192u * 8);
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
  EXPECT_EQ(sink.stats.events_unattributed, 0u);
}

// A kernel of an opted-in module that records nothing is projected at one
// chunk per warp until a read-back shows otherwise: the first drain teaches
// it at once (not when the harvest threads get to it), so no more follow.
TEST_F(ProfilerTest, SilentKernelsDoNotKeepForcingDrains) {
  Start(MakeSettings());
  for (int i = 0; i < 50; ++i) Gemm(s1, 200, /*ranges=*/0);
  Gemm(s1);
  Sync();
  Finish();
  EXPECT_LE(sink.stats.forced_drains, 1u);
  EXPECT_EQ(sink.events["gemm(float*)"], 64u);
}

// 1 MiB arena: 2048 warps of 2 events each took 2048 chunks of 1 KiB (1023
// fit) before the chunk size followed the launch; now the generation gets
// chunks small enough for every warp, and later launches of the same kernel
// go on fitting (learned: one chunk per warp).
TEST_F(ProfilerTest, ManySmallWarpsFitTheArena) {
  Start(MakeSettings());
  for (int i = 0; i < 3; ++i) {
    Gemm(s1, 2048, /*ranges=*/1);
    Sync();
  }
  Finish();
  EXPECT_EQ(sink.events["gemm(float*)"], 3u * 2048 * 2);
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
  EXPECT_EQ(sink.stats.forced_drains, 0u);
}

// Warps of 256 events each: the first generation takes 1 KiB chunks (5 claims
// a warp). Its read-back counts 5 chunks a warp at 1 KiB alone, which must
// not make 2 KiB look like one; once the harvest has decoded the warps and
// taught every size, the next generation takes 8 KiB chunks (one claim).
TEST_F(ProfilerTest, DenseWarpsGetLargerChunksOnceAHarvestTaughtTheirClaims) {
  Start(MakeSettings(), /*harvest_threads=*/1);
  gpu.HoldStringReads(true);
  Gemm(s1, 8, /*ranges=*/128);
  Sync();  // read back; the harvest thread then waits reading names, before it teaches
  ASSERT_TRUE(gpu.WaitUntil([&] { return gpu.held_string_reads_locked() > 0; }, std::chrono::seconds(10)));
  Gemm(s1, 8, 128);
  Sync();
  gpu.HoldStringReads(false);
  sink.WaitForHarvests(2);
  Gemm(s1, 8, 128);
  Sync();
  Finish();
  EXPECT_EQ(gpu.chunk_sizes_recorded(), (std::vector<uint32_t>{1024, 1024, 8192}));
  EXPECT_EQ(sink.events["gemm(float*)"], 3u * 8 * 256);
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
}

// Two compiled functions of one name (as Triton compiles a kernel once per
// specialisation): one whose 8 warps write 256 events each, one whose 2048
// warps write two. Each is sized by what it claimed itself: the light one
// never takes the heavy one's chunks (the arena could not hold 2048 of
// them), and neither forces a drain.
TEST_F(ProfilerTest, ChunkSizesAreLearnedPerCompiledFunction) {
  Start(MakeSettings(), /*harvest_threads=*/1);
  const GpuModule heavy_module = gpu.AddModule(true);
  const GpuFunction heavy = gpu.AddFunction(heavy_module, kGemm);
  for (uint64_t i = 0; i < 3; ++i) {
    LaunchOn(heavy, heavy_module, kGemm, s1, 8, /*ranges=*/128);
    Sync();
    sink.WaitForHarvests(2 * i + 1);
    Gemm(s1, 2048, /*ranges=*/1);
    Sync();
    sink.WaitForHarvests(2 * i + 2);
  }
  Finish();
  EXPECT_EQ(gpu.chunk_sizes_recorded(), (std::vector<uint32_t>{1024, 256, 8192, 256, 8192, 256}));
  EXPECT_EQ(sink.events["gemm(float*)"], 3u * (8 * 256 + 2048 * 2));
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
  EXPECT_EQ(sink.stats.forced_drains, 0u);
}

// Warps of two events: the first generation takes the start size (the
// kernel is unknown); once a harvest has taught that a warp of it needs one
// chunk at every size, later generations take 256-byte chunks, a quarter of
// the arena per launch.
TEST_F(ProfilerTest, SparseWarpsTakeTheSmallestChunksOnceTaught) {
  Start(MakeSettings(), /*harvest_threads=*/1);
  for (uint64_t i = 0; i < 3; ++i) {
    Gemm(s1, 8, /*ranges=*/1);
    Sync();
    sink.WaitForHarvests(i + 1);
  }
  Finish();
  EXPECT_EQ(gpu.chunk_sizes_recorded(), (std::vector<uint32_t>{1024, 256, 256}));
  EXPECT_EQ(sink.events["gemm(float*)"], 3u * 8 * 2);
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
}

// One compiled function whose warps write two events in one launch and 256
// in the next (as a Triton function called with two problem sizes): once a
// harvest has seen it dense, it no longer shrinks, so its dense launches do
// not come back to 256-byte chunks (20 claims a warp) every other time.
TEST_F(ProfilerTest, AKernelSeenDenseStopsShrinking) {
  Start(MakeSettings(), /*harvest_threads=*/1);
  for (uint64_t i = 0; i < 4; ++i) {
    Gemm(s1, 8, /*ranges=*/i % 2 == 0 ? 1 : 128);
    Sync();
    sink.WaitForHarvests(i + 1);
  }
  Finish();
  // Unknown, then taught sparse (shrinks), then taught dense (grows), then
  // the floor holds the start size.
  EXPECT_EQ(gpu.chunk_sizes_recorded(), (std::vector<uint32_t>{1024, 256, 8192, 1024}));
  EXPECT_EQ(sink.events["gemm(float*)"], 2u * 8 * 2 + 2u * 8 * 256);
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
}

// The same sparse kernel launched first in every generation, with a dense
// one after it: small chunks would make the dense warps claim 4 times as
// often, so the program keeps the start size.
TEST_F(ProfilerTest, ADenseKernelBesideSparseOnesKeepsTheStartSize) {
  Start(MakeSettings(), /*harvest_threads=*/1);
  const GpuModule heavy_module = gpu.AddModule(true);
  const GpuFunction heavy = gpu.AddFunction(heavy_module, kGemm);
  for (uint64_t i = 0; i < 3; ++i) {
    Gemm(s1, 8, /*ranges=*/1);
    LaunchOn(heavy, heavy_module, kGemm, s1, 8, /*ranges=*/32);
    Sync();
    sink.WaitForHarvests(i + 1);
  }
  Finish();
  EXPECT_EQ(gpu.chunk_sizes_recorded(), (std::vector<uint32_t>(6, 1024)));
  EXPECT_EQ(sink.events["gemm(float*)"], 3u * 8 * (2 + 64));
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
}

// SMPROF_CHUNK_BYTES=1024: the same warps keep 1 KiB chunks.
TEST_F(ProfilerTest, DenseWarpsNeverGrowPastTheLargestChunkSize) {
  Settings settings = MakeSettings();
  settings.chunk_bytes = 1024;
  Start(settings);
  Gemm(s1, 8, /*ranges=*/128);
  Sync();
  sink.WaitForHarvests(1);
  Gemm(s1, 8, 128);
  Sync();
  Finish();
  EXPECT_EQ(gpu.chunk_sizes_recorded(), (std::vector<uint32_t>{1024, 1024}));
  EXPECT_EQ(sink.events["gemm(float*)"], 2u * 8 * 256);
}

// Back-to-back replays of a graph whose node fills a third of the arena:
// each replay projects its node's chunks, so drains come before overflows.
TEST_F(ProfilerTest, GraphReplaysProjectTheirNodesAndNeverOverflow) {
  Start(MakeSettings("gemm"));
  const Graph graph = Instantiate({{gemm, 300}}, 0xE3);
  Replay(graph, 12, s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 12);
  EXPECT_EQ(sink.events["gemm(float*)"], 12u * 300 * 8);
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
  EXPECT_GT(sink.stats.forced_drains, 0u);
}

TEST_F(ProfilerTest, DecodingAndShippingRunOffTheApplicationThread) {
  Start(MakeSettings());
  Gemm(s1);
  sink.Block(true);  // the transport stalls: only the harvest thread may wait for it
  Sync();            // returns after the copy
  EXPECT_EQ(sink.total_events, 0u);
  Gemm(s1);  // the application goes on launching
  sink.Block(false);
  Sync();
  Finish();
  EXPECT_EQ(sink.events["gemm(float*)"], 2u * 64);
}

// Host memory is never page-locked for read-backs (locking holds every
// driver call of the application, host_buffer.h): the only locked memory is
// the context's few words, at its set-up.
// A staged read-back comes to host memory through the two page-locked
// buffers allocated at setup, piece by piece, each shipped as it comes: a
// read-back larger than both keeps every event, and nothing is mapped or
// page-locked for it.
TEST_F(ProfilerTest, StagedReadBacksComeThroughPageLockedPieces) {
  Start(MakeSettings(), 1, /*bounce_bytes=*/4096);  // a piece: 4 chunks of 1 KiB
  Gemm(s1, 1, 1);  // the context is set up
  Sync();
  sink.WaitForHarvests(1);
  const size_t locked = gpu.pinned_allocations();
  const size_t before = gpu.host_copies();
  for (int i = 0; i < 5; ++i) Gemm(s1, 8, 40);  // 5 x 8 warps x 80 events
  Sync();
  const size_t on_app_thread = gpu.host_copies_from(std::this_thread::get_id());
  Finish();
  EXPECT_EQ(sink.events["gemm(float*)"], 2u + 5 * 8 * 80);
  EXPECT_EQ(gpu.pinned_allocations(), locked);
  EXPECT_EQ(on_app_thread, 0u);
  // The first launch taught two events a warp, so the five came in 256-byte
  // chunks (13 events): 7 a warp, 280 in all, in pieces of 16.
  ASSERT_EQ(gpu.chunk_sizes_recorded().back(), 256u);
  EXPECT_GE(gpu.host_copies() - before, 280u / 16);
}

TEST_F(ProfilerTest, ReadBacksLockNoHostMemory) {
  Start(MakeSettings());
  Gemm(s1);
  Sync();
  sink.WaitForHarvests(1);
  const size_t locked = gpu.pinned_allocations();
  for (int i = 0; i < 40; ++i) Gemm(s1);  // 40 times the chunks: larger than the first buffer
  Sync();
  Gemm(s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.events["gemm(float*)"], 42u * 64);
  EXPECT_EQ(sink.harvests[wire::kHarvestSync], 3);
  EXPECT_EQ(gpu.pinned_allocations(), locked);
}

TEST_F(ProfilerTest, ABusyStreamDefersTheHarvestToALaterSync) {
  Start(MakeSettings());
  gpu.Hold(s1);
  Gemm(s1);
  profiler->OnSyncEnter(wire::kApiStreamSynchronize);
  profiler->OnSyncExit(gpu.context, wire::kApiStreamSynchronize, false);  // s1 still busy: no harvest
  EXPECT_EQ(sink.harvests.size(), 0u);
  gpu.Release(s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.events["gemm(float*)"], 64u);
}

TEST_F(ProfilerTest, MarkerNamesAreReadOncePerContext) {
  Start(MakeSettings());
  for (int i = 0; i < 3; ++i) {
    Gemm(s1);
    Sync();
  }
  Finish();
  EXPECT_EQ(gpu.string_reads(), 1u);
  ASSERT_EQ(sink.names.size(), 1u);
  EXPECT_EQ(sink.names[0], "load");
}

TEST_F(ProfilerTest, ModuleUnloadReadsNamesFirstAndForgetsHandles) {
  Start(MakeSettings());
  Gemm(s1);
  sink.Block(true);  // the harvest thread is held up shipping
  Sync();
  Gemm(s1);
  profiler->OnModuleUnload(gpu.context);  // harvests, and reads the names the queued harvests need
  gpu.UnloadModule(module);               // its memory is gone: names cannot be read any more
  sink.Block(false);
  module = gpu.AddModule(true);  // a new module, new handles
  gemm = gpu.AddFunction(module, kGemm);
  Gemm(s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.events["gemm(float*)"], 3u * 64);
  ASSERT_EQ(sink.names.size(), 1u);
  EXPECT_EQ(sink.names[0], "load");
  EXPECT_EQ(sink.harvests[wire::kHarvestModuleUnload], 1);
}

// The unload's read-back is staged on the device while the harvest thread
// is busy: the names its chunks need are read before the module goes, so
// its chunks are fetched then, on the unloading thread.
TEST_F(ProfilerTest, AStagedReadBackIsFetchedForItsNamesBeforeAnUnload) {
  StagesBehindAHeldHarvest();
  const size_t staged_before = gpu.device_copies();
  profiler->OnModuleUnload(gpu.context);  // staged, queued behind the held harvest
  EXPECT_EQ(gpu.device_copies(), staged_before + 1);
  gpu.UnloadModule(stages);
  sink.Block(false);
  Finish();
  EXPECT_EQ(sink.events["gemm(float*)"], 64u);
  EXPECT_EQ(sink.events["stages()"], 64u);
  ExpectNamesReadable("stage");
}

// The unload's own copy of a staged read-back fails: it goes on without
// those names (they show as unreadable: a name is read only before its
// generation's unload), and the harvest thread's fetch still brings the
// events.
TEST_F(ProfilerTest, AFailedCopyAtAnUnloadLosesNoStagedEvents) {
  StagesBehindAHeldHarvest();
  gpu.FailNextHostCopy();
  profiler->OnModuleUnload(gpu.context);  // stages() staged and queued; the unload's copy of it fails
  sink.Block(false);
  Finish();
  EXPECT_EQ(sink.events["gemm(float*)"], 64u);
  EXPECT_EQ(sink.events["stages()"], 64u);
  EXPECT_EQ(sink.stats.events_lost_host, 0u);
  EXPECT_NE(std::find(sink.names.begin(), sink.names.end(), "load"), sink.names.end());
}

// At a context's end the same failure leaves the read-back on the device for
// good: its events are lost (and logged), never decoded from whatever its
// host buffer held before.
TEST_F(ProfilerTest, AFailedCopyAtAContextEndDecodesNothingStale) {
  StagesBehindAHeldHarvest();
  gpu.FailNextHostCopy();
  profiler->OnContextDestroy(gpu.context);
  sink.Block(false);
  Finish();
  EXPECT_EQ(sink.events["gemm(float*)"], 64u);
  EXPECT_EQ(sink.events["stages()"], 0u);
}

// Read-backs are copied on the device while the application waits, and
// brought to host memory by a harvest thread; when the staging buffer still
// holds one, or none could be allocated, they are copied to host memory.
TEST_F(ProfilerTest, ReadBacksAreStagedOnTheDeviceAndFetchedOffTheApplicationThread) {
  Start(MakeSettings());
  const std::thread::id app = std::this_thread::get_id();
  Gemm(s1);
  Sync();
  sink.WaitForHarvests(1);
  Gemm(s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.events["gemm(float*)"], 2u * 64);
  EXPECT_EQ(gpu.device_copies(), 2u);
  EXPECT_EQ(gpu.host_copies_from(app), 0u);
}

// An unload's callback may hold the driver until it returns, so a harvest
// thread's copy can wait for it: the unload must then fetch what it needs
// itself instead of waiting for that copy (on the GPU this deadlocked).
// With the context's end, the unload's copy also stands in for the fetch,
// should it fail as the context goes.
void ProfilerTest::ExpectUnloadDuringAFetch(bool destroy_context) {
  Start(MakeSettings());
  AddStages();
  gpu.HoldNextHostCopy();
  Stages();
  Sync();  // staged; the harvest thread's fetch waits
  ASSERT_TRUE(gpu.WaitUntil([&] { return gpu.held_copies_locked() > 0; }, std::chrono::seconds(10)));
  std::atomic<bool> unloaded{false};
  std::thread unload([&] {
    if (destroy_context) {
      profiler->OnContextDestroy(gpu.context);
    } else {
      profiler->OnModuleUnload(gpu.context);
    }
    unloaded = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!unloaded && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(unloaded) << "the unload waited for the harvest thread's copy";
  if (unloaded) gpu.UnloadModule(stages);  // its names are gone
  gpu.ReleaseHostCopy(/*fail=*/destroy_context);
  unload.join();
  Finish();
  EXPECT_EQ(sink.events["stages()"], 64u);
  EXPECT_EQ(sink.stats.events_lost_host, 0u);
  ExpectNamesReadable("stage");
}

TEST_F(ProfilerTest, AnUnloadDuringAFetchDoesNotWaitForIt) { ExpectUnloadDuringAFetch(false); }

TEST_F(ProfilerTest, AContextEndDuringAFetchDoesNotWaitForItAndStandsInForIt) { ExpectUnloadDuringAFetch(true); }

// Events that wait for their CUPTI record are named when they start to
// wait: a later harvest that has taken them from the context (so an unload
// meanwhile does not see them) and ships them after the unload finds their
// names cached, not in unloaded memory.
TEST_F(ProfilerTest, EventsTakenFromTheWaitingOnesKeepTheirNamesAcrossAnUnload) {
  Start(MakeSettings());
  AddStages();
  Stages(/*deliver=*/false);
  Sync();  // the record has not arrived: the events wait in the context
  sink.WaitForHarvests(1);
  gpu.DeliverLate(&profiler->activity());
  gpu.HoldStringReads(true);
  Gemm(s1);
  Sync();  // this harvest takes the waiting events, matches them, and pauses reading gemm's names
  ASSERT_TRUE(gpu.WaitUntil([&] { return gpu.held_string_reads_locked() > 0; }, std::chrono::seconds(10)));
  std::thread unload([&] {
    gpu.NeverHoldMyStringReads();
    profiler->OnModuleUnload(gpu.context);
  });
  unload.join();
  gpu.UnloadModule(stages);
  gpu.HoldStringReads(false);
  Finish();
  EXPECT_EQ(sink.events["stages()"], 64u);
  EXPECT_EQ(sink.events["gemm(float*)"], 64u);
  ExpectNamesReadable("stage");
}

// Events that waited across an unload and a later module's events whose
// names sit at the same addresses ship in one harvest, each with its own
// module's names.
TEST_F(ProfilerTest, WaitingEventsAndALaterModuleAtTheSameAddressKeepTheirOwnNames) {
  Start(MakeSettings());
  AddStages();
  Stages(/*deliver=*/false);
  Sync();  // its events wait for the record
  sink.WaitForHarvests(1);
  profiler->OnModuleUnload(gpu.context);
  gpu.UnloadModule(stages);
  stages = gpu.AddModuleInPlaceOf(stages, {"again"});  // another module: its name where "stage" was
  stages_kernel = gpu.AddFunction(stages, kStages);
  gpu.DeliverLate(&profiler->activity());
  Stages();
  Sync();  // both launches in one harvest
  Finish();
  EXPECT_EQ(sink.events["stages()"], 128u);
  EXPECT_EQ(sink.launches["stages()"], 2);
  ExpectNamesReadable("stage");
  ExpectNamesReadable("again");
}

// Read-backs not fetched yet each hold a slice of the staging area (as large
// as the arena); one that finds no slice free copies to the host directly.
TEST_F(ProfilerTest, ReadBacksWaitingForTheirFetchShareTheStagingArea) {
  // A 1 MB arena: 960 chunks of 1 KiB (its chunks start 64 KiB in, aligned
  // to the largest size).
  FillTheStagingAreaBehindAHeldHarvest();
  const std::thread::id app = std::this_thread::get_id();
  for (int j = 0; j < 48; ++j) Gemm(s1);
  Sync();  // waits for a slice, in vain (the harvest thread is held), then copies to the host
  EXPECT_EQ(gpu.device_copies(), 3u);
  EXPECT_EQ(gpu.host_copies_from(app), 1u);
  gpu.HoldStringReads(false);
  Gemm(s1);
  Sync();  // the area is free again once they are fetched
  Finish();
  EXPECT_EQ(gpu.device_copies(), 4u);
  EXPECT_EQ(gpu.host_copies_from(app), 1u);
  EXPECT_EQ(sink.events["gemm(float*)"], (2u + 3 * 48) * 64);
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
  EXPECT_EQ(sink.harvests[wire::kHarvestSync], 5);
}

// A read-back that finds the staging area full waits for the harvest
// thread to fetch an earlier one (it frees its slice), for at most what a
// copy to host memory on the application's thread would take, rather than
// make that copy.
TEST_F(ProfilerTest, AReadBackWaitsForStagingRoomRatherThanCopyingOnTheApplicationThread) {
  FillTheStagingAreaBehindAHeldHarvest();
  const std::thread::id app = std::this_thread::get_id();
  for (int j = 0; j < 48; ++j) Gemm(s1);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // while the next read-back waits
    gpu.HoldStringReads(false);
  });
  Sync();
  release.join();
  Finish();
  EXPECT_EQ(gpu.device_copies(), 4u);
  EXPECT_EQ(gpu.host_copies_from(app), 0u);
  EXPECT_EQ(sink.events["gemm(float*)"], (1u + 3 * 48) * 64);
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
}

TEST_F(ProfilerTest, WithoutStagingMemoryReadBacksCopyToTheHostDirectly) {
  gpu.set_allocations_left(1);  // the arena, not its staging copy
  Start(MakeSettings());
  const std::thread::id app = std::this_thread::get_id();
  Gemm(s1);
  Sync();
  Gemm(s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.events["gemm(float*)"], 2u * 64);
  EXPECT_EQ(gpu.device_copies(), 0u);
  EXPECT_EQ(gpu.host_copies_from(app), 2u);
}

TEST_F(ProfilerTest, LateCuptiRecordsAreMatchedAtTheNextHarvest) {
  Start(MakeSettings());
  LaunchOn(gemm, module, kGemm, s1, 8, 4, /*deliver=*/false);
  Sync();  // the record has not arrived: the events wait
  gpu.DeliverLate(&profiler->activity());
  Gemm(s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 2);
  EXPECT_EQ(sink.events["gemm(float*)"], 128u);
  EXPECT_EQ(sink.stats.events_unattributed, 0u);
}

// A record that comes only at the end (CUPTI holds it until the final
// forced flush) still attributes its events: the final harvest knows the
// context's launch calls. It used to ship nothing and count nothing: the
// launch looked unwanted (no calls known) and its events filtered, and a
// final harvest that shipped no launch returned before counting them.
TEST_F(ProfilerTest, ARecordThatComesOnlyAtExitStillAttributesItsEvents) {
  ExpectALateLastRecordAttributes(/*destroy_context=*/false);
}

TEST_F(ProfilerTest, ARecordThatComesOnlyAtContextEndStillAttributesItsEvents) {
  ExpectALateLastRecordAttributes(/*destroy_context=*/true);
}

// CUPTI hands its buffer over only when every record in it is complete: a
// launch after a synchronisation (a kernel that runs on, or hangs) holds
// back the records of the kernels before it. The synchronisation's
// read-back takes them anyway: their buffer is flushed on the program's
// thread before the program goes on, so a program that dies afterwards
// keeps them named and timed.
TEST_F(ProfilerTest, ASyncTakesTheRecordsOfItsKernelsBeforeTheProgramGoesOn) {
  Start(MakeSettings());
  gpu.BufferRecords();
  gpu.HoldFlushes(true);  // the harvest thread flushes only after the next launch
  for (int i = 0; i < 4; ++i) Gemm(s1);
  Sync();
  gpu.Hold(s1);
  Gemm(s1);  // queued: its record is incomplete
  gpu.HoldFlushes(false);
  sink.WaitForHarvests(1);
  {
    std::lock_guard<std::mutex> lock(sink.mu);
    ASSERT_FALSE(sink.records_per_read_back.empty());
    EXPECT_EQ(sink.records_per_read_back[0], 4u);
    EXPECT_EQ(sink.launches["gemm(float*)"], 4);
    EXPECT_EQ(sink.events["gemm(float*)"], 4u * 64);
  }
  gpu.Release(s1);
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 5);
  EXPECT_EQ(sink.stats.events_unattributed, 0u);
}

// A synchronisation that returns a kernel's failure names the launches that
// may have failed (those after the last whose record a harvest took), keeps
// what was read back before and reads the context no more.
TEST_F(ProfilerTest, AKernelFailureNamesTheLaunchesThatMayHaveFailed) {
  Start(MakeSettings());
  Gemm(s1);
  Sync();
  sink.WaitForHarvests(1);
  Other(s1);
  const std::string failed = "other(float*) (launch call " + std::to_string(next_correlation) + ")";
  profiler->OnSyncEnter(wire::kApiCtxSynchronize);
  profiler->OnSyncExit(gpu.context, wire::kApiCtxSynchronize, true, FakeGpu::kFakeIllegalAddress);
  Sync();  // the context is given up: nothing more is read
  Other(s1);
  Finish();
  ASSERT_EQ(sink.notices.size(), 1u);
  EXPECT_EQ(sink.notices[0].first, static_cast<uint32_t>(wire::kNoticeKernelFailed));
  const std::string& text = sink.notices[0].second;
  EXPECT_NE(text.find("FAKE_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << text;
  EXPECT_NE(text.find(failed), std::string::npos) << text;
  EXPECT_EQ(text.find("gemm"), std::string::npos) << text;
  EXPECT_EQ(sink.launches["gemm(float*)"], 1);
  EXPECT_EQ(sink.events["gemm(float*)"], 64u);
  EXPECT_EQ(sink.launches["other(float*)"], 0);
  EXPECT_EQ(sink.harvests[wire::kHarvestSync], 1);
}

// A signal is about to end the process while a recording kernel still runs
// (its stream never finishes): the last harvest reads what the arena holds
// without waiting for it, so the launches before it keep their events.
TEST_F(ProfilerTest, ATerminationReadsTheArenaWithoutWaitingForRunningKernels) {
  Start(MakeSettings());
  Gemm(s1);
  Other(s1);
  gpu.Hold(s1);
  Gemm(s1);  // queued behind the hold: "running" until the end
  profiler->Shutdown(/*terminating=*/true);
  EXPECT_EQ(sink.harvests[wire::kHarvestExit], 1);
  EXPECT_EQ(sink.launches["gemm(float*)"], 1);
  EXPECT_EQ(sink.events["gemm(float*)"], 64u);
  EXPECT_EQ(sink.events["other(float*)"], 64u);
  gpu.Release(s1);
  profiler.reset();
}

// A kernel read as it runs, the process about to end, has no CUPTI record:
// its grid is named after the one launch whose record did not come, and the
// launch is marked as read while running.
TEST_F(ProfilerTest, AKernelReadWhileRunningIsNamedAfterItsLaunch) {
  Start(MakeSettings());
  Gemm(s1);
  Sync();
  sink.WaitForHarvests(1);
  LaunchOn(other, module, kOther, s1, 8, 4, /*deliver=*/false);  // wrote its events; no record
  profiler->Shutdown(/*terminating=*/true);
  EXPECT_EQ(sink.launches["gemm(float*)"], 1);
  EXPECT_EQ(sink.launches["other(float*)"], 1);
  EXPECT_EQ(sink.events["other(float*)"], 64u);
  EXPECT_EQ(sink.flags["other(float*)"] & wire::kLaunchRunning, uint32_t{wire::kLaunchRunning});
  EXPECT_EQ(sink.flags["gemm(float*)"] & wire::kLaunchRunning, 0u);
  EXPECT_EQ(sink.calls["other(float*)"], 1);  // its launch call, from the launch path
  EXPECT_EQ(sink.stats.events_unattributed, 0u);
  profiler.reset();
}

// Any other error of a synchronisation is the program's: profiling goes on.
TEST_F(ProfilerTest, OtherErrorsOfASynchronisationAreNotFailures) {
  Start(MakeSettings());
  Gemm(s1);
  profiler->OnSyncEnter(wire::kApiCtxSynchronize);
  profiler->OnSyncExit(gpu.context, wire::kApiCtxSynchronize, true, /*CUDA_ERROR_INVALID_VALUE*/ 1);
  Finish();
  EXPECT_TRUE(sink.notices.empty());
  EXPECT_EQ(sink.events["gemm(float*)"], 64u);
}

TEST_F(ProfilerTest, GraphLaunchesLightOnlyModulesOfTheirSelectedNodes) {
  Start(MakeSettings("gemm"));
  GpuModule second = gpu.AddModule(true);
  GpuFunction lone = gpu.AddFunction(second, "_Z4lonev");
  const Graph with_gemm = Instantiate({{gemm, 8}, {other, 8}}, 0xE1);
  const Graph without = Instantiate({{lone, 8}}, 0xE2);
  for (int replay = 0; replay < 2; ++replay) {
    Replay(with_gemm, 1, s1);
    Replay(without, 1, s1);
  }
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 2);
  EXPECT_EQ(sink.launches.count("lone()"), 0u);
  EXPECT_EQ(sink.launches.count("other(float*)"), 0u);  // recorded (same module as gemm), filtered
  EXPECT_EQ(gpu.kernels_that_recorded(), 4u);           // gemm and other, twice; never `lone`
  EXPECT_EQ(sink.stats.events_filtered, 2u * 64);
  EXPECT_EQ(sink.events["gemm(float*)"], 2u * 64);
}

// A thread keeps the graph it replayed last (replays in a loop take no lock);
// a graph destroyed and another instantiated at the same address must not
// replay under the first one's nodes.
TEST_F(ProfilerTest, AGraphInstantiatedWhereAnotherWasReplaysItsOwnNodes) {
  Start(MakeSettings("gemm"));
  GpuModule second = gpu.AddModule(true);
  GpuFunction lone = gpu.AddFunction(second, "_Z4lonev");
  const Graph first = Instantiate({{lone, 8}}, 0xE1);
  Replay(first, 2, s1);
  profiler->OnGraphExecDestroy(first.exec);
  Instantiate({{lone, 8}}, 0xE2);  // likely where the first one's plan was
  const Graph second_graph = Instantiate({{gemm, 8}}, 0xE1);
  Replay(second_graph, 2, s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 2);
  EXPECT_EQ(sink.events["gemm(float*)"], 2u * 64);
  EXPECT_EQ(sink.launches.count("lone()"), 0u);
  EXPECT_EQ(sink.stats.launches_opted_in, 4u);
  EXPECT_EQ(sink.stats.launches_not_selected, 2u);
}

// --launches counts a graph replay as one launch of each selected kernel among
// its nodes, however many nodes it has: a replay outside the range records
// nothing on the GPU.
TEST_F(ProfilerTest, LaunchRangesChooseGraphReplays) {
  Start(MakeSettings("gemm", "gemm:1-2"));
  const Graph graph = Instantiate({{gemm, 8}, {gemm, 8}, {other, 8}}, 0xE1);
  Replay(graph, 5, s1);
  Sync();
  Finish();
  EXPECT_EQ(gpu.kernels_run(), 15u);
  EXPECT_EQ(gpu.kernels_that_recorded(), 6u);  // replays 1 and 2: both gemm nodes and `other` (same module)
  EXPECT_EQ(sink.launches["gemm(float*)"], 4);
  EXPECT_EQ(sink.events["gemm(float*)"], 4u * 64);
  EXPECT_EQ(sink.stats.events_filtered, 2u * 64);  // `other`, not selected
  EXPECT_EQ(sink.total_events, 4u * 64);
  EXPECT_EQ(sink.stats.launches_opted_in, 5u);  // one per replay
  EXPECT_EQ(sink.stats.launches_not_selected, 3u);
}

// A launch captured into a graph defines a node and runs nothing: it takes no
// launch index; the replays do.
TEST_F(ProfilerTest, CapturedLaunchesAreNotCountedTheirReplaysAre) {
  Start(MakeSettings("gemm", "gemm:0"));
  gpu.SetCapturing(s1, true);
  LaunchCall call;
  call.ctx = gpu.context;
  call.function = gemm;
  call.symbol = kGemm;
  call.stream = s1;
  call.warps = 8;
  call.correlation_id = ++next_correlation;
  call.api = wire::kApiLaunchKernel;
  profiler->OnLaunchEnter(call);
  profiler->OnLaunchExit(call.correlation_id);
  gpu.SetCapturing(s1, false);
  const Graph graph = Instantiate({{gemm, 8}}, 0xE1);
  Replay(graph, 3, s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 1);
  EXPECT_EQ(gpu.kernels_that_recorded(), 1u);
  EXPECT_EQ(sink.total_events, 64u);
}

// A replay that takes one of its kernels but not another records both when
// they share a module; the other's nodes are dropped on the host and counted.
TEST_F(ProfilerTest, AGraphReplayKeepsOnlyTheKernelsItTakes) {
  Start(MakeSettings("gemm,other", "other:0"));
  const Graph graph = Instantiate({{gemm, 8}, {other, 8}}, 0xE1);
  Replay(graph, 3, s1);
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 3);
  EXPECT_EQ(sink.launches["other(float*)"], 1);
  EXPECT_EQ(gpu.kernels_that_recorded(), 6u);
  EXPECT_EQ(sink.stats.events_filtered, 2u * 64);  // `other` in replays 1 and 2
  EXPECT_EQ(sink.total_events, 4u * 64);
  EXPECT_EQ(sink.stats.events_unattributed, 0u);
}

TEST_F(ProfilerTest, EventsWhoseRecordNeverComesShipUnattributedAtTheEnd) {
  Start(MakeSettings());
  LaunchOn(gemm, module, kGemm, s1, 8, 4, /*deliver=*/false);
  for (int i = 0; i < 6; ++i) {  // more harvests than events wait for a record
    Gemm(s1);
    Sync();
  }
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], 6);
  EXPECT_EQ(sink.stats.events_unattributed, 64u);
  EXPECT_EQ(sink.total_events, 7u * 64);
}

// A final flush ships what waits for a record, also what a harvest still in
// progress when the flush began leaves waiting (it puts that back only when
// it ships): without the fix the final flush took the waiting events before
// that harvest put them back, and they were never shipped nor counted.
TEST_F(ProfilerTest, AFinalFlushShipsWhatAHarvestInProgressLeavesWaiting) {
  Start(MakeSettings(), /*harvest_threads=*/3);
  LaunchOn(gemm, module, kGemm, s1, 8, 4, /*deliver=*/false);  // its record never comes
  Gemm(s1);
  gpu.HoldStringReads(true);
  Sync();  // a harvest thread ships gemm #2, keeps #1's events waiting, and pauses reading #2's names
  ASSERT_TRUE(gpu.WaitUntil([&] { return gpu.held_string_reads_locked() > 0; }, std::chrono::seconds(10)));
  std::thread finish([&] { Finish(); });
  // The final flush must not take the waiting events before the paused
  // harvest has put them back: give it the chance to.
  gpu.WaitUntil([&] { return gpu.final_activity_flushes_locked() > 0; }, std::chrono::milliseconds(500));
  gpu.HoldStringReads(false);
  finish.join();
  EXPECT_EQ(sink.total_events, 2u * 64);
  EXPECT_EQ(sink.stats.events_unattributed, 64u);
}

// SMPROF_BACKLOG drop: with every read-back buffer queued behind a harvest
// thread that cannot go on, a synchronisation is not held: its read-back is
// skipped (counted), the events stay in the device buffer, and a later
// harvest (here the exit's) reads them back, none lost.
TEST_F(ProfilerTest, WithBacklogDropAReadBackThatFindsEveryBufferQueuedIsSkipped) {
  Settings settings = MakeSettings();
  settings.backlog = Backlog::kDrop;
  Start(settings, /*harvest_threads=*/1);
  gpu.HoldStringReads(true);
  Gemm(s1);
  Sync();  // the harvest thread takes it and pauses reading its names
  ASSERT_TRUE(gpu.WaitUntil([&] { return gpu.held_string_reads_locked() > 0; }, std::chrono::seconds(10)));
  const size_t queued = Harvester::kSnapshotsPerContext - 1;
  for (size_t i = 0; i < queued + 2; ++i) {  // `queued` read-backs fill the buffers; the last two are skipped
    Gemm(s1);
    Sync();
  }
  // The exit's read-back does not wait for a buffer (the harvest thread is
  // still held): it takes one more, at once. It used to wait 5 s, give up
  // and leave the arena's events uncounted.
  size_t copies = 0;
  gpu.WaitUntil([&] { return (copies = gpu.chunk_copies_locked()) > 0; }, std::chrono::seconds(10));
  std::thread finish([&] { Finish(); });
  EXPECT_TRUE(gpu.WaitUntil([&] { return gpu.chunk_copies_locked() > copies; }, std::chrono::seconds(3)))
      << "the exit's read-back waited for a buffer";
  gpu.HoldStringReads(false);
  finish.join();
  EXPECT_EQ(sink.stats.harvests_skipped, 2u);
  EXPECT_EQ(sink.launches["gemm(float*)"], static_cast<int>(queued) + 3);
  EXPECT_EQ(sink.total_events, (queued + 3) * 64);
  EXPECT_EQ(sink.stats.events_dropped_device, 0u);
}

// Threads launching and synchronising at once (run under TSan in CI).
TEST_F(ProfilerTest, ConcurrentLaunchesAndHarvestsKeepEveryEvent) {
  Start(MakeSettings("", "", "none", 4), /*harvest_threads=*/3);
  constexpr int kThreads = 4, kLaunches = 200;
  std::vector<GpuStream> streams;
  for (int t = 0; t < kThreads; ++t) streams.push_back(gpu.AddStream());
  std::vector<std::thread> threads;
  std::atomic<uint64_t> correlation{1000};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLaunches; ++i) {
        const uint64_t c = correlation.fetch_add(1);
        LaunchCall call;
        call.ctx = gpu.context;
        call.function = gemm;
        call.symbol = kGemm;
        call.stream = streams[t];
        call.warps = 4;
        call.correlation_id = c;
        call.api = wire::kApiLaunchKernel;
        profiler->OnLaunchEnter(call);
        gpu.Launch(module, streams[t], kGemm, c, 4, 2, &profiler->activity());
        profiler->OnLaunchExit(c);
        if (i % 50 == 49) {
          profiler->OnSyncEnter(wire::kApiStreamSynchronize);
          profiler->OnSyncExit(gpu.context, wire::kApiStreamSynchronize, false);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  Sync();
  Finish();
  EXPECT_EQ(sink.launches["gemm(float*)"], kThreads * kLaunches)
      << "filtered " << sink.stats.events_filtered << " unattributed " << sink.stats.events_unattributed << " dropped "
      << sink.stats.events_dropped_device << " harvests " << sink.stats.harvests << " written " << gpu.events_written()
      << " recorded " << sink.stats.events_recorded << " malformed " << sink.stats.events_malformed << " kernels "
      << gpu.kernels_that_recorded();
  EXPECT_EQ(sink.events["gemm(float*)"], uint64_t{kThreads} * kLaunches * 4 * 4);
  EXPECT_EQ(sink.stats.events_unattributed, 0u);
}

}  // namespace
}  // namespace smprof::injector
