// Kernel selection: SMPROF_KERNELS / smprof-run --kernels.
//
// A spec is a comma-separated list of glob patterns over demangled kernel
// names; a pattern starting with '!' excludes. Globs support '*', '?' and
// character classes '[abc]', '[a-z]', '[!x]'; matching is case-sensitive.
// A kernel is selected when it matches no exclude pattern and either there is
// no include pattern or it matches at least one. An empty spec selects every
// kernel.
//
// A pattern is tried against three forms of the demangled name (see names.h):
// the full signature "void ns::gemm<128>(float const*, int)", the qualified
// name "ns::gemm<128>", and the base name "gemm"; any match counts. So
// 'gemm*' selects ns::gemm_tiled<64>(...) without the user writing the
// namespace or the parameter list.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smprof {

class KernelFilter {
 public:
  // Returns nullopt and a one-line *error naming the bad pattern and the fix
  // (empty element, lone '!', unterminated '[', ...).
  static std::optional<KernelFilter> Parse(std::string_view spec, std::string* error);

  // Selects everything.
  KernelFilter() = default;

  bool Matches(std::string_view demangled_name) const;
  bool selects_all() const { return includes_.empty() && excludes_.empty(); }
  const std::string& spec() const { return spec_; }

 private:
  std::string spec_;
  std::vector<std::string> includes_;
  std::vector<std::string> excludes_;
};

// Glob match of one pattern against one string ('*', '?', '[...]').
bool GlobMatch(std::string_view pattern, std::string_view text);

// The text rules every list setting shares (SMPROF_KERNELS, SMPROF_LAUNCHES):
// white space, and characters escaped by an odd number of backslashes.
bool IsSpecSpace(char c);
// True when s[i] is preceded by an odd number of backslashes.
bool IsEscapedAt(std::string_view s, size_t i);
// Trims white space, keeping an escaped one at the end.
std::string_view TrimSpecItem(std::string_view s);

}  // namespace smprof
