/*
** embed_util.h: what the embedding tests share: Lua states attached to a
** loop, running snippets, and a tiny "host" module that creates promises
** the test then completes from C (on this thread or on others).
**
** host.promise([timing]) -> Promise, slot: a promise whose C side is kept
** in slots[slot] (one host reference) with a cancel callback that counts
** calls per slot and remembers the thread it ran on.
** host.timing() -> the name of the timing running now, or nil.
*/
#ifndef EMBED_UTIL_H
#define EMBED_UTIL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "../lua/state_fixture.h"
#include "lunaloop.h"
#include "lunaloop_lua.h"
#include "promise.h" /* luna__promise_live_count */

#define MAX_SLOTS 256

static luna_promise *slots[MAX_SLOTS];
static int nslots;
static int cancel_calls[MAX_SLOTS];
static bool cancel_on_loop_thread[MAX_SLOTS];
static pthread_t loop_thread;
/* Frees of resolve data, counted from any thread. */
static atomic_int data_frees;
static atomic_int data_frees_off_loop;

static inline void reset_counters(void) {
  memset(slots, 0, sizeof slots);
  nslots = 0;
  memset(cancel_calls, 0, sizeof cancel_calls);
  memset(cancel_on_loop_thread, 0, sizeof cancel_on_loop_thread);
  atomic_store(&data_frees, 0);
  atomic_store(&data_frees_off_loop, 0);
  loop_thread = pthread_self();
}

static inline void count_cancel(luna_promise *p, void *ud) {
  int slot = (int)(intptr_t)ud;
  (void)p;
  cancel_calls[slot]++;
  cancel_on_loop_thread[slot] = pthread_equal(pthread_self(), loop_thread);
}

static inline int l_host_promise(lua_State *L) {
  luna_timing timing = LUNA_UPDATE;
  luna_promise *p;
  int rc;
  if (lua_type(L, 1) == LUA_TSTRING) {
    size_t len;
    const char *name = lua_tolstring(L, 1, &len);
    if (luna_timing_parse(name, len, &timing) != 0)
      return luaL_argerror(L, 1, "unknown timing");
  }
  if (nslots == MAX_SLOTS)
    return luaL_error(L, "out of slots");
  rc = luna_lua_promise_new(L, timing, &p);
  if (rc != 0)
    return luaL_error(L, "luna_lua_promise_new: %s", luna_strerror(rc));
  slots[nslots] = p;
  if (luna_promise_on_cancel(p, count_cancel, (void *)(intptr_t)nslots) != 0)
    return luaL_error(L, "luna_promise_on_cancel failed");
  lua_pushinteger(L, nslots++);
  return 2;
}

static inline int l_host_timing(lua_State *L) {
  luna_loop *loop = luna_lua_loop(L);
  int t = loop != NULL ? luna_loop_current_timing(loop) : -1;
  if (t < 0)
    lua_pushnil(L);
  else
    lua_pushstring(L, luna_timing_name(t));
  return 1;
}

static const luaL_Reg host_funcs[] = {
    {"promise", l_host_promise}, {"timing", l_host_timing}, {NULL, NULL}};

/* A fresh state attached to loop, with globals task and host. */
static inline lua_State *new_state(luna_loop *loop) {
  lua_State *L = new_task_state(loop);
  luaL_newlib(L, host_funcs);
  lua_setglobal(L, "host");
  return L;
}

/* Asserts that the global `name` is the string `want`. */
static inline void expect_global(lua_State *L, const char *name, const char *want) {
  const char *got;
  lua_getglobal(L, name);
  got = lua_tostring(L, -1);
  if (got == NULL || strcmp(got, want) != 0)
    fail_msg("global %s: expected \"%s\", got \"%s\"", name, want, got ? got : "(not a string)");
  lua_pop(L, 1);
}

/* ---- resolve data: an integer and a string, freed with a count ------------ */

typedef struct pair {
  lua_Integer n;
  char s[32];
} pair;

static inline pair *new_pair(lua_Integer n, const char *s) {
  pair *d = (pair *)malloc(sizeof *d);
  d->n = n;
  strncpy(d->s, s, sizeof d->s - 1);
  d->s[sizeof d->s - 1] = '\0';
  return d;
}

static inline int push_pair(lua_State *L, void *data) {
  pair *d = (pair *)data;
  lua_pushinteger(L, d->n);
  lua_pushstring(L, d->s);
  return 2;
}

static inline void free_pair(void *data) {
  atomic_fetch_add(&data_frees, 1);
  if (!pthread_equal(pthread_self(), loop_thread))
    atomic_fetch_add(&data_frees_off_loop, 1);
  free(data);
}

/* Resolves p with (n, s) from a new thread, joined before returning. */
typedef struct resolve_job {
  luna_promise *p;
  lua_Integer n;
  const char *s;
  int rc;
} resolve_job;

static inline void *resolve_thread(void *arg) {
  resolve_job *j = (resolve_job *)arg;
  pair *d = new_pair(j->n, j->s);
  j->rc = luna_promise_resolve(j->p, push_pair, d, free_pair);
  if (j->rc != 0)
    free(d);
  return NULL;
}

static inline int resolve_from_thread(luna_promise *p, lua_Integer n, const char *s) {
  pthread_t th;
  resolve_job j = {p, n, s, -100};
  assert_int_equal(pthread_create(&th, NULL, resolve_thread, &j), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  return j.rc;
}

static inline void release_slots(void) {
  int i;
  for (i = 0; i < nslots; i++)
    if (slots[i] != NULL)
      assert_int_equal(luna_promise_release(slots[i]), 0);
  nslots = 0;
}

#endif
