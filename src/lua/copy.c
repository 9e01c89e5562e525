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

enum { T_NIL, T_FALSE, T_TRUE, T_INT, T_FLT, T_STR, T_TABLE, T_CLASS };

/* ---- encoding ---------------------------------------------------------------------- */

typedef struct writer {
  char *p;
  size_t len, cap, limit;
  const luna__copy_payer *payer; /* who pays for the copy's growth (NULL: the host) */
  size_t charged; /* bytes charged to it so far */
  int classes; /* stack index of the metatable -> class number table, or 0 */
  int depth;   /* tables on the current path (open[0..depth)) */
  const void *open[MAX_DEPTH]; /* the tables on the current path: a cycle is one of them again */
  int keys[MAX_DEPTH];         /* the stack index of the key written in open[i] (0: none yet) */
  const char *what;
  const char *context; /* "between mods", "into a snapshot" */
  char path[160];
} writer;

/* ---- the checksum: 64-bit mixes (the splitmix64 finalizer) combined so
   that a table's pairs add up in any order: lua_next's order, which
   depends on the history of the table, never changes a checksum. */
static uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9u;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebu;
  x ^= x >> 31;
  return x;
}

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
  size_t i;
  for (i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3u;
  }
  return mix(h ^ n);
}

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
  if (w->len < w->cap) { /* the common case, without the checks of put */
    w->p[w->len++] = c;
    return;
  }
  put(L, w, &c, 1);
}

/* The path for messages ("value.a[2]", or "ships[3].x" without a root),
   made only when a message needs it: from the root and the keys of the
   tables open on the current path, which are on the stack (keys[i] is
   the stack index of the key being written in open[i]; 0 while that
   table's key itself is written). */
static const char *path_text(lua_State *L, writer *w) {
  /* Each key's text is made in seg; a path longer than w->path ends in
     "..." after the last key that fits, not in the middle of one. */
  char seg[64];
  size_t at = strlen(w->path);
  int i;
  for (i = 0; i < w->depth && w->keys[i] != 0; i++) {
    int key = w->keys[i], n;
    if (lua_type(L, key) == LUA_TSTRING)
      n = snprintf(seg, sizeof seg, at == 0 ? "%s" : ".%s", lua_tostring(L, key));
    else if (lua_type(L, key) == LUA_TNUMBER) {
      if (lua_isinteger(L, key))
        n = snprintf(seg, sizeof seg, "[%lld]", (long long)lua_tointeger(L, key));
      else
        n = snprintf(seg, sizeof seg, "[%g]", (double)lua_tonumber(L, key));
    } else
      n = snprintf(seg, sizeof seg, "[%s]", lua_toboolean(L, key) ? "true" : "false");
    if (n < 0 || (size_t)n >= sizeof seg || at + (size_t)n + 4 > sizeof w->path) {
      memcpy(w->path + at, "...", 4); /* at + 4 <= sizeof w->path: the loop's invariant */
      break;
    }
    memcpy(w->path + at, seg, (size_t)n + 1);
    at += (size_t)n;
  }
  return w->path[0] != '\0' ? w->path : "value";
}

static uint64_t write_value(lua_State *L, writer *w, int idx);

static uint64_t write_table(lua_State *L, writer *w, int idx) {
  size_t count_at;
  uint32_t count = 0;
  uint64_t sum = 0, cls = 0;
  int i;
  const void *self = lua_topointer(L, idx);
  if (w->depth >= MAX_DEPTH)
    luaL_error(L, "%s: the value is nested deeper than %d levels (at %s)", w->what, MAX_DEPTH,
               path_text(L, w));
  for (i = 0; i < w->depth; i++)
    if (w->open[i] == self)
      luaL_error(L, "%s: the value has a cycle (at %s)", w->what, path_text(L, w));
  if (w->classes != 0 && lua_getmetatable(L, idx)) {
    lua_Integer c;
    lua_rawget(L, w->classes);
    c = lua_tointeger(L, -1);
    lua_pop(L, 1);
    if (c > 0 && c < 256) {
      put_tag(L, w, T_CLASS);
      put_tag(L, w, (int)c);
      cls = (uint64_t)c;
    }
  }
  w->keys[w->depth] = 0;
  w->open[w->depth++] = self;
  put_tag(L, w, T_TABLE);
  count_at = w->len;
  put(L, w, &count, sizeof count);
  luaL_checkstack(L, 4, "value nested too deeply");
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    int key = lua_gettop(L) - 1;
    uint64_t hk, hv;
    int kt = lua_type(L, key);
    if (kt != LUA_TSTRING && kt != LUA_TNUMBER && kt != LUA_TBOOLEAN)
      luaL_error(L, "%s: a table key of type %s cannot be copied %s (at %s)", w->what,
                 luaL_typename(L, key), w->context, path_text(L, w));
    w->keys[w->depth - 1] = key;
    hk = write_value(L, w, key);
    hv = write_value(L, w, key + 1);
    sum += mix(hk ^ (hv * 0x9e3779b97f4a7c15u + 0x632be59bd9b4e019u));
    w->keys[w->depth - 1] = 0;
    lua_pop(L, 1);
    count++;
  }
  memcpy(w->p + count_at, &count, sizeof count);
  w->depth--;
  return mix(sum ^ ((uint64_t)count << 8) ^ (cls << 48) ^ 0x7461626c65u);
}

