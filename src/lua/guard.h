/*
** guard.h: what the binding exports for a layer that runs untrusted code on
** it (src/mods), so that layer needs none of the binding's private state.
**
** Every function here is for the loop thread, takes the main thread or any
** thread of a state the binding is attached to, allocates nothing in Lua
** and never raises: they are made to be called where no protected call is
** active (between runs, while a state is being closed).
*/
#ifndef LUNA_LUA_GUARD_H
#define LUNA_LUA_GUARD_H

#include <stdbool.h>

#include <lua.h>

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

#endif
