// The protobuf encoder and reader the Perfetto writer is built on.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "collector/proto_encoder.h"
#include "collector/proto_reader.h"

namespace smprof::proto {
namespace {

std::string Hex(std::string_view bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    out.push_back(kDigits[(static_cast<uint8_t>(c) >> 4) & 0xf]);
    out.push_back(kDigits[static_cast<uint8_t>(c) & 0xf]);
  }
  return out;
}

// A TracePacket {timestamp 1003200, trusted_packet_sequence_id 1,
// sequence_flags 2, track_event {type SLICE_END}} inside Trace.packet: the
// bytes Perfetto's own encoding gives (shared/notes/perfetto-format.md 2.2.9).
TEST(ProtoEncoder, WritesPerfettoPacketBytesExactly) {
  ProtoEncoder e;
  const auto packet = e.BeginNested(1);
  e.Varint(8, 1003200);
  e.Varint(10, 1);
  e.Varint(13, 2);
  const auto event = e.BeginNested(11);
  e.Varint(9, 2);
  e.EndNested(event);
  e.EndNested(packet);
  EXPECT_EQ(Hex(e.bytes()), "0a0c40c09d3d500168025a024802");
}

TEST(ProtoEncoder, LongNestedMessagesKeepARedundantFourByteLength) {
  ProtoEncoder e;
  const auto outer = e.BeginNested(3);
  e.Bytes(2, std::string(200, 'x'));
  e.EndNested(outer);
  // tag 0x1a, then 203 (2 + 1 + 200: tag, 2-byte length, payload) as a 4-byte varint.
  EXPECT_EQ(Hex(e.bytes().substr(0, 5)), "1acb818000");
  ProtoReader r(e.bytes());
  Field f;
  ASSERT_TRUE(r.Next(&f));
  EXPECT_EQ(f.number, 3u);
  EXPECT_EQ(f.bytes.size(), 203u);
  ProtoReader inner(f.bytes);
  ASSERT_TRUE(inner.Next(&f));
  EXPECT_EQ(f.bytes, std::string(200, 'x'));
  EXPECT_FALSE(inner.Next(&f));
  EXPECT_TRUE(inner.ok());
}

TEST(ProtoReader, ReadsEveryWireTypeTheEncoderWrites) {
  ProtoEncoder e;
  e.Varint(1, 0);
  e.Varint(2, UINT64_MAX);
  e.Fixed64(47, 0x0123456789abcdefull);
  e.Bytes(23, "name");
  const auto n = e.BeginNested(60);
  e.Varint(1, 300);
  e.EndNested(n);
  ProtoReader r(e.bytes());
  Field f;
  ASSERT_TRUE(r.Next(&f));
  EXPECT_EQ(f.value, 0u);
  ASSERT_TRUE(r.Next(&f));
  EXPECT_EQ(f.value, UINT64_MAX);
  ASSERT_TRUE(r.Next(&f));
  EXPECT_EQ(f.type, static_cast<uint32_t>(kFixed64));
  EXPECT_EQ(f.value, 0x0123456789abcdefull);
  ASSERT_TRUE(r.Next(&f));
  EXPECT_EQ(f.bytes, "name");
  ASSERT_TRUE(r.Next(&f));
  EXPECT_EQ(f.number, 60u);
  EXPECT_EQ(Hex(f.bytes), "08ac02");
  EXPECT_FALSE(r.Next(&f));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(ProtoEncoder::VarintSize(127), 1u);
  EXPECT_EQ(ProtoEncoder::VarintSize(128), 2u);
  EXPECT_EQ(ProtoEncoder::VarintSize(UINT64_MAX), 10u);
}

TEST(ProtoReader, StopsAtMalformedInputWithoutReadingPastIt) {
  const std::string cases[] = {
      std::string("\x0a\x05" "abc", 5),    // length past the end
      std::string("\x08\x80\x80", 3),      // varint cut off
      std::string("\x09\x01\x02", 3),      // fixed64 cut off
      std::string("\x00\x01", 2),          // field number 0
      std::string("\x0b\x01", 2),          // group start (wire type 3)
      std::string(11, '\xff'),             // tag varint longer than 10 bytes
  };
  for (const std::string& bytes : cases) {
    ProtoReader r(bytes);
    Field f;
    while (r.Next(&f)) {
    }
    EXPECT_FALSE(r.ok()) << Hex(bytes);
  }
}

}  // namespace
}  // namespace smprof::proto
