/*
** budget.c: the instruction and time budgets of a mod.
**
** Every thread of a mod's state carries the same count hook: the main thread
** (set at load), each task's coroutine (the guard observer's on_thread),
** each coroutine the sandbox's coroutine.create/wrap makes, and any other
** thread, since lua_newthread copies the creating thread's hook. The hook
** fires every `step` instructions (min(budget, 1000)) and adds the count it
** was set with to m->used, the counter of the current *context*.
**
** A context is one run of the mod's code: a task resume, a callback,
** predicate or error handler call (the guard observer's on_run), or a call the set
** makes itself (bus delivery, on_load, on_unload). The outermost context
** resets the counter; nested ones (a task spawned from a task runs at once,
** inside its parent's resume) share it, so spawning cannot launder a budget.
** Near the end the hook is re-armed with exactly the instructions left, so a
** context is stopped after `budget` instructions, give or take the partial
** counts other threads carried in from earlier contexts (< step each).
**
** Once a context has run out, it stays out: the hook then fires at every
** instruction of the thread it stopped and of the context's own thread and
** raises again, so a pcall around the runaway code, or a task that keeps
** resuming a coroutine that was stopped, cannot go on. Only the
** end of the outermost context clears it.
**
** luna_lua_interrupt (Ctrl-C) also uses lua_sethook: it replaces the hook of
** the running thread with its own one-shot hook, which clears itself when it
** fires. The budget never replaces a hook that is not its own
** (set_count), so a pending interrupt is never lost; the budget hook comes
** back on that thread at its next context (resume or call), and on plain
** coroutines at their next coroutine.create. Time spent inside one C
** function (a long concatenation, table.sort of a huge table) is not
** counted in instructions: hooks run only between VM instructions. The
** time budget below covers it.
**
** The time budget (time_limit ns per frame) covers every context of the
** mod in a frame together: each outermost context reads the set's clock
** when it begins and ends and adds what it took to time_spent, which a new
** frame resets (loading and unloading reset it too: each gets a budget of
** its own). The hook reads the clock each time it fires (every `step`
** instructions, so about 20 ns per 1000 instructions), and stops the
** context once time_spent plus the context's own time reaches the limit.
** A C function can take long between two instructions (a loop of
** s = s .. "x" is one instruction per megabyte copied), so the context's
** deadline is also handed to the watchdog thread (watchdog.c), which arms
** the hook to fire at the next instruction once it passes: a loop of such
** calls stops right after the call under way. The stop is raised like the
** instruction budget's (again at every instruction until the context
** ends). Reaching the limit, by a stop or by a context that ends past it
** (many short runs), counts one time overrun per frame and holds the
** mod's binding for the rest of the frame (luna__guard_hold): the mod's work
** that has not started waits for the next frame.
*/
#include <stdio.h>

#include "mods.h"

/* Arms the budget hook on `co` to fire after `count` instructions, unless a
   foreign hook is pending there. Resets the thread's count. */
static void set_count(lua_State *co, int count) {
  lua_Hook h = lua_gethook(co);
  if (h != NULL && h != luna__budget_hook)
    return;
  lua_sethook(co, luna__budget_hook, LUA_MASKCOUNT, count);
}

/* Pushes "<source>:<line>: " of the Lua code running at `level` (0 from a
   hook), or from a C function (level 1) of the nearest Lua function that
   called it (the matcher and the sort's comparator run below C frames). */
static void push_where(lua_State *L, int level) {
  lua_Debug ar;
  if (level == 0) {
    luaL_where(L, 0);
    return;
  }
  for (; lua_getstack(L, level, &ar); level++) {
    lua_getinfo(L, "Sl", &ar);
    if (ar.currentline > 0) {
      lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
      return;
    }
  }
  lua_pushliteral(L, "");
}

/* Raises "<where>: instruction budget exceeded (N instructions)" (or the
   time budget's message, for `time`); once a context ran out, the same
   message (with the place where it first ran out) is raised again wherever
   its code goes on. `level` is push_where's. */
