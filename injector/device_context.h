// DeviceContext: one GPU context's arena, and which of its modules record.
//
// The arena is the device buffer every opted-in kernel of the context writes
// (wire.h). Which modules record is the module switch's (module_switch.h:
// lights and darkenings in the launches' stream order). Once a module is
// lit, its kernels queued earlier on *other* streams may record too: every
// stream that received an unwanted launch since the last harvest
// (NoteQuietLaunch: a thread-local check per launch) then counts as busy
// (stream_tracker.h), so no harvest reads the arena under it, and the
// harvest keeps only the events of wanted launches. At a harvest every
// module goes dark again.
//
// Launch gate: launches of work that records hold it shared from API enter to
// exit; ReadBack holds it exclusively (with a timeout), so no such launch is
// half-way through while the arena is read and reset. Fill level: Poll()
// samples the device's claim counter asynchronously, NeedsDrain() adds the
// projection of the launches since the last harvest, so a drain comes before
// the arena overflows. Chunk size: SizeChunks() fixes it for the launches
// until the next read-back, at the first of them (chunk_sizing.h).
//
// ReadBack() runs on the application's thread and holds it only for the
// copy: it checks that no recording kernel can still run (HarvestMode),
// copies the used chunks out, zeroes them, moves every module to a new epoch
// (cursors left in shared memory by earlier blocks never match again) and
// returns the bytes; decoding happens elsewhere (harvester.h).
//
// Segments: an arena of kTwoSegmentsFrom bytes or more is two segments of
// its own header and chunks, one current. A drain switches segments instead
// of waiting (Switch) when every recording launch since the last read-back
// was queued on the draining launch's stream by its thread: a copy queued
// there darkens every module into the other segment and an event follows
// (module_switch.h), so the kernels queued before finish in the old segment
// while the launch and later ones write the new one, and the application's
// thread goes on at once. The old segment is read back (without waiting for
// anything but its copy) once its event has passed: at a later launch, a
// synchronisation, or a drain that needs it free; its snapshot names the
// first launch that wrote the next segment (correlation_limit), so its
// harvest takes only the records of the launches before. Otherwise (several
// streams or threads, a graph being captured, a small arena) a drain reads
// back as below.
//
// Staging (staging_area.h): the copy the application waits for is a
// device-to-device copy into a slice of the context's staging area, at the
// device's memory speed; a harvest thread brings it to host memory later
// (VisitChunks). A read-back that finds no slice free copies to host memory
// directly, as all do when the staging area could not be allocated.
//
// Thread-safe; all state is private. No lock is held across a Gpu call
// except the gate and the read-back mutex, which only harvests take first
// (and the module switch's own, module_switch.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "injector/arena_snapshot.h"
#include "injector/chunk_sizing.h"
#include "injector/gpu.h"
#include "injector/host_buffer.h"
#include "injector/module_switch.h"
#include "injector/staging_area.h"
#include "injector/stream_tracker.h"
#include "smprof/wire.h"

namespace smprof::injector {

struct ArenaOptions {
  uint64_t buffer_bytes = 0;  // 0: sized from the device's free memory (AutoBufferBytes)
  uint32_t chunk_bytes = 65536;  // the largest chunk size (chunk_sizing.h)
  uint32_t warp_mask = 0xffffffffu;
  uint32_t high_water_percent = 75;
  // Each of the two page-locked buffers staged chunks come to host memory
  // through (DeviceContext::VisitChunks).
  uint64_t bounce_bytes = uint64_t{32} << 20;
};

// An arena of at least this many bytes is two segments (above).
inline constexpr uint64_t kTwoSegmentsFrom = uint64_t{64} << 20;

// When a harvest may read the arena.
enum class HarvestMode {
  kIfIdle,         // the application synchronised a stream or event: only if all recording work is done
  kContextSynced,  // the application synchronised the context: likewise, but work on streams smprof
                   // cannot query (other threads' per-thread streams, destroyed streams) is done too
  kForce,          // wait for the recording work, until a deadline (drain, unload, teardown, exit)
  kRunning,        // the process is about to end: read what the arena holds now, kernels still running
                   // included (as far as their warps wrote), and nothing more after it
};

enum class ReadBack { kDone, kNothing, kBusy, kFailed };

// A process-unique id for the calling thread (std::thread::id values are
// reused after a thread exits; these never are).
uint64_t ThreadToken();

class DeviceContext {
 public:
  // A module of this context that opted in.
  using Module = ModuleSwitch::Module;

