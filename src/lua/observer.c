/*
** observer.c: the binding's observers: the budget's slot (luna__set_observer,
** for src/mods through seam.c), the public observers (luna_lua_add_observer,
** luna_lua_remove_observer, and luna_lua_set_observer over them), and the
** one flag the hot path tests (b->observed). A public observer is an entry
** of b->observers: the host's callbacks and the binding hooks that adapt
** them, which get a luna_lua_task_event instead of the private task
** struct. The entries are a C array from the state's allocator, freed when
** the binding detaches.
*/
#include "binding.h"
#include "lunaloop_lua.h"

/* Recomputes the flag LUNA__OBSERVE tests, after any change. */
static void update_observed(luna__binding *b) {
  const luna__observer *o = &b->budget_observer;
  bool any = o->on_thread != NULL || o->on_resume != NULL || o->on_call != NULL ||
             o->on_wake != NULL;
  for (size_t i = 0; i < b->observers.count && !any; i++)
    any = b->observers.a[i].id != 0;
  b->observed = any;
}

bool luna__set_observer(lua_State *L, int slot, const luna__observer *observer) {
  luna__binding *b = luna__get_binding(L);
  static const luna__observer none = {0};
  (void)slot; /* LUNA__OBSERVER_BUDGET is the only internal slot */
  if (b == NULL)
    return false;
  b->budget_observer = observer != NULL ? *observer : none;
  update_observed(b);
  return true;
}

void luna__observers_free(luna__binding *b) {
  void *ud;
  lua_Alloc alloc = lua_getallocf(b->L, &ud);
  if (b->observers.a != NULL)
    alloc(ud, b->observers.a, b->observers.cap * sizeof *b->observers.a, 0);
  b->observers.a = NULL;
  b->observers.count = b->observers.cap = 0;
  b->observers.legacy_id = 0;
  update_observed(b);
}

/* Fills ev for t. The name is read from the names side table (names.c) on
   the binding's main thread; the string stays referenced there, so the
   pointer is valid during the callback. */
static void fill_event(luna__task *t, luna_lua_task_event *ev) {
  lua_State *L = t->b->L;
  ev->id = t->id;
  ev->name = NULL;
  ev->timing = t->b->loop != NULL ? luna_loop_current_timing(t->b->loop) : -1;
  if (!lua_checkstack(L, 3))
    return;
  luna__push_task(L, t);
  if (luna__push_name(L, -1) == LUA_TSTRING)
    ev->name = lua_tostring(L, -1);
  lua_pop(L, 2);
}

/* The hooks of a public entry: ud is its index. Each fills the event, then
   reads the entry as it is then (a callback may have moved the array). */
static const luna__observer_entry *entry_event(void *ud, luna__task *t,
                                               luna_lua_task_event *ev) {
  fill_event(t, ev);
  return &t->b->observers.a[(uintptr_t)ud];
}

static void on_thread(void *ud, luna__task *t) {
  luna_lua_task_event ev;
  const luna__observer_entry *e = entry_event(ud, t, &ev);
  if (e->pub.task_created != NULL)
    e->pub.task_created(e->pub.ud, &ev);
}

static void on_resume(void *ud, luna__task *t, bool begin) {
  luna_lua_task_event ev;
  const luna__observer_entry *e = entry_event(ud, t, &ev);
  if (begin ? e->pub.resume_begin != NULL : e->pub.resume_end != NULL)
    (begin ? e->pub.resume_begin : e->pub.resume_end)(e->pub.ud, &ev);
}

static void on_wake(void *ud, luna__task *t) {
  luna_lua_task_event ev;
  const luna__observer_entry *e = entry_event(ud, t, &ev);
  if (e->pub.task_woken != NULL)
    e->pub.task_woken(e->pub.ud, &ev);
}

/* A free entry of b's observers (a removed one first, so the array stays
   as short as the most observers installed at once), or NULL when it
   cannot grow. */
static luna__observer_entry *free_entry(luna__binding *b) {
  size_t cap;
  void *ud, *a;
  lua_Alloc alloc;
  for (size_t i = 0; i < b->observers.count; i++)
    if (b->observers.a[i].id == 0)
      return &b->observers.a[i];
  if (b->observers.count == b->observers.cap) {
    cap = b->observers.cap > 0 ? b->observers.cap * 2 : 4;
    alloc = lua_getallocf(b->L, &ud);
    a = alloc(ud, b->observers.a, b->observers.cap * sizeof *b->observers.a,
              cap * sizeof *b->observers.a);
    if (a == NULL)
      return NULL;
    b->observers.a = a;
    b->observers.cap = cap;
  }
  return &b->observers.a[b->observers.count++];
}

int luna_lua_add_observer(lua_State *L, const luna_lua_observer *observer, uint32_t *id) {
  luna__binding *b = luna__get_binding(L);
  luna__observer_entry *e;
  if (b == NULL || observer == NULL || id == NULL)
    return LUNA_EINVAL;
  if (b->closing)
    return LUNA_ESTATE;
  if ((e = free_entry(b)) == NULL)
    return LUNA_ENOMEM;
  if (++b->observers.next_id == 0) /* 2^32 additions later: 0 means free */
    b->observers.next_id = 1;
  e->pub = *observer;
  e->hooks = (luna__observer){.on_thread = observer->task_created != NULL ? on_thread : NULL,
                              .on_resume = observer->resume_begin != NULL ||
                                                   observer->resume_end != NULL
                                               ? on_resume
                                               : NULL,
                              .on_wake = observer->task_woken != NULL ? on_wake : NULL,
                              .ud = (void *)(uintptr_t)(e - b->observers.a)};
  e->id = *id = b->observers.next_id;
  update_observed(b);
  return 0;
}

int luna_lua_remove_observer(lua_State *L, uint32_t id) {
  luna__binding *b = luna__get_binding(L);
  if (b == NULL)
    return LUNA_EINVAL;
  for (size_t i = 0; id != 0 && i < b->observers.count; i++) {
    luna__observer_entry *e = &b->observers.a[i];
    if (e->id == id) {
      /* Cleared in place, never moved: a walk under way stays valid. */
      *e = (luna__observer_entry){0};
      if (b->observers.legacy_id == id)
        b->observers.legacy_id = 0;
      update_observed(b);
      return 0;
    }
  }
  return LUNA_ENOENT;
}

int luna_lua_set_observer(lua_State *L, const luna_lua_observer *observer) {
  luna__binding *b = luna__get_binding(L);
  uint32_t id;
  int rc;
  if (b == NULL)
    return LUNA_EINVAL;
  if (b->observers.legacy_id != 0)
    luna_lua_remove_observer(L, b->observers.legacy_id);
  if (observer == NULL)
    return 0;
  if ((rc = luna_lua_add_observer(L, observer, &id)) != 0)
    return rc;
  b->observers.legacy_id = id;
  return 0;
}

uint64_t luna_lua_resume_counts(lua_State *L, uint64_t out[LUNA_TIMING_COUNT + 1]) {
  luna__binding *b;
  uint64_t frame;
  int i;
  if (L == NULL || out == NULL)
    return 0;
  b = luna__get_binding(L);
  for (i = 0; i <= LUNA_TIMING_COUNT; i++)
    out[i] = 0;
  if (b == NULL || b->loop == NULL)
    return 0;
  frame = luna_loop_frame_count(b->loop);
  if (b->stats_frame != frame)
    return frame; /* no resume yet in this frame */
  for (i = 0; i <= LUNA_TIMING_COUNT; i++)
    out[i] = b->resumes[i];
  return frame;
}
