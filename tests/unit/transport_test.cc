// Unit tests of the shared-memory transport: one process plays both sides,
// and where a test needs a hostile or mismatched peer it writes the segments
// directly through common/transport_layout.h.
#include "common/transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <gtest/gtest.h>

#include "common/transport_layout.h"
#include "smprof/wire.h"

namespace smprof::transport {
namespace {

namespace bip = boost::interprocess;
using internal::RingHeader;
using Bytes = std::vector<uint8_t>;

constexpr uint64_t kRing = 64u << 10;

std::string UniqueRunId() {
  static std::atomic<int> counter{0};
  return "tu_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
}

Bytes MakeMessage(uint32_t type, uint32_t size, uint64_t seq) {
  Bytes m(size);
  const wire::MsgHeader h{type, size};
  std::memcpy(m.data(), &h, sizeof(h));
  for (uint32_t i = sizeof(h); i < size; ++i) {
    m[i] = static_cast<uint8_t>(seq * 131 + i * 7 + (i >> 8));
  }
  return m;
}

bool ShmExists(const std::string& name) {
  struct stat st{};
  return stat(("/dev/shm/" + name).c_str(), &st) == 0;
}

std::vector<std::string> RingNames(const std::string& run_id) {
  std::vector<std::string> out;
  const std::string prefix = ControlSegmentName(run_id) + "-";
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return out;
  while (const dirent* ent = readdir(dir)) {
    const std::string name = ent->d_name;
    if (name.compare(0, prefix.size(), prefix) == 0) out.push_back(name);
  }
  closedir(dir);
  return out;
}

// A second mapping of a segment, as a hostile or mismatched peer would hold.
struct Mapping {
  explicit Mapping(const std::string& name) {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    bip::mapped_region r(shm, bip::read_write);
    region.swap(r);
  }
  uint8_t* base() { return static_cast<uint8_t*>(region.get_address()); }
  RingHeader* ring() { return reinterpret_cast<RingHeader*>(base()); }
  uint8_t* data() { return base() + internal::kRingDataOffset; }
  internal::ControlHeader* control() { return reinterpret_cast<internal::ControlHeader*>(base()); }
  bip::mapped_region region;
};

struct Delivered {
  std::vector<ProducerInfo> from;
  std::vector<Bytes> messages;
  std::vector<std::pair<ProducerInfo, bool>> ends;
};

size_t PollInto(Consumer& consumer, Delivered* out) {
  return consumer.Poll(
      [out](const ProducerInfo& info, const uint8_t* data, uint32_t size) {
        out->from.push_back(info);
        out->messages.emplace_back(data, data + size);
      },
      [out](const ProducerInfo& info, bool clean) { out->ends.emplace_back(info, clean); });
}

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = UniqueRunId();
    std::string error;
    consumer_ = Consumer::Create(run_, ConsumerOptions{}, &error);
    ASSERT_NE(consumer_, nullptr) << error;
  }
  void TearDown() override {
    consumer_.reset();
    RemoveRunSegments(run_);
  }

  std::unique_ptr<Producer> Attach(ProducerOptions options = SmallRing()) {
    std::string error;
    auto producer = Producer::Attach(run_, options, &error);
    EXPECT_NE(producer, nullptr) << error;
    return producer;
  }
  static ProducerOptions SmallRing() {
    ProducerOptions options;
    options.ring_bytes = kRing;
    return options;
  }
  static bool Send(Producer& p, const Bytes& m, uint64_t events = 0) {
    return p.Send(m.data(), static_cast<uint32_t>(m.size()), events);
  }
  std::string OnlyRingName() {
    const auto names = RingNames(run_);
    EXPECT_EQ(names.size(), 1u);
    return names.empty() ? std::string() : names[0];
  }

  std::string run_;
  std::unique_ptr<Consumer> consumer_;
};

TEST(TransportNamesTest, RunIdValidation) {
  EXPECT_TRUE(IsValidRunId("a"));
  EXPECT_TRUE(IsValidRunId("run_1-B"));
  EXPECT_TRUE(IsValidRunId(std::string(64, 'x')));
  EXPECT_FALSE(IsValidRunId(""));
  EXPECT_FALSE(IsValidRunId(std::string(65, 'x')));
  EXPECT_FALSE(IsValidRunId("a/b"));
  EXPECT_FALSE(IsValidRunId("a.b"));
  EXPECT_FALSE(IsValidRunId("a b"));
  EXPECT_EQ(ControlSegmentName("r1"), "smprof-r1");
  std::string error;
  EXPECT_EQ(Consumer::Create("../x", ConsumerOptions{}, &error), nullptr);
  EXPECT_NE(error.find("invalid smprof run id"), std::string::npos) << error;
}

TEST(TransportNamesTest, RemoveRunSegmentsRemovesOnlyThatRun) {
  const std::string run = UniqueRunId();
  const std::vector<std::string> doomed = {"smprof-" + run, "smprof-" + run + "-3-7"};
  const std::vector<std::string> kept = {"smprof-" + run + "2", "smprof-" + run + "_1-1"};
  for (const auto& name : doomed) {
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write);
  }
  for (const auto& name : kept) {
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write);
  }
  RemoveRunSegments(run);
  for (const auto& name : doomed) EXPECT_FALSE(ShmExists(name)) << name;
  for (const auto& name : kept) {
    EXPECT_TRUE(ShmExists(name)) << name;
    bip::shared_memory_object::remove(name.c_str());
  }
}

