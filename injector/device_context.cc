#include "injector/device_context.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/settings.h"
#include "injector/kernel_table.h"
#include "injector/log.h"

namespace smprof::injector {
uint64_t ThreadToken() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t token = next.fetch_add(1);
  return token;
}

namespace {

constexpr auto kPollInterval = std::chrono::microseconds(100);

}  // namespace

DeviceContext::DeviceContext(Gpu& gpu, GpuCtx ctx, const ArenaOptions& options)
    : gpu_(gpu), ctx_(ctx), options_(options), switch_(gpu), staging_(gpu) {}

DeviceContext::~DeviceContext() {
  Log().debug("GPU {}: {} read-backs staged on the device, {} copied to host memory directly, {} segment switches",
              facts_.info.ordinal, staged_reads_.load(), direct_reads_.load(), switches_.load());
  if (arena_ != 0) gpu_.Free(arena_);
  if (pinned_ != nullptr) gpu_.FreePinned(pinned_);
  for (Segment& s : segments_) {
    if (s.switched != nullptr) gpu_.DestroyEvent(s.switched);
  }
  if (stream_ != nullptr) gpu_.DestroyStream(stream_);
}

bool DeviceContext::AllocateArena(uint64_t* bytes) {
  if (options_.buffer_bytes != 0) {
    *bytes = options_.buffer_bytes;
    if (gpu_.Allocate(*bytes, &arena_)) return true;
    Log().error("could not allocate {} MiB of device memory for profiling: lower SMPROF_BUFFER_MB (or leave it "
                "unset: the buffer is then sized from the free memory)",
                *bytes >> 20);
    return false;
  }
  uint64_t free = 0, total = 0;
  if (!gpu_.DeviceMemory(&free, &total)) free = 0;
  // A GPU whose memory fills between the query and the allocation gets less.
  for (*bytes = AutoBufferBytes(free); *bytes >= kAutoBufferMinBytes; *bytes /= 2) {
    if (gpu_.Allocate(*bytes, &arena_)) {
      Log().info("device buffer of {} MiB (SMPROF_BUFFER_MB=auto: 1/{} of {} MiB free, a power of two, {}-{} MiB)",
                 *bytes >> 20, kAutoBufferShare, free >> 20, kAutoBufferMinBytes >> 20, kAutoBufferMaxBytes >> 20);
      return true;
    }
  }
  Log().error("could not allocate {} MiB of device memory for profiling ({} MiB free): free some, or set "
              "SMPROF_BUFFER_MB",
              kAutoBufferMinBytes >> 20, free >> 20);
  return false;
}

