/*
** test_mods.c: the mod set from the host's side (include/lunaloop_mods.h):
** dependency order and its errors, instruction budgets (main task, plain
** coroutine, predicate, per-tick callback, pcall), disabling
** after repeated overruns, memory caps, reload and unload (tasks cancelled,
** to-be-closed variables run, state carried), the bus (copies, refusals,
** order, host posts) and hot reload on a file change. Each test ends by
** freeing the set and the loop; ASan checks that nothing leaked.
*/
#include "mods_util.h"

#define BUDGET 100000

static luna_mods_config budget_config(unsigned max_overruns) {
  luna_mods_config c;
  c = fx_config();
  c.instruction_limit = BUDGET;
  c.max_overruns = max_overruns;
  return c;
}

/* ---- loading ---------------------------------------------------------------------- */

/* a depends on b, d on a; b has load_order 5, c load_order 1: c, b, a, d. */
static void dependency_order_follows_depends_then_load_order(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "a/manifest.lua", "return {name = 'a', depends = {'b'}}");
  fx_write(f, "a/mod.lua", "print('a')");
  fx_write(f, "b/manifest.lua", "return {name = 'b', load_order = 5}");
  fx_write(f, "b/mod.lua", "print('b')");
  fx_write(f, "c/manifest.lua", "return {name = 'c', load_order = 1}");
  fx_write(f, "c/mod.lua", "print('c')");
  fx_write(f, "d/manifest.lua", "return {name = 'd', depends = {'a'}, load_order = -9}");
  fx_write(f, "d/mod.lua", "print('d')");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_string_equal(f->out, "[c] c\n[b] b\n[a] a\n[d] d\n");
  assert_int_equal(luna_mods_count(f->set), 4);
  assert_int_equal(fx_info(f, "d").state, LUNA_MOD_LOADED);
  assert_int_equal(f->replen, 0);
  fx_free(f);
}

/* A missing dependency fails its mod and every mod that depends on it, each
   named; the others load. */
static void missing_dependency_is_reported_naming_both_mods(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "x/manifest.lua", "return {name = 'x', depends = {'nope'}}");
  fx_write(f, "x/mod.lua", "print('x')");
  fx_write(f, "y/manifest.lua", "return {name = 'y', depends = {'x'}}");
  fx_write(f, "y/mod.lua", "print('y')");
  fx_write(f, "z/mod.lua", "print('z')"); /* no manifest: name from the folder */
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), LUNA_EINVAL);
  assert_has(f->rep, "x: not loaded: it depends on 'nope', which is not in");
  assert_has(f->rep, "y: not loaded: it depends on 'x', which failed to load");
  assert_has(luna_mods_last_error(f->set), "mod 'x'");
  assert_string_equal(f->out, "[z] z\n");
  assert_int_equal(fx_info(f, "x").state, LUNA_MOD_FAILED);
  assert_int_equal(fx_info(f, "y").state, LUNA_MOD_FAILED);
  fx_free(f);
}

/* A failed mod is tried again when its files change, or, when it failed
   for a dependency, once that dependency is loaded; a poll with neither
   reloaded every failed mod ("files changed" with no change). */
static void failed_mods_wait_for_a_change_or_their_dependency(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "x/manifest.lua", "return {name = 'x', load_order = 1}");
  fx_write(f, "x/mod.lua", "this is not Lua");
  fx_write(f, "y/manifest.lua", "return {name = 'y', depends = {'x'}, load_order = 2}");
  fx_write(f, "y/mod.lua", "print('y')");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), LUNA_EINVAL);
  assert_has(f->rep, "y: not loaded: it depends on 'x', which failed to load");
  f->rep[0] = '\0';
  f->replen = 0;
  assert_int_equal(fx_poll(f), 0);
  assert_string_equal(f->rep, "");
  fx_write(f, "x/mod.lua", "print('x')");
  assert_int_equal(fx_poll(f), 2);
  assert_has(f->rep, "x: files changed: reloading");
  assert_has(f->rep, "y: its dependencies are loaded now: reloading");
  assert_string_equal(f->out, "[x] x\n[y] y\n");
  assert_int_equal(fx_info(f, "y").state, LUNA_MOD_LOADED);
  assert_int_equal(fx_poll(f), 0);
  fx_free(f);
}

/* p and q depend on each other; r depends on p. */
static void dependency_cycle_is_reported_naming_the_cycle(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "p/manifest.lua", "return {name = 'p', depends = {'q'}}");
  fx_write(f, "p/mod.lua", "print('p')");
  fx_write(f, "q/manifest.lua", "return {name = 'q', depends = {'p'}}");
  fx_write(f, "q/mod.lua", "print('q')");
  fx_write(f, "r/manifest.lua", "return {name = 'r', depends = {'p'}}");
  fx_write(f, "r/mod.lua", "print('r')");
  fx_write(f, "s/mod.lua", "print('s')");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), LUNA_EINVAL);
  assert_has(f->rep, "p: not loaded: dependency cycle: p -> q -> p");
  assert_has(f->rep, "q: not loaded: dependency cycle: p -> q -> p");
  assert_has(f->rep, "r: not loaded: it depends on 'p', which failed to load");
  assert_string_equal(f->out, "[s] s\n");
  fx_free(f);
}

/* A manifest is data: not a table, unknown fields, endless loops and
   syntax errors fail that mod only. */