TEST_F(TransportTest, SegmentsAreMode0600) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  for (const std::string& name : {ControlSegmentName(run_), OnlyRingName()}) {
    struct stat st{};
    ASSERT_EQ(stat(("/dev/shm/" + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << name;
  }
}

TEST_F(TransportTest, CreateFailsWhenRunExists) {
  std::string error;
  EXPECT_EQ(Consumer::Create(run_, ConsumerOptions{}, &error), nullptr);
  EXPECT_EQ(error, "a run with id " + run_ + " already exists; remove /dev/shm/smprof-" + run_ +
                       " or choose another id");
  EXPECT_TRUE(ShmExists(ControlSegmentName(run_)));  // the failed Create removed nothing
}

TEST(TransportAttachTest, AttachWithoutCollectorFails) {
  std::string error;
  EXPECT_EQ(Producer::Attach(UniqueRunId(), ProducerOptions{}, &error), nullptr);
  EXPECT_NE(error.find("smprof-run"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST_F(TransportTest, VersionMismatchNamesBothVersions) {
  Mapping control(ControlSegmentName(run_));
  control.control()->version = wire::kTransportVersion + 1;
  std::string error;
  EXPECT_EQ(Producer::Attach(run_, SmallRing(), &error), nullptr);
  EXPECT_EQ(error, "collector speaks transport v" + std::to_string(wire::kTransportVersion + 1) +
                       ", this injector v" + std::to_string(wire::kTransportVersion) +
                       ": use matching smprof builds");
  control.control()->version = wire::kTransportVersion;
  control.control()->magic.store(0x1234);
  EXPECT_EQ(Producer::Attach(run_, SmallRing(), &error), nullptr);
  EXPECT_NE(error.find("bad magic"), std::string::npos) << error;
  // Neither attempt claimed an entry or left a ring behind.
  EXPECT_TRUE(RingNames(run_).empty());
  EXPECT_EQ(internal::Entries(control.control())[0].state.load(), internal::kEntryFree);
}

TEST_F(TransportTest, RingWrapAroundKeepsBytesAndOrder) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  ASSERT_EQ(ring.ring()->capacity, kRing);

  constexpr int kMessages = 3000;
  constexpr uint32_t kTypes[] = {wire::kMsgName, wire::kMsgLaunch, wire::kMsgWarpEvents};
  std::vector<Bytes> sent;
  uint64_t sent_bytes = 0;
  uint64_t batch_bytes = 0;
  uint32_t lcg = 12345;
  Delivered got;
  for (int i = 0; i < kMessages; ++i) {
    lcg = lcg * 1664525u + 1013904223u;
    // Mostly small, sometimes up to 16 KiB, always a multiple of 8.
    const uint32_t limit = (lcg >> 28) == 0 ? (16u << 10) : 512u;
    const uint32_t size = wire::PaddedSize(8 + (lcg >> 8) % limit);
    // A batch below 40 KiB plus at most one pad (< 16 KiB) always fits.
    if (batch_bytes + size > (40u << 10)) {
      PollInto(*consumer_, &got);
      batch_bytes = 0;
    }
    sent.push_back(MakeMessage(kTypes[i % 3], size, i));
    ASSERT_TRUE(Send(*producer, sent.back(), 1)) << "message " << i;
    sent_bytes += size;
    batch_bytes += size;
  }
  PollInto(*consumer_, &got);

  ASSERT_EQ(got.messages.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    ASSERT_EQ(got.messages[i], sent[i]) << "message " << i;
    EXPECT_EQ(got.from[i].pid, static_cast<uint32_t>(getpid()));
  }
  const uint64_t write_pos = ring.ring()->write_pos.load();
  EXPECT_GT(write_pos, 8 * kRing);       // wrapped many times
  EXPECT_GT(write_pos, sent_bytes);      // pads were written ...
  EXPECT_EQ(consumer_->stats().bytes, sent_bytes);  // ... and not delivered
  EXPECT_EQ(consumer_->stats().messages, sent.size());
  EXPECT_EQ(ring.ring()->read_pos.load(), write_pos);
  EXPECT_EQ(producer->stats().messages_sent, sent.size());
  EXPECT_EQ(producer->stats().messages_dropped, 0u);
  EXPECT_TRUE(got.ends.empty());
}

// A message sent in parts arrives as one, across the ring's wrap too; parts
// that do not add up to the declared size are dropped and counted.
TEST_F(TransportTest, AMessageSentInPartsArrivesWhole) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Delivered got;
  std::vector<Bytes> sent;
  for (int i = 0; i < 200; ++i) {
    const uint32_t size = wire::PaddedSize(8 + (i * 977) % (12u << 10));
    sent.push_back(MakeMessage(wire::kMsgChunks, size, i));
    const Bytes& m = sent.back();
    // The header alone, then uneven pieces.
    std::vector<Producer::Part> parts = {{m.data(), 8}};
    for (size_t at = 8; at < m.size();) {
      const size_t n = std::min<size_t>(m.size() - at, 1 + (at * 31) % 3000);
      parts.push_back({m.data() + at, n});
      at += n;
    }
    ASSERT_TRUE(producer->Send(parts.data(), parts.size(), size, 1, std::chrono::milliseconds(100))) << i;
    PollInto(*consumer_, &got);
  }
  ASSERT_EQ(got.messages.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) ASSERT_EQ(got.messages[i], sent[i]) << "message " << i;
  const Bytes m = MakeMessage(wire::kMsgChunks, 64, 7);
  const Producer::Part short_parts[] = {{m.data(), 8}, {m.data() + 8, 48}};  // 56 of 64
  EXPECT_FALSE(producer->Send(short_parts, 2, 64, 5, std::chrono::milliseconds(100)));
  EXPECT_EQ(producer->stats().messages_dropped, 1u);
  EXPECT_EQ(producer->stats().events_dropped, 5u);
}

TEST_F(TransportTest, PadCoversTailAndIsNotDelivered) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  Delivered got;
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 32768, 1)));
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 32752, 2)));
  EXPECT_EQ(PollInto(*consumer_, &got), 2u);
  ASSERT_EQ(ring.ring()->write_pos.load(), kRing - 16);

  // 64 bytes do not fit the 16-byte tail: a 16-byte pad, then offset 0.
  const Bytes m = MakeMessage(wire::kMsgLaunch, 64, 3);
  ASSERT_TRUE(Send(*producer, m));
  EXPECT_EQ(ring.ring()->write_pos.load(), kRing + 64);
  wire::MsgHeader pad{};
  std::memcpy(&pad, ring.data() + kRing - 16, sizeof(pad));
  EXPECT_EQ(pad.type, wire::kMsgPad);
  EXPECT_EQ(pad.size, 16u);
  EXPECT_EQ(std::memcmp(ring.data(), m.data(), m.size()), 0);
  EXPECT_EQ(PollInto(*consumer_, &got), 1u);
  ASSERT_EQ(got.messages.size(), 3u);
  EXPECT_EQ(got.messages[2], m);
  EXPECT_EQ(consumer_->stats().bytes, 32768u + 32752u + 64u);

  // A message that exactly fills the tail needs no pad.
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 32768, 4)));
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 32688, 5)));
  EXPECT_EQ(PollInto(*consumer_, &got), 2u);
  EXPECT_EQ(ring.ring()->write_pos.load(), 2 * kRing - 16);
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 16, 6)));
  EXPECT_EQ(ring.ring()->write_pos.load(), 2 * kRing);
  EXPECT_EQ(PollInto(*consumer_, &got), 1u);
  ASSERT_EQ(got.messages.size(), 6u);
  EXPECT_EQ(got.messages[5], MakeMessage(wire::kMsgName, 16, 6));
}

