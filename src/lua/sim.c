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

typedef struct snap {
  char *buf;
  size_t cap, len;
  uint64_t sum;
  lua_Integer tick;
  bool used;
} snap;

typedef struct store {
  int nslots;
  snap *slots;
} store;

static store *check_store(lua_State *L) {
  return (store *)luaL_checkudata(L, 1, STORE_MT);
}

static snap *check_slot(lua_State *L, store *s, int idx) {
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
  s->slots = (snap *)calloc((size_t)n, sizeof(snap));
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
static void encode_into(lua_State *L, snap *sl, int idx, const char *what, const char *root) {
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
  snap *sl = check_slot(L, s, 2);
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
  snap *sl = check_slot(L, s, 2);
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
  snap *sl = check_slot(L, s, 2);
  if (!sl->used)
    return 0;
  lua_pushinteger(L, sl->tick);
  push_sum(L, sl->sum);
  return 2;
}

/* store:decode(slot) -> a new table | nil (with the classes' metatables) */
static int l_decode(lua_State *L) {
  store *s = check_store(L);
  snap *sl = check_slot(L, s, 2);
  if (!sl->used)
    return 0;
  lua_getiuservalue(L, 1, 1);
  luna__copy_decode_classes(L, sl->buf, sl->len, lua_gettop(L));
  return 1;
}

/* store:bytes(slot) -> string | nil */
static int l_bytes(lua_State *L) {
  store *s = check_store(L);
  snap *sl = check_slot(L, s, 2);
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
  snap *sl = check_slot(L, s, 2);
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
  snap *from = check_slot(L, s, 2), *to = check_slot(L, s, 3);
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

/* ---- the bridge to the core's simulation (lunaloop/sim.h) ------------------ */

/* A bridge is the Lua side's handle of a luna_sim: the chunk's group calls
   the sim's host operations through it, and it is the sim's state
   provider, each callback a function of the group's provider table (the
   registry reference `provider`). Callbacks run on the tick callbacks'
   thread. An error in one is reported through the binding when the frame
   drives the sim; during a host operation (bridge:step ...) it is kept
   and raised by that operation when it returns. */
#define BRIDGE_MT "lunaloop.SimBridge"

typedef struct bridge {
  luna__binding *b;
  luna_sim *sim;       /* NULL once detached */
  int provider;        /* registry ref of the provider table, or LUA_NOREF */
  int self;            /* registry ref of the bridge while it is the provider */
  bool owned;          /* made by task.sim_open: freed with the bridge */
  int host;            /* host operations under way (bridge methods) */
  bool failed;         /* a callback failed during the host operation */
  bool restarting;     /* bridge:restart: the detach is not the end */
  char err[512];
} bridge;

static bridge *check_bridge(lua_State *L) {
  bridge *br = (bridge *)luaL_checkudata(L, 1, BRIDGE_MT);
  if (br->sim == NULL)
    luaL_error(L, "sim: the simulation was closed");
  return br;
}

/* Calls provider[field] with the nargs values on top of S (below them
   nothing of ours); leaves nres results on S, or none and returns false
   after an error (reported, or kept for the host operation). */
static bool call_provider(bridge *br, lua_State *S, const char *field, int nargs, int nres) {
  luna__binding *b = br->b;
  int base = lua_gettop(S) - nargs, st;
  lua_State *outer;
  lua_pushcfunction(S, luna__msgh);
  lua_rawgeti(S, LUA_REGISTRYINDEX, br->provider);
  lua_getfield(S, -1, field);
  lua_remove(S, -2);
  lua_rotate(S, base + 1, 2); /* msgh, fn, args... */
  outer = luna__enter_thread(S);
  st = lua_pcall(S, nargs, nres, base + 1);
  luna__leave_thread(outer);
  if (st == LUA_OK) {
    lua_remove(S, base + 1);
    return true;
  }
  if (br->host > 0) {
    if (!br->failed)
      snprintf(br->err, sizeof br->err, "%s", luna_lua_tostring(S, -1));
    br->failed = true;
  } else {
    int err = lua_gettop(S);
    luna__push_last_traceback(S);
    luna__report(b, S, err, err + 1, 0, "sim");
  }
  lua_settop(S, base);
  return false;
}

static lua_State *provider_thread(bridge *br) {
  lua_State *S = sim_thread(br->b->L);
  lua_checkstack(S, 16);
  return S;
}

static int p_save(void *ud, uint64_t tick, int slot, uint64_t *checksum) {
  bridge *br = (bridge *)ud;
  lua_State *S = provider_thread(br);
  lua_pushinteger(S, (lua_Integer)tick);
  lua_pushinteger(S, slot);
  if (!call_provider(br, S, "save", 2, 1))
    return LUNA_EINVAL;
  if (checksum != NULL)
    *checksum = (uint64_t)lua_tointeger(S, -1);
  lua_pop(S, 1);
  return 0;
}

static int p_load(void *ud, uint64_t tick, int slot) {
  bridge *br = (bridge *)ud;
  lua_State *S = provider_thread(br);
  lua_pushinteger(S, (lua_Integer)tick);
  lua_pushinteger(S, slot);
  return call_provider(br, S, "load", 2, 0) ? 0 : LUNA_EINVAL;
}

static void p_discard(void *ud, uint64_t tick, int slot) {
  bridge *br = (bridge *)ud;
  lua_State *S = provider_thread(br);
  lua_pushinteger(S, (lua_Integer)tick);
  lua_pushinteger(S, slot);
  (void)call_provider(br, S, "discard", 2, 0);
}

static void p_tick(void *ud, luna_sim *sim, const luna_sim_tick_info *info) {
  bridge *br = (bridge *)ud;
  lua_State *S = provider_thread(br);
  (void)sim;
  lua_pushinteger(S, (lua_Integer)info->tick);
  lua_pushnumber(S, luna_ns_to_seconds(info->dt_ns));
  lua_pushinteger(S, (lua_Integer)info->batch);
  lua_pushinteger(S, (lua_Integer)info->flags);
  (void)call_provider(br, S, "tick", 4, 0);
}

static int p_export(void *ud, uint64_t tick, int slot, luna_sim_write_fn write, void *write_ud) {
  bridge *br = (bridge *)ud;
  lua_State *S = provider_thread(br);
  int rc;
  size_t len;
  const char *bytes;
  lua_pushinteger(S, (lua_Integer)tick);
  lua_pushinteger(S, slot);
  if (!call_provider(br, S, "export", 2, 1))
    return LUNA_EINVAL;
  bytes = lua_tolstring(S, -1, &len);
  rc = bytes != NULL ? write(write_ud, bytes, len) : LUNA_EINVAL;
  lua_pop(S, 1);
  return rc;
}

static int p_import(void *ud, uint64_t tick, int slot, const void *bytes, size_t len,
                    uint64_t *checksum) {
  bridge *br = (bridge *)ud;
  lua_State *S = provider_thread(br);
  int rc = 0;
  lua_pushinteger(S, (lua_Integer)tick);
  lua_pushinteger(S, slot);
  lua_pushlstring(S, (const char *)bytes, len);
  if (!call_provider(br, S, "import", 3, 2))
    return LUNA_EINVAL;
  if (lua_isinteger(S, -2)) {
    if (checksum != NULL)
      *checksum = (uint64_t)lua_tointeger(S, -2);
  }
  else {
    if (br->host > 0 && !br->failed) {
      snprintf(br->err, sizeof br->err, "%s", luaL_optstring(S, -1, "sim.import: bad bytes"));
      br->failed = true;
    }
    rc = LUNA_EINVAL;
  }
  lua_pop(S, 2);
  return rc;
}

static void p_confirm(void *ud, uint64_t tick) {
  bridge *br = (bridge *)ud;
  lua_State *S = provider_thread(br);
  lua_pushinteger(S, (lua_Integer)tick);
  (void)call_provider(br, S, "confirm", 1, 0);
}

static void p_mismatch(void *ud, const luna_sim_mismatch *m) {
  bridge *br = (bridge *)ud;
  lua_State *S = provider_thread(br);
  int host = br->host;
  lua_pushinteger(S, (lua_Integer)m->tick);
  lua_pushinteger(S, m->expected_slot);
  lua_pushinteger(S, m->actual_slot);
  br->host = 0; /* a mismatch is reported, whoever drives */
  (void)call_provider(br, S, "mismatch", 3, 0);
  br->host = host;
}

static void p_detach(void *ud, luna_sim *sim) {
  bridge *br = (bridge *)ud;
  (void)sim;
  if (!br->restarting)
    br->sim = NULL; /* pure C: this may run while the state closes */
}

static const luna_sim_provider provider_ops = {
    p_save, p_load, p_discard, p_tick, p_export, p_import, p_confirm, p_mismatch, p_detach};

/* sim_new(opts) -> bridge | nil, msg: a sim on the state's loop, from the
   fields the chunk checked: tick_ns, policy (0..4), max_ticks, max_batch,
   max_debt, history, check_distance, rate_scale, timing. */
static int l_sim_new(lua_State *L) {
  luna__binding *b = luna__check_binding(L);
  luna_sim_config cfg;
  bridge *br;
  int rc;
  luaL_checktype(L, 1, LUA_TTABLE);
  memset(&cfg, 0, sizeof cfg);
#define FIELD(name, dst, type)                                                 \
  if (lua_getfield(L, 1, name) != LUA_TNIL)                                    \
    dst = (type)lua_tonumber(L, -1);                                           \
  lua_pop(L, 1);
  FIELD("tick_ns", cfg.tick_ns, luna_ns)
  FIELD("policy", cfg.policy, luna_sim_policy)
  FIELD("max_ticks", cfg.max_ticks_per_frame, int)
  FIELD("max_batch", cfg.max_batch, int)
  FIELD("max_debt", cfg.max_debt, int)
  FIELD("history", cfg.history, int)
  FIELD("check_distance", cfg.check_distance, int)
  FIELD("rate_scale", cfg.rate_scale, double)
  FIELD("timing", cfg.timing, luna_timing)
#undef FIELD
  br = (bridge *)lua_newuserdatauv(L, sizeof *br, 0);
  memset(br, 0, sizeof *br);
  br->b = b;
  br->provider = br->self = LUA_NOREF;
  luaL_setmetatable(L, BRIDGE_MT);
  rc = luna_sim_new(b->loop, &cfg, &br->sim);
  if (rc != 0) {
    lua_pushnil(L);
    lua_pushstring(L, rc == LUNA_EALREADY ? "the loop has a simulation already (task.sim)"
                                          : luna_strerror(rc));
    return 2;
  }
  br->owned = true;
  return 1;
}

/* sim_of() -> bridge | nil: the loop's sim when the host made one. */
static int l_sim_of(lua_State *L) {
  luna__binding *b = luna__check_binding(L);
  luna_sim *sim = luna_sim_of(b->loop);
  bridge *br;
  if (sim == NULL)
    return 0;
  br = (bridge *)lua_newuserdatauv(L, sizeof *br, 0);
  memset(br, 0, sizeof *br);
  br->b = b;
  br->provider = br->self = LUA_NOREF;
  br->sim = sim;
  luaL_setmetatable(L, BRIDGE_MT);
  return 1;
}

/* bridge:attach(provider): becomes the sim's state provider. */
static int b_attach(lua_State *L) {
  bridge *br = check_bridge(L);
  int rc;
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_pushvalue(L, 2);
  br->provider = luaL_ref(L, LUA_REGISTRYINDEX);
  rc = luna_sim_set_provider(br->sim, &provider_ops, br);
  if (rc != 0) {
    luaL_unref(L, LUA_REGISTRYINDEX, br->provider);
    br->provider = LUA_NOREF;
    return luaL_error(L, "sim: cannot attach the state: %s", luna_strerror(rc));
  }
  lua_pushvalue(L, 1);
  br->self = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

/* Ends a host operation: raises the error a callback kept, or the code's. */
static int host_end(lua_State *L, bridge *br, int rc, const char *what) {
  bool failed = br->failed;
  br->host--;
  br->failed = false;
  if (failed) {
    lua_pushstring(L, br->err);
    return -1;
  }
  if (rc == LUNA_ESTATE) {
    lua_pushfstring(L, "%s: not allowed during a tick of the simulation (from the start of "
                       "its timing pair's first run to the end of its Last run, or in a "
                       "tick callback): roll back between ticks", what);
    return -1;
  }
  return rc;
}

#define HOST(L, br, what, call)                                                \
  do {                                                                         \
    int rc_;                                                                   \
    (br)->host++;                                                              \
    (br)->failed = false;                                                      \
    rc_ = (call);                                                              \
    rc_ = host_end(L, br, rc_, what);                                          \
    if (rc_ == -1)                                                             \
      return lua_error(L);                                                     \
    if (rc_ != 0) {                                                            \
      lua_pushnil(L);                                                          \
      lua_pushstring(L, luna_strerror(rc_));                                   \
      lua_pushinteger(L, rc_);                                                 \
      return 3;                                                                \
    }                                                                          \
  } while (0)

static uint64_t check_tick(lua_State *L, int idx) {
  lua_Integer t = luaL_checkinteger(L, idx);
  luaL_argcheck(L, t >= 0, idx, "expected a tick number >= 0");
  return (uint64_t)t;
}

/* bridge:step(flags) -> checksum | nil, code */
static int b_step(lua_State *L) {
  bridge *br = check_bridge(L);
  uint64_t sum = 0;
  HOST(L, br, "sim.step", luna_sim_step(br->sim, (uint32_t)luaL_optinteger(L, 2, 0)));
  if (luna_sim_checksum(br->sim, luna_sim_tick(br->sim), &sum) != 0)
    sum = 0;
  lua_pushinteger(L, (lua_Integer)sum);
  return 1;
}

static int b_save(lua_State *L) {
  bridge *br = check_bridge(L);
  uint64_t sum = 0;
  HOST(L, br, "sim.save", luna_sim_save(br->sim, &sum));
  lua_pushinteger(L, (lua_Integer)sum);
  return 1;
}

static int b_load(lua_State *L) {
  bridge *br = check_bridge(L);
  uint64_t t = check_tick(L, 2);
  HOST(L, br, "sim.load", luna_sim_load(br->sim, t));
  lua_pushinteger(L, (lua_Integer)t);
  return 1;
}

static int b_resimulate(lua_State *L) {
  bridge *br = check_bridge(L);
  uint64_t t = check_tick(L, 2), ran = 0;
  HOST(L, br, "sim.resimulate", luna_sim_resimulate(br->sim, t, &ran));
  lua_pushinteger(L, (lua_Integer)ran);
  return 1;
}

static int b_partial(lua_State *L) {
  bridge *br = check_bridge(L);
  luna_ns dt = (luna_ns)luaL_checkinteger(L, 2);
  HOST(L, br, "sim.partial", luna_sim_partial(br->sim, dt));
  lua_pushboolean(L, 1);
  return 1;
}

static int b_confirm(lua_State *L) {
  bridge *br = check_bridge(L);
  HOST(L, br, "sim.confirm", luna_sim_confirm(br->sim, check_tick(L, 2)));
  lua_pushboolean(L, 1);
  return 1;
}

static int write_buffer(void *ud, const void *bytes, size_t len) {
  luaL_addlstring((luaL_Buffer *)ud, (const char *)bytes, len);
  return 0;
}

static int b_export(lua_State *L) {
  bridge *br = check_bridge(L);
  uint64_t t = check_tick(L, 2);
  luaL_Buffer buf;
  luaL_buffinit(L, &buf);
  HOST(L, br, "sim.export", luna_sim_export(br->sim, t, write_buffer, &buf));
  luaL_pushresult(&buf);
  return 1;
}

static int b_import(lua_State *L) {
  bridge *br = check_bridge(L);
  uint64_t t = check_tick(L, 2), sum = 0;
  size_t len;
  const char *bytes = luaL_checklstring(L, 3, &len);
  HOST(L, br, "sim.import", luna_sim_import(br->sim, t, bytes, len, &sum));
  lua_pushinteger(L, (lua_Integer)sum);
  return 1;
}

/* bridge:checksum(tick) -> checksum | nil */
static int b_checksum(lua_State *L) {
  bridge *br = check_bridge(L);
  uint64_t sum;
  if (luna_sim_checksum(br->sim, check_tick(L, 2), &sum) != 0)
    return 0;
  lua_pushinteger(L, (lua_Integer)sum);
  return 1;
}

/* bridge:info() -> tick, head, confirmed, oldest | nil */
static int b_info(lua_State *L) {
  bridge *br = check_bridge(L);
  uint64_t oldest;
  lua_pushinteger(L, (lua_Integer)luna_sim_tick(br->sim));
  lua_pushinteger(L, (lua_Integer)luna_sim_head(br->sim));
  lua_pushinteger(L, (lua_Integer)luna_sim_confirmed(br->sim));
  if (luna_sim_oldest(br->sim, &oldest) == 0)
    lua_pushinteger(L, (lua_Integer)oldest);
  else
    lua_pushnil(L);
  return 4;
}

static int b_tick(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)luna_sim_tick(check_bridge(L)->sim));
  return 1;
}

static int b_alpha(lua_State *L) {
  lua_pushnumber(L, luna_sim_alpha(check_bridge(L)->sim));
  return 1;
}

/* bridge:config() -> {tick_ns, history, check_distance, policy, timing} */
static int b_config(lua_State *L) {
  bridge *br = check_bridge(L);
  luna_sim_config c;
  luna_sim_get_config(br->sim, &c);
  lua_createtable(L, 0, 8);
  lua_pushinteger(L, (lua_Integer)c.tick_ns);
  lua_setfield(L, -2, "tick_ns");
  lua_pushinteger(L, c.history);
  lua_setfield(L, -2, "history");
  lua_pushinteger(L, c.check_distance);
  lua_setfield(L, -2, "check_distance");
  lua_pushinteger(L, (lua_Integer)c.policy);
  lua_setfield(L, -2, "policy");
  lua_pushinteger(L, c.max_ticks_per_frame);
  lua_setfield(L, -2, "max_ticks");
  lua_pushnumber(L, luna_sim_rate_scale(br->sim));
  lua_setfield(L, -2, "rate_scale");
  lua_pushstring(L, luna_timing_name(c.timing));
  lua_setfield(L, -2, "timing");
  return 1;
}

/* bridge:stats() -> a table of luna_sim_stats */
static int b_stats(lua_State *L) {
  bridge *br = check_bridge(L);
  luna_sim_stats st;
  luna_sim_get_stats(br->sim, &st);
  lua_createtable(L, 0, 20);
#define STAT(name)                                                             \
  lua_pushinteger(L, (lua_Integer)st.name);                                    \
  lua_setfield(L, -2, #name);
  STAT(tick) STAT(head) STAT(confirmed) STAT(ticks) STAT(steps) STAT(batched_steps)
  STAT(batched_ticks) STAT(dropped_ticks) STAT(debt) STAT(debt_carried) STAT(slowdown_ticks)
  STAT(host_steps) STAT(resimulated_ticks) STAT(partial_ticks) STAT(rollbacks) STAT(saves)
  STAT(save_errors) STAT(checks) STAT(mismatches)
#undef STAT
  lua_pushnumber(L, luna_ns_to_seconds(st.dropped_ns));
  lua_setfield(L, -2, "dropped_time");
  return 1;
}

/* bridge:set_rate_scale(s) -> true | nil, msg */
static int b_set_rate_scale(lua_State *L) {
  bridge *br = check_bridge(L);
  if (luna_sim_set_rate_scale(br->sim, luaL_checknumber(L, 2)) != 0) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* bridge:restart() -> checksum: empties the history (registering the
   provider again does) and saves the present tick: what sim.state adds
   is in no snapshot taken before. */
static int b_restart(lua_State *L) {
  bridge *br = check_bridge(L);
  uint64_t sum = 0;
  int rc;
  br->restarting = true;
  rc = luna_sim_set_provider(br->sim, &provider_ops, br);
  br->restarting = false;
  if (rc != 0)
    return luaL_error(L, "sim: cannot start the history again: %s", luna_strerror(rc));
  HOST(L, br, "sim.state", luna_sim_save(br->sim, &sum));
  lua_pushinteger(L, (lua_Integer)sum);
  return 1;
}

/* Frees the sim (owned) or stops providing for it (the host's). */
static int release(lua_State *L, bridge *br) {
  int rc = 0;
  if (br->sim != NULL) {
    rc = br->owned ? luna_sim_free(br->sim) : luna_sim_set_provider(br->sim, NULL, NULL);
    if (rc != 0)
      return rc;
    br->sim = NULL;
  }
  if (L != NULL && !br->b->closing) {
    luaL_unref(L, LUA_REGISTRYINDEX, br->provider);
    luaL_unref(L, LUA_REGISTRYINDEX, br->self);
    br->provider = br->self = LUA_NOREF;
  }
  return 0;
}

/* bridge:close(): frees the sim task.sim_open made, or detaches from the host's. */
static int b_close(lua_State *L) {
  bridge *br = (bridge *)luaL_checkudata(L, 1, BRIDGE_MT);
  if (release(L, br) == LUNA_ESTATE)
    return luaL_error(L, "sim.close: called during a tick of the simulation");
  return 0;
}

/* The state closes (or the group is collected): the sim must never call
   this bridge again. An owned sim cannot be freed during its tick or a
   run of its pair (a state closed by the host hook): it is then only
   detached, and stays on the loop, which frees it. */
static int bridge_gc(lua_State *L) {
  bridge *br = (bridge *)luaL_checkudata(L, 1, BRIDGE_MT);
  if (br->sim != NULL && br->b->loop != NULL && release(NULL, br) != 0 &&
      luna_sim_set_provider(br->sim, NULL, NULL) == 0)
    br->sim = NULL;
  return 0;
}

static const luaL_Reg bridge_methods[] = {
    {"attach", b_attach},     {"step", b_step},         {"save", b_save},
    {"load", b_load},         {"resimulate", b_resimulate}, {"partial", b_partial},
    {"confirm", b_confirm},   {"export", b_export},     {"import", b_import},
    {"checksum", b_checksum}, {"info", b_info},         {"tick", b_tick},
    {"alpha", b_alpha},       {"config", b_config},     {"stats", b_stats},
    {"set_rate_scale", b_set_rate_scale}, {"restart", b_restart}, {"close", b_close},
    {NULL, NULL}};

/* ---- attaching a host's simulation (lunaloop_lua.h) ------------------------- */

static const char attach_key = 'a';

/* sim_set_attach(fn): the chunk's function that makes a group over a
   bridge (luna_lua_attach_sim calls it). */
static int l_sim_set_attach(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &attach_key);
  return 0;
}

static int attach_protected(lua_State *L) {
  luna_sim *sim = (luna_sim *)lua_touserdata(L, 1);
  bridge *br;
  lua_getglobal(L, "require"); /* the module, opened if need be */
  lua_pushliteral(L, "lunaloop");
  lua_call(L, 1, 0);
  luna__load_sim(L); /* the sim chunk, run the first time a state needs it */
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &attach_key) != LUA_TFUNCTION)
    return luaL_error(L, "the lunaloop module is not open in this state");
  br = (bridge *)lua_newuserdatauv(L, sizeof *br, 0);
  memset(br, 0, sizeof *br);
  br->b = luna__check_binding(L);
  br->provider = br->self = LUA_NOREF;
  br->sim = sim;
  luaL_setmetatable(L, BRIDGE_MT);
  lua_call(L, 1, 0);
  return 0;
}

