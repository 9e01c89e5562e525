/*
** inbox.h: the per-timing cross-thread inbox behind luna_post.
**
** Contract
** - Producers: any thread, any number, at any time while the loop is alive
**   (luna_loop_free must not race with a post). luna__inbox_post is lock
**   free: it takes a node from the pool (lock-free stacks of node indices)
**   or, when the pool is empty, grows the pool by a block from the
**   allocator; it fills the node and pushes it on a Treiber stack with one
**   release CAS. It never drops a post; it fails only when the allocator
**   fails (LUNA_ENOMEM), and then nothing was queued.
** - Shards: each posting thread is given one of LUNA__INBOX_SHARDS shards
**   the first time it posts (round robin over threads, for its lifetime and
**   every loop). A shard has its own stack per timing and its own free list,
**   each on its own cache lines, so two producers on two shards never write
**   the same line: they contend only with the loop thread, once per run.
**   A producer whose free list is empty takes nodes from the other shards
**   before it allocates.
** - Consumer: the loop thread only. At the start of each run of a timing
**   (step 1) luna__inbox_deliver takes that timing's stack of every shard
**   with one acquire exchange each (after a relaxed load finds it
**   non-empty), reverses it (a stack is newest first) and appends the
**   entries to the timing's continuation queue. A stack is a linearisation
**   of the pushes to it and a thread always posts to the same shard, so
**   reversing keeps every producer's own order; posts of threads on
**   different shards are delivered shard by shard.
** - Nodes: the loop thread alone recycles them, after reading them, onto
**   the free list of the shard that posted them (one CAS per shard and
**   delivered batch), so a producer keeps reusing its own nodes. The pool
**   starts with LUNA__POOL_SIZE nodes made with the loop; when a producer
**   finds it empty it allocates a block of LUNA__CHUNK_NODES nodes, takes
**   one and pushes the rest on its free list. Blocks stay in the pool until
**   the loop is freed, so once the pool has grown to the largest backlog
**   the load produces, posting allocates nothing. Past LUNA__MAX_CHUNKS
**   blocks a post allocates a lone node, freed once delivered. So the
**   allocator is called from producer threads only for malloc-like
**   requests (it must be thread safe if the pool can run dry while other
**   threads post), and frees happen on the loop thread.
** - Posts sit in the inbox until their timing runs. A post made during a run
**   of its timing waits for the next run, like luna_enqueue.
*/
#ifndef LUNA_INBOX_H
#define LUNA_INBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "atomics.h"
#include "queue.h"

/* Nodes made with the loop. 1024 covers the bursts we expect between two
   runs of a timing (a worker finishing jobs, an asset loader) at 32 KiB per
   loop; beyond it the pool grows by blocks (see the contract above). */
#define LUNA__POOL_SIZE 1024
/* Shards: more than the producer threads a loop usually has (2 to 4), few
   enough that an idle run checks them in a few loads. */
#define LUNA__INBOX_SHARDS 4
/* A block: 256 nodes, 8 KiB, so a producer that outruns the loop allocates
   once per 256 posts until the pool has grown enough. */
#define LUNA__CHUNK_NODES 256
/* Blocks are found through a two-level directory that never moves: 64
   pages (allocated when first needed) of 1024 block pointers each. So the
   pool can grow to 65,536 blocks (16.7 million nodes, 512 MiB): beyond any
   backlog a frame loop should see, and yet bounded. */
#define LUNA__DIR_PAGES 64
#define LUNA__DIR_PAGE 1024
#define LUNA__MAX_CHUNKS (LUNA__DIR_PAGES * LUNA__DIR_PAGE)

/* Node meta: bits 0-27 the node's pool index + 1 (0: a lone node, freed
   once delivered), bits 28-30 the shard that posted it, bit 31 set until
   the node's first post (counted in `allocated`). */
#define LUNA__NODE_INDEX(m) ((m) & 0x0fffffffu)
#define LUNA__NODE_SHARD(m) (((m) >> 28) & 0x7u)
#define LUNA__NODE_SHARD_SHIFT 28
#define LUNA__NODE_FRESH 0x80000000u

typedef struct luna__node {
  luna_fn fn;
  void *arg;
  struct luna__node *next;    /* inbox stack link, written before publishing */
  luna__atomic_u32 next_free; /* pool free-list link: index + 1, 0 ends */
  uint32_t meta;              /* LUNA__NODE_*: owned by whoever holds the node */
} luna__node;

/* A shard's producer-side state. The loop is allocated with the host's
   allocator (16-byte alignment), so cache-line alignment cannot be asked
   for; 64 bytes of padding between shards (and before the first) keep two
   shards' fields off any common 64-byte line instead. */
typedef struct luna__shard {
  _Atomic(void *) head[LUNA_TIMING_COUNT]; /* Treiber stacks, newest first */
  luna__atomic_u64 free_head; /* free list: tag << 32 | (index + 1) */
  char pad[64];
} luna__shard;

typedef struct luna__inbox {
  char pad[64]; /* off the lines of the loop's fields before it */
  luna__shard shards[LUNA__INBOX_SHARDS];
  /* Per timing, loop thread only: taken and in posted order, but not yet in
     the queue because growing the queue failed. Usually empty. */
  luna__node *pending_head[LUNA_TIMING_COUNT];
  luna__node *pending_tail[LUNA_TIMING_COUNT];
  luna__node *pool;           /* LUNA__POOL_SIZE nodes, never moved */
  /* The directory of the blocks that grew the pool: pages of
     LUNA__DIR_PAGE _Atomic(void *) block pointers. A page is installed
     with one CAS by the first producer that needs it; a block pointer is
     written once (release) by the producer that allocated the block, before
     any of its nodes is on a free list. */
  _Atomic(void *) dir[LUNA__DIR_PAGES];
  luna__atomic_u32 nchunks;   /* blocks claimed (may pass the maximum) */
  luna__atomic_u32 nadded;    /* blocks actually in the pool: a claim whose
                                 allocation failed leaves a hole that
                                 nchunks counts and this does not */
  luna__atomic_u64 allocated; /* posts whose node came from the allocator */
} luna__inbox;

/* Allocates the pool. 0 or LUNA_ENOMEM. Loop creation. */
int luna__inbox_init(luna__inbox *in, const luna__alloc *a);

/* luna_loop_reserve_posts: grows the pool by blocks until it holds at
   least n nodes. Any thread (as a post that grows the pool). 0, LUNA_EINVAL
   when n is beyond the largest pool, LUNA_ENOMEM. */
int luna__inbox_reserve(luna__inbox *in, const luna__alloc *a, size_t n);

/* Any thread. 0 or LUNA_ENOMEM. `timing` must be valid. */
int luna__inbox_post(luna__inbox *in, const luna__alloc *a, int timing,
                     luna_fn fn, void *arg);

/* Step 1 of a run of `timing`: moves its posts into `q` (as posted entries)
   in per-producer order and recycles the nodes. Loop thread. */
void luna__inbox_deliver(luna__inbox *in, const luna__alloc *a, int timing,
                         luna__queue *q);

/* True when no post waits at any timing: none in a shard's stack, none
   taken and not yet queued. Loop thread. A post pushed concurrently may or
   may not be seen (one relaxed load per stack). */
bool luna__inbox_empty(luna__inbox *in);

/* Posts taken but not yet queued for `timing` (loop thread). */
size_t luna__inbox_pending(const luna__inbox *in, int timing);

/* Discards every post without calling it and frees the pool. Loop free;
   no producer may run concurrently. */
void luna__inbox_free(luna__inbox *in, const luna__alloc *a);

#endif
