/*
** guard.h: what the binding exports for a layer that runs untrusted code on
** it (src/mods), so that layer needs none of the binding's private state.
** It is the one header of src/lua that src/mods includes; it brings the
** escaping of untrusted text along (escape.h, a header without state).
**
** A state the binding is attached to is reached either through one of its
** threads (lua_State *) or, where a lookup would cost too much (count
** hooks, the budget observer on every resume), through an opaque handle
** (luna__binding *, from luna__guard_binding) that the caller keeps for as
** long as the state lives.
**
** Threads: every function here is for the loop thread. Unless its comment
** says otherwise, a function allocates nothing in Lua and never raises, so
** it may be called where no protected call is active (between runs, while
** a state is being closed). luna__guard_set_report lives in report.c and
** begin_close, closing and detach in lifecycle.c, beside the code they
** reach into; seam.c implements the rest.
*/
#ifndef LUNA_LUA_GUARD_H
#define LUNA_LUA_GUARD_H

#include <stdbool.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#include "escape.h"

/* A state's binding, opaque outside src/lua. */
typedef struct luna__binding luna__binding;

/* The binding of L's state, or NULL when it has none. Looks it up in the
   registry (pushes and pops one value on L): keep the result rather than
   calling this from a hook. */
luna__binding *luna__guard_binding(lua_State *L);

/* ---- lifecycle (report.c, lifecycle.c) ------------------------------------- */

/* Receives a report the binding could not hand to the state's error handler
   (task.on_error) because the state is out of memory: `what` names what
   failed ("task main", "callback s/mod.lua:3"), `message` is the error when
   it is a string, else NULL. The error is counted (luna_lua_error_count)
   either way. */
typedef void (*luna__guard_report_fn)(void *ud, const char *what, const char *message);

/* Installs the report of last resort of L's state (NULL: the default, a line
   on stderr). Does nothing when L has no binding. */
void luna__guard_set_report(lua_State *L, luna__guard_report_fn fn, void *ud);

/* The state is about to close: from now on the binding refuses new work
   (spawn, defer, spawn_at, task.on, task.every raise "the Lua state is
   closing"), so nothing its dying code does (a __close handler run by the
   cancellations, a finalizer) reaches the loop. Cancelling what exists is
   still allowed. */
void luna__guard_begin_close(lua_State *L);

/* True once luna__guard_begin_close was called on L's state (or the state
   is being closed); false for a state without a binding. */
bool luna__guard_closing(lua_State *L);

/* Takes everything of L's state off the loop without running any Lua code:
   removes its callbacks, disarms and abandons its unsettled tasks (they
   read "cancelled"; their to-be-closed variables do not run), purges its
   continuations and detaches from the loop, so the state can be closed
   whatever its finalizers manage to do. For after the cancellations, which
   may not all have run (a state out of memory). */
void luna__guard_detach(lua_State *L);

/* ---- watching every run of the state's code --------------------------------- */

/* What a guard learns of each run of a state's Lua code. on_thread runs
   when a task's coroutine is created, before it first runs (co: that
   coroutine). on_run runs right before (begin = true) and after every
   resume of a task's coroutine and every other call of the state's Lua
   code by the binding (a task.on/every callback, a wait_until/wait_while
   predicate, the task.on_error handler); L is the thread that code runs
   on. Either may be NULL. They are called outside any protected call: they
   must not raise. */
typedef struct luna__guard_observer {
  void (*on_thread)(void *ud, lua_State *co);
  void (*on_run)(void *ud, lua_State *L, bool begin);
  void *ud;
} luna__guard_observer;

/* Installs `obs` as the guard's observer of L's state (NULL removes it).
   The binding keeps the pointer, not a copy: *obs must stay valid, and
   unchanged, until it is removed or the state is closed. Nothing is
   allocated; each resume then costs the guard one indirect call more than
   a binding observer would (the task's coroutine is looked up for it).
   Returns false when L has no binding. */
bool luna__guard_observe(lua_State *L, const luna__guard_observer *obs);

/* ---- stopping code from a hook ---------------------------------------------- */

/* Raises the value on top of L from inside a count hook as the guard's
   stop: a guarded xpcall (luna__guard_push_xpcall) lets it through without
   calling its message handler (Lua calls a handler with hooks off, so a
   loop there could never be stopped) until luna__guard_end_stop. Raises
   (it is a lua_error); looks the binding up, as hooks may. */
