/*
** lunaloop/promise.h: promises, the way a host's own threads hand results to
** Lua tasks. Included by lunaloop_lua.h; needs <lua.h>.
**
** A promise is created on the loop thread together with a Lua value (a
** "Promise") that scripts await with task.await(p) (or hand to when_all,
** when_any, timeout). Any thread may then complete it once: resolve with
** values (C data plus a callback that turns it into Lua values on the loop
** thread) or reject with an error message. The completion travels through
** luna_post to the promise's timing, where the awaiting tasks are woken in
** the order they began awaiting, in that same run.
**
**   loop thread                            worker thread
**   luna_lua_promise_new(L, ..., &p)  -->  (does the job)
**   luna_promise_on_cancel(p, ...)         luna_promise_resolve(p, push, data, free)
**   (script: task.await(promise))          luna_promise_release(p)
**   ... at the promise's timing: push(L, data), free(data), tasks wake
**
** Ownership. A promise is reference counted (atomically). luna_lua_promise_new
** gives the caller one reference; the Lua value holds another until Lua is
** done with the promise. Release yours with luna_promise_release (any
** thread) when you will not complete it or look at it any more; completing
** does not release it. luna_promise_retain adds a reference, e.g. to hand
** the promise to a second thread. Promises are small blocks from the C
** library's malloc, not from luna_config.alloc or the Lua allocator, because
** their last reference may be dropped on any thread.
**
** Lua letting go ("given up"). Lua stops wanting the result, for good, when:
** the promise is cancelled from Lua (p:cancel(), or a `<close>` promise
** going out of scope); the last task awaiting it with task.await is
** cancelled (by task.cancel, a timeout, task.exit, luna_lua_cancel_all, ...);
** the Promise value is garbage collected before its result arrived; the Lua
** state is closed; luna_loop_reset or luna_loop_free runs. Then:
**   - luna_promise_is_cancelled(p) reads true (any thread: a worker may poll
**     it to stop early);
**   - the cancel callback (luna_promise_on_cancel) runs once on the loop
**     thread, unless the promise was already completed;
**   - a later completion still returns 0, does nothing to Lua, and frees its
**     data at once on the completing thread (nothing is posted).
** Combinators never give up a promise they were handed: when_any, when_all
** and timeout leave a losing or timed-out promise pending, as they leave a
** given Task running (p:cancel() it if the job should stop).
**
** A promise that is never completed never wakes anyone: a task awaiting it
** stays "suspended" until it is cancelled (or its state closes).
**
** Errors. Every function returns 0 or a negative LUNA_E* code. LUNA_EINVAL
** for NULL and for a pointer that is not a live promise where that can be
** detected: the library poisons a promise's header when it frees it, so a
** call on a freed promise usually returns LUNA_EINVAL, but using a promise
** after its last reference was released is undefined behaviour and cannot
** always be detected (its memory may have been reused). Using a promise from
** a thread while another thread releases the last reference is undefined
** behaviour too: hold a reference for as long as you use it.
**
** Lifetime limits. The loop must outlive every completion that may post to
** it (as for luna_post): stop your workers before luna_loop_free. Once the
** loop was freed, or the state closed, pending promises are given up and
** completing them only frees their data. A completion posted but not yet
** delivered when the loop is freed is discarded with the inbox (its data
** leaks): after stopping the workers, run the loop once more (one
** luna_loop_frame, or luna_loop_run of the promises' timing) before freeing.
*/
#ifndef LUNALOOP_PROMISE_H
#define LUNALOOP_PROMISE_H

#include <stdbool.h>

/* lua.h has no C++ guards of its own (lua.hpp adds them): include it with C
   linkage, so that a C++ host that includes this header first still links
   against the C Lua library. */
#ifdef __cplusplus
extern "C" {
#endif
#include <lua.h>
#ifdef __cplusplus
}
#endif

#include "export.h"
#include "timing.h"

LUNA_BEGIN_DECLS

typedef struct luna_promise luna_promise;

/* Turns a resolved promise's C data into Lua values: pushes them on L and
   returns how many (>= 0, at most what it pushed). Called once, on the loop
   thread, at the promise's timing, in a protected call on a thread of the
   promise's Lua state, and only if Lua still wants the result. It may raise
   a Lua error (luaL_error, a memory error): the awaiting tasks then get that
   error instead. It must not yield, await, drive the loop, or keep `data`
   (the free callback runs right after it). Like a lua_CFunction it may push
   up to LUA_MINSTACK (20) values; use luaL_checkstack for more. */
