/*
** runner.c: runs one Lua behaviour test script through the real binding.
**
** The script runs as a plain chunk on the main thread with the global `task`
** (the module) and `testhost`, and drives frames itself with task.step(dt).
** The loop's realtime clock follows the unscaled clock, so time is virtual
** and every run is deterministic. Exit status 0 when the script ends without
** error (the harness exits 1 itself when a case failed).
*/
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lualib.h>

#include "lunaloop.h"
#include "lunaloop_lua.h"

static luna_loop *loop;

static luna_ns virtual_realtime(void *ud) {
  return luna_loop_time((luna_loop *)ud, LUNA_CLOCK_UNSCALED);
}

/* The state's allocator, wrapped to count (as the bench's counter does:
   every call that asks for more bytes than the block had). */
static lua_Alloc base_alloc;
static void *base_ud;
static long alloc_calls;

static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  if (nsize > (ptr == NULL ? 0 : osize))
    alloc_calls++;
  return base_alloc(base_ud, ptr, osize, nsize);
}

/* testhost.allocs() -> integer: the state's allocations so far (the loop
   thread's; worker states have allocators of their own). */
static int l_allocs(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)alloc_calls);
  return 1;
}

/* testhost.reset(): luna_loop_reset, as a host does after a reload. */
static int l_reset(lua_State *L) {
  lua_pushinteger(L, luna_loop_reset(loop));
  return 1;
}

/* testhost.task_count() / callback_count() / error_count() */
static int l_task_count(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)luna_lua_task_count(L));
  return 1;
}
static int l_callback_count(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)luna_lua_callback_count(L));
  return 1;
}
static int l_error_count(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)luna_lua_error_count(L));
  return 1;
}

/* testhost.fixed_dt(seconds): sets the fixed step. */
static int l_fixed_dt(lua_State *L) {
  luna_ns ns;
  if (luna_seconds_to_ns(luaL_checknumber(L, 1), &ns) != 0 ||
      luna_loop_set_fixed_dt(loop, ns) != 0)
    return luaL_argerror(L, 1, "expected a positive number of seconds");
  return 0;
}

/* testhost.timing(): the name of the timing running now, or nil. */
static int l_timing(lua_State *L) {
  int t = luna_loop_current_timing(loop);
  if (t < 0)
    lua_pushnil(L);
  else
    lua_pushstring(L, luna_timing_name(t));
  return 1;
}

/* A cost clock that advances a fixed step at every read, for budgets. */
static luna_ns fake_cost_now, fake_cost_step;
static luna_ns fake_cost(void *ud) {
  (void)ud;
  fake_cost_now += fake_cost_step;
  return fake_cost_now;
}

/* testhost.fake_cost(seconds_per_read | nil): budgets measure a clock that
   advances this much at each read (nil restores the real clock). */
static int l_fake_cost(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    luna_loop_set_cost_source(loop, NULL, NULL);
    return 0;
  }
  if (luna_seconds_to_ns(luaL_checknumber(L, 1), &fake_cost_step) != 0)
    return luaL_argerror(L, 1, "expected seconds");
  luna_loop_set_cost_source(loop, fake_cost, NULL);
  return 0;
}

/* testhost.spawn_c(fn, ...): spawns through the C API (luna_lua_spawn). */
static int l_spawn_c(lua_State *L) {
  int rc = luna_lua_spawn(L, lua_gettop(L) - 1, "from-c");
  if (rc != 0)
    return luaL_error(L, "luna_lua_spawn: %s", luna_strerror(rc));
  return 1;
}

static const luaL_Reg testhost[] = {
    {"reset", l_reset},         {"task_count", l_task_count},
    {"callback_count", l_callback_count}, {"error_count", l_error_count},
    {"fixed_dt", l_fixed_dt},   {"timing", l_timing},
    {"spawn_c", l_spawn_c},     {"fake_cost", l_fake_cost},
    {"allocs", l_allocs},
    {NULL, NULL}};

int main(int argc, char **argv) {
  lua_State *L;
  luna_config config = {0};
  int status;
  if (argc < 2) {
    fprintf(stderr, "usage: %s SCRIPT\n", argv[0]);
    return 2;
  }
  if (luna_loop_new(&config, &loop) != 0)
    return 2;
  luna_loop_set_realtime_source(loop, virtual_realtime, loop);
  L = luaL_newstate();
  base_alloc = lua_getallocf(L, &base_ud);
  lua_setallocf(L, counting_alloc, NULL);
  luaL_openlibs(L);
  if (luna_lua_attach(L, loop) != 0)
    return 2;
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(L, "task");
  luaL_newlib(L, testhost);
  lua_setglobal(L, "testhost");
  status = luaL_dofile(L, argv[1]);
  if (status != LUA_OK) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
  }
  lua_close(L);
  luna_loop_free(loop);
  return status == LUA_OK ? 0 : 1;
}
