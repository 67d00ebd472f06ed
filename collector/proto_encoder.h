// ProtoEncoder: the protobuf wire format, written the protozero way.
//
// Appends fields to one growing byte buffer; a nested message reserves a
// 4-byte length and, when it ends, writes its real length there: no
// second pass and no per-message allocation. A length under 128 (the common
// case for trace events) is then shortened to its single byte by moving the
// payload back 3 bytes, so small messages cost exactly what a two-pass
// encoder would write (Perfetto's protozero keeps the redundant 4-byte form;
// at ~10 bytes per event 3 bytes matter). Only what the Perfetto writer
// needs: varints, fixed64, length-delimited bytes and nested messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace smprof::proto {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

class ProtoEncoder {
 public:
  // A nested message under way: pass it to EndNested.
  struct Nested {
    size_t size_at;  // offset of the reserved 4-byte length
  };

  void Varint(uint32_t field, uint64_t value) {
    Room(20);
    Put((static_cast<uint64_t>(field) << 3) | kVarint);
    Put(value);
  }
  void Fixed64(uint32_t field, uint64_t value);
  void Bytes(uint32_t field, std::string_view bytes);
  Nested BeginNested(uint32_t field);
  void EndNested(Nested nested);

  std::string_view bytes() const { return std::string_view(data_.get(), size_); }
  size_t size() const { return size_; }
  void Clear() { size_ = 0; }

  // Bytes a varint of `value` takes.
  static size_t VarintSize(uint64_t value);

 private:
  // Makes room for `n` more bytes (amortised doubling).
  void Room(size_t n) {
    if (cap_ - size_ < n) Grow(n);
  }
  void Grow(size_t n);
  // Appends a varint; Room() was called for it.
  void Put(uint64_t value) {
    char* p = data_.get() + size_;
    while (value >= 0x80) {
      *p++ = static_cast<char>((value & 0x7f) | 0x80);
      value >>= 7;
    }
    *p++ = static_cast<char>(value);
    size_ = static_cast<size_t>(p - data_.get());
  }

  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
  size_t cap_ = 0;
};

}  // namespace smprof::proto
