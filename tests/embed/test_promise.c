/*
** test_promise.c: promises from the host's side (include/lunaloop/promise.h).
** A worker thread completes, a Lua task awaits; completion at the promise's
** timing; rejection; completing twice; several awaiters; the host's cancel
** callback on every way Lua gives a promise up (task cancelled, p:cancel,
** collected, reset, state closed, loop freed); combinators never giving up
** a promise they were handed; bad input. Every test ends with the state
** closed, the loop freed and no promise left alive.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "embed_util.h"

typedef struct fixture {
  luna_loop *loop;
  lua_State *L;
} fixture;

static int setup(void **state) {
  static fixture f;
  reset_counters();
  if (luna_loop_new(NULL, &f.loop) != 0)
    return -1;
  f.L = new_state(f.loop);
  *state = &f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  if (f->L != NULL)
    lua_close(f->L);
  f->L = NULL;
  luna_loop_free(f->loop);
  release_slots();
  assert_int_equal(luna__promise_live_count(), 0);
  return 0;
}

static void frame(fixture *f) {
  int rc = luna_loop_frame(f->loop, 1.0 / 60);
  assert_true(rc == 0 || rc == LUNA_ESTOPPED);
}

/* ---- completion ----------------------------------------------------------- */

/* A worker thread resolves; the task resumes at the promise's timing (here
   LastUpdate) of the next frame with the values the push callback made, and
   the data is freed once, on the loop thread. */
static void resolve_from_a_thread_wakes_the_task_at_the_promise_timing(void **state) {
  fixture *f = *state;
  run(f->L, "p, slot = host.promise('LastUpdate')\n"
            "t = task.spawn(function()\n"
            "  local n, s = task.await(p)\n"
            "  got = string.format('%d %s at %s', n, s, host.timing())\n"
            "end)\n");
  assert_int_equal(resolve_from_thread(slots[0], 42, "answer"), 0);
  run(f->L, "assert(got == nil and t:status() == 'suspended')"); /* not before its timing */
  frame(f);
  expect_global(f->L, "got", "42 answer at LastUpdate");
  assert_int_equal(atomic_load(&data_frees), 1);
  assert_int_equal(atomic_load(&data_frees_off_loop), 0);
  run(f->L, "assert(t:status() == 'done' and p:status() == 'done')\n"
            "local ok, n, s = p:result(); assert(ok and n == 42 and s == 'answer')");
  assert_int_equal(cancel_calls[0], 0);
  assert_false(luna_promise_is_cancelled(slots[0]));
}

/* Resolving with no push callback gives no values; a promise awaited after
   it settled answers at once, as often as asked. */
static void a_settled_promise_answers_at_once(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise(); q = host.promise()");
  assert_int_equal(luna_promise_resolve(slots[0], push_pair, new_pair(7, "seven"), free_pair), 0);
  assert_int_equal(luna_promise_resolve(slots[1], NULL, NULL, NULL), 0);
  frame(f);
  run(f->L, "log = {}\n"
            "task.spawn(function()\n"
            "  local f0 = task.frame()\n"
            "  for i = 1, 3 do local n, s = task.await(p); log[#log + 1] = s .. n end\n"
            "  log[#log + 1] = select('#', task.await(q))\n"
            "  log[#log + 1] = task.frame() - f0\n"
            "end)\n"
            "result = table.concat(log, ',')");
  expect_global(f->L, "result", "seven7,seven7,seven7,0,0");
}

/* A rejection raises its message in the awaiting task; unhandled, it is
   reported as that task's failure. */
static void reject_raises_the_message_in_the_task(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise(); q = host.promise()\n"
            "task.spawn(function()\n"
            "  local ok, err = pcall(task.await, p)\n"
            "  caught = tostring(ok) .. ': ' .. err\n"
            "end)\n"
            "t = task.spawn(function() task.await(q) end)\n"
            "task.on_error(function(err, tb, task) reported = err end)");
  assert_int_equal(luna_promise_reject(slots[0], "cannot open 'x.bin': No such file"), 0);
  assert_int_equal(luna_promise_reject(slots[1], "boom"), 0);
  frame(f);
  expect_global(f->L, "caught", "false: cannot open 'x.bin': No such file");
  expect_global(f->L, "reported", "boom");
  run(f->L, "assert(t:status() == 'failed' and p:status() == 'failed')\n"
            "local ok, e = p:result(); assert(not ok and e:find('No such file'))");
  assert_int_equal(luna_lua_error_count(f->L), 1);
}

