/*
** main.c: luna_bench, the one program of the benchmark suite.
**
**   luna_bench [--reps R] [--quick] limit WORKLOAD N
**       the floor: bare Lua 5.4 coroutines resumed round-robin with
**       lua_resume by a C loop, no scheduler at all (limit.c);
**   luna_bench [--reps R] [--quick] limit_task WORKLOAD N
**       the same, each coroutine held through a task-sized userdata
**       (W2_sleepers, W3_churn, W4_memory; limit.c);
**   luna_bench [--reps R] [--quick] limit_deadline W2_sleepers N
**       the sleepers woken in deadline order through a minimal C heap;
**   luna_bench [--reps R] [--quick] inbox IMPL N
**       W5: two producer threads post N callbacks each while the loop runs
**       frames; IMPL is lunaloop (luna_post) or mutex (inbox.c);
**   luna_bench probe MODULE
**       exits 0 when require(MODULE) works in the suite's Lua state (so the
**       suite can skip a peer that is not installed);
**   luna_bench [--reps R] [--quick] lua IMPL SCRIPT WORKLOAD N
**       a Lua implementation: SCRIPT returns a table of workload functions;
**       WORKLOAD(n) is called in a fresh state and returns ns_per_op and,
**       optionally, bytes_per_task and allocs_per_op (bench/common.lua
**       wraps the workloads and writes their op counts). When IMPL starts
**       with "lunaloop" a loop is attached to the state (luna_lua_attach)
**       and bench.frames / bench.run_until_idle drive it from C with
**       luna_loop_frame.
**
** Times are this process's CPU time (CLOCK_PROCESS_CPUTIME_ID), which the
** other programs on a loaded machine disturb far less than wall time.
** Each measurement runs R times (default 1), each in a fresh Lua state and
** loop; the line reports the fastest run's ns_per_op, the first run's
** bytes_per_task (memory is deterministic) and the largest allocs_per_op
** seen (the conservative one). bench/suite.sh runs one repetition a
** process and takes its spread from rounds of processes instead.
*/
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>

#include "bench.h"
#include "lunaloop.h"
#include "lunaloop_lua.h"

/* ---- the counting allocator ------------------------------------------------ */

/* The loop thread allocates far more often than the producers of W5, so its
   counters are plain (a locked add on every allocation would tax every
   implementation measured); other threads use atomics. Frees may happen on
   another thread than the allocation: only the sums mean anything. */
static _Thread_local bool tl_other_thread;
static long main_bytes, main_allocs;
static atomic_long other_bytes, other_allocs;

void *bench_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  long delta;
  void *np;
  (void)ud;
  if (ptr == NULL)
    osize = 0; /* Lua passes a type tag in osize when ptr is NULL */
  if (nsize == 0) {
    free(ptr);
    delta = -(long)osize;
    np = NULL;
  } else {
    np = realloc(ptr, nsize);
    if (np == NULL)
      return NULL;
    delta = (long)nsize - (long)osize;
  }
  if (tl_other_thread) {
    atomic_fetch_add_explicit(&other_bytes, delta, memory_order_relaxed);
    if (nsize > osize)
      atomic_fetch_add_explicit(&other_allocs, 1, memory_order_relaxed);
  } else {
    main_bytes += delta;
    if (nsize > osize)
      main_allocs++;
  }
  return np;
}

/* Called first thing by every thread other than the main one. */
void bench_mark_other_thread(void);
void bench_mark_other_thread(void) { tl_other_thread = true; }

long bench_live_bytes(void) {
  return main_bytes + atomic_load_explicit(&other_bytes, memory_order_relaxed);
}

long bench_allocs(void) {
  return main_allocs + atomic_load_explicit(&other_allocs, memory_order_relaxed);
}

/* LUNA_BENCH_GC as a lua_gc option: generational unless told otherwise,
   as stock lua5.4 (and so every `require "lunaloop"` user) runs. */
static int gc_mode(void) {
  const char *m = getenv("LUNA_BENCH_GC");
  if (m == NULL || strcmp(m, "generational") == 0)
    return LUA_GCGEN;
  if (strcmp(m, "incremental") != 0)
    bench_die("LUNA_BENCH_GC: expected generational or incremental, got '%s'", m);
  return LUA_GCINC;
}

