/*
** introspect.c: seeing the scheduler from Lua: task.list(), task.stats()
** and t:info(). Read-only; none of these touches scheduling state.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "escape.h"
#include "lunaloop_lua.h"
#include "promise.h"

/* The clock of each timer kind, as t:info().clock and the task report
   name it (indexed by luna_timer_kind). */
static const char *const timer_clocks[LUNA_TIMER_KIND_COUNT] = {
    [LUNA_TIMER_FRAME] = "frame",
#define TIMER_CLOCK(name, value, text) [LUNA_TIMER_##name] = text,
    LUNA_CLOCK_MAP(TIMER_CLOCK)
#undef TIMER_CLOCK
};

const char *luna__wait_name(const luna__task *t) {
  static const char *const names[LUNA__WAIT_COUNT] = {
#define WAIT_NAME(NAME, name) name,
      LUNA__WAIT_MAP(WAIT_NAME)
#undef WAIT_NAME
  };
  if (LUNA__SETTLED(t) || t->state == LUNA__RUNNING)
    return NULL;
  if (t->state == LUNA__READY)
    return "ready";
  return names[t->wait];
}

/* Registry key of the weak-keyed table task -> creation traceback. */
static const char tracebacks_key = 0;

/* Pushes the table of creation tracebacks, creating it when `create`;
   returns false (pushing nothing) when it does not exist. */
static bool push_tracebacks(lua_State *L, bool create) {
  if (!create) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &tracebacks_key) == LUA_TTABLE)
      return true;
    lua_pop(L, 1);
    return false;
  }
  luna__push_side_table(L, &tracebacks_key);
  return true;
}

