// Validation of one transport message (untrusted bytes) into a typed view.
//
// The transport already checked the framing (known type, size multiple of 8,
// inside the ring); the decoder re-checks everything it relies on, because a
// producer may be buggy, another smprof version, or hostile:
//   - size >= sizeof(MsgHeader), header.size == size, size % 8 == 0,
//     size <= wire::kMaxMessageBytes, type known;
//   - fixed messages (Harvest, Stats) have exactly their struct size;
//   - variable ones are exactly PaddedSize(struct + declared tail), string
//     tails are <= kMaxStringBytes, WarpEventsMsg is exactly struct + count*16;
//   - every WireEvent is well formed (docs/device-api.md, "Collector"): its
//     kind is 1-8, bits 8-31 of `kind` are 0, its flags suit its kind
//     (kEventHasValue on END and INSTANT; kEventCounter and kEventWideValue
//     only with kEventHasValue; kEventNameValue on BEGIN, END, INSTANT and
//     PHASE, never with kEventHasValue; other kinds take none), a
//     kEventValueHigh comes right after a kEventWideValue event and only
//     there, and its name id is at most kMaxWireNameId;
//   - RecordsMsg is exactly struct + count*112 and every record's call is
//     valid and its span does not end before it starts; ChunksMsg is exactly
//     struct + count*chunk_bytes (or, with kChunksUsedBytes, count
//     ChunkBytes-prefixed parts of at most chunk_bytes, multiples of 8,
//     filling it exactly), chunk_bytes a power of two 256..65536 (chunk
//     contents are the arena decoder's to check);
//   - a launch does not end before it starts;
//   - a HostCall's api is kApiNone (and then all its fields are 0) or a
//     known HostApi that does not end before it starts; a harvest's host
//     span does not end before it starts.
// Fixed parts are memcpy'd into the result (the input may be unaligned); the
// text and event tails point into the caller's buffer and live as long as it.
// Nothing is read before the size check that covers it.
#pragma once

#include <cstdint>
#include <string_view>

#include "smprof/wire.h"

namespace smprof {

inline constexpr uint32_t kMaxStringBytes = wire::kMaxTextBytes;
// Marker name ids (NameMsg, WireEvent) are at most this; the ids above are
// the collector's own (names it renders from a format and an integer, see
// trace_builder.h), so the two never meet.
inline constexpr uint32_t kMaxWireNameId = 0x7fffffffu;

enum class DecodeStatus : uint8_t {
  kOk = 0,
  kTooShort,      // smaller than a MsgHeader
  kSizeMismatch,  // header.size differs from the delivered size
  kMisaligned,    // size not a multiple of 8
  kTooLarge,      // above wire::kMaxMessageBytes
  kUnknownType,
  kBadSize,        // size disagrees with the struct plus its declared tail
  kStringTooLong,  // declared string tail above kMaxStringBytes
  kBadEventKind,   // a WireEvent kind outside 1-8, or bits above the flags set
  kBadTimeRange,   // LaunchMsg end_ns < start_ns, or a harvest's host span ends before it starts
  kBadHostCall,    // a HostCall with an unknown api, ending before it starts, or fields without an api
  kBadEventFlags,  // a flag on a kind that takes none, or flags that exclude each other
  kBadValueHigh,   // a kEventValueHigh not right after a wide event, or a wide event without one
  kBadNameId,      // a name id above kMaxWireNameId
  kBadChunkSize,   // a ChunksMsg chunk size that is not a power of two in 256..65536, a chunk part
                   // longer than it or not a multiple of 8, or unknown flags
};
inline constexpr int kNumDecodeStatus = 15;

const char* DecodeStatusName(DecodeStatus status);

struct DecodedMessage {
  DecodedMessage() : stats{} {}

  wire::MsgType type = wire::kMsgPad;
  // The fixed part of the message, selected by `type` (kMsgPad: none).
  union {
    wire::ProcessMsg process;
    wire::DeviceMsg device;
    wire::NameMsg name;
    wire::LaunchMsg launch;
    wire::WarpEventsMsg warp_events;
    wire::HarvestMsg harvest;
    wire::StatsMsg stats;
    wire::NoticeMsg notice;
    wire::ThreadMsg thread;
    wire::KernelNameMsg kernel_name;
    wire::MarkerNameMsg marker_name;
    wire::RecordsMsg records;
    wire::ChunksMsg chunks;
  };
  // Command line / device name / marker name / kernel name / notice bytes /
  // thread name.
  std::string_view text;
  // kMsgWarpEvents: `event_count` WireEvents, possibly unaligned.
  const uint8_t* events = nullptr;
  uint32_t event_count = 0;
  // kMsgRecords: records.count KernelRecordEntry; kMsgChunks: chunks.count
  // chunks of chunks.chunk_bytes (possibly unaligned).
  const uint8_t* payload = nullptr;

  wire::WireEvent event(uint32_t i) const;
  wire::KernelRecordEntry record(uint32_t i) const;
};

class MessageDecoder {
 public:
  // Decodes `size` bytes at `data`. On anything but kOk, *out is unspecified.
  static DecodeStatus Decode(const uint8_t* data, uint32_t size, DecodedMessage* out);
};

}  // namespace smprof