/* Completing twice returns LUNA_EALREADY (resolve or reject, before or after
   the delivery); the refused data stays the caller's. */
static void completing_twice_returns_ealready(void **state) {
  fixture *f = *state;
  pair *extra = new_pair(2, "second");
  run(f->L, "p = host.promise()");
  assert_int_equal(luna_promise_resolve(slots[0], push_pair, new_pair(1, "first"), free_pair), 0);
  assert_int_equal(luna_promise_resolve(slots[0], push_pair, extra, free_pair), LUNA_EALREADY);
  assert_int_equal(luna_promise_reject(slots[0], "late"), LUNA_EALREADY);
  frame(f);
  assert_int_equal(luna_promise_resolve(slots[0], push_pair, extra, free_pair), LUNA_EALREADY);
  assert_int_equal(luna_promise_on_cancel(slots[0], count_cancel, NULL), LUNA_EALREADY);
  assert_int_equal(atomic_load(&data_frees), 1);
  free(extra);
  run(f->L, "local ok, n, s = p:result(); assert(ok and n == 1 and s == 'first')");
}

/* Several tasks await one promise: all wake in the same run, in the order
   they began awaiting, each with its own copy of the values. */
static void several_awaiters_wake_in_order_in_one_run(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise(); log = {}\n"
            "for i = 1, 3 do task.spawn(function()\n"
            "  local n, s = task.await(p); log[#log + 1] = i .. s .. n .. '@' .. task.frame()\n"
            "end) end");
  assert_int_equal(luna_promise_resolve(slots[0], push_pair, new_pair(5, "x"), free_pair), 0);
  frame(f);
  run(f->L, "result = table.concat(log, ' ')");
  expect_global(f->L, "result", "1x5@1 2x5@1 3x5@1");
}

/* A push callback that raises turns into the awaiter's error; one that
   returns more values than it pushed too. */
static int push_raises(lua_State *L, void *data) {
  (void)data;
  return luaL_error(L, "bad asset");
}
static int push_lies(lua_State *L, void *data) {
  (void)data;
  lua_pushinteger(L, 1);
  return 3;
}
static void a_raising_push_callback_fails_the_promise(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise(); q = host.promise()\n"
            "task.spawn(function() local ok, e = pcall(task.await, p); e1 = e end)\n"
            "task.spawn(function() local ok, e = pcall(task.await, q); e2 = e end)");
  assert_int_equal(luna_promise_resolve(slots[0], push_raises, new_pair(0, ""), free_pair), 0);
  assert_int_equal(luna_promise_resolve(slots[1], push_lies, new_pair(0, ""), free_pair), 0);
  frame(f);
  expect_global(f->L, "e1", "bad asset");
  expect_global(f->L, "e2", "promise push callback returned 3 but pushed 1 values");
  assert_int_equal(atomic_load(&data_frees), 2);
}

/* ---- giving up -------------------------------------------------------------- */

/* Cancelling the awaiting task: its to-be-closed variables run, the host's
   cancel callback runs once on the loop thread, the promise reads
   cancelled; a later completion returns 0, frees its data at once on the
   completing thread and does nothing to Lua. */
static void cancelling_the_awaiting_task_tells_the_host(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise(); after = false\n"
            "t = task.spawn(function()\n"
            "  local r <close> = setmetatable({}, {__close = function(_, e)\n"
            "    closed = task.is_cancelled(e) and 'cancelled' or tostring(e) end})\n"
            "  task.await(p); after = true\n"
            "end)");
  frame(f);
  assert_int_equal(cancel_calls[0], 0);
  run(f->L, "t:cancel()");
  expect_global(f->L, "closed", "cancelled");
  assert_int_equal(cancel_calls[0], 1);
  assert_true(cancel_on_loop_thread[0]);
  assert_true(luna_promise_is_cancelled(slots[0]));
  assert_int_equal(resolve_from_thread(slots[0], 1, "late"), 0);
  assert_int_equal(atomic_load(&data_frees), 1);
  assert_int_equal(atomic_load(&data_frees_off_loop), 1);
  frame(f);
  frame(f);
  run(f->L, "assert(not after and t:status() == 'cancelled' and p:status() == 'cancelled')");
  assert_int_equal(cancel_calls[0], 1);
  assert_int_equal(luna_lua_error_count(f->L), 0);
}