void luna__note_creation(lua_State *L) {
  /* Level 1: the function that called spawn/defer/... (level 0 is the C
     function itself). A host's luna_lua_spawn has no Lua caller: the
     traceback then is only its header. */
  lua_checkstack(L, 4);
  push_tracebacks(L, true);
  lua_pushvalue(L, -2);
  luaL_traceback(L, L, "created", 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

/* ---- where a task waits, and on what ------------------------------------ */

/* Finds where task t waits: the innermost Lua function of its coroutine
   that is not the module's own Lua code (lua/lunaloop/: there the position
   is the user's call into it, as a combinator or channel operation), with
   "Sl" of *ar filled. Only a coroutine suspended in an await has one;
   false for a task that has not started or is running, and when every
   frame is C. Reads the stack only: allocates nothing. */
static bool await_frame(const luna__task *t, lua_Debug *ar) {
  int level;
  if (lua_status(t->co) != LUA_YIELD)
    return false;
  for (level = 0; lua_getstack(t->co, level, ar); level++) {
    if (!lua_getinfo(t->co, "Sl", ar))
      return false;
    if (ar->currentline > 0 &&
        strncmp(ar->source, LUNA__CHUNK_PREFIX, sizeof LUNA__CHUNK_PREFIX - 1) != 0)
      return true;
  }
  return false;
}

/* Pushes what t waits on in an external wait: the first value of the C
   function that suspended it (its level 0), which is the Promise it awaits
   (promise.c keeps it there) or the name a composition primitive suspended
   with ("channel:receive", "task.when_all": internal.c keeps it there).
   Pushes nil when it is neither. Returns true for a Promise. */
static bool push_external(lua_State *L, const luna__task *t) {
  lua_Debug ar;
  if (t->state == LUNA__SUSPENDED && t->wait == LUNA__W_EXTERNAL &&
      lua_getstack(t->co, 0, &ar) && lua_checkstack(t->co, 1) &&
      lua_getlocal(t->co, &ar, 1) != NULL) {
    lua_xmove(t->co, L, 1);
    if (luna__is_promise(L, -1))
      return true;
    if (lua_type(L, -1) == LUA_TSTRING)
      return false;
    lua_pop(L, 1);
  }
  lua_pushnil(L);
  return false;
}

/* True when t waits in a way that only another task's code can end: on a
   task, in a composition call or channel operation, or on a Promise that
   nothing but Lua holds (a Promise that a host or worker thread may still
   complete is progress). Every other wait holds something of the loop (a
   timer, a queued continuation, a runner item) that will wake it by
   itself. */
static bool waits_on_tasks(lua_State *L, const luna__task *t) {
  bool stuck;
  if (t->state != LUNA__SUSPENDED)
    return false;
  if (t->wait == LUNA__W_TASK)
    return true;
  if (t->wait == LUNA__W_GROUP) /* a paused or stopped group's clock */
    return luna__group_wait_stuck(t);
  if (t->wait != LUNA__W_EXTERNAL)
    return false;
  stuck = !push_external(L, t) || !luna__promise_may_settle(L, -1);
  lua_pop(L, 1);
  return stuck;
}

LUNA_API bool luna_lua_stuck(lua_State *L) {
  luna__binding *b = L != NULL ? luna__get_binding(L) : NULL;
  bool stuck = true;
  int slot, n;
  if (b == NULL || b->loop == NULL || b->ntasks == 0 || b->nhandles > 0 ||
      b->ready.count > 0 || b->ready_spill != NULL || b->cancels.count > 0 ||
      !luna_loop_idle(b->loop) || !lua_checkstack(L, 2))
    return false;
  n = luna__begin_walk(b);
  for (slot = 1; slot <= n && stuck; slot++) {
    luna__task *t = luna__walk_task(b, slot);
    if (t != NULL && !LUNA__SETTLED(t) && !waits_on_tasks(L, t))
      stuck = false;
  }
  luna__end_walk(b);
  return stuck;
}

/* Writes s[0..len) with its control characters escaped: names and chunk
   names are the script's (or a mod's) to choose, and must not forge a line
   of the report or reach the terminal as an escape sequence. */
static void write_escaped(FILE *out, const char *s, size_t len) {
  char buf[256];
  while (len > 0) {
    size_t used;
    fwrite(buf, 1, luna__escape(buf, sizeof buf, s, len, 0, &used), out);
    s += used;
    len -= used;
  }
}

/* Writes "task NAME (#ID)", or "task #ID" for a task without a name; the
   Task of t is on top of L (left there). */
static void write_task_name(lua_State *L, FILE *out) {
  unsigned long long id = (unsigned long long)luna__thread_id(lua_tothread(L, -1));
  size_t len;
  if (luna__push_name(L, -1) == LUA_TSTRING) {
    const char *name = lua_tolstring(L, -1, &len);
    fputs("task ", out);
    write_escaped(out, name, len);
    fprintf(out, " (#%llu)", id);
  } else
    fprintf(out, "task #%llu", id);
  lua_pop(L, 1);
}

/* Writes what t waits on, after "task ... ". */
static void write_wait(lua_State *L, FILE *out, const luna__task *t) {
  const char *timing = luna_timing_name(t->timing);
  switch (t->state == LUNA__SUSPENDED ? t->wait : LUNA__W_NONE) {
  case LUNA__W_YIELD:
    fprintf(out, "waits on the next %s", timing);
    return;
  case LUNA__W_TIMER:
    if (t->timer_kind == LUNA_TIMER_FRAME)
      fprintf(out, "waits until frame %lld (%s)", (long long)t->on.timer.deadline, timing);
    else
      fprintf(out, "waits until %.3f s on the %s clock (%s)",
              luna_ns_to_seconds(t->on.timer.deadline), timer_clocks[t->timer_kind], timing);
    return;
  case LUNA__W_PREDICATE:
    fprintf(out, "waits on a %s predicate (%s)", t->until ? "wait_until" : "wait_while", timing);
    return;
  case LUNA__W_GROUP:
    fprintf(out, "waits on a group's clock (%s)", timing);
    return;
  case LUNA__W_TICK:
    fprintf(out, "waits for tick %lld of a simulation", (long long)t->on.timer.deadline);
    return;
  case LUNA__W_TASK:
    fputs("waits on ", out);
    luna__push_task(L, t->on.await.target);
    if (lua_isnil(L, -1))
      fputs("a task", out);
    else
      write_task_name(L, out);
    lua_pop(L, 1);
    return;
  case LUNA__W_EXTERNAL:
    if (push_external(L, t))
      fputs(luna__promise_may_settle(L, -1) ? "waits on a promise"
                                            : "waits on a promise that nothing can complete",
            out);
    else if (lua_type(L, -1) == LUA_TSTRING) {
      size_t len;
      const char *what = lua_tolstring(L, -1, &len);
      fputs("waits on ", out);
      write_escaped(out, what, len);
    }
    else
      fputs("waits on something outside the scheduler", out);
    lua_pop(L, 1);
    return;
  default:
    break;
  }
  if (t->state == LUNA__PENDING)
    fprintf(out, "has not started (%s)", timing);
  else if (t->state == LUNA__READY)
    fputs("is ready to run", out);
  else
    fputs("is running", out);
}

LUNA_API size_t luna_lua_write_tasks(lua_State *L, FILE *out, const char *indent) {
  luna__binding *b = L != NULL ? luna__get_binding(L) : NULL;
  size_t count = 0;
  int slot, n, top;
  if (b == NULL || out == NULL || !lua_checkstack(L, 4))
    return 0;
  top = lua_gettop(L);
  n = luna__begin_walk(b);
  for (slot = 1; slot <= n; slot++) {
    luna__task *t = luna__walk_task(b, slot);
    lua_Debug ar;
    if (t == NULL || LUNA__SETTLED(t))
      continue;
    fputs(indent != NULL ? indent : "", out);
    luna__push_task(L, t);
    write_task_name(L, out);
    lua_settop(L, top);
    fputc(' ', out);
    write_wait(L, out, t);
    if (await_frame(t, &ar)) {
      fputs(" at ", out);
      write_escaped(out, ar.short_src, strlen(ar.short_src));
      fprintf(out, ":%d", ar.currentline);
    }
    fputc('\n', out);
    count++;
  }
  luna__end_walk(b);
  lua_settop(L, top);
  return count;
}

LUNA_API void luna_lua_report_stuck(lua_State *L, FILE *out) {
  luna__binding *b = L != NULL ? luna__get_binding(L) : NULL;
  if (b == NULL || b->loop == NULL || out == NULL)
    return;
  fflush(stdout);
  fprintf(out, "lunaloop: deadlock at frame %llu: every task is asleep and nothing can wake one\n",
          (unsigned long long)luna_loop_frame_count(b->loop));
  luna_lua_write_tasks(L, out, "  ");
  fflush(out);
}

static void set_int(lua_State *L, const char *key, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}

/* t:info() -> table: id, name, status, wait ("start", "yield", "timer",
   "predicate", "task", "external", "ready" or nil), timing (name of the
   timing it waits at), deadline (a timer wait: seconds on its clock, or a
   frame number for frame waits) and clock ("frame", "scaled", ...),
   waits_on (a task wait: the Task awaited; an external wait: the Promise
   awaited, or the name of the composition call or channel operation,
   "task.when_all", "channel:receive", ...), where ("source:line" of the
   await in the task's code, for a task suspended in one), created_frame
   and age (frames since creation), and traceback: where the task was
   created, when task.debug{creation_traceback = true} was on then. */
int luna__l_info(lua_State *L) {
  lua_State *co = luna__check_thread(L, 1);
  luna__task *t = luna__record(co);
  const char *wait;
  uint64_t frame;
  lua_createtable(L, 0, 11);
  set_int(L, "id", (lua_Integer)luna__thread_id(co));
  luna__push_name(L, 1);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, luna__thread_status(co));
  lua_setfield(L, -2, "status");
  if (push_tracebacks(L, false)) {
    lua_pushvalue(L, 1);
    lua_rawget(L, -2);
    lua_setfield(L, -3, "traceback");
    lua_pop(L, 1);
  }
  if (t == NULL) /* settled, its record freed: what the thread still says */
    return 1;
  wait = luna__wait_name(t);
  frame = t->b->loop != NULL ? luna_loop_frame_count(t->b->loop) : 0;
  if (wait != NULL) {
    lua_pushstring(L, wait);
    lua_setfield(L, -2, "wait");
  }
  if (wait != NULL && t->state != LUNA__READY && t->wait != LUNA__W_TASK &&
      t->wait != LUNA__W_EXTERNAL && t->wait != LUNA__W_TICK) {
    lua_pushstring(L, luna_timing_name(t->timing));
    lua_setfield(L, -2, "timing");
  }
  if (wait != NULL && t->wait == LUNA__W_TICK && t->state == LUNA__SUSPENDED)
    set_int(L, "deadline", (lua_Integer)t->on.timer.deadline); /* the tick it waits for */
  if (wait != NULL && t->wait == LUNA__W_TIMER && t->state == LUNA__SUSPENDED) {
    if (t->timer_kind == LUNA_TIMER_FRAME)
      set_int(L, "deadline", (lua_Integer)t->on.timer.deadline);
    else {
      lua_pushnumber(L, luna_ns_to_seconds(t->on.timer.deadline));
      lua_setfield(L, -2, "deadline");
    }
    lua_pushstring(L, timer_clocks[t->timer_kind]);
    lua_setfield(L, -2, "clock");
  }
  if (t->state == LUNA__SUSPENDED && t->wait == LUNA__W_TASK) {
    luna__push_task(L, t->on.await.target);
    lua_setfield(L, -2, "waits_on");
  } else if (t->state == LUNA__SUSPENDED && t->wait == LUNA__W_EXTERNAL) {
    push_external(L, t);
    lua_setfield(L, -2, "waits_on");
  } else if (t->state == LUNA__SUSPENDED && t->wait == LUNA__W_GROUP) {
    /* the Group, which its await keeps as its first value (group.c) */
    lua_Debug ar;
    if (lua_getstack(t->co, 0, &ar) && lua_checkstack(t->co, 1) &&
        lua_getlocal(t->co, &ar, 1) != NULL) {
      lua_xmove(t->co, L, 1);
      lua_setfield(L, -2, "waits_on");
    }
  }
  {
    lua_Debug ar;
    if (await_frame(t, &ar)) {
      lua_pushfstring(L, "%s:%d", ar.short_src, ar.currentline);
      lua_setfield(L, -2, "where");
    }
  }
  set_int(L, "created_frame", (lua_Integer)t->created_frame);
  set_int(L, "age", frame >= t->created_frame ? (lua_Integer)(frame - t->created_frame) : 0);
  return 1;
}

/* task.list() -> {Task, ...}: the live tasks of this Lua state, in
   creation order. */
static int l_list(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  lua_Integer i = 0;
  int slot, n;
  /* Sized first: nothing below allocates, so nothing raises mid-walk. */
  lua_createtable(L, (int)b->ntasks, 0);
  luaL_checkstack(L, 2, NULL);
  n = luna__begin_walk(b);
  for (slot = 1; slot <= n; slot++) {
    luna__task *t = luna__walk_task(b, slot);
    if (t != NULL && !LUNA__SETTLED(t)) {
      luna__push_task(L, t);
      lua_rawseti(L, -2, ++i);
    }
  }
  luna__end_walk(b);
  return 1;
}

static int compare_ns(const void *a, const void *b) {
  luna_ns x = *(const luna_ns *)a, y = *(const luna_ns *)b;
  return (x > y) - (x < y);
}

/* The value of rank ceil(n * permille / 1000) of the n sorted values
   (nearest rank): with 100 frames, p99 is the 99th smallest, so one outlier
   in 100 shows only in max. */
static luna_ns rank(const luna_ns *sorted, size_t n, size_t permille) {
  size_t r = (n * permille + 999) / 1000;
  return sorted[r > 0 ? r - 1 : 0];
}

/* Sets {p50, p99, max} in seconds of timing's (-1: the whole frame's) last
   profiled frames on the table on top; nothing when none was profiled.
   Returns the frames counted. */
static size_t set_distribution(lua_State *L, luna_loop *loop, int timing) {
  luna_ns costs[LUNA_FRAME_HISTORY];
  size_t n = luna_loop_frame_costs(loop, timing, costs, LUNA_FRAME_HISTORY);
  if (n == 0)
    return 0;
  qsort(costs, n, sizeof costs[0], compare_ns);
  lua_pushnumber(L, luna_ns_to_seconds(rank(costs, n, 500)));
  lua_setfield(L, -2, "p50");
  lua_pushnumber(L, luna_ns_to_seconds(rank(costs, n, 990)));
  lua_setfield(L, -2, "p99");
  lua_pushnumber(L, luna_ns_to_seconds(costs[n - 1]));
  lua_setfield(L, -2, "max");
  return n;
}

/* Pushes task.stats().frames: the distribution of the last profiled frames'
   cost (luna_loop_frame_costs): {count, p50, p99, max, timings = {[name] =
   {p50, p99, max}}}, times in seconds; {count = 0} when no frame was
   profiled. Sorting 128 frames for each of 17 series costs a few
   microseconds, paid only by the call. */
static void push_frames(lua_State *L, luna__binding *b) {
  size_t n;
  lua_createtable(L, 0, 5);
  n = set_distribution(L, b->loop, -1);
  set_int(L, "count", (lua_Integer)n);
  if (n == 0)
    return;
  lua_createtable(L, 0, LUNA_TIMING_COUNT);
  for (int i = 0; i < LUNA_TIMING_COUNT; i++) {
    lua_createtable(L, 0, 3);
    set_distribution(L, b->loop, i);
    lua_setfield(L, -2, luna_timing_name(i));
  }
  lua_setfield(L, -2, "timings");
}

/* task.stats() -> table: frame, tasks, callbacks, errors, fixed_steps,
   dropped_fixed_steps, and timings[name] = {queued, timers, items,
   resumes, deferred, budget_exceeded, budget}: resumes counts task resumes
   at that timing in the current frame; deferred counts callback calls put
   off by the timing's budget, budget_exceeded the runs that hit it (both
   since the loop began); budget is in seconds (0: none); runs counts the
   runs of the timing and time the seconds spent in them while profiling
   was on (task.debug{profile = true}), both since the loop began; gc is
   what the collector pacer did for this state (gc.c, luna__gc_push_stats);
   frames is the cost distribution of the last profiled frames
   (push_frames). */
static int l_stats(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
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
    set_int(L, "runs", (lua_Integer)st.runs[i]);
    lua_pushnumber(L, luna_ns_to_seconds(st.spent_ns[i]));
    lua_setfield(L, -2, "time");
    lua_setfield(L, -2, luna_timing_name(i));
  }
  lua_setfield(L, -2, "timings");
  set_int(L, "outside_resumes",
          b->stats_frame == frame ? (lua_Integer)b->resumes[LUNA_TIMING_COUNT] : 0);
  luna__gc_push_stats(L, b);
  lua_setfield(L, -2, "gc");
  push_frames(L, b);
  lua_setfield(L, -2, "frames");
  return 1;
}

