/*
** chunks.h: the Lua code compiled into the module (the files of lua/lunaloop/).
** cmake/embed.cmake generates the table from the list LUNA_LUA_CHUNKS in
** CMakeLists.txt; internal.c runs the chunks, in order, when a state opens
** the module. Includes only <stddef.h>.
*/
#ifndef LUNA_CHUNKS_H
#define LUNA_CHUNKS_H

#include <stddef.h>

/* One chunk: its name for tracebacks ("=lunaloop/<file>"), its text and
   the text's size in bytes (the text also ends with a NUL). */
typedef struct luna__chunk {
  const char *name;
  const char *text;
  size_t size;
} luna__chunk;

/* The chunks in the order they run; a null name ends the table. */
extern const luna__chunk luna__chunks[];

#endif
