/*
** lunaloop/sim.h: the simulation group, a game loop within the game loop:
** numbered fixed ticks with catch-up policies, an interpolation fraction,
** and the host-driven rollback of networked prediction (save, load, step,
** resimulate, partial ticks, snapshots as bytes, a sync-test mode).
**
** Threads: every function here is for the loop thread only, like loop.h.
** Errors: 0 or a negative LUNA_E* code (error.h); getters return 0 (or
** NULL) for a NULL sim.
**
** -- Ticks ---------------------------------------------------------------
** A tick is one step of the simulation, `tick_ns` long. Tick numbers are
** uint64_t and never wrap (at 1 kHz 2^64 ticks are 584 million years). The
** sim's tick (luna_sim_tick) is the tick its state belongs to: 0 before the
** first tick, N + 1 from the start of tick N + 1 on (so inside a tick it is
** the tick being simulated, after it the last one simulated). A snapshot
** saved at tick N is the state at the end of tick N.
**
** -- The simulation in the frame -------------------------------------------
** A sim runs at one timing pair of its loop (default FixedUpdate /
** LastFixedUpdate). It replaces the loop's plain fixed accumulator for that
** pair: luna_loop_begin_frame hands the frame's scaled dt, times the sim's
** rate scale, to the sim's accumulator, and the sim's catch-up policy turns
** it into the frame's steps (a step is one tick, or several in one batch).
** luna_loop_frame then runs the pair once per step. Each step is a normal
** tick:
**   1. at the start of the pair's first timing's run, before its four
**      steps (loop.h): the tick number advances (by `batch`), the pair's
**      delta time (luna_loop_delta) reads the step's dt_ns and, for the
**      FixedUpdate pair, the fixed clock advances by dt_ns;
**   2. the provider's tick callback runs (state, below), then the provider
**      saves the tick (unless manual_save);
**   3. the first timing's run: what tasks and callbacks wait at it;
**   4. the host hook, then the Last timing's run;
**   5. at the end of the Last run the tick is over; with a check distance
**      the sync-test compares it (below).
** Resimulated and partial ticks (luna_sim_step, luna_sim_resimulate,
** luna_sim_partial) run only step 2's tick callback: no timing runs, and the
** frame clocks, the frame counter and the fixed clock do not move; inside
** the callback luna_loop_delta reads the tick's dt_ns.
** A host that drives the timings itself (luna_loop_begin_frame, then
** luna_loop_run) gets the same: each luna_loop_run of the pair's first
** timing starts a normal tick while steps are due (luna_sim_steps_due), and
** is a plain run without a tick once none is due.
** With the sim at another pair, FixedUpdate keeps the loop's plain
** accumulator (loop.h) and the sim's pair runs once per step, 0..n times a
** frame, instead of once.
**
** -- State -----------------------------------------------------------------
** The state lives above the core (in the Lua binding: tables registered with
** sim.state). The layer that owns it registers a provider (a table of
** callbacks, luna_sim_provider): the core owns the history ring (which tick
** is in which slot, with its checksum, and which slots are valid), the
** provider stores the data of each slot. A sim with no provider still
** counts ticks, runs its pair and reports alpha; the operations that need
** state return LUNA_ENOTSUP.
**
** Slots are ints in [0, luna_sim_slots(sim)): history slots [0, history),
** tick N in slot N % history; slot `history` (LUNA_SIM_SLOT_PARTIAL) holds
** the state before a partial tick; slot `history + 1` (LUNA_SIM_SLOT_CHECK)
** the sync-test's resimulated copy that is compared with the history.
**
** -- Reentrancy --------------------------------------------------------------
** While a tick runs (from step 1 of a normal tick to the end of its Last
** run, and during any provider tick callback) and while a provider callback
** runs, the operations that change the sim's tick or state (save, load,
** step, resimulate, partial, import, confirm, set_provider, free) return
** LUNA_ESTATE: rollback is done between ticks (in practice at EarlyUpdate or
** PreUpdate, or from the host's code between frames). Provider callbacks
** run with the loop held (extension.h), so luna_loop_frame / run / reset
** return LUNA_ESTATE from inside them too.
**
** Follows: Unity Netcode for Entities (the predicted simulation group that
** rolls back and re-predicts, NetworkTime's flags, simulation step batching),
** GGPO (save / load / advance frame, sync-test), Roblox's server-authority
** prediction. docs/netcode.md maps the terms.
*/
#ifndef LUNALOOP_SIM_H
#define LUNALOOP_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "export.h"
#include "loop.h"
#include "timing.h"

