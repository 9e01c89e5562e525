/*
** queue.h: the per-timing queue of one-shot continuations.
**
** Double buffered: `wait` collects what is queued for the timing's next run;
** at the start of step 2 of a run the loop swaps it with `run`, the array it
** then drains. So anything queued while the timing drains lands in `wait`
** and runs at the next run, never in the same drain, and the two arrays keep
** their capacity across runs: after warm-up, queueing allocates nothing.
**
** When luna_loop_stop interrupts a drain, the entries of `run` not yet called
** stay there; the next drain runs them first, then what `wait` holds, so the
** queue stays FIFO across the stop.
**
** Loop thread only; no locks. Cross-thread posts enter through inbox.c.
*/
#ifndef LUNA_QUEUE_H
#define LUNA_QUEUE_H

#include <stdbool.h>
#include <stddef.h>

#include "alloc.h"
#include "lunaloop/extension.h" /* luna__entry, luna__queue, luna__queue_try_push */
#include "lunaloop/error.h"
#include "lunaloop/loop.h"

/* Makes room for one more entry in `wait`. 0 or LUNA_ENOMEM. */
int luna__queue_reserve(luna__queue *q, const luna__alloc *a);

/* Appends fn(arg) for the next run. 0 or LUNA_ENOMEM. Inline: it is on the
   path of every task.yield, and only growing needs a call. */
static inline int luna__queue_push(luna__queue *q, const luna__alloc *a, luna_fn fn,
                                   void *arg, bool posted) {
  if (luna__queue_try_push(q, fn, arg, posted))
    return 0;
  if (luna__queue_reserve(q, a) != 0)
    return LUNA_ENOMEM;
  luna__queue_try_push(q, fn, arg, posted);
  return 0;
}

/* Step 2 of a run: calls, in order, the entries left by a stopped drain and
   then those queued before this drain began. Returns true when
   luna_loop_stop interrupted it (the rest stays queued). */
bool luna__queue_drain(luna__queue *q, const luna__alloc *a, luna_loop *loop);

/* Entries waiting (left over and queued). */
size_t luna__queue_count(const luna__queue *q);

/* Removes the entries (posts excepted) for which match is true, keeping the
   order of the rest. Safe even while this queue drains: the drain re-reads
   its bounds after every call. Returns how many were removed. */
size_t luna__queue_purge(luna__queue *q, luna_match_fn match, void *ud);

/* Drops every entry except posts (luna_loop_reset). */
void luna__queue_drop(luna__queue *q);

/* Frees both arrays. */
void luna__queue_free(luna__queue *q, const luna__alloc *a);

#endif
