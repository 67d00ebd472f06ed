// Benchmark: the per-event cost of intra-kernel marker designs, side by side
// in one run on the GPU it runs on. Run it alone, not under smprof-run (it
// publishes its own arena):
//   smprof_bench_recorder_cost           smprof's recorder slow paths out of line (default)
//   smprof_bench_recorder_cost_outline   the same, built with -DSMPROF_OUTLINE_RECORDER
//
// Recorders. Each is a small device class: the constructor is the per-warp
// setup at kernel start, Mark() one event (inside the timed loop), Finish()
// the end-of-kernel work (outside the timed loop, inside the kernel time).
// The reference designs are modelled from their published sources, named at
// each class; all record from one lane per warp, in every warp:
//   1. floor        %globaltimer and one st.global.v2.u64 by lane 0 at a cursor
//                   in a register: what any recorder has to do.
//   2. Proton       Triton's intra-kernel mode: 8-byte %clock64 records in a
//                   per-warp ring in shared memory, copied out at kernel end.
//   3. SM Profiler / FlashInfer  a per-(block, warp) write pointer in a
//                   register; 8-byte {tag, %globaltimer_lo} entries.
//   4. CuTe DSL     atomic mode: a global atomicAdd takes a slot per event,
//                   then a 32-byte record is stored.
//   5-7. smprof     SMPROF_INSTANT idle (arena reference zero: no smprof-run),
//                   and recording, each without and with SMPROF_CONTEXT().
//   8-   smprof     every kind of marker of the device API, recording in a
//                   context ("ctx: ..."): values (a 64-bit one takes two
//                   slots), a counter, a phase boundary, predicates that hold
//                   and that do not (the latter records nothing: its cost is
//                   the vote), warp choice, an async begin, a formatted name.
// For the recording rows the program publishes an arena as the injector does
// (allocate, zero, write the ArenaHeader, cudaMemcpyToSymbol of g_arena),
// resets it before every launch as the injector does between harvests (zero
// the used chunks and the counters, bump the epoch, republish) and checks
// after every launch that nothing was dropped or unplaced and that the chunks
// hold exactly the events the kernel recorded; otherwise it prints FAILED and
// exits 1: a broken recorder is never measured silently.
//
// Cost per event. Each warp times a loop of 64 markers with clock64() on
// lane 0; between markers it runs 0, 8, 32 or 128 independent FMAs (4
// chains), the same in the loop without markers. Cost = (marked loop -
// unmarked loop) / 64 cycles, from medians over warps and launches (the first
// launch of each kernel warms up). The FMA columns show how much of a marker
// the warp's own independent work hides. smprof rows include the warp's chunk
// claim at its first event: one per 64 events here, one per 253 events of a
// 4096-byte chunk in steady state.
// Configurations: one warp (1 block of 32 threads), and the full GPU (2
// blocks of 1024 threads per SM, registers capped at 32 so that all 64 warps
// per SM are resident, 128 FMAs per marker), where the figure that counts is
// the kernel time (cudaEvent, best of 10 launches) against the unmarked one.
//
// Every timer read and store of the recorders is an `asm volatile` (smprof's
// too), and each iteration ends with an `asm volatile` that takes the
// accumulators and clobbers memory: neither markers nor FMAs can leave the
// loop or cross the clock64() reads.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <smprof/smprof.cuh>
#include <string>
#include <vector>

#define CHECK(call)                                                                                                \
  do {                                                                                                             \
    const cudaError_t check_error_ = (call);                                                                       \
    if (check_error_ != cudaSuccess) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(check_error_)); \
      std::exit(1);                                                                                                \
    }                                                                                                              \
  } while (0)

