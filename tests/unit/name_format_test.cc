// RenderName: names formatted with one integer, as the collector renders
// them for kEventNameValue events (collector/name_format.h).
#include "collector/name_format.h"

#include <gtest/gtest.h>

#include <string>

namespace smprof {
namespace {

TEST(NameFormatTest, TheFirstConversionTakesTheInteger) {
  EXPECT_EQ(RenderName("stage %d", 3), "stage 3");
  EXPECT_EQ(RenderName("stage %i", 3), "stage 3");
  EXPECT_EQ(RenderName("%d: tile", 12), "12: tile");
  EXPECT_EQ(RenderName("k%ux", 7), "k7x");
}

TEST(NameFormatTest, SignedAndUnsignedConversions) {
  const uint32_t minus_two = static_cast<uint32_t>(-2);
  EXPECT_EQ(RenderName("v %d", minus_two), "v -2");
  EXPECT_EQ(RenderName("v %i", 0x80000000u), "v -2147483648");
  EXPECT_EQ(RenderName("v %u", minus_two), "v 4294967294");
  EXPECT_EQ(RenderName("v %x", 0xbeefu), "v beef");
  EXPECT_EQ(RenderName("v %X", 0xbeefu), "v BEEF");
  EXPECT_EQ(RenderName("v %x", minus_two), "v fffffffe");
}

TEST(NameFormatTest, ZeroFlagAndWidth) {
  EXPECT_EQ(RenderName("s%05d", 42), "s00042");
  EXPECT_EQ(RenderName("s%05d", static_cast<uint32_t>(-42)), "s-0042");
  EXPECT_EQ(RenderName("s%3d|", 7), "s  7|");
  EXPECT_EQ(RenderName("s%08x", 0xabcu), "s00000abc");
  EXPECT_EQ(RenderName("%02X", 10), "0A");
  EXPECT_EQ(RenderName("%0d", 5), "5");
  EXPECT_EQ(RenderName("%99d", 1), std::string(98, ' ') + "1");
}

TEST(NameFormatTest, PercentSignsAndTextThatIsNoConversion) {
  EXPECT_EQ(RenderName("100%% %d", 9), "100% 9");
  EXPECT_EQ(RenderName("%%d %d", 9), "%d 9");
  EXPECT_EQ(RenderName("%%", 9), "% 9");  // no conversion: the integer is appended
  // Not conversions: kept as written (the integer goes to the first that is).
  EXPECT_EQ(RenderName("%s %d", 4), "%s 4");
  EXPECT_EQ(RenderName("%123d %d", 4), "%123d 4");
  EXPECT_EQ(RenderName("%-5d", 4), "%-5d 4");
  EXPECT_EQ(RenderName("%.2d", 4), "%.2d 4");
  EXPECT_EQ(RenderName("end %", 4), "end % 4");
  EXPECT_EQ(RenderName("end %05", 4), "end %05 4");
  // Only the first conversion takes the integer.
  EXPECT_EQ(RenderName("%d/%d", 4), "4/%d");
}

TEST(NameFormatTest, AFormatWithNoConversionGetsTheIntegerAppended) {
  EXPECT_EQ(RenderName("stage", 3), "stage 3");
  EXPECT_EQ(RenderName("stage", static_cast<uint32_t>(-3)), "stage -3");
  EXPECT_EQ(RenderName("", 0), " 0");
}

TEST(NameFormatTest, UntrustedBytesStayBytes) {
  const std::string format("a\0%d\xff", 5);
  EXPECT_EQ(RenderName(format, 1), std::string("a\0"
                                               "1\xff",
                                               4));
  EXPECT_EQ(RenderName("%n%p%s%d", 1), "%n%p%s1");
}

}  // namespace
}  // namespace smprof
