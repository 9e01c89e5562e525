/*
** test_loop.c: the loop as a whole. Creation and defaults, the order of the
** 16 timings and the host hook, fixed steps (integer accumulator, the cap and
** its counters, time scale 0), host-driven begin_frame + run, the current
** timing, LUNA_ESTATE from callbacks, stop, reset and listeners, and the
** four steps of a run in order.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "counting_alloc.h"
#include "lunaloop.h"
#include "test_log.h"

typedef struct fixture {
  counting_alloc ca;
  luna_config config;
  luna_loop *loop;
} fixture;

static fixture fx;

/* A host hook that logs 1000 + the first timing of the phase. */
static void log_hook(luna_loop *loop, luna_timing timing, void *ud) {
  (void)loop;
  (void)ud;
  log_push(1000 + (long)timing);
}

static int setup(void **state) {
  counting_init(&fx.ca);
  fx.config = counting_config(&fx.ca);
  if (luna_loop_new(&fx.config, &fx.loop) != 0)
    return -1;
  log_clear();
  *state = &fx;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  luna_loop_free(f->loop);
  ASSERT_NO_LEAKS(&f->ca);
  return 0;
}

/* Recreates the fixture's loop with a changed config. */
static luna_loop *renew(fixture *f, luna_config c) {
  luna_loop_free(f->loop);
  ASSERT_NO_LEAKS(&f->ca);
  assert_int_equal(luna_loop_new(&c, &f->loop), 0);
  return f->loop;
}

/* ---- creation --------------------------------------------------------------- */

static void new_with_null_config_uses_the_defaults(void **state) {
  luna_loop *loop;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  assert_int_equal(luna_loop_fixed_dt(loop), 20000000);
  assert_int_equal(luna_loop_current_timing(loop), -1);
  /* 1 s at 20 ms is 50 steps: the default cap of 8 applies */
  assert_int_equal(luna_loop_begin_frame(loop, 1.0), 0);
  assert_int_equal(luna_loop_fixed_steps(loop), 8);
  luna_loop_free(loop);
  luna_loop_free(NULL);
}

static void new_rejects_negative_config_fields(void **state) {
  fixture *f = *state;
  luna_config c = f->config;
  luna_loop *loop = (luna_loop *)&c;
  c.fixed_dt_ns = -1;
  assert_int_equal(luna_loop_new(&c, &loop), LUNA_EINVAL);
  c.fixed_dt_ns = 0;
  c.max_fixed_steps = -1;
  assert_int_equal(luna_loop_new(&c, &loop), LUNA_EINVAL);
  assert_int_equal(luna_loop_new(&f->config, NULL), LUNA_EINVAL);
  assert_ptr_equal(loop, (luna_loop *)&c);
}

static void new_reports_enomem_at_each_allocation_and_leaks_nothing(void **state) {
  fixture *f = *state;
  luna_loop *loop = NULL;
  long n;
  for (n = 0; n < 2; n++) { /* the loop, then the inbox pool */
    counting_fail_after(&f->ca, n);
    assert_int_equal(luna_loop_new(&f->config, &loop), LUNA_ENOMEM);
  }
  counting_fail_after(&f->ca, -1);
  assert_null(loop);
}

/* ---- the frame ----------------------------------------------------------------- */

/* Logs the timing it runs in (from luna_loop_current_timing). */
static void log_current(luna_loop *loop, void *arg) {
  (void)arg;
  log_push(luna_loop_current_timing(loop));
}

static void a_frame_runs_the_sixteen_timings_in_order_with_hooks_between_pairs(void **state) {
  fixture *f = *state;
  luna_config c = f->config;
  luna_loop *loop;
  int t;
  c.hook = log_hook;
  loop = renew(f, c);
  for (t = LUNA_TIMING_COUNT - 1; t >= 0; t--)
    luna_enqueue(loop, (luna_timing)t, log_current, NULL);
  luna_loop_set_fixed_dt(loop, 50000000);
  assert_int_equal(luna_loop_frame(loop, 0.1), 0); /* 2 fixed steps */
  ASSERT_LOG(0, 1000, 1, 2, 1002, 3,
             4, 1004, 5, 1004, /* the fixed pair and its hook, per step */
             6, 1006, 7, 8, 1008, 9, 10, 1010, 11, 12, 1012, 13, 14, 1014, 15);
  assert_int_equal(luna_loop_current_timing(loop), -1);
}

