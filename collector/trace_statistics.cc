#include "collector/trace_statistics.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <string_view>

#include "collector/perfetto_fields.h"
#include "collector/proto_reader.h"
#include "common/json.h"

namespace smprof {
namespace {

constexpr std::string_view kSummaryName = "smprof run summary";
constexpr std::string_view kArgument = "statistics";

using perfetto::kAnnotationName;
using perfetto::kDebugAnnotations;
using perfetto::kEventName;
using perfetto::kStringValue;
using perfetto::kTrackEvent;

// The "statistics" annotation of a TrackEvent named kSummaryName, if any.
bool FromTrackEvent(std::string_view event, std::string* out) {
  proto::ProtoReader r(event);
  proto::Field f;
  bool summary = false;
  std::string_view found;
  while (r.Next(&f)) {
    if (f.number == kEventName && f.bytes == kSummaryName) summary = true;
    if (f.number != kDebugAnnotations) continue;
    proto::ProtoReader a(f.bytes);
    proto::Field g;
    bool named = false;
    std::string_view value;
    while (a.Next(&g)) {
      if (g.number == kAnnotationName && g.bytes == kArgument) named = true;
      if (g.number == kStringValue) value = g.bytes;
    }
    if (named) found = value;
  }
  if (!summary || found.empty()) return false;
  *out = std::string(found);
  return true;
}

// Protobuf: walks the packet boundaries and looks into the last packets
// (the summary is the last event written).
bool FromProto(std::string_view data, std::string* out) {
  std::deque<std::string_view> last;
  proto::WholePackets(data, [&](std::string_view packet) {
    last.push_back(packet);
    if (last.size() > 64) last.pop_front();
  });
  for (auto it = last.rbegin(); it != last.rend(); ++it) {
    proto::ProtoReader r(*it);
    proto::Field f;
    while (r.Next(&f)) {
      if (f.number == kTrackEvent && FromTrackEvent(f.bytes, out)) return true;
    }
  }
  return false;
}

// JSON: one event per line (trace_writer.h); the summary is the last one.
bool FromJson(std::string_view data, std::string* out) {
  const size_t at = data.rfind("\"smprof run summary\"");
  if (at == std::string_view::npos) return false;
  const size_t begin = data.rfind('\n', at);
  size_t end = data.find('\n', at);
  std::string_view line = data.substr(begin == std::string_view::npos ? 0 : begin + 1,
                                      (end == std::string_view::npos ? data.size() : end) - (begin + 1));
  while (!line.empty() && (line.back() == ',' || line.back() == '\r')) line.remove_suffix(1);
  const nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
  if (!event.is_object()) return false;
  const nlohmann::json args = event.value("args", nlohmann::json::object());
  auto it = args.find(std::string(kArgument));
  if (it == args.end() || !it->is_string()) return false;
  *out = it->get<std::string>();
  return true;
}

}  // namespace

bool ReadTraceStatistics(const std::string& path, std::string* statistics_json, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size == 0) {
    ::close(fd);
    *error = path + " is empty";
    return false;
  }
  void* map = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    *error = "cannot map " + path + ": " + std::strerror(errno);
    return false;
  }
  const std::string_view data(static_cast<const char*>(map), static_cast<size_t>(st.st_size));
  const bool json = data.front() == '[';
  const bool found = json ? FromJson(data, statistics_json) : FromProto(data, statistics_json);
  munmap(map, static_cast<size_t>(st.st_size));
  if (!found) {
    *error = path + " holds no statistics: its run summary is missing (a run that was killed) or was written " +
             "without them; the statistics file beside a trace is <trace>.stats.json";
  }
  return found;
}

}  // namespace smprof
