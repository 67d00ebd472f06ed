// Unit tests of the shared-memory transport: one process plays both sides,
// and where a test needs a hostile or mismatched peer it writes the segments
// directly through common/transport_layout.h.
#include "common/transport.h"

#include <dirent.h>
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

TEST_F(TransportTest, DropsWithoutWaitingWhenCollectorHeartbeatIsStale) {
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
    for (int i = 0; i < 16; ++i) accepted += Send(*producer, MakeMessage(wire::kMsgName, 4096, i), 2);
    int refused = 0;
    for (int i = 0; i < 5; ++i) refused += !Send(*producer, MakeMessage(wire::kMsgName, 4096, i), 3);
    refused += !Send(*producer, MakeMessage(wire::kMsgName, 8, 99), 7);
    return std::make_pair(accepted, refused);
  });
  if (sending.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    // The sender is stuck for an hour and would block the future's destructor.
    fprintf(stderr, "FAILED: Send waited for a dead collector\n");
    std::_Exit(1);
  }
  const auto [accepted, refused] = sending.get();
  EXPECT_EQ(accepted, 16);  // 16 x 4096 fill the 64 KiB ring exactly
  EXPECT_EQ(refused, 6);

  const ProducerStats ps = producer->stats();
  EXPECT_EQ(ps.messages_sent, 16u);
  EXPECT_EQ(ps.messages_dropped, 6u);
  EXPECT_EQ(ps.bytes_dropped, 5u * 4096u + 8u);
  EXPECT_EQ(ps.events_dropped, 5u * 3u + 7u);

  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 16u);
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
  EXPECT_FALSE(Send(*producer, MakeMessage(wire::kMsgStats + 1, 64, 4), 1));
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
  EXPECT_EQ(ring.ring()->messages_dropped.load(), 0u);
  EXPECT_EQ(ring.ring()->detached.load(), 0u);

  Delivered got;
  EXPECT_EQ(PollInto(*consumer_, &got), 0u);
  EXPECT_TRUE(got.ends.empty());
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
                      BadHeader{"unknown_type", wire::kMsgStats + 1, 16},
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

}  // namespace
}  // namespace smprof::transport