static void no_fixed_step_means_no_fixed_pair_and_no_fixed_hook(void **state) {
  fixture *f = *state;
  luna_config c = f->config;
  luna_loop *loop;
  c.hook = log_hook;
  loop = renew(f, c);
  luna_enqueue(loop, LUNA_FIXED_UPDATE, log_current, NULL);
  assert_int_equal(luna_loop_frame(loop, 0.01), 0); /* 10 ms < 20 ms */
  ASSERT_LOG(1000, 1002, 1006, 1008, 1010, 1012, 1014);
  log_clear();
  assert_int_equal(luna_loop_frame(loop, 0.01), 0); /* 20 ms: one step */
  ASSERT_LOG(1000, 1002, 4, 1004, 1006, 1008, 1010, 1012, 1014);
}

static void frame_rejects_a_bad_dt_and_does_not_begin_a_frame(void **state) {
  fixture *f = *state;
  assert_int_equal(luna_loop_frame(f->loop, -0.1), LUNA_EINVAL);
  assert_int_equal(luna_loop_frame(f->loop, NAN), LUNA_EINVAL);
  assert_int_equal(luna_loop_frame(f->loop, INFINITY), LUNA_EINVAL);
  assert_int_equal(luna_loop_frame_ns(f->loop, -1), LUNA_EINVAL);
  assert_int_equal(luna_loop_begin_frame(f->loop, -1.0), LUNA_EINVAL);
  assert_int_equal(luna_loop_begin_frame_ns(f->loop, -1), LUNA_EINVAL);
  assert_int_equal(luna_loop_run(f->loop, (luna_timing)16), LUNA_EINVAL);
  assert_int_equal(luna_loop_run(f->loop, (luna_timing)-1), LUNA_EINVAL);
  assert_int_equal(luna_loop_frame_count(f->loop), 0);
  assert_int_equal(luna_loop_frame(f->loop, 0.0), 0);
  assert_int_equal(luna_loop_frame_count(f->loop), 1);
}

/* ---- fixed steps --------------------------------------------------------------- */

static void fixed_steps_at_one_sixtieth_with_dt_0_05_are_2_then_3(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  int frame;
  luna_loop_set_fixed_dt(f->loop, 16666667);
  for (frame = 1; frame <= 6; frame++) {
    assert_int_equal(luna_loop_begin_frame(f->loop, 0.05), 0);
    log_push(luna_loop_fixed_steps(f->loop));
    while (luna_loop_fixed_steps(f->loop) > 0) {
      luna_loop_run(f->loop, LUNA_FIXED_UPDATE);
      luna_loop_run(f->loop, LUNA_LAST_FIXED_UPDATE);
    }
  }
  /* 50,000,000 < 3 * 16,666,667; the 16,666,666 left over makes 3 next. */
  ASSERT_LOG(2, 3, 3, 3, 3, 3);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.fixed_steps, 17);
  assert_int_equal(st.dropped_fixed_steps, 0);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_FIXED), 17 * INT64_C(16666667));
}

static void log_frame_in_fixed(luna_loop *loop, void *arg) {
  (void)arg;
  log_push((long)luna_loop_frame_count(loop));
  luna_enqueue(loop, LUNA_FIXED_UPDATE, log_frame_in_fixed, NULL);
}

/* FixedUpdate runs once per fixed step due, with the steps counted in
   integer ns: 0.05 s frames at a 1/60 s step give 2 steps in the first
   frame (50,000,000 < 3 * 16,666,667) and 3 in each after, as the
   remainder builds up. A scheduler that ran FixedUpdate once per frame, or
   accumulated seconds in floating point, logs other counts. A continuation
   re-queued from FixedUpdate runs at the next fixed step, not the same one. */
static void fixed_update_runs_once_per_fixed_step_due(void **state) {
  fixture *f = *state;
  int i;
  luna_loop_set_fixed_dt(f->loop, 16666667);
  /* re-queued from FixedUpdate: runs at the next fixed step */
  luna_enqueue(f->loop, LUNA_FIXED_UPDATE, log_frame_in_fixed, NULL);
  for (i = 0; i < 3; i++)
    assert_int_equal(luna_loop_frame(f->loop, 0.05), 0);
  ASSERT_LOG(1, 1, 2, 2, 2, 3, 3, 3);
}

