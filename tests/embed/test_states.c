/*
** test_states.c: several Lua states on one loop (luna_lua_attach), as a
** game with one state per mod would use them. Each task belongs to its
** state; one state's scripts cannot see or cancel another's tasks; closing
** a state cancels its tasks first (to-be-closed variables run, in creation
** order) and removes everything it had on the loop, so the loop never
** calls into a closed state. Every test ends with the states closed, the
** loop freed and nothing leaked (ASan checks the heap).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "embed_util.h"

static void frames(luna_loop *loop, int n) {
  while (n-- > 0)
    assert_int_equal(luna_loop_frame(loop, 0.05), 0);
}

/* A log shared by all states: record(s) appends s. */
static char shared_log[1024];
static void l_record_text(const char *s) {
  if (shared_log[0] != '\0')
    strncat(shared_log, " ", sizeof shared_log - strlen(shared_log) - 1);
  strncat(shared_log, s, sizeof shared_log - strlen(shared_log) - 1);
}

static int l_record(lua_State *L) {
  l_record_text(luaL_checkstring(L, 1));
  return 0;
}

static lua_State *new_named_state(luna_loop *loop, const char *name) {
  lua_State *L = new_state(loop);
  lua_pushcfunction(L, l_record);
  lua_setglobal(L, "record");
  lua_pushstring(L, name);
  lua_setglobal(L, "NAME");
  return L;
}

/* A clear shared log, a loop, and state a (and b when asked for). */
static luna_loop *open_states(lua_State **a, lua_State **b) {
  luna_loop *loop;
  shared_log[0] = '\0';
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  *a = new_named_state(loop, "a");
  if (b != NULL)
    *b = new_named_state(loop, "b");
  return loop;
}

/* Closes the states (NULL: already closed), then frees the loop. */
static void close_states(luna_loop *loop, lua_State *a, lua_State *b) {
  if (a != NULL)
    lua_close(a);
  if (b != NULL)
    lua_close(b);
  luna_loop_free(loop);
}

/* Counts, cancel_all, errors and exit requests are per state. */
static void each_state_counts_and_cancels_only_its_own_tasks(void **state) {
  luna_loop *loop;
  lua_State *a, *b;
  int code;
  (void)state;
  loop = open_states(&a, &b);
  run(a, "for i = 1, 3 do task.spawn(function() task.delay(100) end) end\n"
         "task.on('Update', function() end)");
  run(b, "ticks = 0\n"
         "for i = 1, 2 do task.spawn(function() while true do task.yield(); ticks = ticks + 1 end end) end\n"
         "task.on_error(function(e) berr = tostring(e) end)");
  assert_int_equal(luna_lua_task_count(a), 3);
  assert_int_equal(luna_lua_task_count(b), 2);
  assert_int_equal(luna_lua_callback_count(a), 1);
  assert_int_equal(luna_lua_callback_count(b), 0);
  assert_int_equal(luna_lua_cancel_all(a), 3);
  assert_int_equal(luna_lua_task_count(a), 0);
  assert_int_equal(luna_lua_callback_count(a), 0);
  assert_int_equal(luna_lua_task_count(b), 2);
  frames(loop, 2);
  assert_int_equal(global_int(b, "ticks"), 4);
  /* an error in a goes to a's handler (the default: stderr), not b's */
  run(a, "task.on_error(function(e) aerr = tostring(e) end)\n"
         "task.spawn(function() task.yield(); error('in a', 0) end)");
  frames(loop, 1);
  expect_global(a, "aerr", "in a");
  run(b, "assert(berr == nil)");
  assert_int_equal(luna_lua_error_count(a), 1);
  assert_int_equal(luna_lua_error_count(b), 0);
  run(a, "task.spawn(function() task.exit(3) end)");
  assert_true(luna_lua_exit_requested(a, &code));
  assert_int_equal(code, 3);
  assert_false(luna_lua_exit_requested(b, NULL));
  close_states(loop, a, b);
}

/* When a's task calls host code that runs b's scripts (spawns a task in b),
   b sees its own current task, not a's, and can only cancel its own (task
   values never cross states). After the call, a's task still sees itself. */
