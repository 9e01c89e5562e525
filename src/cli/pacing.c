/*
** pacing.c: the REPL's real-time frame pacing (run and mods use the core's
** luna_driver, lunaloop/driver.h, which paces the same way). Frames are due
** on a fixed grid of CLOCK_MONOTONIC (start + k * period); dt is what was
** measured.
*/
#include <time.h>

#include "cli.h"

static luna_ns monotonic_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (luna_ns)ts.tv_sec * LUNA_NS_PER_SECOND + ts.tv_nsec;
}

void luna__pacer_start(luna_pacer *p, luna_ns period) {
  p->period = period;
  p->last = monotonic_now();
  p->next = p->last + period;
}

luna_ns luna__pacer_remaining(const luna_pacer *p) {
  return p->next - monotonic_now();
}

luna_ns luna__pacer_tick(luna_pacer *p) {
  luna_ns now = monotonic_now();
  luna_ns dt = now - p->last;
  p->last = now;
  p->next += p->period;
  /* More than a whole period late (a slow frame, a stopped process): start
     the grid again from now rather than running frames back to back to catch
     up. The loop's max_fixed_steps already bounds the fixed work of a long dt. */
  if (p->next <= now)
    p->next = now + p->period;
  return dt;
}
