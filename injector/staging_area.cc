#include "injector/staging_area.h"

#include <algorithm>

#include "injector/log.h"

namespace smprof::injector {

StagingArea::~StagingArea() {
  if (base_ != 0) gpu_.Free(base_);
  if (fetch_stream_ != nullptr) gpu_.DestroyStream(fetch_stream_);
  for (uint8_t* b : bounce_) {
    if (b != nullptr) gpu_.FreePinned(b);
  }
}

bool StagingArea::SetUp(uint64_t bytes, uint64_t bounce_bytes) {
  // Page-locked once, at setup: page-locking later would hold the
  // application's driver calls.
  bounce_bytes_ = bounce_bytes;
  for (uint8_t*& b : bounce_) b = static_cast<uint8_t*>(gpu_.AllocatePinned(bounce_bytes));
  if (bounce_[0] == nullptr || bounce_[1] == nullptr) {
    for (uint8_t*& b : bounce_) {
      if (b != nullptr) gpu_.FreePinned(b);
      b = nullptr;
    }
  }
  if (!gpu_.CreateStream(&fetch_stream_) || !gpu_.Allocate(bytes, &base_)) {
    base_ = 0;
    return false;
  }
  bytes_ = bytes;
  return true;
}

bool StagingArea::FitLocked(uint64_t bytes, uint64_t* offset) const {
  uint64_t at = 0;  // first fit
  for (const auto& [begin, slice] : slices_) {
    if (begin - at >= bytes) break;
    at = begin + slice.first;
  }
  *offset = at;
  return at + bytes <= bytes_;
}

bool StagingArea::Take(uint64_t bytes, uint64_t* offset) {
  if (base_ == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!FitLocked(bytes, offset)) return false;
  slices_.emplace(*offset, std::make_pair(bytes, 1));
  return true;
}

void StagingArea::Release(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked(offset);
}

void StagingArea::ReleaseLocked(uint64_t offset) {
  auto it = slices_.find(offset);
  if (it != slices_.end() && --it->second.second == 0) slices_.erase(it);
}

bool StagingArea::HasRoom(uint64_t bytes) {
  if (base_ == 0) return true;  // read-backs go to host memory: nothing to wait for
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t offset;
  return slices_.empty() || FitLocked(bytes, &offset);
}

bool StagingArea::CopyOut(uint64_t offset, size_t bytes, GpuStream stream, HostBuffer* into) {
  if (into->size() < bytes) *into = HostBuffer(bytes);
  return into->size() >= bytes && gpu_.CopyToHost(into->data(), base_ + offset, bytes, stream) &&
         gpu_.Wait(stream, kOwnCopyTimeout);
}

bool StagingArea::Visit(ArenaSnapshot* snapshot, const std::function<void(const uint8_t*, uint32_t)>& visit,
                        uint32_t ordinal) {
  bool staged;
  {
    std::lock_guard<std::mutex> lock(mu_);
    staged = snapshot->staged;
    snapshot->fetching = staged;
  }
  if (!staged) {
    // Not staged, or an unload brought it: in host memory for good, and
    // visited without the lock (`visit` takes its caller's locks, which a
    // harvest may hold while it asks HasRoom).
    if (snapshot->used_chunks != 0) visit(snapshot->chunks.data(), snapshot->used_chunks);
    return true;
  }
  // No lock across the copies: an unload's callback may hold the driver until
  // it returns, and must not wait for this thread meanwhile.
  const uint32_t chunk = snapshot->chunk_bytes;
  const uint32_t total = snapshot->used_chunks;
  const bool pinned = bounce_[0] != nullptr && chunk <= bounce_bytes_;
  const uint32_t per_piece = pinned ? static_cast<uint32_t>(bounce_bytes_ / chunk) : total;
  const auto piece_at = [&](uint32_t first) { return std::min(per_piece, total - first); };
  bool ok = true;
  uint32_t visited = 0;
  if (pinned) {
    // Piece p lands in bounce_[p % 2] while piece p - 1 is visited.
    const auto copy = [&](uint32_t first) {
      return gpu_.CopyToHost(bounce_[(first / per_piece) % 2], at(snapshot->staging_offset) + uint64_t{first} * chunk,
                             uint64_t{piece_at(first)} * chunk, fetch_stream_);
    };
    ok = total == 0 || copy(0);
    for (uint32_t first = 0; ok && first < total; first += per_piece) {
      ok = gpu_.Wait(fetch_stream_, kOwnCopyTimeout);  // this piece, and nothing after it yet
      if (ok && first + per_piece < total) ok = copy(first + per_piece);
      if (!ok) break;
      visit(bounce_[(first / per_piece) % 2], piece_at(first));
      visited = first + piece_at(first);
    }
  } else {
    const size_t bytes = static_cast<size_t>(total) * chunk;
    if (snapshot->chunks.size() < bytes) snapshot->retired = std::move(snapshot->chunks);
    ok = CopyOut(snapshot->staging_offset, bytes, fetch_stream_, &snapshot->chunks);
    if (ok) {
      if (total != 0) visit(snapshot->chunks.data(), total);
      visited = total;
    }
  }
  HostBuffer spent;  // unmapped outside the lock
  HostBuffer rescued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snapshot->fetching = false;
    snapshot->staged = false;
    rescued = std::move(snapshot->rescued);
    if (ok || rescued.size() >= static_cast<size_t>(total) * chunk) ReleaseLocked(snapshot->staging_offset);
  }
  if (!ok && rescued.size() >= static_cast<size_t>(total) * chunk) {
    // The context went while this thread copied: the unload's copy of the
    // read-back stands in for what is left.
    if (total > visited) visit(rescued.data() + static_cast<size_t>(visited) * chunk, total - visited);
    snapshot->chunks.Abandon();  // a copy may still land in it
    snapshot->chunks = std::move(rescued);
    return true;
  }
  spent = std::move(rescued);
  if (ok) return true;
  // The slice stays held: a copy from it may still be under way.
  snapshot->chunks.Abandon();  // a copy may still land in it
  Log().error(
      "profiling stops on GPU {}: a read-back could not be brought to host memory; {} of its {} chunks are lost",
      ordinal, total - visited, total);
  return false;
}

