# cmake -DROOT=<source dir> -P versions_check.cmake
# The clients are released with idem and carry its version: the `version` of
# clients/python/pyproject.toml, idem_client.__version__, the Go package's Version
# (the module is tagged with idem's version) and, when the files exist, the
# `version` of clients/node/package.json and the Node client's VERSION each equal
# `project(idem VERSION ...)` of the top-level CMakeLists.txt: the clients send it in
# their User-Agent. Fails naming each file that differs and what it holds.
cmake_minimum_required(VERSION 3.20)
if(NOT EXISTS "${ROOT}/CMakeLists.txt" OR NOT IS_DIRECTORY "${ROOT}/clients")
  message(FATAL_ERROR "ROOT is not idem's source directory: '${ROOT}'")
endif()

file(READ "${ROOT}/CMakeLists.txt" top)
if(NOT top MATCHES "project\\(idem VERSION ([0-9]+\\.[0-9]+\\.[0-9]+)")
  message(FATAL_ERROR "CMakeLists.txt: no project(idem VERSION x.y.z)")
endif()
set(want "${CMAKE_MATCH_1}")

# check(FILE REGEX): FILE's first match of REGEX (group 1) must be ${want}.
set(wrong "")
function(check file regex)
  if(NOT EXISTS "${ROOT}/${file}")
    set(wrong "${wrong}\n  ${file}: missing" PARENT_SCOPE)
    return()
  endif()
  file(READ "${ROOT}/${file}" content)
  if(NOT content MATCHES "${regex}")
    set(wrong "${wrong}\n  ${file}: no version found" PARENT_SCOPE)
  elseif(NOT CMAKE_MATCH_1 STREQUAL want)
    set(wrong "${wrong}\n  ${file}: version ${CMAKE_MATCH_1}" PARENT_SCOPE)
  endif()
endfunction()

check(clients/python/pyproject.toml "\n\\[project\\][^[]*\nversion = \"([^\"]*)\"")
check(clients/python/idem_client/__init__.py "\n__version__ = \"([^\"]*)\"")
check(clients/go/idem/version.go "\nconst Version = \"([^\"]*)\"")
if(EXISTS "${ROOT}/clients/node/src/version.ts")
  check(clients/node/src/version.ts "\nexport const VERSION = \"([^\"]*)\"")
endif()
if(EXISTS "${ROOT}/clients/node/package.json")
  file(READ "${ROOT}/clients/node/package.json" package)
  string(JSON node_version ERROR_VARIABLE json_error GET "${package}" version)
  if(json_error)
    set(wrong "${wrong}\n  clients/node/package.json: ${json_error}")
  elseif(NOT node_version STREQUAL want)
    set(wrong "${wrong}\n  clients/node/package.json: version ${node_version}")
  endif()
endif()

if(wrong)
  message(FATAL_ERROR "the clients' versions differ from idem's ${want} "
                      "(project(idem VERSION ...) in CMakeLists.txt):${wrong}")
endif()
message(STATUS "the clients carry idem's version ${want}")
