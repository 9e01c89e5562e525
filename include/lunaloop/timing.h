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

/* The timings in frame order: X(NAME, value, "Name"). The one table of
   them: the enum below, luna_timing_name / luna_timing_parse /
   luna_timing_list and the binding's task.timings come from it.
   FIXED_UPDATE runs once per fixed step (0..n times a frame); UPDATE is the
   default timing of every await. */
#define LUNA_TIMING_MAP(X)                                                     \
  X(INITIALIZATION, 0, "Initialization")                                       \
  X(LAST_INITIALIZATION, 1, "LastInitialization")                              \
  X(EARLY_UPDATE, 2, "EarlyUpdate")                                            \
  X(LAST_EARLY_UPDATE, 3, "LastEarlyUpdate")                                   \
  X(FIXED_UPDATE, 4, "FixedUpdate")                                            \
  X(LAST_FIXED_UPDATE, 5, "LastFixedUpdate")                                   \
  X(PRE_UPDATE, 6, "PreUpdate")                                                \
  X(LAST_PRE_UPDATE, 7, "LastPreUpdate")                                       \
  X(UPDATE, 8, "Update")                                                       \
  X(LAST_UPDATE, 9, "LastUpdate")                                              \
  X(PRE_LATE_UPDATE, 10, "PreLateUpdate")                                      \
  X(LAST_PRE_LATE_UPDATE, 11, "LastPreLateUpdate")                             \
  X(POST_LATE_UPDATE, 12, "PostLateUpdate")                                    \
  X(LAST_POST_LATE_UPDATE, 13, "LastPostLateUpdate")                           \
  X(TIME_UPDATE, 14, "TimeUpdate")                                             \
  X(LAST_TIME_UPDATE, 15, "LastTimeUpdate")

typedef enum luna_timing {
#define LUNA__TIMING_ENUM(name, value, text) LUNA_##name = (value),
  LUNA_TIMING_MAP(LUNA__TIMING_ENUM)
#undef LUNA__TIMING_ENUM
#define LUNA__TIMING_ONE(name, value, text) +1
  LUNA_TIMING_COUNT = 0 LUNA_TIMING_MAP(LUNA__TIMING_ONE)
#undef LUNA__TIMING_ONE
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

/* The clocks a delay can be measured on: X(NAME, value, "name"). The one
   table of them: the enum below, luna_clock_name / luna_clock_parse, the
   timer kinds of loop.h (one per clock, after LUNA_TIMER_FRAME) and the
   Lua binding's names all come from it. Values are fixed: hosts may store
   them.
     SCALED:   += dt * time_scale each frame (the default)
     UNSCALED: += dt each frame
     REALTIME: monotonic, read when checked; replaceable
     FIXED:    += fixed_dt each fixed step */
#define LUNA_CLOCK_MAP(X)                                                      \
  X(SCALED, 0, "scaled")                                                       \
  X(UNSCALED, 1, "unscaled")                                                   \
  X(REALTIME, 2, "realtime")                                                   \
  X(FIXED, 3, "fixed")

typedef enum luna_clock {
#define LUNA__CLOCK_ENUM(name, value, text) LUNA_CLOCK_##name = (value),
  LUNA_CLOCK_MAP(LUNA__CLOCK_ENUM)
#undef LUNA__CLOCK_ENUM
#define LUNA__CLOCK_ONE(name, value, text) +1
  LUNA_CLOCK_COUNT = 0 LUNA_CLOCK_MAP(LUNA__CLOCK_ONE)
#undef LUNA__CLOCK_ONE
} luna_clock;

/* The timing's name as LUNA_TIMING_MAP spells it ("FixedUpdate"), or
   NULL when `timing` is out of range. Any thread. */
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
