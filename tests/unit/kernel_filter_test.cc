// KernelFilter: spec parsing, glob matching, the three name forms, errors.
#include "common/kernel_filter.h"

#include <gtest/gtest.h>

namespace smprof {
namespace {

constexpr const char* kGemm = "void ns::gemm<128>(float const*, int)";
constexpr const char* kGemmTiled = "void ns::gemm_tiled<64>(float const*, int)";
constexpr const char* kReduce = "void reduce_sum<float>(float const*, float*, int)";
constexpr const char* kVecadd = "vecadd_kernel";
constexpr const char* kLambda = "void kernel<use()::{lambda(int)#1}>(use()::{lambda(int)#1})";

KernelFilter MustParse(const std::string& spec) {
  std::string error;
  std::optional<KernelFilter> f = KernelFilter::Parse(spec, &error);
  EXPECT_TRUE(f.has_value()) << spec << ": " << error;
  return f.value_or(KernelFilter());
}

std::string ParseError(const std::string& spec) {
  std::string error;
  std::optional<KernelFilter> f = KernelFilter::Parse(spec, &error);
  EXPECT_FALSE(f.has_value()) << spec;
  return error;
}

TEST(GlobMatchTest, Wildcards) {
  EXPECT_TRUE(GlobMatch("gemm", "gemm"));
  EXPECT_FALSE(GlobMatch("gemm", "gemm2"));
  EXPECT_FALSE(GlobMatch("gemm", "Gemm"));  // case-sensitive
  EXPECT_TRUE(GlobMatch("gemm*", "gemm"));
  EXPECT_TRUE(GlobMatch("gemm*", "gemm_tiled"));
  EXPECT_TRUE(GlobMatch("*tiled", "gemm_tiled"));
  EXPECT_TRUE(GlobMatch("*mm*il*", "gemm_tiled"));
  EXPECT_FALSE(GlobMatch("*mm*x*", "gemm_tiled"));
  EXPECT_TRUE(GlobMatch("g?mm", "gemm"));
  EXPECT_FALSE(GlobMatch("g?mm", "gmm"));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("", ""));
  EXPECT_FALSE(GlobMatch("", "a"));
  EXPECT_FALSE(GlobMatch("?", ""));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXbYbZc"));
  EXPECT_TRUE(GlobMatch("**a", "a"));
}

TEST(GlobMatchTest, Classes) {
  EXPECT_TRUE(GlobMatch("k[abc]", "kb"));
  EXPECT_FALSE(GlobMatch("k[abc]", "kd"));
  EXPECT_TRUE(GlobMatch("k[a-z]", "kq"));
  EXPECT_FALSE(GlobMatch("k[a-z]", "kQ"));
  EXPECT_TRUE(GlobMatch("k[!x]", "ky"));
  EXPECT_FALSE(GlobMatch("k[!x]", "kx"));
  EXPECT_TRUE(GlobMatch("k[^x]", "ky"));
  EXPECT_TRUE(GlobMatch("k[]]", "k]"));      // ']' first is literal
  EXPECT_TRUE(GlobMatch("k[!]]", "ka"));
  EXPECT_FALSE(GlobMatch("k[!]]", "k]"));
  EXPECT_TRUE(GlobMatch("k[a-]", "k-"));     // '-' last is literal
  EXPECT_TRUE(GlobMatch("k[\\]x]", "k]"));   // escaped ']'
  EXPECT_TRUE(GlobMatch("gemm<[0-9]*>", "gemm<128>"));
  EXPECT_FALSE(GlobMatch("gemm<[0-9]*>", "gemm<float>"));
  EXPECT_FALSE(GlobMatch("k[a-z]", "k"));
}

TEST(GlobMatchTest, Escapes) {
  EXPECT_TRUE(GlobMatch("a\\*b", "a*b"));
  EXPECT_FALSE(GlobMatch("a\\*b", "axb"));
  EXPECT_TRUE(GlobMatch("a\\?", "a?"));
  EXPECT_FALSE(GlobMatch("a\\?", "ab"));
  EXPECT_TRUE(GlobMatch("a\\[b", "a[b"));
  EXPECT_TRUE(GlobMatch("a\\\\b", "a\\b"));
  EXPECT_TRUE(GlobMatch("x\\,y", "x,y"));
}

TEST(GlobMatchTest, MalformedPatternIsLiteral) {
  EXPECT_TRUE(GlobMatch("gemm[", "gemm["));
  EXPECT_FALSE(GlobMatch("gemm[", "gemm"));
  EXPECT_TRUE(GlobMatch("a\\", "a\\"));
}

TEST(KernelFilterTest, EmptySpecSelectsAll) {
  for (const char* spec : {"", "  ", "\t"}) {
    KernelFilter f = MustParse(spec);
    EXPECT_TRUE(f.selects_all()) << '"' << spec << '"';
    EXPECT_TRUE(f.Matches(kGemm));
    EXPECT_TRUE(f.Matches(""));
  }
  EXPECT_TRUE(KernelFilter().selects_all());
  EXPECT_TRUE(KernelFilter().Matches(kVecadd));
}

TEST(KernelFilterTest, IncludesMatchAnyOfThreeForms) {
  // Base name.
  KernelFilter base = MustParse("gemm*");
  EXPECT_FALSE(base.selects_all());
  EXPECT_TRUE(base.Matches(kGemm));
  EXPECT_TRUE(base.Matches(kGemmTiled));
  EXPECT_FALSE(base.Matches(kReduce));
  // Qualified name.
  KernelFilter qualified = MustParse("ns::gemm<128>");
  EXPECT_TRUE(qualified.Matches(kGemm));
  EXPECT_FALSE(qualified.Matches(kGemmTiled));
  EXPECT_TRUE(MustParse("ns::*").Matches(kGemmTiled));
  EXPECT_FALSE(MustParse("ns::*").Matches(kReduce));
  // Full signature (a comma in a pattern must be escaped).
  KernelFilter full = MustParse("*(float const\\*\\, int)");
  EXPECT_TRUE(full.Matches(kGemm));
  EXPECT_FALSE(full.Matches(kReduce));
  EXPECT_TRUE(MustParse(kGemm).Matches(kGemm));
  // Not a substring match.
  EXPECT_FALSE(MustParse("emm").Matches(kGemm));
  // extern "C" and lambda-instantiated kernels.
  EXPECT_TRUE(MustParse("vecadd_kernel").Matches(kVecadd));
  EXPECT_TRUE(MustParse("kernel").Matches(kLambda));
  EXPECT_FALSE(MustParse("kernel").Matches(kVecadd));
}

TEST(KernelFilterTest, SeveralIncludes) {
  KernelFilter f = MustParse("gemm,reduce_*");
  EXPECT_TRUE(f.Matches(kGemm));
  EXPECT_FALSE(f.Matches(kGemmTiled));
  EXPECT_TRUE(f.Matches(kReduce));
  EXPECT_FALSE(f.Matches(kVecadd));
}

TEST(KernelFilterTest, Excludes) {
  KernelFilter only_excludes = MustParse("!gemm*");
  EXPECT_FALSE(only_excludes.selects_all());
  EXPECT_FALSE(only_excludes.Matches(kGemm));
  EXPECT_FALSE(only_excludes.Matches(kGemmTiled));
  EXPECT_TRUE(only_excludes.Matches(kReduce));
  EXPECT_TRUE(only_excludes.Matches(kVecadd));

  // Exclude wins over include, whatever the order.
  for (const char* spec : {"gemm*,!*tiled", "!*tiled,gemm*"}) {
    KernelFilter f = MustParse(spec);
    EXPECT_TRUE(f.Matches(kGemm)) << spec;
    EXPECT_FALSE(f.Matches(kGemmTiled)) << spec;
    EXPECT_FALSE(f.Matches(kReduce)) << spec;
  }
}

TEST(KernelFilterTest, WhitespaceAroundCommasIsTrimmed) {
  KernelFilter f = MustParse("  gemm , ! *tiled ,\treduce_sum  ");
  EXPECT_TRUE(f.Matches(kGemm));
  EXPECT_FALSE(f.Matches(kGemmTiled));
  EXPECT_TRUE(f.Matches(kReduce));
  EXPECT_EQ(f.spec(), "  gemm , ! *tiled ,\treduce_sum  ");
}

TEST(KernelFilterTest, EscapesInSpec) {
  // Escaped comma is part of the pattern, not a separator.
  KernelFilter comma = MustParse("pair<int\\, int>");
  EXPECT_TRUE(comma.Matches("void pair<int, int>(int)"));
  EXPECT_FALSE(comma.Matches("int"));
  // Escaped '!' includes a name starting with '!'.
  KernelFilter bang = MustParse("\\!odd");
  EXPECT_TRUE(bang.Matches("!odd"));
  EXPECT_FALSE(bang.Matches("even"));
  // Escaped trailing space is kept.
  KernelFilter space = MustParse("a\\ ");
  EXPECT_TRUE(space.Matches("a "));
  EXPECT_FALSE(space.Matches("a"));
  // Escaped glob characters.
  EXPECT_TRUE(MustParse("k\\*").Matches("k*"));
  EXPECT_FALSE(MustParse("k\\*").Matches("kx"));
  EXPECT_TRUE(MustParse("k\\[x\\]").Matches("k[x]"));
}

TEST(KernelFilterTest, ClassesInSpec) {
  // No form of kGemm starts with "gemm<": the qualified form keeps the namespace.
  EXPECT_FALSE(MustParse("gemm<[0-9]*>").Matches(kGemm));
  EXPECT_TRUE(MustParse("*gemm<[0-9]*>").Matches(kGemm));
  KernelFilter g = MustParse("ns::gemm<[!6]*>");
  EXPECT_TRUE(g.Matches(kGemm));
  EXPECT_FALSE(MustParse("ns::gemm_tiled<[!6]*>").Matches(kGemmTiled));
  EXPECT_TRUE(MustParse("[rx]*").Matches(kReduce));
  EXPECT_FALSE(MustParse("[rx]*").Matches(kVecadd));
  EXPECT_FALSE(MustParse("[rx]*").Matches(kGemm));
  // The full form of kGemm starts with its return type "void".
  EXPECT_TRUE(MustParse("[v]*").Matches(kGemm));
}

TEST(KernelFilterTest, ErrorsNameThePatternAndTheFix) {
  std::string e = ParseError("gemm,,x");
  EXPECT_NE(e.find("empty pattern"), std::string::npos) << e;
  EXPECT_NE(e.find("\"gemm,,x\""), std::string::npos) << e;
  EXPECT_NE(e.find("character 6"), std::string::npos) << e;
  EXPECT_NE(e.find("remove the extra comma"), std::string::npos) << e;

  e = ParseError("gemm,");
  EXPECT_NE(e.find("empty pattern"), std::string::npos) << e;
  e = ParseError(",gemm");
  EXPECT_NE(e.find("character 1"), std::string::npos) << e;
  e = ParseError("gemm, ,x");
  EXPECT_NE(e.find("empty pattern"), std::string::npos) << e;

  e = ParseError("gemm[");
  EXPECT_NE(e.find("unterminated '['"), std::string::npos) << e;
  EXPECT_NE(e.find("\"gemm[\""), std::string::npos) << e;
  EXPECT_NE(e.find("close the bracket or escape it"), std::string::npos) << e;
  e = ParseError("a,[]");
  EXPECT_NE(e.find("unterminated '['"), std::string::npos) << e;
  e = ParseError("x[!]");
  EXPECT_NE(e.find("unterminated '['"), std::string::npos) << e;

  e = ParseError("gemm,!");
  EXPECT_NE(e.find("lone '!'"), std::string::npos) << e;
  EXPECT_NE(e.find("character 6"), std::string::npos) << e;
  e = ParseError("! ");
  EXPECT_NE(e.find("lone '!'"), std::string::npos) << e;

  e = ParseError("k[z-a]");
  EXPECT_NE(e.find("reversed range 'z-a'"), std::string::npos) << e;
  EXPECT_NE(e.find("a-z"), std::string::npos) << e;

  e = ParseError("k\\");
  EXPECT_NE(e.find("trailing '\\'"), std::string::npos) << e;

  for (const char* spec : {"gemm,,x", "gemm[", "!", "k[z-a]", "k\\"}) {
    e = ParseError(spec);
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;  // one line
    EXPECT_NE(e.find(':'), std::string::npos) << e;   // message: fix
  }
}

}  // namespace
}  // namespace smprof
