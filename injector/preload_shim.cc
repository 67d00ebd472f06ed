// libsmprof_preload.so: smprof-run puts it in LD_PRELOAD of the program, so
// it is loaded into every process of the run, CUDA or not. It is tiny (libc
// only, no C++ runtime, no allocation) and does two things, both about the
// other CUDA tools a run may contain:
//
//  1. In the front end of a tool that injects into its own targets (ncu,
//     nsys: cuda_tools.h), before the tool's main reads its environment, it
//     removes smprof's injection (CUDA_INJECTION64_PATH, and itself from
//     LD_PRELOAD), so the tool starts and its targets run under it alone. It
//     says so in one line. Without this, `smprof-run -- ncu ./app` fails:
//     ncu refuses to run while CUDA_INJECTION64_PATH is set.
//
//  2. It interposes cuptiSubscribe and cuptiSubscribe_v2. CUPTI takes one
//     subscriber per process; when another client's subscription (Kineto
//     under torch.profiler, say) fails because smprof holds CUPTI, it prints
//     one line naming that client and what to do, instead of leaving the user
//     with a profiler that silently records no GPU activity. Calls are
//     forwarded unchanged; the result is the caller's to handle.
//
// Exports only the two interposed functions (preload_shim.map).
#include <cupti.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/cuda_tools.h"

namespace {

using SubscribeFn = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
using SubscribeV2Fn = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*, CUpti_SubscriberParams*);
using UnsubscribeFn = CUptiResult (*)(CUpti_SubscriberHandle);

constexpr char kOwnSubscriber[] = "smprof";  // the name smprof's injector subscribes under

struct Lookup {
  const char* name;
  void* symbol;
};

// A CUPTI loaded as a dependency of a library opened with RTLD_LOCAL (a
// Python extension, say) is not in the global scope RTLD_NEXT searches.
int FindInLoadedCupti(dl_phdr_info* info, size_t, void* data) {
  auto* lookup = static_cast<Lookup*>(data);
  const std::string_view name = smprof::cuda_tools::Basename(info->dlpi_name ? info->dlpi_name : "");
  if (name.substr(0, 11) != "libcupti.so") return 0;
  void* handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return 0;
  lookup->symbol = dlsym(handle, lookup->name);
  dlclose(handle);
  return lookup->symbol != nullptr ? 1 : 0;
}

template <typename Fn>
Fn RealCupti(const char* name) {
  Lookup lookup{name, dlsym(RTLD_NEXT, name)};
  if (lookup.symbol == nullptr) dl_iterate_phdr(FindInLoadedCupti, &lookup);
  return reinterpret_cast<Fn>(lookup.symbol);
}

void CUPTIAPI IgnoreCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

// Depth of interposed calls on this thread: CUPTI's cuptiSubscribe may call
// cuptiSubscribe_v2 through the shim again, and only the outermost call knows
// the client (its return address) and reports.
thread_local int t_depth = 0;
struct Nested {
  Nested() { ++t_depth; }
  ~Nested() { --t_depth; }
  bool outermost() const { return t_depth == 1; }
};

// After a subscription failed with MULTIPLE_SUBSCRIBERS: is smprof the holder?
// Asks CUPTI by trying once more with a buffer for the holder's name.
bool SmprofHoldsCupti() {
  const Nested nested;  // the probe below may come back through the shim: it must not report
  const auto subscribe = RealCupti<SubscribeV2Fn>("cuptiSubscribe_v2");
  if (subscribe == nullptr) return false;
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {};
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.oldSubscriberName = holder;
  params.oldSubscriberSize = CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN;
  CUpti_SubscriberHandle probe = nullptr;
  const CUptiResult r = subscribe(&probe, IgnoreCallback, nullptr, &params);
  if (r == CUPTI_SUCCESS) {  // the holder left meanwhile: give it back
    if (const auto unsubscribe = RealCupti<UnsubscribeFn>("cuptiUnsubscribe")) unsubscribe(probe);
    return false;
  }
  return r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && std::strstr(holder, kOwnSubscriber) != nullptr;
}

// One line per process, the first time another client is refused because of smprof.
void ReportRefusedClient(const void* caller, const char* own_name) {
  static std::atomic<bool> reported{false};
  if (own_name != nullptr && std::strstr(own_name, kOwnSubscriber) != nullptr) return;  // smprof itself
  if (reported.load() || !SmprofHoldsCupti() || reported.exchange(true)) return;
  Dl_info info{};
  const char* client = dladdr(caller, &info) != 0 && info.dli_fname != nullptr && *info.dli_fname != '\0'
                           ? info.dli_fname
                           : "another CUPTI client";
  if (const char* slash = std::strrchr(client, '/')) client = slash + 1;
  std::fprintf(stderr,
               "smprof: pid %d: %s could not subscribe to CUPTI, which smprof holds in this run (CUPTI allows "
               "one subscriber), so that tool (torch.profiler, say) records no GPU activity here; to use it, run "
               "the program without smprof-run\n",
               static_cast<int>(getpid()), client);
}

// In a tool front end: take smprof's injection out of the environment the
// tool reads and passes on. Edits LD_PRELOAD in place (it only shrinks).
void StepAsideForFrontend() {
  const std::string_view tool = smprof::cuda_tools::FrontendToolOfSelf();
  if (tool.empty()) return;
  const char* injection = std::getenv("CUDA_INJECTION64_PATH");
  const char* own = std::getenv("SMPROF_INJECTOR");
  if (injection != nullptr && !smprof::cuda_tools::IsForeignInjection(injection, own ? own : "")) {
    unsetenv("CUDA_INJECTION64_PATH");
  }
  if (char* preload = std::getenv("LD_PRELOAD")) {
    char* out = preload;
    bool first = true;
    smprof::cuda_tools::ForEachPreload(preload, [&](std::string_view entry) {
      const std::string_view name = smprof::cuda_tools::Basename(entry);
      if (name == "libsmprof_preload.so" || name == "libsmprof_inject.so") return;
      if (!first) *out++ = ':';
      std::memmove(out, entry.data(), entry.size());
      out += entry.size();
      first = false;
    });
    *out = '\0';
    if (*preload == '\0') unsetenv("LD_PRELOAD");
  }
  std::fprintf(stderr,
               "smprof: pid %d runs %.*s, which injects into the processes it starts: smprof steps aside, so "
               "they are not profiled by smprof (run the two tools separately)\n",
               static_cast<int>(getpid()), static_cast<int>(tool.size()), tool.data());
}

__attribute__((constructor)) void SmprofPreloadShim() {
  if (std::getenv("SMPROF_RUN_ID") != nullptr) StepAsideForFrontend();
}

}  // namespace

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI
cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  const auto real = RealCupti<SubscribeFn>("cuptiSubscribe");
  if (real == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;  // no CUPTI loaded: the caller cannot have linked it
  const Nested nested;
  const CUptiResult r = real(subscriber, callback, userdata);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && nested.outermost()) {
    ReportRefusedClient(__builtin_return_address(0), nullptr);
  }
  return r;
}

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI cuptiSubscribe_v2(
    CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata, CUpti_SubscriberParams* params) {
  const auto real = RealCupti<SubscribeV2Fn>("cuptiSubscribe_v2");
  if (real == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  const Nested nested;
  const CUptiResult r = real(subscriber, callback, userdata, params);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && nested.outermost()) {
    ReportRefusedClient(__builtin_return_address(0), params != nullptr ? params->subscriberName : nullptr);
  }
  return r;
}
