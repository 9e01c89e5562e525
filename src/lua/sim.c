/*
** sim.c: the snapshot engine of the simulation group, and the calls of its
** tick callbacks, for lua/lunaloop/sim.lua (the Lua side of the group:
** registered state, timers, random generators, effects, tick callbacks,
** rollback and the sync-test).
**
** A store is a userdata with a fixed number of slots; each slot holds one
** snapshot: the bytes of the value copier (copy.h) of the group's root
** table (the registered states by name, and the group's own data), its
** checksum (a hash that does not depend on lua_next's order) and the tick
** it was taken at. Saving encodes into the slot's buffer, which is kept
** and reused, so a steady simulation allocates nothing per save; loading
** restores the bytes into the live tables in place (luna__copy_restore),
** so every table a script holds a reference to stays the one the state
** uses. Timer and random generator tables are "classes": the copier tags
** them, and a table restored or decoded from a snapshot gets its class's
** metatable back.
**
** The store and the functions below are internals, handed only to the
** module's chunks (internal.c): they check their arguments only as far as
** memory safety needs (the chunk is their one caller).
**
** Includes binding.h (the calling context and reporting) and copy.h.
*/
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "copy.h"

#define STORE_MT "lunaloop.SimStore"
#define SNAPSHOT_LIMIT ((size_t)1 << 31) /* 2 GiB: no state should come near it */

typedef struct slot {
  char *buf;
  size_t cap, len;
  uint64_t sum;
  lua_Integer tick;
  bool used;
} slot;

typedef struct store {
  int nslots;
  slot *slots;
} store;

static store *check_store(lua_State *L) {
  return (store *)luaL_checkudata(L, 1, STORE_MT);
}

static slot *check_slot(lua_State *L, store *s, int idx) {
  lua_Integer i = luaL_checkinteger(L, idx);
  luaL_argcheck(L, i >= 0 && i < s->nslots, idx, "slot out of range");
  return &s->slots[i];
}

static int store_gc(lua_State *L) {
  store *s = (store *)luaL_checkudata(L, 1, STORE_MT);
  int i;
  if (s->slots != NULL) {
    for (i = 0; i < s->nslots; i++)
      free(s->slots[i].buf);
    free(s->slots);
    s->slots = NULL;
  }
  return 0;
}

/* sim_store(nslots, classes) -> store; classes is the table of the
   group's metatables <-> class numbers (both directions), kept as the
   store's user value. */
static int l_sim_store(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  store *s;
  luaL_argcheck(L, n > 0 && n <= 1 << 20, 1, "expected 1 to 1048576 slots");
  luaL_checktype(L, 2, LUA_TTABLE);
  s = (store *)lua_newuserdatauv(L, sizeof *s, 1);
  s->nslots = 0;
  s->slots = (slot *)calloc((size_t)n, sizeof(slot));
  if (s->slots == NULL)
    return luaL_error(L, "sim: out of memory");
  s->nslots = (int)n;
  luaL_setmetatable(L, STORE_MT);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, -2, 1);
  return 1;
}

static void push_sum(lua_State *L, uint64_t sum) {
  lua_pushinteger(L, (lua_Integer)sum);
}

/* Encodes the value at idx into sl; raises the copier's error (what: the
   caller named in it, root: the path's start). */
static void encode_into(lua_State *L, slot *sl, int idx, const char *what, const char *root) {
  luna__copy_opts o;
  int st;
  idx = lua_absindex(L, idx);
  memset(&o, 0, sizeof o);
  o.limit = SNAPSHOT_LIMIT;
  o.what = what;
  o.root = root;
  o.context = "into a simulation snapshot";
  lua_getiuservalue(L, 1, 1);
  o.classes = lua_gettop(L);
  o.buf = sl->buf;
  o.cap = sl->cap;
  st = luna__copy_encode_opts(L, idx, &o);
  sl->buf = o.buf;
  sl->cap = o.cap;
  if (st != LUA_OK) {
    sl->used = false;
    lua_error(L);
  }
  lua_pop(L, 1);
  sl->len = o.len;
  sl->sum = o.checksum;
  sl->used = true;
}

/* store:save(slot, root, tick, what) -> checksum: the snapshot of root. */
static int l_save(lua_State *L) {
  store *s = check_store(L);
  slot *sl = check_slot(L, s, 2);
  lua_Integer tick = luaL_checkinteger(L, 4);
  luaL_checktype(L, 3, LUA_TTABLE);
  encode_into(L, sl, 3, luaL_optstring(L, 5, "sim"), NULL);
  sl->tick = tick;
  push_sum(L, sl->sum);
  return 1;
}

/* store:check(value, what, root) -> checksum: encodes value into a
   scratch buffer (raising the copier's errors: what may be in a snapshot). */