/* With two tasks awaiting one promise, cancelling one leaves the promise
   pending; cancelling the last one gives it up. */
static void only_the_last_awaiter_cancelled_gives_the_promise_up(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise()\n"
            "a = task.spawn(function() task.await(p) end)\n"
            "b = task.spawn(function() return task.await(p) end)\n"
            "a:cancel()");
  assert_int_equal(cancel_calls[0], 0);
  assert_false(luna_promise_is_cancelled(slots[0]));
  assert_int_equal(luna_promise_resolve(slots[0], push_pair, new_pair(3, "b"), free_pair), 0);
  frame(f);
  run(f->L, "local ok, n, s = b:result(); assert(ok and n == 3 and s == 'b')\n"
            "q = host.promise()\n"
            "c = task.spawn(function() task.await(q) end)\n"
            "d = task.spawn(function() task.await(q) end)\n"
            "c:cancel(); d:cancel()");
  assert_int_equal(cancel_calls[1], 1);
}

/* p:cancel() from Lua: every awaiter gets the cancellation error (and ends
   "cancelled", not reported), the host is told, a late completion is
   discarded. A `<close>` promise is cancelled when its scope exits. */
static void cancel_from_lua_and_close(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise()\n"
            "a = task.spawn(function() task.await(p) end)\n"
            "b = task.spawn(function() local ok, e = pcall(task.await, p); berr = task.is_cancelled(e) end)\n"
            "p:cancel(); p:cancel()\n"
            "assert(a:status() == 'cancelled' and b:status() == 'done' and berr)\n"
            "assert(p:status() == 'cancelled' and tostring(p) == 'Promise(cancelled)')\n"
            "do local q <close> = host.promise() end");
  assert_int_equal(cancel_calls[0], 1);
  assert_int_equal(cancel_calls[1], 1);
  assert_int_equal(luna_promise_reject(slots[0], "too late"), 0);
  frame(f);
  assert_int_equal(luna_lua_error_count(f->L), 0);
}

/* A promise collected while the host still holds it: the host is told (it
   may stop the job), completing it later only frees the data, releasing it
   frees it. Nothing leaks (teardown counts promises). */
static void a_promise_collected_while_the_host_holds_it(void **state) {
  fixture *f = *state;
  run(f->L, "do local p = host.promise() end\n"
            "collectgarbage(); collectgarbage()");
  assert_int_equal(cancel_calls[0], 1);
  assert_true(luna_promise_is_cancelled(slots[0]));
  assert_int_equal(resolve_from_thread(slots[0], 1, "x"), 0);
  assert_int_equal(atomic_load(&data_frees), 1);
  assert_int_equal(luna__promise_live_count(), 1);
  assert_int_equal(luna_promise_release(slots[0]), 0);
  slots[0] = NULL;
  assert_int_equal(luna__promise_live_count(), 0);
}

/* A promise nobody can complete any more (the host released its only
   reference) and Lua no longer reaches: collected, freed, nothing leaks. */
static void a_promise_nobody_can_complete_is_collected(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise()");
  assert_int_equal(luna_promise_release(slots[0]), 0);
  slots[0] = NULL;
  assert_int_equal(luna__promise_live_count(), 1);
  run(f->L, "assert(p:status() == 'pending'); p = nil; collectgarbage(); collectgarbage()");
  assert_int_equal(luna__promise_live_count(), 0);
  assert_int_equal(cancel_calls[0], 1);
}

/* A completion already posted when the Promise is collected: the delivery
   finds nobody and frees the data, on the loop thread. */
