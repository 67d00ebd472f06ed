// TraceWriter: output parses back, timestamps keep nanoseconds, untrusted
// names are escaped, an unfinished trace is a valid prefix.
#include "collector/trace_writer.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace smprof {
namespace {

std::string TempPath(const std::string& tag) {
  return ::testing::TempDir() + "trace_writer_test_" + tag + "_" + std::to_string(getpid()) +
         ".json";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Micros(uint64_t ns) {
  std::string s;
  AppendMicros(&s, ns);
  return s;
}

TEST(AppendMicrosTest, ExactlyThreeDecimalsFromIntegerNanoseconds) {
  EXPECT_EQ(Micros(0), "0.000");
  EXPECT_EQ(Micros(1), "0.001");
  EXPECT_EQ(Micros(999), "0.999");
  EXPECT_EQ(Micros(1000), "1.000");
  EXPECT_EQ(Micros(1234567), "1234.567");
  EXPECT_EQ(Micros(1000000010), "1000000.010");
  // Far beyond what a double holds exactly.
  EXPECT_EQ(Micros(18446744073709551615ull), "18446744073709551.615");
}

std::string Escaped(std::string_view in) {
  std::string s;
  AppendJsonString(&s, in);
  return s;
}

TEST(AppendJsonStringTest, EscapesAndRepairsUntrustedBytes) {
  EXPECT_EQ(Escaped("plain"), "\"plain\"");
  EXPECT_EQ(Escaped("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(Escaped(std::string_view("\n\t\x01\x1f", 4)), "\"\\u000a\\u0009\\u0001\\u001f\"");
  EXPECT_EQ(Escaped(std::string_view("a\0b", 3)), "\"a\\u0000b\"");
  // Valid multi-byte UTF-8 passes through.
  EXPECT_EQ(Escaped("\xE2\x82\xAC \xF0\x9F\x98\x80"), "\"\xE2\x82\xAC \xF0\x9F\x98\x80\"");
  // Each bad byte becomes U+FFFD.
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(Escaped("\xFF"), "\"" + fffd + "\"");
  EXPECT_EQ(Escaped("x\xE2\x82"), "\"x" + fffd + fffd + "\"");           // truncated sequence
  EXPECT_EQ(Escaped("\xC0\xAF"), "\"" + fffd + fffd + "\"");             // overlong
  EXPECT_EQ(Escaped("\xED\xA0\x80"), "\"" + fffd + fffd + fffd + "\"");  // surrogate
  EXPECT_EQ(Escaped("\xF4\x90\x80\x80"), "\"" + fffd + fffd + fffd + fffd + "\"");  // > U+10FFFF
}

TEST(AppendJsonStringTest, EveryByteStringParses) {
  // All single bytes and all byte pairs: the result must be valid JSON.
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      const char raw[3] = {static_cast<char>(a), static_cast<char>(b), '\xBF'};
      const std::string text = Escaped(std::string_view(raw, 3));
      ASSERT_TRUE(nlohmann::json::accept(text)) << "bytes " << a << " " << b << ": " << text;
    }
  }
}

class TraceWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { ::unlink(path_.c_str()); }
  std::string path_;
};

