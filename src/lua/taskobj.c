/*
** taskobj.c: the Task seen from Lua: t:status(), t:result(),
** t:traceback(), t:cancel(), t:await(), t.name, t.id, tostring(t) and
** `<close>`. A task is its thread, so these live in the metatable of
** threads, which Lua keeps one of per state (lua_setmetatable on any
** thread sets it for all): a plain coroutine meets them too, and every
** one of them tells it is not a task. The metatable is protected
** (__metatable), and a state whose threads already have another one
** cannot open the module (luna__open_task).
*/
#include <string.h>

#include "binding.h"

/* t:status() -> "running" | "suspended" | "done" | "failed" | "cancelled" */
static int l_status(lua_State *L) {
  lua_pushstring(L, luna__thread_status(luna__check_thread(L, 1)));
  return 1;
}

/* t:result() -> true, ... when done; false, err when failed or cancelled
   (also when its cancellation is queued and it reads "cancelled" already).
   Raises when the task has not settled yet. */
static int l_result(lua_State *L) {
  lua_State *co = luna__check_thread(L, 1);
  if (!luna__has_outcome(co))
    return luaL_error(L, "task has not settled (status '%s'); await it instead",
                      luna__thread_status(co));
  return luna__push_result(L, luna__check_binding(L), co);
}

/* t:traceback() -> the traceback string of a failed task, or nil. */
static int l_traceback(lua_State *L) {
  lua_State *co = luna__check_thread(L, 1);
  if (luna__thread_state(co) == LUNA__FAILED) {
    lua_pushvalue(co, 2);
    lua_xmove(co, L, 1);
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
int luna__l_cancel(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  luna__binding *b = luna__check_binding(L);
  bool before = luna__cancel_pending(L, b), current = t != NULL && t == b->current;
  lua_State *saved;
  if (t == NULL) /* settled: left alone */
    return 0;
  saved = luna__enter_exec(b, L);
  luna__cancel(b, t);
  luna__leave_exec(b, saved);
  if (current && !before) {
    luna__push_cancel_error(L);
    return lua_error(L);
  }
  luna__check_cancelled(L, b, before);
  return 0;
}

/* ---- failures handled later ----------------------------------------------------- */

/* t:handled() marks a task whose failure the script will take later
   (task.await, t:await(), t:result()): if it fails while nobody awaits it,
   its error is held instead of reported at once. Marks are rare, so they
   live in a weak-keyed side table, as names do; held failures in a
   sequence of Tasks (in the order they failed, false where one was taken
   since), which keeps each until it is taken or the run ends, when the
   ones left are reported (luna__report_held): a failure is never lost. */
static const char marks_key = 'h';
static const char held_key = 'f';

/* t:handled() -> t */
static int l_handled(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  lua_settop(L, 1);
  if (t == NULL || LUNA__SETTLED(t))
    return 1; /* too late: a failure was reported already */
  luna__push_side_table(L, &marks_key);
  lua_pushvalue(L, 1);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_settop(L, 1);
  return 1;
}

/* (task) -> nothing: appends the Task to the held ones, in protected mode
   (it allocates, and finish_error runs outside any protected call). */
static int hold_protected(lua_State *L) {
  luna__push_registry_table(L, &held_key, NULL);
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  return 0;
}

bool luna__hold_failure(luna__binding *b, lua_State *L, int task_idx) {
  bool marked;
  task_idx = lua_absindex(L, task_idx);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &marks_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    return false;
  }
  lua_pushvalue(L, task_idx);
  marked = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  if (!marked || !lua_checkstack(L, 4))
    return false;
  lua_pushcfunction(L, hold_protected);
  lua_pushvalue(L, task_idx);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) { /* out of memory: reported now instead */
    lua_pop(L, 1);
    return false;
  }
  b->held_failures++;
  return true;
}

void luna__take_held(lua_State *L, luna__binding *b, lua_State *co) {
  lua_Integer i, n;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &held_key);
  n = (lua_Integer)lua_rawlen(L, -1);
  for (i = 1; i <= n; i++) {
    bool same = lua_rawgeti(L, -1, i) == LUA_TTHREAD && lua_tothread(L, -1) == co;
    lua_pop(L, 1);
    if (same) {
      lua_pushboolean(L, 0);
      lua_rawseti(L, -2, i);
      if (--b->held_failures == 0) { /* a fresh sequence, so it never grows for ever */
        lua_pushnil(L);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &held_key);
      }
      break;
    }
  }
  lua_pop(L, 1);
}

