/*
** test_sim_host.c: the simulation group with the host driving: a sim the
** host makes (luna_sim_new) attached to a Lua state (luna_lua_attach_sim),
** its ticks run by frames and by the C host operations, over the state
** the script registered (sim.state, sim.on_tick, timers, effects). Exact
** on the loop's virtual clocks: every frame is luna_loop_frame_ns.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <lauxlib.h>
#include <lualib.h>

#include "lunaloop.h"
#include "lunaloop_lua.h"
#include "state_fixture.h"

#define MS INT64_C(1000000)

typedef struct fixture {
  luna_loop *loop;
  luna_sim *sim;
  lua_State *L;
} fixture;

static void open_fixture(fixture *f, luna_sim_policy policy) {
  luna_sim_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.tick_ns = 20 * MS;
  cfg.policy = policy;
  assert_int_equal(luna_loop_new(NULL, &f->loop), 0);
  assert_int_equal(luna_sim_new(f->loop, &cfg, &f->sim), 0);
  f->L = new_task_state(f->loop);
  assert_int_equal(luna_lua_attach_sim(f->L, f->sim), 0);
}

static void close_fixture(fixture *f) {
  lua_close(f->L);
  luna_loop_free(f->loop);
}

static const char *global_str(lua_State *L, const char *name) {
  const char *s;
  lua_getglobal(L, name);
  s = lua_tostring(L, -1);
  lua_pop(L, 1);
  return s;
}

/* Frames drive the ticks: 50 ms frames of 20 ms ticks run 2, 3, 2, 3
   ticks with consecutive numbers in the tick callbacks, and sim.alpha()
   reads 0.5, 0, 0.5, 0 after them (acceptance test 1 through Lua). */
static void frames_drive_consecutive_ticks_and_alpha(void **state) {
  fixture f;
  int i;
  (void)state;
  open_fixture(&f, LUNA_SIM_DROP);
  run(f.L, "sim = task.sim; log = {}; alphas = {}\n"
           "sim.on_tick(function(t) log[#log + 1] = t.tick .. (t.first and 'F' or '') .. "
           "  (t.final and 'L' or '') .. '@' .. t.dt end)");
  for (i = 0; i < 4; i++) {
    assert_int_equal(luna_loop_frame_ns(f.loop, 50 * MS), 0);
    run(f.L, "alphas[#alphas + 1] = sim.alpha()");
  }
  run(f.L, "got = table.concat(log, ' ') .. ' | ' .. table.concat(alphas, ' ')");
  assert_string_equal(global_str(f.L, "got"),
                      "1F@0.02 2FL@0.02 3F@0.02 4F@0.02 5FL@0.02 6F@0.02 7FL@0.02 "
                      "8F@0.02 9F@0.02 10FL@0.02 | 0.5 0.0 0.5 0.0");
  close_fixture(&f);
}

/* The host rolls back with the C API: ticks 1..20 by frames, then
   luna_sim_load(15) and luna_sim_load(10) in the same frame leave the
   registered table equal to tick 10's snapshot (acceptance test 6); a
   resimulation runs the tick callbacks with the tick length as t.dt and
   the frame clocks do not move (test 9). */
static void host_loads_and_resimulates_the_registered_state(void **state) {
  fixture f;
  luna_ns before;
  uint64_t ran = 0, sum10 = 0, sum20 = 0, again = 0;
  int i;
  (void)state;
  open_fixture(&f, LUNA_SIM_DROP);
  run(f.L, "sim = task.sim; w = sim.state('w', {x = 0, list = {}}); dts = {}\n"
           "sim.on_tick(function(t) w.x = w.x + t.tick; w.list[#w.list + 1] = t.tick\n"
           "  if t.resimulating then dts[#dts + 1] = t.dt; frame_in = task.frame() end end)");
  for (i = 0; i < 20; i++)
    assert_int_equal(luna_loop_frame_ns(f.loop, 20 * MS), 0);
  assert_int_equal(luna_sim_tick(f.sim), 20);
  assert_int_equal(luna_sim_checksum(f.sim, 10, &sum10), 0);
  assert_int_equal(luna_sim_checksum(f.sim, 20, &sum20), 0);
  assert_int_equal(luna_sim_load(f.sim, 15), 0);
  assert_int_equal(luna_sim_load(f.sim, 10), 0);
  run(f.L, "x, n = w.x, #w.list; live = sim.checksum()");
  assert_int_equal(global_int(f.L, "x"), 55);
  assert_int_equal(global_int(f.L, "n"), 10);
  assert_true((uint64_t)global_int(f.L, "live") == sum10);
  before = luna_loop_time(f.loop, LUNA_CLOCK_SCALED);
  assert_int_equal(luna_sim_resimulate(f.sim, 10, &ran), 0);
  assert_int_equal(ran, 10);
  assert_int_equal(luna_loop_time(f.loop, LUNA_CLOCK_SCALED), before);
  assert_int_equal(luna_sim_checksum(f.sim, 20, &again), 0);
  assert_true(again == sum20);
  run(f.L, "assert(#dts == 10 and dts[1] == 0.02 and dts[10] == 0.02, 'dt in resimulation')\n"
           "assert(frame_in == task.frame(), 'no frame ran')");
  close_fixture(&f);
}