static void a_completion_in_flight_to_a_collected_promise(void **state) {
  fixture *f = *state;
  run(f->L, "do local p = host.promise() end");
  assert_int_equal(luna_promise_resolve(slots[0], push_pair, new_pair(1, "x"), free_pair), 0);
  assert_int_equal(luna_promise_release(slots[0]), 0);
  slots[0] = NULL;
  run(f->L, "collectgarbage(); collectgarbage()");
  assert_int_equal(cancel_calls[0], 0); /* it was completed already */
  assert_int_equal(atomic_load(&data_frees), 0);
  frame(f);
  assert_int_equal(atomic_load(&data_frees), 1);
  assert_int_equal(luna__promise_live_count(), 0);
}

/* A promise whose host drops it without completing: the awaiting task stays
   suspended (visible as such) through frames, resets of nothing else, other
   tasks' wake-ups and collections, until it is cancelled. */
static void a_promise_never_completed_keeps_its_task_suspended(void **state) {
  fixture *f = *state;
  int i;
  run(f->L, "p = host.promise(); resumed = false\n"
            "t = task.spawn(function() task.await(p); resumed = true end)\n"
            "p = nil\n"
            "other = task.spawn(function() for i = 1, 50 do task.yield() end end)");
  assert_int_equal(luna_promise_release(slots[0]), 0);
  slots[0] = NULL;
  for (i = 0; i < 100; i++) {
    frame(f);
    if (i % 10 == 0)
      run(f->L, "collectgarbage()");
  }
  run(f->L, "assert(not resumed and t:status() == 'suspended', t:status())");
  assert_int_equal(luna_lua_task_count(f->L), 1);
  assert_int_equal(luna__promise_live_count(), 1);
  run(f->L, "t:cancel(); assert(t:status() == 'cancelled' and not resumed)\n"
            "collectgarbage(); collectgarbage()");
  assert_int_equal(cancel_calls[0], 1);
  assert_int_equal(luna__promise_live_count(), 0);
}

/* The stuck-run check (luna_lua_stuck): a task awaiting a promise that the
   host holds can still be woken, so the state is not stuck even when every
   other task awaits that one; once the host released its last reference
   nothing can complete it, and the state is stuck. The report names the
   wait either way. */
static void a_promise_the_host_holds_is_progress_for_the_stuck_check(void **state) {
  fixture *f = *state;
  char buf[1024] = {0};
  FILE *out;
  run(f->L, "p = host.promise()\n"
            "t = task.spawn(function() return task.await(p) end)\n"
            "u = task.spawn(function() return task.await(t) end)\n"
            "w = task.spawn(function() local r = task.when_all(p); return r end)\n"
            "p = nil");
  frame(f);
  assert_false(luna_lua_stuck(f->L));
  out = fmemopen(buf, sizeof buf - 1, "w");
  assert_non_null(out);
  assert_int_equal(luna_lua_write_tasks(f->L, out, "> "), 4);
  fclose(out);
#define CHUNK "[string \"p = host.promise()...\"]"
  assert_string_equal(buf, "> task #1 waits on a promise at " CHUNK ":2\n"
                           "> task #2 waits on task #1 at " CHUNK ":3\n"
                           "> task #3 waits on task.when_all at " CHUNK ":4\n"
                           "> task #4 waits on a promise\n");
  assert_int_equal(luna_promise_release(slots[0]), 0);
  slots[0] = NULL;
  assert_true(luna_lua_stuck(f->L));
  memset(buf, 0, sizeof buf);
  out = fmemopen(buf, sizeof buf - 1, "w");
  luna_lua_write_tasks(f->L, out, NULL);
  fclose(out);
  assert_non_null(strstr(buf, "task #1 waits on a promise that nothing can complete at " CHUNK ":2\n"));
#undef CHUNK
  run(f->L, "t:cancel(); u:cancel(); w:cancel()");
  assert_int_equal(luna_lua_task_count(f->L), 0);
  assert_false(luna_lua_stuck(f->L)); /* no task left */
}

/* luna_loop_reset gives up every pending promise of the state (awaited or
   not) after cancelling its tasks; completing afterwards is safe and
   nothing resumes. */
