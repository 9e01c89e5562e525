/*
** alloc.h: the allocator plumbing. The host may give the loop an allocator
** with the lua_Alloc contract (luna_config.alloc); NULL means realloc/free.
** Every allocation of the core goes through these few functions.
**
** Threads: the loop thread, except that luna_post calls luna__malloc and
** luna__free is not called by producers: a host allocator must be thread
** safe if other threads post while the inbox node pool is exhausted.
*/
#ifndef LUNA_ALLOC_H
#define LUNA_ALLOC_H

#include <stddef.h>

#include "lunaloop/loop.h"

typedef struct luna__alloc {
  luna_alloc_fn fn; /* never NULL after luna__alloc_init */
  void *ud;
} luna__alloc;

/* Fills *a from the config's fields (fn NULL: the C library). */
void luna__alloc_init(luna__alloc *a, luna_alloc_fn fn, void *ud);

void *luna__malloc(const luna__alloc *a, size_t size);
void luna__free(const luna__alloc *a, void *p, size_t size);

/* Grows the array *pp of *cap elements of `elem` bytes so that it holds at
   least `need` elements (doubling, at least 8). 0 or LUNA_ENOMEM (then *pp
   and *cap are unchanged). */
int luna__grow(const luna__alloc *a, void **pp, size_t *cap, size_t elem,
               size_t need);

/* Frees an array allocated by luna__grow and sets it to empty. */
void luna__array_free(const luna__alloc *a, void **pp, size_t *cap, size_t elem);

#endif
