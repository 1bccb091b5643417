# Warnings, and the flags of the sanitizer and fuzz builds (IDEM_WERROR, IDEM_SANITIZE,
# IDEM_TSAN, IDEM_FUZZ, declared in the top-level CMakeLists.txt). The presets asan,
# tsan and fuzz (CMakePresets.json) are these builds; docs/reliability.md describes them.

# GCC 12 reports false positives for these with std::variant/std::optional and for
# designated initializers that leave members at their defaults.
add_compile_options(-Wall -Wextra -Wno-missing-field-initializers)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wno-maybe-uninitialized)  # clang has no such warning
endif()
# GCC 12's flow warnings misfire on plain std::string assignments once inlined at -O3
# or instrumented by the sanitizers (GCC PR105329, PR105651: -Wrestrict "accessing
# 9223372036854775810 or more bytes"): they stay warnings there.
set(_idem_gcc12_flow_warnings -Wno-error=restrict -Wno-error=stringop-overflow
    -Wno-error=array-bounds)
if(IDEM_WERROR)
  add_compile_options(-Werror)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    add_compile_options(${_idem_gcc12_flow_warnings})
  endif()
endif()
if(IDEM_SANITIZE AND NOT IDEM_FUZZ)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(${_idem_gcc12_flow_warnings})
  endif()
  add_link_options(-fsanitize=address,undefined)
endif()
if(IDEM_TSAN)
  # GCC 12 warns (-Wtsan) that TSan does not model Asio's atomic_thread_fence.
  add_compile_options(-fsanitize=thread -Wno-tsan)
  add_link_options(-fsanitize=thread)
endif()

# The libFuzzer targets of tests/fuzz: clang only (GCC has no libFuzzer). Every library
# is built with ASan+UBSan; the fuzzers link libFuzzer's main. Two kinds of build:
#   IDEM_FUZZ alone (preset fuzz, bench/fuzz.sh): only the fuzzers; the tests, benches
#     and examples are not built and the server backends default to off (no fuzzer
#     needs a driver).
#   IDEM_FUZZ with IDEM_SANITIZE (preset asan, scripts/sanitize.sh): the ASan+UBSan
#     test build, which builds the fuzzers too, so the libraries are compiled once for
#     both runs. The test binaries link the instrumented libraries; ASan's runtime
#     has the coverage callbacks they call.
# The coverage instrumentation goes on the product code under src/ and the fuzzers
# only (idem_fuzz_coverage_begin/end around add_subdirectory of src/): what guides a
# fuzzer is the code it calls.
if(IDEM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "IDEM_FUZZ=ON needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
                        "configure a fresh build directory with CC=clang-14 CXX=clang++-14 "
                        "(Debian: clang-14 libclang-rt-14-dev)")
  endif()
  if(IDEM_TSAN)
    message(FATAL_ERROR "IDEM_FUZZ=ON brings ASan+UBSan, which TSan cannot run beside: leave IDEM_TSAN off")
  endif()
  # UBSan findings abort (a crash the fuzzer saves) rather than print and go on.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

# idem_fuzz_coverage_begin() / idem_fuzz_coverage_end(): in a fuzz build, the
# directories added between them get libFuzzer's coverage callbacks (a directory
# inherits its parent's options when it is added).
macro(idem_fuzz_coverage_begin)
  if(IDEM_FUZZ)
    get_directory_property(_idem_options_before_src COMPILE_OPTIONS)
    add_compile_options(-fsanitize=fuzzer-no-link)
  endif()
endmacro()
macro(idem_fuzz_coverage_end)
  if(IDEM_FUZZ)
    set_directory_properties(PROPERTIES COMPILE_OPTIONS "${_idem_options_before_src}")
  endif()
endmacro()

# TSan builds: every executable links the absl::Mutex happens-before shim
# (tests/tsan/absl_sync_shim.cc says why). Its object goes on each executable's link
# line, so its lock entry points are the executable's own and bind before those of
# libabsl_synchronization.so, for absl's calls too. Not a link library: the exported
# library targets must not name it. idem_tsan_shim_deps(), called once every folder is
# added, adds the build dependencies.
if(IDEM_TSAN)
  add_library(idem_tsan_absl OBJECT ${PROJECT_SOURCE_DIR}/tests/tsan/absl_sync_shim.cc)
  target_link_libraries(idem_tsan_absl PRIVATE absl::synchronization absl::time)
  # (No -ldl: glibc 2.36 has dlsym in libc.)
  add_link_options("$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:$<TARGET_OBJECTS:idem_tsan_absl>>")
endif()
function(idem_tsan_shim_deps dir)
  if(NOT IDEM_TSAN)
    return()
  endif()
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      add_dependencies(${target} idem_tsan_absl)
      # Relinked when the shim changes (a link option is no file dependency).
      set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS
                   "$<TARGET_OBJECTS:idem_tsan_absl>")
      # What the shim calls, for executables that do not link absl otherwise.
      set_property(TARGET ${target} APPEND PROPERTY LINK_LIBRARIES
                   absl::synchronization absl::time)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    idem_tsan_shim_deps("${subdir}")
  endforeach()
endfunction()
