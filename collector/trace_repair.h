// Repairs a trace left unfinished by a collector that was killed (or cut
// short mid-write), in either format smprof writes:
//  * JSON (first byte '['): RepairTraceFile (trace_writer.h) drops a trailing
//    partial object and closes the array;
//  * Perfetto protobuf (first byte 0x0A, `Trace.packet` records): the file
//    is cut after its last whole packet (a packet's length prefix says where
//    it ends), so it is a valid trace of everything written whole.
// *repaired says whether the file was changed. False + *error (naming the
// file) if it cannot be read or written or is neither format.
#pragma once

#include <string>

namespace smprof {

bool RepairAnyTraceFile(const std::string& path, bool* repaired, std::string* error);

}  // namespace smprof
