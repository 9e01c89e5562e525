/*
** driver.c: the frame driver and the virtual realtime source
** (lunaloop/driver.h): when the next frame is due on a CLOCK_MONOTONIC
** grid, the sleep to it, each frame's dt, and a realtime clock that follows
** the unscaled one.
** Includes only the core's clock.h (the monotonic source) and the public
** headers; it uses the loop only through its public functions, like any host.
*/
#include <errno.h>
#include <time.h>

#include "clock.h"
#include "lunaloop/driver.h"
#include "lunaloop/error.h"

/* The realtime source of luna_loop_use_virtual_realtime: the unscaled
   clock. */
static luna_ns virtual_realtime(void *ud) {
  return luna_loop_time((luna_loop *)ud, LUNA_CLOCK_UNSCALED);
}

int luna_loop_use_virtual_realtime(luna_loop *loop) {
  return luna_loop_set_realtime_source(loop, virtual_realtime, loop);
}

int luna_driver_init(luna_driver *d, luna_loop *loop, luna_ns period, luna_drive_mode mode) {
  if (d == NULL || loop == NULL || period < 0 ||
      (mode != LUNA_DRIVE_FAST && mode != LUNA_DRIVE_REAL && mode != LUNA_DRIVE_REAL_EXACT_DT))
    return LUNA_EINVAL;
  d->loop = loop;
  d->period = period;
  d->mode = mode;
  d->frames = 0;
  /* Fast mode reads no clock at all: its frames are due at once. */
  d->last = mode == LUNA_DRIVE_FAST ? 0 : luna__monotonic_ns(NULL);
  d->next = luna_ns_add(d->last, period);
  return 0;
}

luna_ns luna_driver_remaining(const luna_driver *d) {
  if (d->mode == LUNA_DRIVE_FAST)
    return 0;
  return d->next - luna__monotonic_ns(NULL);
}

bool luna_driver_wait(luna_driver *d) {
  struct timespec due;
  if (d->mode == LUNA_DRIVE_FAST)
    return true;
  due.tv_sec = (time_t)(d->next / LUNA_NS_PER_SECOND);
  due.tv_nsec = (long)(d->next % LUNA_NS_PER_SECOND);
  /* An absolute deadline: a sleep cut short and restarted, or one that
     overshoots, does not move the frames after it. clock_nanosleep returns
     the error instead of setting errno; a deadline already past returns at
     once. */
  return clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) != EINTR;
}

luna_ns luna_driver_tick(luna_driver *d) {
  luna_ns now, dt;
  if (d->mode == LUNA_DRIVE_FAST)
    return d->period;
  now = luna__monotonic_ns(NULL);
  dt = now - d->last;
  d->last = now;
  d->next = luna_ns_add(d->next, d->period);
  /* More than a whole period late: start the grid again from now rather
     than running frames back to back to catch up. */
  if (d->next <= now)
    d->next = luna_ns_add(now, d->period);
  return d->mode == LUNA_DRIVE_REAL_EXACT_DT ? d->period : dt;
}

int luna_driver_frame(luna_driver *d) {
  int rc = luna_loop_frame_ns(d->loop, luna_driver_tick(d));
  if (rc == 0 || rc == LUNA_ESTOPPED)
    d->frames++;
  return rc;
}
