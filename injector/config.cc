#include "injector/config.h"

#include <cerrno>
#include <cstdlib>

namespace smprof::injector {
namespace {

bool ParseUnsigned(const char* text, uint64_t min, uint64_t max, uint64_t* out) {
  if (text == nullptr || *text == '\0') return false;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
  }
  errno = 0;
  const unsigned long long v = std::strtoull(text, nullptr, 10);
  if (errno != 0 || v < min || v > max) return false;
  *out = v;
  return true;
}

void ReadNumber(const GetEnv& getenv_fn, const char* name, uint64_t min, uint64_t max, uint64_t* value,
                std::vector<std::string>* errors) {
  const char* text = getenv_fn(name);
  if (text == nullptr) return;
  uint64_t v = 0;
  if (!ParseUnsigned(text, min, max, &v)) {
    errors->push_back(std::string(name) + "='" + text + "' is not a whole number in " + std::to_string(min) +
                      ".." + std::to_string(max) + "; using " + std::to_string(*value));
    return;
  }
  *value = v;
}

}  // namespace

bool ParseWarpList(const std::string& spec, uint32_t* mask, std::string* error) {
  uint32_t result = 0;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = spec.find(',', pos);
    const std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (item.empty()) {
      *error = "empty item in warp list \"" + spec + "\": use e.g. 0,4-7";
      return false;
    }
    const size_t dash = item.find('-');
    uint64_t lo = 0, hi = 0;
    const bool ok = dash == std::string::npos
                        ? ParseUnsigned(item.c_str(), 0, 1023, &lo)
                        : ParseUnsigned(item.substr(0, dash).c_str(), 0, 1023, &lo) &&
                              ParseUnsigned(item.substr(dash + 1).c_str(), 0, 1023, &hi);
    if (dash == std::string::npos) hi = lo;
    if (!ok || hi < lo) {
      *error = "bad item \"" + item + "\" in warp list \"" + spec + "\": use warp indices 0-31 like 0,4-7";
      return false;
    }
    for (uint64_t w = lo; w <= hi && w <= 31; ++w) result |= 1u << w;
    if (hi > 31) result |= 1u << 31;
  }
  *mask = result;
  return true;
}

Config LoadConfig(const GetEnv& getenv_fn, std::vector<std::string>* errors) {
  Config c;
  if (const char* v = getenv_fn("SMPROF_RUN_ID")) c.run_id = v;
  if (const char* v = getenv_fn("SMPROF_LOG_LEVEL")) c.log_level = v;
  if (const char* v = getenv_fn("SMPROF_KERNELS")) {
    std::string error;
    auto filter = KernelFilter::Parse(v, &error);
    if (filter) {
      c.kernels = std::move(*filter);
    } else {
      c.kernels_valid = false;
      errors->push_back("SMPROF_KERNELS='" + std::string(v) + "': " + error + "; profiling is off for this run");
    }
  }
  uint64_t mb = c.buffer_bytes >> 20;
  ReadNumber(getenv_fn, "SMPROF_BUFFER_MB", 1, 4095, &mb, errors);  // event offsets are 32-bit
  c.buffer_bytes = mb << 20;
  uint64_t chunk = c.chunk_bytes;
  ReadNumber(getenv_fn, "SMPROF_CHUNK_BYTES", 256, 65536, &chunk, errors);
  if ((chunk & (chunk - 1)) != 0) {
    errors->push_back("SMPROF_CHUNK_BYTES=" + std::to_string(chunk) + " is not a power of two; using 1024");
    chunk = 1024;
  }
  c.chunk_bytes = static_cast<uint32_t>(chunk);
  uint64_t high = c.high_water_percent;
  ReadNumber(getenv_fn, "SMPROF_HIGH_WATER", 10, 95, &high, errors);
  c.high_water_percent = static_cast<uint32_t>(high);
  uint64_t shm_mb = c.shm_bytes >> 20;
  ReadNumber(getenv_fn, "SMPROF_SHM_MB", 1, 4096, &shm_mb, errors);
  c.shm_bytes = shm_mb << 20;
  if (const char* v = getenv_fn("SMPROF_WARPS")) {
    std::string error;
    if (!ParseWarpList(v, &c.warp_mask, &error)) errors->push_back("SMPROF_WARPS: " + error + "; recording all warps");
  }
  return c;
}

}  // namespace smprof::injector
