/*
** bus.c: values copied between Lua states, the message bus, and the `mods`
** module a mod's code sees.
**
** A value crosses as bytes: nil, booleans, integers, floats, strings, and
** tables whose keys are strings, numbers or booleans and whose values are
** any of these. Functions, userdata, threads, and table keys of other types
** raise at the sending site; so do cycles (a table inside itself), values
** nested more than MAX_DEPTH levels and values larger than the set's
** message_limit. A table reached twice (not a cycle) is copied twice.
** Metatables are not copied. Serializing happens at the send, so changing
** the table afterwards changes nothing the receivers get.
**
** Encoding: a tag byte, then for integers and floats 8 bytes (host order:
** the bytes never leave the process), for strings a uint32 length and the
** bytes, for tables a uint32 pair count and the pairs (key, value).
**
** Delivery: the set's item calls luna__bus_deliver at each run of its
** timing. The messages queued before that moment are delivered in the order
** they were sent; for each message, mods in load order, and within a mod
** its subscriptions in the order they were made. Each subscriber call gets
** its own copy of the value and its own instruction budget; an error in it
** is reported like a failing callback and does not stop the others.
** Messages sent during a delivery wait for the next one.
*/
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "guard.h"
#include "mods.h"

#define MAX_DEPTH 100
#define MAX_QUEUE 65536 /* messages waiting; a flood past this raises at the sender */
/* Bytes waiting, as a multiple of the message limit (64 MiB by default):
   the copies are the host's memory, outside every mod's cap, so a mod
   sending big values in a loop would otherwise grow the host without
   bound until the next delivery. */
#define MAX_QUEUE_MESSAGES_OF_LIMIT 64

enum { T_NIL, T_FALSE, T_TRUE, T_INT, T_FLT, T_STR, T_TABLE };

const char luna__on_load_key = 'L';
const char luna__on_unload_key = 'U';
static const char subs_key = 's';
#define SUB_MT "lunaloop.mods.Subscription"

/* ---- serializing ------------------------------------------------------------------- */

typedef struct writer {
  char *p;
  size_t len, cap, limit;
  int visiting; /* stack index of the table of tables being copied */
  const char *what;
  char path[160];
} writer;

static void put(lua_State *L, writer *w, const void *src, size_t n) {
  if (w->len + n > w->limit)
    luaL_error(L, "%s: the value is larger than the limit of %I bytes", w->what,
               (lua_Integer)w->limit);
  if (w->len + n > w->cap) {
    size_t cap = w->cap ? w->cap : 64;
    char *p;
    while (cap < w->len + n)
      cap *= 2;
    p = (char *)realloc(w->p, cap);
    if (p == NULL)
      luaL_error(L, "%s: out of memory", w->what);
    w->p = p;
    w->cap = cap;
  }
  memcpy(w->p + w->len, src, n);
  w->len += n;
}

static void put_tag(lua_State *L, writer *w, int tag) {
  char c = (char)tag;
  put(L, w, &c, 1);
}

/* Appends ".key" or "[key]" to the path for messages; returns the old length. */
static size_t path_push(lua_State *L, writer *w, int key) {
  size_t old = strlen(w->path), room = sizeof w->path - old;
  if (lua_type(L, key) == LUA_TSTRING)
    snprintf(w->path + old, room, ".%s", lua_tostring(L, key));
  else if (lua_type(L, key) == LUA_TNUMBER) {
    if (lua_isinteger(L, key))
      snprintf(w->path + old, room, "[%lld]", (long long)lua_tointeger(L, key));
    else
      snprintf(w->path + old, room, "[%g]", (double)lua_tonumber(L, key));
  } else
    snprintf(w->path + old, room, "[%s]", lua_toboolean(L, key) ? "true" : "false");
  return old;
}

static void write_value(lua_State *L, writer *w, int idx, int depth);

static void write_table(lua_State *L, writer *w, int idx, int depth) {
  size_t count_at;
  uint32_t count = 0;
  if (depth >= MAX_DEPTH)
    luaL_error(L, "%s: the value is nested deeper than %d levels (at %s)", w->what, MAX_DEPTH,
               w->path);
  lua_pushvalue(L, idx);
  if (lua_rawget(L, w->visiting) != LUA_TNIL)
    luaL_error(L, "%s: the value has a cycle (at %s)", w->what, w->path);
  lua_pop(L, 1);
  lua_pushvalue(L, idx);
  lua_pushboolean(L, 1);
  lua_rawset(L, w->visiting);
  put_tag(L, w, T_TABLE);
  count_at = w->len;
  put(L, w, &count, sizeof count);
  luaL_checkstack(L, 4, "value nested too deeply");
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    int key = lua_gettop(L) - 1;
    size_t old;
    int kt = lua_type(L, key);
    if (kt != LUA_TSTRING && kt != LUA_TNUMBER && kt != LUA_TBOOLEAN)
      luaL_error(L, "%s: a table key of type %s cannot be copied between mods (at %s)",
                 w->what, luaL_typename(L, key), w->path);
    old = path_push(L, w, key);
    write_value(L, w, key, depth + 1);
    write_value(L, w, key + 1, depth + 1);
    w->path[old] = '\0';
    lua_pop(L, 1);
    count++;
  }
  memcpy(w->p + count_at, &count, sizeof count);
  lua_pushvalue(L, idx);
  lua_pushnil(L);
  lua_rawset(L, w->visiting);
}