static void fixed_steps_beyond_the_cap_are_dropped_and_counted(void **state) {
  fixture *f = *state;
  luna_config c = f->config;
  luna_loop *loop;
  luna_loop_stats st;
  c.max_fixed_steps = 3;
  c.fixed_dt_ns = 10000000;
  loop = renew(f, c);
  assert_int_equal(luna_loop_frame(loop, 0.105), 0); /* 10 steps, 5 ms left */
  luna_loop_get_stats(loop, &st);
  assert_int_equal(st.fixed_steps, 3);
  assert_int_equal(st.dropped_fixed_steps, 7);
  assert_int_equal(st.dropped_fixed_ns, 70000000);
  assert_int_equal(luna_loop_time(loop, LUNA_CLOCK_FIXED), 30000000);
  /* The 5 ms remainder is kept: 5 + 5 ms makes one step next frame. */
  assert_int_equal(luna_loop_begin_frame(loop, 0.005), 0);
  assert_int_equal(luna_loop_fixed_steps(loop), 1);
}

static void default_cap_is_eight_fixed_steps(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  assert_int_equal(luna_loop_frame(f->loop, 1.0), 0); /* 50 steps due */
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.fixed_steps, 8);
  assert_int_equal(st.dropped_fixed_steps, 42);
  assert_int_equal(st.dropped_fixed_ns, 42 * INT64_C(20000000));
}

static void time_scale_scales_the_accumulator_and_zero_stops_fixed_steps(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  luna_loop_set_time_scale(f->loop, 0.0);
  luna_loop_frame(f->loop, 1.0);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.fixed_steps, 0);
  assert_int_equal(st.dropped_fixed_steps, 0);
  luna_loop_set_time_scale(f->loop, 2.0);
  assert_int_equal(luna_loop_begin_frame(f->loop, 0.05), 0); /* 100 ms scaled */
  assert_int_equal(luna_loop_fixed_steps(f->loop), 5);
}

static void host_driven_run_of_fixed_update_consumes_a_step_and_advances_the_fixed_clock(void **state) {
  fixture *f = *state;
  assert_int_equal(luna_loop_begin_frame(f->loop, 0.04), 0);
  assert_int_equal(luna_loop_fixed_steps(f->loop), 2);
  assert_int_equal(luna_loop_run(f->loop, LUNA_FIXED_UPDATE), 0);
  assert_int_equal(luna_loop_fixed_steps(f->loop), 1);
  assert_int_equal(luna_loop_delta(f->loop), 20000000); /* until LastFixed */
  assert_int_equal(luna_loop_run(f->loop, LUNA_LAST_FIXED_UPDATE), 0);
  assert_int_equal(luna_loop_delta(f->loop), 40000000);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_FIXED), 20000000);
  /* Timings the host never runs simply never fire. */
  luna_enqueue(f->loop, LUNA_TIME_UPDATE, log_current, NULL);
  assert_int_equal(luna_loop_begin_frame(f->loop, 0.0), 0);
  assert_int_equal(luna_loop_fixed_steps(f->loop), 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG_EMPTY();
  assert_int_equal(luna_loop_frame_count(f->loop), 2);
}

/* ---- reentrancy ------------------------------------------------------------- */

static void try_drivers(luna_loop *loop, void *arg) {
  (void)arg;
  log_push(luna_loop_frame(loop, 0.1));
  log_push(luna_loop_frame_ns(loop, 1));
  log_push(luna_loop_begin_frame(loop, 0.1));
  log_push(luna_loop_run(loop, LUNA_LAST_UPDATE));
  log_push(luna_loop_reset(loop));
  luna_loop_free(loop); /* ignored: the loop is on the stack */
  log_push((long)luna_loop_frame_count(loop));
}

static void drivers_return_estate_from_inside_a_callback(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_UPDATE, try_drivers, NULL);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, 0);
}

static void try_drivers_from_hook(luna_loop *loop, luna_timing timing, void *ud) {
  (void)ud;
  if (timing == LUNA_UPDATE)
    try_drivers(loop, NULL);
}

