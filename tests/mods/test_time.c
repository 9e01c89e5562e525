/*
** test_time.c: the time budget of mods (src/mods/budget.c, docs/modding.md
** "Time"): one budget per mod per frame over all its runs together, the
** run in progress stopped past it, the rest of its work deferred to the
** next frame, overruns counted, unloading bounded. The clock is the set's
** fake one, which advances one second at every read: a run that fires no
** hook reads it twice (begin and end) and so costs one second, and a run
** costs one more second each time its count hook fires (every 1000
** instructions). The limits are seconds long, so the watchdog (real time)
** never wakes during a test: test_watchdog.c covers it.
*/
#include "mods_util.h"

static luna_ns fake_now;

static luna_ns fake_clock(void *ud) {
  (void)ud;
  fake_now += 1000000000;
  return fake_now;
}

/* A set whose mods get `seconds` of the fake clock per frame. */
static fixture *timed(int seconds, unsigned max_overruns) {
  luna_mods_config c;
  c = fx_config();
  c.time_limit = (luna_ns)seconds * 1000000000;
  c.clock = fake_clock;
  c.max_overruns = max_overruns;
  fake_now = 0;
  return fx_new(&c);
}

/* Twenty deferred tasks used to get a fresh budget each, all in one frame,
   for ever. The mod's frame holds five of them (one second each); the
   others wait, in order, for the next frames, and each frame that reached
   the budget counts one time overrun. */
