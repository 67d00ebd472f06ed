# Finds smprof's dependencies from the distribution's packages and says how to
# install what is missing. scripts/install-deps.sh installs all of them.
set(_smprof_fix "Run scripts/install-deps.sh (or: apt-get install")

find_package(CUDAToolkit 12.0)
if(NOT CUDAToolkit_FOUND)
  message(FATAL_ERROR "smprof: the CUDA Toolkit was not found. Install it in /usr/local/cuda "
    "or pass -DCUDAToolkit_ROOT=<dir>.")
endif()
if(NOT TARGET CUDA::cupti)
  message(FATAL_ERROR "smprof: CUPTI was not found under ${CUDAToolkit_LIBRARY_ROOT}. "
    "Install the CUDA Toolkit's CUPTI component (cuda-cupti-dev) or pass -DCUDAToolkit_ROOT=<dir>.")
endif()

find_package(Threads REQUIRED)

find_package(fmt CONFIG QUIET)
find_package(spdlog CONFIG QUIET)
if(NOT spdlog_FOUND OR NOT TARGET spdlog::spdlog_header_only OR NOT TARGET fmt::fmt-header-only)
  message(FATAL_ERROR "smprof: spdlog (header-only) and fmt were not found. ${_smprof_fix} libspdlog-dev libfmt-dev).")
endif()

find_package(nlohmann_json 3.2 CONFIG QUIET)
if(NOT nlohmann_json_FOUND)
  message(FATAL_ERROR "smprof: nlohmann/json was not found. ${_smprof_fix} nlohmann-json3-dev).")
endif()

find_package(Boost 1.70 CONFIG QUIET)
if(NOT Boost_FOUND)
  find_package(Boost 1.70 QUIET)
endif()
if(NOT Boost_FOUND OR NOT EXISTS "${Boost_INCLUDE_DIRS}/boost/interprocess/shared_memory_object.hpp")
  message(FATAL_ERROR "smprof: Boost.Interprocess headers were not found. ${_smprof_fix} libboost-dev).")
endif()

if(SMPROF_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  if(NOT GTest_FOUND)
    find_package(GTest QUIET)
  endif()
  if(NOT GTest_FOUND)
    message(FATAL_ERROR "smprof: GoogleTest was not found. ${_smprof_fix} libgtest-dev), "
      "or configure with -DSMPROF_BUILD_TESTS=OFF.")
  endif()
endif()

# spdlog and fmt are compiled from their headers into smprof_logging, a static
# library (common/CMakeLists.txt), so nothing smprof ships needs libspdlog.so or
# libfmt.so at run time (the GPU machines have neither).
add_library(smprof_boost INTERFACE)
if(TARGET Boost::headers)
  target_link_libraries(smprof_boost INTERFACE Boost::headers)
else()
  target_include_directories(smprof_boost SYSTEM INTERFACE ${Boost_INCLUDE_DIRS})
endif()
target_link_libraries(smprof_boost INTERFACE Threads::Threads rt)