TEST_F(TraceWriterTest, WritesParseableTraceWithMetadataAndEvents) {
  std::string error;
  auto w = TraceWriter::Open(path_, &error);
  ASSERT_NE(w, nullptr) << error;
  const std::string nasty = std::string("k\"\\\n\x02\xFF<", 7) + "end";
  w->ProcessName(10, nasty);
  w->ProcessSortIndex(10, 1000001);
  w->ThreadName(10, 2, "SM 005 | block (1,0,0) | warp 1");
  w->ThreadSortIndex(10, 2, 3);
  JsonArgs args;
  const uint32_t grid[3] = {4, 1, 2};
  args.Uint("launch_id", 7)
      .Uint3("grid", grid)
      .Bool("unterminated", true)
      .String("note", nasty)
      .Int("neg", -5);
  w->Complete(10, 2, "outer", 1234567, 7001, &args);
  w->Instant(10, 2, "mark", 1000, nullptr);
  JsonArgs lost;
  lost.Uint("lost", 12);
  w->Counter(2, "events lost (device buffer)", 5000, lost);
  EXPECT_EQ(w->objects_written(), 7u);
  ASSERT_TRUE(w->Finish()) << w->error();

  const std::string text = ReadFile(path_);
  EXPECT_EQ(text.substr(0, 2), "[\n");
  EXPECT_EQ(text.substr(text.size() - 3), "\n]\n");
  EXPECT_NE(text.find("\"ts\":1234.567,\"dur\":7.001"), std::string::npos) << text;
  EXPECT_NE(text.find("\"ts\":1.000"), std::string::npos);

  const nlohmann::json j = nlohmann::json::parse(text);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 7u);
  EXPECT_EQ(j[0]["ph"], "M");
  EXPECT_EQ(j[0]["name"], "process_name");
  EXPECT_EQ(j[0]["pid"], 10);
  EXPECT_EQ(j[0]["args"]["name"], std::string("k\"\\\n\x02\xEF\xBF\xBD<end"));
  EXPECT_EQ(j[1]["name"], "process_sort_index");
  EXPECT_EQ(j[1]["args"]["sort_index"], 1000001);
  EXPECT_EQ(j[2]["name"], "thread_name");
  EXPECT_EQ(j[2]["tid"], 2);
  EXPECT_EQ(j[2]["args"]["name"], "SM 005 | block (1,0,0) | warp 1");
  EXPECT_EQ(j[3]["name"], "thread_sort_index");
  EXPECT_EQ(j[3]["args"]["sort_index"], 3);

  const nlohmann::json& x = j[4];
  EXPECT_EQ(x["ph"], "X");
  EXPECT_EQ(x["cat"], "smprof");
  EXPECT_EQ(x["name"], "outer");
  EXPECT_EQ(x["pid"], 10);
  EXPECT_EQ(x["tid"], 2);
  EXPECT_DOUBLE_EQ(x["ts"].get<double>(), 1234.567);
  EXPECT_DOUBLE_EQ(x["dur"].get<double>(), 7.001);
  EXPECT_EQ(x["args"]["launch_id"], 7);
  EXPECT_EQ(x["args"]["grid"], nlohmann::json({4, 1, 2}));
  EXPECT_EQ(x["args"]["unterminated"], true);
  EXPECT_EQ(x["args"]["neg"], -5);

  EXPECT_EQ(j[5]["ph"], "i");
  EXPECT_EQ(j[5]["s"], "t");
  EXPECT_EQ(j[5]["name"], "mark");
  EXPECT_FALSE(j[5].contains("args"));

  EXPECT_EQ(j[6]["ph"], "C");
  EXPECT_EQ(j[6]["name"], "events lost (device buffer)");
  EXPECT_EQ(j[6]["args"]["lost"], 12);
}

TEST_F(TraceWriterTest, UnfinishedTraceIsAValidPrefix) {
  std::string error;
  {
    auto w = TraceWriter::Open(path_, &error);
    ASSERT_NE(w, nullptr) << error;
    for (int i = 0; i < 5; ++i) w->Instant(3, 1, "e" + std::to_string(i), 1000u * i, nullptr);
    ASSERT_TRUE(w->Flush());
    // Flushed prefix: "[" and whole objects only.
    const std::string mid = ReadFile(path_);
    EXPECT_EQ(nlohmann::json::parse(mid + "]").size(), 5u);
    w->Instant(3, 1, "late", 9000, nullptr);
    // Destroyed without Finish, as if the collector stopped here.
  }
  const std::string text = ReadFile(path_);
  EXPECT_FALSE(nlohmann::json::accept(text));
  const nlohmann::json j = nlohmann::json::parse(text + "]");
  ASSERT_EQ(j.size(), 6u);
  EXPECT_EQ(j[5]["name"], "late");
  // One object per line.
  size_t lines = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 7u);
}

TEST_F(TraceWriterTest, EmptyTraceFinishesAsEmptyArray) {
  std::string error;
  auto w = TraceWriter::Open(path_, &error);
  ASSERT_NE(w, nullptr) << error;
  ASSERT_TRUE(w->Finish());
  EXPECT_TRUE(w->Finish());  // idempotent
  EXPECT_EQ(nlohmann::json::parse(ReadFile(path_)), nlohmann::json::array());
}

TEST_F(TraceWriterTest, LargeTraceSpansManyWrites) {
  std::string error;
  auto w = TraceWriter::Open(path_, &error);
  ASSERT_NE(w, nullptr) << error;
  constexpr int kCount = 60000;  // well past the 1 MiB write threshold
  for (int i = 0; i < kCount; ++i) {
    w->Complete(10, 2 + i % 7, "slice with a reasonably long name", 1000ull * i, 500, nullptr);
  }
  ASSERT_TRUE(w->Finish());
  const nlohmann::json j = nlohmann::json::parse(ReadFile(path_));
  ASSERT_EQ(j.size(), static_cast<size_t>(kCount));
  EXPECT_EQ(j[kCount - 1]["tid"], 2 + (kCount - 1) % 7);
}

TEST(TraceWriterOpenTest, FailsWithMessageNamingThePath) {
  std::string error;
  auto w = TraceWriter::Open("/nonexistent-dir-smprof/trace.json", &error);
  EXPECT_EQ(w, nullptr);
  EXPECT_NE(error.find("/nonexistent-dir-smprof/trace.json"), std::string::npos) << error;
}

}  // namespace
}  // namespace smprof
