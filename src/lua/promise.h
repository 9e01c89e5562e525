/*
** promise.h: the binding's private view of promises (src/lua/promise.c),
** for await.c (task.await dispatches here) and internal.c (the combinators'
** primitives). The public API is include/lunaloop/promise.h.
*/
#ifndef LUNA_LUA_PROMISE_H
#define LUNA_LUA_PROMISE_H

#include <stdbool.h>

#include <lua.h>

#include "lunaloop/timing.h"

#define LUNA__PROMISE_MT "lunaloop.Promise"

/* True when the value at idx is a Promise. */
bool luna__is_promise(lua_State *L, int idx);

/* True when the Promise at idx may still settle: it has settled, or it is
   pending and something besides its Lua side holds a reference (the host,
   a worker thread, a completion posted and not yet delivered), so it may
   be completed. False for a pending promise only Lua holds, which nothing
   can ever complete, and for a value that is not a Promise. Loop thread. */
bool luna__promise_may_settle(lua_State *L, int idx);

/* task.await(p) for the Promise at idx (1 in practice: the await keeps the
   stack below it), which the caller checked is a Promise (luna__is_promise). `direct` is true for task.await: cancelling the last
   direct awaiter gives the promise up. Combinator watchers await with
   direct = false, so a combinator never gives up a promise it was handed. */
int luna__await_promise(lua_State *L, int idx, bool direct);

/* Internal primitives for lua/lunaloop/: is_promise(x), await_promise(p)
   (the non-giving-up await of a watcher). */
int luna__l_is_promise(lua_State *L);
int luna__l_watch_promise(lua_State *L);

/* Lets go of every Promise of L's state that waits for its result and
   takes the state's promise hub off the loop (the state closes). Runs no
   Lua code and allocates nothing. */
void luna__promise_detach(lua_State *L);

/* Completes p now, on the loop thread, from a callback of the loop (not
   from inside Lua code): with `message` non-NULL it rejects with it, else
   it resolves with push/data/free_data (as luna_promise_resolve). The
   awaiting tasks wake and resume in this run, as when a posted completion
   arrives, without the post and the wait for the next run of the
   promise's timing (the worker pool's delivery, workers.c). Returns like
   luna_promise_resolve; on an error free_data is not called. */
struct luna_promise;
int luna__promise_complete_now(struct luna_promise *p, int (*push)(lua_State *L, void *data),
                               void *data, void (*free_data)(void *data), const char *message);

/* luna_lua_promise_new for a caller that has the binding b of L's state
   at hand (the worker pool's calls): the same results, without looking
   the binding up. */
typedef struct luna__binding luna__binding;
int luna__promise_new_in(lua_State *L, luna__binding *b, luna_timing timing,
                         struct luna_promise **out);

/* luna__promise_new_in for a caller that makes many promises for one state
   (the worker pool): *cache, NULL at first, keeps what the call looks up
   in the registry each time otherwise (the state's promise hub; it lives
   until the state closes, which the caller must not outlive with it). */
int luna__promise_new_cached(lua_State *L, luna__binding *b, luna_timing timing, void **cache,
                             struct luna_promise **out);

/* Promises allocated and not yet freed in this process (tests use it to
   check that nothing leaked, also under ThreadSanitizer). */
long luna__promise_live_count(void);

#endif