namespace {

namespace wire = smprof::wire;

constexpr uint32_t kEvents = 64;  // markers per warp per launch
constexpr int kChains = 4;        // independent FMA accumulator chains
constexpr std::array<int, 4> kFmaCounts = {0, 8, 32, 128};
constexpr int kFullGpuFmas = 128;  // FMAs per marker in the full-GPU configuration
constexpr int kFullBlockThreads = 1024;
constexpr int kFullBlocksPerSm = 2;  // 64 warps per SM
constexpr int kMaxWarpsPerBlock = kFullBlockThreads / 32;
constexpr int kOneWarpLaunches = 21;       // the first is a warm-up
constexpr int kFullGpuLaunches = 11;       // the first is a warm-up
constexpr uint32_t kArenaChunkShift = 12;  // 4096-byte chunks
constexpr size_t kArenaBytes = size_t{256} << 20;

// Everything a timed kernel gets; one set of buffers serves every recorder.
struct KernelArgs {
  unsigned char* events;               // the reference recorders' event buffer
  unsigned long long* slot_counter;    // the CuTe DSL recorder's global slot counter
  unsigned long long atomic_capacity;  // ... and how many 32-byte records `events` holds
  long long* warp_cycles;              // per warp: clock64 cycles of the timed loop
  float* sink;                         // written only if the accumulators equal `never`
  float mul, add, never;
};

// ---------------------------------------------------------------------------
// Device helpers (1-D blocks only)
// ---------------------------------------------------------------------------

__device__ __forceinline__ uint32_t LaneId() { return threadIdx.x & 31u; }
__device__ __forceinline__ uint32_t WarpInBlock() { return threadIdx.x >> 5; }
__device__ __forceinline__ uint32_t WarpsPerBlock() { return blockDim.x >> 5; }
__device__ __forceinline__ uint32_t GlobalWarp() { return blockIdx.x * WarpsPerBlock() + WarpInBlock(); }

// mov.u64 %r, %clock64; the memory clobber also orders it against the markers' stores.
__device__ __forceinline__ long long ReadClock64() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}

// mov.u32 %r, %globaltimer_lo;
__device__ __forceinline__ uint32_t ReadGlobalTimerLo() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
  return t;
}


// @pred st.shared.v2.b32
__device__ __forceinline__ void StoreSharedV2If(bool pred, uint32_t addr, uint32_t lo, uint32_t hi) {
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p st.shared.v2.b32 [%1], {%2, %3};\n}" ::"r"(
                   static_cast<uint32_t>(pred)),
               "r"(addr), "r"(lo), "r"(hi)
               : "memory");
}

// st.global.cs.u64 (cache-streaming)
__device__ __forceinline__ void StoreGlobalStreaming(uint64_t addr, uint64_t value) {
  asm volatile("st.global.cs.u64 [%0], %1;" ::"l"(addr), "l"(value) : "memory");
}

// ---------------------------------------------------------------------------
// Recorders
// ---------------------------------------------------------------------------

// The loop without markers ("compiled out"): the baseline every cost is taken against.
class NoMarkers {
 public:
  __device__ explicit NoMarkers(const KernelArgs&) {}
  __device__ void Mark(uint32_t) {}
  __device__ void Finish(const KernelArgs&) {}
};

// 1. The floor: a %globaltimer read and one 16-byte store by lane 0 at a
// cursor in a register, set once to the warp's slice of a big buffer.
class FloorRecorder {
 public:
  __device__ explicit FloorRecorder(const KernelArgs& args)
      : cursor_(reinterpret_cast<uint64_t>(args.events) + uint64_t{GlobalWarp()} * kEvents * 16),
        writer_(LaneId() == 0) {}
  __device__ void Mark(uint32_t i) {
    smprof::detail::Store16If(writer_, cursor_, smprof::detail::sreg::GlobalTimer(), i);
    cursor_ += 16;
  }
  __device__ void Finish(const KernelArgs&) {}

 private:
  uint64_t cursor_;
  bool writer_;
};

// 2. Proton (Triton intra-kernel profiling, circular buffer in shared memory;
// lowering of proton_gpu.circular_store in ProtonGPUToLLVM/Utility.cpp). Each
// warp owns a segment of a block-wide shared-memory buffer and keeps its
// index (in 32-bit words) in a register. A record is 8 bytes: word 0 = start/
// end bit 31 | scope id 30:23 | event type 22:20 | %clock64 bits 32-42 in
// 10:0, word 1 = %clock64 bits 0-31; lane 0 stores it with one predicated
// st.shared.v2.b32 at segment + index mod segment size. Proton's segment is
// buffer size / warps; here 32 records, a power of two (the modulo is an
// AND), so the ring wraps and keeps each warp's latest 32 events, as Proton's
// does once full. Finish() is Proton's finalize: a block barrier, then the
// block copies its buffer and each warp's index to global memory.
constexpr uint32_t kProtonSegmentWords = 2 * 32;
constexpr uint32_t kProtonBlockWords = kMaxWarpsPerBlock * (1 + kProtonSegmentWords);
constexpr uint32_t kProtonTag = (1u << 23) | (2u << 20);  // scope 1, event type MARK, start

__device__ __forceinline__ uint32_t* ProtonSharedBuffer() {
  __shared__ uint32_t buffer[kMaxWarpsPerBlock * kProtonSegmentWords];
  return buffer;
}

