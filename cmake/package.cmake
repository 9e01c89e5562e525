# package.cmake: the release's packages (included by CMakeLists.txt).
#
# The rockspecs (LuaRocks): lunaloop-scm-1.rockspec and
# rockspecs/lunaloop-VERSION-1.rockspec, written into the source tree from
# cmake/lunaloop.rockspec.in by the target `rockspecs`.
#
# The Debian packages (CPack): `cpack -G DEB` in a build configured with
# -DCMAKE_INSTALL_PREFIX=/usr (so that GNUInstallDirs picks Debian's
# multiarch lib/<triplet>, where lua5.4 also looks for modules; scripts/package
# does this) makes one package per install component (cmake/install.cmake):
#   liblunaloop      runtime  the shared library
#   liblunaloop-dev  dev      headers, static library, CMake and pkg-config files
#   lunaloop         program  the program, its man page and bash completion,
#                             the Lua module and its LuaLS definitions
# Dependencies on other packages come from dpkg-shlibdeps, plus the ones no
# linked library shows (the dev package needs liblua5.4-dev for lua.h).

# The project has not chosen a license yet: this is what the rockspec and
# the Debian copyright files say until it does.
set(LUNA_LICENSE "not yet chosen")

add_custom_target(rockspecs
  COMMAND ${CMAKE_COMMAND} -DVERSION=${PROJECT_VERSION} "-DDESCRIPTION=${PROJECT_DESCRIPTION}"
          -DHOMEPAGE=${PROJECT_HOMEPAGE_URL} "-DLICENSE=${LUNA_LICENSE}"
          -DOUTPUT_DIR=${PROJECT_SOURCE_DIR} -P ${PROJECT_SOURCE_DIR}/cmake/rockspecs.cmake
  COMMENT "Writing lunaloop-scm-1.rockspec and rockspecs/lunaloop-${PROJECT_VERSION}-1.rockspec"
  VERBATIM)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME lunaloop)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "lunaloop maintainers <maintainers@users.noreply.a-seed-67edf13d.example>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev program)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE ${PROJECT_HOMEPAGE_URL})
set(LUNA_DEB_VERSION "${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")

# A shlibs file for each package with a versioned shared library (only
# liblunaloop: the Lua module has no soname), so that packages linking
# liblunaloop get the dependency from dpkg-shlibdeps.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# The first line of each package's description, at most 80 columns (CPack
# indents the lines after it, and would put CPACK_PACKAGE_DESCRIPTION_SUMMARY
# before it unless that is empty). No double quotes: CPack turns them into
# semicolons.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "")
set(LUNA_DEB_SUMMARY "Lua 5.4 task scheduler for game-style frame loops")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME liblunaloop)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
# The ldconfig trigger that Debian asks of a shared library package (CPack
# also adds a postinst and a postrm calling ldconfig; lintian only warns).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_LIST_DIR}/debian/triggers)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "${LUNA_DEB_SUMMARY} (shared library)
lunaloop runs Lua coroutines as tasks that await yields, frame counts,
delays and predicates at one of 16 timings of a frame. This package holds
the shared library for programs that embed it.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME liblunaloop-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "liblunaloop (= ${LUNA_DEB_VERSION}), liblua5.4-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION "${LUNA_DEB_SUMMARY} (development files)
lunaloop runs Lua coroutines as tasks that await yields, frame counts,
delays and predicates at one of 16 timings of a frame. This package holds
the headers, the static library, the CMake package (find_package(lunaloop))
and the pkg-config file (lunaloop.pc) for building programs that embed it.")

set(CPACK_DEBIAN_PROGRAM_PACKAGE_NAME lunaloop)
set(CPACK_DEBIAN_PROGRAM_PACKAGE_SECTION interpreters)
# The module is loaded by a stock lua5.4, which no linked library names.
set(CPACK_DEBIAN_PROGRAM_PACKAGE_RECOMMENDS lua5.4)
set(CPACK_COMPONENT_PROGRAM_DESCRIPTION "${LUNA_DEB_SUMMARY} (program, Lua module)
lunaloop runs Lua coroutines as tasks that await yields, frame counts,
delays and predicates at one of 16 timings of a frame. This package holds
the lunaloop program (run, repl and mods) and the Lua module lunaloop for
a stock lua5.4.")

# Each package's copyright file and Debian changelog, which Debian policy
# asks of every package.
string(TIMESTAMP LUNA_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${CMAKE_CURRENT_LIST_DIR}/debian/copyright.in ${CMAKE_BINARY_DIR}/debian/copyright @ONLY)
foreach(comp runtime dev program)
  string(TOUPPER ${comp} COMP)
  set(pkg ${CPACK_DEBIAN_${COMP}_PACKAGE_NAME})
  set(CPACK_DEBIAN_PACKAGE_NAME_FOR_LOG ${pkg})
  configure_file(${CMAKE_CURRENT_LIST_DIR}/debian/changelog.in
                 ${CMAKE_BINARY_DIR}/debian/${pkg}/changelog.Debian @ONLY)
  execute_process(COMMAND gzip -9nf ${CMAKE_BINARY_DIR}/debian/${pkg}/changelog.Debian)
  install(FILES ${CMAKE_BINARY_DIR}/debian/copyright ${CMAKE_BINARY_DIR}/debian/${pkg}/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${pkg} COMPONENT ${comp})
endforeach()

include(CPack)