static void write_value(lua_State *L, writer *w, int idx, int depth) {
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
  case LUA_TNIL:
  case LUA_TNONE:
    put_tag(L, w, T_NIL);
    break;
  case LUA_TBOOLEAN:
    put_tag(L, w, lua_toboolean(L, idx) ? T_TRUE : T_FALSE);
    break;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) {
      lua_Integer i = lua_tointeger(L, idx);
      put_tag(L, w, T_INT);
      put(L, w, &i, sizeof i);
    } else {
      lua_Number n = lua_tonumber(L, idx);
      put_tag(L, w, T_FLT);
      put(L, w, &n, sizeof n);
    }
    break;
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    uint32_t n = (uint32_t)len;
    if (len > w->limit)
      luaL_error(L, "%s: the value is larger than the limit of %I bytes", w->what,
                 (lua_Integer)w->limit);
    put_tag(L, w, T_STR);
    put(L, w, &n, sizeof n);
    put(L, w, s, len);
    break;
  }
  case LUA_TTABLE:
    write_table(L, w, idx, depth);
    break;
  default:
    luaL_error(L, "%s: a %s value cannot be copied between mods (at %s)", w->what,
               luaL_typename(L, idx), w->path);
  }
}

static int serialize(lua_State *L) {
  writer *w = (writer *)lua_touserdata(L, 2);
  lua_newtable(L);
  w->visiting = lua_gettop(L);
  write_value(L, w, 1, 0);
  return 0;
}

/* Serializes the value at idx in protected mode; on error returns the Lua
   status with the message on top of L and nothing allocated. */
static int serialize_protected(lua_State *L, int idx, size_t limit, const char *what,
                               char **data, size_t *len) {
  writer w;
  int st;
  idx = lua_absindex(L, idx);
  memset(&w, 0, sizeof w);
  w.limit = limit > UINT32_MAX ? UINT32_MAX : limit;
  w.what = what;
  strcpy(w.path, "value");
  lua_pushcfunction(L, serialize);
  lua_pushvalue(L, idx);
  lua_pushlightuserdata(L, &w);
  st = lua_pcall(L, 2, 0, 0);
  if (st != LUA_OK) {
    free(w.p);
    return st;
  }
  if (w.p == NULL) { /* cannot happen: every value writes a tag */
    lua_pushliteral(L, "empty value");
    return LUA_ERRRUN;
  }
  *data = w.p;
  *len = w.len;
  return LUA_OK;
}

char *luna__copy_out(lua_State *L, int idx, size_t limit, size_t *len, const char *what) {
  char *data = NULL;
  if (serialize_protected(L, idx, limit, what, &data, len) != LUA_OK)
    lua_error(L);
  return data;
}

/* ---- deserializing ------------------------------------------------------------------- */

static const char *read_value(lua_State *L, const char *p) {
  luaL_checkstack(L, 3, "value nested too deeply");
  switch (*p++) {
  case T_NIL:
    lua_pushnil(L);
    return p;
  case T_FALSE:
    lua_pushboolean(L, 0);
    return p;
  case T_TRUE:
    lua_pushboolean(L, 1);
    return p;
  case T_INT: {
    lua_Integer i;
    memcpy(&i, p, sizeof i);
    lua_pushinteger(L, i);
    return p + sizeof i;
  }
  case T_FLT: {
    lua_Number n;
    memcpy(&n, p, sizeof n);
    lua_pushnumber(L, n);
    return p + sizeof n;
  }
  case T_STR: {
    uint32_t n;
    memcpy(&n, p, sizeof n);
    p += sizeof n;
    lua_pushlstring(L, p, n);
    return p + n;
  }
  default: { /* T_TABLE */
    uint32_t n, i;
    memcpy(&n, p, sizeof n);
    p += sizeof n;
    lua_createtable(L, 0, (int)(n > 1024 ? 1024 : n));
    for (i = 0; i < n; i++) {
      p = read_value(L, p);
      p = read_value(L, p);
      lua_rawset(L, -3);
    }
    return p;
  }
  }
}

