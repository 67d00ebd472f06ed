// TraceWriter: output parses back, timestamps keep nanoseconds, untrusted
// names are escaped, an unfinished trace is a valid prefix, a write error
// (RLIMIT_FSIZE) leaves strict JSON, RepairTraceFile closes any cut trace;
// counters on threads, async events and flows written exactly; JsonSink's
// values, counter samples and async spans (issue 9), every event checked.
#include "collector/trace_writer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "collector/json_sink.h"
#include "collector/run_summary.h"
#include "common/json.h"
#include "tests/support/sink_runs.h"

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

// Objects whose strings hold JSON punctuation, so that only a string-aware
// scan finds where an object ends.
void WriteTricky(TraceWriter* w, int count, int flush_every) {
  for (int i = 0; i < count; ++i) {
    JsonArgs args;
    args.String("s", "}\"{],[\\\n" + std::to_string(i)).Uint("i", static_cast<uint64_t>(i));
    if (i % 3 == 0) {
      w->Complete(10, 2, "e" + std::to_string(i), 1000ull * i, 7, &args);
    } else {
      w->Instant(10, 2, "e" + std::to_string(i), 1000ull * i, &args);
    }
    if (flush_every != 0 && i % flush_every == flush_every - 1) w->Flush();
  }
}

// Offsets just past each whole object of a finished trace ([0] = 1: "[").
std::vector<size_t> ObjectEnds(const std::string& text) {
  std::vector<size_t> ends = {1};
  for (size_t p = text.find(",\n"); p != std::string::npos; p = text.find(",\n", p + 1)) {
    ends.push_back(p);
  }
  if (text.size() > 5) ends.push_back(text.size() - 3);  // before "\n]\n"
  return ends;
}

// What a cut at `limit` bytes must leave: the longest prefix of whole objects
// that still fits together with "\n]\n" (`closing` bytes).
std::string ExpectedPrefix(const std::string& full, size_t limit, size_t closing) {
  const std::vector<size_t> ends = ObjectEnds(full);
  size_t keep = 1;
  for (size_t e : ends) {
    if (e + closing <= limit) keep = e;
  }
  return full.substr(0, keep) + "\n]\n";
}

TEST_F(TraceWriterTest, WriteErrorCutsAfterLastWholeObjectAndCloses) {
  constexpr int kCount = 20000;  // ~2 MiB: past the 1 MiB write threshold
  std::string error;
  {
    auto w = TraceWriter::Open(path_, &error);
    ASSERT_NE(w, nullptr) << error;
    WriteTricky(w.get(), kCount, 97);
    ASSERT_TRUE(w->Finish());
  }
  const std::string full = ReadFile(path_);
  ASSERT_EQ(nlohmann::json::parse(full).size(), static_cast<size_t>(kCount));

  for (const size_t limit : {size_t{40}, size_t{1000}, size_t{4099}, size_t{70001},
                             (size_t{1} << 20) + 12345, full.size() - 2}) {
    SCOPED_TRACE("RLIMIT_FSIZE " + std::to_string(limit));
    ::unlink(path_.c_str());
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Past the limit write(2) fails with EFBIG instead of raising SIGXFSZ.
      signal(SIGXFSZ, SIG_IGN);
      const rlimit rl{limit, limit};
      if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
      std::string err;
      auto w = TraceWriter::Open(path_, &err);
      if (!w) _exit(11);
      WriteTricky(w.get(), kCount, 97);
      const bool ok = w->Finish();
      const bool named = w->error().find("File too large") != std::string::npos &&
                         w->error().find("closed") != std::string::npos;
      _exit(!ok && named ? 0 : 12);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 0);
    const std::string text = ReadFile(path_);
    EXPECT_LE(text.size(), limit);
    EXPECT_TRUE(nlohmann::json::accept(text)) << text.substr(text.size() > 200 ? text.size() - 200 : 0);
    EXPECT_EQ(text, ExpectedPrefix(full, limit, 3));
  }
}

