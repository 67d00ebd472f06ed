// The collector process's heap: memory freed between read-backs is kept for
// the next one.
//
// Every read-back allocates its decoded segments, merged warps and framed
// messages (tens to hundreds of MB for a large launch) and frees them once
// its launches are handed on. With glibc's defaults the freed top of the heap
// goes back to the kernel (and blocks over the mmap threshold are unmapped),
// so the next read-back faults in and zeroes fresh pages: a third of the
// collector's time per event on smprof_bench_host_pipeline. The collector is
// a process of its own, so it keeps up to kRetainedBytes of freed memory
// instead (the application's heap is never touched: the injector does not
// call this).
#pragma once

#include <cstddef>

namespace smprof {

inline constexpr size_t kRetainedBytes = size_t{1} << 30;

// Sets the process's allocator to keep freed memory up to kRetainedBytes
// and to serve allocations up to that size from the heap. Returns false if
// the allocator refused (the defaults stay; nothing else changes).
bool RetainFreedMemory();

}  // namespace smprof