class ProtonRecorder {
 public:
  __device__ explicit ProtonRecorder(const KernelArgs&)
      : segment_(static_cast<uint32_t>(__cvta_generic_to_shared(ProtonSharedBuffer())) +
                 WarpInBlock() * kProtonSegmentWords * 4),
        index_(0),
        writer_(LaneId() == 0) {}
  __device__ void Mark(uint32_t) {
    const auto clock = static_cast<uint64_t>(ReadClock64());
    const uint32_t tag = kProtonTag | (static_cast<uint32_t>(clock >> 32) & 0x7ffu);
    const uint32_t offset = (index_ % kProtonSegmentWords) * 4;
    index_ += 2;
    StoreSharedV2If(writer_, segment_ + offset, tag, static_cast<uint32_t>(clock));
  }
  __device__ void Finish(const KernelArgs& args) {
    __syncthreads();
    uint32_t* out = reinterpret_cast<uint32_t*>(args.events) + blockIdx.x * kProtonBlockWords;
    if (writer_) out[WarpInBlock()] = index_;
    const uint32_t* buffer = ProtonSharedBuffer();
    for (uint32_t w = threadIdx.x; w < WarpsPerBlock() * kProtonSegmentWords; w += blockDim.x) {
      out[kMaxWarpsPerBlock + w] = buffer[w];
    }
  }

 private:
  uint32_t segment_;  // shared-memory address of the warp's segment
  uint32_t index_;    // words written so far
  bool writer_;
};

// 3. SM Profiler / FlashInfer (flashinfer/profiler.cuh, PROFILER_INIT and
// PROFILER_EVENT_START; the SM Profiler's SM_PROFILER_INIT and Triton-
// distributed are the same design). "Group" = warp here. The write pointer
// starts at entry 1 + block * groups + group and advances by blocks * groups
// (entries of one event index are interleaved across warps); an entry is
// {tag, %globaltimer_lo} with tag = (block * groups + group) << 12 | event id
// << 2 | kind. The predicated lane (their write_thread_predicate: lane 0)
// stores it and advances the pointer; every lane then runs their
// __threadfence_block().
class FlashInferRecorder {
 public:
  __device__ explicit FlashInferRecorder(const KernelArgs& args) {
    auto* buffer = reinterpret_cast<uint64_t*>(args.events);
    const uint32_t groups = WarpsPerBlock();
    const uint32_t block_group = blockIdx.x * groups + WarpInBlock();
    if (blockIdx.x == 0 && threadIdx.x == 0) buffer[0] = gridDim.x | (uint64_t{groups} << 32);  // {nblocks, ngroups}
    write_ptr_ = buffer + 1 + block_group;
    write_stride_ = gridDim.x * groups;
    tag_base_ = block_group << kBlockGroupShift;
    write_ = LaneId() == 0;
  }
  __device__ void Mark(uint32_t) {
    if (write_) {
      const uint32_t tag = tag_base_ | (kEventId << kEventIdShift) | kEventBegin;
      *write_ptr_ = tag | (uint64_t{ReadGlobalTimerLo()} << 32);
      write_ptr_ += write_stride_;
    }
    __threadfence_block();
  }
  __device__ void Finish(const KernelArgs&) {}

 private:
  static constexpr uint32_t kBlockGroupShift = 12;
  static constexpr uint32_t kEventIdShift = 2;
  static constexpr uint32_t kEventId = 1;
  static constexpr uint32_t kEventBegin = 0;
  uint64_t* write_ptr_;
  uint32_t write_stride_;
  uint32_t tag_base_;
  bool write_;
};

// 4. CuTe DSL profiler, atomic mode (transformer_nuggets cute/profiler:
// profile_region without an event index, elected lane per warp): the lane
// takes a slot with atom.add.u64 on the one global event counter, reads
// %globaltimer, and if the slot is below max_events writes the 32-byte record
// {start_ns, dur_ns, tag, tid} with four st.global.cs.u64. (Their record is a
// whole region, start and duration: one atomic per region.)
class AtomicSlotRecorder {
 public:
  __device__ explicit AtomicSlotRecorder(const KernelArgs& args)
      : counter_(args.slot_counter),
        records_(reinterpret_cast<uint64_t>(args.events)),
        capacity_(args.atomic_capacity),
        tid_(blockIdx.x),
        writer_(LaneId() == 0) {}
  __device__ void Mark(uint32_t) {
    if (!writer_) return;
    const unsigned long long slot = atomicAdd(counter_, 1ull);
    const uint64_t start_ns = smprof::detail::sreg::GlobalTimer();
    if (slot >= capacity_) return;
    const uint64_t record = records_ + slot * 32;
    StoreGlobalStreaming(record, start_ns);
    StoreGlobalStreaming(record + 8, 0);  // dur_ns
    StoreGlobalStreaming(record + 16, kTag);
    StoreGlobalStreaming(record + 24, tid_);
  }
  __device__ void Finish(const KernelArgs&) {}

