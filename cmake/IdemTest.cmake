# idem_add_test(NAME name SOURCES a.cc ... LIBS x ... LABELS unit [ENV K=V ...]
#               [PROPERTIES prop value ...] [BACKENDS postgres|mysql|redis|rocksdb ...]
#               [IDEM_BIN])
# Builds one GoogleTest binary and registers each of its tests with CTest, labelled
# so a developer can run one slice (ctest -L unit|conformance|crash|http).
# PROPERTIES are further CTest properties for every discovered test (e.g.
# FIXTURES_REQUIRED a FIXTURES_SETUP b); they are applied at discovery time. They go
# ENVIRONMENT is added only when ENV is given: an empty value would vanish from the
# list and pair ENVIRONMENT with the next property's name.
# Compiled with IDEM_TEST_COMPILE_OPTIONS (-Og -g1 in the main build, -O0 -g1 in the
# ASan+UBSan build, -O1 -g1 in the TSan build: CMakeLists.txt).
# BACKENDS: the backends the binary's tests use by name (IDEM_WITH_<NAME>); in a build
# without one of them the binary is still a target, but not built by `all`, not in its
# labels' targets and not registered with CTest. (Tests that run over every backend,
# tests/conformance/store_factory.h, leave out those not built instead.)
# IDEM_BIN: a black-box test of the `idem` binary: it is built first, its path is
# compiled in (IDEM_BIN_DEFAULT) and set in the environment (IDEM_BIN).
# IDEM_SKIP_TEST_LABELS (a CMake list, empty by default): a test binary all of whose
# labels are in it is still a target, but not built by `all` and not registered with
# CTest. scripts/test.sh skips unit;conformance;crash in the main build: those run
# under ASan+UBSan (scripts/sanitize.sh), and compiling them a second time with GCC
# was ~200 s of the 20 minutes' CPU (docs/reliability.md, "The test command's time").
# Their label targets (`ninja tests_unit`) still build them.
# IDEM_TEST_SHARDS (0 by default): with N > 0, a binary's tests are not registered one
# by one but as N CTest tests, `<binary>.shard<i>of<N>`, each running 1/N of them in one
# process (GoogleTest's GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), with the binary's
# labels, environment and properties. The sanitizer builds use it (scripts/sanitize.sh):
# under ASan+UBSan a process's start and exit (the runtime, 68 shared libraries, the
# first store opened, LeakSanitizer's scan) cost ~70 ms of CPU, more than most tests:
# the 1,241 tests of the unit, conformance and crash labels took 201 s of CPU one per
# process and 126 s one process per binary (docs/reliability.md). A failing shard's
# output names the failing tests; the binary runs one of them alone with
# --gtest_filter=NAME.
function(idem_add_test)
  cmake_parse_arguments(T "IDEM_BIN;BROWSER" "NAME" "SOURCES;LIBS;LABELS;ENV;PROPERTIES;BACKENDS" ${ARGN})
  set(missing "")
  foreach(backend IN LISTS T_BACKENDS)
    string(TOUPPER "${backend}" backend)
    if(NOT DEFINED IDEM_WITH_${backend})
      message(FATAL_ERROR "idem_add_test(${T_NAME}): no backend '${backend}' (IDEM_WITH_${backend})")
    endif()
    if(NOT IDEM_WITH_${backend})
      list(APPEND missing ${backend})
    endif()
  endforeach()
  # (A binary without labels is never skipped.)
  set(skipped FALSE)
  if(T_LABELS AND IDEM_SKIP_TEST_LABELS)
    set(skipped TRUE)
  endif()
  foreach(label IN LISTS T_LABELS)
    if(NOT label IN_LIST IDEM_SKIP_TEST_LABELS)
      set(skipped FALSE)
    endif()
  endforeach()
  add_executable(${T_NAME} ${T_SOURCES})
  target_compile_options(${T_NAME} PRIVATE ${IDEM_TEST_COMPILE_OPTIONS})
  if(T_IDEM_BIN)
    list(APPEND T_ENV "IDEM_BIN=$<TARGET_FILE:idem>")
    target_compile_definitions(${T_NAME} PRIVATE IDEM_BIN_DEFAULT="$<TARGET_FILE:idem>")
    add_dependencies(${T_NAME} idem)
  endif()
  if(T_BROWSER)
    # Debian's chromium as IDEM_CHROMIUM (a test package, scripts/deps.sh; "" when not
    # found: the test is still built and fails saying what to install), the driver
    # (tests/testing/browser.h), and where screenshots are kept.
    find_program(IDEM_CHROMIUM NAMES chromium chromium-browser)
    target_compile_definitions(${T_NAME} PRIVATE
      IDEM_CHROMIUM="$<$<BOOL:${IDEM_CHROMIUM}>:${IDEM_CHROMIUM}>")
    list(APPEND T_LIBS idem_browser_test_driver)
    list(APPEND T_ENV "IDEM_TEST_ARTIFACTS=${CMAKE_BINARY_DIR}/test-artifacts")
  endif()
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} idem_testing GTest::gmock GTest::gtest_main)
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  set(props LABELS "${T_LABELS}" TIMEOUT 300 ${T_PROPERTIES})
  if(T_ENV)
    list(APPEND props ENVIRONMENT "${T_ENV}")
  endif()
  if(missing)
    set_target_properties(${T_NAME} PROPERTIES EXCLUDE_FROM_ALL TRUE)
    return()
  elseif(skipped)
    set_target_properties(${T_NAME} PROPERTIES EXCLUDE_FROM_ALL TRUE)
  elseif(IDEM_TEST_SHARDS GREATER 0)
    # Registered when CTest runs, as gtest_discover_tests does, and only if the binary
    # is built: the sanitizer trees build some labels' binaries and not others (the TSan
    # tree builds concurrency_test of the conformance label).
    set(shards "")
    foreach(shard RANGE 1 ${IDEM_TEST_SHARDS})
      math(EXPR index "${shard} - 1")
      set(name ${T_NAME}.shard${shard}of${IDEM_TEST_SHARDS})
      set(env ${T_ENV} GTEST_TOTAL_SHARDS=${IDEM_TEST_SHARDS} GTEST_SHARD_INDEX=${index})
      # A shard runs many tests: the timeout of a whole run (scripts/test.sh's 600 s).
      string(APPEND shards
        "  add_test([==[${name}]==] [==[$<TARGET_FILE:${T_NAME}>]==])\n"
        "  set_tests_properties([==[${name}]==] PROPERTIES LABELS [==[${T_LABELS}]==] TIMEOUT 600\n"
        "    ENVIRONMENT [==[${env}]==] ${T_PROPERTIES})\n")
    endforeach()
    set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${T_NAME}_shards.cmake")
    file(GENERATE OUTPUT "${include_file}" CONTENT
      "if(EXISTS [==[$<TARGET_FILE:${T_NAME}>]==])\n${shards}else()\n  add_test([==[${T_NAME}_NOT_BUILT]==] [==[${T_NAME}_NOT_BUILT]==])\nendif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
  else()
    gtest_discover_tests(${T_NAME} PROPERTIES ${props} DISCOVERY_TIMEOUT 60)
  endif()
  foreach(label IN LISTS T_LABELS)
    set_property(GLOBAL APPEND PROPERTY IDEM_TESTS_WITH_LABEL_${label} ${T_NAME})
    set_property(GLOBAL APPEND PROPERTY IDEM_TEST_LABELS ${label})
  endforeach()
endfunction()

# idem_add_label_targets(): one target `tests_<label>` per label given to
# idem_add_test, building every test binary of that label (and what they run, e.g.
# the `idem` binary). The sanitizer builds use them (scripts/sanitize.sh builds only
# `tests_unit tests_conformance tests_crash`, not the whole tree), so a new test
# binary is in its label's sanitizer run without a list to keep up to date.
# Called once, after every test folder is added.
function(idem_add_label_targets)
  get_property(labels GLOBAL PROPERTY IDEM_TEST_LABELS)
  if(NOT labels)
    return()
  endif()
  list(REMOVE_DUPLICATES labels)
  foreach(label IN LISTS labels)
    get_property(targets GLOBAL PROPERTY IDEM_TESTS_WITH_LABEL_${label})
    add_custom_target(tests_${label})
    add_dependencies(tests_${label} ${targets})
  endforeach()
endfunction()
