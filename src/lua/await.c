/*
** await.c: the awaits a task can suspend on: yield, next_frame, delay_frame,
** delay, wait_until, wait_while and await. Each validates its arguments and
** that it was called from a task that may suspend *before* arming anything,
** so a refused await leaves no stale wake-up behind.
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lunaloop_lua.h"

#include "binding.h"
#include "lunaloop/extension.h"
#include "promise.h"

/* ---- checked arguments ---------------------------------------------------- */

/* A kind of name an argument may hold: timings and clocks. */
typedef struct name_kind {
  const char *kind;  /* "timing", "clock" */
  const char *list;  /* the valid names, for messages */
  int (*parse)(const char *name, size_t len, int *out);
} name_kind;

static int parse_timing(const char *name, size_t len, int *out) {
  luna_timing t;
  int rc = luna_timing_parse(name, len, &t);
  *out = (int)t;
  return rc;
}

static int parse_clock(const char *name, size_t len, int *out) {
  luna_clock c;
  int rc = luna_clock_parse(name, len, &c);
  *out = (int)c;
  return rc;
}

static const name_kind timing_names = {"timing", NULL, parse_timing};
static const name_kind clock_names = {"clock", "scaled, unscaled, realtime, fixed", parse_clock};

/* Parses the name at `idx`, nil or none giving `def`. A bad value raises an
   argument error on argument `arg`, prefixed with `prefix` (an option's
   "opts.timing: ", or ""), that lists the valid names. */
static int check_name(lua_State *L, int idx, int arg, const char *prefix,
                      const name_kind *k, int def) {
  const char *list = k->list != NULL ? k->list : luna_timing_list();
  const char *name;
  size_t len;
  int value;
  if (lua_isnoneornil(L, idx))
    return def;
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_argerror(L, arg, lua_pushfstring(L, "%sexpected a %s name (one of: %s), got %s", prefix,
                                          k->kind, list, luaL_typename(L, idx)));
  name = lua_tolstring(L, idx, &len);
  if (k->parse(name, len, &value) != 0)
    luaL_argerror(L, arg, lua_pushfstring(L, "%sunknown %s '%s' (expected one of: %s)", prefix,
                                          k->kind, name, list));
  return value;
}

luna_timing luna__opt_timing(lua_State *L, int idx, luna_timing def) {
  if (idx > lua_gettop(L) || lua_isnil(L, idx)) /* the common case, on every await */
    return def;
  return (luna_timing)check_name(L, idx, idx, "", &timing_names, (int)def);
}

luna_clock luna__opt_clock(lua_State *L, int idx, luna_clock def) {
  if (idx > lua_gettop(L))
    return def;
  return (luna_clock)check_name(L, idx, idx, "", &clock_names, (int)def);
}

/* Checks that the table at `opts` has no key outside `known` (a NULL-ended
   list), so a misspelt option is an error rather than silently ignored. */
void luna__check_options(lua_State *L, int opts, const char *const known[]) {
  opts = lua_absindex(L, opts);
  lua_pushnil(L);
  while (lua_next(L, opts) != 0) {
    int i;
    bool ok = false;
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING)
      for (i = 0; known[i] != NULL && !ok; i++)
        ok = strcmp(lua_tostring(L, -1), known[i]) == 0;
    if (!ok) {
      luaL_Buffer buf;
      luaL_buffinit(L, &buf);
      for (i = 0; known[i] != NULL; i++) {
        luaL_addstring(&buf, i ? ", " : "");
        luaL_addstring(&buf, known[i]);
      }
      luaL_pushresult(&buf);
      luaL_argerror(L, opts, lua_pushfstring(L, "unknown option '%s' (expected: %s)",
                                             luna_lua_tostring(L, -2), lua_tostring(L, -1)));
    }
  }
}

/* opts.<field> as a timing or clock name; errors name the option. */
static int field_name(lua_State *L, int opts, const char *field, const name_kind *k, int def) {
  char prefix[64];
  int value;
  lua_getfield(L, opts, field);
  snprintf(prefix, sizeof prefix, "opts.%s: ", field);
  value = check_name(L, -1, opts, prefix, k, def);
  lua_pop(L, 1);
  return value;
}