 private:
  static constexpr uint64_t kTag = 1;
  unsigned long long* counter_;
  uint64_t records_;
  unsigned long long capacity_;
  uint64_t tid_;
  bool writer_;
};

// 5, 6. smprof markers without a profiling context (the shared-memory cursor).
// Idle or recording depending on the arena reference the host published.
class SmprofRecorder {
 public:
  __device__ explicit SmprofRecorder(const KernelArgs&) {}
  __device__ void Mark(uint32_t) { SMPROF_INSTANT("bench"); }
  __device__ void Finish(const KernelArgs&) {}
};

// 7. smprof markers in a profiling context. The recorder is constructed at
// the top of the kernel, and its member is what SMPROF_CONTEXT() declares
// there (`::smprof::Context smprof_ctx`, found by name by the markers).
class SmprofContextRecorder {
 public:
  __device__ explicit SmprofContextRecorder(const KernelArgs&) {}
  __device__ void Mark(uint32_t) { SMPROF_INSTANT("bench"); }
  __device__ void Finish(const KernelArgs&) {}

 private:
  smprof::Context smprof_ctx;  // NOLINT(readability-identifier-naming): the name markers look up
};

// 8-. Each kind of marker of the device API (docs/device-api.md), in a
// profiling context: its Mark is the marker the row names. `i` is the loop
// index (a runtime value the compiler cannot fold).
template <int kKind>
class SmprofApiRecorder {
 public:
  __device__ explicit SmprofApiRecorder(const KernelArgs&) {}
  __device__ void Mark(uint32_t i) {
    if constexpr (kKind == 0) SMPROF_INSTANT("bench", smprof::value(i));
    if constexpr (kKind == 1) SMPROF_INSTANT("bench", smprof::value(uint64_t{i} << 20));
    if constexpr (kKind == 2) SMPROF_COUNTER("bench", i);
    if constexpr (kKind == 3) SMPROF_PHASE("bench");
    if constexpr (kKind == 4) SMPROF_INSTANT("bench", smprof::when(i != ~0u));   // holds: records
    if constexpr (kKind == 5) SMPROF_INSTANT("bench", smprof::when(i == ~0u));   // never holds
    if constexpr (kKind == 6) SMPROF_INSTANT("bench", smprof::on_warps(0, 32));  // every warp of the block
    if constexpr (kKind == 7) SMPROF_ASYNC_BEGIN("bench", i);
    if constexpr (kKind == 8) SMPROF_INSTANT("bench %d", smprof::arg(i));
  }
  __device__ void Finish(const KernelArgs&) {}

 private:
  smprof::Context smprof_ctx;  // NOLINT(readability-identifier-naming): the name markers look up
};

// ---------------------------------------------------------------------------
// The timed kernel
// ---------------------------------------------------------------------------

template <int kFmas>
__device__ __forceinline__ void IndependentFmas(float (&acc)[kChains], float mul, float add) {
  static_assert(kFmas % kChains == 0, "FMAs are split evenly over the chains");
#pragma unroll
  for (int k = 0; k < kFmas / kChains; ++k) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) acc[c] = fmaf(acc[c], mul, add);
  }
}

// The end of an iteration: the accumulators must exist here and memory is
// clobbered, so neither this iteration's FMAs nor its marker move past it.
__device__ __forceinline__ void IterationBarrier(float (&acc)[kChains]) {
  asm volatile("" : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])::"memory");
}

__device__ __forceinline__ void KeepAlive(const float (&acc)[kChains], const KernelArgs& args) {
  const float sum = acc[0] + acc[1] + acc[2] + acc[3];
  if (sum == args.never) args.sink[threadIdx.x] = sum;
}

// kMinBlocksPerSm = kFullBlocksPerSm caps the registers at what 64 warps per
// SM leave (32 per thread), as a kernel written for full occupancy would; the
// one-warp kernels get 1 (64 registers), so a spill there is the recorder's own.
template <class Recorder, int kFmas, int kMinBlocksPerSm>
__global__ void __launch_bounds__(kFullBlockThreads, kMinBlocksPerSm) TimedLoop(KernelArgs args) {
  Recorder recorder(args);
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = 1.0f + 1e-3f * static_cast<float>(threadIdx.x + c);
  const long long t0 = ReadClock64();
#pragma unroll 1
  for (uint32_t i = 0; i < kEvents; ++i) {
    recorder.Mark(i);
    IndependentFmas<kFmas>(acc, args.mul, args.add);
    IterationBarrier(acc);
  }
  const long long t1 = ReadClock64();
  recorder.Finish(args);
  if (LaneId() == 0) args.warp_cycles[GlobalWarp()] = t1 - t0;
  KeepAlive(acc, args);
}

