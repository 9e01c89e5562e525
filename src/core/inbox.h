/*
** inbox.h: the per-timing cross-thread inbox behind luna_post.
**
** Contract
** - Producers: any thread, any number, at any time while the loop is alive
**   (luna_loop_free must not race with a post). luna__inbox_post is lock
**   free: it takes a node from the pool (a lock-free stack) or, when the pool
**   is empty, from the allocator, fills it, and pushes it on the timing's
**   Treiber stack with one release CAS. It never drops a post; it fails only
**   when the allocator fails (LUNA_ENOMEM), and then nothing was queued.
** - Consumer: the loop thread only. At the start of each run of a timing
**   (step 1) luna__inbox_deliver takes that timing's whole stack with one
**   acquire exchange, reverses it (the stack is newest first) and appends
**   the entries to the timing's continuation queue. A stack is a
**   linearisation of the pushes, so reversing it keeps every producer's own
**   order; the order between producers is the order their CASes succeeded.
** - Nodes: the loop thread alone recycles them, after reading them: pool
**   nodes go back on the pool's free list (one CAS per delivered batch),
**   allocated ones back to the allocator. So a producer only ever frees
**   nothing, and the allocator is called from producer threads only for
**   malloc-like requests (it must be thread safe if the pool can run dry
**   while other threads post).
** - Posts sit in the inbox until their timing runs. A post made during a run
**   of its timing waits for the next run, like luna_enqueue.
*/
#ifndef LUNA_INBOX_H
#define LUNA_INBOX_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "atomics.h"
#include "queue.h"

/* Nodes in the pool. 1024 covers the bursts we expect between two runs of a
   timing (a worker finishing jobs, an asset loader) at 32 KiB per loop;
   beyond it posts fall back to the allocator and are counted. */
#define LUNA__POOL_SIZE 1024

typedef struct luna__node {
  luna_fn fn;
  void *arg;
  struct luna__node *next;    /* inbox stack link, written before publishing */
  luna__atomic_u32 next_free; /* pool free-list link: index + 1, 0 ends */
} luna__node;

typedef struct luna__inbox {
  /* Per timing: a Treiber stack of luna__node, newest first. */
  _Atomic(void *) head[LUNA_TIMING_COUNT];
  /* Per timing, loop thread only: taken and in posted order, but not yet in
     the queue because growing the queue failed. Usually empty. */
  luna__node *pending_head[LUNA_TIMING_COUNT];
  luna__node *pending_tail[LUNA_TIMING_COUNT];
  luna__node *pool;           /* LUNA__POOL_SIZE nodes, never moved */
  luna__atomic_u64 free_head; /* pool free list: tag << 32 | (index + 1) */
  luna__atomic_u64 allocated; /* posts that needed the allocator */
} luna__inbox;

/* Allocates the pool. 0 or LUNA_ENOMEM. Loop creation. */
int luna__inbox_init(luna__inbox *in, const luna__alloc *a);

/* Any thread. 0 or LUNA_ENOMEM. `timing` must be valid. */
int luna__inbox_post(luna__inbox *in, const luna__alloc *a, int timing,
                     luna_fn fn, void *arg);

/* Step 1 of a run of `timing`: moves its posts into `q` (as posted entries)
   in per-producer order and recycles the nodes. Loop thread. */
void luna__inbox_deliver(luna__inbox *in, const luna__alloc *a, int timing,
                         luna__queue *q);

/* Posts taken but not yet queued for `timing` (loop thread). */
size_t luna__inbox_pending(const luna__inbox *in, int timing);

/* Discards every post without calling it and frees the pool. Loop free;
   no producer may run concurrently. */
void luna__inbox_free(luna__inbox *in, const luna__alloc *a);

#endif
