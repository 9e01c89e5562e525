/*
** anchors.c: the anchor table that keeps unsettled tasks alive, and the
** walks over them in creation order (task.list, cancelling them all, the
** deadlock report), sorted in place by a heapsort.
**
** Tasks keep no list of their own: two pointers a task, and settling a
** sleeper in deadline order would touch its two neighbours, two cache
** misses at random. The anchor table already holds every unsettled task;
** a walk in creation order first sorts it by id, in place. Every slot is
** in the table's array part (luna__anchors_grow), so moving values between
** slots allocates nothing and cannot raise.
**
** Includes anchors.h (and through it binding.h); nothing of src/core.
*/
#include <limits.h>
#include <string.h>

#include "anchors.h"

void luna__anchors_grow(lua_State *L, luna__binding *b) {
  /* Both grow to `cap`: the free slots, so that releasing never allocates,
     and the anchor table, made anew with an array part of that size, so
     that every slot stays in the array part however sparse the table gets
     (Lua's own rehash could move a sparse table's keys to its hash part):
     walks move tasks between slots, which then never allocates. */
  size_t cap = b->free_slots.cap ? b->free_slots.cap * 2 : 64;
  void *ud;
  lua_Alloc alloc = lua_getallocf(L, &ud);
  int *a, i;
  if (cap > (size_t)INT_MAX / 2)
    luaL_error(L, "lunaloop: too many tasks");
  luaL_checkstack(L, 3, NULL);
  lua_createtable(L, (int)cap, 0);
  a = (int *)alloc(ud, b->free_slots.a, b->free_slots.cap * sizeof *a, cap * sizeof *a);
  if (a == NULL)
    luaL_error(L, "lunaloop: out of memory");
  b->free_slots.a = a;
  b->free_slots.cap = cap;
  lua_pushvalue(b->anchor_L, 1);
  lua_xmove(b->anchor_L, L, 1);
  for (i = 1; i <= b->nslots; i++) {
    lua_rawgeti(L, -1, i);
    lua_rawseti(L, -3, i);
  }
  lua_pop(L, 1);
  lua_xmove(L, b->anchor_L, 1);
  lua_replace(b->anchor_L, 1);
}

luna__task *luna__walk_task(luna__binding *b, int slot) {
  return luna__anchored(b, slot);
}

/* ---- the heapsort ------------------------------------------------------- */

static uint64_t slot_key(luna__binding *b, int slot) {
  luna__task *t = luna__anchored(b, slot);
  return t != NULL ? t->id : UINT64_MAX; /* empty slots last */
}

static void slot_swap(luna__binding *b, int i, int j) {
  luna__task *t;
  lua_rawgeti(b->anchor_L, 1, i);
  lua_rawgeti(b->anchor_L, 1, j);
  lua_rawseti(b->anchor_L, 1, i);
  lua_rawseti(b->anchor_L, 1, j);
  if ((t = luna__anchored(b, i)) != NULL)
    t->ref = i;
  if ((t = luna__anchored(b, j)) != NULL)
    t->ref = j;
}

static void sift_down(luna__binding *b, int root, int n) {
  for (;;) {
    int child = 2 * root, max = root;
    uint64_t kmax = slot_key(b, root);
    if (child <= n) {
      uint64_t k = slot_key(b, child);
      if (k > kmax) {
        max = child;
        kmax = k;
      }
    }
    if (child + 1 <= n && slot_key(b, child + 1) > kmax)
      max = child + 1;
    if (max == root)
      return;
    slot_swap(b, root, max);
    root = max;
  }
}

/* Makes the free slots the empty ones, lowest given out first (never
   allocates: cap >= nslots, see luna__anchors_grow). */
static void rebuild_free_slots(luna__binding *b) {
  int i;
  if (b->free_slots.a == NULL) /* the binding closed */
    return;
  b->free_slots.count = 0;
  for (i = b->nslots; i >= 1; i--)
    if (b->anchored == 0 || luna__anchored(b, i) == NULL) /* all free: no read */
      b->free_slots.a[b->free_slots.count++] = i;
}

/* Sorts the anchors by id (heapsort: no memory), unless they are in order
   already; the empty slots, all at the end now, are then given out in
   ascending order: tasks created next take slots after every other. */
static void sort_anchors(luna__binding *b) {
  int n = b->nslots, i;
  uint64_t prev = 0;
  bool sorted = true;
  for (i = 1; i <= n && sorted && b->anchored > 0; i++) { /* none: sorted */
    uint64_t k = slot_key(b, i);
    sorted = k >= prev;
    prev = k;
  }
  if (!sorted) {
    for (i = n / 2; i >= 1; i--)
      sift_down(b, i, n);
    for (i = n; i > 1; i--) {
      slot_swap(b, 1, i);
      sift_down(b, 1, i - 1);
    }
  }
  rebuild_free_slots(b);
}

/* ---- walks -------------------------------------------------------------- */

int luna__begin_walk(luna__binding *b) {
  if (b->walks++ == 0) {
    sort_anchors(b);
    b->slots_held = false;
  }
  return b->nslots;
}

void luna__end_walk(luna__binding *b) {
  if (--b->walks > 0 || !b->slots_held)
    return;
  rebuild_free_slots(b); /* gives back the slots released during the walk */
  b->slots_held = false;
}

void luna__anchors_free(luna__binding *b) {
  void *ud;
  lua_Alloc alloc = lua_getallocf(b->L, &ud);
  if (b->free_slots.a != NULL)
    alloc(ud, b->free_slots.a, b->free_slots.cap * sizeof *b->free_slots.a, 0);
  memset(&b->free_slots, 0, sizeof b->free_slots);
}

void luna__push_task(lua_State *L, luna__task *t) {
  lua_rawgeti(t->b->anchor_L, 1, t->ref);
  lua_xmove(t->b->anchor_L, L, 1);
}
