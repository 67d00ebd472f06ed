// ModuleSwitch: which of a context's opted-in modules record.
//
// A module records only while its arena reference (wire::ArenaRef, a
// __constant__ of the module) is *lit*: its `arena` field set. Otherwise its
// markers cost one constant load and record nothing, so an excluded kernel,
// or a launch outside the chosen range or capture window, takes no arena
// space. Every change is a copy into the module's reference:
//
//   - Light(): before a wanted launch, a dark module is lit by an 8-byte
//     copy queued on the launch's stream, ahead of it (at once through the
//     context's private stream when that stream is capturing a graph). The
//     first light of a generation writes the rest of the reference first, at
//     once, with `arena` still 0: a kernel of the module already running sees
//     either nothing or a complete reference.
//   - DarkenInStreamOrder(): an unwanted launch of a lit module whose wanted
//     launches since the last harvest were all on the same stream darkens it
//     by an 8-byte copy queued on that stream, ahead of the launch: the
//     earlier launches still record, this one does not. A module used on
//     several streams stays lit until the next harvest (its unwanted
//     launches record and are filtered on the host). Lighting a module whose
//     darkening may still be queued goes through the same stream, or waits
//     (boundedly) for it on another stream.
//   - At a read-back (nothing of the context runs): every module gets its
//     whole reference, dark, for the next epoch (QueueDark, then
//     EndGeneration); modules that may have been unloaded are looked up
//     again first (DropGone).
//   - At a segment switch (the context's kernels all queued on one stream,
//     some maybe still running): SwitchInStreamOrder queues on that stream
//     the whole reference of the next segment, dark, into every module, and
//     an event after them. Kernels queued before keep writing the old
//     segment; lights queued after give the new one, in the same stream's
//     order. Until the event has passed, a light or darkening on another
//     stream first waits for it (boundedly): no kernel may see its reference
//     change while it runs. (A new size is published in stream order too:
//     the whole reference dark, then the segment's address.)
//
// The in-stream copies read page-locked memory that does not change before
// they land (the segment's address, zero, the segment's references), so a
// copy that lands late still writes what was meant. Which kernels a light
// lets record that were queued before it is the caller's business
// (DeviceContext counts their streams busy).
//
// Thread-safe. Lights and darkenings are serialised (two threads publishing
// a module for the first time must not interleave); no lock but that one is
// held across a Gpu call.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "injector/gpu.h"
#include "smprof/wire.h"

namespace smprof::injector {

class ModuleSwitch {
 public:
  // A module of the context that opted in.
  struct Module;

  explicit ModuleSwitch(Gpu& gpu);
  ~ModuleSwitch();
  ModuleSwitch(const ModuleSwitch&) = delete;
  ModuleSwitch& operator=(const ModuleSwitch&) = delete;

  // `own_stream`: the context's private stream; `dark_word`: a page-locked
  // word holding 0, never changed.
  void SetUp(GpuStream own_stream, const uint64_t* dark_word);

  // The module's state (created on first use; a new one when its reference
  // moved); `has_selected`: it has a selected kernel.
  Module* Find(GpuModule module, DevPtr arena_global, bool has_selected);
  bool lit(const Module* m) const;
  // True when no module is lit.
  bool all_dark() const { return lit_count_.load(std::memory_order_acquire) == 0; }
  // The modules with a selected kernel (a graph launch lights them).
  std::vector<Module*> Selected() const;

  // What a light writes, from the context's current segment.
  struct Publication {
    wire::ArenaRef ref;               // the whole reference (`arena` ignored), when the module's is not current
    const uint64_t* lit_word;         // page-locked: the segment's address
    const wire::ArenaRef* dark_ref;   // page-locked: `ref` dark, for a copy in stream order
  };
  enum class Lit { kAlready, kNow, kFailed };
  // Makes `m` record before a wanted launch on `stream`. `publication` is
  // called, with no lock of this switch held, for what to write.
  Lit Light(Module* m, GpuStream stream, bool capturing, const std::function<Publication()>& publication);
  // See DeviceContext::DarkenInStreamOrder. False: not darkened (the launch
  // will record), or the copy failed.
  bool DarkenInStreamOrder(Module* m, GpuStream stream, bool per_thread, bool capturing);
  // A recording launch of `m` on `stream`.
  void NoteStream(Module* m, GpuStream stream);
  // A new chunk size: each module's next light writes its whole reference.
  void ReferencesChanged();
  // A module is being unloaded: DropGone checks every module again.
  void MayBeStale();

  // Whether every recording launch since the last harvest, and every light,
  // was queued on `stream` (none at once): a switch in its order then
  // separates every kernel's segment.
  bool OnlyOn(GpuStream stream) const;
  // Queues on `stream` the copy of `dark` (page-locked, `arena` 0, unchanged
  // until the copies land) into each of `modules`, then records `switched`
  // there (EndGeneration follows). False if a copy failed.
  bool SwitchInStreamOrder(const std::vector<Module*>& modules, const wire::ArenaRef* dark, GpuStream stream,
                           GpuEvent switched);
  // The switch's event has passed (the old segment is read back).
  void SwitchPassed();
  // A switch may still be ahead on its stream.
  bool switch_pending() const { return switch_pending_.load(std::memory_order_acquire); }
  // A launch on `stream` must not run before the switch has passed: waits
  // for it (boundedly) unless `stream` is the switch's.
  void AwaitSwitch(GpuStream stream);

  // --- read-back (nothing of the context runs) ------------------------------

  // After an unload: forgets the modules whose reference `still_there`
  // denies (a stale handle, or a reused one), so nothing is written into
  // memory that is gone. Returns the modules that remain.
  std::vector<Module*> DropGone(const std::function<bool(GpuModule, DevPtr)>& still_there);
  // Queues on `stream` the copy of `dark` (`arena` 0) into each of `modules`.
  bool QueueDark(const std::vector<Module*>& modules, const wire::ArenaRef& dark, GpuStream stream);
  // The copies landed: every module is dark with a current reference, and
  // its streams are forgotten.
  void EndGeneration();

 private:
  bool WriteArenaWord(Module* m, const uint64_t* word, GpuStream stream);
  // light_mu_ held. A light or darkening on `stream` may rewrite a reference
  // now: a switch queued on another stream has passed (waited for,
  // boundedly), or there is none.
  void SettleSwitch(GpuStream stream);

  Gpu& gpu_;
  GpuStream own_stream_ = nullptr;
  const uint64_t* dark_word_ = nullptr;
  // The latest segment switch while it may still be ahead on its stream
  // (written with light_mu_ held; switch_pending_ is a flag of its own: the
  // legacy stream's handle is null).
  std::atomic<bool> switch_pending_{false};
  GpuStream switch_stream_ = nullptr;
  GpuEvent switch_event_ = nullptr;

  std::mutex light_mu_;  // serialises the writes of Light and DarkenInStreamOrder
  mutable std::mutex mu_;  // guards the modules' state; never held across a Gpu call
  std::unordered_map<GpuModule, std::unique_ptr<Module>> modules_;
  std::vector<std::unique_ptr<Module>> retired_;  // forgotten modules: cached pointers stay valid
  bool stale_ = false;
  std::atomic<int> lit_count_{0};
};

}  // namespace smprof::injector
