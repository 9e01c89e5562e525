/*
** callbacks.c: the custom update layer. task.on exposes the core's runner of
** repeating items: one C loop calls many Lua functions, each as fn(dt).
** task.every is periodic on a core timer that re-arms itself for the next
** anchored deadline, so a frame costs only the callbacks that are due. A
** callback that raises is removed and its error reported (task nil).
*/
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "binding.h"
#include "list.h"
#include "lunaloop/extension.h"

void luna__every_cb(luna_loop *loop, void *arg);

enum { HANDLE_ON = 0, HANDLE_EVERY = 1 };

static luna__handle *check_handle(lua_State *L, int idx) {
  return (luna__handle *)luaL_checkudata(L, idx, LUNA__HANDLE_MT);
}

/* Drops the registry references: the handle's (what keeps it alive while
   registered) and its function's. A handle removed by its own callback
   keeps both until the call ends, so the call can still name the function
   in a report and read the handle, however the callback dropped it. */
static void release(luna__binding *b, luna__handle *h) {
  luaL_unref(b->L, LUA_REGISTRYINDEX, h->ref);
  luaL_unref(b->L, LUA_REGISTRYINDEX, h->fn_ref);
  h->ref = h->fn_ref = LUA_NOREF;
}

/* Forgets a handle: it is never called again. `remove_item` is false when
   the runner removes it itself (its step returned false). */
static void deactivate(luna__binding *b, luna__handle *h, bool remove_item) {
  if (!h->active)
    return;
  h->active = false;
  if (remove_item && b->loop != NULL) {
    if (h->kind == HANDLE_EVERY && h->clock != NULL)
      luna__gclock_cancel(h->clock, h->timer);
    else if (h->kind == HANDLE_EVERY)
      luna_timer_cancel(b->loop, h->timer);
    else
      luna_item_remove(b->loop, h->item);
  }
  LUNA__LIST_UNLINK(&b->handles, (luna__handle **)NULL, h);
  b->nhandles--;
  if (!h->calling)
    release(b, h);
}

/* The call of h's function is over (returned or raised, and reported):
   a removal made meanwhile lets go of the handle now. */
static void end_call(luna__binding *b, luna__handle *h) {
  h->calling = false;
  if (!h->active)
    release(b, h);
}

/* Reports the error on top of L, which the callback h raised (its
   traceback stored aside by the message handler), and removes h. */
static void report_failure(luna__binding *b, luna__handle *h, lua_State *L) {
  lua_Debug ar;
  char what[LUA_IDSIZE + 32] = "callback"; /* built in C: this runs unprotected */
  int err = lua_gettop(L);
  luna__push_last_traceback(L);
  if (lua_rawgeti(L, LUA_REGISTRYINDEX, h->fn_ref) == LUA_TFUNCTION && lua_getinfo(L, ">S", &ar))
    snprintf(what, sizeof what, "callback %s:%d", ar.short_src, ar.linedefined);
  luna__report(b, L, err, err + 1, 0, what);
  deactivate(b, h, true);
}

/* Calls the handle's function in protected mode on L, whose top is `top`,
   with one argument: the count n of task.every when n > 0, else dt (task.on).
   A raising callback is reported and removed. Returns false when it raised. */
static bool call_handle(luna__binding *b, luna__handle *h, lua_State *L, int top,
                        lua_Number dt, lua_Integer n) {
  lua_State *outer;
  luna__calling_saved calling;
  int st;
  /* The function is referenced on its own, so a call is three pushes and a
     pcall (the handle's reference only keeps the handle alive while
     registered). */
  lua_checkstack(L, 8);
  lua_pushcfunction(L, luna__msgh); /* top + 1 */
  lua_rawgeti(L, LUA_REGISTRYINDEX, h->fn_ref);
  if (n > 0)
    lua_pushinteger(L, n);
  else
    lua_pushnumber(L, dt);
  outer = luna__enter_thread(L);
  h->calling = true;
  b->callback_calls++;
  calling = luna__begin_calling(b, L, LUNA__CALLING_CALLBACK);
  LUNA__OBSERVE(b, on_call, L, true);
  st = lua_pcall(L, 1, 0, top + 1);
  LUNA__OBSERVE(b, on_call, L, false);
  luna__end_calling(b, calling);
  luna__leave_thread(outer);
  if (st != LUA_OK)
    report_failure(b, h, L);
  lua_settop(L, top);
  end_call(b, h);
  return st == LUA_OK;
}

