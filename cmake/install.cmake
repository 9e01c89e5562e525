# install.cmake: the installable lunaloop (included by CMakeLists.txt).
#
# `cmake --install BUILD [--prefix P]` installs:
#   lib/liblunaloop.a, lib/liblunaloop.so*  the core, the Lua binding and the
#                                           mods layer in one library (it
#                                           links liblua5.4)
#   include/lunaloop.h, lunaloop_lua.h, lunaloop/*.h
#   LIBDIR/lua/5.4/lunaloop.so              the module for `require "lunaloop"`
#                                           (where a stock lua5.4 looks when
#                                           P is /usr/local, LIBDIR lib, or /usr,
#                                           LIBDIR Debian's lib/<multiarch>;
#                                           LUNA_INSTALL_LUA_CMOD)
#   bin/lunaloop                            the program, with its man page and
#                                           bash completion (cmake/docs.cmake)
#   share/lunaloop/types.lua                the LuaLS definitions of the module
#   lib/cmake/lunaloop/                     find_package(lunaloop): the targets
#                                           lunaloop::lunaloop (shared) and
#                                           lunaloop::lunaloop_static
#   lib/pkgconfig/lunaloop.pc               pkg-config lunaloop (relocatable)
# tests/embed/install_test.sh installs into a temporary prefix and builds a
# consumer against it both ways.
#
# Each file belongs to one component, which is one Debian package
# (cmake/package.cmake): runtime (the shared library: liblunaloop), dev
# (headers, static library, CMake and pkg-config files: liblunaloop-dev) and
# program (the program, the Lua module and the files for their users:
# lunaloop). A plain `cmake --install` installs all three.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(LUNA_INSTALL_LUA_CMOD "${CMAKE_INSTALL_LIBDIR}/lua/5.4" CACHE STRING
    "Directory of the Lua module lunaloop.so, relative to the install prefix (lua5.4's default package.cpath has /usr/local/lib/lua/5.4/?.so and, on Debian, /usr/lib/<multiarch>/lua/5.4/?.so)")

# The Lua module and its LuaLS definitions: all that LUNA_MODULE_ONLY (the
# rockspec's build) installs.
install(TARGETS lunaloop_module LIBRARY DESTINATION ${LUNA_INSTALL_LUA_CMOD} COMPONENT program)
install(FILES ${PROJECT_SOURCE_DIR}/lua/lunaloop/types.lua
  DESTINATION ${CMAKE_INSTALL_DATADIR}/lunaloop COMPONENT program)
if(LUNA_MODULE_ONLY)
  return()
endif()

set(LUNA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/lunaloop" CACHE STRING
    "Directory of the CMake package files, relative to the install prefix")

# Lua 5.4 for the exported targets, under a name that the installed
# lunaloopConfig.cmake can create again in the consumer's project.
pkg_check_modules(LUNALOOP_LUA54 REQUIRED QUIET IMPORTED_TARGET lua5.4)

# The installed libraries are compiled from the same sources as the
# in-tree archives (which the tests, the module and the program use): the
# core, the Lua binding and, when present, the mods layer, so that every
# installed header has its implementation in the library.
foreach(kind static shared)
  string(TOUPPER ${kind} KIND)
  add_library(lunaloop_${kind} ${KIND}
              ${LUNA_CORE_SOURCES} ${LUNA_LUA_SOURCES} ${LUNA_LUA_CHUNKS_C}
              ${LUNA_MODS_SOURCES})
  target_include_directories(lunaloop_${kind}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
           $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/include>
           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${PROJECT_SOURCE_DIR}/src/core ${PROJECT_SOURCE_DIR}/src/lua
            ${PROJECT_SOURCE_DIR}/src/mods)
  target_link_libraries(lunaloop_${kind} PUBLIC PkgConfig::LUNALOOP_LUA54 Threads::Threads m)
  set_target_properties(lunaloop_${kind} PROPERTIES
    OUTPUT_NAME lunaloop
    EXPORT_NAME lunaloop_${kind}
    ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
endforeach()
# The soname carries what lunaloop/version.h promises stays compatible:
# MAJOR from 1.0 on, MAJOR.MINOR while MAJOR is 0 (a 0.x MINOR release may
# break the ABI), as the CMake package's version file below says too.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(LUNA_SOVERSION "0.${PROJECT_VERSION_MINOR}")
  set(LUNA_CMAKE_COMPATIBILITY SameMinorVersion)
else()
  set(LUNA_SOVERSION "${PROJECT_VERSION_MAJOR}")
  set(LUNA_CMAKE_COMPATIBILITY SameMajorVersion)
endif()
set_target_properties(lunaloop_shared PROPERTIES
  EXPORT_NAME lunaloop
  VERSION ${PROJECT_VERSION}
  SOVERSION ${LUNA_SOVERSION})

install(TARGETS lunaloop_static lunaloop_shared EXPORT lunaloopTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# lunaloop/extension.h is the core's interface for the layers built with it
# into this library (not an API for hosts), so it is not installed.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT dev FILES_MATCHING PATTERN "*.h" PATTERN "extension.h" EXCLUDE)
install(FILES ${CMAKE_BINARY_DIR}/include/lunaloop/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lunaloop COMPONENT dev)
if(TARGET lunaloop)
  install(TARGETS lunaloop RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT program)
endif()

# The CMake package.
install(EXPORT lunaloopTargets NAMESPACE lunaloop:: DESTINATION ${LUNA_INSTALL_CMAKEDIR}
  COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/lunaloopConfig.cmake.in
  ${CMAKE_BINARY_DIR}/lunaloopConfig.cmake
  INSTALL_DESTINATION ${LUNA_INSTALL_CMAKEDIR}
  PATH_VARS LUNA_INSTALL_LUA_CMOD)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/lunaloopConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${LUNA_CMAKE_COMPATIBILITY})
install(FILES ${CMAKE_BINARY_DIR}/lunaloopConfig.cmake ${CMAKE_BINARY_DIR}/lunaloopConfigVersion.cmake
  DESTINATION ${LUNA_INSTALL_CMAKEDIR} COMPONENT dev)

# The pkg-config file finds its prefix from its own place (${pcfiledir}),
# so the installed tree can be moved, and --prefix at install time works.
file(RELATIVE_PATH LUNA_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" LUNA_PC_TO_PREFIX "${LUNA_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/lunaloop.pc.in ${CMAKE_BINARY_DIR}/lunaloop.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/lunaloop.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT dev)
