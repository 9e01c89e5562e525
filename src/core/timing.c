/*
** timing.c: timing and clock names, and the seconds/nanoseconds arithmetic.
** Pure functions: any thread.
*/
#include <math.h>
#include <string.h>

#include "clock.h"
#include "lunaloop/error.h"
#include "lunaloop/timing.h"

/* In value order; the index is the timing. */
static const char *const timing_names[LUNA_TIMING_COUNT] = {
    "Initialization", "LastInitialization", "EarlyUpdate",    "LastEarlyUpdate",
    "FixedUpdate",    "LastFixedUpdate",    "PreUpdate",      "LastPreUpdate",
    "Update",         "LastUpdate",         "PreLateUpdate",  "LastPreLateUpdate",
    "PostLateUpdate", "LastPostLateUpdate", "TimeUpdate",     "LastTimeUpdate"};

static const char *const clock_names[LUNA_CLOCK_COUNT] = {"scaled", "unscaled",
                                                          "realtime", "fixed"};

/* Finds `name` (len bytes, not NUL-terminated) in `names`; -1 if absent. */
static int find_name(const char *const *names, int count, const char *name,
                     size_t len) {
  int i;
  if (name == NULL)
    return -1;
  for (i = 0; i < count; i++)
    if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0)
      return i;
  return -1;
}

const char *luna_timing_name(int timing) {
  if (timing < 0 || timing >= LUNA_TIMING_COUNT)
    return NULL;
  return timing_names[timing];
}

int luna_timing_parse(const char *name, size_t len, luna_timing *out) {
  int i = find_name(timing_names, LUNA_TIMING_COUNT, name, len);
  if (i < 0 || out == NULL)
    return LUNA_EINVAL;
  *out = (luna_timing)i;
  return 0;
}

const char *luna_timing_list(void) {
  return "Initialization, LastInitialization, EarlyUpdate, LastEarlyUpdate, "
         "FixedUpdate, LastFixedUpdate, PreUpdate, LastPreUpdate, Update, "
         "LastUpdate, PreLateUpdate, LastPreLateUpdate, PostLateUpdate, "
         "LastPostLateUpdate, TimeUpdate, LastTimeUpdate";
}

const char *luna_clock_name(int clock) {
  if (clock < 0 || clock >= LUNA_CLOCK_COUNT)
    return NULL;
  return clock_names[clock];
}

int luna_clock_parse(const char *name, size_t len, luna_clock *out) {
  int i = find_name(clock_names, LUNA_CLOCK_COUNT, name, len);
  if (i < 0 || out == NULL)
    return LUNA_EINVAL;
  *out = (luna_clock)i;
  return 0;
}

/* Rounds a finite x >= 0 to the nearest integer (halves up), clamped to
   LUNA_NS_MAX. Written without llround so the core needs no libm: x - trunc(x)
   is exact in binary floating point, so the comparison with 0.5 is too. */
luna_ns luna__round_ns(double x) {
  luna_ns i;
  if (x >= (double)LUNA_NS_MAX)
    return LUNA_NS_MAX;
  i = (luna_ns)x;
  if (x - (double)i >= 0.5)
    i++;
  return i;
}

int luna_seconds_to_ns(double seconds, luna_ns *out) {
  if (out == NULL || isnan(seconds) || isinf(seconds) || seconds < 0)
    return LUNA_EINVAL;
  *out = luna__round_ns(seconds * 1e9);
  return 0;
}

double luna_ns_to_seconds(luna_ns ns) { return (double)ns / 1e9; }

luna_ns luna_ns_add(luna_ns a, luna_ns b) {
  luna_ns r;
  if (b > 0 && a > LUNA_NS_MAX - b)
    return LUNA_NS_MAX;
  if (b < 0 && a < -LUNA_NS_MAX - b)
    return -LUNA_NS_MAX;
  r = a + b; /* no overflow: the tests above bound it on the side of b */
  if (r > LUNA_NS_MAX)
    return LUNA_NS_MAX;
  if (r < -LUNA_NS_MAX)
    return -LUNA_NS_MAX;
  return r;
}
