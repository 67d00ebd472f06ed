// Annotations: the debug annotations of a Perfetto event that is not a
// warp's (the run's metadata, a GPU's facts, a launch's or a harvest's
// args), with their names inline: such events are few, so interning their
// names would not pay. Encoded before the event's packet is opened, then
// copied into its TrackEvent.
//
// A JSON value becomes nested entries: an object's members dict_entries,
// an array's items array_values (the trace processor flattens them into
// args "a.b" and "a[0]"), null the string "null" (a name without a value
// would be dropped; legacy_json_value "null" crashes trace processor v58).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "collector/perfetto_fields.h"
#include "collector/proto_encoder.h"
#include "common/json.h"

namespace smprof::perfetto {

class Annotations {
 public:
  Annotations& Uint(std::string_view name, uint64_t v) {
    Entry(name, [&] { e_.Varint(kUintValue, v); });
    return *this;
  }
  Annotations& Bool(std::string_view name, bool v) {
    Entry(name, [&] { e_.Varint(kBoolValue, v ? 1 : 0); });
    return *this;
  }
  Annotations& String(std::string_view name, std::string_view v) {
    Entry(name, [&] { e_.Bytes(kStringValue, v); });
    return *this;
  }
  Annotations& Json(std::string_view name, const nlohmann::json& v) {
    Entry(name, [&] { JsonValue(e_, v); });
    return *this;
  }
  // Each member of a JSON object as one annotation (but `skip`).
  Annotations& Members(const nlohmann::json& object, std::string_view skip = {}) {
    if (!object.is_object()) return Json("value", object);
    for (const auto& [key, value] : object.items()) {
      if (key != skip) Json(key, value);
    }
    return *this;
  }

  // Appends them to the TrackEvent being encoded in `out`.
  void WriteTo(proto::ProtoEncoder& out) const {
    size_t start = 0;
    for (const size_t end : ends_) {
      out.Bytes(kDebugAnnotations, e_.bytes().substr(start, end - start));
      start = end;
    }
  }

 private:
  template <typename F>
  void Entry(std::string_view name, F&& value) {
    e_.Bytes(kAnnotationName, name);
    value();
    ends_.push_back(e_.size());
  }
  // Writes `v` as the value of the DebugAnnotation being encoded in `e`.
  static void JsonValue(proto::ProtoEncoder& e, const nlohmann::json& v);

  proto::ProtoEncoder e_;  // the DebugAnnotation messages, back to back
  std::vector<size_t> ends_;
};

}  // namespace smprof::perfetto
