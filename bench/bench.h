/*
** bench.h: what the programs of the benchmark suite share: the counting
** allocator (every Lua state and every loop of the suite allocates through
** it, so live bytes and allocation counts are exact), clocks, and the one
** output line of a measurement.
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
  double ns_per_op;
  double bytes_per_task;
  double allocs_per_op;
} bench_result;

#define BENCH_NONE (-1.0)

/* The allocator with the lua_Alloc contract, for lua_newstate and
   luna_config.alloc. Thread safe (posting threads may call it). */
void *bench_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
/* Bytes live now (by the sizes callers report) and allocations so far
   (successful calls that created or grew a block). */
long bench_live_bytes(void);
long bench_allocs(void);

/* Rounds of the per-frame workloads (W1, W2_steady, W6): 100, fewer for
   very many tasks so the scaling runs stay short, at least 10. Every
   implementation uses this one rule (Lua scripts as bench.rounds(n)). */
long bench_rounds_for(long n);

/* A new Lua state on bench_alloc with the standard libraries open. */
lua_State *bench_new_state(void);

/* Monotonic wall time and this process's CPU time, in ns. */
int64_t bench_now_ns(void);
int64_t bench_cpu_ns(void);

/* Prints a measurement line on stdout (flushed). */
void bench_print(const char *workload, const char *impl, long n, bench_result r);

/* Loads a chunk that returns one function and leaves the function on top of
   L; exits the program on a syntax error. */
void bench_push_chunk(lua_State *L, const char *src);

/* Dies with a message on stderr (exit status 1). */
void bench_die(const char *fmt, ...);

/* The entry points of the modes (see main.c). Each runs one workload once
   and returns its result; `quick` means the small sizes of the test run. */
bool bench_limit(const char *workload, long n, bool task, bench_result *out);
bool bench_inbox(const char *impl, long n, bool quick, bench_result *out);
/* The hostile-mods workload (hostile.c): prints its own lines. */
void bench_hostile(long frames);

#endif