static void completing_after_a_reset_does_nothing_to_lua(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise(); q = host.promise(); resumed = false\n"
            "t = task.spawn(function()\n"
            "  local r <close> = setmetatable({}, {__close = function() closed = 'yes' end})\n"
            "  task.await(p); resumed = true end)");
  assert_int_equal(luna_loop_reset(f->loop), 0);
  expect_global(f->L, "closed", "yes");
  assert_int_equal(cancel_calls[0], 1);
  assert_int_equal(cancel_calls[1], 1);
  assert_int_equal(resolve_from_thread(slots[0], 1, "x"), 0);
  assert_int_equal(luna_promise_reject(slots[1], "y"), 0);
  frame(f);
  run(f->L, "assert(not resumed and p:status() == 'cancelled' and q:status() == 'cancelled')\n"
            "local ok, e = pcall(function() return task.spawn(task.await, q):result() end)\n"
            "assert(ok)");
  assert_int_equal(atomic_load(&data_frees), 1);
}

/* Closing the state: its tasks are cancelled (to-be-closed variables run),
   its pending promises given up (the host told); a completion posted before
   the close and delivered after it, and one made after it, touch nothing. */
static void completing_after_the_state_closed_is_safe(void **state) {
  fixture *f = *state;
  lua_State *other = new_state(f->loop);
  run(f->L, "p = host.promise(); q = host.promise()\n"
            "task.spawn(function()\n"
            "  local r <close> = setmetatable({}, {__close = function() io.write('') end})\n"
            "  task.await(p) end)");
  run(other, "ticks = 0; task.spawn(function() while true do task.yield(); ticks = ticks + 1 end end)");
  assert_int_equal(luna_promise_resolve(slots[1], push_pair, new_pair(1, "in flight"), free_pair), 0);
  lua_close(f->L);
  f->L = NULL;
  assert_int_equal(cancel_calls[0], 1);
  assert_int_equal(cancel_calls[1], 0); /* completed before the close */
  assert_true(luna_promise_is_cancelled(slots[0]));
  assert_int_equal(resolve_from_thread(slots[0], 2, "after"), 0);
  assert_int_equal(atomic_load(&data_frees), 1);
  frame(f);
  frame(f);
  assert_int_equal(atomic_load(&data_frees), 2);
  assert_int_equal(global_int(other, "ticks"), 2);
  lua_close(other);
}

/* Freeing the loop before closing the state: pending promises are given up
   at luna_loop_free (the host told); completing afterwards only frees. */
static void freeing_the_loop_first_gives_promises_up(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise(); t = task.spawn(function() task.await(p) end)");
  luna_loop_free(f->loop);
  assert_int_equal(cancel_calls[0], 1);
  assert_int_equal(luna_promise_resolve(slots[0], push_pair, new_pair(1, "x"), free_pair), 0);
  assert_int_equal(atomic_load(&data_frees), 1);
  run(f->L, "assert(t:status() == 'cancelled' and p:status() == 'cancelled')");
  lua_close(f->L);
  f->L = NULL;
  assert_int_equal(luna_loop_new(NULL, &f->loop), 0); /* for teardown */
}

/* The cancel callback may complete and release the promise itself. */
static void reject_and_release(luna_promise *p, void *ud) {
  (void)ud;
  assert_int_equal(luna_promise_reject(p, "aborted"), 0);
  assert_int_equal(luna_promise_release(p), 0);
}
static void the_cancel_callback_may_complete_and_release(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise(); t = task.spawn(function() task.await(p) end)");
  assert_int_equal(luna_promise_on_cancel(slots[0], reject_and_release, NULL), 0);
  slots[0] = NULL;
  run(f->L, "t:cancel(); assert(p:status() == 'cancelled')");
  frame(f);
  run(f->L, "p = nil; collectgarbage(); collectgarbage()");
  assert_int_equal(luna__promise_live_count(), 0);
}

/* Registering a cancel callback after Lua gave up calls it at once; the
   host is told at most once per promise. */
static void on_cancel_after_giving_up_runs_at_once(void **state) {
  fixture *f = *state;
  luna_promise *p;
  assert_int_equal(luna_lua_promise_new(f->L, LUNA_UPDATE, &p), 0);
  lua_setglobal(f->L, "p");
  run(f->L, "p:cancel()");
  assert_true(luna_promise_is_cancelled(p));
  assert_int_equal(luna_promise_on_cancel(p, count_cancel, (void *)(intptr_t)1), 0);
  assert_int_equal(cancel_calls[1], 1);
  assert_int_equal(luna_promise_on_cancel(p, count_cancel, (void *)(intptr_t)2), 0);
  assert_int_equal(cancel_calls[2], 0);
  assert_int_equal(luna_promise_release(p), 0);
}

