// Host-side launchers of the GPU test kernels (two modules: kernels_opted.cu
// includes smprof, kernels_plain.cu does not).
#pragma once

#include <cuda_runtime.h>

void LaunchMarkerGrid(int blocks, int threads, int* out, cudaStream_t s);
void LaunchCount(int blocks, int threads, int n, long long spin_ns, cudaStream_t s);
void LaunchGemmLikeA(int n, cudaStream_t s);
void LaunchOtherB(int n, cudaStream_t s);
void LaunchGraphK1(cudaStream_t s);
void LaunchGraphK2(cudaStream_t s);
void LaunchFlood(int blocks, int threads, int n, long long spin_ns, cudaStream_t s);
void LaunchPlain(int* out, cudaStream_t s);
void LaunchSilentBig(cudaStream_t s);
void LaunchWaitForFlag(volatile int* flag, cudaStream_t s);
void LaunchOneRange(int blocks, int threads, int* out, cudaStream_t s);
void LaunchFaultWrite(int* bad, cudaStream_t s);
void LaunchStuckWarps(int blocks, volatile int* flag, cudaStream_t s);  // 96 threads a block

// kernels_recorder.cu: the recorder's delicate paths. `with_context` picks the
// SMPROF_CONTEXT() variant of a kernel; `sink` holds blocks x threads ints.
void LaunchDivergentHalves(bool with_context, int blocks, int threads, int iterations, int* sink, cudaStream_t s);
void LaunchEarlyExit(bool with_context, int blocks, int* sink, cudaStream_t s);  // 128 threads
void LaunchPartialWarps(bool with_context, int blocks, int threads, int* sink, cudaStream_t s);
void LaunchBigBlocks(bool with_context, int blocks, int* sink, cudaStream_t s);  // 1024 threads
void LaunchManyMarkers(bool with_context, int blocks, int threads, int n, cudaStream_t s);
void LaunchInterleavedMarkers(bool with_context, int blocks, int threads, int n, long long spin_cycles, cudaStream_t s);
void LaunchDeviceFunctions(bool with_context, int blocks, int threads, int* sink, cudaStream_t s);
void LaunchCycleRanges(int blocks, long long n1, long long n2, long long n3, unsigned long long* spun,
                       cudaStream_t s);  // 32 threads; spun: 3 per block
void LaunchCrossSmTicks(int blocks, int threads, int n, unsigned long long* out, cudaStream_t s);

// kernels_device_api.cu: every device API kernel, with and without a context,
// on `blocks` x 128 threads, `n` iterations each; `sink` holds 128 ints.
void LaunchDeviceApi(int blocks, int n, int* sink, cudaStream_t s);
