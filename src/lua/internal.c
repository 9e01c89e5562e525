/*
** internal.c: the few primitives that the module's Lua chunks (the files
** of lua/lunaloop/, compiled into the module: chunks.h) are written on:
** suspending the calling task until something wakes it, waking it, creating
** a task without starting it, interrupting a scope body, reporting; and the
** loader that runs those chunks. The primitives are handed to the chunks
** only and are not part of the public module.
*/
#include <string.h>

#include "binding.h"
#include "chunks.h"
#include "promise.h"
#include "workers.h"

/* check_await(name, [level]): raises the await errors of task.* calls for
   `name`, positioned at `level` (as error(): 1 is the Lua function calling
   check_await, 2 its caller), so they point at the user's line. */
static int l_check_await(lua_State *L) {
  const char *what = luaL_checkstring(L, 1);
  int level = (int)luaL_optinteger(L, 2, 1);
  luna__check_await_at(L, luna__check_binding(L), what, level);
  return 0;
}

/* suspend(name) -> ...: suspends the calling task until wake(t, ...). The
   name stays at index 1 of this call while it waits: the introspection
   reads it there as what the task waits on (introspect.c). */
static int l_suspend(lua_State *L) {
  luna__task *t = luna__check_await(L, luaL_optstring(L, 1, "task.await"));
  if (lua_type(L, 1) != LUA_TSTRING) {
    lua_settop(L, 0);
    lua_pushliteral(L, "task.await");
  }
  lua_settop(L, 1);
  t->wait = LUNA__W_EXTERNAL;
  return luna__suspend(L, t);
}

/* wake(t, ...) -> boolean: wakes t with the values when it is suspended in
   suspend(); resumes it in this run, after the running task suspends. */
static int l_wake(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  int n = lua_gettop(L) - 1;
  if (t == NULL || t->state != LUNA__SUSPENDED || t->wait != LUNA__W_EXTERNAL) {
    lua_pushboolean(L, 0);
    return 1;
  }
  luna__wake(t->b, t, L, n, false);
  luna__pump(t->b);
  lua_pushboolean(L, 1);
  return 1;
}

/* new_task(fn, ...) -> Task: created, not started (no one can see it fail
   before the caller starts watching it). */
static int l_new_task(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  luna__new_task(L, luna__check_binding(L), 1, lua_gettop(L) - 1);
  return 1;
}

/* start(t): starts a task made by new_task now. */
static int l_start(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  luna__binding *b = luna__check_binding(L);
  bool before = luna__cancel_pending(L, b);
  if (t != NULL && t->state == LUNA__PENDING && !t->cancel_requested) {
    lua_State *saved = luna__enter_exec(b, L);
    luna__start(b, t);
    luna__leave_exec(b, saved);
  }
  luna__check_cancelled(L, b, before);
  return 0;
}

/* interrupt(t) / clear_interrupt(t): a one-shot cancellation error at t's
   current or next await that does not cancel t. */
static int l_interrupt(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  if (t != NULL) {
    luna__interrupt(t->b, t);
    luna__pump(t->b);
  }
  return 0;
}

static int l_clear_interrupt(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  if (t != NULL)
    t->interrupt = false;
  return 0;
}

/* cancel(t): cancels t as task.cancel does, but never raises the calling
   task's own cancellation (one that a __close handler of t requested):
   the combinators' cleanup loops call it, and must cancel every task they
   started whatever those handlers do. The caller checks cancel_requested
   once the loop is done. */
static int l_cancel(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  luna__binding *b = luna__check_binding(L);
  lua_State *saved;
  if (t == NULL)
    return 0;
  saved = luna__enter_exec(b, L);
  luna__cancel(b, t);
  luna__leave_exec(b, saved);
  return 0;
}

/* cancel_error() -> the cancellation error value, for a combinator whose
   caller was cancelled after its wait had ended (cancel_requested). */
static int l_cancel_error(lua_State *L) {
  luna__push_cancel_error(L);
  return 1;
}

/* cancel_requested(t) -> boolean */
static int l_cancel_requested(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  lua_pushboolean(L, t != NULL && t->cancel_requested);
  return 1;
}

/* report(err, traceback, t | nil): hands an error that would otherwise be
   lost to the error handler, as a failure of task t (nil: of a promise
   given to a combinator). */
