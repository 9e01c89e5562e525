/*
** timer.h: timers (step 3 of a run).
**
** One min-heap per (timing, kind), keyed by (deadline, creation sequence),
** so ties break in creation order and a run only touches the timers that
** fire: O(log n) each, nothing for those still pending. A timer is of one
** of two sorts, in the same heaps:
** - a node (lunaloop/extension.h): one word in its owner's memory (the Lua
**   binding keeps it in the task record), holding the stamp of its current
**   arming; the heap entry points at the node and carries the stamp, and
**   is live while the two agree;
** - a handle timer (luna_timer_add): a 16-byte slot of the core's slab
**   {pos, gen, arg}, whose handle is {slot index + generation}; a fired or
**   cancelled timer's slot gets a new generation, so a stale handle is
**   LUNA_ENOENT. The slot is freed when its entry leaves the heap.
**
** Cancelling is O(1) and writes only the node's word or the slot: its
** entry stays where it is (in the heap, or among a run's due entries)
** until a run pops it, skipping it, or the heap is rebuilt without its
** cancelled entries, which happens once they are more than half of the
** entries (and at least 64): at most about twice the live timers' entries,
** O(1) amortized per cancellation. So nothing records where an entry is,
** and a sift writes only the heap array.
**
** The heaps are 4-ary and each entry holds everything a sift and a call
** need: a 32-byte luna__heap_entry {deadline, stamp, node or slot, fn}. A
** sift compares entries that sit side by side (the four children of a
** node fill two cache lines) and never reads a node or a slot; the stamp's
** 56-bit sequence breaks ties on its own (no wrap in practice). Removing
** the earliest walks the hole down to a leaf (Floyd's variant) while
** prefetching the next level.
**
** Memory: a node timer is its 32-byte entry (and the owner's 8-byte word);
** a handle timer is 16 bytes of slot plus its entry, 48 bytes (a cancelled
** one's until it is popped or compacted away). The arrays double when they
** grow and are kept, so adding allocates only on growth. A heap's array has
** up to 3 entries of slack for the alignment.
**
** Firing collects first, then calls: every due timer of the timing is
** popped, across kinds in the order frame, scaled, unscaled, realtime,
** fixed (each kind by deadline, then creation). A heap keeps the timers it
** collected at the end of its own array, past the heap, in the order of
** their calls (the "due" entries, which keep their deadlines so that a stop
** can push them back); timers created since the run began are set aside and
** pushed back at once. Collecting reads no node and no slot: a cancelled
** entry popped is among the due ones, and the calls skip it (as they skip
** one cancelled after it was collected).
**
** A node's memory is its owner's: the rule that keeps a stale entry from
** reading freed memory (cancel, then luna__loop_sweep_timers, before
** freeing) is in lunaloop/extension.h.
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
#include "lunaloop/extension.h"
#include "lunaloop/loop.h"

/* A handle timer's slot (slots.h: pos and gen come first). */
typedef struct luna__timer {
  /* Free: next free slot (index + 1), 0 ends the list. In use: (heap
     number << 1) | 1 while the timer is live, 0 once it is cancelled (its
     entry not yet dropped). */
  uint32_t pos;
  uint32_t gen;     /* bumped when the timer fires or is cancelled */
  void *arg;
} luna__timer;

/* What a sift and a call read: nothing else. */
typedef struct luna__heap_entry {
  luna_ns deadline; /* absolute, on the kind's clock; clamped */
  /* (seq << 8) | (heap number << 1) | 1: within one heap the low byte is
     equal, so comparing stamps compares creation sequences (56 bits). A
     node timer is live while its node's word equals it. */
  uint64_t stamp;
  uintptr_t ref;    /* the node's address (even), or (slot index << 1) | 1 */
  luna_fn fn;
} luna__heap_entry;

#define LUNA__TIMER_HEAPS (LUNA_TIMING_COUNT * LUNA_TIMER_KIND_COUNT)
_Static_assert(LUNA__TIMER_HEAPS <= 128, "a heap number must fit bits 1-7 of a stamp");

/* a[0, n) is the heap (a[0] the earliest); a[cap - due, cap) the timers a
   run collected and has not called yet, next first; `dead` of the entries
   of both are cancelled. n + due <= cap always, so pushing collected
   timers back never allocates. */
typedef struct luna__heap {
  luna__heap_entry *a; /* `off` entries into its allocation (heap_grow) */
  size_t n;      /* in the heap */
  size_t cap;    /* entries from a to the end of the allocation */
  size_t live;   /* in the heap, or collected and neither called nor
                    cancelled: what luna__timers_count reports */
  size_t dead;   /* entries (heap or due) whose timer was cancelled */
  uint32_t due;  /* collected, at the end of a (a heap holds fewer than
                    2^32 entries: heap_grow refuses more) */
  uint32_t off;  /* 0 to 3 */
} luna__heap;

typedef struct luna__timers {
  luna__timer *slots; /* the handle timers' */
  luna__slab slab;    /* hands out the slots' indices (slots.h) */
  uint64_t seq;       /* creation sequence of the next timer */
  luna__heap heaps[LUNA__TIMER_HEAPS];
} luna__timers;

void luna__timers_init(luna__timers *tm);

/* luna_timer_add once its arguments are checked is luna__loop_add_timer
   (lunaloop/extension.h), defined in timer.c, and so are the node timers'
   luna__loop_add_timer_node, luna__loop_cancel_timer_node and
   luna__loop_sweep_timers: the binding's awaits call them directly, with
   no wrapper between them and the heap. */

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

/* Drops every timer without calling it (luna_loop_reset); handles go
   stale and armed nodes are disarmed (their words set to 0). */
void luna__timers_drop(luna__timers *tm);

void luna__timers_free(luna__timers *tm, const luna__alloc *a);

#endif
