// What a fuzz target in tests/fuzz/ tells the standalone driver.
//
// Each target defines the libFuzzer entry point
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// which aborts (directly or through a sanitizer) on any failure, and, for
// standalone_driver.cc (g++ builds without libFuzzer), the functions below:
// its name, valid seed inputs and where framed transport messages start in an
// input, so that the driver's structure-aware mutations find the headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace smprof::fuzz {

using Bytes = std::vector<uint8_t>;

struct TargetInfo {
  const char* name;        // "message_decoder_fuzz": the driver's output prefix
  size_t stream_offset;    // input offset of the first wire::MsgHeader
  size_t max_input_bytes;  // the driver never grows an input past this
  std::vector<Bytes> seeds;
};

// Defined by each target.
TargetInfo GetTargetInfo();
// One line of the target's own counters for the driver's final report, e.g.
// how many inputs were accepted and rejected.
std::string TargetSummary();

}  // namespace smprof::fuzz