static bool callback_step(luna_loop *loop, void *arg) {
  luna__handle *h = (luna__handle *)arg;
  lua_State *L = luna__exec_state(h->b);
  /* dt as luna_loop_delta, read in place: this runs once per callback */
  luna_ns dt = luna__loop_dt(loop);
  if (!luna__held(h->b)) /* held: called again at the next run */
    call_handle(h->b, h, L, lua_gettop(L), (lua_Number)dt / 1e9, 0);
  return h->active; /* released, not yet collected: nothing ran since */
}

/* A group's g:on callback: not called while the group is paused (the item
   stays), and dt is the group's (delta time times its effective scale). */
static bool group_callback_step(luna_loop *loop, void *arg) {
  luna__handle *h = (luna__handle *)arg;
  lua_State *L = luna__exec_state(h->b);
  luna_ns dt = luna__loop_dt(loop);
  if (h->clock != NULL && !luna__gclock_paused(h->clock) && !luna__held(h->b))
    call_handle(h->b, h, L, lua_gettop(L),
                (lua_Number)dt / 1e9 * luna__gclock_effective_scale(h->clock), 0);
  return h->active;
}

/* ---- batches ------------------------------------------------------------ */

/* A stretch of task.on callbacks of one binding, called in one protected
   call (the runner's batches, lunaloop/extension.h): a pcall costs a
   setjmp, a message handler pushed and a stack reset, as much as the call
   itself, so a stretch pays it once and again only after a callback
   raised. Each
   callback is still isolated: the one that raised is reported and removed,
   and the stretch goes on with the next in a new protected call. */
typedef struct stretch {
  luna__batch *bt;
  luna__binding *b;
  luna_loop *loop;
  lua_State *outer;  /* luna__running outside the callbacks */
  luna__handle *cur; /* the callback being called; NULL between calls */
} stretch;

/* In protected mode: (stretch) -> nothing. Calls the callbacks of the
   stretch's binding while the runner hands them out, each as in
   call_handle: dt read at the call, luna__running set only during it. */
static int stretch_body(lua_State *L) {
  stretch *s = (stretch *)lua_touserdata(L, 1);
  luna__binding *b = s->b;
  luna_loop *loop = s->loop;
  luna__handle *h;
  while ((h = (luna__handle *)luna__batch_peek(s->bt)) != NULL && h->b == b) {
    luna_ns dt = luna__loop_dt(loop);
    luna__batch_take(s->bt);
    if (luna__held(b))
      continue; /* called again at the next run */
    s->cur = h;
    h->calling = true;
    b->callback_calls++;
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->fn_ref);
    lua_pushnumber(L, (lua_Number)dt / 1e9);
    LUNA__OBSERVE(b, on_call, L, true);
    (void)luna__enter_thread(L); /* s->outer is what it replaced */
    lua_call(L, 1, 0);
    luna__leave_thread(s->outer);
    LUNA__OBSERVE(b, on_call, L, false);
    s->cur = NULL;
    end_call(b, h);
  }
  return 0;
}

/* The message handler of a stretch: luna__msgh without the stretch's own
   frame, so that a callback's traceback reads the same whether it ran
   alone or in a stretch. The frame's line is counted from the end of the
   traceback: however deep the callback went (luaL_traceback then skips
   levels in the middle) and whatever tail calls it made, the lines below
   the frame are those of the levels that were there when the stretch
   began (next_frame_line). A linear cost: looking the frame up level by
   level would cost the square of the depth (lua_getstack walks from the
   top), minutes for a stack overflow. */
int luna__stretch_msgh(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  luna__store_traceback(L, b != NULL ? b->stretch_tb_line : 0);
  lua_settop(L, 1);
  return 1;
}

/* The lines that the levels of L's stack take at the end of a traceback
   (a level's own, and one more for a tail call), plus one: the line of a
   function called now. 0 past 10 levels, where luaL_traceback may skip
   some of them (it keeps the last 11 levels). */
