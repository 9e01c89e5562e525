/*
** test_inbox.c: luna_post, the lock-free cross-thread inbox. Delivery at the
** start of a run, per-producer order, the 1024-node pool and its allocator
** fallback, reset and free with posts in flight, and a multi-producer stress
** test meant to run under ThreadSanitizer.
*/
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "counting_alloc.h"
#include "lunaloop.h"
#include "test_log.h"
#include "loop_fixture.h"


/* ---- a backlog beyond the node pool -------------------------------------- */

/* A C worker thread posts 2000 callbacks to Update, more than the inbox's
   node pool (1024) holds. A scheduler whose pool is a fixed ring drops or
   overwrites the posts beyond its capacity, or reorders the ones that spill
   into an overflow path. All 2000 must run at the next Update, in the order
   posted, none lost. */
#define WORKER_POSTS 2000

static luna_loop *worker_loop;

static void *post_from_worker(void *ud) {
  long i;
  (void)ud;
  for (i = 0; i < WORKER_POSTS; i++)
    if (luna_post(worker_loop, LUNA_UPDATE, log_fn, I2P(i)) != 0)
      return I2P(1);
  return NULL;
}

static void a_worker_backlog_beyond_the_pool_runs_in_order_none_lost(void **state) {
  fixture *f = *state;
  pthread_t th;
  void *res;
  luna_loop_stats st;
  long i;
  worker_loop = f->loop;
  assert_int_equal(pthread_create(&th, NULL, post_from_worker, NULL), 0);
  assert_int_equal(pthread_join(th, &res), 0);
  assert_null(res);
  ASSERT_LOG_EMPTY();
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  assert_int_equal(g_log.n, WORKER_POSTS);
  for (i = 0; i < WORKER_POSTS; i++)
    assert_int_equal(g_log.v[i], i);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.posts_allocated, WORKER_POSTS - 1024);
  assert_int_equal(st.queued[LUNA_UPDATE], 0);
  /* The pool was refilled: the next 1024 posts need no allocation. */
  for (i = 0; i < 1024; i++)
    luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(i));
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.posts_allocated, WORKER_POSTS - 1024);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  assert_int_equal(g_log.n, WORKER_POSTS + 1024);
}

/* ---- single thread ---------------------------------------------------------- */

static void posts_run_at_the_next_run_of_their_timing_only(void **state) {
  fixture *f = *state;
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(1));
  luna_post(f->loop, LUNA_PRE_UPDATE, log_fn, I2P(2));
  assert_int_equal(luna_loop_run(f->loop, LUNA_LAST_UPDATE), 0);
  ASSERT_LOG_EMPTY();
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1);
  assert_int_equal(luna_loop_run(f->loop, LUNA_PRE_UPDATE), 0);
  ASSERT_LOG(1, 2);
}

static void post_self(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  luna_post(loop, LUNA_UPDATE, log_fn, I2P(99));
}

static void post_during_the_same_timing_waits_for_the_next_run(void **state) {
  fixture *f = *state;
  luna_post(f->loop, LUNA_UPDATE, post_self, I2P(1));
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 99);
}

/* Step 1 appends the posts behind what was queued on the loop thread before
   the run began (the queue is then drained in order). */
static void posts_join_the_queue_behind_earlier_continuations(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(1));
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(2));
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(3));
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(4));
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 3, 2, 4);
}

static void post_rejects_bad_arguments(void **state) {
  fixture *f = *state;
  assert_int_equal(luna_post(NULL, LUNA_UPDATE, log_fn, NULL), LUNA_EINVAL);
  assert_int_equal(luna_post(f->loop, LUNA_UPDATE, NULL, NULL), LUNA_EINVAL);
  assert_int_equal(luna_post(f->loop, (luna_timing)16, log_fn, NULL), LUNA_EINVAL);
  assert_int_equal(luna_post(f->loop, (luna_timing)-3, log_fn, NULL), LUNA_EINVAL);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG_EMPTY();
}

static void post_fails_with_enomem_only_when_pool_and_allocator_are_empty(void **state) {
  fixture *f = *state;
  int i;
  counting_fail_after(&f->ca, 0);
  for (i = 0; i < 1024; i++) /* the pool needs no allocator */
    assert_int_equal(luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(i)), 0);
  assert_int_equal(luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(-1)), LUNA_ENOMEM);
  counting_fail_after(&f->ca, -1);
  assert_int_equal(luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(1024)), 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  assert_int_equal(g_log.n, 1025);
  for (i = 0; i <= 1024; i++)
    assert_int_equal(g_log.v[i], i); /* the failed one never ran */
}