LUNA_BEGIN_DECLS

typedef struct luna_sim luna_sim;

/* Defaults and limits of luna_sim_config. */
#define LUNA_SIM_DEFAULT_TICK_NS INT64_C(16666667) /* 1/60 s to the nearest ns */
#define LUNA_SIM_DEFAULT_MAX_TICKS 8     /* max_ticks_per_frame */
#define LUNA_SIM_DEFAULT_MAX_BATCH 4     /* max_batch */
#define LUNA_SIM_DEFAULT_HISTORY 64      /* history */
#define LUNA_SIM_HISTORY_MAX 65536       /* the largest history */
#define LUNA_SIM_MAX_TICKS_MAX 65536     /* the largest max_ticks_per_frame,
                                            max_batch and max_debt */
#define LUNA_SIM_RATE_SCALE_MAX 16.0     /* the largest rate scale */
/* The longest tick: LUNA_CLOCK_MAX / LUNA_SIM_MAX_TICKS_MAX (2^45 ns, about
   9.8 hours), so that a batch's dt_ns always fits. */
#define LUNA_SIM_TICK_NS_MAX (LUNA_CLOCK_MAX / LUNA_SIM_MAX_TICKS_MAX)
/* The largest tick luna_sim_import takes (2^62): ticks only grow by
   stepping from there, so they never wrap (2^62 more ticks at 1 MHz are
   146,000 years), and every tick fits a Lua integer. */
#define LUNA_SIM_TICK_MAX (UINT64_C(1) << 62)

/* The catch-up policy: what a frame does with the ticks that are due.
   Every policy first adds the frame's scaled dt times the rate scale to the
   accumulator; `due` below is floor(accumulator / tick_ns), and the
   remainder stays in the accumulator (alpha is remainder / tick_ns). */
typedef enum luna_sim_policy {
  /* Run min(due, max_ticks_per_frame) ticks, one per step; the rest is
     dropped and counted (dropped_ticks, dropped_ns). Unity's and the
     loop's own fixed step; the default. */
  LUNA_SIM_DROP = 0,
  /* At most max_ticks_per_frame steps: when more are due, the last step
     covers k ticks at once (batch k, dt_ns k x tick_ns, LUNA_SIM_CATCH_UP),
     k at most max_batch; what even that cannot cover is dropped and
     counted. A server that falls behind runs a few large steps instead of
     many small ones, so catching up cannot feed on itself (Netcode for
     Entities' step batching). */
  LUNA_SIM_BATCH = 1,
  /* Run at most max_ticks_per_frame ticks; carry up to max_debt of the rest
     into the following frames (each frame still runs at most the cap,
     carried ticks first); drop and count beyond that. For a simulation that
     must not lose ticks to a short hitch (lockstep, replays). */
  LUNA_SIM_DEBT = 2,
  /* At most one tick a frame, whatever dt: whole ticks beyond the one are
     dropped from the accumulator and counted as slowdown (slowdown_ticks,
     slowdown_ns), so simulated time never passes the (stretched) frame
     time; the simulation slows down instead of stuttering. For local
     games that prefer slow motion to skipped ticks. */
  LUNA_SIM_RENDER_PACED = 3,
  /* Frames run no ticks (the pair is not run by luna_loop_frame and the
     accumulator does not move); only the host advances the sim, with
     luna_sim_step (GGPO's advance frame). */
  LUNA_SIM_MANUAL = 4
} luna_sim_policy;