bool DeviceContext::SetUp() {
  uint64_t bytes = 0;
  const uint64_t chunk = options_.chunk_bytes;
  pinned_ = static_cast<Pinned*>(gpu_.AllocatePinned(sizeof(Pinned)));
  if (!gpu_.CreateStream(&stream_) || pinned_ == nullptr || !AllocateArena(&bytes)) {
    failed_ = true;
    return false;
  }
  *pinned_ = Pinned{};
  // Two segments from kTwoSegmentsFrom bytes, each aligned to the largest
  // chunk, each with an event to record behind its kernels (one segment, the
  // whole arena, without them).
  segment_count_ = bytes >= kTwoSegmentsFrom && gpu_.CreateEvent(&segments_[0].switched) &&
                           gpu_.CreateEvent(&segments_[1].switched)
                       ? 2
                       : 1;
  const uint64_t segment_bytes = segment_count_ == 2 ? bytes / 2 / chunk * chunk : bytes;
  // Chunks are aligned to their size: the recorder tells a full chunk by its
  // cursor reaching a multiple of it. Aligned to the largest size, the region
  // suits every size a generation may take; the header tells the largest.
  uint64_t chunks_offset = 0;
  for (int i = 0; i < segment_count_; ++i) {
    Segment& seg = segments_[i];
    seg.header = arena_ + static_cast<uint64_t>(i) * segment_bytes;
    const uint64_t offset = (seg.header + sizeof(wire::ArenaHeader) + chunk - 1) / chunk * chunk - seg.header;
    chunks_offset = std::max(chunks_offset, offset);
    pinned_->lit_word[i] = seg.header;
  }
  // The recorder keeps a chunk's end as a 32-bit offset from the chunks: a
  // single segment of 4 GiB leaves its last chunk unused.
  chunk_region_bytes_ = std::min(segment_bytes - chunks_offset, (uint64_t{1} << 32) - chunk);
  const uint64_t num_chunks = std::min<uint64_t>(chunk_region_bytes_ / chunk, 0x7fffffffu);
  wire::ArenaHeader header{};
  header.magic = wire::kArenaMagic;
  header.abi_version = wire::kArenaAbiVersion;
  header.chunk_bytes = static_cast<uint32_t>(chunk);
  header.num_chunks = static_cast<uint32_t>(num_chunks);
  header.chunks_offset = chunks_offset;
  switch_.SetUp(stream_, &pinned_->dark_word);
  bool ok = gpu_.Fill(arena_, 0, bytes, stream_);
  for (int i = 0; i < segment_count_; ++i) {
    segments_[i].chunks = segments_[i].header + chunks_offset;
    ok = ok && gpu_.CopyToDevice(segments_[i].header, &header, sizeof(header), stream_);
  }
  if (!ok || !gpu_.Wait(stream_, kOwnCopyTimeout)) {
    failed_ = true;
    return false;
  }
  ref_.arena = segments_[0].header;
  ref_.chunks = segments_[0].chunks;
  ref_.warp_mask = options_.warp_mask;
  ref_.epoch = 1;
  max_chunk_class_ = ChunkClassOf(static_cast<uint32_t>(__builtin_ctzll(chunk)));
  start_chunk_class_ = std::min(ChunkClassOf(kStartChunkShift), max_chunk_class_);
  UseChunkClass(start_chunk_class_);
  if (!gpu_.SetUpDevice(&facts_)) {
    failed_ = true;
    return false;
  }
  if (facts_.cycles_per_ns <= 0) facts_.cycles_per_ns = 1.0;
  facts_.info.buffer_bytes = bytes;
  // Optional: without it, read-backs copy to host memory on the
  // application's thread.
  const uint64_t staging_bytes = chunk_region_bytes_ * static_cast<uint64_t>(segment_count_);
  if (!staging_.SetUp(staging_bytes, options_.bounce_bytes)) {
    Log().info(
        "GPU {}: no device memory for a staging copy of the arena ({} MB); read-backs copy to host memory "
        "while the application waits",
        facts_.info.ordinal, staging_bytes >> 20);
  }
  Log().info("GPU {} ({}): {} MiB arena in {} segment{}, chunks of {} bytes, up to {} for warps of many events",
             facts_.info.ordinal, facts_.info.name, bytes >> 20, segment_count_, segment_count_ == 2 ? "s" : "",
             ChunkBytesOf(start_chunk_class_), chunk);
  return true;
}

DeviceContext::Module* DeviceContext::FindModule(GpuModule module, DevPtr arena_global, bool has_selected) {
  return switch_.Find(module, arena_global, has_selected);
}

bool DeviceContext::Light(Module* m, GpuStream stream, bool capturing) {
  const ModuleSwitch::Lit lit = switch_.Light(m, stream, capturing, [this] {
    std::lock_guard<std::mutex> lock(mu_);
    sized_ = true;  // lit: the chunk size stays until the next read-back
    return ModuleSwitch::Publication{ref_, &pinned_->lit_word[current_], &pinned_->dark_ref[current_]};
  });
  if (lit != ModuleSwitch::Lit::kNow) return lit == ModuleSwitch::Lit::kAlready;
  // Unwanted launches queued before the light may record now: their streams
  // hold recording work until proven idle.
  std::lock_guard<std::mutex> lock(mu_);
  if (streams_.QuietBecomeBusy()) ++pending_;
  return true;
}

