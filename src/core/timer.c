/*
** timer.c: per-(timing, kind) min-heaps of timers (see timer.h).
*/
#include <assert.h>
#include <string.h>

#include "loop_internal.h"
#include "timer.h"

#define META_COLLECTED ((uint64_t)0x80)
#define META_HEAP(m) ((unsigned)((m)&0x7f))
#define META_SEQ(m) ((m) >> 8)

void luna__timers_init(luna__timers *tm) { memset(tm, 0, sizeof *tm); }

/* ---- the heap ------------------------------------------------------------- */

/* Orders by deadline, then creation (see luna__timer.meta). */
static bool earlier(const luna__timer *s, uint32_t x, uint32_t y) {
  return s[x].deadline < s[y].deadline ||
         (s[x].deadline == s[y].deadline && s[x].meta < s[y].meta);
}

static void place(luna__timers *tm, luna__heap *h, size_t pos, uint32_t idx) {
  h->a[pos] = idx;
  tm->slots[idx].pos = (uint32_t)pos;
}

static void sift_up(luna__timers *tm, luna__heap *h, size_t pos) {
  uint32_t idx = h->a[pos];
  while (pos > 0) {
    size_t parent = (pos - 1) / 2;
    if (!earlier(tm->slots, idx, h->a[parent]))
      break;
    place(tm, h, pos, h->a[parent]);
    pos = parent;
  }
  place(tm, h, pos, idx);
}

static void sift_down(luna__timers *tm, luna__heap *h, size_t pos) {
  uint32_t idx = h->a[pos];
  for (;;) {
    size_t child = 2 * pos + 1;
    if (child >= h->n)
      break;
    if (child + 1 < h->n && earlier(tm->slots, h->a[child + 1], h->a[child]))
      child++;
    if (!earlier(tm->slots, h->a[child], idx))
      break;
    place(tm, h, pos, h->a[child]);
    pos = child;
  }
  place(tm, h, pos, idx);
}

/* Capacity is reserved by luna__timers_add (cap >= live). */
static void heap_push(luna__timers *tm, luna__heap *h, uint32_t idx) {
  assert(h->n < h->cap);
  h->a[h->n] = idx;
  sift_up(tm, h, h->n++);
}

static void heap_remove(luna__timers *tm, luna__heap *h, size_t pos) {
  uint32_t last = h->a[--h->n];
  if (pos == h->n)
    return;
  place(tm, h, pos, last);
  sift_down(tm, h, pos);
  if (tm->slots[last].pos == pos)
    sift_up(tm, h, pos);
}

/* ---- slots ---------------------------------------------------------------- */

static void free_slot(luna__timers *tm, uint32_t idx) {
  luna__timer *t = &tm->slots[idx];
  t->fn = NULL;
  t->arg = NULL;
  t->gen++;
  t->pos = tm->free_slot;
  tm->free_slot = idx + 1;
}

/* The live timer of `id`, or NULL when stale (fired, cancelled) or bogus. */
static luna__timer *lookup(luna__timers *tm, luna_timer_id id) {
  uint32_t low = (uint32_t)id.id;
  luna__timer *t;
  if (low == 0 || low > tm->nslots)
    return NULL;
  t = &tm->slots[low - 1];
  if (t->fn == NULL || t->gen != (uint32_t)(id.id >> 32))
    return NULL;
  return t;
}

int luna__timers_add(luna__timers *tm, const luna__alloc *a, int timing,
                     luna_timer_kind kind, int64_t deadline, luna_fn fn,
                     void *arg, luna_timer_id *out) {
  unsigned hnum = (unsigned)(timing * LUNA_TIMER_KIND_COUNT + (int)kind);
  luna__heap *h = &tm->heaps[hnum];
  luna__timer *t;
  uint32_t idx;
  /* Reserve the heap room and the slot first: failure changes nothing. */
  if (h->live >= h->cap &&
      luna__grow(a, (void **)&h->a, &h->cap, sizeof *h->a, h->live + 1) != 0)
    return LUNA_ENOMEM;
  if (tm->free_slot == 0) {
    if (tm->nslots >= UINT32_MAX - 1)
      return LUNA_ENOMEM;
    if (tm->nslots == tm->slots_cap &&
        luna__grow(a, (void **)&tm->slots, &tm->slots_cap, sizeof *tm->slots,
                   tm->nslots + 1) != 0)
      return LUNA_ENOMEM;
    tm->slots[tm->nslots].gen = 0;
    idx = (uint32_t)tm->nslots++;
  } else {
    idx = tm->free_slot - 1;
    tm->free_slot = tm->slots[idx].pos;
  }
  if (deadline > LUNA_NS_MAX)
    deadline = LUNA_NS_MAX;
  else if (deadline < -LUNA_NS_MAX)
    deadline = -LUNA_NS_MAX;
  t = &tm->slots[idx];
  t->deadline = deadline;
  t->meta = (tm->seq++ << 8) | hnum;
  t->fn = fn;
  t->arg = arg;
  h->live++;
  heap_push(tm, h, idx);
  if (out != NULL)
    out->id = ((uint64_t)t->gen << 32) | (uint64_t)(idx + 1);
  return 0;
}

