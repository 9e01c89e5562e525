/*
** error.c: luna_strerror and luna_err_name, generated from LUNA_ERRNO_MAP.
*/
#include "lunaloop/error.h"

const char *luna_strerror(int code) {
  switch (code) {
  case LUNA_OK:
    return "success";
#define LUNA__ERRNO_TEXT(name, value, text)                                    \
  case (value):                                                                \
    return text;
    LUNA_ERRNO_MAP(LUNA__ERRNO_TEXT)
#undef LUNA__ERRNO_TEXT
  default:
    return "unknown error";
  }
}

const char *luna_err_name(int code) {
  switch (code) {
  case LUNA_OK:
    return "OK";
#define LUNA__ERRNO_NAME(name, value, text)                                    \
  case (value):                                                                \
    return #name;
    LUNA_ERRNO_MAP(LUNA__ERRNO_NAME)
#undef LUNA__ERRNO_NAME
  default:
    return "UNKNOWN";
  }
}
