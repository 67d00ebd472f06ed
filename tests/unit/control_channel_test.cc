// The collector's control channel: lines delivered in order across partial
// reads, malformed and oversized lines skipped and counted, end of file seen.
#include "collector/control_channel.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

namespace smprof {
namespace {

class ControlChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pipe2(fds_, O_CLOEXEC), 0);
    channel_ = std::make_unique<ControlChannel>(fds_[0]);
  }
  void TearDown() override {
    if (fds_[1] >= 0) close(fds_[1]);
  }
  void Write(const std::string& text) { ASSERT_EQ(write(fds_[1], text.data(), text.size()), (ssize_t)text.size()); }
  void CloseWriter() {
    close(fds_[1]);
    fds_[1] = -1;
  }
  bool Poll() {
    return channel_->Poll([this](const nlohmann::json& j) { got_.push_back(j); });
  }

  int fds_[2] = {-1, -1};
  std::unique_ptr<ControlChannel> channel_;
  std::vector<nlohmann::json> got_;
};

TEST_F(ControlChannelTest, LinesArriveWholeAcrossPartialWrites) {
  EXPECT_TRUE(Poll());  // nothing yet, still open
  Write("{\"run\": {\"command\": [\"./a\"]");
  EXPECT_TRUE(Poll());
  EXPECT_TRUE(got_.empty());
  Write("}}\n{\"exit\": {\"code\": 3}}\n");
  EXPECT_TRUE(Poll());
  ASSERT_EQ(got_.size(), 2u);
  EXPECT_EQ(got_[0]["run"]["command"][0], "./a");
  EXPECT_EQ(got_[1]["exit"]["code"], 3);
}

TEST_F(ControlChannelTest, EndOfFileStopsAfterDeliveringTheLastLine) {
  Write("{\"exit\": {\"code\": 1}}");  // no newline before the end
  CloseWriter();
  EXPECT_FALSE(Poll());
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_FALSE(Poll());
  EXPECT_EQ(got_.size(), 1u);
}

TEST_F(ControlChannelTest, MalformedAndOversizedLinesAreSkippedAndCounted) {
  // More than a pipe holds: written by another thread while this one reads.
  std::thread writer([this] {
    Write("not json\n[1,2]\n\n");
    Write(std::string(ControlChannel::kMaxLineBytes + 10, 'x'));
    Write("\n{\"ok\": true}\n");
    CloseWriter();
  });
  while (Poll()) std::this_thread::yield();
  writer.join();
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(got_[0]["ok"], true);
  EXPECT_EQ(channel_->malformed_lines(), 3u);
}

}  // namespace
}  // namespace smprof
