#include "collector/name_format.h"

#include <cinttypes>
#include <cstdio>

namespace smprof {
namespace {

// A conversion at format[at] == '%': its length, or 0 if it is not one.
// *zero, *width and *conv describe it.
size_t ParseConversion(std::string_view format, size_t at, bool* zero, int* width, char* conv) {
  size_t i = at + 1;
  *zero = i < format.size() && format[i] == '0';
  if (*zero) ++i;
  *width = 0;
  for (int digits = 0; i < format.size() && format[i] >= '0' && format[i] <= '9'; ++i, ++digits) {
    if (digits == 2) return 0;
    *width = *width * 10 + (format[i] - '0');
  }
  if (i == format.size()) return 0;
  *conv = format[i];
  switch (*conv) {
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
      return i + 1 - at;
    default:
      return 0;
  }
}

std::string Convert(uint32_t integer, bool zero, int width, char conv) {
  // The spec is built here from checked parts, never taken from the format.
  char spec[8];
  char* s = spec;
  *s++ = '%';
  if (zero) *s++ = '0';
  *s++ = '*';
  const bool is_signed = conv == 'd' || conv == 'i';
  if (is_signed) {
    *s++ = 'd';
  } else {
    *s++ = conv;
  }
  *s = '\0';
  char out[128];  // a width of 99 and a sign
  if (is_signed) {
    std::snprintf(out, sizeof(out), spec, width, static_cast<int32_t>(integer));
  } else {
    std::snprintf(out, sizeof(out), spec, width, static_cast<unsigned>(integer));
  }
  return out;
}

}  // namespace

std::string RenderName(std::string_view format, uint32_t integer) {
  std::string out;
  out.reserve(format.size() + 12);
  bool converted = false;
  for (size_t i = 0; i < format.size();) {
    const char c = format[i];
    if (c != '%') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '%') {
      out += '%';
      i += 2;
      continue;
    }
    bool zero = false;
    int width = 0;
    char conv = 0;
    const size_t n = converted ? 0 : ParseConversion(format, i, &zero, &width, &conv);
    if (n == 0) {
      out += c;
      ++i;
      continue;
    }
    out += Convert(integer, zero, width, conv);
    converted = true;
    i += n;
  }
  if (!converted) out += " " + std::to_string(static_cast<int32_t>(integer));
  return out;
}

}  // namespace smprof
