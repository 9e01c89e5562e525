/*
** test_driver.c: the frame driver and the virtual realtime source
** (lunaloop/driver.h). Fast mode: exact dt, frame counts, no waiting. The
** real-time grid: the next deadline moves by whole periods from the start,
** a late frame restarts it from now, the exact-dt mode keeps dt at the
** period, and a signal ends a wait early. Virtual realtime: the realtime
** clock follows the unscaled one, goes on from its last reading, and fires
** realtime timers with the frames. Real-mode tests assert the grid's
** arithmetic, never how long a frame took.
*/
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <cmocka.h>

#include "counting_alloc.h"
#include "lunaloop.h"
#include "test_log.h"
#include "loop_fixture.h"

#define PERIOD_60HZ INT64_C(16666667) /* round(1e9 / 60) */

static luna_ns fake_now;
static luna_ns fake_source(void *ud) {
  (void)ud;
  return fake_now;
}

static int setup_fake(void **state) {
  fake_now = INT64_C(7000000000000); /* a source with its own origin */
  return setup_with_realtime(state, fake_source);
}

/* An Update item that logs luna_loop_delta of each frame. */
static bool log_delta(luna_loop *loop, void *arg) {
  (void)arg;
  log_push((long)luna_loop_delta(loop));
  return true;
}

/* ---- virtual realtime --------------------------------------------------- */

static void virtual_realtime_follows_the_unscaled_clock(void **state) {
  fixture *f = *state;
  int i;
  assert_int_equal(luna_loop_use_virtual_realtime(f->loop), 0);
  luna_loop_set_time_scale(f->loop, 2.0);
  for (i = 0; i < 3; i++)
    assert_int_equal(luna_loop_frame_ns(f->loop, 100), 0);
  /* The scaled clock ran twice as fast; realtime kept to the unscaled. */
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 600);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_UNSCALED), 300);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_REALTIME), 300);
  /* The wall clock moving changes nothing. */
  fake_now += INT64_C(5000000000);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_REALTIME), 300);
}

static void virtual_realtime_goes_on_from_the_last_reading(void **state) {
  fixture *f = *state;
  assert_int_equal(luna_loop_frame_ns(f->loop, 1000), 0);
  fake_now += 40; /* the wall clock read 40 ns after creation */
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_REALTIME), 40);
  assert_int_equal(luna_loop_use_virtual_realtime(f->loop), 0);
  /* Installed when the unscaled clock read 1000: it goes on from 40. */
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_REALTIME), 40);
  assert_int_equal(luna_loop_frame_ns(f->loop, 250), 0);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_REALTIME), 290);
  /* And back to a wall clock: on from 290 again. */
  assert_int_equal(luna_loop_set_realtime_source(f->loop, fake_source, NULL), 0);
  fake_now += 10;
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_REALTIME), 300);
}

static void realtime_timers_fire_with_the_frames_under_virtual_realtime(void **state) {
  fixture *f = *state;
  int frame;
  assert_int_equal(luna_loop_use_virtual_realtime(f->loop), 0);
  assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_REALTIME, 3 * PERIOD_60HZ,
                                  log_fn, I2P(1), NULL),
                   0);
  for (frame = 1; frame <= 4; frame++) {
    assert_int_equal(luna_loop_frame_ns(f->loop, PERIOD_60HZ), 0);
    log_push(100 + frame);
  }
  ASSERT_LOG(101, 102, 1, 103, 104);
}

static void virtual_realtime_rejects_a_null_loop(void **state) {
  (void)state;
  assert_int_equal(luna_loop_use_virtual_realtime(NULL), LUNA_EINVAL);
}

/* ---- fast mode ------------------------------------------------------------ */

static void fast_frames_have_exactly_the_period_as_dt(void **state) {
  fixture *f = *state;
  luna_driver d;
  int i;
  assert_int_equal(luna_item_add(f->loop, LUNA_UPDATE, log_delta, NULL, NULL), 0);
  assert_int_equal(luna_driver_init(&d, f->loop, PERIOD_60HZ, LUNA_DRIVE_FAST), 0);
  for (i = 0; i < 5; i++) {
    assert_int_equal(luna_driver_remaining(&d), 0);
    assert_true(luna_driver_wait(&d));
    assert_int_equal(luna_driver_frame(&d), 0);
  }
  ASSERT_LOG(PERIOD_60HZ, PERIOD_60HZ, PERIOD_60HZ, PERIOD_60HZ, PERIOD_60HZ);
  assert_int_equal(d.frames, 5);
  assert_int_equal(luna_loop_frame_count(f->loop), 5);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_UNSCALED), 5 * PERIOD_60HZ);
}

