// What the calibration kernel (calibration_kernel.cu, device code) writes and
// the injector (calibration.cc) reads: one definition for both sides.
#pragma once

namespace smprof::calibration {

inline constexpr int kEvents = 64;  // markers per timed loop

// Result slots, one 64-bit word each: loop cycles (least of the rounds), then
// %clock64 and %globaltimer at the start and the end of the clock-rate spin.
enum Slot : int { kEmpty, kContext, kDefault, kDivergedEmpty, kDiverged, kClock0, kTime0, kClock1, kTime1, kSlots };

}  // namespace smprof::calibration
