/*
** timer.c: per-(timing, kind) 4-ary min-heaps of timers (see timer.h).
*/
#include <assert.h>
#include <string.h>

#include "loop_internal.h"
#include "timer.h"

#define META_HEAP(m) ((unsigned)((m)&0x7f))
#define META_SEQ(m) ((m) >> 8)
/* Set in meta while a run holds the timer among its heap's due entries. */
#define META_DUE ((uint64_t)0x80)

/* A heap is rebuilt without its cancelled entries once they are more than
   half of it and at least this many (fewer cost nothing worth a pass). */
#define COMPACT_MIN 64

/* Children per node. Four halve the depth of a binary heap, so the lines a
   sift touches and the slot writes it makes, for a few more comparisons
   (three a level to find the earliest of four, against two for the two
   binary levels it replaces); the four children of a node are one 64-byte
   line (see heap_grow). Against a binary heap of the same entries that is
   a few percent fewer instructions in all for the same wall time. */
#define ARITY 4

/* While every sequence handed out is below 2^32, the entries' 32-bit seq
   is the whole sequence and ties compare it; past that they read the slots. */
#define SEQ_EXACT(tm) ((tm)->seq <= ((uint64_t)1 << 32))

typedef luna__heap_entry entry;

void luna__timers_init(luna__timers *tm) { memset(tm, 0, sizeof *tm); }

static void free_slot(luna__timers *tm, uint32_t idx);

/* ---- the heap ------------------------------------------------------------- */

/* Orders by deadline, then creation (see luna__timer.meta); `exact` is
   SEQ_EXACT, read once per sift. Deadlines are rarely equal, so ties cost
   a well predicted branch. (A branch-free version runs more instructions
   and was no faster.) */
static inline bool earlier(const luna__timer *slots, bool exact, const entry *x,
                           const entry *y) {
  if (x->deadline != y->deadline)
    return x->deadline < y->deadline;
  if (exact)
    return x->seq < y->seq;
  return slots[x->slot].meta < slots[y->slot].meta;
}

/* Puts e at the hole a[pos] or, moving parents down, above it. */
static inline void climb(const luna__timer *slots, bool exact, entry *a, size_t pos, entry e) {
  while (pos > 0) {
    size_t parent = (pos - 1) / ARITY;
    if (!earlier(slots, exact, &e, &a[parent]))
      break;
    a[pos] = a[parent];
    pos = parent;
  }
  a[pos] = e;
}

static void sift_up(luna__timers *tm, luna__heap *h, size_t pos) {
  climb(tm->slots, SEQ_EXACT(tm), h->a, pos, h->a[pos]);
}

/* The earliest of the four children at p: two independent comparisons,
   then one between their winners. */
static inline entry *min_children(const luna__timer *slots, bool exact, entry *p) {
  entry *b01 = p + earlier(slots, exact, p + 1, p);
  entry *b23 = p + 2 + earlier(slots, exact, p + 3, p + 2);
  return earlier(slots, exact, b23, b01) ? b23 : b01;
}

/* Moves the hole at a[pos] down to a leaf, filling it at each level with
   the earliest child, and returns the leaf. A level's comparisons wait for
   its four children, so it first asks for the next level: the children of
   all four (sixteen entries, four lines), one of which it will read. */
static inline size_t hole_to_leaf(const luna__timer *slots, bool exact, entry *a, size_t n,
                                  size_t pos) {
  size_t c;
  while ((c = ARITY * pos + 1) + ARITY <= n) {
    size_t g = ARITY * c + 1;
    entry *best;
    if (g + ARITY * ARITY <= n) {
      LUNA__PREFETCH(a + g);
      LUNA__PREFETCH(a + g + ARITY);
      LUNA__PREFETCH(a + g + 2 * ARITY);
      LUNA__PREFETCH(a + g + 3 * ARITY);
    }
    best = min_children(slots, exact, a + c);
    a[pos] = *best;
    pos = (size_t)(best - a);
  }
  if (c < n) { /* the one node with fewer children; theirs are past n */
    size_t best = c;
    for (c++; c < n; c++)
      if (earlier(slots, exact, &a[c], &a[best]))
        best = c;
    a[pos] = a[best];
    pos = best;
  }
  return pos;
}