int luna__next_frame_line(lua_State *L) {
  lua_Debug ar;
  int level, lines = 1;
  for (level = 0; lua_getstack(L, level, &ar); level++) {
    if (level == 10)
      return 0;
    lines++;
    if (lua_getinfo(L, "t", &ar) && ar.istailcall)
      lines++;
  }
  return lines;
}

/* The runner's batch function for callback_step: one protected call per
   binding's stretch, a new one after each callback that raised. A failure
   that no callback raised (a debug hook on the stretch's C function, say)
   is dropped and the stretch ends: the runner then calls the next callback
   on its own, through callback_step, which reports what that callback
   does. */
static void callbacks_batch(luna_loop *loop, luna__batch *bt) {
  luna__handle *h;
  while ((h = (luna__handle *)luna__batch_peek(bt)) != NULL) {
    luna__binding *b = h->b;
    lua_State *L = luna__exec_state(b);
    int top = lua_gettop(L), st, saved_line = b->stretch_tb_line;
    stretch s;
    s.bt = bt;
    s.b = b;
    s.loop = loop;
    s.outer = luna__running;
    lua_checkstack(L, 8);
    b->stretch_tb_line = luna__next_frame_line(L);
    lua_pushcfunction(L, luna__stretch_msgh); /* top + 1 */
    do {
      luna__calling_saved calling = luna__begin_calling(b, L, LUNA__CALLING_CALLBACK);
      s.cur = NULL;
      lua_pushcfunction(L, stretch_body);
      lua_pushlightuserdata(L, &s);
      st = lua_pcall(L, 1, 0, top + 1);
      luna__end_calling(b, calling);
      luna__leave_thread(s.outer); /* a callback that raised left L there */
      if (st != LUA_OK && s.cur != NULL) {
        LUNA__OBSERVE(b, on_call, L, false);
        report_failure(b, s.cur, L);
        end_call(b, s.cur);
      }
      lua_settop(L, top + 1);
    } while (st != LUA_OK && s.cur != NULL);
    b->stretch_tb_line = saved_line;
    lua_settop(L, top);
    if (st != LUA_OK) {
      luna__push_last_traceback(L); /* forget it */
      lua_settop(L, top);
      return;
    }
  }
}

void luna__tune_loop(luna_loop *loop) {
  luna__loop_set_batch(loop, callback_step, callbacks_batch);
  luna__loop_set_warm(loop, luna__timer_cb, luna__warm_task);
}

/* Arms the timer of an every handle for the call after calls_due. */
static int arm_every(luna__binding *b, luna__handle *h) {
  int64_t next = h->calls_due + 1;
  luna_ns deadline = next > (LUNA_NS_MAX - h->anchor) / h->interval
                         ? LUNA_NS_MAX
                         : h->anchor + next * h->interval;
  if (h->clock != NULL)
    return luna__gclock_add_timer(h->clock, h->timing, LUNA_TIMER_SCALED, deadline,
                                  luna__every_cb, h, &h->timer);
  return luna_timer_add(b->loop, h->timing, (luna_timer_kind)h->timer_kind, deadline,
                        luna__every_cb, h, &h->timer);
}

/* The timer of an every handle fired: the k-th call is due at anchor +
   k * interval; one call per run gets how many intervals came due since the
   last one, and the schedule stays anchored (no accumulated lateness). */
void luna__every_cb(luna_loop *loop, void *arg) {
  luna__handle *h = (luna__handle *)arg;
  luna__binding *b = h->b;
  lua_State *L = luna__exec_state(b);
  int top = lua_gettop(L);
  luna_ns now = h->clock != NULL ? luna__gclock_time(h->clock)
                                 : luna_loop_time(loop, LUNA_CLOCK_OF_TIMER_KIND(h->timer_kind));
  int64_t due = (now - h->anchor) / h->interval;
  int64_t n = due - h->calls_due, before = h->calls_due;
  if (n < 1)
    n = 1, due = h->calls_due + 1;
  h->calls_due = due;
  /* Re-arm before the call, so that remove() inside it cancels the timer. */
  if (arm_every(b, h) != 0) {
    LUNA__PUSH_MEMERR(L); /* this runs unprotected: an error that needs no memory */
    luna__report(b, L, -1, 0, 0, "task.every (re-arming its timer)");
    lua_settop(L, top);
    deactivate(b, h, false);
    return;
  }
  if (luna__held(b)) {
    /* Held: no call now; the next one counts these intervals too. */
    h->calls_due = before;
    return;
  }
  call_handle(b, h, L, top, 0, (lua_Integer)n);
}

