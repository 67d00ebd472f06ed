// Kernel name helpers.
//
// SplitKernelName works on libstdc++-style demangled text with a nesting scan
// (<> () [] {}), so it never needs a grammar. Hazards the scan handles:
//  - "(anonymous namespace)" and operator names ("operator()", "operator<",
//    "operator< <T>", "operator int") contain brackets or spaces that are not
//    structure; they are opaque tokens.
//  - Local entities ("f(int)::{lambda(int)#1}::operator()(int) const") carry
//    the enclosing function's parameters; a top-level "(...)" followed by "::"
//    is part of the name, not the parameter list.
//  - Only template functions have a return type in the demangling
//    ("void ns::f<int>(int)" vs "ns::g(int)"), so a return type is stripped
//    only when the name ends in template arguments.
// Used by the injector: no exceptions thrown on purpose, no global state.
#include "common/names.h"

#include <cxxabi.h>

#include <cstdlib>
#include <vector>

namespace smprof {
namespace {

constexpr int kOpaque = -1;
constexpr std::string_view kAnonymousNamespace = "(anonymous namespace)";
constexpr std::string_view kOperator = "operator";

bool IsIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool IsOperatorSymbolChar(char c) {
  return std::string_view("+-*/%^&|~!=<>,").find(c) != std::string_view::npos;
}

bool StartsWithAt(std::string_view s, size_t i, std::string_view prefix) {
  return s.size() - i >= prefix.size() && s.compare(i, prefix.size(), prefix) == 0;
}

// Length of the opaque token starting at s[i], or 0 if none starts there.
size_t OpaqueTokenLength(std::string_view s, size_t i) {
  if (StartsWithAt(s, i, kAnonymousNamespace)) return kAnonymousNamespace.size();
  if (!StartsWithAt(s, i, kOperator)) return 0;
  if (i > 0 && IsIdentChar(s[i - 1])) return 0;
  size_t j = i + kOperator.size();
  if (j < s.size() && IsIdentChar(s[j])) return 0;  // "operator_x" is an identifier
  if (StartsWithAt(s, j, "()") || StartsWithAt(s, j, "[]")) return j + 2 - i;
  if (j < s.size() && IsOperatorSymbolChar(s[j])) {
    while (j < s.size() && IsOperatorSymbolChar(s[j])) ++j;
    // "operator< <T>": the demangler separates the template arguments.
    if (StartsWithAt(s, j, " <")) ++j;
    return j - i;
  }
  if (StartsWithAt(s, j, " new") || StartsWithAt(s, j, " delete")) {
    j += s[j + 1] == 'n' ? 4 : 7;
    if (StartsWithAt(s, j, "[]")) j += 2;
    return j - i;
  }
  if (StartsWithAt(s, j, " ")) {
    // Conversion operator ("operator unsigned int"): the type runs to '('.
    int angle = 0;
    while (j < s.size() && !(s[j] == '(' && angle == 0)) {
      if (s[j] == '<') ++angle;
      if (s[j] == '>' && angle > 0) --angle;
      ++j;
    }
    return j - i;
  }
  return j - i;
}

// depth[i] is the bracket nesting depth of s[i]; brackets themselves get the
// depth outside them. Characters of opaque tokens get kOpaque. A closer only
// closes a matching opener on the stack ('>' inside "(a>b)" is plain text).
std::vector<int> NestingDepths(std::string_view s) {
  std::vector<int> depth(s.size(), 0);
  std::vector<char> stack;
  for (size_t i = 0; i < s.size();) {
    if (size_t n = OpaqueTokenLength(s, i); n > 0) {
      for (size_t k = i; k < i + n; ++k) depth[k] = kOpaque;
      i += n;
      continue;
    }
    const char c = s[i];
    depth[i] = static_cast<int>(stack.size());
    if (c == '<' || c == '(' || c == '[' || c == '{') {
      stack.push_back(c);
    } else if (c == '>' || c == ')' || c == ']' || c == '}') {
      const char open = c == '>' ? '<' : c == ')' ? '(' : c == ']' ? '[' : '{';
      size_t k = stack.size();
      while (k > 0 && stack[k - 1] != open) --k;
      // '>' must close the innermost bracket; other closers may close through.
      if (k > 0 && (open != '<' || k == stack.size())) {
        stack.resize(k - 1);
        depth[i] = static_cast<int>(stack.size());
      }
    }
    ++i;
  }
  return depth;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// Index of the '(' that opens the parameter list, or s.size() if none.
size_t ParameterListStart(std::string_view s, const std::vector<int>& depth) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (depth[i] != 0 || s[i] != '(') continue;
    size_t close = i + 1;
    while (close < s.size() && !(depth[close] == 0 && s[close] == ')')) ++close;
    if (close < s.size() && StartsWithAt(s, close + 1, "::")) {
      i = close;  // enclosing function of a local entity
      continue;
    }
    return i;
  }
  return s.size();
}

}  // namespace

std::string Demangle(std::string_view mangled) {
  if (mangled.size() < 2 || mangled[0] != '_' || mangled[1] != 'Z') return std::string(mangled);
  const std::string copy(mangled);
  int status = 0;
  char* out = abi::__cxa_demangle(copy.c_str(), nullptr, nullptr, &status);
  if (out == nullptr || status != 0) {
    std::free(out);
    return copy;
  }
  std::string result(out);
  std::free(out);
  return result;
}

KernelNameForms SplitKernelName(std::string_view demangled) {
  KernelNameForms forms;
  forms.full = std::string(demangled);
  const std::string_view s = Trim(demangled);
  const std::vector<int> depth = NestingDepths(s);

  // Qualified: cut the parameters, then a return type before template-function names.
  const size_t params = ParameterListStart(s, depth);
  size_t end = params;
  while (end > 0 && s[end - 1] == ' ') --end;
  size_t begin = 0;
  if (end > 0 && s[end - 1] == '>' && depth[end - 1] == 0) {
    for (size_t i = end; i > 0; --i) {
      if (depth[i - 1] == 0 && s[i - 1] == ' ') {
        begin = i;
        break;
      }
    }
  }
  const std::string_view qualified = s.substr(begin, end - begin);
  forms.qualified = std::string(qualified);

  // Base: after the last top-level "::", before the first top-level '<'.
  const std::vector<int> qdepth(depth.begin() + static_cast<std::ptrdiff_t>(begin),
                                depth.begin() + static_cast<std::ptrdiff_t>(end));
  size_t base_begin = 0;
  for (size_t i = 0; i + 1 < qualified.size(); ++i) {
    if (qdepth[i] == 0 && qdepth[i + 1] == 0 && qualified[i] == ':' && qualified[i + 1] == ':') {
      base_begin = i + 2;
    }
  }
  size_t base_end = qualified.size();
  for (size_t i = base_begin; i < qualified.size(); ++i) {
    if (qdepth[i] == 0 && qualified[i] == '<') {
      base_end = i;
      break;
    }
  }
  forms.base = std::string(Trim(qualified.substr(base_begin, base_end - base_begin)));
  return forms;
}

}  // namespace smprof