static lua_State *other_state;
static int l_spawn_in_other(lua_State *L) {
  const char *code = luaL_checkstring(L, 1);
  if (luaL_loadstring(other_state, code) != LUA_OK)
    return luaL_error(L, "%s", lua_tostring(other_state, -1));
  if (luna_lua_spawn(other_state, 0, "from-a") != 0)
    return luaL_error(L, "luna_lua_spawn failed");
  lua_settop(other_state, 0);
  return 0;
}
static void a_state_sees_its_own_current_task_inside_another_states_call(void **state) {
  luna_loop *loop;
  lua_State *a, *b;
  (void)state;
  loop = open_states(&a, &b);
  other_state = b;
  lua_pushcfunction(a, l_spawn_in_other);
  lua_setglobal(a, "spawn_in_b");
  run(b, "victim = task.spawn(function() task.delay(100) end)");
  run(a, "t = task.spawn(function()\n"
         "  local me = task.current()\n"
         "  spawn_in_b([[\n"
         "    local cur = task.current()\n"
         "    seen = cur.name .. ' ' .. tostring(cur == victim)\n"
         "    task.yield()\n"
         "  ]])\n"
         "  same = task.current() == me\n"
         "  task.yield()\n"
         "end)");
  expect_global(b, "seen", "from-a false");
  run(a, "assert(same and t:status() == 'suspended')");
  assert_int_equal(luna_lua_task_count(a), 1);
  assert_int_equal(luna_lua_task_count(b), 2);
  frames(loop, 1);
  assert_int_equal(luna_lua_task_count(a), 0);
  assert_int_equal(luna_lua_task_count(b), 1);
  run(b, "assert(victim:status() == 'suspended'); victim:cancel()");
  close_states(loop, a, b);
}

/* Closing a state cancels its tasks first, in creation order; their
   to-be-closed variables run while the state is whole (they may call Lua
   and the module); only then does the state go away. */
static void closing_a_state_runs_close_handlers_first_in_creation_order(void **state) {
  luna_loop *loop;
  lua_State *a;
  (void)state;
  loop = open_states(&a, NULL);
  run(a, "for i = 1, 3 do task.spawn(function()\n"
         "  local r <close> = setmetatable({}, {__close = function(_, e)\n"
         "    record(string.format('%s%d:%s@%d', NAME, i, task.is_cancelled(e) and 'cancelled' or tostring(e), task.frame()))\n"
         "  end})\n"
         "  task.delay(100)\n"
         "end) end");
  frames(loop, 2);
  lua_close(a);
  assert_string_equal(shared_log, "a1:cancelled@2 a2:cancelled@2 a3:cancelled@2");
  close_states(loop, NULL, NULL);
}

/* A state with every kind of pending work: yields at several timings,
   delays on each clock, frame waits, predicates, deferred starts, awaits
   of tasks, composition, channels, scopes, per-tick and periodic callbacks
   and a promise. Closing it leaves nothing of it on the loop (the stats
   say so) and later frames never call into it, while another state keeps
   running. */
static void closing_a_state_removes_all_its_work_from_the_loop(void **state) {
  luna_loop *loop;
  lua_State *a, *b;
  luna_loop_stats st;
  int t;
  (void)state;
  reset_counters();
  loop = open_states(&a, &b);
  run(a, "local s = task.spawn\n"
         "for _, timing in ipairs(task.timings) do\n"
         "  s(function() while true do task.yield(timing) end end)\n"
         "end\n"
         "s(function() task.delay(50) end)\n"
         "s(function() task.delay(50, 'LastUpdate', 'unscaled') end)\n"
         "s(function() task.delay(50, 'Update', 'realtime') end)\n"
         "s(function() task.delay(50, 'FixedUpdate', 'fixed') end)\n"
         "s(function() task.delay_frame(1000) end)\n"
         "s(function() while true do task.next_frame('PreUpdate') end end)\n"
         "s(function() task.wait_until(function() return false end) end)\n"
         "s(function() task.wait_while(function() return true end, 'TimeUpdate') end)\n"
         "task.defer(function() task.delay(50) end)\n"
         "task.spawn_at('LastTimeUpdate', function() task.delay(50) end)\n"
         "local long = s(function() task.delay(60) end)\n"
         "s(function() task.await(long) end)\n"
         "s(function() task.when_all(long, function() task.delay(70) end) end)\n"
         "s(function() task.when_any(function() task.delay(70) end) end)\n"
         "s(function() task.timeout(100, function() task.delay(80) end) end)\n"
         "local ch = task.channel(0)\n"
         "s(function() ch:receive() end)\n"
         "s(function() task.scope(function(sc) sc:spawn(function() task.delay(90) end) task.delay(90) end) end)\n"
         "p = host.promise()\n"
         "s(function() task.await(p) end)\n"
         "task.on('Update', function() record('a-on') end)\n"
         "task.every(0.05, function() record('a-every') end)\n");
  run(b, "ticks = 0; task.spawn(function() while true do task.yield(); ticks = ticks + 1 end end)");
  frames(loop, 3);
  assert_true(strstr(shared_log, "a-on") != NULL);
  /* a completion in flight while the state closes */
  assert_int_equal(luna_promise_resolve(slots[0], push_pair, new_pair(1, "late"), free_pair), 0);
  lua_close(a);
  assert_int_equal(cancel_calls[0], 0);
  shared_log[0] = '\0';
  luna_loop_get_stats(loop, &st);
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    assert_int_equal(st.timers[t], 0);
    assert_int_equal(st.items[t], 0);
  }
  /* b's own yield is the only continuation left (the posted completion is
     still in the inbox, which the stats do not count) */
  assert_int_equal(st.queued[LUNA_UPDATE], 1);
  frames(loop, 100);
  assert_string_equal(shared_log, "");
  assert_int_equal(atomic_load(&data_frees), 1);
  assert_int_equal(global_int(b, "ticks"), 103);
  close_states(loop, NULL, b);
  release_slots();
  assert_int_equal(luna__promise_live_count(), 0);
}