void luna__report_held(luna__binding *b, lua_State *L) {
  lua_Integer i, n;
  int top = lua_gettop(L);
  if (b->held_failures == 0 || !lua_checkstack(L, 8))
    return;
  /* Taken off first: the handler may fail and hold more. */
  lua_rawgetp(L, LUA_REGISTRYINDEX, &held_key);
  lua_pushnil(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &held_key);
  b->held_failures = 0;
  n = (lua_Integer)lua_rawlen(L, top + 1);
  for (i = 1; i <= n; i++) {
    lua_State *co;
    if (lua_rawgeti(L, top + 1, i) != LUA_TTHREAD) {
      lua_settop(L, top + 1);
      continue;
    }
    co = lua_tothread(L, top + 2);
    lua_pushvalue(co, 1); /* [error, traceback, label, ...] of a failed task */
    lua_pushvalue(co, 2);
    lua_xmove(co, L, 2);
    luna__report_task(b, L, top + 3, top + 4, top + 2, NULL);
    lua_settop(L, top + 1);
  }
  lua_settop(L, top);
}

/* `local t <close> = task.spawn(...)`: the task is cancelled when the scope
   exits (no error is raised there, even for the running task). A plain
   coroutine is no closable value (as in stock Lua, where a thread has no
   __close): that is raised when its scope exits. */
static int l_close(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  luna__binding *b = luna__get_binding(L);
  if (t != NULL && b != NULL && b->loop != NULL)
    luna__cancel(b, t);
  return 0;
}

/* tostring(t): "Task(name, status)" or "Task(#id, status)"; a plain
   coroutine gets the stock "thread: 0x...". */
static int l_tostring(lua_State *L) {
  lua_State *co = luna__test_thread(L, 1);
  if (co == NULL)
    lua_pushfstring(L, "thread: %p", lua_topointer(L, 1));
  else if (luna__push_name(L, 1) == LUA_TSTRING)
    lua_pushfstring(L, "Task(%s, %s)", lua_tostring(L, -1), luna__thread_status(co));
  else
    lua_pushfstring(L, "Task(#%I, %s)", (lua_Integer)luna__thread_id(co), luna__thread_status(co));
  return 1;
}

/* What indexing a plain coroutine raises: it has no fields, as in stock
   Lua, and the message says why the task methods are not for it. */
static int not_a_task(lua_State *L) {
  return luaL_error(L, "attempt to index a plain coroutine (not a task) with '%s'",
                    luaL_tolstring(L, 2, NULL));
}

/* t.name (a string or nil, settable), t.id (creation number), methods. */
static int l_index(lua_State *L) {
  lua_State *co = luna__test_thread(L, 1);
  const char *key = lua_tostring(L, 2);
  if (co == NULL)
    return not_a_task(L);
  if (key != NULL && strcmp(key, "name") == 0) {
    luna__push_name(L, 1);
    return 1;
  }
  if (key != NULL && strcmp(key, "id") == 0) {
    lua_pushinteger(L, (lua_Integer)luna__thread_id(co));
    return 1;
  }
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  return 1;
}

static int l_newindex(lua_State *L) {
  const char *key = lua_tostring(L, 2);
  if (luna__test_thread(L, 1) == NULL)
    return not_a_task(L);
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
    {"cancel", luna__l_cancel}, {"info", luna__l_info}, {"handled", l_handled},
    {NULL, NULL}};

static const luaL_Reg task_meta[] = {
    {"__close", l_close}, {"__tostring", l_tostring}, {"__newindex", l_newindex},
    {NULL, NULL}};

/* Pushes the Task metatable, which the module makes the metatable of
   threads once nothing else can fail (luna__open_module). It has no
   __name (a plain coroutine named "lunaloop.Task" in the stock type
   errors would mislead); getmetatable gives "lunaloop.Task" for any
   thread. Raises when threads already have a metatable: the host set its
   own, and one of the two would lose its methods (docs/embedding.md).
   t:await() is task.await (await.c), with the binding b as its upvalue as
   the module's awaits have it. */
int luna__open_task(lua_State *L, luna__binding *b) {
  luaL_checkstack(L, 4, NULL);
  lua_pushthread(L);
  if (lua_getmetatable(L, -1) != 0) {
    lua_pop(L, 2);
    luaL_error(L, "lunaloop: threads already have a metatable (the host's?): a task is its "
                  "thread, and lunaloop needs the thread metatable for the task methods");
  }
  lua_createtable(L, 0, 6);
  luaL_setfuncs(L, task_meta, 0);
  lua_pushliteral(L, LUNA__TASK_MT);
  lua_setfield(L, -2, "__metatable");
  luaL_newlib(L, task_methods);
  lua_pushlightuserdata(L, b);
  lua_pushcclosure(L, luna__l_await, 1);
  lua_setfield(L, -2, "await");
  lua_pushcclosure(L, l_index, 1);
  lua_setfield(L, -2, "__index");
  lua_remove(L, -2); /* the thread */
  return 1;
}