static void bad_manifests_fail_their_mod_only(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "n/manifest.lua", "return 42");
  fx_write(f, "n/mod.lua", "print('n')");
  fx_write(f, "u/manifest.lua", "return {name = 'u', dependencies = {'x'}}");
  fx_write(f, "u/mod.lua", "print('u')");
  fx_write(f, "l/manifest.lua", "while true do end");
  fx_write(f, "l/mod.lua", "print('l')");
  fx_write(f, "e/manifest.lua", "return {name = os.getenv('HOME')}");
  fx_write(f, "e/mod.lua", "print('e')");
  fx_write(f, "s/manifest.lua", "return {");
  fx_write(f, "s/mod.lua", "print('s')");
  fx_write(f, "ok/mod.lua", "print('ok')");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), LUNA_EINVAL);
  assert_has(f->rep, "n: not loaded: manifest.lua must return a table, got number");
  assert_has(f->rep, "u: not loaded: manifest.lua: unknown field 'dependencies'");
  assert_has(f->rep, "l: not loaded: manifest.lua runs too long");
  assert_has(f->rep, "e: not loaded: manifest.lua:1: attempt to index a nil value (global 'os')");
  assert_has(f->rep, "s: not loaded: manifest.lua:1:");
  assert_string_equal(f->out, "[ok] ok\n");
  fx_free(f);
}

/* A syntax error in mod.lua fails the mod with file:line; a main chunk that
   raises is a reported task error and the mod stays loaded. */
static void mod_lua_errors_are_reported(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "bad/mod.lua", "x = = 1");
  fx_write(f, "raises/mod.lua", "task.on(function() end)\nerror('boom')");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), LUNA_EINVAL);
  assert_has(f->rep, "bad: failed to load: bad/mod.lua:1:");
  assert_has(f->rep, "raises: task main failed: raises/mod.lua:2: boom");
  assert_int_equal(fx_info(f, "bad").state, LUNA_MOD_FAILED);
  assert_int_equal(fx_info(f, "raises").state, LUNA_MOD_LOADED);
  assert_int_equal(luna_mods_error_count(f->set), 2);
  fx_free(f);
}

/* ---- budgets ---------------------------------------------------------------------- */

/* A second mod and a second task of the same mod that must keep running. */
static const char ticker[] =
    "ticks = 0\n"
    "task.spawn(function() while true do task.yield(); ticks = ticks + 1 end end)\n";

static void budget_stops_endless_loop_in_main_task(void **state) {
  luna_mods_config c = budget_config(3);
  fixture *f = fx_new(&c);
  (void)state;
  fx_write(f, "loop/mod.lua", "print('before'); while true do end");
  fx_write(f, "other/mod.lua", ticker);
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_has(f->out, "[loop] before");
  assert_has(f->rep, "loop: task main failed: loop/mod.lua:1: instruction budget exceeded (100000 "
                     "instructions)");
  fx_frames(f, 3);
  assert_int_equal(fx_global(f, "other", "ticks"), 3);
  assert_int_equal(fx_info(f, "loop").budget_overruns, 1);
  assert_int_equal(fx_info(f, "loop").state, LUNA_MOD_LOADED);
  fx_free(f);
}

/* A task keeps resuming a plain coroutine.create coroutine that loops.
   coroutine.resume hands the budget's stop back as an error, so a task
   that resumed the coroutine again after each stop ran for ever: the stop
   has to stand for the whole context. The budget stops the whole task within the
   configured count, the frame completes, the report says the budget was
   exceeded, and the mod's other task and the other mod go on. */
static void budget_stops_loop_in_plain_coroutine(void **state) {
  luna_mods_config c = budget_config(3);
  fixture *f = fx_new(&c);
  (void)state;
  fx_write(f, "spinner/mod.lua",
           "iters = 0\n"
           "local function runaway()\n"
           "  local co = coroutine.create(function()\n"
           "    while true do\n"
           "      iters = iters + 1\n"
           "      if iters % 100 == 0 then coroutine.yield() end\n"
           "    end\n"
           "  end)\n"
           "  while true do coroutine.resume(co) end\n"
           "end\n"
           "task.defer(runaway)\n" /* its own resume, at the next Update */
           "ticks = 0\n"
           "task.spawn(function() while true do task.yield(); ticks = ticks + 1 end end)\n");
  fx_write(f, "other/mod.lua", ticker);
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 1); /* completes: luna_loop_frame returned 0 */
  assert_has(f->rep, "spinner: task spinner/mod.lua:2 failed: spinner/mod.lua:");
  assert_has(f->rep, "instruction budget exceeded (100000 instructions)");
  /* One iteration is at least 4 instructions: stopped within the budget. */
  assert_true(fx_global(f, "spinner", "iters") > 0);
  assert_true(fx_global(f, "spinner", "iters") * 4 <= BUDGET);
  fx_frames(f, 2);
  assert_int_equal(fx_global(f, "spinner", "ticks"), 3);
  assert_int_equal(fx_global(f, "other", "ticks"), 3);
  assert_int_equal(fx_info(f, "spinner").tasks, 1); /* the ticker; the runaway failed */
  assert_int_equal(fx_info(f, "spinner").budget_overruns, 1);
  fx_free(f);
}

/* coroutine.wrap coroutines are budgeted too, and a pcall around the
   runaway code cannot keep it going. */