bool DeviceContext::LightSelected(GpuStream stream, bool capturing) {
  bool ok = true;
  for (Module* m : switch_.Selected()) ok &= Light(m, stream, capturing);
  return ok;
}

bool DeviceContext::DarkenInStreamOrder(Module* m, GpuStream stream, bool per_thread, bool capturing) {
  return switch_.DarkenInStreamOrder(m, stream, per_thread, capturing);
}

void DeviceContext::NoteLaunch(Module* m, GpuStream stream, bool per_thread, double chunks, ClaimRates* rates,
                               uint64_t warps) {
  if (m != nullptr) switch_.NoteStream(m, stream);
  std::lock_guard<std::mutex> lock(mu_);
  ++pending_;
  projected_chunks_ += chunks;
  if (rates == nullptr) {
    cycle_mixed_ = true;
  } else {
    auto it = std::find_if(cycle_kernels_.begin(), cycle_kernels_.end(),
                           [rates](const std::pair<ClaimRates*, uint64_t>& k) { return k.first == rates; });
    if (it != cycle_kernels_.end()) {
      it->second += warps;
    } else if (cycle_kernels_.size() < 64) {
      cycle_kernels_.emplace_back(rates, warps);
    } else {
      cycle_mixed_ = true;
    }
  }
  streams_.NoteBusy(stream, per_thread, ThreadToken());
}

namespace {
// The stream this thread last noted as quiet, per context and harvest.
struct QuietNote {
  uint64_t context = 0;
  uint64_t generation = 0;
  GpuStream stream = nullptr;
  bool per_thread = false;
};
thread_local QuietNote t_quiet;
}  // namespace

void DeviceContext::NoteQuietLaunch(GpuStream stream, bool per_thread) {
  const uint64_t generation = quiet_generation_.load(std::memory_order_acquire);
  if (t_quiet.context == id_ && t_quiet.generation == generation && t_quiet.stream == stream &&
      t_quiet.per_thread == per_thread) {
    return;
  }
  AdoptQuietLaunch(stream, per_thread, ThreadToken());
  t_quiet = QuietNote{id_, generation, stream, per_thread};
}

void DeviceContext::AdoptQuietLaunch(GpuStream stream, bool per_thread, uint64_t thread) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.NoteQuiet(stream, per_thread, thread);
}

void DeviceContext::NoteStreamDestroy(GpuStream stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!streams_.busy(stream)) return;
  }
  const bool idle = gpu_.Query(stream) == StreamState::kIdle;
  std::lock_guard<std::mutex> lock(mu_);
  streams_.Destroyed(stream, idle);
}

void DeviceContext::ModulesMayBeStale() { switch_.MayBeStale(); }

bool DeviceContext::has_pending() const {
  if (retiring()) return true;
  std::lock_guard<std::mutex> lock(mu_);
  return pending_ != 0;
}

bool DeviceContext::retiring() const { return retiring_.load(std::memory_order_acquire); }

bool DeviceContext::RetiredDone() {
  if (!retiring() || querying_.exchange(true, std::memory_order_acquire)) return false;
  const auto now = std::chrono::steady_clock::now();
  bool done = false;
  if (now - last_query_ >= kPollInterval) {
    last_query_ = now;
    GpuEvent switched = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);  // retiring_ changes with current_, under it
      if (retiring()) switched = segments_[1 - current_].switched;
    }
    done = switched != nullptr && gpu_.QueryEvent(switched) == StreamState::kIdle;
  }
  querying_.store(false, std::memory_order_release);
  return done;
}

bool DeviceContext::NeedsDrain(double chunks) {
  const double limit = static_cast<double>(num_chunks()) * options_.high_water_percent / 100.0;
  const uint32_t sampled = __atomic_load_n(&pinned_->claim_sample, __ATOMIC_RELAXED);
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_ == 0) return false;
  return sampled >= limit || projected_chunks_ + chunks > limit;
}