static int l_report(lua_State *L) {
  luna__binding *b = luna__check_binding(L);
  lua_settop(L, 3);
  if (lua_isnil(L, 3)) {
    luna__report(b, L, 1, lua_isnil(L, 2) ? 0 : 2, 0, "promise");
    return 0;
  }
  luna__check_thread(L, 3);
  luna__report_task(b, L, 1, lua_isnil(L, 2) ? 0 : 2, 3, NULL);
  return 0;
}

/* timeout_error(seconds) -> a new timeout error value. */
static int l_timeout_error(lua_State *L) {
  lua_Number s = luaL_checknumber(L, 1);
  lua_createtable(L, 0, 2);
  lua_pushfstring(L, "timeout after %f s", s);
  lua_setfield(L, -2, "message");
  lua_pushnumber(L, s);
  lua_setfield(L, -2, "seconds");
  luaL_setmetatable(L, LUNA__TIMEOUT_MT);
  return 1;
}

/* awaits(x, t) -> boolean: x (any value) is a Task waiting, directly or
   through others, on the Task t (cycles.c). */
static int l_awaits(lua_State *L) {
  luna__task *x = luna__test_task(L, 1);
  luna__task *t = luna__check_task(L, 2);
  lua_pushboolean(L, x != NULL && t != NULL && luna__awaits(L, x, t));
  return 1;
}

/* depend(t, list): t waits on the Tasks of list until undepend(t);
   depend_one(t, child): child was appended to that list. */
static int l_depend(lua_State *L) {
  luna__depend(L, 1, 2);
  return 0;
}

static int l_depend_one(lua_State *L) {
  luna__depend_one(L, 1, 2);
  return 0;
}

static int l_undepend(lua_State *L) {
  luna__undepend(L, 1);
  return 0;
}

/* metatable(x) -> x's metatable, even a protected one (getmetatable would
   give its __metatable field): how the Lua chunks know their own objects. */
static int l_metatable(lua_State *L) {
  if (!lua_getmetatable(L, 1))
    lua_pushnil(L);
  return 1;
}

/* is_pending(t) -> boolean: t is a task not started yet (task.defer,
   task.spawn_at, new_task). */
static int l_is_pending(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  lua_pushboolean(L, t != NULL && t->state == LUNA__PENDING && !t->cancel_requested);
  return 1;
}

/* The registry's table of the libraries the chunks build for require
   (lunaloop.roblox): keep(name, value) stores one, luna__push_library
   pushes it (nil when there is none). */
static const char libraries_key = 'l';

static int l_keep(lua_State *L) {
  luaL_checkstring(L, 1);
  lua_settop(L, 2);
  luna__push_registry_table(L, &libraries_key, NULL);
  lua_insert(L, 1);
  lua_rawset(L, 1);
  return 0;
}

int luna__push_library(lua_State *L, const char *name) {
  luna__push_registry_table(L, &libraries_key, NULL);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  return lua_type(L, -1);
}

/* is_task(x) -> boolean */
static int l_is_task(lua_State *L) {
  lua_pushboolean(L, luna__test_thread(L, 1) != NULL);
  return 1;
}

void luna__open_sim_internals(lua_State *L); /* sim.c */

static const luaL_Reg internal_funcs[] = {
    {"check_await", l_check_await},
    {"suspend", l_suspend},
    {"wake", l_wake},
    {"new_task", l_new_task},
    {"start", l_start},
    {"interrupt", l_interrupt},
    {"clear_interrupt", l_clear_interrupt},
    {"cancel", l_cancel},
    {"cancel_requested", l_cancel_requested},
    {"cancel_error", l_cancel_error},
    {"report", l_report},
    {"timeout_error", l_timeout_error},
    {"is_task", l_is_task},
    {"metatable", l_metatable},
    {"awaits", l_awaits},
    {"depend", l_depend},
    {"depend_one", l_depend_one},
    {"undepend", l_undepend},
    {"is_promise", luna__l_is_promise},
    {"is_signal", luna__l_is_signal},
    {"is_pending", l_is_pending},
    {"keep", l_keep},
    {"await_promise", luna__l_watch_promise},
    {NULL, NULL}};

/* Chunks that run only when a state first needs them, not when the module
   opens, so that the many states that never use them do not pay for their
   functions: the simulation group's (lua/lunaloop/sim.lua, the largest of
   the chunks; until it runs, task.sim_open and task.wait_tick are stubs
   that run it and call what it defined) and the worker pool's (workers.c
   keeps a stub task.workers table of its own). luna__run_lazy_chunk runs
   one, once per state. */
