/*
** work.h: the real work the example's workers do for scripts: checksumming
** files and finding paths on a grid. Plain C, no lunaloop: long jobs poll a
** stop() callback so that the caller can abort them.
*/
#ifndef HOST_WORK_H
#define HOST_WORK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef bool (*work_stop_fn)(void *ud);

/* Reads the file in 64 KiB chunks: its CRC-32 (IEEE 802.3) and size.
   Returns 0, an errno value when it cannot be read, or -1 when stop() said
   to stop (polled between chunks). */
int work_checksum(const char *path, uint32_t *crc, long long *bytes,
                  work_stop_fn stop, void *ud);

typedef struct work_point {
  int x, y;
} work_point;

/* A grid of w x h cells, row by row; a non-zero cell is a wall. */
typedef struct work_grid {
  int w, h;
  const unsigned char *wall;
} work_grid;

/* A* with 4 neighbours and unit steps: the shortest path from `from` to
   `to`, both included, in *path (malloc'd, *n points). Returns 1 when found,
   0 when there is no path, -1 when stop() said to stop (polled every 1024
   expansions), -2 when out of memory. */
int work_find_path(const work_grid *g, work_point from, work_point to,
                   work_point **path, size_t *n, work_stop_fn stop, void *ud);

/* A w x h grid with about `percent` % walls from a fixed seed (corners
   open), malloc'd. NULL when out of memory. */
unsigned char *work_random_walls(int w, int h, uint32_t seed, int percent);

#endif
