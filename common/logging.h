// spdlog and fmt as smprof includes them: compiled once, into smprof_logging
// (common/logging_*.cc), and declared only here (SPDLOG_COMPILED_LIB, no
// FMT_HEADER_ONLY).
#pragma once

#include <spdlog/logger.h>

// fmt's formatting engine (vformat_to<char>: the format string parser and
// the formatters of every argument type) is a template that fmt instantiates
// in its library but does not declare extern, so every file that logs built
// its own copy: two thirds of an ASan-built injector file. It is declared
// extern here and instantiated in common/logging_fmt.cc. Only for the fmt
// version this was checked against (9), and not under clang, which mangles
// the declaration differently from the definition (fmt issue #2377).
#if FMT_VERSION >= 90000 && FMT_VERSION < 100000 && !defined(__clang__)
extern template void fmt::detail::vformat_to<char>(fmt::detail::buffer<char>&, fmt::string_view,
                                                   fmt::basic_format_args<fmt::buffer_context<char>>,
                                                   fmt::detail::locale_ref);
#endif