#define SIM_CHUNK "=lunaloop/sim.lua"
static const char *const lazy_chunks[] = {SIM_CHUNK, "=lunaloop/workers.lua", NULL};
/* registry: {module, internals, prelude, [name] = true once run} */
static const char chunk_args_key = 'c';

static bool is_lazy_name(const char *name) {
  int i;
  for (i = 0; lazy_chunks[i] != NULL; i++)
    if (strcmp(name, lazy_chunks[i]) == 0)
      return true;
  return false;
}

void luna__run_lazy_chunk(lua_State *L, const char *name) {
  const luna__chunk *c;
  for (c = luna__chunks; c->name != NULL; c++)
    if (strcmp(c->name, name) == 0)
      break;
  if (c->name == NULL)
    luaL_error(L, "lunaloop: no chunk %s", name);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &chunk_args_key) != LUA_TTABLE)
    luaL_error(L, "lunaloop: the module is not open");
  if (lua_getfield(L, -1, name) != LUA_TNIL) { /* run already */
    lua_pop(L, 2);
    return;
  }
  lua_pop(L, 1);
  if (luaL_loadbufferx(L, c->text, c->size, c->name, "t") != LUA_OK)
    lua_error(L);
  lua_pushboolean(L, 1);
  lua_setfield(L, -3, name); /* a raise below does not run it twice */
  lua_rawgeti(L, -2, 1);
  lua_rawgeti(L, -3, 2);
  lua_rawgeti(L, -4, 3);
  lua_call(L, 3, 0);
  lua_pop(L, 1);
}

void luna__load_sim(lua_State *L) {
  luna__run_lazy_chunk(L, SIM_CHUNK);
}

/* task.sim_open / task.wait_tick before the sim chunk ran: runs it, then
   calls the module's function of that name (the chunk's) with the
   arguments. Upvalues: the name, the module. */
static int l_sim_stub(lua_State *L) {
  const char *name = lua_tostring(L, lua_upvalueindex(1));
  int n = lua_gettop(L);
  luna__load_sim(L);
  lua_getfield(L, lua_upvalueindex(2), name);
  if (lua_tocfunction(L, -1) == l_sim_stub)
    return luaL_error(L, "lunaloop: the simulation chunk did not define task.%s", name);
  lua_insert(L, 1);
  lua_call(L, n, LUA_MULTRET);
  return lua_gettop(L);
}

/* Runs the module's Lua chunks in order, each with (module, internals,
   prelude): they add when_all, when_any, timeout, scope, channel, groups
   and signals to the module table on top of L. The prelude is a table
   that the first chunk fills with helpers for the others. The lazy chunks
   are left for luna__run_lazy_chunk, which finds the three in the
   registry. */
void luna__open_compose(lua_State *L) {
  int module = lua_absindex(L, -1);
  const luna__chunk *c;
  luaL_newlib(L, internal_funcs);
  luna__open_sim_internals(L); /* the simulation group's (sim.c) */
  luaL_setfuncs(L, luna__workers_internals, 0);
  lua_pushliteral(L, LUNA__AWAIT_CYCLE_MSG);
  lua_setfield(L, -2, "CYCLE");
  lua_newtable(L);
  lua_createtable(L, 3, 0);
  lua_pushvalue(L, module);
  lua_rawseti(L, -2, 1);
  lua_pushvalue(L, module + 1);
  lua_rawseti(L, -2, 2);
  lua_pushvalue(L, module + 2);
  lua_rawseti(L, -2, 3);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &chunk_args_key);
  for (c = luna__chunks; c->name != NULL; c++) {
    if (is_lazy_name(c->name))
      continue;
    if (luaL_loadbufferx(L, c->text, c->size, c->name, "t") != LUA_OK)
      lua_error(L);
    lua_pushvalue(L, module);
    lua_pushvalue(L, module + 1);
    lua_pushvalue(L, module + 2);
    lua_call(L, 3, 0);
  }
  lua_pushliteral(L, "sim_open");
  lua_pushvalue(L, module);
  lua_pushcclosure(L, l_sim_stub, 2);
  lua_setfield(L, module, "sim_open");
  lua_pushliteral(L, "wait_tick");
  lua_pushvalue(L, module);
  lua_pushcclosure(L, l_sim_stub, 2);
  lua_setfield(L, module, "wait_tick");
  lua_pop(L, 2);
}
