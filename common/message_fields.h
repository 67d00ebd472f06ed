// Building transport messages (include/smprof/wire.h): a fixed part that
// starts all zero, a text tail no longer than the collector accepts, and a
// message gathered from parts. Shared by whatever writes messages: the
// injector's shipper, the transport and the collector's launch assembler.
#pragma once

#include <algorithm>
#include <cstddef>
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

// One piece of a message sent in parts, copied in order (the first begins
// with its MsgHeader).
struct MessagePart {
  const void* data;
  size_t bytes;
};

// The length of `text` as a message tail: at most wire::kMaxTextBytes.
inline uint32_t TextLength(const std::string& text) {
  return static_cast<uint32_t>(std::min<size_t>(text.size(), wire::kMaxTextBytes));
}

}  // namespace smprof