// ---------------------------------------------------------------------------
// Host: the rows of the tables
// ---------------------------------------------------------------------------

using Kernel = void (*)(KernelArgs);
using KernelSet = std::array<Kernel, kFmaCounts.size()>;

// What the smprof arena reference must say while a row runs.
enum class ArenaUse { kIdle, kRecording };

struct Row {
  const char* name;
  ArenaUse arena;
  KernelSet one_warp;  // one kernel per entry of kFmaCounts
  Kernel full_gpu;     // the kFullGpuFmas loop, registers capped for 64 warps per SM
  uint32_t events_per_mark;  // what each Mark records (0: a predicate that never holds)
};

template <class Recorder>
Row MakeRow(const char* name, ArenaUse arena, uint32_t events_per_mark = 1) {
  return {name,
          arena,
          {&TimedLoop<Recorder, kFmaCounts[0], 1>, &TimedLoop<Recorder, kFmaCounts[1], 1>,
           &TimedLoop<Recorder, kFmaCounts[2], 1>, &TimedLoop<Recorder, kFmaCounts[3], 1>},
          &TimedLoop<Recorder, kFullGpuFmas, kFullBlocksPerSm>,
          events_per_mark};
}

constexpr size_t kFloorRow = 0;

std::vector<Row> MarkerRows() {
  return {
      MakeRow<FloorRecorder>("floor (timer + 16 B store)", ArenaUse::kIdle),
      MakeRow<ProtonRecorder>("Proton (smem ring)", ArenaUse::kIdle),
      MakeRow<FlashInferRecorder>("SM Profiler / FlashInfer", ArenaUse::kIdle),
      MakeRow<AtomicSlotRecorder>("CuTe DSL (global atomic)", ArenaUse::kIdle),
      MakeRow<SmprofRecorder>("smprof idle", ArenaUse::kIdle),
      MakeRow<SmprofContextRecorder>("smprof idle, context", ArenaUse::kIdle),
      MakeRow<SmprofRecorder>("smprof recording", ArenaUse::kRecording),
      MakeRow<SmprofContextRecorder>("smprof recording, context", ArenaUse::kRecording),
      MakeRow<SmprofApiRecorder<0>>("ctx: instant + 32-bit value", ArenaUse::kRecording),
      MakeRow<SmprofApiRecorder<1>>("ctx: instant + 64-bit value", ArenaUse::kRecording),
      MakeRow<SmprofApiRecorder<2>>("ctx: counter", ArenaUse::kRecording),
      MakeRow<SmprofApiRecorder<3>>("ctx: phase", ArenaUse::kRecording),
      MakeRow<SmprofApiRecorder<4>>("ctx: when(true)", ArenaUse::kRecording),
      MakeRow<SmprofApiRecorder<5>>("ctx: when(false)", ArenaUse::kRecording, 0),
      MakeRow<SmprofApiRecorder<6>>("ctx: on_warps (selected)", ArenaUse::kRecording),
      MakeRow<SmprofApiRecorder<7>>("ctx: async begin", ArenaUse::kRecording),
      MakeRow<SmprofApiRecorder<8>>("ctx: name with arg", ArenaUse::kRecording),
  };
}

// ---------------------------------------------------------------------------
// Host: the smprof arena, published and reset the way the injector does it
// ---------------------------------------------------------------------------

