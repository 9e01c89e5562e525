/*
** atomics.h: the few C11 atomic operations the core uses, one wrapper per
** use. Each wrapper names its memory order and says why that order is the
** weakest one that is correct. Only inbox.c touches atomics.
*/
#ifndef LUNA_ATOMICS_H
#define LUNA_ATOMICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef _Atomic(uint64_t) luna__atomic_u64;
typedef _Atomic(uint32_t) luna__atomic_u32;

/* ---- pointer stacks (the per-timing inbox) ------------------------------- */

/* Relaxed: the producer only copies the old head into its node's next field;
   it never dereferences it, and the release CAS below publishes the node.
   The loop thread uses it only to test for an empty stack; it dereferences
   nothing without the acquire exchange. */
static inline void *luna__ptr_load_relaxed(_Atomic(void *) *p) {
  return atomic_load_explicit(p, memory_order_relaxed);
}

/* Release on success: the node's fields, written before, become visible to
   the loop thread that takes the stack with the acquire exchange. Relaxed on
   failure: nothing was published, the loop just retries with the new head. */
static inline bool luna__ptr_cas_release(_Atomic(void *) *p, void **expected,
                                         void *desired) {
  return atomic_compare_exchange_weak_explicit(
      p, expected, desired, memory_order_release, memory_order_relaxed);
}

/* Acquire: pairs with the producers' release CAS, so every node reached from
   the returned head has its fields visible to the loop thread. */
static inline void *luna__ptr_exchange_acquire(_Atomic(void *) *p, void *v) {
  return atomic_exchange_explicit(p, v, memory_order_acquire);
}

/* ---- the blocks that grow the node pool -------------------------------------- */

/* Release: the block's nodes (their links and meta), written before, are
   visible to whoever reads the pointer with the acquire load below. */
static inline void luna__ptr_store_release(_Atomic(void *) *p, void *v) {
  atomic_store_explicit(p, v, memory_order_release);
}

/* Acquire: a thread that got a block's node index from a free list reads
   the block pointer; it must see the pointer and the nodes behind it. The
   index already came through acquire/release on the free list, so this
   only makes the requirement explicit (a plain load on x86 and ARM64). */
static inline void *luna__ptr_load_acquire(_Atomic(void *) *p) {
  return atomic_load_explicit(p, memory_order_acquire);
}

/* Relaxed: hands out shard numbers and block slots; each value is used by
   one thread only and publishes nothing. */
static inline uint32_t luna__u32_fetch_add_relaxed(luna__atomic_u32 *p, uint32_t v) {
  return atomic_fetch_add_explicit(p, v, memory_order_relaxed);
}

/* ---- the tagged free lists of the node pool ------------------------------ */

/* Acquire: a popper reads the top node's next_free after this load; it must
   see the value the pusher stored before its release CAS. */
static inline uint64_t luna__u64_load_acquire(luna__atomic_u64 *p) {
  return atomic_load_explicit(p, memory_order_acquire);
}

/* Relaxed: a pusher (the loop thread recycling, or a producer adding a new
   block) reads the head just to link the chain it pushes; the release CAS
   below is what publishes. */
static inline uint64_t luna__u64_load_relaxed(luna__atomic_u64 *p) {
  return atomic_load_explicit(p, memory_order_relaxed);
}

/* Pop. Acquire on success: the popper then writes the node, and those writes
   must come after the loop thread's last reads of it (ordered by the
   pusher's release). Acquire on failure: the loop retries by reading the new
   top node's next_free, which must be the value published with it. */
static inline bool luna__u64_cas_acquire(luna__atomic_u64 *p, uint64_t *expected,
                                         uint64_t desired) {
  return atomic_compare_exchange_weak_explicit(
      p, expected, desired, memory_order_acquire, memory_order_acquire);
}

/* Push. Release on success: the pusher's reads of the recycled nodes and
   its stores to their next_free happen before any popper sees them.
   Relaxed on failure: the pusher retries and publishes nothing. */
static inline bool luna__u64_cas_release(luna__atomic_u64 *p, uint64_t *expected,
                                         uint64_t desired) {
  return atomic_compare_exchange_weak_explicit(
      p, expected, desired, memory_order_release, memory_order_relaxed);
}

/* Relaxed: a plain counter for statistics; it orders nothing. */
static inline void luna__u64_inc_relaxed(luna__atomic_u64 *p) {
  atomic_fetch_add_explicit(p, 1, memory_order_relaxed);
}

/* Relaxed: pool links are read and written only between an acquire and a
   release on the free-list head, which give the ordering; they are atomic
   only because a stale popper may read a link while the pusher rewrites it
   (that popper's CAS then fails on the tag). */
static inline uint32_t luna__u32_load_relaxed(luna__atomic_u32 *p) {
  return atomic_load_explicit(p, memory_order_relaxed);
}
static inline void luna__u32_store_relaxed(luna__atomic_u32 *p, uint32_t v) {
  atomic_store_explicit(p, v, memory_order_relaxed);
}

#endif