/* Effects through the host's operations: tick 100 predicted once, then
   re-simulated 4 times and run twice as a partial tick: the effect ran
   once; a confirm effect runs at luna_sim_confirm (acceptance test 8). */
static void effects_run_once_under_host_rollback(void **state) {
  fixture f;
  int i;
  (void)state;
  open_fixture(&f, LUNA_SIM_MANUAL);
  run(f.L, "sim = task.sim; n, c = 0, 0; sim.state('s', {})\n"
           "sim.on_tick(function(t) if t.tick == 100 then\n"
           "  sim.effect('boom', function() n = n + 1 end)\n"
           "  sim.effect('hit', {confirm = true}, function() c = c + 1 end) end end)");
  for (i = 0; i < 100; i++)
    assert_int_equal(luna_sim_step(f.sim, 0), 0);
  for (i = 0; i < 4; i++)
    assert_int_equal(luna_sim_resimulate(f.sim, 97, NULL), 0);
  assert_int_equal(luna_sim_load(f.sim, 99), 0);
  assert_int_equal(luna_sim_partial(f.sim, 5 * MS), 0);
  assert_int_equal(luna_sim_partial(f.sim, 15 * MS), 0);
  assert_int_equal(luna_sim_step(f.sim, 0), 0);
  assert_int_equal(global_int(f.L, "n"), 1);
  assert_int_equal(global_int(f.L, "c"), 0);
  assert_int_equal(luna_sim_confirm(f.sim, 100), 0);
  assert_int_equal(global_int(f.L, "c"), 1);
  assert_int_equal(luna_sim_confirm(f.sim, 100), 0);
  assert_int_equal(global_int(f.L, "c"), 1);
  close_fixture(&f);
}

/* An await in a tick callback that the frame runs raises at the call and
   is reported; the tick's other callbacks run (acceptance test 11). */
static void awaits_in_frame_driven_ticks_raise(void **state) {
  fixture f;
  (void)state;
  open_fixture(&f, LUNA_SIM_DROP);
  run(f.L, "sim = task.sim; order = {}; errs = {}\n"
           "task.on_error(function(e) errs[#errs + 1] = tostring(e) end)\n"
           "sim.on_tick(function() order[#order + 1] = 'a'; task.yield() end)\n"
           "sim.on_tick(function() order[#order + 1] = 'b' end)");
  assert_int_equal(luna_loop_frame_ns(f.loop, 20 * MS), 0);
  run(f.L, "got = table.concat(order, ',') .. ' ' .. #errs .. ' ' .. errs[1]");
  assert_non_null(strstr(global_str(f.L, "got"), "a,b 1 "));
  assert_non_null(strstr(global_str(f.L, "got"),
                         "task.yield: cannot await in a simulation tick: coroutines cannot be "
                         "rolled back; use sim.timer"));
  close_fixture(&f);
}

/* Snapshots as bytes between two loops, each with its own sim and state:
   what luna_sim_export writes on one, luna_sim_import and a load give the
   other, with the same checksum. */
static void snapshots_cross_loops_as_bytes(void **state) {
  fixture a, b;
  uint64_t sum_a = 0, sum_b = 0;
  char *bytes = NULL;
  size_t len = 0;
  int i;
  (void)state;
  open_fixture(&a, LUNA_SIM_DROP);
  open_fixture(&b, LUNA_SIM_DROP);
  run(a.L, "w = task.sim.state('w', {ships = {{x = 1}, {x = 2}}, t = task.sim.timer(50)})\n"
           "task.sim.on_tick(function(t) for _, s in ipairs(w.ships) do s.x = s.x * 2 + t.tick end end)");
  run(b.L, "w = task.sim.state('w', {})");
  for (i = 0; i < 7; i++)
    assert_int_equal(luna_loop_frame_ns(a.loop, 20 * MS), 0);
  run(a.L, "bytes = task.sim.export(7)");
  lua_getglobal(a.L, "bytes");
  bytes = (char *)lua_tolstring(a.L, -1, &len);
  assert_non_null(bytes);
  lua_pushlstring(b.L, bytes, len);
  lua_setglobal(b.L, "bytes");
  lua_pop(a.L, 1);
  run(b.L, "assert(task.sim.import(bytes, {load = true}) == 7)\n"
           "x2 = w.ships[2].x; rem = w.t:remaining()");
  assert_int_equal(luna_sim_checksum(a.sim, 7, &sum_a), 0);
  assert_int_equal(luna_sim_checksum(b.sim, 7, &sum_b), 0);
  assert_true(sum_a == sum_b);
  assert_int_equal(luna_sim_tick(b.sim), 7);
  assert_int_equal(global_int(b.L, "x2"), 2 * 128 + 247);
  assert_int_equal(global_int(b.L, "rem"), 43);
  close_fixture(&a);
  close_fixture(&b);
}

