/*
** test_queue.c: one-shot continuations (luna_enqueue, luna_purge) through the
** public API: FIFO order, the same-timing rule, stop mid-drain, purge, errors
** and the amortized zero-allocation promise.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "counting_alloc.h"
#include "lunaloop.h"
#include "test_log.h"
#include "loop_fixture.h"


static void continuations_run_in_fifo_order_at_the_next_run(void **state) {
  fixture *f = *state;
  int i;
  for (i = 1; i <= 5; i++)
    assert_int_equal(luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(i)), 0);
  ASSERT_LOG_EMPTY(); /* never synchronous */
  assert_int_equal(luna_loop_run(f->loop, LUNA_LAST_UPDATE), 0);
  ASSERT_LOG_EMPTY(); /* other timings leave them alone */
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2, 3, 4, 5);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2, 3, 4, 5); /* one-shot */
}

/* Queues itself for the same timing: must wait for the next run, so a run
   (and a frame) always returns. */
static void requeue_self(luna_loop *loop, void *arg) {
  long n = (long)(intptr_t)arg;
  log_push(n);
  luna_enqueue(loop, LUNA_UPDATE, requeue_self, I2P(n + 1));
}

static void same_timing_enqueue_waits_for_the_next_run(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_UPDATE, requeue_self, I2P(1));
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1, 2, 3);
}

/* From Update: 100 for LastUpdate (later: same frame), 200 for PreUpdate
   (earlier: next frame). */
static void queue_other_timings(luna_loop *loop, void *arg) {
  (void)arg;
  log_push((long)luna_loop_frame_count(loop));
  luna_enqueue(loop, LUNA_LAST_UPDATE, log_fn, I2P(100));
  luna_enqueue(loop, LUNA_PRE_UPDATE, log_fn, I2P(200));
}

static void enqueue_for_a_later_timing_runs_this_frame_an_earlier_one_next(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_UPDATE, queue_other_timings, NULL);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1, 100);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1, 100, 200);
}

/* Logs 1 and stops the loop, after queueing 4 for the same timing. */
static void stop_after_logging(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  luna_enqueue(loop, LUNA_UPDATE, log_fn, I2P(4));
  luna_loop_stop(loop);
}

static void stop_mid_drain_keeps_the_rest_in_order_ahead_of_newer_entries(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  luna_enqueue(f->loop, LUNA_UPDATE, stop_after_logging, I2P(1));
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(2));
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(3));
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), LUNA_ESTOPPED);
  ASSERT_LOG(1);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.queued[LUNA_UPDATE], 3);
  assert_int_equal(luna_loop_current_timing(f->loop), -1);
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(5));
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2, 3, 4, 5);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.queued[LUNA_UPDATE], 0);
}

static void stop_mid_drain_inside_a_frame_skips_the_rest_of_the_frame(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_UPDATE, stop_after_logging, I2P(1));
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(2));
  luna_enqueue(f->loop, LUNA_LAST_UPDATE, log_fn, I2P(3));
  assert_int_equal(luna_loop_frame(f->loop, 0.1), LUNA_ESTOPPED);
  ASSERT_LOG(1);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1, 2, 4, 3);
}

static bool match_arg(luna_fn fn, void *arg, void *ud) {
  (void)fn;
  return arg == ud;
}

static bool match_even(luna_fn fn, void *arg, void *ud) {
  (void)fn;
  (void)ud;
  return ((intptr_t)arg % 2) == 0;
}

static void purge_removes_matches_and_keeps_the_order_of_the_rest(void **state) {
  fixture *f = *state;
  int i;
  for (i = 1; i <= 6; i++)
    luna_enqueue(f->loop, i <= 3 ? LUNA_UPDATE : LUNA_PRE_UPDATE, log_fn, I2P(i));
  assert_int_equal(luna_purge(f->loop, match_even, NULL), 3);
  assert_int_equal(luna_purge(f->loop, match_arg, I2P(99)), 0);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(5, 1, 3); /* PreUpdate runs before Update */
}

