// Standalone driver for the fuzz targets of tests/fuzz/ where libFuzzer is
// not available (g++ builds). No coverage feedback: it starts from the
// target's seeds (valid messages from tests/support/wire_builders.h) and
// applies structure-aware mutations that keep inputs near the wire format,
// deterministically for a given --seed:
//   bit flips; bytes set to 0, 0xff, 0x7f, 0x80; aligned 32/64-bit fields set
//   to boundary values, or to the input's size, remaining bytes or remaining
//   events from that field on (so declared lengths and counts of any message
//   type can come out right); truncation; extension; splicing and
//   concatenating two inputs; message headers (found by walking the frames)
//   given another type, including unknown ones, or another size; then, for
//   three inputs in four, the first header's size is repaired to the input's
//   (mostly with the input cut or padded to a multiple of 8), so that the
//   checks behind the size check run.
// Mutated inputs sometimes replace entries of a bounded pool, so mutations
// accumulate; half the inputs start from a seed again. Every input runs from
// an exactly sized heap buffer, so that ASan flags a read past its end.
//
// A crash (sanitizer report, abort, fatal signal) or an input running longer
// than --timeout saves the input as crash-<target>-<n>.bin (replay it with
// FILE arguments) and ends the process; the closing line therefore always
// reports 0 crashes:
//   message_decoder_fuzz: 10000000 inputs in 123.4 s (81000 inputs/s), 0 crashes
#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "smprof/wire.h"
#include "tests/fuzz/fuzz_target.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#include <sanitizer/common_interface_defs.h>
#define SMPROF_FUZZ_SANITIZED 1
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace smprof::fuzz {
namespace {

constexpr size_t kPoolSize = 1024;

struct Options {
  uint64_t iterations = 0;  // 0: no limit
  double seconds = 0;       // 0: no limit
  uint64_t seed = 1;
  unsigned timeout_s = 30;
  std::vector<std::string> files;
};

void Usage(FILE* out, const char* argv0) {
  std::fprintf(out,
               "usage: %s [--iterations N] [--seconds S] [--seed X] [--timeout S] [FILE...]\n"
               "  Mutates the target's seed inputs until N inputs ran or S seconds passed\n"
               "  (without either: 100000 inputs). --seed makes the sequence reproducible\n"
               "  (default 1); an input running over --timeout seconds (default 30) counts as\n"
               "  a hang. With FILEs, runs each file once instead (to replay a crash).\n",
               argv0);
}

bool ParseUint(const char* text, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') return false;
  *out = v;
  return true;
}

enum class Parse { kRun, kHelp, kBad };

Parse ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return Parse::kHelp;
    const bool has_value = i + 1 < argc;
    uint64_t v = 0;
    if (arg == "--iterations" && has_value && ParseUint(argv[i + 1], &v)) {
      o->iterations = v;
      ++i;
    } else if (arg == "--seconds" && has_value) {
      char* end = nullptr;
      o->seconds = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(o->seconds > 0)) return Parse::kBad;
    } else if (arg == "--seed" && has_value && ParseUint(argv[i + 1], &v)) {
      o->seed = v;
      ++i;
    } else if (arg == "--timeout" && has_value && ParseUint(argv[i + 1], &v) && v > 0 && v < 100000) {
      o->timeout_s = static_cast<unsigned>(v);
      ++i;
    } else if (!arg.empty() && arg[0] != '-') {
      o->files.push_back(arg);
    } else {
      return Parse::kBad;
    }
  }
  if (o->iterations == 0 && o->seconds == 0) o->iterations = 100000;
  return Parse::kRun;
}

// ---- Crash and hang reporting -------------------------------------------

// The input being run, for the crash paths (plain data: read from signal
// handlers and sanitizer callbacks, which only write(2) it out).
const char* g_name = "fuzz";
const uint8_t* volatile g_input = nullptr;
volatile size_t g_input_size = 0;
std::atomic<uint64_t> g_inputs_run{0};
uint64_t g_inputs_at_last_tick = 0;
char g_crash_path[256];

void WriteString(const char* s) {
  if (write(STDERR_FILENO, s, std::strlen(s)) < 0) return;
}

