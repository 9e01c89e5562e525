/*
** timer.c: per-(timing, kind) 4-ary min-heaps of timers (see timer.h).
*/
#include <assert.h>
#include <string.h>

#include "loop_internal.h"
#include "timer.h"

/* The stamp of a timer: its sequence, its heap and the low bit set, so
   that it is odd (see lunaloop/extension.h) and never 0. */
#define STAMP(seq, hnum) (((uint64_t)(seq) << 8) | ((uint64_t)(hnum) << 1) | 1u)
#define STAMP_HEAP(s) ((unsigned)((s) >> 1) & 0x7f)
#define STAMP_SEQ(s) ((s) >> 8)

/* An entry's ref: a node's address, or a handle timer's slot. */
#define REF_IS_SLOT(r) (((r)&1u) != 0)
#define REF_SLOT(r) ((uint32_t)((r) >> 1))
#define REF_NODE(r) ((luna__timer_node *)(r))

/* pos of a slot whose timer is live (and which heap it is in). */
#define SLOT_LIVE(hnum) (((uint32_t)(hnum) << 1) | 1u)

/* A heap is rebuilt without its cancelled entries once they are more than
   half of its entries and at least this many (fewer cost nothing worth a
   pass). */
#define COMPACT_MIN 64

/* Children per node. Four halve the depth of a binary heap, so the lines a
   sift touches, for a few more comparisons (three a level to find the
   earliest of four, against two for the two binary levels it replaces);
   the four children of a node are two 64-byte lines (see heap_grow).
   Against a binary heap of the same entries that is a few percent fewer
   instructions in all for the same wall time (with the 32-byte entries,
   W2_sleepers ran 6,368 instructions a sleeper against 6,488 binary). */
#define ARITY 4

typedef luna__heap_entry entry;

void luna__timers_init(luna__timers *tm) { memset(tm, 0, sizeof *tm); }

/* ---- the heap ------------------------------------------------------------- */

/* Orders by deadline, then creation (the stamps, see luna__heap_entry).
   Deadlines are rarely equal, so ties cost a well predicted branch. (A
   branch-free version runs more instructions and was no faster.) */
static inline bool earlier(const entry *x, const entry *y) {
  if (x->deadline != y->deadline)
    return x->deadline < y->deadline;
  return x->stamp < y->stamp;
}

/* Puts e at the hole a[pos] or, moving parents down, above it. */
static inline void climb(entry *a, size_t pos, entry e) {
  while (pos > 0) {
    size_t parent = (pos - 1) / ARITY;
    if (!earlier(&e, &a[parent]))
      break;
    a[pos] = a[parent];
    pos = parent;
  }
  a[pos] = e;
}

/* The earliest of the four children at p: two independent comparisons,
   then one between their winners. */
static inline entry *min_children(entry *p) {
  entry *b01 = p + earlier(p + 1, p);
  entry *b23 = p + 2 + earlier(p + 3, p + 2);
  return earlier(b23, b01) ? b23 : b01;
}

/* Moves the hole at a[pos] down to a leaf, filling it at each level with
   the earliest child, and returns the leaf. A level's comparisons wait for
   its four children, so it first asks for the next level: the children of
   all four (sixteen entries, eight lines), one set of which it will read. */
static inline size_t hole_to_leaf(entry *a, size_t n, size_t pos) {
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
    best = min_children(a + c);
    a[pos] = *best;
    pos = (size_t)(best - a);
  }
  if (c < n) { /* the one node with fewer children; theirs are past n */
    size_t best = c;
    for (c++; c < n; c++)
      if (earlier(&a[c], &a[best]))
        best = c;
    a[pos] = a[best];
    pos = best;
  }
  return pos;
}

/* Removes a[0] (h->n > 0) and returns it. The last entry replaces the
   root; it almost always belongs near the bottom, so the hole walks down
   to a leaf without comparing against it, and it then climbs from there,
   usually not at all (Floyd's variant of heapsort: ARITY - 1 comparisons a
   level instead of ARITY). */
