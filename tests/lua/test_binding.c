/*
** test_binding.c: the binding from the host's side: several Lua states on one
** loop, closing a state, freeing the loop first, luna_lua_spawn, exit and
** error counts. Each test ends with nothing leaked (ASan checks the heap).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <lauxlib.h>
#include <lualib.h>

#include "lunaloop.h"
#include "lunaloop_lua.h"
#include "state_fixture.h"

/* Two states share a loop; closing one cancels its tasks (to-be-closed
   variables run inside the closing state) and the loop never calls into it
   again, while the other state's task keeps running. */
static void closing_a_state_cancels_only_its_tasks(void **state) {
  luna_loop *loop;
  lua_State *a, *b;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  a = new_task_state(loop);
  b = new_task_state(loop);
  run(a, "closed = 0; ticks = 0\n"
         "task.spawn(function()\n"
         "  local r <close> = setmetatable({}, {__close = function(_, e)\n"
         "    if task.is_cancelled(e) then io.write('a closed\\n') end end})\n"
         "  while true do task.yield(); ticks = ticks + 1 end\n"
         "end)\n"
         "task.on('Update', function() ticks = ticks + 1 end)\n");
  run(b, "ticks = 0; task.spawn(function() while true do task.yield(); ticks = ticks + 1 end end)");
  assert_int_equal(luna_loop_frame(loop, 0.016), 0);
  assert_int_equal(global_int(a, "ticks"), 2);
  assert_int_equal(luna_lua_task_count(a), 1);
  lua_close(a);
  assert_int_equal(luna_loop_frame(loop, 0.016), 0);
  assert_int_equal(luna_loop_frame(loop, 0.016), 0);
  assert_int_equal(global_int(b, "ticks"), 3);
  lua_close(b);
  luna_loop_free(loop);
}

/* What note() was called with, across a lua_close. */
static char g_notes[512];

static int l_note(lua_State *L) {
  size_t n = strlen(g_notes);
  snprintf(g_notes + n, sizeof g_notes - n, "%s\n", luaL_checkstring(L, 1));
  return 0;
}

/* A state that is closing takes no new work: the to-be-closed handlers its
   cancellations run could start tasks or callbacks that the loop would
   hold after the state is gone (or, in a mod, run with no budget). spawn,
   defer, task.on and task.every raise; cancelling and reading still work. */
static void closing_a_state_refuses_new_work(void **state) {
  luna_loop *loop;
  lua_State *a;
  (void)state;
  g_notes[0] = '\0';
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  a = new_task_state(loop);
  lua_register(a, "note", l_note);
  run(a, "local function try(what, fn, ...)\n"
         "  local ok, err = pcall(fn, ...)\n"
         "  note(what .. ' ' .. tostring(ok) .. ' ' .. tostring(err))\n"
         "end\n"
         "other = task.spawn(function() task.delay(100) end)\n"
         "task.spawn(function()\n"
         "  local r <close> = setmetatable({}, {__close = function()\n"
         "    try('spawn', task.spawn, function() end)\n"
         "    try('defer', task.defer, function() end)\n"
         "    try('on', task.on, function() end)\n"
         "    try('every', task.every, 1, function() end)\n"
         "    try('cancel', task.cancel, other)\n"
         "  end})\n"
         "  task.delay(100)\n"
         "end)\n");
  lua_close(a);
  assert_string_equal(g_notes,
                      "spawn false lunaloop: the Lua state is closing (no new tasks or callbacks)\n"
                      "defer false lunaloop: the Lua state is closing (no new tasks or callbacks)\n"
                      "on false lunaloop: the Lua state is closing (no new tasks or callbacks)\n"
                      "every false lunaloop: the Lua state is closing (no new tasks or callbacks)\n"
                      "cancel true nil\n");
  assert_int_equal(luna_loop_frame(loop, 0.016), 0); /* nothing of a is left */
  luna_loop_free(loop);
}

