/*
** module.c: the `lunaloop` module table: spawning, cancellation, clock and
** frame queries, error reporting, exit, and driving frames from plain Lua
** (task.step, task.run) for use with a stock lua5.4.
*/
#include <math.h>
#include <time.h>

#include "binding.h"
#include "lunaloop_lua.h"
#include "workers.h"

static const char module_key = 'm';

/* ---- tasks ------------------------------------------------------------------ */

/* task.spawn(fn, ...) -> Task: creates a task and runs it now until its first
   await (as Roblox's task.spawn). */
/* The binding of the module's function running on L: from a task of this
   state (the spawner of most tasks), its record's, with no upvalue to
   read. A running task's thread is L only in its own state, whose binding
   this is. */
static inline luna__binding *spawner_binding(lua_State *L) {
  luna__task *cur = luna__running_task;
  return cur != NULL && cur->co == L && cur->b->loop != NULL ? cur->b
                                                             : luna__upvalue_binding(L);
}

static int l_spawn(lua_State *L) {
  luna__binding *b = spawner_binding(L);
  luna__task *t;
  bool before = luna__cancel_pending(L, b);
  lua_State *saved;
  if (lua_type(L, 1) != LUA_TFUNCTION)
    luaL_checktype(L, 1, LUA_TFUNCTION);
  t = luna__new_task(L, b, 1, lua_gettop(L) - 1);
  saved = luna__enter_exec(b, L);
  luna__start(b, t);
  luna__leave_exec(b, saved);
  luna__check_cancelled(L, b, before);
  return 1;
}

static int spawn_later(lua_State *L, luna__binding *b, int fn_idx, luna_timing timing) {
  luna__task *t;
  int rc;
  if (lua_type(L, fn_idx) != LUA_TFUNCTION)
    luaL_checktype(L, fn_idx, LUA_TFUNCTION);
  t = luna__new_task(L, b, fn_idx, lua_gettop(L) - fn_idx);
  rc = luna__start_at(b, t, timing);
  if (rc != 0) {
    luna__cancel(b, t);
    return luaL_error(L, "lunaloop: cannot queue the task: %s", luna_strerror(rc));
  }
  return 1;
}

/* task.defer(fn, ...) -> Task: starts at the next run of Update. */
static int l_defer(lua_State *L) {
  return spawn_later(L, spawner_binding(L), 1, LUNA_UPDATE);
}

/* task.spawn_at(timing, fn, ...) -> Task: starts at the next run of timing. */
static int l_spawn_at(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  luna_timing timing;
  if (lua_isnoneornil(L, 1))
    return luaL_argerror(L, 1, "expected a timing name");
  timing = luna__opt_timing(L, 1, LUNA_UPDATE);
  return spawn_later(L, b, 2, timing);
}

/* task.current() -> the Task being run now, or nil. */
static int l_current(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  if (b->current == NULL)
    lua_pushnil(L);
  else
    luna__push_task(L, b->current);
  return 1;
}

/* ---- errors --------------------------------------------------------------------- */

/* task.is_cancelled(err) -> true for the cancellation error. */
static int l_is_cancelled(lua_State *L) {
  lua_pushboolean(L, luna__is_cancel_error(L, 1));
  return 1;
}

/* task.is_timeout(err) -> true for an error raised by task.timeout. */
static int l_is_timeout(lua_State *L) {
  lua_pushboolean(L, luna__is_timeout_error(L, 1));
  return 1;
}

/* task.exit([code]): ends `lunaloop run` (or task.run): unwinds the calling
   task at once, stops the frame; the remaining tasks are then cancelled in
   creation order. code defaults to 0, or 1 when an error was reported. The
   first call decides the code: one made later (say by a __close handler
   while the remaining tasks are cancelled) does not change it. */
