# Where `cmake --install` puts smprof's files, relative to the install prefix
# (or absolute where the GNUInstallDirs value given is absolute). One place for
# both users of the layout: SmprofInstall.cmake (the install rules) and
# runner/CMakeLists.txt (smprof-run looks for its helpers there, relative to
# its own directory).
include(GNUInstallDirs)
set(SMPROF_INSTALL_BINDIR ${CMAKE_INSTALL_BINDIR})                    # smprof-run
set(SMPROF_INSTALL_HELPER_EXECDIR ${CMAKE_INSTALL_LIBEXECDIR}/smprof)  # smprof-collector
set(SMPROF_INSTALL_HELPER_LIBDIR ${CMAKE_INSTALL_LIBDIR}/smprof)       # libsmprof_inject.so, libsmprof_preload.so
set(SMPROF_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR})            # smprof/*.cuh, smprof/*.h
set(SMPROF_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/smprof)      # smprofConfig.cmake
set(SMPROF_INSTALL_PKGCONFIGDIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)     # smprof.pc