luna_timing luna__field_timing(lua_State *L, int opts, const char *field, luna_timing def) {
  return (luna_timing)field_name(L, lua_absindex(L, opts), field, &timing_names, (int)def);
}

luna_clock luna__field_clock(lua_State *L, int opts, const char *field, luna_clock def) {
  return (luna_clock)field_name(L, lua_absindex(L, opts), field, &clock_names, (int)def);
}

bool luna__field_boolean(lua_State *L, int opts, const char *field, bool def) {
  bool value = def;
  opts = lua_absindex(L, opts);
  switch (lua_getfield(L, opts, field)) {
  case LUA_TNIL:
    break;
  case LUA_TBOOLEAN:
    value = lua_toboolean(L, -1);
    break;
  default: /* 0 and "no" would read as true */
    luaL_argerror(L, opts, lua_pushfstring(L, "opts.%s: expected a boolean, got %s", field,
                                           luaL_typename(L, -1)));
  }
  lua_pop(L, 1);
  return value;
}

const char *luna__number_text(lua_State *L, lua_Number v) {
  if (v != v) /* printf gives "-nan" for 0/0 on most platforms */
    return lua_pushliteral(L, "nan");
  return lua_pushfstring(L, "%f", v);
}

luna_ns luna__check_seconds(lua_State *L, int idx) {
  lua_Number s = luaL_checknumber(L, idx);
  luna_ns ns;
  if (luna_seconds_to_ns((double)s, &ns) != 0)
    luaL_argerror(L, idx, lua_pushfstring(L, "expected a finite, non-negative number of "
                                          "seconds, got %s", luna__number_text(L, s)));
  return ns;
}

static lua_Integer check_frames(lua_State *L, int idx) {
  lua_Integer n = luaL_checkinteger(L, idx);
  if (n < 0)
    luaL_argerror(L, idx, lua_pushfstring(L, "expected a non-negative frame count, got %I", n));
  return n;
}

/* ---- the await context ------------------------------------------------------ */

/* Raises "<position of level>: <what>: <msg>"; level as Lua's error(). */
static int await_error(lua_State *L, int level, const char *what, const char *msg) {
  luaL_where(L, level);
  lua_pushfstring(L, "%s: %s", what, msg);
  lua_concat(L, 2);
  return lua_error(L);
}

luna__task *luna__check_await(lua_State *L, const char *what) {
  return luna__check_await_at(L, luna__check_binding(L), what, 1);
}

luna__task *luna__check_await_in(lua_State *L, luna__binding *b, const char *what) {
  return luna__check_await_at(L, b, what, 1);
}

luna__task *luna__check_await_at(lua_State *L, luna__binding *b, const char *what, int level) {
  luna__task *t = b->current;
  /* First: a signal's handler runs on the firing thread, which may be the
     current task's own. */
  if (b->calling.L == L && b->calling.what == LUNA__CALLING_SIGNAL)
    await_error(L, level, what, "called from a signal handler, which cannot await (start a "
                                "task from it with task.spawn, or wait for the signal in a "
                                "task with s:wait())");
  if (t == NULL || t->co != L) {
    int is_main = lua_pushthread(L);
    lua_pop(L, 1);
    if (b->calling.L == L && b->calling.what == LUNA__CALLING_CALLBACK)
      await_error(L, level, what, "called from a task.on or task.every callback, which "
                                  "cannot await (start a task from it with task.spawn, or "
                                  "use a task instead of the callback)");
    if (b->calling.L == L && b->calling.what == LUNA__CALLING_PREDICATE)
      await_error(L, level, what, "called from a wait_until or wait_while predicate, which "
                                  "must answer at once (test the state it waits for; await "
                                  "in the task before or after the wait)");
    if (b->calling.L == L && b->calling.what == LUNA__CALLING_HANDLER)
      await_error(L, level, what, "called from the task.on_error handler, which cannot "
                                  "await (start a task from it with task.spawn)");
    if (b->calling.L == L && b->calling.what == LUNA__CALLING_SIM)
      await_error(L, level, what, "cannot await in a simulation tick: coroutines cannot be "
                                  "rolled back; use sim.timer");
    if (is_main)
      await_error(L, level, what, "not inside a task (the main thread cannot await; "
                                  "start a task with task.spawn)");
    await_error(L, level, what, "called from a coroutine that is not a task (await "
                                "from the task itself, or start one with task.spawn)");
  }
  if (t->cancel_requested || t->interrupt) {
    t->interrupt = false;
    luna__push_cancel_error(L);
    lua_error(L);
  }
  if (!lua_isyieldable(L))
    await_error(L, level, what, "attempt to await across a C-call boundary (inside a "
                                "table.sort comparator, a metamethod or another C "
                                "function); move the await out of it");
  return t;
}

