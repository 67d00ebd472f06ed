// smprof wire format: every byte layout that crosses a boundary.
//
// Compiled by nvcc (device code writes the arena) and by g++ (the injector
// reads the arena and writes transport messages; the collector reads them).
// Everything here is a fixed-width, trivially copyable struct with its size
// and field offsets pinned by static_asserts, so a layout change is a compile
// error, not a silent misread.
//
// Two versioned layers:
//
//  1. The device arena (kArenaAbiVersion). One per CUDA context, in device
//     memory, allocated and reset by the injector. Kernels find it through a
//     module constant whose mangled name carries the ABI version
//     (smprof::detail::g_arena<kArenaAbiVersion>, see detail/record.cuh), so
//     a module built against another version is simply "not found" by this
//     injector.
//
//       [ArenaHeader | chunk 0 | chunk 1 | ...]
//
//     A chunk has one writer: a warp of one block, which claims it with one
//     atomicAdd on ArenaHeader::next_chunk and writes a ChunkHeader naming
//     itself (%gridid, block, warp, SM, %warpid) and a clock anchor
//     (%clock64 and %globaltimer read together). Events are 16-byte records
//     stamped with %clock64 (SM cycles): durations are cycle-exact, and the
//     anchors of the chunks of one SM map cycles onto the %globaltimer
//     timeline. A warp may fill several chunks at once: markers of a
//     profiling context reached while the warp is converged go to the
//     context's chunk, the others to the chunk of the warp's shared-memory
//     cursor; the host merges them by time. An all-zero record is an unused
//     slot. Claims past num_chunks fail: the event is counted in
//     ArenaHeader::dropped_events and never written.
//     The injector reads the arena only when no kernel can be writing it
//     (see injector/device_context.h), then zeroes what was used and bumps the epoch
//     so that cursors left in shared memory by earlier blocks never match.
//
//  2. The transport (kTransportVersion): messages the injector ships to the
//     collector through shared memory. Every message starts with MsgHeader;
//     sizes are multiples of 8. The collector treats them as untrusted input.
//     An injected process ships what it reads back as it is (ChunksMsg), with
//     the CUPTI kernel records it took for that read-back (RecordsMsg), the
//     names they use (KernelNameMsg, MarkerNameMsg) and a HarvestMsg closing
//     it; the collector decodes and matches them (collector/launch_assembler.h)
//     into launches (LaunchMsg, WarpEventsMsg, NameMsg), which it also
//     accepts as such.
#pragma once

#include <cstddef>
#include <cstdint>

