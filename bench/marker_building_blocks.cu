// Benchmark: what each building block of a marker costs a lone warp, in
// cycles per loop iteration (64 iterations, clock64 around the loop): a
// clock read and a 16-byte store (the floor), a uniform check before it, an
// __activemask() compare, a chunk-boundary test with a call or an inline
// atomic behind it, as plain C++ branches, votes, or a PTX bra.uni. The
// recorder's design (include/smprof/detail/record.cuh) follows from these
// figures: on H100 every branch on the marker's path costs ~20-25 cycles,
// which is why the common case takes none but its idle check and one rare
// branch. Figures: docs/measurements/h100-issue6-branch-micro.txt.
#include <cstdint>
#include <cstdio>
__constant__ unsigned long long g_on;
__device__ __noinline__ unsigned long long Refill(unsigned long long c) { return c + 48; }
__device__ __forceinline__ unsigned long long Clk() { unsigned long long c; asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)); return c; }
__device__ __forceinline__ void St(bool p, unsigned long long a, unsigned long long lo, unsigned long long hi) {
  asm volatile("{.reg .pred q; setp.ne.b32 q, %0, 0; @q st.global.v2.u64 [%1], {%2, %3};}" :: "r"((unsigned)p), "l"(a), "l"(lo), "l"(hi) : "memory");
}
// Whole fast path in PTX: uniform-branch (bra.uni) over an inline claim that
// only bumps a counter (stands in for the claim).
__device__ __forceinline__ void AsmMark(unsigned long long& cur, unsigned long long ctr, bool lead) {
  asm volatile("{\n .reg .pred full, ld;\n .reg .b64 c, t;\n .reg .b32 lo;\n"
               " mov.u64 c, %%clock64;\n cvt.u32.u64 lo, %0;\n and.b32 lo, lo, 4095;\n setp.eq.u32 full, lo, 0;\n"
               " @!full bra.uni $Lfast;\n atom.global.add.u64 t, [%1], 1;\n add.u64 %0, %0, 48;\n"
               "$Lfast:\n setp.ne.u32 ld, %2, 0;\n @ld st.global.v2.u64 [%0], {c, c};\n add.u64 %0, %0, 16;\n}"
               : "+l"(cur) : "l"(ctr), "r"((unsigned)lead) : "memory");
}
template <int V>
__global__ void k(unsigned long long* buf, long long* out) {
  unsigned long long cur = reinterpret_cast<unsigned long long>(buf) + 48;
  const bool lead = (threadIdx.x & 31) == 0;
  const long long t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < 64; ++i) {
    if (V == 1) { const unsigned long long c = Clk(); St(lead, cur, c, 7); cur += 16; }
    if (V == 2) { if (g_on) { const unsigned long long c = Clk(); St(lead, cur, c, 7); cur += 16; } }
    if (V == 3) { if (g_on) { const unsigned long long c = Clk(); const unsigned a = __activemask();
                    St(lead && a == 0xffffffffu, cur, c, 7); cur += 16; } }
    if (V == 4) { if (g_on) { const unsigned long long c = Clk();
                    if (__any_sync(0xffffffffu, (cur & 4095) == 0)) cur = Refill(cur);
                    St(lead, cur, c, 7); cur += 16; } }
    if (V == 5) { if (g_on) { const unsigned long long c = Clk();
                    if ((cur & 4095) == 0) cur = Refill(cur);
                    St(lead, cur, c, 7); cur += 16; } }
    if (V == 6) { if (g_on) { const unsigned long long c = Clk(); const unsigned a = __activemask();
                    if (__any_sync(a, (cur & 4095) == 0 || a != 0xffffffffu)) cur = Refill(cur);
                    St(lead, cur, c, 7); cur += 16; } }
    if (V == 7) { if (g_on) AsmMark(cur, reinterpret_cast<unsigned long long>(buf) + (1 << 23), lead); }
    if (V == 8) { if (g_on) { const unsigned long long c = Clk();
                    const bool rare = (cur & 4095) == 0;
                    if (rare) { atomicAdd(reinterpret_cast<unsigned long long*>(buf) + (1 << 20), 1ull); cur += 48; }
                    St(lead, cur, c, 7); cur += 16; } }
    if (V == 9) { if (cur != 0) { const unsigned long long c = Clk(); St(lead, cur, c, 7); cur += 16; } }
    asm volatile("" ::: "memory");
  }
  const long long t1 = clock64();
  if (lead) out[threadIdx.x / 32] = t1 - t0;
  if (cur == 1) buf[0] = 1;
}
template <int V> void Run(unsigned long long* buf, long long* out, const char* what) {
  long long best = 1ll << 60;
  for (int r = 0; r < 7; ++r) { k<V><<<1, 32>>>(buf, out); long long h; cudaMemcpy(&h, out, 8, cudaMemcpyDeviceToHost); if (h < best) best = h; }
  printf("V%d %-58s %6.1f cycles/iteration\n", V, what, best / 64.0);
}
int main() {
  unsigned long long* buf; long long* out; cudaMalloc(&buf, 1 << 26); cudaMalloc(&out, 4096);
  unsigned long long v = 1; cudaMemcpyToSymbol(g_on, &v, 8);
  Run<0>(buf, out, "empty loop");
  Run<1>(buf, out, "clock + store, no check");
  Run<2>(buf, out, "uniform const check + clock + store");
  Run<3>(buf, out, "+ activemask into the store predicate");
  Run<4>(buf, out, "+ any_sync(full) chunk check -> call");
  Run<5>(buf, out, "+ plain chunk check -> call (BSSY)");
  Run<6>(buf, out, "+ activemask, any_sync(act) -> call");
  Run<7>(buf, out, "PTX: bra.uni over inline atomic");
  Run<8>(buf, out, "C++: plain chunk check -> inline atomic");
  Run<9>(buf, out, "register check (cur != 0) + clock + store");
  return 0;
}