LUNA_API int luna_lua_attach_sim(lua_State *L, luna_sim *sim) {
  luna__binding *b = L != NULL ? luna__get_binding(L) : NULL;
  int top;
  if (b == NULL || sim == NULL || b->loop == NULL || luna_sim_loop(sim) != b->loop)
    return LUNA_EINVAL;
  if (luna_sim_provider_ud(sim) != NULL)
    return LUNA_EALREADY;
  top = lua_gettop(L);
  lua_pushcfunction(L, attach_protected);
  lua_pushlightuserdata(L, sim);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    lua_settop(L, top);
    return luna_sim_provider_ud(sim) == NULL ? LUNA_ESTATE : 0;
  }
  return 0;
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
  if (luaL_newmetatable(L, BRIDGE_MT)) {
    lua_pushcfunction(L, bridge_gc);
    lua_setfield(L, -2, "__gc");
    luaL_newlib(L, bridge_methods);
    lua_setfield(L, -2, "__index");
    luna__protect_metatable(L);
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_sim_new);
  lua_setfield(L, -2, "sim_new");
  lua_pushcfunction(L, l_sim_of);
  lua_setfield(L, -2, "sim_of");
  lua_pushcfunction(L, l_sim_set_attach);
  lua_setfield(L, -2, "sim_set_attach");
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
