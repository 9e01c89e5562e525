/*
** test_timer.c: timers. Exact firing frames on the scaled clock (dt 0.1 s
** and 60 Hz), deadline order with creation-order ties, the order of kinds,
** timers added during a run, cancel (pending, collected-but-not-called,
** stale), clamping, time scale 0, realtime read once per run, stop while
** firing, and a randomized heap check against a sorted reference.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "counting_alloc.h"
#include "loop_internal.h"
#include "lunaloop.h"
#include "test_log.h"
#include "loop_fixture.h"


/* A virtual realtime source the tests move by hand; counts its reads. */
static luna_ns fake_now;
static int fake_reads;
static luna_ns fake_source(void *ud) {
  (void)ud;
  fake_reads++;
  return fake_now;
}

static int setup_fake(void **state) {
  fake_now = 1000; /* any origin: the clock still starts at 0 */
  fake_reads = 0;
  return setup_with_realtime(state, fake_source);
}


/* Logs the frame in which it fires. */
static void log_frame(luna_loop *loop, void *arg) {
  (void)arg;
  log_push((long)luna_loop_frame_count(loop));
}

/* In Update of the current frame: a scaled timer at now + arg ns. */
static void add_delay(luna_loop *loop, void *arg) {
  luna_ns now = luna_loop_time(loop, LUNA_CLOCK_SCALED);
  log_push((long)luna_loop_frame_count(loop));
  assert_int_equal(luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_SCALED,
                                  now + (luna_ns)(intptr_t)arg, log_frame, NULL, NULL),
                   0);
}

static void scaled_timer_at_plus_one_second_fires_ten_frames_later_at_dt_0_1(void **state) {
  fixture *f = *state;
  int i;
  for (i = 0; i < 3; i++)
    luna_loop_frame(f->loop, 0.1);
  luna_enqueue(f->loop, LUNA_UPDATE, add_delay, I2P(1000000000));
  for (i = 0; i < 20; i++)
    assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(4, 14); /* awaited in frame F = 4, fires in F + 10 */
}

static void delays_at_60_hz_take_30_and_60_frames(void **state) {
  fixture *f = *state;
  int i;
  luna_enqueue(f->loop, LUNA_UPDATE, add_delay, I2P(500000000));
  luna_enqueue(f->loop, LUNA_UPDATE, add_delay, I2P(1000000000));
  for (i = 0; i < 70; i++)
    assert_int_equal(luna_loop_frame_ns(f->loop, 16666667), 0);
  ASSERT_LOG(1, 1, 31, 61);
}

static void equal_deadlines_fire_in_creation_order(void **state) {
  fixture *f = *state;
  int i;
  for (i = 1; i <= 5; i++)
    luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 100, log_fn, I2P(i), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 50, log_fn, I2P(0), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 200, log_fn, I2P(9), NULL);
  luna_loop_frame_ns(f->loop, 100);
  ASSERT_LOG(0, 1, 2, 3, 4, 5);
  luna_loop_frame_ns(f->loop, 100);
  ASSERT_LOG(0, 1, 2, 3, 4, 5, 9);
}

static void kinds_fire_frame_scaled_unscaled_realtime_fixed_whatever_the_deadlines(void **state) {
  fixture *f = *state;
  /* Created in reverse kind order; each with a deadline earlier than the
     kind before it, so only the kind order can explain the result. */
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FIXED, 0, log_fn, I2P(5), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_REALTIME, 1, log_fn, I2P(4), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_UNSCALED, 2, log_fn, I2P(3), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 3, log_fn, I2P(2), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 1, log_fn, I2P(1), NULL);
  fake_now += 100;
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1, 2, 3, 4, 5);
}

static void frame_timers_compare_with_the_frame_counter(void **state) {
  fixture *f = *state;
  int i;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 3, log_frame, NULL, NULL);
  luna_timer_add(f->loop, LUNA_PRE_UPDATE, LUNA_TIMER_FRAME, 0, log_frame, NULL, NULL);
  for (i = 0; i < 5; i++)
    luna_loop_frame(f->loop, 0.0);
  ASSERT_LOG(1, 3);
}