static void drivers_return_estate_from_inside_a_host_hook(void **state) {
  fixture *f = *state;
  luna_config c = f->config;
  luna_loop *loop;
  c.hook = try_drivers_from_hook;
  loop = renew(f, c);
  assert_int_equal(luna_loop_frame(loop, 0.1), 0);
  ASSERT_LOG(LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, 1);
}

static void item_try_drivers(luna_loop *loop, void *arg) { try_drivers(loop, arg); }
static bool step_try_drivers(luna_loop *loop, void *arg) {
  try_drivers(loop, arg);
  return false;
}

static void drivers_return_estate_from_timers_and_items(void **state) {
  fixture *f = *state;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 0, item_try_drivers, NULL, NULL);
  luna_item_add(f->loop, LUNA_UPDATE, step_try_drivers, NULL, NULL);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, 0,
             LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, 0);
}

/* ---- stop -------------------------------------------------------------------- */

static void stop_fn(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  luna_loop_stop(loop);
}

static void stop_skips_the_rest_of_the_frame_and_drops_nothing(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_UPDATE, stop_fn, I2P(1));
  luna_enqueue(f->loop, LUNA_LAST_UPDATE, log_fn, I2P(2));
  assert_int_equal(luna_loop_frame(f->loop, 0.1), LUNA_ESTOPPED);
  ASSERT_LOG(1);
  assert_int_equal(luna_loop_current_timing(f->loop), -1);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1, 2);
}

static void stop_outside_a_run_does_nothing(void **state) {
  fixture *f = *state;
  luna_loop_stop(f->loop);
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(1));
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1);
}

static void stop_hook(luna_loop *loop, luna_timing timing, void *ud) {
  (void)ud;
  if (timing == LUNA_UPDATE)
    luna_loop_stop(loop);
}

static void stop_from_the_host_hook_skips_the_last_partner(void **state) {
  fixture *f = *state;
  luna_config c = f->config;
  luna_loop *loop;
  c.hook = stop_hook;
  loop = renew(f, c);
  luna_enqueue(loop, LUNA_UPDATE, log_fn, I2P(1));
  luna_enqueue(loop, LUNA_LAST_UPDATE, log_fn, I2P(2));
  assert_int_equal(luna_loop_frame(loop, 0.1), LUNA_ESTOPPED);
  ASSERT_LOG(1);
}

/* ---- one run: the four steps ---------------------------------------------- */

static bool log_step(luna_loop *loop, void *arg) {
  (void)loop;
  log_push((long)(intptr_t)arg);
  return true;
}

static void a_run_drains_posts_then_continuations_then_timers_then_items(void **state) {
  fixture *f = *state;
  luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(4), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 0, log_fn, I2P(3), NULL);
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(1));
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(2));
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2, 3, 4);
}

/* luna_loop_idle: true only while nothing would run by itself. Each kind
   of work (a continuation, a post still in the inbox, a timer, an item)
   makes the loop busy until it has run or been removed; a frame of an idle
   loop leaves it idle. */
static void idle_is_true_only_while_nothing_is_queued_armed_or_posted(void **state) {
  fixture *f = *state;
  luna_timer_id timer;
  luna_item_id item;
  assert_false(luna_loop_idle(NULL));
  assert_true(luna_loop_idle(f->loop));
  assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
  assert_true(luna_loop_idle(f->loop));
  luna_enqueue(f->loop, LUNA_LAST_TIME_UPDATE, log_fn, I2P(1));
  assert_false(luna_loop_idle(f->loop));
  assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
  assert_true(luna_loop_idle(f->loop));
  luna_post(f->loop, LUNA_INITIALIZATION, log_fn, I2P(2)); /* in a shard's stack */
  assert_false(luna_loop_idle(f->loop));
  assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
  assert_true(luna_loop_idle(f->loop));
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 1000, log_fn, I2P(3), &timer);
  assert_false(luna_loop_idle(f->loop));
  assert_int_equal(luna_timer_cancel(f->loop, timer), 0);
  assert_true(luna_loop_idle(f->loop));
  luna_item_add(f->loop, LUNA_FIXED_UPDATE, log_step, I2P(4), &item);
  assert_false(luna_loop_idle(f->loop));
  assert_int_equal(luna_item_remove(f->loop, item), 0);
  assert_true(luna_loop_idle(f->loop));
  ASSERT_LOG(1, 2);
}