static int l_exit(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  lua_Integer code = -1;
  if (!lua_isnoneornil(L, 1)) {
    code = luaL_checkinteger(L, 1);
    luaL_argcheck(L, code >= 0 && code <= 255, 1, "expected an exit code from 0 to 255");
  }
  /* The first exit wins: a later one (from a __close handler run by the
     cancellations that follow the first) only unwinds its task. */
  if (!b->exit_requested) {
    b->exit_requested = true;
    b->exit_code = (int)code;
  }
  luna_loop_stop(b->loop);
  if (b->current != NULL) {
    b->current->cancel_requested = true;
    luna__push_cancel_error(L);
    return lua_error(L);
  }
  return 0;
}

/* ---- clocks ----------------------------------------------------------------------- */

/* task.frame() -> frames begun (0 before the first frame). */
static int l_frame(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)luna_loop_frame_count(luna__upvalue_binding(L)->loop));
  return 1;
}

/* task.time([clock]) -> seconds on clock (scaled by default). */
static int l_time(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  luna_clock clock = luna__opt_clock(L, 1, LUNA_CLOCK_SCALED);
  lua_pushnumber(L, luna_ns_to_seconds(luna_loop_time(b->loop, clock)));
  return 1;
}

/* task.delta_time() -> seconds: fixed_dt inside a fixed step, else the scaled
   frame delta. */
static int l_delta_time(lua_State *L) {
  lua_pushnumber(L, luna_ns_to_seconds(luna_loop_delta(luna__upvalue_binding(L)->loop)));
  return 1;
}

/* task.time_scale([scale]) -> the (new) time scale. A change applies from the
   next frame's clock advance. */
static int l_time_scale(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  if (!lua_isnoneornil(L, 1)) {
    lua_Number v = luaL_checknumber(L, 1);
    if (luna_loop_set_time_scale(b->loop, (double)v) != 0)
      return luaL_argerror(L, 1, lua_pushfstring(L, "expected a time scale from 0 to "
                                                 "1e6, got %s", luna__number_text(L, v)));
  }
  lua_pushnumber(L, luna_loop_time_scale(b->loop));
  return 1;
}

/* task.set_budget(timing, seconds | nil): caps the time one run of `timing`
   spends on task.on callbacks and predicates; callbacks left over run first
   at the next run (with N callbacks at a timing, each runs at least once
   every N runs); callbacks with priority "high" always run. nil or 0 removes
   the cap. Deferred calls are counted in task.stats(). */
static int l_set_budget(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  luna_timing timing;
  luna_ns ns = 0;
  if (lua_isnoneornil(L, 1))
    return luaL_argerror(L, 1, "expected a timing name");
  timing = luna__opt_timing(L, 1, LUNA_UPDATE);
  if (!lua_isnoneornil(L, 2))
    ns = luna__check_seconds(L, 2);
  luna_loop_set_budget(b->loop, timing, ns);
  return 0;
}

/* ---- driving frames from Lua ---------------------------------------------------------- */

static void check_can_drive(lua_State *L, luna__binding *b, const char *what) {
  if (b->depth > 0 || luna_loop_current_timing(b->loop) >= 0)
    luaL_error(L, "%s: cannot drive the loop from inside a task or callback", what);
}

/* A frame's dt in seconds: no more than the clocks can hold (LUNA_CLOCK_MAX,
   about 73 years); a dt within it that would carry a clock past it (after
   many frames, or at a large time scale) fails the frame instead. */
static luna_ns opt_dt(lua_State *L, int idx, luna_ns def) {
  luna_ns dt;
  if (lua_isnoneornil(L, idx))
    return def;
  dt = luna__check_seconds(L, idx);
  if (dt > LUNA_CLOCK_MAX)
    luaL_argerror(L, idx, lua_pushfstring(L, "expected at most %f seconds (the clocks' limit), "
                                             "got %s",
                                          (double)LUNA_CLOCK_MAX / 1e9,
                                          luna__number_text(L, lua_tonumber(L, idx))));
  return dt;
}

/* Raises the error of a frame that failed (one that task.exit or
   luna_loop_stop stopped did not). */
