// The options a marker takes after its name (smprof.cuh):
//
//   smprof::when(cond)          record when cond holds on any active lane
//   smprof::on_warp(w)          ... only on warp w of each block
//   smprof::on_warps(first, n)  ... only on warps first .. first + n - 1
//   smprof::per_block()         ... only on warp 0 of each block
//   smprof::value(v)            an integer value on an END or an INSTANT
//   smprof::arg(n)              the integer of a formatted name ("stage %d")
//
// Plain values, compiled by nvcc and by host compilers alike (so that code
// built with SMPROF_DISABLE, or a host pass, still type-checks the markers'
// arguments). What they do is in record.cuh; the warp choices are kept as
// numbers here and compared with the warp's index only once the marker knows
// it records, so an idle marker does not read %tid for them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "smprof/detail/macros.h"

namespace smprof {

struct When {
  bool ok;
};
struct OnWarps {
  uint32_t first;
  uint32_t count;
};
template <typename T>
struct ValueOption {
  T v;
};
struct ArgOption {
  uint32_t n;
};

SMPROF_HOST_DEVICE SMPROF_FORCEINLINE When when(bool condition) { return When{condition}; }
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE OnWarps on_warp(uint32_t warp) { return OnWarps{warp, 1}; }
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE OnWarps on_warps(uint32_t first, uint32_t count) { return OnWarps{first, count}; }
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE OnWarps per_block() { return OnWarps{0, 1}; }

template <typename T>
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE ValueOption<T> value(T v) {
  static_assert(std::is_integral<T>::value || std::is_enum<T>::value, "smprof::value takes an integer");
  static_assert(sizeof(T) <= 8, "smprof::value takes at most 64 bits");
  return ValueOption<T>{v};
}

template <typename T>
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE ArgOption arg(T n) {
  static_assert(std::is_integral<T>::value || std::is_enum<T>::value, "smprof::arg takes an integer");
  static_assert(sizeof(T) <= 4, "smprof::arg takes a 32-bit integer (the name's %d)");
  return ArgOption{static_cast<uint32_t>(n)};
}

namespace detail {

// What a pack of options means, known at compile time.
template <typename T>
struct OptionTraits {
  static_assert(sizeof(T) == 0, "a marker's options are smprof::when, on_warp, on_warps, per_block, value and arg");
};
template <>
struct OptionTraits<When> {
  static constexpr bool kPredicate = true, kValue = false, kWide = false, kArg = false;
};
template <>
struct OptionTraits<OnWarps> {
  static constexpr bool kPredicate = true, kValue = false, kWide = false, kArg = false;
};
template <typename T>
struct OptionTraits<ValueOption<T>> {
  static constexpr bool kPredicate = false, kValue = true, kWide = sizeof(T) == 8, kArg = false;
};
template <>
struct OptionTraits<ArgOption> {
  static constexpr bool kPredicate = false, kValue = false, kWide = false, kArg = true;
};

template <typename... Opts>
struct OptionPack {
  static constexpr int kValues = (0 + ... + (OptionTraits<Opts>::kValue ? 1 : 0));
  static constexpr int kArgs = (0 + ... + (OptionTraits<Opts>::kArg ? 1 : 0));
  static constexpr bool kPredicated = (false || ... || OptionTraits<Opts>::kPredicate);
  static constexpr bool kWide = (false || ... || OptionTraits<Opts>::kWide);
  static_assert(kValues + kArgs <= 1, "a marker takes one smprof::value or one smprof::arg, not both");
};

// What markers compiled away (SMPROF_DISABLE) leave: their arguments are
// evaluated, as with markers enabled, and discarded (no code for a name or
// a pure expression; variables used only in markers stay "used").
template <typename... T>
SMPROF_HOST_DEVICE SMPROF_FORCEINLINE constexpr int Unused(const T&...) {
  return 0;
}

}  // namespace detail
}  // namespace smprof
