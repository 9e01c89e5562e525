/*
** slots.h: the generation-checked slot allocator behind the handles of
** timers (timer.c) and repeating items (runner.c), sokol's pool in small.
**
** A container keeps its own typed array of slots and a luna__slab beside
** it; the slab hands out slot indices, links the free slots into a list,
** and checks handles. Every slot type starts with the same two fields, in
** this order:
**
**     uint32_t pos;  live: the container's own use; free: next free + 1
**     uint32_t gen;  bumped each time the slot is freed
**
** which LUNA__SLOT_LAYOUT checks at compile time. A handle is
** (gen << 32) | (index + 1), so 0 is never a handle, and a handle whose
** slot was freed since (a new generation) or never handed out is refused.
** Whether a slot with the right generation is live is the container's
** business (a timer collected by a run and cancelled keeps its slot until
** the run reaches it), so luna__slab_find checks only range and generation.
**
** Everything is static inline: it runs on every timer and item added,
** fired, cancelled and removed, and each container's calls fold the slot
** size in as a constant. Includes only alloc.h; loop thread only.
*/
#ifndef LUNA_SLOTS_H
#define LUNA_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "lunaloop/error.h"

typedef struct luna__slab {
  size_t n, cap; /* slots handed out at least once; room in the array */
  uint32_t free; /* first free slot + 1; 0: none */
} luna__slab;

/* Checks that slot type T starts with `uint32_t pos; uint32_t gen;`. */
#define LUNA__SLOT_LAYOUT(T)                                                   \
  _Static_assert(offsetof(T, pos) == 0 && offsetof(T, gen) == sizeof(uint32_t) && \
                     sizeof(((T *)0)->pos) == sizeof(uint32_t) &&               \
                     sizeof(((T *)0)->gen) == sizeof(uint32_t),                 \
                 #T " must start with uint32_t pos, gen")

/* The pos and gen fields of slot i of an array of `size`-byte slots, read
   and written as the uint32_t objects they are. */
static inline uint32_t *luna__slot_pos(void *slots, size_t size, uint32_t i) {
  return (uint32_t *)(void *)((char *)slots + (size_t)i * size);
}
static inline uint32_t *luna__slot_gen(void *slots, size_t size, uint32_t i) {
  return luna__slot_pos(slots, size, i) + 1;
}

/* Takes a free slot of the array *slots (growing it, and s->cap, when every
   slot is in use) and stores its index in *out; the caller fills the slot
   (pos included). 0, or LUNA_ENOMEM (nothing changed): the allocator
   failed, or 2^32 - 2 slots are in use. */
static inline int luna__slab_take(luna__slab *s, const luna__alloc *a, void **slots,
                                  size_t size, uint32_t *out) {
  uint32_t i;
  if (s->free != 0) {
    i = s->free - 1;
    s->free = *luna__slot_pos(*slots, size, i);
  } else {
    if (s->n >= UINT32_MAX - 1)
      return LUNA_ENOMEM;
    if (s->n == s->cap && luna__grow(a, slots, &s->cap, size, s->n + 1) != 0)
      return LUNA_ENOMEM;
    i = (uint32_t)s->n++;
    *luna__slot_gen(*slots, size, i) = 0;
  }
  *out = i;
  return 0;
}

/* Bumps slot i's generation, so every handle to it goes stale, without
   putting it on the free list (a slot the container still holds). */
static inline void luna__slab_retire(void *slots, size_t size, uint32_t i) {
  (*luna__slot_gen(slots, size, i))++;
}

/* Puts slot i, already retired, on the free list. */
static inline void luna__slab_put(luna__slab *s, void *slots, size_t size, uint32_t i) {
  *luna__slot_pos(slots, size, i) = s->free;
  s->free = i + 1;
}

/* Frees slot i: retired and on the free list. */
static inline void luna__slab_give(luna__slab *s, void *slots, size_t size, uint32_t i) {
  luna__slab_retire(slots, size, i);
  luna__slab_put(s, slots, size, i);
}

/* The handle of slot i at its current generation. */
static inline uint64_t luna__slab_handle(void *slots, size_t size, uint32_t i) {
  return ((uint64_t)*luna__slot_gen(slots, size, i) << 32) | (uint64_t)(i + 1);
}

/* The index of the slot `handle` names, in *out, when it is in range and of
   the slot's current generation; false otherwise. */
static inline bool luna__slab_find(const luna__slab *s, void *slots, size_t size,
                                   uint64_t handle, uint32_t *out) {
  uint32_t low = (uint32_t)handle;
  if (low == 0 || low > s->n ||
      *luna__slot_gen(slots, size, low - 1) != (uint32_t)(handle >> 32))
    return false;
  *out = low - 1;
  return true;
}

/* Frees the array (luna_loop_free). */
static inline void luna__slab_free(luna__slab *s, const luna__alloc *a, void **slots,
                                   size_t size) {
  luna__array_free(a, slots, &s->cap, size);
  s->n = 0;
  s->free = 0;
}

#endif
