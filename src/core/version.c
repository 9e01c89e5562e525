/*
** version.c: the run-time version query (lunaloop/version.h). The numbers
** are compiled into the library, so a program linked against a shared
** liblunaloop reads the library's version, not its own header's.
*/
#include "lunaloop/version.h"

unsigned luna_version(void) {
  return LUNA_VERSION_NUM;
}

const char *luna_version_string(void) {
  return LUNA_VERSION_STRING;
}
