/*
** lifecycle.c: the binding's lifecycle. It attaches a Lua state to a loop
** (luna_lua_attach, or luaopen_lunaloop with a loop of its own), cancels
** the state's tasks and removes its callbacks when the state closes or
** the loop is reset or freed, and takes the state off the loop without
** running Lua code when that is all there is left to do (guard.h).
** A worker state (workers.h) is refused: its main thread's extra space is
** its worker's. Includes binding.h, guard.h, promise.h, workers.h and the
** public lunaloop_lua.h.
*/
#include <string.h>

#include "binding.h"
#include "guard.h"
#include "lunaloop_lua.h"
#include "promise.h"
#include "workers.h"

/* ---- helpers ---------------------------------------------------------------- */

static bool owned_continuation(luna_fn fn, void *arg, void *ud) {
  if (fn == luna__drain_cb)
    return arg == ud;
  if (fn == luna__signal_deferred_cb) /* a deferred fire (signal.c) */
    return luna__signal_binding(arg) == (luna__binding *)ud;
  if (fn != luna__resume_cb && fn != luna__start_cb)
    return false;
  return ((luna__task *)arg)->b == (luna__binding *)ud;
}

/* Cancels the state's tasks and removes its callbacks. Used when the state
   closes, and on loop reset and free. */
static void detach_work(luna__binding *b) {
  if (b->loop == NULL)
    return;
  luna__cancel_all(b);
  luna__remove_all_handles(b);
}

/* For a reset: the core is about to drop our queued continuations, so the
   tasks they hold must forget them (or their references would never be
   released). */
static bool release_continuation(luna_fn fn, void *arg, void *ud) {
  if (!owned_continuation(fn, arg, ud))
    return false;
  if (fn == luna__drain_cb)
    ((luna__binding *)ud)->drain_deferred = false;
  else if (fn == luna__signal_deferred_cb)
    luna__signal_drop_deferred(arg);
  else
    luna__drop_continuation((luna__task *)arg);
  return true;
}

static void on_loop_event(luna_loop *loop, luna_event event, void *ud) {
  luna__binding *b = (luna__binding *)ud;
  (void)loop;
  detach_work(b);
  if (event == LUNA_EVENT_RESET && b->loop != NULL) {
    luna__groups_reset(b);
    luna_purge(b->loop, release_continuation, b);
  }
  if (event == LUNA_EVENT_FREE) {
    luna__groups_detach(b, b->loop != NULL);
    luna_purge(b->loop, owned_continuation, b);
    b->loop = NULL;
    b->owns_loop = false;
  }
}

/* Frees the loop the binding made for itself (require without a host),
   after delivering what is still in its inbox: a worker pool closed with
   calls queued posted their completions (each holds its promise and its
   job), and luna_loop_free discards posts without calling them. Nothing
   of this state is on the loop any more and the promise hub lets go of
   its Lua sides first, so those deliveries only release what they hold
   and run no Lua code. At most a few frames of dt 0 (a post made while a
   frame runs is delivered by the next); none from inside a loop callback
   (lua_close called by a task), where the loop refuses to run. */
static void free_owned_loop(luna__binding *b) {
  int i;
  luna__promise_detach(b->L);
  for (i = 0; i < 4 && !luna_loop_idle(b->loop); i++)
    if (luna_loop_frame(b->loop, 0.0) != 0)
      break;
  luna_loop_free(b->loop);
}

/* Takes the state off the loop without running Lua code and frees the
   binding's C arrays: callbacks removed, unsettled tasks abandoned (their
   to-be-closed variables do not run), continuations purged. What remains
   for the state's own close is Lua memory only. Idempotent. */
static void detach(luna__binding *b) {
  b->closing = true;
  luna__gc_leave(b);
  if (b->loop != NULL) {
    luna__remove_all_handles(b);
    luna__abandon_all(b);
    /* The abandoned tasks' timers are cancelled; their entries must not
       outlive the records they point into (freed below), whatever the
       loop does next. */
    luna__loop_sweep_timers(b->loop);
    luna__groups_detach(b, true);
    luna_purge(b->loop, owned_continuation, b);
    luna_loop_remove_listener(b->loop, on_loop_event, b);
    if (b->owns_loop)
      free_owned_loop(b);
    b->loop = NULL;
  }
  luna__groups_detach(b, false); /* (the loop was freed before) */
  luna__free_records(b); /* nothing holds them now: the loop forgot them */
  luna__ring_free(b, &b->ready);
  luna__ring_free(b, &b->cancels);
  luna__anchors_free(b);
  luna__observers_free(b);
}

/* Cancels the state's tasks and removes its callbacks, in protected mode:
   (binding) -> nothing. */
static int detach_work_protected(lua_State *L) {
  detach_work((luna__binding *)lua_touserdata(L, 1));
  return 0;
}

/* __gc of the binding: the state is closing. Tasks are cancelled first (their
   to-be-closed variables run while the state is whole), in a protected call
   (a state out of memory may not get through them all); then everything
   that points into this state leaves the loop, whatever the cancellations
   managed. From the start, new work is refused (luna__new_task). */
static int binding_gc(lua_State *L) {
  luna__binding *b = (luna__binding *)lua_touserdata(L, 1);
  b->closing = true;
  if (b->loop != NULL) {
    b->exec_L = b->L;
    lua_pushcfunction(L, detach_work_protected);
    lua_pushlightuserdata(L, b);
    (void)lua_pcall(L, 1, 0, 0); /* what it did not finish, detach abandons */
    lua_settop(L, 1);
  }
  detach(b);
  return 0;
}