/* Flags of a tick (luna_sim_tick_info.flags). */
typedef enum luna_sim_flag {
  /* The tick was simulated before and is simulated again after a load
     (luna_sim_step / luna_sim_resimulate below the head, or the sync-test's
     check). */
  LUNA_SIM_RESIMULATING = 1u << 0,
  /* The first time this tick is fully simulated: the tick is beyond every
     tick simulated before (the head, luna_sim_head). Effects that must
     happen once per tick key on it. */
  LUNA_SIM_FIRST_FULL = 1u << 1,
  /* A partial tick (luna_sim_partial): dt_ns is less than a tick, and its
     effects on the state are undone before the next full tick. */
  LUNA_SIM_PARTIAL = 1u << 2,
  /* A batched catch-up step (LUNA_SIM_BATCH): batch > 1. */
  LUNA_SIM_CATCH_UP = 1u << 3,
  /* The last step the frame runs in this frame (normal ticks), or passed
     by the host to luna_sim_step. */
  LUNA_SIM_FINAL = 1u << 4
} luna_sim_flag;

/* What a tick callback is told about the tick it runs. */
typedef struct luna_sim_tick_info {
  uint64_t tick;   /* the tick simulated (for a batch, its last tick) */
  luna_ns dt_ns;   /* tick_ns x batch; for a partial tick, less than tick_ns */
  uint32_t batch;  /* ticks this step covers: 1, or k of a batched step */
  uint32_t flags;  /* luna_sim_flag bits */
} luna_sim_tick_info;

/* Configuration. A zero field means the default, so `{0}` is valid. */
typedef struct luna_sim_config {
  luna_ns tick_ns;          /* tick length in ns; 0: LUNA_SIM_DEFAULT_TICK_NS */
  int max_ticks_per_frame;  /* cap of steps per frame; 0: 8 */
  luna_sim_policy policy;   /* 0: LUNA_SIM_DROP */
  int max_batch;            /* LUNA_SIM_BATCH: most ticks of one step; 0: 4 */
  int max_debt;             /* LUNA_SIM_DEBT: most ticks carried; 0:
                               max_ticks_per_frame */
  int history;              /* snapshots kept (ticks); 0: 64 */
  luna_timing timing;       /* first timing of the pair (even); 0
                               (LUNA_INITIALIZATION, which a sim cannot
                               use): LUNA_FIXED_UPDATE */
  int check_distance;       /* sync-test: 0 off; d > 0: after each first
                               full tick N, load N - d, resimulate to N and
                               compare each tick's checksum with the history
                               (d < history) */
  double rate_scale;        /* clock stretch: the accumulator gets
                               dt x rate_scale; 0: 1. See
                               luna_sim_set_rate_scale */
  bool manual_save;         /* true: full ticks are not saved by the core;
                               the host calls luna_sim_save (not with a
                               check distance) */
} luna_sim_config;

/* Counters (luna_sim_get_stats), cumulative since luna_sim_new unless
   noted. */