/* luna_lua_cancel_all: to-be-closed variables see the cancellation error. */
static void cancel_all_runs_close_handlers_with_cancellation(void **state) {
  luna_loop *loop;
  lua_State *a;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  a = new_task_state(loop);
  run(a, "seen = 'none'\n"
         "task.spawn(function()\n"
         "  local r <close> = setmetatable({}, {__close = function(_, e)\n"
         "    seen = task.is_cancelled(e) and 'cancelled' or tostring(e)\n"
         "  end})\n"
         "  task.delay(100)\n"
         "end)\n");
  assert_int_equal(luna_lua_cancel_all(a), 1);
  lua_getglobal(a, "seen");
  assert_string_equal(lua_tostring(a, -1), "cancelled");
  lua_pop(a, 1);
  lua_close(a);
  luna_loop_free(loop);
}

/* Freeing the loop before closing the state: tasks are cancelled at free,
   and the module raises a clear error afterwards. */
static void freeing_the_loop_first_cancels_tasks_and_module_reports_it(void **state) {
  luna_loop *loop;
  lua_State *L;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  run(L, "state = 'running'\n"
         "t = task.spawn(function()\n"
         "  local r <close> = setmetatable({}, {__close = function() state = 'closed' end})\n"
         "  task.delay(100)\n"
         "end)\n");
  luna_loop_free(loop);
  run(L, "assert(state == 'closed', state)\n"
         "assert(t:status() == 'cancelled')\n"
         "local ok, err = pcall(task.spawn, print)\n"
         "assert(not ok and err:find('the loop was freed'), err)\n");
  assert_null(luna_lua_loop(L));
  lua_close(L);
}

/* luna_lua_spawn runs the function as a task named as given, and refuses
   what is not a function. */
static void spawn_from_c_and_counts(void **state) {
  luna_loop *loop;
  lua_State *L;
  int code = 0;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  lua_pushinteger(L, 1);
  assert_int_equal(luna_lua_spawn(L, 0, NULL), LUNA_EINVAL);
  lua_settop(L, 0);
  {
    const char *src = "local n = ... ; task.yield(); error('bad ' .. n)";
    assert_int_equal(luaL_loadbuffer(L, src, strlen(src), "=worker.lua"), LUA_OK);
  }
  lua_pushinteger(L, 7);
  assert_int_equal(luna_lua_spawn(L, 1, "worker"), 0);
  assert_int_equal(lua_gettop(L), 1); /* the Task */
  lua_settop(L, 0);
  assert_int_equal(luna_lua_task_count(L), 1);
  assert_int_equal(luna_lua_error_count(L), 0);
  run(L, "task.on_error(function(err, tb, t) last = t.name .. ': ' .. err end)");
  assert_int_equal(luna_loop_frame(loop, 0.016), 0);
  assert_int_equal(luna_lua_task_count(L), 0);
  assert_int_equal(luna_lua_error_count(L), 1);
  lua_getglobal(L, "last");
  assert_string_equal(lua_tostring(L, -1), "worker: worker.lua:1: bad 7");
  lua_pop(L, 1);
  assert_false(luna_lua_exit_requested(L, &code));
  run(L, "task.spawn(function() task.exit(4) end)");
  assert_true(luna_lua_exit_requested(L, &code));
  assert_int_equal(code, 4);
  lua_close(L);
  luna_loop_free(loop);
}

/* A task is its thread and the task methods live in the metatable of
   threads, which Lua keeps one of per state. A host that gave threads a
   metatable of its own before opening the module would have lost its
   methods, or taken the tasks' away, without a word: the module refuses to
   open instead, says why, and leaves the host's metatable and the state
   as they were. Stock Lua leaves the main thread's extra space
   uninitialized and every thread starts with a copy of it: the module
   clears it, so a coroutine made later is never taken for a task. */