void luna__copy_in(lua_State *L, const char *data, size_t len) {
  (void)len;
  read_value(L, data);
}

/* ---- the queue --------------------------------------------------------------------------- */

static char *dup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = (char *)malloc(n);
  if (p != NULL)
    memcpy(p, s, n);
  return p;
}

/* Why the bus cannot take `len` more bytes now (a message to raise or to
   put in last_error), or NULL when it can. */
static const char *bus_full(const luna_mods *set, size_t len) {
  size_t max_bytes = set->cfg.message_limit * MAX_QUEUE_MESSAGES_OF_LIMIT;
  if (set->nqueue >= MAX_QUEUE)
    return "the bus is full (65536 messages waiting)";
  if (len > max_bytes || set->queue_bytes > max_bytes - len)
    return "the bus is full (64 times the message limit in bytes waiting)";
  return NULL;
}

/* Frees `data`; *why says why the post failed (a static string). */
static int refuse_post(char *data, const char **why, const char *reason) {
  free(data);
  *why = reason;
  return LUNA_ENOMEM;
}

int luna__bus_post(luna_mods *set, const char *topic, const char *from, char *data, size_t len,
                   const char **why) {
  luna__message *msg;
  const char *full = bus_full(set, len);
  if (full != NULL)
    return refuse_post(data, why, full);
  if (set->nqueue == set->capqueue) {
    size_t cap = set->capqueue ? set->capqueue * 2 : 16;
    luna__message *q = (luna__message *)realloc(set->queue, cap * sizeof *q);
    if (q == NULL)
      return refuse_post(data, why, "out of memory");
    set->queue = q;
    set->capqueue = cap;
  }
  msg = &set->queue[set->nqueue];
  msg->topic = dup(topic);
  msg->from = dup(from);
  msg->data = data;
  msg->len = len;
  if (msg->topic == NULL || msg->from == NULL) {
    free(msg->topic);
    free(msg->from);
    return refuse_post(data, why, "out of memory");
  }
  set->nqueue++;
  set->queue_bytes += len;
  return 0;
}

static void free_message(luna__message *msg) {
  free(msg->topic);
  free(msg->from);
  free(msg->data);
}

void luna__bus_clear(luna_mods *set) {
  size_t i;
  for (i = 0; i < set->nqueue; i++)
    free_message(&set->queue[i]);
  free(set->queue);
  set->queue = NULL;
  set->nqueue = set->capqueue = 0;
  set->queue_bytes = 0;
}

/* Subscriptions: full userdata, uservalue 1 the topic, 2 the function. */
typedef struct sub {
  bool active;
} sub;

/* Protected, in the receiving mod's state: calls each of its subscribers of
   the message's topic, each in its own budget context. */
static int deliver_one(lua_State *L) {
  const luna__message *msg = (const luna__message *)lua_touserdata(L, 1);
  luna__mod *m = luna__mod_of(L);
  luna__binding *b = luna__get_binding(L);
  lua_Integer i, j, n;
  lua_settop(L, 0);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &subs_key); /* 1 */
  /* Compact removed subscriptions first (never while iterating). */
  n = (lua_Integer)lua_rawlen(L, 1);
  for (i = 1, j = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    if (((sub *)lua_touserdata(L, -1))->active)
      lua_rawseti(L, 1, j++);
    else
      lua_pop(L, 1);
  }
  for (i = j; i <= n; i++) {
    lua_pushnil(L);
    lua_rawseti(L, 1, i);
  }
  n = j - 1; /* subscriptions made during this delivery wait for the next */
  for (i = 1; i <= n; i++) {
    int st, base;
    lua_rawgeti(L, 1, i); /* 2 */
    if (!((sub *)lua_touserdata(L, 2))->active) {
      lua_settop(L, 1);
      continue;
    }
    lua_getiuservalue(L, 2, 1);
    if (strcmp(lua_tostring(L, -1), msg->topic) != 0) {
      lua_settop(L, 1);
      continue;
    }
    lua_pop(L, 1);
    base = lua_gettop(L);
    lua_pushcfunction(L, luna__msgh); /* base + 1 */
    lua_getiuservalue(L, 2, 2);
    luna__copy_in(L, msg->data, msg->len);
    lua_pushstring(L, msg->topic);
    lua_pushstring(L, msg->from);
    luna__budget_begin(m, L);
    st = lua_pcall(L, 3, 0, base + 1);
    luna__budget_end(m);
    if (st != LUA_OK && b != NULL) {
      int err = lua_gettop(L);
      const char *what = lua_pushfstring(L, "subscriber of '%s'", msg->topic);
      luna__push_last_traceback(L);
      luna__report(b, L, err, err + 2, 0, what);
    }
    lua_settop(L, 1);
  }
  return 0;
}

