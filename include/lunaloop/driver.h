/*
** lunaloop/driver.h: driving frames from a program's main loop, and the
** virtual realtime clock that makes such runs repeatable.
**
** A driver decides when the next frame is due and what its dt is; the
** program decides what to do between frames (check its stop conditions,
** wait for input). The usual loop is
**
**     luna_driver d;
**     luna_driver_init(&d, loop, period_ns, LUNA_DRIVE_REAL);
**     while (keep_going()) {
**       if (!luna_driver_wait(&d))
**         continue;                 (a signal cut the sleep short)
**       rc = luna_driver_frame(&d);
**     }
**
** and a program that waits on something else too (the REPL polls its
** input) waits at most luna_driver_remaining(&d) ns, and once that is <= 0
** takes the frame's dt from luna_driver_tick and runs the frame itself.
** luna_driver_remaining is also the spare time a program may spend before
** it waits: the Lua binding's luna_lua_gc_idle(loop, remaining) gives it to
** the paced garbage collector, as `lunaloop run` does.
**
** The real-time pacing: frame k is due at start + k * period on
** CLOCK_MONOTONIC, and a wait sleeps to that absolute deadline, so sleep
** overshoot does not accumulate into drift and short hiccups do not change
** the average rate. A frame that begins more than a whole period late
** (a slow frame, a stopped process) restarts the grid from now instead of
** running frames back to back to catch up. dt is what was measured between
** the starts of two frames, not clamped: the loop's max_fixed_steps
** already bounds the fixed work of a long dt.
**
** Threads: a driver belongs to its loop's thread; every function here is
** for that thread only.
*/
#ifndef LUNALOOP_DRIVER_H
#define LUNALOOP_DRIVER_H

#include <stdbool.h>
#include <stdint.h>

#include "export.h"
#include "loop.h"

LUNA_BEGIN_DECLS

/* Makes the loop's realtime clock follow its unscaled clock instead of the
   wall clock: under virtual time (`lunaloop run --fast`, task.run with
   fast = true) a realtime delay then passes with the frames' dt, so two
   runs see the same times. Like luna_loop_set_realtime_source, the clock
   goes on from the last value it read and never runs backwards as
   observed; luna_loop_set_realtime_source(loop, NULL, NULL) returns to
   CLOCK_MONOTONIC. Returns 0, or LUNA_EINVAL for a NULL loop. */
LUNA_API int luna_loop_use_virtual_realtime(luna_loop *loop);

/* How a driver paces frames and measures their dt. */
typedef enum luna_drive_mode {
  LUNA_DRIVE_FAST = 0, /* back to back, dt exactly the period: repeatable
                          runs (--fast); no clock is read and no wait sleeps */
  LUNA_DRIVE_REAL = 1, /* on the real-time grid, dt measured */
  LUNA_DRIVE_REAL_EXACT_DT = 2 /* on the real-time grid, dt exactly the
                                  period: an interactive run whose times are
                                  still repeatable (the REPL's --fast) */
} luna_drive_mode;

/* A frame driver. The fields are the driver's own: read them if useful,
   change them only through the functions here. */
typedef struct luna_driver {
  luna_loop *loop;
  luna_ns period;       /* ns between frames, >= 0 */
  luna_drive_mode mode;
  luna_ns last;         /* CLOCK_MONOTONIC ns at which the previous frame
                           began (or the driver started); real modes only */
  luna_ns next;         /* CLOCK_MONOTONIC ns at which the next frame is due */
  uint64_t frames;      /* frames luna_driver_frame ran (returned 0 or
                           LUNA_ESTOPPED) */
} luna_driver;

/* Starts driving `loop` at one frame every `period` ns (a rate of hz is a
   period of round(1e9 / hz)); the first frame is due one period from now
   in the real modes, at once in LUNA_DRIVE_FAST. Calling it again restarts
   the grid (a new rate) and zeroes `frames`. It does not touch the loop's
   realtime clock: call luna_loop_use_virtual_realtime for that. Returns 0,
   or LUNA_EINVAL for a NULL driver or loop, a negative period or an
   unknown mode (the driver is then untouched). A period of 0 makes every
   frame due at once (in LUNA_DRIVE_FAST with dt 0). */
LUNA_API int luna_driver_init(luna_driver *d, luna_loop *loop, luna_ns period,
                              luna_drive_mode mode);

/* Ns until the next frame is due: <= 0 when it is due now (always 0 in
   LUNA_DRIVE_FAST). */
LUNA_API luna_ns luna_driver_remaining(const luna_driver *d);

/* Sleeps until the next frame is due (at once when it already is, and in
   LUNA_DRIVE_FAST). Returns true when it is due, false when a signal
   interrupted the sleep (its handler ran: check what it set, then call
   again to go on waiting for the same deadline). */
LUNA_API bool luna_driver_wait(luna_driver *d);

/* Marks a frame begun now and returns its dt in ns: the period in
   LUNA_DRIVE_FAST and LUNA_DRIVE_REAL_EXACT_DT, else the ns measured since
   the previous frame began; the grid moves on by one period (restarting
   from now when more than a period late). For programs that run the frame
   themselves; luna_driver_frame calls it. */
LUNA_API luna_ns luna_driver_tick(luna_driver *d);

/* Runs one frame now: luna_loop_frame_ns(loop, luna_driver_tick(d)), and
   counts it in d->frames when that returned 0 or LUNA_ESTOPPED. Returns
   what luna_loop_frame_ns returned. It does not wait: call
   luna_driver_wait first to keep the rate. */
LUNA_API int luna_driver_frame(luna_driver *d);

LUNA_END_DECLS

#endif