void DeviceContext::SizeChunks(const std::function<double(int)>& chunks_at, int shrink_floor) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sized_) return;
  sized_ = true;
  const double limit = static_cast<double>(chunk_region_bytes_) * options_.high_water_percent / 100.0;
  // The previous generation's kernels, as a mix: no shrinking without one.
  std::function<double(int)> mix_at;
  if (!last_cycle_.empty()) {
    for (const auto& [rates, warps] : last_cycle_) shrink_floor = std::max(shrink_floor, rates->shrink_floor());
    mix_at = [this](int chunk_class) {
      double chunks = 0;
      for (const auto& [rates, warps] : last_cycle_) chunks += static_cast<double>(warps) * rates->at(chunk_class);
      return chunks;
    };
  }
  const int chosen = ChooseChunkClass(chunks_at, start_chunk_class_, max_chunk_class_, limit, mix_at, shrink_floor);
  if (chosen == chunk_class()) return;
  // Nothing is lit and nothing records (a new generation): every module gets
  // the new size with its next light.
  UseChunkClass(chosen);
  switch_.ReferencesChanged();
  Log().debug("GPU {}: chunks of {} bytes until the next harvest", facts_.info.ordinal, ChunkBytesOf(chosen));
}

void DeviceContext::UseChunkClass(int chunk_class) {
  ref_.chunk_shift = kMinChunkShift + static_cast<uint32_t>(chunk_class);
  ref_.num_chunks = static_cast<uint32_t>(std::min<uint64_t>(chunk_region_bytes_ >> ref_.chunk_shift, 0x7fffffffu));
  num_chunks_.store(ref_.num_chunks, std::memory_order_relaxed);
  chunk_class_.store(chunk_class, std::memory_order_relaxed);
  PublishRefs();
}

void DeviceContext::PublishRefs() {
  wire::ArenaRef dark = ref_;
  dark.arena = 0;
  pinned_->dark_ref[current_] = dark;
}

// One thread at a time samples the claim counter, at most every 100 us and
// only when the previous sample has landed (the private stream is idle).
void DeviceContext::Poll() {
  if (polling_.exchange(true, std::memory_order_acquire)) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_poll_ >= kPollInterval && gpu_.Query(stream_) == StreamState::kIdle) {
    last_poll_ = now;
    DevPtr header;
    {
      std::lock_guard<std::mutex> lock(mu_);
      header = segments_[current_].header;
    }
    gpu_.CopyToHost(&pinned_->claim_sample, header + offsetof(wire::ArenaHeader, next_chunk), sizeof(uint32_t),
                    stream_);
  }
  polling_.store(false, std::memory_order_release);
}

// Gate held exclusively: no recording launch can be enqueued meanwhile. True
// when no recording kernel of the context can still be running.
//
// A capturing stream is never queried or synchronised (that would invalidate
// the application's capture); work on it is not executing anyway, but the
// stream may also hold earlier eager work, so it counts as busy.
bool DeviceContext::Quiesce(HarvestMode mode, std::chrono::steady_clock::time_point deadline) {
  StreamTracker::Work work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    work = streams_.WorkFor(ThreadToken());
  }
  if (work.orphaned || work.other_threads) {
    // Only the application's own context synchronisation proves such work
    // done; smprof repeats it to cover launches that raced it. Without one,
    // the harvest waits for a later synchronisation (or is lost at exit).
    return mode == HarvestMode::kContextSynced && gpu_.SynchronizeContext();
  }
  for (GpuStream s : work.streams) {
    if (gpu_.Capturing(s)) return false;
    if (mode == HarvestMode::kForce) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (!gpu_.Wait(s, std::max(left, decltype(left)::zero()))) return false;
    } else if (gpu_.Query(s) != StreamState::kIdle) {
      return false;
    }
  }
  return true;
}

