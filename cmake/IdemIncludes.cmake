# Helpers of the CMake-script checks that read C++ sources (store_layer_test,
# layers_test, examples_include_test): include()d by each with -P.

# idem_source_lines(FILE OUT): the lines of FILE as a list, one element per line,
# blank ones included so that positions are line numbers (file(STRINGS) drops blank
# lines). ';', '[', ']' and '\' would split or join list elements, so they read as
# ',', '(', ')' and '/'.
function(idem_source_lines file out)
  file(READ "${file}" text)
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "[" "(" text "${text}")
  string(REPLACE "]" ")" text "${text}")
  string(REPLACE "\\" "/" text "${text}")
  string(REPLACE "\n" ";" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# idem_includes(FILE OUT): the #include directives of FILE, one element each, as
# "LINE_NUMBER|QUOTE|HEADER|TEXT" (QUOTE is " or <; TEXT the whole line). Read one
# back with idem_include_fields.
function(idem_includes file out)
  idem_source_lines("${file}" lines)
  set(result "")
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*([\"<])([^\">]+)[\">]")
      list(APPEND result "${n}|${CMAKE_MATCH_1}|${CMAKE_MATCH_2}|${line}")
    endif()
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# idem_include_fields(ENTRY): sets inc_line, inc_quote, inc_header and inc_text
# from one element of idem_includes.
macro(idem_include_fields entry)
  string(REGEX MATCH "^([0-9]+)\\|(.)\\|([^|]*)\\|(.*)$" _idem_match "${entry}")
  set(inc_line "${CMAKE_MATCH_1}")
  set(inc_quote "${CMAKE_MATCH_2}")
  set(inc_header "${CMAKE_MATCH_3}")
  set(inc_text "${CMAKE_MATCH_4}")
endmacro()