/* ---- suspending ------------------------------------------------------------------ */

/* A task's coroutine belongs to the scheduler: only luna__resume may resume
   it. Every suspension pushes the address of suspend_mark on top of the
   await's frame; once the task is woken, the values it is woken with go
   above it. The mark lets the guarded coroutine functions (binding.c) tell
   a suspended task's coroutine from a plain one, and a continuation that
   finds it was not resumed by the scheduler put the frame back as it was.
   One push an await, on a frame of fixed shape, so the check costs one
   comparison of the frame's top. */
static const char suspend_mark = 's';

int luna__yield_task(lua_State *L, lua_KContext ctx, lua_KFunction k) {
  lua_pushlightuserdata(L, (void *)&suspend_mark);
  return lua_yieldk(L, 0, ctx, k);
}

/* The index of the mark in co's current frame, or 0. Below it are the
   await's own values, a few at most; a plain coroutine suspended in
   coroutine.yield has an empty frame once its resumer took the values. */
static int mark_index(lua_State *co) {
  int i, n = lua_gettop(co);
  for (i = 1; i <= n; i++)
    if (lua_touserdata(co, i) == (void *)&suspend_mark)
      return i;
  return 0;
}

bool luna__in_await(lua_State *co) {
  luna__task *t;
  if (lua_status(co) == LUA_YIELD)
    return mark_index(co) > 0;
  /* A task not started yet (task.defer, task.spawn_at): its thread holds
     its function and arguments, and only the scheduler may start it. */
  t = luna__record(co);
  return t != NULL && t->state == LUNA__PENDING;
}

/* Out of line: it is the continuations' rare path, and inlined into
   await_k it made every resume save and restore five registers. */
LUNA__NOINLINE int luna__refuse_resume(lua_State *L, luna__task *t, lua_KContext ctx,
                                       lua_KFunction k) {
  /* What the resumer passed goes; the values the task was woken with stay. */
  lua_settop(L, mark_index(L) + (t->state == LUNA__READY ? t->on.ready.nresume : 0));
  lua_pushliteral(L, LUNA__RESUME_TASK_MSG);
  return lua_yieldk(L, 1, ctx, k);
}

/* The error a task was woken with, on top of L: raised at its await. */
static LUNA__NOINLINE int raise_woken_error(lua_State *L, luna__task *t) {
  t->resume_error = false;
  return lua_error(L);
}

/* The continuation of every await: the values woken with are on top (or an
   error to raise). */
static int await_k(lua_State *L, int status, lua_KContext ctx) {
  luna__task *t = (luna__task *)ctx;
  (void)status;
  if (luna__running_task != t)
    return luna__refuse_resume(L, t, ctx, await_k);
  if (t->resume_error)
    return raise_woken_error(L, t);
  return t->on.ready.nresume;
}

int luna__suspend(lua_State *L, luna__task *t) {
  return luna__yield_task(L, (lua_KContext)t, await_k);
}

int luna__raise_cancelled(lua_State *L) {
  luna__push_cancel_error(L);
  return lua_error(L);
}

/* ---- waking from the core ------------------------------------------------------ */

/* A predicate item: calls pred at each run until it answers; a raising
   predicate raises inside the waiting task (a pcall there catches it). */