/* Restores the heap after a[pos] was replaced by the last entry. That one
   almost always belongs near the bottom, so the hole it leaves walks down
   to a leaf without comparing against it, and it then climbs from there,
   usually not at all (Floyd's variant of heapsort: ARITY - 1 comparisons a
   level instead of ARITY). Only the root is replaced (pop_root): it may
   climb back past pos, which is only sound where the part above pos is a
   heap already. */
static void sift_down(luna__timers *tm, luna__heap *h, size_t pos) {
  luna__timer *slots = tm->slots;
  entry *a = h->a, e = a[pos];
  if (SEQ_EXACT(tm)) {
    climb(slots, true, a, hole_to_leaf(slots, true, a, h->n, pos), e);
  } else {
    climb(slots, false, a, hole_to_leaf(slots, false, a, h->n, pos), e);
  }
}

/* Removes a[0] (h->n > 0) and returns it. */
static entry pop_root(luna__timers *tm, luna__heap *h) {
  entry top = h->a[0];
  size_t n = --h->n;
  if (n > 0) {
    h->a[0] = h->a[n];
    sift_down(tm, h, 0);
  }
  return top;
}

/* Room is reserved by luna__timers_add (n + due <= cap). */
static void heap_push(luna__timers *tm, luna__heap *h, entry e) {
  assert(h->n + h->due < h->cap);
  h->a[h->n] = e;
  sift_up(tm, h, h->n++);
}

/* Rebuilds h without its cancelled entries, freeing their slots: a pass
   that keeps the live entries in place, then Floyd's bottom-up heap
   construction (each inner node sifted down, O(n) in all). The sift here
   is the plain one, comparing against the entry at each level: sift_down's
   hole-to-leaf walk climbs back up, into ancestors not yet made a heap. */
static void compact(luna__timers *tm, luna__heap *h) {
  const bool exact = SEQ_EXACT(tm);
  entry *a = h->a;
  size_t r, w = 0, i;
  for (r = 0; r < h->n; r++) {
    if (tm->slots[a[r].slot].fn == NULL)
      free_slot(tm, a[r].slot);
    else
      a[w++] = a[r];
  }
  h->n = w;
  h->dead = 0;
  for (i = h->n / ARITY + 1; i-- > 0;) {
    size_t pos = i;
    entry e = a[pos];
    for (;;) {
      size_t c = ARITY * pos + 1, k, best;
      if (c >= h->n)
        break;
      best = c;
      for (k = c + 1; k < c + ARITY && k < h->n; k++)
        if (earlier(tm->slots, exact, &a[k], &a[best]))
          best = k;
      if (!earlier(tm->slots, exact, &a[best], &e))
        break;
      a[pos] = a[best];
      pos = best;
    }
    a[pos] = e;
  }
}

/* Makes room for one more entry. The array is placed 0 to 3 entries into
   its allocation so that, when the allocator returns 16-byte aligned
   memory, the four children of every node (a[4i + 1, 4i + 4]) fill one
   64-byte cache line: a level of a sift then touches one line, not two.
   (Any alignment is correct; this one is only faster.) The due entries at
   the end stay at the end. */
static int heap_grow(const luna__alloc *al, luna__heap *h) {
  luna__heap_entry *mem = h->a != NULL ? h->a - h->off : NULL;
  size_t mem_cap = h->cap + h->off, old_cap = mem_cap, off;
  if (luna__grow(al, (void **)&mem, &mem_cap, sizeof *mem,
                 h->n + h->due + 1 + (ARITY - 1)) != 0)
    return LUNA_ENOMEM;
  off = (size_t)(ARITY - 1 - (uintptr_t)mem / sizeof *mem) % ARITY;
  /* The due entries first: the heap may move onto where they were. */
  if (h->due > 0)
    memmove(mem + mem_cap - h->due, mem + old_cap - h->due, h->due * sizeof *mem);
  if (off != h->off && h->n > 0)
    memmove(mem + off, mem + h->off, h->n * sizeof *mem);
  h->a = mem + off;
  h->off = (uint32_t)off;
  h->cap = mem_cap - off;
  return 0;
}

/* ---- slots ---------------------------------------------------------------- */

LUNA__SLOT_LAYOUT(luna__timer);

static void free_slot(luna__timers *tm, uint32_t idx) {
  luna__timer *t = &tm->slots[idx];
  t->fn = NULL;
  t->arg = NULL;
  luna__slab_give(&tm->slab, tm->slots, sizeof *tm->slots, idx);
}

