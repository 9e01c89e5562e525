/*
** budget.c: the instruction budget of a mod.
**
** Every thread of a mod's state carries the same count hook: the main thread
** (set at load), each task's coroutine (the binding's on_thread observer),
** each coroutine the sandbox's coroutine.create/wrap makes, and any other
** thread, since lua_newthread copies the creating thread's hook. The hook
** fires every `step` instructions (min(budget, 1000)) and adds the count it
** was set with to m->used, the counter of the current *context*.
**
** A context is one run of the mod's code: a task resume (on_resume), a
** callback, predicate or error handler call (on_call), or a call the set
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
** resuming a coroutine that was stopped (case c19), cannot go on. Only the
** end of the outermost context clears it.
**
** luna_lua_interrupt (Ctrl-C) also uses lua_sethook: it replaces the hook of
** the running thread with its own one-shot hook, which clears itself when it
** fires. The budget never replaces a hook that is not its own
** (set_count), so a pending interrupt is never lost; the budget hook comes
** back on that thread at its next context (resume or call), and on plain
** coroutines at their next coroutine.create. Time spent inside one C
** function (a pathological string.find pattern, table.sort of a huge table)
** is not counted: hooks run only between VM instructions.
*/
#include <stdio.h>

#include "binding.h"
#include "mods.h"

static void budget_hook(lua_State *L, lua_Debug *ar);

/* Arms the budget hook on `co` to fire after `count` instructions, unless a
   foreign hook is pending there. Resets the thread's count. */
static void set_count(lua_State *co, int count) {
  lua_Hook h = lua_gethook(co);
  if (h != NULL && h != budget_hook)
    return;
  lua_sethook(co, budget_hook, LUA_MASKCOUNT, count);
}

/* Raises "<where>: instruction budget exceeded (N instructions)"; once a
   context ran out, the same message (with the place where it first ran
   out) is raised again wherever its code goes on. */
static int raise_exceeded(lua_State *L, luna__mod *m) {
  if (m->exceeded_msg[0] == '\0') {
    luaL_where(L, 0);
    lua_pushfstring(L, "instruction budget exceeded (%I instructions)", (lua_Integer)m->budget);
    lua_concat(L, 2);
    snprintf(m->exceeded_msg, sizeof m->exceeded_msg, "%s", lua_tostring(L, -1));
    return luna__raise_from_hook(L, LUNA__HOOK_BUDGET);
  }
  lua_pushstring(L, m->exceeded_msg);
  return luna__raise_from_hook(L, LUNA__HOOK_BUDGET);
}

/* m->exceeded, mirrored in the binding (the stop's message) so that the
   sandbox's xpcall lets that error through without calling a message
   handler (Lua would call it with hooks off, where a loop could never be
   stopped). */
static void set_exceeded(luna__mod *m, bool exceeded) {
  m->exceeded = exceeded;
  if (m->binding != NULL) /* the text is written before it is raised */
    m->binding->stop_msg = exceeded ? m->exceeded_msg : NULL;
}

static void budget_hook(lua_State *L, lua_Debug *ar) {
  luna__mod *m = luna__mod_of(L);
  int count = lua_gethookcount(L);
  uint64_t left;
  int want;
  (void)ar;
  if (m->exceeded) {
    if (count != 1)
      lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
    raise_exceeded(L, m);
  }
  m->used += (uint64_t)count;
  if (m->used >= m->budget) {
    set_exceeded(m, true);
    luna__mod_overrun(m, false);
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
    if (m->ctx_thread != NULL && m->ctx_thread != L)
      set_count(m->ctx_thread, 1);
    raise_exceeded(L, m);
  }
  left = m->budget - m->used;
  want = left < (uint64_t)m->step ? (int)left : m->step;
  if (want != count)
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, want);
}

void luna__budget_hook_thread(luna__mod *m, lua_State *co) {
  set_count(co, m->exceeded ? 1 : m->step);
}

void luna__budget_begin(luna__mod *m, lua_State *thread) {
  if (m->depth++ > 0) {
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
  set_count(thread, m->step);
}

void luna__budget_end(luna__mod *m) {
  if (--m->depth > 0)
    return;
  if (m->exceeded && m->ctx_thread != NULL)
    set_count(m->ctx_thread, m->step);
  m->used = 0;
  if (m->exceeded)
    set_exceeded(m, false);
  m->mem_strict = false;
  m->ctx_thread = NULL;
}

/* ---- the binding's observer ------------------------------------------------ */

static void on_thread(void *ud, luna__task *t) {
  luna__budget_hook_thread((luna__mod *)ud, t->co);
}

static void on_resume(void *ud, luna__task *t, bool begin) {
  luna__mod *m = (luna__mod *)ud;
  if (begin)
    luna__budget_begin(m, t->co);
  else
    luna__budget_end(m);
}

static void on_call(void *ud, lua_State *L, bool begin) {
  luna__mod *m = (luna__mod *)ud;
  if (begin)
    luna__budget_begin(m, L);
  else
    luna__budget_end(m);
}

void luna__budget_install(luna__mod *m) {
  luna__observer obs;
  obs.on_thread = on_thread;
  obs.on_resume = on_resume;
  obs.ud = m;
  obs.on_call = on_call;
  luna__set_observer(m->L, LUNA__OBSERVER_BUDGET, &obs);
  /* Cached: the hook runs on any thread of the state, and looking the
     binding up there would push onto the main thread's stack. */
  m->binding = luna__get_binding(m->L);
  set_count(m->L, m->step);
}