static int raise_exceeded(lua_State *L, luna__mod *m, bool time, int level) {
  if (m->exceeded_msg[0] == '\0') {
    push_where(L, level);
    if (time) {
      char ms[32];
      snprintf(ms, sizeof ms, "%g", (double)m->time_limit / 1e6);
      lua_pushfstring(L, "time budget exceeded (%s ms per frame)", ms);
    } else
      lua_pushfstring(L, "instruction budget exceeded (%I instructions)", (lua_Integer)m->budget);
    lua_concat(L, 2);
    snprintf(m->exceeded_msg, sizeof m->exceeded_msg, "%s", lua_tostring(L, -1));
    return luna__guard_raise_stop(L);
  }
  lua_pushstring(L, m->exceeded_msg);
  return luna__guard_raise_stop(L);
}

/* The set's clock (the host's, or CLOCK_MONOTONIC). */
static luna_ns clock_now(const luna__mod *m) {
  const luna_mods_config *c = &m->set->cfg;
  return c->clock != NULL ? c->clock(c->clock_ud) : luna__watchdog_now();
}

/* The mod's time for the frame is spent: one time overrun per frame, and
   its binding is held for the rest of the frame (its work waits). While
   the state is being closed, cancellations are abandoned from now on. */
static void hold(luna__mod *m) {
  if (!m->time_counted)
    luna__mod_overrun(m, LUNA__OVERRUN_TIME);
  m->time_counted = true;
  if (m->binding == NULL)
    return;
  luna__guard_hold(m->binding, m->time_frame);
  if (m->unloading)
    luna__guard_abandon(m->binding);
}

/* True once the open context has used up what the frame left it. */
static bool time_over(luna__mod *m) {
  return m->time_limit > 0 && m->depth > 0 &&
         luna_ns_add(m->time_spent, clock_now(m) - m->ctx_began) >= m->time_limit;
}

/* m->exceeded. While it is set, the sandbox's xpcall lets the stop's error
   through without calling a message handler (Lua would call it with hooks
   off, where a loop could never be stopped): raise_exceeded raises it as
   the guard's stop, which stands until it is ended here. */
static void set_exceeded(luna__mod *m, bool exceeded) {
  m->exceeded = exceeded;
  if (!exceeded)
    luna__guard_end_stop(m->binding);
}

/* Stops the open context: raised here and again at every instruction of
   L and of the context's thread until the context ends. */
static void stop(lua_State *L, luna__mod *m, bool time, int level) {
  set_exceeded(m, true);
  if (time)
    hold(m);
  else
    luna__mod_overrun(m, LUNA__OVERRUN_BUDGET);
  lua_sethook(L, luna__budget_hook, LUA_MASKCOUNT, 1);
  if (m->ctx_thread != NULL && m->ctx_thread != L)
    set_count(m->ctx_thread, 1);
  raise_exceeded(L, m, time, level);
}

void luna__budget_check_time(lua_State *L, luna__mod *m) {
  if (m->exceeded)
    raise_exceeded(L, m, false, 1);
  if (time_over(m))
    stop(L, m, true, 1);
}

void luna__budget_charge(lua_State *L, luna__mod *m, uint64_t n) {
  if (m->depth == 0)
    return;
  m->used += n;
  if (m->used >= m->budget)
    set_count(L, 1);
}

void luna__budget_hook(lua_State *L, lua_Debug *ar) {
  luna__mod *m = luna__mod_of(L);
  int count = lua_gethookcount(L);
  uint64_t left;
  int want;
  (void)ar;
  if (m->exceeded) {
    if (count != 1)
      lua_sethook(L, luna__budget_hook, LUA_MASKCOUNT, 1);
    raise_exceeded(L, m, false, 0);
  }
  m->used += (uint64_t)count;
  if (m->used >= m->budget)
    stop(L, m, false, 0);
  if (time_over(m))
    stop(L, m, true, 0);
  left = m->budget - m->used;
  want = left < (uint64_t)m->step ? (int)left : m->step;
  if (want != count)
    lua_sethook(L, luna__budget_hook, LUA_MASKCOUNT, want);
}

