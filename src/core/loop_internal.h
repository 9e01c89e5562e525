/*
** loop_internal.h: the loop's private state, shared by the core's modules.
** Not installed. Outside src/core only unit tests and the Lua binding's hot
** paths include it (the binding reads a few fields and queues continuations
** without the public functions' argument checks); it never includes Lua.
*/
#ifndef LUNA_LOOP_INTERNAL_H
#define LUNA_LOOP_INTERNAL_H

#include <stdbool.h>

#include "alloc.h"
#include "clock.h"
#include "inbox.h"
#include "lunaloop/error.h"
#include "lunaloop/loop.h"
#include "queue.h"
#include "runner.h"
#include "timer.h"

/* Defaults for zero fields of luna_config. */
#define LUNA__DEFAULT_FIXED_DT (20 * 1000 * 1000) /* 20 ms: 50 Hz */
#define LUNA__DEFAULT_MAX_FIXED_STEPS 8

typedef struct luna__listener {
  luna_listener_fn fn; /* NULL: removed during a dispatch, compacted after */
  void *ud;
} luna__listener;

struct luna_loop {
  luna__alloc alloc;
  luna__clocks clocks;
  luna__queue queues[LUNA_TIMING_COUNT];
  luna__inbox inbox;
  luna__timers timers;
  luna__runner runner;

  luna__listener *listeners;
  size_t nlisteners, listeners_cap;

  luna_hook_fn hook;
  void *hook_ud;

  /* Frame and time. */
  uint64_t frame;          /* frames begun */
  double time_scale;       /* read at each begin_frame */
  luna_ns delta;           /* scaled delta of the current frame */
  luna_ns unscaled_delta;  /* unscaled delta of the current frame */
  luna_ns fixed_dt;        /* > 0 */
  luna_ns accumulator;     /* scaled time not yet consumed by fixed steps */
  int max_fixed_steps;     /* > 0 */
  int fixed_steps_due;     /* steps left in this frame */
  bool in_fixed_step;      /* from a FixedUpdate run to its LastFixedUpdate */

  /* Reentrancy: which driver or callback is on the stack. */
  int current;             /* timing running now, or -1 */
  bool in_frame;           /* inside luna_loop_frame (hooks included) */
  bool in_listener;        /* dispatching reset/free to listeners */
  int held;          /* luna__loop_hold: a client runs code that must not drive frames */
  bool stop;               /* luna_loop_stop was called during a run */

  /* Statistics (see luna_loop_stats). */
  uint64_t fixed_steps_run;
  uint64_t dropped_fixed_steps;
  luna_ns dropped_fixed_ns;
  uint64_t runs[LUNA_TIMING_COUNT];  /* runs of each timing */
  /* Profiling (luna_loop_set_profiling): while on, each run of a timing
     reads the runner's cost clock at its start and end. Off by default, so
     a run then costs one branch. */
  bool profiling;
  luna_ns spent[LUNA_TIMING_COUNT];  /* cost-clock ns spent in each timing */

  /* Warming ahead (luna__loop_set_warm): fn NULL when nobody asked. */
  struct {
    luna_fn fn;
    void (*warm)(void *arg);
  } warm;
};

/* Prefetches the memory at p for reading: a hint, never a fault, whatever
   p is. The queue and the timers give it the argument of the callback after
   the one they are about to call: a continuation's argument (a Lua task) is
   usually cold, and waiting for it dominated a resume (W1, W2_steady of the
   benchmark suite). */
#if defined(__GNUC__) || defined(__clang__)
#define LUNA__PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define LUNA__PREFETCH(p) ((void)(p))
#endif

/* Warming ahead of a timer's call. Firing timers prefetches the argument
   of the timer after the next one (see LUNA__PREFETCH); a client whose
   timer callback `fn` takes an argument that points at more cold memory (a
   Lua task and its coroutine) names it here, and `warm` is called with the
   argument of the next timer with that fn just before the call before it,
   when the argument is in cache, to prefetch what it points to. Timers
   fire in deadline order, which for sleeping tasks is a random walk over
   memory; continuations run in the order they were queued, mostly the
   order the tasks were made in, which the hardware prefetcher follows
   (warming them was measured too, and only added its call). warm must only
   prefetch. One client per loop; fn NULL turns it off. Loop thread only. */
static inline void luna__loop_set_warm(luna_loop *loop, luna_fn fn, void (*warm)(void *arg)) {
  loop->warm.fn = warm != NULL ? fn : NULL;
  loop->warm.warm = warm;
}

/* True once luna_loop_stop was called in the current run: the modules check
   it after every callback and return at once, keeping what is left. */
static inline bool luna__loop_stopping(const luna_loop *loop) {
  return loop->stop;
}

/* Marks the loop held (+1) or releases it (-1): while held, the drivers
   (frame, begin_frame, run, reset) return LUNA_ESTATE, as inside a
   callback. The Lua binding holds the loop around every task resume, so a
   host C function that a task calls cannot start a nested frame. */
static inline void luna__loop_hold(luna_loop *loop, int delta) {
  loop->held += delta;
}

/* luna_enqueue for a caller that already knows its arguments are valid
   (timing in range, fn not NULL): the Lua binding's task.yield. */
static inline int luna__loop_enqueue(luna_loop *loop, luna_timing timing, luna_fn fn,
                                     void *arg) {
  return luna__queue_push(&loop->queues[timing], &loop->alloc, fn, arg, false);
}

#endif
