/*
** introspect.c: seeing the scheduler from Lua: task.list(), task.stats()
** and t:info(). Read-only; none of these touches scheduling state.
*/
#include "binding.h"

const char *luna__wait_name(const luna__task *t) {
  static const char *const names[] = {NULL, "start", "yield", "timer",
                                      "predicate", "task", "external"};
  if (LUNA__SETTLED(t) || t->state == LUNA__RUNNING)
    return NULL;
  if (t->state == LUNA__READY)
    return "ready";
  return names[t->wait];
}

bool luna__set_observer(lua_State *L, const luna__observer *observer) {
  luna__binding *b = luna__get_binding(L);
  static const luna__observer none = {NULL, NULL, NULL, NULL};
  if (b == NULL)
    return false;
  b->observer = observer != NULL ? *observer : none;
  return true;
}

static void set_int(lua_State *L, const char *key, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}

/* t:info() -> table: id, name, status, wait ("start", "yield", "timer",
   "predicate", "task", "external", "ready" or nil), timing (name of the
   timing it waits at), deadline (a timer wait: seconds on its clock, or a
   frame number for frame waits) and clock ("frame", "scaled", ...),
   created_frame and age (frames since creation). */
int luna__l_info(lua_State *L) {
  static const char *const kinds[LUNA_TIMER_KIND_COUNT] = {"frame", "scaled", "unscaled",
                                                          "realtime", "fixed"};
  luna__task *t = luna__check_task(L, 1);
  const char *wait = luna__wait_name(t);
  uint64_t frame = t->b->loop != NULL ? luna_loop_frame_count(t->b->loop) : 0;
  lua_createtable(L, 0, 9);
  set_int(L, "id", (lua_Integer)t->id);
  lua_getiuservalue(L, 1, 2);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, luna__status_name(t));
  lua_setfield(L, -2, "status");
  if (wait != NULL) {
    lua_pushstring(L, wait);
    lua_setfield(L, -2, "wait");
  }
  if (wait != NULL && t->state != LUNA__READY && t->wait != LUNA__W_TASK &&
      t->wait != LUNA__W_EXTERNAL) {
    lua_pushstring(L, luna_timing_name(t->timing));
    lua_setfield(L, -2, "timing");
  }
  if (wait != NULL && t->wait == LUNA__W_TIMER && t->state == LUNA__SUSPENDED) {
    if (t->timer_kind == LUNA_TIMER_FRAME)
      set_int(L, "deadline", (lua_Integer)t->deadline);
    else {
      lua_pushnumber(L, luna_ns_to_seconds(t->deadline));
      lua_setfield(L, -2, "deadline");
    }
    lua_pushstring(L, kinds[t->timer_kind]);
    lua_setfield(L, -2, "clock");
  }
  set_int(L, "created_frame", (lua_Integer)t->created_frame);
  set_int(L, "age", (lua_Integer)(frame - t->created_frame));
  return 1;
}

/* task.list() -> {Task, ...}: the live tasks of this Lua state, in
   creation order. */
static int l_list(lua_State *L) {
  luna__binding *b = luna__check_binding(L);
  luna__task *t;
  lua_Integer i = 0;
  lua_createtable(L, (int)b->ntasks, 0);
  for (t = b->first; t != NULL; t = t->next) {
    luna__push_task(L, t);
    lua_rawseti(L, -2, ++i);
  }
  return 1;
}

/* task.stats() -> table: frame, tasks, callbacks, errors, fixed_steps,
   dropped_fixed_steps, and timings[name] = {queued, timers, items,
   resumes, deferred, budget_exceeded, budget}: resumes counts task resumes
   at that timing in the current frame; deferred counts callback calls put
   off by the timing's budget, budget_exceeded the runs that hit it (both
   since the loop began); budget is in seconds (0: none). */
static int l_stats(lua_State *L) {
  luna__binding *b = luna__check_binding(L);
  luna_loop_stats st;
  uint64_t frame = luna_loop_frame_count(b->loop);
  int i;
  luna_loop_get_stats(b->loop, &st);
  lua_createtable(L, 0, 8);
  set_int(L, "frame", (lua_Integer)frame);
  set_int(L, "tasks", (lua_Integer)b->ntasks);
  set_int(L, "callbacks", (lua_Integer)b->nhandles);
  set_int(L, "errors", (lua_Integer)b->errors);
  set_int(L, "fixed_steps", (lua_Integer)st.fixed_steps);
  set_int(L, "dropped_fixed_steps", (lua_Integer)st.dropped_fixed_steps);
  lua_createtable(L, 0, LUNA_TIMING_COUNT);
  for (i = 0; i < LUNA_TIMING_COUNT; i++) {
    lua_createtable(L, 0, 4);
    set_int(L, "queued", (lua_Integer)st.queued[i]);
    set_int(L, "timers", (lua_Integer)st.timers[i]);
    set_int(L, "items", (lua_Integer)st.items[i]);
    set_int(L, "resumes", b->stats_frame == frame ? (lua_Integer)b->resumes[i] : 0);
    set_int(L, "deferred", (lua_Integer)st.deferred[i]);
    set_int(L, "budget_exceeded", (lua_Integer)st.budget_exceeded[i]);
    lua_pushnumber(L, luna_ns_to_seconds(luna_loop_budget(b->loop, i)));
    lua_setfield(L, -2, "budget");
    lua_setfield(L, -2, luna_timing_name(i));
  }
  lua_setfield(L, -2, "timings");
  return 1;
}

static const luaL_Reg introspect_funcs[] = {
    {"list", l_list}, {"stats", l_stats}, {NULL, NULL}};

/* Adds task.list and task.stats to the module table on top of L. */
void luna__open_introspect(lua_State *L) {
  luaL_setfuncs(L, introspect_funcs, 0);
}