typedef struct luna_sim_stats {
  uint64_t tick;              /* luna_sim_tick now */
  uint64_t head;              /* luna_sim_head now */
  uint64_t confirmed;         /* luna_sim_confirmed now */
  uint64_t ticks;             /* ticks run by frames (a batch of k counts k) */
  uint64_t steps;             /* steps run by frames (a batch counts 1) */
  uint64_t batched_steps;     /* steps with batch > 1 */
  uint64_t batched_ticks;     /* ticks those steps covered */
  uint64_t dropped_ticks;     /* ticks dropped by the cap (all policies) */
  luna_ns dropped_ns;         /* their time: dropped_ticks x tick_ns */
  uint64_t debt;              /* ticks carried into the next frame, now */
  uint64_t debt_carried;      /* sum of the ticks carried at each frame */
  uint64_t slowdown_ticks;    /* ticks given up by LUNA_SIM_RENDER_PACED */
  luna_ns slowdown_ns;        /* their time */
  uint64_t host_steps;        /* luna_sim_step calls that ran a tick
                                 (resimulate's included) */
  uint64_t resimulated_ticks; /* ticks run with LUNA_SIM_RESIMULATING */
  uint64_t partial_ticks;     /* partial ticks run */
  uint64_t rollbacks;         /* successful luna_sim_load calls */
  uint64_t saves;             /* snapshots saved (auto and luna_sim_save) */
  uint64_t save_errors;       /* automatic saves or partial restores the
                                 provider failed (the tick is then not in
                                 the history) */
  uint64_t checks;            /* ticks compared by the sync-test */
  uint64_t mismatches;        /* of those, the ones whose checksum differed */
} luna_sim_stats;

/* The sync-test's report of a tick whose resimulation differs. */
typedef struct luna_sim_mismatch {
  uint64_t tick;              /* the first differing tick of this check */
  uint64_t expected;          /* the checksum saved in the history */
  uint64_t actual;            /* the resimulated one */
  int expected_slot;          /* the history slot of `tick` */
  int actual_slot;            /* LUNA_SIM_SLOT_CHECK: the resimulated copy */
} luna_sim_mismatch;

/* Receives exported bytes (luna_sim_export); may be called several times
   for one snapshot. Return 0 to go on, a negative LUNA_E* code to stop (the
   export then returns it). */
typedef int (*luna_sim_write_fn)(void *ud, const void *bytes, size_t len);

/* The state provider: what the layer that owns the state registers
   (luna_sim_set_provider; the struct is copied). The callbacks run on the
   loop thread, with the loop held; they must not call the sim's operations
   that change tick or state (those return LUNA_ESTATE) but may read it
   (luna_sim_tick, luna_sim_current, ...). Those marked optional may be
   NULL. Codes returned are 0 or negative LUNA_E*. */
typedef struct luna_sim_provider {
  /* Copies the current state into `slot`, replacing what it held, and
     stores its checksum (a value that depends only on the state) in
     *checksum. `tick` is the tick the state belongs to. */
  int (*save)(void *ud, uint64_t tick, int slot, uint64_t *checksum);
  /* Makes the state equal to the copy in `slot` (saved at `tick`); the copy
     stays in the slot. */
  int (*load)(void *ud, uint64_t tick, int slot);
  /* Optional: the slot's copy (of `tick`) is no longer needed (a load made
     it part of an abandoned future); it may be freed. A later save may
     reuse the slot without a discard first. */
  void (*discard)(void *ud, uint64_t tick, int slot);
  /* Runs one tick over the state: the simulation's callbacks. Reports its
     own errors (a failing callback must not stop the tick's others). */
  void (*tick)(void *ud, luna_sim *sim, const luna_sim_tick_info *info);
  /* Optional: writes the copy in `slot` (of `tick`) as bytes through
     write(write_ud, ...); returns 0 or the first error (also write's). */
  int (*export_bytes)(void *ud, uint64_t tick, int slot,
                      luna_sim_write_fn write, void *write_ud);
  /* Optional: parses bytes made by export_bytes into `slot` as the copy of
     `tick` and stores its checksum in *checksum (LUNA_EINVAL for bytes it
     cannot read; the slot then holds nothing valid). */
  int (*import_bytes)(void *ud, uint64_t tick, int slot, const void *bytes,
                      size_t len, uint64_t *checksum);
  /* Optional: the ticks up to `tick` are confirmed (luna_sim_confirm): they
     will not be rolled back below. */
  void (*confirm)(void *ud, uint64_t tick);
  /* Optional: the sync-test found a tick that differs (see
     luna_sim_mismatch): the provider can compare the two slots and report
     the first differing path. Without it the mismatch is only counted. */
  void (*mismatch)(void *ud, const luna_sim_mismatch *m);
  /* Optional: the provider is being removed (luna_sim_set_provider with
     another one or NULL, luna_sim_free, luna_loop_free): the last callback
     it gets; it frees what its slots hold. */
  void (*detach)(void *ud, luna_sim *sim);
} luna_sim_provider;

