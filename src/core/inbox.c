/*
** inbox.c: lock-free posting from any thread (see the contract in inbox.h).
**
** Each shard's free list is a lock-free stack of node indices whose head
** packs a 32-bit tag with the top index in one 64-bit atomic:
** (tag << 32) | (i + 1), 0 in the low half meaning empty. Every successful
** push or pop bumps the tag. This defeats ABA: a popper that read head =
** (t, A) and A's next = B and then stalled, while others popped A and B and
** the loop pushed A back, finds head = (t + k, A) and its CAS fails, instead
** of installing B, which is in use. A false match needs the tag to wrap
** (2^32 operations) while one popper is stalled between two instructions.
** Nodes live in the initial array and in blocks that are never freed while
** the loop lives, so reading a stale node's next_free is always a valid read
** (it is atomic, relaxed, because its owner may be rewriting it; the tag
** check discards the value then).
**
** Why shards: with one stack and one free list, every post of every
** producer would do two CASes on the same two lines, and two producers
** would spend their time taking those lines from each other (a
** mutex-protected array beats that). A shard per producer leaves each line
** to one producer and the loop thread.
*/
#include "inbox.h"
#include "lunaloop/error.h"

#define TAG_ONE ((uint64_t)1 << 32)

/* The next shard to hand out, and this thread's (shard + 1; 0: none yet).
   Process-wide: a thread keeps its shard on every loop, so nothing here
   refers to a loop that may be freed. */
static luna__atomic_u32 next_shard;
static _Thread_local uint32_t thread_shard;

static uint32_t my_shard(void) {
  uint32_t s = thread_shard;
  if (s == 0) {
    s = luna__u32_fetch_add_relaxed(&next_shard, 1) % LUNA__INBOX_SHARDS + 1;
    thread_shard = s;
  }
  return s - 1;
}

int luna__inbox_init(luna__inbox *in, const luna__alloc *a) {
  int t, s;
  uint32_t i;
  for (s = 0; s < LUNA__INBOX_SHARDS; s++)
    for (t = 0; t < LUNA_TIMING_COUNT; t++)
      atomic_init(&in->shards[s].head[t], NULL);
  for (t = 0; t < LUNA_TIMING_COUNT; t++)
    in->pending_head[t] = in->pending_tail[t] = NULL;
  for (i = 0; i < LUNA__DIR_PAGES; i++)
    atomic_init(&in->dir[i], NULL);
  atomic_init(&in->nchunks, 0);
  atomic_init(&in->nadded, 0);
  atomic_init(&in->allocated, 0);
  in->pool = luna__malloc(a, LUNA__POOL_SIZE * sizeof *in->pool);
  if (in->pool == NULL)
    return LUNA_ENOMEM;
  /* Shard s starts with the s-th quarter of the array, linked in order. */
  for (i = 0; i < LUNA__POOL_SIZE; i++) {
    uint32_t per = LUNA__POOL_SIZE / LUNA__INBOX_SHARDS;
    bool last = (i + 1) % per == 0;
    atomic_init(&in->pool[i].next_free, last ? 0 : i + 2);
    in->pool[i].meta = i + 1;
  }
  for (s = 0; s < LUNA__INBOX_SHARDS; s++)
    atomic_init(&in->shards[s].free_head,
                (uint64_t)s * (LUNA__POOL_SIZE / LUNA__INBOX_SHARDS) + 1);
  return 0;
}

/* The slot of block c in the directory; NULL when its page is missing. */
static _Atomic(void *) *block_slot(luna__inbox *in, uint32_t c) {
  _Atomic(void *) *page = luna__ptr_load_acquire(&in->dir[c / LUNA__DIR_PAGE]);
  return page != NULL ? &page[c % LUNA__DIR_PAGE] : NULL;
}

/* The node of pool index i (0-based). Any thread; i was read from a free
   list, so its block is published (the acquire loads make that explicit). */
