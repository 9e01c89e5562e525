/*
** run.c: `lunaloop run [options] SCRIPT [ARGS...]`.
**
** The order of a run:
**   1. a loop (fixed_dt from --fixed-hz, time scale from --time-scale; under
**      --fast a realtime source that reads the unscaled clock, so that runs
**      are repeatable) and a Lua state attached to it; with --sim-tick-rate
**      a simulation on the loop, attached to the state (task.sim);
**   2. the main chunk starts as the task "main" before the first frame, so
**      frame() is 0 there and it may await at top level;
**   3. frames, each preceded by the stop checks: a stop signal (Ctrl-C,
**      SIGTERM, SIGHUP), task.exit, nothing alive (no task and no
**      task.on/every callback), a stuck run (luna_lua_stuck: tasks alive
**      and nothing that could wake one; reported), --frames reached; and by
**      the report of SIGQUIT, when one came;
**   4. the remaining tasks are cancelled in creation order (to-be-closed
**      variables run), the state is closed and the loop freed.
*/
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "cli.h"
#include "lunaloop_lua.h"

/* --sim-tick-rate: a simulation on the loop at FixedUpdate (the loop frees
   it), attached to the state as task.sim. */
static int attach_sim(lua_State *L, luna_loop *loop, const luna_run_options *o) {
  luna_sim_config cfg;
  luna_sim *sim;
  int rc;
  memset(&cfg, 0, sizeof cfg);
  cfg.tick_ns = o->sim_tick_ns;
  cfg.check_distance = o->sim_check;
  cfg.history = o->sim_history;
  if ((rc = luna_sim_new(loop, &cfg, &sim)) < 0)
    return rc;
  return luna_lua_attach_sim(L, sim);
}

/* Why the frame loop ended. */
typedef enum stop_reason {
  STOP_FINISHED,  /* nothing alive, task.exit, or --frames reached */
  STOP_INTERRUPTED,
  STOP_STUCK,     /* no task can make progress any more (reported) */
  STOP_FAILED     /* the loop refused a frame (a bug; reported) */
} stop_reason;

/* True while something can still happen: a task not settled, or a per-tick
   or periodic callback that will run again. */
static bool anything_alive(lua_State *L) {
  return luna_lua_task_count(L) + luna_lua_callback_count(L) > 0;
}

/* Drives frames until a stop condition holds. The checks come before every
   frame, including the first, so a script whose main chunk never awaits
   runs no frame at all. */
static stop_reason drive(lua_State *L, luna_loop *loop, const luna_run_options *o,
                         luna_trace *trace) {
  luna_driver driver;
  luna_driver_init(&driver, loop, o->frame_dt_ns, o->fast ? LUNA_DRIVE_FAST : LUNA_DRIVE_REAL);
  for (;;) {
    if (luna__interrupted())
      return STOP_INTERRUPTED;
    if (luna_lua_exit_requested(L, NULL) || !anything_alive(L))
      return STOP_FINISHED;
    if (luna__quit_requested())
      luna__report_tasks(L, stderr, "SIGQUIT");
    if (luna_lua_stuck(L)) {
      luna_lua_report_stuck(L, stderr);
      return STOP_STUCK;
    }
    if (o->has_frames && driver.frames >= o->frames)
      return STOP_FINISHED;
    luna_lua_gc_idle(loop, luna_driver_remaining(&driver));
    if (!luna_driver_wait(&driver))
      continue; /* a signal cut the sleep short: check again */
    if (trace != NULL)
      luna__trace_frame(trace, luna_loop_frame_count(loop) + 1, luna_lua_task_count(L));
    /* LUNA_ESTOPPED means task.exit stopped the frame: the checks above see
       the request. */
    int rc = luna_driver_frame(&driver);
    if (trace != NULL)
      luna__trace_frame_end(trace);
    /* An interrupt raised in this frame has unwound what it hit; the
       cancellations that follow must run their cleanup normally. */
    luna_lua_interrupt_clear();
    if (rc < 0 && rc != LUNA_ESTOPPED) {
      fprintf(stderr, LUNA_PROGNAME ": frame %llu failed: %s\n",
              (unsigned long long)luna_loop_frame_count(loop), luna_strerror(rc));
      return STOP_FAILED;
    }
  }
}

