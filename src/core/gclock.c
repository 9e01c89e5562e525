/*
** gclock.c: group clocks, the clocks of lifetime and clock groups
** (docs/groups.md; the binding's task.group is built on them).
**
** A group clock runs on the loop's scaled clock, slowed or sped up by its
** effective scale (its own scale times its ancestors') and stopped while it
** or an ancestor is paused; it also counts frames, which it does not count
** while paused. Both are kept as an anchor and a rate, never advanced per
** frame: while running, time = t0 + round((scaled - s0) * escale) and
** frames = f0 + (frame - F0); a change of scale or pause re-anchors the
** clock and its descendants at the value they read then. So a frame costs
** nothing per group, and a pause is O(1) in the members of the group: it
** walks the group's descendant clocks (not their timers) and touches at
** most one core timer per (timing, kind) that has timers.
**
** Timers on a group clock (kinds LUNA_TIMER_SCALED: ns of group time, and
** LUNA_TIMER_FRAME: group frames) live in the clock's own heaps, one per
** (timing, kind) used ("subs"), keyed by (deadline, creation sequence).
** Each sub arms one proxy timer in the loop's heaps for its earliest
** deadline, mapped back to the loop's clock; when the proxy fires, the sub
** collects what is due on the group clock, calls it in (deadline, creation)
** order and arms the proxy again. Cancelling a timer never re-arms the
** proxy: an early proxy finds nothing due and arms itself for the new
** earliest. A timer created during a run of its timing never fires in that
** run (the core's rule): each timer takes a sequence number from the
** loop's own, and a proxy calls only timers older than the run
** (loop->run_seq). luna_loop_stop during the calls puts the uncalled ones
** back, for the next run.
**
** Loop thread only. Includes only the core's own headers.
*/
#include <stdlib.h>
#include <string.h>

#include "loop_internal.h"

typedef struct gtimer {
  uint32_t pos; /* live: index in its sub's heap; free: next free + 1 */
  uint32_t gen;
  luna_ns deadline; /* on the group clock: ns, or group frames */
  uint64_t seq;     /* from the loop's timer sequence (unique, increasing) */
  luna_fn fn;       /* NULL: free, or cancelled while collected */
  void *arg;
  uint32_t sub;     /* index in c->subs */
  bool collected;   /* taken out of its heap by a firing, not called yet */
} gtimer;

LUNA__SLOT_LAYOUT(gtimer);

typedef struct gsub {
  luna__gclock *clock;
  uint8_t timing, kind;
  bool armed;      /* proxy is a live core timer */
  bool firing;     /* its proxy's callback is running */
  luna_ns armed_for; /* the group-clock deadline the proxy was armed for */
  luna_timer_id proxy;
  uint32_t *heap;  /* slot indices, a binary min-heap */
  size_t n, cap;
} gsub;

struct luna__gclock {
  luna_loop *loop;
  luna__alloc alloc;
  luna__gclock *parent, *first_child, *next, *prev; /* siblings */
  double scale, escale; /* own, effective (product with the ancestors') */
  bool paused, epaused; /* own, effective (any ancestor's) */
  bool dead;            /* freed during a firing: freed at its end */
  int firing;           /* proxies of this clock whose calls run now */
  luna_ns t0, s0;       /* time anchor: group time t0 at scaled time s0 */
  int64_t f0;           /* frame anchor: group frames f0 at frame F0 */
  uint64_t F0;
  gtimer *slots;
  luna__slab slab;
  gsub **subs;
  size_t nsubs, subs_cap;
  size_t live;
  uint32_t *due;        /* scratch for a firing: room for every slot */
  size_t due_cap;
  void *owner;          /* the layer above's (luna__gclock_owner) */
};

/* ---- the clock ------------------------------------------------------------ */

static bool running(const luna__gclock *c) { return !c->epaused; }

luna_ns luna__gclock_time(const luna__gclock *c) {
  luna_ns d;
  if (!running(c) || c->escale == 0.0)
    return c->t0;
  d = c->loop->clocks.scaled - c->s0;
  return luna_ns_add(c->t0, d <= 0 ? 0 : luna__scale_ns(d, c->escale));
}

int64_t luna__gclock_frames(const luna__gclock *c) {
  if (!running(c))
    return c->f0;
  return c->f0 + (int64_t)(c->loop->v.frame - c->F0);
}

