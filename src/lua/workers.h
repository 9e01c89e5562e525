/*
** workers.h: the worker pool's registration in the binding (workers.c),
** for module.c (the metatables), internal.c (the primitives that
** lua/lunaloop/workers.lua is written on) and lifecycle.c (no binding in
** a worker state). The public API is
** include/lunaloop_workers.h.
*/
#ifndef LUNA_LUA_WORKERS_H
#define LUNA_LUA_WORKERS_H

#include <stdbool.h>

#include <lauxlib.h>

/* Makes the Pool, job and Share metatables of L's state (once) and sets
   the module table's (on top of L) `workers` to a stub that loads
   lua/lunaloop/workers.lua at its first use. */
void luna__open_workers(lua_State *L);

/* True when L is a worker state (workers.c made it): one whose main
   thread's extra space is its worker's, where lunaloop cannot be opened
   (luaopen_lunaloop raises, luna_lua_attach refuses with LUNA_ESTATE). */
bool luna__is_worker_state(lua_State *L);

/* The primitives handed to the Lua chunks with the other internals:
   workers_new, workers_default, workers_job_for, workers_submit,
   workers_share (workers.c says what each does). */
extern const luaL_Reg luna__workers_internals[];

#endif
