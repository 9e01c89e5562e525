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
** Messages sent during a delivery wait for the next one. A subscriber call
** also counts toward the mod's time budget of the frame; once a receiving
** mod has spent it (luna__mod_held), the delivery stops at that mod and
** goes on from it at the next frame, so its messages wait for it rather
** than fail.
**
** What a delivery costs: the receiving mods come from the topic index
** (topics.c), so a message costs a hash lookup plus its subscribers,
** whatever other subscriptions exist. A frame does at most LUNA__BUS_STEPS
** steps (taking a message off the queue is one, visiting a subscription
** another); the rest waits for the next frame, in order, from the very
** subscription where it stopped, so a fan-out to more subscribers than
** that spans frames and nothing is dropped. deliver_message is the one
** place that calls into a receiving mod.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "guard.h"
#include "mods.h"

#define MAX_DEPTH 100
#define MAX_QUEUE 65536 /* messages of one sender waiting; past this its send raises */
/* Bytes of one sender waiting, as a multiple of the message limit (64 MiB
   by default): the host has no cap of its own, and a mod's waiting copies
   also count against its cap. */
#define MAX_QUEUE_MESSAGES_OF_LIMIT 64

enum { T_NIL, T_FALSE, T_TRUE, T_INT, T_FLT, T_STR, T_TABLE };

const char luna__on_load_key = 'L';
const char luna__on_unload_key = 'U';
static const char subs_key = 's';
static const char paused_key = 'p'; /* the array a paused delivery walks */
#define SUB_MT "lunaloop.mods.Subscription"

/* ---- serializing ------------------------------------------------------------------- */