/* A completion from another thread never overlaps the cancel callback: it
   waits for a running callback to return, so once it returned the host may
   free what the callback uses. */
static atomic_int slow_cb_state; /* 0 idle, 1 running, 2 returned */
static luna_promise *race_promise;
static int race_rc;
static void *complete_during_callback(void *arg) {
  (void)arg;
  while (atomic_load(&slow_cb_state) == 0)
    sched_yield();
  race_rc = luna_promise_reject(race_promise, "raced");
  /* the callback must have returned before the completion did */
  if (atomic_load(&slow_cb_state) != 2)
    race_rc = -100;
  return NULL;
}
static void slow_cancel(luna_promise *p, void *ud) {
  struct timespec ts = {0, 20 * 1000 * 1000};
  (void)p;
  (void)ud;
  atomic_store(&slow_cb_state, 1);
  nanosleep(&ts, NULL); /* the other thread is trying to complete meanwhile */
  atomic_store(&slow_cb_state, 2);
}
static void a_completion_waits_for_a_running_cancel_callback(void **state) {
  fixture *f = *state;
  pthread_t th;
  atomic_store(&slow_cb_state, 0);
  run(f->L, "p = host.promise(); t = task.spawn(function() task.await(p) end)");
  race_promise = slots[0];
  assert_int_equal(luna_promise_on_cancel(race_promise, slow_cancel, NULL), 0);
  assert_int_equal(pthread_create(&th, NULL, complete_during_callback, NULL), 0);
  run(f->L, "t:cancel()");
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(race_rc, 0);
  assert_int_equal(luna_promise_reject(race_promise, "again"), LUNA_EALREADY);
}

/* ---- combinators --------------------------------------------------------------- */

/* when_all and when_any accept promises with Tasks and functions; the
   combinators never give up a promise they were handed (when_any's loser
   stays pending, no cancel callback). */
static void combinators_accept_promises_and_never_give_them_up(void **state) {
  fixture *f = *state;
  run(f->L, "a = host.promise(); b = host.promise()\n"
            "t = task.spawn(function()\n"
            "  local x, y, z = task.when_all(a, function() task.yield(); return 'fn' end,\n"
            "                              task.spawn(function() return 'task' end))\n"
            "  all = x .. ',' .. y .. ',' .. z\n"
            "  c = host.promise(); d = host.promise()\n"
            "  local i, n, s = task.when_any(c, d)\n"
            "  any = i .. ':' .. s .. n\n"
            "end)");
  assert_int_equal(luna_promise_resolve(slots[0], push_pair, new_pair(1, "a"), free_pair), 0);
  frame(f);
  frame(f);
  expect_global(f->L, "all", "1,fn,task");
  assert_int_equal(nslots, 4);
  assert_int_equal(luna_promise_resolve(slots[3], push_pair, new_pair(4, "d"), free_pair), 0);
  frame(f);
  expect_global(f->L, "any", "2:d4");
  run(f->L, "assert(c:status() == 'pending' and b:status() == 'pending')");
  assert_int_equal(cancel_calls[2], 0);
  /* a rejected input fails when_all with its message */
  run(f->L, "e = host.promise()\n"
            "task.spawn(function() local ok, err = pcall(task.when_all, e, c); wa = err end)");
  assert_int_equal(luna_promise_reject(slots[4], "disk on fire"), 0);
  frame(f);
  expect_global(f->L, "wa", "disk on fire");
  assert_int_equal(cancel_calls[2], 0);
  assert_int_equal(cancel_calls[4], 0);
}

/* timeout(s, p) raises a timeout error and leaves p pending; timeout(s, fn)
   whose fn awaits p cancels fn's task, which gives p up (host told). */
