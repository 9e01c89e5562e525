/*
** test_watchdog.c: the watchdog thread of the time budget (src/mods/
** watchdog.c). A mod's count hook fires only between instructions, every
** 1000 of them, so a loop of slow C calls (a few instructions each) went
** on for a thousand calls past the deadline. The watchdog arms the hook
** once the deadline passes, and the loop stops right after the call under
** way. The C function here waits until the watchdog has armed the hook on
** its thread (or gives up after ten seconds and raises): so the loop makes
** exactly one call, whatever the machine's speed. Real clock, so this runs
** under ThreadSanitizer too (label "thread").
*/
#include "mods_util.h"

#include <time.h>

static int calls;

/* slow(): returns once the hook of the calling thread fires at the next
   instruction (count 1, what the watchdog arms), or raises. */
static int l_slow(lua_State *L) {
  struct timespec ms = {0, 1000000};
  int i;
  calls++;
  for (i = 0; i < 10000; i++) {
    if (lua_gethook(L) != NULL && lua_gethookcount(L) == 1)
      return 0;
    nanosleep(&ms, NULL);
  }
  return luaL_error(L, "the watchdog never armed the hook");
}

static void watchdog_stops_a_loop_of_slow_c_calls(void **state) {
  luna_mods_config c;
  fixture *f;
  lua_State *L;
  (void)state;
  c = fx_config();
  c.time_limit = 20 * (luna_ns)1000000;
  f = fx_new(&c);
  fx_write(f, "w/mod.lua", "task.yield()\nwhile true do slow() end\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  L = luna_mods_state(f->set, "w");
  assert_non_null(L);
  lua_pushcfunction(L, l_slow);
  lua_setglobal(L, "slow");
  calls = 0;
  fx_frames(f, 2);
  assert_int_equal(calls, 1);
  assert_has(f->rep, "w: task main failed: w/mod.lua:2: time budget exceeded (20 ms per frame)");
  assert_int_equal(fx_info(f, "w").time_overruns, 1);
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(watchdog_stops_a_loop_of_slow_c_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
