// RepairAnyTraceFile: a protobuf trace cut inside a packet keeps its whole
// packets; a JSON trace is closed; anything else is refused, naming the file.
#include "collector/trace_repair.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "collector/proto_reader.h"

namespace smprof {
namespace {

std::string Temp(const std::string& content) {
  char name[] = "/tmp/smprof-repair-XXXXXX";
  const int fd = mkstemp(name);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  close(fd);
  return name;
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TraceRepairTest, ProtobufIsCutAfterItsLastWholePacket) {
  // Two packets (0x0A len payload), then a third cut inside its payload.
  const std::string whole = std::string("\x0a\x02\x50\x01", 4) + std::string("\x0a\x03\x50\x02\x10", 5);
  const std::string path = Temp(whole + std::string("\x0a\x05\x50", 3));
  bool repaired = false;
  std::string error;
  ASSERT_TRUE(RepairAnyTraceFile(path, &repaired, &error)) << error;
  EXPECT_TRUE(repaired);
  EXPECT_EQ(Read(path), whole);
  // Whole already: left as it is.
  ASSERT_TRUE(RepairAnyTraceFile(path, &repaired, &error)) << error;
  EXPECT_FALSE(repaired);
  EXPECT_EQ(Read(path), whole);
  unlink(path.c_str());
}

TEST(TraceRepairTest, ALengthCutInsideItsVarintIsDropped) {
  const std::string whole("\x0a\x01\x00", 3);
  EXPECT_EQ(proto::WholePackets(whole + "\x0a\x80"), whole.size());
  EXPECT_EQ(proto::WholePackets(whole + "\x0a"), whole.size());
  EXPECT_EQ(proto::WholePackets(""), 0u);
}

TEST(TraceRepairTest, JsonIsClosedAndOtherFilesAreRefused) {
  const std::string json = Temp("[\n{\"ph\":\"i\"},\n{\"ph\":");
  bool repaired = false;
  std::string error;
  ASSERT_TRUE(RepairAnyTraceFile(json, &repaired, &error)) << error;
  EXPECT_TRUE(repaired);
  EXPECT_EQ(Read(json), "[\n{\"ph\":\"i\"}\n]\n");
  unlink(json.c_str());
  const std::string other = Temp("hello");
  EXPECT_FALSE(RepairAnyTraceFile(other, &repaired, &error));
  EXPECT_NE(error.find(other), std::string::npos) << error;
  unlink(other.c_str());
}

}  // namespace
}  // namespace smprof
