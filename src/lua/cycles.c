/*
** cycles.c: await cycles. A task that awaits, directly or through others,
** a task that awaits it would wait for ever; the await that would close
** such a cycle raises instead ("await cycle: that task is (indirectly)
** awaiting this one", docs/api.md).
**
** Who waits on whom: a task in task.await waits on its target (on.await),
** and a task inside a combinator (task.when_all, when_any, timeout, scope:
** lua/lunaloop/) waits on the tasks the combinator watches. The
** combinator declares those with depend(), from before it starts its first
** child (a child may await its caller at once) until it is done (a
** to-be-closed run in prelude.lua calls undepend() on every way out);
** they are kept in a registry table, list by waiting task, and each listed
** task counts how many lists hold it (dependents).
**
** A cycle needs an edge into the task that is about to wait, so the search
** runs only when something waits on it (an awaiter, or a list holding it):
** building a chain of tasks each awaiting the previous one costs O(1) an
** await, not the length of the chain. The search itself follows chains of
** task.await with pointers and needs a table only where a combinator's
** list branches.
*/
#include "binding.h"

static const char deps_key = 'd';

/* Pushes the registry's table of lists (waiting Task -> list of Tasks). */
static void push_deps(lua_State *L) {
  luna__push_registry_table(L, &deps_key, NULL);
}

/* Pushes on the search stack the tasks listed by p (a combinator waiting),
   unless p was expanded before (visited, at index `seen`). */
static void push_listed(lua_State *L, luna__task *p, int seen) {
  lua_Integer i, n;
  int list;
  lua_pushlightuserdata(L, p);
  if (lua_rawget(L, seen) != LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  lua_pop(L, 1);
  lua_pushlightuserdata(L, p);
  lua_pushboolean(L, 1);
  lua_rawset(L, seen);
  push_deps(L);
  luna__push_task(L, p);
  lua_rawget(L, -2);
  lua_remove(L, -2);
  list = lua_gettop(L);
  n = lua_istable(L, list) ? (lua_Integer)lua_rawlen(L, list) : 0;
  luaL_checkstack(L, (int)(n < 1000000 ? n : 1000000) + 2, "await cycle search");
  for (i = 1; i <= n; i++) {
    luna__task *d;
    lua_rawgeti(L, list, i);
    d = luna__test_task(L, -1);
    lua_pop(L, 1);
    if (d != NULL && !LUNA__SETTLED(d))
      lua_pushlightuserdata(L, d);
  }
  lua_remove(L, list);
}

bool luna__awaits(lua_State *L, luna__task *from, luna__task *goal) {
  int base = lua_gettop(L), seen = 0;
  luna__task *p = from;
  if (goal->aw_head == NULL && goal->dependents == 0)
    return false; /* nothing waits on goal: no path can end there */
  for (;;) {
    while (p != NULL) {
      if (p == goal) {
        lua_settop(L, base);
        return true;
      }
      /* A combinator's caller waits on what it declared from before it
         starts its first child until it is done: while it runs (starting
         children, which may await it at once) as well as while it is
         suspended. */
      if (p->has_deps && (p->state == LUNA__SUSPENDED || p->state == LUNA__RUNNING)) {
        if (seen == 0) {
          lua_newtable(L);
          seen = lua_gettop(L);
        }
        push_listed(L, p, seen);
        break;
      }
      if (p->state != LUNA__SUSPENDED)
        break;
      if (p->wait == LUNA__W_TASK) {
        p = p->on.await.target;
        continue;
      }
      break;
    }
    if (lua_gettop(L) == (seen != 0 ? seen : base))
      break;
    p = (luna__task *)lua_touserdata(L, -1);
    lua_pop(L, 1);
  }
  lua_settop(L, base);
  return false;
}

/* Adds `delta` (1 or -1) to the dependents of each Task in the list at
   `list` that has a record (settled ones too: depend and undepend count
   the same set, since a task that loses its record never gets it back). */
static void count_listed(lua_State *L, int list, int delta) {
  lua_Integer i, n = (lua_Integer)lua_rawlen(L, list);
  for (i = 1; i <= n; i++) {
    luna__task *d;
    lua_rawgeti(L, list, i);
    d = luna__test_task(L, -1);
    lua_pop(L, 1);
    if (d != NULL)
      d->dependents += (uint32_t)delta; /* -1 wraps to a decrement */
  }
}

void luna__depend(lua_State *L, int task_idx, int list_idx) {
  luna__task *t = luna__check_task(L, task_idx);
  task_idx = lua_absindex(L, task_idx);
  list_idx = lua_absindex(L, list_idx);
  luaL_checktype(L, list_idx, LUA_TTABLE);
  if (t == NULL)
    luaL_error(L, "lunaloop: a settled task cannot wait");
  if (t->has_deps)
    luaL_error(L, "lunaloop: a task's waits were declared twice");
  push_deps(L);
  lua_pushvalue(L, task_idx);
  lua_pushvalue(L, list_idx);
  lua_rawset(L, -3); /* may raise (memory): nothing counted yet */
  lua_pop(L, 1);
  count_listed(L, list_idx, 1);
  t->has_deps = 1;
}

void luna__depend_one(lua_State *L, int task_idx, int dep_idx) {
  luna__task *t = luna__check_task(L, task_idx);
  luna__task *d = luna__check_task(L, dep_idx);
  if (t != NULL && d != NULL && t->has_deps)
    d->dependents++;
}

void luna__undepend(lua_State *L, int task_idx) {
  luna__task *t = luna__check_task(L, task_idx);
  task_idx = lua_absindex(L, task_idx);
  if (t == NULL || !t->has_deps)
    return;
  push_deps(L);
  lua_pushvalue(L, task_idx);
  if (lua_rawget(L, -2) == LUA_TTABLE)
    count_listed(L, lua_gettop(L), -1);
  lua_pop(L, 1);
  lua_pushvalue(L, task_idx);
  lua_pushnil(L);
  lua_rawset(L, -3); /* an existing key set to nil: cannot raise */
  lua_pop(L, 1);
  t->has_deps = 0;
}