/* Attaching refuses what it cannot do, and closing the state detaches the
   provider: the host's sim goes on counting ticks without it. */
static void attach_errors_and_close_detaches(void **state) {
  luna_loop *loop, *other;
  luna_sim *sim, *other_sim;
  lua_State *L, *L2;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  assert_int_equal(luna_loop_new(NULL, &other), 0);
  assert_int_equal(luna_sim_new(loop, NULL, &sim), 0);
  assert_int_equal(luna_sim_new(other, NULL, &other_sim), 0);
  L = new_task_state(loop);
  assert_int_equal(luna_lua_attach_sim(NULL, sim), LUNA_EINVAL);
  assert_int_equal(luna_lua_attach_sim(L, NULL), LUNA_EINVAL);
  assert_int_equal(luna_lua_attach_sim(L, other_sim), LUNA_EINVAL);
  assert_int_equal(luna_lua_attach_sim(L, sim), 0);
  assert_int_equal(luna_lua_attach_sim(L, sim), LUNA_EALREADY);
  L2 = new_task_state(loop);
  assert_int_equal(luna_lua_attach_sim(L2, sim), LUNA_EALREADY);
  run(L, "task.sim.state('w', {n = 0}); task.sim.on_tick(function() end)\n"
         "ok, err = pcall(task.sim_open)");
  assert_non_null(strstr((lua_getglobal(L, "err"), lua_tostring(L, -1)),
                         "the loop has a simulation already"));
  lua_pop(L, 1);
  assert_int_equal(luna_loop_frame_ns(loop, 40 * MS), 0);
  assert_non_null(luna_sim_provider_ud(sim));
  lua_close(L);
  assert_null(luna_sim_provider_ud(sim));
  assert_int_equal(luna_loop_frame_ns(loop, 40 * MS), 0);
  assert_true(luna_sim_tick(sim) > 2);
  assert_int_equal(luna_lua_attach_sim(L2, sim), 0); /* free again: another state takes it */
  lua_close(L2);
  luna_loop_free(loop);
  luna_loop_free(other);
}

/* A state closed inside one of the sim's ticks (by the host hook between
   FixedUpdate and LastFixedUpdate, a scene unloaded mid-frame) still
   detaches its provider, whether the host made the sim or the script did
   (task.sim_open). It used not to: the detach was refused with
   LUNA_ESTATE during the tick, the provider stayed registered with the
   freed state's bridge as its ud, and the next tick called into freed
   memory (ASan: heap-use-after-free in p_tick). */
static lua_State *closing_state;
static void close_in_hook(luna_loop *loop, luna_timing timing, void *ud) {
  (void)loop;
  (void)ud;
  if (timing == LUNA_FIXED_UPDATE && closing_state != NULL) {
    lua_close(closing_state);
    closing_state = NULL;
  }
}

static void closing_the_state_inside_a_tick_detaches_it(void **state) {
  int owned;
  (void)state;
  for (owned = 0; owned < 2; owned++) {
    luna_config cfg;
    luna_loop *loop;
    luna_sim *sim = NULL;
    memset(&cfg, 0, sizeof cfg);
    cfg.hook = close_in_hook;
    assert_int_equal(luna_loop_new(&cfg, &loop), 0);
    if (!owned)
      assert_int_equal(luna_sim_new(loop, NULL, &sim), 0);
    closing_state = new_task_state(loop);
    if (!owned)
      assert_int_equal(luna_lua_attach_sim(closing_state, sim), 0);
    else
      run(closing_state, "task.sim_open{}");
    sim = luna_sim_of(loop);
    run(closing_state, "w = task.sim.state('w', {n = 0})\n"
                       "task.sim.on_tick(function() w.n = w.n + 1 end)");
    assert_non_null(luna_sim_provider_ud(sim));
    assert_int_equal(luna_loop_frame_ns(loop, 17 * MS), 0); /* closes the state in the tick */
    assert_null(closing_state);
    assert_null(luna_sim_provider_ud(sim));
    assert_int_equal(luna_loop_frame_ns(loop, 17 * MS), 0);
    assert_int_equal(luna_loop_frame_ns(loop, 17 * MS), 0);
    assert_int_equal(luna_sim_tick(sim), 3);
    luna_loop_free(loop);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(frames_drive_consecutive_ticks_and_alpha),
      cmocka_unit_test(host_loads_and_resimulates_the_registered_state),
      cmocka_unit_test(effects_run_once_under_host_rollback),
      cmocka_unit_test(awaits_in_frame_driven_ticks_raise),
      cmocka_unit_test(snapshots_cross_loops_as_bytes),
      cmocka_unit_test(attach_errors_and_close_detaches),
      cmocka_unit_test(closing_the_state_inside_a_tick_detaches_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
