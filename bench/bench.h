/*
** bench.h: what the programs of the benchmark suite share: the counting
** allocator (every Lua state and every loop of the suite allocates through
** it, so live bytes and allocation counts are exact), clocks, the knobs the
** suite sets through the environment, and the one output line of a
** measurement.
**
** The knobs are environment variables, read the same way by the C programs
** and by bench/common.lua, so that bench/suite.sh can drive a luna_bench
** built from another tree (scripts/bench --compare) through the Lua
** programs of this one:
**   LUNA_BENCH_GC=generational|incremental  the collector mode of every
**       state (default generational, what stock lua5.4 runs);
**   LUNA_BENCH_ROUNDS=R  the measured frames of the per-frame workloads
**       (W1, W2_steady, W2_frame, W6) instead of their default, so that
**       `scripts/bench --instructions` can difference two sizes;
**   LUNA_BENCH_OPS=FILE  where a measurement writes how many operations
**       its window held (one integer), for that differencing.
**
** Output, one line per measurement, parsed by bench/suite.sh:
**   workload=<name> impl=<impl> n=<N> ns_per_op=<x> bytes_per_task=<y> allocs_per_op=<z>
** The first five fields are the format; allocs_per_op is appended
** (allocations through the counting allocator per operation in the measured
** window). A field that a workload does not measure reads "-".
*/
#ifndef LUNA_BENCH_H
#define LUNA_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

/* A measurement; a negative field was not measured (printed as "-"). */
typedef struct bench_result {
  double ns_per_op; /* process CPU time per operation */
  double bytes_per_task;
  double allocs_per_op;
  double ops; /* operations in the measured window */
} bench_result;

#define BENCH_NONE (-1.0)
#define BENCH_NO_RESULT {BENCH_NONE, BENCH_NONE, BENCH_NONE, BENCH_NONE}

/* The allocator with the lua_Alloc contract, for lua_newstate and
   luna_config.alloc. Thread safe (posting threads may call it). */
void *bench_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
/* Bytes live now (by the sizes callers report) and allocations so far
   (successful calls that created or grew a block). */
long bench_live_bytes(void);
long bench_allocs(void);

/* Rounds of the per-frame workloads (W1, W6): 100, fewer for very many
   tasks so the scaling runs stay short, at least 10; LUNA_BENCH_ROUNDS
   when set. Every implementation uses this one rule (the Lua programs
   through bench/common.lua). */
long bench_rounds_for(long n);
/* LUNA_BENCH_ROUNDS when set, else dflt: the measured rounds of a
   per-frame workload whose default is fixed (W2_steady). */
long bench_rounds(long dflt);

/* A new Lua state on bench_alloc with the standard libraries open and the
   collector in the mode LUNA_BENCH_GC names. */
lua_State *bench_new_state(void);

/* Monotonic wall time (the hostile-mods frames, which a wall-clock budget
   bounds) and this process's CPU time (every other measurement), in ns. */
int64_t bench_now_ns(void);
int64_t bench_cpu_ns(void);

/* Prints a measurement line on stdout (flushed) and writes r.ops to the
   LUNA_BENCH_OPS file when that is set. */
void bench_print(const char *workload, const char *impl, long n, bench_result r);

/* Loads a chunk that returns one function and leaves the function on top of
   L; exits the program on a syntax error. */
void bench_push_chunk(lua_State *L, const char *src);

/* Dies with a message on stderr (exit status 1). */
void bench_die(const char *fmt, ...);

/* The entry points of the modes (see main.c). Each runs one workload once
   and returns its result; `quick` means the small sizes of the test run. */
/* impl: limit, limit_task or limit_deadline (limit.c). */
bool bench_limit(const char *impl, const char *workload, long n, bench_result *out);
bool bench_inbox(const char *impl, long n, bool quick, bench_result *out);
/* The hostile-mods workload (hostile.c): prints its own lines. */
void bench_hostile(long frames);
/* The simulation's rollback workload (sim.c): n entities, frames per
   round, the best of `rounds`; prints its own lines. */
void bench_sim(long n, long frames, int rounds);

#endif
