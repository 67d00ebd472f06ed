#include "injector/module_switch.h"

#include <algorithm>
#include <chrono>

#include "injector/log.h"

namespace smprof::injector {
namespace {
// An in-stream-order darkening not yet reached by another stream's launch.
constexpr auto kDarkenWait = std::chrono::milliseconds(200);
// A segment switch not yet reached by the kernels queued before it, when a
// launch on another stream must rewrite a reference: the application's own
// earlier work, waited for.
constexpr auto kSwitchWait = std::chrono::seconds(2);
// WriteArenaWord's "not in any application stream's order".
GpuStream const kImmediate = reinterpret_cast<GpuStream>(~uintptr_t{0});

}  // namespace

struct ModuleSwitch::Module {
  GpuModule module = nullptr;
  DevPtr global = 0;    // its wire::ArenaRef
  bool written = false;  // everything but `arena` is current (this epoch)
  std::atomic<bool> is_lit{false};
  bool has_selected = false;
  // Streams of its recording launches since the last harvest.
  GpuStream only_stream = nullptr;
  bool many_streams = false;
  bool any_stream = false;
  // Darkened in stream order on `dark_pending_on` since the last harvest (a
  // flag: the legacy stream's handle is null).
  bool dark_pending = false;
  GpuStream dark_pending_on = nullptr;
  // Lit by copies queued on these streams (a launch on another stream may
  // run before they land, so it queues its own), or at once (everywhere).
  std::vector<GpuStream> lit_on;
  bool lit_everywhere = false;

  // A recording launch of it on `stream` (mu_ held).
  void NoteStream(GpuStream stream) {
    if (!any_stream) {
      only_stream = stream;
      any_stream = true;
    } else if (only_stream != stream) {
      many_streams = true;
    }
  }
};

ModuleSwitch::ModuleSwitch(Gpu& gpu) : gpu_(gpu) {}
ModuleSwitch::~ModuleSwitch() = default;

void ModuleSwitch::SetUp(GpuStream own_stream, const uint64_t* dark_word) {
  own_stream_ = own_stream;
  dark_word_ = dark_word;
}

ModuleSwitch::Module* ModuleSwitch::Find(GpuModule module, DevPtr arena_global, bool has_selected) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = modules_[module];
  if (!slot || slot->global != arena_global) {
    if (slot) retired_.push_back(std::move(slot));
    slot = std::make_unique<Module>();
    slot->module = module;
    slot->global = arena_global;
  }
  slot->has_selected |= has_selected;
  return slot.get();
}

bool ModuleSwitch::lit(const Module* m) const { return m->is_lit.load(std::memory_order_acquire); }

std::vector<ModuleSwitch::Module*> ModuleSwitch::Selected() const {
  std::vector<Module*> selected;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [module, m] : modules_) {
    if (m->has_selected) selected.push_back(m.get());
  }
  return selected;
}

bool ModuleSwitch::WriteArenaWord(Module* m, const uint64_t* word, GpuStream stream) {
  // Immediate: smprof's stream, waited for.
  if (stream == own_stream_ || stream == kImmediate) {
    return gpu_.CopyToDevice(m->global, word, sizeof(uint64_t), own_stream_) &&
           gpu_.Wait(own_stream_, kOwnCopyTimeout);
  }
  // In the order of the application's stream, from a word that never changes.
  return gpu_.CopyToDevice(m->global, word, sizeof(uint64_t), stream);
}

ModuleSwitch::Lit ModuleSwitch::Light(Module* m, GpuStream stream, bool capturing,
                                      const std::function<Publication()>& publication) {
  const auto lit_here = [&] {
    return m->is_lit.load(std::memory_order_relaxed) &&
           (m->lit_everywhere || std::find(m->lit_on.begin(), m->lit_on.end(), stream) != m->lit_on.end());
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    m->NoteStream(stream);
    if (lit_here()) return Lit::kAlready;
  }
  // One light at a time: two threads publishing a module for the first time
  // must not interleave (the second's reference write, `arena` still 0,
  // would darken a kernel the first already let through).
  std::lock_guard<std::mutex> lighting(light_mu_);
  bool written;
  bool dark_pending;
  GpuStream dark_pending_on;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (lit_here()) return Lit::kAlready;
    written = m->written;
    dark_pending = m->dark_pending;
    dark_pending_on = m->dark_pending_on;
  }
  SettleSwitch(capturing ? kImmediate : stream);
  const Publication pub = publication();
  if (!written) {
    // Everything but `arena` first, then `arena`: a kernel of this module that
    // is already running sees either nothing or a complete reference. Behind
    // a switch still ahead on this stream, both in its order (kernels queued
    // before the switch keep their reference while they run).
    if (switch_pending_.load(std::memory_order_relaxed) && switch_stream_ == stream && !capturing) {
      if (!gpu_.CopyToDevice(m->global, pub.dark_ref, sizeof(wire::ArenaRef), stream)) return Lit::kFailed;
    } else {
      wire::ArenaRef ref = pub.ref;
      ref.arena = 0;
      if (!gpu_.CopyToDevice(m->global, &ref, sizeof(ref), own_stream_) || !gpu_.Wait(own_stream_, kOwnCopyTimeout)) {
        return Lit::kFailed;
      }
    }
  }
  // In the launch's stream order (launches queued before it on its stream do
  // not record); at once when the stream is capturing (a copy would join the
  // graph). A darkening still queued on another stream must land first.
  if (dark_pending && dark_pending_on != stream && gpu_.Query(dark_pending_on) == StreamState::kBusy &&
      !gpu_.Wait(dark_pending_on, kDarkenWait)) {
    Log().warn("a module darkened on one stream is wanted on another before that stream ran: "
               "events of the launch may be missing");
  }
  if (!WriteArenaWord(m, pub.lit_word, capturing ? kImmediate : stream)) return Lit::kFailed;
  std::lock_guard<std::mutex> lock(mu_);
  m->written = true;
  if (capturing) {
    m->lit_everywhere = true;
  } else {
    m->lit_on.push_back(stream);
  }
  if (!m->is_lit.exchange(true, std::memory_order_acq_rel)) lit_count_.fetch_add(1, std::memory_order_acq_rel);
  return Lit::kNow;
}

