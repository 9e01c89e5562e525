/*
** seam.c: the narrow interface guard.h exports to src/mods, written on the
** binding's private state. It owns no state of its own: each function
** reads or writes the binding (binding.h) the way its comment in guard.h
** says, so the layer above never sees that struct. May include binding.h
** and guard.h, nothing of src/core.
*/
#include "binding.h"
#include "guard.h"

luna__binding *luna__guard_binding(lua_State *L) {
  return luna__get_binding(L);
}

/* ---- observer ---------------------------------------------------------------- */

/* The binding's hooks for a guard observer (its ud is the guard's
   luna__guard_observer): each passes the thread on, one indirect call. */
static void seam_thread(void *ud, luna__task *t) {
  const luna__guard_observer *o = (const luna__guard_observer *)ud;
  o->on_thread(o->ud, t->co);
}

static void seam_resume(void *ud, luna__task *t, bool begin) {
  const luna__guard_observer *o = (const luna__guard_observer *)ud;
  o->on_run(o->ud, t->co, begin);
}

static void seam_call(void *ud, lua_State *L, bool begin) {
  const luna__guard_observer *o = (const luna__guard_observer *)ud;
  o->on_run(o->ud, L, begin);
}

bool luna__guard_observe(lua_State *L, const luna__guard_observer *obs) {
  luna__observer hooks = {0};
  if (obs != NULL) {
    hooks.on_thread = obs->on_thread != NULL ? seam_thread : NULL;
    hooks.on_resume = obs->on_run != NULL ? seam_resume : NULL;
    hooks.on_call = obs->on_run != NULL ? seam_call : NULL;
    hooks.ud = (void *)obs;
    return luna__set_observer(L, LUNA__OBSERVER_BUDGET, &hooks);
  }
  return luna__set_observer(L, LUNA__OBSERVER_BUDGET, NULL);
}

/* ---- the stop ------------------------------------------------------------------ */

int luna__guard_raise_stop(lua_State *L) {
  return luna__raise_from_hook(L, LUNA__HOOK_BUDGET);
}

void luna__guard_end_stop(luna__binding *b) {
  if (b != NULL && b->hook_error == LUNA__HOOK_BUDGET)
    b->hook_error = LUNA__HOOK_NONE;
}

void luna__guard_push_xpcall(lua_State *L) {
  luna__push_guarded_xpcall(L);
}

/* ---- holding --------------------------------------------------------------------- */

void luna__guard_hold(luna__binding *b, uint64_t frame) {
  b->held = true;
  b->held_frame = frame;
}

void luna__guard_unhold(luna__binding *b) {
  if (b != NULL)
    b->held = false;
}

bool luna__guard_held(luna__binding *b) {
  return b != NULL && luna__held(b);
}

void luna__guard_request_collect(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  if (b != NULL)
    luna__gc_request_full(b);
}

void luna__guard_abandon(luna__binding *b) {
  b->abandon = true;
}

uint64_t luna__guard_abandoned(const luna__binding *b) {
  return b->abandoned;
}

bool luna__guard_busy(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  /* A task's resume, or Lua code the binding calls outside any task (a
     callback, a predicate, the error handler). */
  return b != NULL && (b->depth > 0 || b->calling.what != LUNA__CALLING_NONE);
}

/* ---- calls --------------------------------------------------------------------------- */

int luna__guard_pcall(lua_State *L, int nargs, int nresults) {
  int handler = lua_gettop(L) - nargs, st;
  lua_pushcfunction(L, luna__msgh);
  lua_insert(L, handler); /* below the function */
  st = lua_pcall(L, nargs, nresults, handler);
  lua_remove(L, handler);
  return st;
}

void luna__guard_report(lua_State *L, int err_idx, const char *what) {
  luna__binding *b = luna__get_binding(L);
  int top = lua_gettop(L);
  err_idx = lua_absindex(L, err_idx);
  if (b == NULL)
    return;
  luna__push_last_traceback(L);
  luna__report(b, L, err_idx, top + 1, 0, what);
  lua_settop(L, top);
}

/* ---- objects ------------------------------------------------------------------------- */

void luna__guard_protect_metatable(lua_State *L) {
  luna__protect_metatable(L);
}

void luna__guard_push_weak_set(lua_State *L, const void *key) {
  luna__push_side_table(L, key);
}

lua_State *luna__guard_push_coroutine(lua_State *L) {
  return luna__push_coroutine(L);
}

bool luna__guard_is_task(lua_State *co) {
  return luna__extra(co) != 0;
}
