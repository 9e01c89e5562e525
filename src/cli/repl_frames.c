/*
** repl_frames.c: the REPL's frame pacing. The loop keeps ticking at --hz
** while the prompt waits: the main loop polls its input with a timeout that
** ends when the next frame is due (luna__repl_poll_timeout), then runs the
** frame when it is (luna__repl_frame_if_due), both on the core's frame
** driver (lunaloop/driver.h). --fast keeps dt at exactly 1/hz and the
** realtime clock virtual (repeatable times) while frames stay paced in real
** time. It owns the driver. Includes repl.h (cli.h) and lunaloop_lua.h.
*/
#include <limits.h>

#include "lunaloop_lua.h"
#include "repl.h"

static luna_driver driver;

void luna__repl_frames_open(void) {
  if (R.opts.fast)
    luna_loop_use_virtual_realtime(R.loop);
}

void luna__repl_pace(void) {
  /* The period is >= 1 ns (the option parser's range), so this cannot
     fail. */
  luna_driver_init(&driver, R.loop, R.opts.frame_dt_ns,
                   R.opts.fast ? LUNA_DRIVE_REAL_EXACT_DT : LUNA_DRIVE_REAL);
}

int luna__repl_poll_timeout(void) {
  if (R.paused)
    return -1;
  luna_ns left = luna_driver_remaining(&driver);
  if (left <= 0)
    return 0;
  /* Rounded up, so that the frame is due when poll returns; a period of
     years (--hz 1e-9) waits INT_MAX ms at a time. */
  luna_ns ms = (left + 999999) / 1000000;
  return ms > INT_MAX ? INT_MAX : (int)ms;
}

void luna__repl_idle_gc(void) {
  if (!R.paused)
    luna_lua_gc_idle(R.loop, luna_driver_remaining(&driver));
}

void luna__repl_frame_if_due(void) {
  if (!R.paused && luna_driver_remaining(&driver) <= 0)
    luna__repl_run_frame(luna_driver_tick(&driver));
}

void luna__repl_check_exit(void) {
  int code = -1;
  if (!R.quit && luna_lua_exit_requested(R.L, &code)) {
    R.quit = true;
    R.status = code >= 0 ? code : (luna_lua_error_count(R.L) > 0 ? 1 : 0);
  }
}

void luna__repl_run_frame(luna_ns dt) {
  if (R.trace != NULL)
    luna__trace_frame(R.trace, luna_loop_frame_count(R.loop) + 1, luna_lua_task_count(R.L));
  luna__repl_frame_begin();
  int rc = luna_loop_frame_ns(R.loop, dt);
  uint64_t hit = luna__repl_frame_end();
  if (R.trace != NULL)
    luna__trace_frame_end(R.trace);
  if (rc < 0 && rc != LUNA_ESTOPPED)
    luna__repl_printf(stderr, LUNA_PROGNAME ": frame failed: %s\n", luna_strerror(rc));
  /* A callback or predicate that was hit reported its "interrupted"
     error; a task was cancelled, which is never reported: say so. */
  if (hit != 0)
    luna__repl_printf(stderr, "interrupted task %llu, which kept the frame from ending\n",
                      (unsigned long long)hit);
  luna__repl_check_exit();
}