static luna__node *node_at(luna__inbox *in, uint32_t i) {
  if (i < LUNA__POOL_SIZE)
    return &in->pool[i];
  i -= LUNA__POOL_SIZE;
  return (luna__node *)luna__ptr_load_acquire(block_slot(in, i / LUNA__CHUNK_NODES)) +
         i % LUNA__CHUNK_NODES;
}

/* The slot for new block c, installing its directory page if needed; NULL
   when the page cannot be allocated. */
static _Atomic(void *) *claim_slot(luna__inbox *in, const luna__alloc *a, uint32_t c) {
  _Atomic(void *) *page;
  void *expected = NULL;
  uint32_t k;
  if ((page = block_slot(in, c)) != NULL)
    return page;
  page = luna__malloc(a, LUNA__DIR_PAGE * sizeof *page);
  if (page == NULL)
    return NULL;
  for (k = 0; k < LUNA__DIR_PAGE; k++)
    atomic_init(&page[k], NULL);
  if (!luna__ptr_cas_release(&in->dir[c / LUNA__DIR_PAGE], &expected, page)) {
    /* Another producer installed it first: use theirs. (A weak CAS may also
       fail spuriously; then the slot is still empty and we retry.) */
    luna__free(a, page, LUNA__DIR_PAGE * sizeof *page);
    return claim_slot(in, a, c);
  }
  return &page[c % LUNA__DIR_PAGE];
}

/* Pops a node of shard s, or NULL when its free list is empty. Any thread. */
static luna__node *pool_pop(luna__inbox *in, uint32_t s) {
  luna__atomic_u64 *head = &in->shards[s].free_head;
  uint64_t old = luna__u64_load_acquire(head);
  for (;;) {
    uint32_t top = (uint32_t)old;
    luna__node *n;
    uint64_t desired;
    if (top == 0)
      return NULL;
    n = node_at(in, top - 1);
    desired = ((old & ~(uint64_t)UINT32_MAX) + TAG_ONE) |
              luna__u32_load_relaxed(&n->next_free);
    if (luna__u64_cas_acquire(head, &old, desired))
      return n;
  }
}

/* Pushes the chain first..last (linked by next_free; first is index + 1)
   on shard s's free list in one CAS. The loop thread (recycling) and
   producers (a new block) push. */
static void pool_push_chain(luna__inbox *in, uint32_t s, uint32_t first,
                            luna__node *last) {
  luna__atomic_u64 *head = &in->shards[s].free_head;
  uint64_t old = luna__u64_load_relaxed(head);
  uint64_t desired;
  do {
    luna__u32_store_relaxed(&last->next_free, (uint32_t)old);
    desired = ((old & ~(uint64_t)UINT32_MAX) + TAG_ONE) | first;
  } while (!luna__u64_cas_release(head, &old, desired));
}

/* Claims and fills block c of the pool and pushes its nodes on the free
   list of shard s, all of them for a reservation, all but the first (which
   it returns) for a post. A post's block counts as allocated for posts
   (LUNA__NODE_FRESH); a reserved one does not. NULL when c is past the
   last block or an allocation failed (the claim of c is then wasted). */
static luna__node *add_block(luna__inbox *in, const luna__alloc *a, uint32_t c, uint32_t s,
                             bool for_post) {
  _Atomic(void *) *slot;
  luna__node *block;
  uint32_t base = LUNA__POOL_SIZE + c * LUNA__CHUNK_NODES, k;
  uint32_t fresh = for_post ? LUNA__NODE_FRESH : 0;
  if (c >= LUNA__MAX_CHUNKS || (slot = claim_slot(in, a, c)) == NULL ||
      (block = luna__malloc(a, LUNA__CHUNK_NODES * sizeof *block)) == NULL)
    return NULL;
  for (k = 0; k < LUNA__CHUNK_NODES; k++) {
    atomic_init(&block[k].next_free, k + 1 < LUNA__CHUNK_NODES ? base + k + 2 : 0);
    block[k].meta = (base + k + 1) | fresh;
  }
  /* Published before any of its indices can be read from a free list. */
  luna__ptr_store_release(slot, block);
  luna__u32_fetch_add_relaxed(&in->nadded, 1);
  if (for_post) {
    pool_push_chain(in, s, base + 2, &block[LUNA__CHUNK_NODES - 1]);
    return &block[0];
  }
  pool_push_chain(in, s, base + 1, &block[LUNA__CHUNK_NODES - 1]);
  return block;
}