static bool predicate_step(luna_loop *loop, void *arg) {
  luna__task *t = (luna__task *)arg;
  luna__binding *b = t->b;
  lua_State *L = luna__exec_state(b);
  lua_State *outer;
  luna__calling_saved calling;
  int top = lua_gettop(L), st;
  bool answer;
  (void)loop;
  if (luna__held(b))
    return true; /* asked again at the next run */
  lua_checkstack(L, 4);
  lua_pushvalue(t->co, 1);
  lua_xmove(t->co, L, 1);
  outer = luna__enter_thread(L);
  calling = luna__begin_calling(b, L, LUNA__CALLING_PREDICATE);
  LUNA__OBSERVE(b, on_call, L, true);
  st = lua_pcall(L, 0, 1, 0);
  LUNA__OBSERVE(b, on_call, L, false);
  luna__end_calling(b, calling);
  luna__leave_thread(outer);
  if (t->state != LUNA__SUSPENDED || t->wait != LUNA__W_PREDICATE) {
    /* The predicate cancelled its own task: its item is already removed. */
    lua_settop(L, top);
    return false;
  }
  if (st != LUA_OK) {
    luna__wake(b, t, L, 1, true);
    luna__pump(b);
    lua_settop(L, top);
    return false;
  }
  answer = lua_toboolean(L, -1);
  lua_settop(L, top);
  if (answer != t->until)
    return true;
  luna__wake(b, t, L, 0, false);
  luna__pump(b);
  return false;
}

/* ---- the awaits ------------------------------------------------------------------ */

/* The task calling the await `what`: the fast path when it applies, else
   the checked one (which raises the error that explains what is wrong). */
static inline luna__task *await_task(lua_State *L, const char *what) {
  luna__task *t = luna__fast_await(L);
  return t != NULL ? t : luna__check_await_in(L, luna__upvalue_binding(L), what);
}

static int arm_timer(lua_State *L, luna__task *t, luna_timing timing,
                     luna_timer_kind kind, int64_t deadline) {
  /* A timer in the record: timing and kind are valid here. */
  int rc = luna__loop_add_timer_node(t->b->loop, timing, kind, deadline, luna__timer_cb,
                                     &t->on.timer.node);
  if (rc != 0)
    return luaL_error(L, "lunaloop: cannot add a timer: %s", luna_strerror(rc));
  t->wait = LUNA__W_TIMER;
  t->timing = (uint8_t)timing;
  t->on.timer.deadline = deadline;
  t->timer_kind = (uint8_t)kind;
  return luna__suspend(L, t);
}

/* task.yield([timing]) in full: any argument, and every error. */
static LUNA__NOINLINE int yield_checked(lua_State *L) {
  luna_timing timing = luna__opt_timing(L, 1, LUNA_UPDATE);
  luna__task *t = await_task(L, "task.yield");
  int rc = luna__loop_enqueue(t->b->loop, timing, luna__resume_cb, t);
  if (rc != 0)
    return luaL_error(L, "task.yield: %s", luna_strerror(rc));
  t->pending++;
  t->wait = LUNA__W_YIELD;
  t->timing = (uint8_t)timing;
  return luna__suspend(L, t);
}

/* task.yield([timing]): resume at the next run of `timing` (default Update);
   from inside that timing's run, at its next run (never the same drain).
   A bare task.yield() from a task that may suspend, the await of a task
   that yields every frame, takes the path below: no argument to parse, and
   the checks' errors and the queue's growth out of line (yield_checked), so
   it keeps two registers where the general path saved four. */
static int l_yield(lua_State *L) {
  luna__task *t;
  if (lua_gettop(L) == 0 && (t = luna__fast_await(L)) != NULL &&
      luna__loop_enqueue(t->b->loop, LUNA_UPDATE, luna__resume_cb, t) == 0) {
    t->pending++;
    t->wait = LUNA__W_YIELD;
    t->timing = (uint8_t)LUNA_UPDATE;
    return luna__suspend(L, t);
  }
  return yield_checked(L);
}

/* task.next_frame([timing]): resume at the first run of `timing` in a later
   frame (a frame wait for frame() + 1). */
static int l_next_frame(lua_State *L) {
  luna_timing timing = luna__opt_timing(L, 1, LUNA_UPDATE);
  luna__task *t = await_task(L, "task.next_frame");
  uint64_t frame = luna_loop_frame_count(t->b->loop);
  return arm_timer(L, t, timing, LUNA_TIMER_FRAME, (int64_t)frame + 1);
}

/* task.delay_frame(n, [timing]): resume at the first run of `timing` whose
   frame is >= frame() + n; n = 0 acts as task.yield. */