void luna__bus_deliver(luna_mods *set) {
  size_t i, n = set->nqueue;
  for (i = 0; i < n; i++) {
    luna__message msg = set->queue[i]; /* the queue may grow (move) meanwhile */
    size_t k;
    for (k = 0; k < set->nmods; k++) {
      luna__mod *m = set->mods[k];
      if (m->state != LUNA_MOD_LOADED || m->L == NULL || m->disable_pending)
        continue;
      if (!luna__mod_pcall(m, deliver_one, &msg, false))
        luna__mods_report(set, m->man.name, "message '%s' from '%s' not delivered: %s",
                          msg.topic, msg.from, m->last_error);
    }
    set->queue_bytes -= msg.len;
    free_message(&msg);
  }
  if (n > 0 && set->nqueue > n)
    memmove(set->queue, set->queue + n, (set->nqueue - n) * sizeof *set->queue);
  set->nqueue -= n;
}

/* ---- the mods module --------------------------------------------------------------------- */

/* mods.send(topic, value): copies value now; delivered at the next run of
   the set's timing to every subscriber of topic, in every mod. */
static int l_send(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  const char *topic = luaL_checkstring(L, 1);
  size_t len;
  char *data;
  const char *full = bus_full(m->set, 0);
  if (luna__guard_closing(L)) /* a dying state reaches no other mod */
    return luaL_error(L, "mods.send: the mod is being unloaded");
  if (full != NULL) /* before copying anything */
    return luaL_error(L, "mods.send: %s", full);
  data = luna__copy_out(L, 2, m->set->cfg.message_limit, &len, "mods.send");
  if (luna__bus_post(m->set, topic, m->man.name, data, len, &full) != 0)
    return luaL_error(L, "mods.send: %s", full);
  return 0;
}

static sub *check_sub(lua_State *L) {
  return (sub *)luaL_checkudata(L, 1, SUB_MT);
}

static int l_sub_remove(lua_State *L) {
  check_sub(L)->active = false;
  return 0;
}

static int l_sub_active(lua_State *L) {
  lua_pushboolean(L, check_sub(L)->active);
  return 1;
}

static int l_sub_tostring(lua_State *L) {
  sub *s = check_sub(L);
  lua_getiuservalue(L, 1, 1);
  lua_pushfstring(L, "Subscription(%s, %s)", lua_tostring(L, -1),
                  s->active ? "active" : "removed");
  return 1;
}

/* mods.subscribe(topic, fn) -> Subscription: fn(value, topic, sender) for
   each message on topic, from the next delivery on; sub:remove() (also
   __close) stops it. */
static int l_subscribe(lua_State *L) {
  sub *s;
  luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  if (luna__guard_closing(L))
    return luaL_error(L, "mods.subscribe: the mod is being unloaded");
  s = (sub *)lua_newuserdatauv(L, sizeof *s, 2);
  s->active = true;
  luaL_setmetatable(L, SUB_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, -2, 2);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &subs_key);
  lua_pushvalue(L, -2);
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  lua_pop(L, 1);
  return 1;
}

static int set_handler(lua_State *L, const void *key) {
  if (!lua_isnil(L, 1))
    luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, key);
  return 0;
}

/* mods.on_load(fn): on a reload, fn(state) gets a copy of what the previous
   instance's on_unload returned, right after the new mod.lua's main chunk
   first awaits or ends. mods.on_unload(fn): fn() runs before the mod is
   unloaded or reloaded; on a reload its result (copied like a message) goes
   to on_load. nil removes the handler. */
static int l_on_load(lua_State *L) {
  return set_handler(L, &luna__on_load_key);
}

static int l_on_unload(lua_State *L) {
  return set_handler(L, &luna__on_unload_key);
}

/* mods.is_loaded(name) -> boolean */
static int l_is_loaded(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  const char *name = luaL_checkstring(L, 1);
  size_t i;
  for (i = 0; i < m->set->nmods; i++) {
    luna__mod *o = m->set->mods[i];
    if (o->state == LUNA_MOD_LOADED && strcmp(o->man.name, name) == 0) {
      lua_pushboolean(L, 1);
      return 1;
    }
  }
  lua_pushboolean(L, 0);
  return 1;
}