static void a_host_thread_metatable_refuses_the_module(void **state) {
  luna_loop *loop;
  lua_State *L;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = luaL_newstate();
  luaL_openlibs(L);
  lua_pushthread(L);
  lua_newtable(L);
  lua_pushliteral(L, "host");
  lua_setfield(L, -2, "owner");
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
  assert_int_equal(luna_lua_attach(L, loop), LUNA_EINVAL);
  assert_null(luna_lua_loop(L));
  assert_int_equal(lua_gettop(L), 0);
  lua_pushcfunction(L, luaopen_lunaloop);
  assert_int_not_equal(lua_pcall(L, 0, 1, 0), LUA_OK);
  assert_non_null(strstr(lua_tostring(L, -1), "threads already have a metatable"));
  lua_pop(L, 1);
  lua_newthread(L);
  assert_true(lua_getmetatable(L, -1));
  assert_int_equal(lua_getfield(L, -1, "owner"), LUA_TSTRING); /* still the host's */
  lua_close(L);

  L = luaL_newstate();
  luaL_openlibs(L);
  memset(lua_getextraspace(L), 0xa5, LUA_EXTRASPACE); /* what a reused block may hold */
  assert_int_equal(luna_lua_attach(L, loop), 0);
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(L, "task");
  run(L, "local co = coroutine.create(print)\n"
         "assert(not pcall(task.cancel, co))\n"
         "assert(select(2, pcall(function() return co:status() end)):find('not a task'))\n");
  lua_close(L);
  luna_loop_free(loop);
}

/* task.exit stops the frame: timings after the one that called it do not run
   in that frame. */
static void exit_stops_the_frame(void **state) {
  luna_loop *loop;
  lua_State *L;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  run(L, "late = false\n"
         "task.spawn(function() task.yield('Update'); task.exit() end)\n"
         "task.spawn(function() task.yield('LastUpdate'); late = true end)\n");
  assert_int_equal(luna_loop_frame(loop, 0.016), LUNA_ESTOPPED);
  lua_getglobal(L, "late");
  assert_false(lua_toboolean(L, -1));
  lua_pop(L, 1);
  assert_int_equal(luna_lua_cancel_all(L), 1);
  lua_close(L);
  luna_loop_free(loop);
}

/* A host function that drives the loop. */
static int l_host_frame(lua_State *L) {
  luna_loop *loop = (luna_loop *)lua_touserdata(L, lua_upvalueindex(1));
  lua_pushinteger(L, luna_loop_frame(loop, 0.016));
  return 1;
}

/* Regression: a host C function called by the main task while
   luna_lua_spawn was still running it (before its first await) could run a
   nested frame, in which other tasks saw the main task as running and could
   cancel it. The binding now holds the loop during every resume. */
static void driving_the_loop_from_inside_a_task_is_refused(void **state) {
  luna_loop *loop;
  lua_State *L;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  lua_pushlightuserdata(L, loop);
  lua_pushcclosure(L, l_host_frame, 1);
  lua_setglobal(L, "host_frame");
  assert_int_equal(luaL_loadstring(L, "first = host_frame(); task.yield(); second = host_frame()"), LUA_OK);
  assert_int_equal(luna_lua_spawn(L, 0, "main"), 0);
  lua_settop(L, 0);
  assert_int_equal(luna_loop_frame(loop, 0.016), 0);
  assert_int_equal(global_int(L, "first"), LUNA_ESTATE);
  assert_int_equal(global_int(L, "second"), LUNA_ESTATE);
  assert_int_equal(luna_loop_frame_count(loop), 1);
  /* outside any task the host drives it as usual */
  assert_int_equal(luna_loop_frame(loop, 0.016), 0);
  lua_close(L);
  luna_loop_free(loop);
}

/* luna_lua_interrupt as a SIGINT handler would call it, but at a known
   instant: from a C function that the Lua code calls. */
