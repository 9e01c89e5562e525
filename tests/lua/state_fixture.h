/*
** state_fixture.h: what the C tests that drive Lua share (tests/lua/test_*.c,
** and tests/embed through embed_util.h): a Lua state attached to a loop,
** with the standard libraries and the module as the global `task`, a
** runner for Lua code whose error fails the test, and a reader of integer
** globals. Include after <cmocka.h> and <lauxlib.h>.
*/
#ifndef LUNA_TEST_STATE_FIXTURE_H
#define LUNA_TEST_STATE_FIXTURE_H

#include <lualib.h>

#include "lunaloop.h"
#include "lunaloop_lua.h"

/* A new state on `loop` (the caller closes it before freeing the loop). */
static inline lua_State *new_task_state(luna_loop *loop) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  assert_int_equal(luna_lua_attach(L, loop), 0);
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(L, "task");
  return L;
}

/* Runs `code` in L; a Lua error fails the test with its message. */
static inline void run(lua_State *L, const char *code) {
  if (luaL_dostring(L, code) != LUA_OK)
    fail_msg("lua: %s", lua_tostring(L, -1));
}

/* The global `name` of L as an integer (0 when it is not a number). */
static inline lua_Integer global_int(lua_State *L, const char *name) {
  lua_Integer v;
  lua_getglobal(L, name);
  v = lua_tointeger(L, -1);
  lua_pop(L, 1);
  return v;
}

#endif