double luna__gclock_effective_scale(const luna__gclock *c) { return c->escale; }
bool luna__gclock_paused(const luna__gclock *c) { return c->epaused; }
double luna__gclock_scale(const luna__gclock *c) { return c->scale; }
bool luna__gclock_own_paused(const luna__gclock *c) { return c->paused; }
size_t luna__gclock_count(const luna__gclock *c) { return c->live; }
void luna__gclock_set_owner(luna__gclock *c, void *owner) { c->owner = owner; }
void *luna__gclock_owner(const luna__gclock *c) { return c->owner; }

static void reanchor(luna__gclock *c) {
  c->t0 = luna__gclock_time(c);
  c->f0 = luna__gclock_frames(c);
  c->s0 = c->loop->clocks.scaled;
  c->F0 = c->loop->v.frame;
}

static void recompute(luna__gclock *c) {
  const luna__gclock *p = c->parent;
  c->escale = c->scale * (p != NULL ? p->escale : 1.0);
  if (c->escale > LUNA_TIME_SCALE_MAX)
    c->escale = LUNA_TIME_SCALE_MAX;
  c->epaused = c->paused || (p != NULL && p->epaused);
}

/* ---- the heaps ------------------------------------------------------------- */

static bool earlier(const gtimer *s, uint32_t x, uint32_t y) {
  if (s[x].deadline != s[y].deadline)
    return s[x].deadline < s[y].deadline;
  return s[x].seq < s[y].seq;
}

static void place(luna__gclock *c, gsub *u, size_t pos, uint32_t slot) {
  u->heap[pos] = slot;
  c->slots[slot].pos = (uint32_t)pos;
}

static void sift_up(luna__gclock *c, gsub *u, size_t pos) {
  uint32_t x = u->heap[pos];
  while (pos > 0) {
    size_t parent = (pos - 1) / 2;
    if (!earlier(c->slots, x, u->heap[parent]))
      break;
    place(c, u, pos, u->heap[parent]);
    pos = parent;
  }
  place(c, u, pos, x);
}

static void sift_down(luna__gclock *c, gsub *u, size_t pos) {
  uint32_t x = u->heap[pos];
  for (;;) {
    size_t l = 2 * pos + 1, best = pos;
    uint32_t b = x;
    if (l < u->n && earlier(c->slots, u->heap[l], b))
      best = l, b = u->heap[l];
    if (l + 1 < u->n && earlier(c->slots, u->heap[l + 1], b))
      best = l + 1, b = u->heap[l + 1];
    if (best == pos)
      break;
    place(c, u, pos, b);
    pos = best;
  }
  place(c, u, pos, x);
}

static void heap_push(luna__gclock *c, gsub *u, uint32_t slot) {
  u->heap[u->n] = slot;
  sift_up(c, u, u->n++);
}

static uint32_t heap_pop(luna__gclock *c, gsub *u) {
  uint32_t top = u->heap[0];
  if (--u->n > 0) {
    u->heap[0] = u->heap[u->n];
    sift_down(c, u, 0);
  }
  return top;
}

static void heap_remove(luna__gclock *c, gsub *u, size_t pos) {
  uint32_t last = u->heap[--u->n];
  if (pos == u->n)
    return;
  u->heap[pos] = last;
  if (pos > 0 && earlier(c->slots, last, u->heap[(pos - 1) / 2]))
    sift_up(c, u, pos);
  else
    sift_down(c, u, pos);
}

static void free_slot(luna__gclock *c, uint32_t idx) {
  c->slots[idx].fn = NULL;
  c->slots[idx].arg = NULL;
  c->slots[idx].collected = false;
  luna__slab_give(&c->slab, c->slots, sizeof *c->slots, idx);
}

/* ---- proxies -------------------------------------------------------------- */

static void proxy_cb(luna_loop *loop, void *arg);

static void disarm(luna__gclock *c, gsub *u) {
  if (u->armed)
    (void)luna__timers_cancel(&c->loop->timers, u->proxy);
  u->armed = false;
}