/* ---- lifetime ------------------------------------------------------------ */

/* Creates the sim of `loop` (one per loop) from `config` (NULL: all
   defaults) and stores it in *out. From the next luna_loop_begin_frame on
   it drives its timing pair (a frame under way when it is made runs its
   pair as it would without it). The loop owns it: luna_loop_free frees it
   (after the loop's listeners ran). 0; LUNA_EINVAL for a NULL loop or out,
   a negative or out-of-range field (tick_ns < 0 or above
   LUNA_SIM_TICK_NS_MAX, max_ticks_per_frame,
   max_batch, max_debt outside [0, LUNA_SIM_MAX_TICKS_MAX], history outside
   [0, LUNA_SIM_HISTORY_MAX], an odd or out-of-range timing, an unknown
   policy, check_distance < 0 or >= history, check_distance with
   manual_save, rate_scale negative, NaN or above LUNA_SIM_RATE_SCALE_MAX);
   LUNA_EALREADY when the loop has a sim; LUNA_ESTATE from inside a run of
   the pair's timings; LUNA_ENOMEM. */
LUNA_API int luna_sim_new(luna_loop *loop, const luna_sim_config *config, luna_sim **out);

/* Detaches the provider and frees the sim; the loop's pair goes back to
   what it runs without one (FixedUpdate: the plain accumulator, which
   starts from 0). 0; LUNA_EINVAL for NULL; LUNA_ESTATE during a tick, a
   provider callback or a run of the pair's timings. */
LUNA_API int luna_sim_free(luna_sim *sim);

/* The sim of `loop`, or NULL (none, or a NULL loop). */
LUNA_API luna_sim *luna_sim_of(const luna_loop *loop);

/* The sim's loop. */
LUNA_API luna_loop *luna_sim_loop(const luna_sim *sim);

/* Fills *out with the configuration in effect, defaults filled in (tick_ns,
   caps, history, timing and rate_scale as used). Zeroes it for a NULL sim. */
LUNA_API void luna_sim_get_config(const luna_sim *sim, luna_sim_config *out);

/* Registers the state provider (copied; NULL ops removes it). The old one
   gets its detach, and the history is emptied (its slots meant the old
   provider's data). ud is handed to every callback. 0; LUNA_EINVAL for a
   NULL sim or ops with a NULL save, load or tick; LUNA_ESTATE during a tick
   or a provider callback (removing, NULL ops, is refused only inside a
   provider callback: the owner of the state may stop providing it during
   a tick, e.g. when it is closed by the host hook, and the tick goes on
   without a provider). */
LUNA_API int luna_sim_set_provider(luna_sim *sim, const luna_sim_provider *ops, void *ud);

/* The provider's ud, or NULL when none is registered. */
LUNA_API void *luna_sim_provider_ud(const luna_sim *sim);

/* ---- reading the sim ------------------------------------------------------ */

/* The sim's tick (see Ticks above). */
LUNA_API uint64_t luna_sim_tick(const luna_sim *sim);

/* The head: the highest tick ever fully simulated on the current timeline
   (a load does not lower it; luna_sim_resimulate runs up to it). */
LUNA_API uint64_t luna_sim_head(const luna_sim *sim);

/* The highest tick confirmed by luna_sim_confirm (0 before any). */
LUNA_API uint64_t luna_sim_confirmed(const luna_sim *sim);

/* The interpolation fraction: the part of the next tick already
   accumulated, pending_ns / tick_ns, in [0, 1). Exact from ns (10 ms of a
   20 ms tick read 0.5 exactly). A render blends the last two ticks' states
   with it. */
LUNA_API double luna_sim_alpha(const luna_sim *sim);

