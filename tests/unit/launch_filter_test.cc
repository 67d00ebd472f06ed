// LaunchFilter: the PATTERN:RANGES grammar, its errors, matching through the
// kernel filter's globs, counting across kernels and items, exhaustion, and
// exact counts under concurrent launches.
#include "common/launch_filter.h"

#include <gtest/gtest.h>

#include <thread>

namespace smprof {

// For gtest's messages.
void PrintTo(const LaunchFilter::Range& r, std::ostream* os) { *os << r.first << "-" << r.last; }

namespace {

constexpr const char* kGemm = "void ns::gemm<128>(float const*, int)";
constexpr const char* kGemmTiled = "void ns::gemm_tiled<64>(float const*, int)";
constexpr const char* kAttn = "attn_fwd";
constexpr const char* kReduce = "void reduce_sum<float>(float const*, float*, int)";

using Items = std::vector<uint32_t>;
using Range = LaunchFilter::Range;

LaunchFilter MustParse(const std::string& spec) {
  std::string error;
  std::optional<LaunchFilter> f = LaunchFilter::Parse(spec, &error);
  EXPECT_TRUE(f.has_value()) << spec << ": " << error;
  return f.value_or(LaunchFilter());
}

std::string ParseError(const std::string& spec) {
  std::string error;
  std::optional<LaunchFilter> f = LaunchFilter::Parse(spec, &error);
  EXPECT_FALSE(f.has_value()) << spec;
  return error;
}

// The launches (0-based, of `count`) that Take says yes to, for one kernel.
std::vector<uint64_t> Taken(const LaunchFilter& f, LaunchCounters& counters, const Items& items, int count) {
  std::vector<uint64_t> taken;
  for (int i = 0; i < count; ++i) {
    if (f.Take(items, counters)) taken.push_back(static_cast<uint64_t>(i));
  }
  return taken;
}

TEST(LaunchFilterTest, EmptySpecLimitsNothing) {
  for (const char* spec : {"", "  ", "\t"}) {
    const LaunchFilter f = MustParse(spec);
    EXPECT_TRUE(f.limits_nothing()) << spec;
    EXPECT_EQ(f.item_count(), 0u);
    EXPECT_TRUE(f.ItemsFor(kGemm).empty());
  }
  EXPECT_TRUE(LaunchFilter().limits_nothing());
  // A kernel no item matches is taken every time and never exhausted.
  const LaunchFilter f = MustParse("attn*:0");
  LaunchCounters counters(f);
  EXPECT_TRUE(f.ItemsFor(kGemm).empty());
  EXPECT_EQ(Taken(f, counters, {}, 5).size(), 5u);
  EXPECT_FALSE(f.Exhausted({}, counters));
  EXPECT_EQ(counters.taken(0), 0u);
}

TEST(LaunchFilterTest, Grammar) {
  const LaunchFilter f = MustParse("gemm*:10-12, attn*:0 ,x:5-,y:3+1-2+7+8-9+20-, z:4+4+2-6");
  ASSERT_EQ(f.item_count(), 5u);
  EXPECT_FALSE(f.limits_nothing());
  EXPECT_EQ(f.spec(), "gemm*:10-12, attn*:0 ,x:5-,y:3+1-2+7+8-9+20-, z:4+4+2-6");
  EXPECT_EQ(f.PatternOf(0), "gemm*");
  EXPECT_EQ(f.RangesOf(0), (std::vector<Range>{{10, 12}}));
  EXPECT_EQ(f.PatternOf(1), "attn*");
  EXPECT_EQ(f.RangesOf(1), (std::vector<Range>{{0, 0}}));
  EXPECT_EQ(f.RangesOf(2), (std::vector<Range>{{5, LaunchFilter::kOpenEnd}}));
  // Sorted, adjacent and overlapping ranges merged.
  EXPECT_EQ(f.RangesOf(3), (std::vector<Range>{{1, 3}, {7, 9}, {20, LaunchFilter::kOpenEnd}}));
  EXPECT_EQ(f.RangesOf(4), (std::vector<Range>{{2, 6}}));
  // Spaces around ':' and '+'-free ranges; leading zeros; the largest index.
  const LaunchFilter g = MustParse("gemm : 007-0010,k:18446744073709551614");
  EXPECT_EQ(g.PatternOf(0), "gemm");
  EXPECT_EQ(g.RangesOf(0), (std::vector<Range>{{7, 10}}));
  EXPECT_EQ(g.RangesOf(1), (std::vector<Range>{{18446744073709551614ull, 18446744073709551614ull}}));
}

TEST(LaunchFilterTest, PatternsMayHoldColonsAndEscapedCommas) {
  // The last unescaped ':' ends the pattern: namespaces and signatures work.
  const LaunchFilter f = MustParse("ns::gemm<128>:1,void ns::gemm<128>(float const*\\, int):2,a\\:b:3");
  ASSERT_EQ(f.item_count(), 3u);
  EXPECT_EQ(f.PatternOf(0), "ns::gemm<128>");
  EXPECT_EQ(f.PatternOf(1), "void ns::gemm<128>(float const*\\, int)");
  EXPECT_EQ(f.PatternOf(2), "a\\:b");
  EXPECT_EQ(f.ItemsFor(kGemm), (Items{0, 1}));
  EXPECT_EQ(f.ItemsFor("a:b"), (Items{2}));
}

TEST(LaunchFilterTest, Errors) {
  struct Case {
    const char* spec;
    const char* expect;
  };
  for (const Case& c : {
           Case{"gemm:1,,attn:0", "empty item at character 8 in \"gemm:1,,attn:0\": remove the extra comma"},
           Case{"gemm:1,", "empty item at character 8"},
           Case{",gemm:1", "empty item at character 1"},
           Case{"gemm*", "item \"gemm*\" has no launch range: write PATTERN:RANGES, e.g. gemm*:0-9"},
           Case{"a\\:0", "has no launch range"},
           Case{"ns::gemm", "item \"ns::gemm\" has no launch range: write PATTERN:RANGES, e.g. ns::gemm:0-9"},
           Case{"ns::", "has no launch range"},
           Case{"gemm:", "empty launch range in item \"gemm:\""},
           Case{"gemm:1+", "empty launch range in item \"gemm:1+\""},
           Case{"gemm:+1", "empty launch range"},
           Case{"gemm:x", "\"x\" in item \"gemm:x\" is not a launch range: use N, N-M or N-"},
           Case{"gemm:1.5", "is not a launch range"},
           Case{"gemm:-3", "\"-3\" in item \"gemm:-3\" is not a launch range"},
           Case{"gemm:1-2-3", "is not a launch range"},
           Case{"gemm:1 - 2", "is not a launch range"},
           Case{"gemm:0x10", "is not a launch range"},
           Case{"gemm:1/3", "is not a launch range"},
           Case{"gemm:18446744073709551615",
                "launch index in \"18446744073709551615\" in item "
                "\"gemm:18446744073709551615\" is too large: use at most "
                "18446744073709551614, or N- for every launch from N on"},
           Case{"gemm:1-99999999999999999999", "is too large"},
           Case{"gemm:12-10", "range 12-10 in item \"gemm:12-10\" is reversed: write it as 10-12"},
           Case{":0-3",
                "empty pattern in item \":0-3\": name the kernels before the ':', e.g. gemm*:0-3 "
                "(or *:0-3 for every kernel)"},
           Case{"  :1", "empty pattern in item \":1\""},
           Case{"!gemm_ref:0",
                "'!' in item \"!gemm_ref:0\": launch ranges cannot exclude; leave the kernels out "
                "with --kernels '!gemm_ref'"},
           Case{"gemm[:0", "in item \"gemm[:0\": unterminated '[' in pattern \"gemm[\""},
           Case{"g[z-a]:0", "reversed range 'z-a' in pattern"},
       }) {
    const std::string error = ParseError(c.spec);
    EXPECT_NE(error.find(c.expect), std::string::npos) << c.spec << ": " << error;
  }
  // An escaped '!' is a literal one.
  const LaunchFilter f = MustParse("\\!odd:0");
  EXPECT_EQ(f.ItemsFor("!odd"), (Items{0}));
}

TEST(LaunchFilterTest, MatchingUsesTheKernelFilterForms) {
  const LaunchFilter f = MustParse("gemm*:0,ns::gemm_tiled<64>:0,void reduce_sum<float>(*):0,attn_fwd:0,*:0");
  EXPECT_EQ(f.ItemsFor(kGemm), (Items{0, 4}));          // base name
  EXPECT_EQ(f.ItemsFor(kGemmTiled), (Items{0, 1, 4}));  // qualified name
  EXPECT_EQ(f.ItemsFor(kReduce), (Items{2, 4}));        // full signature
  EXPECT_EQ(f.ItemsFor(kAttn), (Items{3, 4}));          // extern "C" name
  EXPECT_EQ(f.ItemsFor("Gemm"), (Items{4}));            // case-sensitive
  EXPECT_EQ(MustParse("gemm:0").ItemsFor(kGemmTiled), Items{});
}

TEST(LaunchFilterTest, RangesSelectTheirLaunches) {
  const LaunchFilter f = MustParse("a:3,b:2-4,c:5-,d:0+2+4-5,e:0-1+1-2");
  LaunchCounters counters(f);
  ASSERT_EQ(counters.size(), 5u);
  EXPECT_EQ(Taken(f, counters, f.ItemsFor("a"), 8), (std::vector<uint64_t>{3}));
  EXPECT_EQ(Taken(f, counters, f.ItemsFor("b"), 8), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(Taken(f, counters, f.ItemsFor("c"), 8), (std::vector<uint64_t>{5, 6, 7}));
  EXPECT_EQ(Taken(f, counters, f.ItemsFor("d"), 8), (std::vector<uint64_t>{0, 2, 4, 5}));
  EXPECT_EQ(Taken(f, counters, f.ItemsFor("e"), 8), (std::vector<uint64_t>{0, 1, 2}));
  for (uint32_t item = 0; item < 5; ++item) EXPECT_EQ(counters.taken(item), 8u) << item;
}

// One item counts the launches of every kernel its pattern matches together,
// in the order they are taken: ncu's --launch-skip over a name filter.
TEST(LaunchFilterTest, CountsAcrossTheKernelsOfOnePattern) {
  const LaunchFilter f = MustParse("gemm*:1-2");
  LaunchCounters counters(f);
  const Items gemm = f.ItemsFor(kGemm);
  const Items tiled = f.ItemsFor(kGemmTiled);
  ASSERT_EQ(gemm, Items{0});
  ASSERT_EQ(tiled, Items{0});
  EXPECT_FALSE(f.Take(gemm, counters));   // 0
  EXPECT_TRUE(f.Take(tiled, counters));   // 1
  EXPECT_TRUE(f.Take(gemm, counters));    // 2
  EXPECT_FALSE(f.Take(tiled, counters));  // 3
  EXPECT_EQ(counters.taken(0), 4u);
}

// A kernel several items match is taken when any item has it in range; each
// item counts its own launches, also those another item took.
TEST(LaunchFilterTest, SeveralItems) {
  const LaunchFilter f = MustParse("gemm*:0,gemm_tiled:1,*:3");
  LaunchCounters counters(f);
  const Items gemm = f.ItemsFor(kGemm);        // items 0, 2
  const Items tiled = f.ItemsFor(kGemmTiled);  // items 0, 1, 2
  const Items attn = f.ItemsFor(kAttn);        // item 2
  ASSERT_EQ(gemm, (Items{0, 2}));
  ASSERT_EQ(tiled, (Items{0, 1, 2}));
  ASSERT_EQ(attn, (Items{2}));
  EXPECT_TRUE(f.Take(tiled, counters));  // gemm* 0: in range; gemm_tiled 0; * 0
  EXPECT_TRUE(f.Take(tiled, counters));  // gemm* 1; gemm_tiled 1: in range; * 1
  EXPECT_FALSE(f.Take(gemm, counters));  // gemm* 2; * 2
  EXPECT_TRUE(f.Take(attn, counters));   // * 3: in range
  EXPECT_FALSE(f.Take(gemm, counters));  // gemm* 3; * 4
  EXPECT_EQ(counters.taken(0), 4u);
  EXPECT_EQ(counters.taken(1), 2u);
  EXPECT_EQ(counters.taken(2), 5u);
  // Repeated items are the same as several ranges in one item.
  const LaunchFilter repeated = MustParse("gemm*:0-2,gemm*:10-12");
  const LaunchFilter joined = MustParse("gemm*:0-2+10-12");
  LaunchCounters rc(repeated), jc(joined);
  EXPECT_EQ(Taken(repeated, rc, repeated.ItemsFor(kGemm), 20), Taken(joined, jc, joined.ItemsFor(kGemm), 20));
}

TEST(LaunchFilterTest, Exhaustion) {
  const LaunchFilter f = MustParse("gemm*:1-2,gemm_tiled:0,attn*:5-,other:0");
  LaunchCounters counters(f);
  const Items gemm = f.ItemsFor(kGemm);        // item 0
  const Items tiled = f.ItemsFor(kGemmTiled);  // items 0, 1
  const Items attn = f.ItemsFor(kAttn);        // item 2
  EXPECT_FALSE(f.Exhausted(gemm, counters));
  EXPECT_TRUE(f.Take(tiled, counters));        // gemm* 0, gemm_tiled 0: in range
  EXPECT_FALSE(f.Exhausted(tiled, counters));  // gemm* is still to come
  EXPECT_TRUE(f.Take(gemm, counters));         // gemm* 1
  EXPECT_FALSE(f.Exhausted(gemm, counters));
  EXPECT_TRUE(f.Take(gemm, counters));  // gemm* 2: the last
  EXPECT_TRUE(f.Exhausted(gemm, counters));
  EXPECT_TRUE(f.Exhausted(tiled, counters));  // both of its items are past their ranges
  EXPECT_FALSE(f.Take(gemm, counters));
  EXPECT_TRUE(f.Exhausted(gemm, counters));
  // An open range never ends.
  for (int i = 0; i < 100; ++i) f.Take(attn, counters);
  EXPECT_FALSE(f.Exhausted(attn, counters));
  // Not limited: never exhausted.
  EXPECT_FALSE(f.Exhausted({}, counters));
  // An item that has not been counted at all is not exhausted.
  EXPECT_FALSE(f.Exhausted(f.ItemsFor("other"), counters));
}

// Four threads launch two kernels of one pattern and one of another: every
// launch gets its own index, so exactly the ranges' sizes are taken.
TEST(LaunchFilterTest, ConcurrentCountingIsExact) {
  const LaunchFilter f = MustParse("gemm*:100-1099+5000-,attn*:0-9,attn*:3-5+30000-");
  LaunchCounters counters(f);
  const Items gemm = f.ItemsFor(kGemm);        // 0
  const Items tiled = f.ItemsFor(kGemmTiled);  // 0
  const Items attn = f.ItemsFor(kAttn);        // 1, 2: both count every attn launch
  ASSERT_EQ(attn, (Items{1, 2}));
  constexpr int kThreads = 4;
  constexpr int kPerThread = 10000;  // per pattern
  std::atomic<uint64_t> gemm_taken{0}, attn_taken{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t g = 0, a = 0;
      for (int i = 0; i < kPerThread; ++i) {
        g += f.Take((i + t) % 2 == 0 ? gemm : tiled, counters) ? 1 : 0;
        a += f.Take(attn, counters) ? 1 : 0;
      }
      gemm_taken += g;
      attn_taken += a;
    });
  }
  for (std::thread& t : threads) t.join();
  constexpr uint64_t kTotal = uint64_t{kThreads} * kPerThread;
  EXPECT_EQ(counters.taken(0), kTotal);
  EXPECT_EQ(counters.taken(1), kTotal);
  EXPECT_EQ(counters.taken(2), kTotal);
  EXPECT_EQ(gemm_taken.load(), 1000 + (kTotal - 5000));
  // Two items over one kernel: each takes its indices exactly, but which
  // launch gets which index of each item depends on the threads' order, so
  // only bounds hold for the union: at least item 2's 10003, at most 10013.
  EXPECT_GE(attn_taken.load(), 3 + (kTotal - 30000));
  EXPECT_LE(attn_taken.load(), 10 + 3 + (kTotal - 30000));
  EXPECT_TRUE(f.Exhausted(Items{1}, counters));
  EXPECT_FALSE(f.Exhausted(attn, counters));
  EXPECT_FALSE(f.Exhausted(gemm, counters));
}

}  // namespace
}  // namespace smprof