void StagingArea::FetchAtUnload(ArenaSnapshot* snapshot, const std::function<void(const ArenaSnapshot&)>& scan,
                                GpuStream stream, uint32_t ordinal) {
  uint64_t offset;
  bool staged;
  {
    std::lock_guard<std::mutex> lock(mu_);
    staged = snapshot->staged;
    offset = snapshot->staging_offset;
    if (staged) ++slices_[offset].second;  // held while copied here, whatever the fetch does
  }
  if (!staged) {
    scan(*snapshot);  // in host memory for good (a harvest thread may be decoding it: both only read)
    return;
  }
  ArenaSnapshot copy;
  copy.used_chunks = snapshot->used_chunks;
  copy.chunk_bytes = snapshot->chunk_bytes;
  const bool ok = CopyOut(offset, static_cast<size_t>(copy.used_chunks) * copy.chunk_bytes, stream, &copy.chunks);
  if (!ok) {
    copy.chunks.Abandon();  // a copy may still land in it
    copy.used_chunks = 0;   // nothing to scan
    Log().warn("GPU {}: staged events could not be read before an unload; their names may be unreadable", ordinal);
  }
  scan(copy);
  HostBuffer spent;  // unmapped outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked(offset);
  if (!ok || !snapshot->staged) return;  // failed here, or fetched meanwhile
  if (snapshot->fetching) {
    snapshot->rescued = std::move(copy.chunks);
    return;
  }
  spent = std::move(snapshot->chunks);  // nobody is fetching it: this copy is its chunks
  snapshot->chunks = std::move(copy.chunks);
  snapshot->staged = false;
  ReleaseLocked(offset);
}

bool StagingArea::Staged(const ArenaSnapshot& snapshot) {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot.staged;
}

}  // namespace smprof::injector
