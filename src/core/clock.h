/*
** clock.h: the loop's four clocks, all in int64 nanoseconds.
**
** scaled, unscaled and fixed are counters the loop advances; realtime is read
** from a source (CLOCK_MONOTONIC or the host's) when asked. Every clock reads
** 0 when the loop is created. Loop thread only.
*/
#ifndef LUNA_CLOCK_H
#define LUNA_CLOCK_H

#include "lunaloop/loop.h"

typedef struct luna__clocks {
  luna_ns scaled;   /* += round(dt * time_scale) per frame */
  luna_ns unscaled; /* += dt per frame */
  luna_ns fixed;    /* += fixed_dt per fixed step */
  /* realtime = rt_base + (source() - rt_origin). rt_origin is the source's
     reading when it was installed, rt_base the clock's value then. */
  luna_time_fn rt_fn; /* never NULL: the default is CLOCK_MONOTONIC */
  void *rt_ud;
  luna_ns rt_origin;
  luna_ns rt_base;
  luna_ns rt_last; /* the last value read, for continuity on a switch */
} luna__clocks;

/* CLOCK_MONOTONIC in ns (ud unused): the default realtime source and the
   default cost clock of budgets. */
luna_ns luna__monotonic_ns(void *ud);

/* All clocks at 0; the realtime source `fn` (NULL: CLOCK_MONOTONIC). */
void luna__clocks_init(luna__clocks *c, luna_time_fn fn, void *ud);

/* Reads the realtime clock now (calls the source once). */
luna_ns luna__clocks_realtime(luna__clocks *c);

/* Installs a new realtime source (NULL: CLOCK_MONOTONIC). The clock goes on
   from the last value it read (0 if never read), so it never runs backwards
   as observed and a source installed right after creation starts at 0. */
void luna__clocks_set_source(luna__clocks *c, luna_time_fn fn, void *ud);

/* Rounds a finite x >= 0 to the nearest integer nanosecond, halves up,
   clamped to LUNA_NS_MAX (defined in timing.c). */
luna_ns luna__round_ns(double x);

/* dt * scale rounded to nearest (dt >= 0, scale >= 0 finite), exact when
   scale is 1. */
luna_ns luna__scale_ns(luna_ns dt, double scale);

#endif