/* The accumulated ns of the next tick (alpha's numerator), in
   [0, tick_ns): the dt a host usually gives luna_sim_partial. */
LUNA_API luna_ns luna_sim_pending_ns(const luna_sim *sim);

/* The tick length in ns. */
LUNA_API luna_ns luna_sim_tick_ns(const luna_sim *sim);

/* Steps still due in this frame (set by begin_frame, each normal tick
   consumes one). */
LUNA_API int luna_sim_steps_due(const luna_sim *sim);

/* The tick running now: inside the provider's tick callback and, for a
   normal tick, from the start of the pair's first run to the end of its
   Last run (so tasks and callbacks at the pair can read the flags). NULL
   between ticks. The pointer is valid until the tick ends. */
LUNA_API const luna_sim_tick_info *luna_sim_current(const luna_sim *sim);

/* True while the provider's tick callback runs (not the pair's timings):
   where the layers above refuse what cannot be rolled back (an await). */
LUNA_API bool luna_sim_in_tick_callback(const luna_sim *sim);

/* The number of provider slots: history + 2 (see State above). */
LUNA_API int luna_sim_slots(const luna_sim *sim);
#define LUNA_SIM_SLOT_PARTIAL(history) (history)
#define LUNA_SIM_SLOT_CHECK(history) ((history) + 1)

/* The checksum saved with `tick`: 0 and *checksum (may be NULL), or
   LUNA_ENOENT when the history does not hold the tick. */
LUNA_API int luna_sim_checksum(const luna_sim *sim, uint64_t tick, uint64_t *checksum);

/* The oldest tick the history holds, in *oldest: 0, or LUNA_ENOENT when it
   is empty. Ticks from there to the sim's tick are held unless a batched
   step skipped them (only a batch's last tick is saved). */
LUNA_API int luna_sim_oldest(const luna_sim *sim, uint64_t *oldest);

/* Fills *out (luna_sim_stats); zeroes it for a NULL sim. */
LUNA_API void luna_sim_get_stats(const luna_sim *sim, luna_sim_stats *out);

/* ---- settings ----------------------------------------------------------------- */

/* The clock stretch: from the next begin_frame the accumulator gets the
   frame's scaled dt x scale, exactly to the ns over frames (the remainder
   carries; a scale is used as parts per billion, round(scale x 1e9)), so a
   client can run slightly slower or faster than its server. The frame
   clocks are not affected. 0 pauses the simulation. 0; LUNA_EINVAL for a
   NULL sim or a scale negative, NaN or above LUNA_SIM_RATE_SCALE_MAX. */
LUNA_API int luna_sim_set_rate_scale(luna_sim *sim, double scale);
LUNA_API double luna_sim_rate_scale(const luna_sim *sim);

/* Sets the check distance of the sync-test (0 turns it off). 0;
   LUNA_EINVAL for d < 0, d >= history or with manual_save; LUNA_ESTATE
   during a tick. */
LUNA_API int luna_sim_set_check_distance(luna_sim *sim, int d);

/* ---- host-driven rollback ----------------------------------------------------- */

/* Saves the state of the sim's tick into its history slot (evicting the
   tick `history` older) and stores the provider's checksum in *checksum
   (may be NULL). Saving a tick again replaces its snapshot. 0;
   LUNA_EINVAL (NULL sim); LUNA_ENOTSUP without a provider; LUNA_ESTATE
   during a tick; the provider's error (the tick is then not held). */
LUNA_API int luna_sim_save(luna_sim *sim, uint64_t *checksum);

/* Rolls back: makes the state that of saved `tick` (provider load) and the
   sim's tick `tick`. Snapshots of later ticks are discarded: they belong to
   the future that is being replaced (so loading 15 then 10 in one frame
   gives the tick-10 snapshot). The head stays (or rises to `tick`, for an
   imported snapshot beyond it). Cancels a pending partial
   tick's restore (the load replaces that state). 0; LUNA_EINVAL (NULL);
   LUNA_ENOENT when the history does not hold `tick` (past the history,
   never saved, or discarded); LUNA_ENOTSUP without a provider; LUNA_ESTATE
   during a tick; the provider's error (then nothing changed but the
   state, which the provider owns). */
