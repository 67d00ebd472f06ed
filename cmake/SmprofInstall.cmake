# install(EXPORT) so that users can find_package(smprof) and link smprof::headers.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/smprof DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS smprof_headers EXPORT smprofTargets)
install(EXPORT smprofTargets NAMESPACE smprof:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/smprof)
file(WRITE ${PROJECT_BINARY_DIR}/smprofConfig.cmake
  "include(\${CMAKE_CURRENT_LIST_DIR}/smprofTargets.cmake)\n")
write_basic_package_version_file(${PROJECT_BINARY_DIR}/smprofConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/smprofConfig.cmake ${PROJECT_BINARY_DIR}/smprofConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/smprof)
