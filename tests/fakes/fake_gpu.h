// FakeGpu: the injector's Gpu interface over host memory, for CPU tests.
//
// "Device memory" is a set of host allocations at fake device addresses.
// Modules are registered by the test with their kernels; an opted-in module
// gets an arena reference (wire::ArenaRef) and a name base in fake device
// memory, and its marker names after the name base. Streams run their work at
// once unless a test holds them (Hold): then operations queue in order until
// Release, which is how a test keeps "earlier work" in flight. A fake kernel
// (Launch) behaves as the device recorder does: it reads its module's arena
// reference *when it runs*, records nothing while the reference is dark, and
// otherwise claims chunks and writes chunk headers and events, counting
// drops when the arena is full; its CUPTI record goes to an ActivityStore.
//
// Thread-safe (one mutex), so TSan tests can launch from several threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "injector/activity_store.h"
#include "injector/gpu.h"
#include "injector/kernel_table.h"
#include "smprof/detail/arena_protocol.h"
#include "smprof/wire.h"

namespace smprof::injector::fake {

class FakeGpu final : public Gpu {
 public:
  struct Module {
    GpuModule handle = nullptr;
    bool opted_in = false;
    DevPtr arena_ref = 0;
    DevPtr name_base = 0;
    std::vector<std::string> names;  // name i is stored at name_base + 16 + 64 * i
  };

  FakeGpu() = default;

