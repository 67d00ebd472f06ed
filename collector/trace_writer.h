// Streaming writer of one Chrome/Perfetto JSON trace (array form).
//
// File layout: "[\n", then one event object per line, lines separated by
// ",\n" (the separator is written *before* each object but the first), and
// Finish() appends "\n]\n". Each object is one record of the TraceFile
// (trace_file.h): it reaches the file only whole, so whatever a killed
// collector leaves on disk is "[" plus complete objects (unless a write was
// cut short): appending "]" makes it strict JSON, and Perfetto accepts it as
// is (an unclosed array is valid). RepairTraceFile also handles a cut write.
// A raw '\n' appears only in this framing (strings escape it).
//
// Timestamps are passed as integer nanoseconds already relative to the trace
// base and printed as microseconds with exactly three decimals ("1234.567"):
// no doubles anywhere, so nanosecond detail survives at any run length.
//
// Strings are untrusted bytes: AppendJsonString escapes quotes, backslashes
// and control characters (\u00XX) and replaces invalid UTF-8 with U+FFFD, so
// the output is always valid JSON whatever the input.
//
// Write errors (disk full, EFBIG): the file is cut after the last object
// that reached it whole and "\n]\n" appended so it stays strict JSON (found
// by reading the file back, as RepairTraceFile does: when the closing does
// not fit, whole objects are dropped from the end until it does); the error
// is reported (error(), Finish() false) and nothing more is written.
//
// Single-threaded: the collector owns the writer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "collector/trace_file.h"

namespace smprof {

// Appends `bytes` as a quoted JSON string.
void AppendJsonString(std::string* out, std::string_view bytes);
// Appends `ns` as microseconds with exactly three decimals: 1234567 -> "1234.567".
void AppendMicros(std::string* out, uint64_t ns);

// Builds the text of one JSON object ("args") key by key. Keys are trusted
// literals but are escaped anyway.
class JsonArgs {
 public:
  JsonArgs& Uint(std::string_view key, uint64_t value);
  JsonArgs& Int(std::string_view key, int64_t value);
  JsonArgs& Bool(std::string_view key, bool value);
  JsonArgs& String(std::string_view key, std::string_view value);
  JsonArgs& Uint3(std::string_view key, const uint32_t value[3]);
  // `json` must be one complete, valid JSON value.
  JsonArgs& Raw(std::string_view key, std::string_view json);

  bool empty() const { return body_.empty(); }
  // "{...}".
  std::string str() const;

 private:
  void Key(std::string_view key);
  std::string body_;
};

// Makes a trace left unfinished (writer killed, or cut mid-write) strict
// JSON: drops a trailing partial object and appends "\n]\n". A file that
// already ends with "\n]\n" is left as it is (*repaired false); an empty
// file becomes "[\n]\n". False + *error if the file cannot be read or
// written or does not start with '['.
bool RepairTraceFile(const std::string& path, bool* repaired, std::string* error);

namespace internal {
// For the first `size` bytes of a trace file open for reading: the length of
// the longest prefix that "\n]\n" turns into strict JSON ("[" plus whole
// objects), or `size` with *closed true if it already ends with "\n]\n";
// -1 if it does not start with '[' or cannot be read.
int64_t CompleteTracePrefix(int fd, uint64_t size, bool* closed);
}  // namespace internal

// A flow arrow end on an "X" event (flow v2): `out` starts flow `id` at the
// slice, `in` and `out` both continue it through the slice (the next slice
// with `id` follows it), `in` alone ends it there.
struct JsonFlow {
  uint64_t id = 0;  // 0: none
  bool in = false, out = false;
};

class TraceWriter {
 public:
  // Creates `path` (truncating it, or failing if it exists when `exclusive`)
  // and writes "[\n". nullptr + *error on failure.
  static std::unique_ptr<TraceWriter> Open(const std::string& path, std::string* error, bool exclusive = false);
  // Writes out buffered objects but does not close the array (see Finish).
  ~TraceWriter();

  void ProcessName(uint32_t pid, std::string_view name);
  // Perfetto shows labels beside the process name (comma-separated).
  void ProcessLabels(uint32_t pid, std::string_view labels);
  void ProcessSortIndex(uint32_t pid, int64_t index);
  void ThreadName(uint32_t pid, uint32_t tid, std::string_view name);
  void ThreadSortIndex(uint32_t pid, uint32_t tid, int64_t index);
  // "X" event. `args` may be null.
  void Complete(uint32_t pid, uint32_t tid, std::string_view name, uint64_t ts_ns, uint64_t dur_ns,
                const JsonArgs* args, JsonFlow flow = JsonFlow());
  // Thread-scoped instant ("i", s:"t"). `args` may be null.
  void Instant(uint32_t pid, uint32_t tid, std::string_view name, uint64_t ts_ns, const JsonArgs* args);
  // Process-scoped counter ("C"); every numeric arg becomes one series.
  void Counter(uint32_t pid, std::string_view name, uint64_t ts_ns, const JsonArgs& args);
  // The same with a "tid" (Perfetto keeps counters per process: the args'
  // keys tell threads' series apart).
  void Counter(uint32_t pid, uint32_t tid, std::string_view name, uint64_t ts_ns, const JsonArgs& args);
  // Nestable async event ("b" or "e"), process-scoped: "id2":{"local":"0x<id>"}
  // pairs a "b" with its "e". `args` may be null.
  void Async(char phase, uint32_t pid, uint32_t tid, std::string_view name, uint64_t ts_ns, uint64_t id,
             const JsonArgs* args);
  // Flow v1 ("s" or "f", "id" `id`): "s" binds to the slice open on the
  // thread at `ts_ns`, "f" (with "bp":"e") to the one enclosing `ts_ns`.
  void Flow(char phase, uint32_t pid, uint32_t tid, std::string_view name, uint64_t ts_ns, uint64_t id);

  // Writes buffered objects to the file. False once any write failed.
  bool Flush();
  // Appends "\n]\n", flushes and closes. Later calls do nothing. False if any
  // write failed.
  bool Finish();

  const std::string& path() const { return file_.path(); }
  uint64_t objects_written() const { return objects_; }
  bool ok() const { return file_.ok(); }
  // First write error ("" if none).
  const std::string& error() const { return file_.error(); }

  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

 private:
  TraceWriter() = default;
  bool writable() const { return !finished_ && file_.ok(); }
  // Begin, then "tid" (when not null), `before_cat` (raw JSON), "cat" and "name".
  void BeginNamed(char phase, uint32_t pid, const uint32_t* tid, std::string_view name, const char* before_cat = "");
  // A "C" event, with a "tid" when `tid` is not null.
  void CounterEvent(uint32_t pid, const uint32_t* tid, std::string_view name, uint64_t ts_ns, const JsonArgs& args);
  // Starts an object: separator, "{", "ph":..., "pid":...
  void Begin(char phase, uint32_t pid);
  // Ends it and hands it to the file.
  void End();

  TraceFile file_;
  std::string object_;  // the object under way, with its separator
  uint64_t objects_ = 0;
  bool finished_ = false;
};

}  // namespace smprof