lua_State *bench_new_state(void) {
  lua_State *L = lua_newstate(bench_alloc, NULL);
  if (L == NULL)
    bench_die("cannot create a Lua state");
  luaL_openlibs(L);
  lua_gc(L, gc_mode(), 0, 0); /* 0: the mode's default parameters */
  return L;
}

/* ---- clocks, output, errors ------------------------------------------------- */

int64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t bench_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void print_field(const char *name, double v, int decimals) {
  if (v < 0)
    printf(" %s=-", name);
  else
    printf(" %s=%.*f", name, decimals, v);
}

void bench_print(const char *workload, const char *impl, long n, bench_result r) {
  const char *ops_file = getenv("LUNA_BENCH_OPS");
  if (ops_file != NULL && r.ops >= 0) {
    FILE *f = fopen(ops_file, "w");
    if (f == NULL || fprintf(f, "%.0f\n", r.ops) < 0 || fclose(f) != 0)
      bench_die("cannot write %s", ops_file);
  }
  printf("workload=%s impl=%s n=%ld", workload, impl, n);
  print_field("ns_per_op", r.ns_per_op, 1);
  print_field("bytes_per_task", r.bytes_per_task, 1);
  print_field("allocs_per_op", r.allocs_per_op, 4);
  printf("\n");
  fflush(stdout);
}

void bench_die(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "luna_bench: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(1);
}

void bench_push_chunk(lua_State *L, const char *src) {
  if (luaL_loadstring(L, src) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK)
    bench_die("chunk: %s", lua_tostring(L, -1));
}

/* ---- the Lua host --------------------------------------------------------- */

static luna_loop *host_loop; /* the loop of a lunaloop run, else NULL */
static lua_State *host_L;

static luna_loop *check_loop(lua_State *L) {
  if (host_loop == NULL)
    luaL_error(L, "no loop: this implementation is not lunaloop");
  return host_loop;
}

/* bench.cpu() -> ns of process CPU time, bench.mem() -> live bytes,
   bench.allocs() -> allocations so far, bench.wall() -> ns of the
   monotonic clock (W7's threads: wall time, not CPU time): one function,
   its upvalue says which (bench_funcs). */
enum { GAUGE_CPU, GAUGE_MEM, GAUGE_ALLOCS, GAUGE_WALL };

static int l_gauge(lua_State *L) {
  switch (lua_tointeger(L, lua_upvalueindex(1))) {
  case GAUGE_CPU: lua_pushinteger(L, (lua_Integer)bench_cpu_ns()); break;
  case GAUGE_MEM: lua_pushinteger(L, (lua_Integer)bench_live_bytes()); break;
  case GAUGE_WALL: lua_pushinteger(L, (lua_Integer)bench_now_ns()); break;
  default: lua_pushinteger(L, (lua_Integer)bench_allocs()); break;
  }
  return 1;
}

static luna_ns check_dt(lua_State *L, int idx) {
  luna_ns dt;
  if (luna_seconds_to_ns(luaL_checknumber(L, idx), &dt) != 0)
    luaL_argerror(L, idx, "expected seconds");
  return dt;
}

/* bench.frames(k, dt): k frames of luna_loop_frame. The Lua programs time
   the call themselves (bench/common.lua), so that a luna_bench whose own
   timing differs measures the same way. */
static int l_frames(lua_State *L) {
  luna_loop *loop = check_loop(L);
  lua_Integer k = luaL_checkinteger(L, 1), i;
  luna_ns dt = check_dt(L, 2);
  for (i = 0; i < k; i++)
    if (luna_loop_frame_ns(loop, dt) != 0)
      return luaL_error(L, "luna_loop_frame failed");
  return 0;
}

/* bench.run_until_idle(dt, max_frames) -> frames: frames until no task of
   the state is alive (or max_frames). */
static int l_run_until_idle(lua_State *L) {
  luna_loop *loop = check_loop(L);
  luna_ns dt = check_dt(L, 1);
  lua_Integer max = luaL_checkinteger(L, 2), frames = 0;
  while (frames < max && luna_lua_task_count(host_L) > 0) {
    if (luna_loop_frame_ns(loop, dt) != 0)
      return luaL_error(L, "luna_loop_frame failed");
    frames++;
  }
  lua_pushinteger(L, frames);
  return 1;
}

