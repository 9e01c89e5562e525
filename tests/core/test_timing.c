/*
** test_timing.c: timing and clock names, seconds <-> ns, clamped addition,
** and the error table. Pure functions, so no loop (and nothing to leak).
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lunaloop.h"

static const char *const names[] = {
    "Initialization", "LastInitialization", "EarlyUpdate",    "LastEarlyUpdate",
    "FixedUpdate",    "LastFixedUpdate",    "PreUpdate",      "LastPreUpdate",
    "Update",         "LastUpdate",         "PreLateUpdate",  "LastPreLateUpdate",
    "PostLateUpdate", "LastPostLateUpdate", "TimeUpdate",     "LastTimeUpdate"};

static void timing_names_match_the_design_table(void **state) {
  int t;
  (void)state;
  for (t = 0; t < LUNA_TIMING_COUNT; t++)
    assert_string_equal(luna_timing_name(t), names[t]);
  assert_null(luna_timing_name(-1));
  assert_null(luna_timing_name(LUNA_TIMING_COUNT));
  assert_int_equal(LUNA_UPDATE, 8);
  assert_int_equal(LUNA_LAST_TIME_UPDATE, 15);
}

static void timing_parse_round_trips_every_name(void **state) {
  int t;
  (void)state;
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    luna_timing out = (luna_timing)-1;
    assert_int_equal(luna_timing_parse(names[t], strlen(names[t]), &out), 0);
    assert_int_equal(out, t);
  }
}

static void timing_parse_is_case_sensitive_and_length_delimited(void **state) {
  luna_timing out = LUNA_INITIALIZATION;
  (void)state;
  assert_int_equal(luna_timing_parse("update", 6, &out), LUNA_EINVAL);
  assert_int_equal(luna_timing_parse("UPDATE", 6, &out), LUNA_EINVAL);
  assert_int_equal(luna_timing_parse("Updte", 5, &out), LUNA_EINVAL);
  assert_int_equal(luna_timing_parse("Update", 5, &out), LUNA_EINVAL); /* "Updat" */
  assert_int_equal(luna_timing_parse("", 0, &out), LUNA_EINVAL);
  assert_int_equal(luna_timing_parse(NULL, 0, &out), LUNA_EINVAL);
  assert_int_equal(out, LUNA_INITIALIZATION); /* untouched on error */
  /* Only `len` bytes count: no NUL needed, trailing bytes ignored. */
  assert_int_equal(luna_timing_parse("UpdateXYZ", 6, &out), 0);
  assert_int_equal(out, LUNA_UPDATE);
  assert_int_equal(luna_timing_parse("LastUpdate\0junk", 10, &out), 0);
  assert_int_equal(out, LUNA_LAST_UPDATE);
}

static void timing_list_names_all_sixteen_in_order(void **state) {
  char want[512] = "";
  int t;
  (void)state;
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    if (t > 0)
      strcat(want, ", ");
    strcat(want, names[t]);
  }
  assert_string_equal(luna_timing_list(), want);
}

static void first_timings_are_even_and_pair_with_the_next(void **state) {
  (void)state;
  assert_true(LUNA_TIMING_IS_FIRST(LUNA_FIXED_UPDATE));
  assert_false(LUNA_TIMING_IS_FIRST(LUNA_LAST_FIXED_UPDATE));
  assert_true(LUNA_TIMING_IS_FIRST(LUNA_UPDATE));
  assert_int_equal(LUNA_UPDATE + 1, LUNA_LAST_UPDATE);
}

static void clock_names_and_parse(void **state) {
  static const char *const cn[] = {"scaled", "unscaled", "realtime", "fixed"};
  luna_clock out = LUNA_CLOCK_SCALED;
  int c;
  (void)state;
  for (c = 0; c < LUNA_CLOCK_COUNT; c++) {
    assert_string_equal(luna_clock_name(c), cn[c]);
    assert_int_equal(luna_clock_parse(cn[c], strlen(cn[c]), &out), 0);
    assert_int_equal(out, c);
  }
  assert_null(luna_clock_name(4));
  assert_null(luna_clock_name(-1));
  assert_int_equal(luna_clock_parse("Scaled", 6, &out), LUNA_EINVAL);
  assert_int_equal(luna_clock_parse("real", 4, &out), LUNA_EINVAL);
  assert_int_equal(out, LUNA_CLOCK_FIXED);
}

static void seconds_to_ns_rounds_to_nearest(void **state) {
  luna_ns ns;
  (void)state;
  assert_int_equal(luna_seconds_to_ns(0.1, &ns), 0);
  assert_int_equal(ns, 100000000);
  assert_int_equal(luna_seconds_to_ns(1.0 / 60.0, &ns), 0);
  assert_int_equal(ns, 16666667); /* round(1e9 / 60): the 60 Hz frame of --hz */
  assert_int_equal(luna_seconds_to_ns(1.0 / 50.0, &ns), 0);
  assert_int_equal(ns, 20000000);
  assert_int_equal(luna_seconds_to_ns(1.0 / 3.0, &ns), 0);
  assert_int_equal(ns, 333333333);
  assert_int_equal(luna_seconds_to_ns(2.0 / 3.0, &ns), 0);
  assert_int_equal(ns, 666666667);
  assert_int_equal(luna_seconds_to_ns(0.4e-9, &ns), 0);
  assert_int_equal(ns, 0);
  assert_int_equal(luna_seconds_to_ns(0.6e-9, &ns), 0);
  assert_int_equal(ns, 1);
  assert_int_equal(luna_seconds_to_ns(1.5e-9, &ns), 0);
  assert_int_equal(ns, 2);
  assert_int_equal(luna_seconds_to_ns(0.0, &ns), 0);
  assert_int_equal(ns, 0);
  assert_int_equal(luna_seconds_to_ns(-0.0, &ns), 0);
  assert_int_equal(ns, 0);
  assert_int_equal(luna_seconds_to_ns(3600.0, &ns), 0);
  assert_int_equal(ns, INT64_C(3600000000000));
}