/* ---- reset and listeners -------------------------------------------------- */

static void listener(luna_loop *loop, luna_event ev, void *ud) {
  luna_loop_stats st;
  luna_loop_get_stats(loop, &st);
  /* Listeners run before anything is dropped: they can still cancel. */
  log_push((long)ev * 100 + (long)(intptr_t)ud);
  log_push((long)st.timers[LUNA_UPDATE]);
  log_push(luna_loop_reset(loop)); /* no reset from a listener */
}

static void reset_calls_listeners_first_then_drops_everything_but_posts(void **state) {
  fixture *f = *state;
  luna_timer_id tid;
  luna_item_id iid;
  luna_loop_stats st;
  int t;
  luna_loop_frame(f->loop, 0.1);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 0, log_fn, I2P(-1), &tid);
  luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(-2), &iid);
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(-3));
  luna_post(f->loop, LUNA_UPDATE, log_fn, I2P(7));
  assert_int_equal(luna_loop_add_listener(f->loop, listener, I2P(1)), 0);
  assert_int_equal(luna_loop_add_listener(f->loop, listener, I2P(2)), 0);
  assert_int_equal(luna_loop_reset(f->loop), 0);
  ASSERT_LOG(101, 1, LUNA_ESTATE, 102, 1, LUNA_ESTATE);
  luna_loop_get_stats(f->loop, &st);
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    assert_int_equal(st.timers[t], 0);
    assert_int_equal(st.items[t], 0);
  }
  assert_int_equal(luna_timer_cancel(f->loop, tid), LUNA_ENOENT);
  assert_int_equal(luna_item_remove(f->loop, iid), LUNA_ENOENT);
  /* Clocks and frame counter keep going; the post is delivered. */
  assert_int_equal(luna_loop_frame_count(f->loop), 1);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 100000000);
  log_clear();
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(7);
  assert_int_equal(luna_loop_frame_count(f->loop), 2);
  /* The loop works normally after a reset. */
  luna_enqueue(f->loop, LUNA_UPDATE, log_fn, I2P(8));
  luna_loop_remove_listener(f->loop, listener, I2P(1));
  luna_loop_remove_listener(f->loop, listener, I2P(2));
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(7, 8);
}

static void reset_from_a_callback_is_estate_and_changes_nothing(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_UPDATE, try_drivers, NULL);
  luna_enqueue(f->loop, LUNA_LAST_UPDATE, log_fn, I2P(5));
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, LUNA_ESTATE, 1, 5);
}

static void self_removing_listener(luna_loop *loop, luna_event ev, void *ud) {
  log_push((long)ev * 100 + (long)(intptr_t)ud);
  assert_int_equal(luna_loop_remove_listener(loop, self_removing_listener, ud), 0);
}

static void listeners_may_remove_themselves_and_are_removed_by_fn_and_ud(void **state) {
  fixture *f = *state;
  luna_loop_add_listener(f->loop, self_removing_listener, I2P(1));
  luna_loop_add_listener(f->loop, self_removing_listener, I2P(2));
  luna_loop_add_listener(f->loop, listener, I2P(3));
  assert_int_equal(luna_loop_remove_listener(f->loop, listener, I2P(4)), LUNA_ENOENT);
  assert_int_equal(luna_loop_remove_listener(f->loop, listener, I2P(3)), 0);
  assert_int_equal(luna_loop_remove_listener(f->loop, listener, I2P(3)), LUNA_ENOENT);
  assert_int_equal(luna_loop_add_listener(f->loop, NULL, NULL), LUNA_EINVAL);
  luna_loop_reset(f->loop);
  luna_loop_reset(f->loop);
  ASSERT_LOG(101, 102);
}

static luna_timer_id free_tid;
static void free_listener(luna_loop *loop, luna_event ev, void *ud) {
  (void)ud;
  log_push((long)ev);
  /* The loop is still whole here: cancel what we own. */
  log_push(luna_timer_cancel(loop, free_tid));
}