static int l_interrupt_now(lua_State *L) {
  (void)L;
  luna_lua_interrupt();
  return 0;
}

/* The interrupt hook is sticky until luna_lua_interrupt_clear (so a pcall
   in a runaway loop cannot swallow it), and a callback runs on the state's
   own thread. An interrupted callback left the hook there: the error
   handler that reported it raised "interrupted" at its first instruction
   (stderr said "error handler failed: interrupted"), and so did every
   callback after it in the same frame, each removed as failed. The report
   now drops the hook: the handler sees the one error, the other callback
   keeps running. */
static void an_interrupted_callback_is_reported_once_and_the_others_run(void **state) {
  luna_loop *loop;
  lua_State *L;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  lua_pushcfunction(L, l_interrupt_now);
  lua_setglobal(L, "interrupt_now");
  run(L, "reports, ticks, swallowed = {}, 0, 0\n"
         "task.on_error(function(e) reports[#reports + 1] = tostring(e) end)\n"
         "task.on('Update', function()\n"
         "  while true do\n"
         "    pcall(function() interrupt_now() while true do end end)\n"
         "    swallowed = swallowed + 1\n"
         "  end\n"
         "end)\n"
         "task.on('Update', function() ticks = ticks + 1 end)\n");
  assert_int_equal(luna_loop_frame(loop, 0.016), 0);
  luna_lua_interrupt_clear();
  assert_int_equal(luna_loop_frame(loop, 0.016), 0);
  run(L, "n_reports, report = #reports, reports[1]");
  assert_int_equal(global_int(L, "n_reports"), 1);
  lua_getglobal(L, "report");
  assert_non_null(strstr(lua_tostring(L, -1), "interrupted"));
  lua_pop(L, 1);
  assert_int_equal(global_int(L, "swallowed"), 0); /* still sticky under pcall */
  assert_int_equal(global_int(L, "ticks"), 2);
  assert_int_equal(luna_lua_callback_count(L), 1);
  lua_close(L);
  luna_loop_free(loop);
}

/* An interrupt that lands in a signal's handler stops the code that fired
   the signal, not only the handler: a fire reports a handler's error and
   goes on, which for an interrupt would swallow it (the later handlers
   would run, and the callback that fired would not stop). The fire ends
   and s:fire raises it again: the callback that fired is reported once,
   the later handler has not run. After the interrupt is cleared the
   signal works as before. In a deferred delivery it is reported once. */
static void an_interrupted_signal_handler_stops_the_fire_and_its_caller(void **state) {
  luna_loop *loop;
  lua_State *L;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  lua_pushcfunction(L, l_interrupt_now);
  lua_setglobal(L, "interrupt_now");
  run(L, "reports, log, first = {}, {}, true\n"
         "task.on_error(function(e) reports[#reports + 1] = tostring(e) end)\n"
         "s = task.signal()\n"
         "s:connect(function()\n"
         "  log[#log + 1] = 'a'\n"
         "  if first then first = false; pcall(function() interrupt_now() while true do end end) end\n"
         "  log[#log + 1] = 'a done'\n"
         "end)\n"
         "s:connect(function() log[#log + 1] = 'b' end)\n"
         "task.on('Update', function() s:fire(); log[#log + 1] = 'after fire' end)\n");
  assert_int_equal(luna_loop_frame(loop, 0.016), 0);
  luna_lua_interrupt_clear();
  run(L, "n_reports, report, after_frame = #reports, reports[1], table.concat(log, ' ')\n"
         "s:fire()\n"
         "after_fire = table.concat(log, ' ')");
  assert_int_equal(global_int(L, "n_reports"), 1);
  lua_getglobal(L, "report");
  assert_non_null(strstr(lua_tostring(L, -1), "interrupted"));
  lua_getglobal(L, "after_frame");
  assert_string_equal(lua_tostring(L, -1), "a");
  lua_getglobal(L, "after_fire");
  assert_string_equal(lua_tostring(L, -1), "a a a done b");
  lua_pop(L, 3);
  assert_int_equal(luna_lua_callback_count(L), 0); /* the callback that fired was removed */
  /* A deferred delivery has no caller to stop: the interrupt ends the fire
     and is reported once, as the handler's failure. */
  run(L, "first, log = true, {}\n"
         "s:fire_deferred()");
  assert_int_equal(luna_loop_frame(loop, 0.016), 0);
  luna_lua_interrupt_clear();
  run(L, "n_reports, report, deferred = #reports, reports[2], table.concat(log, ' ')");
  assert_int_equal(global_int(L, "n_reports"), 2);
  lua_getglobal(L, "report");
  assert_non_null(strstr(lua_tostring(L, -1), "interrupted"));
  lua_getglobal(L, "deferred");
  assert_string_equal(lua_tostring(L, -1), "a");
  lua_pop(L, 2);
  lua_close(L);
  luna_loop_free(loop);
}

