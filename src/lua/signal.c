/*
** signal.c: task.signal and its Signal and Connection objects: an event
** that many handlers subscribe to and that a task can await.
**
** A Signal is a userdata holding, in connection order, a C array of its
** connections and, in its user values, two Lua tables parallel to it: the
** handlers' functions (user value 1, read by the fire loop with one raw
** index) and the Connection objects (user value 2, what keeps them
** alive). User value 3 is the queue of deferred fires. Nothing else refers
** to a signal, so one that no code can reach any more is collected with
** its handlers, unless a deferred fire is queued (then the registry holds
** it until the fire is delivered).
**
** A fire is one C loop over the connections there were when it began, in
** one protected call (a new one only after a handler raised), as the
** stretches of task.on callbacks are (callbacks.c): a handler is a plain
** call on the firing thread and cannot await. A disconnection leaves a
** hole that the fire loops skip; holes are squeezed out, keeping the
** order, once they are half of the array and no fire is under way. So in
** steady state connecting allocates only the Connection object, and firing
** nothing.
**
** A task waiting in s:wait() (or task.await(s), or a combinator given s) is
** a connection too, whose "call" wakes the task with the fire's values. The
** task waits as an external wait, or as a timer wait when it has a
** timeout: the timer's firing resumes it without values (timed out), a
** fire cancels the timer and wakes it. The continuation of the wait
** (wait_k) always removes the waiter, however the task was woken.
*/
#include <stdio.h>
#include <string.h>

#include "binding.h"
#include "lunaloop/extension.h"

#define SIGNAL_MT "lunaloop.Signal"
#define CONNECTION_MT "lunaloop.Connection"

enum { UV_FNS = 1, UV_CONNS = 2, UV_DEFERRED = 3 };

typedef struct luna__signal luna__signal;

/* A connection: a handler, or a task waiting for the next fire. */
typedef struct sig_conn {
  luna__signal *s;
  luna__task *task;  /* a waiter's task (its record when it began waiting) */
  lua_State *co;     /* a waiter's thread (kept by the connection's user value 2) */
  lua_Number seconds; /* a waiter's timeout, for the timeout error */
  uint32_t pos;      /* index in s->conns while connected */
  bool connected;
  bool once;
  bool waiter;
  bool fired;        /* a waiter was woken by a fire */
  bool timed;        /* a waiter has a timeout (waits as a timer wait) */
} sig_conn;

struct luna__signal {
  luna__binding *b;
  sig_conn **conns;  /* connection order; NULL: a hole left by a disconnection */
  uint32_t n, cap;   /* entries used (holes included), allocated */
  uint32_t holes;
  uint32_t firing;   /* fires under way (a handler may fire again) */
  uint32_t pending;  /* deferred fires queued in the loop */
  int keep_ref;      /* the signal in the registry while pending > 0 */
  lua_Integer dq_head, dq_tail; /* the deferred queue: [head, tail) of user value 3 */
  uint8_t timing;    /* where deferred fires are delivered */
  bool destroyed;
};

/* ---- the connection array ------------------------------------------------ */

static luna__signal *check_signal(lua_State *L, int idx) {
  return (luna__signal *)luaL_checkudata(L, idx, SIGNAL_MT);
}

bool luna__is_signal(lua_State *L, int idx) {
  return luaL_testudata(L, idx, SIGNAL_MT) != NULL;
}

int luna__l_is_signal(lua_State *L) {
  lua_pushboolean(L, luna__is_signal(L, 1));
  return 1;
}

/* Squeezes the holes out of the array and its two tables (the signal at
   sidx), keeping the order. Only when no fire is under way. */
