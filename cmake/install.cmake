# What `cmake --install` puts under the prefix for a C++ consumer:
#   include/idem/*.h                       the public API (the only installed headers)
#   lib/libidem*.a                         idem::idem (OpenStore), idem::core and one per backend
#   lib/cmake/idem/idemConfig.cmake        find_package(idem [COMPONENTS postgres mysql redis rocksdb])
#   lib/pkgconfig/idem.pc                  pkg-config --cflags --libs idem
#   include/idem/messaging/*.h, lib/libidem_messaging.a, lib/pkgconfig/idem-messaging.pc
#                                          idem::messaging (the consumer runner and its
#                                          transports), when built (IDEM_WITH_KAFKA)
# The binaries install themselves (src/cli, src/demo).
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/idem DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT dev FILES_MATCHING PATTERN "*.h" PATTERN messaging EXCLUDE)

set(IDEM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/idem)
install(EXPORT idemTargets NAMESPACE idem:: DESTINATION ${IDEM_CMAKE_DIR}
  FILE idemTargets.cmake COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/idemConfig.cmake.in
  ${PROJECT_BINARY_DIR}/idemConfig.cmake INSTALL_DESTINATION ${IDEM_CMAKE_DIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/idemConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/idemConfig.cmake ${PROJECT_BINARY_DIR}/idemConfigVersion.cmake
  DESTINATION ${IDEM_CMAKE_DIR} COMPONENT dev)

# pkg-config: the libraries are static, so Libs names every one of them and
# Requires every library they use.
set(IDEM_PC_LIBS "-lidem")
set(IDEM_PC_REQUIRES "absl_status absl_statusor absl_strings absl_str_format absl_cord")
string(APPEND IDEM_PC_REQUIRES " absl_time absl_span absl_synchronization sqlite3 libcrypto")
if(IDEM_WITH_POSTGRES)
  string(APPEND IDEM_PC_LIBS " -lidem_postgres")
  string(APPEND IDEM_PC_REQUIRES " libpq")
endif()
if(IDEM_WITH_MYSQL)
  string(APPEND IDEM_PC_LIBS " -lidem_mysql")
  string(APPEND IDEM_PC_REQUIRES " libmariadb")
endif()
if(IDEM_WITH_ROCKSDB)
  string(APPEND IDEM_PC_LIBS " -lidem_rocksdb")
  # Its key lock table: absl's hash containers (hash seed, raw_hash_set).
  string(APPEND IDEM_PC_REQUIRES " rocksdb absl_flat_hash_map absl_flat_hash_set absl_hash")
  string(APPEND IDEM_PC_REQUIRES " absl_raw_hash_set absl_inlined_vector")
endif()
string(APPEND IDEM_PC_LIBS " -lidem_sqlite -lidem_cache")
if(IDEM_WITH_REDIS)
  string(APPEND IDEM_PC_LIBS " -lidem_redis")
  string(APPEND IDEM_PC_REQUIRES " hiredis")
endif()
string(APPEND IDEM_PC_LIBS " -lidem_memory -lidem_core -lidem_store_base -pthread")
# The prefix relative to the .pc file (lib/pkgconfig, or lib/x86_64-linux-gnu/pkgconfig
# under /usr on Debian), so the installed tree can be moved (dpkg --root, --prefix).
file(RELATIVE_PATH IDEM_PC_PREFIX_FROM_PCDIR "/x/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/x")
string(REGEX REPLACE "/$" "" IDEM_PC_PREFIX_FROM_PCDIR "${IDEM_PC_PREFIX_FROM_PCDIR}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/idem.pc.in ${PROJECT_BINARY_DIR}/idem.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/idem.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT dev)
# idem-messaging.pc: idem::messaging on top of idem.pc (pkg-config --cflags --libs
# idem-messaging gives both). Its headers install with its target (src/messaging).
if(TARGET idem_messaging)
  set(IDEM_MESSAGING_PC_REQUIRES "idem = ${PROJECT_VERSION}, rdkafka, spdlog")
  if(IDEM_WITH_REDIS)
    string(APPEND IDEM_MESSAGING_PC_REQUIRES ", hiredis")
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/idem-messaging.pc.in
    ${PROJECT_BINARY_DIR}/idem-messaging.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/idem-messaging.pc
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
endif()
