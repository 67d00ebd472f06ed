#include "collector/message_decoder.h"

#include <cstddef>
#include <cstring>

namespace smprof {
namespace {

using wire::PaddedSize;

// Copies the fixed struct T out of `data` once `size` is known to cover it.
template <typename T>
bool CopyFixed(const uint8_t* data, uint32_t size, T* out) {
  if (size < sizeof(T)) return false;
  std::memcpy(out, data, sizeof(T));
  return true;
}

// Checks `size` == PaddedSize(sizeof(T) + len) without overflow.
template <typename T>
DecodeStatus CheckTail(uint32_t size, uint32_t len) {
  if (len > kMaxStringBytes) return DecodeStatus::kStringTooLong;
  if (size != PaddedSize(static_cast<uint32_t>(sizeof(T)) + len)) return DecodeStatus::kBadSize;
  return DecodeStatus::kOk;
}

// What a WireEvent's kind word may hold: each kind's flags, and for a
// kEventValueHigh none (its place is checked apart).
DecodeStatus CheckEventKind(uint32_t word) {
  if ((word & ~(wire::kEventKindMask | wire::kEventFlagsMask)) != 0) return DecodeStatus::kBadEventKind;
  const uint32_t kind = word & wire::kEventKindMask;
  const uint32_t flags = word & wire::kEventFlagsMask;
  if (kind == 0 || kind > wire::kMaxEventKind) return DecodeStatus::kBadEventKind;
  uint32_t allowed = 0;
  switch (kind) {
    case wire::kEventBegin:
    case wire::kEventPhase:
      allowed = wire::kEventNameValue;
      break;
    case wire::kEventEnd:
      allowed = wire::kEventHasValue | wire::kEventWideValue | wire::kEventNameValue;
      break;
    case wire::kEventInstant:
      allowed = wire::kEventHasValue | wire::kEventCounter | wire::kEventWideValue | wire::kEventNameValue;
      break;
    default:  // PHASE_END, ASYNC_BEGIN, ASYNC_END, VALUE_HIGH
      break;
  }
  if ((flags & ~allowed) != 0) return DecodeStatus::kBadEventFlags;
  const bool value = (flags & wire::kEventHasValue) != 0;
  if (!value && (flags & (wire::kEventCounter | wire::kEventWideValue)) != 0) return DecodeStatus::kBadEventFlags;
  if (value && (flags & wire::kEventNameValue) != 0) return DecodeStatus::kBadEventFlags;
  return DecodeStatus::kOk;
}

// The events of a WarpEventsMsg. Only `kind` and `name_id` are read; plain
// BEGIN, END and INSTANT (no flags) take one compare each, the name ids one
// OR (checked once at the end); the rest are checked one by one, a wide
// event together with its continuation.
DecodeStatus CheckEvents(const DecodedMessage& m) {
  const auto field = [&m](uint32_t i, size_t offset) {
    uint32_t v;
    std::memcpy(&v, m.events + size_t{i} * sizeof(wire::WireEvent) + offset, sizeof(v));
    return v;
  };
  constexpr size_t kKind = offsetof(wire::WireEvent, kind);
  constexpr size_t kNameId = offsetof(wire::WireEvent, name_id);
  uint32_t names = 0;
  for (uint32_t i = 0; i < m.event_count; ++i) {
    const uint32_t kind = field(i, kKind);
    names |= field(i, kNameId);
    if (kind - 1u < 3u) continue;
    const DecodeStatus st = CheckEventKind(kind);
    if (st != DecodeStatus::kOk) return st;
    if (kind == wire::kEventValueHigh) return DecodeStatus::kBadValueHigh;  // no wide event before it
    if ((kind & wire::kEventWideValue) == 0) continue;
    if (i + 1 == m.event_count || field(i + 1, kKind) != wire::kEventValueHigh) return DecodeStatus::kBadValueHigh;
    ++i;
    names |= field(i, kNameId);
  }
  return names > kMaxWireNameId ? DecodeStatus::kBadNameId : DecodeStatus::kOk;
}

bool ValidCall(const wire::HostCall& c) {
  if (c.api == wire::kApiNone) return c.start_ns == 0 && c.end_ns == 0 && c.tid == 0;
  return c.api <= wire::kApiLast && c.end_ns >= c.start_ns;
}

}  // namespace

const char* DecodeStatusName(DecodeStatus status) {
  switch (status) {
    case DecodeStatus::kOk:
      return "ok";
    case DecodeStatus::kTooShort:
      return "shorter than a header";
    case DecodeStatus::kSizeMismatch:
      return "header size differs from message size";
    case DecodeStatus::kMisaligned:
      return "size not a multiple of 8";
    case DecodeStatus::kTooLarge:
      return "message too large";
    case DecodeStatus::kUnknownType:
      return "unknown message type";
    case DecodeStatus::kBadSize:
      return "size does not match the declared contents";
    case DecodeStatus::kStringTooLong:
      return "string longer than 64 KiB";
    case DecodeStatus::kBadEventKind:
      return "event kind unknown";
    case DecodeStatus::kBadTimeRange:
      return "launch or harvest ends before it starts";
    case DecodeStatus::kBadHostCall:
      return "host API call unknown or ending before it starts";
    case DecodeStatus::kBadEventFlags:
      return "event flags not allowed on its kind";
    case DecodeStatus::kBadValueHigh:
      return "64-bit value continuation missing or out of place";
    case DecodeStatus::kBadNameId:
      return "marker name id above 2^31 - 1";
    case DecodeStatus::kBadChunkSize:
      return "chunk size not a power of two from 256 to 65536, or a chunk part that does not fit it";
  }
  return "?";
}

wire::WireEvent DecodedMessage::event(uint32_t i) const {
  wire::WireEvent e;
  std::memcpy(&e, events + static_cast<size_t>(i) * sizeof(wire::WireEvent), sizeof(e));
  return e;
}

wire::KernelRecordEntry DecodedMessage::record(uint32_t i) const {
  wire::KernelRecordEntry r;
  std::memcpy(&r, payload + static_cast<size_t>(i) * sizeof(wire::KernelRecordEntry), sizeof(r));
  return r;
}

DecodeStatus MessageDecoder::Decode(const uint8_t* data, uint32_t size, DecodedMessage* out) {
  if (data == nullptr || size < sizeof(wire::MsgHeader)) return DecodeStatus::kTooShort;
  wire::MsgHeader h;
  std::memcpy(&h, data, sizeof(h));
  if (h.size != size) return DecodeStatus::kSizeMismatch;
  if (size > wire::kMaxMessageBytes) return DecodeStatus::kTooLarge;
  if (size % wire::kMsgAlign != 0) return DecodeStatus::kMisaligned;

  out->text = {};
  out->events = nullptr;
  out->event_count = 0;
  out->payload = nullptr;
  const char* const text_at = reinterpret_cast<const char*>(data);
  DecodeStatus st = DecodeStatus::kOk;
  switch (h.type) {
    case wire::kMsgPad:
      break;
    case wire::kMsgProcess:
      if (!CopyFixed(data, size, &out->process)) return DecodeStatus::kBadSize;
      st = CheckTail<wire::ProcessMsg>(size, out->process.cmdline_len);
      if (st != DecodeStatus::kOk) return st;
      out->text = {text_at + sizeof(wire::ProcessMsg), out->process.cmdline_len};
      break;
    case wire::kMsgDevice:
      if (!CopyFixed(data, size, &out->device)) return DecodeStatus::kBadSize;
      st = CheckTail<wire::DeviceMsg>(size, out->device.name_len);
      if (st != DecodeStatus::kOk) return st;
      out->text = {text_at + sizeof(wire::DeviceMsg), out->device.name_len};
      break;
    case wire::kMsgName:
      if (!CopyFixed(data, size, &out->name)) return DecodeStatus::kBadSize;
      st = CheckTail<wire::NameMsg>(size, out->name.name_len);
      if (st != DecodeStatus::kOk) return st;
      if (out->name.name_id > kMaxWireNameId) return DecodeStatus::kBadNameId;
      out->text = {text_at + sizeof(wire::NameMsg), out->name.name_len};
      break;
    case wire::kMsgLaunch:
      if (!CopyFixed(data, size, &out->launch)) return DecodeStatus::kBadSize;
      st = CheckTail<wire::LaunchMsg>(size, out->launch.name_len);
      if (st != DecodeStatus::kOk) return st;
      if (out->launch.end_ns < out->launch.start_ns) return DecodeStatus::kBadTimeRange;
      if (!ValidCall(out->launch.call)) return DecodeStatus::kBadHostCall;
      out->text = {text_at + sizeof(wire::LaunchMsg), out->launch.name_len};
      break;
    case wire::kMsgWarpEvents: {
      if (!CopyFixed(data, size, &out->warp_events)) return DecodeStatus::kBadSize;
      const uint64_t expected =
          sizeof(wire::WarpEventsMsg) + static_cast<uint64_t>(out->warp_events.count) * sizeof(wire::WireEvent);
      if (expected != size) return DecodeStatus::kBadSize;
      out->events = data + sizeof(wire::WarpEventsMsg);
      out->event_count = out->warp_events.count;
      st = CheckEvents(*out);
      if (st != DecodeStatus::kOk) return st;
      break;
    }
    case wire::kMsgHarvest:
      if (size != sizeof(wire::HarvestMsg)) return DecodeStatus::kBadSize;
      std::memcpy(&out->harvest, data, sizeof(wire::HarvestMsg));
      if (out->harvest.host_end_ns < out->harvest.host_begin_ns) return DecodeStatus::kBadTimeRange;
      if (!ValidCall(out->harvest.call)) return DecodeStatus::kBadHostCall;
      break;
    case wire::kMsgStats:
      if (size != sizeof(wire::StatsMsg)) return DecodeStatus::kBadSize;
      std::memcpy(&out->stats, data, sizeof(wire::StatsMsg));
      break;
    case wire::kMsgNotice:
      if (!CopyFixed(data, size, &out->notice)) return DecodeStatus::kBadSize;
      st = CheckTail<wire::NoticeMsg>(size, out->notice.text_len);
      if (st != DecodeStatus::kOk) return st;
      out->text = {text_at + sizeof(wire::NoticeMsg), out->notice.text_len};
      break;
    case wire::kMsgThread:
      if (!CopyFixed(data, size, &out->thread)) return DecodeStatus::kBadSize;
      st = CheckTail<wire::ThreadMsg>(size, out->thread.name_len);
      if (st != DecodeStatus::kOk) return st;
      out->text = {text_at + sizeof(wire::ThreadMsg), out->thread.name_len};
      break;
    case wire::kMsgKernelName:
      if (!CopyFixed(data, size, &out->kernel_name)) return DecodeStatus::kBadSize;
      st = CheckTail<wire::KernelNameMsg>(size, out->kernel_name.name_len);
      if (st != DecodeStatus::kOk) return st;
      out->text = {text_at + sizeof(wire::KernelNameMsg), out->kernel_name.name_len};
      break;
    case wire::kMsgMarkerName:
      if (!CopyFixed(data, size, &out->marker_name)) return DecodeStatus::kBadSize;
      st = CheckTail<wire::MarkerNameMsg>(size, out->marker_name.name_len);
      if (st != DecodeStatus::kOk) return st;
      out->text = {text_at + sizeof(wire::MarkerNameMsg), out->marker_name.name_len};
      break;
    case wire::kMsgRecords: {
      if (!CopyFixed(data, size, &out->records)) return DecodeStatus::kBadSize;
      const uint64_t expected =
          sizeof(wire::RecordsMsg) + static_cast<uint64_t>(out->records.count) * sizeof(wire::KernelRecordEntry);
      if (expected != size) return DecodeStatus::kBadSize;
      out->payload = data + sizeof(wire::RecordsMsg);
      for (uint32_t i = 0; i < out->records.count; ++i) {
        const wire::KernelRecordEntry r = out->record(i);
        if (r.end_ns < r.start_ns) return DecodeStatus::kBadTimeRange;
        if (!ValidCall(r.call)) return DecodeStatus::kBadHostCall;
      }
      break;
    }
    case wire::kMsgChunks: {
      if (!CopyFixed(data, size, &out->chunks)) return DecodeStatus::kBadSize;
      const uint32_t bytes = out->chunks.chunk_bytes;
      if (bytes < 256 || bytes > 65536 || (bytes & (bytes - 1)) != 0) return DecodeStatus::kBadChunkSize;
      if ((out->chunks.flags & ~uint32_t{wire::kChunksUsedBytes}) != 0) return DecodeStatus::kBadChunkSize;
      out->payload = data + sizeof(wire::ChunksMsg);
      if ((out->chunks.flags & wire::kChunksUsedBytes) == 0) {
        const uint64_t expected = sizeof(wire::ChunksMsg) + static_cast<uint64_t>(out->chunks.count) * bytes;
        if (expected != size) return DecodeStatus::kBadSize;
        break;
      }
      // Each chunk's written part: its length, then that many bytes.
      uint64_t at = sizeof(wire::ChunksMsg);
      for (uint32_t i = 0; i < out->chunks.count; ++i) {
        if (at + sizeof(wire::ChunkBytes) > size) return DecodeStatus::kBadSize;
        wire::ChunkBytes c;
        std::memcpy(&c, data + at, sizeof(c));
        if (c.bytes > bytes || c.bytes % 8 != 0 || c.reserved != 0) return DecodeStatus::kBadChunkSize;
        at += sizeof(c) + c.bytes;
      }
      if (at != size) return DecodeStatus::kBadSize;
      break;
    }
    default:
      return DecodeStatus::kUnknownType;
  }
  out->type = static_cast<wire::MsgType>(h.type);
  return DecodeStatus::kOk;
}

}  // namespace smprof