static void timeout_with_promises(void **state) {
  fixture *f = *state;
  int i;
  run(f->L, "p = host.promise(); q = host.promise()\n"
            "task.spawn(function()\n"
            "  local ok, e = pcall(task.timeout, 0.1, p); r1 = task.is_timeout(e)\n"
            "  ok, e = pcall(task.timeout, 0.1, function() return task.await(q) end)\n"
            "  r2 = task.is_timeout(e)\n"
            "end)");
  for (i = 0; i < 20; i++)
    frame(f);
  run(f->L, "assert(r1 and r2)\n"
            "assert(p:status() == 'pending' and q:status() == 'cancelled')");
  assert_int_equal(cancel_calls[0], 0);
  assert_int_equal(cancel_calls[1], 1);
}

/* ---- misuse --------------------------------------------------------------------------- */

/* Awaiting a promise outside a task raises the usual clear error; await
   rejects other values naming both kinds. */
static void awaiting_outside_a_task_raises(void **state) {
  fixture *f = *state;
  run(f->L, "p = host.promise()\n"
            "local ok, e = pcall(task.await, p); assert(not ok and e:find('not inside a task'), e)\n"
            "ok, e = pcall(task.await, {}); assert(not ok and e:find('Task, Promise or Signal expected'), e)\n"
            "local co = coroutine.wrap(function() return pcall(task.await, p) end)\n"
            "ok, e = co(); assert(not ok and e:find('not a task'), e)");
}

/* Bad C input returns LUNA_EINVAL instead of crashing. */
static void bad_input_returns_einval(void **state) {
  fixture *f = *state;
  luna_promise *p = NULL;
  lua_State *bare = luaL_newstate();
  uint64_t fake[32];
  memset(fake, 0, sizeof fake);
  assert_int_equal(luna_lua_promise_new(NULL, LUNA_UPDATE, &p), LUNA_EINVAL);
  assert_int_equal(luna_lua_promise_new(f->L, LUNA_UPDATE, NULL), LUNA_EINVAL);
  assert_int_equal(luna_lua_promise_new(f->L, (luna_timing)16, &p), LUNA_EINVAL);
  assert_int_equal(luna_lua_promise_new(f->L, (luna_timing)-1, &p), LUNA_EINVAL);
  assert_int_equal(luna_lua_promise_new(bare, LUNA_UPDATE, &p), LUNA_EINVAL);
  assert_null(p);
  assert_int_equal(lua_gettop(f->L), 0);
  lua_close(bare);
  /* NULL and a pointer that is not a promise (zeroed memory) */
  assert_int_equal(luna_promise_resolve(NULL, NULL, NULL, NULL), LUNA_EINVAL);
  assert_int_equal(luna_promise_reject(NULL, "x"), LUNA_EINVAL);
  assert_int_equal(luna_promise_retain(NULL), LUNA_EINVAL);
  assert_int_equal(luna_promise_release(NULL), LUNA_EINVAL);
  assert_int_equal(luna_promise_on_cancel(NULL, count_cancel, NULL), LUNA_EINVAL);
  assert_false(luna_promise_is_cancelled(NULL));
  p = (luna_promise *)(void *)fake;
  assert_int_equal(luna_promise_resolve(p, NULL, NULL, NULL), LUNA_EINVAL);
  assert_int_equal(luna_promise_reject(p, "x"), LUNA_EINVAL);
  assert_int_equal(luna_promise_retain(p), LUNA_EINVAL);
  assert_int_equal(luna_promise_release(p), LUNA_EINVAL);
  assert_false(luna_promise_is_cancelled(p));
  /* a NULL message */
  run(f->L, "p = host.promise()");
  assert_int_equal(luna_promise_reject(slots[0], NULL), LUNA_EINVAL);
  /* retain/release pairs */
  assert_int_equal(luna_promise_retain(slots[0]), 0);
  assert_int_equal(luna_promise_release(slots[0]), 0);
  assert_int_equal(luna_promise_reject(slots[0], "fine"), 0);
  frame(f); /* deliver before freeing the loop (promise.h: lifetime limits) */
}

/* A task awaiting a promise is the scheduler's alone: a resume of its
   coroutine from Lua raises at the call, one from C (lua_resume) gets
   LUA_YIELD with the refusal and changes nothing, and the promise's value
   still reaches the task; closing the coroutine of another one cancels
   that task, which gives its promise up (the host is told). The resume
   crashed: the continuation took the task's current task for its own. */