long bench_rounds(long dflt) {
  const char *env = getenv("LUNA_BENCH_ROUNDS");
  long r;
  if (env == NULL)
    return dflt;
  if ((r = strtol(env, NULL, 10)) <= 0)
    bench_die("LUNA_BENCH_ROUNDS: expected a positive count, got '%s'", env);
  return r;
}

long bench_rounds_for(long n) {
  long r = 10000000 / n;
  return bench_rounds(r > 100 ? 100 : r < 10 ? 10 : r);
}

/* bench.rounds(n) -> bench_rounds_for(n). */
static int l_rounds(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)bench_rounds_for((long)luaL_checkinteger(L, 1)));
  return 1;
}

/* bench.sleep_times(n) -> {n seconds in [0, 0.5)}: W2's sleep times, the
   same in every implementation (math.randomseed(42), then math.random()
   * 0.5 each, through the state's own math library). */
static int l_sleep_times(lua_State *L) {
  lua_Integer i, n = luaL_checkinteger(L, 1);
  lua_getglobal(L, "math");
  lua_getfield(L, -1, "randomseed");
  lua_pushinteger(L, 42);
  lua_call(L, 1, 0);
  lua_getfield(L, -1, "random"); /* math, random */
  lua_createtable(L, (int)n, 0);
  for (i = 1; i <= n; i++) {
    lua_pushvalue(L, -2);
    lua_call(L, 0, 1);
    lua_pushnumber(L, lua_tonumber(L, -1) * 0.5);
    lua_remove(L, -2);
    lua_rawseti(L, -2, i);
  }
  return 1;
}

static int l_tasks(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)luna_lua_task_count(host_L));
  return 1;
}

/* bench.sleep(seconds): the loop thread sleeps (W7 drives frames like a
   frame-limited host, so that waiting for the workers leaves them the
   cores). */
static int l_sleep(lua_State *L) {
  luna_ns ns = check_dt(L, 1);
  struct timespec ts;
  ts.tv_sec = (time_t)(ns / 1000000000);
  ts.tv_nsec = (long)(ns % 1000000000);
  nanosleep(&ts, NULL);
  return 0;
}

static const luaL_Reg bench_funcs[] = {
    {"sleep", l_sleep},
    {"frames", l_frames}, {"run_until_idle", l_run_until_idle}, {"tasks", l_tasks},
    {"rounds", l_rounds}, {"sleep_times", l_sleep_times},       {NULL, NULL}};

/* The bench table: bench_funcs, the gauges, the run's flags. */
static void push_bench_table(lua_State *L, const char *impl, bool quick) {
  static const char *const gauges[] = {"cpu", "mem", "allocs", "wall"};
  int i;
  luaL_newlib(L, bench_funcs);
  for (i = 0; i < 4; i++) {
    lua_pushinteger(L, i);
    lua_pushcclosure(L, l_gauge, 1);
    lua_setfield(L, -2, gauges[i]);
  }
  lua_pushboolean(L, quick);
  lua_setfield(L, -2, "quick");
  lua_pushstring(L, impl);
  lua_setfield(L, -2, "impl");
}

/* The realtime clock follows the unscaled clock: virtual time. */
static luna_ns virtual_realtime(void *ud) {
  return luna_loop_time((luna_loop *)ud, LUNA_CLOCK_UNSCALED);
}

static double opt_number(lua_State *L, int idx) {
  return lua_isnumber(L, idx) ? (double)lua_tonumber(L, idx) : BENCH_NONE;
}

