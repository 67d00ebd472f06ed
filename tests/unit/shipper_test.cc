// Shipper: message framing, kernel and thread naming, splitting, loss counting.
#include "injector/shipper.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace smprof::injector {
namespace {

class RecordingSink : public MessageSink {
 public:
  bool SendBulk(const Part* parts, size_t count, uint32_t size, uint64_t events) override {
    ++bulk;
    return MessageSink::SendBulk(parts, count, size, events);
  }
  bool Send(const void* data, uint32_t size, uint64_t events) override {
    if (reject_all) return false;
    messages.emplace_back(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
    event_counts.push_back(events);
    return true;
  }
  uint32_t TypeAt(size_t i) const {
    wire::MsgHeader h;
    std::memcpy(&h, messages[i].data(), sizeof(h));
    return h.type;
  }
  template <typename T>
  T As(size_t i) const {
    T t;
    std::memcpy(&t, messages[i].data(), sizeof(T));
    return t;
  }
  bool reject_all = false;
  size_t bulk = 0;
  std::vector<std::vector<uint8_t>> messages;
  std::vector<uint64_t> event_counts;
};

KernelRecord MakeRecord(uint64_t grid, uint64_t correlation, const std::string& mangled) {
  KernelRecord r;
  r.grid_id = grid;
  r.start_ns = 100 * grid;
  r.end_ns = 100 * grid + 50;
  r.correlation_id = correlation;
  r.stream_id = 9;
  r.graph_id = 0;
  r.grid[0] = 3;
  r.grid[1] = r.grid[2] = 1;
  r.block[0] = 128;
  r.block[1] = r.block[2] = 1;
  r.registers = 40;
  r.name = mangled;
  return r;
}

// Records carry what the launch path knew (wanted, the call); a kernel and a
// thread are named once, before the first record naming them.
TEST(Shipper, RecordsNameTheirKernelsAndThreadsFirst) {
  RecordingSink sink;
  Shipper s(&sink, [](uint32_t tid) { return std::string(tid == 77 ? "main" : "worker"); });
  const KernelRecord gemm1 = MakeRecord(1, 11, "_Z4gemmPf"), gemm2 = MakeRecord(2, 12, "_Z4gemmPf");
  const KernelRecord other = MakeRecord(3, 13, "_Z5otherPf");
  s.SendRecords(0, 5, {{&gemm1, true, wire::HostCall{1, 5, 77, wire::kApiLaunchKernel}},
                       {&gemm2, false, wire::HostCall{}},
                       {&other, true, wire::HostCall{6, 8, 77, wire::kApiLaunchKernel}}});
  // kernel "gemm", thread 77, kernel "other", the records
  ASSERT_EQ(sink.messages.size(), 4u);
  EXPECT_EQ(sink.TypeAt(0), wire::kMsgKernelName);
  EXPECT_EQ(sink.TypeAt(1), wire::kMsgThread);
  EXPECT_EQ(sink.TypeAt(2), wire::kMsgKernelName);
  ASSERT_EQ(sink.TypeAt(3), wire::kMsgRecords);
  for (const auto& m : sink.messages) EXPECT_EQ(m.size() % 8, 0u);
  const auto k = sink.As<wire::KernelNameMsg>(0);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sink.messages[0].data()) + sizeof(k), k.name_len),
            "gemm(float*)");
  const auto m = sink.As<wire::RecordsMsg>(3);
  EXPECT_EQ(m.context_id, 5u);
  ASSERT_EQ(m.count, 3u);
  ASSERT_EQ(sink.messages[3].size(), sizeof(m) + 3 * sizeof(wire::KernelRecordEntry));
  wire::KernelRecordEntry e[3];
  std::memcpy(e, sink.messages[3].data() + sizeof(m), sizeof(e));
  EXPECT_EQ(e[0].grid_id, 1u);
  EXPECT_EQ(e[0].kernel_id, k.kernel_id);
  EXPECT_EQ(e[1].kernel_id, k.kernel_id);
  EXPECT_NE(e[2].kernel_id, k.kernel_id);
  EXPECT_EQ(e[0].flags, uint32_t{wire::kRecordWanted});
  EXPECT_EQ(e[1].flags, 0u);
  EXPECT_EQ(e[0].call.tid, 77u);
  EXPECT_EQ(e[1].call.api, wire::kApiNone);
  EXPECT_EQ(e[2].registers, 40u);
  // Known kernels and threads are not named again.
  sink.messages.clear();
  s.SendRecords(0, 5, {{&gemm1, true, wire::HostCall{1, 5, 77, wire::kApiLaunchKernel}}});
  ASSERT_EQ(sink.messages.size(), 1u);
  EXPECT_EQ(sink.TypeAt(0), wire::kMsgRecords);
}