/* The live timer of `id`, or NULL when stale (fired, cancelled) or bogus. */
static luna__timer *lookup(luna__timers *tm, luna_timer_id id) {
  uint32_t idx;
  if (!luna__slab_find(&tm->slab, tm->slots, sizeof *tm->slots, id.id, &idx) ||
      tm->slots[idx].fn == NULL)
    return NULL;
  return &tm->slots[idx];
}

int luna__loop_add_timer(luna_loop *loop, luna_timing timing, luna_timer_kind kind,
                         int64_t deadline, luna_fn fn, void *arg, luna_timer_id *out) {
  luna__timers *tm = &loop->timers;
  const luna__alloc *a = &loop->alloc;
  unsigned hnum = (unsigned)(timing * LUNA_TIMER_KIND_COUNT + (int)kind);
  luna__heap *h = &tm->heaps[hnum];
  luna__timer *t;
  entry e;
  uint32_t idx;
  /* Reserve the heap room and the slot first: failure changes nothing. */
  if (h->n + h->due >= h->cap && heap_grow(a, h) != 0)
    return LUNA_ENOMEM;
  if (luna__slab_take(&tm->slab, a, (void **)&tm->slots, sizeof *tm->slots, &idx) != 0)
    return LUNA_ENOMEM;
  if (deadline > LUNA_NS_MAX)
    deadline = LUNA_NS_MAX;
  else if (deadline < -LUNA_NS_MAX)
    deadline = -LUNA_NS_MAX;
  t = &tm->slots[idx];
  t->meta = (tm->seq << 8) | hnum;
  t->fn = fn;
  t->arg = arg;
  e.deadline = deadline;
  e.slot = idx;
  e.seq = (uint32_t)tm->seq;
  tm->seq++;
  h->live++;
  heap_push(tm, h, e);
  if (out != NULL)
    out->id = luna__slab_handle(tm->slots, sizeof *tm->slots, idx);
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
  /* Only marked: its entry stays where it is, in the heap or among the due
     entries of the run firing now, and the slot is freed when a run pops
     it or a compaction drops it. The handle is stale from now on. */
  t->fn = NULL;
  t->arg = NULL;
  luna__slab_retire(tm->slots, sizeof *tm->slots, idx);
  if (!(t->meta & META_DUE) && ++h->dead > h->n / 2 && h->dead >= COMPACT_MIN)
    compact(tm, h);
  return 0;
}

bool luna__timers_has(const luna__timers *tm, int timing, luna_timer_kind kind) {
  return tm->heaps[timing * LUNA_TIMER_KIND_COUNT + (int)kind].n > 0;
}

/* True when the timer of `e` was created at or after `start_seq`. */
static bool created_since(const luna__timers *tm, const entry *e, uint64_t start_seq) {
  if (SEQ_EXACT(tm))
    return e->seq >= start_seq;
  return META_SEQ(tm->slots[e->slot].meta) >= start_seq;
}

/* Pops every timer of h due at `now` and keeps those created before
   `start_seq` as h's due entries, in firing order; the others are pushed
   back. Touches no slot beyond the pos writes of the sifts (while the
   sequences are exact). */
static void collect(luna__timers *tm, luna__heap *h, luna_ns now, uint64_t start_seq) {
  entry *a = h->a;
  size_t n0 = h->n, top_w = n0, r, w, d, i;
  assert(h->due == 0);
  /* As in heapsort: each pop frees the heap's last cell, so the live
     entries popped go down from the array's top, a[top_w, n0) holding
     them, the last popped first; cancelled ones free their slots. */
  while (h->n > 0 && a[0].deadline <= now) {
    entry top = pop_root(tm, h);
    if (tm->slots[top.slot].fn == NULL) {
      free_slot(tm, top.slot);
      h->dead--;
    } else {
      a[--top_w] = top;
    }
  }
  if (top_w == n0)
    return;
  /* Move the timers to call to the top of a[top_w, n0), in popping order
     downwards (swapping keeps their order and gathers the set-aside ones
     below them)... */
  for (r = w = n0; r-- > top_w;) {
    if (created_since(tm, &a[r], start_seq))
      continue;
    if (--w != r) {
      entry x = a[w];
      a[w] = a[r];
      a[r] = x;
    }
  }
  /* ...push the set-aside ones back (down onto the heap's end: h->n <= top_w)... */
  for (r = top_w; r < w; r++) {
    a[h->n++] = a[r];
    sift_up(tm, h, h->n - 1);
  }
  /* ...and move the rest to the end of the array, next to call first,
     marked as due. */
  d = n0 - w;
  for (i = 0; i < d / 2; i++) {
    entry x = a[w + i];
    a[w + i] = a[n0 - 1 - i];
    a[n0 - 1 - i] = x;
  }
  for (i = w; i < n0; i++)
    tm->slots[a[i].slot].meta |= META_DUE;
  if (n0 != h->cap)
    memmove(a + h->cap - d, a + w, d * sizeof *a);
  h->due = (uint32_t)d;
}