typedef struct writer {
  char *p;
  size_t len, cap, limit;
  luna__mod *m;   /* the copy is host memory charged to this mod (NULL: the host) */
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
    if (w->m != NULL && !luna__mod_charge(w->m, cap - w->cap))
      luaL_error(L, "%s: " LUNA__CAP_REACHED, w->what);
    w->charged += w->m != NULL ? cap - w->cap : 0;
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
   status with the message on top of L and nothing allocated. While the
   copy grows it is charged to m's cap (a mod's send; NULL for the host's),
   and given back at the end: the caller charges what it keeps. */
static int serialize_protected(lua_State *L, int idx, size_t limit, const char *what,
                               luna__mod *m, char **data, size_t *len) {
  writer w;
  int st;
  char *fit;
  idx = lua_absindex(L, idx);
  memset(&w, 0, sizeof w);
  w.m = m;
  w.limit = limit > UINT32_MAX ? UINT32_MAX : limit;
  w.what = what;
  strcpy(w.path, "value");
  lua_pushcfunction(L, serialize);
  lua_pushvalue(L, idx);
  lua_pushlightuserdata(L, &w);
  st = lua_pcall(L, 2, 0, 0);
  if (m != NULL)
    luna__mod_uncharge(m, w.charged);
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

char *luna__copy_out(lua_State *L, int idx, size_t limit, size_t *len, const char *what) {
  char *data = NULL;
  if (serialize_protected(L, idx, limit, what, luna__mod_of(L), &data, len) != LUA_OK)
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

/* ---- topics -------------------------------------------------------------------------- */

/* Why `topic` cannot be a topic (a message to put after "mods.send: "), or
   NULL. Topics are copied into host memory for every message and every
   subscribed mod, so they are short; a NUL would cut the C copy (a send to
   "a\0b" would reach the subscribers of "a"), so it is refused. */
static const char *bad_topic(const char *topic, size_t len, char *buf, size_t buflen) {
  const char *nul;
  if (len > LUNA__MAX_TOPIC) {
    snprintf(buf, buflen, "the topic is %zu bytes long (at most %d)", len, LUNA__MAX_TOPIC);
    return buf;
  }
  if ((nul = (const char *)memchr(topic, '\0', len)) != NULL) {
    snprintf(buf, buflen, "the topic has a NUL byte (at byte %zu)", (size_t)(nul - topic) + 1);
    return buf;
  }
  return NULL;
}

/* The topic argument at index 1, checked (raises naming `fname`). */
static const char *check_topic(lua_State *L, const char *fname, size_t *len) {
  char buf[96];
  const char *topic = luaL_checklstring(L, 1, len), *bad = bad_topic(topic, *len, buf, sizeof buf);
  if (bad != NULL)
    luaL_error(L, "%s: %s", fname, bad);
  return topic;
}

/* ---- the queue --------------------------------------------------------------------------- */

/* The queue is a ring of messages in the order they were sent, shared by
   every sender, but each sender (each mod, and the host) has its own
   share: at most MAX_QUEUE messages and MAX_QUEUE_MESSAGES_OF_LIMIT times
   message_limit bytes of its own may wait, so one mod's flood fills only
   its own share and every other sender's posts still succeed. A mod's
   waiting messages (their copies, topics, sender names and ring slots)
   are also charged to its memory cap (luna__mod_charge) until they are
   delivered. */

/* The bytes one message costs the host: its value, its topic and sender
   name (two allocations, with malloc's overhead), and four ring slots: the
   ring doubles when full and is cut back after each delivery to at most
   four slots per waiting message (ring_fit). */
static size_t message_charge(size_t topic_len, size_t from_len, size_t len) {
  return 4 * sizeof(luna__message) + 2 * LUNA__MALLOC_OVERHEAD + topic_len + 1 + from_len + 1 +
         len;
}

/* Why `sender` (NULL: the host) cannot post `len` more bytes now (a static
   message to raise or to put in last_error), or NULL when it can. */
static const char *bus_full(const luna_mods *set, const luna__mod *sender, size_t len) {
  size_t max_bytes = set->cfg.message_limit * MAX_QUEUE_MESSAGES_OF_LIMIT;
  size_t queued = sender != NULL ? sender->queued : set->host_queued;
  size_t bytes = sender != NULL ? sender->queued_bytes : set->host_queued_bytes;
  if (queued >= MAX_QUEUE)
    return "the bus is full (65536 messages of this sender waiting)";
  if (len > max_bytes || bytes > max_bytes - len)
    return "the bus is full (64 times the message limit in bytes of this sender waiting)";
  return NULL;
}

/* Frees `data`; *why says why the post failed (a static string). */
static int refuse_post(char *data, const char **why, const char *reason) {
  free(data);
  *why = reason;
  return LUNA_ENOMEM;
}

/* Moves the ring into `cap` slots (at least nqueue), one run from slot 0. */
static bool ring_resize(luna_mods *set, size_t cap) {
  luna__message *q = (luna__message *)malloc(cap * sizeof *q);
  size_t i;
  if (q == NULL)
    return false;
  for (i = 0; i < set->nqueue; i++)
    q[i] = set->queue[(set->qhead + i) % set->capqueue];
  free(set->queue);
  set->queue = q;
  set->capqueue = cap;
  set->qhead = 0;
  return true;
}

static bool ring_grow(luna_mods *set) {
  return ring_resize(set, set->capqueue ? set->capqueue * 2 : 16);
}

/* After a delivery: a ring more than four times its use (past a floor of
   RING_KEEP slots, the host's own) is cut to twice its use, so what a
   flood leaves behind is never more than its messages were charged. */
#define RING_KEEP 1024
static void ring_fit(luna_mods *set) {
  size_t cap = 16;
  if (set->capqueue <= RING_KEEP || set->nqueue >= set->capqueue / 4)
    return;
  if (set->nqueue == 0) {
    free(set->queue);
    set->queue = NULL;
    set->qhead = set->capqueue = 0;
    return;
  }
  while (cap < 2 * set->nqueue)
    cap *= 2;
  ring_resize(set, cap); /* out of memory: keep the larger ring */
}

int luna__bus_post(luna_mods *set, luna__mod *sender, const char *topic, size_t topic_len,
                   char *data, size_t len, const char **why) {
  luna__message *msg;
  const char *from = sender != NULL ? sender->man.name : "host";
  size_t from_len = strlen(from), charge = message_charge(topic_len, from_len, len);
  const char *full = bus_full(set, sender, len);
  char *block;
  if (full != NULL)
    return refuse_post(data, why, full);
  if (set->nqueue == set->capqueue && !ring_grow(set))
    return refuse_post(data, why, "out of memory");
  if (sender != NULL && !luna__mod_charge(sender, charge))
    return refuse_post(data, why, LUNA__CAP_REACHED);
  block = (char *)malloc(topic_len + 1 + from_len + 1);
  if (block == NULL) {
    if (sender != NULL)
      luna__mod_uncharge(sender, charge);
    return refuse_post(data, why, "out of memory");
  }
  memcpy(block, topic, topic_len);
  block[topic_len] = '\0';
  memcpy(block + topic_len + 1, from, from_len + 1);
  msg = &set->queue[(set->qhead + set->nqueue) % set->capqueue];
  msg->sender = sender;
  msg->topic = block;
  msg->topic_len = topic_len;
  msg->from = block + topic_len + 1;
  msg->data = data;
  msg->len = len;
  msg->charge = charge;
  set->nqueue++;
  if (sender != NULL) {
    sender->queued++;
    sender->queued_bytes += len;
  } else {
    set->host_queued++;
    set->host_queued_bytes += len;
  }
  return 0;
}

/* Frees a message taken off the queue and gives its sender's share and
   charge back. */
static void release(luna_mods *set, luna__message *msg) {
  if (msg->sender != NULL) {
    msg->sender->queued--;
    msg->sender->queued_bytes -= msg->len;
    luna__mod_uncharge(msg->sender, msg->charge);
  } else {
    set->host_queued--;
    set->host_queued_bytes -= msg->len;
  }
  free(msg->topic); /* and the sender's name, in the same block */
  free(msg->data);
}

void luna__bus_clear(luna_mods *set) {
  while (set->nqueue > 0) {
    release(set, &set->queue[set->qhead]);
    set->qhead = (set->qhead + 1) % set->capqueue;
    set->nqueue--;
  }
  free(set->queue);
  set->queue = NULL;
  set->qhead = set->capqueue = 0;
  set->cursor.active = false;
  free(set->match);
  set->match = NULL;
  set->capmatch = 0;
}

/* ---- delivery ----------------------------------------------------------------------------- */

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

/* What one delivery of a message to one mod needs, and where it stopped
   when the frame's bound was reached. */
typedef struct deliver_ctx {
  const luna__message *msg;
  bool resume;          /* go on with the array kept at paused_key */
  lua_Integer pos, n;   /* subscriptions visited so far, of the n it had */
  size_t *steps;        /* the frame's delivery steps */
  bool paused;          /* out: the bound was reached; pos, n say where */
} deliver_ctx;

/* True when the delivery must stop here and go on at the next frame: the
   frame's steps are spent. */
static bool must_pause(const deliver_ctx *c) {
  return *c->steps >= LUNA__BUS_STEPS;
}

/* Protected, in the receiving mod's state: calls each of its subscribers
   of the message's topic, each in its own budget context, until the
   frame's steps run out (then the array and the place are kept). */
static int deliver_one(lua_State *L) {
  deliver_ctx *c = (deliver_ctx *)lua_touserdata(L, 1);
  const luna__message *msg = c->msg;
  luna__mod *m = luna__mod_of(L);
  luna__binding *b = luna__get_binding(L);
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
    int st, base;
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
    base = lua_gettop(L);
    lua_pushcfunction(L, luna__msgh); /* base + 1 */
    lua_getiuservalue(L, 2, 2);
    luna__copy_in(L, msg->data, msg->len);
    lua_pushlstring(L, msg->topic, msg->topic_len);
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

/* Delivers the message to the mods that subscribe to its topic, in load
   order, from where the last frame's delivery stopped. false when the
   frame's steps ran out first (the cursor says where to go on). */
static bool deliver_message(luna_mods *set, const luna__message *msg, size_t *steps) {
  size_t j, k;
  if (!set->cursor.active) {
    (*steps)++; /* taking the message is a step, whoever receives it */
    set->cursor.active = true;
    set->cursor.index = 0;
    set->cursor.resume = false;
  }
  /* The receivers, collected before any of them runs (a subscriber may
     subscribe or remove, changing the index). */
  k = luna__topics_match(set, msg->topic, msg->topic_len, set->match, set->capmatch);
  for (j = 0; j < k; j++) {
    luna__mod *m = set->match[j];
    deliver_ctx c;
    if (m->index < set->cursor.index)
      continue; /* delivered in an earlier frame */
    if (luna__mod_held(m)) {
      /* Its time for the frame is spent: the message waits for it, from
         this very mod on (and the later messages wait for every mod). */
      if (m->index != set->cursor.index)
        set->cursor.resume = false;
      set->cursor.index = m->index;
      return false;
    }
    memset(&c, 0, sizeof c);
    c.msg = msg;
    c.steps = steps;
    if (set->cursor.resume && m->index == set->cursor.index) {
      set->cursor.resume = false;
      if (m->loads != set->cursor.loads)
        continue; /* the instance it was delivered to is gone */
      c.resume = true;
      c.pos = set->cursor.pos;
      c.n = set->cursor.n;
    }
    set->cursor.resume = false;
    if (m->state != LUNA_MOD_LOADED || m->L == NULL || m->disable_pending)
      continue;
    if (!luna__mod_pcall(m, deliver_one, &c, false))
      luna__mods_report(set, m->man.name, "message '%s' from '%s' not delivered: %s",
                        msg->topic, msg->from, m->last_error);
    else if (c.paused) {
      set->cursor.index = m->index;
      set->cursor.loads = m->loads;
      set->cursor.pos = c.pos;
      set->cursor.n = c.n;
      set->cursor.resume = true;
      return false;
    }
    set->cursor.index = m->index + 1;
  }
  set->cursor.active = false;
  return true;
}

void luna__bus_deliver(luna_mods *set) {
  size_t steps = 0, todo = set->nqueue; /* messages sent meanwhile wait */
  if (set->capmatch < set->nmods) {
    luna__mod **p = (luna__mod **)realloc(set->match, set->nmods * sizeof *p);
    if (p == NULL)
      return; /* out of memory: the messages wait for the next frame */
    set->match = p;
    set->capmatch = set->nmods;
  }
  while (todo > 0 && steps < LUNA__BUS_STEPS) {
    luna__message msg = set->queue[set->qhead]; /* the ring may grow (move) meanwhile */
    if (!deliver_message(set, &msg, &steps))
      break;
    set->qhead = (set->qhead + 1) % set->capqueue;
    set->nqueue--;
    todo--;
    release(set, &msg);
  }
  ring_fit(set);
}

/* ---- the mods module --------------------------------------------------------------------- */

/* mods.send(topic, value): copies value now; delivered at the next run of
   the set's timing to every subscriber of topic, in every mod. */
static int l_send(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  size_t topic_len, len;
  const char *topic = check_topic(L, "mods.send", &topic_len);
  char *data;
  const char *full = bus_full(m->set, m, 0);
  if (luna__guard_closing(L)) /* a dying state reaches no other mod */
    return luaL_error(L, "mods.send: the mod is being unloaded");
  if (full != NULL) /* before copying anything */
    return luaL_error(L, "mods.send: %s", full);
  data = luna__copy_out(L, 2, m->set->cfg.message_limit, &len, "mods.send");
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
  int rc = luna__bus_post(set, NULL, topic, strlen(topic), data, len, &why);
  if (rc != 0)
    snprintf(set->last_error, sizeof set->last_error, "%s", why);
  return rc;
}

/* The checks both host posts make before copying anything: 0, or the
   error with last_error set. */
static int host_check(luna_mods *set, const char *fname, const char *topic) {
  char buf[96];
  const char *bad = bad_topic(topic, strlen(topic), buf, sizeof buf), *full;
  if (bad != NULL) {
    snprintf(set->last_error, sizeof set->last_error, "%s: %s", fname, bad);
    return LUNA_EINVAL;
  }
  if ((full = bus_full(set, NULL, 0)) != NULL) {
    snprintf(set->last_error, sizeof set->last_error, "%s", full);
    return LUNA_ENOMEM;
  }
  return 0;
}

LUNA_API int luna_mods_send(luna_mods *set, const char *topic, lua_State *L, int idx) {
  char *data = NULL;
  size_t len;
  int st;
  if (set == NULL || topic == NULL || L == NULL)
    return LUNA_EINVAL;
  if (lua_type(L, idx) == LUA_TNONE) {
    snprintf(set->last_error, sizeof set->last_error, "luna_mods_send: no value at index %d",
             idx);
    return LUNA_EINVAL;
  }
  if ((st = host_check(set, "luna_mods_send", topic)) != 0)
    return st;
  st = serialize_protected(L, idx, set->cfg.message_limit, "luna_mods_send", NULL, &data, &len);
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
  int rc;
  if (set == NULL || topic == NULL || (s == NULL && len > 0))
    return LUNA_EINVAL;
  if (len > set->cfg.message_limit || len > UINT32_MAX) {
    snprintf(set->last_error, sizeof set->last_error,
             "luna_mods_send_string: the value is larger than the limit");
    return LUNA_EINVAL;
  }
  if ((rc = host_check(set, "luna_mods_send_string", topic)) != 0)
    return rc;
  data = (char *)malloc(1 + sizeof n + len);
  if (data == NULL)
    return LUNA_ENOMEM;
  data[0] = T_STR;
  memcpy(data + 1, &n, sizeof n);
  if (len > 0)
    memcpy(data + 1 + sizeof n, s, len);
  return host_post(set, topic, data, 1 + sizeof n + len);
}