/* luna_loop_reset cancels the tasks of every state on the loop and removes
   their callbacks; each state keeps working afterwards. */
static void a_reset_cancels_the_tasks_of_every_state(void **state) {
  luna_loop *loop;
  lua_State *a, *b;
  (void)state;
  loop = open_states(&a, &b);
  run(a, "task.spawn(function()\n"
         "  local r <close> = setmetatable({}, {__close = function() record('a-closed') end})\n"
         "  task.delay(10) end)\n"
         "task.on('Update', function() end)");
  run(b, "task.spawn(function()\n"
         "  local r <close> = setmetatable({}, {__close = function() record('b-closed') end})\n"
         "  task.yield() ; task.delay(10) end)");
  assert_int_equal(luna_loop_reset(loop), 0);
  assert_string_equal(shared_log, "a-closed b-closed");
  assert_int_equal(luna_lua_task_count(a) + luna_lua_task_count(b), 0);
  assert_int_equal(luna_lua_callback_count(a), 0);
  run(b, "task.spawn(function() task.yield(); done = 1 end)");
  frames(loop, 1);
  assert_int_equal(global_int(b, "done"), 1);
  close_states(loop, a, b);
}

/* Callbacks of two states registered in turn at one timing run in
   registration order, each on its own state (the runner hands a stretch of
   callbacks to one protected call per state, callbacks.c); one that raises
   is reported to its own state, and the callbacks after it still run. */
static void callbacks_of_several_states_interleave_in_registration_order(void **state) {
  luna_loop *loop;
  lua_State *a, *b;
  (void)state;
  loop = open_states(&a, &b);
  run(b, "task.on_error(function(e) berr = tostring(e) end)");
  run(a, "task.on(function() record('a1') end)");
  run(a, "task.on(function() record('a2') end)");
  run(b, "task.on(function() record('b1'); if not raised then raised = true; error('b1 fails', 0) end end)");
  run(b, "task.on(function() record('b2') end)");
  run(a, "task.on(function() record('a3') end)");
  frames(loop, 2);
  assert_string_equal(shared_log, "a1 a2 b1 b2 a3 a1 a2 b2 a3");
  expect_global(b, "berr", "b1 fails");
  assert_int_equal(luna_lua_error_count(a), 0);
  assert_int_equal(luna_lua_error_count(b), 1);
  close_states(loop, a, b);
}

/* Runs `code` in L with `arg` as its one argument (...). */
static void run_with(lua_State *L, const char *code, const char *arg) {
  if (luaL_loadstring(L, code) != LUA_OK)
    fail_msg("lua: %s", lua_tostring(L, -1));
  lua_pushstring(L, arg);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK)
    fail_msg("lua: %s", lua_tostring(L, -1));
}

/* A host continuation that records "host" and queues itself again, so it
   keeps its place among the yields of the tasks. */
static void host_entry(luna_loop *loop, void *arg) {
  (void)arg;
  l_record_text("host");
  assert_int_equal(luna_enqueue(loop, LUNA_UPDATE, host_entry, NULL), 0);
}

/* Yields queued one after another are resumed in one call of the binding's
   continuation (task.c, luna__resume_cb): the tasks of two states and a
   host's entry queued between them keep the queue's order, and each task
   runs as its own state's current task. */
static void yields_of_several_states_keep_the_queue_order(void **state) {
  luna_loop *loop;
  lua_State *a, *b;
  const char *body = "local k = ...\n"
                     "task.spawn(function()\n"
                     "  local me = task.current()\n"
                     "  for i = 1, 2 do\n"
                     "    record(NAME .. k .. (task.current() == me and '' or '?'))\n"
                     "    task.yield()\n"
                     "  end\n"
                     "end)";
  (void)state;
  loop = open_states(&a, &b);
  run_with(a, body, "1");
  run_with(b, body, "1");
  assert_int_equal(luna_enqueue(loop, LUNA_UPDATE, host_entry, NULL), 0);
  run_with(a, body, "2");
  run_with(b, body, "2");
  shared_log[0] = '\0';
  frames(loop, 2);
  assert_string_equal(shared_log, "a1 b1 host a2 b2 host");
  close_states(loop, a, b);
}