static long reserved_runs;
static void count_run(luna_loop *loop, void *arg) {
  (void)loop;
  (void)arg;
  reserved_runs++;
}

/* luna_loop_reserve_posts grows the pool ahead: afterwards a backlog of that
   size posts without one call to the allocator (and the posts are not
   counted as allocated), one more post grows it again. */
static void reserved_posts_never_call_the_allocator(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  long allocs;
  int i;
  assert_int_equal(luna_loop_reserve_posts(f->loop, 5000), 0);
  allocs = atomic_load(&f->ca.allocs);
  counting_fail_after(&f->ca, 0); /* any allocation from here fails */
  /* 1024 + 16 blocks of 256 = 5120 nodes: the reservation rounds up */
  for (i = 0; i < 5120; i++)
    assert_int_equal(luna_post(f->loop, i % 3 ? LUNA_UPDATE : LUNA_PRE_UPDATE, count_run, NULL), 0);
  assert_int_equal(luna_post(f->loop, LUNA_UPDATE, count_run, NULL), LUNA_ENOMEM);
  assert_int_equal(atomic_load(&f->ca.allocs), allocs);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.posts_allocated, 0);
  counting_fail_after(&f->ca, -1);
  /* a smaller or equal reservation does nothing */
  assert_int_equal(luna_loop_reserve_posts(f->loop, 5120), 0);
  assert_int_equal(luna_loop_reserve_posts(f->loop, 10), 0);
  assert_int_equal(atomic_load(&f->ca.allocs), allocs);
  reserved_runs = 0;
  assert_int_equal(luna_loop_frame(f->loop, 0.01), 0);
  assert_int_equal(reserved_runs, 5120);
}

/* A post whose block allocation failed claimed a block number and left a
   hole: a later reservation must still add the nodes it promises. */
static void a_reservation_after_a_failed_block_still_adds_it(void **state) {
  fixture *f = *state;
  long allocs;
  int i;
  for (i = 0; i < 1024; i++) /* the whole initial pool */
    assert_int_equal(luna_post(f->loop, LUNA_UPDATE, count_run, NULL), 0);
  counting_fail_after(&f->ca, 0);
  assert_int_equal(luna_post(f->loop, LUNA_UPDATE, count_run, NULL), LUNA_ENOMEM);
  counting_fail_after(&f->ca, -1);
  reserved_runs = 0;
  assert_int_equal(luna_loop_frame(f->loop, 0.01), 0);
  assert_int_equal(reserved_runs, 1024);
  assert_int_equal(luna_loop_reserve_posts(f->loop, 1280), 0);
  allocs = atomic_load(&f->ca.allocs);
  counting_fail_after(&f->ca, 0);
  for (i = 0; i < 1280; i++)
    assert_int_equal(luna_post(f->loop, LUNA_UPDATE, count_run, NULL), 0);
  counting_fail_after(&f->ca, -1);
  assert_int_equal(atomic_load(&f->ca.allocs), allocs);
  assert_int_equal(luna_loop_frame(f->loop, 0.01), 0);
  assert_int_equal(reserved_runs, 1024 + 1280);
}

static void reserve_posts_checks_its_arguments(void **state) {
  fixture *f = *state;
  assert_int_equal(luna_loop_reserve_posts(NULL, 1), LUNA_EINVAL);
  assert_int_equal(luna_loop_reserve_posts(f->loop, (size_t)1024 + 65536u * 256u + 1), LUNA_EINVAL);
  counting_fail_after(&f->ca, 0);
  assert_int_equal(luna_loop_reserve_posts(f->loop, 2000), LUNA_ENOMEM);
  counting_fail_after(&f->ca, -1);
  assert_int_equal(luna_loop_reserve_posts(f->loop, 2000), 0);
}

/* If the continuation queue cannot grow, posts stay in the inbox side (in
   order) and are delivered at a later run: late, never lost. */
static void posts_survive_a_queue_that_cannot_grow(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(1));
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(2));
  counting_fail_after(&f->ca, 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG_EMPTY();
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.queued[LUNA_UPDATE], 2);
  counting_fail_after(&f->ca, -1);
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(3));
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2, 3);
}

static void reset_keeps_posts_and_delivers_them(void **state) {
  fixture *f = *state;
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(1));
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(2));
  assert_int_equal(luna_loop_reset(f->loop), 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1);
}

static void stop_then_log(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  luna_loop_stop(loop);
}

static void reset_keeps_posts_left_in_the_queue_by_a_stop(void **state) {
  fixture *f = *state;
  luna_post(f->loop, LUNA_UPDATE, stop_then_log, I2P(1));
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(2));
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), LUNA_ESTOPPED);
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(3));
  assert_int_equal(luna_loop_reset(f->loop), 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2);
}

