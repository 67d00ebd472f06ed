// Entry points of libsmprof_inject.so: the only exported symbols (exports.map).
//
// A process that profiles itself (smprof.profile() in Python, under
// smprof-run --serve) loads the library, sets the variables smprof-run gave
// it and calls InitializeInjection(), then smprof_inject_stop() to end the
// session (startup.h: one per process).
//
// CUDA_INJECTION64_PATH: the driver dlopens the library during cuInit and
// calls InitializeInjection.
// LD_PRELOAD (smprof-run --preload): the constructor runs in every process of
// the run, CUDA or not, so it does nothing heavy: when CUDA_INJECTION64_PATH
// is free it points it at this library, and the driver calls
// InitializeInjection at cuInit as above (processes that never use CUDA never
// pay for CUPTI). When another tool owns CUDA_INJECTION64_PATH, Start() runs
// at once, only to step aside and say so (see Start).
#include <dlfcn.h>

#include <cstdlib>

#include "common/cuda_tools.h"
#include "injector/startup.h"

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  smprof::injector::Start();
  return 1;  // never fail the application's cuInit
}

// Ends the session: the last harvest of every context, shipped (it waits,
// boundedly, for kernels still recording), then later launches are ignored.
// Returns 1 if profiling was active and is now stopped, 0 otherwise (never
// started, or stopped already).
extern "C" __attribute__((visibility("default"))) int smprof_inject_stop(void) {
  return smprof::injector::Stop() ? 1 : 0;
}

namespace {

__attribute__((constructor)) void SmprofPreload() {
  if (std::getenv("SMPROF_RUN_ID") == nullptr) return;
  // A tool front end (ncu) must not find CUDA_INJECTION64_PATH set: the
  // preload shim clears it there, and it must stay cleared.
  if (!smprof::cuda_tools::FrontendToolOfSelf().empty()) return;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&InitializeInjection), &info) == 0 || info.dli_fname == nullptr) return;
  const char* injection = std::getenv("CUDA_INJECTION64_PATH");
  if (injection == nullptr || *injection == '\0') {
    setenv("CUDA_INJECTION64_PATH", info.dli_fname, 1);
  } else if (smprof::cuda_tools::IsForeignInjection(injection, info.dli_fname)) {
    smprof::injector::Start();
  }
}

}  // namespace
