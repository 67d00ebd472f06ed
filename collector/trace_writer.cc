#include "collector/trace_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace smprof {
namespace {

void AppendUint(std::string* out, uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) out->push_back(tmp[--n]);
}

void AppendInt(std::string* out, int64_t v) {
  if (v < 0) {
    out->push_back('-');
    AppendUint(out, static_cast<uint64_t>(0) - static_cast<uint64_t>(v));
  } else {
    AppendUint(out, static_cast<uint64_t>(v));
  }
}

// Length of the valid UTF-8 sequence starting at s[0], or 0 if invalid
// (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
size_t Utf8SequenceLength(const unsigned char* s, size_t avail) {
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (avail < len) return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; ++i) {
    if (s[i] < 0x80 || s[i] > 0xBF) return 0;
  }
  return len;
}

bool PreadAll(int fd, char* data, size_t size, uint64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

// Offset of the last '\n' in [0, end) of the file, -1 if none, -2 on a read error.
int64_t LastNewline(int fd, uint64_t end) {
  constexpr uint64_t kChunk = 64u << 10;
  std::vector<char> buf(kChunk);
  while (end > 0) {
    const uint64_t start = end > kChunk ? end - kChunk : 0;
    const size_t n = static_cast<size_t>(end - start);
    if (!PreadAll(fd, buf.data(), n, start)) return -2;
    for (size_t i = n; i-- > 0;) {
      if (buf[i] == '\n') return static_cast<int64_t>(start + i);
    }
    end = start;
  }
  return -1;
}

// Length of the JSON object (as the writer writes it) at the start of `text`:
// the index after its outermost closing brace, or 0 if it is cut. (Strings
// are skipped with their escapes; what the writer wrote before a cut is
// otherwise well formed.)
size_t WholeObjectLength(const std::string& text) {
  if (text.empty() || text[0] != '{') return 0;
  int64_t depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return 0;
}

// Appends "\n]\n" at `keep` after cutting the file there.
bool CloseAt(int fd, uint64_t keep) {
  if (::ftruncate(fd, static_cast<off_t>(keep)) != 0) return false;
  static const char kClose[] = "\n]\n";
  size_t done = 0;
  while (done < 3) {
    const ssize_t n = ::pwrite(fd, kClose + done, 3 - done, static_cast<off_t>(keep + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

namespace internal {

int64_t CompleteTracePrefix(int fd, uint64_t size, bool* closed) {
  *closed = false;
  if (size == 0) return -1;
  char first = 0;
  if (!PreadAll(fd, &first, 1, 0) || first != '[') return -1;
  if (size >= 3) {
    char last[3];
    if (!PreadAll(fd, last, 3, size - 3)) return -1;
    if (std::memcmp(last, "\n]\n", 3) == 0) {
      *closed = true;
      return static_cast<int64_t>(size);
    }
  }
  // '\n' occurs only in the framing ("[\n", ",\n" before each object but
  // the first, "\n]\n" at the end): strings escape it.
  uint64_t end = size;
  for (;;) {
    const int64_t p = LastNewline(fd, end);
    if (p == -2) return -1;
    if (p <= 0) return 1;  // nothing but "[" is whole
    char before = 0;
    if (!PreadAll(fd, &before, 1, static_cast<uint64_t>(p - 1))) return -1;
    if (before == ',' || (before == '[' && p == 1)) {
      // An object starts after this separator: keep it if it is whole.
      std::string tail(static_cast<size_t>(end - static_cast<uint64_t>(p) - 1), '\0');
      if (!tail.empty() && !PreadAll(fd, tail.data(), tail.size(), static_cast<uint64_t>(p) + 1)) {
        return -1;
      }
      // Whole, and followed by nothing or by the "," of a cut separator.
      const size_t len = WholeObjectLength(tail);
      if (len != 0 && (len == tail.size() || (len + 1 == tail.size() && tail[len] == ','))) {
        return p + 1 + static_cast<int64_t>(len);
      }
      return before == ',' ? p - 1 : 1;
    }
    if (before == '}') return p;     // a cut closing "\n]\n" after a whole object
    end = static_cast<uint64_t>(p);  // e.g. an empty trace cut inside "[\n\n]\n"
  }
}

}  // namespace internal

namespace {

// The JSON format's cut (TraceFile::Format): the file may end inside an
// object. Cut it after the last whole object and close the array; if even
// the three closing bytes do not fit, step back one object at a time.
std::string CloseAfterLastObject(int fd, uint64_t /*at*/, std::string_view /*reached*/, uint64_t* written) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return "; the trace may end inside an event";
  uint64_t end = static_cast<uint64_t>(st.st_size);
  for (;;) {
    bool closed = false;
    const int64_t keep = internal::CompleteTracePrefix(fd, end, &closed);
    if (keep > 0 && CloseAt(fd, static_cast<uint64_t>(keep))) {
      *written = static_cast<uint64_t>(keep) + 3;
      return "; the trace was cut after the last event written whole and closed";
    }
    if (keep <= 1) break;
    end = static_cast<uint64_t>(keep) - 1;  // cuts that object: the one before is kept
  }
  return "; the trace may end inside an event";
}

// Read access too: after a write error the file is read back.
constexpr TraceFile::Format kJsonFile{/*read_back=*/true, &CloseAfterLastObject};

}  // namespace

bool RepairTraceFile(const std::string& path, bool* repaired, std::string* error) {
  *repaired = false;
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    *error = "cannot open '" + path + "': " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0;
  if (ok && st.st_size == 0) {
    // Not even "[" reached the file.
    ok = ::pwrite(fd, "[\n]\n", 4, 0) == 4;
    *repaired = ok;
  } else if (ok) {
    bool closed = false;
    const int64_t keep = internal::CompleteTracePrefix(fd, static_cast<uint64_t>(st.st_size), &closed);
    if (keep < 0) {
      ::close(fd);
      *error = "'" + path + "' is not an smprof trace; left as it is";
      return false;
    }
    if (!closed) {
      ok = CloseAt(fd, static_cast<uint64_t>(keep));
      *repaired = ok;
    }
  }
  if (!ok) *error = "cannot repair '" + path + "': " + std::strerror(errno);
  if (::close(fd) != 0 && ok) {
    *error = "cannot repair '" + path + "': " + std::strerror(errno);
    ok = false;
  }
  return ok;
}

void AppendJsonString(std::string* out, std::string_view bytes) {
  static const char kHex[] = "0123456789abcdef";
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  out->push_back('"');
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      out->append("\\u00");
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 0xF]);
      ++i;
    } else if (c < 0x80) {
      out->push_back(static_cast<char>(c));
      ++i;
    } else {
      const size_t len = Utf8SequenceLength(s + i, n - i);
      if (len == 0) {
        out->append("\xEF\xBF\xBD");  // U+FFFD for one bad byte
        ++i;
      } else {
        out->append(reinterpret_cast<const char*>(s + i), len);
        i += len;
      }
    }
  }
  out->push_back('"');
}