/* The loop-clock deadline at which the group clock reaches `deadline`. */
static bool map_deadline(const luna__gclock *c, const gsub *u, luna_ns deadline,
                         int64_t *out) {
  if (u->kind == LUNA_TIMER_FRAME) {
    int64_t d = deadline - c->f0;
    *out = d <= 0 ? (int64_t)c->F0 : (int64_t)c->F0 + d;
    return true;
  }
  {
    luna_ns d = deadline - luna__gclock_time(c);
    double x;
    if (d <= 0) { /* due now, whatever the scale */
      *out = c->loop->clocks.scaled;
      return true;
    }
    if (c->escale == 0.0)
      return false; /* a stopped clock: never, until the scale changes */
    d = deadline - c->t0;
    x = (double)d / c->escale;
    if (x >= (double)LUNA_NS_MAX) {
      *out = LUNA_NS_MAX;
    } else {
      luna_ns up = (luna_ns)x; /* the ceiling, without libm (the core links none) */
      if ((double)up < x)
        up++;
      *out = luna_ns_add(c->s0, up);
    }
    return true;
  }
}

/* Arms u's proxy for its earliest timer (or nothing, when it has none or
   the clock is stopped). 0 or LUNA_ENOMEM. */
static int arm(luna__gclock *c, gsub *u) {
  int64_t at;
  disarm(c, u);
  if (u->n == 0 || !running(c) || u->firing)
    return 0;
  if (!map_deadline(c, u, c->slots[u->heap[0]].deadline, &at))
    return 0;
  if (luna__loop_add_timer(c->loop, (luna_timing)u->timing, (luna_timer_kind)u->kind, at,
                           proxy_cb, u, &u->proxy) != 0)
    return LUNA_ENOMEM;
  u->armed = true;
  u->armed_for = c->slots[u->heap[0]].deadline;
  return 0;
}

static int arm_all(luna__gclock *c) {
  size_t i;
  int rc = 0;
  for (i = 0; i < c->nsubs; i++)
    if (arm(c, c->subs[i]) != 0)
      rc = LUNA_ENOMEM;
  return rc;
}

static void really_free(luna__gclock *c);

static void proxy_cb(luna_loop *loop, void *arg) {
  gsub *u = (gsub *)arg;
  luna__gclock *c = u->clock;
  luna_ns now;
  size_t nd = 0, i;
  u->armed = false;
  if (!running(c))
    return;
  now = u->kind == LUNA_TIMER_FRAME ? (luna_ns)luna__gclock_frames(c) : luna__gclock_time(c);
  /* Collect what is due and older than this run; the younger wait. */
  {
    size_t aside = 0;
    while (u->n > 0 && c->slots[u->heap[0]].deadline <= now) {
      uint32_t s = heap_pop(c, u);
      if (c->slots[s].seq >= loop->run_seq) {
        c->due[c->due_cap - 1 - aside++] = s; /* from the end of the scratch */
        continue;
      }
      c->slots[s].collected = true;
      c->due[nd++] = s;
    }
    while (aside > 0)
      heap_push(c, u, c->due[c->due_cap - aside--]);
  }
  u->firing = true;
  c->firing++;
  for (i = 0; i < nd; i++) {
    uint32_t s = c->due[i];
    gtimer *t = &c->slots[s];
    luna_fn fn = t->fn;
    void *targ = t->arg;
    if (loop->v.stop || !running(c)) {
      /* luna_loop_stop, or a callback paused the clock: the rest wait (for
         the next run, or for the resume) */
      size_t k;
      for (k = i; k < nd; k++) {
        gtimer *r = &c->slots[c->due[k]];
        if (r->fn == NULL) {
          free_slot(c, c->due[k]);
        } else {
          r->collected = false;
          heap_push(c, u, c->due[k]);
        }
      }
      break;
    }
    free_slot(c, s);
    if (fn == NULL)
      continue; /* cancelled after it was collected */
    c->live--;
    fn(loop, targ);
  }
  u->firing = false;
  c->firing--;
  if (c->dead) {
    if (c->firing == 0)
      really_free(c);
    return;
  }
  (void)arm(c, u); /* out of memory: the timers wait for the next change */
}

/* ---- lifetime ------------------------------------------------------------- */

int luna__gclock_new(luna_loop *loop, luna__gclock *parent, luna__gclock **out) {
  luna__gclock *c = (luna__gclock *)luna__malloc(&loop->alloc, sizeof *c);
  if (c == NULL)
    return LUNA_ENOMEM;
  memset(c, 0, sizeof *c);
  c->loop = loop;
  c->alloc = loop->alloc;
  c->scale = 1.0;
  c->parent = parent;
  if (parent != NULL) {
    c->next = parent->first_child;
    if (c->next != NULL)
      c->next->prev = c;
    parent->first_child = c;
  }
  recompute(c);
  c->s0 = loop->clocks.scaled;
  c->F0 = loop->v.frame;
  *out = c;
  return 0;
}

