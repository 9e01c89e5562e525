/*
** limit.c: the floor of any Lua coroutine scheduler. Bare Lua 5.4 coroutines
** are created with lua_newthread and resumed round-robin by a C loop with
** lua_resume: no queue, no timer, no bookkeeping, nothing a scheduler adds.
** Each workload mirrors the Lua-side one of the same name (same coroutine
** bodies, same counts), so "lunaloop / limit" is what the scheduler costs on
** top of Lua itself.
**
** - W1_yield, W2_steady: n coroutines, each yielding every round; one round
**   resumes them all (a "frame"); the measured rounds follow one warm round.
** - W2_sleepers: n coroutines created, started (they yield their sleep time)
**   and resumed once to finish. `limit` resumes them in creation order and
**   ignores the time (no clock); `limit_deadline` keeps a virtual clock
**   that advances 1/60 s a frame and wakes them in deadline order through
**   a minimal binary heap of {deadline, index} (ties in creation order):
**   the floor of a scheduler that does what W2 asks. With
**   LUNA_BENCH_PHASES set, the two phases are also timed apart (on
**   stderr); set to "nogc", the collector is stopped for the run.
** - W3_churn: batches of 10,000 coroutines; each round finishes the previous
**   batch and creates and starts the next one.
** - W3_tick: ticks of 1,000 coroutines, created, then each resumed once,
**   finishing when first run (the peers' churn: deferred tasks that end at
**   their first run).
** - W4_memory: live bytes per coroutine suspended in coroutine.yield,
**   anchored in a preallocated table (16 bytes a slot).
** - W6_update: the floor of an update layer: a C loop that lua_calls n Lua
**   functions (dt) per frame.
**
** Times are process CPU time. `limit_task` runs W2_sleepers, W3_churn and
** W4_memory the same way, except that each coroutine is held through a
** task object: a full userdata of LIMIT_TASK_BYTES with the coroutine as
** its user value, anchored (or left on the stack) instead of the
** coroutine. That is the floor of any scheduler whose tasks are objects of
** their own over coroutines, as lunaloop's Task is; it is not a target,
** it shows how much of the gap to the limit the second object is.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "bench.h"


static const double DT = 1.0 / 60.0;

/* lunaloop's task record (struct luna__task in src/lua/binding.h, whose
   static assertion keeps it at this size on 64-bit targets). */
#define LIMIT_TASK_BYTES 72

/* With a task object (limit_task): set by bench_limit. */
static bool with_task;

/* Creates a coroutine on `fn` (a stack index of L) with up to two number
   arguments, not started, and anchors it in the table at `anchor` (index
   i) or, when anchor is 0, leaves it on L's stack. */
static lua_State *create(lua_State *L, int fn, int anchor, long i, int nargs, double a1,
                         double a2) {
  lua_State *co;
  if (with_task) { /* the task object, then its coroutine as user value */
    memset(lua_newuserdatauv(L, LIMIT_TASK_BYTES, 1), 0, LIMIT_TASK_BYTES);
    co = lua_newthread(L);
    lua_setiuservalue(L, -2, 1);
  } else {
    co = lua_newthread(L);
  }
  lua_pushvalue(L, fn);
  if (nargs > 0)
    lua_pushnumber(L, a1);
  if (nargs > 1)
    lua_pushnumber(L, a2);
  lua_xmove(L, co, nargs + 1);
  if (anchor != 0)
    lua_rawseti(L, anchor, i);
  return co;
}

/* create(), then runs the coroutine to its first yield; returns the first
   value it yielded (0 when none, or not a number). */
static lua_State *start(lua_State *L, int fn, int anchor, long i, int nargs, double a1,
                        double a2, double *yielded) {
  lua_State *co = create(L, fn, anchor, i, nargs, a1, a2);
  int nres;
  if (lua_resume(co, L, nargs, &nres) != LUA_YIELD)
    bench_die("limit: a coroutine did not yield: %s", lua_tostring(co, -1));
  if (yielded != NULL)
    *yielded = nres > 0 ? lua_tonumber(co, -nres) : 0;
  lua_pop(co, nres);
  return co;
}

/* Resumes co, which must yield (or, with `last`, return). */
static inline void step(lua_State *co, lua_State *L, bool last) {
  int nres, st = lua_resume(co, L, 0, &nres);
  if (st != (last ? LUA_OK : LUA_YIELD))
    bench_die("limit: unexpected coroutine status %d", st);
  lua_pop(co, nres);
}

/* W1_yield and W2_steady: n coroutines, `rounds` measured round-robin
   rounds. The body yields rounds + 2 times: one at the start, one in the
   warm round, `rounds` measured; the last resume returns. */
