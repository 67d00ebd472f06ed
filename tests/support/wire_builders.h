// Test-only builders of transport messages (include/smprof/wire.h): each
// returns the padded bytes a producer would ship. Shared by the collector,
// message-decoder and collector end-to-end tests; a test that needs other
// field values keeps a thin local wrapper over these.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "smprof/wire.h"

namespace smprof::testing {

using Bytes = std::vector<uint8_t>;

// `fixed` with its MsgHeader filled in, then `tail`, zero-padded to kMsgAlign.
template <typename T>
Bytes Frame(T fixed, wire::MsgType type, std::string_view tail = {}) {
  const uint32_t size = wire::PaddedSize(static_cast<uint32_t>(sizeof(T) + tail.size()));
  fixed.h.type = type;
  fixed.h.size = size;
  Bytes out(size, 0);
  std::memcpy(out.data(), &fixed, sizeof(T));
  if (!tail.empty()) std::memcpy(out.data() + sizeof(T), tail.data(), tail.size());
  return out;
}

inline Bytes Process(uint32_t pid, uint64_t gpu_ns, std::string_view cmdline, uint32_t ppid = 0,
                     uint64_t host_realtime_ns = 0) {
  wire::ProcessMsg m{};
  m.pid = pid;
  m.ppid = ppid;
  m.host_realtime_ns = host_realtime_ns;
  m.gpu_time_ns = gpu_ns;
  m.cmdline_len = static_cast<uint32_t>(cmdline.size());
  return Frame(m, wire::kMsgProcess, cmdline);
}

inline Bytes Name(uint32_t id, std::string_view name) {
  wire::NameMsg m{};
  m.name_id = id;
  m.name_len = static_cast<uint32_t>(name.size());
  return Frame(m, wire::kMsgName, name);
}

// A launch of a 4x1x1 grid of 64x1x1 blocks; every other field zero.
inline wire::LaunchMsg LaunchFields(uint64_t id, uint64_t start, uint64_t end) {
  wire::LaunchMsg m{};
  m.launch_id = id;
  m.start_ns = start;
  m.end_ns = end;
  m.grid[0] = 4;
  m.grid[1] = m.grid[2] = 1;
  m.block[0] = 64;
  m.block[1] = m.block[2] = 1;
  return m;
}

// `m` followed by the kernel name (name_len is set here).
inline Bytes Launch(wire::LaunchMsg m, std::string_view kernel) {
  m.name_len = static_cast<uint32_t>(kernel.size());
  return Frame(m, wire::kMsgLaunch, kernel);
}

inline Bytes Launch(uint64_t id, uint64_t start, uint64_t end, std::string_view kernel) {
  return Launch(LaunchFields(id, start, end), kernel);
}

// An event at `time_ns` whose %clock64 reads the same number (1 cycle per ns).
inline wire::WireEvent Ev(uint64_t time_ns, uint32_t name_id, uint32_t kind, uint32_t value = 0) {
  return {time_ns, static_cast<uint32_t>(time_ns), name_id, kind, value};
}

// The events of warp `warp` of block (bx, 0, 0) on SM `sm` (`flags`: wire::WarpFlags).
inline Bytes Warp(uint64_t launch, uint16_t sm, uint32_t bx, uint16_t warp, const std::vector<wire::WireEvent>& events,
                  uint16_t flags = 0) {
  wire::WarpEventsMsg m{};
  m.flags = flags;
  m.launch_id = launch;
  m.block[0] = bx;
  m.sm = sm;
  m.warp = warp;
  m.count = static_cast<uint32_t>(events.size());
  return Frame(m, wire::kMsgWarpEvents,
               std::string_view(reinterpret_cast<const char*>(events.data()), events.size() * sizeof(wire::WireEvent)));
}

// A device with a physical identity: `uuid_byte` fills the UUID, `pci_bus`
// the PCI address 0000:<bus>:00.0.
inline Bytes Device(uint32_t ordinal, std::string_view name, uint8_t uuid_byte, uint32_t pci_bus,
                    uint32_t sm_count = 132) {
  wire::DeviceMsg m{};
  m.device = ordinal;
  m.sm_count = sm_count;
  m.cc_major = 9;
  m.cc_minor = 0;
  std::memset(m.uuid, uuid_byte, sizeof(m.uuid));
  m.pci_bus = pci_bus;
  m.sm_clock_khz = 1980000;
  m.timer_resolution_ns = 32;
  m.name_len = static_cast<uint32_t>(name.size());
  return Frame(m, wire::kMsgDevice, name);
}

inline Bytes Notice(uint32_t kind, std::string_view text) {
  wire::NoticeMsg m{};
  m.kind = kind;
  m.text_len = static_cast<uint32_t>(text.size());
  return Frame(m, wire::kMsgNotice, text);
}

inline Bytes Stats(const wire::StatsMsg& fields) { return Frame(fields, wire::kMsgStats); }

inline wire::HarvestMsg HarvestFields(uint64_t time_ns, uint32_t reason) {
  wire::HarvestMsg m{};
  m.time_ns = time_ns;
  m.reason = reason;
  return m;
}

inline Bytes Harvest(uint64_t time_ns, uint32_t reason, uint64_t dropped, uint64_t unplaced = 0,
                     uint32_t chunks_used = 0, uint32_t chunks_total = 0) {
  wire::HarvestMsg m = HarvestFields(time_ns, reason);
  m.dropped_events = dropped;
  m.unplaced_events = unplaced;
  m.chunks_used = chunks_used;
  m.chunks_total = chunks_total;
  return Frame(m, wire::kMsgHarvest);
}

inline Bytes Thread(uint32_t tid, std::string_view name) {
  wire::ThreadMsg m{};
  m.tid = tid;
  m.name_len = static_cast<uint32_t>(name.size());
  return Frame(m, wire::kMsgThread, name);
}

inline wire::HostCall Call(uint32_t api, uint64_t start, uint64_t end, uint32_t tid) {
  return wire::HostCall{start, end, tid, api};
}

// A harvest that ran on host thread `tid` from `begin` to `end`, inside
// `call` (api kApiNone: none), its stages taking `stage_us` (wire::HarvestStage).
inline Bytes HostHarvest(uint64_t time_ns, uint32_t reason, uint32_t tid, uint64_t begin, uint64_t end,
                         wire::HostCall call = {}, std::vector<uint32_t> stage_us = {},
                         std::array<uint32_t, 3> chunks = {}) {  // used, total, empty
  wire::HarvestMsg m = HarvestFields(time_ns, reason);
  m.chunks_used = chunks[0];
  m.chunks_total = chunks[1];
  m.chunks_empty = chunks[2];
  for (size_t i = 0; i < stage_us.size() && i < wire::kHarvestStages; ++i) m.stage_us[i] = stage_us[i];
  m.host_tid = tid;
  m.host_begin_ns = begin;
  m.host_end_ns = end;
  m.call = call;
  return Frame(m, wire::kMsgHarvest);
}

// --- a read-back as the injector ships it (collector/launch_assembler.h) ---

inline Bytes KernelName(uint32_t id, std::string_view name) {
  wire::KernelNameMsg m{};
  m.kernel_id = id;
  m.name_len = static_cast<uint32_t>(name.size());
  return Frame(m, wire::kMsgKernelName, name);
}

inline Bytes MarkerName(uint32_t context_id, uint32_t generation, uint64_t address, std::string_view name) {
  wire::MarkerNameMsg m{};
  m.address = address;
  m.context_id = context_id;
  m.generation = generation;
  m.name_len = static_cast<uint32_t>(name.size());
  return Frame(m, wire::kMsgMarkerName, name);
}

// A wanted record of kernel `kernel_id` for grid `grid` (a 4x1x1 grid of 128-thread blocks).
inline wire::KernelRecordEntry Record(uint64_t grid, uint64_t start, uint64_t end, uint64_t correlation,
                                      uint32_t kernel_id, bool wanted = true) {
  wire::KernelRecordEntry r{};
  r.grid_id = grid;
  r.start_ns = start;
  r.end_ns = end;
  r.correlation_id = correlation;
  r.kernel_id = kernel_id;
  r.grid[0] = 4;
  r.grid[1] = r.grid[2] = 1;
  r.block[0] = 128;
  r.block[1] = r.block[2] = 1;
  r.flags = wanted ? uint32_t{wire::kRecordWanted} : 0u;
  return r;
}

inline Bytes Records(uint32_t device, uint32_t context_id, const std::vector<wire::KernelRecordEntry>& records) {
  wire::RecordsMsg m{};
  m.device = device;
  m.context_id = context_id;
  m.count = static_cast<uint32_t>(records.size());
  return Frame(m, wire::kMsgRecords,
               std::string_view(reinterpret_cast<const char*>(records.data()),
                                records.size() * sizeof(wire::KernelRecordEntry)));
}

// `bytes` (whole chunks of `chunk_bytes`) as one ChunksMsg.
inline Bytes Chunks(uint32_t device, uint32_t context_id, uint32_t chunk_bytes, const std::vector<uint8_t>& bytes,
                    uint32_t generation = 1) {
  wire::ChunksMsg m{};
  m.device = device;
  m.context_id = context_id;
  m.chunk_bytes = chunk_bytes;
  m.count = static_cast<uint32_t>(bytes.size() / chunk_bytes);
  m.name_generation = generation;
  return Frame(m, wire::kMsgChunks, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

// The harvest that closes a read-back of context `context_id`.
inline Bytes ReadBackHarvest(uint64_t time_ns, uint32_t device, uint32_t context_id, uint32_t reason,
                             uint32_t chunks_used, uint32_t flags = 0, int64_t clock_offset_ns = 0) {
  wire::HarvestMsg m = HarvestFields(time_ns, reason);
  m.device = device;
  m.context_id = context_id;
  m.chunks_used = chunks_used;
  m.chunks_total = chunks_used;
  m.flags = flags;
  m.clock_offset_ns = clock_offset_ns;
  return Frame(m, wire::kMsgHarvest);
}

}  // namespace smprof::testing
