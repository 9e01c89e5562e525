/*
** timing.c: timing and clock names, and the seconds/nanoseconds arithmetic.
** Pure functions: any thread.
*/
#include <math.h>
#include <string.h>

#include "clock.h"
#include "lunaloop/error.h"
#include "lunaloop/timing.h"

/* Indexed by the timing. */
static const char *const timing_names[LUNA_TIMING_COUNT] = {
#define TIMING_NAME(name, value, text) [LUNA_##name] = text,
    LUNA_TIMING_MAP(TIMING_NAME)
#undef TIMING_NAME
};

static const char *const clock_names[LUNA_CLOCK_COUNT] = {
#define CLOCK_NAME(name, value, text) [LUNA_CLOCK_##name] = text,
    LUNA_CLOCK_MAP(CLOCK_NAME)
#undef CLOCK_NAME
};

/* names[i], or NULL when i is out of [0, count). */
static const char *name_at(const char *const *names, int count, int i) {
  return i >= 0 && i < count ? names[i] : NULL;
}

/* Finds `name` (len bytes, not NUL-terminated) in `names` and stores its
   index in *out: 0, or LUNA_EINVAL when absent (*out untouched). */
static int find_name(const char *const *names, int count, const char *name, size_t len,
                     int *out) {
  int i;
  if (name == NULL)
    return LUNA_EINVAL;
  for (i = 0; i < count; i++)
    if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0) {
      *out = i;
      return 0;
    }
  return LUNA_EINVAL;
}

const char *luna_timing_name(int timing) {
  return name_at(timing_names, LUNA_TIMING_COUNT, timing);
}

int luna_timing_parse(const char *name, size_t len, luna_timing *out) {
  int i;
  if (out == NULL || find_name(timing_names, LUNA_TIMING_COUNT, name, len, &i) != 0)
    return LUNA_EINVAL;
  *out = (luna_timing)i;
  return 0;
}

const char *luna_timing_list(void) {
  /* ", Initialization, LastInitialization, ..." without its first ", ". */
#define TIMING_ITEM(name, value, text) ", " text
  return (LUNA_TIMING_MAP(TIMING_ITEM)) + 2;
#undef TIMING_ITEM
}

const char *luna_clock_name(int clock) {
  return name_at(clock_names, LUNA_CLOCK_COUNT, clock);
}

int luna_clock_parse(const char *name, size_t len, luna_clock *out) {
  int i;
  if (out == NULL || find_name(clock_names, LUNA_CLOCK_COUNT, name, len, &i) != 0)
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