static void round_robin(long n, long rounds, const char *body, bench_result *out) {
  lua_State *L = bench_new_state();
  lua_State **cos = malloc((size_t)n * sizeof *cos);
  long i, r, a0;
  int64_t t0, elapsed;
  if (cos == NULL)
    bench_die("out of memory");
  bench_push_chunk(L, body); /* 1 */
  lua_createtable(L, (int)n, 0); /* 2: anchors */
  for (i = 0; i < n; i++)
    cos[i] = start(L, 1, 2, i + 1, 2, (double)(rounds + 2), 0.05, NULL);
  for (i = 0; i < n; i++) /* warm round */
    step(cos[i], L, false);
  a0 = bench_allocs();
  t0 = bench_cpu_ns();
  for (r = 0; r < rounds; r++)
    for (i = 0; i < n; i++)
      step(cos[i], L, false);
  elapsed = bench_cpu_ns() - t0;
  out->ops = (double)(n * rounds);
  out->allocs_per_op = (double)(bench_allocs() - a0) / out->ops;
  out->ns_per_op = (double)elapsed / out->ops;
  for (i = 0; i < n; i++)
    step(cos[i], L, true);
  free(cos);
  lua_close(L);
}

/* The deadline-order floor's heap: a binary min-heap of {deadline, index},
   ordered by deadline, then index (creation order). Nothing more than
   waking in deadline order needs: no cancellation, no back-pointers. */
typedef struct wake {
  double deadline;
  long i;
} wake;

static inline bool wake_before(wake a, wake b) {
  return a.deadline < b.deadline || (a.deadline == b.deadline && a.i < b.i);
}

static void heap_push(wake *h, long *len, wake w) {
  long k = (*len)++;
  while (k > 0 && wake_before(w, h[(k - 1) / 2])) {
    h[k] = h[(k - 1) / 2];
    k = (k - 1) / 2;
  }
  h[k] = w;
}

static wake heap_pop(wake *h, long *len) {
  wake top = h[0], last = h[--*len];
  long k = 0, c;
  while ((c = 2 * k + 1) < *len) {
    if (c + 1 < *len && wake_before(h[c + 1], h[c]))
      c++;
    if (!wake_before(h[c], last))
      break;
    h[k] = h[c];
    k = c;
  }
  h[k] = last;
  return top;
}

/* W2_sleepers; `by_deadline` is limit_deadline. */
static void w2_sleepers(long n, bool by_deadline, bench_result *out) {
  lua_State *L = bench_new_state();
  lua_State **cos = malloc((size_t)n * sizeof *cos);
  double *d = malloc((size_t)n * sizeof *d);
  wake *heap = by_deadline ? malloc((size_t)n * sizeof *heap) : NULL;
  const char *phases = getenv("LUNA_BENCH_PHASES");
  long i, len = 0;
  double now = 0, s;
  int64_t t0, t1, t2;
  unsigned long long x = 42;
  if (cos == NULL || d == NULL || (by_deadline && heap == NULL))
    bench_die("out of memory");
  for (i = 0; i < n; i++) { /* the sleep times, as the others draw them */
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    d[i] = (double)(x >> 11) / 9007199254740992.0 * 0.5;
  }
  bench_push_chunk(L, "local yield = coroutine.yield\n"
                      "return function(s) yield(s) end"); /* 1 */
  if (phases != NULL && strcmp(phases, "nogc") == 0)
    lua_gc(L, LUA_GCSTOP);
  t0 = bench_cpu_ns();
  lua_createtable(L, (int)n, 0); /* 2 */
  for (i = 0; i < n; i++) {
    cos[i] = start(L, 1, 2, i + 1, 1, d[i], 0, &s);
    if (by_deadline)
      heap_push(heap, &len, (wake){now + s, i});
  }
  t1 = bench_cpu_ns();
  if (by_deadline) {
    while (len > 0) { /* frames of 1/60 s until the last one woke */
      now += DT;
      while (len > 0 && heap[0].deadline <= now)
        step(cos[heap_pop(heap, &len).i], L, true);
    }
  } else {
    for (i = 0; i < n; i++)
      step(cos[i], L, true);
  }
  lua_settop(L, 1);
  t2 = bench_cpu_ns();
  out->ops = (double)n;
  out->ns_per_op = (double)(t2 - t0) / (double)n;
  if (phases != NULL)
    fprintf(stderr, "W2_sleepers %s phases: start %.1f finish %.1f ns a coroutine\n",
            by_deadline ? "limit_deadline" : "limit", (double)(t1 - t0) / (double)n,
            (double)(t2 - t1) / (double)n);
  free(cos);
  free(d);
  free(heap);
  lua_close(L);
}

static void w3_churn(long n, bench_result *out) {
  lua_State *L = bench_new_state();
  long batch = n < 10000 ? n : 10000, done = 0, prev = 0, i;
  lua_State **cur = malloc((size_t)batch * sizeof *cur);
  int64_t t0;
  if (cur == NULL)
    bench_die("out of memory");
  bench_push_chunk(L, "local yield = coroutine.yield\n"
                      "return function() yield() end"); /* 1 */
  lua_checkstack(L, (int)batch + 8);
  t0 = bench_cpu_ns();
  while (done < n || prev > 0) {
    long k = n - done < batch ? n - done : batch;
    for (i = 0; i < prev; i++) /* the previous batch finishes */
      step(cur[i], L, true);
    lua_settop(L, 1);
    for (i = 0; i < k; i++)
      cur[i] = start(L, 1, 0, 0, 0, 0, 0, NULL);
    done += k;
    prev = k;
  }
  out->ops = (double)n;
  out->ns_per_op = (double)(bench_cpu_ns() - t0) / (double)n;
  free(cur);
  lua_close(L);
}