/* handle:remove(): stops the callback; safe during its own run and at any
   time after (a second call does nothing). */
static int l_handle_remove(lua_State *L) {
  luna__handle *h = check_handle(L, 1);
  deactivate(h->b, h, true);
  return 0;
}

void luna__remove_handle(luna__handle *h) { deactivate(h->b, h, true); }

static int l_handle_active(lua_State *L) {
  lua_pushboolean(L, check_handle(L, 1)->active);
  return 1;
}

static int l_handle_tostring(lua_State *L) {
  luna__handle *h = check_handle(L, 1);
  lua_pushfstring(L, "Handle(%s %s, %s): %p", h->kind == HANDLE_EVERY ? "every" : "on",
                  luna_timing_name(h->timing),
                  h->active ? "active" : "removed", (void *)h);
  return 1;
}

/* Creates a handle for the function at index 2, pushed on L; a group's
   (clock not NULL) keeps the group at index 1 as its second user value. */
static luna__handle *new_handle(lua_State *L, luna__binding *b, int kind, luna_timing timing,
                                struct luna__gclock *clock) {
  luna__handle *h;
  if (b->closing)
    luaL_error(L, LUNA__CLOSING_MSG);
  h = (luna__handle *)lua_newuserdatauv(L, sizeof *h, clock != NULL ? 2 : 1);
  memset(h, 0, sizeof *h);
  h->b = b;
  h->kind = (uint8_t)kind;
  h->timing = (uint8_t)timing;
  h->ref = h->fn_ref = LUA_NOREF;
  h->clock = clock;
  luaL_setmetatable(L, LUNA__HANDLE_MT);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, -2, 1);
  if (clock != NULL) {
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 2);
  }
  return h;
}

/* Takes the registry references of the handle on top of L: the handle's
   and its function's. Done before the handle is armed, since it may raise
   a memory error: the loop must never hold a handle that nothing keeps
   alive (its state would free it under a timer or an item). */
static void reference_handle(lua_State *L, luna__handle *h) {
  lua_pushvalue(L, -1);
  h->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_getiuservalue(L, -1, 1);
  h->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

/* Raises "<what>: <error of rc>" for a handle that could not be armed,
   letting go of its references first. */
static int arm_failed(lua_State *L, luna__binding *b, luna__handle *h, const char *what, int rc) {
  release(b, h);
  return luaL_error(L, "%s: %s", what, luna_strerror(rc));
}

/* Registers an armed, referenced handle (on top of L) with the binding.
   Allocates nothing. */
static void register_handle(luna__binding *b, luna__handle *h) {
  h->active = true;
  h->next = b->handles;
  if (b->handles != NULL)
    b->handles->prev = h;
  b->handles = h;
  b->nhandles++;
}

/* Reads opts.priority: a number (lower runs first, default 0) or "high"
   (runs before every numbered priority and is never deferred by a budget). */
static void check_priority(lua_State *L, int opts, luna_item_options *o) {
  memset(o, 0, sizeof *o);
  if (lua_isnoneornil(L, opts))
    return;
  luaL_checktype(L, opts, LUA_TTABLE);
  {
    static const char *const known[] = {"priority", NULL};
    luna__check_options(L, opts, known);
  }
  lua_getfield(L, opts, "priority");
  if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "high") == 0) {
    o->priority = INT_MIN;
    o->essential = true;
  } else if (!lua_isnil(L, -1)) {
    lua_Integer p;
    int ok;
    p = lua_tointegerx(L, -1, &ok);
    if (!ok || p <= INT_MIN || p > INT_MAX)
      luaL_argerror(L, opts, "opts.priority must be an integer from -2147483647 to "
                             "2147483647, or \"high\"");
    o->priority = (int)p;
  }
  lua_pop(L, 1);
}

