// Kernel selection (see kernel_filter.h for the spec syntax).
//
// Patterns are stored as written (escapes kept); GlobMatch interprets them.
// Parse validates everything GlobMatch would otherwise have to guess about
// (unterminated classes, reversed ranges, trailing '\'), so a parsed filter
// never meets a malformed pattern. GlobMatch itself stays total: given a
// malformed pattern it treats the offending character literally.
// Used by the injector: no exceptions thrown on purpose, no global state.
#include "common/kernel_filter.h"

#include "common/names.h"

namespace smprof {

bool IsSpecSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

bool IsEscapedAt(std::string_view s, size_t i) {
  size_t n = 0;
  while (i > n && s[i - n - 1] == '\\') ++n;
  return n % 2 == 1;
}

std::string_view TrimSpecItem(std::string_view s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && IsSpecSpace(s[b])) ++b;
  while (e > b && IsSpecSpace(s[e - 1]) && !IsEscapedAt(s, e - 1)) --e;
  return s.substr(b, e - b);
}

namespace {

bool IsSpace(char c) { return IsSpecSpace(c); }

// Parses the class starting at pattern[open] == '['. On success returns true
// and sets *end to the index just past the closing ']' and *matched to whether
// `c` is in the class. On a malformed class returns false and, if `error` is
// given, explains why.
bool MatchClass(std::string_view pattern, size_t open, char c, size_t* end, bool* matched,
                std::string* error) {
  size_t i = open + 1;
  bool negate = false;
  if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) {
    negate = true;
    ++i;
  }
  bool found = false;
  bool first = true;
  while (i < pattern.size()) {
    char lo = pattern[i];
    if (lo == ']' && !first) {
      *end = i + 1;
      *matched = found != negate;
      return true;
    }
    first = false;
    if (lo == '\\') {
      if (++i == pattern.size()) break;
      lo = pattern[i];
    }
    ++i;
    char hi = lo;
    if (i + 1 < pattern.size() && pattern[i] == '-' && pattern[i + 1] != ']') {
      i += 1;
      hi = pattern[i];
      if (hi == '\\') {
        if (++i == pattern.size()) break;
        hi = pattern[i];
      }
      ++i;
      if (static_cast<unsigned char>(hi) < static_cast<unsigned char>(lo)) {
        if (error) {
          *error = std::string("reversed range '") + lo + "-" + hi + "' in pattern \"" +
                   std::string(pattern) + "\": write it as '" + hi + "-" + lo + "'";
        }
        return false;
      }
    }
    const auto uc = static_cast<unsigned char>(c);
    if (uc >= static_cast<unsigned char>(lo) && uc <= static_cast<unsigned char>(hi)) found = true;
  }
  if (error) {
    *error = "unterminated '[' in pattern \"" + std::string(pattern) +
             "\": close the bracket or escape it as \\[";
  }
  return false;
}

// Checks a pattern the way GlobMatch will read it.
bool ValidatePattern(std::string_view pattern, std::string* error) {
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      if (i + 1 == pattern.size()) {
        *error = "trailing '\\' in pattern \"" + std::string(pattern) +
                 "\": remove it or write \\\\ for a literal backslash";
        return false;
      }
      ++i;
    } else if (pattern[i] == '[') {
      size_t end = 0;
      bool matched = false;
      if (!MatchClass(pattern, i, '\0', &end, &matched, error)) return false;
      i = end - 1;
    }
  }
  return true;
}

bool AnyFormMatches(const std::vector<std::string>& patterns, const KernelNameForms& forms) {
  for (const std::string& p : patterns) {
    if (GlobMatch(p, forms.full) || GlobMatch(p, forms.qualified) || GlobMatch(p, forms.base)) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool GlobMatch(std::string_view pattern, std::string_view text) {
  // Iterative matcher: on mismatch, retry from the most recent '*' with one
  // more character consumed. Linear in practice, O(|p|*|t|) worst case.
  size_t p = 0;
  size_t t = 0;
  size_t star_p = std::string_view::npos;
  size_t star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size()) {
      const char pc = pattern[p];
      if (pc == '*') {
        star_p = p++;
        star_t = t;
        continue;
      }
      if (pc == '?') {
        ++p;
        ++t;
        continue;
      }
      if (pc == '[') {
        size_t end = 0;
        bool matched = false;
        if (MatchClass(pattern, p, text[t], &end, &matched, nullptr)) {
          if (matched) {
            p = end;
            ++t;
            continue;
          }
        } else if (text[t] == '[') {  // malformed class: literal '['
          ++p;
          ++t;
          continue;
        }
      } else {
        size_t lit = p;
        if (pc == '\\' && p + 1 < pattern.size()) lit = p + 1;
        if (pattern[lit] == text[t]) {
          p = lit + 1;
          ++t;
          continue;
        }
      }
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p + 1;
    t = ++star_t;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::optional<KernelFilter> KernelFilter::Parse(std::string_view spec, std::string* error) {
  KernelFilter filter;
  filter.spec_ = std::string(spec);
  bool all_space = true;
  for (char c : spec) all_space = all_space && IsSpace(c);
  if (all_space) return filter;

  size_t start = 0;
  for (size_t i = 0; i <= spec.size(); ++i) {
    if (i < spec.size() && !(spec[i] == ',' && !IsEscapedAt(spec, i))) continue;
    size_t b = start;
    size_t e = i;
    while (b < e && IsSpace(spec[b])) ++b;
    while (e > b && IsSpace(spec[e - 1]) && !IsEscapedAt(spec, e - 1)) --e;
    std::string_view element = spec.substr(b, e - b);
    const size_t column = b + 1;
    start = i + 1;

    if (element.empty()) {
      *error = "empty pattern at character " + std::to_string(column) + " in \"" + std::string(spec) +
               "\": remove the extra comma";
      return std::nullopt;
    }
    bool exclude = false;
    if (element.front() == '!') {
      exclude = true;
      element.remove_prefix(1);
      while (!element.empty() && IsSpace(element.front())) element.remove_prefix(1);
      if (element.empty()) {
        *error = "lone '!' at character " + std::to_string(column) + " in \"" + std::string(spec) +
                 "\": follow it with the kernels to exclude, e.g. !gemm*";
        return std::nullopt;
      }
    }
    if (!ValidatePattern(element, error)) return std::nullopt;
    (exclude ? filter.excludes_ : filter.includes_).emplace_back(element);
  }
  return filter;
}

bool KernelFilter::Matches(std::string_view demangled_name) const {
  if (selects_all()) return true;
  const KernelNameForms forms = SplitKernelName(demangled_name);
  if (AnyFormMatches(excludes_, forms)) return false;
  return includes_.empty() || AnyFormMatches(includes_, forms);
}

}  // namespace smprof
