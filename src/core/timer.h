/*
** timer.h: timers (step 3 of a run).
**
** One min-heap per (timing, kind), keyed by (deadline, creation sequence),
** so ties break in creation order and a run only touches the timers that
** fire: O(log n) each, nothing for those still pending. Timers live in one
** slab of slots shared by every heap. Handles are {slot index +
** generation}: a fired or cancelled timer's slot gets a new generation, so a
** stale handle is LUNA_ENOENT.
**
** Cancelling is O(1) and writes only the slot: the timer is marked (fn =
** NULL, a new generation) and its entry stays in the heap until a run pops
** it (and frees the slot without calling anything) or the heap is rebuilt
** without its cancelled entries, which happens once they are more than half
** of it (and at least 64): at most twice the live timers' entries, O(1)
** amortized per cancellation. So no slot records where its entry is, and a
** sift writes only the heap array (a timeout that usually loses its race,
** cancelled each time, no longer pays a sift for it).
**
** The heaps are 4-ary and hold the key next to the slot index: a 16-byte
** luna__heap_entry {deadline, slot, low 32 bits of the sequence}, so a sift
** compares entries that sit side by side (the four children of a node fill
** one cache line, given 16-byte aligned memory) instead of reading a slot
** at a random place for every comparison. Removing the earliest walks the hole down to a leaf
** (Floyd's variant) while prefetching the next level. Equal deadlines break
** on the entries' 32-bit sequences, which are the whole sequence while
** fewer than 2^32 timers have ever been created; after that, ties read the
** slots' full sequence (a wrapping 32-bit comparison would not be sound: a
** timer may live while 2^32 others are created).
**
** Memory: 32 bytes a slot plus 16 in its heap, 48 bytes a timer (a
** cancelled one's until it is popped or compacted away): the key
** in the heap entry costs 8 bytes a timer more than bare indices would, and
** buys sifts that read no slot. The arrays double when they grow and are
** kept, so adding allocates only on growth. A heap's array has up to 3 entries of slack for the alignment.
**
** Firing collects first, then calls: every due timer of the timing is
** popped, across kinds in the order frame, scaled, unscaled, realtime,
** fixed (each kind by deadline, then creation). A heap keeps the timers it
** collected at the end of its own array, past the heap, in the order of
** their calls (the "due" entries, which keep their deadlines so that a stop
** can push them back); timers created since the run began are set aside and
** pushed back at once, and cancelled ones popped are freed. Then the kinds
** are called in order. A collected timer cancelled before its turn is
** skipped the same way.
**
** Loop thread only.
*/
#ifndef LUNA_TIMER_H
#define LUNA_TIMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "slots.h"
#include "lunaloop/loop.h"

/* A timer's slot (slots.h: pos and gen come first). */
typedef struct luna__timer {
  /* Free: next free slot (index + 1), 0 ends the list; unused otherwise. */
  uint32_t pos;
  uint32_t gen;     /* bumped when the timer fires or is cancelled */
  /* (seq << 8) | heap number (timing * LUNA_TIMER_KIND_COUNT + kind, bits
     0-6) | bit 7 while among a run's due entries (timer.c, META_DUE).
     Within one heap the low byte of the entries still in it is equal, so
     comparing whole meta values compares creation sequences (56 bits:
     never wraps). */
  uint64_t meta;
  luna_fn fn;       /* NULL: free, or cancelled (its entry not yet popped) */
  void *arg;
} luna__timer;

/* The deadline is here and nowhere else: a sift reads only entries. */
typedef struct luna__heap_entry {
  luna_ns deadline; /* absolute, on the kind's clock; clamped */
  uint32_t slot;    /* index in luna__timers.slots */
  uint32_t seq;     /* the creation sequence's low 32 bits */
} luna__heap_entry;

#define LUNA__TIMER_HEAPS (LUNA_TIMING_COUNT * LUNA_TIMER_KIND_COUNT)
_Static_assert(LUNA__TIMER_HEAPS <= 128, "a heap number must fit bits 0-6 of luna__timer.meta");

/* a[0, n) is the heap (a[0] the earliest), `dead` of its entries
   cancelled; a[cap - due, cap) the timers a run collected and has not
   called yet, next first. n + due <= cap always, so pushing collected
   timers back never allocates. */
typedef struct luna__heap {
  luna__heap_entry *a; /* `off` entries into its allocation (heap_grow) */
  size_t n;      /* in the heap */
  size_t cap;    /* entries from a to the end of the allocation */
  size_t live;   /* in the heap, or collected and neither called nor
                    cancelled: what luna__timers_count reports */
  size_t dead;   /* entries of a[0, n) whose timer was cancelled */
  uint32_t due;  /* collected, at the end of a (fewer than the slots) */
  uint32_t off;  /* 0 to 3 */
} luna__heap;

typedef struct luna__timers {
  luna__timer *slots;
  luna__slab slab;    /* hands out the slots' indices (slots.h) */
  uint64_t seq;       /* creation sequence of the next timer */
  luna__heap heaps[LUNA__TIMER_HEAPS];
} luna__timers;

void luna__timers_init(luna__timers *tm);

/* luna_timer_add once its arguments are checked is luna__loop_add_timer
   (lunaloop/extension.h), defined in timer.c: the binding's awaits call it
   directly, with no wrapper between them and the heap. */

/* luna_timer_cancel: 0 or LUNA_ENOENT. */
int luna__timers_cancel(luna__timers *tm, luna_timer_id id);

/* The sequence the next timer will get: a run records it at its start, and
   timers with a sequence at or above it were created during the run. */
static inline uint64_t luna__timers_seq(const luna__timers *tm) { return tm->seq; }

/* True when `timing` has entries of `kind`: pending timers, or cancelled
   ones not yet popped (so the loop reads the realtime clock only when a
   realtime timer could fire). */
bool luna__timers_has(const luna__timers *tm, int timing, luna_timer_kind kind);

/* True when `timing` has an entry in any heap, pending or cancelled (the
   loop skips step 3 otherwise). */
static inline bool luna__timers_any(const luna__timers *tm, int timing) {
  const luna__heap *h = &tm->heaps[timing * LUNA_TIMER_KIND_COUNT];
  /* One load per kind, or-ed without branches: frame, then each clock's. */
#define LUNA__HEAP_N(name, value, text) | h[LUNA_TIMER_##name].n
  return (h[LUNA_TIMER_FRAME].n LUNA_CLOCK_MAP(LUNA__HEAP_N)) != 0;
#undef LUNA__HEAP_N
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