int luna__timers_cancel(luna__timers *tm, luna_timer_id id) {
  luna__timer *t = lookup(tm, id);
  luna__heap *h;
  uint32_t idx;
  if (t == NULL)
    return LUNA_ENOENT;
  idx = (uint32_t)(t - tm->slots);
  h = &tm->heaps[META_HEAP(t->meta)];
  h->live--;
  if (t->meta & META_COLLECTED) {
    /* In the due list of the run firing now: only mark it; the run frees
       the slot when it reaches it. */
    t->fn = NULL;
    t->arg = NULL;
    t->gen++;
    return 0;
  }
  heap_remove(tm, h, t->pos);
  free_slot(tm, idx);
  return 0;
}

bool luna__timers_has(const luna__timers *tm, int timing, luna_timer_kind kind) {
  return tm->heaps[timing * LUNA_TIMER_KIND_COUNT + (int)kind].n > 0;
}

/* Puts the rest of a due list back into the heaps (after a stop). */
static void put_back(luna__timers *tm, uint32_t head) {
  while (head != 0) {
    uint32_t idx = head - 1;
    luna__timer *t = &tm->slots[idx];
    head = t->pos;
    t->meta &= ~META_COLLECTED;
    if (t->fn == NULL)
      free_slot(tm, idx);
    else
      heap_push(tm, &tm->heaps[META_HEAP(t->meta)], idx);
  }
}

bool luna__timers_fire(luna__timers *tm, int timing,
                       const luna_ns now[LUNA_TIMER_KIND_COUNT],
                       uint64_t start_seq, luna_loop *loop) {
  uint32_t head = 0, tail = 0; /* the due list, index + 1 */
  int kind;

  /* Collect, kind by kind in the documented order (the enum's order). */
  for (kind = 0; kind < LUNA_TIMER_KIND_COUNT; kind++) {
    luna__heap *h = &tm->heaps[timing * LUNA_TIMER_KIND_COUNT + kind];
    uint32_t aside = 0; /* created during this run: not fired before the next */
    while (h->n > 0 && tm->slots[h->a[0]].deadline <= now[kind]) {
      uint32_t idx = h->a[0];
      luna__timer *t = &tm->slots[idx];
      heap_remove(tm, h, 0);
      t->meta |= META_COLLECTED;
      if (META_SEQ(t->meta) >= start_seq) {
        t->pos = aside;
        aside = idx + 1;
        continue;
      }
      t->pos = 0;
      if (tail != 0)
        tm->slots[tail - 1].pos = idx + 1;
      else
        head = idx + 1;
      tail = idx + 1;
    }
    put_back(tm, aside);
  }

  /* Call. Each slot is freed before its call, so the callback may add
     timers (even reusing the slot) and its own handle reads as stale. */
  while (head != 0) {
    uint32_t idx = head - 1;
    luna__timer *t = &tm->slots[idx];
    luna_fn fn = t->fn;
    void *arg = t->arg;
    head = t->pos;
    if (head != 0)
      LUNA__PREFETCH(tm->slots[head - 1].arg);
    t->meta &= ~META_COLLECTED;
    if (fn != NULL)
      tm->heaps[META_HEAP(t->meta)].live--;
    free_slot(tm, idx);
    if (fn == NULL)
      continue; /* cancelled after it was collected */
    fn(loop, arg);
    if (luna__loop_stopping(loop)) {
      put_back(tm, head);
      return true;
    }
  }
  return false;
}

size_t luna__timers_count(const luna__timers *tm, int timing) {
  size_t n = 0;
  int kind;
  for (kind = 0; kind < LUNA_TIMER_KIND_COUNT; kind++)
    n += tm->heaps[timing * LUNA_TIMER_KIND_COUNT + kind].live;
  return n;
}

void luna__timers_drop(luna__timers *tm) {
  int i;
  size_t k;
  for (i = 0; i < LUNA__TIMER_HEAPS; i++) {
    luna__heap *h = &tm->heaps[i];
    for (k = 0; k < h->n; k++)
      free_slot(tm, h->a[k]);
    h->n = h->live = 0;
  }
}

void luna__timers_free(luna__timers *tm, const luna__alloc *a) {
  int i;
  for (i = 0; i < LUNA__TIMER_HEAPS; i++) {
    luna__heap *h = &tm->heaps[i];
    luna__array_free(a, (void **)&h->a, &h->cap, sizeof *h->a);
    h->n = h->live = 0;
  }
  luna__array_free(a, (void **)&tm->slots, &tm->slots_cap, sizeof *tm->slots);
  tm->nslots = 0;
  tm->free_slot = 0;
}
