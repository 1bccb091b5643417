# cmake -DROOT=<source dir> -P citations_check.cmake
# What a user of idem reads (include/, src/, examples/, docs/, packaging/, clients/
# and README.md) says what it means instead of citing documents the user does not have.
# Fails, naming each file and line, on:
#   - the word SPEC, SPEC.md, or a design document of seeds/ (the product contract and
#     the documents it was made from are not part of the repository);
#   - "§<digit>", unless it follows a document the reader has: an RFC ("RFC 9112
#     §3.2"), ECMA-262, or a file of this repository ("docs/operations.md §7a");
#   - "seed 0" or "seed 1", the names of those design documents (a random seed is
#     "--seed 1" or "random seed 1");
#   - "issue <number>" (an issue tracker the user cannot see).
# Say the rule or behaviour itself, in a few words, or point at a file of docs/.
cmake_minimum_required(VERSION 3.20)
if(NOT IS_DIRECTORY "${ROOT}/src" OR NOT IS_DIRECTORY "${ROOT}/include")
  message(FATAL_ERROR "ROOT is not idem's source directory: '${ROOT}'")
endif()

# A section sign after a document the reader has, with any further sections of the
# same document ("RFC 9110 §7.6.1, §8"): removed before the search.
set(cited_doc "(RFC [0-9]+|ECMA-[0-9]+|[A-Za-z0-9_./-]+\\.(md|h|cc|yaml|toml))")
set(section "§[0-9][0-9A-Za-z.]*")
set(allowed_section "${cited_doc} ${section}((, | and |–|-)${section})*")
set(allowed_seed "(--|random |fuzz )[Ss]eed [01]")
set(citation "(^|[^A-Za-z0-9_])SPEC([^A-Za-z0-9_]|$)|SPEC\\.md|seeds/[A-Za-z0-9_-]+\\.zh|§[0-9]|(^|[^A-Za-z0-9_])[Ss]eed [01]([^0-9.]|$)|(^|[^A-Za-z0-9_])[Ii]ssue #?[0-9]")

# The files: every file under the folders (they hold text only), and README.md.
set(files "${ROOT}/README.md")
foreach(dir include src examples docs packaging clients)
  file(GLOB_RECURSE dir_files "${ROOT}/${dir}/*")
  list(FILTER dir_files EXCLUDE REGEX "/(node_modules|__pycache__|\\.venv|target)/")
  list(APPEND files ${dir_files})
endforeach()
list(SORT files)

set(found "")
foreach(file IN LISTS files)
  file(READ "${file}" content)
  string(REGEX REPLACE "${allowed_section}" "" text "${content}")
  string(REGEX REPLACE "${allowed_seed}" "" text "${text}")
  if(NOT text MATCHES "${citation}")
    continue()
  endif()
  # Only a file with a citation is split into lines, to name them. A list element
  # must not hold ';' or an unbalanced '[' ']': those are replaced first.
  string(REPLACE ";" "<semicolon>" text "${text}")
  string(REPLACE "[" "<open>" text "${text}")
  string(REPLACE "]" "<close>" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  file(RELATIVE_PATH rel "${ROOT}" "${file}")
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(line MATCHES "${citation}")
      string(REPLACE "<semicolon>" ";" line "${line}")
      string(REPLACE "<open>" "[" line "${line}")
      string(REPLACE "<close>" "]" line "${line}")
      string(STRIP "${line}" line)
      string(APPEND found "\n  ${rel}:${n}: ${line}")
    endif()
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "These lines cite a document a user of idem does not have (the SPEC, "
    "a design document, an issue). Say what is meant in a few words, or point at a file "
    "of docs/ (tests/citations_check.cmake):${found}")
endif()
list(LENGTH files count)
message(STATUS "${count} files under include/, src/, examples/, docs/, packaging/, clients/ and "
  "README.md: none cites the SPEC, a design document or an issue")
