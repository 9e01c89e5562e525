/*
** runner.c: repeating items, priorities and budgets (see runner.h).
*/
#include <string.h>

#include "clock.h"
#include "loop_internal.h"
#include "runner.h"

void luna__runner_init(luna__runner *r) {
  memset(r, 0, sizeof *r);
  r->active = -1;
  r->cost_fn = luna__monotonic_ns;
  r->cost_ud = NULL;
}

void luna__runner_set_cost_source(luna__runner *r, luna_time_fn fn, void *ud) {
  r->cost_fn = fn ? fn : luna__monotonic_ns;
  r->cost_ud = fn ? ud : NULL;
}

void luna__runner_set_batch(luna__runner *r, luna_step_fn step, luna__batch_fn fn) {
  r->batch_step = fn != NULL ? step : NULL;
  r->batch_fn = step != NULL ? fn : NULL;
}

LUNA__SLOT_LAYOUT(luna__item_slot);

/* The live slot of `id`, or NULL when the handle is stale or bogus. */
static luna__item_slot *lookup(luna__runner *r, luna_item_id id) {
  uint32_t slot;
  if (!luna__slab_find(&r->slab, r->slots, sizeof *r->slots, id.id, &slot) ||
      !r->slots[slot].live)
    return NULL;
  return &r->slots[slot];
}

/* Frees a slot: a new generation makes old handles stale. */
static void release_slot(luna__runner *r, uint32_t slot) {
  luna__item_slot *s = &r->slots[slot];
  s->live = 0;
  s->flags = 0;
  luna__slab_give(&r->slab, r->slots, sizeof *r->slots, slot);
}

/* ---- the deferred list -------------------------------------------------- */

/* Appends `slot` (live, in `it`, not on the list) to the deferred list. */
static void defer_push(luna__runner *r, luna__items *it, uint32_t slot) {
  luna__item_slot *s = &r->slots[slot];
  s->flags |= LUNA__SLOT_DEFERRED;
  s->prev = it->defer_tail;
  s->next = 0;
  if (it->defer_tail != 0)
    r->slots[it->defer_tail - 1].next = slot + 1;
  else
    it->defer_head = slot + 1;
  it->defer_tail = slot + 1;
  it->ndeferred++;
}

/* Takes `slot` off the deferred list of `it`, wherever it is. */
static void defer_unlink(luna__runner *r, luna__items *it, uint32_t slot) {
  luna__item_slot *s = &r->slots[slot];
  if (s->prev != 0)
    r->slots[s->prev - 1].next = s->next;
  else
    it->defer_head = s->next;
  if (s->next != 0)
    r->slots[s->next - 1].prev = s->prev;
  else
    it->defer_tail = s->prev;
  s->flags &= (uint8_t)~LUNA__SLOT_DEFERRED;
  it->ndeferred--;
}

/* Forgets the deferred list (the budget was removed). */
static void defer_clear(luna__runner *r, luna__items *it) {
  while (it->defer_head != 0)
    defer_unlink(r, it, it->defer_head - 1);
}

/* ---- adding and removing -------------------------------------------------- */

/* The index after the last item of priority <= `priority` in a[0..n): where
   a new item goes so that ties keep registration order. Removed items keep
   their priority, so the array is sorted including them. */
static size_t upper_bound(const luna__item *a, size_t n, int priority) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (a[mid].priority <= priority)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Inserts `item` at a[pos] (room reserved), moving the tail up one and
   telling the live moved items' slots. O(1) when it goes last, the common
   case of equal priorities. */
static void insert_at(luna__runner *r, luna__item *a, size_t *n, size_t pos,
                      const luna__item *item) {
  size_t k;
  memmove(a + pos + 1, a + pos, (*n - pos) * sizeof *a);
  a[pos] = *item;
  (*n)++;
  for (k = pos + 1; k < *n; k++)
    if (a[k].step != NULL) /* a removed item's slot may belong to another */
      r->slots[a[k].slot].pos = (uint32_t)k;
  r->slots[item->slot].pos = (uint32_t)pos;
}