static void check_frame(lua_State *L, int rc) {
  if (rc != 0 && rc != LUNA_ESTOPPED)
    luaL_error(L, "lunaloop: frame failed: %s", luna_strerror(rc));
}

static void step_frame(lua_State *L, luna__binding *b, luna_ns dt) {
  lua_State *saved = luna__enter_exec(b, L);
  int rc = luna_loop_frame_ns(b->loop, dt);
  luna__leave_exec(b, saved);
  check_frame(L, rc);
}

/* task.step([dt]) -> frame: runs one frame of dt seconds (default 1/60). */
static int l_step(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  luna_ns dt = opt_dt(L, 1, (LUNA_NS_PER_SECOND + 30) / 60);
  check_can_drive(L, b, "task.step");
  step_frame(L, b, dt);
  lua_pushinteger(L, (lua_Integer)luna_loop_frame_count(b->loop));
  return 1;
}

/* opts[key] of the table at idx (argument 1), or def when nil; raises an
   argument error naming the option when it is not a number. */
static lua_Number opt_field_number(lua_State *L, int idx, const char *key, lua_Number def) {
  lua_Number v;
  if (lua_getfield(L, idx, key) == LUA_TNIL) {
    lua_pop(L, 1);
    return def;
  }
  if (lua_type(L, -1) != LUA_TNUMBER)
    luaL_argerror(L, idx, lua_pushfstring(L, "opts.%s: expected a number, got %s", key,
                                          luaL_typename(L, -1)));
  v = lua_tonumber(L, -1);
  lua_pop(L, 1);
  return v;
}

/* Raises the argument error of option `key` of task.run's table (argument
   1), a number that is out of range: what it got is shown as given (an
   integer as one, NaN as "nan"). */
static int opt_error(lua_State *L, const char *key, const char *expected) {
  const char *got;
  lua_getfield(L, 1, key);
  got = lua_isinteger(L, -1) ? lua_pushfstring(L, "%I", lua_tointeger(L, -1))
                             : luna__number_text(L, lua_tonumber(L, -1));
  return luaL_argerror(L, 1, lua_pushfstring(L, "opts.%s: expected %s, got %s", key, expected, got));
}

/* task.run([opts]) -> exit code: runs frames until no task is alive and no
   callback is registered, task.exit is called, or opts.frames frames ran;
   then cancels what remains. opts.hz (default 60) sets the frame rate;
   opts.fast = true runs frames back to back with dt = 1/hz exactly and a
   realtime clock that follows it (repeatable), otherwise frames are paced in
   real time with dt measured. A run that can no longer make progress
   (luna_lua_stuck) ends at once: what every task waits on goes to stderr,
   as `lunaloop run` reports it. The code is 3 for such a run, else
   task.exit's, else 1 when an error was reported, else 0. */