static void budget_cannot_be_escaped_with_wrap_or_pcall(void **state) {
  luna_mods_config c = budget_config(10);
  fixture *f = fx_new(&c);
  (void)state;
  fx_write(f, "w/mod.lua",
           "task.defer(function()\n"
           "  local gen = coroutine.wrap(function() while true do end end)\n"
           "  gen()\n"
           "end)\n"
           "task.defer(function()\n"
           "  while true do pcall(function() while true do end end) end\n"
           "end)\n"
           "task.defer(function()\n"
           "  while true do pcall(task.spawn, function() while true do end end) end\n"
           "end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 2);
  assert_int_equal(fx_info(f, "w").tasks, 0);
  assert_int_equal(fx_info(f, "w").budget_overruns, 3);
  fx_free(f);
}

/* A wait_until predicate runs on the state's main thread: it gets a budget
   of its own, and its error is raised inside the waiting task. */
static void budget_stops_loop_in_predicate(void **state) {
  luna_mods_config c = budget_config(3);
  fixture *f = fx_new(&c);
  (void)state;
  fx_write(f, "p/mod.lua",
           ticker);
  fx_write(f, "p/more.lua", "");
  fx_write(f, "q/mod.lua",
           "calls = 0\n"
           "task.spawn(function()\n"
           "  local ok, err = pcall(task.wait_until, function()\n"
           "    calls = calls + 1\n"
           "    while true do end\n"
           "  end)\n"
           "  print(ok, err)\n"
           "end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 2);
  assert_has(f->out, "[q] false\tq/mod.lua:5: instruction budget exceeded (100000 instructions)");
  assert_int_equal(fx_global(f, "q", "calls"), 1);
  assert_int_equal(fx_global(f, "p", "ticks"), 2);
  fx_free(f);
}

/* A task.on callback that loops is stopped, reported and removed. */
static void budget_stops_loop_in_per_tick_callback(void **state) {
  luna_mods_config c = budget_config(3);
  fixture *f = fx_new(&c);
  (void)state;
  fx_write(f, "cb/mod.lua",
           "n = 0\n"
           "task.on('Update', function() n = n + 1 end)\n"
           "task.on('Update', function() while true do end end)\n"
           "task.every(1/60, function() n = n + 1 end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 3);
  assert_has(f->rep, "cb: callback cb/mod.lua:3 failed: cb/mod.lua:3: instruction budget exceeded");
  assert_int_equal(fx_info(f, "cb").callbacks, 2);
  assert_int_equal(fx_global(f, "cb", "n"), 6);
  assert_int_equal(fx_info(f, "cb").budget_overruns, 1);
  fx_free(f);
}

/* A signal's handler that loops is stopped like any of the mod's code.
   Fired from a callback, the stop belongs to the callback's call: it ends
   the fire (a later handler would only be stopped too) and s:fire raises
   it, so the callback is reported and removed. In a deferred delivery each
   handler is a call of its own for the budget: the looping one is stopped
   and reported, and the fire goes on with the next. The mod goes on. */
static void budget_stops_loop_in_signal_handler(void **state) {
  luna_mods_config c = budget_config(3);
  fixture *f = fx_new(&c);
  (void)state;
  fx_write(f, "sg/mod.lua",
           "n, later = 0, 0\n"
           "local s, d = task.signal(), task.signal()\n"
           "s:connect(function() n = n + 1; if n == 1 then while true do end end end)\n"
           "s:connect(function() later = later + 1 end)\n"
           "task.on('Update', function() s:fire() end)\n"
           "d:connect(function() while true do end end)\n"
           "d:connect(function() later = later + 10 end)\n"
           "d:fire_deferred()\n"
           "task.on('Update', function() n = n + 100 end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 3);
  assert_has(f->rep, "sg: signal handler sg/mod.lua:6 failed: sg/mod.lua:6: instruction budget exceeded");
  assert_has(f->rep, "sg: callback sg/mod.lua:5 failed: sg/mod.lua:3: instruction budget exceeded");
  assert_int_equal(fx_global(f, "sg", "later"), 10);
  assert_int_equal(fx_global(f, "sg", "n"), 301);
  assert_int_equal(fx_info(f, "sg").callbacks, 1);
  fx_free(f);
}

/* Lua calls a message handler with hooks off when the error comes from a
   hook, so a budget stop raised in (or into) a handler that loops could
   never be raised again: the host froze. The sandbox's xpcall lets a stop
   through without calling the handler, and is otherwise the stock one
   (results, handler, yields inside a task). */
static void budget_stops_loop_in_xpcall_message_handler(void **state) {
  luna_mods_config c = budget_config(3);
  fixture *f = fx_new(&c);
  (void)state;
  fx_write(f, "x/mod.lua",
           "task.defer(function()\n"
           "  xpcall(function() error('x') end, function(e) while true do end end)\n"
           "end)\n"
           "task.defer(function()\n"
           "  local c <close> = setmetatable({}, {__close = function()\n"
           "    print('close:', xpcall(error, function(e) return 'handled ' .. e end, 'cx', 0))\n"
           "  end})\n"
           "  xpcall(function() while true do end end, function(e) while true do end end)\n"
           "end)\n"
           "task.spawn(function()\n"
           "  print(xpcall(function(a) task.yield() return a + 1, 'r' end,\n"
           "               function(e) return 'h:' .. e end, 41))\n"
           "  print(xpcall(function() error('plain', 0) end, function(e) return 'h:' .. e end))\n"
           "  print(pcall(function() xpcall(print) end))\n"
           "  print(pcall(mods.send, nil, 1))\n"
           "end)\n");
  fx_write(f, "other/mod.lua", ticker);
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 3);
  assert_int_equal(fx_info(f, "x").budget_overruns, 2);
  assert_has(f->out, "[x] true\t42\tr\n");
  assert_has(f->out, "[x] false\th:plain\n");
  assert_has(f->out, "[x] false\tx/mod.lua:14: bad argument #2 to 'xpcall' (function expected, "
                     "got no value)\n");
  /* Only the stop's own error skips the handler: another one meanwhile
     (in the stopped task's __close) gets it. */
  assert_has(f->out, "[x] close:\tfalse\thandled cx\n");
  /* Through pcall the call site gives no name: it is found all the same. */
  assert_has(f->out, "[x] false\tbad argument #1 to 'mods.send'");
  assert_int_equal(fx_global(f, "other", "ticks"), 3);
  fx_free(f);
}

/* A bare coroutine.yield in a task is raised from a hook too: an xpcall
   handler that loops is skipped for it, and a pcall around it no longer
   leaves the task without its budget hook (review: the hook it replaced
   was cleared, so the loop after it was never stopped). */
static void bare_yield_keeps_the_budget_and_skips_a_looping_handler(void **state) {
  luna_mods_config c = budget_config(3);
  fixture *f = fx_new(&c);
  (void)state;
  fx_write(f, "y/mod.lua",
           "task.spawn(function()\n"
           "  print(xpcall(function() coroutine.yield() end, function(m) while true do end end))\n"
           "end)\n"
           "task.defer(function()\n"
           "  print(pcall(function() coroutine.yield() end))\n"
           "  while true do end\n"
           "end)\n"
           "task.defer(function()\n"
           "  local ok, e = pcall(function() coroutine.yield() end)\n"
           "  task.yield()\n"
           "  print(xpcall(function() error(e, 0) end, function(m) return 'handled' end))\n"
           "end)\n");
  /* Each bare yield restarts the budget hook's count: a loop of them,
     shorter than a step each, ran for ever (third review). */
  fx_write(f, "w/mod.lua",
           "task.defer(function() while true do pcall(function() coroutine.yield() end) end end)\n");
  fx_write(f, "other/mod.lua", ticker);
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 2);
  /* The message names the yield's own line. */
  assert_has(f->out, "[y] false\ty/mod.lua:2: coroutine.yield inside a task: use a task.* await");
  assert_has(f->out, "[y] false\ty/mod.lua:5: coroutine.yield inside a task: use a task.* await");
  assert_has(f->rep, "y: task y/mod.lua:4 failed: y/mod.lua:6: instruction budget exceeded");
  assert_int_equal(fx_info(f, "y").budget_overruns, 1);
  /* The error raised again later is an ordinary one: its handler runs. */
  assert_has(f->out, "[y] false\thandled\n");
  assert_has(f->rep, "w: task w/mod.lua:1 failed: w/mod.lua:1: instruction budget exceeded");
  assert_int_equal(fx_global(f, "other", "ticks"), 2);
  fx_free(f);
}

/* The task.on_error handler of a mod is budgeted too. */
static void budget_stops_loop_in_error_handler(void **state) {
  luna_mods_config c = budget_config(3);
  fixture *f = fx_new(&c);
  (void)state;
  fx_write(f, "h/mod.lua",
           "task.on_error(function() while true do end end)\n"
           "task.defer(function() error('first') end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 2);
  assert_int_equal(fx_info(f, "h").budget_overruns, 1);
  assert_int_equal(fx_info(f, "h").errors, 1);
  assert_has(f->rep, "h: its task.on_error handler failed: h/mod.lua:1: instruction budget "
                     "exceeded");
  assert_has(f->rep, "h: task h/mod.lua:2 failed: h/mod.lua:2: first");
  fx_free(f);
}

/* The handler has no budget of its own inside another run (docs/modding.md
   "Errors"): a child that fails inside its spawner's run has the handler
   called in that run, so a runaway handler stops the spawner too. */
static void error_handler_shares_the_budget_of_the_reporting_run(void **state) {
  luna_mods_config c = budget_config(3);
  fixture *f = fx_new(&c);
  (void)state;
  fx_write(f, "h/mod.lua",
           "task.on_error(function() while true do end end)\n"
           "task.defer(function()\n"
           "  task.spawn(function() error('child') end)\n"
           "  print('spawner goes on')\n"
           "end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 2);
  assert_has(f->rep, "h: task h/mod.lua:3 failed: h/mod.lua:3: child");
  assert_lacks(f->out, "spawner goes on");
  assert_has(f->rep, "h: task h/mod.lua:2 failed: h/mod.lua:1: instruction budget exceeded");
  /* The spawner's failure is reported between runs: the handler is called
     again, as a run of its own, and overruns its own fresh budget. */
  assert_int_equal(fx_info(f, "h").budget_overruns, 2);
  assert_int_equal(fx_info(f, "h").errors, 2); /* the child, then the spawner */
  fx_free(f);
}

/* After max_overruns overruns the mod is disabled (its state closed, its
   tasks cancelled) with a report; the other mod keeps running. */
static void repeated_overruns_disable_the_mod(void **state) {
  luna_mods_config c = budget_config(2);
  fixture *f = fx_new(&c);
  (void)state;
  fx_write(f, "bad/mod.lua",
           "local guard <close> = setmetatable({}, {__close = function() print('closed') end})\n"
           "while true do task.defer(function() while true do end end); task.yield() end\n");
  fx_write(f, "good/mod.lua", ticker);
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 4);
  assert_int_equal(fx_info(f, "bad").state, LUNA_MOD_DISABLED);
  assert_has(f->rep, "bad: disabled after 2 overruns: instruction budget exceeded 2 times");
  assert_has(f->out, "[bad] closed");
  assert_has(fx_info(f, "bad").last_error, "disabled");
  assert_null(luna_mods_state(f->set, "bad"));
  fx_frames(f, 2);
  assert_int_equal(fx_global(f, "good", "ticks"), 6);
  /* A reload brings it back, with its counts reset. */
  assert_int_equal(luna_mods_reload(f->set, "bad"), 0);
  assert_int_equal(fx_info(f, "bad").state, LUNA_MOD_LOADED);
  assert_int_equal(fx_info(f, "bad").budget_overruns, 0);
  fx_free(f);
}

/* ---- memory ----------------------------------------------------------------------- */

/* Past its cap a mod gets "not enough memory"; the host and the other mods
   go on, and the cap holds. */
static void memory_cap_refuses_and_host_continues(void **state) {
  luna_mods_config c;
  fixture *f;
  (void)state;
  c = fx_config();
  c.memory_limit = 2 * 1024 * 1024;
  c.max_overruns = 2;
  f = fx_new(&c);
  fx_write(f, "hog/mod.lua",
           "task.spawn(function()\n"
           "  local t = {}\n"
           "  while true do t[#t + 1] = string.rep('x', 1000) .. #t end\n"
           "end)\n"
           "local ok, err = pcall(string.rep, 'x', 1 << 30)\n"
           "print(ok, err)\n"
           "task.defer(function() local t = {} while true do t[#t + 1] = {} end end)\n");
  fx_write(f, "good/mod.lua", ticker);
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_has(f->out, "[hog] false\tnot enough memory");
  assert_has(f->rep, "hog: task #2 failed: not enough memory");
  assert_true(fx_info(f, "hog").memory_peak <= c.memory_limit + c.memory_limit / 8);
  fx_frames(f, 3);
  assert_int_equal(fx_info(f, "hog").state, LUNA_MOD_DISABLED);
  assert_has(f->rep, "hog: disabled after 2 overruns");
  assert_int_equal(fx_global(f, "good", "ticks"), 3);
  fx_free(f);
}

/* ---- reload and unload -------------------------------------------------------------- */

/* Reloading cancels every task of the old state (to-be-closed variables see
   the cancellation) and runs the new mod.lua; on_unload's table reaches
   on_load as a copy. */
static void reload_cancels_tasks_and_carries_state(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "m/mod.lua",
           "count = 0\n"
           "mods.on_unload(function() return {count = count, list = {1, 2, 3}} end)\n"
           "mods.on_load(function(s) count = s.count; print('carried', s.count, #s.list) end)\n"
           "task.spawn(function()\n"
           "  local r <close> = setmetatable({}, {__close = function(_, e)\n"
           "    print('closed', task.is_cancelled(e)) end})\n"
           "  while true do task.yield(); count = count + 1 end\n"
           "end)\n"
           "print('loaded', count)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 5);
  assert_int_equal(fx_global(f, "m", "count"), 5);
  assert_int_equal(luna_mods_reload(f->set, "m"), 0);
  assert_string_equal(f->out, "[m] loaded\t0\n[m] closed\ttrue\n[m] loaded\t0\n"
                              "[m] carried\t5\t3\n");
  assert_int_equal(fx_info(f, "m").loads, 2);
  assert_int_equal(fx_info(f, "m").tasks, 1);
  fx_frames(f, 1);
  assert_int_equal(fx_global(f, "m", "count"), 6);
  fx_free(f);
}

/* Unloading calls on_unload, cancels the tasks, and the loop never calls
   into the mod again; unknown names are LUNA_ENOENT. */
static void unload_cancels_tasks(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "m/mod.lua",
           "mods.on_unload(function() print('bye') end)\n"
           "task.on(function() print('tick') end)\n"
           "task.spawn(function()\n"
           "  local r <close> = setmetatable({}, {__close = function() print('closed') end})\n"
           "  task.delay(100)\n"
           "end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 1);
  assert_int_equal(luna_mods_unload(f->set, "m"), 0);
  assert_has(f->rep, "m: unloading"); /* the report callback hears it */
  assert_string_equal(f->out, "[m] tick\n[m] bye\n[m] closed\n");
  fx_frames(f, 2);
  assert_string_equal(f->out, "[m] tick\n[m] bye\n[m] closed\n");
  assert_int_equal(fx_info(f, "m").state, LUNA_MOD_UNLOADED);
  assert_false(luna_mods_alive(f->set));
  assert_int_equal(luna_mods_unload(f->set, "nope"), LUNA_ENOENT);
  fx_free(f);
}

/* Loading a folder whose mod is loaded already is refused, and says why
   (luna_mods_last_error was empty). */
static void loading_a_loaded_mod_again_says_why(void **state) {
  fixture *f = fx_new(NULL);
  char path[300];
  (void)state;
  fx_write(f, "m/mod.lua", "print('loaded')\n");
  snprintf(path, sizeof path, "%s/m", f->dir);
  assert_int_equal(luna_mods_load(f->set, path), 0);
  assert_int_equal(luna_mods_load(f->set, path), LUNA_ESTATE);
  assert_has(luna_mods_last_error(f->set), "mod 'm' is loaded already");
  assert_string_equal(f->out, "[m] loaded\n");
  fx_free(f);
}

/* luna_mods_find and luna_mods_poll return an error code only, and their
   results (an index, a count of reloads) through out-parameters: an index
   or a count was returned through the same int as LUNA_ENOENT and
   LUNA_ESTATE, so a caller could take an error for a mod's place or a
   count. On an error the out-parameter is left alone. */
static size_t polled = 7;
static int poll_from_inside(lua_State *L) {
  luna_mods *set = (luna_mods *)lua_touserdata(L, lua_upvalueindex(1));
  lua_pushinteger(L, luna_mods_poll(set, &polled));
  return 1;
}

static void find_and_poll_report_errors_apart_from_results(void **state) {
  fixture *f = fx_new(NULL);
  size_t index = 99, n = 99;
  lua_State *L;
  (void)state;
  fx_write(f, "a/manifest.lua", "return {name = 'a', load_order = 1}");
  fx_write(f, "a/mod.lua", "print('a')");
  fx_write(f, "b/manifest.lua", "return {name = 'b', load_order = 2}");
  fx_write(f, "b/mod.lua", "task.spawn(function() task.yield(); rc = poll() end)");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_int_equal(luna_mods_find(f->set, "b", &index), 0);
  assert_int_equal(index, 1);
  assert_int_equal(luna_mods_find(f->set, "a", &index), 0);
  assert_int_equal(index, 0);
  assert_int_equal(luna_mods_find(f->set, "a", NULL), 0);
  assert_int_equal(luna_mods_find(f->set, "nope", &index), LUNA_ENOENT);
  assert_int_equal(index, 0);
  assert_int_equal(luna_mods_find(f->set, NULL, &index), LUNA_EINVAL);
  assert_int_equal(luna_mods_find(NULL, "a", &index), LUNA_EINVAL);
  assert_int_equal(index, 0);
  assert_int_equal(luna_mods_poll(f->set, &n), 0);
  assert_int_equal(n, 0);
  fx_write(f, "a/mod.lua", "print('a again')");
  assert_int_equal(luna_mods_poll(f->set, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(luna_mods_poll(f->set, NULL), 0);
  assert_int_equal(luna_mods_poll(NULL, &n), LUNA_EINVAL);
  assert_int_equal(n, 1);
  /* From a mod's task: LUNA_ESTATE, and the count is not written. */
  L = luna_mods_state(f->set, "b");
  assert_non_null(L);
  lua_pushlightuserdata(L, f->set);
  lua_pushcclosure(L, poll_from_inside, 1);
  lua_setglobal(L, "poll");
  fx_frames(f, 1);
  assert_int_equal(fx_global(f, "b", "rc"), LUNA_ESTATE);
  assert_int_equal(polled, 7);
  assert_string_equal(f->out, "[a] a\n[a] a again\n");
  fx_free(f);
}

/* Calls luna_mods_unload(set, "b") from inside a mod; returns its code. */
static int unload_from_inside(lua_State *L) {
  luna_mods *set = (luna_mods *)lua_touserdata(L, lua_upvalueindex(1));
  lua_pushinteger(L, luna_mods_unload(set, "b"));
  return 1;
}

/* The set's state may not change while a mod's Lua code runs. Only a
   task's resume counted as running: from a task.on callback, a task.every
   callback or a wait_until predicate, a host function could poll, reload
   or unload the very state that was calling it, which then ran on freed
   memory. Each of them now gets LUNA_ESTATE, and the mod goes on. */
static void set_refuses_changes_from_a_mods_callbacks(void **state) {
  fixture *f = fx_new(NULL);
  lua_State *L;
  (void)state;
  fx_write(f, "b/mod.lua",
           "local h; h = task.on(function() on_rc = poll(); on_un = unload(); h:remove() end)\n"
           "local e; e = task.every(0.01, function() every_rc = poll(); e:remove() end)\n"
           "task.spawn(function()\n"
           "  task.wait_until(function() pred_rc = poll(); return true end)\n"
           "  done = 1\n"
           "end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  L = luna_mods_state(f->set, "b");
  assert_non_null(L);
  lua_pushlightuserdata(L, f->set);
  lua_pushcclosure(L, poll_from_inside, 1);
  lua_setglobal(L, "poll");
  lua_pushlightuserdata(L, f->set);
  lua_pushcclosure(L, unload_from_inside, 1);
  lua_setglobal(L, "unload");
  fx_frames(f, 3);
  assert_int_equal(fx_global(f, "b", "on_rc"), LUNA_ESTATE);
  assert_int_equal(fx_global(f, "b", "on_un"), LUNA_ESTATE);
  assert_int_equal(fx_global(f, "b", "every_rc"), LUNA_ESTATE);
  assert_int_equal(fx_global(f, "b", "pred_rc"), LUNA_ESTATE);
  assert_int_equal(fx_global(f, "b", "done"), 1);
  assert_int_equal(luna_mods_error_count(f->set), 0);
  fx_free(f);
}

/* An on_unload that fails (here: its result cannot be copied) is reported
   and counted, in the set's count and in the mod's errors. */
static void failed_on_unload_is_counted(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "m/mod.lua",
           "mods.on_unload(function() return {f = function() end} end)\n"
           "task.on(function() end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 1);
  assert_int_equal(luna_mods_error_count(f->set), 0);
  assert_int_equal(luna_mods_reload(f->set, "m"), 0);
  assert_has(f->rep, "m: reloading");
  assert_has(f->rep, "m: on_unload failed: ");
  assert_has(f->rep, "value.f");
  assert_int_equal(luna_mods_error_count(f->set), 1);
  assert_int_equal(fx_info(f, "m").errors, 1);
  fx_free(f);
}

/* luna_mods_unload_all closes every mod (on_unload not called) and counts
   what fails while their tasks are cancelled: a to-be-closed variable that
   raises, runs over its budget or out of memory. */
static void unload_all_counts_errors_of_the_cancellation(void **state) {
  luna_mods_config c = budget_config(3);
  fixture *f;
  (void)state;
  c.memory_limit = 1024 * 1024;
  f = fx_new(&c);
  fx_write(f, "a/mod.lua",
           "mods.on_unload(function() print('never') end)\n"
           "task.spawn(function()\n"
           "  local r <close> = setmetatable({}, {__close = function() error('close fails') end})\n"
           "  task.delay(100)\n"
           "end)\n");
  fx_write(f, "b/mod.lua",
           "task.spawn(function()\n"
           "  local r <close> = setmetatable({}, {__close = function() while true do end end})\n"
           "  task.delay(100)\n"
           "end)\n");
  fx_write(f, "c/mod.lua",
           "task.spawn(function()\n"
           "  local r <close> = setmetatable({}, {__close = function()\n"
           "    local t = {}\n"
           "    for i = 1, 100 do t[i] = string.rep('x', 100000) .. i end\n"
           "  end})\n"
           "  task.delay(100)\n"
           "end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 1);
  assert_int_equal(luna_mods_error_count(f->set), 0);
  assert_int_equal(luna_mods_unload_all(f->set), 0);
  assert_has(f->rep, "close fails");
  assert_has(f->rep, "b: to-be-closed variable of task b/mod.lua:1 failed: b/mod.lua:2: instruction budget exceeded");
  assert_has(f->rep, "c: to-be-closed variable of task c/mod.lua:1 failed: not enough memory");
  assert_lacks(f->out, "never");
  assert_int_equal(fx_info(f, "a").errors, 1);
  assert_int_equal(fx_info(f, "b").errors, 1);
  assert_int_equal(fx_info(f, "c").errors, 1);
  assert_int_equal(luna_mods_error_count(f->set), 3);
  assert_int_equal(fx_info(f, "a").state, LUNA_MOD_UNLOADED);
  assert_false(luna_mods_alive(f->set));
  assert_int_equal(luna_mods_unload_all(f->set), 0); /* nothing left to close */
  assert_int_equal(luna_mods_error_count(f->set), 3);
  fx_free(f);
}

/* Changing a file of a mod reloads it at the next check. */
static void hot_reload_on_file_change(void **state) {
  luna_mods_config c;
  fixture *f;
  (void)state;
  memset(&c, 0, sizeof c);
  c.watch_frames = 2;
  f = fx_new(&c);
  fx_write(f, "m/mod.lua", "print('v1'); task.on(function() end)");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 4);
  assert_string_equal(f->out, "[m] v1\n");
  fx_write(f, "m/mod.lua", "print('version 2'); task.on(function() end)");
  fx_frames(f, 2);
  assert_string_equal(f->out, "[m] v1\n[m] version 2\n");
  assert_has(f->rep, "m: files changed: reloading");
  /* A new module file counts as a change too; poll checks at once. */
  fx_write(f, "m/extra.lua", "return 1");
  assert_int_equal(fx_poll(f), 1);
  assert_int_equal(fx_poll(f), 0);
  assert_int_equal(fx_info(f, "m").loads, 3);
  fx_free(f);
}

/* A mod that failed to load comes back when its files are fixed. */
static void hot_reload_retries_a_failed_mod(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "m/mod.lua", "this is not lua");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), LUNA_EINVAL);
  assert_int_equal(fx_info(f, "m").state, LUNA_MOD_FAILED);
  fx_write(f, "m/mod.lua", "print('fixed!')");
  assert_int_equal(fx_poll(f), 1);
  assert_int_equal(fx_info(f, "m").state, LUNA_MOD_LOADED);
  assert_has(f->out, "[m] fixed!");
  fx_free(f);
}

/* ---- the bus ------------------------------------------------------------------------ */

/* The receiver gets a copy made at the send: changing the table afterwards,
   or the receiver changing its copy, changes nothing else. */
static void bus_copies_values_at_the_send(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "a/manifest.lua", "return {name = 'a', load_order = 1}");
  fx_write(f, "a/mod.lua",
           "local t = {n = 1, sub = {x = 'a'}, list = {1, 2.5, true, 'z'}, [3] = false}\n"
           "mods.send('t', t)\n"
           "t.n = 2; t.sub.x = 'b'; t.list[1] = 99\n"
           "mods.subscribe('t', function(v) print('a got', v.n, v.sub.x, v.list[1]) end)\n");
  fx_write(f, "b/manifest.lua", "return {name = 'b', load_order = 2}");
  fx_write(f, "b/mod.lua",
           "mods.subscribe('t', function(v, topic, from)\n"
           "  print('b got', v.n, v.sub.x, v.list[1], v.list[2], v.list[3], v.list[4], v[3],\n"
           "        math.type(v.n), math.type(v.list[2]), topic, from)\n"
           "  v.n = 100; v.sub.x = 'changed'\n"
           "end)\n"
           "mods.subscribe('t', function(v) print('b again', v.n, v.sub.x) end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_string_equal(f->out, "");
  fx_frames(f, 1);
  /* a subscribed after its send, before the delivery: it gets it too. */
  assert_string_equal(f->out,
                      "[a] a got\t1\ta\t1\n"
                      "[b] b got\t1\ta\t1\t2.5\ttrue\tz\tfalse\tinteger\tfloat\tt\ta\n"
                      "[b] b again\t1\ta\n");
  fx_free(f);
}

/* Functions, userdata, threads, cycles, odd keys, deep nesting and values
   over the limit raise at the sending site. */
static void bus_refuses_what_cannot_cross(void **state) {
  luna_mods_config c;
  fixture *f;
  (void)state;
  c = fx_config();
  c.message_limit = 4096;
  f = fx_new(&c);
  fx_write(f, "a/mod.lua",
           "local function try(v) local ok, e = pcall(mods.send, 't', v); print(ok, e) end\n"
           "try({f = print})\n"
           "try({list = {1, 2, {co = coroutine.create(print)}}})\n"
           "local c = {}; c.self = {c}; try(c)\n"
           "try({[{}] = 1})\n"
           "local deep = {}; local d = deep; for i = 1, 200 do d.x = {}; d = d.x end; try(deep)\n"
           "try(string.rep('x', 5000))\n"
           "task.spawn(function() try(task.current()) end)\n"
           "local shared = {1}; try({shared, shared})\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_has(f->out, "[a] false\tmods.send: a function value cannot be copied between mods "
                     "(at value.f)");
  assert_has(f->out, "[a] false\tmods.send: a thread value (a task or a coroutine) cannot be copied between mods "
                     "(at value.list[3].co)");
  assert_has(f->out, "[a] false\tmods.send: the value has a cycle (at value.self[1])");
  assert_has(f->out, "[a] false\tmods.send: a table key of type table cannot be copied");
  assert_has(f->out, "[a] false\tmods.send: the value is nested deeper than 100 levels");
  /* the path ends after the last key that fits, and says it goes on */
  assert_has(f->out, "levels (at value.x.x.x");
  assert_has(f->out, ".x.x...)\n");
  assert_has(f->out, "[a] false\tmods.send: the value is larger than the limit of 4096 bytes");
  assert_has(f->out, "[a] false\tmods.send: a thread value (a task or a coroutine) cannot be copied between mods (at value)");
  assert_has(f->out, "[a] true\tnil");
  fx_free(f);
}

/* Messages arrive in the order sent; a subscriber error is reported and the
   others still get the message; remove() stops a subscription; the host
   can post too. */
static void bus_order_errors_and_host_posts(void **state) {
  fixture *f = fx_new(NULL);
  lua_State *H = luaL_newstate();
  (void)state;
  luaL_openlibs(H);
  fx_write(f, "a/manifest.lua", "return {name = 'a', load_order = 1}");
  fx_write(f, "a/mod.lua",
           "for i = 1, 3 do mods.send('n', i) end\n"
           "mods.subscribe('n', function(v) error('bad ' .. v) end)\n");
  fx_write(f, "b/manifest.lua", "return {name = 'b', load_order = 2}");
  fx_write(f, "b/mod.lua",
           "local s\n"
           "s = mods.subscribe('n', function(v, _, from) print('n', v, from); if v == 2 then s:remove() end end)\n"
           "mods.subscribe('host', function(v, _, from) print('host', v.k, from) end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 1);
  assert_string_equal(f->out, "[b] n\t1\ta\n[b] n\t2\ta\n");
  assert_has(f->rep, "a: subscriber of 'n' failed: a/mod.lua:2: bad 1");
  assert_has(f->rep, "a: subscriber of 'n' failed: a/mod.lua:2: bad 3");
  luaL_dostring(H, "return {k = 'v'}");
  assert_int_equal(luna_mods_send(f->set, "host", H, -1), 0);
  luaL_dostring(H, "return {f = print}");
  assert_int_equal(luna_mods_send(f->set, "host", H, -1), LUNA_EINVAL);
  assert_has(luna_mods_last_error(f->set), "function value cannot be copied");
  /* an empty index was sent as nil */
  assert_int_equal(luna_mods_send(f->set, "host", H, lua_gettop(H) + 5), LUNA_EINVAL);
  assert_has(luna_mods_last_error(f->set), "luna_mods_send: no value at index");
  assert_int_equal(luna_mods_send_string(f->set, "n", "s", 1), 0);
  fx_frames(f, 1);
  assert_has(f->out, "[b] host\tv\thost\n");
  lua_close(H);
  fx_free(f);
}

/* The copies waiting on the bus are the host's memory: a mod sending big
   values in a loop grew the host by gigabytes before the next delivery.
   At most 64 times the message limit in bytes of one sender may wait;
   past that its send raises (the host has a share of its own), and the
   bus takes its messages again once they were delivered. */
static void bus_refuses_more_than_64_message_limits_of_bytes(void **state) {
  luna_mods_config c;
  fixture *f;
  char big[4000];
  (void)state;
  c = fx_config();
  c.message_limit = 4096;
  f = fx_new(&c);
  memset(big, 'x', sizeof big);
  fx_write(f, "a/mod.lua",
           "local s = string.rep('x', 4000)\n"
           "local sent, ok, err = 0, true, nil\n"
           "while ok and sent < 1000 do ok, err = pcall(mods.send, 't', s); if ok then sent = sent + 1 end end\n"
           "print(sent, err)\n"
           "task.yield()\n"
           "print(pcall(mods.send, 't', s))\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  /* 4005 bytes each (type, length, text): 65 fit in 64 * 4096 */
  assert_has(f->out, "[a] 65\tmods.send: the bus is full (64 times the message limit in bytes "
                     "of this sender waiting)\n");
  fx_frames(f, 1);
  assert_has(f->out, "[a] true\n");
  assert_int_equal(luna_mods_send_string(f->set, "t", big, sizeof big), 0);
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dependency_order_follows_depends_then_load_order),
      cmocka_unit_test(missing_dependency_is_reported_naming_both_mods),
      cmocka_unit_test(failed_mods_wait_for_a_change_or_their_dependency),
      cmocka_unit_test(dependency_cycle_is_reported_naming_the_cycle),
      cmocka_unit_test(bad_manifests_fail_their_mod_only),
      cmocka_unit_test(mod_lua_errors_are_reported),
      cmocka_unit_test(budget_stops_endless_loop_in_main_task),
      cmocka_unit_test(budget_stops_loop_in_plain_coroutine),
      cmocka_unit_test(budget_cannot_be_escaped_with_wrap_or_pcall),
      cmocka_unit_test(budget_stops_loop_in_predicate),
      cmocka_unit_test(budget_stops_loop_in_per_tick_callback),
      cmocka_unit_test(budget_stops_loop_in_signal_handler),
      cmocka_unit_test(budget_stops_loop_in_error_handler),
      cmocka_unit_test(budget_stops_loop_in_xpcall_message_handler),
      cmocka_unit_test(bare_yield_keeps_the_budget_and_skips_a_looping_handler),
      cmocka_unit_test(error_handler_shares_the_budget_of_the_reporting_run),
      cmocka_unit_test(repeated_overruns_disable_the_mod),
      cmocka_unit_test(memory_cap_refuses_and_host_continues),
      cmocka_unit_test(reload_cancels_tasks_and_carries_state),
      cmocka_unit_test(unload_cancels_tasks),
      cmocka_unit_test(loading_a_loaded_mod_again_says_why),
      cmocka_unit_test(find_and_poll_report_errors_apart_from_results),
      cmocka_unit_test(set_refuses_changes_from_a_mods_callbacks),
      cmocka_unit_test(failed_on_unload_is_counted),
      cmocka_unit_test(unload_all_counts_errors_of_the_cancellation),
      cmocka_unit_test(hot_reload_on_file_change),
      cmocka_unit_test(hot_reload_retries_a_failed_mod),
      cmocka_unit_test(bus_copies_values_at_the_send),
      cmocka_unit_test(bus_refuses_what_cannot_cross),
      cmocka_unit_test(bus_order_errors_and_host_posts),
      cmocka_unit_test(bus_refuses_more_than_64_message_limits_of_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
