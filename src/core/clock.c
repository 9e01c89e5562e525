/*
** clock.c: the realtime source and its origin; scaled time arithmetic.
*/
#include <time.h>

#include "clock.h"

/* The default realtime source (and budgets' cost clock): CLOCK_MONOTONIC,
   in ns since an arbitrary origin (the clock's own). */
luna_ns luna__monotonic_ns(void *ud) {
  struct timespec ts;
  (void)ud;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (luna_ns)ts.tv_sec * LUNA_NS_PER_SECOND + (luna_ns)ts.tv_nsec;
}

void luna__clocks_init(luna__clocks *c, luna_time_fn fn, void *ud) {
  c->scaled = c->unscaled = c->fixed = 0;
  c->rt_base = c->rt_last = 0;
  c->rt_fn = fn ? fn : luna__monotonic_ns;
  c->rt_ud = fn ? ud : NULL;
  c->rt_origin = c->rt_fn(c->rt_ud);
}

luna_ns luna__clocks_realtime(luna__clocks *c) {
  luna_ns now = c->rt_fn(c->rt_ud);
  /* Subtract first: the source may have any origin, the difference is small. */
  c->rt_last = luna_ns_add(c->rt_base, now - c->rt_origin);
  return c->rt_last;
}

void luna__clocks_set_source(luna__clocks *c, luna_time_fn fn, void *ud) {
  c->rt_fn = fn ? fn : luna__monotonic_ns;
  c->rt_ud = fn ? ud : NULL;
  c->rt_base = c->rt_last;
  c->rt_origin = c->rt_fn(c->rt_ud);
}

luna_ns luna__scale_ns(luna_ns dt, double scale) {
  if (scale == 1.0)
    return dt;
  return luna__round_ns((double)dt * scale);
}
