#include "collector/trace_repair.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "collector/proto_reader.h"
#include "collector/trace_writer.h"

namespace smprof {
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
  const size_t keep = proto::WholePackets(data);
  if (keep == data.size()) return true;
  if (truncate(path.c_str(), static_cast<off_t>(keep)) != 0) {
    *error = "cannot repair " + path + ": " + std::strerror(errno);
    return false;
  }
  *repaired = true;
  return true;
}

}  // namespace smprof