static entry pop_root(luna__heap *h) {
  entry top = h->a[0];
  size_t n = --h->n;
  if (n > 0)
    climb(h->a, hole_to_leaf(h->a, n, 0), h->a[n]);
  return top;
}

/* Room is reserved by the adds (n + due <= cap). */
static void heap_push(luna__heap *h, entry e) {
  assert(h->n + h->due < h->cap);
  climb(h->a, h->n++, e);
}

/* True while the entry's timer is neither cancelled nor re-armed: reads
   its node or its slot. */
static inline bool entry_live(const luna__timers *tm, const entry *e) {
  if (REF_IS_SLOT(e->ref))
    return tm->slots[REF_SLOT(e->ref)].pos != 0;
  return REF_NODE(e->ref)->word == e->stamp;
}

static void free_slot(luna__timers *tm, uint32_t idx);

/* Drops a cancelled entry: a handle timer's slot is freed. */
static inline void drop_dead(luna__timers *tm, const entry *e) {
  if (REF_IS_SLOT(e->ref))
    free_slot(tm, REF_SLOT(e->ref));
}

/* Rebuilds h without its cancelled entries, in the heap and among the due
   ones (which keep their order at the array's end): a pass that keeps the
   live entries in place, then Floyd's bottom-up heap construction (each
   inner node sifted down, O(n) in all). The sift here is the plain one,
   comparing against the entry at each level: pop_root's hole-to-leaf walk
   climbs back up, into ancestors not yet made a heap. It may run inside a
   call of the run firing h (a cancel), which reads the due entries afresh
   after each call. */
static void compact(luna__timers *tm, luna__heap *h) {
  entry *a = h->a;
  size_t r, w = 0, i;
  for (r = 0; r < h->n; r++) {
    if (entry_live(tm, &a[r]))
      a[w++] = a[r];
    else
      drop_dead(tm, &a[r]);
  }
  h->n = w;
  if (h->due > 0) { /* from the last to call, packed against the end */
    size_t lo = h->cap - h->due;
    for (r = w = h->cap; r-- > lo;) {
      if (entry_live(tm, &a[r]))
        a[--w] = a[r];
      else
        drop_dead(tm, &a[r]);
    }
    h->due = (uint32_t)(h->cap - w);
  }
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
        if (earlier(&a[k], &a[best]))
          best = k;
      if (!earlier(&a[best], &e))
        break;
      a[pos] = a[best];
      pos = best;
    }
    a[pos] = e;
  }
}

/* One more entry of h was cancelled: rebuilds h when they are more than
   half of its entries (and at least COMPACT_MIN). */
static void count_dead(luna__timers *tm, luna__heap *h) {
  if (++h->dead > (h->n + h->due) / 2 && h->dead >= COMPACT_MIN)
    compact(tm, h);
}

/* Makes room for one more entry. The array is placed 0 to 3 entries into
   its allocation so that, when the allocator returns memory aligned to an
   entry's size, the four children of every node (a[4i + 1, 4i + 4]) begin
   a cache line: a level of a sift then touches the fewest lines. (Any
   alignment is correct; this one is only faster.) The due entries at the
   end stay at the end. */
