// TraceFile: the file a trace writer streams into, shared by the Perfetto
// writer (protobuf packets, perfetto_sink.h) and the JSON writer (event
// objects, trace_writer.h).
//
// A writer builds whole records (a packet, an object) in the buffer and
// calls RecordEnd() after each; once the buffer holds kWriteThreshold bytes
// it goes to the file through write(2), and Flush() writes the rest. The file
// grows by whole records only, so a writer killed at any point leaves a
// prefix of whole records (unless a write was itself cut short).
//
// A failed write (disk full, EFBIG) is kept as error(): "writing trace file
// '<path>': <reason>", then what the format's cut (Format::cut) adds: it cuts
// the file after the last record that reached it whole, and closes the
// format's framing where it has one. From then on buffered bytes are
// discarded, nothing more is written, and Flush and Close return false.
//
// The buffer is written in place: Room(n) is where the next n bytes go and
// Commit(n) keeps them, so a writer can encode a record straight into it.
//
// Single-threaded: the writer owns its file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace smprof {

class TraceFile {
 public:
  // Buffered bytes that make RecordEnd write out.
  static constexpr size_t kWriteThreshold = 1u << 20;

  // What a trace format tells its file.
  struct Format {
    // Whether `cut` reads the file back: the file is then opened read-write.
    bool read_back;
    // After a failed write: cuts the file after its last whole record, and
    // closes the format's framing where it has one. The buffer being written
    // began at file offset `at`, and `reached` is the part of it that reached
    // the file. Returns how the error message goes on (where the trace ends
    // now); may set *written to the bytes of whole records the file holds
    // (it is at + reached.size() on the call).
    std::string (*cut)(int fd, uint64_t at, std::string_view reached, uint64_t* written);
  };

  TraceFile() = default;
  // Writes out what is buffered and closes; an error goes unreported.
  ~TraceFile();

  // Creates `path` (truncating it, or failing if it exists when `exclusive`).
  // False + *error on failure.
  bool Open(const std::string& path, bool exclusive, const Format& format, std::string* error);

  // Where `n` more bytes of the record under way go; Commit keeps those
  // written.
  char* Room(size_t n) {
    if (cap_ - size_ < n) Grow(n);
    return data_.get() + size_;
  }
  void Commit(size_t n) { size_ += n; }
  void Append(std::string_view bytes) {
    std::memcpy(Room(bytes.size()), bytes.data(), bytes.size());
    size_ += bytes.size();
  }
  // After each whole record: writes out once kWriteThreshold bytes wait.
  void RecordEnd() {
    if (size_ >= kWriteThreshold) WriteOut();
  }

  // Writes out what is buffered. False once any write failed.
  bool Flush();
  // Flushes and closes. Later calls do nothing. False if any write failed,
  // or closing did.
  bool Close();

  bool ok() const { return error_.empty(); }
  // The first error ("" if none).
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }
  // Bytes that reached the file (after an error: whole records of them).
  uint64_t bytes_written() const { return written_; }

  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

 private:
  void Grow(size_t n);
  void WriteOut();
  void FailWrite(int err, size_t done);

  int fd_ = -1;
  std::string path_;
  Format format_{false, nullptr};
  std::string error_;
  std::unique_ptr<char[]> data_;  // whole records not yet written, then the one under way
  size_t size_ = 0, cap_ = 0;
  uint64_t written_ = 0;
};

}  // namespace smprof