static void purge_never_removes_cross_thread_posts(void **state) {
  fixture *f = *state;
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(7));
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(7));
  assert_int_equal(luna_purge(f->loop, match_arg, I2P(7)), 1);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(7);
}

/* Stops after the first post is delivered, then purges everything: the
   post that was already moved into the queue must survive. */
static bool match_all(luna_fn fn, void *arg, void *ud) {
  (void)fn;
  (void)arg;
  (void)ud;
  return true;
}

static void stop_then_log(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  luna_loop_stop(loop);
}

static void purge_keeps_posts_already_moved_into_the_queue(void **state) {
  fixture *f = *state;
  luna_post(f->loop, LUNA_UPDATE, stop_then_log, I2P(1));
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(2));
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), LUNA_ESTOPPED);
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(3));
  assert_int_equal(luna_purge(f->loop, match_all, NULL), 1);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2);
}

/* Purges the rest of its own drain (beyond the documented contract, but it
   must not crash or run purged entries). */
static void purge_the_rest(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  luna_purge(loop, match_even, NULL);
}

static void purge_from_inside_the_same_drain_is_safe(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_UPDATE, purge_the_rest, I2P(1));
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(2));
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(3));
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(4));
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 3);
}

static void enqueue_rejects_bad_arguments_and_never_runs_them(void **state) {
  fixture *f = *state;
  assert_int_equal(luna_enqueue(NULL, LUNA_UPDATE, log_fn, NULL), LUNA_EINVAL);
  assert_int_equal(luna_enqueue(f->loop, LUNA_UPDATE, NULL, NULL), LUNA_EINVAL);
  assert_int_equal(luna_enqueue(f->loop, (luna_timing)16, log_fn, I2P(1)), LUNA_EINVAL);
  assert_int_equal(luna_enqueue(f->loop, (luna_timing)-1, log_fn, I2P(1)), LUNA_EINVAL);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG_EMPTY();
}

static void enqueue_reports_enomem_and_never_runs_it(void **state) {
  fixture *f = *state;
  counting_fail_after(&f->ca, 0);
  assert_int_equal(luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(1)), LUNA_ENOMEM);
  counting_fail_after(&f->ca, -1);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG_EMPTY();
}

static void steady_state_enqueue_allocates_nothing(void **state) {
  fixture *f = *state;
  long before;
  int frame, i;
  for (i = 0; i < 100; i++)
    luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(0));
  luna_loop_run(f->loop, LUNA_UPDATE);
  for (i = 0; i < 100; i++)
    luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(0));
  luna_loop_run(f->loop, LUNA_UPDATE);
  before = atomic_load(&f->ca.allocs);
  for (frame = 0; frame < 50; frame++) {
    for (i = 0; i < 100; i++)
      luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(0));
    luna_loop_run(f->loop, LUNA_UPDATE);
  }
  assert_int_equal(atomic_load(&f->ca.allocs), before);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
      T(continuations_run_in_fifo_order_at_the_next_run),
      T(same_timing_enqueue_waits_for_the_next_run),
      T(enqueue_for_a_later_timing_runs_this_frame_an_earlier_one_next),
      T(stop_mid_drain_keeps_the_rest_in_order_ahead_of_newer_entries),
      T(stop_mid_drain_inside_a_frame_skips_the_rest_of_the_frame),
      T(purge_removes_matches_and_keeps_the_order_of_the_rest),
      T(purge_never_removes_cross_thread_posts),
      T(purge_keeps_posts_already_moved_into_the_queue),
      T(purge_from_inside_the_same_drain_is_safe),
      T(enqueue_rejects_bad_arguments_and_never_runs_them),
      T(enqueue_reports_enomem_and_never_runs_it),
      T(steady_state_enqueue_allocates_nothing),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
