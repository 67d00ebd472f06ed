// HostBuffer: host memory that read-back chunks are copied into.
//
// Plain pageable memory, mapped lazily (untouched pages cost nothing).
// Page-locked memory would take the GPU's copies faster, but locking it runs
// at about 1 GB/s and holds every other driver call of the process
// meanwhile: a 12 MiB buffer held the application's launches 13-17 ms, and
// locking 256 KiB pieces between pauses still added 0.2-0.3 ms to launches
// (docs/gpu-notes.md). Read-backs reach these buffers from the device's
// staging copy on smprof's harvest threads (device_context.h), where the
// copy's speed does not hold the application.
//
// Ownership: one owner at a time; the memory is unmapped when the buffer
// goes, unless Abandon() forgot it first (a copy that failed may still land
// in it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace smprof::injector {

class HostBuffer {
 public:
  HostBuffer() = default;
  // `bytes` of memory (empty if it cannot be had).
  explicit HostBuffer(size_t bytes);
  ~HostBuffer();
  HostBuffer(HostBuffer&& o) noexcept { *this = std::move(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Forgets the memory without unmapping it.
  void Abandon();

 private:
  void Release();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;    // as asked
  size_t mapped_ = 0;  // size_ rounded up to whole pages
};

}  // namespace smprof::injector