static int l_check(lua_State *L) {
  check_store(L);
  lua_settop(L, 4);
  {
    luna__copy_opts o;
    int st;
    memset(&o, 0, sizeof o);
    o.limit = SNAPSHOT_LIMIT;
    o.what = luaL_optstring(L, 3, "sim");
    o.root = luaL_optstring(L, 4, NULL);
    o.context = "into a simulation snapshot";
    lua_getiuservalue(L, 1, 1);
    o.classes = lua_gettop(L);
    st = luna__copy_encode_opts(L, 2, &o);
    free(o.buf);
    if (st != LUA_OK)
      return lua_error(L);
    push_sum(L, o.checksum);
  }
  return 1;
}

/* store:load(slot, root) -> tick | nil: restores the snapshot into root in place. */
static int l_load(lua_State *L) {
  store *s = check_store(L);
  slot *sl = check_slot(L, s, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  if (!sl->used) {
    lua_pushnil(L);
    return 1;
  }
  lua_getiuservalue(L, 1, 1);
  if (luna__copy_restore(L, 3, sl->buf, sl->len, lua_gettop(L)) != 0)
    return luaL_error(L, "sim: the snapshot holds no table");
  lua_pushinteger(L, sl->tick);
  return 1;
}

/* store:info(slot) -> tick, checksum | nil */
static int l_info(lua_State *L) {
  store *s = check_store(L);
  slot *sl = check_slot(L, s, 2);
  if (!sl->used)
    return 0;
  lua_pushinteger(L, sl->tick);
  push_sum(L, sl->sum);
  return 2;
}

/* store:decode(slot) -> a new table | nil (with the classes' metatables) */
static int l_decode(lua_State *L) {
  store *s = check_store(L);
  slot *sl = check_slot(L, s, 2);
  if (!sl->used)
    return 0;
  lua_getiuservalue(L, 1, 1);
  luna__copy_decode_classes(L, sl->buf, sl->len, lua_gettop(L));
  return 1;
}

/* store:bytes(slot) -> string | nil */
static int l_bytes(lua_State *L) {
  store *s = check_store(L);
  slot *sl = check_slot(L, s, 2);
  if (!sl->used)
    return 0;
  lua_pushlstring(L, sl->buf, sl->len);
  return 1;
}

/* store:put(slot, bytes, tick) -> checksum | nil, msg: bytes from
   store:bytes (another run's, a file's): checked, then decoded and
   encoded again, which gives the checksum and refuses what the copier
   would. */
static int l_put(lua_State *L) {
  store *s = check_store(L);
  slot *sl = check_slot(L, s, 2);
  size_t len;
  const char *data = luaL_checklstring(L, 3, &len);
  lua_Integer tick = luaL_checkinteger(L, 4);
  if (!luna__copy_valid(data, len, true)) {
    lua_pushnil(L);
    lua_pushliteral(L, "the bytes are not a snapshot (damaged, or not made by sim.export)");
    return 2;
  }
  lua_getiuservalue(L, 1, 1);
  luna__copy_decode_classes(L, data, len, lua_gettop(L));
  encode_into(L, sl, -1, "sim.import", NULL);
  sl->tick = tick;
  push_sum(L, sl->sum);
  return 1;
}

/* store:copy(from, to): slot `to` becomes a copy of slot `from`. */
static int l_copy(lua_State *L) {
  store *s = check_store(L);
  slot *from = check_slot(L, s, 2), *to = check_slot(L, s, 3);
  if (from == to)
    return 0;
  if (!from->used) {
    to->used = false;
    return 0;
  }
  if (to->cap < from->len) {
    char *p = (char *)realloc(to->buf, from->len);
    if (p == NULL)
      return luaL_error(L, "sim: out of memory");
    to->buf = p;
    to->cap = from->len;
  }
  memcpy(to->buf, from->buf, from->len);
  to->len = from->len;
  to->sum = from->sum;
  to->tick = from->tick;
  to->used = true;
  return 0;
}

/* store:clear(slot) */
static int l_clear(lua_State *L) {
  store *s = check_store(L);
  check_slot(L, s, 2)->used = false;
  return 0;
}

/* store:size() -> bytes held in the slots' buffers */
static int l_size(lua_State *L) {
  store *s = check_store(L);
  size_t total = 0;
  int i;
  for (i = 0; i < s->nslots; i++)
    total += s->slots[i].cap;
  lua_pushinteger(L, (lua_Integer)total);
  return 1;
}

/* ---- calling tick callbacks ------------------------------------------------ */

static const char sim_thread_key = 't';

/* The thread tick callbacks run on: never a task's coroutine, so that an
   await inside one always takes the checked path and raises (await.c),
   whoever drives the simulation (a frame, the host, a task). */
static lua_State *sim_thread(lua_State *L) {
  lua_State *S;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &sim_thread_key) == LUA_TTHREAD) {
    S = lua_tothread(L, -1);
    lua_pop(L, 1);
    return S;
  }
  lua_pop(L, 1);
  S = lua_newthread(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &sim_thread_key);
  return S;
}

/* sim_call(fn, arg, what) -> true | false: calls fn(arg) protected, as a
   simulation tick callback (an await in it raises "cannot await in a
   simulation tick"); an error is reported through the binding (task.on_error,
   named "<what> <source>:<line>") and false returned. */