// The heartbeat is checked on every Send, not only when the ring is full:
// nothing goes into a ring that no collector will read.
TEST_F(TransportTest, StaleHeartbeatDropsEverySendEvenWithRoomInTheRing) {
  ProducerOptions options = SmallRing();
  options.collector_timeout = std::chrono::milliseconds(1);
  options.max_wait = std::chrono::hours(1);  // waiting at all would hang: caught below
  auto producer = Attach(options);
  ASSERT_NE(producer, nullptr);
  // Never Poll: the heartbeat written by Create goes stale.
  for (int i = 0; i < 10000 && producer->collector_alive(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_FALSE(producer->collector_alive());

  auto sending = std::async(std::launch::async, [&] {
    int accepted = 0;
    int refused = 0;
    for (int i = 0; i < 5; ++i) {
      const bool sent = Send(*producer, MakeMessage(wire::kMsgName, 4096, i), 3);
      accepted += sent;
      refused += !sent;
    }
    const bool sent = Send(*producer, MakeMessage(wire::kMsgName, 8, 99), 7);
    accepted += sent;
    refused += !sent;
    return std::make_pair(accepted, refused);
  });
  if (sending.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    // The sender is stuck for an hour and would block the future's destructor.
    fprintf(stderr, "FAILED: Send waited for a dead collector\n");
    std::_Exit(1);
  }
  const auto [accepted, refused] = sending.get();
  EXPECT_EQ(accepted, 0);  // the ring is empty, but the collector is gone
  EXPECT_EQ(refused, 6);

  const ProducerStats ps = producer->stats();
  EXPECT_EQ(ps.messages_sent, 0u);
  EXPECT_EQ(ps.messages_dropped, 6u);
  EXPECT_EQ(ps.bytes_dropped, 5u * 4096u + 8u);
  EXPECT_EQ(ps.events_dropped, 5u * 3u + 7u);

  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  ConsumerStats cs = consumer_->stats();
  EXPECT_EQ(cs.producer_messages_dropped, 6u);
  EXPECT_EQ(cs.producer_bytes_dropped, 5u * 4096u + 8u);
  EXPECT_EQ(cs.producer_events_dropped, 22u);

  // The counts survive reaping.
  producer->Detach();
  PollInto(*consumer_, &got);
  ASSERT_EQ(got.ends.size(), 1u);
  EXPECT_TRUE(got.ends[0].second);
  cs = consumer_->stats();
  EXPECT_EQ(cs.producers_active, 0u);
  EXPECT_EQ(cs.producer_messages_dropped, 6u);
  EXPECT_EQ(cs.producer_bytes_dropped, 5u * 4096u + 8u);
  EXPECT_EQ(cs.producer_events_dropped, 22u);
}

TEST_F(TransportTest, DropsAfterMaxWaitWhileCollectorAlive) {
  ProducerOptions options = SmallRing();
  options.collector_timeout = std::chrono::hours(1);
  options.max_wait = std::chrono::milliseconds(5);
  auto producer = Attach(options);
  ASSERT_NE(producer, nullptr);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 8192, i)));
  EXPECT_TRUE(producer->collector_alive());
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgName, 8192, 8), 4));
  EXPECT_EQ(producer->stats().messages_dropped, 1u);
  EXPECT_EQ(producer->stats().events_dropped, 4u);
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 8u);
  EXPECT_EQ(consumer_->stats().producer_messages_dropped, 1u);
  EXPECT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 8192, 9)));  // room again
}

