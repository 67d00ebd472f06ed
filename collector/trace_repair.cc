#include "collector/trace_repair.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "collector/trace_writer.h"

namespace smprof {
namespace internal {

size_t WholePacketsPrefix(const std::string& data) {
  size_t pos = 0;
  while (pos < data.size()) {
    if (static_cast<unsigned char>(data[pos]) != 0x0A) break;  // Trace.packet, length-delimited
    size_t p = pos + 1;
    uint64_t len = 0;
    int shift = 0;
    bool done = false;
    while (p < data.size() && shift < 64) {
      const auto byte = static_cast<unsigned char>(data[p++]);
      len |= static_cast<uint64_t>(byte & 0x7f) << shift;
      shift += 7;
      if ((byte & 0x80) == 0) {
        done = true;
        break;
      }
    }
    if (!done || len > data.size() - p) break;
    pos = p + len;
  }
  return pos;
}

}  // namespace internal

bool RepairAnyTraceFile(const std::string& path, bool* repaired, std::string* error) {
  *repaired = false;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  char first = 0;
  if (!in.get(first)) {  // empty: the JSON repair makes it an empty array
    in.close();
    return RepairTraceFile(path, repaired, error);
  }
  if (first == '[') {
    in.close();
    return RepairTraceFile(path, repaired, error);
  }
  if (first != 0x0A) {
    *error = path + " is neither a JSON nor a Perfetto protobuf trace";
    return false;
  }
  std::ostringstream all;
  all << first << in.rdbuf();
  const std::string data = all.str();
  const size_t keep = internal::WholePacketsPrefix(data);
  if (keep == data.size()) return true;
  if (truncate(path.c_str(), static_cast<off_t>(keep)) != 0) {
    *error = "cannot repair " + path + ": " + std::strerror(errno);
    return false;
  }
  *repaired = true;
  return true;
}

}  // namespace smprof
