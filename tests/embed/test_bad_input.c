/*
** test_bad_input.c: every public C function given bad input that it can
** detect (a NULL loop or state, a NULL output pointer, an unknown timing,
** clock or timer kind, a NULL callback, a bad dt) returns LUNA_EINVAL, or,
** when it returns a value rather than a code, a harmless one (0, NULL,
** false, -1), and never crashes. What cannot be detected (a freed loop, a
** released promise whose memory was reused, the wrong thread) is written
** in the headers; promises are covered by test_promise.c.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "embed_util.h"

static void nop(luna_loop *loop, void *arg) {
  (void)loop;
  (void)arg;
}
static bool step(luna_loop *loop, void *arg) {
  (void)loop;
  (void)arg;
  return true;
}
static void listener(luna_loop *loop, luna_event event, void *ud) {
  (void)loop;
  (void)event;
  (void)ud;
}
static luna_ns clock_fn(void *ud) {
  (void)ud;
  return 0;
}

static void a_null_loop_is_refused_everywhere(void **state) {
  luna_loop_stats st;
  luna_timer_id tid = {0};
  luna_item_id iid = {0};
  (void)state;
  assert_int_equal(luna_loop_new(NULL, NULL), LUNA_EINVAL);
  luna_loop_free(NULL);
  assert_int_equal(luna_loop_reset(NULL), LUNA_EINVAL);
  assert_int_equal(luna_loop_reserve_posts(NULL, 10), LUNA_EINVAL);
  assert_int_equal(luna_loop_add_listener(NULL, listener, NULL), LUNA_EINVAL);
  assert_int_equal(luna_loop_remove_listener(NULL, listener, NULL), LUNA_EINVAL);
  assert_int_equal(luna_loop_frame(NULL, 0.01), LUNA_EINVAL);
  assert_int_equal(luna_loop_frame_ns(NULL, 1), LUNA_EINVAL);
  assert_int_equal(luna_loop_begin_frame(NULL, 0.01), LUNA_EINVAL);
  assert_int_equal(luna_loop_begin_frame_ns(NULL, 1), LUNA_EINVAL);
  assert_int_equal(luna_loop_run(NULL, LUNA_UPDATE), LUNA_EINVAL);
  luna_loop_stop(NULL);
  assert_int_equal(luna_loop_fixed_steps(NULL), 0);
  assert_int_equal(luna_loop_frame_count(NULL), 0);
  assert_int_equal(luna_loop_time(NULL, LUNA_CLOCK_SCALED), 0);
  assert_int_equal(luna_loop_delta(NULL), 0);
  assert_int_equal(luna_loop_unscaled_delta(NULL), 0);
  assert_int_equal(luna_loop_set_time_scale(NULL, 1.0), LUNA_EINVAL);
  assert_true(luna_loop_time_scale(NULL) == 0.0);
  assert_int_equal(luna_loop_set_fixed_dt(NULL, 1000), LUNA_EINVAL);
  assert_int_equal(luna_loop_fixed_dt(NULL), 0);
  assert_int_equal(luna_loop_set_realtime_source(NULL, clock_fn, NULL), LUNA_EINVAL);
  assert_int_equal(luna_loop_current_timing(NULL), -1);
  memset(&st, 0xff, sizeof st);
  luna_loop_get_stats(NULL, &st);
  assert_int_equal(st.frames, 0);
  assert_int_equal(luna_loop_set_profiling(NULL, true), LUNA_EINVAL);
  assert_false(luna_loop_profiling(NULL));
  assert_int_equal(luna_enqueue(NULL, LUNA_UPDATE, nop, NULL), LUNA_EINVAL);
  assert_int_equal(luna_purge(NULL, NULL, NULL), 0);
  assert_int_equal(luna_post(NULL, LUNA_UPDATE, nop, NULL), LUNA_EINVAL);
  assert_int_equal(luna_timer_add(NULL, LUNA_UPDATE, LUNA_TIMER_FRAME, 1, nop, NULL, &tid), LUNA_EINVAL);
  assert_int_equal(luna_timer_cancel(NULL, tid), LUNA_EINVAL);
  assert_int_equal(luna_item_add(NULL, LUNA_UPDATE, step, NULL, &iid), LUNA_EINVAL);
  assert_int_equal(luna_item_add_ex(NULL, LUNA_UPDATE, step, NULL, NULL, &iid), LUNA_EINVAL);
  assert_int_equal(luna_item_remove(NULL, iid), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_budget(NULL, LUNA_UPDATE, 0), LUNA_EINVAL);
  assert_int_equal(luna_loop_budget(NULL, LUNA_UPDATE), 0);
  assert_int_equal(luna_loop_set_cost_source(NULL, clock_fn, NULL), LUNA_EINVAL);
}

static void unknown_timings_clocks_kinds_and_bad_values_are_refused(void **state) {
  luna_loop *loop;
  luna_config bad;
  luna_timing t = LUNA_UPDATE;
  luna_clock c = LUNA_CLOCK_SCALED;
  luna_ns ns = 7;
  luna_timer_id tid = {0};
  luna_item_id iid = {0};
  static const int timings[] = {-1, LUNA_TIMING_COUNT, 99};
  size_t i;
  (void)state;
  memset(&bad, 0, sizeof bad);
  bad.fixed_dt_ns = -1;
  assert_int_equal(luna_loop_new(&bad, &loop), LUNA_EINVAL);
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  for (i = 0; i < sizeof timings / sizeof timings[0]; i++) {
    luna_timing bt = (luna_timing)timings[i];
    assert_int_equal(luna_loop_run(loop, bt), LUNA_EINVAL);
    assert_int_equal(luna_enqueue(loop, bt, nop, NULL), LUNA_EINVAL);
    assert_int_equal(luna_post(loop, bt, nop, NULL), LUNA_EINVAL);
    assert_int_equal(luna_timer_add(loop, bt, LUNA_TIMER_FRAME, 1, nop, NULL, &tid), LUNA_EINVAL);
    assert_int_equal(luna_item_add(loop, bt, step, NULL, &iid), LUNA_EINVAL);
    assert_int_equal(luna_loop_set_budget(loop, bt, 0), LUNA_EINVAL);
    assert_int_equal(luna_loop_budget(loop, bt), 0);
    assert_null(luna_timing_name(timings[i]));
  }
  assert_int_equal(luna_timer_add(loop, LUNA_UPDATE, (luna_timer_kind)LUNA_TIMER_KIND_COUNT, 1, nop,
                                  NULL, &tid),
                   LUNA_EINVAL);
  assert_int_equal(luna_timer_add(loop, LUNA_UPDATE, (luna_timer_kind)-1, 1, nop, NULL, &tid),
                   LUNA_EINVAL);
  assert_int_equal(luna_loop_time(loop, (luna_clock)LUNA_CLOCK_COUNT), 0);
  assert_null(luna_clock_name(LUNA_CLOCK_COUNT));
  /* NULL callbacks */
  assert_int_equal(luna_enqueue(loop, LUNA_UPDATE, NULL, NULL), LUNA_EINVAL);
  assert_int_equal(luna_post(loop, LUNA_UPDATE, NULL, NULL), LUNA_EINVAL);
  assert_int_equal(luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 1, NULL, NULL, &tid), LUNA_EINVAL);
  assert_int_equal(luna_item_add(loop, LUNA_UPDATE, NULL, NULL, &iid), LUNA_EINVAL);
  assert_int_equal(luna_loop_add_listener(loop, NULL, NULL), LUNA_EINVAL);
  /* bad numbers */
  assert_int_equal(luna_loop_frame(loop, -1.0), LUNA_EINVAL);
  assert_int_equal(luna_loop_frame(loop, NAN), LUNA_EINVAL);
  assert_int_equal(luna_loop_frame(loop, INFINITY), LUNA_EINVAL);
  assert_int_equal(luna_loop_frame_ns(loop, -5), LUNA_EINVAL);
  assert_int_equal(luna_loop_begin_frame(loop, -1.0), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_time_scale(loop, -1.0), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_fixed_dt(loop, 0), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_budget(loop, LUNA_UPDATE, -1), LUNA_EINVAL);
  /* parsers: unknown names and NULL pointers */
  assert_int_equal(luna_timing_parse("Updte", 5, &t), LUNA_EINVAL);
  assert_int_equal(luna_timing_parse(NULL, 3, &t), LUNA_EINVAL);
  assert_int_equal(luna_timing_parse("Update", 6, NULL), LUNA_EINVAL);
  assert_int_equal(t, LUNA_UPDATE);
  assert_int_equal(luna_clock_parse("sundial", 7, &c), LUNA_EINVAL);
  assert_int_equal(luna_clock_parse("scaled", 6, NULL), LUNA_EINVAL);
  assert_int_equal(luna_seconds_to_ns(-1.0, &ns), LUNA_EINVAL);
  assert_int_equal(luna_seconds_to_ns(1.0, NULL), LUNA_EINVAL);
  assert_int_equal(ns, 7);
  assert_string_equal(luna_strerror(12345), "unknown error");
  assert_string_equal(luna_err_name(12345), "UNKNOWN");
  /* nothing above changed the loop */
  assert_int_equal(luna_loop_frame_count(loop), 0);
  luna_loop_free(loop);
}