static void seconds_to_ns_rejects_negative_nan_and_infinite(void **state) {
  luna_ns ns = 42;
  (void)state;
  assert_int_equal(luna_seconds_to_ns(-1.0, &ns), LUNA_EINVAL);
  assert_int_equal(luna_seconds_to_ns(-1e-12, &ns), LUNA_EINVAL);
  assert_int_equal(luna_seconds_to_ns(NAN, &ns), LUNA_EINVAL);
  assert_int_equal(luna_seconds_to_ns(INFINITY, &ns), LUNA_EINVAL);
  assert_int_equal(luna_seconds_to_ns(-INFINITY, &ns), LUNA_EINVAL);
  assert_int_equal(ns, 42); /* untouched */
}

static void seconds_to_ns_clamps_to_ns_max(void **state) {
  luna_ns ns;
  (void)state;
  assert_int_equal(luna_seconds_to_ns(1e300, &ns), 0);
  assert_int_equal(ns, LUNA_NS_MAX);
  assert_int_equal(luna_seconds_to_ns(5e9, &ns), 0); /* 5e18 ns > 2^62 */
  assert_int_equal(ns, LUNA_NS_MAX);
  assert_int_equal(luna_seconds_to_ns(4e9, &ns), 0); /* 4e18 ns < 2^62 */
  assert_int_equal(ns, INT64_C(4000000000000000000));
}

static void ns_to_seconds_converts(void **state) {
  (void)state;
  assert_true(luna_ns_to_seconds(1500000000) == 1.5);
  assert_true(luna_ns_to_seconds(0) == 0.0);
  assert_true(luna_ns_to_seconds(-250000000) == -0.25);
}

static void ns_add_clamps_both_ways(void **state) {
  (void)state;
  assert_int_equal(luna_ns_add(1, 2), 3);
  assert_int_equal(luna_ns_add(-5, 2), -3);
  assert_int_equal(luna_ns_add(LUNA_NS_MAX, 1), LUNA_NS_MAX);
  assert_int_equal(luna_ns_add(LUNA_NS_MAX, LUNA_NS_MAX), LUNA_NS_MAX);
  assert_int_equal(luna_ns_add(-LUNA_NS_MAX, -1), -LUNA_NS_MAX);
  assert_int_equal(luna_ns_add(INT64_MAX, INT64_MAX), LUNA_NS_MAX);
  assert_int_equal(luna_ns_add(INT64_MIN, INT64_MIN), -LUNA_NS_MAX);
  assert_int_equal(luna_ns_add(INT64_MAX, INT64_MIN), -1);
  assert_int_equal(luna_ns_add(LUNA_NS_MAX - 1, 1), LUNA_NS_MAX);
  assert_int_equal(luna_ns_add(LUNA_NS_MAX, -1), LUNA_NS_MAX - 1);
}

static void error_table_names_and_describes_every_code(void **state) {
  (void)state;
  assert_string_equal(luna_err_name(LUNA_EINVAL), "EINVAL");
  assert_string_equal(luna_err_name(LUNA_ENOMEM), "ENOMEM");
  assert_string_equal(luna_err_name(LUNA_ESTATE), "ESTATE");
  assert_string_equal(luna_err_name(LUNA_ENOENT), "ENOENT");
  assert_string_equal(luna_err_name(LUNA_ESTOPPED), "ESTOPPED");
  assert_string_equal(luna_err_name(LUNA_EALREADY), "EALREADY");
  assert_string_equal(luna_err_name(LUNA_ERANGE), "ERANGE");
  assert_string_equal(luna_strerror(LUNA_ERANGE),
                      "a clock would pass its limit (LUNA_CLOCK_MAX, 2^61 ns: about 73 years)");
  assert_string_equal(luna_err_name(-99), "UNKNOWN");
  assert_string_equal(luna_strerror(LUNA_EINVAL), "invalid argument");
  assert_string_equal(luna_strerror(LUNA_ENOMEM), "out of memory");
  assert_string_equal(luna_strerror(LUNA_ESTOPPED), "the loop was stopped");
  assert_string_equal(luna_strerror(-99), "unknown error");
  assert_string_equal(luna_strerror(12), "unknown error");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(timing_names_match_the_design_table),
      cmocka_unit_test(timing_parse_round_trips_every_name),
      cmocka_unit_test(timing_parse_is_case_sensitive_and_length_delimited),
      cmocka_unit_test(timing_list_names_all_sixteen_in_order),
      cmocka_unit_test(first_timings_are_even_and_pair_with_the_next),
      cmocka_unit_test(clock_names_and_parse),
      cmocka_unit_test(seconds_to_ns_rounds_to_nearest),
      cmocka_unit_test(seconds_to_ns_rejects_negative_nan_and_infinite),
      cmocka_unit_test(seconds_to_ns_clamps_to_ns_max),
      cmocka_unit_test(ns_to_seconds_converts),
      cmocka_unit_test(ns_add_clamps_both_ways),
      cmocka_unit_test(error_table_names_and_describes_every_code),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
