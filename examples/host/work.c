/*
** work.c: CRC-32 of files and A* on grids, for the example's workers.
*/
#include "work.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- CRC-32 ------------------------------------------------------------------ */

/* Bitwise per byte through a 16-entry table: slower than a 256-entry table
   but small, thread safe without initialisation, and fast enough here. */
static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n) {
  static const uint32_t nibble[16] = {
      0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac, 0x76dc4190, 0x6b6b51f4,
      0x4db26158, 0x5005713c, 0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c,
      0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c};
  crc = ~crc;
  while (n-- > 0) {
    crc ^= *p++;
    crc = (crc >> 4) ^ nibble[crc & 15];
    crc = (crc >> 4) ^ nibble[crc & 15];
  }
  return ~crc;
}

int work_checksum(const char *path, uint32_t *crc, long long *bytes,
                  work_stop_fn stop, void *ud) {
  static const size_t chunk = 64 * 1024;
  unsigned char *buf;
  FILE *f;
  size_t got;
  int err = 0;
  *crc = 0;
  *bytes = 0;
  f = fopen(path, "rb");
  if (f == NULL)
    return errno != 0 ? errno : EIO;
  buf = (unsigned char *)malloc(chunk);
  if (buf == NULL) {
    fclose(f);
    return ENOMEM;
  }
  while ((got = fread(buf, 1, chunk, f)) > 0) {
    *crc = crc32_update(*crc, buf, got);
    *bytes += (long long)got;
    if (stop != NULL && stop(ud)) {
      err = -1;
      break;
    }
  }
  if (err == 0 && ferror(f))
    err = EIO;
  free(buf);
  fclose(f);
  return err;
}

/* ---- A* ------------------------------------------------------------------------ */

typedef struct heap_item {
  int f;   /* g + heuristic */
  int g;   /* steps from the start, to break f ties towards the goal */
  int cell;
} heap_item;

typedef struct heap {
  heap_item *v;
  size_t n, cap;
} heap;

static bool before(heap_item a, heap_item b) {
  return a.f < b.f || (a.f == b.f && a.g > b.g);
}

static int heap_push(heap *h, heap_item it) {
  size_t i;
  if (h->n == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 1024;
    heap_item *v = (heap_item *)realloc(h->v, cap * sizeof *v);
    if (v == NULL)
      return -1;
    h->v = v;
    h->cap = cap;
  }
  i = h->n++;
  while (i > 0 && before(it, h->v[(i - 1) / 2])) {
    h->v[i] = h->v[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->v[i] = it;
  return 0;
}

static heap_item heap_pop(heap *h) {
  heap_item top = h->v[0], last = h->v[--h->n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n)
      break;
    if (c + 1 < h->n && before(h->v[c + 1], h->v[c]))
      c++;
    if (!before(h->v[c], last))
      break;
    h->v[i] = h->v[c];
    i = c;
  }
  if (h->n > 0)
    h->v[i] = last;
  return top;
}

static int manhattan(const work_grid *g, int cell, work_point to) {
  int x = cell % g->w, y = cell / g->w;
  return abs(x - to.x) + abs(y - to.y);
}

static bool open_cell(const work_grid *g, int x, int y) {
  return x >= 0 && y >= 0 && x < g->w && y < g->h && !g->wall[y * g->w + x];
}

int work_find_path(const work_grid *g, work_point from, work_point to,
                   work_point **path, size_t *n, work_stop_fn stop, void *ud) {
  static const int dx[4] = {1, -1, 0, 0}, dy[4] = {0, 0, 1, -1};
  size_t cells = (size_t)g->w * (size_t)g->h;
  int *dist = (int *)malloc(cells * sizeof *dist);
  int *came = (int *)malloc(cells * sizeof *came);
  heap open = {NULL, 0, 0};
  int start = from.y * g->w + from.x, goal = to.y * g->w + to.x;
  int result = 0;
  long expanded = 0;
  size_t i;
  *path = NULL;
  *n = 0;
  if (dist == NULL || came == NULL) {
    result = -2;
    goto done;
  }
  if (!open_cell(g, from.x, from.y) || !open_cell(g, to.x, to.y))
    goto done;
  for (i = 0; i < cells; i++)
    dist[i] = -1;
  dist[start] = 0;
  came[start] = -1;
  if (heap_push(&open, (heap_item){manhattan(g, start, to), 0, start}) != 0) {
    result = -2;
    goto done;
  }
  while (open.n > 0) {
    heap_item it = heap_pop(&open);
    int k;
    if (it.g != dist[it.cell])
      continue; /* a stale entry: the cell was reached more cheaply since */
    if (it.cell == goal) {
      result = 1;
      break;
    }
    if (stop != NULL && ++expanded % 1024 == 0 && stop(ud)) {
      result = -1;
      goto done;
    }
    for (k = 0; k < 4; k++) {
      int x = it.cell % g->w + dx[k], y = it.cell / g->w + dy[k];
      int next = y * g->w + x;
      if (!open_cell(g, x, y) || (dist[next] >= 0 && dist[next] <= it.g + 1))
        continue;
      dist[next] = it.g + 1;
      came[next] = it.cell;
      if (heap_push(&open, (heap_item){it.g + 1 + manhattan(g, next, to), it.g + 1, next}) != 0) {
        result = -2;
        goto done;
      }
    }
  }
  if (result == 1) {
    size_t len = (size_t)dist[goal] + 1, j = len;
    int c;
    *path = (work_point *)malloc(len * sizeof **path);
    if (*path == NULL) {
      result = -2;
      goto done;
    }
    for (c = goal; c != -1; c = came[c])
      (*path)[--j] = (work_point){c % g->w, c / g->w};
    *n = len;
  }
done:
  free(open.v);
  free(dist);
  free(came);
  return result;
}

unsigned char *work_random_walls(int w, int h, uint32_t seed, int percent) {
  unsigned char *cells = (unsigned char *)malloc((size_t)w * (size_t)h);
  size_t i, n = (size_t)w * (size_t)h;
  if (cells == NULL)
    return NULL;
  for (i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u; /* a classic LCG: repeatable */
    cells[i] = (seed >> 24) % 100 < (uint32_t)percent;
  }
  cells[0] = cells[n - 1] = 0;
  return cells;
}