class Arena {
 public:
  Arena() {
    CHECK(cudaMalloc(&base_, kArenaBytes));
    CHECK(cudaMemset(base_, 0, kArenaBytes));
    const size_t chunk_bytes = size_t{1} << kArenaChunkShift;
    wire::ArenaHeader header{};
    header.magic = wire::kArenaMagic;
    header.abi_version = wire::kArenaAbiVersion;
    header.chunk_bytes = static_cast<uint32_t>(chunk_bytes);
    header.num_chunks = static_cast<uint32_t>((kArenaBytes - chunk_bytes) / chunk_bytes);
    header.chunks_offset = chunk_bytes;  // chunk 0 aligned to chunk_bytes
    CHECK(cudaMemcpy(base_, &header, sizeof(header), cudaMemcpyHostToDevice));
    ref_.arena = reinterpret_cast<uint64_t>(base_);
    ref_.chunks = ref_.arena + header.chunks_offset;
    ref_.num_chunks = header.num_chunks;
    ref_.chunk_shift = kArenaChunkShift;
    ref_.warp_mask = 0xffffffffu;
    ref_.epoch = 0;
  }
  ~Arena() { cudaFree(base_); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  uint32_t NumChunks() const { return ref_.num_chunks; }

  // The state without smprof-run: the arena reference is zero.
  void PublishIdle() const {
    const wire::ArenaRef zero{};
    CHECK(cudaMemcpyToSymbol(smprof::detail::g_arena<smprof::detail::kAbiVersion>, &zero, sizeof(zero)));
  }

  // What the injector does after a harvest: zero the chunks used and the
  // device-written counters, start a new epoch, republish.
  void ResetAndPublish() {
    const uint32_t used = UsedChunks(ReadHeader());
    CHECK(cudaMemset(reinterpret_cast<void*>(ref_.chunks), 0, size_t{used} << kArenaChunkShift));
    CHECK(cudaMemset(base_ + offsetof(wire::ArenaHeader, next_chunk), 0,
                     offsetof(wire::ArenaHeader, reserved2) - offsetof(wire::ArenaHeader, next_chunk)));
    ++ref_.epoch;
    CHECK(cudaMemcpyToSymbol(smprof::detail::g_arena<smprof::detail::kAbiVersion>, &ref_, sizeof(ref_)));
  }

  // After a recording launch: nothing dropped or unplaced, and exactly the
  // events the kernel recorded are in the chunks it claimed.
  void VerifyOrDie(const char* row, uint64_t expected_events) const {
    const wire::ArenaHeader header = ReadHeader();
    const uint32_t used = UsedChunks(header);
    std::vector<unsigned char> chunks(size_t{used} << kArenaChunkShift);
    CHECK(cudaMemcpy(chunks.data(), reinterpret_cast<const void*>(ref_.chunks), chunks.size(), cudaMemcpyDeviceToHost));
    const Census census = CountEvents(chunks, used);
    if (header.dropped_events == 0 && header.unplaced_events == 0 && census.chunks_without_header == 0 &&
        census.events == expected_events) {
      return;
    }
    std::printf(
        "FAILED: %s: %llu of %llu events in the arena (%u chunks claimed, %llu without a header), "
        "%llu dropped, %llu unplaced\n",
        row, static_cast<unsigned long long>(census.events), static_cast<unsigned long long>(expected_events),
        header.next_chunk, static_cast<unsigned long long>(census.chunks_without_header),
        static_cast<unsigned long long>(header.dropped_events),
        static_cast<unsigned long long>(header.unplaced_events));
    std::exit(1);
  }

 private:
  struct Census {
    uint64_t events = 0;
    uint64_t chunks_without_header = 0;
  };

  wire::ArenaHeader ReadHeader() const {
    wire::ArenaHeader header;
    CHECK(cudaMemcpy(&header, base_, sizeof(header), cudaMemcpyDeviceToHost));
    return header;
  }

  uint32_t UsedChunks(const wire::ArenaHeader& header) const { return std::min(header.next_chunk, ref_.num_chunks); }

  // Events are the slots after each chunk's header with a non-zero info word.
  static Census CountEvents(const std::vector<unsigned char>& chunks, uint32_t used) {
    const size_t chunk_bytes = size_t{1} << kArenaChunkShift;
    Census census;
    for (uint32_t c = 0; c < used; ++c) {
      const unsigned char* chunk = chunks.data() + c * chunk_bytes;
      wire::ChunkHeader chunk_header;
      std::copy_n(chunk, sizeof(chunk_header), reinterpret_cast<unsigned char*>(&chunk_header));
      if (chunk_header.magic != wire::kChunkMagic) ++census.chunks_without_header;
      for (size_t slot = wire::kChunkHeaderSlots; slot < chunk_bytes / sizeof(wire::Event); ++slot) {
        wire::Event event;
        std::copy_n(chunk + slot * sizeof(event), sizeof(event), reinterpret_cast<unsigned char*>(&event));
        // A wide value's continuation slot is not an event.
        if (event.info != 0 && (event.info & wire::kEventKindMask) != wire::kEventValueHigh) ++census.events;
      }
    }
    return census;
  }

  char* base_ = nullptr;
  wire::ArenaRef ref_{};
};

// ---------------------------------------------------------------------------
// Host: launching and measuring
// ---------------------------------------------------------------------------

struct LaunchShape {
  int blocks;
  int threads;
  int Warps() const { return blocks * threads / 32; }
};

// Device buffers shared by every row, sized for the largest launch.
class Buffers {
 public:
  explicit Buffers(const LaunchShape& largest) {
    const size_t warps = static_cast<size_t>(largest.Warps());
    const size_t records = warps * kEvents;
    // The CuTe DSL records (32 B per event) are the largest of the reference layouts.
    const size_t event_bytes = records * 32 + 4096;
    CHECK(cudaMalloc(&args_.events, event_bytes));
    CHECK(cudaMemset(args_.events, 0, event_bytes));
    CHECK(cudaMalloc(&args_.slot_counter, sizeof(unsigned long long)));
    CHECK(cudaMalloc(&args_.warp_cycles, warps * sizeof(long long)));
    CHECK(cudaMalloc(&args_.sink, kFullBlockThreads * sizeof(float)));
    args_.atomic_capacity = records;
    args_.mul = 0.999f;
    args_.add = 1e-3f;
    args_.never = -1.0f;
    CHECK(cudaEventCreate(&start_));
    CHECK(cudaEventCreate(&stop_));
  }
  ~Buffers() {
    cudaEventDestroy(stop_);
    cudaEventDestroy(start_);
    cudaFree(args_.sink);
    cudaFree(args_.warp_cycles);
    cudaFree(args_.slot_counter);
    cudaFree(args_.events);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  // Resets what the CuTe DSL recorder's bounds check depends on.
  void ResetSlotCounter() const { CHECK(cudaMemset(args_.slot_counter, 0, sizeof(unsigned long long))); }

  // Launches and returns the kernel time in ms (cudaEvent).
  float TimedLaunch(Kernel kernel, const LaunchShape& shape) const {
    CHECK(cudaEventRecord(start_));
    kernel<<<shape.blocks, shape.threads>>>(args_);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(stop_));
    CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

  void AppendWarpCycles(const LaunchShape& shape, std::vector<long long>& out) const {
    const size_t first = out.size();
    out.resize(first + static_cast<size_t>(shape.Warps()));
    CHECK(cudaMemcpy(out.data() + first, args_.warp_cycles, static_cast<size_t>(shape.Warps()) * sizeof(long long),
                     cudaMemcpyDeviceToHost));
  }

 private:
  KernelArgs args_{};
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

struct Measurement {
  double median_cycles;  // of the timed loop, over warps and launches
  float best_ms;         // kernel time, best launch
};

double Median(std::vector<long long> values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return static_cast<double>(*middle);
}

// Puts the arena and the slot counter in the state the row's next launch needs.
void PrepareLaunch(const Row& row, const Buffers& buffers, Arena& arena) {
  buffers.ResetSlotCounter();
  if (row.arena == ArenaUse::kRecording) {
    arena.ResetAndPublish();
  } else {
    arena.PublishIdle();
  }
}

// Runs `kernel` (one of the row's) `launches` times; the first launch warms up.
Measurement Measure(const Row& row, Kernel kernel, const LaunchShape& shape, int launches, const Buffers& buffers,
                    Arena& arena) {
  std::vector<long long> cycles;
  float best_ms = 0;
  for (int launch = 0; launch < launches; ++launch) {
    PrepareLaunch(row, buffers, arena);
    const float ms = buffers.TimedLaunch(kernel, shape);
    if (row.arena == ArenaUse::kRecording) {
      arena.VerifyOrDie(row.name, uint64_t{kEvents} * row.events_per_mark * shape.Warps());
    }
    if (launch == 0) continue;
    buffers.AppendWarpCycles(shape, cycles);
    best_ms = launch == 1 ? ms : std::min(best_ms, ms);
  }
  return {Median(cycles), best_ms};
}

double CostPerEvent(const Measurement& marked, const Measurement& unmarked) {
  return (marked.median_cycles - unmarked.median_cycles) / kEvents;
}

// ---------------------------------------------------------------------------
// Host: the two configurations
// ---------------------------------------------------------------------------

using FmaCosts = std::array<double, kFmaCounts.size()>;

void PrintOneWarpHeader() {
  std::printf(
      "\none warp (1 block of 32 threads), %u markers per launch, median of %d launches;\n"
      "cycles per event = (marked - unmarked loop) / %u with 0-128 independent FMAs per marker;\n"
      "x floor(N) = cycles per event / the floor's, both with N FMAs per marker\n",
      kEvents, kOneWarpLaunches - 1, kEvents);
  std::printf("%-28s", "recorder");
  for (int fmas : kFmaCounts) std::printf(" %3d FMA", fmas);
  std::printf(" ");
  for (int fmas : kFmaCounts) std::printf(" %12s", ("x floor(" + std::to_string(fmas) + ")").c_str());
  std::printf("\n");
}

// A ratio means something only against a floor of at least one cycle.
void PrintOneWarpRow(const char* name, const FmaCosts& cost, const FmaCosts& floor_cost) {
  std::printf("%-28s", name);
  for (double c : cost) std::printf(" %7.1f", c);
  std::printf(" ");
  for (size_t f = 0; f < cost.size(); ++f) {
    if (floor_cost[f] >= 1.0) {
      std::printf(" %12.2f", cost[f] / floor_cost[f]);
    } else {
      std::printf(" %12s", "-");
    }
  }
  std::printf("\n");
}

void RunOneWarp(const Row& baseline, const std::vector<Row>& rows, const Buffers& buffers, Arena& arena) {
  const LaunchShape shape{1, 32};
  PrintOneWarpHeader();
  std::array<Measurement, kFmaCounts.size()> unmarked{};
  std::printf("%-28s", "unmarked loop (cycles/iter)");
  for (size_t f = 0; f < kFmaCounts.size(); ++f) {
    unmarked[f] = Measure(baseline, baseline.one_warp[f], shape, kOneWarpLaunches, buffers, arena);
    std::printf(" %7.1f", unmarked[f].median_cycles / kEvents);
  }
  std::printf("\n");
  FmaCosts floor_cost{};
  for (size_t r = 0; r < rows.size(); ++r) {
    FmaCosts cost{};
    for (size_t f = 0; f < kFmaCounts.size(); ++f) {
      cost[f] =
          CostPerEvent(Measure(rows[r], rows[r].one_warp[f], shape, kOneWarpLaunches, buffers, arena), unmarked[f]);
    }
    if (r == kFloorRow) floor_cost = cost;
    PrintOneWarpRow(rows[r].name, cost, floor_cost);
  }
}

// Registers and resident blocks per SM say whether the launch really filled every SM.
void PrintFullGpuRow(const Row& row, const Measurement& m, const Measurement& unmarked) {
  cudaFuncAttributes attributes{};
  CHECK(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(row.full_gpu)));
  int blocks_per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, reinterpret_cast<const void*>(row.full_gpu),
                                                      kFullBlockThreads, 0));
  std::printf("%-28s %10.1f %10.3f %10.1f %5d %7d %9d\n", row.name, m.best_ms * 1e3, m.best_ms / unmarked.best_ms,
              CostPerEvent(m, unmarked), attributes.numRegs, static_cast<int>(attributes.localSizeBytes),
              blocks_per_sm);
}

