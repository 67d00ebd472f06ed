#include "injector/kernel_table.h"

#include "common/names.h"
#include "injector/log.h"
#include "smprof/wire.h"

namespace smprof::injector {
namespace {

constexpr int kAbi = static_cast<int>(wire::kArenaAbiVersion);

// The last functions this thread launched: most programs launch a handful of
// kernels in a loop. Keyed by table too (tests make several tables).
struct CacheEntry {
  uint64_t table = 0;
  uint64_t generation = 0;
  GpuCtx ctx = nullptr;
  GpuFunction f = nullptr;
  const KernelInfo* info = nullptr;
};
constexpr size_t kCacheSlots = 16;
thread_local CacheEntry t_cache[kCacheSlots];

size_t Slot(GpuFunction f) { return (reinterpret_cast<uintptr_t>(f) >> 4) % kCacheSlots; }

}  // namespace

std::string KernelTable::ArenaSymbol(int abi_version) {
  return "_ZN6smprof6detail7g_arenaILi" + std::to_string(abi_version) + "EEE";
}

std::string KernelTable::NameBaseSymbol(int abi_version) {
  return "_ZN6smprof6detail11g_name_baseILi" + std::to_string(abi_version) + "EEE";
}

const KernelInfo* KernelTable::Find(GpuCtx ctx, GpuFunction f, const char* symbol) {
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  CacheEntry& cached = t_cache[Slot(f)];
  if (cached.table == id_ && cached.generation == generation && cached.ctx == ctx && cached.f == f) {
    return cached.info;
  }
  const KernelInfo* info = nullptr;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = functions_.find(Key{ctx, f});
    if (it != functions_.end()) info = it->second;
  }
  if (info == nullptr) {
    auto entry = std::make_unique<KernelInfo>();
    Resolve(f, symbol, entry.get());
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto [it, inserted] = functions_.emplace(Key{ctx, f}, entry.get());
    if (inserted) entries_.push_back(std::move(entry));
    info = it->second;
  }
  cached = CacheEntry{id_, generation, ctx, f, info};
  return info;
}

void KernelTable::Resolve(GpuFunction f, const char* symbol, KernelInfo* out) {
  KernelInfo& info = *out;
  const std::string mangled = symbol ? symbol : "";
  if (!gpu_.FunctionModule(f, &info.module)) return;
  DevPtr ptr = 0;
  size_t bytes = 0;
  const Lookup found = gpu_.ModuleGlobal(info.module, ArenaSymbol(kAbi).c_str(), &ptr, &bytes);
  if (found == Lookup::kFound && bytes == sizeof(wire::ArenaRef)) {
    DevPtr base = 0;
    size_t base_bytes = 0;
    if (gpu_.ModuleGlobal(info.module, NameBaseSymbol(kAbi).c_str(), &base, &base_bytes) != Lookup::kFound) {
      Log().error("kernel {} has an smprof arena but no name base: rebuild it against this smprof", Demangle(mangled));
      return;
    }
    info.opted_in = true;
    info.arena_global = ptr;
    info.kernel = Class(mangled);
    Log().debug("kernel {} opted in, {}", info.kernel->demangled, info.kernel->selected ? "selected" : "not selected");
  } else if (found == Lookup::kFound) {
    Log().error("kernel {} has an smprof arena of {} bytes, expected {}: rebuild it against this smprof",
                Demangle(mangled), bytes, sizeof(wire::ArenaRef));
  } else if (found == Lookup::kNotFound) {
    for (int v = 1; v <= 16; ++v) {
      if (v != kAbi && gpu_.ModuleGlobal(info.module, ArenaSymbol(v).c_str(), &ptr, &bytes) == Lookup::kFound) {
        Log().warn("kernel {} was built with smprof device ABI v{}, this injector speaks v{}: rebuild it",
                   Demangle(mangled), v, kAbi);
        break;
      }
    }
  }
}

KernelClass* KernelTable::Class(const std::string& mangled) {
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = classes_.find(mangled);
    if (it != classes_.end()) return it->second.get();
  }
  auto kernel = std::make_unique<KernelClass>();
  kernel->mangled = mangled;
  kernel->demangled = Demangle(mangled);
  if (classify_) classify_(kernel.get());
  std::unique_lock<std::shared_mutex> lock(mu_);
  return classes_.emplace(mangled, std::move(kernel)).first->second.get();
}

KernelClass* KernelTable::FindClass(const std::string& mangled) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = classes_.find(mangled);
  return it == classes_.end() ? nullptr : it->second.get();
}

void KernelTable::ForgetContext(GpuCtx ctx) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  for (auto it = functions_.begin(); it != functions_.end();) {
    it = it->first.ctx == ctx ? functions_.erase(it) : std::next(it);
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace smprof::injector
