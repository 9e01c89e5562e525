/*
** queue.c: the double-buffered continuation queue (see queue.h).
*/
#include <string.h>

#include "loop_internal.h"
#include "queue.h"

int luna__queue_reserve(luna__queue *q, const luna__alloc *a) {
  return luna__grow(a, (void **)&q->wait, &q->wait_cap, sizeof *q->wait, q->wait_n + 1);
}

/* Makes `run` hold what this drain must call: the leftovers of a stopped
   drain, then everything in `wait`. */
static void take_waiting(luna__queue *q, const luna__alloc *a) {
  size_t left = q->run_n - q->run_head;
  if (left == 0) {
    /* The common case: swap the arrays, keeping both capacities. */
    luna__entry *t = q->run;
    size_t tcap = q->run_cap;
    q->run = q->wait;
    q->run_cap = q->wait_cap;
    q->run_n = q->wait_n;
    q->run_head = 0;
    q->wait = t;
    q->wait_cap = tcap;
    q->wait_n = 0;
    return;
  }
  /* After a stop: leftovers first, then what was queued since. If the
     append cannot allocate, run the leftovers alone this time; the rest
     stays in `wait`, behind them, for the next run: late, never reordered. */
  memmove(q->run, q->run + q->run_head, left * sizeof *q->run);
  q->run_head = 0;
  q->run_n = left;
  if (q->wait_n == 0 ||
      luna__grow(a, (void **)&q->run, &q->run_cap, sizeof *q->run,
                 left + q->wait_n) != 0)
    return;
  memcpy(q->run + left, q->wait, q->wait_n * sizeof *q->wait);
  q->run_n += q->wait_n;
  q->wait_n = 0;
}

bool luna__queue_drain(luna__queue *q, const luna__alloc *a, luna_loop *loop) {
  take_waiting(q, a);
  /* Index and bounds are re-read after each call: callbacks may push (to
     `wait`, never `run`) and purge (which compacts [run_head, run_n)). */
  if (q->run_head < q->run_n)
    LUNA__PREFETCH(q->run[q->run_head].arg);
  while (q->run_head < q->run_n) {
    luna__entry e = q->run[q->run_head++];
    if (q->run_head < q->run_n)
      LUNA__PREFETCH(q->run[q->run_head].arg);
    e.fn(loop, e.arg);
    if (luna__loop_stopping(loop))
      return true;
  }
  q->run_head = q->run_n = 0;
  return false;
}

size_t luna__queue_count(const luna__queue *q) {
  return (q->run_n - q->run_head) + q->wait_n;
}

/* Compacts e[from, *n) in place, dropping matches; returns how many. */
static size_t purge_range(luna__entry *e, size_t from, size_t *n,
                          luna_match_fn match, void *ud) {
  size_t i, j = from;
  for (i = from; i < *n; i++) {
    if (!e[i].posted && match(e[i].fn, e[i].arg, ud))
      continue;
    e[j++] = e[i];
  }
  i = *n - j;
  *n = j;
  return i;
}

size_t luna__queue_purge(luna__queue *q, luna_match_fn match, void *ud) {
  return purge_range(q->run, q->run_head, &q->run_n, match, ud) +
         purge_range(q->wait, 0, &q->wait_n, match, ud);
}

/* Keeps only the posts of e[from, *n), moved to the front of the range. */
static void keep_posts(luna__entry *e, size_t from, size_t *n) {
  size_t i, j = from;
  for (i = from; i < *n; i++)
    if (e[i].posted)
      e[j++] = e[i];
  *n = j;
}

void luna__queue_drop(luna__queue *q) {
  keep_posts(q->run, q->run_head, &q->run_n);
  keep_posts(q->wait, 0, &q->wait_n);
}

void luna__queue_free(luna__queue *q, const luna__alloc *a) {
  luna__array_free(a, (void **)&q->run, &q->run_cap, sizeof *q->run);
  luna__array_free(a, (void **)&q->wait, &q->wait_cap, sizeof *q->wait);
  q->run_head = q->run_n = q->wait_n = 0;
}
