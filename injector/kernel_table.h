// KernelTable: what the injector knows about each launched function.
//
// A launch names a (context, function) pair; the first launch of a pair
// resolves its module through the Gpu (a runtime launch passes a CUkernel),
// tells whether the module opted in (it defines the arena reference of this
// ABI), and classifies the kernel by its mangled name once per process:
// selected by SMPROF_KERNELS or not, which SMPROF_LAUNCHES items count its
// launches, how many chunks a warp of it claims at each chunk size.
//
// Hot path: Find() answers from a small thread-local cache (no lock) while
// the table's generation is unchanged; a module unload or a context's end
// bumps the generation (handles may be reused) and forgets that context's
// functions. Entries are never freed: a cached pointer stays valid.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "injector/chunk_sizing.h"
#include "injector/gpu.h"

namespace smprof::injector {

// One kernel, by mangled name, across contexts.
struct KernelClass {
  std::string mangled;
  std::string demangled;
  bool selected = false;                 // SMPROF_KERNELS
  std::vector<uint32_t> launch_items;    // SMPROF_LAUNCHES items whose pattern matches it
  // Chunks per warp by chunk size, learned at each harvest from every launch
  // of the name (chunk_sizing.h): what a graph's replay projects.
  ClaimRates claims;
};

// One function in one context.
struct KernelInfo {
  bool opted_in = false;
  GpuModule module = nullptr;
  DevPtr arena_global = 0;  // the module's arena reference (opted-in functions)
  KernelClass* kernel = nullptr;  // opted-in functions
  // The same, learned from this compiled function's own launches: what its
  // launches project and size chunks by. Specialisations of one kernel
  // (Triton compiles one per set of constants) share a name, not their
  // claims: a light one never takes a heavy one's chunks.
  mutable ClaimRates claims;
  // The device context's state of `module`, cached by it on first use (a
  // context forgets its functions when it forgets its modules).
  mutable std::atomic<void*> module_slot{nullptr};
};

class KernelTable {
 public:
  // `classify(kernel)` fills selected and launch_items of a new class.
  using Classify = std::function<void(KernelClass*)>;
  KernelTable(Gpu& gpu, Classify classify) : gpu_(gpu), classify_(std::move(classify)) {}

  // The function's entry; resolved through the Gpu (in the calling thread's
  // current context, which must be `ctx`) on first sight.
  const KernelInfo* Find(GpuCtx ctx, GpuFunction f, const char* symbol);
  // The class of a mangled name, created (and classified) on first use.
  KernelClass* Class(const std::string& mangled);
  // nullptr if the name was never seen.
  KernelClass* FindClass(const std::string& mangled) const;

  // Forgets a context's functions (module unload, context end).
  void ForgetContext(GpuCtx ctx);

  // Mangled names of the arena reference and the name base of a device ABI version.
  static std::string ArenaSymbol(int abi_version);
  static std::string NameBaseSymbol(int abi_version);

 private:
  struct Key {
    GpuCtx ctx;
    GpuFunction f;
    bool operator==(const Key& o) const { return ctx == o.ctx && f == o.f; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<void*>()(k.ctx) * 0x9E3779B97F4A7C15ull ^ std::hash<void*>()(k.f);
    }
  };

  void Resolve(GpuFunction f, const char* symbol, KernelInfo* info);

  Gpu& gpu_;
  Classify classify_;
  const uint64_t id_ = NewInstanceId();
  std::atomic<uint64_t> generation_{1};
  mutable std::shared_mutex mu_;
  std::unordered_map<Key, KernelInfo*, KeyHash> functions_;
  std::unordered_map<std::string, std::unique_ptr<KernelClass>> classes_;
  std::vector<std::unique_ptr<KernelInfo>> entries_;  // owns every KernelInfo ever made
};

}  // namespace smprof::injector
