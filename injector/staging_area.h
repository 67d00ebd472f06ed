// StagingArea: device memory beside a context's arena where read-backs wait
// for a harvest thread to bring them to host memory.
//
// The copy the application waits for at a harvest is a device-to-device copy
// of the arena's used chunks into a slice of this area, at the device's
// memory speed (35 MB in tens of microseconds, 2 GB in about two
// milliseconds, where a copy to host memory took orders of magnitude longer).
// A harvest thread then brings the slice to host memory piece by piece
// through two page-locked buffers allocated at setup (Visit: the next piece
// is copied while one is visited; nothing is page-locked or mapped per
// read-back, which would hold the application's driver calls), and frees the
// slice.
//
// Slices: first fit over the area; each read-back holds its slice until it
// is fetched. An unload's thread that must read a staged read-back itself
// (FetchAtUnload: it never waits for a harvest thread, whose driver calls may
// be waiting for the unload's callback to return) holds the slice too; the
// last hold frees it. Overflow policy: a read-back that finds no slice free
// is not staged (Take is false) and its owner copies it to host memory
// directly; StagingHasRoom lets a harvest wait for a slice instead.
//
// Thread-safe: one lock, never held across a Gpu call.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

#include "injector/arena_snapshot.h"
#include "injector/gpu.h"
#include "injector/host_buffer.h"

namespace smprof::injector {

class StagingArea {
 public:
  explicit StagingArea(Gpu& gpu) : gpu_(gpu) {}
  ~StagingArea();
  StagingArea(const StagingArea&) = delete;
  StagingArea& operator=(const StagingArea&) = delete;

  // Allocates `bytes` of device memory, a stream for the fetches and two
  // page-locked buffers of `bounce_bytes` (without them, Visit copies into
  // the snapshot's own buffer). False when the area could not be had: Take
  // then always fails. In the context, current.
  bool SetUp(uint64_t bytes, uint64_t bounce_bytes);
  bool available() const { return base_ != 0; }

  // A slice for a read-back of `bytes` (false: none free), held once.
  bool Take(uint64_t bytes, uint64_t* offset);
  // Drops one hold of the slice at `offset`.
  void Release(uint64_t offset);
  // Where the slice at `offset` is on the device.
  DevPtr at(uint64_t offset) const { return base_ + offset; }
  // Whether a read-back of `bytes` would find a slice, or nothing is staged
  // (or there is no area: nothing to wait for).
  bool HasRoom(uint64_t bytes);

  // See DeviceContext::VisitChunks: the snapshot's chunks to `visit`, in
  // order, and its slice freed. False if a copy failed (the rest are lost;
  // the slice stays held, a copy from it may still be under way).
  // `ordinal` names the GPU in the log.
  bool Visit(ArenaSnapshot* snapshot, const std::function<void(const uint8_t*, uint32_t)>& visit, uint32_t ordinal);
  // See DeviceContext::FetchAtUnload; the copy goes through `stream`.
  void FetchAtUnload(ArenaSnapshot* snapshot, const std::function<void(const ArenaSnapshot&)>& scan, GpuStream stream,
                     uint32_t ordinal);
  // Whether `snapshot`'s chunks are not (all) in host memory yet.
  bool Staged(const ArenaSnapshot& snapshot);

 private:
  bool FitLocked(uint64_t bytes, uint64_t* offset) const;  // mu_ held; where it would go
  void ReleaseLocked(uint64_t offset);                     // mu_ held
  // Copies `bytes` from `offset` into `*into` (replaced by a large enough
  // buffer if it is smaller) on `stream`, and waits.
  bool CopyOut(uint64_t offset, size_t bytes, GpuStream stream, HostBuffer* into);

  Gpu& gpu_;
  DevPtr base_ = 0;  // 0: none could be had
  uint64_t bytes_ = 0;
  uint64_t bounce_bytes_ = 0;
  GpuStream fetch_stream_ = nullptr;  // private: the fetches' copies
  uint8_t* bounce_[2] = {nullptr, nullptr};
  std::mutex mu_;  // never held across a Gpu call
  // Slices holding read-backs not fetched yet: offset -> (bytes, holds).
  std::map<uint64_t, std::pair<uint64_t, int>> slices_;
};

}  // namespace smprof::injector
