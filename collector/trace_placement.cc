#include "collector/trace_placement.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace smprof {
namespace {

// Renames without replacing: renameat2(RENAME_NOREPLACE) where the file
// system supports it, else link + unlink (link never replaces either).
// Returns 0, or the errno (EEXIST when `to` exists).
int RenameNoReplace(const std::string& from, const std::string& to) {
  if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return errno;
  if (link(from.c_str(), to.c_str()) != 0) return errno;
  unlink(from.c_str());
  return 0;
}

}  // namespace

std::string PartialPath(const std::string& path) { return path + ".partial"; }

bool IsStreamPath(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

std::string NumberedPath(const std::string& path, int n) {
  const size_t slash = path.find_last_of('/');
  const size_t name = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || dot <= name) dot = path.size();  // no extension (or a dot file)
  return path.substr(0, dot) + "-" + std::to_string(n) + path.substr(dot);
}

bool PlaceTrace(const std::string& partial, const std::string& path, bool overwrite, std::string* placed,
                std::string* error) {
  if (overwrite) {
    if (std::rename(partial.c_str(), path.c_str()) != 0) {
      *error = "cannot move the trace from " + partial + " to " + path + ": " + std::strerror(errno);
      return false;
    }
    *placed = path;
    return true;
  }
  for (int n = 1; n < 1000; ++n) {
    const std::string target = n == 1 ? path : NumberedPath(path, n);
    const int err = RenameNoReplace(partial, target);
    if (err == 0) {
      *placed = target;
      return true;
    }
    if (err != EEXIST) {
      *error = "cannot move the trace from " + partial + " to " + target + ": " + std::strerror(err);
      return false;
    }
  }
  *error = path + " and " + NumberedPath(path, 2) + " to " + NumberedPath(path, 999) +
           " all exist: the trace stays at " + partial;
  return false;
}

std::string StatsBase(const std::string& path) {
  if (path.empty() || IsStreamPath(path)) return "";
  return path;
}

int OpenTraceFile(const std::string& path, bool exclusive, bool read_back, std::string* error) {
  const int fd = ::open(path.c_str(),
                        (read_back ? O_RDWR : O_WRONLY) | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC), 0644);
  if (fd < 0 && error != nullptr) {
    *error = errno == EEXIST ? "trace file '" + path +
                                   "' already exists: another smprof run may be writing it, or a "
                                   "killed run left it; remove it or choose another --output"
                             : "cannot create trace file '" + path + "': " + std::strerror(errno) +
                                   " (choose a writable --output path)";
  }
  return fd;
}

}  // namespace smprof