/* Creates the binding of L on `loop`. Everything that may raise (a memory
   error) comes first; the loop learns of the binding last, so that a raise
   never leaves the loop a listener into a binding nothing keeps. */
static int create_binding(lua_State *L, luna_loop *loop, bool owns) {
  luna__binding *b;
  int rc;
  /* Every thread starts with a copy of the main thread's extra space,
     which stock Lua leaves uninitialized: NULL from now on, so that a
     coroutine made later (the anchor thread first) is never taken for a
     task (task.h). */
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  *(uintptr_t *)lua_getextraspace(lua_tothread(L, -1)) = 0;
  lua_pop(L, 1);
  b = (luna__binding *)lua_newuserdatauv(L, sizeof *b, 1);
  memset(b, 0, sizeof *b);
  b->anchor_L = lua_newthread(L);
  lua_newtable(L);
  lua_xmove(L, b->anchor_L, 1); /* [1] the anchor table (task.c) */
  lua_setiuservalue(L, -2, 1);
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  b->L = lua_tothread(L, -1);
  lua_pop(L, 1);
  b->exec_L = b->L;
  b->exit_code = -1;
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, binding_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  luna__set_binding(L);
  luna__open_errors(L);
  luna__tune_loop(loop);
  rc = luna__gc_join(b, loop);
  if (rc == 0 && (rc = luna_loop_add_listener(loop, on_loop_event, b)) != 0)
    luna__gc_leave(b);
  if (rc != 0) {
    lua_pushnil(L); /* forgotten: its __gc finds no loop */
    luna__set_binding(L);
    return rc;
  }
  b->loop = loop;
  b->owns_loop = owns;
  return 0;
}

/* luna_lua_attach's work, in protected mode: (loop) -> nothing. A failure
   of create_binding raises its code as an integer. */
static int attach_protected(lua_State *L) {
  luna_loop *loop = (luna_loop *)lua_touserdata(L, 1);
  int rc = create_binding(L, loop, false);
  if (rc != 0) {
    lua_pushinteger(L, rc);
    return lua_error(L);
  }
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 0);
  return 0;
}

/* ---- entry points ------------------------------------------------------------ */

LUNA_API int luna_lua_attach(lua_State *L, luna_loop *loop) {
  luna__binding *b;
  int st, rc;
  if (L == NULL || loop == NULL)
    return LUNA_EINVAL;
  if (luna__get_binding(L) != NULL || luna__is_worker_state(L))
    return LUNA_ESTATE;
  /* Protected, so that a state without the standard libraries the module
     uses, or out of memory, gets an error code instead of a Lua panic. */
  if (!lua_checkstack(L, 3))
    return LUNA_ENOMEM;
  lua_pushcfunction(L, attach_protected);
  lua_pushlightuserdata(L, loop);
  st = lua_pcall(L, 1, 0, 0);
  if (st == LUA_OK)
    return 0;
  rc = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1)
                            : st == LUA_ERRMEM ? LUNA_ENOMEM : LUNA_EINVAL;
  lua_pop(L, 1);
  /* Undo a half-made binding: off the loop now, forgotten by the state (its
     __gc then finds no loop). */
  b = luna__get_binding(L);
  if (b != NULL) {
    luna_loop_remove_listener(loop, on_loop_event, b);
    b->loop = NULL;
    lua_pushnil(L);
    luna__set_binding(L);
  }
  return rc;
}

LUNA_API size_t luna_lua_cancel_all(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  size_t n;
  if (b == NULL || b->loop == NULL)
    return 0;
  n = luna__cancel_all(b);
  luna__remove_all_handles(b);
  return n;
}

LUNA_API int luna_lua_spawn(lua_State *L, int nargs, const char *name) {
  luna__binding *b = luna__get_binding(L);
  luna__task *t;
  int fn_idx = b != NULL ? lua_gettop(L) - nargs : 0;
  if (b == NULL || b->loop == NULL || nargs < 0 || fn_idx < 1 ||
      !lua_isfunction(L, fn_idx))
    return LUNA_EINVAL;
  t = luna__new_task(L, b, fn_idx, nargs);
  if (name != NULL) {
    lua_pushstring(L, name);
    luna__set_name(L, -2);
  }
  lua_replace(L, fn_idx);
  lua_settop(L, fn_idx);
  luna__start(b, t);
  return 0;
}

void luna__guard_begin_close(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  if (b != NULL)
    b->closing = true;
}

bool luna__guard_closing(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  return b != NULL && b->closing;
}

void luna__guard_detach(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  if (b == NULL)
    return;
  luna__promise_detach(L);
  detach(b);
}

/* ---- opening ------------------------------------------------------------------ */

LUNA_API int luaopen_lunaloop(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  if (b == NULL && luna__is_worker_state(L))
    return luaL_error(L, "lunaloop: cannot be opened in a worker state (a job's own API there "
                         "is task.worker; docs/workers.md)");
  if (b == NULL) {
    luna_loop *loop;
    int rc = luna_loop_new(NULL, &loop);
    if (rc != 0)
      return luaL_error(L, "lunaloop: cannot create a loop: %s", luna_strerror(rc));
    rc = create_binding(L, loop, true);
    if (rc != 0) {
      luna_loop_free(loop);
      return luaL_error(L, "lunaloop: cannot attach the loop: %s", luna_strerror(rc));
    }
    b = luna__get_binding(L);
  }
  return luna__open_module(L, b);
}

LUNA_API int luaopen_lunaloop_roblox(lua_State *L) {
  luaopen_lunaloop(L);
  lua_pop(L, 1);
  if (luna__push_library(L, "roblox") != LUA_TTABLE)
    return luaL_error(L, "lunaloop.roblox: the library was not built");
  return 1;
}