static uint64_t write_value(lua_State *L, writer *w, int idx) {
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
  case LUA_TNIL:
  case LUA_TNONE:
    put_tag(L, w, T_NIL);
    return 0x11;
  case LUA_TBOOLEAN:
    put_tag(L, w, lua_toboolean(L, idx) ? T_TRUE : T_FALSE);
    return lua_toboolean(L, idx) ? 0x33 : 0x22;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) {
      lua_Integer i = lua_tointeger(L, idx);
      put_tag(L, w, T_INT);
      put(L, w, &i, sizeof i);
      return mix((uint64_t)i ^ 0x696e74u);
    } else {
      lua_Number n = lua_tonumber(L, idx);
      uint64_t bits = 0;
      put_tag(L, w, T_FLT);
      put(L, w, &n, sizeof n);
      memcpy(&bits, &n, sizeof n < sizeof bits ? sizeof n : sizeof bits);
      return mix(bits ^ 0x666c74000000u);
    }
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
    return hash_bytes(s, len);
  }
  case LUA_TTABLE:
    return write_table(L, w, idx);
  default: /* a task is its thread: say so, a Task is what the user holds */
    return (uint64_t)luaL_error(L, "%s: a %s value%s cannot be copied %s (at %s)", w->what,
                                luaL_typename(L, idx),
                                lua_type(L, idx) == LUA_TTHREAD ? " (a task or a coroutine)" : "",
                                w->context, path_text(L, w));
  }
}

typedef struct encode_call {
  writer *w;
  uint64_t sum;
} encode_call;

/* In protected mode: (value, call, classes | nil): the stack indices of
   the caller's frame are not this one's, so what the writer reads is
   passed. */
static int serialize(lua_State *L) {
  encode_call *c = (encode_call *)lua_touserdata(L, 2);
  c->w->classes = lua_istable(L, 3) ? 3 : 0;
  c->sum = write_value(L, c->w, 1);
  return 0;
}

int luna__copy_encode_opts(lua_State *L, int idx, luna__copy_opts *o) {
  writer w;
  encode_call c;
  int st;
  idx = lua_absindex(L, idx);
  memset(&w, 0, sizeof w);
  w.p = o->buf;
  w.cap = o->buf != NULL ? o->cap : 0;
  w.payer = o->payer;
  w.limit = o->limit > UINT32_MAX ? UINT32_MAX : o->limit;
  w.what = o->what;
  w.context = o->context != NULL ? o->context : "between mods";
  w.classes = o->classes != 0 ? lua_absindex(L, o->classes) : 0;
  if (o->root != NULL)
    snprintf(w.path, sizeof w.path, "%s", o->root);
  c.w = &w;
  c.sum = 0;
  lua_pushcfunction(L, serialize);
  lua_pushvalue(L, idx);
  lua_pushlightuserdata(L, &c);
  if (w.classes != 0)
    lua_pushvalue(L, w.classes);
  else
    lua_pushnil(L);
  st = lua_pcall(L, 3, 0, 0);
  if (w.payer != NULL)
    w.payer->uncharge(w.payer->ud, w.charged);
  o->buf = w.p; /* grown or not, the caller's again (freed by it) */
  o->cap = w.cap;
  o->len = st == LUA_OK ? w.len : 0;
  o->checksum = c.sum;
  return st;
}