static void free_discards_undelivered_posts_without_leaking(void **state) {
  fixture *f = *state;
  int i;
  for (i = 0; i < 1500; i++) /* pool nodes and allocated ones */
    luna_post(f->loop, i % 2 ? LUNA_UPDATE : LUNA_TIME_UPDATE, log_fn, I2P(i));
  /* teardown frees the loop: nothing runs, nothing leaks */
  luna_loop_free(f->loop);
  ASSERT_LOG_EMPTY();
  ASSERT_NO_LEAKS(&f->ca);
  assert_int_equal(luna_loop_new(NULL, &f->loop), 0); /* for teardown */
}

/* ---- many producers --------------------------------------------------------- */

/* 4 producers x 100,000 posts each while the loop thread runs frames. Every
   post must run exactly once and each producer's posts in the order posted.
   Run under ThreadSanitizer by the build-core-tsan check. */
#define MP_THREADS 4
#define MP_POSTS 100000

typedef struct mp_state {
  luna_loop *loop;
  long next[MP_THREADS]; /* loop thread: the sequence expected next */
  long total;
  long order_errors;
} mp_state;

static mp_state mp;

typedef struct mp_arg {
  int id;
} mp_arg;

static void mp_fn(luna_loop *loop, void *arg) {
  uintptr_t v = (uintptr_t)arg;
  int producer = (int)(v >> 24);
  long seq = (long)(v & 0xffffff);
  (void)loop;
  if (seq != mp.next[producer])
    mp.order_errors++;
  mp.next[producer] = seq + 1;
  mp.total++;
}

static void *mp_worker(void *ud) {
  mp_arg *a = ud;
  long i;
  for (i = 0; i < MP_POSTS; i++) {
    uintptr_t v = ((uintptr_t)a->id << 24) | (uintptr_t)i;
    if (luna_post(mp.loop, LUNA_UPDATE, mp_fn, (void *)v) != 0)
      return I2P(1);
  }
  return NULL;
}

static void many_producers_keep_count_and_per_producer_order(void **state) {
  fixture *f = *state;
  pthread_t th[MP_THREADS];
  mp_arg args[MP_THREADS];
  long frames = 0;
  int i;
  memset(&mp, 0, sizeof mp);
  mp.loop = f->loop;
  for (i = 0; i < MP_THREADS; i++) {
    args[i].id = i;
    assert_int_equal(pthread_create(&th[i], NULL, mp_worker, &args[i]), 0);
  }
  /* Frames run concurrently with the producers; the loop thread also grows
     the pool ahead of them now and then (luna_loop_reserve_posts races
     with the posts that grow it, which TSan checks). */
  while (mp.total < (long)MP_THREADS * MP_POSTS && frames < 100000000L) {
    assert_int_equal(luna_loop_frame_ns(f->loop, 1000000), 0);
    if (frames % 64 == 0 && frames / 64 < 200)
      assert_int_equal(luna_loop_reserve_posts(f->loop, 1024 + (size_t)(frames / 64) * 512), 0);
    frames++;
  }
  for (i = 0; i < MP_THREADS; i++) {
    void *res;
    assert_int_equal(pthread_join(th[i], &res), 0);
    assert_null(res);
  }
  assert_int_equal(luna_loop_frame_ns(f->loop, 1000000), 0);
  assert_int_equal(mp.total, (long)MP_THREADS * MP_POSTS);
  assert_int_equal(mp.order_errors, 0);
  for (i = 0; i < MP_THREADS; i++)
    assert_int_equal(mp.next[i], MP_POSTS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
      T(a_worker_backlog_beyond_the_pool_runs_in_order_none_lost),
      T(posts_run_at_the_next_run_of_their_timing_only),
      T(post_during_the_same_timing_waits_for_the_next_run),
      T(posts_join_the_queue_behind_earlier_continuations),
      T(post_rejects_bad_arguments),
      T(post_fails_with_enomem_only_when_pool_and_allocator_are_empty),
      T(reserved_posts_never_call_the_allocator),
      T(reserve_posts_checks_its_arguments),
      T(a_reservation_after_a_failed_block_still_adds_it),
      T(posts_survive_a_queue_that_cannot_grow),
      T(reset_keeps_posts_and_delivers_them),
      T(reset_keeps_posts_left_in_the_queue_by_a_stop),
      T(free_discards_undelivered_posts_without_leaking),
      T(many_producers_keep_count_and_per_producer_order),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
