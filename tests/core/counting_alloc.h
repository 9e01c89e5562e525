/*
** counting_alloc.h: a counting allocator for the core tests, passed to the
** loop through luna_config. It checks the lua_Alloc contract (osize is the
** size of the block) by keeping live bytes, can be told to fail, and is safe
** to call from producer threads (luna_post allocates when its pool is dry).
**
** Every test ends with ASSERT_NO_LEAKS after luna_loop_free.
*/
#ifndef COUNTING_ALLOC_H
#define COUNTING_ALLOC_H

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "lunaloop.h"

typedef struct counting_alloc {
  atomic_long blocks;     /* live blocks */
  atomic_long bytes;      /* live bytes, by the sizes the caller reports */
  atomic_long allocs;     /* successful (re)allocations that grew or created */
  atomic_long fail_after; /* fail once this many more succeed; -1: never */
} counting_alloc;

static void *counting_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
  counting_alloc *ca = ud;
  void *np;
  if (nsize == 0) {
    if (ptr != NULL) {
      atomic_fetch_sub(&ca->blocks, 1);
      atomic_fetch_sub(&ca->bytes, (long)osize);
      free(ptr);
    }
    return NULL;
  }
  if (atomic_load(&ca->fail_after) >= 0 && atomic_fetch_sub(&ca->fail_after, 1) <= 0) {
    atomic_store(&ca->fail_after, 0);
    return NULL;
  }
  np = realloc(ptr, nsize);
  if (np == NULL)
    return NULL;
  if (ptr == NULL)
    atomic_fetch_add(&ca->blocks, 1);
  atomic_fetch_add(&ca->bytes, (long)nsize - (ptr ? (long)osize : 0));
  atomic_fetch_add(&ca->allocs, 1);
  return np;
}

static inline void counting_init(counting_alloc *ca) {
  atomic_init(&ca->blocks, 0);
  atomic_init(&ca->bytes, 0);
  atomic_init(&ca->allocs, 0);
  atomic_init(&ca->fail_after, -1);
}

/* A zeroed config (all defaults) that allocates through `ca`. */
static inline luna_config counting_config(counting_alloc *ca) {
  luna_config c;
  memset(&c, 0, sizeof c);
  c.alloc = counting_alloc_fn;
  c.alloc_ud = ca;
  return c;
}

/* The next `n` allocations succeed, the ones after fail. */
static inline void counting_fail_after(counting_alloc *ca, long n) {
  atomic_store(&ca->fail_after, n);
}

#define ASSERT_NO_LEAKS(ca)                                                    \
  do {                                                                         \
    assert_int_equal(atomic_load(&(ca)->blocks), 0);                           \
    assert_int_equal(atomic_load(&(ca)->bytes), 0);                            \
  } while (0)

#endif