/* Adds an Update timer that is already due, from inside an Update run. */
static void add_due_timer(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_frame, NULL, NULL);
}

static void timers_added_during_a_run_wait_for_the_next_run_even_if_due(void **state) {
  fixture *f = *state;
  /* From a continuation (step 2) and from a timer (step 3) of the same run. */
  luna_enqueue(f->loop, LUNA_UPDATE, add_due_timer, I2P(-1));
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, add_due_timer, I2P(-2), NULL);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(-1, -2);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(-1, -2, 2, 2);
}

static void add_due_update_timer_from_pre_update(luna_loop *loop, void *arg) {
  (void)arg;
  luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_frame, NULL, NULL);
}

static void a_due_timer_added_at_an_earlier_timing_fires_this_frame(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_PRE_UPDATE, add_due_update_timer_from_pre_update, NULL);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1);
}

/* A timer that was set aside (created during the run) keeps its place in
   the heap: it still fires, in order, at the next run. */
static void add_two_due_timers(luna_loop *loop, void *arg) {
  (void)arg;
  luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 5, log_fn, I2P(20), NULL);
  luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, log_fn, I2P(10), NULL);
}

static void set_aside_timers_keep_their_order(void **state) {
  fixture *f = *state;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 3, log_fn, I2P(1), NULL);
  luna_enqueue(f->loop, LUNA_UPDATE, add_two_due_timers, NULL);
  luna_loop_frame_ns(f->loop, 10);
  ASSERT_LOG(1);
  luna_loop_frame_ns(f->loop, 10);
  ASSERT_LOG(1, 10, 20);
}

static void cancel_pending_timer_and_stale_handles(void **state) {
  fixture *f = *state;
  luna_timer_id a, b, zero = {0}, bogus = {UINT64_C(0x12345678000fffff)};
  luna_loop_stats st;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, log_fn, I2P(1), &a);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, log_fn, I2P(2), &b);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 2);
  assert_int_equal(luna_timer_cancel(f->loop, a), 0);
  assert_int_equal(luna_timer_cancel(f->loop, a), LUNA_ENOENT);
  assert_int_equal(luna_timer_cancel(f->loop, zero), LUNA_ENOENT);
  assert_int_equal(luna_timer_cancel(f->loop, bogus), LUNA_ENOENT);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 1);
  luna_loop_frame(f->loop, 0.1);
  ASSERT_LOG(2);
  assert_int_equal(luna_timer_cancel(f->loop, b), LUNA_ENOENT); /* fired */
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 0);
  /* A reused slot gets a new generation. */
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, log_fn, I2P(3), &b);
  assert_true(a.id != b.id);
  assert_int_equal(luna_timer_cancel(f->loop, a), LUNA_ENOENT);
  assert_int_equal(luna_timer_cancel(f->loop, b), 0);
}

static luna_timer_id victim;

static void cancel_victim(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  assert_int_equal(luna_timer_cancel(loop, victim), 0);
}

static void cancelling_a_collected_timer_before_its_call_prevents_it(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, cancel_victim, I2P(1), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 2, log_fn, I2P(2), &victim);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 3, log_fn, I2P(3), NULL);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1, 3);
  assert_int_equal(luna_timer_cancel(f->loop, victim), LUNA_ENOENT);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 0);
  assert_int_equal(f->loop->timers.heaps[LUNA_UPDATE * 5 + 1].live, 0);
}

static luna_timer_id self_id;
static void cancel_self(luna_loop *loop, void *arg) {
  (void)arg;
  log_push(luna_timer_cancel(loop, self_id));
}

static void a_firing_timer_reads_its_own_handle_as_stale(void **state) {
  fixture *f = *state;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, cancel_self, NULL, &self_id);
  luna_loop_frame(f->loop, 0.1);
  ASSERT_LOG(LUNA_ENOENT);
}

