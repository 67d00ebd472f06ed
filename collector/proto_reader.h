// ProtoReader: walks the fields of one protobuf message, bounds-checked.
//
// The counterpart of ProtoEncoder for smprof's own checks of the traces it
// writes (tests decode every protobuf trace with it, independently of
// Perfetto). Never reads outside the given bytes: a truncated or malformed
// field ends the walk with ok() false.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

namespace smprof::proto {

struct Field {
  uint32_t number = 0;
  uint32_t type = 0;           // WireType
  uint64_t value = 0;          // varint, fixed64 or fixed32
  std::string_view bytes;      // length-delimited payload
};

class ProtoReader {
 public:
  explicit ProtoReader(std::string_view message) : data_(message) {}

  // The next field, or false at the end or on malformed input (see ok()).
  bool Next(Field* field);
  bool ok() const { return ok_; }

 private:
  bool ReadVarint(uint64_t* value);

  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// The length of the longest prefix of `trace` made of whole Trace.packet
// fields (field 1, length-delimited): a trace cut anywhere keeps that much.
// `each`, when given, sees every such packet's bytes in order.
size_t WholePackets(std::string_view trace, const std::function<void(std::string_view)>& each = nullptr);

}  // namespace smprof::proto