static void really_free(luna__gclock *c) {
  size_t i;
  for (i = 0; i < c->nsubs; i++) {
    gsub *u = c->subs[i];
    size_t cap = u->cap;
    luna__array_free(&c->alloc, (void **)&u->heap, &cap, sizeof *u->heap);
    luna__free(&c->alloc, u, sizeof *u);
  }
  luna__array_free(&c->alloc, (void **)&c->subs, &c->subs_cap, sizeof *c->subs);
  luna__array_free(&c->alloc, (void **)&c->due, &c->due_cap, sizeof *c->due);
  luna__slab_free(&c->slab, &c->alloc, (void **)&c->slots, sizeof *c->slots);
  luna__free(&c->alloc, c, sizeof *c);
}

void luna__gclock_free(luna__gclock *c, bool loop_alive) {
  size_t i;
  if (c == NULL)
    return;
  /* Children go on as roots, at the time they read now. */
  while (c->first_child != NULL) {
    luna__gclock *k = c->first_child;
    c->first_child = k->next;
    if (loop_alive)
      reanchor(k);
    k->parent = NULL;
    k->next = k->prev = NULL;
    if (loop_alive) {
      recompute(k);
      (void)arm_all(k);
    }
  }
  if (c->parent != NULL) {
    if (c->prev != NULL)
      c->prev->next = c->next;
    else
      c->parent->first_child = c->next;
    if (c->next != NULL)
      c->next->prev = c->prev;
    c->parent = NULL;
  }
  for (i = 0; i < c->nsubs; i++) {
    gsub *u = c->subs[i];
    if (loop_alive)
      disarm(c, u);
    u->armed = false;
    u->n = 0;
  }
  c->live = 0;
  if (c->firing > 0) {
    /* Inside one of its own proxies: the firing frees it when it returns;
       the timers it collected are not called. */
    size_t k;
    for (k = 0; k < c->slab.n; k++)
      c->slots[k].fn = NULL;
    c->dead = true;
    return;
  }
  really_free(c);
}

/* ---- changes ---------------------------------------------------------------- */

static void reanchor_tree(luna__gclock *c) {
  luna__gclock *k;
  reanchor(c);
  for (k = c->first_child; k != NULL; k = k->next)
    reanchor_tree(k);
}

static int refresh_tree(luna__gclock *c) {
  luna__gclock *k;
  int rc;
  recompute(c);
  rc = arm_all(c);
  for (k = c->first_child; k != NULL; k = k->next)
    if (refresh_tree(k) != 0)
      rc = LUNA_ENOMEM;
  return rc;
}

int luna__gclock_set_scale(luna__gclock *c, double scale) {
  if (scale != scale || scale < 0 || scale > LUNA_TIME_SCALE_MAX)
    return LUNA_EINVAL;
  reanchor_tree(c);
  c->scale = scale;
  return refresh_tree(c);
}

int luna__gclock_set_paused(luna__gclock *c, bool paused) {
  if (c->paused == paused)
    return 0;
  reanchor_tree(c);
  c->paused = paused;
  return refresh_tree(c);
}

/* ---- timers ----------------------------------------------------------------- */

static gsub *find_sub(luna__gclock *c, int timing, int kind, uint32_t *index) {
  size_t i;
  gsub *u;
  for (i = 0; i < c->nsubs; i++)
    if (c->subs[i]->timing == timing && c->subs[i]->kind == kind) {
      *index = (uint32_t)i;
      return c->subs[i];
    }
  if (luna__grow(&c->alloc, (void **)&c->subs, &c->subs_cap, sizeof *c->subs, c->nsubs + 1) != 0)
    return NULL;
  u = (gsub *)luna__malloc(&c->alloc, sizeof *u);
  if (u == NULL)
    return NULL;
  memset(u, 0, sizeof *u);
  u->clock = c;
  u->timing = (uint8_t)timing;
  u->kind = (uint8_t)kind;
  *index = (uint32_t)c->nsubs;
  c->subs[c->nsubs++] = u;
  return u;
}

