/*
** lunaloop_workers.h: worker Lua states, a pool of threads that each run
** their own Lua state, attached to a loop and to the Lua state (the
** "owner") that hands them jobs. Scripts reach it as task.workers
** (docs/workers.md); a host creates a pool with its own allocator and an
** init hook that installs its C functions in every worker state.
**
**   loop thread (owner state)                worker thread i (state W_i)
**   luna_workers_new(L, &cfg, &w)      -->   lua_newstate(cfg.alloc), openlibs,
**                                            cfg.init(W_i, i, cfg.init_ud)
**   ai:call("plan", grid)   (a Promise) -->  require("ai").plan(<copy of grid>)
**   ... at Update: the copy of the results wakes the awaiting tasks
**
** Values cross by copy (src/lua/copy.h's rules: nil, booleans, numbers,
** strings, tables of these; functions, threads and userdata are refused at
** the call, naming the path), except the read-only snapshots of
** task.workers.share, which cross as a reference.
**
** Threads. Every function here is for the loop thread of the owner state.
** The init hook runs on the worker's own thread, once per worker state
** (again when a state that ran out of memory is recreated).
**
** Errors. Functions return 0 or a negative LUNA_E* code (lunaloop/error.h).
**
** Lifetime. The pool is a Lua value (a "Pool") of the owner state and lives
** until it is closed: pool:close(), luna_workers_close, the owner state
** closing (lua_close), or the loop being freed. Closing stops the workers
** (a running job is interrupted at its next hook, within about a thousand
** instructions; a job blocked inside a C function is waited for), joins
** the threads and frees the worker states.
*/
#ifndef LUNALOOP_WORKERS_H
#define LUNALOOP_WORKERS_H

#include <stddef.h>
#include <stdint.h>

#include "lunaloop_lua.h"

LUNA_BEGIN_DECLS

typedef struct luna_workers luna_workers;

/* Runs on worker thread `worker` (1-based) right after its state W was
   made and its standard libraries opened, before any job: install the
   host's functions (lua_register, package.preload, ...). Called as a
   lua_CFunction would be, in a protected call: it may raise, and it
   returns 0 when the state is ready or a nonzero value to refuse it (the
   message on top of W, if any, names why). A refused or failed first
   state makes luna_workers_new fail. W belongs to the worker thread:
   never keep it for another thread. */
typedef int (*luna_workers_init_fn)(lua_State *W, int worker, void *ud);

/* The pool's configuration; {0} is valid (every zero is a default). */
typedef struct luna_workers_config {
  int threads;           /* worker threads; 0: the online cores - 1, at least 1;
                            at most 256 */
  size_t queue;          /* jobs waiting for a worker, at most, before
                            call/post/map from a task await room; 0: 64 per
                            thread. Code that cannot await (outside a task)
                            queues past it rather than fail. */
  size_t memory_limit;   /* bytes each worker state may hold; 0: no limit.
                            A job that runs out is rejected with the error
                            and the state is recreated. */
  uint64_t instructions; /* instructions a job may run (the default of
                            task.workers.open's option); 0: no limit */
  luna_alloc_fn alloc;   /* the worker states' allocator (lua_Alloc
                            contract); NULL: the C library's. It is called
                            from every worker thread and from the loop
                            thread (closing states): it must be thread safe */
  void *alloc_ud;
  luna_workers_init_fn init; /* NULL: no hook */
  void *init_ud;
} luna_workers_config;

/* Counters of a pool since it was made (luna_workers_get_stats and
   pool:stats() read them). */
typedef struct luna_workers_stats {
  int threads;
  size_t queued;       /* jobs waiting for a worker now */
  size_t running;      /* jobs on a worker now */
  uint64_t submitted;  /* jobs handed to the pool */
  uint64_t completed;  /* ran and returned */
  uint64_t failed;     /* ran and raised (also out of memory, budgets) */
  uint64_t dropped;    /* given up before a worker took them */
  uint64_t waited;     /* submissions that awaited room (back-pressure) */
  uint64_t overflowed; /* submissions past a full queue (caller could not await) */
  uint64_t recreated;  /* worker states recreated after running out of memory */
} luna_workers_stats;

/* Creates a pool for the Lua state L (the owner: a state with a binding,
   from luna_lua_attach or require "lunaloop") and its loop, starts the
   threads and waits until every worker state is ready. Pushes the Pool
   value on L and stores the pool in *out (may be NULL); the first pool of
   a state is also its default, the one task.workers.open uses. cfg may be
   NULL (all defaults). Loop thread; raises like any lua_* call when L runs
   out of memory. Returns 0; on an error it pushes a message string on L
   instead of the Pool (except for a NULL L, and LUNA_ENOMEM when even the
   stack cannot grow) and returns LUNA_EINVAL (a bad field, no binding);
   LUNA_ESTATE (the loop was freed, the state is closing, a thread could
   not be started or a worker's init hook refused: the message says which);
   LUNA_ENOMEM. */
LUNA_API int luna_workers_new(lua_State *L, const luna_workers_config *cfg, luna_workers **out);

/* Closes the pool as pool:close() does: jobs not yet run and jobs running
   end with the cancellation error in the tasks awaiting them (at their
   promise's timing, so run the loop once more), results already made are
   delivered, the threads are joined and the worker states closed. Loop
   thread, not from inside a worker's job. Returns 0, or LUNA_EALREADY when
   the pool was closed already (the pointer stays valid while its Pool value
   lives). */
LUNA_API int luna_workers_close(luna_workers *w);

/* Fills *out with the pool's counters (zeroes for NULL). Loop thread. */
LUNA_API void luna_workers_get_stats(luna_workers *w, luna_workers_stats *out);

LUNA_END_DECLS

#endif