static void w3_tick(long n, bench_result *out) {
  lua_State *L = bench_new_state();
  long tick = n < 1000 ? n : 1000, done = 0, i;
  lua_State **cur = malloc((size_t)tick * sizeof *cur);
  int64_t t0;
  if (cur == NULL)
    bench_die("out of memory");
  bench_push_chunk(L, "return function() end"); /* 1 */
  lua_checkstack(L, (int)tick + 8);
  t0 = bench_cpu_ns();
  while (done < n) {
    long k = n - done < tick ? n - done : tick;
    for (i = 0; i < k; i++)
      cur[i] = create(L, 1, 0, 0, 0, 0, 0);
    for (i = 0; i < k; i++) /* the tick runs them: each finishes */
      step(cur[i], L, true);
    lua_settop(L, 1);
    done += k;
  }
  out->ops = (double)n;
  out->ns_per_op = (double)(bench_cpu_ns() - t0) / (double)n;
  free(cur);
  lua_close(L);
}

static void w4_memory(long n, bench_result *out) {
  lua_State *L = bench_new_state();
  long i, m0;
  bench_push_chunk(L, "local yield = coroutine.yield\n"
                      "return function(s) yield(s) end"); /* 1 */
  lua_gc(L, LUA_GCCOLLECT);
  lua_gc(L, LUA_GCCOLLECT);
  m0 = bench_live_bytes();
  lua_createtable(L, (int)n, 0); /* 2 */
  for (i = 0; i < n; i++)
    start(L, 1, 2, i + 1, 1, 1e6, 0, NULL);
  lua_gc(L, LUA_GCCOLLECT);
  lua_gc(L, LUA_GCCOLLECT);
  out->bytes_per_task = (double)(bench_live_bytes() - m0) / (double)n;
  lua_close(L);
}

static void w6_update(long n, bench_result *out) {
  lua_State *L = bench_new_state();
  long rounds = bench_rounds_for(n), r, i, a0;
  int64_t t0;
  bench_push_chunk(L, "return function(n)\n"
                      "  local fns = {}\n"
                      "  for i = 1, n do local x = 0; fns[i] = function(dt) x = x + dt end end\n"
                      "  return fns\n"
                      "end");
  lua_pushinteger(L, n);
  lua_call(L, 1, 1); /* 1: the callbacks */
  for (i = 1; i <= n; i++) { /* warm frame */
    lua_rawgeti(L, 1, i);
    lua_pushnumber(L, DT);
    lua_call(L, 1, 0);
  }
  a0 = bench_allocs();
  t0 = bench_cpu_ns();
  for (r = 0; r < rounds; r++)
    for (i = 1; i <= n; i++) {
      lua_rawgeti(L, 1, i);
      lua_pushnumber(L, DT);
      lua_call(L, 1, 0);
    }
  out->ops = (double)(n * rounds);
  out->ns_per_op = (double)(bench_cpu_ns() - t0) / out->ops;
  out->allocs_per_op = (double)(bench_allocs() - a0) / out->ops;
  lua_close(L);
}

bool bench_limit(const char *impl, const char *workload, long n, bench_result *out) {
  with_task = strcmp(impl, "limit_task") == 0;
  if (with_task && strcmp(workload, "W2_sleepers") != 0 && strcmp(workload, "W3_churn") != 0 &&
      strcmp(workload, "W4_memory") != 0)
    return false;
  if (strcmp(impl, "limit_deadline") == 0) {
    if (strcmp(workload, "W2_sleepers") != 0)
      return false;
    w2_sleepers(n, true, out);
    return true;
  }
  if (strcmp(workload, "W1_yield") == 0)
    round_robin(n, bench_rounds_for(n),
                "local yield = coroutine.yield\n"
                "return function(r) for i = 1, r do yield() end end",
                out);
  else if (strcmp(workload, "W2_steady") == 0)
    round_robin(n, bench_rounds(50),
                "local yield = coroutine.yield\n"
                "return function(r, s) for i = 1, r do yield(s) end end",
                out);
  else if (strcmp(workload, "W2_sleepers") == 0)
    w2_sleepers(n, false, out);
  else if (strcmp(workload, "W3_churn") == 0)
    w3_churn(n, out);
  else if (strcmp(workload, "W3_tick") == 0)
    w3_tick(n, out);
  else if (strcmp(workload, "W4_memory") == 0)
    w4_memory(n, out);
  else if (strcmp(workload, "W6_update") == 0)
    w6_update(n, out);
  else
    return false;
  return true;
}
