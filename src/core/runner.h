/*
** runner.h: the repeating items of each timing (step 4 of a run).
**
** Each timing keeps an array of items sorted by priority (ascending), ties
** in registration order. A run calls the items that were registered when the
** run began. Items added to a timing while it runs go to a side array,
** `pending` (kept in the same order), and are merged into the main array when
** the run ends, so the main array neither grows nor moves under the walk and
** an item of a lower priority than the running ones still waits for the next
** run. Removal only marks an item (step = NULL) so indices stay stable while
** a run walks the array; the end of that timing's run compacts the array in
** place, keeping the order. A removed item keeps its priority, so the array
** stays sorted for the binary search of an insertion.
**
** Handles are {slot index + generation} in one slab shared by all timings:
** the slot records where its item is, and a removed item's slot gets a new
** generation, so a stale handle is LUNA_ENOENT, never a wrong item.
**
** Budgets (luna_loop_set_budget). With a budget, a run calls first the items
** the previous run deferred, in the order they were deferred (a list linked
** through the slots, so removing one is O(1)), then walks the array in order:
** essential items always, the other items while the budget lasts. Once the
** cost clock says the budget is spent, each non-essential item still to be
** called is appended to the deferred list instead. At least one non-essential
** item is called per run. Without a budget the run is the plain walk and no
** clock is read; with one, each non-essential call but the first costs a
** clock read, and the walk touches the slot of every item.
**
** Fairness bound: in a run, order the non-essential items as they would be
** called (deferred list, then the others in array order). If c >= 1 are
** called, an item at position p >= c (0-based) is deferred and sits at
** position p - c in the next run's order; an item that was called is at
** position <= N - 1. So with N non-essential items, while the set of items
** does not change and no run is cut short by luna_loop_stop, every
** non-essential item is called at least once in every N consecutive runs of
** its timing (at most N - 1 runs between two calls).
**
** Loop thread only.
*/
#ifndef LUNA_RUNNER_H
#define LUNA_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "slots.h"
#include "lunaloop/extension.h" /* luna__item, luna__batch */
#include "lunaloop/loop.h"

/* The items of one timing. */
typedef struct luna__items {
  luna__item *a;       /* sorted; its length stays fixed during a run */
  size_t n, cap;
  size_t dead;         /* removed but not yet compacted */
  luna__item *pending; /* added during the run of this timing, sorted */
  size_t npending, pending_cap;
  size_t pending_dead;
  uint32_t defer_head, defer_tail; /* deferred list: slot + 1; 0: empty */
  size_t ndeferred;
} luna__items;

/* Slot flags. */
#define LUNA__SLOT_PENDING 0x01u   /* the item is in `pending`, not in `a` */
#define LUNA__SLOT_ESSENTIAL 0x02u /* never deferred */
#define LUNA__SLOT_DEFERRED 0x04u  /* on its timing's deferred list */
#define LUNA__SLOT_DONE 0x08u      /* called from the deferred list in this
                                      run: the array walk skips it */

/* A handle slot: where its item is while live; the free-list link when
   not (slots.h: pos and gen come first). */
typedef struct luna__item_slot {
  uint32_t pos;        /* live: index in its array; free: next free + 1 */
  uint32_t gen;
  uint32_t prev, next; /* deferred list links (slot + 1; 0: none) */
  uint8_t timing;
  uint8_t live;
  uint8_t flags;       /* LUNA__SLOT_*; 0 when free */
} luna__item_slot;

typedef struct luna__runner {
  luna__items items[LUNA_TIMING_COUNT];
  luna__item_slot *slots;
  luna__slab slab;    /* hands out the slots' indices (slots.h) */
  int active;         /* the timing whose run is in progress, or -1: its
                         array must not change shape until the run ends */

  /* Budgets, read once at the start of each run of the timing. */
  luna_ns budget[LUNA_TIMING_COUNT]; /* 0: none */
  luna_time_fn cost_fn;              /* never NULL */
  void *cost_ud;
  uint64_t deferred[LUNA_TIMING_COUNT];        /* see luna_loop_stats */
  uint64_t budget_exceeded[LUNA_TIMING_COUNT];

  luna_step_fn batch_step; /* NULL: no batches */
  luna__batch_fn batch_fn;
} luna__runner;

void luna__runner_init(luna__runner *r);

/* Adds an item after those of the same priority. 0 or LUNA_ENOMEM. */
int luna__runner_add(luna__runner *r, const luna__alloc *a, int timing,
                     luna_step_fn step, void *arg, int priority, bool essential,
                     luna_item_id *out);
int luna__runner_remove(luna__runner *r, luna_item_id id);

/* Step 4: calls the items of `timing` that were registered when its run
   began (r->active must be `timing`). Returns true when luna_loop_stop
   interrupted it. */
bool luna__runner_run(luna__runner *r, int timing, luna_loop *loop);

/* True when `timing` has items to call (or a deferred list to settle), so
   that step 4 must run. */
static inline bool luna__runner_has_items(const luna__runner *r, int timing) {
  return r->items[timing].n > 0 || r->items[timing].defer_head != 0;
}

/* True when luna__runner_finish has something to do for `timing`: removed
   items to compact or items added during the run to merge. */
static inline bool luna__runner_has_work(const luna__runner *r, int timing) {
  return r->items[timing].dead > 0 || r->items[timing].npending > 0;
}

/* Ends a run of `timing` (after r->active went back to -1): compacts away
   removed items and merges the items added during the run, order kept.
   Never allocates: luna__runner_add reserved the room. */
void luna__runner_finish(luna__runner *r, int timing);

/* Items registered at `timing` right now (live ones). */
size_t luna__runner_count(const luna__runner *r, int timing);

/* Declares `step` batched: the plain walk hands stretches of its items to
   `fn` (see luna__batch). NULL, NULL: no batches. One per runner. */
void luna__runner_set_batch(luna__runner *r, luna_step_fn step, luna__batch_fn fn);

/* Installs the cost clock (NULL: CLOCK_MONOTONIC). */
void luna__runner_set_cost_source(luna__runner *r, luna_time_fn fn, void *ud);

/* Removes every item of every timing (luna_loop_reset); handles go stale. */
void luna__runner_drop(luna__runner *r);

void luna__runner_free(luna__runner *r, const luna__alloc *a);

#endif