int luna__runner_add(luna__runner *r, const luna__alloc *a, int timing,
                     luna_step_fn step, void *arg, int priority, bool essential,
                     luna_item_id *out) {
  luna__items *it = &r->items[timing];
  bool during = timing == r->active;
  luna__item item;
  luna__item_slot *s;
  uint32_t slot;
  /* Reserve every array first, so failure leaves nothing half done. During
     the run the item goes to `pending`, and the main array reserves room for
     the merge at the end of the run, which must not fail. */
  if (during && it->npending == it->pending_cap &&
      luna__grow(a, (void **)&it->pending, &it->pending_cap, sizeof *it->pending,
                 it->npending + 1) != 0)
    return LUNA_ENOMEM;
  if (luna__grow(a, (void **)&it->a, &it->cap, sizeof *it->a,
                 it->n + it->npending + 1) != 0)
    return LUNA_ENOMEM;
  if (luna__slab_take(&r->slab, a, (void **)&r->slots, sizeof *r->slots, &slot) != 0)
    return LUNA_ENOMEM;
  s = &r->slots[slot];
  s->live = 1;
  s->timing = (uint8_t)timing;
  s->flags = essential ? LUNA__SLOT_ESSENTIAL : 0;
  s->prev = s->next = 0;
  item.step = step;
  item.arg = arg;
  item.slot = slot;
  item.priority = priority;
  if (during) {
    s->flags |= LUNA__SLOT_PENDING;
    insert_at(r, it->pending, &it->npending,
              upper_bound(it->pending, it->npending, priority), &item);
  } else {
    insert_at(r, it->a, &it->n, upper_bound(it->a, it->n, priority), &item);
  }
  if (out != NULL)
    out->id = luna__slab_handle(r->slots, sizeof *r->slots, slot);
  return 0;
}

/* Marks the item in `slot` removed and frees the slot. */
static void remove_slot(luna__runner *r, uint32_t slot) {
  luna__item_slot *s = &r->slots[slot];
  luna__items *it = &r->items[s->timing];
  if (s->flags & LUNA__SLOT_PENDING) {
    it->pending[s->pos].step = NULL;
    it->pending_dead++;
  } else {
    it->a[s->pos].step = NULL;
    it->dead++;
  }
  if (s->flags & LUNA__SLOT_DEFERRED)
    defer_unlink(r, it, slot);
  release_slot(r, slot);
}

static void compact(luna__runner *r, int timing) {
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
    compact(r, timing);
  return 0;
}

/* ---- the run ---------------------------------------------------------------- */

/* Calls the item at a[i] (live); removes it when its step returns false,
   unless the step already removed it. The step may add items, so the array
   is read again afterwards. */
static inline void call_at(luna__runner *r, luna__items *it, size_t i, luna_loop *loop) {
  luna__item item = it->a[i];
  uint32_t gen = r->slots[item.slot].gen;
  bool keep = item.step(loop, item.arg);
  if (!keep && it->a[i].step != NULL && r->slots[item.slot].gen == gen)
    remove_slot(r, item.slot);
}

/* True once the run that started at `start` on the cost clock has used its
   budget. Called only before a non-essential item other than the first. */
static inline bool spent(luna__runner *r, luna_ns start, luna_ns budget) {
  return r->cost_fn(r->cost_ud) - start >= budget;
}

/* A run with a budget: the deferred list, then the array walk (runner.h). */
static bool run_budgeted(luna__runner *r, int timing, luna_ns budget, luna_loop *loop) {
  luna__items *it = &r->items[timing];
  size_t i = 0, n = it->n;
  size_t ran = 0; /* non-essential items called in this run */
  bool over = false, stopped = false;
  luna_ns start;
  if (n == 0) /* nothing to measure (deferred items are in the array) */
    return false;
  start = r->cost_fn(r->cost_ud);

  /* 1. What the previous run deferred, oldest first. Each is taken off the
     list before its call and marked DONE so the walk below skips it. */
  while (it->defer_head != 0) {
    uint32_t slot = it->defer_head - 1;
    if (ran > 0 && spent(r, start, budget)) {
      over = true;
      break;
    }
    defer_unlink(r, it, slot);
    r->slots[slot].flags |= LUNA__SLOT_DONE;
    ran++;
    call_at(r, it, r->slots[slot].pos, loop);
    if (luna__loop_stopping(loop)) {
      stopped = true;
      break;
    }
  }

  /* 2. The array in order: essential items always; the others while the
     budget lasts, then onto the deferred list in order. */
  for (; !stopped && i < n; i++) {
    luna__item item = it->a[i];
    luna__item_slot *s;
    if (item.step == NULL)
      continue;
    s = &r->slots[item.slot];
    if (s->flags & LUNA__SLOT_DONE) {
      s->flags &= (uint8_t)~LUNA__SLOT_DONE;
      continue;
    }
    if (s->flags & LUNA__SLOT_DEFERRED) /* still waiting from step 1 */
      continue;
    if (!(s->flags & LUNA__SLOT_ESSENTIAL)) {
      if (!over && ran > 0 && spent(r, start, budget))
        over = true;
      if (over) {
        defer_push(r, it, item.slot);
        continue;
      }
      ran++;
    }
    call_at(r, it, i, loop);
    if (luna__loop_stopping(loop))
      stopped = true;
  }

  /* Stopped: the walk did not reach the rest, whose DONE marks must go. */
  for (; stopped && i < n; i++)
    if (it->a[i].step != NULL)
      r->slots[it->a[i].slot].flags &= (uint8_t)~LUNA__SLOT_DONE;

  if (over) {
    r->budget_exceeded[timing]++;
    r->deferred[timing] += it->ndeferred;
  }
  return stopped;
}