/* The pool of shard s is empty: take a node from another shard, or grow
   the pool by a block (keeping one node, pushing the rest on shard s), or
   past the last block allocate a lone node. NULL when the allocator fails. */
static luna__node *pool_refill(luna__inbox *in, const luna__alloc *a, uint32_t s) {
  uint32_t k;
  luna__node *n;
  for (k = 1; k < LUNA__INBOX_SHARDS; k++)
    if ((n = pool_pop(in, (s + k) % LUNA__INBOX_SHARDS)) != NULL)
      return n;
  n = add_block(in, a, luna__u32_fetch_add_relaxed(&in->nchunks, 1), s, true);
  if (n != NULL)
    return n;
  /* No block (the pool is at its largest, or the block's allocation
     failed): a lone node, freed once delivered. */
  n = luna__malloc(a, sizeof *n);
  if (n != NULL)
    n->meta = LUNA__NODE_FRESH; /* index 0: lone */
  return n;
}

int luna__inbox_reserve(luna__inbox *in, const luna__alloc *a, size_t n) {
  const size_t most = LUNA__POOL_SIZE + (size_t)LUNA__MAX_CHUNKS * LUNA__CHUNK_NODES;
  if (n > most)
    return LUNA_EINVAL;
  for (;;) {
    /* Counted by the blocks actually added, not claimed: a claim whose
       allocation failed (here or in a post) added nothing. */
    uint32_t c, have = luna__u32_load_relaxed(&in->nadded);
    if (LUNA__POOL_SIZE + (size_t)have * LUNA__CHUNK_NODES >= n)
      return 0;
    c = luna__u32_fetch_add_relaxed(&in->nchunks, 1);
    /* Blocks go round the shards, so every producer finds nodes at home. */
    if (add_block(in, a, c, c % LUNA__INBOX_SHARDS, false) == NULL) {
      /* Past the last block, posts that raced may have filled the pool. */
      have = luna__u32_load_relaxed(&in->nadded);
      return LUNA__POOL_SIZE + (size_t)have * LUNA__CHUNK_NODES >= n ? 0 : LUNA_ENOMEM;
    }
  }
}

int luna__inbox_post(luna__inbox *in, const luna__alloc *a, int timing,
                     luna_fn fn, void *arg) {
  uint32_t s = my_shard();
  _Atomic(void *) *head = &in->shards[s].head[timing];
  luna__node *n = pool_pop(in, s);
  void *old;
  if (n == NULL && (n = pool_refill(in, a, s)) == NULL)
    return LUNA_ENOMEM;
  if (n->meta & LUNA__NODE_FRESH)
    luna__u64_inc_relaxed(&in->allocated);
  n->meta = LUNA__NODE_INDEX(n->meta) | (s << LUNA__NODE_SHARD_SHIFT);
  n->fn = fn;
  n->arg = arg;
  old = luna__ptr_load_relaxed(head);
  do
    n->next = old;
  while (!luna__ptr_cas_release(head, &old, n));
  return 0;
}

