# One man page from a program's --help: cmake -DIDEM=… -DSUB=… -DPAGE=… -DWHAT=…
# -DHELP2MAN=… -DGZIP=… -DVERSION=… -DOUT=… -P man_page.cmake
# help2man runs the program it is given; for a subcommand that is a small script
# named after the page (idem-serve), so the page's NAME reads "idem-serve".
set(program ${IDEM})
if(NOT SUB STREQUAL "")
  set(program ${OUT}/${PAGE})
  file(WRITE ${program} "#!/bin/sh\nexec \"${IDEM}\" ${SUB} \"$@\"\n")
  file(CHMOD ${program} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
       WORLD_READ WORLD_EXECUTE)
endif()
# A UTF-8 locale: the help has "…" and "—", which the C locale turns into "??".
execute_process(
  COMMAND ${HELP2MAN} --locale=C.UTF-8 --no-info --no-discard-stderr --version-string=${VERSION}
          --name=${WHAT} --section=1 --source=idem --output=${OUT}/${PAGE}.1 ${program}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "help2man failed for ${PAGE}")
endif()
execute_process(COMMAND ${GZIP} -9nf ${OUT}/${PAGE}.1 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip failed for ${PAGE}.1")
endif()
if(NOT SUB STREQUAL "")
  file(REMOVE ${program})
endif()