static int l_sim_call(lua_State *L) {
  luna__binding *b = luna__check_binding(L);
  lua_State *S = sim_thread(L);
  lua_State *outer;
  luna__calling_saved calling;
  int st, base;
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 3);
  if (!lua_checkstack(S, 8))
    return luaL_error(L, "sim: the tick callbacks' thread is out of stack");
  base = lua_gettop(S);
  lua_pushcfunction(S, luna__msgh);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_xmove(L, S, 2);
  outer = luna__enter_thread(S);
  calling = luna__begin_calling(b, S, LUNA__CALLING_SIM);
  LUNA__OBSERVE(b, on_call, S, true);
  st = lua_pcall(S, 1, 0, base + 1);
  LUNA__OBSERVE(b, on_call, S, false);
  luna__end_calling(b, calling);
  luna__leave_thread(outer);
  if (st != LUA_OK) {
    lua_Debug ar;
    char what[LUA_IDSIZE + 48];
    int err = lua_gettop(S);
    snprintf(what, sizeof what, "%s", luaL_optstring(L, 3, "sim.on_tick callback"));
    luna__push_last_traceback(S);
    lua_pushvalue(L, 1);
    lua_xmove(L, S, 1);
    if (lua_getinfo(S, ">S", &ar))
      snprintf(what + strlen(what), sizeof what - strlen(what), " %s:%d", ar.short_src,
               ar.linedefined);
    luna__report(b, S, err, err + 1, 0, what);
  }
  lua_settop(S, base);
  lua_pushboolean(L, st == LUA_OK);
  return 1;
}

/* sim_report(message, what): reports an error that is not a failing call
   (a sync-test mismatch) through the binding, named `what`. */
static int l_sim_report(lua_State *L) {
  luna__binding *b = luna__check_binding(L);
  luaL_checkany(L, 1);
  luna__report(b, L, 1, 0, 0, luaL_optstring(L, 2, "sim"));
  return 0;
}

/* sim_calling() -> true while a tick callback runs (on any thread). */
static int l_sim_calling(lua_State *L) {
  luna__binding *b = luna__check_binding(L);
  lua_pushboolean(L, b->calling.what == LUNA__CALLING_SIM);
  return 1;
}

/* ---- task.wait_tick: the wait kind LUNA__W_TICK --------------------------- */

/* sim_suspend(target, what [, level]) -> ...: with a level, only checks
   that the caller may await (raising the await errors positioned at
   `level`, as error()) and returns its Task; without, suspends the
   calling task until sim_wake. The tick it waits for is kept for the
   introspection (t:info().deadline, the stuck report). */
static int l_sim_suspend(lua_State *L) {
  luna__binding *b = luna__check_binding(L);
  lua_Integer target = luaL_checkinteger(L, 1);
  const char *what = luaL_checkstring(L, 2);
  int level = (int)luaL_optinteger(L, 3, 0);
  luna__task *t = luna__check_await_at(L, b, what, level > 0 ? level : 1);
  if (level > 0) {
    luna__push_task(L, t);
    return 1;
  }
  lua_settop(L, 0);
  t->wait = LUNA__W_TICK;
  t->on.timer.deadline = (int64_t)target;
  return luna__suspend(L, t);
}

/* sim_wake(t, tick) -> boolean: wakes t with the tick when it waits in
   sim_suspend; it is resumed in this run. */
static int l_sim_wake(lua_State *L) {
  luna__task *t = luna__check_task(L, 1);
  luaL_checkinteger(L, 2);
  lua_settop(L, 2);
  if (t == NULL || t->state != LUNA__SUSPENDED || t->wait != LUNA__W_TICK) {
    lua_pushboolean(L, 0);
    return 1;
  }
  luna__wake(t->b, t, L, 1, false);
  luna__pump(t->b);
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg store_methods[] = {
    {"save", l_save},   {"check", l_check}, {"load", l_load},   {"info", l_info},
    {"decode", l_decode}, {"bytes", l_bytes}, {"put", l_put},   {"copy", l_copy},
    {"clear", l_clear}, {"size", l_size},   {NULL, NULL}};

/* Adds the simulation's internals to the internals table on top of L
   (internal.c calls it). */
void luna__open_sim_internals(lua_State *L);
void luna__open_sim_internals(lua_State *L) {
  if (luaL_newmetatable(L, STORE_MT)) {
    lua_pushcfunction(L, store_gc);
    lua_setfield(L, -2, "__gc");
    luaL_newlib(L, store_methods);
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "lunaloop.SimStore");
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_sim_store);
  lua_setfield(L, -2, "sim_store");
  lua_pushcfunction(L, l_sim_call);
  lua_setfield(L, -2, "sim_call");
  lua_pushcfunction(L, l_sim_report);
  lua_setfield(L, -2, "sim_report");
  lua_pushcfunction(L, l_sim_calling);
  lua_setfield(L, -2, "sim_calling");
  lua_pushcfunction(L, l_sim_suspend);
  lua_setfield(L, -2, "sim_suspend");
  lua_pushcfunction(L, l_sim_wake);
  lua_setfield(L, -2, "sim_wake");
}
