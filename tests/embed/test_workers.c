/*
** test_workers.c: worker Lua states through the public C API
** (lunaloop_workers.h): a pool made by a host with its own allocator and an
** init hook that installs a C function and a module in every worker
** state; a refused init; a hook that tries to open lunaloop in a worker
** state (refused); shutdown with 1,000 pending jobs, both by closing
** the pool and by closing the owner state without another frame; and a
** stress of many calls across the workers for ThreadSanitizer (ctest label
** "thread"); jobs arriving around a worker's poll for its next job, and
** closing while the workers poll. Every case ends with no promise and no
** byte of the worker states, the owner state or the loop left.
**
** LUNA_WORKERS_CALLS sets the stresses' number of calls (default 20,000, a
** few seconds under TSan; the 10^6 is a manual run:
** LUNA_WORKERS_CALLS=1000000 build/tsan/tests/embed/embed_test_workers).
*/
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "../core/counting_alloc.h"
#include "embed_util.h"
#include "lunaloop_workers.h"

static counting_alloc loop_mem, lua_mem, worker_mem;
static atomic_int init_calls;

static const char hostmod_src[] =
    "local M = {}\n"
    "function M.twice(x) return host_twice(x) end\n"
    "function M.inc(x) return x + 1 end\n"
    "function M.slow(n) local s = 0 for i = 1, n do s = s + i end return s end\n"
    "function M.spin() while true do end end\n"
    "return M\n";

static int l_host_twice(lua_State *W) {
  lua_pushinteger(W, 2 * luaL_checkinteger(W, 1));
  return 1;
}

/* The host's init hook: a global C function and a preloaded module. */
static int init_hook(lua_State *W, int worker, void *ud) {
  (void)ud;
  assert_true(worker >= 1);
  atomic_fetch_add(&init_calls, 1);
  lua_register(W, "host_twice", l_host_twice);
  lua_getglobal(W, "package");
  lua_getfield(W, -1, "preload");
  if (luaL_loadbuffer(W, hostmod_src, sizeof hostmod_src - 1, "=hostmod") != LUA_OK)
    return lua_error(W);
  lua_setfield(W, -2, "hostmod");
  lua_pop(W, 2);
  return 0;
}

static int refusing_hook(lua_State *W, int worker, void *ud) {
  (void)ud;
  if (worker == 2) {
    lua_pushliteral(W, "no GPU for worker 2");
    return 1;
  }
  return 0;
}

/* A hook that tries to make a worker state a lunaloop state, as a host
   wanting task.* in its jobs might: both ways are refused (the worker
   state's extra space is its worker's), and the worker works on. ud: the
   host's loop. */
static atomic_int attach_refused, open_refused;
static int open_lunaloop_protected(lua_State *W) {
  luaL_requiref(W, "lunaloop", luaopen_lunaloop, 0);
  return 0;
}
static int opening_hook(lua_State *W, int worker, void *ud) {
  (void)worker;
  if (luna_lua_attach(W, (luna_loop *)ud) == LUNA_ESTATE)
    atomic_fetch_add(&attach_refused, 1);
  lua_pushcfunction(W, open_lunaloop_protected);
  if (lua_pcall(W, 0, 0, 0) != LUA_OK &&
      strstr(lua_tostring(W, -1), "lunaloop: cannot be opened in a worker state") != NULL)
    atomic_fetch_add(&open_refused, 1);
  lua_settop(W, 0);
  return init_hook(W, worker, ud);
}

typedef struct fixture {
  luna_loop *loop;
  lua_State *L;
} fixture;