typedef int (*luna_promise_push_fn)(lua_State *L, void *data);

/* Frees the data given to luna_promise_resolve. Called exactly once for a
   resolve that returned 0: on the loop thread after the push callback, or
   on the completing thread when Lua had already given the promise up. */
typedef void (*luna_promise_free_fn)(void *data);

/* Tells the host that Lua gave the promise up before it was completed (see
   above), so it can abort the job. Called at most once per promise, on the
   loop thread, possibly from inside a Lua call, a garbage collection step,
   lua_close, luna_loop_reset or luna_loop_free: it must not call the Lua
   API on the promise's state or drive the loop, and must not block on a
   lock the loop thread may hold while calling into Lua. It may call every
   luna_promise_* function (completing is allowed: it returns 0 and only
   frees the data) and luna_post.
   It never overlaps a completion: if a completion was claimed first it does
   not run at all; a completion made on another thread while it runs waits
   until it returned (so keep it short). So once luna_promise_resolve or
   _reject returned, the callback is neither running nor going to run, and
   the host may free what the callback uses. */
typedef void (*luna_promise_cancel_fn)(luna_promise *p, void *ud);

/* Creates a promise whose completion wakes its awaiters at `timing` (the
   usual choice is LUNA_UPDATE, the default of every await), pushes its
   Promise value on L, and stores the promise in *out with one reference for
   the caller. L is the Lua state (or a thread of it, e.g. the task calling
   your C function) of a binding: luna_lua_attach or require "lunaloop".
   Loop thread. Like any lua_* call it raises a Lua error when Lua runs out
   of memory (call it from a lua_CFunction or a protected call). Returns 0;
   LUNA_EINVAL (NULL L or out, an unknown timing, no binding on L);
   LUNA_ESTATE when the state's loop was freed; LUNA_ENOMEM. On error
   nothing is pushed and *out is untouched. */
LUNA_API int luna_lua_promise_new(lua_State *L, luna_timing timing, luna_promise **out);

/* Registers the cancel callback (replacing an earlier one; fn NULL removes
   it). Loop thread; do it before handing the promise to a worker. If Lua
   already gave the promise up and no cancel callback was called yet, fn
   runs at once, before this returns. Returns 0; LUNA_EINVAL for a bad
   promise; LUNA_EALREADY when the promise was already completed (fn will
   never run). */
LUNA_API int luna_promise_on_cancel(luna_promise *p, luna_promise_cancel_fn fn, void *ud);

/* Completes the promise with values: at the promise's timing, on the loop
   thread, push(L, data) makes the Lua values that task.await(p) returns
   (push NULL: no values), then free_data(data) runs (may be NULL). ANY
   thread; lock-free (one luna_post), except that it waits for the
   promise's cancel callback if that is running right now on the loop
   thread (see luna_promise_cancel_fn). Returns 0 (then free_data runs exactly
   once, see luna_promise_free_fn, also when Lua gave the promise up);
   LUNA_EALREADY when it was already completed (resolved or rejected);
   LUNA_EINVAL for a bad promise; LUNA_ENOMEM when the post could not be
   allocated (nothing was completed: you may try again). On error free_data
   is not called and `data` stays yours. */
LUNA_API int luna_promise_resolve(luna_promise *p, luna_promise_push_fn push, void *data,
                                  luna_promise_free_fn free_data);

/* Completes the promise with an error: task.await(p) raises `message` (a
   Lua string, copied now). ANY thread, like luna_promise_resolve (it may
   wait for a running cancel callback). Returns 0; LUNA_EALREADY when it was
   already completed; LUNA_EINVAL for a bad promise or a NULL message;
   LUNA_ENOMEM (nothing was completed). */
LUNA_API int luna_promise_reject(luna_promise *p, const char *message);

/* True once Lua gave the promise up without having received its result (see
   above); false for a bad promise. ANY thread; a cheap atomic read that a
   worker may poll to stop a long job early. */
LUNA_API bool luna_promise_is_cancelled(const luna_promise *p);

/* Adds a reference. ANY thread, while you hold one. 0 or LUNA_EINVAL. */
LUNA_API int luna_promise_retain(luna_promise *p);

/* Drops a reference; the promise is freed with the last one (the Lua value
   and an undelivered completion hold their own). ANY thread. Releasing does
   not complete: a task awaiting a promise that nobody can complete any more
   stays suspended until it is cancelled. 0 or LUNA_EINVAL. */
LUNA_API int luna_promise_release(luna_promise *p);

LUNA_END_DECLS

#endif
