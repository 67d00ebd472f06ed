#include "collector/perfetto_annotations.h"

#include <cstring>
#include <string>

namespace smprof::perfetto {

void Annotations::JsonValue(proto::ProtoEncoder& e, const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::object:
      for (const auto& [key, item] : v.items()) {
        const auto entry = e.BeginNested(kDictEntries);
        e.Bytes(kAnnotationName, key);
        JsonValue(e, item);
        e.EndNested(entry);
      }
      break;
    case nlohmann::json::value_t::array:
      for (const auto& item : v) {
        const auto entry = e.BeginNested(kArrayValues);
        JsonValue(e, item);
        e.EndNested(entry);
      }
      break;
    case nlohmann::json::value_t::string:
      e.Bytes(kStringValue, v.get_ref<const std::string&>());
      break;
    case nlohmann::json::value_t::boolean:
      e.Varint(kBoolValue, v.get<bool>() ? 1 : 0);
      break;
    case nlohmann::json::value_t::number_unsigned:
      e.Varint(kUintValue, v.get<uint64_t>());
      break;
    case nlohmann::json::value_t::number_integer:
      e.Varint(kIntValue, static_cast<uint64_t>(v.get<int64_t>()));
      break;
    case nlohmann::json::value_t::number_float: {
      const double d = v.get<double>();
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof(bits));
      e.Fixed64(kDoubleValue, bits);
      break;
    }
    default:
      e.Bytes(kStringValue, "null");
      break;
  }
}

}  // namespace smprof::perfetto
