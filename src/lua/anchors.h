/*
** anchors.h: what keeps unsettled tasks alive (anchors.c), for task.c.
**
** An unsettled task is kept alive by its slot in the binding's anchor
** table, which holds its thread and sits at index 1 of the binding's own
** thread b->anchor_L; the free slots are a C array. A task keeps its slot
** as long as it keeps its record (task.h).
** Taking and releasing a slot is a stack read and one table write, which
** is why the two are inline here: every spawn anchors a task and every
** settled task is released, and luaL_ref/luaL_unref would cost a free list
** kept in the registry itself (five table accesses a spawn, three a
** release).
**
** Includes binding.h (the slots are fields of the binding) and nothing of
** other layers.
*/
#ifndef LUNA_LUA_ANCHORS_H
#define LUNA_LUA_ANCHORS_H

#include "binding.h"

/* Makes room for one more slot than there are now (both the free-slot
   array and the anchor table grow: see anchors.c). Raises a memory error
   on L, having changed nothing. */
void luna__anchors_grow(lua_State *L, luna__binding *b);

/* Anchors the task's thread on top of L (left there) and returns its slot.
   Raises a memory error on L, having changed nothing. */
static inline int luna__anchor(lua_State *L, luna__binding *b) {
  int slot;
  if (b->free_slots.count == 0 && b->free_slots.cap <= (size_t)b->nslots)
    luna__anchors_grow(L, b);
  slot = b->free_slots.count > 0 ? b->free_slots.a[b->free_slots.count - 1] : b->nslots + 1;
  lua_pushvalue(L, -1);
  lua_xmove(L, b->anchor_L, 1);
  lua_rawseti(b->anchor_L, 1, slot); /* within the array part: cannot raise */
  if (b->free_slots.count > 0)
    b->free_slots.count--;
  else
    b->nslots++;
  b->anchored++;
  return slot;
}

/* Releases a slot: never allocates, never raises (an existing key set to
   nil, on the anchor thread). During a walk the slot is given back when
   the walk ends (luna__end_walk). */
static inline void luna__unanchor(luna__binding *b, int slot) {
  lua_pushnil(b->anchor_L);
  lua_rawseti(b->anchor_L, 1, slot);
  b->anchored--;
  if (b->walks > 0)
    b->slots_held = true;
  else if (b->free_slots.a != NULL) /* NULL once the binding closed */
    b->free_slots.a[b->free_slots.count++] = slot;
}

/* The task in slot `slot` of the anchor table, or NULL when it is empty:
   luna__walk_task, inline for the walks of anchors.c and task.c (one per
   live task when all of them are cancelled). */
static inline luna__task *luna__anchored(luna__binding *b, int slot) {
  lua_State *co;
  lua_rawgeti(b->anchor_L, 1, slot);
  co = lua_tothread(b->anchor_L, -1);
  lua_pop(b->anchor_L, 1);
  return co != NULL ? luna__record(co) : NULL;
}

#endif
