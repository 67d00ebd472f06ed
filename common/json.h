// nlohmann/json as smprof includes it (never <nlohmann/json.hpp> directly).
//
// Parsing and printing JSON take most of the code that json puts in a file:
// the parser and lexer (for each kind of input: std::string, C string,
// stream), the DOM builders behind them and the serializer. Here they are
// explicit instantiation declarations, instantiated once in common/json.cc
// (smprof_json, which every user links), so a file that parses or dumps JSON
// no longer compiles its own copy: a fifth of an ASan-built test file. Only
// for the json versions whose internals these names were checked against
// (3.11); with any other, json is included as is.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#if NLOHMANN_JSON_VERSION_MAJOR == 3 && NLOHMANN_JSON_VERSION_MINOR == 11
// The parser and lexer for input ADAPTER, with the SAX drivers that
// json::parse and json::accept run.
#define SMPROF_JSON_PARSER(EXTERN, ADAPTER)                                                                  \
  EXTERN template class nlohmann::detail::lexer<nlohmann::json, ADAPTER>;                                    \
  EXTERN template class nlohmann::detail::parser<nlohmann::json, ADAPTER>;                                   \
  EXTERN template bool nlohmann::detail::parser<nlohmann::json, ADAPTER>::sax_parse_internal(                \
      nlohmann::detail::json_sax_dom_parser<nlohmann::json>*);                                               \
  EXTERN template bool nlohmann::detail::parser<nlohmann::json, ADAPTER>::sax_parse_internal(                \
      nlohmann::detail::json_sax_dom_callback_parser<nlohmann::json>*);                                      \
  EXTERN template bool nlohmann::detail::parser<nlohmann::json, ADAPTER>::sax_parse_internal(                \
      nlohmann::detail::json_sax_acceptor<nlohmann::json>*);                                                 \
  EXTERN template bool nlohmann::detail::parser<nlohmann::json, ADAPTER>::sax_parse(                         \
      nlohmann::detail::json_sax_acceptor<nlohmann::json>*, bool);
#define SMPROF_JSON_TEMPLATES(EXTERN)                                                                         \
  EXTERN template class nlohmann::detail::serializer<nlohmann::json>;                                        \
  EXTERN template class nlohmann::detail::json_sax_dom_parser<nlohmann::json>;                               \
  EXTERN template class nlohmann::detail::json_sax_dom_callback_parser<nlohmann::json>;                      \
  SMPROF_JSON_PARSER(EXTERN, nlohmann::detail::input_stream_adapter)                                         \
  SMPROF_JSON_PARSER(EXTERN, nlohmann::detail::iterator_input_adapter<const char*>)                          \
  SMPROF_JSON_PARSER(EXTERN, nlohmann::detail::iterator_input_adapter<std::string::const_iterator>)
SMPROF_JSON_TEMPLATES(extern)
#endif