static void a_task_awaiting_a_promise_refuses_a_foreign_resume(void **state) {
  fixture *f = *state;
  lua_State *co;
  int nres, top;
  run(f->L, "p = host.promise(); q = host.promise()\n"
            "t = task.spawn(function() co = coroutine.running(); got = task.await(p) end)\n"
            "u = task.spawn(function() cu = coroutine.running(); task.await(q) end)\n"
            "local ok, err = pcall(coroutine.resume, co, 'forged')\n"
            "assert(not ok and err:find(\"cannot resume a task's coroutine\"), err)\n");
  top = lua_gettop(f->L);
  lua_getglobal(f->L, "co");
  co = lua_tothread(f->L, -1);
  lua_pushliteral(co, "forged from C");
  assert_int_equal(lua_resume(co, f->L, 1, &nres), LUA_YIELD);
  assert_int_equal(nres, 1);
  assert_non_null(strstr(lua_tostring(co, -1), "cannot resume a task's coroutine"));
  lua_pop(co, nres);
  lua_settop(f->L, top);
  run(f->L, "assert(t:status() == 'suspended')\n"
            "assert(coroutine.close(cu) == true and u:status() == 'cancelled')");
  assert_int_equal(cancel_calls[1], 1);
  assert_int_equal(luna_promise_resolve(slots[0], push_pair, new_pair(5, "five"), free_pair), 0);
  frame(f);
  expect_global(f->L, "got", "5");
  run(f->L, "assert(t:status() == 'done')");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(resolve_from_a_thread_wakes_the_task_at_the_promise_timing, setup, teardown),
      cmocka_unit_test_setup_teardown(a_settled_promise_answers_at_once, setup, teardown),
      cmocka_unit_test_setup_teardown(reject_raises_the_message_in_the_task, setup, teardown),
      cmocka_unit_test_setup_teardown(completing_twice_returns_ealready, setup, teardown),
      cmocka_unit_test_setup_teardown(several_awaiters_wake_in_order_in_one_run, setup, teardown),
      cmocka_unit_test_setup_teardown(a_raising_push_callback_fails_the_promise, setup, teardown),
      cmocka_unit_test_setup_teardown(cancelling_the_awaiting_task_tells_the_host, setup, teardown),
      cmocka_unit_test_setup_teardown(only_the_last_awaiter_cancelled_gives_the_promise_up, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_from_lua_and_close, setup, teardown),
      cmocka_unit_test_setup_teardown(a_promise_collected_while_the_host_holds_it, setup, teardown),
      cmocka_unit_test_setup_teardown(a_promise_nobody_can_complete_is_collected, setup, teardown),
      cmocka_unit_test_setup_teardown(a_completion_in_flight_to_a_collected_promise, setup, teardown),
      cmocka_unit_test_setup_teardown(a_promise_never_completed_keeps_its_task_suspended, setup, teardown),
      cmocka_unit_test_setup_teardown(a_promise_the_host_holds_is_progress_for_the_stuck_check, setup, teardown),
      cmocka_unit_test_setup_teardown(completing_after_a_reset_does_nothing_to_lua, setup, teardown),
      cmocka_unit_test_setup_teardown(completing_after_the_state_closed_is_safe, setup, teardown),
      cmocka_unit_test_setup_teardown(freeing_the_loop_first_gives_promises_up, setup, teardown),
      cmocka_unit_test_setup_teardown(the_cancel_callback_may_complete_and_release, setup, teardown),
      cmocka_unit_test_setup_teardown(on_cancel_after_giving_up_runs_at_once, setup, teardown),
      cmocka_unit_test_setup_teardown(a_completion_waits_for_a_running_cancel_callback, setup, teardown),
      cmocka_unit_test_setup_teardown(combinators_accept_promises_and_never_give_them_up, setup, teardown),
      cmocka_unit_test_setup_teardown(timeout_with_promises, setup, teardown),
      cmocka_unit_test_setup_teardown(awaiting_outside_a_task_raises, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_input_returns_einval, setup, teardown),
      cmocka_unit_test_setup_teardown(a_task_awaiting_a_promise_refuses_a_foreign_resume, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
