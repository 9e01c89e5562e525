# docs.cmake: the man page and the bash completion of the lunaloop program
# (included by CMakeLists.txt). Both are generated from the program's --help
# text (src/cli/main.c), the one list of its commands and options, so none
# of the three can drift from the others:
#   lunaloop.1, lunaloop.1.gz  help2man over `lunaloop --help` and --version,
#                              with cmake/lunaloop.h2m for SEE ALSO
#   lunaloop.bash              cmake/completion.cmake over `lunaloop --help`
# installed as share/man/man1/lunaloop.1.gz and
# share/bash-completion/completions/lunaloop (where bash-completion looks
# under /usr and, through XDG_DATA_DIRS, /usr/local).
#
# They run the program at build time, so they are built only without
# sanitizers (a sanitizer's runtime may refuse to start under the build, and
# such builds are not installed anyway).
if(TARGET lunaloop AND LUNA_SANITIZE STREQUAL "")
  find_program(LUNA_HELP2MAN help2man)
  find_program(LUNA_GZIP gzip)
  if(LUNA_HELP2MAN AND LUNA_GZIP)
    add_custom_command(
      OUTPUT ${CMAKE_BINARY_DIR}/lunaloop.1 ${CMAKE_BINARY_DIR}/lunaloop.1.gz
      COMMAND ${LUNA_HELP2MAN} --no-info --section=1 --no-discard-stderr
              "--name=run Lua scripts as tasks on a game-style frame loop"
              --include=${PROJECT_SOURCE_DIR}/cmake/lunaloop.h2m
              --output=${CMAKE_BINARY_DIR}/lunaloop.1 $<TARGET_FILE:lunaloop>
      # -n: no name or time stamp inside, so the package is reproducible.
      COMMAND ${LUNA_GZIP} -9nf -k ${CMAKE_BINARY_DIR}/lunaloop.1
      DEPENDS lunaloop ${PROJECT_SOURCE_DIR}/cmake/lunaloop.h2m
      COMMENT "Generating the man page lunaloop.1 from lunaloop --help")
    add_custom_target(lunaloop_man ALL DEPENDS ${CMAKE_BINARY_DIR}/lunaloop.1.gz)
    install(FILES ${CMAKE_BINARY_DIR}/lunaloop.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
            COMPONENT program)
  else()
    message(WARNING "help2man or gzip not found: the man page is not built "
                    "(apt-get install help2man)")
  endif()

  add_custom_command(
    OUTPUT ${CMAKE_BINARY_DIR}/lunaloop.bash
    COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:lunaloop>
            -DTEMPLATE=${PROJECT_SOURCE_DIR}/cmake/lunaloop.bash.in
            -DOUTPUT=${CMAKE_BINARY_DIR}/lunaloop.bash
            -P ${PROJECT_SOURCE_DIR}/cmake/completion.cmake
    DEPENDS lunaloop ${PROJECT_SOURCE_DIR}/cmake/lunaloop.bash.in
            ${PROJECT_SOURCE_DIR}/cmake/completion.cmake
    COMMENT "Generating the bash completion lunaloop.bash from lunaloop --help")
  add_custom_target(lunaloop_completion ALL DEPENDS ${CMAKE_BINARY_DIR}/lunaloop.bash)
  install(FILES ${CMAKE_BINARY_DIR}/lunaloop.bash
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
          RENAME lunaloop COMPONENT program)
endif()
