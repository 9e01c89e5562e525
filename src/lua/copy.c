/*
** copy.c: values copied between Lua states as bytes (copy.h says what
** crosses). Serializing happens at the send, so changing the table
** afterwards changes nothing the receivers get.
**
** Encoding: a tag byte, then for integers and floats 8 bytes (host order:
** the bytes never leave the process), for strings a uint32 length and the
** bytes, for tables a uint32 pair count and the pairs (key, value).
** Includes only copy.h and Lua.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "copy.h"

#define MAX_DEPTH 100

enum { T_NIL, T_FALSE, T_TRUE, T_INT, T_FLT, T_STR, T_TABLE };

/* ---- encoding ---------------------------------------------------------------------- */

typedef struct writer {
  char *p;
  size_t len, cap, limit;
  const luna__copy_payer *payer; /* who pays for the copy's growth (NULL: the host) */
  size_t charged; /* bytes charged to it so far */
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
    if (w->payer != NULL && !w->payer->charge(w->payer->ud, cap - w->cap))
      luaL_error(L, "%s: %s", w->what, w->payer->refused);
    w->charged += w->payer != NULL ? cap - w->cap : 0;
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

int luna__copy_encode(lua_State *L, int idx, size_t limit, const char *what,
                      const luna__copy_payer *payer, char **data, size_t *len) {
  writer w;
  int st;
  char *fit;
  idx = lua_absindex(L, idx);
  memset(&w, 0, sizeof w);
  w.payer = payer;
  w.limit = limit > UINT32_MAX ? UINT32_MAX : limit;
  w.what = what;
  strcpy(w.path, "value");
  lua_pushcfunction(L, serialize);
  lua_pushvalue(L, idx);
  lua_pushlightuserdata(L, &w);
  st = lua_pcall(L, 2, 0, 0);
  if (payer != NULL)
    payer->uncharge(payer->ud, w.charged);
  if (st != LUA_OK) {
    free(w.p);
    return st;
  }
  if (w.p == NULL) { /* cannot happen: every value writes a tag */
    lua_pushliteral(L, "empty value");
    return LUA_ERRRUN;
  }
  /* The buffer doubled as it grew: keep only what the value needs. */
  if (w.len < w.cap && (fit = (char *)realloc(w.p, w.len)) != NULL)
    w.p = fit;
  *data = w.p;
  *len = w.len;
  return LUA_OK;
}

char *luna__copy_encode_string(const char *s, size_t len, size_t *out_len) {
  uint32_t n = (uint32_t)len;
  char *data = (char *)malloc(1 + sizeof n + len);
  if (data == NULL)
    return NULL;
  data[0] = T_STR;
  memcpy(data + 1, &n, sizeof n);
  if (len > 0)
    memcpy(data + 1 + sizeof n, s, len);
  *out_len = 1 + sizeof n + len;
  return data;
}

/* ---- decoding ---------------------------------------------------------------------- */

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

void luna__copy_decode(lua_State *L, const char *data, size_t len) {
  (void)len;
  read_value(L, data);
}
