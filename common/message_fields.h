// Building transport messages (include/smprof/wire.h): a fixed part that
// starts all zero, and a text tail no longer than the collector accepts.
// Shared by whatever writes messages: the injector's shipper and the
// collector's launch assembler.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "smprof/wire.h"

namespace smprof {

template <typename Msg>
Msg ZeroedMessage() {
  Msg m;
  std::memset(&m, 0, sizeof(m));
  return m;
}

// The length of `text` as a message tail: at most wire::kMaxTextBytes.
inline uint32_t TextLength(const std::string& text) {
  return static_cast<uint32_t>(std::min<size_t>(text.size(), wire::kMaxTextBytes));
}

}  // namespace smprof
