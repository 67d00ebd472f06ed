// The words and titles a trace shows, one definition for every writer (JSON,
// Perfetto protobuf) so both formats read alike.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "collector/trace_sink.h"

namespace smprof::internal {

// "#3 gemm | GPU 1 (cuda:0) | stream 7 | grid(8,1,1) block(256,1,1) | pid 42"
std::string LaunchTitle(const trace::LaunchRecord& l);
// "SM 012 | block (1,0,0) | warp 3"; "program (1,0,0)" for a Triton kernel's warp
std::string WarpTitle(const trace::WarpRecord& w);
// "block (1,0,0)"; a Triton kernel's warp: "program (1,0,0)" (its block is
// tl.program_id), or "program (1,0,0) cta 1" when the program is a cluster
// (num_ctas > 1): the program is the block divided by the cluster's shape,
// and the CTA its rank in the cluster (%cluster_ctarank, x fastest)
std::string BlockLabel(const trace::WarpRecord& w);
// "GPU 0 | NVIDIA H100 | 0000:19:00.0 | GPU-..."
std::string GpuTitle(const trace::GpuRecord& g);
// "132 SMs, sm_90, SM clock 1980 MHz, %globaltimer step 32 ns"
std::string GpuFactsLine(const trace::GpuRecord& g);
// "smprof | ./app --x | pid 42"
std::string ProcessTitle(const trace::ProcessRecord& p);
// A command line as a label: NULs as spaces, at most 80 bytes, not cut
// inside a UTF-8 sequence.
std::string CommandLabel(std::string_view raw);
// "(8,1,1)"
std::string Dim3(const uint32_t v[3]);

// LaunchFlags as a JSON array of words: "no_activity", "graph",
// "forced_drain", unknown bits as "0x...".
std::string LaunchFlagsJson(uint32_t flags);

// "harvest: sync", "forced drain: buffer high-water", ...
std::string HarvestReasonName(uint32_t reason);

// wire::NoticeKind as a word: "cupti_unavailable", "stepped_aside", ...
const char* NoticeReason(uint32_t kind);
// A launch read while it still ran (wire::kLaunchRunning), as its note says.
inline constexpr char kRunningLaunchNote[] =
    "still running when the process was about to end: its warps were read as far as they had written (a range "
    "without an end is where a warp was); start is the launch call, end the read";
// The name of a notice's instant in the trace, by its reason (NoticeReason).
const char* NoticeTitle(std::string_view reason);
// The driver API function of a wire::HostApi ("cuLaunchKernel", ...);
// nullptr for kApiNone and unknown values.
const char* HostApiName(uint32_t api);
// wire::HarvestStage as an argument name: "wait_us", "copy_us", ...
const char* HarvestStageArg(uint32_t stage);
// A host thread's track name: "<name> <tid>", or "thread <tid>" unnamed.
std::string HostThreadTitle(uint32_t tid, std::string_view name);

// Why a range has no END, for unterminated slices ("" when it simply never
// ended before its launch did).
inline constexpr std::string_view kNoteTooManyOpen =
    "more than 65536 ranges were open on this warp; the oldest was closed here";
inline constexpr std::string_view kNoteProducerLost = "the process ended without detaching";

}  // namespace smprof::internal