void luna__budget_hook_thread(luna__mod *m, lua_State *co) {
  set_count(co, m->exceeded ? 1 : m->step);
}

/* The watchdog's target is `thread` now (inside a context). */
static void set_thread(luna__mod *m, lua_State *thread) {
  m->thread = thread;
  if (m->set->watchdog != NULL && m->time_limit > 0)
    luna__watchdog_thread(m->set->watchdog, thread);
}

void luna__budget_begin(luna__mod *m, lua_State *thread) {
  luna_ns left;
  if (m->depth++ > 0) {
    if (m->depth - 1 <= LUNA__THREAD_STACK)
      m->threads[m->depth - 2] = m->thread;
    set_thread(m, thread);
    if (m->exceeded)
      set_count(thread, 1);
    return;
  }
  m->used = 0;
  if (m->exceeded)
    set_exceeded(m, false);
  m->exceeded_msg[0] = '\0';
  m->mem_strict = true;
  m->ctx_thread = thread;
  m->thread = thread;
  set_count(thread, m->step);
  if (m->time_limit <= 0)
    return;
  if (m->time_frame != luna_loop_frame_count(m->set->loop)) {
    m->time_frame = luna_loop_frame_count(m->set->loop);
    m->time_spent = 0;
    m->time_counted = false;
  }
  m->ctx_began = clock_now(m);
  left = m->time_limit - m->time_spent;
  if (left <= 0)
    set_count(thread, 1); /* (a context the binding cannot hold: the set's
                             own calls) stopped at its first instruction */
  if (m->set->watchdog != NULL) /* (one clock read less with the default clock) */
    luna__watchdog_arm(m->set->watchdog, thread,
                       luna_ns_add(m->set->cfg.clock != NULL ? luna__watchdog_now() : m->ctx_began,
                                   left > 0 ? left : 0));
}

void luna__budget_end(luna__mod *m) {
  if (--m->depth > 0) {
    /* Past the stack's depth the context's own thread stands in: alive
       while the context is open, which the watchdog needs. */
    set_thread(m, m->depth <= LUNA__THREAD_STACK ? m->threads[m->depth - 1] : m->ctx_thread);
    return;
  }
  if (m->exceeded && m->ctx_thread != NULL)
    set_count(m->ctx_thread, m->step);
  m->used = 0;
  if (m->exceeded)
    set_exceeded(m, false);
  m->mem_strict = false;
  m->ctx_thread = NULL;
  m->thread = NULL;
  if (m->time_limit <= 0)
    return;
  if (m->set->watchdog != NULL)
    luna__watchdog_disarm(m->set->watchdog);
  m->time_spent += clock_now(m) - m->ctx_began;
  if (m->time_spent >= m->time_limit)
    hold(m);
}

lua_State *luna__budget_switch(luna__mod *m, lua_State *co) {
  lua_State *before = m->thread;
  if (m->depth > 0)
    set_thread(m, co);
  return before;
}

void luna__budget_fresh(luna__mod *m) {
  m->time_frame = luna_loop_frame_count(m->set->loop);
  m->time_spent = 0;
  m->time_counted = false;
  luna__guard_unhold(m->binding);
}

bool luna__mod_held(luna__mod *m) {
  return luna__guard_held(m->binding);
}

/* ---- the guard's observer ------------------------------------------------- */

static void on_thread(void *ud, lua_State *co) {
  luna__budget_hook_thread((luna__mod *)ud, co);
}

/* Every resume of a task and every other call of the mod's code by the
   binding is a budget context. */
static void on_run(void *ud, lua_State *L, bool begin) {
  luna__mod *m = (luna__mod *)ud;
  if (begin)
    luna__budget_begin(m, L);
  else
    luna__budget_end(m);
}

void luna__budget_install(luna__mod *m) {
  m->observer.on_thread = on_thread;
  m->observer.on_run = on_run;
  m->observer.ud = m;
  luna__guard_observe(m->L, &m->observer);
  /* Kept: the hook runs on any thread of the state, and looking the
     binding up there would push onto the main thread's stack. */
  m->binding = luna__guard_binding(m->L);
  set_count(m->L, m->step);
}
