/*
** values.c: the checked parsers of the values that the options of run, repl
** and mods and the REPL's commands take, so an option and a command that
** set the same thing (`--hz`, `:hz`) accept the same range. Each reads the
** whole string or refuses it; cli.h has what each expects, as the messages
** say it. Includes cli.h.
*/
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Parses a whole string as a finite double. */
bool luna__cli_parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v))
    return false;
  *out = v;
  return true;
}

/* A rate in Hz, from 1e-9 to 1e9 (periods from 1 ns to 1e18 ns, which
   the clocks can count), becomes a period in ns, rounded to nearest
   (60 Hz: 16,666,667 ns). */
bool luna__cli_parse_rate(const char *s, double *hz, luna_ns *period) {
  double v;
  if (!luna__cli_parse_double(s, &v) || !(v >= 1e-9 && v <= 1e9))
    return false;
  *period = (luna_ns)round(1e9 / v);
  if (hz != NULL)
    *hz = v;
  return true;
}

/* A time scale, from 0 to LUNA_TIME_SCALE_MAX. */
bool luna__cli_parse_time_scale(const char *s, double *out) {
  double v;
  if (!luna__cli_parse_double(s, &v) || v < 0 || v > LUNA_TIME_SCALE_MAX)
    return false;
  *out = v;
  return true;
}

/* Parses a whole string as a decimal integer; `is_signed` allows a '-'. */
bool luna__cli_parse_integer(const char *s, bool is_signed, long long *out) {
  char *end;
  if (!is_signed && strchr(s, '-') != NULL)
    return false; /* strtoull would wrap "-1" around */
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end != '\0' || errno == ERANGE)
    return false;
  *out = v;
  return true;
}

/* BYTES with an optional k, m or g suffix (powers of 1024). */
bool luna__cli_parse_bytes(const char *s, size_t *out) {
  char *end;
  unsigned long long v, mul = 1;
  if (strchr(s, '-') != NULL)
    return false;
  errno = 0;
  v = strtoull(s, &end, 10);
  if (end == s || errno == ERANGE)
    return false;
  if (*end == 'k' || *end == 'K')
    mul = 1024, end++;
  else if (*end == 'm' || *end == 'M')
    mul = 1024 * 1024, end++;
  else if (*end == 'g' || *end == 'G')
    mul = 1024ULL * 1024 * 1024, end++;
  if (*end != '\0' || v == 0 || v > SIZE_MAX / mul)
    return false;
  *out = (size_t)(v * mul);
  return true;
}
