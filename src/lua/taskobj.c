/*
** taskobj.c: the Task object seen from Lua: t:status(), t:result(),
** t:traceback(), t:cancel(), t.name, t.id, tostring(t) and `<close>`.
*/
#include <string.h>

#include "binding.h"

/* t:status() -> "running" | "suspended" | "done" | "failed" | "cancelled" */
static int l_status(lua_State *L) {
  lua_pushstring(L, luna__status_name(luna__check_task(L, 1)));
  return 1;
}

/* t:result() -> true, ... when done; false, err when failed or cancelled
   (also when its cancellation is queued and it reads "cancelled" already).
   Raises when the task has not settled yet. */
static int l_result(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  if (!luna__has_outcome(t))
    return luaL_error(L, "task has not settled (status '%s'); await it instead",
                      luna__status_name(t));
  return luna__push_result(L, t);
}

/* t:traceback() -> the traceback string of a failed task, or nil. */
static int l_traceback(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  if (t->state == LUNA__FAILED) {
    lua_pushvalue(t->co, 2);
    lua_xmove(t->co, L, 1);
  } else {
    lua_pushnil(L);
  }
  return 1;
}

/* t:cancel(), task.cancel(t): cancels t. Its coroutine is unwound with the
   cancellation error (to-be-closed variables see it), its waits are removed,
   its awaiters get the cancellation error. Returns after t has unwound,
   except when called while another cancellation unwinds (then it is
   finished before the outermost cancel returns). Cancelling the running task
   unwinds it at once. Settled tasks are left alone. */
int luna__l_cancel(lua_State *L);
int luna__l_cancel(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  luna__binding *b = luna__check_binding(L);
  lua_State *saved = b->exec_L;
  bool before = luna__cancel_pending(L, b);
  if (b->depth == 0)
    b->exec_L = L;
  luna__cancel(b, t);
  b->exec_L = saved;
  if (t == b->current && !before) {
    luna__push_cancel_error(L);
    return lua_error(L);
  }
  luna__check_cancelled(L, b, before);
  return 0;
}

/* `local t <close> = task.spawn(...)`: the task is cancelled when the scope
   exits (no error is raised there, even for the running task). */
static int l_close(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  luna__binding *b = luna__get_binding(L);
  if (b != NULL && b->loop != NULL)
    luna__cancel(b, t);
  return 0;
}

static int l_tostring(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  if (luna__push_name(L, 1) == LUA_TSTRING)
    lua_pushfstring(L, "Task(%s, %s)", lua_tostring(L, -1), luna__status_name(t));
  else
    lua_pushfstring(L, "Task(#%I, %s)", (lua_Integer)t->id, luna__status_name(t));
  return 1;
}

/* t.name (a string or nil, settable), t.id (creation number), methods. */
static int l_index(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  const char *key = lua_tostring(L, 2);
  if (key != NULL && strcmp(key, "name") == 0) {
    luna__push_name(L, 1);
    return 1;
  }
  if (key != NULL && strcmp(key, "id") == 0) {
    lua_pushinteger(L, (lua_Integer)t->id);
    return 1;
  }
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  return 1;
}

static int l_newindex(lua_State *L) {
  const char *key = lua_tostring(L, 2);
  luna__check_task(L, 1);
  if (key == NULL || strcmp(key, "name") != 0)
    return luaL_error(L, "Task field '%s' cannot be set (only 'name' can)",
                      key != NULL ? key : luaL_typename(L, 2));
  if (!lua_isnil(L, 3) && lua_type(L, 3) != LUA_TSTRING)
    return luaL_error(L, "Task.name: expected a string or nil, got %s", luaL_typename(L, 3));
  lua_settop(L, 3);
  luna__set_name(L, 1);
  return 0;
}

static const luaL_Reg task_methods[] = {
    {"status", l_status},     {"result", l_result}, {"traceback", l_traceback},
    {"cancel", luna__l_cancel}, {"info", luna__l_info}, {NULL, NULL}};

static const luaL_Reg task_meta[] = {
    {"__close", l_close}, {"__tostring", l_tostring}, {"__newindex", l_newindex},
    {NULL, NULL}};

/* Creates the Task metatable. */
int luna__open_task(lua_State *L) {
  luaL_newmetatable(L, LUNA__TASK_MT);
  luaL_setfuncs(L, task_meta, 0);
  luna__protect_metatable(L);
  luaL_newlib(L, task_methods);
  lua_pushcclosure(L, l_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  return 0;
}