TEST_F(TransportTest, MalformedAndOversizedMessagesAreDropped) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Bytes too_big = MakeMessage(wire::kMsgName, kRing / 2 + 8, 1);
  EXPECT_FALSE(Send(*producer, too_big, 1));
  Bytes mismatch = MakeMessage(wire::kMsgName, 64, 2);
  reinterpret_cast<wire::MsgHeader*>(mismatch.data())->size = 56;
  EXPECT_FALSE(Send(*producer, mismatch, 1));
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgPad, 64, 3), 1));
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgLastType + 1, 64, 4), 1));
  Bytes unaligned = MakeMessage(wire::kMsgName, 64, 5);
  EXPECT_FALSE(producer->Send(unaligned.data(), 60, 1));
  EXPECT_FALSE(producer->Send(unaligned.data(), 4, 1));
  EXPECT_FALSE(producer->Send(nullptr, 64, 1));

  const ProducerStats ps = producer->stats();
  EXPECT_EQ(ps.messages_sent, 0u);
  EXPECT_EQ(ps.messages_dropped, 7u);
  EXPECT_EQ(ps.bytes_dropped, (kRing / 2 + 8) + 64 * 4 + 60 + 4);
  EXPECT_EQ(ps.events_dropped, 7u);
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  EXPECT_EQ(consumer_->stats().producer_messages_dropped, 7u);
  EXPECT_EQ(consumer_->stats().framing_errors, 0u);
}

TEST_F(TransportTest, SendAfterDetachIsDroppedAndEndIsReportedOnce) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  EXPECT_TRUE(consumer_->Idle() == false);
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 32, 1)));
  producer->Detach();
  producer->Detach();
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgName, 32, 2), 5));
  EXPECT_EQ(producer->stats().messages_dropped, 1u);
  EXPECT_EQ(producer->stats().events_dropped, 5u);
  EXPECT_FALSE(consumer_->Idle());  // detached but not yet drained and reaped

  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 1u);
  ASSERT_EQ(got.ends.size(), 1u);
  EXPECT_TRUE(got.ends[0].second);
  EXPECT_TRUE(consumer_->Idle());
  EXPECT_TRUE(RingNames(run_).empty());
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  EXPECT_EQ(got.ends.size(), 1u);
  EXPECT_EQ(consumer_->stats().producers_seen, 1u);
  // Drops after Detach reach the stats, also once the ring is reaped.
  EXPECT_EQ(consumer_->stats().producer_messages_dropped, 1u);
  EXPECT_EQ(consumer_->stats().producer_events_dropped, 5u);
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgName, 48, 3), 6));
  EXPECT_EQ(consumer_->stats().producer_messages_dropped, 2u);
  EXPECT_EQ(consumer_->stats().producer_bytes_dropped, 32u + 48u);
  EXPECT_EQ(consumer_->stats().producer_events_dropped, 11u);
}

TEST_F(TransportTest, ForkedChildNeitherWritesNorDetaches) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const bool sent = Send(*producer, MakeMessage(wire::kMsgName, 64, 1), 3);
    const bool counted = producer->stats().messages_dropped == 1;
    producer.reset();  // destructor in the child: must not detach the parent
    _exit(!sent && counted ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(ring.ring()->write_pos.load(), 0u);
  EXPECT_EQ(ring.ring()->messages_dropped.load(), 0u);  // the child never writes the ring
  EXPECT_EQ(ring.ring()->detached.load(), 0u);

  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  EXPECT_TRUE(got.ends.empty());
  // ... but its drop is counted where the collector reads it.
  const ConsumerStats cs = consumer_->stats();
  EXPECT_EQ(cs.producer_messages_dropped, 1u);
  EXPECT_EQ(cs.producer_bytes_dropped, 64u);
  EXPECT_EQ(cs.producer_events_dropped, 3u);
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 64, 2)));
  EXPECT_EQ(PollInto(*consumer_, &got), 1u);
}

TEST(TransportRegistryTest, FullRegistryRefusesAndDetachedEntriesAreReused) {
  const std::string run = UniqueRunId();
  ConsumerOptions copts;
  copts.max_producers = 2;
  std::string error;
  auto consumer = Consumer::Create(run, copts, &error);
  ASSERT_NE(consumer, nullptr) << error;
  ProducerOptions popts;
  popts.ring_bytes = kRing;
  auto a = Producer::Attach(run, popts, &error);
  auto b = Producer::Attach(run, popts, &error);
  ASSERT_NE(a, nullptr) << error;
  ASSERT_NE(b, nullptr) << error;
  auto c = Producer::Attach(run, popts, &error);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(error.find("all 2 producer registry entries in use"), std::string::npos) << error;
  EXPECT_EQ(consumer->stats().registry_full, 1u);

  ASSERT_TRUE(a->Send(MakeMessage(wire::kMsgName, 16, 1).data(), 16, 0));
  Delivered got;
  EXPECT_EQ(PollInto(*consumer, &got), 1u);
  const uint32_t a_entry = got.from.at(0).entry;
  const std::string a_ring = internal::RingSegmentName(run, a_entry, 1);
  EXPECT_TRUE(ShmExists(a_ring));
  a->Detach();
  PollInto(*consumer, &got);
  ASSERT_EQ(got.ends.size(), 1u);
  EXPECT_EQ(got.ends[0].first.entry, a_entry);
  EXPECT_TRUE(got.ends[0].second);
  EXPECT_FALSE(ShmExists(a_ring));

  c = Producer::Attach(run, popts, &error);
  ASSERT_NE(c, nullptr) << error;
  EXPECT_TRUE(ShmExists(internal::RingSegmentName(run, a_entry, 2)));  // new generation
  ASSERT_TRUE(c->Send(MakeMessage(wire::kMsgName, 24, 2).data(), 24, 0));
  EXPECT_EQ(PollInto(*consumer, &got), 1u);
  EXPECT_EQ(got.from.at(1).entry, a_entry);
  EXPECT_EQ(got.messages.at(1), MakeMessage(wire::kMsgName, 24, 2));
  EXPECT_EQ(consumer->stats().producers_seen, 3u);
  EXPECT_EQ(consumer->stats().producers_active, 2u);

  consumer.reset();  // unlinks everything of the run
  EXPECT_FALSE(ShmExists(ControlSegmentName(run)));
  EXPECT_TRUE(RingNames(run).empty());
}

