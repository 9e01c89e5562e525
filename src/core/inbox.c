/*
** inbox.c: lock-free posting from any thread (see the contract in inbox.h).
**
** The pool's free list is a lock-free stack of node indices whose head packs
** a 32-bit tag with the top index in one 64-bit atomic: (tag << 32) | (i + 1),
** 0 in the low half meaning empty. Every successful push or pop bumps the
** tag. This defeats ABA: a popper that read head = (t, A) and A's next = B
** and then stalled, while others popped A and B and the loop pushed A back,
** finds head = (t + k, A) and its CAS fails, instead of installing B, which
** is in use. A false match needs the tag to wrap (2^32 operations) while one
** popper is stalled between two instructions. Nodes live in one array that
** is never freed while the loop lives, so reading a stale node's next_free
** is always a valid read (it is atomic, relaxed, because the loop may be
** rewriting it; the tag check discards the value then).
*/
#include "inbox.h"
#include "lunaloop/error.h"

#define TAG_ONE ((uint64_t)1 << 32)

int luna__inbox_init(luna__inbox *in, const luna__alloc *a) {
  int t;
  uint32_t i;
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    atomic_init(&in->head[t], NULL);
    in->pending_head[t] = in->pending_tail[t] = NULL;
  }
  atomic_init(&in->allocated, 0);
  in->pool = luna__malloc(a, LUNA__POOL_SIZE * sizeof *in->pool);
  if (in->pool == NULL)
    return LUNA_ENOMEM;
  for (i = 0; i < LUNA__POOL_SIZE; i++)
    atomic_init(&in->pool[i].next_free, i + 1 < LUNA__POOL_SIZE ? i + 2 : 0);
  atomic_init(&in->free_head, 1); /* tag 0, top = node 0 */
  return 0;
}

static int is_pool_node(const luna__inbox *in, const luna__node *n) {
  return n >= in->pool && n < in->pool + LUNA__POOL_SIZE;
}

/* Pops a pool node, or NULL when the pool is empty. Any thread. */
static luna__node *pool_pop(luna__inbox *in) {
  uint64_t old = luna__u64_load_acquire(&in->free_head);
  for (;;) {
    uint32_t top = (uint32_t)old;
    uint32_t next;
    uint64_t desired;
    if (top == 0)
      return NULL;
    next = luna__u32_load_relaxed(&in->pool[top - 1].next_free);
    desired = ((old & ~(uint64_t)UINT32_MAX) + TAG_ONE) | next;
    if (luna__u64_cas_acquire(&in->free_head, &old, desired))
      return &in->pool[top - 1];
  }
}

/* Pushes the chain first..last (linked by next_free) back on the pool in one
   CAS. Loop thread only (the single pusher). */
static void pool_push_chain(luna__inbox *in, uint32_t first, luna__node *last) {
  uint64_t old = luna__u64_load_relaxed(&in->free_head);
  uint64_t desired;
  do {
    luna__u32_store_relaxed(&last->next_free, (uint32_t)old);
    desired = ((old & ~(uint64_t)UINT32_MAX) + TAG_ONE) | first;
  } while (!luna__u64_cas_release(&in->free_head, &old, desired));
}

int luna__inbox_post(luna__inbox *in, const luna__alloc *a, int timing,
                     luna_fn fn, void *arg) {
  luna__node *n = pool_pop(in);
  void *old;
  if (n == NULL) {
    n = luna__malloc(a, sizeof *n);
    if (n == NULL)
      return LUNA_ENOMEM;
    luna__u64_inc_relaxed(&in->allocated);
  }
  n->fn = fn;
  n->arg = arg;
  old = luna__ptr_load_relaxed(&in->head[timing]);
  do
    n->next = old;
  while (!luna__ptr_cas_release(&in->head[timing], &old, n));
  return 0;
}

void luna__inbox_deliver(luna__inbox *in, const luna__alloc *a, int timing,
                         luna__queue *q) {
  luna__node *n, *rev = NULL, *tail;
  uint32_t chain_first = 0; /* recycled pool nodes: index + 1 of the head */
  luna__node *chain_last = NULL;

  /* Most runs find nothing: a read leaves the line shared with producers,
     where the exchange would take it exclusive 16+ times a frame. A post
     that lands just after this read is delivered at the next run, as if it
     had come after the exchange. */
  if (luna__ptr_load_relaxed(&in->head[timing]) == NULL &&
      in->pending_head[timing] == NULL)
    return;
  n = luna__ptr_exchange_acquire(&in->head[timing], NULL);
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

  /* Into the queue, in order; on allocation failure the rest stays pending
     and is retried first at the next run: late, never lost or reordered. */
  while ((n = in->pending_head[timing]) != NULL) {
    if (luna__queue_push(q, a, n->fn, n->arg, true) != 0)
      break;
    in->pending_head[timing] = n->next;
    if (is_pool_node(in, n)) {
      luna__u32_store_relaxed(&n->next_free, chain_first);
      chain_first = (uint32_t)(n - in->pool) + 1;
      if (chain_last == NULL)
        chain_last = n;
    } else {
      luna__free(a, n, sizeof *n);
    }
  }
  if (in->pending_head[timing] == NULL)
    in->pending_tail[timing] = NULL;
  if (chain_last != NULL)
    pool_push_chain(in, chain_first, chain_last);
}

size_t luna__inbox_pending(const luna__inbox *in, int timing) {
  size_t count = 0;
  const luna__node *n;
  for (n = in->pending_head[timing]; n != NULL; n = n->next)
    count++;
  return count;
}

void luna__inbox_free(luna__inbox *in, const luna__alloc *a) {
  int t;
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    luna__node *lists[2], *n;
    int k;
    lists[0] = luna__ptr_exchange_acquire(&in->head[t], NULL);
    lists[1] = in->pending_head[t];
    in->pending_head[t] = in->pending_tail[t] = NULL;
    for (k = 0; k < 2; k++)
      for (n = lists[k]; n != NULL;) {
        luna__node *next = n->next;
        if (!is_pool_node(in, n))
          luna__free(a, n, sizeof *n);
        n = next;
      }
  }
  luna__free(a, in->pool, LUNA__POOL_SIZE * sizeof *in->pool);
  in->pool = NULL;
}
