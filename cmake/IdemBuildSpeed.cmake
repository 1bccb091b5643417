# What makes the builds fast; none of it changes what the code does. Included by the
# top-level CMakeLists.txt after the sanitizer and fuzz options (IDEM_SANITIZE,
# IDEM_TSAN, IDEM_FUZZ), which choose the test code's flags. The presets
# (CMakePresets.json) and scripts/test.sh set these; docs/reliability.md ("The test
# command's time") has the measurements behind the choices.

# IDEM_CCACHE_DIR: compile through ccache, with its cache and configuration in that
# directory. base_dir is the source tree, so the command lines ccache hashes name
# sources and include directories relative to the build directory: a sibling tree
# with the same flags (dist.first_run's build-dist, tests/dist/CMakeLists.txt) takes
# this tree's objects from the cache. hash_dir off for the same reason. Depend mode:
# the headers come from the compiler's -MD output, with no extra preprocessor run.
set(IDEM_CCACHE_DIR "" CACHE PATH "Compile through ccache with its cache in this directory (empty: without)")
if(IDEM_CCACHE_DIR)
  find_program(IDEM_CCACHE_PROGRAM ccache REQUIRED)
  file(MAKE_DIRECTORY ${IDEM_CCACHE_DIR})
  file(WRITE ${IDEM_CCACHE_DIR}/ccache.conf
       "base_dir = ${PROJECT_SOURCE_DIR}\nhash_dir = false\ndepend_mode = true\nmax_size = 4G\n")
  set(CMAKE_CXX_COMPILER_LAUNCHER env CCACHE_DIR=${IDEM_CCACHE_DIR} ${IDEM_CCACHE_PROGRAM})
endif()

# IDEM_LINKER: the linker the compiler driver uses (-fuse-ld=); lld links the ~200 test
# binaries several times faster than ld.bfd.
set(IDEM_LINKER "" CACHE STRING "Linker for -fuse-ld= (e.g. lld; empty: the compiler's default)")
if(IDEM_LINKER)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=${IDEM_LINKER}" IDEM_LINKER_WORKS_${IDEM_LINKER})
  if(NOT IDEM_LINKER_WORKS_${IDEM_LINKER})
    message(FATAL_ERROR "IDEM_LINKER=${IDEM_LINKER}: ${CMAKE_CXX_COMPILER} cannot link with "
                        "-fuse-ld=${IDEM_LINKER} (for lld: apt-get install lld; or pass -DIDEM_LINKER=)")
  endif()
  add_link_options(-fuse-ld=${IDEM_LINKER})
endif()

# IDEM_LINE_TABLES_ONLY: the product code's debug info is line tables only (-g1),
# enough for a backtrace with lines, and cheaper to compile than -g.
option(IDEM_LINE_TABLES_ONLY "Debug info as line tables only (-g1), for a faster build" OFF)
if(IDEM_LINE_TABLES_ONLY AND CMAKE_BUILD_TYPE STREQUAL "RelWithDebInfo")
  add_compile_options(-g1)
endif()

# IDEM_TEST_COMPILE_OPTIONS: test code (every idem_add_test binary and the targets
# under tests/) needs line numbers in its failures, not the optimiser, and its
# templates are most of the compile time:
#   main (GCC, optimised) build  -Og -g1
#   TSan build                   -O1 -g1, as its product code: the inline functions the
#                                tests and the product share are linked once, maybe
#                                from a test's unit, and TSan instruments them there
#   ASan+UBSan build             -O0 -g1
#   Debug build                  the build type's -O0 -g
# IDEM_UNFUZZED_COMPILE_OPTIONS: in the ASan+UBSan build, the code no fuzzer runs (the
# examples, the `idem` program, the HTTP server's network side) is compiled as the tests
# are; the libraries the fuzzers link keep the build type's flags.
set(IDEM_UNFUZZED_COMPILE_OPTIONS)
if(CMAKE_BUILD_TYPE STREQUAL "Debug")
  set(IDEM_TEST_COMPILE_OPTIONS)
elseif(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT IDEM_TSAN AND NOT IDEM_SANITIZE
       AND CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Release|MinSizeRel)$")
  set(IDEM_TEST_COMPILE_OPTIONS -Og -g1)
elseif(IDEM_SANITIZE)
  set(IDEM_TEST_COMPILE_OPTIONS -O0 -g1)
  set(IDEM_UNFUZZED_COMPILE_OPTIONS -O0 -g1)
else()
  set(IDEM_TEST_COMPILE_OPTIONS -O1 -g1)
endif()

# IDEM_UNITY_BUILD: CMake compiles each target's sources in batches of IDEM_UNITY_BATCH,
# one translation unit a batch, so Boost.Asio/Beast, Abseil, simdjson, CLI11 and
# GoogleTest are parsed, and their templates instantiated, once a batch instead of
# once a file; 64 makes every target one unit. A file that cannot share a unit
# (file-local names that clash) says so with SKIP_UNITY_BUILD_INCLUSION;
# anonymous-namespace helpers get file-specific names. A file with its own
# COMPILE_OPTIONS is compiled on its own (CMake leaves it out).
option(IDEM_UNITY_BUILD "Compile each target's sources in batches (faster builds)" ON)
set(IDEM_UNITY_BATCH 64 CACHE STRING "Sources per unity translation unit (IDEM_UNITY_BUILD)")
set(CMAKE_UNITY_BUILD ${IDEM_UNITY_BUILD})
set(CMAKE_UNITY_BUILD_BATCH_SIZE ${IDEM_UNITY_BATCH})

# Which tests a tree builds and how CTest runs them (cmake/IdemTest.cmake says more).
set(IDEM_SKIP_TEST_LABELS "" CACHE STRING
    "Test labels (a ;-list) whose binaries are neither built by default nor run (cmake/IdemTest.cmake)")
set(IDEM_TEST_SHARDS 0 CACHE STRING
    "0: one CTest test per GoogleTest test; N > 0: each test binary runs as N CTest tests (shards) (cmake/IdemTest.cmake)")
if(NOT IDEM_TEST_SHARDS MATCHES "^[0-9]+$")
  message(FATAL_ERROR "IDEM_TEST_SHARDS must be 0 or a positive number of shards, not '${IDEM_TEST_SHARDS}'")
endif()
