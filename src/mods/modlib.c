/*
** modlib.c: the `mods` module a mod's code sees (mods.send, mods.subscribe
** and its Subscription objects, on_load/on_unload, is_loaded, list, stats)
** and the calls of a mod's subscribers when the bus delivers a message to
** it. Includes mods.h (and through it guard.h) and copy.h.
*/
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "copy.h"
#include "mods.h"

const char luna__on_load_key = 'L';
const char luna__on_unload_key = 'U';
static const char subs_key = 's';
static const char paused_key = 'p'; /* the array a paused delivery walks */
#define SUB_MT "lunaloop.mods.Subscription"

/* Subscriptions: full userdata, uservalue 1 the topic, 2 the function. In
   the mod's registry, subs_key holds a table from each topic to the array
   of its subscriptions in the order they were made. Removing one only
   marks it (an array is never changed under a delivery that walks it);
   subscribing replaces an array that is more than half removed ones by a
   compacted copy, and the last removal drops the topic's array, so an
   array holds at most about twice the live subscriptions. */
typedef struct sub {
  bool active;
} sub;

/* The topic argument at index 1, checked (raises naming `fname`). */
static const char *check_topic(lua_State *L, const char *fname, size_t *len) {
  char buf[96];
  const char *topic = luaL_checklstring(L, 1, len), *bad = luna__bus_bad_topic(topic, *len, buf, sizeof buf);
  if (bad != NULL)
    luaL_error(L, "%s: %s", fname, bad);
  return topic;
}

/* ---- delivery ----------------------------------------------------------------------------- */

/* True when the delivery must stop here and go on at the next frame: the
   frame's steps are spent. */
static bool must_pause(const luna__delivery *c) {
  return *c->steps >= LUNA__BUS_STEPS;
}

/* Protected, in the receiving mod's state: calls each of its subscribers
   of the message's topic, each in its own budget context, until the
   frame's steps run out (then the array and the place are kept). */
int luna__deliver_to_subscribers(lua_State *L) {
  luna__delivery *c = (luna__delivery *)lua_touserdata(L, 1);
  const luna__message *msg = c->msg;
  luna__mod *m = luna__mod_of(L);
  lua_Integer i, n;
  lua_settop(L, 0);
  if (c->resume) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &paused_key); /* 1 */
    lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &paused_key);
    i = c->pos;
    n = c->n;
  } else {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &subs_key);
    lua_pushlstring(L, msg->topic, msg->topic_len);
    lua_rawget(L, 1);
    lua_remove(L, 1); /* 1: the array, or nil */
    i = 0;
    n = lua_istable(L, 1) ? (lua_Integer)lua_rawlen(L, 1) : 0; /* later ones wait */
  }
  if (!lua_istable(L, 1))
    return 0;
  while (i < n) {
    int st;
    if (must_pause(c)) {
      lua_pushvalue(L, 1);
      lua_rawsetp(L, LUA_REGISTRYINDEX, &paused_key);
      c->paused = true;
      c->pos = i;
      c->n = n;
      return 0;
    }
    (*c->steps)++;
    lua_rawgeti(L, 1, ++i); /* 2 */
    if (!((sub *)lua_touserdata(L, 2))->active) {
      lua_settop(L, 1);
      continue;
    }
    lua_getiuservalue(L, 2, 2);
    luna__copy_decode(L, msg->data, msg->len);
    lua_pushlstring(L, msg->topic, msg->topic_len);
    lua_pushstring(L, msg->from);
    luna__budget_begin(m, L);
    st = luna__guard_pcall(L, 3, 0);
    luna__budget_end(m);
    if (st != LUA_OK) {
      int err = lua_gettop(L);
      luna__guard_report(L, err, lua_pushfstring(L, "subscriber of '%s'", msg->topic));
    }
    lua_settop(L, 1);
  }
  return 0;
}

/* ---- the mods module --------------------------------------------------------------------- */

/* mods.send(topic, value): copies value now; delivered at the next run of
   the set's timing to every subscriber of topic, in every mod. */
static int l_send(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  size_t topic_len, len;
  const char *topic = check_topic(L, "mods.send", &topic_len);
  char *data;
  const char *full = luna__bus_full(m->set, m, 0);
  if (luna__guard_closing(L)) /* a dying state reaches no other mod */
    return luaL_error(L, "mods.send: the mod is being unloaded");
  if (full != NULL) /* before copying anything */
    return luaL_error(L, "mods.send: %s", full);
  data = luna__mod_copy_out(L, 2, &len, "mods.send");
  if (luna__bus_post(m->set, m, topic, topic_len, data, len, &full) != 0)
    return luaL_error(L, "mods.send: %s", full);
  return 0;
}