static void fast_tick_returns_the_period_without_running_a_frame(void **state) {
  fixture *f = *state;
  luna_driver d;
  assert_int_equal(luna_driver_init(&d, f->loop, 1000, LUNA_DRIVE_FAST), 0);
  assert_int_equal(luna_driver_tick(&d), 1000);
  assert_int_equal(luna_driver_tick(&d), 1000);
  assert_int_equal(luna_loop_frame_count(f->loop), 0);
  assert_int_equal(d.frames, 0);
}

/* Stops the frame it runs in. */
static void stop_fn(luna_loop *loop, void *arg) {
  (void)arg;
  luna_loop_stop(loop);
}

static void a_stopped_frame_counts_and_a_refused_one_does_not(void **state) {
  fixture *f = *state;
  luna_driver d;
  assert_int_equal(luna_driver_init(&d, f->loop, 10, LUNA_DRIVE_FAST), 0);
  assert_int_equal(luna_enqueue(f->loop, LUNA_UPDATE, stop_fn, NULL), 0);
  assert_int_equal(luna_driver_frame(&d), LUNA_ESTOPPED);
  assert_int_equal(d.frames, 1);
  /* A frame that would carry the unscaled clock past its limit. */
  assert_int_equal(luna_driver_init(&d, f->loop, LUNA_CLOCK_MAX, LUNA_DRIVE_FAST), 0);
  assert_int_equal(luna_driver_frame(&d), LUNA_ERANGE);
  assert_int_equal(d.frames, 0);
  assert_int_equal(luna_loop_frame_count(f->loop), 1);
}

/* Runs the driver's frame from inside a callback: the loop refuses. */
static void nested_frame(luna_loop *loop, void *arg) {
  (void)loop;
  log_push(luna_driver_frame((luna_driver *)arg));
}

static void a_frame_from_inside_a_callback_is_refused(void **state) {
  fixture *f = *state;
  luna_driver d;
  assert_int_equal(luna_driver_init(&d, f->loop, 10, LUNA_DRIVE_FAST), 0);
  assert_int_equal(luna_enqueue(f->loop, LUNA_UPDATE, nested_frame, &d), 0);
  assert_int_equal(luna_driver_frame(&d), 0);
  ASSERT_LOG(LUNA_ESTATE);
  assert_int_equal(d.frames, 1);
  assert_int_equal(luna_loop_frame_count(f->loop), 1);
}

static void init_rejects_bad_arguments_and_leaves_the_driver(void **state) {
  fixture *f = *state;
  luna_driver d, before;
  memset(&d, 0x5a, sizeof d);
  before = d;
  assert_int_equal(luna_driver_init(NULL, f->loop, 10, LUNA_DRIVE_FAST), LUNA_EINVAL);
  assert_int_equal(luna_driver_init(&d, NULL, 10, LUNA_DRIVE_FAST), LUNA_EINVAL);
  assert_int_equal(luna_driver_init(&d, f->loop, -1, LUNA_DRIVE_FAST), LUNA_EINVAL);
  assert_int_equal(luna_driver_init(&d, f->loop, 10, (luna_drive_mode)3), LUNA_EINVAL);
  assert_int_equal(luna_driver_init(&d, f->loop, 10, (luna_drive_mode)-1), LUNA_EINVAL);
  assert_memory_equal(&d, &before, sizeof d);
  /* A period of 0: frames of dt 0, back to back. */
  assert_int_equal(luna_driver_init(&d, f->loop, 0, LUNA_DRIVE_FAST), 0);
  assert_int_equal(luna_driver_frame(&d), 0);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_UNSCALED), 0);
  assert_int_equal(luna_loop_frame_count(f->loop), 1);
}