void luna__inbox_deliver(luna__inbox *in, const luna__alloc *a, int timing,
                         luna__queue *q) {
  luna__node *n;
  uint32_t chain_first[LUNA__INBOX_SHARDS] = {0}; /* recycled: index + 1 */
  luna__node *chain_last[LUNA__INBOX_SHARDS] = {NULL};
  int s;

  /* Most runs find nothing: a read leaves the lines shared with producers,
     where the exchange would take them exclusive 16+ times a frame. A post
     that lands just after its read is delivered at the next run, as if it
     had come after the exchange. */
  for (s = 0; s < LUNA__INBOX_SHARDS; s++) {
    _Atomic(void *) *head = &in->shards[s].head[timing];
    luna__node *rev = NULL, *tail;
    if (luna__ptr_load_relaxed(head) == NULL)
      continue;
    n = luna__ptr_exchange_acquire(head, NULL);
    tail = n;
    /* Newest first -> posted order, appended behind earlier pending ones. */
    while (n != NULL) {
      luna__node *next = n->next;
      n->next = rev;
      rev = n;
      n = next;
    }
    if (rev != NULL) {
      if (in->pending_tail[timing] != NULL)
        in->pending_tail[timing]->next = rev;
      else
        in->pending_head[timing] = rev;
      in->pending_tail[timing] = tail;
    }
  }
  if (in->pending_head[timing] == NULL)
    return;

  /* Into the queue, in order; on allocation failure the rest stays pending
     and is retried first at the next run: late, never lost or reordered.
     Each node goes back to the free list of the shard that posted it. */
  while ((n = in->pending_head[timing]) != NULL) {
    uint32_t idx = LUNA__NODE_INDEX(n->meta);
    if (luna__queue_push(q, a, n->fn, n->arg, true) != 0)
      break;
    in->pending_head[timing] = n->next;
    if (idx != 0) {
      uint32_t home = LUNA__NODE_SHARD(n->meta);
      luna__u32_store_relaxed(&n->next_free, chain_first[home]);
      chain_first[home] = idx;
      if (chain_last[home] == NULL)
        chain_last[home] = n;
    } else {
      luna__free(a, n, sizeof *n);
    }
  }
  if (in->pending_head[timing] == NULL)
    in->pending_tail[timing] = NULL;
  for (s = 0; s < LUNA__INBOX_SHARDS; s++)
    if (chain_last[s] != NULL)
      pool_push_chain(in, (uint32_t)s, chain_first[s], chain_last[s]);
}

bool luna__inbox_empty(luna__inbox *in) {
  int s, t;
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    if (in->pending_head[t] != NULL)
      return false;
    /* Relaxed: only whether a stack is empty is read, as deliver's first
       look does; a racing push is the caller's to order (see the header). */
    for (s = 0; s < LUNA__INBOX_SHARDS; s++)
      if (luna__ptr_load_relaxed(&in->shards[s].head[t]) != NULL)
        return false;
  }
  return true;
}

size_t luna__inbox_pending(const luna__inbox *in, int timing) {
  size_t count = 0;
  const luna__node *n;
  for (n = in->pending_head[timing]; n != NULL; n = n->next)
    count++;
  return count;
}

void luna__inbox_free(luna__inbox *in, const luna__alloc *a) {
  uint32_t c, nchunks;
  int t, s, k;
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    luna__node *lists[LUNA__INBOX_SHARDS + 1], *n;
    for (s = 0; s < LUNA__INBOX_SHARDS; s++)
      lists[s] = luna__ptr_exchange_acquire(&in->shards[s].head[t], NULL);
    lists[LUNA__INBOX_SHARDS] = in->pending_head[t];
    in->pending_head[t] = in->pending_tail[t] = NULL;
    for (k = 0; k <= LUNA__INBOX_SHARDS; k++)
      for (n = lists[k]; n != NULL;) {
        luna__node *next = n->next;
        if (LUNA__NODE_INDEX(n->meta) == 0)
          luna__free(a, n, sizeof *n);
        n = next;
      }
  }
  nchunks = luna__u32_load_relaxed(&in->nchunks);
  if (nchunks > LUNA__MAX_CHUNKS)
    nchunks = LUNA__MAX_CHUNKS;
  for (c = 0; c < nchunks; c++) {
    _Atomic(void *) *slot = block_slot(in, c);
    luna__node *block = slot != NULL ? luna__ptr_load_acquire(slot) : NULL;
    if (block != NULL)
      luna__free(a, block, LUNA__CHUNK_NODES * sizeof *block);
  }
  for (c = 0; c < LUNA__DIR_PAGES; c++) {
    void *page = luna__ptr_load_acquire(&in->dir[c]);
    if (page != NULL)
      luna__free(a, page, LUNA__DIR_PAGE * sizeof(_Atomic(void *)));
  }
  luna__free(a, in->pool, LUNA__POOL_SIZE * sizeof *in->pool);
  in->pool = NULL;
}