void SaveInput() {
  const uint8_t* input = g_input;
  const size_t size = g_input_size;
  if (input == nullptr) return;
  const int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, input + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  WriteString(g_name);
  WriteString(": the input being run is saved as ");
  WriteString(g_crash_path);
  WriteString("\n");
}

void OnFatalSignal(int sig) {
  WriteString(g_name);
  WriteString(": fatal signal\n");
  SaveInput();
  signal(sig, SIG_DFL);
  raise(sig);
}

void OnTick(int) {
  const uint64_t now = g_inputs_run.load(std::memory_order_relaxed);
  if (now != g_inputs_at_last_tick || g_input == nullptr) {
    g_inputs_at_last_tick = now;
    return;
  }
  WriteString(g_name);
  WriteString(": an input ran past the timeout (hang)\n");
  SaveInput();
  signal(SIGABRT, SIG_DFL);
  abort();
}

void Handle(int sig, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  action.sa_flags = SA_RESTART;  // the targets' system calls must not see EINTR
  sigemptyset(&action.sa_mask);
  sigaction(sig, &action, nullptr);
}

void InstallCrashHandlers(unsigned timeout_s) {
  std::snprintf(g_crash_path, sizeof(g_crash_path), "crash-%s-%d.bin", g_name, static_cast<int>(getpid()));
  // A sanitizer reports faults itself (with a stack), then calls back.
#ifdef SMPROF_FUZZ_SANITIZED
  __sanitizer_set_death_callback(SaveInput);
#else
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) Handle(sig, OnFatalSignal);
#endif
  Handle(SIGABRT, OnFatalSignal);
  // Two ticks without progress: one input ran between one and two timeouts.
  Handle(SIGALRM, OnTick);
  itimerval tick{};
  tick.it_interval.tv_sec = timeout_s;
  tick.it_value.tv_sec = timeout_s;
  setitimer(ITIMER_REAL, &tick, nullptr);
}

// Runs one input from an exactly sized heap buffer.
void RunOne(const Bytes& input) {
  std::unique_ptr<uint8_t[]> exact(new uint8_t[input.size()]);  // size 0 too: any read is flagged
  if (!input.empty()) std::memcpy(exact.get(), input.data(), input.size());
  g_input_size = input.size();
  g_input = exact.get();
  LLVMFuzzerTestOneInput(exact.get(), input.size());
  g_input = nullptr;
  g_inputs_run.fetch_add(1, std::memory_order_relaxed);
}

// ---- Mutations -------------------------------------------------------------

class Mutator {
 public:
  Mutator(const TargetInfo& target, uint64_t seed) : target_(target), rng_(seed) {}

  // A new input from a seed (half the time) or any pool entry.
  Bytes Next(const std::vector<Bytes>& pool) {
    Bytes b = pool[Below(2) == 0 ? Below(target_.seeds.size()) : Below(pool.size())];
    const int rounds = Below(4) == 0 ? 2 + static_cast<int>(Below(4)) : 1;
    for (int i = 0; i < rounds; ++i) Mutate(&b, pool);
    if (Below(4) != 0) RepairFirstSize(&b);
    return b;
  }

 private:
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  // Offsets of the message headers from the target's stream offset on, as
  // far as sizes chain; at least the stream offset when a header fits there.
  std::vector<size_t> Headers(const Bytes& b) const {
    std::vector<size_t> at;
    size_t o = target_.stream_offset;
    while (o + sizeof(wire::MsgHeader) <= b.size() && at.size() < 64) {
      at.push_back(o);
      uint32_t size = 0;
      std::memcpy(&size, b.data() + o + 4, sizeof(size));
      if (size < sizeof(wire::MsgHeader) || size % wire::kMsgAlign != 0 || size > b.size() - o) break;
      o += size;
    }
    return at;
  }

  template <typename T>
  void Store(Bytes* b, size_t at, T v) {
    if (at + sizeof(T) <= b->size()) std::memcpy(b->data() + at, &v, sizeof(T));
  }