ReadBack DeviceContext::Read(HarvestMode mode, std::chrono::steady_clock::time_point deadline, ArenaSnapshot* out) {
  if (!usable() || !has_pending()) return ReadBack::kNothing;
  const bool force = mode == HarvestMode::kForce || mode == HarvestMode::kRunning;
  std::unique_lock<std::mutex> serial(read_mu_, std::defer_lock);
  if (!(force ? LockBefore(serial, deadline) : serial.try_lock())) return ReadBack::kBusy;
  std::unique_lock<std::shared_mutex> gate(gate_, std::defer_lock);
  const auto gate_deadline = force ? deadline : std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  if (!LockBefore(gate, gate_deadline)) {
    Log().debug("harvest skipped on GPU {}: launches in progress", facts_.info.ordinal);
    return ReadBack::kBusy;
  }
  if (retiring()) return ReadRetired(mode, deadline, out);
  if (!has_pending()) return ReadBack::kNothing;
  if (mode != HarvestMode::kRunning && !Quiesce(mode, deadline)) return ReadBack::kBusy;
  out->time_ns = gpu_.Now();
  out->correlation_limit = 0;
  out->switched = false;
  out->running = mode == HarvestMode::kRunning;
  const ReadBack copied = CopyOut(segments_[current_], ref_, out);
  if (copied != ReadBack::kDone) return copied;
  if (mode == HarvestMode::kRunning) {
    // Kernels may still write into it: it is read no more.
    if (!gpu_.Wait(stream_, kOwnCopyTimeout)) return FailRead(out);
    Abandon();
    return ReadBack::kDone;
  }

  // Every module goes dark at a new epoch (its whole reference in one copy:
  // no kernel of it can be running now).
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++ref_.epoch;
    PublishRefs();
  }
  const std::vector<Module*> modules = LiveModules();
  if (!switch_.QueueDark(modules, pinned_->dark_ref[current_], stream_) || !gpu_.Wait(stream_, kOwnCopyTimeout)) {
    return FailRead(out);
  }
  __atomic_store_n(&pinned_->claim_sample, 0u, __ATOMIC_RELAXED);
  switch_.EndGeneration();
  std::lock_guard<std::mutex> lock(mu_);
  Teach(cycle_kernels_, cycle_mixed_, chunk_class(), out->used_chunks);
  NextGeneration();
  return ReadBack::kDone;
}

void DeviceContext::NextGeneration() {
  last_cycle_.clear();
  if (!cycle_mixed_) last_cycle_.swap(cycle_kernels_);
  cycle_kernels_.clear();
  cycle_mixed_ = false;
  streams_.Clear();
  quiet_generation_.fetch_add(1, std::memory_order_acq_rel);
  pending_ = 0;
  projected_chunks_ = 0;
  sized_ = false;
}

ReadBack DeviceContext::ReadRetired(HarvestMode mode, std::chrono::steady_clock::time_point deadline,
                                    ArenaSnapshot* out) {
  Segment& old = segments_[1 - current_];
  const bool done = mode == HarvestMode::kRunning ||
                    (mode == HarvestMode::kForce
                         ? gpu_.WaitEvent(old.switched, std::max(deadline - std::chrono::steady_clock::now(),
                                                                 std::chrono::steady_clock::duration::zero()))
                         : gpu_.QueryEvent(old.switched) == StreamState::kIdle);
  if (!done) {
    Log().debug("GPU {}: the switched segment's kernels have not finished ({})", facts_.info.ordinal,
                mode == HarvestMode::kForce ? "waited until the deadline" : "not waited for");
    return ReadBack::kBusy;
  }
  switch_.SwitchPassed();
  out->time_ns = gpu_.Now();
  out->correlation_limit = old.correlation_limit;
  out->switched = true;
  out->running = mode == HarvestMode::kRunning;
  const ReadBack copied = CopyOut(old, old.ref, out);
  if (copied != ReadBack::kDone) return copied;
  if (!gpu_.Wait(stream_, kOwnCopyTimeout)) return FailRead(out);
  std::lock_guard<std::mutex> lock(mu_);
  Teach(old.kernels, old.mixed, static_cast<int>(old.ref.chunk_shift - kMinChunkShift), out->used_chunks);
  old.kernels.clear();
  retiring_.store(false, std::memory_order_release);
  return ReadBack::kDone;
}