static sub *check_sub(lua_State *L) {
  return (sub *)luaL_checkudata(L, 1, SUB_MT);
}

static int l_sub_remove(lua_State *L) {
  sub *s = check_sub(L);
  luna__mod *m = luna__mod_of(L);
  size_t len;
  const char *topic;
  if (!s->active)
    return 0;
  s->active = false;
  lua_getiuservalue(L, 1, 1);
  topic = lua_tolstring(L, -1, &len);
  luna__topics_remove(m->set, m, topic, len);
  if (luna__topics_count(m->set, m, topic, len) == 0) {
    /* the last one: drop the array (a raw set of nil allocates nothing) */
    lua_rawgetp(L, LUA_REGISTRYINDEX, &subs_key);
    lua_pushvalue(L, -2);
    lua_pushnil(L);
    lua_rawset(L, -3);
  }
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

/* Pushes a copy of the array at `idx` with only its active subscriptions. */
static void push_compacted(lua_State *L, int idx, size_t live) {
  lua_Integer i, j = 0, n = (lua_Integer)lua_rawlen(L, idx);
  lua_createtable(L, (int)(live < INT32_MAX ? live : INT32_MAX), 0);
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, idx, i);
    if (((sub *)lua_touserdata(L, -1))->active)
      lua_rawseti(L, -2, ++j);
    else
      lua_pop(L, 1);
  }
}

/* mods.subscribe(topic, fn) -> Subscription: fn(value, topic, sender) for
   each message on topic, from the next delivery on; sub:remove() (also
   __close) stops it. */
static int l_subscribe(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  size_t len, live;
  const char *topic = check_topic(L, "mods.subscribe", &len), *why;
  sub *s;
  luaL_checktype(L, 2, LUA_TFUNCTION);
  if (luna__guard_closing(L)) /* its index nodes are dropped as its state closes */
    return luaL_error(L, "mods.subscribe: the mod is being unloaded");
  lua_settop(L, 2);
  s = (sub *)lua_newuserdatauv(L, sizeof *s, 2); /* 3 */
  s->active = false; /* until the index has it */
  luaL_setmetatable(L, SUB_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, 3, 1);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, 3, 2);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &subs_key); /* 4 */
  lua_pushvalue(L, 1);
  if (lua_rawget(L, 4) != LUA_TTABLE) { /* 5: the topic's array */
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 5);
    lua_rawset(L, 4);
  }
  live = luna__topics_count(m->set, m, topic, len);
  if (lua_rawlen(L, 5) >= 2 * live + 8) {
    push_compacted(L, 5, live);
    lua_replace(L, 5);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 5);
    lua_rawset(L, 4);
  }
  lua_pushvalue(L, 3);
  lua_rawseti(L, 5, (lua_Integer)lua_rawlen(L, 5) + 1);
  if (!luna__topics_add(m->set, m, topic, len, &why))
    return luaL_error(L, "mods.subscribe: %s", why); /* stays in the array, removed */
  s->active = true;
  lua_settop(L, 3);
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

/* mods.stats() -> {memory, host_memory, messages_waiting, memory_limit,
   instruction_limit, time_limit (seconds per frame; negative: none),
   budget_overruns, memory_overruns, time_overruns, max_overruns, loads} */
static int l_stats(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  lua_createtable(L, 0, 11);
  set_int(L, "memory", (lua_Integer)m->mem_used);
  set_int(L, "host_memory", (lua_Integer)m->host_bytes);
  set_int(L, "messages_waiting", (lua_Integer)m->queued);
  set_int(L, "memory_limit", (lua_Integer)m->mem_limit);
  set_int(L, "instruction_limit", (lua_Integer)m->budget);
  set_int(L, "budget_overruns", (lua_Integer)m->budget_overruns);
  set_int(L, "memory_overruns", (lua_Integer)m->memory_overruns);
  set_int(L, "time_overruns", (lua_Integer)m->time_overruns);
  lua_pushnumber(L, (lua_Number)m->time_limit / 1e9);
  lua_setfield(L, -2, "time_limit");
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
  luna__guard_protect_metatable(L); /* getmetatable gives its name */
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