TEST_F(TraceWriterTest, RepairClosesATraceCutAnywhere) {
  std::string error;
  {
    auto w = TraceWriter::Open(path_, &error);
    ASSERT_NE(w, nullptr) << error;
    WriteTricky(w.get(), 12, 0);
    ASSERT_TRUE(w->Finish());
  }
  const std::string full = ReadFile(path_);
  const std::vector<size_t> ends = ObjectEnds(full);
  for (size_t cut = 0; cut <= full.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(full.size()));
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << full.substr(0, cut);
    bool repaired = false;
    ASSERT_TRUE(RepairTraceFile(path_, &repaired, &error)) << error;
    const std::string text = ReadFile(path_);
    ASSERT_TRUE(nlohmann::json::accept(text)) << text;
    // Every object whole before the cut is kept, nothing else.
    size_t keep = 1;
    for (size_t e : ends) {
      if (e <= cut) keep = e;
    }
    EXPECT_EQ(text, full.substr(0, keep) + "\n]\n");
    EXPECT_EQ(repaired, cut != full.size());
    // A repaired (closed) trace is left as it is.
    ASSERT_TRUE(RepairTraceFile(path_, &repaired, &error)) << error;
    EXPECT_FALSE(repaired);
    EXPECT_EQ(ReadFile(path_), text);
  }
}

TEST_F(TraceWriterTest, RepairFindsObjectsLongerThanItsReadChunk) {
  const std::string long_name(200000, 'n');
  std::string error;
  {
    auto w = TraceWriter::Open(path_, &error);
    ASSERT_NE(w, nullptr) << error;
    w->Instant(1, 1, "first", 0, nullptr);
    w->Instant(1, 1, long_name, 1, nullptr);
    w->Instant(1, 1, "last", 2, nullptr);
    ASSERT_TRUE(w->Finish());
  }
  const std::string full = ReadFile(path_);
  const std::vector<size_t> ends = ObjectEnds(full);
  ASSERT_EQ(ends.size(), 4u);
  for (size_t cut : {ends[1] + 2, ends[1] + 100000, ends[2] - 1, ends[2], ends[2] + 1, ends[3] - 1,
                     ends[3] + 1}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << full.substr(0, cut);
    bool repaired = false;
    ASSERT_TRUE(RepairTraceFile(path_, &repaired, &error)) << error;
    size_t keep = 1;
    for (size_t e : ends) {
      if (e <= cut) keep = e;
    }
    EXPECT_EQ(ReadFile(path_), full.substr(0, keep) + "\n]\n");
  }
}

TEST_F(TraceWriterTest, RepairRefusesWhatIsNotATrace) {
  std::ofstream(path_, std::ios::binary | std::ios::trunc) << "not a trace\n";
  bool repaired = true;
  std::string error;
  EXPECT_FALSE(RepairTraceFile(path_, &repaired, &error));
  EXPECT_FALSE(repaired);
  EXPECT_NE(error.find(path_), std::string::npos) << error;
  EXPECT_EQ(ReadFile(path_), "not a trace\n");
  EXPECT_FALSE(RepairTraceFile(path_ + ".missing", &repaired, &error));
}

TEST(TraceWriterOpenTest, FailsWithMessageNamingThePath) {
  std::string error;
  auto w = TraceWriter::Open("/nonexistent-dir-smprof/trace.json", &error);
  EXPECT_EQ(w, nullptr);
  EXPECT_NE(error.find("/nonexistent-dir-smprof/trace.json"), std::string::npos) << error;
}

}  // namespace
}  // namespace smprof