  // A value for a 32-bit field at `at`: a boundary, or derived from the
  // input's size (a length or count that makes the message consistent).
  uint32_t Value32(const Bytes& b, size_t at) {
    const size_t stream = std::min(b.size(), target_.stream_offset);
    const auto size = static_cast<uint32_t>(b.size() - stream);
    const uint32_t rest = static_cast<uint32_t>(b.size() - at - 4);  // bytes after the field
    // A tail after the field and the u32 beside it (len of ..., reserved).
    const uint32_t tail = rest >= 4 ? rest - 4 : 0;
    switch (Below(14)) {
      case 0: return 0;
      case 1: return 1;
      case 2: return 0x7fffffffu;
      case 3: return 0x80000000u;
      case 4: return 0xffffffffu;
      case 5: return size;
      case 6: return rest;
      case 7: return tail;
      case 8: return rest / static_cast<uint32_t>(sizeof(wire::WireEvent));
      case 9: return tail / static_cast<uint32_t>(sizeof(wire::WireEvent));
      case 10: return wire::kMaxMessageBytes + static_cast<uint32_t>(Below(3)) * 8 - 8;
      case 11: return (64u << 10) + static_cast<uint32_t>(Below(3)) - 1;  // the string limit
      case 12: return static_cast<uint32_t>(Below(wire::kMsgLastType + 3));  // types, kinds
      default: return static_cast<uint32_t>(rng_());
    }
  }

  uint64_t Value64() {
    switch (Below(9)) {
      case 0: return 0;
      case 1: return 1;
      case 2: return 0x7fffffffffffffffull;
      case 3: return 0x8000000000000000ull;
      case 4: return ~0ull;
      case 5: return ~0ull - Below(64);
      case 6: return 1ull << Below(64);
      case 7: return (1ull << 16) + Below(3) * 8 - 8;  // around a 64 KiB ring
      default: return rng_();
    }
  }