  DeviceContext(Gpu& gpu, GpuCtx ctx, const ArenaOptions& options);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // Allocates the arena and measures the device, in this context (current).
  bool SetUp();
  GpuCtx ctx() const { return ctx_; }
  const DeviceFacts& facts() const { return facts_; }
  // The chunks of the current generation (changes only at its first launch).
  uint32_t num_chunks() const { return num_chunks_.load(std::memory_order_relaxed); }
  int chunk_class() const { return chunk_class_.load(std::memory_order_relaxed); }
  bool usable() const { return !failed_.load(std::memory_order_acquire) && !ended_.load(std::memory_order_acquire); }
  // The context is being destroyed: nothing more is launched or read.
  void End() { ended_.store(true, std::memory_order_release); }
  // Stops using the arena (recording work outlived a forced harvest at
  // teardown, a kernel's execution failed, or it was read while kernels ran).
  // Returns whether this call gave it up (false: it was already).
  bool Abandon() { return !failed_.exchange(true, std::memory_order_acq_rel); }

  // --- launch path (the launching thread, the context current) -----------

  // The module's state (created on first use); `has_selected`: it has a
  // selected kernel (graph launches light such modules).
  Module* FindModule(GpuModule module, DevPtr arena_global, bool has_selected);
  bool lit(const Module* m) const { return switch_.lit(m); }
  // True when no module is lit (the common state of an unwanted launch).
  bool all_dark() const { return switch_.all_dark(); }

  bool NeedsDrain(double chunks);
  void Poll();
  // A drain for a launch on `stream` by this thread (`correlation_id`: its
  // API call's): switches segments if it may (see Segments above), without
  // waiting for any kernel. False when it may not, or the other segment is
  // not read back yet.
  bool Switch(GpuStream stream, bool per_thread, uint64_t correlation_id);
  // An unwanted launch of an opted-in kernel on `stream`: if a segment
  // switch queued on another stream may not have darkened its module yet,
  // waits (boundedly) until it has, so that it cannot write the old segment.
  void AwaitSwitch(GpuStream stream, bool per_thread);
  // A segment switched away from is not read back yet.
  bool retiring() const;
  // ... and its kernels have finished: a read-back takes it at once (asks
  // the GPU at most every 100 us).
  bool RetiredDone();
  // Gate held, before the first Light of a generation (later calls do
  // nothing): fixes its chunk size from `chunks_at(class)`, the chunks the
  // launch may claim at each chunk class (chunk_sizing.h). The size may
  // shrink below the start no further than `shrink_floor` (the launched
  // kernel's, ClaimRates::shrink_floor) and the floors of the previous
  // generation's kernels allow.
  void SizeChunks(const std::function<double(int)>& chunks_at, int shrink_floor);
  void LockGate() { gate_.lock_shared(); }
  void UnlockGate() { gate_.unlock_shared(); }

  // Gate held. Makes `m` record before a wanted launch on `stream` (the
  // launching thread's kPerThreadStream for its per-thread stream).
  bool Light(Module* m, GpuStream stream, bool capturing);
  // Gate held. Lights every module with a selected kernel (a graph launch).
  bool LightSelected(GpuStream stream, bool capturing);
  // An unwanted launch of a lit module on `stream`: true when the module was
  // darkened ahead of it (nothing to track); false when the launch will
  // record (it must be tracked with the gate held, and filtered on the host).
  // Never for a per-thread default stream (one handle names every thread's).
  bool DarkenInStreamOrder(Module* m, GpuStream stream, bool per_thread, bool capturing);
  // An unwanted launch of an opted-in kernel on `stream` while its module
  // was dark: remembered (cheaply) in case a module is lit before it runs.
  void NoteQuietLaunch(GpuStream stream, bool per_thread);
  // The same, for a launch made before the context was set up, by `thread`
  // (a ThreadToken()).
  void AdoptQuietLaunch(GpuStream stream, bool per_thread, uint64_t thread);
  // Gate held. Recording work was queued on `stream` (or the calling
  // thread's per-thread stream); `chunks` it may claim. `rates`
  // (with the launch's `warps`): the kernel's learned claim rate, which the
  // read-back sets at once when it can tell (every launch since the last one
  // was of this kernel, or nothing was claimed at all), so the projection of
  // the next launches is right before the harvest threads have decoded.
  void NoteLaunch(Module* m, GpuStream stream, bool per_thread, double chunks,
                  ClaimRates* rates = nullptr, uint64_t warps = 0);
  void NoteStreamDestroy(GpuStream stream);
  // A module is being unloaded: the next read-back checks every module's
  // arena reference again (a stale handle is dropped, a reused one gets the
  // new module's) before writing to any.
  void ModulesMayBeStale();