/* ---- the real-time grid --------------------------------------------------- */

static luna_ns monotonic(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (luna_ns)ts.tv_sec * LUNA_NS_PER_SECOND + ts.tv_nsec;
}

static void the_grid_moves_by_whole_periods_from_the_start(void **state) {
  fixture *f = *state;
  const luna_ns hour = 3600 * LUNA_NS_PER_SECOND;
  luna_driver d;
  luna_ns before = monotonic(), start, dt, left;
  assert_int_equal(luna_driver_init(&d, f->loop, hour, LUNA_DRIVE_REAL), 0);
  start = d.last;
  assert_true(start >= before && start <= monotonic());
  assert_int_equal(d.next, start + hour);
  left = luna_driver_remaining(&d);
  assert_true(left > 0 && left <= hour);
  /* A frame begun early (the program did not wait): dt is what passed,
     and the next deadline is still on the grid, not an hour from now. */
  dt = luna_driver_tick(&d);
  assert_true(dt >= 0 && dt < hour);
  assert_int_equal(d.last, start + dt);
  assert_int_equal(d.next, start + 2 * hour);
}

static void a_frame_more_than_a_period_late_restarts_the_grid(void **state) {
  fixture *f = *state;
  luna_driver d;
  luna_ns start, now;
  assert_int_equal(luna_driver_init(&d, f->loop, 1, LUNA_DRIVE_REAL), 0);
  start = d.last;
  while ((now = monotonic()) <= start + 2)
    ; /* at least two 1 ns periods late */
  luna_driver_tick(&d);
  assert_true(d.last >= now);
  assert_int_equal(d.next, d.last + 1);
}

static void exact_dt_mode_paces_in_real_time_with_the_period_as_dt(void **state) {
  fixture *f = *state;
  const luna_ns hour = 3600 * LUNA_NS_PER_SECOND;
  luna_driver d;
  luna_ns start;
  assert_int_equal(luna_item_add(f->loop, LUNA_UPDATE, log_delta, NULL, NULL), 0);
  assert_int_equal(luna_driver_init(&d, f->loop, hour, LUNA_DRIVE_REAL_EXACT_DT), 0);
  start = d.last;
  assert_true(luna_driver_remaining(&d) > 0);
  assert_int_equal(luna_driver_frame(&d), 0);
  assert_int_equal(luna_driver_frame(&d), 0);
  ASSERT_LOG(hour, hour);
  assert_int_equal(d.next, start + 3 * hour);
  assert_int_equal(d.frames, 2);
}

static void on_alarm(int sig) { (void)sig; }

static void a_signal_ends_a_wait_early(void **state) {
  fixture *f = *state;
  luna_driver d;
  struct sigaction sa, old;
  struct itimerval it;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGALRM, &sa, &old), 0);
  memset(&it, 0, sizeof it);
  it.it_value.tv_usec = 20000; /* 20 ms, against a frame due in an hour */
  assert_int_equal(luna_driver_init(&d, f->loop, 3600 * LUNA_NS_PER_SECOND, LUNA_DRIVE_REAL), 0);
  assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
  assert_false(luna_driver_wait(&d));
  assert_true(luna_driver_remaining(&d) > 0);
  assert_int_equal(luna_loop_frame_count(f->loop), 0);
  sigaction(SIGALRM, &old, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup_fake, teardown)
      T(virtual_realtime_follows_the_unscaled_clock),
      T(virtual_realtime_goes_on_from_the_last_reading),
      T(realtime_timers_fire_with_the_frames_under_virtual_realtime),
      T(virtual_realtime_rejects_a_null_loop),
      T(fast_frames_have_exactly_the_period_as_dt),
      T(fast_tick_returns_the_period_without_running_a_frame),
      T(a_stopped_frame_counts_and_a_refused_one_does_not),
      T(a_frame_from_inside_a_callback_is_refused),
      T(init_rejects_bad_arguments_and_leaves_the_driver),
      T(the_grid_moves_by_whole_periods_from_the_start),
      T(a_frame_more_than_a_period_late_restarts_the_grid),
      T(exact_dt_mode_paces_in_real_time_with_the_period_as_dt),
      T(a_signal_ends_a_wait_early),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
