// HostBuffer (injector/host_buffer.h): memory of the size asked, handed on by
// moves, unmapped when it goes, forgotten (never unmapped) when abandoned.
#include "injector/host_buffer.h"

#include <gtest/gtest.h>

#include <utility>

namespace smprof::injector {
namespace {

TEST(HostBuffer, HoldsWritableZeroedMemoryOfTheSizeAsked) {
  HostBuffer b((size_t{3} << 20) + 100);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), (size_t{3} << 20) + 100);
  EXPECT_EQ(b.data()[0], 0);
  EXPECT_EQ(b.data()[b.size() - 1], 0);
  b.data()[b.size() - 1] = 7;
  EXPECT_EQ(b.data()[b.size() - 1], 7);
}

TEST(HostBuffer, MovesHandTheMemoryOn) {
  HostBuffer a(4096);
  a.data()[10] = 3;
  uint8_t* const memory = a.data();
  HostBuffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), memory);
  EXPECT_EQ(b.data()[10], 3);
  b = HostBuffer(100);  // the old memory goes
  EXPECT_EQ(b.size(), 100u);
  b = std::move(b);
  EXPECT_EQ(b.size(), 100u);
}

TEST(HostBuffer, AbandonForgetsTheMemory) {
  HostBuffer b(4096);
  b.Abandon();
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.size(), 0u);
}

TEST(HostBuffer, EmptyBuffers) {
  HostBuffer none;
  EXPECT_EQ(none.data(), nullptr);
  HostBuffer zero(0);
  EXPECT_EQ(zero.data(), nullptr);
  EXPECT_EQ(zero.size(), 0u);
}

}  // namespace
}  // namespace smprof::injector
