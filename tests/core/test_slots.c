/*
** test_slots.c: the generation-checked slot allocator (src/core/slots.h)
** that timers and repeating items share: indices are reused last freed
** first, a freed slot's handles go stale, a retired slot refuses its old
** handles before it is back on the free list, handles are never 0, and a
** failed growth changes nothing.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "counting_alloc.h"
#include "slots.h"

typedef struct slot {
  uint32_t pos;
  uint32_t gen;
  int payload;
} slot;

LUNA__SLOT_LAYOUT(slot);

typedef struct pool {
  counting_alloc ca;
  luna__alloc a;
  slot *slots;
  luna__slab slab;
} pool;

static void pool_init(pool *p) {
  luna_config c;
  memset(p, 0, sizeof *p);
  counting_init(&p->ca);
  c = counting_config(&p->ca);
  luna__alloc_init(&p->a, c.alloc, c.alloc_ud);
}

static uint32_t take(pool *p) {
  uint32_t i = UINT32_MAX;
  assert_int_equal(luna__slab_take(&p->slab, &p->a, (void **)&p->slots, sizeof *p->slots, &i), 0);
  return i;
}

static uint64_t handle(pool *p, uint32_t i) {
  return luna__slab_handle(p->slots, sizeof *p->slots, i);
}

static bool find(pool *p, uint64_t h, uint32_t *i) {
  return luna__slab_find(&p->slab, p->slots, sizeof *p->slots, h, i);
}

static void freed_slots_are_reused_last_freed_first(void **state) {
  pool p;
  (void)state;
  pool_init(&p);
  assert_int_equal(take(&p), 0);
  assert_int_equal(take(&p), 1);
  assert_int_equal(take(&p), 2);
  luna__slab_give(&p.slab, p.slots, sizeof *p.slots, 0);
  luna__slab_give(&p.slab, p.slots, sizeof *p.slots, 2);
  assert_int_equal(take(&p), 2);
  assert_int_equal(take(&p), 0);
  assert_int_equal(take(&p), 3);
  assert_int_equal(p.slab.n, 4);
  luna__slab_free(&p.slab, &p.a, (void **)&p.slots, sizeof *p.slots);
  ASSERT_NO_LEAKS(&p.ca);
}

static void a_freed_slot_refuses_its_old_handles(void **state) {
  pool p;
  uint32_t i, j;
  uint64_t h0, h1;
  (void)state;
  pool_init(&p);
  i = take(&p);
  h0 = handle(&p, i);
  assert_true(h0 != 0);
  assert_true(find(&p, h0, &j));
  assert_int_equal(j, i);
  luna__slab_give(&p.slab, p.slots, sizeof *p.slots, i);
  assert_false(find(&p, h0, &j));
  assert_int_equal(take(&p), i); /* the same index, a new generation */
  h1 = handle(&p, i);
  assert_true(h1 != h0);
  assert_false(find(&p, h0, &j));
  assert_true(find(&p, h1, &j));
  /* Retired but not yet freed (a collected timer that was cancelled). */
  luna__slab_retire(p.slots, sizeof *p.slots, i);
  assert_false(find(&p, h1, &j));
  /* Handles that were never handed out. */
  assert_false(find(&p, 0, &j));
  assert_false(find(&p, (uint64_t)5, &j));
  assert_false(find(&p, ((uint64_t)1 << 32) | 1, &j));
  luna__slab_free(&p.slab, &p.a, (void **)&p.slots, sizeof *p.slots);
  ASSERT_NO_LEAKS(&p.ca);
}

static void a_failed_growth_changes_nothing(void **state) {
  pool p;
  uint32_t i = 77;
  size_t k;
  (void)state;
  pool_init(&p);
  for (k = 0; k < 8; k++)
    take(&p); /* the first growth makes room for 8 */
  atomic_store(&p.ca.fail_after, 0);
  assert_int_equal(luna__slab_take(&p.slab, &p.a, (void **)&p.slots, sizeof *p.slots, &i),
                   LUNA_ENOMEM);
  assert_int_equal(i, 77);
  assert_int_equal(p.slab.n, 8);
  atomic_store(&p.ca.fail_after, -1);
  assert_int_equal(take(&p), 8);
  luna__slab_free(&p.slab, &p.a, (void **)&p.slots, sizeof *p.slots);
  ASSERT_NO_LEAKS(&p.ca);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(freed_slots_are_reused_last_freed_first),
      cmocka_unit_test(a_freed_slot_refuses_its_old_handles),
      cmocka_unit_test(a_failed_growth_changes_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
