/*
** error.c: luna_strerror and luna_err_name, from one table generated from
** LUNA_ERRNO_MAP.
*/
#include <stddef.h>

#include "lunaloop/error.h"

typedef struct error_info {
  int code;
  const char *name, *text;
} error_info;

static const error_info errors[] = {
    {LUNA_OK, "OK", "success"},
#define LUNA__ERRNO_INFO(name, value, text) {(value), #name, text},
    LUNA_ERRNO_MAP(LUNA__ERRNO_INFO)
#undef LUNA__ERRNO_INFO
};

/* The entry of `code`, or NULL. A scan of a few entries: these are for
   messages, never on a hot path. */
static const error_info *find(int code) {
  size_t i;
  for (i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].code == code)
      return &errors[i];
  return NULL;
}

const char *luna_strerror(int code) {
  const error_info *e = find(code);
  return e != NULL ? e->text : "unknown error";
}

const char *luna_err_name(int code) {
  const error_info *e = find(code);
  return e != NULL ? e->name : "UNKNOWN";
}
