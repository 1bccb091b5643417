# cmake -DROOT=<source dir> -DTARGETS=<build>/idem_targets.cmake -P layers_check.cmake
# A file under src/ includes only headers of the targets its own target links.
# TARGETS is written by CMake at configure time (cmake/IdemLayers.cmake): idem's own
# targets, each with its sources and the idem targets it links. The rules:
#   1. A source belongs to the targets that list it. A header belongs to the targets
#      of the source of the same name beside it (x.h and x.cc); one without such a
#      source, to the targets with sources in its folder or, in a folder without any
#      (src/http), below it. A file that so belongs to no target (its target is not
#      built in this configuration: no Kafka, no Redis) is not checked.
#   2. An include in quotes that names a file under src/ ("http/api/api.h") is a
#      header of the targets that file belongs to (rule 1). One that names a file
#      under include/: "idem/<sub>/…" is a header of the targets with sources in
#      src/<sub> (idem/messaging/…: idem::messaging); any other "idem/…" is a header
#      of every library that puts include/ on its users' include path. Other
#      includes (the system's, the libraries', tests/, examples/) are not checked.
#   3. The include passes when the including file's target (one of them) is a
#      target of the header or links one, directly or through the targets it links
#      (PUBLIC or PRIVATE), or when the header is in the including file's own folder.
# Fails naming each file and line that breaks rule 3, with the targets involved. The
# fix is a link the code needs (target_link_libraries) or the removal of an include
# it does not use; a dependency that is not meant to be is a redesign, not an
# exception here.
cmake_minimum_required(VERSION 3.20)
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/IdemIncludes.cmake)
if(NOT IS_DIRECTORY "${ROOT}/src" OR NOT IS_DIRECTORY "${ROOT}/include")
  message(FATAL_ERROR "ROOT is not idem's source directory: '${ROOT}'")
endif()
if(NOT EXISTS "${TARGETS}")
  message(FATAL_ERROR "TARGETS does not exist: '${TARGETS}' (written when CMake configures)")
endif()
include("${TARGETS}")
set(src "${ROOT}/src")

# What each target reaches: itself and the idem targets it links, transitively.
foreach(target IN LISTS IDEM_TARGETS)
  set(reach "${target}")
  set(todo ${IDEM_TARGET_${target}_LINKS})
  while(todo)
    list(POP_FRONT todo next)
    if(NOT next IN_LIST reach)
      list(APPEND reach "${next}")
      list(APPEND todo ${IDEM_TARGET_${next}_LINKS})
    endif()
  endwhile()
  set(reach_${target} "${reach}")
endforeach()

# Rule 1's tables: the targets of each source, and of each folder (relative to src/).
set(public_targets "")
foreach(target IN LISTS IDEM_TARGETS)
  if(IDEM_TARGET_${target}_EXPORTS_INCLUDE)
    list(APPEND public_targets "${target}")
  endif()
  foreach(file IN LISTS IDEM_TARGET_${target}_SOURCES)
    cmake_path(IS_PREFIX src "${file}" NORMALIZE under_src)
    if(NOT under_src)
      continue()
    endif()
    file(RELATIVE_PATH rel "${src}" "${file}")
    string(MAKE_C_IDENTIFIER "${rel}" key)
    list(APPEND file_${key} "${target}")
    cmake_path(GET rel PARENT_PATH folder)
    string(MAKE_C_IDENTIFIER "f_${folder}" key)
    list(APPEND folder_${key} "${target}")
    while(NOT folder STREQUAL "")
      string(MAKE_C_IDENTIFIER "f_${folder}" key)
      list(APPEND below_${key} "${target}")
      cmake_path(GET folder PARENT_PATH folder)
    endwhile()
  endforeach()
endforeach()

# The targets rel (a path relative to src/) belongs to (rule 1).
function(targets_of rel out)
  string(MAKE_C_IDENTIFIER "${rel}" key)
  string(REGEX REPLACE "\\.[^./]+$" ".cc" twin "${rel}")
  string(MAKE_C_IDENTIFIER "${twin}" twin_key)
  cmake_path(GET rel PARENT_PATH folder)
  string(MAKE_C_IDENTIFIER "f_${folder}" folder_key)
  if(DEFINED file_${key})
    set(result "${file_${key}}")
  elseif(rel MATCHES "\\.cc$" OR EXISTS "${src}/${twin}")
    set(result "${file_${twin_key}}")
  elseif(DEFINED folder_${folder_key})
    set(result "${folder_${folder_key}}")
  else()
    set(result "${below_${folder_key}}")
  endif()
  list(REMOVE_DUPLICATES result)
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

set(found "")
set(count 0)
file(GLOB_RECURSE files RELATIVE "${src}" "${src}/*.h" "${src}/*.cc")
list(SORT files)
foreach(rel IN LISTS files)
  targets_of("${rel}" owners)
  if(NOT owners)
    continue()
  endif()
  math(EXPR count "${count} + 1")
  cmake_path(GET rel PARENT_PATH own_folder)
  set(reach "")
  foreach(owner IN LISTS owners)
    list(APPEND reach ${reach_${owner}})
  endforeach()
  idem_includes("${src}/${rel}" includes)
  foreach(entry IN LISTS includes)
    idem_include_fields("${entry}")
    if(NOT inc_quote STREQUAL "\"")
      continue()
    endif()
    set(n "${inc_line}")
    set(line "${inc_text}")
    set(header "${inc_header}")
    if(EXISTS "${src}/${header}")
      cmake_path(GET header PARENT_PATH folder)
      if(folder STREQUAL own_folder)
        continue()
      endif()
      targets_of("${header}" wanted)
    elseif(EXISTS "${ROOT}/include/${header}")
      if(header MATCHES "^idem/([^/]+)/" AND IS_DIRECTORY "${src}/${CMAKE_MATCH_1}")
        targets_of("${CMAKE_MATCH_1}/-.h" wanted)
      else()
        set(wanted "${public_targets}")
      endif()
    else()
      continue()
    endif()
    if(NOT wanted)
      continue()  # a header of a target not built in this configuration
    endif()
    set(ok FALSE)
    foreach(target IN LISTS wanted)
      if(target IN_LIST reach)
        set(ok TRUE)
        break()
      endif()
    endforeach()
    if(NOT ok)
      string(REPLACE ";" ", " owners_text "${owners}")
      string(REPLACE ";" ", " wanted_text "${wanted}")
      string(APPEND found "\n  src/${rel}:${n}: ${line}\n"
        "    (the file's target ${owners_text} links none of ${wanted_text})")
    endif()
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "Includes of headers whose target the including target does not link "
    "(tests/layers_check.cmake names the rules):${found}")
endif()
message(STATUS "src/: ${count} files checked, each includes only headers of targets its target links")