int luna__copy_encode(lua_State *L, int idx, size_t limit, const char *what,
                      const luna__copy_payer *payer, char **data, size_t *len) {
  luna__copy_opts o;
  int st;
  char *fit;
  memset(&o, 0, sizeof o);
  o.limit = limit;
  o.what = what;
  o.payer = payer;
  o.root = "value";
  st = luna__copy_encode_opts(L, idx, &o);
  if (st != LUA_OK) {
    free(o.buf);
    return st;
  }
  if (o.buf == NULL) { /* cannot happen: every value writes a tag */
    lua_pushliteral(L, "empty value");
    return LUA_ERRRUN;
  }
  /* The buffer doubled as it grew: keep only what the value needs. */
  if (o.len < o.cap && (fit = (char *)realloc(o.buf, o.len)) != NULL)
    o.buf = fit;
  *data = o.buf;
  *len = o.len;
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

/* Sets the metatable of the table on top of L to class c of the table at
   `classes` (0: none, and nothing is done). */
static void set_class(lua_State *L, int classes, int c) {
  if (classes == 0)
    return;
  if (lua_rawgeti(L, classes, c) == LUA_TTABLE)
    lua_setmetatable(L, -2);
  else
    lua_pop(L, 1);
}

static const char *read_value(lua_State *L, const char *p, int classes) {
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
  case T_CLASS: {
    int c = (unsigned char)*p++;
    p = read_value(L, p, classes);
    set_class(L, classes, c);
    return p;
  }
  default: { /* T_TABLE */
    uint32_t n, i;
    memcpy(&n, p, sizeof n);
    p += sizeof n;
    lua_createtable(L, 0, (int)(n > 1024 ? 1024 : n));
    for (i = 0; i < n; i++) {
      p = read_value(L, p, classes);
      p = read_value(L, p, classes);
      lua_rawset(L, -3);
    }
    return p;
  }
  }
}

void luna__copy_decode(lua_State *L, const char *data, size_t len) {
  (void)len;
  read_value(L, data, 0);
}

void luna__copy_decode_classes(lua_State *L, const char *data, size_t len, int classes) {
  (void)len;
  read_value(L, data, classes != 0 ? lua_absindex(L, classes) : 0);
}

/* The end of the value that starts at p (made by the encoder). */
static const char *skip_value(const char *p) {
  uint32_t n, i;
  switch (*p++) {
  case T_NIL:
  case T_FALSE:
  case T_TRUE:
    return p;
  case T_INT:
    return p + sizeof(lua_Integer);
  case T_FLT:
    return p + sizeof(lua_Number);
  case T_STR:
    memcpy(&n, p, sizeof n);
    return p + sizeof n + n;
  case T_CLASS:
    return skip_value(p + 1);
  default:
    memcpy(&n, p, sizeof n);
    p += sizeof n;
    for (i = 0; i < n; i++)
      p = skip_value(skip_value(p));
    return p;
  }
}

/* For the live table on top of L, about to be refilled from the table
   value at `body` (its T_TABLE tag): 0 when this restore has not reached
   it before (it is now recorded with body); 1 when it has, from bytes
   equal to body's (a table shared at both keys when the snapshot was
   taken: it stays shared, and is already filled); 2 when it has, from
   other bytes (shared only since, or under itself). */
static int mark_seen(lua_State *L, int seen, const char *body) {
  const char *first, *end;
  lua_pushvalue(L, -1);
  if (lua_rawget(L, seen) == LUA_TLIGHTUSERDATA) {
    first = (const char *)lua_touserdata(L, -1);
    lua_pop(L, 1);
    end = skip_value(first);
    return (size_t)(end - first) == (size_t)(skip_value(body) - body) &&
                   memcmp(first, body, (size_t)(end - first)) == 0
               ? 1
               : 2;
  }
  lua_pop(L, 1);
  lua_pushvalue(L, -1);
  lua_pushlightuserdata(L, (void *)body);
  lua_rawset(L, seen);
  return 0;
}

/* Restores the table body at p (just after its T_TABLE tag) into the
   table at dst: see luna__copy_restore. `seen` is the set of live tables
   already refilled by this restore (dst among them): a table reached
   again (at a second key, or under itself: the live tables may have been
   rearranged since the snapshot) is not refilled twice: the key keeps
   it when its bytes are the first reach's (shared in the snapshot's state
   too), else gets a new table. Returns the end of the body. */
