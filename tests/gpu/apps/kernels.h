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
