// ArenaSnapshot: what one read-back took from a context's arena, on its way
// to host memory.
//
// DeviceContext::Read fills it on the application's thread: the arena's
// counters at the read and where the used chunks went, either a slice of the
// context's staging area on the device (staging_area.h brings them to host
// memory later, on a harvest thread) or `chunks` in host memory at once. The
// harvester owns it from then on.
#pragma once

#include <cstdint>

#include "injector/host_buffer.h"

namespace smprof::injector {

// What one read-back took from the arena.
struct ArenaSnapshot {
  HostBuffer chunks;  // used_chunks x chunk_bytes
  // A buffer too small for a read-back, replaced by a larger one: unmapped
  // by a harvest thread, not by the application's.
  HostBuffer retired;
  uint32_t used_chunks = 0;
  uint32_t chunk_bytes = 0;
  uint32_t total_chunks = 0;
  uint64_t dropped_events = 0;  // ArenaHeader counters at the read
  uint64_t unplaced_events = 0;
  uint64_t time_ns = 0;      // when the recording work was found done (CUPTI clock)
  // A segment switched away from (device_context.h): the API call of the
  // first launch that wrote the next segment; its harvest takes only records
  // of calls before it. 0: every record that ended by time_ns.
  uint64_t correlation_limit = 0;
  bool switched = false;  // a segment switched away from: it filled (a drain, whichever call reads it)
  bool running = false;   // read without waiting for its kernels (HarvestMode::kRunning)
  uint64_t wait_end_ns = 0;  // when the copy began
  // The chunks wait in the context's staging area on the device, from
  // `staging_offset` on: DeviceContext::VisitChunks brings them to host memory.
  // Set by Read; once the snapshot is handed on, `staged`, `fetching` and
  // `rescued` are used only under its context's slice lock.
  bool staged = false;
  bool fetching = false;  // a harvest thread is copying them into `chunks`
  HostBuffer rescued;     // an unload's copy, for a fetch that fails as the context goes
  uint64_t staging_offset = 0;
};

}  // namespace smprof::injector