// ---------------------------------------------------------------------------
// Shutdown: Close, in-flight Sends, unread backlog.
// ---------------------------------------------------------------------------

TEST_F(TransportTest, CloseDropsLaterSendsAndDeliversEarlierOnes) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  std::vector<Bytes> sent;
  for (int i = 0; i < 3; ++i) {
    sent.push_back(MakeMessage(wire::kMsgLaunch, 64 + 8 * i, i));
    ASSERT_TRUE(Send(*producer, sent.back(), 1));
  }
  EXPECT_FALSE(consumer_->closed());
  consumer_->Close();
  consumer_->Close();  // idempotent
  EXPECT_TRUE(consumer_->closed());
  // The ring has room and the heartbeat is fresh: only `closed` stops these.
  EXPECT_TRUE(producer->collector_alive());
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgName, 32, 10), 4));
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgName, 40, 11), 5));
  EXPECT_EQ(producer->stats().messages_dropped, 2u);
  EXPECT_EQ(producer->stats().messages_sent, 3u);

  std::string error;
  EXPECT_EQ(Producer::Attach(run_, SmallRing(), &error), nullptr);
  EXPECT_NE(error.find("shutting down"), std::string::npos) << error;

  // One Poll after Close delivers everything committed before it; then the
  // consumer is idle although the producer is still attached and alive.
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 3u);
  EXPECT_EQ(got.messages, sent);
  EXPECT_TRUE(got.ends.empty());
  EXPECT_TRUE(consumer_->Idle());
  ConsumerStats cs = consumer_->stats();
  EXPECT_EQ(cs.messages, 3u);
  EXPECT_EQ(cs.producer_messages_dropped, 2u);
  EXPECT_EQ(cs.producer_bytes_dropped, 72u);
  EXPECT_EQ(cs.producer_events_dropped, 9u);
  EXPECT_EQ(cs.unread_messages, 0u);
  EXPECT_EQ(cs.unread_bytes, 0u);

  // Drops keep being counted up to the consumer's last read, and survive reaping.
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgName, 16, 12), 1));
  EXPECT_EQ(consumer_->stats().producer_messages_dropped, 3u);
  producer->Detach();
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  ASSERT_EQ(got.ends.size(), 1u);
  EXPECT_TRUE(got.ends[0].second);
  cs = consumer_->stats();
  EXPECT_EQ(cs.producers_active, 0u);
  EXPECT_EQ(cs.producer_messages_dropped, 3u);
  EXPECT_EQ(cs.producer_events_dropped, 10u);
}

// A Send that passed the `closed` check before Close commits afterwards: the
// consumer must not call the ring final until that Send is over. The test
// plays the producer's half of the handshake by hand.
TEST_F(TransportTest, CloseWaitsForASendInFlight) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  const Bytes first = MakeMessage(wire::kMsgName, 48, 1);
  ASSERT_TRUE(Send(*producer, first));
  ring.ring()->sending.store(1);  // a second Send is between its check and its commit
  consumer_->Close();

  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 1u);
  EXPECT_FALSE(consumer_->Idle());  // the in-flight Send may still commit

  const Bytes second = MakeMessage(wire::kMsgLaunch, 80, 2);
  const uint64_t w = ring.ring()->write_pos.load();
  std::memcpy(ring.data() + w, second.data(), second.size());
  ring.ring()->write_pos.store(w + second.size());
  ring.ring()->sending.store(0);

  EXPECT_EQ(PollInto(*consumer_, &got), 1u);
  EXPECT_TRUE(consumer_->Idle());
  ASSERT_EQ(got.messages.size(), 2u);
  EXPECT_EQ(got.messages[0], first);
  EXPECT_EQ(got.messages[1], second);
}

// The same race with the real Send: a Send blocked on a full ring when the
// collector closes must either be delivered or be counted, never lost.
TEST_F(TransportTest, SendBlockedOnAFullRingAcrossCloseIsDeliveredOrCounted) {
  ProducerOptions options = SmallRing();
  options.collector_timeout = std::chrono::hours(1);
  options.max_wait = std::chrono::hours(1);
  auto producer = Attach(options);
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 4096, i)));
  auto blocked = std::async(std::launch::async,
                            [&] { return Send(*producer, MakeMessage(wire::kMsgName, 4096, 16), 2); });
  const auto in_send = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ring.ring()->sending.load() == 0 && std::chrono::steady_clock::now() < in_send) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  consumer_->Close();
  const auto net = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  Delivered got;
  while (!consumer_->Idle() && std::chrono::steady_clock::now() < net) {
    if (PollInto(*consumer_, &got) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (blocked.wait_until(net) != std::future_status::ready) {
    fprintf(stderr, "FAILED: Send still blocked after the final drain\n");
    std::_Exit(1);
  }
  ASSERT_TRUE(consumer_->Idle()) << "safety net";
  const bool delivered = blocked.get();
  EXPECT_EQ(got.messages.size(), delivered ? 17u : 16u);
  EXPECT_EQ(consumer_->stats().producer_messages_dropped, delivered ? 0u : 1u);
  EXPECT_EQ(consumer_->stats().unread_messages, 0u);
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgName, 64, 17)));
  EXPECT_EQ(consumer_->stats().producer_messages_dropped, delivered ? 1u : 2u);
}

