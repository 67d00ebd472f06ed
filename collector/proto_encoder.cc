#include "collector/proto_encoder.h"

#include <cstring>
#include <utility>

namespace smprof::proto {

namespace {
constexpr size_t kReserved = 4;             // a 4-byte varint holds lengths below 2^28
constexpr size_t kMaxNestedBytes = 1u << 28;
}  // namespace

size_t ProtoEncoder::VarintSize(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

void ProtoEncoder::Grow(size_t n) {
  size_t cap = cap_ == 0 ? 4096 : cap_;
  while (cap - size_ < n) cap *= 2;
  std::unique_ptr<char[]> data(new char[cap]);
  if (size_ != 0) std::memcpy(data.get(), data_.get(), size_);
  data_ = std::move(data);
  cap_ = cap;
}

void ProtoEncoder::Fixed64(uint32_t field, uint64_t value) {
  Room(18);
  Put((static_cast<uint64_t>(field) << 3) | kFixed64);
  char* p = data_.get() + size_;
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(value >> (8 * i));
  size_ += 8;
}

void ProtoEncoder::Bytes(uint32_t field, std::string_view bytes) {
  Room(20 + bytes.size());
  Put((static_cast<uint64_t>(field) << 3) | kLengthDelimited);
  Put(bytes.size());
  if (!bytes.empty()) std::memcpy(data_.get() + size_, bytes.data(), bytes.size());
  size_ += bytes.size();
}

ProtoEncoder::Nested ProtoEncoder::BeginNested(uint32_t field) {
  Room(10 + kReserved);
  Put((static_cast<uint64_t>(field) << 3) | kLengthDelimited);
  const size_t at = size_;
  size_ += kReserved;
  return Nested{at};
}

void ProtoEncoder::EndNested(Nested nested) {
  const size_t payload = size_ - nested.size_at - kReserved;
  char* p = data_.get() + nested.size_at;
  if (payload < 0x80) {
    // One length byte: move the payload back over the other three.
    p[0] = static_cast<char>(payload);
    std::memmove(p + 1, p + kReserved, payload);
    size_ -= kReserved - 1;
    return;
  }
  // Redundant 4-byte varint (valid protobuf): continuation bits on the first three.
  const uint64_t n = payload < kMaxNestedBytes ? payload : kMaxNestedBytes - 1;
  p[0] = static_cast<char>((n & 0x7f) | 0x80);
  p[1] = static_cast<char>(((n >> 7) & 0x7f) | 0x80);
  p[2] = static_cast<char>(((n >> 14) & 0x7f) | 0x80);
  p[3] = static_cast<char>((n >> 21) & 0x7f);
}

}  // namespace smprof::proto
