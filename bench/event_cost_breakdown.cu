// Benchmark: where the recording lane's cycles go. Each kernel repeats one
// stage of the recorder in a loop on lane 0 of one warp and reports cycles
// per iteration:
//   timer     %globaltimer + lane election
//   cursor    + the shared-memory cursor: tag load, slot atomic, broadcast
//   tag       + the identity hash the cursor is checked against
//   store     + the 16-byte event store to global memory
//   marker    the real SMPROF_INSTANT, with an arena this program publishes
//             itself (the way the injector does), so it runs without smprof-run
#include <smprof/smprof.cuh>

#include <cstdio>
#include <cstdlib>

namespace sd = smprof::detail;

constexpr int kIters = 256;

template <int kStage>
__global__ void stage_loop(long long* cycles, unsigned long long* sink) {
  __shared__ unsigned long long cursor[2 * 32];
  if (threadIdx.x == 0) cursor[0] = cursor[1] = 0;
  __syncwarp();
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(&cursor[0]));
  unsigned long long acc = 0;
  const long long t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < kIters; ++i) {
    if (kStage == 4) {
      SMPROF_INSTANT("bench");
      continue;
    }
    const uint64_t now = sd::sreg::GlobalTimer();
    const unsigned active = __activemask();
    const bool leader = sd::sreg::LaneId() == static_cast<uint32_t>(__ffs(active) - 1);
    uint64_t tag = 0;
    uint32_t next = 0;
    if (kStage >= 1) {
      tag = sd::LoadTag(addr);
      next = __shfl_sync(active, sd::TakeSlotIf(leader, addr), __ffs(active) - 1);
    }
    if (kStage >= 2) tag ^= sd::WarpTag(sd::sreg::GridId(), 1);
    if (kStage >= 3) {
      sd::Store16If(leader, reinterpret_cast<uint64_t>(sink) + ((next & 255u) << 4), now, tag);
    } else {
      acc += (now ^ tag ^ next) & (leader ? ~0ull : 0ull);
    }
  }
  const long long t1 = clock64();
  if (threadIdx.x == 0) {
    cycles[kStage] = t1 - t0;
    sink[600] = acc;
  }
}

int main() {
  long long* d;
  unsigned long long* sink;
  if (cudaMalloc(&d, 64 * sizeof(long long)) != cudaSuccess || cudaMalloc(&sink, 8192) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA GPU\n");
    return 2;
  }
  // An arena published the way the injector does it.
  constexpr size_t kArenaBytes = 16u << 20;
  char* arena;
  if (cudaMalloc(&arena, kArenaBytes) != cudaSuccess || cudaMemset(arena, 0, kArenaBytes) != cudaSuccess) return 2;
  smprof::wire::ArenaRef ref{};
  ref.arena = reinterpret_cast<uint64_t>(arena);
  ref.chunks = ref.arena + 1024;
  ref.num_chunks = (kArenaBytes - 1024) / 1024;
  ref.chunk_shift = 10;
  ref.warp_mask = 0xffffffffu;
  ref.epoch = 1;
  if (cudaMemcpyToSymbol(sd::g_arena<sd::kAbiVersion>, &ref, sizeof(ref)) != cudaSuccess) return 2;
  for (int rep = 0; rep < 2; ++rep) {  // first pass warms up
    stage_loop<0><<<1, 32>>>(d, sink);
    stage_loop<1><<<1, 32>>>(d, sink);
    stage_loop<2><<<1, 32>>>(d, sink);
    stage_loop<3><<<1, 32>>>(d, sink);
    stage_loop<4><<<1, 32>>>(d, sink);
  }
  long long h[5];
  cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  const char* names[] = {"timer+elect", "+cursor tag/atomic/shfl", "+identity hash", "+16B event store",
                         "SMPROF_INSTANT (full)"};
  std::printf("recorder stages, one warp, cycles per iteration:\n");
  for (int s = 0; s < 5; ++s) std::printf("  %-24s %8.1f\n", names[s], static_cast<double>(h[s]) / kIters);
  return 0;
}