TEST_F(TransportTest, StatsCountUnreadMessagesAndBytesWithoutPads) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 32768, 1)));
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 32752, 2)));
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 2u);
  EXPECT_EQ(consumer_->stats().unread_messages, 0u);
  EXPECT_EQ(consumer_->stats().unread_bytes, 0u);
  // 64 bytes do not fit the 16-byte tail: a pad, then the message at 0.
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgLaunch, 64, 3)));
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgLaunch, 128, 4)));
  ConsumerStats cs = consumer_->stats();
  EXPECT_EQ(cs.unread_messages, 2u);
  EXPECT_EQ(cs.unread_bytes, 192u);
  EXPECT_EQ(cs.messages, 2u);
  EXPECT_EQ(PollInto(*consumer_, &got), 2u);
  cs = consumer_->stats();
  EXPECT_EQ(cs.unread_messages, 0u);
  EXPECT_EQ(cs.unread_bytes, 0u);
  EXPECT_EQ(cs.messages, 4u);
}

// ---------------------------------------------------------------------------
// Heartbeat during a long drain.
// ---------------------------------------------------------------------------

// Each handler call takes >= 150 ms (waited out on the monotonic clock), more
// than the 100 ms refresh interval, so the heartbeat must change between any
// two deliveries of one Poll.
TEST_F(TransportTest, SlowMessageHandlerKeepsTheHeartbeatFresh) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  constexpr int kMessages = 5;
  for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 64, i)));
  Mapping control(ControlSegmentName(run_));
  std::vector<uint64_t> beats;
  const size_t n = consumer_->Poll([&](const ProducerInfo&, const uint8_t*, uint32_t) {
    beats.push_back(control.control()->heartbeat_ns.load());
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(150);
    while (std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  EXPECT_EQ(n, static_cast<size_t>(kMessages));
  ASSERT_EQ(beats.size(), static_cast<size_t>(kMessages));
  for (int i = 1; i < kMessages; ++i) EXPECT_GT(beats[i], beats[i - 1]) << "message " << i;
}

// ---------------------------------------------------------------------------
// Hostile producers: the consumer must abandon the ring, not crash or overread.
// ---------------------------------------------------------------------------

class TransportHostileTest : public TransportTest {
 protected:
  // Sends `count` good messages and returns them; none is polled yet.
  std::vector<Bytes> SendGood(Producer& producer, int count) {
    std::vector<Bytes> sent;
    for (int i = 0; i < count; ++i) {
      sent.push_back(MakeMessage(wire::kMsgLaunch, 40 + 8 * i, i));
      EXPECT_TRUE(Send(producer, sent.back()));
    }
    return sent;
  }
  void ExpectAbandoned(const Delivered& got, Producer& producer, Mapping& ring) {
    EXPECT_EQ(consumer_->stats().framing_errors, 1u);
    ASSERT_EQ(got.ends.size(), 1u);
    EXPECT_FALSE(got.ends[0].second);
    EXPECT_EQ(ring.ring()->abandoned.load(), 1u);
    EXPECT_TRUE(RingNames(run_).empty());  // unlinked
    // The producer stops writing instead of waiting for a reader that is gone.
    EXPECT_FALSE(Send(producer, MakeMessage(wire::kMsgName, 32, 0)));
    // Further polls neither read the ring nor report it again; the entry is
    // freed once the producer detaches.
    Delivered later;
    EXPECT_EQ(PollInto(*consumer_, &later), 0u);
    EXPECT_FALSE(consumer_->Idle());
    producer.Detach();
    EXPECT_EQ(PollInto(*consumer_, &later), 0u);
    EXPECT_TRUE(later.ends.empty());
    EXPECT_TRUE(consumer_->Idle());
    EXPECT_EQ(consumer_->stats().framing_errors, 1u);
  }
};

struct BadHeader {
  const char* label;
  uint32_t type;
  uint32_t size;
};

class TransportBadHeaderTest : public TransportHostileTest,
                               public ::testing::WithParamInterface<BadHeader> {};

TEST_P(TransportBadHeaderTest, GoodMessagesBeforeItAreDeliveredThenRingIsAbandoned) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  const std::vector<Bytes> good = SendGood(*producer, 3);
  const uint64_t w = ring.ring()->write_pos.load();
  const wire::MsgHeader bad{GetParam().type, GetParam().size};
  std::memcpy(ring.data() + w, &bad, sizeof(bad));
  ring.ring()->write_pos.store(w + 64);

  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 3u);
  EXPECT_EQ(got.messages, good);
  ExpectAbandoned(got, *producer, ring);
}

INSTANTIATE_TEST_SUITE_P(
    Headers, TransportBadHeaderTest,
    ::testing::Values(BadHeader{"size0", wire::kMsgName, 0}, BadHeader{"size7", wire::kMsgName, 7},
                      BadHeader{"unaligned", wire::kMsgName, 36},
                      BadHeader{"huge", wire::kMsgName, 0xfffffff8u},
                      BadHeader{"above_max", wire::kMsgName, wire::kMaxMessageBytes + 8},
                      BadHeader{"past_write_pos", wire::kMsgName, 72},
                      BadHeader{"unknown_type", wire::kMsgLastType + 1, 16},
                      BadHeader{"huge_type", 0xffffffffu, 16}),
    [](const ::testing::TestParamInfo<BadHeader>& p) { return std::string(p.param.label); });

TEST_F(TransportHostileTest, MessageCrossingThePhysicalEndIsRejected) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 32768, 1)));
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 32752, 2)));
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 2u);
  // 16 bytes remain before the end; a 64-byte message there would wrap.
  const wire::MsgHeader bad{wire::kMsgName, 64};
  std::memcpy(ring.data() + kRing - 16, &bad, sizeof(bad));
  ring.ring()->write_pos.store(kRing + 48);
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  ExpectAbandoned(got, *producer, ring);
}

