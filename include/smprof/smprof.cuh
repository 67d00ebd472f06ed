// smprof: intra-kernel markers.
//
//   #include <smprof/smprof.cuh>
//
//   __global__ void gemm(...) {
//     SMPROF_KERNEL();                  // a context, and a "kernel" range over the warp's body
//     SMPROF_RANGE("load") { ... }      // a scoped range around a block
//     SMPROF_SCOPE("compute");          // a range until the end of the enclosing scope
//     SMPROF_BEGIN("mma"); ...; SMPROF_END("mma");   // explicit begin/end
//     SMPROF_INSTANT("barrier");        // a point in time
//     SMPROF_PHASE("load"); ...; SMPROF_PHASE("mma"); ...; SMPROF_PHASE_END();
//                                       // one stamp ends a phase and starts the next
//     SMPROF_INSTANT("tile", smprof::value(tile));   // a 32- or 64-bit integer value
//     SMPROF_END("mma", smprof::value(k));           // ... on a range's end
//     SMPROF_COUNTER("in flight", n);   // a counter sample (a counter track per warp)
//     SMPROF_ASYNC_BEGIN("stage", s);   // a span that another warp of the block ends
//     SMPROF_ASYNC_END("stage", s);     //   with the same name and token
//     SMPROF_RANGE("stage %d", smprof::arg(s)) { ... }   // a name with an integer
//   }
//
// Options after the name, in any order: smprof::when(cond) records only when
// cond holds on some active lane (a warp vote: the warp stays converged);
// smprof::on_warp(w), on_warps(first, count), per_block() record only on
// those warps of each block (e.g. the producer warp of a warp-specialised
// kernel); smprof::value(v) and smprof::arg(n) as above. SMPROF_WARPS
// (run-wide sampling) applies on top. docs/device-api.md has the details.
//
// Names are string literals: no registration, no code generation, no cap on
// how many. Each marker records who (SM, block, warp, launch) and when
// (%clock64: SM cycles, mapped onto the GPU's nanosecond timeline) on one lane
// per warp, into a buffer that `smprof-run` provides: kernel signatures and
// host code do not change. Which warps record is chosen at run time
// (SMPROF_WARPS, e.g. "0,4-7", warp indices within the block).
//
// The fastest recording needs one line in the kernel (SMPROF_KERNEL() is
// this and a range over the rest of the kernel):
//
//   __global__ void gemm(...) {
//     SMPROF_CONTEXT();                 // the write cursor lives in a register
//     ...markers as above...
//   }
//
// Markers find the context by its name (`smprof_ctx`); device functions get
// it as a parameter of that name (`smprof::Context& smprof_ctx`). Without a
// context, markers keep their cursor in shared memory (16 bytes per warp):
// a few cycles more per event, nothing to declare.
//
// Cost: without smprof-run a marker is one load and one uniform branch (with
// a context: one register compare). Compiled with -DSMPROF_DISABLE every
// marker compiles to nothing. Measured costs: docs/performance.md.
//
// Ranges on one warp must nest (END closes the latest open BEGIN of the same
// name). A BEGIN and its END may sit in different functions.
#pragma once

#include "smprof/detail/macros.h"
#include "smprof/detail/options.h"
#include "smprof/wire.h"

#if defined(__CUDACC__) && !defined(SMPROF_DISABLE)
#include "smprof/detail/record.cuh"

// Names bind to `const char (&)[N]`: string literals (or character arrays).
#define SMPROF_CONTEXT() ::smprof::Context smprof_ctx
#define SMPROF_KERNEL()         \
  ::smprof::Context smprof_ctx; \
  auto smprof_kernel_range_ = ::smprof::detail::OpenRange(smprof_ctx, "kernel")
#define SMPROF_RANGE(...) \
  if (auto SMPROF_UNIQUE(smprof_range_) = ::smprof::detail::OpenRange(smprof_ctx, __VA_ARGS__); true)
#define SMPROF_SCOPE(...) auto SMPROF_UNIQUE(smprof_scope_) = ::smprof::detail::OpenRange(smprof_ctx, __VA_ARGS__)
#define SMPROF_BEGIN(...) ::smprof::detail::Mark<::smprof::wire::kEventBegin>(smprof_ctx, __VA_ARGS__)
#define SMPROF_END(...) ::smprof::detail::Mark<::smprof::wire::kEventEnd>(smprof_ctx, __VA_ARGS__)
#define SMPROF_INSTANT(...) ::smprof::detail::Mark<::smprof::wire::kEventInstant>(smprof_ctx, __VA_ARGS__)
#define SMPROF_PHASE(...) ::smprof::detail::Mark<::smprof::wire::kEventPhase>(smprof_ctx, __VA_ARGS__)
#define SMPROF_PHASE_END(...) ::smprof::detail::EndPhase(smprof_ctx)(__VA_ARGS__)
#define SMPROF_COUNTER(...) ::smprof::detail::Counter(smprof_ctx, __VA_ARGS__)
#define SMPROF_ASYNC_BEGIN(...) ::smprof::detail::Async<::smprof::wire::kEventAsyncBegin>(smprof_ctx, __VA_ARGS__)
#define SMPROF_ASYNC_END(...) ::smprof::detail::Async<::smprof::wire::kEventAsyncEnd>(smprof_ctx, __VA_ARGS__)

#else  // disabled, or a host-only compiler: markers compile to nothing but their arguments

namespace smprof {
struct Context {};  // so that functions taking `smprof::Context&` still compile
}  // namespace smprof

#define SMPROF_CONTEXT() [[maybe_unused]] ::smprof::Context smprof_ctx
#define SMPROF_KERNEL() SMPROF_CONTEXT()
#define SMPROF_UNUSED_MARKER(...) ((void)::smprof::detail::Unused(__VA_ARGS__))
#define SMPROF_RANGE(...) if (SMPROF_UNUSED_MARKER(__VA_ARGS__), true)
#define SMPROF_SCOPE(...) SMPROF_UNUSED_MARKER(__VA_ARGS__)
#define SMPROF_BEGIN(...) SMPROF_UNUSED_MARKER(__VA_ARGS__)
#define SMPROF_END(...) SMPROF_UNUSED_MARKER(__VA_ARGS__)
#define SMPROF_INSTANT(...) SMPROF_UNUSED_MARKER(__VA_ARGS__)
#define SMPROF_PHASE(...) SMPROF_UNUSED_MARKER(__VA_ARGS__)
#define SMPROF_PHASE_END(...) SMPROF_UNUSED_MARKER(__VA_ARGS__)
#define SMPROF_COUNTER(...) SMPROF_UNUSED_MARKER(__VA_ARGS__)
#define SMPROF_ASYNC_BEGIN(...) SMPROF_UNUSED_MARKER(__VA_ARGS__)
#define SMPROF_ASYNC_END(...) SMPROF_UNUSED_MARKER(__VA_ARGS__)

#endif
