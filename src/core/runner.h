/*
** runner.h: the repeating items of each timing (step 4 of a run).
**
** Each timing keeps an array of items in registration order. A run calls
** the items that were registered when the run began; items added during it
** are appended and first called at the next run. Removal only marks an item
** (step = NULL) so indices stay stable while a run walks the array; the run
** of that timing then compacts the array in place, keeping the order.
**
** Handles are {slot index + generation} in one slab shared by all timings:
** the slot records where its item is, and a removed item's slot gets a new
** generation, so a stale handle is LUNA_ENOENT, never a wrong item.
**
** Room to grow: an item is one array element; a priority or a per-timing time
** budget can be added as fields of it and of luna__items without changing
** the handle or the run protocol.
**
** Loop thread only.
*/
#ifndef LUNA_RUNNER_H
#define LUNA_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "lunaloop/loop.h"

typedef struct luna__item {
  luna_step_fn step; /* NULL: removed, waiting for compaction */
  void *arg;
  uint32_t slot;     /* its handle's slot */
} luna__item;

/* The items of one timing. */
typedef struct luna__items {
  luna__item *a;
  size_t n, cap;
  size_t dead; /* removed but not yet compacted */
} luna__items;

/* A handle slot: where its item is while live; the free-list link when not. */
typedef struct luna__item_slot {
  uint32_t gen;
  uint32_t pos;    /* live: index in its timing's array; free: next free + 1 */
  uint8_t timing;
  uint8_t live;
} luna__item_slot;

typedef struct luna__runner {
  luna__items items[LUNA_TIMING_COUNT];
  luna__item_slot *slots;
  size_t nslots, slots_cap;
  uint32_t free_slot; /* first free slot + 1; 0: none */
  int active;         /* the timing whose run is in progress, or -1: its
                         array must not be compacted until the run ends */
} luna__runner;

void luna__runner_init(luna__runner *r);

int luna__runner_add(luna__runner *r, const luna__alloc *a, int timing,
                     luna_step_fn step, void *arg, luna_item_id *out);
int luna__runner_remove(luna__runner *r, luna_item_id id);

/* Step 4: calls the first `count` items of `timing` (the number there when
   the run began) that are still live. Returns true when luna_loop_stop
   interrupted it. */
bool luna__runner_run(luna__runner *r, int timing, size_t count, luna_loop *loop);

/* Compacts away removed items of `timing`, order kept. Not during its run. */
void luna__runner_compact(luna__runner *r, int timing);

/* Items registered at `timing` right now (live ones). */
size_t luna__runner_count(const luna__runner *r, int timing);

/* Removes every item of every timing (luna_loop_reset); handles go stale. */
void luna__runner_drop(luna__runner *r);

void luna__runner_free(luna__runner *r, const luna__alloc *a);

#endif
