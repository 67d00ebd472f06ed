#include "injector/startup.h"

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "common/cuda_tools.h"
#include "common/transport.h"
#include "injector/config.h"
#include "injector/cuda_gpu.h"
#include "injector/cupti_subscriber.h"
#include "injector/log.h"
#include "injector/profiler.h"
#include "injector/shipper.h"
#include "injector/termination.h"

extern char** environ;

namespace smprof::injector {
namespace {

std::string ReadCmdline() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\0') s.pop_back();
  std::replace(s.begin(), s.end(), '\0', ' ');
  return s;
}

class ProducerSink : public MessageSink {
 public:
  explicit ProducerSink(transport::Producer* producer) : producer_(producer) {}
  bool Send(const void* data, uint32_t size, uint64_t events) override { return producer_->Send(data, size, events); }
  // Read-back bytes wait up to kBulkWait for room: the collector's intake
  // queues them, so the ring fills only when the collector is far behind.
  bool SendBulk(const Part* parts, size_t count, uint32_t size, uint64_t events) override {
    return producer_->Send(parts, count, size, events, kBulkWait);
  }
  static constexpr std::chrono::milliseconds kBulkWait{30000};

 private:
  transport::Producer* producer_;
};

uint64_t RealtimeNow() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Everything a profiled process keeps; leaky.
struct Injector {
  Config config;
  pid_t pid = 0;
  std::unique_ptr<transport::Producer> producer;
  std::unique_ptr<ProducerSink> sink;
  std::unique_ptr<Shipper> shipper;
  std::unique_ptr<CudaGpu> gpu;
  std::unique_ptr<Profiler> profiler;
};
Injector* g_injector = nullptr;  // the process's profiling state, once Start() succeeded
// What Start() made, also when it then gave up (no run, a bad setting, CUPTI
// taken): never freed, like the rest (a producer may have attached and
// detached through it), but reachable, so leak checkers do not flag it
// (volatile: written and never read, the store must stay).
Injector* volatile g_started = nullptr;

// The path of this library, as the dynamic linker loaded it.
std::string OwnPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&OwnPath), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// Another CUDA tool that injects into this process (cuda_tools.h), or "".
std::string InjectingTool() {
  const char* injection = std::getenv("CUDA_INJECTION64_PATH");
  const char* preload = std::getenv("LD_PRELOAD");
  std::string_view evidence;
  const std::string own = OwnPath();
  const std::string_view tool =
      cuda_tools::InjectingTool(injection ? injection : "", preload ? preload : "", environ, own, &evidence);
  if (tool.empty()) return "";
  return std::string(tool) + " (" + std::string(evidence) + ")";
}

void ShutdownAtExit() { Shutdown(); }
bool ShutdownCaught(int signal);

