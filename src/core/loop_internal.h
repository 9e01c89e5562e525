/*
** loop_internal.h: the loop's private state, shared by the core's modules.
** Not installed; outside src/core only the core's unit tests include it.
** The layers above the core use lunaloop/extension.h instead, whose view
** (luna__loop_view) is the first member of the struct here.
*/
#ifndef LUNA_LOOP_INTERNAL_H
#define LUNA_LOOP_INTERNAL_H

#include <stdbool.h>

#include "alloc.h"
#include "clock.h"
#include "inbox.h"
#include "lunaloop/error.h"
#include "lunaloop/extension.h"
#include "lunaloop/loop.h"
#include "queue.h"
#include "runner.h"
#include "sim_internal.h"
#include "timer.h"

/* Defaults for zero fields of luna_config. */
#define LUNA__DEFAULT_FIXED_DT (20 * 1000 * 1000) /* 20 ms: 50 Hz */
#define LUNA__DEFAULT_MAX_FIXED_STEPS 8

typedef struct luna__listener {
  luna_listener_fn fn; /* NULL: removed during a dispatch, compacted after */
  void *ud;
} luna__listener;

struct luna_loop {
  /* First, so that luna__loop_view_of is a conversion: frame, delta,
     fixed_dt, current, held, in_fixed_step and the continuation queues
     (see extension.h). */
  luna__loop_view v;
  luna__alloc alloc;
  luna__clocks clocks;
  luna__inbox inbox;
  luna__timers timers;
  luna__runner runner;

  luna__listener *listeners;
  size_t nlisteners, listeners_cap;

  luna_hook_fn hook;
  void *hook_ud;

  /* Frame and time. */
  double time_scale;       /* read at each begin_frame */
  luna_ns unscaled_delta;  /* unscaled delta of the current frame */
  luna_ns accumulator;     /* scaled time not yet consumed by fixed steps */
  int max_fixed_steps;     /* > 0 */
  int fixed_steps_due;     /* steps left in this frame */

  /* Reentrancy: which driver or callback is on the stack. */
  bool in_frame;           /* inside luna_loop_frame (hooks included) */
  bool in_listener;        /* dispatching reset/free to listeners */
  uint64_t run_seq;        /* the timer sequence when the current run began:
                              group clocks (gclock.c) call only older timers */

  /* Statistics (see luna_loop_stats). */
  uint64_t fixed_steps_run;
  uint64_t dropped_fixed_steps;
  luna_ns dropped_fixed_ns;
  uint64_t runs[LUNA_TIMING_COUNT];  /* runs of each timing */
  /* Profiling (luna_loop_set_profiling): while on, each run of a timing
     reads the runner's cost clock at its start and end. Off by default, so
     a run then costs one branch. */
  bool profiling;
  bool time_frames;     /* luna__loop_time_frames: begin_frame reads the cost clock */
  luna_ns frame_began;  /* that reading (luna__loop_frame_began) */
  luna_ns spent[LUNA_TIMING_COUNT];  /* cost-clock ns spent in each timing */
  /* The last LUNA_FRAME_HISTORY frames' costs per timing, measured by the
     same reads as spent[] (no clock read of their own), for
     luna_loop_frame_costs: 128 frames of 16 timings are 16 KiB. */
  struct {
    luna_ns current[LUNA_TIMING_COUNT]; /* this frame's runs so far */
    bool measured;         /* a run of this frame was profiled */
    uint64_t recorded;     /* frames recorded; ring[recorded % N] is next */
    luna_ns ring[LUNA_FRAME_HISTORY][LUNA_TIMING_COUNT];
  } history;

  /* Warming ahead (luna__loop_set_warm): fn NULL when nobody asked. */
  struct {
    luna_fn fn;
    void (*warm)(void *arg);
  } warm;

  /* The simulation group driving a timing pair (lunaloop/sim.h), or NULL;
     owned by the loop from luna_sim_new on. */
  luna_sim *sim;

  /* The binding layer's collector pacer for this loop (luna__loop_pacer):
     opaque here, NULL until a Lua state joins the loop. */
  void *pacer;
};

/* True once luna_loop_stop was called in the current run: the modules check
   it after every callback and return at once, keeping what is left. */
static inline bool luna__loop_stopping(const luna_loop *loop) {
  return loop->v.stop;
}

#endif
