# cmake -DPART=<layout_and_run|find_package|pkg_config> ... -P install_test.cmake
# (arguments: tests/install/CMakeLists.txt). Installs BUILD_DIR with
# `cmake --install` into a fresh temporary prefix, checks one way of using it,
# and removes the temporary directory whatever the outcome. A part that cannot
# run here prints "SKIPPED: <why>" (ctest reports it as skipped).
cmake_minimum_required(VERSION 3.24)

if(PART STREQUAL "find_package" AND NOT CUDA_COMPILER)
  message("SKIPPED: the consumer project compiles a .cu file and this build has SMPROF_BUILD_CUDA=OFF")
  return()
elseif(PART STREQUAL "pkg_config" AND NOT PKG_CONFIG)
  message("SKIPPED: pkg-config is not installed (apt-get install pkg-config, then reconfigure)")
  return()
endif()

set(_tmp_root "$ENV{TMPDIR}")
if(NOT _tmp_root)
  set(_tmp_root /tmp)
endif()
execute_process(COMMAND mktemp -d "${_tmp_root}/smprof-install-test.XXXXXX"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE TMP ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "cannot create a temporary directory under ${_tmp_root}: ${_err}; set TMPDIR to a writable directory")
endif()
set(PREFIX ${TMP}/prefix)

function(fail what)
  file(REMOVE_RECURSE "${TMP}")
  message(FATAL_ERROR "${what}")
endfunction()

# run(<what> <command...>): runs the command; on failure names <what> and
# shows its output. Sets run_output to stdout and stderr together.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 240)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    fail("${what} failed (${rc}).\n  command: ${command}\n  output:\n${out}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

function(expect_file path what)
  if(NOT EXISTS "${path}" OR IS_DIRECTORY "${path}")
    fail("${what} is not installed at ${path} (cmake/SmprofInstall.cmake should install it there)")
  endif()
endfunction()

function(expect_no_file path why)
  if(EXISTS "${path}")
    fail("${path} is installed but must not be: ${why}")
  endif()
endfunction()

run("cmake --install (build everything first: cmake --build ${BUILD_DIR})"
  ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})
message(STATUS "installed ${BUILD_DIR} into ${PREFIX}")

if(PART STREQUAL "layout_and_run")
  expect_file(${PREFIX}/${BINDIR}/smprof-run "smprof-run")
  expect_file(${PREFIX}/${HELPER_EXECDIR}/smprof-collector "the collector")
  expect_file(${PREFIX}/${HELPER_LIBDIR}/libsmprof_inject.so "the injector")
  if(PRELOAD_BUILT)
    expect_file(${PREFIX}/${HELPER_LIBDIR}/libsmprof_preload.so "the preload shim")
  endif()
  expect_file(${PREFIX}/${INCLUDEDIR}/smprof/smprof.cuh "the marker header")
  expect_file(${PREFIX}/${INCLUDEDIR}/smprof/detail/record.cuh "the recorder header")
  expect_file(${PREFIX}/${CMAKEDIR}/smprofConfig.cmake "the CMake package")
  expect_file(${PREFIX}/${CMAKEDIR}/smprofConfigVersion.cmake "the CMake package version file")
  expect_file(${PREFIX}/${PKGCONFIGDIR}/smprof.pc "the pkg-config file")
  expect_no_file(${PREFIX}/${BINDIR}/smprof-collector "helpers belong under ${HELPER_EXECDIR}, not beside user commands")
  string(REGEX REPLACE "/smprof$" "" libdir "${HELPER_LIBDIR}")
  expect_no_file(${PREFIX}/${libdir}/libsmprof_inject.so "the injector belongs in ${HELPER_LIBDIR}, off the linker path")

  if(READELF AND CUDA_LIBRARY_DIR)
    run("readelf" ${READELF} -d ${PREFIX}/${HELPER_LIBDIR}/libsmprof_inject.so)
    string(FIND "${run_output}" "${CUDA_LIBRARY_DIR}" found)
    if(found EQUAL -1)
      fail("the installed injector's RUNPATH does not name ${CUDA_LIBRARY_DIR} (CUPTI would not be found): "
        "keep INSTALL_RPATH in injector/CMakeLists.txt\n${run_output}")
    endif()
  endif()
  message(STATUS "layout: ok")

  # The installed smprof-run finds its installed helpers by itself.
  set(trace ${TMP}/t.json)
  run("the installed smprof-run on /bin/sh"
    ${CMAKE_COMMAND} -E env --unset=SMPROF_INJECTOR --unset=SMPROF_COLLECTOR
    ${PREFIX}/${BINDIR}/smprof-run -o ${trace} -- /bin/sh -c "exit 0")
  if(NOT EXISTS ${trace})
    fail("smprof-run exited 0 but wrote no trace at ${trace}; its output:\n${run_output}")
  endif()
  file(READ ${trace} content)
  string(SUBSTRING "${content}" 0 1 first)
  if(NOT first STREQUAL "[")
    fail("the trace ${trace} does not start with '[' (not a JSON array):\n${content}")
  endif()
  string(JSON events ERROR_VARIABLE json_error LENGTH "${content}")
  if(json_error)
    fail("the trace ${trace} is not valid JSON (${json_error}):\n${content}")
  endif()
  message(STATUS "installed smprof-run: exit 0, trace of ${events} events: ok")

