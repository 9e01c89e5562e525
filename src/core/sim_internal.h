/*
** sim_internal.h: what loop.c calls of the simulation group (sim.c) to
** let a sim drive its timing pair. Private to src/core; the public API is
** include/lunaloop/sim.h.
*/
#ifndef LUNA_SIM_INTERNAL_H
#define LUNA_SIM_INTERNAL_H

#include <stdbool.h>

#include "lunaloop/sim.h"

/* The first timing of the sim's pair, or -1 until the first
   luna_loop_begin_frame after luna_sim_new (the pair is not the sim's yet). */
int luna__sim_timing(const luna_sim *sim);

/* luna_loop_begin_frame: closes a tick left open (a stopped frame), adds
   the frame's scaled dt to the accumulator and plans the frame's steps
   with the catch-up policy. */
void luna__sim_begin_frame(luna_sim *sim, luna_ns scaled_dt);

/* At the start of a run of the pair's first timing (after the loop marked
   the timing current): when a step is due, starts a normal tick (tick
   number, delta time, fixed clock for the FixedUpdate pair, the provider's
   tick callback and its save) and returns true; false for a plain run. */
bool luna__sim_begin_run(luna_sim *sim);

/* At the end of a run of the pair's Last timing, and when a frame ends:
   ends a normal tick still open (and runs the sync-test check). */
void luna__sim_end_tick(luna_sim *sim);

/* luna_loop_free: detaches the provider and frees the sim whatever runs. */
void luna__sim_destroy(luna_sim *sim);

#endif
