// Names with an integer (SMPROF_RANGE("stage %d", smprof::arg(s))): the
// device records the format's name id and the integer (wire
// kEventNameValue); the collector renders the name here, once per distinct
// (name, integer) of a producer (trace_builder.h interns the result).
//
// The first conversion takes the integer: %d or %i (signed), %u, %x or %X
// (unsigned 32-bit), each with an optional '0' flag and a width of at most
// two digits ("%05d", "%2x"). "%%" is a percent sign. Anything else after a
// '%' (another conversion, a longer width, a precision) is kept as written,
// as are conversions after the first. A format with no conversion gets the
// integer appended, signed, after a space ("stage" with 3: "stage 3").
//
// Pure and allocation-bounded: the result is at most the format's length
// plus 100 bytes; the format is untrusted bytes and is never given to printf.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace smprof {

std::string RenderName(std::string_view format, uint32_t integer);

}  // namespace smprof