elseif(PART STREQUAL "find_package")
  set(consumer_build ${TMP}/consumer-build)
  set(make_program)
  if(MAKE_PROGRAM)
    set(make_program -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
  endif()
  string(CONCAT what "configuring the consumer project (find_package(smprof) with CMAKE_PREFIX_PATH=${PREFIX}; "
    "the package is in ${PREFIX}/${CMAKEDIR}, and a libdir that CMake does not search on this platform needs -Dsmprof_DIR)")
  run("${what}"
    ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${consumer_build} -G ${GENERATOR} ${make_program}
    -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}
    -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES} -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
  if(NOT run_output MATCHES "smprof ${VERSION} from ${PREFIX}/")
    fail("the consumer did not find smprof ${VERSION} in ${PREFIX} (another installed smprof?):\n${run_output}")
  endif()
  run("building the consumer project (a .cu file with markers, linked to smprof::headers)"
    ${CMAKE_COMMAND} --build ${consumer_build})
  message(STATUS "find_package(smprof) consumer: ok")

elseif(PART STREQUAL "pkg_config")
  run("pkg-config --cflags smprof with PKG_CONFIG_PATH=${PREFIX}/${PKGCONFIGDIR}"
    ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${PREFIX}/${PKGCONFIGDIR}
    ${PKG_CONFIG} --cflags smprof)
  string(STRIP "${run_output}" cflags)
  if(NOT cflags STREQUAL "-I${PREFIX}/${INCLUDEDIR}")
    fail("pkg-config --cflags smprof gave '${cflags}', expected -I${PREFIX}/${INCLUDEDIR}")
  endif()
  run("pkg-config --modversion smprof"
    ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${PREFIX}/${PKGCONFIGDIR} ${PKG_CONFIG} --modversion smprof)
  string(STRIP "${run_output}" modversion)
  if(NOT modversion STREQUAL VERSION)
    fail("pkg-config --modversion smprof gave '${modversion}', expected ${VERSION}")
  endif()
  separate_arguments(cflags UNIX_COMMAND "${cflags}")
  run("compiling a C++ file that includes <smprof/smprof.cuh> with only `pkg-config --cflags smprof`"
    ${CXX_COMPILER} -std=c++17 -Wall -Werror ${cflags} ${CONSUMER_DIR}/pkg_config_consumer.cc
    -o ${TMP}/pkg_config_consumer)
  run("the program built through pkg-config" ${TMP}/pkg_config_consumer)
  message(STATUS "pkg-config consumer: ok")

else()
  fail("PART=${PART} is unknown: use layout_and_run, find_package or pkg_config")
endif()

file(REMOVE_RECURSE "${TMP}")