static void free_tells_listeners_then_frees_everything_uncalled(void **state) {
  fixture *f = *state;
  int i;
  luna_loop_add_listener(f->loop, free_listener, NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 5, log_fn, I2P(-1), &free_tid);
  for (i = 0; i < 100; i++) {
    luna_timer_add(f->loop, (luna_timing)(i % 16), LUNA_TIMER_SCALED, 5, log_fn, I2P(-1), NULL);
    luna_item_add(f->loop, (luna_timing)(i % 16), log_step, I2P(-1), NULL);
    luna_enqueue(f->loop, (luna_timing)(i % 16), log_fn, I2P(-1));
    luna_post(f->loop, (luna_timing)(i % 16), log_fn, I2P(-1));
  }
  luna_loop_free(f->loop);
  ASSERT_LOG(LUNA_EVENT_FREE, 0);
  ASSERT_NO_LEAKS(&f->ca);
  assert_int_equal(luna_loop_new(&f->config, &f->loop), 0); /* for teardown */
}

static void listener_add_reports_enomem(void **state) {
  fixture *f = *state;
  counting_fail_after(&f->ca, 0);
  assert_int_equal(luna_loop_add_listener(f->loop, listener, NULL), LUNA_ENOMEM);
  counting_fail_after(&f->ca, -1);
  luna_loop_reset(f->loop);
  ASSERT_LOG_EMPTY();
}

/* ---- profiling ------------------------------------------------------------ */

/* A cost clock that advances 10 ns per read and counts its reads. */
static long g_cost_reads;
static luna_ns counting_cost(void *ud) {
  static luna_ns now;
  (void)ud;
  g_cost_reads++;
  return now += 10;
}

static void profiling_is_off_by_default_and_reads_no_clock(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  g_cost_reads = 0;
  luna_loop_set_cost_source(f->loop, counting_cost, NULL);
  assert_false(luna_loop_profiling(f->loop));
  assert_int_equal(luna_loop_frame(f->loop, 0.01), 0);
  assert_int_equal(g_cost_reads, 0);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.runs[LUNA_UPDATE], 1);
  assert_int_equal(st.runs[LUNA_FIXED_UPDATE], 0); /* 10 ms < one 20 ms step */
  assert_int_equal(st.spent_ns[LUNA_UPDATE], 0);
}

static void profiling_adds_the_cost_of_each_run_to_its_timing(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  g_cost_reads = 0;
  luna_loop_set_cost_source(f->loop, counting_cost, NULL);
  assert_int_equal(luna_loop_set_profiling(f->loop, true), 0);
  assert_true(luna_loop_profiling(f->loop));
  assert_int_equal(luna_loop_frame(f->loop, 0.02), 0); /* one fixed step */
  assert_int_equal(luna_loop_frame(f->loop, 0.02), 0);
  luna_loop_get_stats(f->loop, &st);
  /* two reads per run, 10 ns apart: 10 ns per run, 2 runs each */
  assert_int_equal(g_cost_reads, 2 * 2 * LUNA_TIMING_COUNT);
  for (int t = 0; t < LUNA_TIMING_COUNT; t++) {
    assert_int_equal(st.runs[t], 2);
    assert_int_equal(st.spent_ns[t], 20);
  }
  assert_int_equal(luna_loop_set_profiling(f->loop, false), 0);
  assert_int_equal(luna_loop_frame(f->loop, 0.02), 0);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.spent_ns[LUNA_UPDATE], 20); /* kept, not grown */
  assert_int_equal(luna_loop_set_profiling(NULL, true), LUNA_EINVAL);
}

/* The frame-cost history keeps the last profiled frames, oldest first, per
   timing and for the whole frame, from the run costs profiling already
   measures: a frame profiled with the 10-ns-per-read clock costs 10 ns per
   run, and frames run with profiling off leave no row behind. */