ReadBack DeviceContext::CopyOut(const Segment& s, const wire::ArenaRef& ref, ArenaSnapshot* out) {
  wire::ArenaHeader header{};
  if (!gpu_.CopyToHost(&header, s.header, sizeof(header), stream_) || !gpu_.Wait(stream_, kOwnCopyTimeout)) {
    return ReadBack::kBusy;
  }
  out->wait_end_ns = gpu_.Now();
  const uint32_t chunk_bytes = 1u << ref.chunk_shift;
  const uint32_t used = std::min(header.next_chunk, ref.num_chunks);
  const size_t used_bytes = static_cast<size_t>(used) * chunk_bytes;
  out->used_chunks = used;
  out->chunk_bytes = chunk_bytes;
  out->total_chunks = ref.num_chunks;
  out->dropped_events = header.dropped_events;
  out->unplaced_events = header.unplaced_events;
  out->staged = used > 0 && staging_.Take(used_bytes, &out->staging_offset);
  (out->staged ? staged_reads_ : direct_reads_).fetch_add(used > 0 ? 1 : 0, std::memory_order_relaxed);
  if (!out->staged && out->chunks.size() < used_bytes) {
    // No staging slice was free: the copy goes to host memory now, into a
    // buffer large enough (pageable, host_buffer.h says why).
    out->retired = std::move(out->chunks);
    out->chunks = HostBuffer(used_bytes);
    if (out->chunks.size() < used_bytes) {
      failed_ = true;  // the arena cannot be emptied: stop using it
      Log().error("profiling stops on GPU {}: no host memory for a read-back of {} bytes", facts_.info.ordinal,
                  used_bytes);
      return ReadBack::kFailed;
    }
  }
  bool ok = true;
  if (out->staged) {
    ok = gpu_.CopyOnDevice(staging_.at(out->staging_offset), s.chunks, used_bytes, stream_);
  } else if (used > 0) {
    ok = gpu_.CopyToHost(out->chunks.data(), s.chunks, used_bytes, stream_);
  }
  ok = ok && (used == 0 || gpu_.Fill(s.chunks, 0, used_bytes, stream_)) &&
       gpu_.Fill(s.header + offsetof(wire::ArenaHeader, next_chunk), 0,
                 sizeof(wire::ArenaHeader) - offsetof(wire::ArenaHeader, next_chunk), stream_);
  return ok ? ReadBack::kDone : FailRead(out);
}

ReadBack DeviceContext::FailRead(ArenaSnapshot* out) {
  failed_ = true;  // the arena may be half reset: stop using it
  out->chunks.Abandon();  // a copy may still land in it: never reuse, never free under it
  if (out->staged) staging_.Release(out->staging_offset);
  out->staged = false;
  Log().error("profiling stops on GPU {}: the profile buffer could not be read back", facts_.info.ordinal);
  return ReadBack::kFailed;
}

void DeviceContext::Teach(const std::vector<std::pair<ClaimRates*, uint64_t>>& kernels, bool mixed, int chunk_class,
                          uint32_t used) {
  if (used == 0) {  // nothing claimed: none of these kernels records (for now)
    for (const auto& [rates, warps] : kernels) rates->set_all(0);
  } else if (!mixed && kernels.size() == 1 && kernels[0].second > 0) {
    const auto& [rates, warps] = kernels[0];
    rates->Rescale(chunk_class, static_cast<double>(used) / static_cast<double>(warps));
  }
}

std::vector<DeviceContext::Module*> DeviceContext::LiveModules() {
  return switch_.DropGone([this](GpuModule module, DevPtr global) {
    DevPtr found_global = 0;
    size_t bytes = 0;
    const Lookup found =
        gpu_.ModuleGlobal(module, KernelTable::ArenaSymbol(wire::kArenaAbiVersion).c_str(), &found_global, &bytes);
    return found == Lookup::kFound && found_global == global && bytes == sizeof(wire::ArenaRef);
  });
}