/* A task with many arguments: the binding copies the function and its
   arguments through the caller's stack, which must make room for them (a
   C caller is only promised LUA_MINSTACK free slots). */
static void spawn_from_c_with_many_arguments(void **state) {
  luna_loop *loop;
  lua_State *L;
  int i;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  run(L, "function count(...) got = select('#', ...); last = select(got, ...) end");
  assert_true(lua_checkstack(L, 301));
  lua_getglobal(L, "count");
  for (i = 1; i <= 300; i++)
    lua_pushinteger(L, i);
  assert_int_equal(luna_lua_spawn(L, 300, "many"), 0);
  assert_int_equal(lua_gettop(L), 1); /* the Task */
  lua_settop(L, 0);
  assert_int_equal(global_int(L, "got"), 300);
  assert_int_equal(global_int(L, "last"), 300);
  lua_close(L);
  luna_loop_free(loop);
}

/* ---- the binding's own queues when memory runs out ------------------------ */

/* A Lua allocator that, while `armed`, refuses every new block of at least
   `big` bytes: the growth of the binding's queues (a mod at its memory cap
   sees the same), while Lua's small allocations still succeed. */
typedef struct picky {
  bool armed;
  size_t big;
  int refused;
} picky;

static void *picky_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  picky *p = ud;
  (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  if (p->armed && nsize >= p->big && nsize > osize) {
    p->refused++;
    return NULL;
  }
  return realloc(ptr, nsize);
}

/* A state on its own loop whose allocator refuses blocks of 1 KiB or more
   while `trigger` runs: `setup` (Lua) first, then `trigger` (Lua), or one
   frame when trigger is NULL. Checks that something was refused (the
   queue did try to grow) and returns the state for the caller's checks;
   free_picky closes both. */
static picky pk;
static luna_loop *pk_loop;

static lua_State *run_picky(const char *setup, const char *trigger) {
  lua_State *L;
  pk.armed = false;
  pk.big = 1024;
  pk.refused = 0;
  assert_int_equal(luna_loop_new(NULL, &pk_loop), 0);
  L = lua_newstate(picky_alloc, &pk);
  luaL_openlibs(L);
  assert_int_equal(luna_lua_attach(L, pk_loop), 0);
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(L, "task");
  run(L, setup);
  pk.armed = true;
  if (trigger != NULL)
    run(L, trigger);
  else
    assert_int_equal(luna_loop_frame(pk_loop, 0.016), 0);
  pk.armed = false;
  assert_true(pk.refused > 0);
  return L;
}

static void free_picky(lua_State *L) {
  assert_int_equal(luna_lua_task_count(L), 0);
  lua_close(L);
  luna_loop_free(pk_loop);
}

/* 200 awaiters woken in one run outgrow the ready queue (64 entries) while
   it cannot grow: every one still resumes, in the order it began waiting,
   and nothing raises in the host's frame. */
