/*
** lunaloop/error.h: error codes. Every public function that can fail returns 0
** or one of these negative codes; no function mixes a code with a valid value.
** One table (LUNA_ERRNO_MAP) generates the enum, luna_strerror and luna_err_name.
*/
#ifndef LUNALOOP_ERROR_H
#define LUNALOOP_ERROR_H

#include "export.h"

LUNA_BEGIN_DECLS

#define LUNA_ERRNO_MAP(X)                                                      \
  X(EINVAL, -1, "invalid argument")                                            \
  X(ENOMEM, -2, "out of memory")                                               \
  X(ESTATE, -3, "not allowed in the loop's current state")                     \
  X(ENOENT, -4, "no such timer or item (stale or removed handle)")             \
  X(ESTOPPED, -5, "the loop was stopped")                                      \
  X(EALREADY, -6, "already completed")                                         \
  X(ERANGE, -7, "a clock would pass its limit (LUNA_CLOCK_MAX, 2^61 ns: about 73 years)") \
  X(ENOTSUP, -8, "not supported (a simulation without a state provider, or a provider without the operation)")

typedef enum luna_errno {
  LUNA_OK = 0,
#define LUNA__ERRNO_ENUM(name, value, text) LUNA_##name = (value),
  LUNA_ERRNO_MAP(LUNA__ERRNO_ENUM)
#undef LUNA__ERRNO_ENUM
} luna_errno;

/* A static, lowercase description of `code` ("unknown error" for codes not in
   the table). Any thread. */
LUNA_API const char *luna_strerror(int code);

/* The code's symbolic name without prefix ("EINVAL"), or "UNKNOWN". Any thread. */
LUNA_API const char *luna_err_name(int code);

LUNA_END_DECLS

#endif
