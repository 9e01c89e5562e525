/*
** test_clock.c: the four clocks. Origins at 0, scaled vs unscaled advance,
** when a time-scale change applies, rounding of scaled dt, delta inside and
** outside fixed steps, the default monotonic source, and replacing the
** realtime source (continuity).
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
#include "loop_fixture.h"


static luna_ns src_a_now, src_b_now;
static luna_ns src_a(void *ud) {
  (void)ud;
  return src_a_now;
}
static luna_ns src_b(void *ud) {
  assert_ptr_equal(ud, &src_b_now);
  return src_b_now;
}

static int setup_src_a(void **state) {
  src_a_now = INT64_C(5000000000000); /* a source with its own origin */
  return setup_with_realtime(state, src_a);
}


static void every_clock_reads_zero_at_creation(void **state) {
  fixture *f = *state;
  int c;
  (void)state;
  for (c = 0; c < LUNA_CLOCK_COUNT; c++)
    assert_int_equal(luna_loop_time(f->loop, (luna_clock)c), 0);
  assert_int_equal(luna_loop_time(f->loop, (luna_clock)9), 0);
  assert_int_equal(luna_loop_frame_count(f->loop), 0);
  assert_int_equal(luna_loop_delta(f->loop), 0);
  assert_true(luna_loop_time_scale(f->loop) == 1.0);
}

static void scaled_and_unscaled_advance_per_frame(void **state) {
  fixture *f = *state;
  int i;
  for (i = 0; i < 10; i++)
    luna_loop_frame(f->loop, 0.1);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 1000000000);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_UNSCALED), 1000000000);
  luna_loop_set_time_scale(f->loop, 0.5);
  luna_loop_frame(f->loop, 0.1);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 1050000000);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_UNSCALED), 1100000000);
  assert_int_equal(luna_loop_delta(f->loop), 50000000);
  assert_int_equal(luna_loop_unscaled_delta(f->loop), 100000000);
  /* The realtime source did not move: realtime did not either. */
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_REALTIME), 0);
}

static void scaled_dt_rounds_to_nearest_ns(void **state) {
  fixture *f = *state;
  luna_loop_set_time_scale(f->loop, 0.5);
  luna_loop_frame_ns(f->loop, 3); /* 1.5 -> 2 */
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 2);
  luna_loop_set_time_scale(f->loop, 1.0 / 3.0);
  luna_loop_frame_ns(f->loop, 100); /* 33.33 -> 33 */
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 35);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_UNSCALED), 103);
}

/* Sets the time scale to 2 from inside Update and logs the scaled delta. */
static void scale_up(luna_loop *loop, void *arg) {
  (void)arg;
  assert_int_equal(luna_loop_set_time_scale(loop, 2.0), 0);
  log_push((long)luna_loop_delta(loop));
}

static void log_delta(luna_loop *loop, void *arg) {
  (void)arg;
  log_push((long)luna_loop_delta(loop));
}

static void time_scale_change_applies_from_the_next_frames_advance(void **state) {
  fixture *f = *state;
  luna_loop_frame_ns(f->loop, 1000);
  luna_enqueue(f->loop, LUNA_UPDATE, scale_up, NULL);
  luna_enqueue(f->loop, LUNA_LAST_UPDATE, log_delta, NULL);
  luna_loop_frame_ns(f->loop, 1000);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 2000);
  luna_enqueue(f->loop, LUNA_UPDATE, log_delta, NULL);
  luna_loop_frame_ns(f->loop, 1000);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 4000);
  ASSERT_LOG(1000, 1000, 2000);
  assert_true(luna_loop_time_scale(f->loop) == 2.0);
}

static void time_scale_rejects_negative_nan_and_infinite(void **state) {
  fixture *f = *state;
  assert_int_equal(luna_loop_set_time_scale(f->loop, -0.5), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_time_scale(f->loop, NAN), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_time_scale(f->loop, INFINITY), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_time_scale(f->loop, 1e300), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_time_scale(f->loop, LUNA_TIME_SCALE_MAX * 2), LUNA_EINVAL);
  assert_true(luna_loop_time_scale(f->loop) == 1.0);
  assert_int_equal(luna_loop_set_time_scale(f->loop, 0.0), 0);
  luna_loop_frame(f->loop, 0.5);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 0);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_UNSCALED), 500000000);
}

static void delta_is_fixed_dt_inside_a_fixed_step_only(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_FIXED_UPDATE, log_delta, NULL);
  luna_enqueue(f->loop, LUNA_LAST_FIXED_UPDATE, log_delta, NULL);
  luna_enqueue(f->loop, LUNA_UPDATE, log_delta, NULL);
  luna_enqueue(f->loop, LUNA_EARLY_UPDATE, log_delta, NULL);
  luna_loop_set_time_scale(f->loop, 0.5);
  luna_loop_frame(f->loop, 0.1); /* scaled dt 50 ms: 2 steps of 20 ms */
  ASSERT_LOG(50000000, 20000000, 20000000, 50000000);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_FIXED), 40000000);
  assert_int_equal(luna_loop_delta(f->loop), 50000000);
}

