/*
** lunaloop/timing.h: the 16 timings of a frame and the clocks.
**
** A frame runs eight phases; each has a first timing (start of the phase) and
** a Last timing (end of the phase). The host does its own work for the phase
** between the two. Values are fixed: hosts may store them.
*/
#ifndef LUNALOOP_TIMING_H
#define LUNALOOP_TIMING_H

#include <stddef.h>
#include <stdint.h>

#include "export.h"

LUNA_BEGIN_DECLS

typedef enum luna_timing {
  LUNA_INITIALIZATION = 0,
  LUNA_LAST_INITIALIZATION = 1,
  LUNA_EARLY_UPDATE = 2,
  LUNA_LAST_EARLY_UPDATE = 3,
  LUNA_FIXED_UPDATE = 4, /* runs once per fixed step: 0..n times a frame */
  LUNA_LAST_FIXED_UPDATE = 5,
  LUNA_PRE_UPDATE = 6,
  LUNA_LAST_PRE_UPDATE = 7,
  LUNA_UPDATE = 8, /* the default timing of every await */
  LUNA_LAST_UPDATE = 9,
  LUNA_PRE_LATE_UPDATE = 10,
  LUNA_LAST_PRE_LATE_UPDATE = 11,
  LUNA_POST_LATE_UPDATE = 12,
  LUNA_LAST_POST_LATE_UPDATE = 13,
  LUNA_TIME_UPDATE = 14,
  LUNA_LAST_TIME_UPDATE = 15,
  LUNA_TIMING_COUNT = 16
} luna_timing;

/* Time in nanoseconds. Signed so that differences are plain subtraction. */
typedef int64_t luna_ns;

/* Deadlines and clocks clamp here (2^62 ns, about 146 years), so adding two
   clamped values never overflows. */
#define LUNA_NS_MAX ((luna_ns)1 << 62)
#define LUNA_NS_PER_SECOND INT64_C(1000000000)

/* The clocks stay below this (2^61 ns, about 73 years): a frame that would
   push one past it is refused, so a deadline "now + delay" always has room
   and never saturates at LUNA_NS_MAX while time still runs. */
#define LUNA_CLOCK_MAX (LUNA_NS_MAX / 2)

/* The largest time scale accepted (at 1e6 a 1/60 s frame is 4.6 hours of
   scaled time; anything larger is almost surely a bug). */
#define LUNA_TIME_SCALE_MAX 1e6

/* The clocks a delay can be measured on. */
typedef enum luna_clock {
  LUNA_CLOCK_SCALED = 0,   /* += dt * time_scale each frame (the default) */
  LUNA_CLOCK_UNSCALED = 1, /* += dt each frame */
  LUNA_CLOCK_REALTIME = 2, /* monotonic, read when checked; replaceable */
  LUNA_CLOCK_FIXED = 3,    /* += fixed_dt each fixed step */
  LUNA_CLOCK_COUNT = 4
} luna_clock;

/* The timing's name as in the design table ("FixedUpdate"), or NULL when
   `timing` is out of range. Any thread. */
LUNA_API const char *luna_timing_name(int timing);

/* Parses a case-sensitive timing name of `len` bytes into *out.
   Returns 0, or LUNA_EINVAL for an unknown name (*out untouched). */
LUNA_API int luna_timing_parse(const char *name, size_t len, luna_timing *out);

/* A static string listing every timing name in order, separated by ", ", for
   error messages ("Initialization, LastInitialization, ..."). */
LUNA_API const char *luna_timing_list(void);

/* True for the first timing of a phase (even values), whose Last partner is
   timing + 1. */
#define LUNA_TIMING_IS_FIRST(t) (((t) & 1) == 0)

/* The clock's name ("scaled", "unscaled", "realtime", "fixed"), or NULL. */
LUNA_API const char *luna_clock_name(int clock);

/* Parses a clock name; 0 or LUNA_EINVAL. */
LUNA_API int luna_clock_parse(const char *name, size_t len, luna_clock *out);

/* Converts seconds to nanoseconds, rounding to nearest; values above
   LUNA_NS_MAX clamp to it. Returns LUNA_EINVAL (and leaves *out untouched)
   for negative, NaN or infinite seconds. */
LUNA_API int luna_seconds_to_ns(double seconds, luna_ns *out);

/* Nanoseconds to seconds as a double. */
LUNA_API double luna_ns_to_seconds(luna_ns ns);

/* a + b clamped to [-LUNA_NS_MAX, LUNA_NS_MAX]. */
LUNA_API luna_ns luna_ns_add(luna_ns a, luna_ns b);

LUNA_END_DECLS

#endif
