/*
** test_promise_stress.c: promises and posts from 4 producer threads while
** the loop thread runs frames; meant for ThreadSanitizer (ctest label
** "thread", run by the TSan stage of scripts/test) and LeakSanitizer.
**
** Each producer completes 100,000 promises (400,000 in all) and posts
** 250,000 plain callbacks (1,000,000 in all), interleaved. The loop thread
** creates the promises in a Lua state (each awaited by a Lua task) and
** hands them to the producers through small queues, topping them up every
** frame. One promise in 16 is cancelled from Lua one frame after it was
** created, racing with its completion; one delivered promise in 7 is
** rejected rather than resolved.
**
** Checked: every plain post runs exactly once, each producer's in the
** order posted; every promise that Lua did not cancel wakes its task
** exactly once, each producer's in the order completed (values and
** rejections alike); every completion returns 0 and its data is freed
** exactly once; afterwards no promise, no loop byte and no Lua byte is
** left (the loop and the state allocate through counting allocators).
*/
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <cmocka.h>

#include "../core/counting_alloc.h"
#include "embed_util.h"

#define PRODUCERS 4
#define PROMISES 100000 /* per producer */
#define POSTS 250000    /* per producer: 1,000,000 in all */
#define WINDOW 256      /* promises queued per producer at most */
#define DOOM_EVERY 16   /* one promise in 16 is cancelled from Lua */

typedef struct entry {
  luna_promise *p;
  bool doomed;
} entry;

typedef struct producer {
  int id;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  entry ring[WINDOW];
  size_t head, count; /* under mu */
  long created;       /* loop thread */
  long next_post;     /* loop thread: the post sequence expected next */
  int failures;       /* producer: completions or posts that did not return 0 */
} producer;

static producer prods[PRODUCERS];
static luna_loop *g_loop;
static atomic_int producers_done;
static long posts_seen, posts_bad; /* loop thread */
static atomic_long completion_frees;

/* ---- the producers ------------------------------------------------------------ */

typedef struct job_result {
  int id;
  long seq;
} job_result;

static int push_result(lua_State *L, void *data) {
  job_result *r = (job_result *)data;
  lua_pushinteger(L, r->id);
  lua_pushinteger(L, r->seq);
  return 2;
}

static void free_result(void *data) {
  atomic_fetch_add_explicit(&completion_frees, 1, memory_order_relaxed);
  free(data);
}

static void post_cb(luna_loop *loop, void *arg) {
  uintptr_t v = (uintptr_t)arg;
  int id = (int)(v & 7);
  long seq = (long)(v >> 3);
  (void)loop;
  if (seq != prods[id].next_post)
    posts_bad++;
  prods[id].next_post = seq + 1;
  posts_seen++;
}

static entry take(producer *pr) {
  entry e;
  pthread_mutex_lock(&pr->mu);
  while (pr->count == 0)
    pthread_cond_wait(&pr->cv, &pr->mu);
  e = pr->ring[pr->head];
  pr->head = (pr->head + 1) % WINDOW;
  pr->count--;
  pthread_mutex_unlock(&pr->mu);
  return e;
}

static void *produce(void *arg) {
  producer *pr = (producer *)arg;
  long i, seq = 0, posts = 0;
  char msg[32];
  for (i = 0; i < PROMISES; i++) {
    entry e = take(pr);
    int rc;
    if (!e.doomed && seq % 7 == 3) {
      snprintf(msg, sizeof msg, "%d:%ld", pr->id, seq);
      rc = luna_promise_reject(e.p, msg);
    } else {
      job_result *r = (job_result *)malloc(sizeof *r);
      r->id = pr->id;
      r->seq = e.doomed ? -1 : seq;
      rc = luna_promise_resolve(e.p, push_result, r, free_result);
      if (rc != 0)
        free(r);
    }
    if (rc != 0)
      pr->failures++;
    if (!e.doomed)
      seq++;
    if (luna_promise_release(e.p) != 0)
      pr->failures++;
    for (; posts < (i + 1) * (long)POSTS / PROMISES; posts++)
      if (luna_post(g_loop, LUNA_UPDATE, post_cb,
                    (void *)(((uintptr_t)posts << 3) | (uintptr_t)pr->id)) != 0)
        pr->failures++;
  }
  atomic_fetch_add(&producers_done, 1);
  return NULL;
}

/* ---- the loop thread --------------------------------------------------------------- */

/* The Lua side: a task per promise checks per-producer order; a doomed
   promise is cancelled one frame after it was created. */
static const char *script =
    "expected, delivered, bad = {}, 0, 0\n"
    "function watch(p)\n"
    "  local ok, id, seq = pcall(task.await, p)\n"
    "  if not ok then\n"
    "    local a, b = tostring(id):match('^(%d+):(%d+)$')\n"
    "    id, seq = tonumber(a), tonumber(b)\n"
    "  end\n"
    "  if id == nil or seq ~= (expected[id] or 0) then bad = bad + 1 end\n"
    "  if id ~= nil then expected[id] = seq + 1 end\n"
    "  delivered = delivered + 1\n"
    "end\n"
    "function doom(p) task.yield(); p:cancel() end\n";

static long doomed_total;

/* Creates promises for every producer up to the window, each with its Lua
   task, and hands them over. */
