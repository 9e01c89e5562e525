/*
** lunaloop/version.h: the library's version, as numbers and as a string.
*/
#ifndef LUNALOOP_VERSION_H
#define LUNALOOP_VERSION_H

#define LUNA_VERSION_MAJOR 0
#define LUNA_VERSION_MINOR 1
#define LUNA_VERSION_PATCH 0

#define LUNA__STR2(x) #x
#define LUNA__STR(x) LUNA__STR2(x)
#define LUNA_VERSION_STRING                                                    \
  LUNA__STR(LUNA_VERSION_MAJOR) "." LUNA__STR(LUNA_VERSION_MINOR) "."          \
      LUNA__STR(LUNA_VERSION_PATCH)

/* One number that grows with each release: MAJOR * 10000 + MINOR * 100 + PATCH. */
#define LUNA_VERSION_NUM                                                       \
  (LUNA_VERSION_MAJOR * 10000 + LUNA_VERSION_MINOR * 100 + LUNA_VERSION_PATCH)

#endif