bool StartOnce() {
  OwnCalls guard;
  auto* in = new Injector();
  g_started = in;
  std::vector<std::string> errors;
  in->config = LoadConfig([](const char* n) { return std::getenv(n); }, &errors);
  SetLogLevel(in->config.settings.log_level);
  for (const std::string& e : errors) Log().error("{}", e);
  if (in->config.run_id.empty()) {
    Log().warn(
        "SMPROF_RUN_ID is not set, so no collector is listening: start the application with "
        "`smprof-run ./app`; running unprofiled");
    return false;
  }
  transport::ProducerOptions options;
  options.ring_bytes = in->config.shm_bytes();
  std::string error;
  in->producer = transport::Producer::Attach(in->config.run_id, options, &error);
  if (!in->producer) {
    Log().error("cannot reach the smprof collector: {}; running unprofiled", error);
    return false;
  }
  in->sink = std::make_unique<ProducerSink>(in->producer.get());
  in->shipper = std::make_unique<Shipper>(in->sink.get(), ThreadName);
  in->pid = getpid();
  const std::string tool = InjectingTool();
  // cuptiGetTimestamp would start CUPTI; a process smprof leaves alone gets
  // the host clock (CUPTI's timestamps are on the same epoch).
  const bool leave_alone = !in->config.kernels_valid || !tool.empty();
  in->gpu = std::make_unique<CudaGpu>(EnableKernelRecords);
  in->shipper->SendProcess(static_cast<uint32_t>(in->pid), static_cast<uint32_t>(getppid()), RealtimeNow(),
                           leave_alone ? RealtimeNow() : in->gpu->Now(), ReadCmdline());
  if (!in->config.kernels_valid) {
    const auto bad = std::find_if(errors.begin(), errors.end(),
                                  [](const std::string& e) {
                                    return e.rfind("SMPROF_KERNELS", 0) == 0 || e.rfind("SMPROF_LAUNCHES", 0) == 0;
                                  });
    in->shipper->SendNotice(wire::kNoticeBadSettings, bad != errors.end() ? *bad : std::string("SMPROF_KERNELS"));
    in->producer->Detach();
    return false;
  }
  if (!tool.empty()) {
    Log().warn("{} injects into pid {}: smprof steps aside and does not profile it", tool, in->pid);
    in->shipper->SendNotice(wire::kNoticeSteppedAside, tool);
    in->producer->Detach();
    return false;
  }
  in->profiler = std::make_unique<Profiler>(*in->gpu, in->config.settings, *in->shipper);
  std::string holder;
  if (!Subscribe(in->profiler.get(), &holder)) {
    if (!holder.empty()) {
      Log().error(
          "{} holds CUPTI in pid {} (CUPTI takes one subscriber): smprof does not profile this process; "
          "run it without that tool to profile it with smprof",
          holder, in->pid);
      in->profiler->SendNotice(wire::kNoticeCuptiUnavailable, holder);
    }
    in->producer->Detach();
    return false;
  }
  g_injector = in;
  std::atexit(ShutdownAtExit);
  termination::Install([](int signal) { ShutdownCaught(signal); });
  Log().info("profiling (run {}, kernels '{}')", in->config.run_id, in->config.settings.kernels_spec);
  return true;
}

// `signal`: the process is about to be ended by it (termination.h).
bool ShutdownOnce(int signal) {
  Injector* in = g_injector;
  static std::atomic<bool> once{false};
  if (in == nullptr || getpid() != in->pid || once.exchange(true)) return false;
  OwnCalls guard;
  if (signal != 0) Log().info("pid {} got signal {}: shipping what was recorded before it ends", in->pid, signal);
  // Other threads' launches still take the gate during this last harvest;
  // only afterwards does the profiler stop looking at callbacks.
  in->profiler->Shutdown(/*terminating=*/signal != 0);
  StopCallbacks();
  // Nothing is freed: a kernel still writing (its module lit by a launch on
  // another thread during the harvest) writes into an arena that stays
  // allocated for the life of the process, and is never read again.
  in->producer->Detach();
  return true;
}

// ShutdownOnce, with an internal error logged rather than thrown.
bool ShutdownCaught(int signal) {
  try {
    return ShutdownOnce(signal);
  } catch (...) {
    Log().error("the last harvest failed with an internal error; events since the previous one are lost");
  }
  return true;  // the session ended, if badly
}

}  // namespace

bool Start() {
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return g_injector != nullptr;
  try {
    return StartOnce();
  } catch (const std::exception& e) {
    Log().error("not profiling: {}", e.what());
  } catch (...) {
    Log().error("not profiling: unknown internal error");
  }
  return false;
}

bool Shutdown() { return ShutdownCaught(/*signal=*/0); }

bool Stop() {
  if (!Shutdown()) return false;
  try {
    DisableKernelRecords();
  } catch (...) {
    Log().error("stopping CUPTI's kernel records failed with an internal error");
  }
  Log().info("profiling stopped (pid {}); this process cannot start profiling again", getpid());
  return true;
}

}  // namespace smprof::injector