static void deferred_tasks_past_the_budget_wait_for_the_next_frame(void **state) {
  fixture *f = timed(5, 100);
  char want[1024] = "";
  int i;
  (void)state;
  fx_write(f, "d/mod.lua",
           "for i = 1, 20 do task.defer(function() print(i, task.frame()) end) end\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 5);
  for (i = 1; i <= 20; i++) {
    char line[64];
    snprintf(line, sizeof line, "[d] %d\t%d\n", i, (i - 1) / 5 + 1);
    strcat(want, line);
  }
  assert_string_equal(f->out, want);
  assert_int_equal(f->replen, 0);
  assert_int_equal(fx_info(f, "d").time_overruns, 4);
  assert_int_equal(fx_info(f, "d").state, LUNA_MOD_LOADED);
  fx_free(f);
}

/* Twenty task.on callbacks shared nothing either. Now the first five run
   in each frame and the others are skipped (each counted frame is an
   overrun), until the mod is disabled. */
static void callbacks_share_one_budget_per_frame_until_disabled(void **state) {
  fixture *f = timed(5, 3);
  (void)state;
  fx_write(f, "c/mod.lua",
           "n = 0\n"
           "for i = 1, 20 do task.on('Update', function() n = n + 1 end) end\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 2);
  assert_int_equal(fx_global(f, "c", "n"), 10);
  assert_int_equal(fx_info(f, "c").time_overruns, 2);
  fx_frames(f, 2);
  assert_int_equal(fx_info(f, "c").state, LUNA_MOD_DISABLED);
  assert_has(f->rep, "time budget exceeded 3 times (limit 5000 ms per frame)");
  fx_free(f);
}

/* A task.every callback of a mod that is out of time waits too, and its
   next call gets the intervals it missed: here the mod's EarlyUpdate
   callbacks spend its budget in frames 1 and 2, and the every callback
   (Update, each frame's interval) is first called in frame 3, with 3. */
static void every_callback_out_of_time_gets_the_missed_intervals_later(void **state) {
  fixture *f = timed(5, 100);
  (void)state;
  fx_write(f, "e/mod.lua",
           "local spenders = {}\n"
           "task.on('EarlyUpdate', function()\n"
           "  if task.frame() == 3 then for _, h in ipairs(spenders) do h:remove() end end\n"
           "end)\n"
           "for i = 1, 5 do spenders[i] = task.on('EarlyUpdate', function() end) end\n"
           "task.every(1 / 60, function(n) print('every', n, task.frame()) end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 4);
  assert_string_equal(f->out, "[e] every\t3\t3\n[e] every\t1\t4\n");
  assert_int_equal(fx_info(f, "e").time_overruns, 2);
  fx_free(f);
}

/* A loop of C calls (each one instruction or so, whatever it costs) ran
   for as long as the instruction budget allowed; the time budget stops it
   once the frame's time is spent, with an overrun. */
static void time_budget_stops_a_loop_of_c_calls(void **state) {
  fixture *f = timed(5, 3);
  (void)state;
  fx_write(f, "l/mod.lua", "task.yield()\nwhile true do local s = ('x'):rep(10) end\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 2);
  assert_has(f->rep, "l: task main failed: l/mod.lua:2: time budget exceeded (5000 ms per frame)");
  assert_lacks(f->rep, "instruction budget exceeded");
  assert_int_equal(fx_info(f, "l").time_overruns, 1);
  assert_int_equal(fx_info(f, "l").budget_overruns, 0);
  fx_free(f);
}

/* table.sort of many values is one C call (seconds for millions); the
   mods' sort checks the time budget between comparisons. */
static void time_budget_stops_a_long_sort(void **state) {
  fixture *f = timed(5, 3);
  (void)state;
  fx_write(f, "s/mod.lua", "local t = {('x'):rep(20000):byte(1, -1)}\n"
                           "task.yield()\ntable.sort(t)\nprint('sorted')\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 2);
  assert_has(f->rep, "s: task main failed: s/mod.lua:3: time budget exceeded (5000 ms per frame)");
  assert_lacks(f->out, "sorted");
  fx_free(f);
}

/* Two tasks passing a value over channels ran one budget per hop, a
   hundred thousand hops a frame. Now each frame ends once the mod's time
   is spent; its other work (the LastUpdate callback) waits, and the mod is
   disabled after three such frames. */
static void channel_ping_pong_stops_at_the_budget(void **state) {
  fixture *f = timed(5, 3);
  (void)state;
  fx_write(f, "p/mod.lua",
           "hops = 0\n"
           "local ch = task.channel(1)\n"
           "task.spawn(function() while true do ch:send(1); hops = hops + 1 end end)\n"
           "task.on('LastUpdate', function() print('frame', task.frame()) end)\n"
           "while true do ch:receive() end\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 1);
  assert_true(fx_global(f, "p", "hops") < 100); /* not the drain's 100,000 */
  fx_frames(f, 3);
  assert_int_equal(fx_info(f, "p").state, LUNA_MOD_DISABLED);
  assert_lacks(f->out, "frame");
  assert_has(f->rep, "time budget exceeded 3 times");
  fx_free(f);
}

/* Each subscriber call had a budget of its own. Now the deliveries to a
   mod share its frame's time: past it, its messages wait for the next
   frame's delivery, in order, rather than fail or vanish. */
static void messages_to_a_mod_out_of_time_wait_for_the_next_frame(void **state) {
  fixture *f = timed(5, 100);
  int i;
  (void)state;
  fx_write(f, "r/mod.lua", "n = 0\n"
                           "mods.subscribe('t', function(v) n = n + 1; print(v, task.frame()) end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  for (i = 1; i <= 8; i++) {
    char v[8];
    snprintf(v, sizeof v, "m%d", i);
    assert_int_equal(luna_mods_send_string(f->set, "t", v, strlen(v)), 0);
  }
  fx_frames(f, 2);
  assert_string_equal(f->out, "[r] m1\t1\n[r] m2\t1\n[r] m3\t1\n[r] m4\t1\n[r] m5\t1\n"
                              "[r] m6\t2\n[r] m7\t2\n[r] m8\t2\n");
  assert_int_equal(f->replen, 0);
  fx_free(f);
}

/* Unloading ran every task's to-be-closed variable with a budget of its
   own: 300 looping ones took 300 budgets. Now unloading has one time
   budget: the handler running when it is spent is stopped, and the
   remaining tasks are dropped without running theirs, with one report. */
static void unload_is_bounded_by_one_time_budget(void **state) {
  fixture *f = timed(5, 3);
  (void)state;
  fx_write(f, "u/mod.lua",
           "for i = 1, 300 do\n"
           "  task.spawn(function()\n"
           "    local c <close> = setmetatable({}, {__close = function() while true do end end})\n"
           "    task.delay(100)\n"
           "  end)\n"
           "end\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 1);
  assert_int_equal(f->replen, 0);
  assert_int_equal(luna_mods_unload(f->set, "u"), 0);
  assert_has(f->rep, "time budget exceeded (5000 ms per frame)");
  assert_has(f->rep, "u: unloading used up its time budget (5000 ms): the to-be-closed "
                     "variables of 299 tasks did not run\n");
  /* One stopped handler, one report of the rest. */
  assert_true(strstr(strstr(f->rep, "time budget exceeded") + 1, "time budget exceeded") == NULL);
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(deferred_tasks_past_the_budget_wait_for_the_next_frame),
      cmocka_unit_test(callbacks_share_one_budget_per_frame_until_disabled),
      cmocka_unit_test(every_callback_out_of_time_gets_the_missed_intervals_later),
      cmocka_unit_test(time_budget_stops_a_loop_of_c_calls),
      cmocka_unit_test(time_budget_stops_a_long_sort),
      cmocka_unit_test(channel_ping_pong_stops_at_the_budget),
      cmocka_unit_test(messages_to_a_mod_out_of_time_wait_for_the_next_frame),
      cmocka_unit_test(unload_is_bounded_by_one_time_budget),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
