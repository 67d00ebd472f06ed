// MessageDecoder: every message type decodes, every rejection reason fires,
// and random / bit-flipped input never reads out of bounds (run under
// -DSMPROF_SANITIZE=ON to make that a hard check).
#include "collector/message_decoder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/support/wire_builders.h"

namespace smprof {
namespace {

using testing::Bytes;
using testing::Ev;
using testing::Frame;
using testing::Launch;
using testing::Name;

// --- message builders (tests/support/wire_builders.h, with this file's defaults) ---

Bytes Process(uint32_t pid, uint64_t gpu_ns, std::string_view cmdline) {
  return testing::Process(pid, gpu_ns, cmdline, /*ppid=*/1, /*host_realtime_ns=*/42);
}

Bytes Device(uint32_t device, std::string_view name) {
  return testing::Device(device, name, /*uuid_byte=*/0xab, /*pci_bus=*/0x19);
}

Bytes Warp(uint64_t launch, const std::vector<wire::WireEvent>& events) {
  return testing::Warp(launch, /*sm=*/5, /*bx=*/1, /*warp=*/3, events);
}

Bytes Harvest(uint32_t reason, uint64_t dropped) { return testing::Harvest(/*time_ns=*/777, reason, dropped); }

Bytes Stats(uint64_t dropped) {
  wire::StatsMsg m{};
  m.events_dropped_device = dropped;
  m.harvests = 3;
  return Frame(m, wire::kMsgStats);
}

DecodeStatus Decode(const Bytes& b, DecodedMessage* m) {
  return MessageDecoder::Decode(b.data(), static_cast<uint32_t>(b.size()), m);
}

DecodeStatus Decode(const Bytes& b) {
  DecodedMessage m;
  return Decode(b, &m);
}

void SetHeader(Bytes* b, uint32_t type, uint32_t size) {
  wire::MsgHeader h{type, size};
  std::memcpy(b->data(), &h, sizeof(h));
}

TEST(MessageDecoderTest, DecodesEveryType) {
  DecodedMessage m;
  const Bytes buf0 = Process(1234, 5000, "./app");
  ASSERT_EQ(Decode(buf0, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.type, wire::kMsgProcess);
  EXPECT_EQ(m.process.pid, 1234u);
  EXPECT_EQ(m.process.gpu_time_ns, 5000u);
  EXPECT_EQ(m.text, "./app");

  const std::string cmd("./app\0--x", 9);
  const Bytes buf1 = Process(1, 2, cmd);
  ASSERT_EQ(Decode(buf1, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.text, cmd);

  const Bytes buf2 = Device(2, "NVIDIA H100");
  ASSERT_EQ(Decode(buf2, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.type, wire::kMsgDevice);
  EXPECT_EQ(m.device.device, 2u);
  EXPECT_EQ(m.device.uuid[15], 0xab);
  EXPECT_EQ(m.device.pci_bus, 0x19u);
  EXPECT_EQ(m.device.sm_clock_khz, 1980000u);
  EXPECT_EQ(m.device.timer_resolution_ns, 32u);
  EXPECT_EQ(m.text, "NVIDIA H100");

  const Bytes buf3 = Name(7, "mainloop");
  ASSERT_EQ(Decode(buf3, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.type, wire::kMsgName);
  EXPECT_EQ(m.name.name_id, 7u);
  EXPECT_EQ(m.text, "mainloop");

  const Bytes buf4 = Name(8, "");
  ASSERT_EQ(Decode(buf4, &m), DecodeStatus::kOk);
  EXPECT_TRUE(m.text.empty());

  const Bytes buf5 = Launch(9, 100, 200, "void k<1>(int)");
  ASSERT_EQ(Decode(buf5, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.type, wire::kMsgLaunch);
  EXPECT_EQ(m.launch.launch_id, 9u);
  EXPECT_EQ(m.launch.grid[0], 4u);
  EXPECT_EQ(m.text, "void k<1>(int)");

  const Bytes buf6 = Warp(9, {Ev(10, 1, wire::kEventBegin), Ev(20, 2, wire::kEventInstant), Ev(30, 1, wire::kEventEnd)});
  ASSERT_EQ(Decode(buf6, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.type, wire::kMsgWarpEvents);
  EXPECT_EQ(m.warp_events.sm, 5u);
  EXPECT_EQ(m.warp_events.warp, 3u);
  ASSERT_EQ(m.event_count, 3u);
  EXPECT_EQ(m.event(1).time_ns, 20u);
  EXPECT_EQ(m.event(1).name_id, 2u);
  EXPECT_EQ(m.event(2).kind, static_cast<uint32_t>(wire::kEventEnd));

  const Bytes buf7 = Warp(9, {});
  ASSERT_EQ(Decode(buf7, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.event_count, 0u);

  const Bytes buf8 = Harvest(wire::kHarvestHighWater, 11);
  ASSERT_EQ(Decode(buf8, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.type, wire::kMsgHarvest);
  EXPECT_EQ(m.harvest.reason, static_cast<uint32_t>(wire::kHarvestHighWater));
  EXPECT_EQ(m.harvest.dropped_events, 11u);

  const Bytes buf9 = Stats(13);
  ASSERT_EQ(Decode(buf9, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.type, wire::kMsgStats);
  EXPECT_EQ(m.stats.events_dropped_device, 13u);
  EXPECT_EQ(m.stats.harvests, 3u);

  const Bytes buf10 = testing::Notice(wire::kNoticeCuptiUnavailable, "CUPTI for compute-sanitizer");
  ASSERT_EQ(Decode(buf10, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.type, wire::kMsgNotice);
  EXPECT_EQ(m.notice.kind, static_cast<uint32_t>(wire::kNoticeCuptiUnavailable));
  EXPECT_EQ(m.text, "CUPTI for compute-sanitizer");

  Bytes pad(16, 0);
  SetHeader(&pad, wire::kMsgPad, 16);
  ASSERT_EQ(Decode(pad, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.type, wire::kMsgPad);
}

TEST(MessageDecoderTest, DecodesUnalignedInput) {
  const Bytes msg = Warp(3, {Ev(10, 1, wire::kEventBegin), Ev(20, 1, wire::kEventEnd)});
  Bytes shifted(msg.size() + 1);
  std::memcpy(shifted.data() + 1, msg.data(), msg.size());
  DecodedMessage m;
  ASSERT_EQ(MessageDecoder::Decode(shifted.data() + 1, static_cast<uint32_t>(msg.size()), &m), DecodeStatus::kOk);
  EXPECT_EQ(m.event(1).time_ns, 20u);
}

TEST(MessageDecoderTest, RejectsTooShort) {
  Bytes b(4, 0);
  EXPECT_EQ(Decode(b), DecodeStatus::kTooShort);
  EXPECT_EQ(MessageDecoder::Decode(nullptr, 0, nullptr), DecodeStatus::kTooShort);
}

TEST(MessageDecoderTest, RejectsHeaderSizeMismatch) {
  Bytes b = Name(1, "abc");
  SetHeader(&b, wire::kMsgName, static_cast<uint32_t>(b.size()) + 8);
  EXPECT_EQ(Decode(b), DecodeStatus::kSizeMismatch);
  SetHeader(&b, wire::kMsgName, 8);
  EXPECT_EQ(Decode(b), DecodeStatus::kSizeMismatch);
}

TEST(MessageDecoderTest, RejectsMisalignedSize) {
  Bytes b(20, 0);
  SetHeader(&b, wire::kMsgName, 20);
  EXPECT_EQ(Decode(b), DecodeStatus::kMisaligned);
}

TEST(MessageDecoderTest, RejectsTooLarge) {
  const uint32_t size = wire::kMaxMessageBytes + 8;
  Bytes b = Name(1, std::string(size - sizeof(wire::NameMsg), 'x'));
  ASSERT_EQ(b.size(), size);
  EXPECT_EQ(Decode(b), DecodeStatus::kTooLarge);
}

TEST(MessageDecoderTest, RejectsUnknownType) {
  Bytes b(16, 0);
  SetHeader(&b, wire::kMsgLastType + 1, 16);
  EXPECT_EQ(Decode(b), DecodeStatus::kUnknownType);
  SetHeader(&b, 0xffffffffu, 16);
  EXPECT_EQ(Decode(b), DecodeStatus::kUnknownType);
}

TEST(MessageDecoderTest, RejectsSizeThatDisagreesWithContents) {
  // Declared tail longer than the message.
  Bytes b = Name(1, "abc");
  wire::NameMsg n;
  std::memcpy(&n, b.data(), sizeof(n));
  n.name_len = 9;
  std::memcpy(b.data(), &n, sizeof(n));
  EXPECT_EQ(Decode(b), DecodeStatus::kBadSize);
  // Extra padding beyond PaddedSize.
  Bytes p = Process(1, 2, "abc");
  p.resize(p.size() + 8, 0);
  SetHeader(&p, wire::kMsgProcess, static_cast<uint32_t>(p.size()));
  EXPECT_EQ(Decode(p), DecodeStatus::kBadSize);
  // Shorter than the fixed struct.
  Bytes l(16, 0);
  SetHeader(&l, wire::kMsgLaunch, 16);
  EXPECT_EQ(Decode(l), DecodeStatus::kBadSize);
  Bytes d(24, 0);
  SetHeader(&d, wire::kMsgDevice, 24);
  EXPECT_EQ(Decode(d), DecodeStatus::kBadSize);
  Bytes nt = testing::Notice(wire::kNoticeSteppedAside, "abc");
  wire::NoticeMsg notice;
  std::memcpy(&notice, nt.data(), sizeof(notice));
  notice.text_len = 40;
  std::memcpy(nt.data(), &notice, sizeof(notice));
  EXPECT_EQ(Decode(nt), DecodeStatus::kBadSize);
  // Fixed messages: exactly their size.
  Bytes h = Harvest(1, 0);
  h.resize(h.size() + 8, 0);
  SetHeader(&h, wire::kMsgHarvest, static_cast<uint32_t>(h.size()));
  EXPECT_EQ(Decode(h), DecodeStatus::kBadSize);
  Bytes s = Stats(0);
  s.resize(s.size() - 8);
  SetHeader(&s, wire::kMsgStats, static_cast<uint32_t>(s.size()));
  EXPECT_EQ(Decode(s), DecodeStatus::kBadSize);
}

TEST(MessageDecoderTest, RejectsEventCountThatDoesNotFit) {
  Bytes b = Warp(1, {Ev(10, 1, wire::kEventBegin), Ev(20, 1, wire::kEventEnd)});
  wire::WarpEventsMsg w;
  std::memcpy(&w, b.data(), sizeof(w));
  for (uint32_t count : {0u, 1u, 3u, 0x10000000u, 0xffffffffu}) {
    w.count = count;
    std::memcpy(b.data(), &w, sizeof(w));
    EXPECT_EQ(Decode(b), DecodeStatus::kBadSize) << count;
  }
}

TEST(MessageDecoderTest, RejectsStringsAbove64KiB) {
  EXPECT_EQ(Decode(Name(1, std::string(kMaxStringBytes, 'n'))), DecodeStatus::kOk);
  EXPECT_EQ(Decode(Name(1, std::string(kMaxStringBytes + 1, 'n'))), DecodeStatus::kStringTooLong);
  EXPECT_EQ(Decode(Process(1, 2, std::string(kMaxStringBytes + 1, 'c'))), DecodeStatus::kStringTooLong);
  EXPECT_EQ(Decode(Device(0, std::string(kMaxStringBytes + 1, 'd'))), DecodeStatus::kStringTooLong);
  EXPECT_EQ(Decode(Launch(1, 1, 2, std::string(kMaxStringBytes + 1, 'k'))), DecodeStatus::kStringTooLong);
  // A huge declared length that would overflow 32-bit size arithmetic.
  Bytes b = Name(1, "abc");
  wire::NameMsg n;
  std::memcpy(&n, b.data(), sizeof(n));
  n.name_len = 0xfffffff8u;
  std::memcpy(b.data(), &n, sizeof(n));
  EXPECT_EQ(Decode(b), DecodeStatus::kStringTooLong);
}

TEST(MessageDecoderTest, RejectsBadEventKind) {
  for (uint32_t kind : {0u, 9u, 15u, 0x101u, 0x80000001u}) {
    EXPECT_EQ(Decode(Warp(1, {Ev(10, 1, wire::kEventBegin), Ev(20, 1, kind)})), DecodeStatus::kBadEventKind) << kind;
  }
  EXPECT_STREQ(DecodeStatusName(DecodeStatus::kBadEventKind), "event kind unknown");
}

constexpr uint32_t kValue = wire::kEventHasValue;
constexpr uint32_t kCounter = wire::kEventCounter;
constexpr uint32_t kWide = wire::kEventWideValue;
constexpr uint32_t kNameValue = wire::kEventNameValue;

// Every kind of the device API with every flag it takes, a 64-bit value
// with its continuation included.
TEST(MessageDecoderTest, AcceptsEveryKindWithItsFlags) {
  const std::vector<wire::WireEvent> events = {
      Ev(10, 1, wire::kEventBegin),
      Ev(11, 1, wire::kEventBegin | kNameValue, 3),
      Ev(12, 1, wire::kEventEnd | kNameValue, 3),
      Ev(13, 1, wire::kEventEnd | kValue, 0xfffffffeu),
      Ev(14, 2, wire::kEventInstant | kValue | kCounter, 5),
      Ev(15, 2, wire::kEventInstant | kValue | kWide, 1),
      Ev(15, 2, wire::kEventValueHigh, 2),
      Ev(16, 2, wire::kEventEnd | kValue | kWide, 1),
      Ev(16, 2, wire::kEventValueHigh, 0),
      Ev(17, 2, wire::kEventInstant | kValue | kCounter | kWide, 1),
      Ev(17, 2, wire::kEventValueHigh, 0),
      Ev(18, 3, wire::kEventPhase),
      Ev(19, 3, wire::kEventPhase | kNameValue, 7),
      Ev(20, 3, wire::kEventPhaseEnd),
      Ev(21, 4, wire::kEventAsyncBegin, 9),
      Ev(22, 4, wire::kEventAsyncEnd, 9),
      Ev(23, 1, wire::kEventInstant | kNameValue, 1),
  };
  DecodedMessage m;
  const Bytes b = Warp(1, events);
  ASSERT_EQ(Decode(b, &m), DecodeStatus::kOk);
  ASSERT_EQ(m.event_count, events.size());
  EXPECT_EQ(m.event(6).kind, static_cast<uint32_t>(wire::kEventValueHigh));
  EXPECT_EQ(m.event(6).value, 2u);
}

TEST(MessageDecoderTest, RejectsFlagsTheKindDoesNotTake) {
  const auto decode = [](uint32_t kind) {
    return Decode(Warp(1, {Ev(10, 1, wire::kEventBegin), Ev(20, 1, kind), Ev(30, 1, wire::kEventEnd)}));
  };
  // A flag on a kind that takes none (or not that one).
  for (uint32_t kind : {wire::kEventBegin | kValue, wire::kEventPhase | kValue, wire::kEventPhaseEnd | kNameValue,
                        wire::kEventAsyncBegin | kValue, wire::kEventAsyncEnd | kNameValue,
                        wire::kEventEnd | kCounter | kValue, wire::kEventValueHigh | kValue}) {
    EXPECT_EQ(decode(kind), DecodeStatus::kBadEventFlags) << std::hex << kind;
  }
  // A counter or a 64-bit value without a value, a value and a format integer at once.
  EXPECT_EQ(decode(wire::kEventInstant | kCounter), DecodeStatus::kBadEventFlags);
  EXPECT_EQ(decode(wire::kEventInstant | kWide), DecodeStatus::kBadEventFlags);
  EXPECT_EQ(decode(wire::kEventInstant | kValue | kNameValue), DecodeStatus::kBadEventFlags);
  EXPECT_EQ(decode(wire::kEventEnd | kValue | kNameValue), DecodeStatus::kBadEventFlags);
  EXPECT_EQ(decode(wire::kEventInstant | kValue), DecodeStatus::kOk);
  EXPECT_STREQ(DecodeStatusName(DecodeStatus::kBadEventFlags), "event flags not allowed on its kind");
}

TEST(MessageDecoderTest, RejectsAContinuationOutOfPlace) {
  const wire::WireEvent wide = Ev(10, 1, wire::kEventInstant | kValue | kWide, 1);
  const wire::WireEvent high = Ev(10, 1, wire::kEventValueHigh, 2);
  const wire::WireEvent plain = Ev(20, 1, wire::kEventInstant);
  EXPECT_EQ(Decode(Warp(1, {wide, high, plain})), DecodeStatus::kOk);
  // A continuation without its wide event: alone, first, after a 32-bit value, twice.
  EXPECT_EQ(Decode(Warp(1, {high})), DecodeStatus::kBadValueHigh);
  EXPECT_EQ(Decode(Warp(1, {high, plain})), DecodeStatus::kBadValueHigh);
  EXPECT_EQ(Decode(Warp(1, {Ev(10, 1, wire::kEventInstant | kValue, 1), high})), DecodeStatus::kBadValueHigh);
  EXPECT_EQ(Decode(Warp(1, {wide, high, high})), DecodeStatus::kBadValueHigh);
  // A wide event at the end of the message, or followed by another event.
  EXPECT_EQ(Decode(Warp(1, {plain, wide})), DecodeStatus::kBadValueHigh);
  EXPECT_EQ(Decode(Warp(1, {wide, plain})), DecodeStatus::kBadValueHigh);
  EXPECT_EQ(Decode(Warp(1, {wide, wide, high})), DecodeStatus::kBadValueHigh);
  EXPECT_STREQ(DecodeStatusName(DecodeStatus::kBadValueHigh), "64-bit value continuation missing or out of place");
}

TEST(MessageDecoderTest, RejectsNameIdsInTheCollectorsRange) {
  EXPECT_EQ(Decode(Warp(1, {Ev(10, kMaxWireNameId, wire::kEventInstant)})), DecodeStatus::kOk);
  EXPECT_EQ(Decode(Warp(1, {Ev(10, kMaxWireNameId + 1, wire::kEventInstant)})), DecodeStatus::kBadNameId);
  EXPECT_EQ(Decode(Name(kMaxWireNameId, "a")), DecodeStatus::kOk);
  EXPECT_EQ(Decode(Name(kMaxWireNameId + 1, "a")), DecodeStatus::kBadNameId);
}

TEST(MessageDecoderTest, RejectsLaunchEndingBeforeStart) {
  EXPECT_EQ(Decode(Launch(1, 200, 100, "k")), DecodeStatus::kBadTimeRange);
  EXPECT_EQ(Decode(Launch(1, 100, 100, "k")), DecodeStatus::kOk);
}

TEST(MessageDecoderTest, ChecksHostCallsAndThreads) {
  wire::LaunchMsg l = testing::LaunchFields(1, 100, 200);
  l.call = testing::Call(wire::kApiGraphLaunch, 10, 20, 77);
  EXPECT_EQ(Decode(Launch(l, "k")), DecodeStatus::kOk);
  l.call.end_ns = 5;  // ends before it starts
  EXPECT_EQ(Decode(Launch(l, "k")), DecodeStatus::kBadHostCall);
  l.call = testing::Call(wire::kApiLast + 1, 10, 20, 77);
  EXPECT_EQ(Decode(Launch(l, "k")), DecodeStatus::kBadHostCall);
  l.call = testing::Call(wire::kApiNone, 10, 20, 77);  // fields without an api
  EXPECT_EQ(Decode(Launch(l, "k")), DecodeStatus::kBadHostCall);

  EXPECT_EQ(Decode(testing::HostHarvest(1, wire::kHarvestSync, 77, 10, 20,
                                        testing::Call(wire::kApiCtxSynchronize, 5, 10, 77))),
            DecodeStatus::kOk);
  EXPECT_EQ(Decode(testing::HostHarvest(1, wire::kHarvestSync, 77, 20, 10)), DecodeStatus::kBadTimeRange);
  EXPECT_EQ(Decode(testing::HostHarvest(1, wire::kHarvestSync, 77, 10, 20, testing::Call(99, 5, 10, 77))),
            DecodeStatus::kBadHostCall);

  DecodedMessage m;
  const testing::Bytes thread = testing::Thread(77, "main");  // m.text points into it
  ASSERT_EQ(Decode(thread, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.type, wire::kMsgThread);
  EXPECT_EQ(m.thread.tid, 77u);
  EXPECT_EQ(m.text, "main");
  testing::Bytes long_name = testing::Thread(77, "main");
  wire::ThreadMsg t;
  std::memcpy(&t, long_name.data(), sizeof(t));
  t.name_len = 9;  // more than the message holds
  std::memcpy(long_name.data(), &t, sizeof(t));
  EXPECT_EQ(Decode(long_name), DecodeStatus::kBadSize);
}

// A read-back as the injector ships it: records, names, chunks (whole, or
// each up to its written bytes).
TEST(MessageDecoderTest, DecodesReadBacks) {
  DecodedMessage m;
  const Bytes kernel = testing::KernelName(3, "gemm(float*)");  // the text points into it
  ASSERT_EQ(Decode(kernel, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.kernel_name.kernel_id, 3u);
  EXPECT_EQ(m.text, "gemm(float*)");
  const Bytes marker = testing::MarkerName(2, 5, 0x7000, "load");
  ASSERT_EQ(Decode(marker, &m), DecodeStatus::kOk);
  EXPECT_EQ(m.marker_name.address, 0x7000u);
  EXPECT_EQ(m.marker_name.generation, 5u);
  EXPECT_EQ(m.text, "load");
  wire::KernelRecordEntry r = testing::Record(9, 100, 200, 4, 3);
  r.call = wire::HostCall{10, 20, 77, wire::kApiLaunchKernel};
  const Bytes records = testing::Records(0, 2, {r, testing::Record(10, 300, 400, 5, 3)});
  ASSERT_EQ(Decode(records, &m), DecodeStatus::kOk);
  ASSERT_EQ(m.records.count, 2u);
  EXPECT_EQ(m.record(0).call.tid, 77u);
  EXPECT_EQ(m.record(1).grid_id, 10u);
  const std::vector<uint8_t> chunks(512, 0);
  ASSERT_EQ(Decode(testing::Chunks(0, 2, 256, chunks), &m), DecodeStatus::kOk);
  EXPECT_EQ(m.chunks.count, 2u);
  // Each up to its written bytes: 56 and 0 of 256.
  wire::ChunksMsg parts{};
  parts.chunk_bytes = 256;
  parts.count = 2;
  parts.flags = wire::kChunksUsedBytes;
  const wire::ChunkBytes first{56, 0}, second{0, 0};
  std::string tail(reinterpret_cast<const char*>(&first), sizeof(first));
  tail.append(56, '\x01');
  tail.append(reinterpret_cast<const char*>(&second), sizeof(second));
  ASSERT_EQ(Decode(Frame(parts, wire::kMsgChunks, tail), &m), DecodeStatus::kOk);
  EXPECT_EQ(m.chunks.count, 2u);
}

TEST(MessageDecoderTest, RejectsReadBacksThatDoNotHoldTogether) {
  EXPECT_EQ(Decode(testing::Records(0, 1, {testing::Record(9, 200, 100, 4, 3)})), DecodeStatus::kBadTimeRange);
  wire::KernelRecordEntry bad_call = testing::Record(9, 100, 200, 4, 3);
  bad_call.call = wire::HostCall{0, 0, 5, wire::kApiNone};  // a thread without an api
  EXPECT_EQ(Decode(testing::Records(0, 1, {bad_call})), DecodeStatus::kBadHostCall);
  Bytes short_records = testing::Records(0, 1, {testing::Record(9, 100, 200, 4, 3)});
  wire::RecordsMsg claims{};
  std::memcpy(&claims, short_records.data(), sizeof(claims));
  claims.count = 2;  // one more than it holds
  std::memcpy(short_records.data(), &claims, sizeof(claims));
  EXPECT_EQ(Decode(short_records), DecodeStatus::kBadSize);
  EXPECT_EQ(Decode(testing::Chunks(0, 1, 300, std::vector<uint8_t>(600, 0))), DecodeStatus::kBadChunkSize);
  EXPECT_EQ(Decode(testing::Chunks(0, 1, 128, std::vector<uint8_t>(256, 0))), DecodeStatus::kBadChunkSize);
  wire::ChunksMsg parts{};
  parts.chunk_bytes = 256;
  parts.count = 1;
  parts.flags = wire::kChunksUsedBytes;
  const auto with = [&](uint32_t bytes, size_t carried) {
    const wire::ChunkBytes part{bytes, 0};
    std::string tail(reinterpret_cast<const char*>(&part), sizeof(part));
    tail.append(carried, '\x01');
    return Decode(Frame(parts, wire::kMsgChunks, tail));
  };
  EXPECT_EQ(with(264, 264), DecodeStatus::kBadChunkSize);  // longer than a chunk
  EXPECT_EQ(with(52, 56), DecodeStatus::kBadChunkSize);    // not a multiple of 8
  EXPECT_EQ(with(64, 56), DecodeStatus::kBadSize);         // says more than it carries
  EXPECT_EQ(with(48, 56), DecodeStatus::kBadSize);         // carries more than it says
  parts.flags = 0x80;
  EXPECT_EQ(with(48, 48), DecodeStatus::kBadChunkSize);  // an unknown flag
}

TEST(MessageDecoderTest, EveryStatusHasAName) {
  for (int i = 0; i < kNumDecodeStatus; ++i) {
    EXPECT_STRNE(DecodeStatusName(static_cast<DecodeStatus>(i)), "?") << i;
  }
}

// Checks that what the decoder says lies inside the buffer does.
void CheckViewInside(const Bytes& b, const DecodedMessage& m) {
  const auto* begin = reinterpret_cast<const char*>(b.data());
  const auto* end = begin + b.size();
  if (!m.text.empty()) {
    ASSERT_GE(m.text.data(), begin);
    ASSERT_LE(m.text.data() + m.text.size(), end);
  }
  if (m.event_count != 0) {
    ASSERT_GE(reinterpret_cast<const char*>(m.events), begin);
    ASSERT_LE(reinterpret_cast<const char*>(m.events) + m.event_count * sizeof(wire::WireEvent), end);
    for (uint32_t i = 0; i < m.event_count; ++i) {
      const uint32_t kind = m.event(i).kind;
      ASSERT_TRUE((kind & wire::kEventKindMask) >= 1 && (kind & wire::kEventKindMask) <= wire::kMaxEventKind &&
                  kind <= 0xffu);
    }
  }
}

TEST(MessageDecoderTest, FuzzRandomAndBitFlippedMessages) {
  std::mt19937_64 rng(0x5eedf00d);
  const std::vector<Bytes> seeds = {
      Process(10, 5000, "./app --flag"),
      Device(0, "GPU name"),
      Name(3, "region"),
      Launch(1, 100, 500, "void ns::k<int, 3>(float*, int)"),
      Warp(1, {Ev(110, 3, wire::kEventBegin), Ev(120, 3, wire::kEventInstant), Ev(130, 3, wire::kEventEnd)}),
      Harvest(wire::kHarvestSync, 2),
      Stats(5),
  };
  constexpr int kIterations = 150000;
  int accepted = 0;
  for (int iter = 0; iter < kIterations; ++iter) {
    Bytes b;
    const int mode = static_cast<int>(rng() % 4);
    if (mode == 0) {
      // Random bytes, random size; header sometimes made self-consistent.
      b.resize(rng() % 300);
      for (auto& byte : b) byte = static_cast<uint8_t>(rng());
      if (b.size() >= 8 && rng() % 2) {
        SetHeader(&b, static_cast<uint32_t>(rng() % 9), static_cast<uint32_t>(b.size()));
      }
    } else {
      // A valid message with a few flipped bits, maybe resized, maybe with
      // its header size repaired so deeper checks run.
      b = seeds[rng() % seeds.size()];
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        const size_t bit = rng() % (b.size() * 8);
        b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      }
      if (mode == 2) b.resize(rng() % (b.size() + 64), 0xAB);
      if (mode >= 2 && b.size() >= 8) {
        wire::MsgHeader h;
        std::memcpy(&h, b.data(), sizeof(h));
        SetHeader(&b, h.type, static_cast<uint32_t>(b.size()));
      }
    }
    // Exact-size heap buffer so that ASan flags any over-read.
    Bytes exact(b.begin(), b.end());
    DecodedMessage m;
    const DecodeStatus st =
        MessageDecoder::Decode(exact.empty() ? nullptr : exact.data(), static_cast<uint32_t>(exact.size()), &m);
    if (st == DecodeStatus::kOk) {
      ++accepted;
      ASSERT_NO_FATAL_FAILURE(CheckViewInside(exact, m));
      ASSERT_EQ(exact.size() % 8, 0u);
    }
  }
  // The generator must exercise both paths.
  EXPECT_GT(accepted, 1000);
  EXPECT_LT(accepted, kIterations);
}

}  // namespace
}  // namespace smprof