static void frame_costs_keep_the_last_profiled_frames_oldest_first(void **state) {
  fixture *f = *state;
  luna_ns out[LUNA_FRAME_HISTORY + 4];
  uint64_t reads;
  luna_loop_set_cost_source(f->loop, counting_cost, NULL);
  assert_int_equal(luna_loop_frame_costs(f->loop, -1, out, 4), 0);
  assert_int_equal(luna_loop_frame(f->loop, 0.01), 0); /* not profiled */
  assert_int_equal(luna_loop_frame_costs(f->loop, -1, out, 4), 0);
  luna_loop_set_profiling(f->loop, true);
  assert_int_equal(luna_loop_frame(f->loop, 0.005), 0); /* 15 ms: no fixed step */
  assert_int_equal(luna_loop_frame(f->loop, 0.02), 0);  /* 35 ms: one */
  assert_int_equal(luna_loop_frame_costs(f->loop, -1, out, 4), 2);
  assert_int_equal(out[0], 10 * (LUNA_TIMING_COUNT - 2));
  assert_int_equal(out[1], 10 * LUNA_TIMING_COUNT);
  assert_int_equal(luna_loop_frame_costs(f->loop, LUNA_FIXED_UPDATE, out, 4), 2);
  assert_int_equal(out[0], 0);
  assert_int_equal(out[1], 10);
  assert_int_equal(luna_loop_frame_costs(f->loop, -1, out, 1), 1);
  assert_int_equal(out[0], 10 * LUNA_TIMING_COUNT); /* the newest one */
  /* The ring keeps LUNA_FRAME_HISTORY frames and reading reads no clock. */
  for (int i = 0; i < LUNA_FRAME_HISTORY; i++)
    assert_int_equal(luna_loop_frame(f->loop, 0.02), 0);
  reads = (uint64_t)g_cost_reads;
  assert_int_equal(luna_loop_frame_costs(f->loop, -1, out, LUNA_FRAME_HISTORY + 4),
                   LUNA_FRAME_HISTORY);
  assert_int_equal(g_cost_reads, reads);
  assert_int_equal(out[0], 10 * LUNA_TIMING_COUNT);
  /* A host that runs timings itself is recorded at its next begin_frame. */
  assert_int_equal(luna_loop_begin_frame(f->loop, 0.01), 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  assert_int_equal(luna_loop_begin_frame(f->loop, 0.01), 0);
  assert_int_equal(luna_loop_frame_costs(f->loop, LUNA_UPDATE, out, 1), 1);
  assert_int_equal(out[0], 10);
  assert_int_equal(luna_loop_frame_costs(f->loop, -1, out, 1), 1);
  assert_int_equal(out[0], 10);
  assert_int_equal(luna_loop_frame_costs(f->loop, LUNA_TIMING_COUNT, out, 1), 0);
  assert_int_equal(luna_loop_frame_costs(f->loop, -2, out, 1), 0);
  assert_int_equal(luna_loop_frame_costs(NULL, -1, out, 1), 0);
  assert_int_equal(luna_loop_frame_costs(f->loop, -1, NULL, 1), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
      T(new_with_null_config_uses_the_defaults),
      T(new_rejects_negative_config_fields),
      T(new_reports_enomem_at_each_allocation_and_leaks_nothing),
      T(a_frame_runs_the_sixteen_timings_in_order_with_hooks_between_pairs),
      T(no_fixed_step_means_no_fixed_pair_and_no_fixed_hook),
      T(frame_rejects_a_bad_dt_and_does_not_begin_a_frame),
      T(fixed_steps_at_one_sixtieth_with_dt_0_05_are_2_then_3),
      T(fixed_update_runs_once_per_fixed_step_due),
      T(fixed_steps_beyond_the_cap_are_dropped_and_counted),
      T(default_cap_is_eight_fixed_steps),
      T(time_scale_scales_the_accumulator_and_zero_stops_fixed_steps),
      T(host_driven_run_of_fixed_update_consumes_a_step_and_advances_the_fixed_clock),
      T(drivers_return_estate_from_inside_a_callback),
      T(drivers_return_estate_from_inside_a_host_hook),
      T(drivers_return_estate_from_timers_and_items),
      T(stop_skips_the_rest_of_the_frame_and_drops_nothing),
      T(stop_outside_a_run_does_nothing),
      T(stop_from_the_host_hook_skips_the_last_partner),
      T(a_run_drains_posts_then_continuations_then_timers_then_items),
      T(idle_is_true_only_while_nothing_is_queued_armed_or_posted),
      T(reset_calls_listeners_first_then_drops_everything_but_posts),
      T(reset_from_a_callback_is_estate_and_changes_nothing),
      T(listeners_may_remove_themselves_and_are_removed_by_fn_and_ud),
      T(free_tells_listeners_then_frees_everything_uncalled),
      T(listener_add_reports_enomem),
      T(profiling_is_off_by_default_and_reads_no_clock),
      T(profiling_adds_the_cost_of_each_run_to_its_timing),
      T(frame_costs_keep_the_last_profiled_frames_oldest_first),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
