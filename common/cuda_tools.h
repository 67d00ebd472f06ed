// Recognising the other CUDA tools smprof must step aside for.
//
// Nsight Compute and Nsight Systems inject into their target processes
// themselves (LD_PRELOAD plus CUDA_INJECTION64_PATH), refuse to start when
// CUDA_INJECTION64_PATH is already set, and hold CUPTI in their targets.
// (compute-sanitizer does neither: under it smprof's CUPTI subscription fails
// and the injector says so, naming the holder CUPTI reports.) So
// smprof never competes with them: smprof-run does not inject a run that
// another tool already injects into, the preload shim clears smprof's
// injection in a tool's own process before the tool reads its environment,
// and the injector does not subscribe in a process another tool injected.
//
// Header-only on std::string_view and with no allocation, so that the
// preload shim (loaded into every process of a run) uses it without linking
// anything.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <string_view>

namespace smprof::cuda_tools {

inline std::string_view Basename(std::string_view path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// The tool whose front end (the command a user types) is `exe`, or "".
inline std::string_view FrontendTool(std::string_view exe) {
  const std::string_view name = Basename(exe);
  if (name == "ncu" || name == "nv-nsight-cu-cli" || name == "ncu.bin") return "Nsight Compute (ncu)";
  if (name == "nsys" || name == "nsys.bin") return "Nsight Systems (nsys)";
  return "";
}

inline bool IsInterpreter(std::string_view exe) {
  const std::string_view name = Basename(exe);
  for (std::string_view shell : {"sh", "bash", "dash", "zsh", "ksh"}) {
    if (name == shell) return true;
  }
  return name.substr(0, 6) == "python" || name.substr(0, 4) == "perl";
}

// The tool front end a process is running, from its executable and the first
// two words of its command line: a front end may be a binary, or a script
// (then the executable is its interpreter and argv[1] the script).
inline std::string_view FrontendToolOfProcess(std::string_view exe, std::string_view argv0, std::string_view argv1) {
  std::string_view tool = FrontendTool(exe);
  if (tool.empty()) tool = FrontendTool(argv0);
  if (tool.empty() && IsInterpreter(exe)) tool = FrontendTool(argv1);
  return tool;
}

// FrontendToolOfProcess for the calling process (/proc/self/exe and
// /proc/self/cmdline), without allocating: usable from a constructor of a
// library preloaded into every process.
inline std::string_view FrontendToolOfSelf() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe));
  char cmdline[8192];
  ssize_t m = 0;
  if (const int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC); fd >= 0) {
    m = read(fd, cmdline, sizeof(cmdline));
    close(fd);
  }
  const std::string_view words(cmdline, m > 0 ? static_cast<size_t>(m) : 0);
  const size_t end0 = words.find('\0');
  const std::string_view argv0 = words.substr(0, end0);
  std::string_view argv1;
  if (end0 != std::string_view::npos) argv1 = words.substr(end0 + 1, words.find('\0', end0 + 1) - end0 - 1);
  return FrontendToolOfProcess(n > 0 ? std::string_view(exe, static_cast<size_t>(n)) : std::string_view(), argv0,
                               argv1);
}

// The tool a preloaded or injected library belongs to, or "" if `path` is
// not a known NVIDIA tool library.
inline std::string_view ToolOfLibrary(std::string_view path) {
  const std::string_view name = Basename(path);
  const auto starts = [&](std::string_view prefix) { return name.substr(0, prefix.size()) == prefix; };
  if (starts("libToolsInjection")) return "Nsight Systems (nsys)";
  if (starts("libInterceptorInjectionTarget") || starts("libcuda-injection")) {
    return path.find("nsight-systems") != std::string_view::npos ? "Nsight Systems (nsys)" : "Nsight Compute (ncu)";
  }
  return "";
}

// True when `injection` (the value of CUDA_INJECTION64_PATH) is set and is
// not `own_injector` (smprof's, compared by file name: the same library may
// be reached through different directories).
inline bool IsForeignInjection(std::string_view injection, std::string_view own_injector) {
  if (injection.empty()) return false;
  if (!own_injector.empty() && injection == own_injector) return false;
  return Basename(injection) != "libsmprof_inject.so";
}

// Calls f(entry) for each ':' or ' ' separated entry of an LD_PRELOAD value.
template <typename F>
void ForEachPreload(std::string_view preload, F&& f) {
  size_t start = 0;
  while (start < preload.size()) {
    size_t end = preload.find_first_of(": ", start);
    if (end == std::string_view::npos) end = preload.size();
    if (end > start) f(preload.substr(start, end - start));
    start = end + 1;
  }
}

// Nsight Compute and Nsight Systems hide their injection from the processes
// they start (no LD_PRELOAD or CUDA_INJECTION64_PATH visible there), but
// leave their transport settings in the environment: "NV_NSIGHT_INJECTION_...".
inline constexpr std::string_view kNsightInjectionPrefix = "NV_NSIGHT_INJECTION_";

// The first "NV_NSIGHT_INJECTION_...=..." entry of `environment` (an environ
// array), or "".
inline std::string_view NsightInjectionVariable(const char* const* environment) {
  for (const char* const* e = environment; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.substr(0, kNsightInjectionPrefix.size()) == kNsightInjectionPrefix) return entry;
  }
  return "";
}

// The tool that injects into a process with this environment, or "": a known
// tool library in LD_PRELOAD, a foreign CUDA_INJECTION64_PATH, or an Nsight
// tool's injection settings. `*evidence` is set to what gave it away.
inline std::string_view InjectingTool(std::string_view injection, std::string_view preload,
                                      const char* const* environment, std::string_view own_injector,
                                      std::string_view* evidence) {
  std::string_view tool;
  ForEachPreload(preload, [&](std::string_view entry) {
    if (tool.empty() && !(tool = ToolOfLibrary(entry)).empty()) *evidence = entry;
  });
  if (!tool.empty()) return tool;
  if (IsForeignInjection(injection, own_injector)) {
    *evidence = injection;
    tool = ToolOfLibrary(injection);
    return tool.empty() ? "another CUDA tool" : tool;
  }
  if (const std::string_view nsight = NsightInjectionVariable(environment); !nsight.empty()) {
    *evidence = nsight;
    return "an Nsight tool (Nsight Compute or Nsight Systems)";
  }
  return "";
}

}  // namespace smprof::cuda_tools
