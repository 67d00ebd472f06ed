#include "collector/proto_reader.h"

#include "collector/proto_encoder.h"

namespace smprof::proto {

bool ProtoReader::ReadVarint(uint64_t* value) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size()) return false;
    const auto byte = static_cast<uint8_t>(data_[pos_++]);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *value = v;
      return true;
    }
  }
  return false;  // more than 10 bytes
}

bool ProtoReader::Next(Field* field) {
  if (!ok_ || pos_ >= data_.size()) return false;
  uint64_t tag = 0;
  if (!ReadVarint(&tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX) {
    ok_ = false;
    return false;
  }
  *field = Field{};
  field->number = static_cast<uint32_t>(tag >> 3);
  field->type = static_cast<uint32_t>(tag & 7);
  switch (field->type) {
    case kVarint:
      ok_ = ReadVarint(&field->value);
      break;
    case kFixed64:
    case kFixed32: {
      const size_t n = field->type == kFixed64 ? 8 : 4;
      if (data_.size() - pos_ < n) {
        ok_ = false;
        break;
      }
      for (size_t i = 0; i < n; ++i) field->value |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
      pos_ += n;
      break;
    }
    case kLengthDelimited: {
      uint64_t len = 0;
      if (!ReadVarint(&len) || len > data_.size() - pos_) {
        ok_ = false;
        break;
      }
      field->bytes = data_.substr(pos_, static_cast<size_t>(len));
      pos_ += static_cast<size_t>(len);
      break;
    }
    default:
      ok_ = false;  // groups (3, 4) and reserved types: not in any smprof trace
  }
  return ok_;
}

size_t WholePackets(std::string_view trace, const std::function<void(std::string_view)>& each) {
  ProtoReader r(trace);
  Field f;
  size_t whole = 0;
  while (r.Next(&f) && f.number == 1 && f.type == kLengthDelimited) {
    whole = static_cast<size_t>(f.bytes.data() + f.bytes.size() - trace.data());
    if (each) each(f.bytes);
  }
  return whole;
}

}  // namespace smprof::proto