bool ModuleSwitch::DarkenInStreamOrder(Module* m, GpuStream stream, bool per_thread, bool capturing) {
  // Only when every recording launch of it since the last harvest was on
  // this stream: stream order then keeps them recording.
  const auto decide = [&]() -> int {  // 1: dark already, 0: darken, -1: cannot
    if (!m->is_lit.load(std::memory_order_relaxed)) return 1;
    const bool one_stream = !m->many_streams && (!m->any_stream || m->only_stream == stream);
    return capturing || per_thread || stream == kPerThreadStream || !one_stream ? -1 : 0;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const int d = decide(); d != 0) return d > 0;
  }
  std::lock_guard<std::mutex> lighting(light_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const int d = decide(); d != 0) return d > 0;
  }
  SettleSwitch(stream);
  if (!WriteArenaWord(m, dark_word_, stream)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  m->dark_pending = true;
  m->dark_pending_on = stream;
  m->lit_on.clear();
  m->lit_everywhere = false;
  if (m->is_lit.exchange(false, std::memory_order_acq_rel)) lit_count_.fetch_sub(1, std::memory_order_acq_rel);
  return true;
}

void ModuleSwitch::NoteStream(Module* m, GpuStream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  m->NoteStream(stream);
}

void ModuleSwitch::ReferencesChanged() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [module, m] : modules_) m->written = false;
}

void ModuleSwitch::MayBeStale() {
  std::lock_guard<std::mutex> lock(mu_);
  stale_ = true;
}

std::vector<ModuleSwitch::Module*> ModuleSwitch::DropGone(const std::function<bool(GpuModule, DevPtr)>& still_there) {
  std::vector<Module*> modules;
  bool stale;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [module, m] : modules_) modules.push_back(m.get());
    stale = stale_;
  }
  if (!stale) return modules;
  std::vector<Module*> gone;
  for (Module* m : modules) {
    if (!still_there(m->module, m->global)) gone.push_back(m);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (Module* m : gone) {
    auto it = modules_.find(m->module);
    if (it == modules_.end() || it->second.get() != m) continue;
    if (m->is_lit.exchange(false)) lit_count_.fetch_sub(1, std::memory_order_acq_rel);
    retired_.push_back(std::move(it->second));
    modules_.erase(it);
  }
  stale_ = false;
  modules.clear();
  for (auto& [module, m] : modules_) modules.push_back(m.get());
  return modules;
}

bool ModuleSwitch::OnlyOn(GpuStream stream) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [module, m] : modules_) {
    if (m->many_streams || (m->any_stream && m->only_stream != stream) || m->lit_everywhere) return false;
    for (GpuStream s : m->lit_on) {
      if (s != stream) return false;
    }
  }
  return true;
}

bool ModuleSwitch::SwitchInStreamOrder(const std::vector<Module*>& modules, const wire::ArenaRef* dark,
                                       GpuStream stream, GpuEvent switched) {
  std::lock_guard<std::mutex> lighting(light_mu_);
  if (!QueueDark(modules, *dark, stream) || !gpu_.RecordEvent(switched, stream)) return false;
  switch_stream_ = stream;
  switch_event_ = switched;
  switch_pending_.store(true, std::memory_order_release);
  return true;
}

void ModuleSwitch::SwitchPassed() {
  std::lock_guard<std::mutex> lighting(light_mu_);
  switch_pending_.store(false, std::memory_order_release);
}

void ModuleSwitch::AwaitSwitch(GpuStream stream) {
  std::lock_guard<std::mutex> lighting(light_mu_);
  SettleSwitch(stream);
}

// light_mu_ held.
void ModuleSwitch::SettleSwitch(GpuStream stream) {
  if (!switch_pending_.load(std::memory_order_relaxed) || stream == switch_stream_) return;
  if (gpu_.QueryEvent(switch_event_) == StreamState::kBusy && !gpu_.WaitEvent(switch_event_, kSwitchWait)) {
    Log().warn("a launch on another stream came while kernels queued before a profile buffer switch still run: "
               "some of their events may be missing");
  }
  switch_pending_.store(false, std::memory_order_release);
}

bool ModuleSwitch::QueueDark(const std::vector<Module*>& modules, const wire::ArenaRef& dark, GpuStream stream) {
  bool ok = true;
  for (Module* m : modules) ok = ok && gpu_.CopyToDevice(m->global, &dark, sizeof(dark), stream);
  return ok;
}

void ModuleSwitch::EndGeneration() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [module, m] : modules_) {
    m->written = true;
    m->is_lit.store(false, std::memory_order_release);
    m->any_stream = m->many_streams = false;
    m->only_stream = nullptr;
    m->dark_pending = false;
    m->dark_pending_on = nullptr;
    m->lit_on.clear();
    m->lit_everywhere = false;
  }
  lit_count_.store(0, std::memory_order_release);
}

}  // namespace smprof::injector