/* luna_loop_stop called by a task in the middle of a run of yields: the
   run ends after that task, and the yields not resumed yet run first at
   the next run of the timing, before those queued since. */
static int l_stop_loop(lua_State *L) {
  luna_loop_stop(luna_lua_loop(L));
  return 0;
}

static void a_stop_between_yields_leaves_the_rest_queued_in_order(void **state) {
  luna_loop *loop;
  lua_State *a;
  (void)state;
  loop = open_states(&a, NULL);
  lua_pushcfunction(a, l_stop_loop);
  lua_setglobal(a, "stop_loop");
  run(a, "for k = 1, 4 do task.spawn(function()\n"
         "  task.yield()\n"
         "  for i = 1, 2 do\n"
         "    record(tostring(k))\n"
         "    if k == 2 and i == 1 then stop_loop() end\n"
         "    task.yield()\n"
         "  end\n"
         "end) end");
  assert_int_equal(luna_loop_frame(loop, 0.05), LUNA_ESTOPPED);
  assert_string_equal(shared_log, "1 2");
  frames(loop, 1);
  assert_string_equal(shared_log, "1 2 3 4 1 2");
  frames(loop, 1);
  assert_string_equal(shared_log, "1 2 3 4 1 2 3 4");
  close_states(loop, a, NULL);
}

/* Deferred starts queued one after another are started in one call too
   (luna__start_cb): those of two states and a host's entry between them
   keep the queue's order, and a start that stops the loop leaves the rest
   for the next run, first. */
static void deferred_starts_of_several_states_keep_the_queue_order(void **state) {
  luna_loop *loop;
  lua_State *a, *b;
  (void)state;
  loop = open_states(&a, &b);
  lua_pushcfunction(b, l_stop_loop);
  lua_setglobal(b, "stop_loop");
  run(a, "task.defer(function() record('a1' .. (task.current() and '' or '?')) end)");
  run(b, "task.defer(function() record('b1' .. (task.current() and '' or '?')) end)");
  assert_int_equal(luna_enqueue(loop, LUNA_UPDATE, host_entry, NULL), 0);
  run(a, "task.defer(function() record('a2' .. (task.current() and '' or '?')) end)");
  run(b, "task.defer(function() record('b2' .. (task.current() and '' or '?')); stop_loop() end)");
  run(a, "task.defer(function() record('a3' .. (task.current() and '' or '?')) end)");
  run(b, "task.defer(function() record('b3' .. (task.current() and '' or '?')) end)");
  assert_int_equal(luna_loop_frame(loop, 0.05), LUNA_ESTOPPED);
  assert_string_equal(shared_log, "a1 b1 host a2 b2");
  frames(loop, 1);
  assert_string_equal(shared_log, "a1 b1 host a2 b2 a3 b3 host");
  close_states(loop, a, b);
}

/* Closing a state whose tasks wait on signals (plain and timed waits): the
   signals' finalizers may run before the binding's, and the tasks'
   cancellation then unwinds their waits on signals already finalized
   (found by an attack: disconnect wrote through the freed, NULL conns). */
static void closing_a_state_with_tasks_waiting_on_signals(void **state) {
  luna_loop *loop;
  lua_State *a, *b;
  (void)state;
  loop = open_states(&a, &b);
  run(a, "for i = 1, 3 do task.spawn(function() local s = task.signal(); s:wait() end) end\n"
         "for i = 1, 3 do task.spawn(function() local s = task.signal(); pcall(s.wait, s, 100) end) end\n");
  run(b, "task.spawn(function() task.delay_frame(2); record('b') end)");
  frames(loop, 1);
  lua_close(a);
  frames(loop, 2);
  assert_string_equal(shared_log, "b");
  close_states(loop, NULL, b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(each_state_counts_and_cancels_only_its_own_tasks),
      cmocka_unit_test(a_state_sees_its_own_current_task_inside_another_states_call),
      cmocka_unit_test(closing_a_state_runs_close_handlers_first_in_creation_order),
      cmocka_unit_test(closing_a_state_removes_all_its_work_from_the_loop),
      cmocka_unit_test(a_reset_cancels_the_tasks_of_every_state),
      cmocka_unit_test(closing_a_state_with_tasks_waiting_on_signals),
      cmocka_unit_test(callbacks_of_several_states_interleave_in_registration_order),
      cmocka_unit_test(yields_of_several_states_keep_the_queue_order),
      cmocka_unit_test(a_stop_between_yields_leaves_the_rest_queued_in_order),
      cmocka_unit_test(deferred_starts_of_several_states_keep_the_queue_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
