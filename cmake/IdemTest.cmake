# idem_add_test(NAME name SOURCES a.cc ... LIBS x ... LABELS unit [ENV K=V ...])
# Builds one GoogleTest binary and registers each of its tests with CTest, labelled
# so a developer can run one slice (ctest -L unit|conformance|crash|http).
function(idem_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS;ENV" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} idem_testing GTest::gmock GTest::gtest_main)
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  gtest_discover_tests(${T_NAME}
    PROPERTIES LABELS "${T_LABELS}" ENVIRONMENT "${T_ENV}" TIMEOUT 300
    DISCOVERY_TIMEOUT 60)
endfunction()