static void compact(lua_State *L, luna__signal *s, int sidx) {
  uint32_t i, j = 0;
  if (s->holes == 0 || s->firing > 0)
    return;
  lua_getiuservalue(L, sidx, UV_FNS);
  lua_getiuservalue(L, sidx, UV_CONNS);
  for (i = 0; i < s->n; i++) {
    sig_conn *c = s->conns[i];
    if (c == NULL)
      continue;
    if (i != j) {
      s->conns[j] = c;
      c->pos = j;
      lua_rawgeti(L, -2, (lua_Integer)i + 1);
      lua_rawseti(L, -3, (lua_Integer)j + 1);
      lua_rawgeti(L, -1, (lua_Integer)i + 1);
      lua_rawseti(L, -2, (lua_Integer)j + 1);
    }
    j++;
  }
  for (i = j; i < s->n; i++) { /* the tail: let the collector have them */
    lua_pushnil(L);
    lua_rawseti(L, -3, (lua_Integer)i + 1);
    lua_pushnil(L);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_pop(L, 2);
  s->n = j;
  s->holes = 0;
}

/* Makes room for one more connection (raises a memory error). */
static void reserve(lua_State *L, luna__signal *s, int sidx) {
  void *ud;
  lua_Alloc alloc;
  sig_conn **a;
  uint32_t cap;
  if (s->n < s->cap)
    return;
  compact(L, s, sidx);
  if (s->n < s->cap)
    return;
  if (s->cap >= UINT32_MAX / 2)
    luaL_error(L, "signal: too many connections");
  cap = s->cap == 0 ? 4 : s->cap * 2;
  alloc = lua_getallocf(L, &ud);
  a = (sig_conn **)alloc(ud, s->conns, s->cap * sizeof *a, cap * sizeof *a);
  if (a == NULL)
    luaL_error(L, "not enough memory");
  s->conns = a;
  s->cap = cap;
}

/* Ends connection c: a fire under way skips it from now on. */
static void disconnect(luna__signal *s, sig_conn *c) {
  if (!c->connected)
    return;
  c->connected = false;
  s->conns[c->pos] = NULL;
  s->holes++;
}

/* Creates a connection of the signal at sidx and pushes it; `what` (a
   function, or a waiter's thread) is at widx. Allocates before it links
   anything, so a memory error leaves the signal as it was. */
static sig_conn *new_conn(lua_State *L, luna__signal *s, int sidx, int widx, bool waiter) {
  sig_conn *c;
  uint32_t pos;
  sidx = lua_absindex(L, sidx);
  widx = lua_absindex(L, widx);
  reserve(L, s, sidx);
  pos = s->n;
  c = (sig_conn *)lua_newuserdatauv(L, sizeof *c, 2);
  memset(c, 0, sizeof *c);
  c->s = s;
  c->waiter = waiter;
  luaL_setmetatable(L, CONNECTION_MT);
  lua_pushvalue(L, sidx);
  lua_setiuservalue(L, -2, 1);
  lua_pushvalue(L, widx);
  lua_setiuservalue(L, -2, 2);
  lua_getiuservalue(L, sidx, UV_FNS);
  if (waiter)
    lua_pushboolean(L, 0);
  else
    lua_pushvalue(L, widx);
  lua_rawseti(L, -2, (lua_Integer)pos + 1);
  lua_pop(L, 1);
  lua_getiuservalue(L, sidx, UV_CONNS);
  lua_pushvalue(L, -2);
  lua_rawseti(L, -2, (lua_Integer)pos + 1);
  lua_pop(L, 1);
  /* Nothing below can fail. */
  c->pos = pos;
  c->connected = true;
  s->conns[pos] = c;
  s->n = pos + 1;
  return c;
}

/* ---- waking waiters ------------------------------------------------------ */

/* The waiter's task, when it still waits in this wait; NULL otherwise (it
   ended without its continuation running: the state was closed). */
static luna__task *waiting_task(sig_conn *c) {
  luna__task *t = luna__record(c->co);
  if (t == NULL || t != c->task || t->state != LUNA__SUSPENDED)
    return NULL;
  if (t->wait != (c->timed ? LUNA__W_TIMER : LUNA__W_EXTERNAL))
    return NULL;
  return t;
}

/* Wakes waiter c with the n values at first..first+n-1 of L (copies), or,
   when is_error, with the value at first. Disconnects it. */
static void wake_waiter(lua_State *L, sig_conn *c, int first, int n, bool is_error) {
  luna__task *t = waiting_task(c);
  int i;
  disconnect(c->s, c);
  if (t == NULL)
    return;
  if (c->timed)
    (void)luna__loop_cancel_timer_node(t->b->loop, &t->on.timer.node);
  c->fired = !is_error;
  if (!lua_checkstack(L, n + 1)) {
    LUNA__PUSH_MEMERR(L);
    luna__wake(t->b, t, L, 1, true);
    return;
  }
  for (i = 0; i < n; i++)
    lua_pushvalue(L, first + i);
  luna__wake(t->b, t, L, n, is_error);
}

/* ---- firing ---------------------------------------------------------------- */

typedef struct fire_state {
  luna__signal *s;
  uint32_t i, end;   /* the next entry, and the end of this fire's entries */
  int nargs;
  sig_conn *cur;     /* the handler being called; NULL between calls */
  lua_State *outer;  /* luna__running outside the handlers */
} fire_state;

/* In protected mode: (fire_state, fns, args...) -> nothing. Calls the
   connections that were there when the fire began, in order, skipping
   those disconnected since. */
static int fire_body(lua_State *L) {
  fire_state *st = (fire_state *)lua_touserdata(L, 1);
  luna__signal *s = st->s;
  luna__binding *b = s->b;
  int nargs = st->nargs, k;
  luaL_checkstack(L, nargs + 4, "too many values to fire");
  while (st->i < st->end) {
    sig_conn *c = s->conns[st->i++]; /* read again: a connect may move the array */
    if (c == NULL || !c->connected)
      continue;
    if (c->waiter) {
      wake_waiter(L, c, 3, nargs, false);
      continue;
    }
    if (c->once)
      disconnect(s, c);
    st->cur = c;
    lua_rawgeti(L, 2, (lua_Integer)st->i);
    for (k = 0; k < nargs; k++)
      lua_pushvalue(L, 3 + k);
    LUNA__OBSERVE(b, on_call, L, true);
    (void)luna__enter_thread(L);
    lua_call(L, nargs, 0);
    luna__leave_thread(st->outer);
    LUNA__OBSERVE(b, on_call, L, false);
    st->cur = NULL;
  }
  return 0;
}

/* Reports the error on top of L, raised by handler c (its function at fns
   position c's slot, in the table at fns_idx). */
static void report_handler(luna__binding *b, lua_State *L, int fns_idx, uint32_t slot) {
  lua_Debug ar;
  char what[LUA_IDSIZE + 32] = "signal handler";
  int err = lua_gettop(L);
  luna__push_last_traceback(L);
  if (lua_rawgeti(L, fns_idx, (lua_Integer)slot + 1) == LUA_TFUNCTION &&
      lua_getinfo(L, ">S", &ar))
    snprintf(what, sizeof what, "signal handler %s:%d", ar.short_src, ar.linedefined);
  luna__report(b, L, err, err + 1, 0, what);
  lua_settop(L, err - 1);
}

/* Fires the signal at sidx of L with the nargs values at first...: every
   connection there is now, in order, each handler called protected (a
   failure is reported, and the fire goes on with the next). Then resumes
   the waiters woken, when nothing else is resuming. An interrupt or a
   mod's budget stop that a handler raised ends the fire (it would stop
   every later handler too): when `raise_stop` it is raised again here
   (the firing code is what it stops), otherwise (a deferred delivery,
   which no code of the state called) it is reported once, as that
   handler's failure. */
static void fire(lua_State *L, luna__signal *s, int sidx, int first, int nargs, bool raise_stop) {
  luna__binding *b = s->b;
  int top = lua_gettop(L), fns, st_rc, k, saved_line;
  fire_state st;
  luna__calling_saved calling;
  lua_State *saved;
  bool stop = false;
  if (s->n == 0 || s->destroyed)
    return;
  sidx = lua_absindex(L, sidx);
  first = lua_absindex(L, first);
  st.s = s;
  st.i = 0;
  st.end = s->n;
  st.nargs = nargs;
  st.outer = luna__running;
  if (!lua_checkstack(L, nargs + 8)) {
    LUNA__PUSH_MEMERR(L);
    luna__report(b, L, -1, 0, 0, "signal fire (no stack room for its values)");
    lua_settop(L, top);
    return;
  }
  saved_line = b->stretch_tb_line;
  b->stretch_tb_line = luna__next_frame_line(L);
  lua_pushcfunction(L, luna__stretch_msgh); /* top + 1: tracebacks without fire_body */
  lua_getiuservalue(L, sidx, UV_FNS); /* top + 2 */
  fns = top + 2;
  s->firing++;
  calling = luna__begin_calling(b, L, LUNA__CALLING_SIGNAL);
  do {
    st.cur = NULL;
    lua_pushcfunction(L, fire_body);
    lua_pushlightuserdata(L, &st);
    lua_pushvalue(L, fns);
    for (k = 0; k < nargs; k++)
      lua_pushvalue(L, first + k);
    st_rc = lua_pcall(L, 2 + nargs, 0, top + 1);
    luna__leave_thread(st.outer); /* a handler that raised left L there */
    if (st_rc != LUA_OK) {
      if (st.cur != NULL)
        LUNA__OBSERVE(b, on_call, L, false);
      if (luna__is_stop_error(L, -1)) {
        if (raise_stop) {
          stop = true;
          break;
        }
        if (st.cur != NULL)
          report_handler(b, L, fns, st.i - 1);
        else {
          luna__push_last_traceback(L);
          luna__report(b, L, -2, -1, 0, "signal fire");
        }
        break;
      }
      if (st.cur != NULL && luna__is_cancel_error(L, -1) && luna__cancel_pending(L, b))
        luna__push_last_traceback(L); /* the firing task's own cancellation
                                         (a handler cancelled it): raised
                                         when fire returns, not reported */
      else if (st.cur != NULL)
        report_handler(b, L, fns, st.i - 1);
      else { /* not a handler's (no stack room): reported, the fire ends */
        luna__push_last_traceback(L);
        luna__report(b, L, -2, -1, 0, "signal fire");
        break;
      }
    }
    lua_settop(L, fns);
  } while (st_rc != LUA_OK);
  luna__end_calling(b, calling);
  b->stretch_tb_line = saved_line;
  s->firing--;
  if (s->firing == 0 && s->holes * 2 > s->n)
    compact(L, s, sidx); /* no allocation: moves and clears slots */
  if (stop) {
    lua_replace(L, top + 1);
    lua_settop(L, top + 1);
    lua_error(L);
  }
  lua_settop(L, top);
  saved = luna__enter_exec(b, L);
  luna__pump(b);
  luna__leave_exec(b, saved);
}

/* s:fire(...): calls every handler now, in connection order, and wakes the
   tasks waiting on s with the values. */
static int l_fire(lua_State *L) {
  luna__signal *s = check_signal(L, 1);
  luna__binding *b = luna__upvalue_binding(L);
  bool before = luna__cancel_pending(L, b);
  fire(L, s, 1, 2, lua_gettop(L) - 1, true);
  luna__check_cancelled(L, b, before);
  return 0;
}

/* ---- deferred fires -------------------------------------------------------- */

static void release_keep(luna__signal *s) {
  if (s->pending == 0 && s->keep_ref != LUA_NOREF) {
    luaL_unref(s->b->L, LUA_REGISTRYINDEX, s->keep_ref);
    s->keep_ref = LUA_NOREF;
  }
}

void luna__signal_deferred_cb(luna_loop *loop, void *arg);

/* A deferred fire's continuation: delivers the oldest queued fire. */
void luna__signal_deferred_cb(luna_loop *loop, void *arg) {
  luna__signal *s = (luna__signal *)arg;
  luna__binding *b = s->b;
  lua_State *L;
  int top, n, i, sidx;
  s->pending--;
  if (s->destroyed || s->dq_head >= s->dq_tail) {
    release_keep(s);
    return;
  }
  if (luna__held(b) && luna__loop_enqueue(loop, (luna_timing)s->timing,
                                          luna__signal_deferred_cb, s) == 0) {
    s->pending++; /* held: delivered at the timing's next run */
    return;
  }
  L = luna__exec_state(b);
  top = lua_gettop(L);
  if (!lua_checkstack(L, 4)) {
    s->dq_head = s->dq_tail; /* cannot even read the queue: every fire dropped, said */
    LUNA__PUSH_MEMERR(L);
    luna__report(b, L, -1, 0, 0, "signal fire_deferred (delivery)");
    lua_settop(L, top);
    release_keep(s);
    return;
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, s->keep_ref);
  sidx = top + 1;
  lua_getiuservalue(L, sidx, UV_DEFERRED);
  lua_rawgeti(L, -1, s->dq_head);
  n = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  lua_pushnil(L);
  lua_rawseti(L, -2, s->dq_head);
  if (!lua_checkstack(L, n + 4)) {
    s->dq_head += n + 1;
    lua_settop(L, top);
    LUNA__PUSH_MEMERR(L);
    luna__report(b, L, -1, 0, 0, "signal fire_deferred (delivery)");
    lua_settop(L, top);
  } else {
    for (i = 1; i <= n; i++) {
      lua_rawgeti(L, top + 2, s->dq_head + i);
      lua_pushnil(L);
      lua_rawseti(L, top + 2, s->dq_head + i);
    }
    s->dq_head += n + 1;
    if (s->dq_head >= s->dq_tail)
      s->dq_head = s->dq_tail = 1; /* empty: the table's slots are reused */
    fire(L, s, sidx, top + 3, n, false);
    lua_settop(L, top);
  }
  if (s->dq_head >= s->dq_tail)
    s->dq_head = s->dq_tail = 1;
  release_keep(s);
}

luna__binding *luna__signal_binding(void *arg) {
  return ((luna__signal *)arg)->b;
}

void luna__signal_drop_deferred(void *arg) {
  luna__signal *s = (luna__signal *)arg;
  s->pending--;
  s->dq_head = s->dq_tail = 1; /* the queue's values stay until overwritten */
  release_keep(s);
}

/* s:fire_deferred(...): queues the fire; it is delivered at the next run
   of the signal's timing, fires of one timing in the order they were made. */
static int l_fire_deferred(lua_State *L) {
  luna__signal *s = check_signal(L, 1);
  luna__binding *b = luna__upvalue_binding(L);
  int n = lua_gettop(L) - 1, i, rc;
  lua_Integer at;
  if (s->destroyed)
    return 0;
  if (b->closing)
    return luaL_error(L, LUNA__CLOSING_MSG);
  if (s->dq_tail > LUA_MAXINTEGER - n - 2)
    return luaL_error(L, "signal:fire_deferred: the queue is full");
  if (lua_getiuservalue(L, 1, UV_DEFERRED) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, 1, UV_DEFERRED);
  }
  /* Stored first (may raise a memory error), then queued. */
  at = s->dq_tail;
  lua_pushinteger(L, n);
  lua_rawseti(L, -2, at);
  for (i = 1; i <= n; i++) {
    lua_pushvalue(L, 1 + i);
    lua_rawseti(L, -2, at + i);
  }
  lua_pop(L, 1);
  if (s->keep_ref == LUA_NOREF) {
    lua_pushvalue(L, 1);
    s->keep_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  rc = luna__loop_enqueue(b->loop, (luna_timing)s->timing, luna__signal_deferred_cb, s);
  if (rc != 0) {
    release_keep(s);
    return luaL_error(L, "signal:fire_deferred: %s", luna_strerror(rc));
  }
  s->pending++;
  s->dq_tail = at + n + 1;
  return 0;
}

/* ---- waiting ---------------------------------------------------------------- */

/* The continuation of a wait: the waiter is removed however the task was
   woken; then the fire's values are returned, or the error it was woken
   with is raised, or (its timer resumed it) the timeout error. */
static int wait_k(lua_State *L, int status, lua_KContext ctx) {
  sig_conn *c = (sig_conn *)ctx;
  luna__task *t = c->task;
  (void)status;
  if (luna__running_task != t)
    return luna__refuse_resume(L, t, ctx, wait_k);
  disconnect(c->s, c);
  if (t->resume_error) {
    t->resume_error = false;
    return lua_error(L);
  }
  if (c->fired)
    return t->on.ready.nresume;
  lua_createtable(L, 0, 2);
  lua_pushfstring(L, "timeout after %f s", c->seconds);
  lua_setfield(L, -2, "message");
  lua_pushnumber(L, c->seconds);
  lua_setfield(L, -2, "seconds");
  luaL_setmetatable(L, LUNA__TIMEOUT_MT);
  return lua_error(L);
}

/* Suspends the calling task until the next fire of the signal at sidx (or
   until `seconds` pass on the scaled clock, at Update, when timeout_idx is
   a number: then the timeout error of task.timeout is raised). */
static int wait_signal(lua_State *L, int sidx, int timeout_idx, const char *what) {
  luna__signal *s = check_signal(L, sidx);
  luna__binding *b = luna__upvalue_binding(L);
  luna__task *t;
  sig_conn *c;
  luna_ns ns = 0;
  bool timed = timeout_idx > 0 && !lua_isnoneornil(L, timeout_idx);
  if (timed)
    ns = luna__check_seconds(L, timeout_idx);
  t = luna__fast_await(L);
  if (t == NULL)
    t = luna__check_await_in(L, b, what);
  if (s->destroyed)
    return luaL_error(L, "%s: the signal was destroyed", what);
  lua_pushthread(L);
  c = new_conn(L, s, sidx, -1, true);
  c->task = t;
  c->co = L;
  c->timed = timed;
  if (timed) {
    luna_ns now = luna_loop_time(b->loop, LUNA_CLOCK_SCALED);
    luna_ns deadline = luna_ns_add(now, ns);
    int rc = luna__loop_add_timer_node(b->loop, LUNA_UPDATE,
                                       LUNA_TIMER_KIND_OF_CLOCK(LUNA_CLOCK_SCALED), deadline,
                                       luna__timer_cb, &t->on.timer.node);
    if (rc != 0) {
      disconnect(s, c);
      return luaL_error(L, "%s: cannot add a timer: %s", what, luna_strerror(rc));
    }
    c->seconds = lua_tonumber(L, timeout_idx);
    t->wait = LUNA__W_TIMER;
    t->timing = LUNA_UPDATE;
    t->timer_kind = (uint8_t)LUNA_TIMER_KIND_OF_CLOCK(LUNA_CLOCK_SCALED);
    t->on.timer.deadline = deadline;
  } else {
    t->wait = LUNA__W_EXTERNAL;
  }
  /* The frame while it waits: what it waits on, for the introspection
     (introspect.c reads value 1), and the waiter (which holds the signal). */
  lua_replace(L, 2);
  lua_pushstring(L, "signal:wait");
  lua_replace(L, 1);
  lua_settop(L, 2);
  return luna__yield_task(L, (lua_KContext)c, wait_k);
}

/* s:wait([seconds]) -> the values of the next fire. */
static int l_wait(lua_State *L) {
  return wait_signal(L, 1, 2, "signal:wait");
}

int luna__await_signal(lua_State *L, int idx) {
  lua_settop(L, idx);
  return wait_signal(L, idx, 0, "task.await");
}

/* ---- connecting, destroying ------------------------------------------------ */

/* s:connect(fn, [opts]) -> Connection. opts.once: disconnected before its
   first call. */
static int l_connect(lua_State *L) {
  luna__signal *s = check_signal(L, 1);
  luna__binding *b = luna__upvalue_binding(L);
  bool once = false;
  sig_conn *c;
  luaL_checktype(L, 2, LUA_TFUNCTION);
  if (!lua_isnoneornil(L, 3)) {
    static const char *const known[] = {"once", NULL};
    luaL_checktype(L, 3, LUA_TTABLE);
    luna__check_options(L, 3, known);
    once = luna__field_boolean(L, 3, "once", false);
  }
  if (s->destroyed)
    return luaL_error(L, "signal:connect: the signal was destroyed");
  if (b->closing)
    return luaL_error(L, LUNA__CLOSING_MSG);
  c = new_conn(L, s, 1, 2, false);
  c->once = once;
  return 1;
}

/* s:destroy(): every connection ends; tasks waiting on s get the
   cancellation error; deferred fires not delivered yet are dropped. Later
   connects and waits raise; fires do nothing. */
static int l_destroy(lua_State *L) {
  luna__signal *s = check_signal(L, 1);
  luna__binding *b = luna__upvalue_binding(L);
  bool before = luna__cancel_pending(L, b);
  uint32_t i;
  lua_State *saved;
  if (s->destroyed)
    return 0;
  s->destroyed = true;
  s->dq_head = s->dq_tail = 1;
  if (lua_getiuservalue(L, 1, UV_DEFERRED) == LUA_TTABLE) {
    lua_newtable(L); /* the queued values go with the old table */
    lua_setiuservalue(L, 1, UV_DEFERRED);
  }
  lua_pop(L, 1);
  luna__push_cancel_error(L);
  for (i = 0; i < s->n; i++) {
    sig_conn *c = s->conns[i];
    if (c == NULL)
      continue;
    if (c->waiter)
      wake_waiter(L, c, lua_gettop(L), 1, true);
    else
      disconnect(s, c);
  }
  lua_pop(L, 1);
  compact(L, s, 1);
  saved = luna__enter_exec(b, L);
  luna__pump(b);
  luna__leave_exec(b, saved);
  luna__check_cancelled(L, b, before);
  return 0;
}

static int l_is_destroyed(lua_State *L) {
  lua_pushboolean(L, check_signal(L, 1)->destroyed);
  return 1;
}

static int l_signal_tostring(lua_State *L) {
  luna__signal *s = check_signal(L, 1);
  if (s->destroyed)
    lua_pushfstring(L, "Signal(destroyed): %p", (void *)s);
  else
    lua_pushfstring(L, "Signal(%d connected): %p", (int)(s->n - s->holes), (void *)s);
  return 1;
}

/* The queued deferred fires of the signal ud (luna_purge's match). */
static bool match_signal(luna_fn fn, void *arg, void *ud) {
  return fn == luna__signal_deferred_cb && arg == ud;
}

static int l_signal_gc(lua_State *L) {
  luna__signal *s = (luna__signal *)lua_touserdata(L, 1);
  void *ud;
  lua_Alloc alloc = lua_getallocf(L, &ud);
  uint32_t i;
  if (s->pending > 0 && s->b->loop != NULL) /* the state is closing */
    luna_purge(s->b->loop, match_signal, s);
  /* Only a closing state finalizes a signal that tasks still wait on (a
     waiter keeps it reachable), and it cancels those tasks afterwards:
     their disconnect must find nothing to undo. The connections are alive
     here (user value 2 of a signal being finalized). */
  for (i = 0; i < s->n; i++)
    if (s->conns[i] != NULL)
      s->conns[i]->connected = false;
  alloc(ud, s->conns, s->cap * sizeof *s->conns, 0);
  s->conns = NULL;
  s->n = s->cap = 0;
  return 0;
}

/* task.signal([opts]) -> Signal. opts.timing (default "Update"): where
   fire_deferred delivers. */
static int l_signal(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  luna_timing timing = LUNA_UPDATE;
  luna__signal *s;
  if (!lua_isnoneornil(L, 1)) {
    static const char *const known[] = {"timing", NULL};
    luaL_checktype(L, 1, LUA_TTABLE);
    luna__check_options(L, 1, known);
    timing = luna__field_timing(L, 1, "timing", LUNA_UPDATE);
  }
  s = (luna__signal *)lua_newuserdatauv(L, sizeof *s, 3);
  memset(s, 0, sizeof *s);
  s->b = b;
  s->keep_ref = LUA_NOREF;
  s->timing = (uint8_t)timing;
  s->dq_head = s->dq_tail = 1;
  luaL_setmetatable(L, SIGNAL_MT);
  lua_newtable(L);
  lua_setiuservalue(L, -2, UV_FNS);
  lua_newtable(L);
  lua_setiuservalue(L, -2, UV_CONNS);
  return 1;
}

/* ---- the Connection object -------------------------------------------------- */

static sig_conn *check_conn(lua_State *L, int idx) {
  return (sig_conn *)luaL_checkudata(L, idx, CONNECTION_MT);
}

/* c:disconnect(): the handler is not called again (not later in a fire
   under way either). Any number of times. */
static int l_disconnect(lua_State *L) {
  sig_conn *c = check_conn(L, 1);
  disconnect(c->s, c);
  if (c->s->firing == 0 && c->s->holes * 2 > c->s->n) {
    lua_settop(L, 1);
    lua_getiuservalue(L, 1, 1); /* the signal, at 2 */
    compact(L, c->s, 2);
  }
  return 0;
}

static int l_connected(lua_State *L) {
  lua_pushboolean(L, check_conn(L, 1)->connected);
  return 1;
}

static int l_conn_tostring(lua_State *L) {
  sig_conn *c = check_conn(L, 1);
  lua_pushfstring(L, "Connection(%s%s): %p", c->connected ? "connected" : "disconnected",
                  c->once ? ", once" : "", (void *)c);
  return 1;
}

static const luaL_Reg signal_methods[] = {
    {"connect", l_connect},
    {"fire", l_fire},
    {"fire_deferred", l_fire_deferred},
    {"wait", l_wait},
    {"destroy", l_destroy},
    {"is_destroyed", l_is_destroyed},
    {NULL, NULL}};

static const luaL_Reg conn_methods[] = {
    {"disconnect", l_disconnect},
    {"connected", l_connected},
    {NULL, NULL}};

/* Makes the Signal and Connection metatables and adds task.signal to the
   module table on top of L; the binding is every function's upvalue. */
void luna__open_signal(lua_State *L, luna__binding *b) {
  luaL_newmetatable(L, SIGNAL_MT);
  lua_createtable(L, 0, 6);
  lua_pushlightuserdata(L, b);
  luaL_setfuncs(L, signal_methods, 1);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_signal_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, l_signal_gc);
  lua_setfield(L, -2, "__gc");
  luna__protect_metatable(L);
  lua_pop(L, 1);
  luaL_newmetatable(L, CONNECTION_MT);
  lua_createtable(L, 0, 2);
  luaL_setfuncs(L, conn_methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_disconnect);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, l_conn_tostring);
  lua_setfield(L, -2, "__tostring");
  luna__protect_metatable(L);
  lua_pop(L, 1);
  lua_pushlightuserdata(L, b);
  lua_pushcclosure(L, l_signal, 1);
  lua_setfield(L, -2, "signal");
}
