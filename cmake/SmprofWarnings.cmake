# Per-target warnings, sanitizers and batching: smprof_host_flags(<target>
# [NO_SANITIZE]).
#
# SMPROF_SANITIZE (cache string, case-insensitive) sanitizes the host code:
#   OFF      nothing (default)
#   address  ASan + UBSan (ON is a synonym). -fno-sanitize-recover=all makes
#            every UBSan report abort, so it fails the test that caused it.
#   thread   TSan.
# The flags go on each host target through smprof_host_flags, never globally:
# device code, nvcc and third-party targets are left alone. NO_SANITIZE keeps
# them off a target that is loaded into processes not built with the same
# sanitizer (a preloaded library: the ASan runtime must come first in a
# process, so an ASan library in LD_PRELOAD of /bin/sh stops it at once).
# SMPROF_SANITIZER holds the normalised value (off, address or thread).
#
# SMPROF_UNITY_BUILD compiles a host target's C++ files in batches of 16 (a
# unity build): most of a file's compile time is the code generated for the
# inline templates of the headers it shares with its neighbours (JSON, fmt,
# the standard containers), which a batch generates once. Targets with CUDA
# files are left alone, whatever CMake's version would batch.
string(TOLOWER "${SMPROF_SANITIZE}" SMPROF_SANITIZER)
if(SMPROF_SANITIZER STREQUAL "on")
  set(SMPROF_SANITIZER address)
elseif(SMPROF_SANITIZER STREQUAL "")
  set(SMPROF_SANITIZER off)
endif()
if(NOT SMPROF_SANITIZER MATCHES "^(off|address|thread)$")
  message(FATAL_ERROR "smprof: SMPROF_SANITIZE=${SMPROF_SANITIZE} is not supported: use OFF, "
    "address (ASan+UBSan; ON means address) or thread (TSan)")
endif()

# Debian's g++ links with --as-needed unless a -fsanitize flag is given: it
# is put back so that sanitized binaries need the same shared libraries as
# normal ones (libsmprof_inject.so must not need libfmt.so; see
# tests/unit/check_injector_exports.cmake). The runtimes themselves are
# linked --no-as-needed by the driver.
set(_smprof_sanitize_compile)
set(_smprof_sanitize_link)
if(SMPROF_SANITIZER STREQUAL "address")
  set(_smprof_sanitize_compile -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  set(_smprof_sanitize_link -fsanitize=address,undefined -fno-sanitize-recover=all -Wl,--as-needed)
elseif(SMPROF_SANITIZER STREQUAL "thread")
  set(_smprof_sanitize_compile -fsanitize=thread -fno-omit-frame-pointer)
  set(_smprof_sanitize_link -fsanitize=thread -Wl,--as-needed)
endif()

function(smprof_host_flags target)
  cmake_parse_arguments(H "NO_SANITIZE" "" "" ${ARGN})
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wno-missing-field-initializers>)
  if(_smprof_sanitize_compile AND NOT H_NO_SANITIZE)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${_smprof_sanitize_compile}>")
    target_link_options(${target} PRIVATE ${_smprof_sanitize_link})
  endif()
  get_target_property(_sources ${target} SOURCES)
  list(FILTER _sources INCLUDE REGEX "\\.cu$")
  if(SMPROF_UNITY_BUILD AND NOT _sources)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
    # A class of a .cc file holding a type of its anonymous namespace is
    # fine in that file alone; in a batch the file is no longer the main
    # file, and GCC would warn as if it were a header.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
  endif()
endfunction()