/* Deadlines clamp to LUNA_NS_MAX; clocks stop at LUNA_CLOCK_MAX (half of
   it: a frame past it is refused), so a clamped deadline is never reached
   by time that still runs, and never fires early. */
static void deadlines_clamp_to_ns_max_beyond_the_clocks_reach(void **state) {
  fixture *f = *state;
  luna_timer_id id;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, INT64_MAX, log_fn, I2P(1), &id);
  assert_int_equal(f->loop->timers.slots[(uint32_t)id.id - 1].deadline, LUNA_NS_MAX);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, INT64_MIN, log_fn, I2P(0), &id);
  assert_int_equal(f->loop->timers.slots[(uint32_t)id.id - 1].deadline, -LUNA_NS_MAX);
  assert_int_equal(luna_loop_frame_ns(f->loop, LUNA_CLOCK_MAX), 0);
  ASSERT_LOG(0);
  assert_int_equal(luna_loop_frame_ns(f->loop, INT64_MAX), LUNA_EINVAL);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), LUNA_CLOCK_MAX);
  assert_int_equal(luna_loop_frame_ns(f->loop, 0), 0);
  ASSERT_LOG(0);
}

/* case c09 at the C level: with time scale 0, scaled timers wait and
   unscaled ones fire. dt 0.05: the unscaled +1 s timer fires at frame 20. */
static void time_scale_zero_holds_scaled_timers_but_not_unscaled_ones(void **state) {
  fixture *f = *state;
  int i;
  luna_loop_set_time_scale(f->loop, 0.0);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1000000000, log_fn, I2P(-1), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_UNSCALED, 1000000000, log_frame, NULL, NULL);
  for (i = 0; i < 100; i++)
    assert_int_equal(luna_loop_frame(f->loop, 0.05), 0);
  ASSERT_LOG(20);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 0);
}

static void realtime_is_read_once_per_run_and_only_when_needed(void **state) {
  fixture *f = *state;
  int i;
  fake_reads = 0;
  luna_loop_run(f->loop, LUNA_UPDATE);
  assert_int_equal(fake_reads, 0); /* no realtime timer waits */
  for (i = 0; i < 4; i++)
    luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_REALTIME, 100 + i, log_fn, I2P(i), NULL);
  fake_now += 101;
  luna_loop_run(f->loop, LUNA_UPDATE);
  assert_int_equal(fake_reads, 1);
  ASSERT_LOG(0, 1);
  fake_now += 10;
  luna_loop_run(f->loop, LUNA_UPDATE);
  assert_int_equal(fake_reads, 2);
  ASSERT_LOG(0, 1, 2, 3);
}

static void stop_then_log(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  luna_loop_stop(loop);
}

static void stop_while_firing_keeps_the_collected_rest_in_order(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 0, log_fn, I2P(1), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, stop_then_log, I2P(2), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_fn, I2P(3), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FIXED, 0, log_fn, I2P(4), NULL);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), LUNA_ESTOPPED);
  ASSERT_LOG(1, 2);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 2);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2, 3, 4);
}

static void timer_add_rejects_bad_arguments_and_reports_enomem(void **state) {
  fixture *f = *state;
  luna_timer_id id = {7};
  assert_int_equal(luna_timer_add(NULL, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_fn, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, NULL, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_timer_add(f->loop, (luna_timing)16, LUNA_TIMER_SCALED, 0, log_fn, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, (luna_timer_kind)5, 0, log_fn, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, (luna_timer_kind)-1, 0, log_fn, NULL, &id), LUNA_EINVAL);
  assert_int_equal(id.id, 7);
  counting_fail_after(&f->ca, 0);
  assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_fn, I2P(1), &id), LUNA_ENOMEM);
  counting_fail_after(&f->ca, 1); /* heap grows, slab fails */
  assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_fn, I2P(1), &id), LUNA_ENOMEM);
  counting_fail_after(&f->ca, -1);
  luna_loop_frame(f->loop, 0.1);
  ASSERT_LOG_EMPTY();
}