static void realtime_source_replacement_keeps_the_clock_continuous(void **state) {
  fixture *f = *state;
  src_a_now += 700;
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_REALTIME), 700);
  src_b_now = -123456789; /* any origin */
  assert_int_equal(luna_loop_set_realtime_source(f->loop, src_b, &src_b_now), 0);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_REALTIME), 700);
  src_a_now += 1000000; /* the old source no longer counts */
  src_b_now += 50;
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_REALTIME), 750);
  /* Back to CLOCK_MONOTONIC: continues from 750 and never goes back. */
  assert_int_equal(luna_loop_set_realtime_source(f->loop, NULL, NULL), 0);
  {
    luna_ns a = luna_loop_time(f->loop, LUNA_CLOCK_REALTIME);
    luna_ns b = luna_loop_time(f->loop, LUNA_CLOCK_REALTIME);
    assert_true(a >= 750 && a < 750 + INT64_C(1000000000));
    assert_true(b >= a);
  }
}

static void a_source_installed_right_after_creation_starts_at_zero(void **state) {
  fixture *f = *state;
  luna_loop *loop;
  src_b_now = 42;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  luna_loop_set_realtime_source(loop, src_b, &src_b_now);
  assert_int_equal(luna_loop_time(loop, LUNA_CLOCK_REALTIME), 0);
  src_b_now += 16666667;
  assert_int_equal(luna_loop_time(loop, LUNA_CLOCK_REALTIME), 16666667);
  luna_loop_free(loop);
  (void)f;
}

static void default_realtime_is_monotonic_from_zero(void **state) {
  fixture *f = *state;
  luna_loop *loop;
  luna_ns a, b;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  a = luna_loop_time(loop, LUNA_CLOCK_REALTIME);
  b = luna_loop_time(loop, LUNA_CLOCK_REALTIME);
  assert_true(a >= 0 && a < INT64_C(1000000000));
  assert_true(b >= a);
  luna_loop_free(loop);
  (void)f;
}

/* Regression: luna_loop_frame(loop, 1e10) clamped the clocks at 2^62 ns for
   good, after which every delay ended at the next frame. A frame that would
   push a clock past LUNA_CLOCK_MAX is refused and changes nothing. */
static void a_frame_that_would_overflow_a_clock_is_refused(void **state) {
  fixture *f = *state;
  assert_int_equal(luna_loop_frame(f->loop, 1e10), LUNA_ERANGE);
  assert_int_equal(luna_loop_frame_count(f->loop), 0);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_UNSCALED), 0);
  assert_int_equal(luna_loop_frame_ns(f->loop, LUNA_CLOCK_MAX), 0);
  assert_int_equal(luna_loop_frame_ns(f->loop, 1), LUNA_ERANGE);
  /* with a large time scale it is the scaled clock that would overflow */
  assert_int_equal(luna_loop_set_time_scale(f->loop, LUNA_TIME_SCALE_MAX), 0);
  assert_int_equal(luna_loop_frame(f->loop, 0.0), 0);
}

static void a_huge_time_scale_cannot_saturate_the_scaled_clock(void **state) {
  fixture *f = *state;
  assert_int_equal(luna_loop_set_time_scale(f->loop, LUNA_TIME_SCALE_MAX), 0);
  /* one hour at 1e6 is 114 years of scaled time: refused, nothing moves */
  assert_int_equal(luna_loop_frame(f->loop, 3600.0), LUNA_ERANGE);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 0);
  assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
  assert_true(luna_loop_time(f->loop, LUNA_CLOCK_SCALED) > 0);
}

static void fixed_dt_setter_validates(void **state) {
  fixture *f = *state;
  assert_int_equal(luna_loop_fixed_dt(f->loop), 20000000);
  assert_int_equal(luna_loop_set_fixed_dt(f->loop, 0), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_fixed_dt(f->loop, -5), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_fixed_dt(f->loop, 16666667), 0);
  assert_int_equal(luna_loop_fixed_dt(f->loop), 16666667);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup_src_a, teardown)
      T(every_clock_reads_zero_at_creation),
      T(scaled_and_unscaled_advance_per_frame),
      T(scaled_dt_rounds_to_nearest_ns),
      T(time_scale_change_applies_from_the_next_frames_advance),
      T(time_scale_rejects_negative_nan_and_infinite),
      T(delta_is_fixed_dt_inside_a_fixed_step_only),
      T(realtime_source_replacement_keeps_the_clock_continuous),
      T(a_source_installed_right_after_creation_starts_at_zero),
      T(default_realtime_is_monotonic_from_zero),
      T(fixed_dt_setter_validates),
      T(a_frame_that_would_overflow_a_clock_is_refused),
      T(a_huge_time_scale_cannot_saturate_the_scaled_clock),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
