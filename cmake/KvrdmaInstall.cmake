# `cmake --install BUILD --prefix P` puts in place:
#   P/lib/libkvrdma.so* (SOVERSION) and libkvrdma.a   the client library
#   P/include/kvrdma/*.h                               its public headers, only
#   P/bin/kvserver, kvctl, kvbench (when built)
#   P/lib/cmake/kvrdma/                                find_package(kvrdma CONFIG)
#   P/lib/pkgconfig/kvrdma.pc                          pkg-config
# (lib is CMAKE_INSTALL_LIBDIR.) Included from the top-level CMakeLists.txt
# after every target exists.
include(CMakePackageConfigHelpers)

set(KVRDMA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvrdma)
set(KVRDMA_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(TARGETS kvrdma_shared kvrdma_static EXPORT kvrdmaTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/include/kvrdma
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")

set(KVRDMA_INSTALL_PROGRAMS kvserver kvctl)
if(TARGET kvbench)
  list(APPEND KVRDMA_INSTALL_PROGRAMS kvbench)
endif()
install(TARGETS ${KVRDMA_INSTALL_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(EXPORT kvrdmaTargets NAMESPACE kvrdma:: DESTINATION ${KVRDMA_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kvrdmaConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvrdmaConfig.cmake INSTALL_DESTINATION ${KVRDMA_CMAKE_DIR})
# 0.x: a minor release may break the API, so only the same major.minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvrdmaConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvrdmaConfig.cmake ${PROJECT_BINARY_DIR}/kvrdmaConfigVersion.cmake
  DESTINATION ${KVRDMA_CMAKE_DIR})

# The .pc file finds the prefix relative to itself, so that it stays right
# whatever --prefix the install is given.
file(RELATIVE_PATH KVRDMA_PC_TO_PREFIX /kvrdma-prefix/${KVRDMA_PC_DIR} /kvrdma-prefix)
string(REGEX REPLACE "/$" "" KVRDMA_PC_TO_PREFIX "${KVRDMA_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/kvrdma.pc.in ${PROJECT_BINARY_DIR}/kvrdma.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kvrdma.pc DESTINATION ${KVRDMA_PC_DIR})
