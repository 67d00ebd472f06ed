// smprof: intra-kernel markers.
//
//   #include <smprof/smprof.cuh>
//
//   __global__ void gemm(...) {
//     SMPROF_RANGE("load") {            // a scoped range around a block
//       ...
//     }
//     SMPROF_SCOPE("compute");          // a range until the end of the enclosing scope
//     SMPROF_BEGIN("mma"); ...; SMPROF_END("mma");   // explicit begin/end
//     SMPROF_INSTANT("barrier");        // a point in time
//   }
//
// Names are string literals: no registration, no code generation, no cap on
// how many. Each marker records who (SM, block, warp, launch) and when
// (%clock64: SM cycles, mapped onto the GPU's nanosecond timeline) on one lane
// per warp, into a buffer that `smprof-run` provides: kernel signatures and
// host code do not change. Which warps record is chosen at run time
// (SMPROF_WARPS, e.g. "0,4-7", warp indices within the block).
//
// The fastest recording needs one line in the kernel:
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
#include "smprof/wire.h"

#if defined(__CUDACC__) && !defined(SMPROF_DISABLE)
#include "smprof/detail/record.cuh"

// `"" name ""` only compiles for string literals.
#define SMPROF_CONTEXT() ::smprof::Context smprof_ctx
#define SMPROF_RANGE(name) \
  if (::smprof::detail::ScopedRange SMPROF_UNIQUE(smprof_range_){smprof_ctx, "" name ""}; true)
#define SMPROF_SCOPE(name) ::smprof::detail::ScopedRange SMPROF_UNIQUE(smprof_scope_){smprof_ctx, "" name ""}
#define SMPROF_BEGIN(name) ::smprof::detail::Mark(smprof_ctx, ::smprof::wire::kEventBegin, "" name "", 0u)
#define SMPROF_END(name) ::smprof::detail::Mark(smprof_ctx, ::smprof::wire::kEventEnd, "" name "", 0u)
#define SMPROF_INSTANT(name) ::smprof::detail::Mark(smprof_ctx, ::smprof::wire::kEventInstant, "" name "", 0u)

#else  // disabled, or a host-only compiler: markers compile to nothing

namespace smprof {
struct Context {};  // so that functions taking `smprof::Context&` still compile
}  // namespace smprof

#define SMPROF_CONTEXT() [[maybe_unused]] ::smprof::Context smprof_ctx
#define SMPROF_RANGE(name) if (((void)sizeof("" name "")), true)
#define SMPROF_SCOPE(name) ((void)sizeof("" name ""))
#define SMPROF_BEGIN(name) ((void)sizeof("" name ""))
#define SMPROF_END(name) ((void)sizeof("" name ""))
#define SMPROF_INSTANT(name) ((void)sizeof("" name ""))

#endif
