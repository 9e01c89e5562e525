/*
** runner.c: repeating items (see runner.h).
*/
#include <string.h>

#include "loop_internal.h"
#include "runner.h"

void luna__runner_init(luna__runner *r) {
  memset(r, 0, sizeof *r);
  r->active = -1;
}

static luna_item_id make_id(uint32_t slot, uint32_t gen) {
  luna_item_id id;
  id.id = ((uint64_t)gen << 32) | (uint64_t)(slot + 1); /* never 0 */
  return id;
}

/* The live slot of `id`, or NULL when the handle is stale or bogus. */
static luna__item_slot *lookup(luna__runner *r, luna_item_id id) {
  uint32_t low = (uint32_t)id.id;
  luna__item_slot *s;
  if (low == 0 || low > r->nslots)
    return NULL;
  s = &r->slots[low - 1];
  if (!s->live || s->gen != (uint32_t)(id.id >> 32))
    return NULL;
  return s;
}

/* Frees a slot: a new generation makes old handles stale. */
static void release_slot(luna__runner *r, uint32_t slot) {
  luna__item_slot *s = &r->slots[slot];
  s->live = 0;
  s->gen++;
  s->pos = r->free_slot;
  r->free_slot = slot + 1;
}

int luna__runner_add(luna__runner *r, const luna__alloc *a, int timing,
                     luna_step_fn step, void *arg, luna_item_id *out) {
  luna__items *it = &r->items[timing];
  luna__item *item;
  luna__item_slot *s;
  uint32_t slot;
  /* Reserve both arrays first, so failure leaves nothing half done. */
  if (it->n == it->cap &&
      luna__grow(a, (void **)&it->a, &it->cap, sizeof *it->a, it->n + 1) != 0)
    return LUNA_ENOMEM;
  if (r->free_slot == 0) {
    if (r->nslots >= UINT32_MAX - 1)
      return LUNA_ENOMEM;
    if (r->nslots == r->slots_cap &&
        luna__grow(a, (void **)&r->slots, &r->slots_cap, sizeof *r->slots,
                   r->nslots + 1) != 0)
      return LUNA_ENOMEM;
    r->slots[r->nslots].gen = 0;
    slot = (uint32_t)r->nslots++;
  } else {
    slot = r->free_slot - 1;
    r->free_slot = r->slots[slot].pos;
  }
  s = &r->slots[slot];
  s->live = 1;
  s->timing = (uint8_t)timing;
  s->pos = (uint32_t)it->n;
  item = &it->a[it->n++];
  item->step = step;
  item->arg = arg;
  item->slot = slot;
  if (out != NULL)
    *out = make_id(slot, s->gen);
  return 0;
}

/* Marks the item in `slot` removed and frees the slot. */
static void remove_slot(luna__runner *r, uint32_t slot) {
  luna__item_slot *s = &r->slots[slot];
  luna__items *it = &r->items[s->timing];
  it->a[s->pos].step = NULL;
  it->dead++;
  release_slot(r, slot);
}

int luna__runner_remove(luna__runner *r, luna_item_id id) {
  luna__item_slot *s = lookup(r, id);
  if (s == NULL)
    return LUNA_ENOENT;
  luna__items *it = &r->items[s->timing];
  int timing = s->timing;
  remove_slot(r, (uint32_t)(s - r->slots));
  /* Removed outside its timing's run: compact once half the array is dead,
     so a timing that never runs cannot pile up dead items (amortized O(1)). */
  if (timing != r->active && it->dead * 2 > it->n)
    luna__runner_compact(r, timing);
  return 0;
}

bool luna__runner_run(luna__runner *r, int timing, size_t count, luna_loop *loop) {
  luna__items *it = &r->items[timing];
  size_t i;
  /* By index, re-reading it->a: a step may add items (the array may move). */
  for (i = 0; i < count; i++) {
    luna__item item = it->a[i];
    uint32_t gen;
    bool keep;
    if (item.step == NULL)
      continue;
    gen = r->slots[item.slot].gen;
    keep = item.step(loop, item.arg);
    /* It may have removed itself (then the slot's generation moved on). */
    if (!keep && it->a[i].step != NULL && r->slots[item.slot].gen == gen)
      remove_slot(r, item.slot);
    if (luna__loop_stopping(loop))
      return true;
  }
  return false;
}

void luna__runner_compact(luna__runner *r, int timing) {
  luna__items *it = &r->items[timing];
  size_t i, j = 0;
  if (it->dead == 0)
    return;
  for (i = 0; i < it->n; i++) {
    if (it->a[i].step == NULL)
      continue;
    if (i != j) {
      it->a[j] = it->a[i];
      r->slots[it->a[j].slot].pos = (uint32_t)j;
    }
    j++;
  }
  it->n = j;
  it->dead = 0;
}

size_t luna__runner_count(const luna__runner *r, int timing) {
  return r->items[timing].n - r->items[timing].dead;
}

void luna__runner_drop(luna__runner *r) {
  int t;
  size_t i;
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    luna__items *it = &r->items[t];
    for (i = 0; i < it->n; i++)
      if (it->a[i].step != NULL)
        release_slot(r, it->a[i].slot);
    it->n = it->dead = 0;
  }
}

void luna__runner_free(luna__runner *r, const luna__alloc *a) {
  int t;
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    luna__items *it = &r->items[t];
    luna__array_free(a, (void **)&it->a, &it->cap, sizeof *it->a);
    it->n = it->dead = 0;
  }
  luna__array_free(a, (void **)&r->slots, &r->slots_cap, sizeof *r->slots);
  r->nslots = 0;
  r->free_slot = 0;
}
