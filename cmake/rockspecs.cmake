# rockspecs.cmake: writes the two rockspecs from cmake/lunaloop.rockspec.in.
#   cmake -DVERSION=X.Y.Z -DDESCRIPTION=... -DHOMEPAGE=... -DLICENSE=... -DOUTPUT_DIR=DIR -P rockspecs.cmake
# writes DIR/lunaloop-scm-1.rockspec (the development version, from the main
# branch: `luarocks make` in a clone) and DIR/rockspecs/lunaloop-X.Y.Z-1.rockspec
# (the release, from the tag vX.Y.Z). The target `rockspecs` runs it on the
# source tree; tests/package runs it into a temporary folder and compares.
cmake_minimum_required(VERSION 3.16)
set(PROJECT_DESCRIPTION "${DESCRIPTION}")
set(PROJECT_HOMEPAGE_URL "${HOMEPAGE}")
set(LUNA_LICENSE "${LICENSE}")
get_filename_component(template "${CMAKE_CURRENT_LIST_DIR}/lunaloop.rockspec.in" ABSOLUTE)

set(ROCK_VERSION "scm-1")
set(ROCK_SOURCE_REF "branch = \"main\",")
configure_file(${template} ${OUTPUT_DIR}/lunaloop-scm-1.rockspec @ONLY)

set(ROCK_VERSION "${VERSION}-1")
set(ROCK_SOURCE_REF "tag = \"v${VERSION}\",")
configure_file(${template} ${OUTPUT_DIR}/rockspecs/lunaloop-${VERSION}-1.rockspec @ONLY)

# -DCHECK_DIR=SOURCE: fail unless SOURCE holds the same two files.
if(CHECK_DIR)
  foreach(f lunaloop-scm-1.rockspec rockspecs/lunaloop-${VERSION}-1.rockspec)
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUTPUT_DIR}/${f} ${CHECK_DIR}/${f}
                    RESULT_VARIABLE differ)
    if(differ)
      message(FATAL_ERROR "${CHECK_DIR}/${f} is missing or is not what cmake/lunaloop.rockspec.in "
                          "gives for version ${VERSION}: run `cmake --build BUILD --target rockspecs` "
                          "(and remove the rockspecs of other versions)")
    endif()
  endforeach()
  file(GLOB others RELATIVE ${CHECK_DIR} ${CHECK_DIR}/rockspecs/*.rockspec)
  list(REMOVE_ITEM others rockspecs/lunaloop-${VERSION}-1.rockspec)
  if(others)
    message(FATAL_ERROR "rockspecs of another version than ${VERSION}: ${others}")
  endif()
endif()