/* The argument at idx, after a callback's function: a timing name (when
   `timing_ok`; *timing is set; nil there with more arguments after it
   is a timing left out), then an options table or nil. Returns the
   index of the options (idx, or idx + 1 after a timing or its nil). Raises an
   argument error at the position the caller wrote, saying what may be
   there. */
static int timing_or_options(lua_State *L, int idx, bool timing_ok, luna_timing *timing) {
  /* An optional timing written as nil: the options come after it. */
  if (timing_ok && lua_isnil(L, idx) && !lua_isnone(L, idx + 1))
    return timing_or_options(L, idx + 1, false, timing);
  if (timing_ok && lua_type(L, idx) == LUA_TSTRING) {
    *timing = luna__opt_timing(L, idx, LUNA_UPDATE);
    idx++;
    timing_ok = false;
  }
  if (!lua_isnoneornil(L, idx) && !lua_istable(L, idx))
    luaL_argerror(L, idx, lua_pushfstring(L, "expected %s, got %s",
                                          timing_ok ? "a timing name or an options table"
                                                    : "an options table",
                                          luaL_typename(L, idx)));
  return idx;
}

/* task.on([timing,] fn [, opts]) or task.on(fn, timing [, opts]) ->
   Handle: calls fn(dt) at each run of `timing` (default "Update"), from
   the next run on, until handle:remove() (also called when a
   `local h <close>` goes out of scope). dt is delta_time() in seconds;
   return values are ignored. Callbacks run in priority order (opts.priority: an integer, lower first, default 0; or
   "high": first, and never deferred by task.set_budget), then in
   registration order. */
static int on_impl(lua_State *L, luna__binding *b, struct luna__gclock *clock) {
  /* A group's arguments start at 2 (1 is the group). */
  int o = clock != NULL ? 1 : 0;
  const char *what = clock != NULL ? "g:on" : "task.on";
  luna_timing timing = LUNA_UPDATE;
  luna_item_options opts;
  luna__handle *h;
  int rc, fn = o + 1, opt;
  /* Arguments are checked where the caller wrote them: task.on(fn, ...)
     has its function at 1, task.on(timing, fn, ...) at 2. */
  if (lua_type(L, o + 1) != LUA_TFUNCTION) {
    timing = luna__opt_timing(L, o + 1, LUNA_UPDATE);
    fn = o + 2;
  }
  luaL_checktype(L, fn, LUA_TFUNCTION);
  opt = timing_or_options(L, fn + 1, fn == o + 1, &timing);
  check_priority(L, opt, &opts);
  lua_settop(L, fn);
  if (o == 0 && fn == 1) { /* new_handle takes the function at index 2 */
    lua_pushnil(L);
    lua_insert(L, 1);
  } else if (o == 1 && fn == 3) {
    lua_remove(L, 2); /* the timing: the group stays at 1, fn comes to 2 */
  }
  h = new_handle(L, b, HANDLE_ON, timing, clock);
  reference_handle(L, h);
  rc = luna_item_add_ex(b->loop, timing, clock != NULL ? group_callback_step : callback_step, h,
                        &opts, &h->item);
  if (rc != 0)
    return arm_failed(L, b, h, what, rc);
  register_handle(b, h);
  return 1;
}

static int l_on(lua_State *L) { return on_impl(L, luna__upvalue_binding(L), NULL); }

int luna__group_on(lua_State *L, luna__binding *b, struct luna__gclock *clock) {
  return on_impl(L, b, clock);
}

/* A deterministic fraction in [0, 1) for the i-th spread registration: the
   golden-ratio (Weyl) sequence, whose points stay evenly spread for any
   count, computed in integers so every platform agrees. */
static double spread_fraction(uint64_t i) {
  uint64_t x = (i + 1) * UINT64_C(0x9E3779B97F4A7C15);
  return (double)(x >> 11) / 9007199254740992.0; /* 2^53 */
}