LUNA_API int luna_sim_load(luna_sim *sim, uint64_t tick);

/* Runs one tick now, with only the provider's tick callback (no timing
   runs, the frame clocks stand still): tick + 1, dt_ns tick_ns, batch 1,
   flags LUNA_SIM_RESIMULATING when the tick is at or below the head,
   LUNA_SIM_FIRST_FULL beyond it (which raises the head), plus `flags`
   (only LUNA_SIM_FINAL and LUNA_SIM_CATCH_UP may be given). Then saves it
   (unless manual_save) and, beyond the head, runs the sync-test check.
   Works without a provider (counts the tick). 0; LUNA_EINVAL (NULL sim,
   other flags); LUNA_ESTATE during a tick. */
LUNA_API int luna_sim_step(luna_sim *sim, uint32_t flags);

/* luna_sim_load(from), then luna_sim_step until the sim's tick is the head
   again: the resimulation of a client that received the server's state for
   `from`. 0 and the ticks run in *ran (may be NULL); the errors of load. */
LUNA_API int luna_sim_resimulate(luna_sim *sim, uint64_t from, uint64_t *ran);

/* Runs a partial tick: saves the state into LUNA_SIM_SLOT_PARTIAL, then
   runs the provider's tick callback for tick + 1 with dt_ns `dt` and
   LUNA_SIM_PARTIAL; the sim's tick does not move. The state stays partial
   (for the render) until the next operation of the sim that needs the full
   state (a normal tick, save, step, resimulate, another partial), which
   first loads the slot back (a load replaces the state anyway): a full tick after a partial
   one starts from the pre-partial state. 0; LUNA_EINVAL (NULL, dt <= 0 or
   dt > tick_ns); LUNA_ENOTSUP without a provider; LUNA_ESTATE during a
   tick; the provider's save error (no tick ran). */
LUNA_API int luna_sim_partial(luna_sim *sim, luna_ns dt);

/* Confirms the ticks up to `tick` (<= the sim's tick): the host promises
   not to load below it (luna_sim_load of an older tick then returns
   LUNA_ESTATE); the provider's confirm runs (effects that waited for
   confirmation). A tick at or below the confirmed one is a no-op. 0;
   LUNA_EINVAL (NULL, tick beyond the sim's tick); LUNA_ESTATE during a
   tick. */
LUNA_API int luna_sim_confirm(luna_sim *sim, uint64_t tick);

/* Writes the snapshot of saved `tick` as bytes through write(ud, ...) (the
   provider's format: plain data only). 0; LUNA_EINVAL (NULL sim or write);
   LUNA_ENOENT (not held); LUNA_ENOTSUP (no provider or no export_bytes);
   LUNA_ESTATE during a provider callback; the provider's or write's
   error. */
LUNA_API int luna_sim_export(luna_sim *sim, uint64_t tick, luna_sim_write_fn write, void *ud);

/* Stores bytes made by luna_sim_export as the snapshot of `tick` in the
   history (replacing what its slot held; other ticks stay), with the
   provider's checksum in *checksum (may be NULL): a client stores the
   server's state for a tick, compares checksums (luna_sim_checksum before)
   and, when they differ, resimulates from it; a save game imports, then
   loads. 0; LUNA_EINVAL (NULL sim, NULL bytes with len > 0, a tick above
   LUNA_SIM_TICK_MAX, or bytes the provider cannot read); LUNA_ENOTSUP; LUNA_ESTATE during a tick; the
   provider's error (the tick is then not held). */
LUNA_API int luna_sim_import(luna_sim *sim, uint64_t tick, const void *bytes, size_t len,
                             uint64_t *checksum);

LUNA_END_DECLS

#endif