void AppendMicros(std::string* out, uint64_t ns) {
  AppendUint(out, ns / 1000);
  const uint64_t frac = ns % 1000;
  out->push_back('.');
  out->push_back(static_cast<char>('0' + frac / 100));
  out->push_back(static_cast<char>('0' + frac / 10 % 10));
  out->push_back(static_cast<char>('0' + frac % 10));
}

// --- JsonArgs ---------------------------------------------------------------

void JsonArgs::Key(std::string_view key) {
  if (!body_.empty()) body_.push_back(',');
  AppendJsonString(&body_, key);
  body_.push_back(':');
}

JsonArgs& JsonArgs::Uint(std::string_view key, uint64_t value) {
  Key(key);
  AppendUint(&body_, value);
  return *this;
}

JsonArgs& JsonArgs::Int(std::string_view key, int64_t value) {
  Key(key);
  AppendInt(&body_, value);
  return *this;
}

JsonArgs& JsonArgs::Bool(std::string_view key, bool value) {
  Key(key);
  body_.append(value ? "true" : "false");
  return *this;
}

JsonArgs& JsonArgs::String(std::string_view key, std::string_view value) {
  Key(key);
  AppendJsonString(&body_, value);
  return *this;
}

JsonArgs& JsonArgs::Uint3(std::string_view key, const uint32_t value[3]) {
  Key(key);
  body_.push_back('[');
  for (int i = 0; i < 3; ++i) {
    if (i) body_.push_back(',');
    AppendUint(&body_, value[i]);
  }
  body_.push_back(']');
  return *this;
}

JsonArgs& JsonArgs::Raw(std::string_view key, std::string_view json) {
  Key(key);
  body_.append(json);
  return *this;
}

std::string JsonArgs::str() const {
  std::string s;
  s.reserve(body_.size() + 2);
  s.push_back('{');
  s.append(body_);
  s.push_back('}');
  return s;
}

// --- TraceWriter ------------------------------------------------------------

std::unique_ptr<TraceWriter> TraceWriter::Open(const std::string& path, std::string* error, bool exclusive) {
  std::unique_ptr<TraceWriter> writer(new TraceWriter());
  if (!writer->file_.Open(path, exclusive, kJsonFile, error)) return nullptr;
  writer->file_.Append("[\n");
  if (!writer->Flush()) {
    if (error) *error = writer->error();
    return nullptr;
  }
  return writer;
}

TraceWriter::~TraceWriter() = default;

bool TraceWriter::Flush() { return file_.Flush(); }

void TraceWriter::Begin(char phase, uint32_t pid) {
  object_.clear();
  if (objects_ != 0) object_.append(",\n");
  object_.append("{\"ph\":\"");
  object_.push_back(phase);
  object_.append("\",\"pid\":");
  AppendUint(&object_, pid);
}

void TraceWriter::End() {
  object_.push_back('}');
  ++objects_;
  file_.Append(object_);
  file_.RecordEnd();
}

void TraceWriter::BeginNamed(char phase, uint32_t pid, const uint32_t* tid, std::string_view name,
                             const char* before_cat) {
  Begin(phase, pid);
  if (tid != nullptr) {
    object_.append(",\"tid\":");
    AppendUint(&object_, *tid);
  }
  object_.append(before_cat);
  object_.append(",\"cat\":\"smprof\",\"name\":");
  AppendJsonString(&object_, name);
}