/* mods.list() -> {name, ...}: the loaded mods in load order. */
static int l_list(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  size_t i;
  lua_Integer n = 0;
  lua_newtable(L);
  for (i = 0; i < m->set->nmods; i++) {
    luna__mod *o = m->set->mods[i];
    if (o->state == LUNA_MOD_LOADED) {
      lua_pushstring(L, o->man.name);
      lua_rawseti(L, -2, ++n);
    }
  }
  return 1;
}

static void set_int(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

/* mods.stats() -> {memory, memory_limit, instruction_limit,
   budget_overruns, memory_overruns, max_overruns, loads} */
static int l_stats(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  lua_createtable(L, 0, 7);
  set_int(L, "memory", (lua_Integer)m->mem_used);
  set_int(L, "memory_limit", (lua_Integer)m->mem_limit);
  set_int(L, "instruction_limit", (lua_Integer)m->budget);
  set_int(L, "budget_overruns", (lua_Integer)m->budget_overruns);
  set_int(L, "memory_overruns", (lua_Integer)m->memory_overruns);
  set_int(L, "max_overruns", (lua_Integer)m->set->cfg.max_overruns);
  set_int(L, "loads", (lua_Integer)m->loads);
  return 1;
}

static const luaL_Reg mods_funcs[] = {
    {"send", l_send},       {"subscribe", l_subscribe}, {"on_load", l_on_load},
    {"on_unload", l_on_unload}, {"is_loaded", l_is_loaded}, {"list", l_list},
    {"stats", l_stats},     {NULL, NULL}};

static const luaL_Reg sub_methods[] = {
    {"remove", l_sub_remove}, {"active", l_sub_active}, {NULL, NULL}};

static const luaL_Reg sub_meta[] = {
    {"__close", l_sub_remove}, {"__tostring", l_sub_tostring}, {NULL, NULL}};

int luna__open_mods_module(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &subs_key);
  luaL_newmetatable(L, SUB_MT);
  luaL_setfuncs(L, sub_meta, 0);
  lua_pushliteral(L, SUB_MT); /* protected: getmetatable gives its name */
  lua_setfield(L, -2, "__metatable");
  luaL_newlib(L, sub_methods);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_newlib(L, mods_funcs);
  lua_pushstring(L, m->man.name);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, m->man.version);
  lua_setfield(L, -2, "version");
  return 1;
}

/* ---- from the host ------------------------------------------------------------------------ */

/* luna__bus_post from the host: a refusal's reason goes to last_error. */
static int host_post(luna_mods *set, const char *topic, char *data, size_t len) {
  const char *why;
  int rc = luna__bus_post(set, topic, "host", data, len, &why);
  if (rc != 0)
    snprintf(set->last_error, sizeof set->last_error, "%s", why);
  return rc;
}

LUNA_API int luna_mods_send(luna_mods *set, const char *topic, lua_State *L, int idx) {
  char *data = NULL;
  const char *full;
  size_t len;
  int st;
  if (set == NULL || topic == NULL || L == NULL)
    return LUNA_EINVAL;
  if (lua_type(L, idx) == LUA_TNONE) {
    snprintf(set->last_error, sizeof set->last_error, "luna_mods_send: no value at index %d",
             idx);
    return LUNA_EINVAL;
  }
  if ((full = bus_full(set, 0)) != NULL) { /* before copying anything */
    snprintf(set->last_error, sizeof set->last_error, "%s", full);
    return LUNA_ENOMEM;
  }
  st = serialize_protected(L, idx, set->cfg.message_limit, "luna_mods_send", &data, &len);
  if (st != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    snprintf(set->last_error, sizeof set->last_error, "%s", msg != NULL ? msg : "error");
    lua_pop(L, 1);
    return st == LUA_ERRMEM ? LUNA_ENOMEM : LUNA_EINVAL;
  }
  return host_post(set, topic, data, len);
}

LUNA_API int luna_mods_send_string(luna_mods *set, const char *topic, const char *s, size_t len) {
  char *data;
  uint32_t n = (uint32_t)len;
  if (set == NULL || topic == NULL || (s == NULL && len > 0))
    return LUNA_EINVAL;
  if (len > set->cfg.message_limit || len > UINT32_MAX) {
    snprintf(set->last_error, sizeof set->last_error,
             "luna_mods_send_string: the value is larger than the limit");
    return LUNA_EINVAL;
  }
  data = (char *)malloc(1 + sizeof n + len);
  if (data == NULL)
    return LUNA_ENOMEM;
  data[0] = T_STR;
  memcpy(data + 1, &n, sizeof n);
  if (len > 0)
    memcpy(data + 1 + sizeof n, s, len);
  return host_post(set, topic, data, 1 + sizeof n + len);
}