int luna__gclock_add_timer(luna__gclock *c, luna_timing timing, luna_timer_kind kind,
                           int64_t deadline, luna_fn fn, void *arg, luna_timer_id *out) {
  uint32_t si, idx;
  gsub *u;
  gtimer *t;
  if (c->dead || (kind != LUNA_TIMER_SCALED && kind != LUNA_TIMER_FRAME))
    return LUNA_EINVAL;
  u = find_sub(c, (int)timing, (int)kind, &si);
  if (u == NULL)
    return LUNA_ENOMEM;
  /* Reserve everything first: failure changes nothing. */
  if (u->n == u->cap &&
      luna__grow(&c->alloc, (void **)&u->heap, &u->cap, sizeof *u->heap, u->n + 1) != 0)
    return LUNA_ENOMEM;
  if (luna__slab_take(&c->slab, &c->alloc, (void **)&c->slots, sizeof *c->slots, &idx) != 0)
    return LUNA_ENOMEM;
  if (c->due_cap < c->slab.n &&
      luna__grow(&c->alloc, (void **)&c->due, &c->due_cap, sizeof *c->due, c->slab.n) != 0) {
    luna__slab_give(&c->slab, c->slots, sizeof *c->slots, idx);
    return LUNA_ENOMEM;
  }
  if (deadline > LUNA_NS_MAX)
    deadline = LUNA_NS_MAX;
  t = &c->slots[idx];
  t->deadline = deadline;
  t->seq = c->loop->timers.seq++;
  t->fn = fn;
  t->arg = arg;
  t->sub = si;
  t->collected = false;
  heap_push(c, u, idx);
  c->live++;
  if (out != NULL)
    out->id = luna__slab_handle(c->slots, sizeof *c->slots, idx);
  if (!u->firing && (!u->armed || deadline < u->armed_for))
    (void)arm(c, u); /* out of memory: armed at the next change or firing */
  return 0;
}

int luna__gclock_cancel(luna__gclock *c, luna_timer_id id) {
  uint32_t idx;
  gtimer *t;
  if (!luna__slab_find(&c->slab, c->slots, sizeof *c->slots, id.id, &idx))
    return LUNA_ENOENT;
  t = &c->slots[idx];
  if (t->fn == NULL)
    return LUNA_ENOENT;
  c->live--;
  if (t->collected) { /* the firing frees it when it reaches it */
    t->fn = NULL;
    t->arg = NULL;
    luna__slab_retire(c->slots, sizeof *c->slots, idx);
    return 0;
  }
  heap_remove(c, c->subs[t->sub], t->pos);
  free_slot(c, idx);
  return 0;
}

typedef struct order_entry {
  uint64_t seq;
  luna_fn fn;
  void *arg;
} order_entry;

static int by_seq(const void *x, const void *y) {
  uint64_t a = ((const order_entry *)x)->seq, b = ((const order_entry *)y)->seq;
  return a < b ? -1 : a > b;
}

size_t luna__gclock_clear(luna__gclock *c, void (*each)(void *ud, luna_fn fn, void *arg),
                          void *ud) {
  size_t i, n = 0, k;
  order_entry *list = NULL;
  size_t cap = 0;
  if (c->live > 0)
    (void)luna__grow(&c->alloc, (void **)&list, &cap, sizeof *list, c->live);
  for (i = 0; i < c->slab.n; i++) {
    gtimer *t = &c->slots[i];
    if (t->fn == NULL)
      continue;
    if (list != NULL && n < cap) {
      list[n].seq = t->seq;
      list[n].fn = t->fn;
      list[n].arg = t->arg;
      n++;
    }
    if (t->collected) {
      t->fn = NULL;
      t->arg = NULL;
      luna__slab_retire(c->slots, sizeof *c->slots, (uint32_t)i);
    } else {
      free_slot(c, (uint32_t)i);
    }
  }
  for (i = 0; i < c->nsubs; i++) {
    c->subs[i]->n = 0;
    disarm(c, c->subs[i]);
  }
  c->live = 0;
  if (list != NULL) {
    qsort(list, n, sizeof *list, by_seq);
    for (k = 0; k < n && each != NULL; k++)
      each(ud, list[k].fn, list[k].arg);
    luna__array_free(&c->alloc, (void **)&list, &cap, sizeof *list);
  }
  return n;
}