TEST(Shipper, KernelWhoseNameWasDroppedIsNamedAgain) {
  RecordingSink sink;
  Shipper s(&sink);
  const KernelRecord r = MakeRecord(1, 11, "_Z4gemmPf");
  sink.reject_all = true;
  s.SendRecords(0, 1, {{&r, true, {}}});
  sink.reject_all = false;
  s.SendRecords(0, 1, {{&r, true, {}}});
  ASSERT_EQ(sink.messages.size(), 2u);
  EXPECT_EQ(sink.TypeAt(0), wire::kMsgKernelName);
  const auto k = sink.As<wire::KernelNameMsg>(0);
  wire::KernelRecordEntry e;
  std::memcpy(&e, sink.messages[1].data() + sizeof(wire::RecordsMsg), sizeof(e));
  EXPECT_EQ(e.kernel_id, k.kernel_id);
}

// A read-back ships as it was written: each chunk up to its written bytes,
// in messages of at most kChunkMessageBytes; its events are counted in
// proportion, and counted lost when dropped.
TEST(Shipper, ChunksShipTheirWrittenBytesInBoundedMessages) {
  RecordingSink sink;
  Shipper s(&sink);
  constexpr uint32_t kChunk = 64u << 10;
  const size_t count = 9;
  std::vector<uint8_t> chunks(count * kChunk);
  for (size_t i = 0; i < chunks.size(); ++i) chunks[i] = static_cast<uint8_t>(i * 7);
  // Whole chunks, a chunk never written, small ones.
  const std::vector<uint32_t> used = {kChunk, kChunk, kChunk, kChunk, 0, 64, kChunk, 48, 4096};
  s.SendChunks(1, 2, 3, kChunk, chunks.data(), used, 1000);
  std::vector<uint32_t> seen;
  uint64_t events = 0;
  for (size_t i = 0; i < sink.messages.size(); ++i) {
    ASSERT_EQ(sink.TypeAt(i), wire::kMsgChunks);
    const auto m = sink.As<wire::ChunksMsg>(i);
    EXPECT_EQ(m.device, 1u);
    EXPECT_EQ(m.context_id, 2u);
    EXPECT_EQ(m.name_generation, 3u);
    EXPECT_EQ(m.chunk_bytes, kChunk);
    EXPECT_EQ(m.flags, uint32_t{wire::kChunksUsedBytes});
    EXPECT_LE(sink.messages[i].size(), Shipper::kChunkMessageBytes);
    size_t at = sizeof(m);
    for (uint32_t k = 0; k < m.count; ++k) {
      wire::ChunkBytes part;
      std::memcpy(&part, sink.messages[i].data() + at, sizeof(part));
      const size_t chunk = seen.size();
      seen.push_back(part.bytes);
      ASSERT_LE(at + sizeof(part) + part.bytes, sink.messages[i].size());
      EXPECT_TRUE(std::equal(chunks.begin() + chunk * kChunk, chunks.begin() + chunk * kChunk + part.bytes,
                             sink.messages[i].begin() + at + sizeof(part)))
          << "chunk " << chunk;
      at += sizeof(part) + part.bytes;
    }
    EXPECT_EQ(at, sink.messages[i].size());
    events += sink.event_counts[i];
  }
  EXPECT_EQ(seen, used);
  EXPECT_EQ(events, 1000u);
  EXPECT_EQ(sink.bulk, sink.messages.size());  // patient sends
  EXPECT_EQ(s.counters().events, 1000u);
  const size_t messages = sink.messages.size();
  EXPECT_GE(messages, 2u);
  sink.reject_all = true;
  s.SendChunks(1, 2, 3, kChunk, chunks.data(), used, 1000);
  EXPECT_EQ(s.counters().events_dropped, 1000u);
  EXPECT_EQ(s.counters().messages_dropped, messages);
}

TEST(Shipper, MarkerNamesCarryTheirContextGenerationAndAddress) {
  RecordingSink sink;
  Shipper s(&sink);
  s.SendMarkerName(4, 2, 0x7000, "load");
  ASSERT_EQ(sink.messages.size(), 1u);
  const auto m = sink.As<wire::MarkerNameMsg>(0);
  EXPECT_EQ(m.context_id, 4u);
  EXPECT_EQ(m.generation, 2u);
  EXPECT_EQ(m.address, 0x7000u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sink.messages[0].data()) + sizeof(m), m.name_len), "load");
}