  // --- test setup --------------------------------------------------------
  GpuModule AddModule(bool opted_in, std::vector<std::string> names = {"load", "compute"}) {
    std::lock_guard<std::mutex> lock(mu_);
    Module m;
    m.handle = reinterpret_cast<GpuModule>(next_handle_++);
    m.opted_in = opted_in;
    m.names = std::move(names);
    if (opted_in) {
      m.arena_ref = AllocLocked(sizeof(wire::ArenaRef));
      m.name_base = AllocLocked(16 + 64 * m.names.size());
      for (size_t i = 0; i < m.names.size(); ++i) {
        std::memcpy(At(m.name_base + 16 + 64 * i), m.names[i].c_str(), m.names[i].size() + 1);
      }
    }
    modules_[m.handle] = m;
    return m.handle;
  }
  GpuFunction AddFunction(GpuModule module, std::string symbol = "") {
    std::lock_guard<std::mutex> lock(mu_);
    auto f = reinterpret_cast<GpuFunction>(next_handle_++);
    functions_[f] = module;
    symbols_[f] = std::move(symbol);
    return f;
  }
  // A graph of kernel nodes: (function, warps).
  void* AddGraph(std::vector<std::pair<GpuFunction, uint32_t>> nodes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto g = reinterpret_cast<void*>(next_handle_++);
    graphs_[g] = std::move(nodes);
    return g;
  }
  // Its replay: every node runs as a kernel with the graph launch's correlation id.
  void LaunchGraph(void* graph, GpuStream stream, uint64_t correlation, uint32_t ranges, ActivityStore* activity) {
    std::vector<std::pair<GpuFunction, uint32_t>> nodes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      nodes = graphs_.at(graph);
    }
    for (const auto& [f, warps] : nodes) {
      GpuModule module;
      std::string symbol;
      {
        std::lock_guard<std::mutex> lock(mu_);
        module = functions_.at(f);
        symbol = symbols_.at(f);
      }
      Launch(module, stream, symbol, correlation, warps, ranges, activity, /*deliver_record=*/true,
             static_cast<uint32_t>(reinterpret_cast<uintptr_t>(graph)));
    }
  }
  GpuStream AddStream() {
    std::lock_guard<std::mutex> lock(mu_);
    auto s = reinterpret_cast<GpuStream>(next_handle_++);
    streams_[s];
    return s;
  }
  void SetCapturing(GpuStream s, bool capturing) {
    std::lock_guard<std::mutex> lock(mu_);
    streams_[s].capturing = capturing;
  }
  void Hold(GpuStream s) {
    std::lock_guard<std::mutex> lock(mu_);
    streams_[s].held = true;
  }
  // Runs what the stream queued, in order.
  void Release(GpuStream s) {
    std::deque<std::function<void()>> work;
    {
      std::lock_guard<std::mutex> lock(mu_);
      streams_[s].held = false;
      work.swap(streams_[s].queue);
    }
    for (auto& w : work) w();
  }
  // Copies queued on application streams (not smprof's own), in order.
  struct AppCopy {
    GpuStream stream;
    DevPtr dst;
    uint64_t value;
  };
  std::vector<AppCopy> app_copies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return app_copies_;
  }

  // Its memory goes (names and arena reference read as zeros from now on).
  void UnloadModule(GpuModule module) {
    std::lock_guard<std::mutex> lock(mu_);
    const Module& m = modules_.at(module);
    if (!m.opted_in) return;
    std::memset(At(m.name_base), 0, 16 + 64 * m.names.size());
    std::memset(At(m.arena_ref), 0, sizeof(wire::ArenaRef));
  }

  // An opted-in module loaded where the unloaded `old` was: its names at
  // old's name addresses (no more of them than old had).
  GpuModule AddModuleInPlaceOf(GpuModule old, std::vector<std::string> names) {
    const GpuModule module = AddModule(true, names);
    std::lock_guard<std::mutex> lock(mu_);
    Module& m = modules_.at(module);
    m.name_base = modules_.at(old).name_base;
    for (size_t i = 0; i < m.names.size() && i < modules_.at(old).names.size(); ++i) {
      std::memcpy(At(m.name_base + 16 + 64 * i), m.names[i].c_str(), std::min<size_t>(m.names[i].size() + 1, 63));
    }
    return module;
  }
  // Reads the module's arena reference as a kernel would.
  wire::ArenaRef Ref(GpuModule module) {
    std::lock_guard<std::mutex> lock(mu_);
    wire::ArenaRef ref;
    std::memcpy(&ref, At(modules_.at(module).arena_ref), sizeof(ref));
    return ref;
  }

  // A launch of `warps` warps of a kernel of `module` on `stream`, each warp
  // recording `ranges` BEGIN/END pairs of name 0; the kernel runs when the
  // stream reaches it. Its CUPTI record (named `mangled`, correlation id
  // `correlation`) goes to `activity` when it has run, unless
  // `deliver_record` is false (then the test adds it later with DeliverLate).
  void Launch(GpuModule module, GpuStream stream, const std::string& mangled, uint64_t correlation, uint32_t warps,
              uint32_t ranges, ActivityStore* activity, bool deliver_record = true, uint32_t graph_id = 0) {
    const uint64_t grid = next_grid_.fetch_add(1);
    if (activity != nullptr && deliver_record) {
      std::lock_guard<std::mutex> lock(mu_);
      if (buffer_records_) {
        cupti_buffer_.push_back(BufferedRecord{grid, false, KernelRecord{}});
        buffer_store_ = activity;
      }
    }
    Enqueue(stream, [=] {
      RunKernel(module, stream, mangled, correlation, grid, warps, ranges, activity, deliver_record, graph_id);
    });
  }
  // From now on kernel records wait in a buffer, as in CUPTI's: a launch
  // takes its place there, its kernel completes it, and FlushActivity hands
  // the buffer over only when every record in it is complete (or when told
  // to take incomplete ones too: then the complete ones).
  void BufferRecords() {
    std::lock_guard<std::mutex> lock(mu_);
    buffer_records_ = true;
  }
  // While held, FlushActivity waits, but on the thread that held them.
  void HoldFlushes(bool hold) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_flushes_ = hold;
    flush_holder_ = std::this_thread::get_id();
    held_cv_.notify_all();
  }
  void DeliverLate(ActivityStore* activity) {
    std::vector<KernelRecord> late;
    {
      std::lock_guard<std::mutex> lock(mu_);
      late.swap(late_);
    }
    for (auto& r : late) activity->Add(std::move(r));
  }

  // Stats of what fake kernels did.
  uint64_t events_written() const { return events_written_.load(); }
  uint64_t kernels_that_recorded() const { return kernels_recorded_.load(); }
  uint64_t kernels_run() const { return kernels_run_.load(); }
  // The chunk size each recording kernel found, in launch order.
  std::vector<uint32_t> chunk_sizes_recorded() const {
    std::lock_guard<std::mutex> lock(mu_);
    return chunk_sizes_;
  }

  // --- Gpu -----------------------------------------------------------------
  uint64_t Now() override { return clock_.fetch_add(1000) + 1000; }
  bool PushContext(GpuCtx) override { return true; }
  void PopContext() override {}
  bool SetUpDevice(DeviceFacts* facts) override {
    facts->info.name = "Fake GPU";
    facts->info.sm_count = 4;
    facts->info.sm_clock_khz = 1000000;
    facts->context_id = 7;
    facts->cycles_per_ns = 1.0;
    return true;
  }
  bool DeviceMemory(uint64_t* free_bytes, uint64_t* total_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    *free_bytes = free_bytes_;
    *total_bytes = total_bytes_;
    return true;
  }
  // What DeviceMemory reports (an automatic buffer is sized from it).
  void set_device_memory(uint64_t free_bytes, uint64_t total_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_bytes_ = free_bytes;
    total_bytes_ = total_bytes;
  }
  // The sizes of the device allocations made so far, in order.
  std::vector<size_t> allocation_sizes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return allocation_sizes_;
  }
  bool Allocate(size_t bytes, DevPtr* ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_allocations_ || allocations_left_ == 0) return false;
    if (allocations_left_ > 0) --allocations_left_;
    if (bytes > largest_allocation_) return false;
    allocation_sizes_.push_back(bytes);
    *ptr = AllocLocked(bytes);
    return true;
  }
  void Free(DevPtr ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    memory_.erase(ptr);
  }
  void* AllocatePinned(size_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pinned_by_.push_back(std::this_thread::get_id());
    }
    return new uint8_t[bytes]();
  }
  // How many page-locked buffers were allocated.
  size_t pinned_allocations() {
    std::lock_guard<std::mutex> lock(mu_);
    return pinned_by_.size();
  }
  void FreePinned(void* ptr) override { delete[] static_cast<uint8_t*>(ptr); }
  bool CreateStream(GpuStream* stream) override {
    *stream = AddStream();
    std::lock_guard<std::mutex> lock(mu_);
    own_streams_.push_back(*stream);
    return true;
  }
  void DestroyStream(GpuStream) override {}
  bool CopyToDevice(DevPtr dst, const void* src, size_t bytes, GpuStream stream) override {
    std::vector<uint8_t> data(static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(src) + bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!IsOwn(stream)) {
        uint64_t value = 0;
        std::memcpy(&value, data.data(), std::min<size_t>(8, bytes));
        app_copies_.push_back(AppCopy{stream, dst, value});
      }
    }
    Enqueue(stream, [this, dst, data] {
      std::lock_guard<std::mutex> lock(mu_);
      std::memcpy(At(dst), data.data(), data.size());
    });
    return true;
  }
  bool CopyToHost(void* dst, DevPtr src, size_t bytes, GpuStream stream) override {
    if (bytes >= 1024) {
      std::unique_lock<std::mutex> lock(mu_);
      host_copiers_.push_back(std::this_thread::get_id());
      if (fail_next_copy_) {
        fail_next_copy_ = false;
        return false;
      }
      if (hold_next_copy_) {
        // As a driver call waits while another thread is in a callback.
        hold_next_copy_ = false;
        ++held_copies_;
        held_cv_.notify_all();
        held_cv_.wait(lock, [this] { return release_copies_; });
        --held_copies_;
        if (fail_held_copies_) return false;
      }
    }
    Enqueue(stream, [this, dst, src, bytes] {
      std::lock_guard<std::mutex> lock(mu_);
      if (bytes == sizeof(uint32_t) && reinterpret_cast<uintptr_t>(dst) % sizeof(uint32_t) == 0) {
        // A word the host polls while the GPU writes it (DeviceContext::Poll).
        uint32_t word;
        std::memcpy(&word, At(src), sizeof(word));
        __atomic_store_n(static_cast<uint32_t*>(dst), word, __ATOMIC_RELAXED);
      } else {
        std::memcpy(dst, At(src), bytes);
        if (bytes >= 1024) {  // chunks read back
          ++large_copies_;
          held_cv_.notify_all();
        }
      }
    });
    return true;
  }
  bool CopyOnDevice(DevPtr dst, DevPtr src, size_t bytes, GpuStream stream) override {
    Enqueue(stream, [this, dst, src, bytes] {
      std::lock_guard<std::mutex> lock(mu_);
      std::memmove(At(dst), At(src), bytes);
      ++device_copies_;
      held_cv_.notify_all();
    });
    return true;
  }
  // Device memory allocations that may still succeed (then they fail).
  void set_allocations_left(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    allocations_left_ = n;
  }
  // Read-back copies to the host (1 KiB or more), by any thread.
  size_t host_copies() {
    std::lock_guard<std::mutex> lock(mu_);
    return host_copiers_.size();
  }
  // Read-back copies to the host (1 KiB or more) that thread `t` queued.
  size_t host_copies_from(std::thread::id t) {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<size_t>(std::count(host_copiers_.begin(), host_copiers_.end(), t));
  }
  // Copies from device to device memory (staged read-backs) so far.
  size_t device_copies() {
    std::lock_guard<std::mutex> lock(mu_);
    return device_copies_;
  }
  bool Fill(DevPtr dst, uint8_t value, size_t bytes, GpuStream stream) override {
    Enqueue(stream, [this, dst, value, bytes] {
      std::lock_guard<std::mutex> lock(mu_);
      std::memset(At(dst), value, bytes);
    });
    return true;
  }
  bool Wait(GpuStream stream, std::chrono::nanoseconds) override { return Query(stream) == StreamState::kIdle; }
  // Events: a record queues a marker on the stream; the event is done once
  // the marker of its latest record has run.
  bool CreateEvent(GpuEvent* event) override {
    std::lock_guard<std::mutex> lock(mu_);
    *event = reinterpret_cast<GpuEvent>(next_handle_++);
    events_[*event] = EventState{0, true};
    return true;
  }
  void DestroyEvent(GpuEvent event) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.erase(event);
  }
  bool RecordEvent(GpuEvent event, GpuStream stream) override {
    uint64_t record;
    {
      std::lock_guard<std::mutex> lock(mu_);
      EventState& e = events_.at(event);
      record = ++e.record;
      e.done = false;
      ++events_recorded_;
    }
    Enqueue(stream, [this, event, record] {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = events_.find(event);
      if (it != events_.end() && it->second.record == record) it->second.done = true;
    });
    return true;
  }
  StreamState QueryEvent(GpuEvent event) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = events_.find(event);
    if (it == events_.end()) return StreamState::kGone;
    return it->second.done ? StreamState::kIdle : StreamState::kBusy;
  }
  bool WaitEvent(GpuEvent event, std::chrono::nanoseconds) override { return QueryEvent(event) == StreamState::kIdle; }
  // Events recorded so far (smprof's segment switches).
  size_t events_recorded() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_recorded_;
  }
  StreamState Query(GpuStream stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(stream);
    if (stream == kPerThreadStream || stream == nullptr || stream == kLegacyStream) return StreamState::kIdle;
    if (it == streams_.end()) return StreamState::kGone;
    if (it->second.capturing) return StreamState::kCapturing;
    return it->second.queue.empty() ? StreamState::kIdle : StreamState::kBusy;
  }
  bool Capturing(GpuStream stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(stream);
    return it != streams_.end() && it->second.capturing;
  }
  bool SynchronizeContext() override { return true; }
  GpuCtx StreamContext(GpuStream) override { return context; }
  bool FunctionModule(GpuFunction f, GpuModule* module) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = functions_.find(f);
    if (it == functions_.end()) return false;
    *module = it->second;
    return true;
  }
  Lookup ModuleGlobal(GpuModule module, const char* name, DevPtr* ptr, size_t* bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    const Module& m = modules_.at(module);
    const int abi = static_cast<int>(wire::kArenaAbiVersion);
    if (!m.opted_in) return Lookup::kNotFound;
    if (KernelTable::ArenaSymbol(abi) == name) {
      *ptr = m.arena_ref;
      *bytes = sizeof(wire::ArenaRef);
      return Lookup::kFound;
    }
    if (KernelTable::NameBaseSymbol(abi) == name) {
      *ptr = m.name_base;
      *bytes = 1;
      return Lookup::kFound;
    }
    return Lookup::kNotFound;
  }
  std::string ReadString(DevPtr address, GpuStream) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (std::find(unheld_readers_.begin(), unheld_readers_.end(), std::this_thread::get_id()) ==
        unheld_readers_.end()) {
      ++held_reads_;
      held_cv_.notify_all();
      held_cv_.wait(lock, [this] { return !hold_reads_; });
      --held_reads_;
    }
    ++string_reads_;
    return std::string(reinterpret_cast<const char*>(At(address)));
  }
  bool ProbeClock(uint64_t*, uint64_t*) override { return false; }
  bool GraphKernels(void* graph, std::vector<GraphKernel>* kernels) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [f, warps] : graphs_.at(graph)) kernels->push_back(GraphKernel{f, symbols_.at(f), warps});
    return true;
  }
  // kFakeIllegalAddress is the one failure of a kernel's execution.
  static constexpr int kFakeIllegalAddress = 700;
  std::string ExecutionError(int result) override {
    return result == kFakeIllegalAddress ? "FAKE_ERROR_ILLEGAL_ADDRESS: an illegal memory access" : "";
  }
  void FlushActivity(bool incomplete_too, bool /*if_free*/) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (std::this_thread::get_id() != flush_holder_) held_cv_.wait(lock, [this] { return !hold_flushes_; });
    if (incomplete_too) ++final_flushes_;
    const bool whole = std::all_of(cupti_buffer_.begin(), cupti_buffer_.end(),
                                   [](const BufferedRecord& b) { return b.complete; });
    if (buffer_store_ != nullptr && (whole || incomplete_too)) {
      std::vector<BufferedRecord> left;
      for (BufferedRecord& b : cupti_buffer_) {
        if (b.complete) {
          buffer_store_->Add(std::move(b.record));
        } else {
          left.push_back(std::move(b));
        }
      }
      cupti_buffer_.swap(left);
    }
    held_cv_.notify_all();
  }

  // While held, ReadString waits: a harvest thread pauses between taking
  // its records and shipping (it reads the names of what it ships).
  // The next read-back copy to the host fails at once.
  void FailNextHostCopy() {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_copy_ = true;
  }
  // The next read-back copy to the host waits until released; released
  // with `fail`, it fails (as a copy from a context destroyed meanwhile).
  void HoldNextHostCopy() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_next_copy_ = true;
    release_copies_ = false;
  }
  void ReleaseHostCopy(bool fail) {
    std::lock_guard<std::mutex> lock(mu_);
    release_copies_ = true;
    fail_held_copies_ = fail;
    held_cv_.notify_all();
  }
  size_t held_copies_locked() const { return held_copies_; }
  // HoldStringReads does not hold the calling thread's reads.
  void NeverHoldMyStringReads() {
    std::lock_guard<std::mutex> lock(mu_);
    unheld_readers_.push_back(std::this_thread::get_id());
  }
  void HoldStringReads(bool hold) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_reads_ = hold;
    held_cv_.notify_all();
  }
  // Waits until `done()` (called with the fake's lock held) or `timeout`.
  template <typename Done>
  bool WaitUntil(Done done, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return held_cv_.wait_for(lock, timeout, done);
  }
  // Calls waiting in ReadString; FlushActivity calls that took incomplete
  // records too (a final harvest's). Call inside WaitUntil.
  size_t held_string_reads_locked() const { return held_reads_; }
  // Copies of chunks: of 1 KiB or more to the host, and on the device
  // (read-backs and their fetches). Call inside WaitUntil.
  size_t chunk_copies_locked() const { return large_copies_ + device_copies_; }
  size_t final_activity_flushes_locked() const { return final_flushes_; }

  uint64_t string_reads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return string_reads_;
  }

  GpuCtx context = reinterpret_cast<GpuCtx>(0xC0);
  // Allocations larger than this fail (as on a GPU with less free memory).
  size_t largest_allocation_ = SIZE_MAX;
  bool fail_allocations_ = false;
  int allocations_left_ = -1;                  // -1: no limit
  std::vector<std::thread::id> host_copiers_;  // callers of read-back copies to the host
  uint32_t events_written_in_last_kernel = 0;

 private:
  struct EventState {
    uint64_t record = 0;  // its latest record
    bool done = true;
  };
  struct Stream {
    bool held = false;
    bool capturing = false;
    std::deque<std::function<void()>> queue;
  };

  DevPtr AllocLocked(size_t bytes) {
    const DevPtr at = next_address_;
    next_address_ += (bytes + 0xffff) / 0x10000 * 0x10000 + 0x10000;
    memory_[at].assign(bytes, 0);
    return at;
  }
  uint8_t* At(DevPtr address) {
    auto it = memory_.upper_bound(address);
    if (it == memory_.begin()) throw std::runtime_error("fake device address out of range");
    --it;
    if (address - it->first > it->second.size()) throw std::runtime_error("fake device address out of range");
    return it->second.data() + (address - it->first);
  }
  bool IsOwn(GpuStream s) const { return std::find(own_streams_.begin(), own_streams_.end(), s) != own_streams_.end(); }
  void Enqueue(GpuStream stream, std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = streams_.find(stream);
      if (it != streams_.end() && (it->second.held || !it->second.queue.empty())) {
        it->second.queue.push_back(std::move(work));
        return;
      }
    }
    work();
  }

  template <typename T>
  T Read(DevPtr at) {
    T t;
    std::memcpy(&t, At(at), sizeof(T));
    return t;
  }
  template <typename T>
  void Write(DevPtr at, const T& t) {
    std::memcpy(At(at), &t, sizeof(T));
  }

  void RunKernel(GpuModule module, GpuStream stream, const std::string& mangled, uint64_t correlation, uint64_t grid,
                 uint32_t warps, uint32_t ranges, ActivityStore* activity, bool deliver, uint32_t graph_id) {
    kernels_run_.fetch_add(1);
    const uint64_t start = clock_.fetch_add(10) + 10;
    uint64_t end = start;
    bool recorded = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const Module& m = modules_.at(module);
      const auto ref = m.opted_in ? Read<wire::ArenaRef>(m.arena_ref) : wire::ArenaRef{};
      if (ref.arena != 0) {
        recorded = true;
        const uint32_t chunk_bytes = 1u << ref.chunk_shift;
        chunk_sizes_.push_back(chunk_bytes);
        const uint32_t per_chunk = (chunk_bytes - sizeof(wire::ChunkHeader)) / sizeof(wire::Event);
        for (uint32_t w = 0; w < warps; ++w) {
          uint32_t slot = per_chunk;
          DevPtr chunk = 0;
          uint64_t clock = 100;
          for (uint32_t e = 0; e < 2 * ranges; ++e) {
            if (slot == per_chunk) {
              auto header = Read<wire::ArenaHeader>(ref.arena);
              const uint32_t index = header.next_chunk++;
              Write(ref.arena, header);
              if (index >= ref.num_chunks) {
                header.dropped_events += 2 * ranges - e;
                Write(ref.arena, header);
                break;
              }
              chunk = protocol::ChunkAddress(ref.chunks, index, ref.chunk_shift);
              const uint64_t words[protocol::kChunkHeaderWords] = {grid,
                                                                   m.name_base,
                                                                   protocol::BlockWord(w / 4, 0, 0),
                                                                   protocol::WarpWord(w % 4, w % 4, w % 4, 0),
                                                                   clock,
                                                                   start + clock};
              std::memcpy(At(chunk), words, sizeof(words));
              slot = 0;
            }
            const uint64_t event[2] = {protocol::EventLow(clock, e % 2 == 0 ? wire::kEventBegin : wire::kEventEnd),
                                       protocol::EventHigh(16, 0)};
            std::memcpy(At(chunk + sizeof(wire::ChunkHeader) + slot * sizeof(wire::Event)), event, sizeof(event));
            ++slot;
            clock += 5;
            events_written_.fetch_add(1);
          }
          end = std::max(end, start + clock);
        }
      }
      clock_.fetch_add(end - start + 10);
    }
    if (recorded) kernels_recorded_.fetch_add(1);
    KernelRecord r;
    r.grid_id = grid;
    r.start_ns = start;
    r.end_ns = end + 5;
    r.correlation_id = correlation;
    r.graph_id = graph_id;
    r.stream_id = reinterpret_cast<uintptr_t>(stream);
    r.context_id = 7;
    r.grid[0] = (warps + 3) / 4;
    r.grid[1] = r.grid[2] = 1;
    r.block[0] = 128;
    r.block[1] = r.block[2] = 1;
    r.name = mangled;
    if (activity == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto slot = std::find_if(cupti_buffer_.begin(), cupti_buffer_.end(),
                               [&](const BufferedRecord& b) { return b.grid == grid; });
      if (deliver && slot != cupti_buffer_.end()) {
        slot->record = std::move(r);
        slot->complete = true;
        return;
      }
    }
    if (deliver) {
      activity->Add(std::move(r));
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      late_.push_back(std::move(r));
    }
  }

  mutable std::mutex mu_;
  uint64_t free_bytes_ = uint64_t{1} << 30, total_bytes_ = uint64_t{2} << 30;
  std::vector<size_t> allocation_sizes_;
  std::vector<std::thread::id> pinned_by_;  // AllocatePinned's callers
  uintptr_t next_handle_ = 0x1000;
  DevPtr next_address_ = 0x10000000;
  std::map<DevPtr, std::vector<uint8_t>> memory_;
  std::unordered_map<GpuModule, Module> modules_;
  std::unordered_map<GpuFunction, GpuModule> functions_;
  std::unordered_map<GpuFunction, std::string> symbols_;
  std::unordered_map<void*, std::vector<std::pair<GpuFunction, uint32_t>>> graphs_;
  std::unordered_map<GpuStream, Stream> streams_;
  std::vector<GpuStream> own_streams_;
  std::unordered_map<GpuEvent, EventState> events_;
  size_t events_recorded_ = 0;
  std::vector<AppCopy> app_copies_;
  std::vector<KernelRecord> late_;
  std::atomic<uint64_t> clock_{1000000};
  std::atomic<uint64_t> next_grid_{1};
  std::atomic<uint64_t> events_written_{0};
  std::atomic<uint64_t> kernels_recorded_{0};
  std::vector<uint32_t> chunk_sizes_;  // mu_
  std::atomic<uint64_t> kernels_run_{0};
  uint64_t string_reads_ = 0;
  std::condition_variable held_cv_;
  bool hold_reads_ = false;
  std::vector<std::thread::id> unheld_readers_;
  size_t held_reads_ = 0;
  size_t large_copies_ = 0;  // mu_
  size_t device_copies_ = 0;
  bool hold_next_copy_ = false, release_copies_ = false, fail_held_copies_ = false, fail_next_copy_ = false;
  size_t held_copies_ = 0;
  size_t final_flushes_ = 0;
  struct BufferedRecord {
    uint64_t grid;
    bool complete;
    KernelRecord record;
  };
  bool buffer_records_ = false, hold_flushes_ = false;
  std::thread::id flush_holder_;
  std::vector<BufferedRecord> cupti_buffer_;  // mu_
  ActivityStore* buffer_store_ = nullptr;
};

}  // namespace smprof::injector::fake
