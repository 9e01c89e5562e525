/*
** headers_c.c: the public headers compiled as strict C (C99 and C11,
** -pedantic, warnings as errors) with nothing else included first. The
** test passes when it compiles; running it checks the version header and
** that the library's run-time version query agrees with it.
*/
#include "lunaloop.h"
#include "lunaloop_lua.h"
#include "lunaloop_workers.h"

#include <stdio.h>
#include <string.h>

int main(void) {
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", LUNA_VERSION_MAJOR, LUNA_VERSION_MINOR,
           LUNA_VERSION_PATCH);
  return strcmp(want, LUNA_VERSION_STRING) == 0 && luna_version() == LUNA_VERSION_NUM &&
                 strcmp(luna_version_string(), LUNA_VERSION_STRING) == 0 &&
                 luna_promise_is_cancelled(NULL) == false
             ? 0
             : 1;
}
