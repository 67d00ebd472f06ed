// Calibration: what a marker costs on this GPU, and how fast its SM clock runs.
//
// At arena creation the injector runs calibration_kernel.cu (embedded as a
// fatbin) on one warp, on its private stream, against a private arena
// published to that module alone: the recording costs of a marker with a
// profiling context, without one, and on a diverged warp, the idle cost (the
// arena reference zeroed), and %clock64 against %globaltimer over 200 us.
// The results go into the trace with the GPU's facts, so a reader knows how
// much of each range is the profiler, and the SM clock is the fallback rate
// for mapping event cycles to nanoseconds (collector/clock_map.h).
#pragma once

#include <cuda.h>

#include <functional>
#include <string>

#include "injector/shipper.h"  // Calibration, which the device's facts carry

namespace smprof::injector {

// Runs the calibration in the current context. `arena_symbol` is the mangled
// name of the module's arena reference; `wait_idle(stream)` waits for the
// stream for a bounded time (false: the GPU was too busy). On any failure,
// returns false with `*why` set; device memory still in use by a kernel that
// did not finish is left allocated rather than freed under it.
bool Calibrate(CUstream stream, const std::string& arena_symbol, const std::function<bool(CUstream)>& wait_idle,
               Calibration* out, std::string* why);

}  // namespace smprof::injector