void RunFullGpu(const Row& baseline, const std::vector<Row>& rows, const LaunchShape& shape, const Buffers& buffers,
                Arena& arena) {
  std::printf(
      "\nfull GPU: %d blocks of %d threads (%d warps per SM), %d independent FMAs per marker, %u markers\n"
      "per warp; kernel time best of %d launches; cycles per event as above, median over all warps\n",
      shape.blocks, shape.threads, kFullBlocksPerSm * kMaxWarpsPerBlock, kFullGpuFmas, kEvents, kFullGpuLaunches - 1);
  std::printf("%-28s %10s %10s %10s %5s %7s %9s\n", "recorder", "kernel us", "x unmarked", "cyc/event", "regs",
              "local B", "blocks/SM");
  const Measurement unmarked = Measure(baseline, baseline.full_gpu, shape, kFullGpuLaunches, buffers, arena);
  PrintFullGpuRow(baseline, unmarked, unmarked);
  for (const Row& row : rows) {
    PrintFullGpuRow(row, Measure(row, row.full_gpu, shape, kFullGpuLaunches, buffers, arena), unmarked);
  }
}

void PrintDevice(const char* build) {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  std::printf("recorder cost on %s: %d SMs, %.0f MHz peak SM clock; smprof recorder %s\n", prop.name,
              prop.multiProcessorCount, clock_khz / 1e3, build);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA GPU: nothing measured\n");
    return 2;
  }
  if (std::getenv("CUDA_INJECTION64_PATH") != nullptr) {
    std::fprintf(stderr, "note: run this benchmark alone, not under smprof-run: it publishes its own arena\n");
  }
#if defined(SMPROF_OUTLINE_RECORDER)
  PrintDevice("slow paths out of line (SMPROF_OUTLINE_RECORDER)");
#else
  PrintDevice("slow paths inlined (default)");
#endif
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const LaunchShape full_gpu{kFullBlocksPerSm * sms, kFullBlockThreads};

  Arena arena;
  if (arena.NumChunks() < static_cast<uint32_t>(full_gpu.Warps())) {
    std::printf("FAILED: the arena has %u chunks, the full-GPU launch needs one per warp (%d)\n", arena.NumChunks(),
                full_gpu.Warps());
    return 1;
  }
  const Buffers buffers(full_gpu);
  const Row baseline = MakeRow<NoMarkers>("compiled out", ArenaUse::kIdle);
  const std::vector<Row> rows = MarkerRows();
  RunOneWarp(baseline, rows, buffers, arena);
  RunFullGpu(baseline, rows, full_gpu, buffers, arena);
  return 0;
}