  // --- harvest (an application thread) ------------------------------------

  bool has_pending() const;
  // Reads and resets the arena if no recording kernel can still run (see
  // HarvestMode; kForce waits until `deadline`). kBusy: not now. A segment
  // switched away from comes first: then only it is read (once its kernels
  // have finished), and a second Read takes the current one.
  ReadBack Read(HarvestMode mode, std::chrono::steady_clock::time_point deadline, ArenaSnapshot* out);
  // Hands a read-back's chunks to `visit(chunks, count)` in host memory, in
  // order (a harvest thread, the context current): staged ones piece by piece
  // through the context's page-locked buffers (the next piece is copied while
  // one is visited; nothing is page-locked or mapped per read-back, which
  // would hold the application's driver calls), the rest at once from the
  // snapshot's buffer. Frees its slice of the staging area. True if every
  // chunk was visited; false if a copy failed (the rest are lost and the
  // context stops profiling). One thread at a time per context.
  bool VisitChunks(ArenaSnapshot* snapshot, const std::function<void(const uint8_t*, uint32_t)>& visit);
  // On the thread of an unload or a context's end (its callback: the
  // context current): `scan` sees `snapshot`'s chunks, brought to host
  // memory here if they are still staged. Then they are the snapshot's
  // chunks, or, if a harvest thread is fetching them meanwhile, its fallback
  // should that copy fail once the context is gone. Never waits for a fetch.
  void FetchAtUnload(ArenaSnapshot* snapshot, const std::function<void(const ArenaSnapshot&)>& scan);
  // Whether `snapshot`'s chunks are not (all) in host memory yet.
  bool Staged(const ArenaSnapshot& snapshot);
  // Whether the staging area has a slice free for the chunks projected
  // since the last read-back (or holds none, or there is no staging area).
  // When it has not, a read-back now would be copied to host memory on the
  // application's thread, at a fraction of the speed; waiting for the
  // harvest threads to fetch an earlier one is shorter.
  bool StagingHasRoom();
  // The chunk bytes projected since the last read-back (at most the arena's).
  uint64_t ProjectedReadBackBytes();

  // Stream for smprof's own reads in this context (names).
  GpuStream stream() const { return stream_; }

