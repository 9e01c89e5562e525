/*
** observer.c: the binding's observer slots (luna__set_observer, one flag
** for the hot path to test) and the public observer API
** (luna_lua_set_observer) over them (luna__observer in binding.h). The public
** callbacks get a luna_lua_task_event instead of the private task struct.
** The adapter lives in a userdata anchored in the registry, so it is freed
** with the state; the internal hook stays one NULL check per resume when no
** observer is installed.
*/
#include "binding.h"
#include "lunaloop_lua.h"

/* Registry key of the adapter's userdata (its address is unique). */
static const char adapter_key = 0;

typedef struct adapter {
  luna_lua_observer pub;
} adapter;

/* The binding's observer slots (mod budgets and the public observer):
   installing recomputes the one flag the hot path tests. */
bool luna__set_observer(lua_State *L, int slot, const luna__observer *observer) {
  luna__binding *b = luna__get_binding(L);
  static const luna__observer none = {NULL, NULL, NULL, NULL};
  int i;
  if (b == NULL)
    return false;
  b->observers[slot] = observer != NULL ? *observer : none;
  b->observed = false;
  for (i = 0; i < LUNA__OBSERVERS; i++)
    if (b->observers[i].on_thread != NULL || b->observers[i].on_resume != NULL ||
        b->observers[i].on_call != NULL)
      b->observed = true;
  return true;
}

/* Fills ev for t. The name is read from the task's second user value on the
   binding's main thread; the string stays referenced by the task, so the
   pointer is valid during the callback. */
static void fill_event(luna__task *t, luna_lua_task_event *ev) {
  lua_State *L = t->b->L;
  ev->id = t->id;
  ev->name = NULL;
  ev->timing = t->b->loop != NULL ? luna_loop_current_timing(t->b->loop) : -1;
  if (t->ref == LUA_NOREF || !lua_checkstack(L, 3))
    return;
  luna__push_task(L, t);
  if (luna__push_name(L, -1) == LUA_TSTRING)
    ev->name = lua_tostring(L, -1);
  lua_pop(L, 2);
}

static void on_thread(void *ud, luna__task *t) {
  adapter *a = ud;
  luna_lua_task_event ev;
  if (a->pub.task_created == NULL)
    return;
  fill_event(t, &ev);
  a->pub.task_created(a->pub.ud, &ev);
}

static void on_resume(void *ud, luna__task *t, bool begin) {
  adapter *a = ud;
  luna_lua_task_event ev;
  void (*fn)(void *, const luna_lua_task_event *) =
      begin ? a->pub.resume_begin : a->pub.resume_end;
  if (fn == NULL)
    return;
  fill_event(t, &ev);
  fn(a->pub.ud, &ev);
}

int luna_lua_set_observer(lua_State *L, const luna_lua_observer *observer) {
  luna__binding *b = luna__get_binding(L);
  adapter *a;
  if (b == NULL)
    return LUNA_EINVAL;
  if (observer == NULL) {
    luna__set_observer(L, LUNA__OBSERVER_PUBLIC, NULL);
    return 0;
  }
  if (!lua_checkstack(L, 2))
    return LUNA_ENOMEM;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &adapter_key) != LUA_TUSERDATA) {
    lua_pop(L, 1);
    /* lua_newuserdatauv raises on memory errors: the state's panic path is
       the same as for any allocation the host makes through Lua. */
    a = lua_newuserdatauv(L, sizeof *a, 0);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &adapter_key);
  } else {
    a = lua_touserdata(L, -1);
    lua_pop(L, 1);
  }
  a->pub = *observer;
  luna__observer hooks = {.on_thread = on_thread, .on_resume = on_resume, .ud = a};
  luna__set_observer(L, LUNA__OBSERVER_PUBLIC, &hooks);
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
