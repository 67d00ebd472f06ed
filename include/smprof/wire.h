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
//     A recording warp owns one chunk at a time; its cursor (tag, next slot)
//     lives in a per-warp slot of static shared memory. When the cursor's tag
//     is not the warp's own, or its chunk is full, it claims the next chunk
//     with one atomicAdd on ArenaHeader::next_chunk and writes a ChunkHeader
//     naming itself (%gridid, block, warp, SM). Events are 16-byte records; an
//     all-zero record is an unused slot. Claims past num_chunks fail: the
//     event is counted in ArenaHeader::dropped_events and never written.
//     The injector reads the arena only when no kernel can be writing it
//     (see injector/harvest.h), then zeroes what was used and bumps the epoch
//     so that cursors left in shared memory by earlier blocks never match.
//
//  2. The transport (kTransportVersion): messages the injector ships to the
//     collector through shared memory. Every message starts with MsgHeader;
//     sizes are multiples of 8. The collector treats them as untrusted input.
#pragma once

#include <cstddef>
#include <cstdint>

namespace smprof::wire {

// ---------------------------------------------------------------------------
// Device arena
// ---------------------------------------------------------------------------

inline constexpr uint32_t kArenaAbiVersion = 1;
inline constexpr uint32_t kArenaMagic = 0x534d5041u;  // "SMPA"
inline constexpr uint8_t kChunkMagic = 0xC5;

enum EventKind : uint32_t {
  kEventBegin = 1,
  kEventEnd = 2,
  kEventInstant = 3,
};
inline constexpr uint32_t kEventKindMask = 0x3;

// One marker as recorded by the device. 16 bytes: one vector store.
struct Event {
  uint64_t time_ns;     // %globaltimer; 0 marks an unused slot
  int32_t name_offset;  // name literal address minus the chunk's anchor
  uint32_t info;        // bits 0-1: EventKind; other bits reserved (0)
};

// First two event slots of every chunk: who owns it.
struct ChunkHeader {
  uint64_t grid_id;  // %gridid of the launch (graph replays reuse it)
  uint64_t anchor;   // device address of the module's g_name_base variable
  uint32_t block_x;
  uint16_t block_y;
  uint16_t block_z;
  uint16_t sm;    // %smid of the first event
  uint8_t warp;   // warp index within the block (linear thread id / 32)
  uint8_t magic;  // kChunkMagic once the header is written
  uint32_t reserved;
};

inline constexpr uint32_t kChunkHeaderSlots = sizeof(ChunkHeader) / sizeof(Event);

// A warp's cursor, in static shared memory (one per warp of the block).
// Shared memory is not cleared between blocks, so a cursor is trusted only
// when its tag equals the warp's identity hash (grid, block, warp, epoch).
struct WarpCursor {
  uint64_t tag;   // identity hash of the owning block (the slot says which warp)
  uint32_t next;  // offset from chunk 0 of the warp's next event slot, taken with
                  // a 32-bit shared-memory atomic add of 16 (arenas stay under
                  // 4 GiB); a multiple of chunk_bytes when the chunk is full;
                  // odd once the arena is full
  uint32_t reserved;
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
  uint64_t reserved2[13];  // [0], [1]: written by the injector's probe kernels (clock, timer step)
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
};

static_assert(sizeof(Event) == 16 && alignof(Event) == 8, "Event layout");
static_assert(offsetof(Event, name_offset) == 8 && offsetof(Event, info) == 12, "Event layout");
static_assert(sizeof(ChunkHeader) == 32, "ChunkHeader layout");
static_assert(offsetof(ChunkHeader, anchor) == 8 && offsetof(ChunkHeader, block_x) == 16 &&
                  offsetof(ChunkHeader, sm) == 24 && offsetof(ChunkHeader, warp) == 26 &&
                  offsetof(ChunkHeader, magic) == 27,
              "ChunkHeader layout");
static_assert(sizeof(WarpCursor) == 16 && alignof(WarpCursor) == 8, "WarpCursor layout");
static_assert(sizeof(ArenaHeader) == 256, "ArenaHeader layout");
static_assert(offsetof(ArenaHeader, next_chunk) == 128 && offsetof(ArenaHeader, dropped_events) == 136 &&
                  offsetof(ArenaHeader, unplaced_events) == 144,
              "ArenaHeader layout");
static_assert(sizeof(ArenaRef) == 32 && offsetof(ArenaRef, num_chunks) == 16 && offsetof(ArenaRef, warp_mask) == 24 &&
                  offsetof(ArenaRef, epoch) == 28,
              "ArenaRef layout");

// ---------------------------------------------------------------------------
// Transport messages (injector -> collector)
// ---------------------------------------------------------------------------

inline constexpr uint32_t kTransportVersion = 3;
inline constexpr uint32_t kMaxMessageBytes = 1u << 20;  // collector rejects larger

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
  kMsgLastType = kMsgNotice,
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
  uint32_t name_len;             // device name bytes following this struct
};

