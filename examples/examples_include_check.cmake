# cmake -DEXAMPLES_DIR=<examples> -DINCLUDE_DIR=<include> -P examples_include_check.cmake
# A user copies an example out of the repository and builds it against an idem
# install, so its files may include only:
#   - idem's installed headers: "idem/…" that exists under INCLUDE_DIR;
#   - the examples' own headers: "refund/…", "consumer/…" (a directory of
#     EXAMPLES_DIR), or a file beside the including one, when it exists;
#   - the third-party libraries the examples use (absl, nlohmann, spdlog, Boost,
#     librdkafka, CLI11) and the system's.
# Fails naming each file and line that includes anything else (src/'s core/…,
# cli/…, store/…, http/…, messaging/…, the tests' testing/…, GoogleTest), and each
# CMakeLists.txt under EXAMPLES_DIR that adds the source tree's src/ to an include path.
cmake_minimum_required(VERSION 3.20)
foreach(dir EXAMPLES_DIR INCLUDE_DIR)
  if(NOT IS_DIRECTORY "${${dir}}")
    message(FATAL_ERROR "${dir} is not a directory: '${${dir}}'")
  endif()
endforeach()
# The lines of a file as a list, one element per line (empty ones included, so the
# numbers are right): ';', '[', ']' and '\' would split or join list elements, so
# they read as ',', '(', ')' and '/'.
function(idem_examples_lines file out)
  file(READ "${file}" text)
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "[" "(" text "${text}")
  string(REPLACE "]" ")" text "${text}")
  string(REPLACE "\\" "/" text "${text}")
  string(REPLACE "\n" ";" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

set(third_party absl nlohmann spdlog boost librdkafka CLI sys arpa netinet linux)
file(GLOB own_dirs LIST_DIRECTORIES true RELATIVE "${EXAMPLES_DIR}" "${EXAMPLES_DIR}/*")
set(found "")
file(GLOB_RECURSE files "${EXAMPLES_DIR}/*.h" "${EXAMPLES_DIR}/*.hpp" "${EXAMPLES_DIR}/*.cc"
     "${EXAMPLES_DIR}/*.cpp")
list(SORT files)
foreach(file IN LISTS files)
  get_filename_component(here "${file}" DIRECTORY)
  file(RELATIVE_PATH rel "${EXAMPLES_DIR}" "${file}")
  idem_examples_lines("${file}" lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*([\"<])([^\">]+)[\">]")
      continue()
    endif()
    set(quote "${CMAKE_MATCH_1}")
    set(header "${CMAKE_MATCH_2}")
    string(REGEX REPLACE "/.*" "" top "${header}")
    if(header MATCHES "^idem/")
      set(ok FALSE)
      if(EXISTS "${INCLUDE_DIR}/${header}")
        set(ok TRUE)
      endif()
    elseif(NOT header MATCHES "/")
      # <vector>, <poll.h>: the system's; "x.h": beside the including file.
      set(ok TRUE)
      if(quote STREQUAL "\"" AND NOT EXISTS "${here}/${header}")
        set(ok FALSE)
      endif()
    elseif(top IN_LIST own_dirs AND IS_DIRECTORY "${EXAMPLES_DIR}/${top}")
      set(ok FALSE)
      if(EXISTS "${EXAMPLES_DIR}/${header}")
        set(ok TRUE)
      endif()
    elseif(top IN_LIST third_party)
      set(ok TRUE)
    else()
      set(ok FALSE)
    endif()
    if(NOT ok)
      string(APPEND found "\n  ${rel}:${n}: ${line}")
    endif()
  endforeach()
endforeach()
file(GLOB_RECURSE cmake_files "${EXAMPLES_DIR}/CMakeLists.txt")
list(SORT cmake_files)
foreach(file IN LISTS cmake_files)
  file(RELATIVE_PATH rel "${EXAMPLES_DIR}" "${file}")
  idem_examples_lines("${file}" lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(line MATCHES "(PROJECT_SOURCE_DIR|CMAKE_SOURCE_DIR)}/src([/ )\"]|$)")
      string(APPEND found "\n  ${rel}:${n}: ${line}")
    endif()
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "examples/ may include only installed idem headers (include/idem) and "
                      "third-party ones (a user copies an example out of the repository):${found}")
endif()
list(LENGTH files count)
message(STATUS "examples/: ${count} files, each including only installed idem headers, "
               "its own and third-party ones")