void TraceWriter::ProcessName(uint32_t pid, std::string_view name) {
  if (!writable()) return;
  Begin('M', pid);
  object_.append(",\"name\":\"process_name\",\"args\":{\"name\":");
  AppendJsonString(&object_, name);
  object_.push_back('}');
  End();
}

void TraceWriter::ProcessLabels(uint32_t pid, std::string_view labels) {
  if (!writable()) return;
  Begin('M', pid);
  object_.append(",\"name\":\"process_labels\",\"args\":{\"labels\":");
  AppendJsonString(&object_, labels);
  object_.push_back('}');
  End();
}

void TraceWriter::ProcessSortIndex(uint32_t pid, int64_t index) {
  if (!writable()) return;
  Begin('M', pid);
  object_.append(",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":");
  AppendInt(&object_, index);
  object_.push_back('}');
  End();
}

void TraceWriter::ThreadName(uint32_t pid, uint32_t tid, std::string_view name) {
  if (!writable()) return;
  Begin('M', pid);
  object_.append(",\"tid\":");
  AppendUint(&object_, tid);
  object_.append(",\"name\":\"thread_name\",\"args\":{\"name\":");
  AppendJsonString(&object_, name);
  object_.push_back('}');
  End();
}

void TraceWriter::ThreadSortIndex(uint32_t pid, uint32_t tid, int64_t index) {
  if (!writable()) return;
  Begin('M', pid);
  object_.append(",\"tid\":");
  AppendUint(&object_, tid);
  object_.append(",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":");
  AppendInt(&object_, index);
  object_.push_back('}');
  End();
}

void TraceWriter::Complete(uint32_t pid, uint32_t tid, std::string_view name, uint64_t ts_ns, uint64_t dur_ns,
                           const JsonArgs* args, JsonFlow flow) {
  if (!writable()) return;
  BeginNamed('X', pid, &tid, name);
  object_.append(",\"ts\":");
  AppendMicros(&object_, ts_ns);
  object_.append(",\"dur\":");
  AppendMicros(&object_, dur_ns);
  if (flow.id != 0) {
    object_.append(",\"bind_id\":");
    AppendUint(&object_, flow.id);
    if (flow.in) object_.append(",\"flow_in\":true");
    if (flow.out) object_.append(",\"flow_out\":true");
  }
  if (args != nullptr) {
    object_.append(",\"args\":");
    object_.append(args->str());
  }
  End();
}

void TraceWriter::Instant(uint32_t pid, uint32_t tid, std::string_view name, uint64_t ts_ns, const JsonArgs* args) {
  if (!writable()) return;
  BeginNamed('i', pid, &tid, name, ",\"s\":\"t\"");
  object_.append(",\"ts\":");
  AppendMicros(&object_, ts_ns);
  if (args != nullptr) {
    object_.append(",\"args\":");
    object_.append(args->str());
  }
  End();
}

void TraceWriter::Counter(uint32_t pid, std::string_view name, uint64_t ts_ns, const JsonArgs& args) {
  CounterEvent(pid, nullptr, name, ts_ns, args);
}

void TraceWriter::Counter(uint32_t pid, uint32_t tid, std::string_view name, uint64_t ts_ns, const JsonArgs& args) {
  CounterEvent(pid, &tid, name, ts_ns, args);
}

void TraceWriter::CounterEvent(uint32_t pid, const uint32_t* tid, std::string_view name, uint64_t ts_ns,
                               const JsonArgs& args) {
  if (!writable()) return;
  BeginNamed('C', pid, tid, name);
  object_.append(",\"ts\":");
  AppendMicros(&object_, ts_ns);
  object_.append(",\"args\":");
  object_.append(args.str());
  End();
}

void TraceWriter::Async(char phase, uint32_t pid, uint32_t tid, std::string_view name, uint64_t ts_ns, uint64_t id,
                        const JsonArgs* args) {
  if (!writable()) return;
  BeginNamed(phase, pid, &tid, name);
  char hex[24];
  std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(id));
  object_.append(",\"id2\":{\"local\":\"");
  object_.append(hex);
  object_.append("\"},\"ts\":");
  AppendMicros(&object_, ts_ns);
  if (args != nullptr) {
    object_.append(",\"args\":");
    object_.append(args->str());
  }
  End();
}

void TraceWriter::Flow(char phase, uint32_t pid, uint32_t tid, std::string_view name, uint64_t ts_ns, uint64_t id) {
  if (!writable()) return;
  BeginNamed(phase, pid, &tid, name);
  object_.append(",\"id\":");
  AppendUint(&object_, id);
  object_.append(",\"ts\":");
  AppendMicros(&object_, ts_ns);
  if (phase == 'f') object_.append(",\"bp\":\"e\"");
  End();
}

bool TraceWriter::Finish() {
  if (finished_) return ok();
  finished_ = true;
  file_.Append("\n]\n");
  return file_.Close();
}

}  // namespace smprof