static void wake_ups_survive_a_ready_queue_that_cannot_grow(void **state) {
  lua_State *L;
  (void)state;
  L = run_picky("woken, in_order = 0, true\n"
                "local gate = task.spawn(function() task.yield() end)\n"
                "for i = 1, 200 do task.spawn(function()\n"
                "  task.await(gate)\n"
                "  if woken ~= i - 1 then in_order = false end\n"
                "  woken = i\n"
                "end) end\n",
                NULL);
  assert_int_equal(global_int(L, "woken"), 200);
  run(L, "ok = in_order and 1 or 0");
  assert_int_equal(global_int(L, "ok"), 1);
  free_picky(L);
}

/* A task waiting in the spill list (behind a ready ring that could not
   grow) and cancelled by an earlier awaiter before the pump reaches it:
   it ends cancelled, its to-be-closed variable runs once, and the others
   still resume. */
static void a_spilled_task_cancelled_before_its_turn(void **state) {
  lua_State *L;
  (void)state;
  L = run_picky("woken, closed, w = 0, 0, {}\n"
                "local gate = task.spawn(function() task.yield() end)\n"
                "for i = 1, 200 do w[i] = task.spawn(function()\n"
                "  local r <close> = setmetatable({}, {__close = function() closed = closed + 1 end})\n"
                "  task.await(gate)\n"
                "  if i == 1 then w[150]:cancel() end\n"
                "  woken = woken + 1\n"
                "end) end\n",
                NULL);
  assert_int_equal(global_int(L, "woken"), 199);
  assert_int_equal(global_int(L, "closed"), 200);
  run(L, "cancelled = w[150]:status() == 'cancelled' and 1 or 0");
  assert_int_equal(global_int(L, "cancelled"), 1);
  free_picky(L);
}

/* A __close handler that cancels 100 tasks while the cancellation queue
   cannot grow past 64: the rest are cancelled at once instead of queued,
   and every one of them unwinds (its own __close runs). */
static void cancels_survive_a_cancel_queue_that_cannot_grow(void **state) {
  lua_State *L;
  (void)state;
  L = run_picky("closed = 0\n"
                "local victims = {}\n"
                "for i = 1, 100 do victims[i] = task.spawn(function()\n"
                "  local r <close> = setmetatable({}, {__close = function() closed = closed + 1 end})\n"
                "  task.delay(100)\n"
                "end) end\n"
                "boss = task.spawn(function()\n"
                "  local r <close> = setmetatable({}, {__close = function()\n"
                "    for _, v in ipairs(victims) do v:cancel() end\n"
                "  end})\n"
                "  task.delay(100)\n"
                "end)\n",
                "boss:cancel()");
  assert_int_equal(global_int(L, "closed"), 100);
  free_picky(L);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(closing_a_state_cancels_only_its_tasks),
      cmocka_unit_test(cancel_all_runs_close_handlers_with_cancellation),
      cmocka_unit_test(closing_a_state_refuses_new_work),
      cmocka_unit_test(freeing_the_loop_first_cancels_tasks_and_module_reports_it),
      cmocka_unit_test(spawn_from_c_and_counts),
      cmocka_unit_test(a_host_thread_metatable_refuses_the_module),
      cmocka_unit_test(spawn_from_c_with_many_arguments),
      cmocka_unit_test(exit_stops_the_frame),
      cmocka_unit_test(driving_the_loop_from_inside_a_task_is_refused),
      cmocka_unit_test(an_interrupted_callback_is_reported_once_and_the_others_run),
      cmocka_unit_test(an_interrupted_signal_handler_stops_the_fire_and_its_caller),
      cmocka_unit_test(wake_ups_survive_a_ready_queue_that_cannot_grow),
      cmocka_unit_test(a_spilled_task_cancelled_before_its_turn),
      cmocka_unit_test(cancels_survive_a_cancel_queue_that_cannot_grow),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
