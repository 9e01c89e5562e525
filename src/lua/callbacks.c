/*
** callbacks.c: task.on, the runner of repeating items exposed to Lua. One C
** loop (the core's runner) calls many Lua functions, in registration order,
** each as fn(dt). A callback that raises is removed and its error reported.
*/
#include "binding.h"

static luna__handle *check_handle(lua_State *L, int idx) {
  return (luna__handle *)luaL_checkudata(L, idx, LUNA__HANDLE_MT);
}

static void unlink_handle(luna__binding *b, luna__handle *h) {
  if (h->prev != NULL)
    h->prev->next = h->next;
  else
    b->handles = h->next;
  if (h->next != NULL)
    h->next->prev = h->prev;
  h->prev = h->next = NULL;
  b->nhandles--;
}

/* Forgets a handle: it is never called again. `remove_item` is false when
   the runner removes it itself (its step returned false). */
static void deactivate(luna__binding *b, luna__handle *h, bool remove_item) {
  if (!h->active)
    return;
  h->active = false;
  if (remove_item && b->loop != NULL)
    luna_item_remove(b->loop, h->item);
  unlink_handle(b, h);
  luna__push_refs(b->L);
  luaL_unref(b->L, -1, h->ref);
  lua_pop(b->L, 1);
  h->ref = LUA_NOREF;
}

static bool callback_step(luna_loop *loop, void *arg) {
  luna__handle *h = (luna__handle *)arg;
  luna__binding *b = h->b;
  lua_State *L = luna__exec_state(b);
  lua_State *outer = luna__running;
  int top = lua_gettop(L), st;
  lua_checkstack(L, 8);
  lua_pushcfunction(L, luna__msgh); /* top + 1 */
  luna__push_refs(L);
  lua_rawgeti(L, -1, h->ref);
  lua_remove(L, -2);                /* top + 2: the handle */
  lua_getiuservalue(L, -1, 1);      /* the function */
  lua_pushnumber(L, luna_ns_to_seconds(luna_loop_delta(loop)));
  luna__running = L;
  st = lua_pcall(L, 1, 0, top + 1);
  luna__running = outer;
  if (st != LUA_OK) {
    lua_Debug ar;
    const char *what = "callback";
    int err = lua_gettop(L);
    luna__push_last_traceback(L);
    lua_getiuservalue(L, top + 2, 1);
    if (lua_getinfo(L, ">S", &ar))
      what = lua_pushfstring(L, "callback %s:%d", ar.short_src, ar.linedefined);
    luna__report(b, L, err, err + 1, 0, what);
    deactivate(b, h, false);
    lua_settop(L, top);
    return false;
  }
  lua_settop(L, top);
  return h->active;
}

/* handle:remove(): stops the callback; safe during its own run and at any
   time after (a second call does nothing). */
static int l_handle_remove(lua_State *L) {
  luna__handle *h = check_handle(L, 1);
  deactivate(h->b, h, true);
  return 0;
}

static int l_handle_active(lua_State *L) {
  lua_pushboolean(L, check_handle(L, 1)->active);
  return 1;
}

static int l_handle_tostring(lua_State *L) {
  luna__handle *h = check_handle(L, 1);
  lua_pushfstring(L, "Handle(%s, %s): %p", luna_timing_name(h->timing),
                  h->active ? "active" : "removed", (void *)h);
  return 1;
}

/* task.on(timing, fn) -> Handle: calls fn(dt) at each run of `timing`, from
   the next run on, in registration order, until handle:remove() (also
   called when a `local h <close>` goes out of scope). dt is delta_time(). */
static int l_on(lua_State *L) {
  luna__binding *b = luna__check_binding(L);
  luna_timing timing = luna__opt_timing(L, 1, LUNA_UPDATE);
  luna__handle *h;
  int rc;
  if (lua_isnoneornil(L, 1))
    luaL_argerror(L, 1, "expected a timing name");
  luaL_checktype(L, 2, LUA_TFUNCTION);
  h = (luna__handle *)lua_newuserdatauv(L, sizeof *h, 1);
  h->b = b;
  h->timing = (uint8_t)timing;
  h->active = false;
  h->ref = LUA_NOREF;
  h->prev = h->next = NULL;
  luaL_setmetatable(L, LUNA__HANDLE_MT);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, -2, 1);
  rc = luna_item_add(b->loop, timing, callback_step, h, &h->item);
  if (rc != 0)
    return luaL_error(L, "task.on: %s", luna_strerror(rc));
  h->active = true;
  luna__push_refs(L);
  lua_pushvalue(L, -2);
  h->ref = luaL_ref(L, -2);
  lua_pop(L, 1);
  h->next = b->handles;
  if (b->handles != NULL)
    b->handles->prev = h;
  b->handles = h;
  b->nhandles++;
  return 1;
}

void luna__remove_all_handles(luna__binding *b) {
  while (b->handles != NULL)
    deactivate(b, b->handles, true);
}

static const luaL_Reg handle_methods[] = {
    {"remove", l_handle_remove}, {"active", l_handle_active}, {NULL, NULL}};

static const luaL_Reg handle_meta[] = {
    {"__close", l_handle_remove}, {"__tostring", l_handle_tostring}, {NULL, NULL}};

static const luaL_Reg callback_funcs[] = {{"on", l_on}, {NULL, NULL}};

/* Creates the Handle metatable and adds task.on to the table on top of L. */
void luna__open_callbacks(lua_State *L) {
  luaL_newmetatable(L, LUNA__HANDLE_MT);
  luaL_setfuncs(L, handle_meta, 0);
  luaL_newlib(L, handle_methods);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_setfuncs(L, callback_funcs, 0);
}
