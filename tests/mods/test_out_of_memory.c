/*
** test_out_of_memory.c: out of memory anywhere in a mod's state ends in a
** reported error, never in a Lua panic (abort) of the host.
**
** A failed task's __close handler used to run after its budget context had
** ended, under the lenient cap meant for the binding's own bookkeeping; it
** could fill that margin, and the binding's next allocation (the report's
** text, built with no protected call above it: the task had been resumed
** from a timer callback) raised "not enough memory" into Lua's panic
** handler, which aborted the host. Here an allocator under the mods' capped
** one refuses allocations on purpose, at every allocation a mod scenario
** makes (load, spawn, delay, task.on and task.every callbacks, a channel,
** a scope, a timeout, bus send and receive, a failing task with a __close
** handler, a reload with carried state, an unload), one k at a time:
**
** - "twice": the k-th growth and the one after it are refused, so Lua's
**   emergency collection and retry of that request fails too and the
**   allocation site really raises;
** - "cliff": every growth from the k-th on is refused, to the end (the
**   unload and the set's free run with no memory at all).
**
** For each k the host must survive (no abort, no sanitizer report, nothing
** leaked), and the scenario must either give its full output or report
** an error that says it ran out of memory.
*/
#include "mods_util.h"

typedef struct faults {
  long count;   /* growths asked for so far */
  long fail_at; /* the first refused (0: never) */
  bool cliff;   /* refuse every growth from fail_at on, not just two */
  long refused;
} faults;

static faults g_faults;

static void *faulty_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  faults *f = (faults *)ud;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  if (ptr == NULL)
    osize = 0;
  if (nsize > osize) {
    long n = ++f->count;
    if (f->fail_at > 0 && n >= f->fail_at && (f->cliff || n <= f->fail_at + 1)) {
      f->refused++;
      return NULL;
    }
  }
  return realloc(ptr, nsize);
}

static const char scenario[] =
    "local got = {}\n"
    "mods.subscribe('t', function(v) got[#got + 1] = v.n end)\n"
    "mods.on_unload(function() return {n = #got} end)\n"
    "mods.on_load(function(saved) print('carried', saved.n) end)\n"
    "local calls = 0\n"
    "local h\n"
    "h = task.on('Update', function() calls = calls + 1; if calls == 3 then h:remove() end end)\n"
    "local ticks = 0\n"
    "local e\n"
    "e = task.every(1 / 60, function(n) ticks = ticks + n; if ticks >= 2 then e:remove() end end)\n"
    "local ch = task.channel(1)\n"
    "task.spawn(function() for i = 1, 3 do ch:send(i) end; ch:close() end)\n"
    "task.spawn(function()\n"
    "  while true do\n"
    "    local v = ch:receive()\n"
    "    if v == nil then break end\n"
    "    mods.send('t', {n = v, s = 'x' .. v})\n"
    "  end\n"
    "end)\n"
    "task.defer(function()\n"
    "  local x <close> = setmetatable({}, {__close = function(_, err)\n"
    "    local waste = {}\n"
    "    for i = 1, 100 do waste[i] = ('y'):rep(i) end\n"
    "    print('closed', err ~= nil)\n"
    "  end})\n"
    "  task.delay(0.01)\n"
    "  error('boom')\n"
    "end)\n"
    "task.spawn(function()\n"
    "  task.wait_until(function() return #got >= 3 end)\n"
    "  print('got', #got, calls, ticks)\n"
    "end)\n"
    "task.scope(function(s) s:spawn(function() task.yield() end) end)\n"
    "local ok, err = pcall(task.timeout, 0.001, function() task.delay(1) end)\n"
    "print('timeout', task.is_timeout(err) or err)\n"
    "local sig, heard = task.signal(), 0\n"
    "sig:connect(function(v) heard = heard + v end)\n"
    "local g = task.group{name = 'g'}\n"
    "g:spawn(function()\n"
    "  local v = sig:wait()\n"
    "  g:delay(0.001)\n"
    "  heard = heard + v\n"
    "end)\n"
    "task.spawn(function()\n"
    "  sig:fire(1); sig:fire_deferred(2)\n"
    "  task.yield()\n"
    "  print('signal', heard, g:count()); g:cancel()\n"
    "end)\n";

/* The output of one run without faults: the first load, then the reload,
   which gets on_unload's result. "signal 3 1": the handler heard the
   fire (1) and the deferred fire (2), and the group's member is still
   in its g:delay. */
static const char want_out[] = "[s] got\t3\t1\t1\n"
                               "[s] timeout\ttrue\n"
                               "[s] closed\ttrue\n"
                               "[s] signal\t3\t1\n"
                               "[s] carried\t3\n"
                               "[s] got\t3\t1\t1\n"
                               "[s] timeout\ttrue\n"
                               "[s] closed\ttrue\n"
                               "[s] signal\t3\t1\n";

/* The errors of one run without faults: the task that fails on purpose,
   once per load. */
#define WANT_ERRORS 2

/* The folder of the mod, written once for a sweep. */
static fixture *g_fx;

/* Runs the scenario once with g_faults as it is, on a new loop and set;
   returns the set's error count, and copies what it printed and reported
   to out and rep. */