static const char *restore_table(lua_State *L, int dst, const char *p, int classes, int seen) {
  uint32_t n, i, have = 0;
  const char *body;
  memcpy(&n, p, sizeof n);
  p += sizeof n;
  body = p;
  luaL_checkstack(L, 6, "value nested too deeply");
  for (i = 0; i < n; i++) {
    int cls = 0;
    const char *v;
    p = read_value(L, p, classes); /* the key: a scalar */
    v = p;
    if (*v == T_CLASS) {
      cls = (unsigned char)v[1];
      v += 2;
    }
    if (*v == T_TABLE) {
      int again;
      lua_pushvalue(L, -1);
      if (lua_rawget(L, dst) == LUA_TTABLE && (again = mark_seen(L, seen, v)) != 2) {
        if (again == 0) /* the same table, refilled */
          p = restore_table(L, lua_gettop(L), v + 1, classes, seen);
        else /* shared in the snapshot's state too: filled already */
          p = skip_value(p);
        if (cls != 0)
          set_class(L, classes, cls);
        lua_pop(L, 2);
        continue;
      }
      lua_pop(L, 1);
    }
    p = read_value(L, p, classes);
    lua_rawset(L, dst);
  }
  /* Keys the snapshot does not have: most often there are none, which
     counting tells without a set of the snapshot's keys. */
  lua_pushnil(L);
  while (lua_next(L, dst) != 0) {
    lua_pop(L, 1);
    have++;
  }
  if (have > n) {
    int keys;
    const char *q = body;
    lua_createtable(L, 0, (int)(n > 1024 ? 1024 : n));
    keys = lua_gettop(L);
    for (i = 0; i < n; i++) {
      q = read_value(L, q, 0);
      lua_pushboolean(L, 1);
      lua_rawset(L, keys);
      q = skip_value(q);
    }
    lua_pushnil(L);
    while (lua_next(L, dst) != 0) {
      lua_pop(L, 1);
      lua_pushvalue(L, -1);
      if (lua_rawget(L, keys) == LUA_TNIL) {
        lua_pushvalue(L, -2);
        lua_pushnil(L);
        lua_rawset(L, dst); /* clearing a field during the traversal is allowed */
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  return p;
}

int luna__copy_restore(lua_State *L, int idx, const char *data, size_t len, int classes) {
  const char *p = data;
  int seen;
  (void)len;
  idx = lua_absindex(L, idx);
  classes = classes != 0 ? lua_absindex(L, classes) : 0;
  if (*p == T_CLASS)
    p += 2;
  if (*p != T_TABLE || lua_type(L, idx) != LUA_TTABLE)
    return -1;
  lua_createtable(L, 0, 16);
  seen = lua_gettop(L);
  lua_pushvalue(L, idx);
  (void)mark_seen(L, seen, p);
  lua_pop(L, 1);
  restore_table(L, idx, p + 1, classes, seen);
  lua_pop(L, 1);
  return 0;
}

/* Checks the value at p..end, at most `depth` tables deep; returns its end
   or NULL. */
static const char *check_value(const char *p, const char *end, int depth, bool key) {
  uint32_t n, i;
  if (p >= end)
    return NULL;
  switch (*p++) {
  case T_NIL:
    return key ? NULL : p;
  case T_FALSE:
  case T_TRUE:
    return p;
  case T_INT:
    return end - p >= (ptrdiff_t)sizeof(lua_Integer) ? p + sizeof(lua_Integer) : NULL;
  case T_FLT: {
    lua_Number x;
    if (end - p < (ptrdiff_t)sizeof x)
      return NULL;
    memcpy(&x, p, sizeof x);
    return key && x != x ? NULL : p + sizeof x; /* NaN is no key */
  }
  case T_STR:
    if (end - p < (ptrdiff_t)sizeof n)
      return NULL;
    memcpy(&n, p, sizeof n);
    p += sizeof n;
    return (size_t)(end - p) >= n ? p + n : NULL;
  case T_CLASS:
    if (key || p >= end || p + 1 >= end || p[1] != T_TABLE)
      return NULL;
    return check_value(p + 1, end, depth, false);
  case T_TABLE:
    if (key || depth <= 0 || end - p < (ptrdiff_t)sizeof n)
      return NULL;
    memcpy(&n, p, sizeof n);
    p += sizeof n;
    for (i = 0; i < n && p != NULL; i++) {
      p = check_value(p, end, depth - 1, true);
      if (p != NULL)
        p = check_value(p, end, depth - 1, false);
    }
    return p;
  default:
    return NULL;
  }
}

bool luna__copy_valid(const char *data, size_t len, bool table) {
  if (len == 0 || (table && data[0] != T_TABLE && data[0] != T_CLASS))
    return false;
  return check_value(data, data + len, MAX_DEPTH, false) == data + len;
}
