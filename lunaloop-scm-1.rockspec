-- Generated from cmake/lunaloop.rockspec.in by cmake/rockspecs.cmake with the
-- version of CMakeLists.txt: edit the template, then run
-- `cmake --build build/debug --target rockspecs` (tests/package checks that
-- this file is what the template gives).
rockspec_format = "3.0"
package = "lunaloop"
version = "scm-1"
source = {
  url = "git+https://github.com/lunaloop/lunaloop.git",
  branch = "main",
}
description = {
  summary = "Embeddable task scheduler for game-style frame loops, on Lua 5.4",
  detailed = [[
Lua coroutines become tasks that await yields, frame counts, delays and
predicates at one of 16 timings of a frame; a small C core owns the
per-timing queues, timers and repeating callbacks. `require "lunaloop"`,
then drive frames with task.step(dt) or task.run{hz = 60}.]],
  homepage = "https://github.com/lunaloop/lunaloop",
  license = "not yet chosen",
  labels = {"coroutines", "scheduler", "games"},
}
dependencies = {
  "lua >= 5.4, < 5.5",
}
build = {
  -- The cmake build type rather than builtin: the module embeds the Lua
  -- chunks of lua/lunaloop/ as C arrays that the build generates
  -- (cmake/embed.cmake), which builtin cannot do, and its sources, flags and
  -- defines stay in CMakeLists.txt alone instead of a second list here.
  -- Debian's luarocks (3.8) has the cmake type; it needs cmake on the PATH.
  -- LUNA_MODULE_ONLY builds the module and nothing else.
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_C_FLAGS = "$(CFLAGS)",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    LUA_INCDIR = "$(LUA_INCDIR)",
    LUNA_MODULE_ONLY = "ON",
    -- The module goes to the rock's lib/ (which LuaRocks puts on
    -- package.cpath); the LuaLS definitions stay in the rock's own folder,
    -- share/lunaloop/types.lua (`luarocks show lunaloop` names it).
    LUNA_INSTALL_LUA_CMOD = "$(LIBDIR)",
  },
}