TEST_F(TransportHostileTest, WritePosBeyondCapacityIsRejected) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  const std::vector<Bytes> good = SendGood(*producer, 3);
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 3u);  // committed before the corruption
  EXPECT_EQ(got.messages, good);
  const uint64_t r = ring.ring()->read_pos.load();
  ring.ring()->write_pos.store(r + kRing + 8);
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  ExpectAbandoned(got, *producer, ring);
}

TEST_F(TransportHostileTest, WritePosBehindReadPosIsRejected) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  SendGood(*producer, 3);
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 3u);
  ring.ring()->write_pos.store(8);
  // Rewriting the shared read_pos must not fool the consumer either.
  ring.ring()->read_pos.store(0);
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  ExpectAbandoned(got, *producer, ring);
}

class TransportRingHeaderTest : public TransportHostileTest,
                                public ::testing::WithParamInterface<int> {};

TEST_P(TransportRingHeaderTest, CorruptRingHeaderIsRejectedAtMapTime) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  switch (GetParam()) {
    case 0: ring.ring()->magic ^= 1; break;
    case 1: ring.ring()->version = wire::kTransportVersion + 1; break;
    case 2: ring.ring()->capacity = 1u << 30; break;  // more than the segment holds
  }
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  ExpectAbandoned(got, *producer, ring);
}

INSTANTIATE_TEST_SUITE_P(Fields, TransportRingHeaderTest, ::testing::Values(0, 1, 2));

TEST_F(TransportHostileTest, DropsAfterAbandonAndAfterDetachReachTheStats) {
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  const wire::MsgHeader bad{wire::kMsgName, 7};
  std::memcpy(ring.data(), &bad, sizeof(bad));
  ring.ring()->write_pos.store(64);
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  ASSERT_EQ(got.ends.size(), 1u);
  EXPECT_EQ(consumer_->stats().framing_errors, 1u);

  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgName, 32, 1), 5));  // abandoned ring
  EXPECT_EQ(consumer_->stats().producer_messages_dropped, 1u);
  EXPECT_EQ(consumer_->stats().producer_events_dropped, 5u);
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgName, 48, 2), 6));
  producer->Detach();
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);  // frees the entry: final counts taken
  EXPECT_TRUE(consumer_->Idle());
  EXPECT_EQ(consumer_->stats().producer_messages_dropped, 2u);
  EXPECT_EQ(consumer_->stats().producer_bytes_dropped, 80u);
  EXPECT_EQ(consumer_->stats().producer_events_dropped, 11u);
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgName, 16, 3), 7));  // after Detach
  const ConsumerStats cs = consumer_->stats();
  EXPECT_EQ(cs.producer_messages_dropped, 3u);
  EXPECT_EQ(cs.producer_bytes_dropped, 96u);
  EXPECT_EQ(cs.producer_events_dropped, 18u);
  EXPECT_EQ(cs.producer_messages_dropped, producer->stats().messages_dropped);
}

// A producer shrinks its ring under the consumer's mapping: reads of the lost
// pages raise SIGBUS. The consumer must survive and abandon the ring.
// Param: keep the header page (else truncate to 0). Within the last page a
// shrunk file reads as zeros, so the unread messages sit pages further on.
class TransportTruncatedRingTest : public TransportHostileTest,
                                   public ::testing::WithParamInterface<bool> {};

TEST_P(TransportTruncatedRingTest, ConsumerSurvivesAndAbandonsTheRing) {
  const auto page = static_cast<uint32_t>(sysconf(_SC_PAGESIZE));
  ASSERT_LE(2 * page, kRing / 2);
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGBUS, nullptr, &before), 0);
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  const std::string name = OnlyRingName();
  const int fd = shm_open(("/" + name).c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  std::vector<Bytes> first = SendGood(*producer, 3);
  first.push_back(MakeMessage(wire::kMsgName, 2 * page, 9));
  ASSERT_TRUE(Send(*producer, first.back()));
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 4u);
  EXPECT_EQ(got.messages, first);
  SendGood(*producer, 2);  // committed beyond the second page, never to be read

  ASSERT_EQ(ftruncate(fd, GetParam() ? static_cast<off_t>(page) : 0), 0);
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  ASSERT_EQ(got.ends.size(), 1u);
  EXPECT_FALSE(got.ends[0].second);
  ConsumerStats cs = consumer_->stats();  // reads the (faulting) header again
  EXPECT_EQ(cs.framing_errors, 1u);
  EXPECT_EQ(cs.producers_active, 0u);
  EXPECT_EQ(cs.messages, 4u);
  EXPECT_TRUE(RingNames(run_).empty());  // unlinked
  // The previous SIGBUS action is back once Poll/stats() return.
  struct sigaction after {};
  ASSERT_EQ(sigaction(SIGBUS, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
  EXPECT_EQ(after.sa_flags & SA_SIGINFO, before.sa_flags & SA_SIGINFO);

  // Give the pages back (zeroed) so this process, as the producer, can detach.
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(internal::kRingDataOffset + kRing)), 0);
  close(fd);
  Delivered later;
  EXPECT_EQ(PollInto(*consumer_, &later), 0u);
  EXPECT_FALSE(consumer_->Idle());
  producer->Detach();
  EXPECT_EQ(PollInto(*consumer_, &later), 0u);
  EXPECT_TRUE(later.ends.empty());
  EXPECT_TRUE(consumer_->Idle());
  EXPECT_EQ(consumer_->stats().framing_errors, 1u);
}

INSTANTIATE_TEST_SUITE_P(Sizes, TransportTruncatedRingTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("HeaderPageKept") : std::string("Empty");
                         });

