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
// (%globaltimer, ns) on one lane per warp (the lowest active lane), into a
// buffer that `smprof-run` provides: kernel signatures and host code do not
// change. Which warps record is chosen at run time (SMPROF_WARPS, e.g. "0,4-7",
// warp indices within the block).
//
// Cost: without smprof-run a marker is one load and one uniform branch.
// Compiled with -DSMPROF_DISABLE every marker compiles to nothing.
//
// Ranges on one warp must nest (END closes the latest open BEGIN of the same
// name). A BEGIN and its END may sit in different functions.
#pragma once

#include "smprof/detail/macros.h"
#include "smprof/wire.h"

#if defined(__CUDACC__) && !defined(SMPROF_DISABLE)
#include "smprof/detail/record.cuh"

// `"" name ""` only compiles for string literals.
#define SMPROF_RANGE(name) if (::smprof::detail::ScopedRange SMPROF_UNIQUE(smprof_range_){"" name ""}; true)
#define SMPROF_SCOPE(name) ::smprof::detail::ScopedRange SMPROF_UNIQUE(smprof_scope_) { "" name "" }
#define SMPROF_BEGIN(name) ::smprof::detail::Record("" name "", ::smprof::wire::kEventBegin)
#define SMPROF_END(name) ::smprof::detail::Record("" name "", ::smprof::wire::kEventEnd)
#define SMPROF_INSTANT(name) ::smprof::detail::Record("" name "", ::smprof::wire::kEventInstant)

#else  // disabled, or a host-only compiler: markers compile to nothing

#define SMPROF_RANGE(name) if (((void)sizeof("" name "")), true)
#define SMPROF_SCOPE(name) ((void)sizeof("" name ""))
#define SMPROF_BEGIN(name) ((void)sizeof("" name ""))
#define SMPROF_END(name) ((void)sizeof("" name ""))
#define SMPROF_INSTANT(name) ((void)sizeof("" name ""))

#endif