/* task.debug([opts]) -> settings: turns debugging aids on or off and
   returns the settings now in force. opts.creation_traceback: keep a
   traceback of where each task is created from now on (t:info().traceback;
   costs a traceback string per spawn). opts.profile: measure the time spent
   in each timing (task.stats().timings[name].time; costs two clock reads per
   run of a timing). Both are off by default. */
static int l_debug(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  if (!lua_isnoneornil(L, 1)) {
    static const char *const known[] = {"creation_traceback", "profile", NULL};
    bool trace, profile;
    luaL_checktype(L, 1, LUA_TTABLE);
    luna__check_options(L, 1, known);
    /* Both read before either is set: a bad one changes nothing. */
    trace = luna__field_boolean(L, 1, "creation_traceback", b->creation_traceback);
    profile = luna__field_boolean(L, 1, "profile", luna_loop_profiling(b->loop));
    b->creation_traceback = trace;
    luna_loop_set_profiling(b->loop, profile);
  }
  lua_createtable(L, 0, 2);
  lua_pushboolean(L, b->creation_traceback);
  lua_setfield(L, -2, "creation_traceback");
  lua_pushboolean(L, luna_loop_profiling(b->loop));
  lua_setfield(L, -2, "profile");
  return 1;
}

static const luaL_Reg introspect_funcs[] = {
    {"list", l_list}, {"stats", l_stats}, {"debug", l_debug}, {NULL, NULL}};

/* Adds task.list, task.stats and task.debug to the module table on top of
   L, with the binding b as their upvalue. */
void luna__open_introspect(lua_State *L, luna__binding *b) {
  lua_pushlightuserdata(L, b);
  luaL_setfuncs(L, introspect_funcs, 1);
}