  void Mutate(Bytes* b, const std::vector<Bytes>& pool) {
    switch (Below(12)) {
      case 0: {  // bit flips
        if (b->empty()) break;
        for (uint64_t n = 1 + Below(4); n > 0; --n) {
          const uint64_t bit = Below(b->size() * 8);
          (*b)[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        }
        break;
      }
      case 1: {  // an interesting byte
        static constexpr uint8_t kBytes[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0xfe};
        if (!b->empty()) (*b)[Below(b->size())] = kBytes[Below(sizeof(kBytes))];
        break;
      }
      case 2:
      case 3: {  // an aligned 32-bit field
        if (b->size() < 4) break;
        const size_t at = Below(b->size() / 4) * 4;
        Store(b, at, Value32(*b, at));
        break;
      }
      case 4: {  // an aligned 64-bit field
        if (b->size() < 8) break;
        Store(b, Below(b->size() / 8) * 8, Value64());
        break;
      }
      case 5: {  // truncation, often to a multiple of 8
        if (b->empty()) break;
        size_t n = Below(b->size());
        if (Below(2) == 0) n &= ~size_t{7};
        b->resize(n);
        break;
      }
      case 6: {  // extension: zeros, random bytes, or up to a boundary size
        size_t n = Below(3) == 0 ? 8 * (1 + Below(32)) : 1 + Below(64);
        if (Below(4096) == 0) n = wire::kMaxMessageBytes + 8 * Below(3) - 8;
        n = std::min(n, target_.max_input_bytes - std::min(target_.max_input_bytes, b->size()));
        const bool random = Below(2) == 0;
        for (size_t i = 0; i < n; ++i) b->push_back(random ? static_cast<uint8_t>(rng_()) : 0);
        break;
      }
      case 7: {  // splice: a prefix of this input, a suffix of another
        const Bytes& other = pool[Below(pool.size())];
        const size_t keep = Below(b->size() + 1);
        const size_t from = Below(other.size() + 1);
        b->resize(keep);
        b->insert(b->end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        break;
      }
      case 8: {  // concatenation: another input's messages after these
        const Bytes& other = pool[Below(pool.size())];
        const size_t skip = std::min(other.size(), target_.stream_offset);
        b->insert(b->end(), other.begin() + static_cast<std::ptrdiff_t>(skip), other.end());
        break;
      }
      case 9:
      case 10: {  // a header's type or size rewritten
        const std::vector<size_t> headers = Headers(*b);
        if (headers.empty()) break;
        const size_t at = headers[Below(headers.size())];
        if (Below(2) == 0) {
          const auto type = static_cast<uint32_t>(Below(4) == 0 ? rng_() : Below(wire::kMsgLastType + 2));
          Store(b, at, type);
        } else {
          const auto rest = static_cast<uint32_t>(b->size() - at);
          const uint32_t sizes[] = {rest, rest & ~7u, 0, 8, static_cast<uint32_t>(8 * Below(64)),
                                    rest + 8, static_cast<uint32_t>(rng_())};
          Store(b, at + 4, sizes[Below(std::size(sizes))]);
        }
        break;
      }
      default: {  // a run of random bytes
        if (b->empty()) break;
        const size_t at = Below(b->size());
        const size_t n = std::min<size_t>(1 + Below(16), b->size() - at);
        for (size_t i = 0; i < n; ++i) (*b)[at + i] = static_cast<uint8_t>(rng_());
        break;
      }
    }
    if (b->size() > target_.max_input_bytes) b->resize(target_.max_input_bytes);
  }

  // The first header's size := the bytes from it to the end of the input,
  // mostly after padding or cutting the input to a multiple of 8 from there.
  void RepairFirstSize(Bytes* b) {
    const size_t at = target_.stream_offset;
    if (b->size() < at + sizeof(wire::MsgHeader)) return;
    if (Below(4) != 0) {
      const size_t rest = b->size() - at;
      b->resize(at + (Below(2) == 0 ? rest & ~size_t{7} : wire::PaddedSize(static_cast<uint32_t>(rest))));
    }
    Store(b, at + 4, static_cast<uint32_t>(b->size() - at));
  }

  const TargetInfo& target_;
  std::mt19937_64 rng_;
};

bool ReadFile(const std::string& path, Bytes* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace
}  // namespace smprof::fuzz

int main(int argc, char** argv) {
  using namespace smprof::fuzz;
  Options options;
  switch (ParseArgs(argc, argv, &options)) {
    case Parse::kRun:
      break;
    case Parse::kHelp:
      Usage(stdout, argv[0]);
      return 0;
    case Parse::kBad:
      Usage(stderr, argv[0]);
      return 2;
  }
  const TargetInfo target = GetTargetInfo();
  g_name = target.name;
  InstallCrashHandlers(options.timeout_s);

  if (!options.files.empty()) {
    for (const std::string& path : options.files) {
      Bytes input;
      if (!ReadFile(path, &input)) {
        std::fprintf(stderr, "%s: cannot read %s\n", target.name, path.c_str());
        return 2;
      }
      RunOne(input);
      std::printf("%s: %s ran (%zu bytes)\n", target.name, path.c_str(), input.size());
    }
    return 0;
  }

  std::vector<Bytes> pool = target.seeds;
  const size_t seeds = pool.size();
  Mutator mutator(target, options.seed);
  std::mt19937_64 pool_rng(options.seed ^ 0x9e3779b97f4a7c15ull);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  for (const Bytes& seed : target.seeds) RunOne(seed);
  uint64_t n = target.seeds.size();
  uint64_t next_report = 1'000'000;
  for (;;) {
    if (options.iterations != 0 && n >= options.iterations) break;
    if (options.seconds != 0 && n % 256 == 0 && elapsed() >= options.seconds) break;
    Bytes input = mutator.Next(pool);
    RunOne(input);
    ++n;
    if (pool_rng() % 16 == 0) {
      if (pool.size() < kPoolSize) {
        pool.push_back(std::move(input));
      } else {
        pool[seeds + pool_rng() % (kPoolSize - seeds)] = std::move(input);
      }
    }
    if (n == next_report) {
      std::fprintf(stderr, "%s: %" PRIu64 " inputs, %.1f s\n", target.name, n, elapsed());
      next_report += 1'000'000;
    }
  }
  const double seconds = elapsed();
  std::printf("%s\n", TargetSummary().c_str());
  std::printf("%s: %" PRIu64 " inputs in %.1f s (%.0f inputs/s), 0 crashes\n", target.name, n, seconds,
              seconds > 0 ? static_cast<double>(n) / seconds : 0.0);
  return 0;
}
