/*
** timer.h: timers (step 3 of a run).
**
** One binary min-heap per (timing, kind), keyed by (deadline, creation
** sequence), so ties break in creation order and a run only touches the
** timers that fire: O(log n) each, nothing for those still pending. Timers
** live in one slab of slots shared by every heap; a slot stores its position
** in its heap, which makes luna_timer_cancel O(log n). Handles are
** {slot index + generation}: a fired or cancelled timer's slot gets a new
** generation, so a stale handle is LUNA_ENOENT.
**
** Memory: 40 bytes a slot plus 4 in its heap, 44 bytes a timer; the arrays
** double when they grow and are kept, so adding allocates only on growth.
**
** Firing collects first, then calls: every due timer of the timing is
** popped, across kinds in the order frame, scaled, unscaled, realtime,
** fixed (each kind by deadline, then creation), and linked into a due list
** through the slots' pos fields; timers created since the run began are set
** aside and pushed back. Then the list is called in order. A collected timer
** cancelled before its turn is only marked (fn = NULL) and skipped.
**
** Loop thread only.
*/
#ifndef LUNA_TIMER_H
#define LUNA_TIMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "lunaloop/loop.h"

typedef struct luna__timer {
  luna_ns deadline; /* absolute, on the kind's clock; clamped */
  /* (seq << 8) | flags: bits 0-6 the heap number (timing * 5 + kind), bit 7
     set while collected. Within one heap the low byte is equal, so comparing
     whole meta values compares creation sequences (56 bits: never wraps). */
  uint64_t meta;
  luna_fn fn;       /* NULL: free, or cancelled after being collected */
  void *arg;
  /* In a heap: its index there. Collected: next in the due list (index + 1).
     Free: next free slot (index + 1). 0 ends a list. */
  uint32_t pos;
  uint32_t gen;     /* bumped when the timer fires or is cancelled */
} luna__timer;

#define LUNA__TIMER_HEAPS (LUNA_TIMING_COUNT * LUNA_TIMER_KIND_COUNT)

typedef struct luna__heap {
  uint32_t *a;  /* slot indices; a[0] is the earliest */
  size_t n;     /* in the heap */
  size_t cap;
  size_t live;  /* in the heap or collected and not yet called; cap >= live
                   always, so pushing collected timers back never allocates */
} luna__heap;

typedef struct luna__timers {
  luna__timer *slots;
  size_t nslots, slots_cap;
  uint32_t free_slot; /* first free slot + 1; 0: none */
  uint64_t seq;       /* creation sequence of the next timer */
  luna__heap heaps[LUNA__TIMER_HEAPS];
} luna__timers;

void luna__timers_init(luna__timers *tm);

/* luna_timer_add (arguments checked by the caller). */
int luna__timers_add(luna__timers *tm, const luna__alloc *a, int timing,
                     luna_timer_kind kind, int64_t deadline, luna_fn fn,
                     void *arg, luna_timer_id *out);

/* luna_timer_cancel: 0 or LUNA_ENOENT. */
int luna__timers_cancel(luna__timers *tm, luna_timer_id id);

/* The sequence the next timer will get: a run records it at its start, and
   timers with a sequence at or above it were created during the run. */
static inline uint64_t luna__timers_seq(const luna__timers *tm) { return tm->seq; }

/* True when `timing` has pending timers of `kind` (so the loop reads the
   realtime clock only when a realtime timer could fire). */
bool luna__timers_has(const luna__timers *tm, int timing, luna_timer_kind kind);

/* True when `timing` has a timer in any heap (the loop skips step 3
   otherwise). */
static inline bool luna__timers_any(const luna__timers *tm, int timing) {
  const luna__heap *h = &tm->heaps[timing * LUNA_TIMER_KIND_COUNT];
  return (h[0].n | h[1].n | h[2].n | h[3].n | h[4].n) != 0;
}

/* Step 3 for `timing`: now[kind] is each kind's clock (the frame counter for
   LUNA_TIMER_FRAME). Fires what is due and was created before `start_seq`.
   Returns true when luna_loop_stop interrupted it: timers collected but not
   yet called go back to their heaps and fire at the next run. */
bool luna__timers_fire(luna__timers *tm, int timing,
                       const luna_ns now[LUNA_TIMER_KIND_COUNT],
                       uint64_t start_seq, luna_loop *loop);

/* Timers pending at `timing`. */
size_t luna__timers_count(const luna__timers *tm, int timing);

/* Drops every timer without calling it (luna_loop_reset); handles go stale. */
void luna__timers_drop(luna__timers *tm);

void luna__timers_free(luna__timers *tm, const luna__alloc *a);

#endif