static uint64_t run(char *out, size_t outcap, char *rep, size_t repcap) {
  fixture *f = g_fx;
  luna_mods_config cfg;
  uint64_t errors;
  cfg = fx_config();
  /* Memory is what this sweep is about: a time budget as generous as
     fx_new's keeps a busy machine from stopping a run part-way. */
  cfg.time_limit = (luna_ns)60 * 1000000000;
  cfg.memory_limit = 4u << 20;
  cfg.alloc = faulty_alloc;
  cfg.alloc_ud = &g_faults;
  cfg.print = fx_print;
  cfg.print_ud = f;
  cfg.report = fx_report;
  cfg.report_ud = f;
  f->outlen = f->replen = 0;
  f->out[0] = f->rep[0] = '\0';
  assert_int_equal(luna_loop_new(NULL, &f->loop), 0);
  assert_int_equal(luna_mods_new(f->loop, &cfg, &f->set), 0);
  luna_mods_load_dir(f->set, f->dir);
  fx_frames(f, 4);
  luna_mods_reload(f->set, "s");
  fx_frames(f, 4);
  luna_mods_unload(f->set, "s");
  errors = luna_mods_error_count(f->set);
  luna_mods_free(f->set);
  luna_loop_free(f->loop);
  f->set = NULL;
  f->loop = NULL;
  snprintf(out, outcap, "%s", f->out);
  snprintf(rep, repcap, "%s", f->rep);
  return errors;
}

/* The scenario without faults: its exact output and errors; returns how
   many growths it asks for. */
static long clean_run(void) {
  char out[4096], rep[4096];
  memset(&g_faults, 0, sizeof g_faults);
  assert_int_equal(run(out, sizeof out, rep, sizeof rep), WANT_ERRORS);
  assert_string_equal(out, want_out);
  return g_faults.count;
}

/* A mod's output says it saw the error itself (its pcall caught it). */
static bool mod_saw_memory_error(const char *out) {
  return strstr(out, "not enough memory") != NULL;
}

static void sweep(bool cliff) {
  static char out[1 << 16], rep[1 << 16];
  long total, k;
  g_fx = fx_new(NULL);
  luna_mods_free(g_fx->set); /* the folder is all this sweep keeps of it */
  luna_loop_free(g_fx->loop);
  fx_write(g_fx, "s/mod.lua", scenario);
  total = clean_run();
  assert_true(total > 1000); /* the scenario does reach its allocations */
  for (k = 1; k <= total; k++) {
    uint64_t errors;
    memset(&g_faults, 0, sizeof g_faults);
    g_faults.fail_at = k;
    g_faults.cliff = cliff;
    errors = run(out, sizeof out, rep, sizeof rep);
    if (g_faults.refused == 0)
      fail_msg("k = %ld: no allocation was refused", k);
    if (strcmp(out, want_out) != 0 && !mod_saw_memory_error(out) &&
        (errors == 0 || strstr(rep, "memory") == NULL))
      fail_msg("k = %ld (%s): the output changed, and no error of memory was reported:\n"
               "%s\nreports:\n%s", k, cliff ? "cliff" : "twice", out, rep);
  }
  g_fx->set = NULL;
  g_fx->loop = NULL;
  fx_free(g_fx);
}

static void every_refused_allocation_ends_in_a_reported_error(void **state) {
  (void)state;
  sweep(false);
}

static void running_out_of_memory_for_good_ends_in_reported_errors(void **state) {
  (void)state;
  sweep(true);
}

/* The case that aborted the host: a task resumed by its timer fails, and
   its __close handler fills memory with what it keeps. The handler is
   the mod's code, so it gets the mod's cap (it used to get the
   bookkeeping margin above it, which it filled, and the report after it
   then raised unprotected): it fails with "not enough memory", both
   errors are reported, the memory overrun is counted, and the host goes
   on. */
static void a_close_handler_that_fills_memory_stops_at_the_cap(void **state) {
  luna_mods_config cfg;
  fixture *f;
  luna_mod_info info;
  (void)state;
  cfg = fx_config();
  cfg.memory_limit = 1u << 20;
  f = fx_new(&cfg);
  fx_write(f, "s/mod.lua",
           "hoard = {}\n"
           "task.spawn(function()\n"
           "  local hog <close> = setmetatable({}, {__close = function()\n"
           "    while true do hoard[#hoard + 1] = ('x'):rep(1000) .. #hoard end\n"
           "  end})\n"
           "  task.delay(0.01)\n"
           "  error('boom')\n"
           "end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 10);
  assert_has(f->rep, "s: to-be-closed variable of task s/mod.lua:2 failed: not enough memory");
  assert_has(f->rep, "s: task s/mod.lua:2 failed: s/mod.lua:7: boom");
  info = fx_info(f, "s");
  assert_int_equal(info.memory_overruns, 1);
  assert_int_equal(info.state, LUNA_MOD_LOADED);
  /* What the handler kept stayed under the cap, not in the margin above. */
  assert_true(info.memory <= cfg.memory_limit);
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_close_handler_that_fills_memory_stops_at_the_cap),
      cmocka_unit_test(every_refused_allocation_ends_in_a_reported_error),
      cmocka_unit_test(running_out_of_memory_for_good_ends_in_reported_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