static int setup(void **state) {
  static fixture f;
  luna_config c;
  counting_init(&loop_mem);
  counting_init(&lua_mem);
  counting_init(&worker_mem);
  atomic_store(&init_calls, 0);
  c = counting_config(&loop_mem);
  assert_int_equal(luna_loop_new(&c, &f.loop), 0);
  f.L = lua_newstate(counting_alloc_fn, &lua_mem);
  luaL_openlibs(f.L);
  assert_int_equal(luna_lua_attach(f.L, f.loop), 0);
  luaL_requiref(f.L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(f.L, "task");
  *state = &f;
  return 0;
}

static void finish(fixture *f, bool frame_before_close) {
  if (frame_before_close)
    assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
  lua_close(f->L);
  luna_loop_free(f->loop);
  assert_int_equal(atomic_load(&lua_mem.bytes), 0);
  assert_int_equal(atomic_load(&loop_mem.bytes), 0);
  assert_int_equal(atomic_load(&worker_mem.bytes), 0);
  assert_int_equal(atomic_load(&worker_mem.blocks), 0);
  assert_int_equal(luna__promise_live_count(), 0);
}

/* A pool's config: the counting allocator of the worker states. */
static luna_workers_config pool_config(int threads, size_t queue, luna_workers_init_fn init) {
  luna_workers_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.threads = threads;
  cfg.queue = queue;
  cfg.alloc = counting_alloc_fn;
  cfg.alloc_ud = &worker_mem;
  cfg.init = init;
  return cfg;
}

static luna_workers *new_pool(fixture *f, int threads, size_t queue, luna_workers_init_fn init) {
  luna_workers_config cfg = pool_config(threads, queue, init);
  luna_workers *w = NULL;
  int rc;
  rc = luna_workers_new(f->L, &cfg, &w);
  if (rc != 0)
    fail_msg("luna_workers_new: %s: %s", luna_strerror(rc), lua_tostring(f->L, -1));
  lua_setglobal(f->L, "pool");
  return w;
}

/* Frames until the global `done` is true (at most 2,000,000 frames). */
static void frames_until_done(fixture *f) {
  long i;
  for (i = 0; i < 2000000 && !global_int(f->L, "done"); i++)
    assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
  assert_true(global_int(f->L, "done"));
}

static void test_host_allocator_and_init_hook(void **state) {
  fixture *f = *state;
  luna_workers_stats st;
  luna_workers *w = new_pool(f, 2, 0, init_hook);
  assert_int_equal(atomic_load(&init_calls), 2);
  assert_true(atomic_load(&worker_mem.bytes) > 0);
  run(f->L, "local m = pool:open('hostmod')\n"
            "task.spawn(function()\n"
            "  r1 = task.await(m:call('twice', 21))\n"
            "  r2 = task.await(m:call('inc', 41))\n"
            "  done = 1\n"
            "end)\n");
  frames_until_done(f);
  assert_int_equal(global_int(f->L, "r1"), 42);
  assert_int_equal(global_int(f->L, "r2"), 42);
  luna_workers_get_stats(w, &st);
  assert_int_equal(st.threads, 2);
  assert_int_equal(st.submitted, 2);
  assert_int_equal(st.completed, 2);
  finish(f, false);
}

static void test_refused_init_fails_the_pool(void **state) {
  fixture *f = *state;
  luna_workers_config cfg = pool_config(3, 0, refusing_hook);
  luna_workers *w = NULL;
  assert_int_equal(luna_workers_new(f->L, &cfg, &w), LUNA_ESTATE);
  assert_null(w);
  assert_string_equal(lua_tostring(f->L, -1), "worker 2 could not start: no GPU for worker 2");
  lua_pop(f->L, 1);
  cfg.threads = 300;
  assert_int_equal(luna_workers_new(f->L, &cfg, &w), LUNA_EINVAL);
  lua_pop(f->L, 1);
  assert_int_equal(luna_workers_new(NULL, &cfg, &w), LUNA_EINVAL);
  finish(f, false);
}

static void test_lunaloop_refused_in_a_worker_state(void **state) {
  fixture *f = *state;
  luna_workers_config cfg = pool_config(2, 0, opening_hook);
  luna_workers *w = NULL;
  cfg.init_ud = f->loop;
  atomic_store(&attach_refused, 0);
  atomic_store(&open_refused, 0);
  assert_int_equal(luna_workers_new(f->L, &cfg, &w), 0);
  lua_setglobal(f->L, "pool");
  assert_int_equal(atomic_load(&attach_refused), 2);
  assert_int_equal(atomic_load(&open_refused), 2);
  run(f->L, "local m = pool:open('hostmod')\n"
            "task.spawn(function() r1 = task.await(m:call('twice', 21)) done = 1 end)\n");
  frames_until_done(f);
  assert_int_equal(global_int(f->L, "r1"), 42);
  finish(f, false);
}

/* 1,000 tasks await jobs of one worker when the pool closes; the jobs
   never end by themselves (the first runs forever, the rest wait behind
   it): the closing stops the running one and every task gets the
   cancellation error. */
static void test_close_with_1000_pending(void **state) {
  fixture *f = *state;
  luna_workers_stats st;
  luna_workers *w = new_pool(f, 1, 2000, init_hook);
  run(f->L, "local m = pool:open('hostmod')\n"
            "ok, cancelled, other = 0, 0, 0\n"
            "for i = 1, 1000 do task.spawn(function()\n"
            "  local good, err = pcall(task.await, m:call('spin'))\n"
            "  if good then ok = ok + 1 elseif tostring(err) == 'task cancelled' then\n"
            "    cancelled = cancelled + 1 else other = other + 1 end\n"
            "end) end\n");
  assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
  assert_int_equal(luna_workers_close(w), 0);
  assert_int_equal(luna_workers_close(w), LUNA_EALREADY);
  assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
  assert_int_equal(global_int(f->L, "cancelled"), 1000);
  assert_int_equal(global_int(f->L, "ok"), 0);
  assert_int_equal(global_int(f->L, "other"), 0);
  assert_int_equal(luna_lua_task_count(f->L), 0);
  luna_workers_get_stats(w, &st);
  assert_int_equal(st.queued, 0);
  assert_int_equal(st.running, 0);
  finish(f, false);
}

/* The owner state closes with 1,000 jobs pending and results possibly in
   flight, without another frame: nothing leaks, nothing runs late. */
static void test_state_closes_with_1000_pending(void **state) {
  fixture *f = *state;
  new_pool(f, 2, 2000, init_hook);
  run(f->L, "local m = pool:open('hostmod')\n"
            "for i = 1, 1000 do task.spawn(function() task.await(m:call('slow', 2000)) end) end\n"
            "m:call('spin')\n");
  assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
  assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
  finish(f, false);
}

/* The loop is freed before the state: the pool stops with it. */
static void test_loop_freed_first(void **state) {
  fixture *f = *state;
  new_pool(f, 2, 0, init_hook);
  run(f->L, "local m = pool:open('hostmod')\n"
            "for i = 1, 50 do task.spawn(function() task.await(m:call('slow', 2000)) end) end\n");
  assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
  luna_loop_free(f->loop);
  lua_close(f->L);
  assert_int_equal(atomic_load(&worker_mem.bytes), 0);
  assert_int_equal(atomic_load(&lua_mem.bytes), 0);
  assert_int_equal(luna__promise_live_count(), 0);
}

/* Many small calls across 4 workers, 256 in flight at a time through a
   queue of 64 (so back-pressure is exercised too); every result checked. */
static void test_stress_calls(void **state) {
  fixture *f = *state;
  const char *env = getenv("LUNA_WORKERS_CALLS");
  long calls = env != NULL ? atol(env) : 20000;
  luna_workers_stats st;
  luna_workers *w = new_pool(f, 4, 64, init_hook);
  char code[1024];
  snprintf(code, sizeof code,
           "local m = pool:open('hostmod')\n"
           "bad = 0\n"
           "task.spawn(function()\n"
           "  local n, i = %ld, 0\n"
           "  while i < n do\n"
           "    local ps, base = {}, i\n"
           "    for k = 1, math.min(256, n - i) do ps[k] = m:call('twice', base + k) end\n"
           "    for k = 1, #ps do if task.await(ps[k]) ~= 2 * (base + k) then bad = bad + 1 end end\n"
           "    i = i + #ps\n"
           "  end\n"
           "  done = 1\n"
           "end)\n",
           calls);
  run(f->L, code);
  frames_until_done(f);
  assert_int_equal(global_int(f->L, "bad"), 0);
  luna_workers_get_stats(w, &st);
  assert_int_equal(st.completed, (uint64_t)calls);
  assert_int_equal(st.failed, 0);
  assert_int_equal(st.overflowed, 0);
  finish(f, true);
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Jobs that arrive while a worker polls for one after its last job, just
   as it gives up, and after it went to sleep: tasks each awaiting one call
   at a time, with the host busy for 0 to 80 us between frames (a worker
   polls for at most 50 us). Odd rounds: one task, one worker, so a lost
   wake-up (a job queued while the only worker sleeps: hand_over skips the
   signal when no worker sleeps or a polling one will take the job) stops
   the calls for good, which fails the round after 10 s without progress
   (a race whose window is a few instructions wide is not hit reliably this
   way: this catches the wider ones). Even rounds: 3 tasks on 2 workers (0
   to 3 jobs queued, workers polling, sleeping or running). Each round
   ends by closing the pool right after a frame that delivered results (the
   workers are polling then) with calls still in flight: the poll must end
   at the stop, the joins return, the calls in flight get the cancellation
   error. For ThreadSanitizer too (label "thread"). */
static void test_jobs_around_the_spin(void **state) {
  fixture *f = *state;
  const char *env = getenv("LUNA_WORKERS_CALLS");
  long calls = (env != NULL ? atol(env) : 20000) / 10;
  uint32_t rnd = 12345;
  int round;
  for (round = 1; round <= 10; round++) {
    luna_workers_stats st;
    int tasks = round % 2 ? 1 : 3;
    luna_workers *w = new_pool(f, round % 2 ? 1 : 2, 0, init_hook);
    long i, ok = 0, last_ok = 0;
    uint64_t last_progress = now_ns();
    char code[1024];
    snprintf(code, sizeof code,
             "local m = pool:open('hostmod')\n"
             "ok, bad, cancelled, other, left = 0, 0, 0, 0, %d\n"
             "for t = 1, left do task.spawn(function()\n"
             "  for i = 1, math.huge do\n"
             "    local good, r = pcall(function() return task.await(m:call('inc', i)) end)\n"
             "    if good then\n"
             "      if r == i + 1 then ok = ok + 1 else bad = bad + 1 end\n"
             "    else\n"
             "      if tostring(r) == 'task cancelled' then cancelled = cancelled + 1\n"
             "      elseif not tostring(r):find('the worker pool is closed', 1, true) then\n"
             "        other = other + 1; print(r) end\n"
             "      break\n"
             "    end\n"
             "  end\n"
             "  left = left - 1\n"
             "end) end\n",
             tasks);
    run(f->L, code);
    while (ok < calls) {
      assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
      ok = global_int(f->L, "ok");
      if (ok != last_ok) {
        last_ok = ok;
        last_progress = now_ns();
      } else if (now_ns() - last_progress > 10000000000u) {
        fail_msg("round %d: no call finished for 10 s after %ld (a lost wake-up?)", round, ok);
      }
      rnd ^= rnd << 13, rnd ^= rnd >> 17, rnd ^= rnd << 5;
      if (rnd % 4 != 0) { /* the host's work between frames */
        uint64_t until = now_ns() + rnd % 80000;
        while (now_ns() < until)
          ;
      }
    }
    assert_int_equal(luna_workers_close(w), 0);
    for (i = 0; i < 1000 && global_int(f->L, "left") > 0; i++)
      assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
    assert_int_equal(global_int(f->L, "left"), 0);
    assert_int_equal(global_int(f->L, "bad"), 0);
    assert_int_equal(global_int(f->L, "other"), 0);
    luna_workers_get_stats(w, &st);
    assert_int_equal(st.submitted, st.completed + st.dropped);
    assert_true(st.completed >= (uint64_t)global_int(f->L, "ok"));
    assert_int_equal(st.failed, 0);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.running, 0);
  }
  finish(f, true);
}

/* A state that owns its loop (opened by require alone, as stock lua5.4
   does) closes right after a pool was closed with calls queued: the close
   posted those calls' completions (each holds its promise and its job),
   and the binding must deliver them before it frees its loop, which
   discards posts without calling them. */
static void test_owned_loop_closes_after_pool_close(void **state) {
  fixture *f = *state;
  lua_State *L = lua_newstate(counting_alloc_fn, &lua_mem);
  luna_workers_config cfg = pool_config(1, 0, init_hook);
  luna_workers *w = NULL;
  luaL_openlibs(L);
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(L, "task");
  assert_int_equal(luna_workers_new(L, &cfg, &w), 0);
  lua_setglobal(L, "pool");
  run(L, "local m = pool:open('hostmod')\n"
         "m:call('spin')\n"
         "for i = 1, 20 do task.spawn(function() pcall(task.await, m:call('inc', i)) end) end\n"
         "pool:close()\n");
  lua_close(L);
  lua_close(f->L); /* the fixture's state and loop, unused here */
  luna_loop_free(f->loop);
  assert_int_equal(atomic_load(&lua_mem.bytes), 0);
  assert_int_equal(atomic_load(&worker_mem.bytes), 0);
  assert_int_equal(luna__promise_live_count(), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_host_allocator_and_init_hook, setup),
      cmocka_unit_test_setup(test_refused_init_fails_the_pool, setup),
      cmocka_unit_test_setup(test_lunaloop_refused_in_a_worker_state, setup),
      cmocka_unit_test_setup(test_close_with_1000_pending, setup),
      cmocka_unit_test_setup(test_state_closes_with_1000_pending, setup),
      cmocka_unit_test_setup(test_loop_freed_first, setup),
      cmocka_unit_test_setup(test_stress_calls, setup),
      cmocka_unit_test_setup(test_jobs_around_the_spin, setup),
      cmocka_unit_test_setup(test_owned_loop_closes_after_pool_close, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
