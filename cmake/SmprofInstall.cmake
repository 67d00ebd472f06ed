# Install rules: `cmake --install <build> --prefix <dir>` lays smprof out the
# way users consume it (directories from SmprofInstallDirs.cmake):
#
#   bin/smprof-run                        the command users type, on PATH
#   libexec/smprof/smprof-collector       helpers, found by smprof-run relative
#   <libdir>/smprof/libsmprof_inject.so   to itself; the libraries sit in a
#   <libdir>/smprof/libsmprof_preload.so  private directory, off the linker path
#   include/smprof/                       the public headers
#   <libdir>/cmake/smprof/                find_package(smprof) -> smprof::headers
#   <libdir>/pkgconfig/smprof.pc          pkg-config --cflags smprof
#
# Included last from CMakeLists.txt, so every target exists here.
include(SmprofInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS smprof-run smprof RUNTIME DESTINATION ${SMPROF_INSTALL_BINDIR})
install(TARGETS smprof-collector RUNTIME DESTINATION ${SMPROF_INSTALL_HELPER_EXECDIR})
# The injector keeps its INSTALL_RPATH (the CUDA toolkit's lib dir, for CUPTI).
install(TARGETS smprof_inject LIBRARY DESTINATION ${SMPROF_INSTALL_HELPER_LIBDIR})
if(TARGET smprof_preload)
  install(TARGETS smprof_preload LIBRARY DESTINATION ${SMPROF_INSTALL_HELPER_LIBDIR})
endif()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/smprof DESTINATION ${SMPROF_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
install(TARGETS smprof_headers EXPORT smprofTargets INCLUDES DESTINATION ${SMPROF_INSTALL_INCLUDEDIR})
install(EXPORT smprofTargets NAMESPACE smprof:: DESTINATION ${SMPROF_INSTALL_CMAKEDIR})

set(SMPROF_INSTALL_RUN_EXECUTABLE ${SMPROF_INSTALL_BINDIR}/smprof-run)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/smprofConfig.cmake.in
  ${PROJECT_BINARY_DIR}/smprofConfig.cmake
  INSTALL_DESTINATION ${SMPROF_INSTALL_CMAKEDIR}
  PATH_VARS SMPROF_INSTALL_INCLUDEDIR SMPROF_INSTALL_RUN_EXECUTABLE)
# What consumers use is header-only, so any architecture may use the package.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/smprofConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/smprofConfig.cmake ${PROJECT_BINARY_DIR}/smprofConfigVersion.cmake
  DESTINATION ${SMPROF_INSTALL_CMAKEDIR})

# smprof.pc names the prefix given to `cmake --install`, which may differ from
# CMAKE_INSTALL_PREFIX, so it is configured at install time.
if(IS_ABSOLUTE "${SMPROF_INSTALL_INCLUDEDIR}")
  set(_smprof_pc_includedir "${SMPROF_INSTALL_INCLUDEDIR}")
else()
  set(_smprof_pc_includedir "\${prefix}/${SMPROF_INSTALL_INCLUDEDIR}")
endif()
install(CODE "
  set(SMPROF_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(SMPROF_PC_INCLUDEDIR [[${_smprof_pc_includedir}]])
  set(SMPROF_PC_VERSION \"${PROJECT_VERSION}\")
  configure_file(\"${CMAKE_CURRENT_LIST_DIR}/smprof.pc.in\" \"${PROJECT_BINARY_DIR}/smprof.pc\" @ONLY)
")
install(FILES ${PROJECT_BINARY_DIR}/smprof.pc DESTINATION ${SMPROF_INSTALL_PKGCONFIGDIR})