/* One run of a Lua implementation's workload in a fresh state. */
static bool run_lua(const char *impl, const char *script, const char *workload, long n,
                    bool quick, bench_result *out) {
  lua_State *L = bench_new_state();
  bool is_luna = strncmp(impl, "lunaloop", 8) == 0;
  host_loop = NULL;
  host_L = L;
  if (is_luna) {
    luna_config config;
    int rc;
    memset(&config, 0, sizeof config);
    config.alloc = bench_alloc;
    if ((rc = luna_loop_new(&config, &host_loop)) != 0)
      bench_die("luna_loop_new: %s", luna_strerror(rc));
    luna_loop_set_realtime_source(host_loop, virtual_realtime, host_loop);
    if ((rc = luna_lua_attach(L, host_loop)) != 0)
      bench_die("luna_lua_attach: %s", luna_strerror(rc));
  }
  push_bench_table(L, impl, quick);
  lua_setglobal(L, "bench");
  if (luaL_loadfile(L, script) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK)
    bench_die("%s: %s", script, lua_tostring(L, -1));
  if (!lua_istable(L, -1))
    bench_die("%s: does not return a table of workloads", script);
  if (lua_getfield(L, -1, workload) != LUA_TFUNCTION) {
    lua_close(L);
    if (host_loop != NULL)
      luna_loop_free(host_loop);
    host_loop = NULL;
    return false; /* the workload does not map onto this implementation */
  }
  lua_pushinteger(L, n);
  if (lua_pcall(L, 1, 3, 0) != LUA_OK)
    bench_die("%s %s: %s", impl, workload, lua_tostring(L, -1));
  out->ns_per_op = opt_number(L, -3);
  out->bytes_per_task = opt_number(L, -2);
  out->allocs_per_op = opt_number(L, -1);
  lua_close(L);
  if (host_loop != NULL)
    luna_loop_free(host_loop);
  host_loop = NULL;
  host_L = NULL;
  return true;
}

/* ---- main -------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: luna_bench [--reps R] [--quick] limit|limit_task|limit_deadline WORKLOAD N\n"
          "       luna_bench [--reps R] [--quick] inbox lunaloop|mutex N\n"
          "       luna_bench [--reps R] [--quick] lua IMPL SCRIPT WORKLOAD N\n"
          "       luna_bench hostile FRAMES\n"
          "       luna_bench sim ENTITIES FRAMES ROUNDS\n"
          "       luna_bench probe MODULE\n");
  exit(2);
}

static long parse_long(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v <= 0)
    usage();
  return v;
}

int main(int argc, char **argv) {
  int reps = 1, i = 1, r;
  bool quick = false;
  const char *mode, *workload, *impl, *script = NULL;
  long n;
  bench_result best = BENCH_NO_RESULT;

  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = (int)parse_long(argv[++i]);
    else
      usage();
  }
  if (i >= argc)
    usage();
  mode = argv[i++];
  if (strcmp(mode, "probe") == 0 && argc - i == 1) {
    lua_State *L = bench_new_state();
    int st;
    lua_getglobal(L, "require");
    lua_pushstring(L, argv[i]);
    st = lua_pcall(L, 1, 0, 0);
    lua_close(L);
    return st == LUA_OK ? 0 : 1;
  }
  if (strcmp(mode, "hostile") == 0 && argc - i == 1) {
    bench_hostile(parse_long(argv[i]));
    return 0;
  }
  if (strcmp(mode, "sim") == 0 && argc - i == 3) {
    bench_sim(parse_long(argv[i]), parse_long(argv[i + 1]), (int)parse_long(argv[i + 2]));
    return 0;
  }
  if (strncmp(mode, "limit", 5) == 0 && argc - i == 2) {
    impl = mode;
    workload = argv[i];
    n = parse_long(argv[i + 1]);
  } else if (strcmp(mode, "inbox") == 0 && argc - i == 2) {
    impl = argv[i];
    workload = "W5_inbox";
    n = parse_long(argv[i + 1]);
  } else if (strcmp(mode, "lua") == 0 && argc - i == 4) {
    impl = argv[i];
    script = argv[i + 1];
    workload = argv[i + 2];
    n = parse_long(argv[i + 3]);
  } else {
    usage();
    return 2;
  }

  for (r = 0; r < reps; r++) {
    bench_result res = BENCH_NO_RESULT;
    bool ok;
    if (script != NULL)
      ok = run_lua(impl, script, workload, n, quick, &res);
    else if (strncmp(mode, "limit", 5) == 0)
      ok = bench_limit(mode, workload, n, &res);
    else
      ok = bench_inbox(impl, n, quick, &res);
    if (!ok) {
      fprintf(stderr, "luna_bench: %s does not implement %s: skipped\n", impl, workload);
      return 0;
    }
    if (r == 0) {
      best = res;
      continue;
    }
    if (res.ns_per_op >= 0 && res.ns_per_op < best.ns_per_op)
      best.ns_per_op = res.ns_per_op;
    if (res.allocs_per_op > best.allocs_per_op)
      best.allocs_per_op = res.allocs_per_op;
  }
  bench_print(workload, impl, n, best);
  return 0;
}