/* task.every(interval, fn, [timing], [opts]) -> Handle: calls fn(n)
   periodically, at runs of `timing` (or opts.timing; default "Update").
   The k-th call (k = 1, 2, ...) is due at start + k * interval on the
   clock, start being the clock when every was called; at most one call per
   run, n being how many intervals came due since the last call (usually
   1), so the schedule stays anchored. opts.clock ("scaled" default,
   "unscaled", "realtime", "fixed") and opts.spread: true staggers the first calls of callbacks started
   together evenly over one interval (deterministically), so thousands of
   them do not land in the same frame. */
static int every_impl(lua_State *L, luna__binding *b, struct luna__gclock *clock) {
  int o = clock != NULL ? 1 : 0;
  const char *what = clock != NULL ? "g:every" : "task.every";
  lua_Number seconds = luaL_checknumber(L, o + 1);
  luna_ns interval;
  luna_timing timing = LUNA_UPDATE;
  luna_clock clk = LUNA_CLOCK_SCALED;
  bool spread = false;
  luna__handle *h;
  luna_ns now;
  int rc, opt;
  if (!(seconds > 0) || luna_seconds_to_ns((double)seconds, &interval) != 0 || interval == 0)
    return luaL_argerror(L, o + 1, lua_pushfstring(L, "expected a finite interval of at least "
                                                   "1e-9 seconds, got %s",
                                                   luna__number_text(L, seconds)));
  luaL_checktype(L, o + 2, LUA_TFUNCTION);
  opt = timing_or_options(L, o + 3, true, &timing);
  if (!lua_isnoneornil(L, opt)) {
    static const char *const known[] = {"timing", "clock", "spread", NULL};
    static const char *const group_known[] = {"timing", "spread", NULL};
    luna__check_options(L, opt, clock != NULL ? group_known : known);
    if (opt == o + 4 && lua_type(L, o + 3) == LUA_TSTRING &&
        lua_getfield(L, opt, "timing") != LUA_TNIL)
      luaL_argerror(L, opt, "opts.timing: the timing was given as argument #3 already");
    lua_settop(L, opt);
    timing = luna__field_timing(L, opt, "timing", timing);
    if (clock == NULL)
      clk = luna__field_clock(L, opt, "clock", LUNA_CLOCK_SCALED);
    spread = luna__field_boolean(L, opt, "spread", false);
  }
  lua_settop(L, o + 2);
  if (o == 1)
    lua_remove(L, 2); /* the interval: the group stays at 1, fn comes to 2 */
  now = clock != NULL ? luna__gclock_time(clock) : luna_loop_time(b->loop, clk);
  h = new_handle(L, b, HANDLE_EVERY, timing, clock);
  h->timer_kind = (uint8_t)LUNA_TIMER_KIND_OF_CLOCK(clk);
  h->interval = interval;
  h->anchor = now;
  if (spread)
    h->anchor = now - (luna_ns)(spread_fraction(b->spread_seq++) * (double)interval);
  reference_handle(L, h);
  rc = arm_every(b, h);
  if (rc != 0)
    return arm_failed(L, b, h, what, rc);
  register_handle(b, h);
  return 1;
}

static int l_every(lua_State *L) { return every_impl(L, luna__upvalue_binding(L), NULL); }

int luna__group_every(lua_State *L, luna__binding *b, struct luna__gclock *clock) {
  return every_impl(L, b, clock);
}

void luna__remove_all_handles(luna__binding *b) {
  while (b->handles != NULL)
    deactivate(b, b->handles, true);
}

static const luaL_Reg handle_methods[] = {
    {"remove", l_handle_remove}, {"active", l_handle_active}, {NULL, NULL}};

static const luaL_Reg handle_meta[] = {
    {"__close", l_handle_remove}, {"__tostring", l_handle_tostring}, {NULL, NULL}};

static const luaL_Reg callback_funcs[] = {{"on", l_on}, {"every", l_every}, {NULL, NULL}};

/* Creates the Handle metatable and adds task.on and task.every to the
   module table on top of L, with the binding b as their upvalue. */
void luna__open_callbacks(lua_State *L, luna__binding *b) {
  luaL_newmetatable(L, LUNA__HANDLE_MT);
  luaL_setfuncs(L, handle_meta, 0);
  luna__protect_metatable(L);
  luaL_newlib(L, handle_methods);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_pushlightuserdata(L, b);
  luaL_setfuncs(L, callback_funcs, 1);
}