bool luna__runner_run(luna__runner *r, int timing, luna_loop *loop) {
  luna__items *it = &r->items[timing];
  size_t i, n = it->n; /* fixed during the run: additions go to pending */
  if (r->budget[timing] > 0)
    return run_budgeted(r, timing, r->budget[timing], loop);
  /* The hot path: no clock, no flags. A list left by a budget since removed
     is forgotten: every item runs now. */
  if (it->defer_head != 0)
    defer_clear(r, it);
  for (i = 0; i < n; i++) {
    luna_step_fn step = it->a[i].step;
    if (step == NULL)
      continue;
    if (step == r->batch_step) {
      luna__batch bt;
      bt.a = &it->a;
      bt.i = i;
      bt.n = n;
      bt.step = step;
      bt.stop = &loop->v.stop;
      r->batch_fn(loop, &bt);
      if (bt.i > i) {
        i = bt.i - 1; /* the loop's i++ makes it the first one not taken */
        if (luna__loop_stopping(loop))
          return true;
        continue;
      }
    }
    call_at(r, it, i, loop);
    if (luna__loop_stopping(loop))
      return true;
  }
  return false;
}

void luna__runner_finish(luna__runner *r, int timing) {
  luna__items *it = &r->items[timing];
  size_t i, j, k, m = 0;
  compact(r, timing);
  if (it->npending == 0)
    return;
  for (i = 0; i < it->npending; i++)
    if (it->pending[i].step != NULL)
      it->pending[m++] = it->pending[i];
  it->npending = it->pending_dead = 0;
  /* Merge from the back into a[0 .. n + m), room reserved by add. On equal
     priority the item already in the array goes first (registered earlier).
     When the new items all go last (the common case) only they move. */
  i = it->n;
  j = m;
  k = it->n + m;
  while (j > 0) {
    luna__item_slot *s;
    if (i > 0 && it->a[i - 1].priority > it->pending[j - 1].priority)
      it->a[--k] = it->a[--i];
    else
      it->a[--k] = it->pending[--j];
    s = &r->slots[it->a[k].slot];
    s->pos = (uint32_t)k;
    s->flags &= (uint8_t)~LUNA__SLOT_PENDING;
  }
  it->n += m;
}

size_t luna__runner_count(const luna__runner *r, int timing) {
  const luna__items *it = &r->items[timing];
  return it->n - it->dead + it->npending - it->pending_dead;
}

void luna__runner_drop(luna__runner *r) {
  int t;
  size_t i;
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    luna__items *it = &r->items[t];
    for (i = 0; i < it->n; i++)
      if (it->a[i].step != NULL)
        release_slot(r, it->a[i].slot);
    for (i = 0; i < it->npending; i++)
      if (it->pending[i].step != NULL)
        release_slot(r, it->pending[i].slot);
    it->n = it->dead = it->npending = it->pending_dead = 0;
    it->defer_head = it->defer_tail = 0;
    it->ndeferred = 0;
  }
}

void luna__runner_free(luna__runner *r, const luna__alloc *a) {
  int t;
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    luna__items *it = &r->items[t];
    luna__array_free(a, (void **)&it->a, &it->cap, sizeof *it->a);
    luna__array_free(a, (void **)&it->pending, &it->pending_cap, sizeof *it->pending);
    it->n = it->dead = it->npending = it->pending_dead = 0;
    it->defer_head = it->defer_tail = 0;
    it->ndeferred = 0;
  }
  luna__slab_free(&r->slab, a, (void **)&r->slots, sizeof *r->slots);
}
