// Portability macros for headers compiled by nvcc (device and host passes)
// and by plain host compilers.
#pragma once

#if defined(__CUDACC__)
#define SMPROF_DEVICE __device__
#define SMPROF_HOST_DEVICE __host__ __device__
#define SMPROF_FORCEINLINE __forceinline__
#define SMPROF_NOINLINE __noinline__
#else
#define SMPROF_DEVICE
#define SMPROF_HOST_DEVICE
#define SMPROF_FORCEINLINE inline __attribute__((always_inline))
#define SMPROF_NOINLINE __attribute__((noinline))
#endif

#define SMPROF_CONCAT_INNER(a, b) a##b
#define SMPROF_CONCAT(a, b) SMPROF_CONCAT_INNER(a, b)
#define SMPROF_UNIQUE(prefix) SMPROF_CONCAT(prefix, __LINE__)