std::atomic<int> g_test_sigbus{0};
void CountSigbus(int, siginfo_t*, void*) { g_test_sigbus.fetch_add(1); }

// A SIGBUS that is not a fault on ring memory goes to the action installed
// before, also while Poll has its own handler in place.
TEST_F(TransportTest, OtherSigbusIsChainedToThePreviousHandler) {
  struct sigaction mine {};
  mine.sa_sigaction = CountSigbus;
  mine.sa_flags = SA_SIGINFO;
  sigemptyset(&mine.sa_mask);
  struct sigaction original {};
  ASSERT_EQ(sigaction(SIGBUS, &mine, &original), 0);
  auto producer = Attach();
  ASSERT_NE(producer, nullptr);
  ASSERT_TRUE(Send(*producer, MakeMessage(wire::kMsgName, 64, 1)));
  g_test_sigbus = 0;
  const size_t n = consumer_->Poll([](const ProducerInfo&, const uint8_t*, uint32_t) { raise(SIGBUS); });
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(g_test_sigbus.load(), 1);
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGBUS, &original, &now), 0);
  EXPECT_EQ(now.sa_sigaction, &CountSigbus);
}

TEST_F(TransportHostileTest, MessageAboveTheWireLimitIsRejected) {
  ProducerOptions options;
  options.ring_bytes = 4u << 20;  // room for a message larger than kMaxMessageBytes
  auto producer = Attach(options);
  ASSERT_NE(producer, nullptr);
  Mapping ring(OnlyRingName());
  const std::vector<Bytes> good = SendGood(*producer, 2);
  const uint64_t w = ring.ring()->write_pos.load();
  const wire::MsgHeader bad{wire::kMsgWarpEvents, wire::kMaxMessageBytes + 8};
  std::memcpy(ring.data() + w, &bad, sizeof(bad));
  ring.ring()->write_pos.store(w + bad.size);
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 2u);
  EXPECT_EQ(got.messages, good);
  ExpectAbandoned(got, *producer, ring);
}

// ---------------------------------------------------------------------------
// Ring sizes up to 4 GiB (SMPROF_SHM_MB <= 4096).
// ---------------------------------------------------------------------------

TEST(TransportRingSizeTest, CapacityRoundsUpToFourGiBAndNoFurther) {
  EXPECT_EQ(internal::RingCapacityFor(0), internal::kMinRingBytes);
  EXPECT_EQ(internal::RingCapacityFor((64u << 10) + 1), 128u << 10);
  EXPECT_EQ(internal::RingCapacityFor((1ull << 30) + 1), 2ull << 30);
  EXPECT_EQ(internal::RingCapacityFor(3000ull << 20), 4ull << 30);
  EXPECT_EQ(internal::RingCapacityFor(4096ull << 20), 4ull << 30);
  EXPECT_EQ(internal::RingCapacityFor((4096ull << 20) + 1), 0u);
}

TEST_F(TransportTest, AttachAboveFourGiBFailsNamingTheLimit) {
  ProducerOptions options;
  options.ring_bytes = (4096ull << 20) + 1;
  std::string error;
  EXPECT_EQ(Producer::Attach(run_, options, &error), nullptr);
  EXPECT_NE(error.find("4096 MiB limit"), std::string::npos) << error;
  EXPECT_TRUE(RingNames(run_).empty());
  Mapping control(ControlSegmentName(run_));
  EXPECT_EQ(internal::Entries(control.control())[0].state.load(), internal::kEntryFree);
}

// A 2 GiB ring (sparse: only what is touched is allocated), published by hand
// as a producer would, is mapped and read.
TEST_F(TransportTest, ConsumerReadsRingsAboveOneGiB) {
  constexpr uint64_t kBig = 2ull << 30;
  Mapping control(ControlSegmentName(run_));
  internal::RegistryEntry& e = internal::Entries(control.control())[0];
  uint32_t expected = internal::kEntryFree;
  ASSERT_TRUE(e.state.compare_exchange_strong(expected, internal::kEntryClaimed));
  e.generation.store(1);
  e.pid.store(static_cast<uint32_t>(getpid()));
  const std::string name = internal::RingSegmentName(run_, 0, 1);
  const int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  if (ftruncate(fd, static_cast<off_t>(internal::kRingDataOffset + kBig)) != 0) {
    close(fd);
    GTEST_SKIP() << "cannot size a sparse 2 GiB segment in /dev/shm";
  }
  close(fd);
  {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    bip::mapped_region head(shm, bip::read_write, 0, internal::kRingDataOffset + 4096);
    auto* ring = static_cast<RingHeader*>(head.get_address());
    ring->magic = internal::kRingMagic;
    ring->version = wire::kTransportVersion;
    ring->pid = static_cast<uint32_t>(getpid());
    ring->capacity = kBig;
    const Bytes m = MakeMessage(wire::kMsgLaunch, 96, 1);
    std::memcpy(static_cast<uint8_t*>(head.get_address()) + internal::kRingDataOffset, m.data(),
                m.size());
    ring->write_pos.store(m.size());
  }
  e.ring_bytes.store(kBig);
  e.state.store(internal::kEntryReady);
  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 1u);
  EXPECT_EQ(consumer_->stats().framing_errors, 0u);
  ASSERT_EQ(got.messages.size(), 1u);
  EXPECT_EQ(got.messages[0], MakeMessage(wire::kMsgLaunch, 96, 1));
  e.state.store(internal::kEntryDetached);
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  ASSERT_EQ(got.ends.size(), 1u);
  EXPECT_TRUE(got.ends[0].second);
  EXPECT_FALSE(ShmExists(name));
}

}  // namespace
}  // namespace smprof::transport