static int l_run(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  lua_Number hz = 60, frames = -1;
  bool fast = false;
  luna_driver driver;
  lua_State *saved;
  int code, rc;
  bool stuck = false;
  check_can_drive(L, b, "task.run");
  if (!lua_isnoneornil(L, 1)) {
    static const char *const known[] = {"hz", "frames", "fast", NULL};
    luaL_checktype(L, 1, LUA_TTABLE);
    luna__check_options(L, 1, known);
    hz = opt_field_number(L, 1, "hz", 60);
    frames = opt_field_number(L, 1, "frames", -1);
    fast = luna__field_boolean(L, 1, "fast", false);
    if (!(hz > 0 && isfinite(hz)))
      opt_error(L, "hz", "a positive number");
    /* A count of frames, as `lunaloop run --frames` takes it. */
    if (!(frames >= 0 && frames == floor(frames) && isfinite(frames))) {
      bool given = lua_getfield(L, 1, "frames") != LUA_TNIL; /* -1: the default */
      lua_pop(L, 1);
      if (given)
        opt_error(L, "frames", "a whole number >= 0");
    }
  }
  if (fast)
    luna_loop_use_virtual_realtime(b->loop);
  luna_driver_init(&driver, b->loop, (luna_ns)llround(1e9 / hz),
                   fast ? LUNA_DRIVE_FAST : LUNA_DRIVE_REAL);
  while ((b->ntasks > 0 || b->nhandles > 0) && !b->exit_requested &&
         (frames < 0 || (lua_Number)driver.frames < frames)) {
    if (luna_lua_stuck(L)) {
      luna_lua_report_stuck(L, stderr);
      stuck = true;
      break;
    }
    /* The time before the next frame goes to the paced collector first. */
    luna_lua_gc_idle(b->loop, luna_driver_remaining(&driver));
    if (!luna_driver_wait(&driver))
      continue; /* a signal cut the sleep short: check again */
    saved = luna__enter_exec(b, L);
    rc = luna_driver_frame(&driver);
    luna__leave_exec(b, saved);
    check_frame(L, rc);
  }
  saved = luna__enter_exec(b, L);
  luna__cancel_all(b);
  luna__leave_exec(b, saved);
  luna__remove_all_handles(b);
  if (stuck)
    code = LUNA_LUA_EXIT_STUCK;
  else
    code = b->exit_requested && b->exit_code >= 0 ? b->exit_code : (b->errors > 0 ? 1 : 0);
  b->exit_requested = false;
  b->exit_code = -1;
  lua_pushinteger(L, code);
  return 1;
}

/* ---- the module table --------------------------------------------------------------- */

static const luaL_Reg module_funcs[] = {
    {"spawn", l_spawn},
    {"defer", l_defer},
    {"spawn_at", l_spawn_at},
    {"cancel", luna__l_cancel},
    {"current", l_current},
    {"is_cancelled", l_is_cancelled},
    {"is_timeout", l_is_timeout},
    {"on_error", luna__set_handler},
    {"exit", l_exit},
    {"frame", l_frame},
    {"time", l_time},
    {"delta_time", l_delta_time},
    {"time_scale", l_time_scale},
    {"set_budget", l_set_budget},
    {"step", l_step},
    {"run", l_run},
    {NULL, NULL}};

int luna__open_module(lua_State *L, luna__binding *b);
int luna__open_module(lua_State *L, luna__binding *b) {
  int i;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &module_key) == LUA_TTABLE)
    return 1;
  lua_pop(L, 1);
  luna__open_task(L, b); /* the Task metatable, below the module */
  luna__preallocate(L, b);
  lua_newtable(L);
  lua_pushlightuserdata(L, b);
  luaL_setfuncs(L, module_funcs, 1);
  luna__open_await(L, b);
  luna__open_callbacks(L, b);
  luna__open_signal(L, b);
  luna__open_introspect(L, b);
  luna__open_gc(L, b);
  luna__open_groups(L, b);
  luna__open_workers(L); /* the Pool metatables; task.workers is workers.lua */
  luna__open_compose(L);
  luna__guard_coroutines(L); /* a task's coroutine is the scheduler's alone */
  lua_createtable(L, LUNA_TIMING_COUNT, 0);
  for (i = 0; i < LUNA_TIMING_COUNT; i++) {
    lua_pushstring(L, luna_timing_name(i));
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "timings");
  lua_pushliteral(L, LUNA_VERSION_STRING);
  lua_setfield(L, -2, "version");
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &module_key);
  { /* require "lunaloop.roblox" (lifecycle.c), where a package library is */
    int top = lua_gettop(L);
    if (lua_getglobal(L, "package") == LUA_TTABLE &&
        lua_getfield(L, -1, "preload") == LUA_TTABLE) {
      lua_pushcfunction(L, luaopen_lunaloop_roblox);
      lua_setfield(L, -2, "lunaloop.roblox");
    }
    lua_settop(L, top);
  }
  /* The metatable of every thread (one per state), last: a failure above
     leaves the state's threads as they were. Cannot raise. */
  lua_pushthread(L);
  lua_pushvalue(L, -3);
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
  lua_remove(L, -2);
  return 1;
}