namespace smprof {
namespace {

TEST_F(TraceWriterTest, WritesCountersAsyncEventsAndFlowsOnThreads) {
  std::string error;
  auto w = TraceWriter::Open(path_, &error);
  ASSERT_NE(w, nullptr) << error;
  JsonArgs sample;
  sample.Int("SM 012 | block (1,0,0) | warp 0", -3);
  w->Counter(11, 2, "inflight", 1200, sample);
  JsonArgs args;
  args.Uint("token", 4);
  w->Async('b', 11, 2, "stage", 1150, 0x1f, &args);
  w->Async('e', 11, 3, "stage", 1800, 0x1f, nullptr);
  w->Flow('s', 11, 2, "stage", 1150, 31);
  w->Flow('f', 11, 3, "stage", 1800, 31);
  ASSERT_TRUE(w->Finish()) << w->error();
  EXPECT_EQ(ReadFile(path_),
            "[\n"
            "{\"ph\":\"C\",\"pid\":11,\"tid\":2,\"cat\":\"smprof\",\"name\":\"inflight\",\"ts\":1.200,"
            "\"args\":{\"SM 012 | block (1,0,0) | warp 0\":-3}},\n"
            "{\"ph\":\"b\",\"pid\":11,\"tid\":2,\"cat\":\"smprof\",\"name\":\"stage\",\"id2\":{\"local\":\"0x1f\"},"
            "\"ts\":1.150,\"args\":{\"token\":4}},\n"
            "{\"ph\":\"e\",\"pid\":11,\"tid\":3,\"cat\":\"smprof\",\"name\":\"stage\",\"id2\":{\"local\":\"0x1f\"},"
            "\"ts\":1.800},\n"
            "{\"ph\":\"s\",\"pid\":11,\"tid\":2,\"cat\":\"smprof\",\"name\":\"stage\",\"id\":31,\"ts\":1.150},\n"
            "{\"ph\":\"f\",\"pid\":11,\"tid\":3,\"cat\":\"smprof\",\"name\":\"stage\",\"id\":31,\"ts\":1.800,"
            "\"bp\":\"e\"}\n"
            "]\n");
}

// JsonSink with the device API's records (tests/support/sink_runs.h): every
// event of launch 7's process and launch 8's, as compact rows in file order.
TEST_F(TraceWriterTest, JsonSinkWritesValuesCountersAndAsyncSpans) {
  std::string error;
  auto writer = TraceWriter::Open(path_, &error);
  ASSERT_NE(writer, nullptr) << error;
  JsonSink sink(std::move(writer));
  testing::WriteDeviceApiRun(sink);
  ASSERT_TRUE(sink.Finish(CollectorSummary())) << sink.error();
  const nlohmann::json j = nlohmann::json::parse(ReadFile(path_));
  std::map<uint32_t, std::vector<std::string>> rows;  // pid -> events
  for (const nlohmann::json& e : j) {
    const std::string ph = e["ph"];
    if (ph == "M" || e["pid"] < 11) continue;
    std::string row = ph + " " + std::to_string(e.value("tid", 0)) + " " + e.value("name", "") + " " +
                      std::to_string(static_cast<uint64_t>(std::llround(e["ts"].get<double>() * 1000)));
    if (e.contains("id2")) row += " id2=" + e["id2"]["local"].get<std::string>();
    if (e.contains("id")) row += " id=" + e["id"].dump();
    if (e.contains("bp")) row += " bp=" + e["bp"].get<std::string>();
    if (e.contains("args") && !e["args"].empty()) row += " " + e["args"].dump();
    rows[e["pid"]].push_back(row);
  }
  // GPU 0 is pid 10, launch 7 pid 11 (warps 0, 1, 2 of block (1,0,0): tids
  // 2, 3, 4; warp 0 of block (0,1,0): 5), launch 8 pid 12.
  const std::string a = "{\"begin_warp\":0,\"end_warp\":1,\"token\":";
  EXPECT_EQ(rows[11], (std::vector<std::string>{
                          "X 1 _Z4gemmILi128EEvPfS0_ 1000 " + rows[11][0].substr(rows[11][0].find('{')),
                          "X 2 mma 1100 {\"cycles\":1800,\"value\":42}",
                          "C 2 inflight 1200 {\"SM 012 | block (1,0,0) | warp 0\":3}",
                          "X 2 load 2000 {\"cycles\":2000}",
                          "i 2 tile 2500 {\"value\":-7}",
                          "C 2 inflight 2600 {\"SM 012 | block (1,0,0) | warp 0\":5}",
                          "i 3 x (end without begin) 1300 {\"smprof_error\":\"unmatched end\",\"value\":9}",
                          "X 3 wait 1400 {\"cycles\":5200,\"value\":1099511627776}",
                          "C 3 inflight 1500 {\"SM 012 | block (1,0,0) | warp 1\":1}",
                          "X 5 load 2000 {\"cycles\":200}",
                          "b 2 stage 1150 id2=0x1 " + a + "0}",
                          "e 3 stage 1800 id2=0x1",
                          "i 2 stage 1150",
                          "i 3 stage 1800",
                          "s 2 stage 1150 id=1",
                          "f 3 stage 1800 id=1 bp=e",
                          "b 2 stage 1600 id2=0x2 " + a + "1}",
                          "e 3 stage 3500 id2=0x2",
                          "i 2 stage 1600",
                          "i 3 stage 3500",
                          "s 2 stage 1600 id=2",
                          "f 3 stage 3500 id=2 bp=e",
                          "b 2 stage 1900 id2=0x3 " + a + "0}",
                          "e 3 stage 2500 id2=0x3",
                          "i 2 stage 1900",
                          "i 3 stage 2500",
                          "s 2 stage 1900 id=3",
                          "f 3 stage 2500 id=3 bp=e",
                          "b 5 tma 2000 id2=0x7 {\"begin_warp\":0,\"end_warp\":0,\"token\":0}",
                          "e 5 tma 2050 id2=0x7",
                          "i 5 tma 2000",
                          "i 5 tma 2050",
                          "s 5 tma 2000 id=7",
                          "f 5 tma 2050 id=7 bp=e",
                          "b 3 copy 2000 id2=0x4 {\"begin_warp\":1,\"end_warp\":0,\"token\":5}",
                          "e 2 copy 2200 id2=0x4",
                          "i 3 copy 2000",
                          "i 2 copy 2200",
                          "s 3 copy 2000 id=4",
                          "f 2 copy 2200 id=4 bp=e",
                          "b 2 stage 3000 id2=0x5 {\"begin_warp\":0,\"token\":2,\"unterminated\":true}",
                          "e 2 stage 9000 id2=0x5",
                          "i 2 stage 3000",
                          "b 3 stage 3200 id2=0x6 {\"end_warp\":1,\"smprof_error\":\"unmatched end\",\"token\":3}",
                          "e 3 stage 3200 id2=0x6",
                          "i 3 stage 3200",
                          "b 4 stage 4500 id2=0x8 {\"begin_warp\":2,\"end_warp\":0,\"token\":9}",
                          "e 2 stage 4600 id2=0x8",
                          "i 4 stage 4500",
                          "i 2 stage 4600",
                          "s 4 stage 4500 id=8",
                          "f 2 stage 4600 id=8 bp=e",
                      }));
  ASSERT_FALSE(rows[12].empty());
  EXPECT_EQ(std::vector<std::string>(rows[12].begin() + 1, rows[12].end()),
            (std::vector<std::string>{
                "X 2 load 10100 {\"cycles\":400}", "C 2 inflight 10150 {\"SM 012 | block (0,0,0) | warp 0\":2}",
                "b 2 stage 10100 id2=0x9 {\"begin_warp\":0,\"end_warp\":0,\"token\":0}", "e 2 stage 10200 id2=0x9",
                "i 2 stage 10100", "i 2 stage 10200", "s 2 stage 10100 id=9", "f 2 stage 10200 id=9 bp=e"}));
}

}  // namespace
}  // namespace smprof