/* The exit status once every task was cancelled: 128 + the stop signal's
   number after one, 3 for a stuck run, task.exit's code when it gave one,
   else 1 when any error was reported, else 0. */
static int exit_status(lua_State *L, stop_reason why) {
  int code = -1;
  if (why == STOP_INTERRUPTED || luna__interrupted())
    return luna__interrupt_status();
  if (why == STOP_FAILED)
    return LUNA_EXIT_ERROR;
  if (why == STOP_STUCK)
    return LUNA_EXIT_STUCK;
  if (luna_lua_exit_requested(L, &code) && code >= 0)
    return code;
  return luna_lua_error_count(L) > 0 ? LUNA_EXIT_ERROR : LUNA_EXIT_OK;
}

/* Runs the script in a prepared loop and state; returns the exit status. */
static int run_script(lua_State *L, luna_loop *loop, const luna_run_options *o,
                      int argc, char **argv, int script) {
  int status = LUNA_EXIT_OK;
  luna_trace *trace = NULL;
  int nargs = luna__script_prepare(L, o, argc, argv, script, &status);
  if (nargs < 0)
    return status;
  /* The trace starts before the main chunk, so its first resume is in it. */
  if (o->trace != NULL) {
    if ((trace = luna__trace_open(o->trace)) == NULL)
      return LUNA_EXIT_USAGE;
    luna__trace_attach(trace, L);
  }
  /* From here on Ctrl-C (or SIGTERM, SIGHUP) stops the script instead of
     the process, so even a main chunk that never yields can be interrupted
     cleanly. */
  luna__signals_install(NULL);
  int rc = luna_lua_spawn(L, nargs, "main");
  luna_lua_interrupt_clear();
  stop_reason why = STOP_FAILED;
  if (rc < 0) {
    fprintf(stderr, LUNA_PROGNAME ": cannot start the script: %s\n", luna_strerror(rc));
  } else {
    lua_pop(L, 1); /* the Task: the binding keeps it while it is alive */
    why = drive(L, loop, o, trace);
  }
  luna_lua_cancel_all(L);
  status = exit_status(L, why);
  if (trace != NULL) {
    if (!luna__trace_close(trace) && status == LUNA_EXIT_OK)
      status = LUNA_EXIT_ERROR;
  }
  luna__signals_restore();
  return status;
}

int luna__cli_run(int argc, char **argv, int first) {
  luna_run_options o;
  int status = luna__run_parse_options(argc - first, argv + first, &o);
  if (status >= 0)
    return status;

  luna_config config = {0};
  config.fixed_dt_ns = o.fixed_dt_ns;
  luna_loop *loop = NULL;
  int rc = luna_loop_new(&config, &loop);
  if (rc < 0) {
    fprintf(stderr, LUNA_PROGNAME ": cannot create the loop: %s\n", luna_strerror(rc));
    return LUNA_EXIT_ERROR;
  }
  luna_loop_set_time_scale(loop, o.time_scale); /* checked by the parser */
  luna__cli_pace_gc(loop);
  if (o.fast)
    luna_loop_use_virtual_realtime(loop);

  lua_State *L = luaL_newstate();
  if (L == NULL) {
    fprintf(stderr, LUNA_PROGNAME ": cannot create the Lua state: not enough memory\n");
    luna_loop_free(loop);
    return LUNA_EXIT_ERROR;
  }
  luaL_openlibs(L);
  luna_lua_guard_interrupts(L); /* Ctrl-C reaches message handlers, coroutines */
  rc = luna_lua_attach(L, loop);
  if (rc < 0) {
    fprintf(stderr, LUNA_PROGNAME ": cannot attach the loop: %s\n", luna_strerror(rc));
    status = LUNA_EXIT_ERROR;
  } else if (o.has_sim && (rc = attach_sim(L, loop, &o)) < 0) {
    fprintf(stderr, LUNA_PROGNAME ": cannot make the simulation: %s\n", luna_strerror(rc));
    status = LUNA_EXIT_ERROR;
  } else {
    status = run_script(L, loop, &o, argc, argv, first + o.script);
  }
  lua_close(L);
  luna__cli_free_loop(loop);
  return status;
}