// Interns a marker name for this process. Ids start at 1.
struct NameMsg {
  MsgHeader h;
  uint32_t name_id;
  uint32_t name_len;
};

enum LaunchFlags : uint32_t {
  kLaunchNoActivity = 1u << 0,   // CUPTI never reported the kernel; times are bounds from events
  kLaunchFromGraph = 1u << 1,    // a kernel node of a CUDA graph replay
  kLaunchForcedDrain = 1u << 2,  // harvested by a forced drain (buffer high-water mark)
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
};

struct WireEvent {
  uint64_t time_ns;
  uint32_t name_id;  // NameMsg id
  uint32_t kind;     // EventKind
};

// The events of one warp in one launch, in recording order. A warp with more
// events than fit one message is split across several.
struct WarpEventsMsg {
  MsgHeader h;
  uint64_t launch_id;
  uint32_t block[3];
  uint16_t sm;
  uint16_t warp;
  uint32_t count;  // WireEvent entries following this struct
  uint32_t reserved;
};

enum HarvestReason : uint32_t {
  kHarvestSync = 1,          // the application synchronised
  kHarvestHighWater = 2,     // forced drain: arena past its high-water mark
  kHarvestModuleUnload = 3,  // a module with profiled kernels is unloading
  kHarvestContextDestroy = 4,
  kHarvestExit = 5,
};

// Closes a harvest: all launches announced before it are complete.
struct HarvestMsg {
  MsgHeader h;
  uint64_t time_ns;  // GPU clock when the harvest started
  uint32_t device;
  uint32_t reason;           // HarvestReason
  uint64_t dropped_events;   // device drops in this harvest (arena full)
  uint64_t unplaced_events;  // device drops in this harvest (slot table too small)
};

// Cumulative counters of one process; the collector keeps the latest.
struct StatsMsg {
  MsgHeader h;
  uint64_t launches_profiled;
  uint64_t events_recorded;  // events shipped
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
  uint64_t launches_not_selected;  // of those, kernels SMPROF_KERNELS did not select
};

enum NoticeKind : uint32_t {
  kNoticeCuptiUnavailable = 1,  // CUPTI refused smprof (another tool subscribed first); text: that tool
  kNoticeSteppedAside = 2,      // another CUDA tool injects into the process; text: which
  kNoticeBadSettings = 3,       // a setting made the injector turn profiling off; text: the error
};

// Sent at most once per kind by a process that is not (fully) profiled, so
// that the run summary can say why instead of guessing.
struct NoticeMsg {
  MsgHeader h;
  uint32_t kind;      // NoticeKind
  uint32_t text_len;  // bytes following this struct
};

static_assert(sizeof(MsgHeader) == 8, "MsgHeader layout");
static_assert(sizeof(ProcessMsg) == 40, "ProcessMsg layout");
static_assert(sizeof(DeviceMsg) == 64 && offsetof(DeviceMsg, uuid) == 24 && offsetof(DeviceMsg, pci_domain) == 40 &&
                  offsetof(DeviceMsg, name_len) == 60,
              "DeviceMsg layout");
static_assert(sizeof(NameMsg) == 16, "NameMsg layout");
static_assert(sizeof(LaunchMsg) == 112 && offsetof(LaunchMsg, grid) == 72 && offsetof(LaunchMsg, name_len) == 108,
              "LaunchMsg layout");
static_assert(sizeof(WireEvent) == 16, "WireEvent layout");
static_assert(sizeof(WarpEventsMsg) == 40 && offsetof(WarpEventsMsg, count) == 32, "WarpEventsMsg layout");
static_assert(sizeof(HarvestMsg) == 40, "HarvestMsg layout");
static_assert(sizeof(StatsMsg) == 112, "StatsMsg layout");
static_assert(sizeof(NoticeMsg) == 16, "NoticeMsg layout");

// Messages are padded to this alignment.
inline constexpr uint32_t kMsgAlign = 8;
constexpr uint32_t PaddedSize(uint32_t bytes) { return (bytes + kMsgAlign - 1) & ~(kMsgAlign - 1); }

}  // namespace smprof::wire