static int l_delay_frame(lua_State *L) {
  lua_Integer n = check_frames(L, 1);
  luna_timing timing = luna__opt_timing(L, 2, LUNA_UPDATE);
  luna__task *t = await_task(L, "task.delay_frame");
  uint64_t frame = luna_loop_frame_count(t->b->loop);
  int64_t deadline = n > LUNA_NS_MAX ? LUNA_NS_MAX : (int64_t)frame + (int64_t)n;
  return arm_timer(L, t, timing, LUNA_TIMER_FRAME, deadline);
}

/* task.delay(seconds, [timing], [clock]): resume at the first run of
   `timing` at which `seconds` have passed on `clock` since this call
   (scaled by default). delay(0) acts as task.yield. */
static int l_delay(lua_State *L) {
  luna_ns ns = luna__check_seconds(L, 1);
  luna_timing timing = luna__opt_timing(L, 2, LUNA_UPDATE);
  luna_clock clock = luna__opt_clock(L, 3, LUNA_CLOCK_SCALED);
  luna__task *t = await_task(L, "task.delay");
  luna_ns now = luna_loop_time(t->b->loop, clock);
  return arm_timer(L, t, timing, LUNA_TIMER_KIND_OF_CLOCK(clock), luna_ns_add(now, ns));
}

static int wait_predicate(lua_State *L, bool until, const char *what) {
  luna_timing timing;
  luna__task *t;
  int rc;
  luaL_checktype(L, 1, LUA_TFUNCTION);
  timing = luna__opt_timing(L, 2, LUNA_UPDATE);
  t = await_task(L, what);
  rc = luna_item_add(t->b->loop, timing, predicate_step, t, &t->on.item.id);
  if (rc != 0)
    return luaL_error(L, "%s: %s", what, luna_strerror(rc));
  t->until = until;
  t->wait = LUNA__W_PREDICATE;
  t->timing = (uint8_t)timing;
  lua_settop(L, 1); /* the predicate stays at index 1 of this frame */
  return luna__suspend(L, t);
}

/* task.wait_until(pred, [timing]): call pred at each run of `timing`,
   starting with the next one, until it returns true. */
static int l_wait_until(lua_State *L) {
  return wait_predicate(L, true, "task.wait_until");
}

/* task.wait_while(pred, [timing]): the same, until pred returns false. */
static int l_wait_while(lua_State *L) {
  return wait_predicate(L, false, "task.wait_while");
}

/* task.await(task), also t:await(): wait until the task settles; return its
   results or raise its error (the cancellation error when it was
   cancelled). A settled task answers at once. */
int luna__l_await(lua_State *L) {
  lua_State *co = luna__test_thread(L, 1);
  luna__task *target, *t;
  if (co == NULL && luna__is_promise(L, 1)) /* a host's promise: promise.c */
    return luna__await_promise(L, 1, true);
  if (co == NULL && luna__is_signal(L, 1)) /* the next fire: signal.c */
    return luna__await_signal(L, 1);
  if (co == NULL && lua_type(L, 1) == LUA_TTHREAD)
    return luaL_argerror(L, 1, "Task or Promise expected, got a plain coroutine");
  if (co == NULL)
    return luaL_typeerror(L, 1, "Task, Promise or Signal");
  t = await_task(L, "task.await");
  target = luna__record(co);
  if (target == NULL || LUNA__SETTLED(target)) {
    int n = luna__push_result(L, t->b, co);
    if (luna__thread_state(co) == LUNA__DONE)
      return n - 1;
    return lua_error(L);
  }
  if (target == t)
    return luaL_argerror(L, 1, "a task cannot await itself");
  if (luna__awaits(L, target, t))
    return luaL_argerror(L, 1, LUNA__AWAIT_CYCLE_MSG);
  luna__link_awaiter(t, target);
  t->wait = LUNA__W_TASK;
  lua_settop(L, 1); /* keeps the awaited task alive while we wait */
  return luna__suspend(L, t);
}

static const luaL_Reg await_funcs[] = {
    {"yield", l_yield},
    {"next_frame", l_next_frame},
    {"delay_frame", l_delay_frame},
    {"delay", l_delay},
    {"wait_until", l_wait_until},
    {"wait_while", l_wait_while},
    {"await", luna__l_await},
    {NULL, NULL}};

/* Adds the awaits to the module table on top of L, with the binding as
   their upvalue. */
void luna__open_await(lua_State *L, luna__binding *b) {
  lua_pushlightuserdata(L, b);
  luaL_setfuncs(L, await_funcs, 1);
}