static void top_up(lua_State *L) {
  int i;
  for (i = 0; i < PRODUCERS; i++) {
    producer *pr = &prods[i];
    size_t room;
    pthread_mutex_lock(&pr->mu);
    room = WINDOW - pr->count;
    pthread_mutex_unlock(&pr->mu);
    while (room > 0 && pr->created < PROMISES) {
      entry e;
      e.doomed = pr->created % DOOM_EVERY == DOOM_EVERY - 1;
      lua_getglobal(L, e.doomed ? "doom" : "watch");
      assert_int_equal(luna_lua_promise_new(L, LUNA_UPDATE, &e.p), 0);
      assert_int_equal(luna_lua_spawn(L, 1, NULL), 0);
      lua_pop(L, 1);
      doomed_total += e.doomed;
      pr->created++;
      room--;
      pthread_mutex_lock(&pr->mu);
      pr->ring[(pr->head + pr->count) % WINDOW] = e;
      pr->count++;
      pthread_cond_signal(&pr->cv);
      pthread_mutex_unlock(&pr->mu);
    }
  }
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void four_producers_promises_and_posts_while_frames_run(void **state) {
  counting_alloc loop_ca, lua_ca;
  luna_config config;
  luna_loop_stats st;
  lua_State *L;
  long frames = 0, want_posts = (long)PRODUCERS * POSTS;
  long want_promises = (long)PRODUCERS * PROMISES;
  double t0, elapsed;
  int i;
  (void)state;
  counting_init(&loop_ca);
  counting_init(&lua_ca);
  config = counting_config(&loop_ca);
  assert_int_equal(luna_loop_new(&config, &g_loop), 0);
  L = lua_newstate(counting_alloc_fn, &lua_ca);
  luaL_openlibs(L);
  assert_int_equal(luna_lua_attach(L, g_loop), 0);
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(L, "task");
  run(L, script);

  t0 = now_seconds();
  for (i = 0; i < PRODUCERS; i++) {
    prods[i].id = i;
    pthread_mutex_init(&prods[i].mu, NULL);
    pthread_cond_init(&prods[i].cv, NULL);
    assert_int_equal(pthread_create(&prods[i].thread, NULL, produce, &prods[i]), 0);
  }
  for (;;) {
    bool done = atomic_load(&producers_done) == PRODUCERS;
    top_up(L);
    assert_int_equal(luna_loop_frame(g_loop, 1.0 / 60), 0);
    frames++;
    /* Each producer posts plain callbacks after its last completion, so once
       every plain post ran, every completion was delivered (or discarded). */
    if (done && posts_seen == want_posts &&
        global_int(L, "delivered") + doomed_total == want_promises)
      break;
    if (frames > 10000000)
      fail_msg("deliveries never completed");
  }
  elapsed = now_seconds() - t0;
  for (i = 0; i < PRODUCERS; i++) {
    assert_int_equal(pthread_join(prods[i].thread, NULL), 0);
    assert_int_equal(prods[i].failures, 0);
    assert_int_equal(prods[i].next_post, POSTS);
  }
  /* one more frame: a doomed promise's cancel task may still be waiting */
  assert_int_equal(luna_loop_frame(g_loop, 1.0 / 60), 0);
  luna_loop_get_stats(g_loop, &st);

  assert_int_equal(posts_seen, want_posts);
  assert_int_equal(posts_bad, 0);
  assert_int_equal(global_int(L, "bad"), 0);
  assert_int_equal(global_int(L, "delivered"), want_promises - doomed_total);
  assert_int_equal(doomed_total, PRODUCERS * (PROMISES / DOOM_EVERY));
  for (i = 0; i < PRODUCERS; i++) {
    lua_getglobal(L, "expected");
    lua_rawgeti(L, -1, i);
    /* the delivered promises of producer i carry seq 0 .. n-1 */
    assert_int_equal(lua_tointeger(L, -1), PROMISES - PROMISES / DOOM_EVERY);
    lua_pop(L, 2);
  }
  assert_int_equal(luna_lua_task_count(L), 0);
  lua_close(L);
  luna_loop_free(g_loop);
  for (i = 0; i < PRODUCERS; i++) {
    pthread_mutex_destroy(&prods[i].mu);
    pthread_cond_destroy(&prods[i].cv);
  }
  /* every resolve's data freed once (rejections carry no data) */
  {
    long rejected = 0, seqs = PROMISES - PROMISES / DOOM_EVERY, s;
    for (s = 0; s < seqs; s++)
      rejected += s % 7 == 3;
    assert_int_equal(atomic_load(&completion_frees), want_promises - PRODUCERS * rejected);
  }
  assert_int_equal(luna__promise_live_count(), 0);
  ASSERT_NO_LEAKS(&loop_ca);
  ASSERT_NO_LEAKS(&lua_ca);
  printf("stress: %d producers, %ld promises (%ld cancelled from Lua) and %ld posts "
         "in %.2f s over %ld frames: %.0f completions+posts/s; %llu posts needed the "
         "allocator\n",
         PRODUCERS, want_promises, doomed_total, want_posts, elapsed, frames,
         (double)(want_promises + want_posts) / elapsed,
         (unsigned long long)st.posts_allocated);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(four_producers_promises_and_posts_while_frames_run),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