static void a_timer_costs_at_most_48_bytes(void **state) {
  (void)state;
  assert_true(sizeof(luna__timer) + sizeof(uint32_t) <= 48);
  assert_int_equal(sizeof(luna__timer), 40);
}

/* ---- randomized heap check ----------------------------------------------- */

#define RND_N 3000

static uint64_t rng = 88172645463325252ULL;
static uint64_t xorshift(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

typedef struct ref_timer {
  luna_ns deadline;
  long seq;
  bool cancelled;
  luna_timer_id id;
} ref_timer;

static ref_timer refs[RND_N];

static int ref_cmp(const void *x, const void *y) {
  const ref_timer *a = x, *b = y;
  if (a->deadline != b->deadline)
    return a->deadline < b->deadline ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Checks the heap invariant and the slots' back pointers. */
static void check_heap(const luna__timers *tm, const luna__heap *h) {
  size_t i;
  for (i = 0; i < h->n; i++) {
    const luna__timer *t = &tm->slots[h->a[i]];
    assert_int_equal(t->pos, i);
    if (i > 0) {
      const luna__timer *p = &tm->slots[h->a[(i - 1) / 2]];
      assert_true(p->deadline < t->deadline ||
                  (p->deadline == t->deadline && p->meta < t->meta));
    }
  }
}

static void random_timers_fire_in_deadline_then_creation_order(void **state) {
  fixture *f = *state;
  long i, fired = 0;
  int frame;
  for (i = 0; i < RND_N; i++) {
    refs[i].deadline = (luna_ns)(xorshift() % 500); /* many ties */
    refs[i].seq = i;
    refs[i].cancelled = false;
    assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_UNSCALED,
                                    refs[i].deadline, log_fn, I2P(i), &refs[i].id),
                     0);
  }
  for (i = 0; i < RND_N; i++)
    if (xorshift() % 3 == 0) {
      refs[i].cancelled = true;
      assert_int_equal(luna_timer_cancel(f->loop, refs[i].id), 0);
    }
  check_heap(&f->loop->timers, &f->loop->timers.heaps[LUNA_UPDATE * 5 + LUNA_TIMER_UNSCALED]);
  qsort(refs, RND_N, sizeof refs[0], ref_cmp);
  for (frame = 0; frame < 10; frame++) {
    luna_loop_frame_ns(f->loop, 50);
    check_heap(&f->loop->timers, &f->loop->timers.heaps[LUNA_UPDATE * 5 + LUNA_TIMER_UNSCALED]);
  }
  for (i = 0; i < RND_N; i++) {
    if (refs[i].cancelled)
      continue;
    assert_true((size_t)fired < g_log.n);
    assert_int_equal(g_log.v[fired], refs[i].seq);
    fired++;
  }
  assert_int_equal(g_log.n, (size_t)fired);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup_fake, teardown)
      T(scaled_timer_at_plus_one_second_fires_ten_frames_later_at_dt_0_1),
      T(delays_at_60_hz_take_30_and_60_frames),
      T(equal_deadlines_fire_in_creation_order),
      T(kinds_fire_frame_scaled_unscaled_realtime_fixed_whatever_the_deadlines),
      T(frame_timers_compare_with_the_frame_counter),
      T(timers_added_during_a_run_wait_for_the_next_run_even_if_due),
      T(a_due_timer_added_at_an_earlier_timing_fires_this_frame),
      T(set_aside_timers_keep_their_order),
      T(cancel_pending_timer_and_stale_handles),
      T(cancelling_a_collected_timer_before_its_call_prevents_it),
      T(a_firing_timer_reads_its_own_handle_as_stale),
      T(deadlines_clamp_to_ns_max_beyond_the_clocks_reach),
      T(time_scale_zero_holds_scaled_timers_but_not_unscaled_ones),
      T(realtime_is_read_once_per_run_and_only_when_needed),
      T(stop_while_firing_keeps_the_collected_rest_in_order),
      T(timer_add_rejects_bad_arguments_and_reports_enomem),
      T(a_timer_costs_at_most_48_bytes),
      T(random_timers_fire_in_deadline_then_creation_order),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