 private:
  // The arena: options_.buffer_bytes, or sized from the free device memory.
  bool AllocateArena(uint64_t* bytes);
  bool Quiesce(HarvestMode mode, std::chrono::steady_clock::time_point deadline);
  // The generation's chunks are of `chunk_class` (ref_ and its mirrors);
  // in SetUp, or mu_ held with nothing lit.
  void UseChunkClass(int chunk_class);
  // One part of the arena: a header and its chunks.
  struct Segment {
    DevPtr header = 0;
    DevPtr chunks = 0;
    GpuEvent switched = nullptr;  // recorded after its kernels, when switched away from
    // While it is switched away from and not read back yet (retiring_): its
    // generation's reference, the first launch that wrote the next segment,
    // and its kernels (for teaching claim rates, as cycle_kernels_).
    wire::ArenaRef ref{};
    uint64_t correlation_limit = 0;
    std::vector<std::pair<ClaimRates*, uint64_t>> kernels;
    bool mixed = false;
  };
  // The page-locked words and references the GPU copies from (in the
  // applications' stream order: unchanged until those copies land) and
  // into.
  struct Pinned {
    uint64_t dark_word;           // 0: darkens a module
    uint32_t claim_sample;        // the current segment's claim counter, sampled by Poll
    uint32_t unused;
    uint64_t lit_word[2];         // segment i's header address: lights a module
    wire::ArenaRef dark_ref[2];   // segment i's reference, dark (a switch, a new size behind one)
  };
  // The current segment's references in pinned_, from ref_ (mu_ held or in SetUp).
  void PublishRefs();
  // Queues the copy of `s`'s used chunks (by `ref`, its generation's) to
  // staging or host memory and their reset; fills `out` but its time.
  // kDone, or kBusy / kFailed.
  ReadBack CopyOut(const Segment& s, const wire::ArenaRef& ref, ArenaSnapshot* out);
  // The retired segment (mode as Read; read_mu_ and the gate held).
  ReadBack ReadRetired(HarvestMode mode, std::chrono::steady_clock::time_point deadline, ArenaSnapshot* out);
  // mu_ held: the next generation starts (nothing pending, the chunk size open).
  void NextGeneration();
  // Teaches the generation's kernels what they claimed (mu_ held).
  static void Teach(const std::vector<std::pair<ClaimRates*, uint64_t>>& kernels, bool mixed, int chunk_class,
                    uint32_t used);
  // The modules, less those an unload took (ModuleSwitch::DropGone).
  std::vector<Module*> LiveModules();
  // A read-back failed half-way: stop using the arena.
  ReadBack FailRead(ArenaSnapshot* out);

  Gpu& gpu_;
  const uint64_t id_ = NewInstanceId();
  const GpuCtx ctx_;
  const ArenaOptions options_;
  DeviceFacts facts_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> ended_{false};

  DevPtr arena_ = 0;
  Segment segments_[2];
  int segment_count_ = 1;
  int current_ = 0;           // the segment new launches write
  wire::ArenaRef ref_{};      // what modules get (the current segment's); `arena` is written last, and only when lit
  uint64_t chunk_region_bytes_ = 0;  // of a segment: from its chunk 0 to its end
  int max_chunk_class_ = 0;          // options_.chunk_bytes
  int start_chunk_class_ = 0;        // kStartChunkShift, or max_chunk_class_ when smaller
  std::atomic<uint32_t> num_chunks_{0};  // ref_'s, for readers without a lock
  std::atomic<int> chunk_class_{0};
  GpuStream stream_ = nullptr;  // private, non-blocking
  ModuleSwitch switch_;
  StagingArea staging_;         // as large as the chunk region
  std::atomic<uint64_t> staged_reads_{0}, direct_reads_{0};  // for the log
  Pinned* pinned_ = nullptr;
  std::atomic<bool> polling_{false};
  std::chrono::steady_clock::time_point last_poll_{};
  // The segment not current (segments_[1 - current_]) was switched away from
  // and is not read back yet: set by Switch, cleared by ReadRetired.
  std::atomic<bool> retiring_{false};
  std::atomic<bool> querying_{false};
  std::chrono::steady_clock::time_point last_query_{};
  std::atomic<uint64_t> switches_{0};  // for the log

  std::shared_mutex gate_;
  std::mutex read_mu_;  // serialises read-backs

  mutable std::mutex mu_;  // guards what follows; never held across a Gpu call
  StreamTracker streams_;                       // work since the last harvest
  std::atomic<uint64_t> quiet_generation_{1};  // bumped at each harvest (NoteQuietLaunch's fast path)
  uint64_t pending_ = 0;                  // recording launches since the last harvest
  bool sized_ = false;                    // the chunk size of this generation is fixed
  double projected_chunks_ = 0;
  // The kernels launched since (at most 64), each with the warps it launched.
  std::vector<std::pair<ClaimRates*, uint64_t>> cycle_kernels_;
  bool cycle_mixed_ = false;  // ... more than that, or graphs
  // The previous generation's cycle_kernels_ (empty when it was mixed): what
  // the next generation is expected to launch, for SizeChunks.
  std::vector<std::pair<ClaimRates*, uint64_t>> last_cycle_;
};

}  // namespace smprof::injector
