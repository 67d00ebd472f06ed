// What the Perfetto writer keeps of a run while it streams: the GPUs and
// processes described so far, the launches still open and their warps, with
// the tracks made for them (uuids; 0: not made yet). PerfettoSink owns it;
// the hardware-centric layout (perfetto_hardware.h) places warps on the
// slots kept here. A launch's state goes at its end, so memory is bounded
// by the open launches (and, for GPUs, processes and slots, by the run's
// hardware and processes).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collector/perfetto_sequences.h"
#include "collector/trace_sink.h"

namespace smprof::perfetto {

constexpr uint32_t kNoWarp = UINT32_MAX;

// A counter of the user's (a counter sample's marker name) under a warp's
// or a slot's track.
struct UserCounter {
  uint32_t name = 0;  // run-wide name id
  uint64_t track = 0;
};

// An "async" track of a block (kLaunch) or an SM (kHardware), or one of its
// sibling lanes, with the spans on it that may still enclose a later one.
struct AsyncLane {
  uint64_t track = 0;
  uint64_t last_begin = 0;     // the latest span's begin: spans on a lane come in begin order
  std::vector<uint64_t> ends;  // the ends of the nested spans that may be open, innermost at the back
};

struct AsyncTracks {
  uint64_t parent = 0;  // the block's track, or the SM's
  std::vector<AsyncLane> lanes;
};

// kHardware: a track of a warp slot ("slot 05", or one of its overlap
// siblings) with its lanes, and the warp whose slice is open on it.
struct Slot {
  uint64_t parent = 0;  // the SM's track
  uint64_t track = 0, cycles = 0;
  std::string name;
  int64_t rank = 0;
  std::vector<Lane> lanes;  // lane n at n - 1
  std::vector<UserCounter> counters;
  bool used = false;
  uint64_t busy_until = 0;  // the latest end of its warps' records
  uint64_t launch = 0;      // the open warp slice's launch index and warp (kNoWarp: none)
  uint32_t warp = kNoWarp;
};

// A warp of an open launch: its tracks, its place on the hardware, its
// sequence.
struct Warp {
  bool described = false;
  uint64_t track = 0;  // launch-centric: its track; hardware: its slot track's (0: not placed yet)
  uint64_t block_track = 0;
  uint64_t cycles = 0;  // the "cycles" counter track (0: none)
  uint16_t warp = 0;
  std::vector<Lane> lanes;            // lane n at n - 1 (launch-centric)
  std::vector<UserCounter> counters;  // launch-centric
  // kHardware: where it is and its warp slice (the latest one's time span
  // on `slot` once closed).
  uint16_t sm = 0, hw_warp = 0;
  uint32_t block[3] = {0, 0, 0};
  Slot* slot = nullptr;
  bool span_open = false;
  uint64_t span_begin = 0;
  uint64_t closed_begin = 0, closed_end = 0;
  WarpSequence seq;
};

// The lanes of `w`: its own (launch-centric), or its slot track's.
inline std::vector<Lane>& LanesOf(Warp& w) { return w.slot != nullptr ? w.slot->lanes : w.lanes; }

struct Gpu;

struct Launch {
  uint64_t index = 0;     // LaunchRecord::index
  bool hardware = false;  // TraceLayout of this launch
  Gpu* gpu = nullptr;     // kHardware: where its slots are
  std::string title;      // kHardware: its warp slices' name, "#id label"
  uint64_t launch_id = 0;
  uint32_t pid = 0;
  uint64_t track = 0;
  uint32_t process = 0;
  uint32_t grid[3] = {0, 0, 0};
  uint64_t events = 0;                         // device events written (a closed slice is two)
  std::unordered_map<uint32_t, uint64_t> sms;  // SM -> track
  std::map<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>, uint64_t> blocks;  // (sm, z, y, x) -> track
  std::vector<Warp> warps;                                                        // by WarpRecord::index
  uint32_t current = kNoWarp;  // the warp with the launch's open sequence
  std::map<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>, AsyncTracks> async;  // as `blocks` (kLaunch)
};

struct Gpu {
  uint64_t track = 0;
  std::string name, uuid, pci_bus_id;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> streams;  // (pid, stream) -> track
  // kHardware
  std::unordered_map<uint32_t, uint64_t> sms;                              // SM -> track
  std::unordered_map<uint32_t, std::vector<std::unique_ptr<Slot>>> slots;  // (sm << 16 | slot) -> its tracks
  std::unordered_map<uint32_t, AsyncTracks> async;                         // SM -> its async tracks
};

struct Process {
  trace::ProcessRecord record;  // as known so far
  uint64_t track = 0;           // 0: not described yet
  uint64_t lost_track = 0, harvested_track = 0, fill_track = 0;
  uint64_t events = 0;                             // device events written since the previous harvest
  uint64_t host_track = 0;                         // its process descriptor (0: none yet)
  std::unordered_map<uint32_t, uint64_t> threads;  // host tid -> thread track
};

using Gpus = std::unordered_map<uint32_t, std::unique_ptr<Gpu>>;           // by GpuRecord::index
using Processes = std::unordered_map<uint32_t, std::unique_ptr<Process>>;  // by ProcessRecord::index
using Launches = std::unordered_map<uint64_t, std::unique_ptr<Launch>>;    // open, by LaunchRecord::index

}  // namespace smprof::perfetto