TEST(Shipper, HarvestCarriesLossesArenaFillAndItsContext) {
  RecordingSink sink;
  Shipper s(&sink);
  s.SendHarvest(123, 1, 6, wire::kHarvestHighWater, 4, 5, 96, 128, 7, wire::kHarvestProbed, -250);
  ASSERT_EQ(sink.messages.size(), 1u);
  ASSERT_EQ(sink.TypeAt(0), wire::kMsgHarvest);
  ASSERT_EQ(sink.messages[0].size(), sizeof(wire::HarvestMsg));
  const auto h = sink.As<wire::HarvestMsg>(0);
  EXPECT_EQ(h.time_ns, 123u);
  EXPECT_EQ(h.device, 1u);
  EXPECT_EQ(h.context_id, 6u);
  EXPECT_EQ(h.reason, wire::kHarvestHighWater);
  EXPECT_EQ(h.dropped_events, 4u);
  EXPECT_EQ(h.unplaced_events, 5u);
  EXPECT_EQ(h.chunks_used, 96u);
  EXPECT_EQ(h.chunks_total, 128u);
  EXPECT_EQ(h.chunks_empty, 7u);
  EXPECT_EQ(h.flags, uint32_t{wire::kHarvestProbed});
  EXPECT_EQ(h.clock_offset_ns, -250);
  // Without a probe there is no offset to tell.
  s.SendHarvest(124, 1, 6, wire::kHarvestSync, 0, 0, 0, 128, 5, wire::kHarvestFinal, -250);  // more empty than used: clamped
  EXPECT_EQ(sink.As<wire::HarvestMsg>(1).clock_offset_ns, 0);
  EXPECT_EQ(sink.As<wire::HarvestMsg>(1).flags, uint32_t{wire::kHarvestFinal});
  EXPECT_EQ(sink.As<wire::HarvestMsg>(1).chunks_empty, 0u);
}

TEST(Shipper, NamesAThreadOnceBeforeTheHarvestThatNamesIt) {
  RecordingSink sink;
  std::vector<uint32_t> asked;
  Shipper s(&sink, [&](uint32_t tid) {
    asked.push_back(tid);
    return std::string(tid == 78 ? "main" : "worker");
  });
  HarvestHost host;
  host.begin_ns = 30;
  host.end_ns = 50;
  host.tid = 78;
  host.call = wire::HostCall{25, 30, 78, wire::kApiStreamSynchronize};
  host.stage_us[wire::kStageCopy] = 7;
  host.stage_us[wire::kStageShip] = 9;
  s.SendHarvest(40, 0, 1, wire::kHarvestSync, 0, 0, 1, 2, 0, 0, 0, host);
  s.SendHarvest(41, 0, 1, wire::kHarvestSync, 0, 0, 1, 2, 0, 0, 0, host);
  ASSERT_EQ(sink.messages.size(), 3u);
  EXPECT_EQ(sink.TypeAt(0), wire::kMsgThread);
  const auto t = sink.As<wire::ThreadMsg>(0);
  EXPECT_EQ(t.tid, 78u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sink.messages[0].data()) + sizeof(t), t.name_len), "main");
  const auto h = sink.As<wire::HarvestMsg>(1);
  EXPECT_EQ(h.host_begin_ns, 30u);
  EXPECT_EQ(h.host_end_ns, 50u);
  EXPECT_EQ(h.host_tid, 78u);
  EXPECT_EQ(h.call.api, wire::kApiStreamSynchronize);
  EXPECT_EQ(h.call.start_ns, 25u);
  EXPECT_EQ(h.stage_us[wire::kStageCopy], 7u);
  EXPECT_EQ(h.stage_us[wire::kStageShip], 9u);
  EXPECT_EQ(h.stage_us[wire::kStageWait], 0u);
  EXPECT_EQ(sink.TypeAt(2), wire::kMsgHarvest);
  EXPECT_EQ(asked, (std::vector<uint32_t>{78}));
}

TEST(Shipper, ThreadWhoseMessageWasDroppedIsNamedAgain) {
  RecordingSink sink;
  Shipper s(&sink, [](uint32_t) { return std::string("main"); });
  HarvestHost host;
  host.tid = 77;
  sink.reject_all = true;
  s.SendHarvest(40, 0, 1, wire::kHarvestExit, 0, 0, 0, 0, 0, 0, 0, host);
  sink.reject_all = false;
  s.SendHarvest(50, 0, 1, wire::kHarvestExit, 0, 0, 0, 0, 0, 0, 0, host);
  ASSERT_EQ(sink.messages.size(), 2u);
  EXPECT_EQ(sink.TypeAt(0), wire::kMsgThread);
  EXPECT_EQ(sink.TypeAt(1), wire::kMsgHarvest);
}

}  // namespace
}  // namespace smprof::injector