static int heap_grow(const luna__alloc *al, luna__heap *h) {
  luna__heap_entry *mem = h->a != NULL ? h->a - h->off : NULL;
  size_t mem_cap = h->cap + h->off, old_cap = mem_cap, off;
  if (h->n + h->due >= UINT32_MAX)
    return LUNA_ENOMEM; /* (h->due is 32 bits) */
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

/* Clamps a deadline to +-LUNA_NS_MAX. */
static inline int64_t clamp(int64_t deadline) {
  if (deadline > LUNA_NS_MAX)
    return LUNA_NS_MAX;
  if (deadline < -LUNA_NS_MAX)
    return -LUNA_NS_MAX;
  return deadline;
}

/* ---- handle timers ---------------------------------------------------------- */

LUNA__SLOT_LAYOUT(luna__timer);

static void free_slot(luna__timers *tm, uint32_t idx) {
  tm->slots[idx].arg = NULL;
  luna__slab_give(&tm->slab, tm->slots, sizeof *tm->slots, idx);
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
  t = &tm->slots[idx];
  t->pos = SLOT_LIVE(hnum);
  t->arg = arg;
  e.deadline = clamp(deadline);
  e.stamp = STAMP(tm->seq, hnum);
  e.ref = ((uintptr_t)idx << 1) | 1u;
  e.fn = fn;
  tm->seq++;
  h->live++;
  heap_push(h, e);
  if (out != NULL)
    out->id = luna__slab_handle(tm->slots, sizeof *tm->slots, idx);
  return 0;
}

int luna__timers_cancel(luna__timers *tm, luna_timer_id id) {
  luna__timer *t;
  luna__heap *h;
  uint32_t idx;
  if (!luna__slab_find(&tm->slab, tm->slots, sizeof *tm->slots, id.id, &idx) ||
      tm->slots[idx].pos == 0)
    return LUNA_ENOENT; /* stale (fired, cancelled) or bogus */
  t = &tm->slots[idx];
  h = &tm->heaps[t->pos >> 1];
  h->live--;
  /* Only marked: its entry stays where it is, in the heap or among the due
     entries of the run firing now, and the slot is freed when a run pops
     it or a compaction drops it. The handle is stale from now on. */
  t->pos = 0;
  t->arg = NULL;
  luna__slab_retire(tm->slots, sizeof *tm->slots, idx);
  count_dead(tm, h);
  return 0;
}

/* ---- node timers ------------------------------------------------------------- */

int luna__loop_add_timer_node(luna_loop *loop, luna_timing timing, luna_timer_kind kind,
                              int64_t deadline, luna_fn fn, luna__timer_node *node) {
  luna__timers *tm = &loop->timers;
  unsigned hnum = (unsigned)(timing * LUNA_TIMER_KIND_COUNT + (int)kind);
  luna__heap *h = &tm->heaps[hnum];
  entry e;
  assert(((uintptr_t)node & 1u) == 0);
  if (h->n + h->due >= h->cap && heap_grow(&loop->alloc, h) != 0)
    return LUNA_ENOMEM;
  e.deadline = clamp(deadline);
  e.stamp = STAMP(tm->seq, hnum);
  e.ref = (uintptr_t)node;
  e.fn = fn;
  node->word = e.stamp;
  tm->seq++;
  h->live++;
  heap_push(h, e);
  return 0;
}

int luna__loop_cancel_timer_node(luna_loop *loop, luna__timer_node *node) {
  luna__timers *tm = &loop->timers;
  luna__heap *h;
  if (!luna__timer_node_armed(node))
    return LUNA_ENOENT;
  h = &tm->heaps[STAMP_HEAP(node->word)];
  h->live--;
  node->word = 0; /* its entry no longer matches: skipped, or compacted away */
  count_dead(tm, h);
  return 0;
}

void luna__loop_sweep_timers(luna_loop *loop) {
  luna__timers *tm = &loop->timers;
  int i;
  for (i = 0; i < LUNA__TIMER_HEAPS; i++)
    if (tm->heaps[i].dead > 0)
      compact(tm, &tm->heaps[i]);
}

/* ---- firing ------------------------------------------------------------------- */

bool luna__timers_has(const luna__timers *tm, int timing, luna_timer_kind kind) {
  return tm->heaps[timing * LUNA_TIMER_KIND_COUNT + (int)kind].n > 0;
}

/* Pops every timer of h due at `now` and keeps those created before
   `start_seq` as h's due entries, in firing order; the others are pushed
   back. Reads entries only: cancelled ones are kept too, and skipped when
   their turn comes. */
static void collect(luna__heap *h, luna_ns now, uint64_t start_seq) {
  entry *a = h->a;
  size_t cap = h->cap, top = cap, r, w, i, d;
  assert(h->due == 0);
  /* Each pop frees the heap's last cell, and n <= cap, so the entries
     popped go down from the array's end: a[top, cap) holds them, the first
     popped at a[cap - 1]. They land where the due entries are kept: no
     moving them there afterwards. */
  while (h->n > 0 && a[0].deadline <= now)
    a[--top] = pop_root(h);
  if (top == cap)
    return;
  /* Move the timers to call to the top of a[top, cap), in popping order
     downwards (swapping keeps their order and gathers the set-aside ones
     below them)... */
  for (r = w = cap; r-- > top;) {
    if (STAMP_SEQ(a[r].stamp) >= start_seq)
      continue;
    if (--w != r) {
      entry x = a[w];
      a[w] = a[r];
      a[r] = x;
    }
  }
  /* ...push the set-aside ones back (onto the heap's end: h->n <= top)... */
  for (r = top; r < w; r++)
    climb(a, h->n++, a[r]);
  /* ...and turn the rest around, next to call first. */
  d = cap - w;
  for (i = 0; i < d / 2; i++) {
    entry x = a[w + i];
    a[w + i] = a[cap - 1 - i];
    a[cap - 1 - i] = x;
  }
  h->due = (uint32_t)d;
}

/* Puts the due entries of hs[from, ...) back into their heaps (after a
   stop), cancelled ones too: they stay counted as such. */
static void put_back(luna__heap *hs, int from) {
  int kind;
  for (kind = from; kind < LUNA_TIMER_KIND_COUNT; kind++) {
    luna__heap *h = &hs[kind];
    while (h->due > 0) {
      entry e = h->a[h->cap - h->due--];
      heap_push(h, e);
    }
  }
}

/* The argument a call of e passes: the node, or the slot's arg. */
static inline void *entry_arg(const luna__timers *tm, const entry *e) {
  return REF_IS_SLOT(e->ref) ? tm->slots[REF_SLOT(e->ref)].arg : (void *)e->ref;
}

/* What the call of e will read first, asked for ahead: the node, or the
   slot. */
static inline void prefetch_ref(const luna__timers *tm, const entry *e) {
  if (REF_IS_SLOT(e->ref))
    LUNA__PREFETCH(&tm->slots[REF_SLOT(e->ref)]);
  else
    LUNA__PREFETCH((const void *)e->ref);
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
      collect(&hs[kind], now[kind], start_seq);

  /* Call. Each timer is disarmed (its node's word cleared, or its slot
     freed) before its call, so the callback may arm the node again or add
     timers (even reusing the slot), and its own handle reads as stale. A
     callback may grow the array (add moves the due entries along) or
     compact it (cancel), so it is read again after each call. */
  for (kind = 0; kind < LUNA_TIMER_KIND_COUNT; kind++) {
    luna__heap *h = &hs[kind];
    while (h->due > 0) {
      const entry *next = &h->a[h->cap - h->due];
      entry e = *next;
      void *arg;
      h->due--;
      /* Two ahead: its node or slot (usually a Lua task, cold), so that
         checking it later does not wait; the next one: warmed
         (luna__loop_set_warm), for what its argument points to. */
      if (h->due > 1)
        prefetch_ref(tm, next + 2);
      if (h->due > 0 && next[1].fn == loop->warm.fn && entry_live(tm, next + 1))
        loop->warm.warm(entry_arg(tm, next + 1));
      if (REF_IS_SLOT(e.ref)) {
        uint32_t idx = REF_SLOT(e.ref);
        bool live = tm->slots[idx].pos != 0;
        arg = tm->slots[idx].arg;
        free_slot(tm, idx);
        if (!live) {
          h->dead--; /* cancelled: popped, or collected and then cancelled */
          continue;
        }
      } else {
        luna__timer_node *node = REF_NODE(e.ref);
        if (node->word != e.stamp) {
          h->dead--;
          continue;
        }
        node->word = 0;
        arg = node;
      }
      h->live--;
      e.fn(loop, arg);
      if (luna__loop_stopping(loop)) {
        put_back(hs, kind);
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
    for (k = 0; k < h->n; k++) {
      const entry *e = &h->a[k];
      if (REF_IS_SLOT(e->ref))
        free_slot(tm, REF_SLOT(e->ref));
      else if (REF_NODE(e->ref)->word == e->stamp)
        REF_NODE(e->ref)->word = 0;
    }
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