/* Puts the due entries of hs[from, ...) back into their heaps (after a stop);
   cancelled ones free their slots. */
static void put_back(luna__timers *tm, luna__heap *hs, int from) {
  int kind;
  for (kind = from; kind < LUNA_TIMER_KIND_COUNT; kind++) {
    luna__heap *h = &hs[kind];
    while (h->due > 0) {
      entry e = h->a[h->cap - h->due--];
      if (tm->slots[e.slot].fn == NULL) {
        free_slot(tm, e.slot);
      } else {
        tm->slots[e.slot].meta &= ~META_DUE;
        heap_push(tm, h, e);
      }
    }
  }
}

bool luna__timers_fire(luna__timers *tm, int timing,
                       const luna_ns now[LUNA_TIMER_KIND_COUNT],
                       uint64_t start_seq, luna_loop *loop) {
  luna__heap *hs = &tm->heaps[timing * LUNA_TIMER_KIND_COUNT];
  int kind;

  /* Most runs have timers but none due (a frame with many sleepers): find
     the first due kind before setting anything up. */
  for (kind = 0; kind < LUNA_TIMER_KIND_COUNT; kind++)
    if (hs[kind].n > 0 && hs[kind].a[0].deadline <= now[kind])
      break;
  if (kind == LUNA_TIMER_KIND_COUNT)
    return false;

  /* Collect, kind by kind in the documented order (the enum's order). */
  for (; kind < LUNA_TIMER_KIND_COUNT; kind++)
    if (hs[kind].n > 0)
      collect(tm, &hs[kind], now[kind], start_seq);

  /* Call. Each slot is freed before its call, so the callback may add
     timers (even reusing the slot) and its own handle reads as stale. A
     callback may grow the array (add moves the due entries along), so it
     is read again after each call. */
  for (kind = 0; kind < LUNA_TIMER_KIND_COUNT; kind++) {
    luna__heap *h = &hs[kind];
    while (h->due > 0) {
      uint32_t idx = h->a[h->cap - h->due].slot;
      luna__timer *t = &tm->slots[idx];
      luna_fn fn = t->fn;
      void *arg = t->arg;
      h->due--;
      /* Three ahead: its slot, so that reading its arg later does not
         wait; two ahead: what that arg points to (usually a Lua task,
         cold); the next one: warmed (luna__loop_set_warm). */
      if (h->due > 2)
        LUNA__PREFETCH(&tm->slots[h->a[h->cap - h->due + 2].slot]);
      if (h->due > 1)
        LUNA__PREFETCH(tm->slots[h->a[h->cap - h->due + 1].slot].arg);
      if (h->due > 0) {
        const luna__timer *next = &tm->slots[h->a[h->cap - h->due].slot];
        if (next->fn == loop->warm.fn && next->fn != NULL)
          loop->warm.warm(next->arg);
      }
      free_slot(tm, idx);
      if (fn == NULL)
        continue; /* cancelled after it was collected */
      h->live--;
      fn(loop, arg);
      if (luna__loop_stopping(loop)) {
        put_back(tm, hs, kind);
        return true;
      }
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
    assert(h->due == 0); /* never during a run */
    for (k = 0; k < h->n; k++)
      free_slot(tm, h->a[k].slot);
    h->n = h->live = h->dead = 0;
  }
}

void luna__timers_free(luna__timers *tm, const luna__alloc *a) {
  int i;
  for (i = 0; i < LUNA__TIMER_HEAPS; i++) {
    luna__heap *h = &tm->heaps[i];
    if (h->a != NULL) {
      void *mem = h->a - h->off;
      size_t mem_cap = h->cap + h->off;
      luna__array_free(a, &mem, &mem_cap, sizeof *h->a);
    }
    memset(h, 0, sizeof *h);
  }
  luna__slab_free(&tm->slab, a, (void **)&tm->slots, sizeof *tm->slots);
}