int luna__guard_raise_stop(lua_State *L);

/* The guard's stop is over (its run ended): an error equal to the last one
   luna__guard_raise_stop raised is an ordinary error again. One byte
   written; b may be NULL. */
void luna__guard_end_stop(luna__binding *b);

/* Pushes xpcall(f, msgh, ...) as the base library's (yieldable the same
   way), except that msgh is not called for an error the binding's hooks or
   the guard's stop raised while it stands. The handler runs one C call
   deeper than with the stock xpcall. May raise (out of memory). */
void luna__guard_push_xpcall(lua_State *L);

/* ---- holding a state's work -------------------------------------------------- */

/* Holds b's work for frame `frame` (luna_loop_frame_count): until that
   frame ends, every place that would start the state's code on its own (a
   continuation, a timer, the ready ring, a callback, a predicate) leaves
   that work for the next frame instead of dropping it. */
void luna__guard_hold(luna__binding *b, uint64_t frame);

/* Ends a hold at once (a fresh time budget begins). b may be NULL. */
void luna__guard_unhold(luna__binding *b);

/* True while b's work is held for the frame that is running. False for a
   NULL b. */
bool luna__guard_held(luna__binding *b);

/* Asks the loop's collector pacer for a full collection of L's state,
   served in slices at the paced timing (with a default slice when the
   state is not paced) instead of inside this call. Never raises; does
   nothing without a binding. */
void luna__guard_request_collect(lua_State *L);

/* From now on b's cancellations settle their tasks without resuming them
   (their to-be-closed variables do not run): for a state being closed
   whose time ran out. */
void luna__guard_abandon(luna__binding *b);

/* How many tasks of b were settled unresumed since luna__guard_abandon. */
uint64_t luna__guard_abandoned(const luna__binding *b);

/* True while the binding of L's state runs Lua code of that state (a
   resume, a callback, a predicate, the error handler): no state may be
   created, closed or replaced then. False for a state without a binding. */
bool luna__guard_busy(lua_State *L);

/* ---- calling the state's code ------------------------------------------------ */

/* lua_pcall(L, nargs, nresults) with the binding's message handler, which
   keeps the error value unchanged and the traceback aside for
   luna__guard_report. The function and its arguments are on top of L, as
   for lua_pcall. Returns lua_pcall's status (the error on top on failure). */
int luna__guard_pcall(lua_State *L, int nargs, int nresults);

/* Reports the error at err_idx of L, with the traceback the last failed
   luna__guard_pcall kept, as the failure of a callback named `what`:
   through the state's task.on_error handler (or its default report, or
   the report of last resort when out of memory), and counts it. Leaves
   the stack as it was; never raises. */
void luna__guard_report(lua_State *L, int err_idx, const char *what);

/* ---- objects for the state's code -------------------------------------------- */

/* Protects the metatable on top of L (made by luaL_newmetatable): its
   __metatable becomes its __name, so getmetatable gives the name and
   setmetatable refuses to replace it. May raise (out of memory). */
void luna__guard_protect_metatable(lua_State *L);

/* Pushes the weak-keyed table registry[key], creating it the first time.
   May raise (out of memory). */
void luna__guard_push_weak_set(lua_State *L, const void *key);

/* coroutine.create's work: pushes a new thread holding the function that
   is argument 1 of the calling C function (an argument error when it is
   not a function) and returns it. May raise. */
lua_State *luna__guard_push_coroutine(lua_State *L);

/* True when co is a task's coroutine, whatever the task's state (not
   started, waiting, running, settled); false for a plain coroutine. For
   any thread of an attached state; reads co's extra space. */
bool luna__guard_is_task(lua_State *co);

/* A setter of a handler kept at registry[key]: argument 1 is a function
   or nil (none counts as nil), stored there; returns 1 with the previous
   value (nil when there was none). An argument error otherwise. For
   lua_CFunctions such as task.on_error. */
static inline int luna__guard_swap_handler(lua_State *L, const void *key) {
  if (!lua_isnoneornil(L, 1))
    luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, key);
  lua_pushvalue(L, 1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, key);
  return 1;
}

#endif
