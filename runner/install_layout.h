// Where smprof-run looks for its helpers (the collector, the injector and the
// preload shim), relative to the directory that holds the running smprof-run,
// so that a build tree and an installed tree under any prefix both work
// without configuration.
//
//   build tree (CMakeLists.txt's output dirs)   install tree (cmake/SmprofInstallDirs.cmake)
//   <build>/bin/smprof-run                      <prefix>/<bindir>/smprof-run
//   <build>/bin/smprof-collector                <prefix>/<libexecdir>/smprof/smprof-collector
//   <build>/lib/libsmprof_inject.so             <prefix>/<libdir>/smprof/libsmprof_inject.so
//   <build>/lib/libsmprof_preload.so            <prefix>/<libdir>/smprof/libsmprof_preload.so
//
// The install directories come from CMake as compile definitions, so a
// non-default CMAKE_INSTALL_LIBDIR (lib64, lib/x86_64-linux-gnu) or
// CMAKE_INSTALL_LIBEXECDIR works. The install-tree path comes first: a
// leftover bin/smprof-collector or <libdir>/libsmprof_inject.so from an older
// install in the same prefix must not win over the current helpers. Nothing
// here touches the file system; the caller takes the first candidate that
// exists.
#pragma once

#include <string>
#include <vector>

namespace smprof::runner {

inline constexpr const char* kCollectorFileName = "smprof-collector";
inline constexpr const char* kInjectorFileName = "libsmprof_inject.so";
inline constexpr const char* kPreloadFileName = "libsmprof_preload.so";

// Install directories, each relative to the install prefix or absolute, as
// CMake's GNUInstallDirs gives them.
struct InstallDirs {
  std::string bindir;          // smprof-run, e.g. "bin"
  std::string helper_execdir;  // smprof-collector, e.g. "libexec/smprof"
  std::string helper_libdir;   // the injector and the shim, e.g. "lib/smprof", "lib64/smprof"
};

// The directories this smprof-run was configured with (SMPROF_INSTALL_* in
// cmake/SmprofInstallDirs.cmake, passed by runner/CMakeLists.txt).
InstallDirs ConfiguredInstallDirs();

// Ordered candidate paths of each helper for the smprof-run whose directory is
// `self_dir` (absolute, e.g. the directory of /proc/self/exe): the
// install-tree path, then the build-tree path. The install prefix is
// `self_dir` less one level per component of a relative `dirs.bindir`; an
// absolute helper directory is used as it is; with an absolute bindir and a
// relative helper directory the prefix is unknown and only the build-tree path
// is returned.
std::vector<std::string> CollectorCandidates(const std::string& self_dir,
                                             const InstallDirs& dirs = ConfiguredInstallDirs());
std::vector<std::string> InjectorCandidates(const std::string& self_dir,
                                            const InstallDirs& dirs = ConfiguredInstallDirs());
std::vector<std::string> PreloadCandidates(const std::string& self_dir,
                                           const InstallDirs& dirs = ConfiguredInstallDirs());

}  // namespace smprof::runner
