// Candidate paths of smprof-run's helpers (see install_layout.h): purely
// lexical, so that unit tests can check every layout without installing.
#include "runner/install_layout.h"

#ifndef SMPROF_INSTALL_BINDIR
#error "SMPROF_INSTALL_BINDIR and the helper directories come from runner/CMakeLists.txt"
#endif

namespace smprof::runner {
namespace {

bool IsAbsolute(const std::string& path) { return !path.empty() && path[0] == '/'; }

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string Join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string Parent(const std::string& dir) {
  const size_t slash = dir.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : dir.substr(0, slash);
}

// `self_dir` less one level per component of the relative `bindir` ("." and
// empty components do not count).
std::string InstallPrefix(const std::string& self_dir, const std::string& bindir) {
  std::string prefix = StripTrailingSlashes(self_dir);
  size_t start = 0;
  while (start <= bindir.size()) {
    size_t end = bindir.find('/', start);
    if (end == std::string::npos) end = bindir.size();
    const std::string component = bindir.substr(start, end - start);
    if (!component.empty() && component != ".") prefix = Parent(prefix);
    start = end + 1;
  }
  return prefix;
}

// The install-tree candidate, then the build-tree one.
std::vector<std::string> Candidates(const std::string& self_dir, const std::string& bindir,
                                    const std::string& helper_dir, const std::string& build_path,
                                    const char* file_name) {
  std::vector<std::string> candidates;
  if (IsAbsolute(helper_dir)) {
    candidates.push_back(Join(StripTrailingSlashes(helper_dir), file_name));
  } else if (!IsAbsolute(bindir)) {
    candidates.push_back(
        Join(Join(InstallPrefix(self_dir, bindir), StripTrailingSlashes(helper_dir)), file_name));
  }
  candidates.push_back(build_path);
  return candidates;
}

// The build tree's lib/ (CMAKE_LIBRARY_OUTPUT_DIRECTORY), beside its bin/.
std::string BuildLibDir(const std::string& self_dir) { return Join(Parent(StripTrailingSlashes(self_dir)), "lib"); }

}  // namespace

InstallDirs ConfiguredInstallDirs() {
  return {SMPROF_INSTALL_BINDIR, SMPROF_INSTALL_HELPER_EXECDIR, SMPROF_INSTALL_HELPER_LIBDIR};
}

std::vector<std::string> CollectorCandidates(const std::string& self_dir, const InstallDirs& dirs) {
  return Candidates(self_dir, dirs.bindir, dirs.helper_execdir,
                    Join(StripTrailingSlashes(self_dir), kCollectorFileName), kCollectorFileName);
}

std::vector<std::string> InjectorCandidates(const std::string& self_dir, const InstallDirs& dirs) {
  return Candidates(self_dir, dirs.bindir, dirs.helper_libdir, Join(BuildLibDir(self_dir), kInjectorFileName),
                    kInjectorFileName);
}

std::vector<std::string> PreloadCandidates(const std::string& self_dir, const InstallDirs& dirs) {
  return Candidates(self_dir, dirs.bindir, dirs.helper_libdir, Join(BuildLibDir(self_dir), kPreloadFileName),
                    kPreloadFileName);
}

}  // namespace smprof::runner
