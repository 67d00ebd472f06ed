// HostBuffer: see host_buffer.h.
#include "injector/host_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <utility>

namespace smprof::injector {

HostBuffer::HostBuffer(size_t bytes) {
  if (bytes == 0) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  data_ = static_cast<uint8_t*>(p);
  size_ = bytes;
  mapped_ = mapped;
}

HostBuffer::~HostBuffer() { Release(); }

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this == &o) return *this;
  Release();
  data_ = std::exchange(o.data_, nullptr);
  size_ = std::exchange(o.size_, 0);
  mapped_ = std::exchange(o.mapped_, 0);
  return *this;
}

void HostBuffer::Abandon() {
  data_ = nullptr;
  size_ = mapped_ = 0;
}

void HostBuffer::Release() {
  if (data_ != nullptr) munmap(data_, mapped_);
  Abandon();
}

}  // namespace smprof::injector