static void a_null_or_bare_lua_state_is_refused_everywhere(void **state) {
  luna_loop *loop;
  lua_State *bare;
  luna_promise *p = NULL;
  int code = 42;
  uint64_t counts[LUNA_TIMING_COUNT + 1];
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  bare = luaL_newstate(); /* no binding */
  assert_int_equal(luna_lua_attach(NULL, loop), LUNA_EINVAL);
  assert_int_equal(luna_lua_attach(bare, NULL), LUNA_EINVAL);
  assert_null(luna_lua_loop(NULL));
  assert_null(luna_lua_loop(bare));
  assert_int_equal(luna_lua_task_count(NULL), 0);
  assert_int_equal(luna_lua_callback_count(NULL), 0);
  assert_int_equal(luna_lua_error_count(NULL), 0);
  assert_false(luna_lua_exit_requested(NULL, &code));
  assert_int_equal(code, 42);
  assert_int_equal(luna_lua_cancel_all(NULL), 0);
  assert_int_equal(luna_lua_spawn(NULL, 0, NULL), LUNA_EINVAL);
  lua_pushcfunction(bare, luaopen_base);
  assert_int_equal(luna_lua_spawn(bare, 0, NULL), LUNA_EINVAL);
  lua_settop(bare, 0);
  assert_int_equal(luna_lua_set_observer(NULL, NULL), LUNA_EINVAL);
  assert_int_equal(luna_lua_resume_counts(NULL, counts), 0);
  assert_null(luna_lua_tostring(NULL, 1)); /* this used to crash */
  luna_lua_guard_interrupts(NULL);
  assert_int_equal(luna_lua_promise_new(NULL, LUNA_UPDATE, &p), LUNA_EINVAL);
  assert_int_equal(luna_lua_promise_new(bare, LUNA_UPDATE, &p), LUNA_EINVAL);
  assert_null(p);
  /* A state without the standard libraries the module uses: an error
     code, not a Lua panic, and the state is left as it was (no binding, no
     listener on the loop: resetting the loop touches nothing). */
  assert_int_equal(luna_lua_attach(bare, loop), LUNA_EINVAL);
  assert_null(luna_lua_loop(bare));
  assert_int_equal(lua_gettop(bare), 0);
  assert_int_equal(luna_loop_reset(loop), 0);
  lua_gc(bare, LUA_GCCOLLECT, 0);
  /* with them it works, once */
  luaL_openlibs(bare);
  assert_int_equal(luna_lua_attach(bare, loop), 0);
  assert_true(luna_lua_loop(bare) == loop);
  assert_int_equal(luna_lua_attach(bare, loop), LUNA_ESTATE);
  lua_close(bare);
  luna_loop_free(loop);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_null_loop_is_refused_everywhere),
      cmocka_unit_test(unknown_timings_clocks_kinds_and_bad_values_are_refused),
      cmocka_unit_test(a_null_or_bare_lua_state_is_refused_everywhere),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
