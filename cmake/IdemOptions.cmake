# Helpers for idem's AUTO|ON|OFF options (included by the top-level CMakeLists.txt).

# idem_backend_option(NAME "DESCRIPTION" HINT "PACKAGE TO INSTALL" [DEFAULT AUTO|ON|OFF]
#                     PKG_CONFIG MODULE PREFIX | PACKAGE FIND_PACKAGE_ARGS...)
# Declares the cache option IDEM_WITH_<NAME> (AUTO by default) and looks for the
# library a backend needs, either through pkg-config (MODULE, imported as
# PkgConfig::PREFIX) or with find_package(FIND_PACKAGE_ARGS...):
#   AUTO  built when the library is found, left out (with a message) when not;
#   ON    the library is required: configuration fails, naming it, when it is missing;
#   OFF   not built, and the library is not looked for.
# Afterwards IDEM_WITH_<NAME> is plain ON or OFF (a normal variable shadowing the
# cache entry), which the subdirectories test with if(IDEM_WITH_<NAME>).
function(idem_backend_option name description)
  cmake_parse_arguments(B "" "HINT;DEFAULT" "PKG_CONFIG;PACKAGE" ${ARGN})
  if(NOT DEFINED B_DEFAULT)
    set(B_DEFAULT AUTO)
  endif()
  set(var IDEM_WITH_${name})
  set(${var} ${B_DEFAULT} CACHE STRING "${description}: AUTO (when found), ON, OFF")
  set_property(CACHE ${var} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${var}}" mode)
  if(mode STREQUAL "AUTO")
    set(quiet QUIET)
  elseif(${var})  # ON, TRUE, 1, YES
    set(mode ON)
    set(quiet "")
  else()
    set(${var} OFF PARENT_SCOPE)
    return()
  endif()
  if(B_PKG_CONFIG)
    list(GET B_PKG_CONFIG 0 module)
    list(GET B_PKG_CONFIG 1 prefix)
    pkg_check_modules(${prefix} ${quiet} IMPORTED_TARGET GLOBAL ${module})
    set(found ${${prefix}_FOUND})
    set(what "pkg-config module ${module}")
  else()
    list(GET B_PACKAGE 0 package)
    find_package(${B_PACKAGE} ${quiet})
    set(found ${${package}_FOUND})
    set(what "CMake package ${package}")
  endif()
  if(found)
    set(${var} ON PARENT_SCOPE)
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR "${var}=ON, but the ${what} was not found (Debian: ${B_HINT}): "
                        "install it, or configure with -D${var}=AUTO or OFF")
  else()
    message(STATUS "${var}=AUTO: ${what} not found, so ${description} is not built "
                   "(Debian: ${B_HINT})")
    set(${var} OFF PARENT_SCOPE)
  endif()
endfunction()

# idem_optional_package(VAR PACKAGE): VAR (AUTO|ON|OFF) becomes a plain ON/OFF in
# ${VAR}_ENABLED, finding PACKAGE as REQUIRED only when VAR is ON.
macro(idem_optional_package var package)
  string(TOUPPER "${${var}}" _idem_mode)
  if(_idem_mode STREQUAL "AUTO")
    find_package(${package} QUIET)
    if(${package}_FOUND)
      set(${var}_ENABLED ON)
    else()
      set(${var}_ENABLED OFF)
      message(STATUS "${package} not found: ${var}=AUTO skips them (install it or pass -D${var}=ON)")
    endif()
  elseif(_idem_mode)  # ON, TRUE, 1, YES
    find_package(${package} REQUIRED)
    set(${var}_ENABLED ON)
  else()
    set(${var}_ENABLED OFF)
  endif()
endmacro()
