/*
** alloc.c: the default allocator and the array growth helper.
*/
#include <stdint.h>
#include <stdlib.h>

#include "alloc.h"
#include "lunaloop/error.h"

/* realloc/free with the lua_Alloc contract. */
static void *default_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, nsize);
}

void luna__alloc_init(luna__alloc *a, luna_alloc_fn fn, void *ud) {
  a->fn = fn ? fn : default_alloc;
  a->ud = fn ? ud : NULL;
}

void *luna__malloc(const luna__alloc *a, size_t size) {
  return a->fn(a->ud, NULL, 0, size);
}

void luna__free(const luna__alloc *a, void *p, size_t size) {
  if (p != NULL)
    a->fn(a->ud, p, size, 0);
}

int luna__grow(const luna__alloc *a, void **pp, size_t *cap, size_t elem,
               size_t need) {
  size_t ncap;
  void *np;
  if (need <= *cap)
    return 0;
  ncap = *cap ? *cap : 8;
  while (ncap < need) {
    if (ncap > SIZE_MAX / 2)
      return LUNA_ENOMEM;
    ncap *= 2;
  }
  if (ncap > SIZE_MAX / elem)
    return LUNA_ENOMEM;
  np = a->fn(a->ud, *pp, *cap * elem, ncap * elem);
  if (np == NULL)
    return LUNA_ENOMEM;
  *pp = np;
  *cap = ncap;
  return 0;
}

void luna__array_free(const luna__alloc *a, void **pp, size_t *cap, size_t elem) {
  luna__free(a, *pp, *cap * elem);
  *pp = NULL;
  *cap = 0;
}