bool DeviceContext::Switch(GpuStream stream, bool per_thread, uint64_t correlation_id) {
  if (segment_count_ < 2 || !usable() || per_thread || stream == kPerThreadStream || retiring()) return false;
  std::unique_lock<std::mutex> serial(read_mu_, std::try_to_lock);
  if (!serial.owns_lock()) return false;
  std::unique_lock<std::shared_mutex> gate(gate_, std::defer_lock);
  if (!LockBefore(gate, std::chrono::steady_clock::now() + std::chrono::milliseconds(20))) return false;
  if (retiring() || gpu_.Capturing(stream)) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_ == 0) return false;
    const StreamTracker::Work work = streams_.WorkFor(ThreadToken());
    if (work.orphaned || work.other_threads || work.streams.size() != 1 || work.streams[0] != stream) {
      Log().debug("GPU {}: a drain reads back: recording work on {} streams, other threads' {}, orphaned {}",
                  facts_.info.ordinal, work.streams.size(), work.other_threads, work.orphaned);
      return false;
    }
  }
  if (!switch_.OnlyOn(stream)) {
    Log().debug("GPU {}: a drain reads back: a module records on another stream", facts_.info.ordinal);
    return false;
  }
  // A claim sample of the old segment must not land after the reset below.
  if (!gpu_.Wait(stream_, kOwnCopyTimeout)) return false;
  const std::vector<Module*> modules = LiveModules();
  Segment& old = segments_[current_];
  const int next = 1 - current_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old.ref = ref_;
    ++ref_.epoch;  // cursors of the old segment's kernels never match the new one's
    ref_.arena = segments_[next].header;
    ref_.chunks = segments_[next].chunks;
    current_ = next;
    PublishRefs();
  }
  if (!switch_.SwitchInStreamOrder(modules, &pinned_->dark_ref[next], stream, old.switched)) {
    failed_ = true;  // some modules may point at either segment: stop using the arena
    Log().error("profiling stops on GPU {}: the profile buffer could not be switched", facts_.info.ordinal);
    return false;
  }
  __atomic_store_n(&pinned_->claim_sample, 0u, __ATOMIC_RELAXED);
  switch_.EndGeneration();
  switches_.fetch_add(1, std::memory_order_relaxed);
  Log().debug("GPU {}: segment {} switched away from at call {}", facts_.info.ordinal, 1 - current_, correlation_id);
  std::lock_guard<std::mutex> lock(mu_);
  old.correlation_limit = correlation_id;
  old.kernels = cycle_kernels_;
  old.mixed = cycle_mixed_;
  retiring_.store(true, std::memory_order_release);
  NextGeneration();
  return true;
}

void DeviceContext::AwaitSwitch(GpuStream stream, bool per_thread) {
  if (switch_.switch_pending()) switch_.AwaitSwitch(per_thread ? kPerThreadStream : stream);
}

uint64_t DeviceContext::ProjectedReadBackBytes() {
  std::lock_guard<std::mutex> lock(mu_);
  const double chunks = std::min(std::ceil(projected_chunks_), static_cast<double>(ref_.num_chunks));
  return std::min(static_cast<uint64_t>(chunks) << ref_.chunk_shift, chunk_region_bytes_);
}

bool DeviceContext::StagingHasRoom() {
  return !staging_.available() || staging_.HasRoom(ProjectedReadBackBytes());
}

bool DeviceContext::VisitChunks(ArenaSnapshot* snapshot,
                                const std::function<void(const uint8_t*, uint32_t)>& visit) {
  if (staging_.Visit(snapshot, visit, facts_.info.ordinal)) return true;
  failed_ = true;
  return false;
}

void DeviceContext::FetchAtUnload(ArenaSnapshot* snapshot, const std::function<void(const ArenaSnapshot&)>& scan) {
  staging_.FetchAtUnload(snapshot, scan, stream_, facts_.info.ordinal);
}

bool DeviceContext::Staged(const ArenaSnapshot& snapshot) { return staging_.Staged(snapshot); }

}  // namespace smprof::injector