namespace smprof::wire {

// ---------------------------------------------------------------------------
// Device arena
// ---------------------------------------------------------------------------

inline constexpr uint32_t kArenaAbiVersion = 2;
inline constexpr uint32_t kArenaMagic = 0x534d5041u;  // "SMPA"
inline constexpr uint8_t kChunkMagic = 0xC6;

// Bits 0-3 of Event::info. Kinds 4-8 are laid out for the device API's
// phases, async spans and 64-bit values; a decoder that does not know a kind
// counts the event as malformed.
enum EventKind : uint32_t {
  kEventBegin = 1,       // opens a range (closed by the latest kEventEnd of the same name)
  kEventEnd = 2,         // closes a range; may carry a value
  kEventInstant = 3,     // a point in time; may carry a value
  kEventPhase = 4,       // closes the warp's open phase (if any) and opens `name`
  kEventPhaseEnd = 5,    // closes the warp's open phase
  kEventAsyncBegin = 6,  // opens a span that another warp may close; value = token
  kEventAsyncEnd = 7,    // closes the span of `name` and token `value`
  kEventValueHigh = 8,   // continuation slot: value = bits 32-63 of the previous event's value
};
inline constexpr uint32_t kEventKindMask = 0xf;
inline constexpr uint32_t kMaxEventKind = kEventValueHigh;

// Bits 4-7 of Event::info.
enum EventFlags : uint32_t {
  kEventHasValue = 1u << 4,   // `value` is the user's
  kEventCounter = 1u << 5,    // ... and a counter sample (a counter track, not an argument)
  kEventWideValue = 1u << 6,  // ... 64 bits wide: the next slot is its kEventValueHigh
  kEventNameValue = 1u << 7,  // the name is a format with one integer ("stage %d"): `value`
};
inline constexpr uint32_t kEventFlagsMask = 0xf0;
inline constexpr uint32_t kEventClockShift = 8;  // info bits 8-31: %clock64 bits 32-55

// One marker as recorded by the device. 16 bytes: one vector store. The
// timestamp is %clock64 (56 bits: clock_lo, and info's upper 24 bits, which
// wrap after a year at 2 GHz).
struct Event {
  uint32_t clock_lo;    // %clock64 bits 0-31
  uint32_t info;        // kind | flags | %clock64 bits 32-55 << 8; 0 marks an unused slot
  int32_t name_offset;  // name literal address minus the chunk's name_base
  uint32_t value;       // the user's value (or token, or format integer); 0 without one
};

constexpr uint64_t EventClock(const Event& e) {
  return static_cast<uint64_t>(e.clock_lo) | (static_cast<uint64_t>(e.info >> kEventClockShift) << 32);
}

enum ChunkFlags : uint8_t {
  kChunkFromCursor = 1u << 0,  // claimed by the warp's shared-memory cursor (markers outside a
                               // profiling context, or reached while the warp was diverged)
  kChunkFromTriton = 1u << 1,  // written by a Triton kernel's markers (python/smprof/triton): the
                               // block is the Triton program (%ctaid = tl.program_id), or one CTA of
                               // it in a cluster launch (ChunkHeader::cluster)
  kChunkCompact = 1u << 2,     // its slots after the header are 8-byte CompactEvents
};

// First three event slots of every chunk: who owns it, and a clock anchor.
struct ChunkHeader {
  uint64_t grid_id;    // %gridid of the launch (graph replays reuse it)
  uint64_t name_base;  // device address of the module's g_name_base variable
  uint32_t block_x;
  uint16_t block_y;
  uint16_t block_z;
  uint16_t sm;      // %smid
  uint8_t warp;     // warp index within the block (linear thread id / 32)
  uint8_t magic;    // kChunkMagic once the header is written
  uint8_t hw_warp;  // %warpid: the warp's slot on its SM
  uint8_t flags;    // ChunkFlags
  uint16_t cluster;         // the cluster's shape (see ClusterExtent); 0 (one CTA) from CUDA C++ markers
  uint64_t anchor_clock;    // %clock64 ...
  uint64_t anchor_time_ns;  // ... and %globaltimer, read back to back at the claim
};

inline constexpr uint32_t kChunkHeaderSlots = sizeof(ChunkHeader) / sizeof(Event);

// A cluster's shape, %cluster_nctaid less one per axis, 4 bits each: x in
// bits 0-3, y in 4-7, z in 8-11 (a cluster holds at most 16 CTAs on any
// axis). 0 is one CTA per cluster: a launch without clusters. Triton's
// markers write it (on sm_90 and later): a Triton program with num_ctas > 1
// is a cluster, tl.program_id is %clusterid, and the block index divided by
// the shape, axis by axis.
inline constexpr uint16_t kClusterShapeMask = 0xFFF;
constexpr uint32_t ClusterExtent(uint16_t shape, int axis) { return ((shape >> (4 * axis)) & 0xFu) + 1; }

// An event in a kChunkCompact chunk (the Triton markers: one 64-bit store of
// two registers, where an Event takes four and a 64-bit clock). The clock is
// %clock, bits 0-31 of %clock64: the reader unwraps it against the chunk's
// anchor and the warp's previous event, so two consecutive events of a warp
// must be less than 2^32 cycles (about 2 s) apart.
struct CompactEvent {
  uint32_t clock_lo;
  uint32_t tag;  // kind | flags | name offset << 8 | kCompactValueFollows; 0 marks an unused slot
};
inline constexpr uint32_t kCompactNameShift = 8;
inline constexpr uint32_t kCompactNameLimit = 1u << 23;     // name offsets 0 .. 2^23 - 1
inline constexpr uint32_t kCompactValueFollows = 1u << 31;  // the next slot is the value (bits 0-31, 32-63)
inline constexpr uint32_t kCompactHeaderSlots = sizeof(ChunkHeader) / sizeof(CompactEvent);

// A warp's cursor, in static shared memory (one per warp of the block).
// Shared memory is not cleared between blocks, so a cursor is trusted only
// when its tag equals the warp's identity hash (grid, block, epoch).
struct WarpCursor {
  uint64_t tag;   // identity hash of the owning block (the slot says which warp)
  uint32_t next;  // offset from chunk 0 of the warp's next event slot, taken with a
                  // plain store by a converged warp, or a 32-bit shared atomic add of 16
                  // (arenas stay under 4 GiB); may run past `end`
  uint32_t end;   // offset of the end of the warp's chunk; 0 once the arena is full
};

// At offset 0 of the arena. The injector writes the configuration line before
// publishing the arena; the device only updates the counters, which live on a
// cache line of their own so that claims do not disturb configuration reads.
struct ArenaHeader {
  uint32_t magic;        // kArenaMagic
  uint32_t abi_version;  // kArenaAbiVersion
  uint32_t chunk_bytes;  // power of two, 256..65536
  uint32_t num_chunks;
  uint64_t chunks_offset;  // byte offset of chunk 0 from the arena base
  uint32_t reserved0[26];
  // Device-written counters (second 128-byte line); zeroed after each harvest.
  uint32_t next_chunk;  // claim counter; may run past num_chunks
  uint32_t reserved1;
  uint64_t dropped_events;   // events not stored: arena full
  uint64_t unplaced_events;  // events not stored: the arena reference was seen half-published
  uint64_t reserved2[13];    // [0], [1]: written by the injector's probe kernels (clock, timer step)
};

// The module constant that kernels read (smprof::detail::g_arena<kArenaAbiVersion>,
// in __constant__ memory: the check costs a constant-cache load). One per
// loaded module and context, written by the injector: every field but `arena`
// first, then `arena` alone, so a kernel that sees arena != 0 and a zero
// elsewhere knows it raced the publication (it counts and skips). `epoch`
// changes at every harvest.
struct ArenaRef {
  uint64_t arena;   // ArenaHeader device address; 0 = not profiling (the one load)
  uint64_t chunks;  // chunk 0, aligned to chunk_bytes
  uint32_t num_chunks;
  uint32_t chunk_shift;  // log2(chunk_bytes)
  uint32_t warp_mask;    // bit w: warp w of each block records (warps >= 31 use bit 31)
  uint32_t epoch;        // harvest generation, part of every cursor tag
  uint64_t reserved[4];  // 0; a recorder of this version ignores them
};

static_assert(sizeof(Event) == 16 && alignof(Event) == 4, "Event layout");
static_assert(offsetof(Event, info) == 4 && offsetof(Event, name_offset) == 8 && offsetof(Event, value) == 12,
              "Event layout");
static_assert(sizeof(ChunkHeader) == 48 && sizeof(ChunkHeader) % sizeof(Event) == 0, "ChunkHeader layout");
static_assert(offsetof(ChunkHeader, name_base) == 8 && offsetof(ChunkHeader, block_x) == 16 &&
                  offsetof(ChunkHeader, sm) == 24 && offsetof(ChunkHeader, warp) == 26 &&
                  offsetof(ChunkHeader, magic) == 27 && offsetof(ChunkHeader, hw_warp) == 28 &&
                  offsetof(ChunkHeader, flags) == 29 && offsetof(ChunkHeader, anchor_clock) == 32 &&
                  offsetof(ChunkHeader, anchor_time_ns) == 40,
              "ChunkHeader layout");
static_assert(sizeof(WarpCursor) == 16 && alignof(WarpCursor) == 8, "WarpCursor layout");
static_assert(sizeof(ArenaHeader) == 256, "ArenaHeader layout");
static_assert(offsetof(ArenaHeader, next_chunk) == 128 && offsetof(ArenaHeader, dropped_events) == 136 &&
                  offsetof(ArenaHeader, unplaced_events) == 144,
              "ArenaHeader layout");
static_assert(sizeof(ArenaRef) == 64 && offsetof(ArenaRef, num_chunks) == 16 && offsetof(ArenaRef, warp_mask) == 24 &&
                  offsetof(ArenaRef, epoch) == 28,
              "ArenaRef layout");

// ---------------------------------------------------------------------------
// Transport messages (injector -> collector)
// ---------------------------------------------------------------------------

inline constexpr uint32_t kTransportVersion = 8;
inline constexpr uint32_t kMaxMessageBytes = 1u << 20;  // collector rejects larger
inline constexpr uint32_t kMaxTextBytes = 64u << 10;     // a name's or a command line's bytes, at most

enum MsgType : uint32_t {
  kMsgPad = 0,         // filler to the end of a ring; skip
  kMsgProcess = 1,     // ProcessMsg + command line bytes
  kMsgDevice = 2,      // DeviceMsg + device name bytes
  kMsgName = 3,        // NameMsg + name bytes
  kMsgLaunch = 4,      // LaunchMsg + demangled kernel name bytes
  kMsgWarpEvents = 5,  // WarpEventsMsg + count x WireEvent
  kMsgHarvest = 6,     // HarvestMsg: every launch announced before it is complete
  kMsgStats = 7,       // StatsMsg: cumulative counters of the process
  kMsgNotice = 8,      // NoticeMsg + text: why the process is not (fully) profiled
  kMsgThread = 9,      // ThreadMsg + name: a host thread named by a HostCall
  kMsgKernelName = 10,  // KernelNameMsg + demangled kernel name
  kMsgMarkerName = 11,  // MarkerNameMsg + name bytes: the marker name at a device address
  kMsgRecords = 12,     // RecordsMsg + count x KernelRecordEntry
  kMsgChunks = 13,      // ChunksMsg + count x chunk_bytes of arena chunks
  kMsgLastType = kMsgChunks,
};

struct MsgHeader {
  uint32_t type;  // MsgType
  uint32_t size;  // whole message in bytes, header included; multiple of 8
};

// Sent once per process, first.
struct ProcessMsg {
  MsgHeader h;
  uint32_t pid;
  uint32_t ppid;
  uint64_t host_realtime_ns;  // CLOCK_REALTIME ...
  uint64_t gpu_time_ns;       // ... and the GPU/CUPTI clock, read back to back
  uint32_t cmdline_len;       // bytes following this struct
  uint32_t reserved;
};

// Sent once per device the process profiles, before its first launch. The
// ordinal is the process's own (CUDA_VISIBLE_DEVICES renumbers GPUs per
// process); the UUID and PCI address name the physical GPU across processes.
struct DeviceMsg {
  MsgHeader h;
  uint32_t device;  // CUDA ordinal in the process
  uint32_t sm_count;
  uint32_t cc_major;
  uint32_t cc_minor;
  uint8_t uuid[16];  // cuDeviceGetUuid
  uint32_t pci_domain;
  uint32_t pci_bus;
  uint32_t pci_device;
  uint32_t sm_clock_khz;         // CU_DEVICE_ATTRIBUTE_CLOCK_RATE (peak SM clock)
  uint32_t timer_resolution_ns;  // smallest %globaltimer step measured on it; 0: not measured
  // Measured at start-up by the injector's calibration kernel (0: not measured):
  uint32_t sm_clock_measured_khz;      // %clock64 cycles per %globaltimer ms
  uint32_t cost_context_centicycles;   // cycles x 100 per event: marker with a profiling context,
  uint32_t cost_default_centicycles;   //   without one (shared-memory cursor),
  uint32_t cost_diverged_centicycles;  //   reached by a diverged warp,
  uint32_t cost_idle_centicycles;      //   and without smprof-run (not recording)
  uint32_t name_len;                   // device name bytes following this struct
  uint32_t buffer_mib;                 // the device buffer of the process's context on it (0: not known)
};

// Interns a marker name for this process. Ids start at 1.
struct NameMsg {
  MsgHeader h;
  uint32_t name_id;
  uint32_t name_len;
};

// The driver API call of a HostCall. The collector names them; a value
// above kApiLast is malformed.
enum HostApi : uint32_t {
  kApiNone = 0,  // no call known: the HostCall's other fields are 0
  kApiLaunchKernel = 1,
  kApiLaunchKernelPtsz = 2,
  kApiLaunchKernelEx = 3,
  kApiLaunchKernelExPtsz = 4,
  kApiLaunchCooperativeKernel = 5,
  kApiLaunchCooperativeKernelPtsz = 6,
  kApiGraphLaunch = 7,
  kApiGraphLaunchPtsz = 8,
  kApiCtxSynchronize = 9,
  kApiStreamSynchronize = 10,
  kApiStreamSynchronizePtsz = 11,
  kApiEventSynchronize = 12,
  kApiMemcpyDtoH = 13,
  kApiMemcpyDtoHPtds = 14,
  kApiMemcpy = 15,
  kApiMemcpyPtds = 16,
  kApiLast = kApiMemcpyPtds,
};

// An application thread's driver API call, on the CUPTI clock (the clock of
// LaunchMsg's span): the host side of a launch, or the synchronising call
// whose exit ran a harvest.
struct HostCall {
  uint64_t start_ns;  // API entry
  uint64_t end_ns;    // API exit (>= start_ns)
  uint32_t tid;       // the calling thread (gettid); a ThreadMsg names it first
  uint32_t api;       // HostApi
};

// Names a host thread once, before the first HostCall or harvest on it.
struct ThreadMsg {
  MsgHeader h;
  uint32_t tid;
  uint32_t name_len;  // bytes following this struct (the thread's name; may be 0)
};

enum LaunchFlags : uint32_t {
  kLaunchNoActivity = 1u << 0,   // CUPTI never reported the kernel; times are bounds from events
  kLaunchFromGraph = 1u << 1,    // a kernel node of a CUDA graph replay
  kLaunchForcedDrain = 1u << 2,  // harvested by a forced drain (buffer high-water mark)
  kLaunchRunning = 1u << 3,      // read while still running, as the process was about to end (kRecordRunning)
};

// One profiled kernel execution. launch_id is unique within the process and
// increases in start-time order.
struct LaunchMsg {
  MsgHeader h;
  uint64_t launch_id;
  uint64_t start_ns;  // CUPTI kernel activity (same clock as events)
  uint64_t end_ns;
  uint64_t grid_id;
  uint64_t correlation_id;
  uint64_t stream_id;
  uint32_t device;
  uint32_t context_id;
  uint32_t graph_id;
  uint32_t flags;  // LaunchFlags
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t dynamic_smem;
  uint32_t static_smem;
  uint32_t registers;
  uint32_t name_len;  // demangled kernel name bytes following this struct
  HostCall call;      // the API call that launched it (a graph's: its cuGraphLaunch); api kApiNone if unknown
};

struct WireEvent {
  uint64_t time_ns;  // %clock64 mapped onto the CUPTI clock
  uint32_t cycles;   // %clock64 bits 0-31: exact durations within the warp
  uint32_t name_id;  // NameMsg id
  uint32_t kind;     // EventKind | EventFlags
  uint32_t value;    // the user's value (see wire::Event)
};

// The events of one warp in one launch, in recording order. A warp with more
// events than fit one message is split across several.
struct WarpEventsMsg {
  MsgHeader h;
  uint64_t launch_id;
  uint32_t block[3];
  uint16_t sm;
  uint16_t warp;
  uint32_t count;    // WireEvent entries following this struct
  uint16_t hw_warp;  // %warpid: the warp's slot on the SM
  uint16_t flags;    // WarpFlags, a Triton warp's cluster shape in bits 4-15 (other bits are ignored)
};

enum WarpFlags : uint16_t {
  kWarpTritonProgram = 1u << 0,  // recorded by a Triton kernel (kChunkFromTriton): the block is a program
};
// Bits 4-15 of WarpEventsMsg::flags: the cluster's shape (see ClusterExtent) of a
// kWarpTritonProgram warp, so its program is the block divided by it.
inline constexpr int kWarpClusterShift = 4;

enum HarvestReason : uint32_t {
  kHarvestSync = 1,          // the application synchronised
  kHarvestHighWater = 2,     // forced drain: arena past its high-water mark
  kHarvestModuleUnload = 3,  // a module with profiled kernels is unloading
  kHarvestContextDestroy = 4,
  kHarvestExit = 5,
};

// Names a kernel of a process for its RecordsMsgs. Ids start at 1.
struct KernelNameMsg {
  MsgHeader h;
  uint32_t kernel_id;
  uint32_t name_len;  // demangled name bytes following this struct
};

// The marker name stored at `address` by the modules of a GPU context's name
// generation (a module unload starts a new one: another module may put
// another name at the same address). Events name it as their chunk's
// name_base + name_offset.
struct MarkerNameMsg {
  MsgHeader h;
  uint64_t address;
  uint32_t context_id;
  uint32_t generation;
  uint32_t name_len;  // bytes following this struct
  uint32_t reserved;
};

enum RecordFlags : uint32_t {
  kRecordWanted = 1u << 0,   // the launch was profiled: its events are kept (others are counted filtered)
  kRecordRunning = 1u << 1,  // not CUPTI's: the kernel still ran when the process was about to end and its
                             // arena was read; start is its launch call's, end the read; no grid or stream
};

// One CUPTI kernel record, with what the injector knew of its launch.
struct KernelRecordEntry {
  uint64_t grid_id;  // %gridid (graph replays reuse it)
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t correlation_id;
  uint64_t stream_id;
  uint32_t graph_id;
  uint32_t kernel_id;  // KernelNameMsg id; 0: unnamed
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t dynamic_smem;
  uint32_t static_smem;
  uint32_t registers;
  uint32_t flags;  // RecordFlags
  HostCall call;   // the API call that launched it (a graph's: its cuGraphLaunch); api kApiNone if unknown
};

// Kernel records of one GPU context that a harvest took: kernels that ended
// before its read-back, and records CUPTI delivered late.
struct RecordsMsg {
  MsgHeader h;
  uint32_t device;  // CUDA ordinal in the process
  uint32_t context_id;
  uint32_t count;  // KernelRecordEntry entries following this struct
  uint32_t reserved;
};

enum ChunksFlags : uint32_t {
  // Each chunk is a ChunkBytes, then its first `bytes` bytes: the rest of its
  // chunk_bytes were zero (never written). Without it, chunks are whole.
  kChunksUsedBytes = 1u << 0,
};

// Chunks of one GPU context's arena, as read back (wire::ChunkHeader and
// events; all-zero chunks were claimed and never written). One read-back
// takes as many messages as it needs; its HarvestMsg closes it.
struct ChunksMsg {
  MsgHeader h;
  uint32_t device;
  uint32_t context_id;
  uint32_t chunk_bytes;      // a power of two, 256..65536
  uint32_t count;            // chunks following this struct
  uint32_t name_generation;  // of the context when read back (MarkerNameMsg)
  uint32_t flags;            // ChunksFlags
};

// The written part of a chunk (kChunksUsedBytes): `bytes` (a multiple of 8,
// at most chunk_bytes; 0: claimed and never written) follow.
struct ChunkBytes {
  uint32_t bytes;
  uint32_t reserved;  // 0
};

enum HarvestFlags : uint32_t {
  kHarvestFinal = 1u << 0,   // the context's last: events still waiting for a record ship without one
  kHarvestProbed = 1u << 1,  // clock_offset_ns was measured by the clock probe at this harvest
  // A drain's arena segment, switched away from: the application went on
  // launching while the kernels that wrote it finished (injector/device_context.h).
  kHarvestSwitched = 1u << 2,
};

// Closes a harvest: all launches announced before it are complete, and the
// chunks and records of its context sent since the previous one are its own.
struct HarvestMsg {
  MsgHeader h;
  uint64_t time_ns;  // GPU clock when the harvest started
  uint32_t device;
  uint32_t reason;           // HarvestReason
  uint64_t dropped_events;   // device drops in this harvest (arena full)
  uint64_t unplaced_events;  // device drops in this harvest (slot table too small)
  uint32_t chunks_used;      // arena chunks the harvest found claimed (at most chunks_total)
  uint32_t chunks_total;     // the arena's chunks (0: not known)
  // On the host, CUPTI clock: the harvest ran on thread `host_tid` from
  // host_begin_ns (before it waited for the GPU) to host_end_ns, inside the
  // exit of `call` when a synchronising API call triggered it (else api
  // kApiNone; a forced drain runs inside the launch call of that thread).
  uint64_t host_begin_ns;
  uint64_t host_end_ns;  // >= host_begin_ns
  uint32_t host_tid;
  // Of chunks_used, those claimed but never written (a Triton warp claims
  // its first chunk at its kernel's start and may reach no marker).
  uint32_t chunks_empty;
  HostCall call;
  // Where the host span went, in us (HarvestStage order; they add up to at
  // most host_end_ns - host_begin_ns):
  uint32_t stage_us[6];
  uint32_t context_id;      // the GPU context read back (CUPTI's id)
  uint32_t flags;           // HarvestFlags
  int64_t clock_offset_ns;  // CUPTI clock - %globaltimer, from the clock probe (kHarvestProbed)
};

// The stages of a harvest on the host (HarvestMsg::stage_us).
enum HarvestStage : uint32_t {
  kStageWait = 0,    // for other launches to leave and the profiled work to finish
  kStageCopy = 1,    // the arena read back and reset (device -> host copies, memsets, epoch)
  kStageClock = 2,   // the clock probe and CUPTI's kernel records
  kStageDecode = 3,  // chunks decoded, clocks mapped, launches matched, names read
  kStageShip = 4,    // messages into the shared-memory ring
  kStageOther = 5,   // the rest
  kHarvestStages = 6,
};

// Cumulative counters of one process; the collector keeps the latest.
struct StatsMsg {
  MsgHeader h;
  uint64_t launches_profiled;
  uint64_t events_recorded;  // events shipped (read back; the collector filters and counts)
  uint64_t events_dropped_device;
  uint64_t events_unplaced_device;
  uint64_t events_filtered;      // recorded by kernels SMPROF_KERNELS did not select
  uint64_t events_unattributed;  // no CUPTI record matched; shipped under a synthetic launch
  uint64_t events_malformed;     // arena records that failed validation
  uint64_t harvests;
  uint64_t forced_drains;
  uint64_t messages_dropped;  // transport: ring full or collector gone
  uint64_t events_dropped_transport;
  uint64_t launches_opted_in;      // launch calls of kernels whose module includes the markers
                                   // (a graph launch with such kernel nodes counts once)
  uint64_t launches_not_selected;  // of those, not profiled: kernels SMPROF_KERNELS did not select,
                                   // outside the SMPROF_LAUNCHES ranges or the capture window
  uint64_t host_calls_forgotten;   // launch API calls dropped before their kernel shipped (injector/host_calls.h)
  // Events read back from the GPU that the process never shipped: its exit
  // could not wait for the last harvests any longer, or a harvest failed.
  uint64_t events_lost_host;
  // Read-backs skipped because every buffer was still queued (SMPROF_BACKLOG
  // drop): the events stayed in the device buffer (what overflowed it is in
  // events_dropped_device).
  uint64_t harvests_skipped;
};

enum NoticeKind : uint32_t {
  kNoticeCuptiUnavailable = 1,  // CUPTI refused smprof (another tool subscribed first); text: that tool
  kNoticeSteppedAside = 2,      // another CUDA tool injects into the process; text: which
  kNoticeBadSettings = 3,       // a setting made the injector turn profiling off; text: the error
  kNoticeKernelFailed = 4,      // a kernel's execution failed in a context; text: the error and the launches
};

// Sent by a process that is not (fully) profiled, so that the run summary
// can say why instead of guessing: at most once per kind, but a kernel's
// failure, once per GPU context.
struct NoticeMsg {
  MsgHeader h;
  uint32_t kind;      // NoticeKind
  uint32_t text_len;  // bytes following this struct
};

static_assert(sizeof(MsgHeader) == 8, "MsgHeader layout");
static_assert(sizeof(ProcessMsg) == 40, "ProcessMsg layout");
static_assert(sizeof(DeviceMsg) == 88 && offsetof(DeviceMsg, uuid) == 24 && offsetof(DeviceMsg, pci_domain) == 40 &&
                  offsetof(DeviceMsg, sm_clock_measured_khz) == 60 && offsetof(DeviceMsg, name_len) == 80,
              "DeviceMsg layout");
static_assert(sizeof(NameMsg) == 16, "NameMsg layout");
static_assert(sizeof(HostCall) == 24 && offsetof(HostCall, api) == 20, "HostCall layout");
static_assert(sizeof(ThreadMsg) == 16, "ThreadMsg layout");
static_assert(sizeof(LaunchMsg) == 136 && offsetof(LaunchMsg, grid) == 72 && offsetof(LaunchMsg, name_len) == 108 &&
                  offsetof(LaunchMsg, call) == 112,
              "LaunchMsg layout");
static_assert(sizeof(WireEvent) == 24 && offsetof(WireEvent, name_id) == 12, "WireEvent layout");
static_assert(sizeof(WarpEventsMsg) == 40 && offsetof(WarpEventsMsg, count) == 32, "WarpEventsMsg layout");
static_assert(sizeof(HarvestMsg) == 136 && offsetof(HarvestMsg, host_begin_ns) == 48 &&
                  offsetof(HarvestMsg, call) == 72 && offsetof(HarvestMsg, stage_us) == 96 &&
                  offsetof(HarvestMsg, context_id) == 120 && offsetof(HarvestMsg, clock_offset_ns) == 128,
              "HarvestMsg layout");
static_assert(sizeof(KernelNameMsg) == 16, "KernelNameMsg layout");
static_assert(sizeof(MarkerNameMsg) == 32 && offsetof(MarkerNameMsg, name_len) == 24, "MarkerNameMsg layout");
static_assert(sizeof(KernelRecordEntry) == 112 && offsetof(KernelRecordEntry, graph_id) == 40 &&
                  offsetof(KernelRecordEntry, flags) == 84 && offsetof(KernelRecordEntry, call) == 88,
              "KernelRecordEntry layout");
static_assert(sizeof(RecordsMsg) == 24, "RecordsMsg layout");
static_assert(sizeof(ChunksMsg) == 32 && offsetof(ChunksMsg, count) == 20, "ChunksMsg layout");
static_assert(sizeof(ChunkBytes) == 8, "ChunkBytes layout");
static_assert(sizeof(StatsMsg) == 136, "StatsMsg layout");
static_assert(sizeof(NoticeMsg) == 16, "NoticeMsg layout");

// Messages are padded to this alignment.
inline constexpr uint32_t kMsgAlign = 8;
constexpr uint32_t PaddedSize(uint32_t bytes) { return (bytes + kMsgAlign - 1) & ~(kMsgAlign - 1); }

}  // namespace smprof::wire
