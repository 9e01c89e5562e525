/*
** lunaloop/loop.h: the loop, its clocks, and the three kinds of work it runs.
**
** Threads: every function here must be called from the loop thread (the
** thread that drives frames), except luna_post, which any thread may call at
** any time, and the pure helpers of timing.h/error.h. "Loop thread" is a
** contract, not a check: the loop takes no locks.
**
** Bad input: the functions that return a code return LUNA_EINVAL for a NULL
** loop, an unknown timing, clock or timer kind, a NULL callback and the
** out-of-range numbers each one names; the getters return 0 for a NULL loop
** (luna_loop_current_timing: -1; luna_loop_get_stats zeroes *out), and
** luna_loop_free and luna_loop_stop ignore it. Not detectable, so
** undefined: a loop that was freed (also one freed while another thread
** posts to it), a pointer that is not a loop, a loop-thread function called
** from another thread.
**
** Each run of a timing does, in order (this is the whole scheduling model):
**   1. move everything posted from other threads (luna_post) since the last
**      run into the timing's continuation queue, keeping per-producer order;
**   2. run the continuations queued for the timing (FIFO); a continuation
**      queued for this timing while it drains runs at the timing's next run;
**   3. fire the timers that are due, collected before any is called: frame
**      waits first, then scaled, unscaled, realtime and fixed-clock timers;
**      within a kind by deadline, ties in creation order; timers added during
**      this run wait for the next run even if already due;
**   4. run the repeating items by priority (lower first), ties in
**      registration order; items added during the run start at the next run;
**      removed items are compacted away in place. A timing with a budget
**      (luna_loop_set_budget) may defer some items to its next run.
**
** Callbacks may call any loop-thread function, including adding, cancelling
** and removing work, but not luna_loop_frame / luna_loop_run / begin_frame /
** reset / free (those return LUNA_ESTATE from inside a callback).
*/
#ifndef LUNALOOP_LOOP_H
#define LUNALOOP_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "export.h"
#include "timing.h"

LUNA_BEGIN_DECLS

typedef struct luna_loop luna_loop;

/* Allocator with the contract of lua_Alloc: nsize == 0 frees ptr and returns
   NULL; otherwise it (re)allocates ptr from osize to nsize bytes (ptr may be
   NULL) and returns NULL on failure, leaving ptr untouched. */
typedef void *(*luna_alloc_fn)(void *ud, void *ptr, size_t osize, size_t nsize);

/* A monotonic time source in nanoseconds (any origin). Called on the loop
   thread only. */
typedef luna_ns (*luna_time_fn)(void *ud);

/* Host hook: called by luna_loop_frame after each first timing of a phase has
   run and before its Last partner runs, with `timing` the first timing (even
   value). This is where the host plays its own work for the phase. */
typedef void (*luna_hook_fn)(luna_loop *loop, luna_timing timing, void *ud);

/* Events delivered to listeners (luna_loop_add_listener). */
typedef enum luna_event {
  LUNA_EVENT_RESET = 1, /* luna_loop_reset began: cancel what you own */
  LUNA_EVENT_FREE = 2   /* luna_loop_free began: cancel and forget the loop */
} luna_event;
typedef void (*luna_listener_fn)(luna_loop *loop, luna_event event, void *ud);

/* Configuration. A zero field means "the default", so `{0}` is valid. */
typedef struct luna_config {
  luna_ns fixed_dt_ns;   /* fixed step length; 0: 20 ms (50 Hz) */
  int max_fixed_steps;   /* cap of fixed steps per frame; 0: 8 */
  luna_alloc_fn alloc;   /* NULL: the C library's realloc/free. luna_post
                            calls it from the posting thread when the
                            inbox's node pool is empty (to grow it): it
                            must then be thread safe (frees stay on the
                            loop thread). */
  void *alloc_ud;
  luna_time_fn realtime; /* NULL: CLOCK_MONOTONIC */
  void *realtime_ud;
  luna_hook_fn hook;     /* NULL: no host hook */
  void *hook_ud;
} luna_config;

/* ---- lifetime ---------------------------------------------------------- */

/* Creates a loop. `config` may be NULL (all defaults). On success stores the
   loop in *out and returns 0; returns LUNA_EINVAL for a negative fixed_dt_ns
   or max_fixed_steps, LUNA_ENOMEM when allocation fails. The loop's thread is
   the thread that drives it; it may change only while no call is in progress. */
LUNA_API int luna_loop_new(const luna_config *config, luna_loop **out);

/* Tells listeners (LUNA_EVENT_FREE), then frees the loop and everything queued
   on it without calling it. Posts still in the inbox are discarded: stop the
   producers and run the loop until they are delivered before freeing. NULL is
   ignored. Not from inside a callback. */
LUNA_API void luna_loop_free(luna_loop *loop);

/* Cancels and drops everything registered on the loop thread: listeners get
   LUNA_EVENT_RESET first (the Lua binding cancels its tasks there, running
   their to-be-closed variables), then every continuation, timer and item is
   dropped without being called. Cross-thread posts are kept and delivered at
   their timing's next run, since their arguments often own memory only their
   callback frees. Clocks and the frame counter keep going. Returns 0, or
   LUNA_ESTATE from inside a callback. */
LUNA_API int luna_loop_reset(luna_loop *loop);

/* Registers a listener for reset/free; 0 or LUNA_ENOMEM. */
LUNA_API int luna_loop_add_listener(luna_loop *loop, luna_listener_fn fn, void *ud);
/* Removes the first listener registered with this fn and ud; 0 or LUNA_ENOENT. */
LUNA_API int luna_loop_remove_listener(luna_loop *loop, luna_listener_fn fn, void *ud);

/* ---- driving the frame --------------------------------------------------- */

/* The convenience driver: luna_loop_begin_frame(dt), then the 16 timings in
   order, the host hook between each first timing and its Last partner. The
   FixedUpdate/LastFixedUpdate pair runs once per fixed step due (see
   luna_loop_fixed_steps); a loop with a simulation (lunaloop/sim.h) runs
   the sim's pair once per tick step its catch-up policy planned instead. dt is in seconds, >= 0 and finite (LUNA_EINVAL
   otherwise; LUNA_ERANGE for a frame that would push a clock past
   LUNA_CLOCK_MAX, about 73 years: at time scale 1e6 that is 38 minutes of
   frames). Returns 0; LUNA_ESTOPPED when luna_loop_stop was called during
   the frame (the remaining timings were skipped, nothing was dropped);
   LUNA_ESTATE from inside a callback. */
LUNA_API int luna_loop_frame(luna_loop *loop, double dt_seconds);
LUNA_API int luna_loop_frame_ns(luna_loop *loop, luna_ns dt);

/* Starts a frame for hosts with their own phases: frame counter + 1, the
   unscaled clock += dt, the scaled clock += round(dt * time_scale), and the
   fixed-step accumulator += round(dt * time_scale); the number of fixed steps
   due is then floor(accumulator / fixed_dt), capped at max_fixed_steps (time
   beyond the cap is dropped and counted, so a slow frame cannot start a
   spiral of death). With a simulation at the FixedUpdate pair
   (lunaloop/sim.h) the sim's accumulator and policy replace this one. 0;
   LUNA_EINVAL for a negative dt; LUNA_ERANGE for one
   that would push the unscaled or scaled clock past LUNA_CLOCK_MAX (nothing
   changes then);
   LUNA_ESTATE in a callback or while a task of an attached Lua state runs. */
LUNA_API int luna_loop_begin_frame(luna_loop *loop, double dt_seconds);
LUNA_API int luna_loop_begin_frame_ns(luna_loop *loop, luna_ns dt);

/* Runs one timing now (steps 1-4 above). Running LUNA_FIXED_UPDATE starts a
   fixed step: the fixed clock advances by fixed_dt, one step due is consumed
   (if any), and delta time reads fixed_dt until LUNA_LAST_FIXED_UPDATE has run.
   Timings the host never runs simply never fire. Returns 0, LUNA_EINVAL for an
   out-of-range timing, LUNA_ESTATE from inside a callback, LUNA_ESTOPPED when
   luna_loop_stop was called during the run (entries not yet run stay queued). */
LUNA_API int luna_loop_run(luna_loop *loop, luna_timing timing);

/* Asks the running luna_loop_run / luna_loop_frame to return after the current
   callback; what was not run stays queued for the next run. Outside a run it
   does nothing. Loop thread. */
LUNA_API void luna_loop_stop(luna_loop *loop);

/* Fixed steps still due in this frame (set by begin_frame, decremented by
   each run of LUNA_FIXED_UPDATE); with a simulation at the FixedUpdate
   pair, its tick steps due (luna_sim_steps_due). */
LUNA_API int luna_loop_fixed_steps(const luna_loop *loop);

/* ---- clocks ---------------------------------------------------------------- */

/* Frames begun since the loop was created (0 before the first frame). */
LUNA_API uint64_t luna_loop_frame_count(const luna_loop *loop);

/* The clock's current value in ns since the loop was created. The realtime
   clock reads its source now. 0 for an unknown clock. */
LUNA_API luna_ns luna_loop_time(luna_loop *loop, luna_clock clock);

/* Delta time in ns: fixed_dt inside a fixed step (from the start of a
   FixedUpdate run to the end of its LastFixedUpdate), the tick's dt_ns
   inside a simulation's tick (lunaloop/sim.h), otherwise the scaled delta
   of the current frame. */
LUNA_API luna_ns luna_loop_delta(const luna_loop *loop);
/* The unscaled delta of the current frame in ns. */
LUNA_API luna_ns luna_loop_unscaled_delta(const luna_loop *loop);

/* Time scale (from 0 to LUNA_TIME_SCALE_MAX; default 1). The change applies
   from the next frame's clock advance. 0 or LUNA_EINVAL. */
LUNA_API int luna_loop_set_time_scale(luna_loop *loop, double scale);
LUNA_API double luna_loop_time_scale(const luna_loop *loop);

/* The fixed step length in ns (> 0; LUNA_EINVAL otherwise). */
LUNA_API int luna_loop_set_fixed_dt(luna_loop *loop, luna_ns fixed_dt);
LUNA_API luna_ns luna_loop_fixed_dt(const luna_loop *loop);

/* Replaces the realtime source (NULL restores CLOCK_MONOTONIC). The realtime
   clock goes on from the last value it returned (0 if it was never read, so
   a source installed right after luna_loop_new reads 0 then, like one given
   in luna_config) and advances with the new source from there: it never
   runs backwards as observed. Returns 0. */
LUNA_API int luna_loop_set_realtime_source(luna_loop *loop, luna_time_fn fn, void *ud);

/* The timing running now, or -1 outside any run. */
LUNA_API int luna_loop_current_timing(const luna_loop *loop);

/* Counters for introspection and tests, filled by luna_loop_get_stats: a
   snapshot taken at the call (loop thread, any time, also from inside a
   callback; costs O(LUNA_TIMING_COUNT) plus one atomic read). Counts marked
   cumulative grow from the loop's creation and are not cleared by
   luna_loop_reset. */
typedef struct luna_loop_stats {
  uint64_t frames;               /* frames begun */
  uint64_t fixed_steps;          /* fixed steps run (with a simulation at
                                    FixedUpdate: its tick steps) */
  uint64_t dropped_fixed_steps;  /* steps dropped by the max_fixed_steps cap */
  luna_ns dropped_fixed_ns;      /* scaled time dropped with them */
  size_t queued[LUNA_TIMING_COUNT]; /* continuations waiting per timing */
  size_t timers[LUNA_TIMING_COUNT]; /* timers pending per timing */
  size_t items[LUNA_TIMING_COUNT];  /* repeating items per timing */
  uint64_t posts_allocated;      /* posts that used a node the pool had to grow for */
  uint64_t deferred[LUNA_TIMING_COUNT];        /* item calls deferred by the
                                                  budget, cumulative: an item
                                                  deferred by two runs counts 2 */
  uint64_t budget_exceeded[LUNA_TIMING_COUNT]; /* runs that hit the budget
                                                  (deferred at least one item) */
  uint64_t runs[LUNA_TIMING_COUNT];     /* runs of each timing, cumulative */
  luna_ns spent_ns[LUNA_TIMING_COUNT];  /* ns spent running each timing (all
                                           four steps, callbacks included)
                                           while profiling was on, on the
                                           cost clock; cumulative; 0 when
                                           profiling was never on */
} luna_loop_stats;
/* Fills *out (see luna_loop_stats). */
LUNA_API void luna_loop_get_stats(luna_loop *loop, luna_loop_stats *out);

/* True when the loop holds nothing that will run by itself: no queued
   continuation, no post (delivered or still in the inbox), no armed timer
   and no runner item, at any timing. Frames of an idle loop call nothing.
   (A driver uses it, with what it knows of its own waits, to tell a run
   that can no longer make progress: luna_lua_stuck.) A post made by another
   thread while this runs may or may not be seen: a producer that must be
   counted holds something the driver can see (a promise's reference).
   False for a NULL loop. O(LUNA_TIMING_COUNT * shards) loads. */
LUNA_API bool luna_loop_idle(luna_loop *loop);

/* Profiling: while on, each run of a timing reads the cost clock
   (luna_loop_set_cost_source) when it starts and when it ends and adds the
   difference to luna_loop_stats.spent_ns. Off by default; when off a run
   reads no clock. A change made during a run applies from the next run.
   0 or LUNA_EINVAL (NULL loop). Loop thread. */
LUNA_API int luna_loop_set_profiling(luna_loop *loop, bool on);
LUNA_API bool luna_loop_profiling(const luna_loop *loop);

/* Frames kept by the frame-cost history (luna_loop_frame_costs). */
#define LUNA_FRAME_HISTORY 128

/* The cost of each of the last frames that were profiled, oldest first:
   writes to out[0..] up to n values (at most LUNA_FRAME_HISTORY), each the
   cost-clock ns spent in `timing`'s runs during one frame, or with timing
   -1 in all of that frame's runs (time outside the runs, such as the host
   hook between a pair, is not counted). A frame is recorded when it ends
   (luna_loop_frame) or, for a host that runs the timings itself, when the
   next begins; frames with profiling off are not recorded, so the history
   is the last profiled frames. Reads no clock. Returns the values written;
   0 for a NULL loop or out, or a timing that is neither -1 nor valid.
   Loop thread. */
LUNA_API size_t luna_loop_frame_costs(const luna_loop *loop, int timing, luna_ns *out, size_t n);

/* ---- one-shot continuations --------------------------------------------- */

/* A one-shot callback. `loop` is the loop running it. */
typedef void (*luna_fn)(luna_loop *loop, void *arg);

/* Queues fn(arg) to run once at the next run of `timing` (loop thread only;
   takes no lock and allocates only when the queue's array grows). Queued from
   inside the same timing's run, it runs at that timing's next run, never in
   the same drain. 0, LUNA_EINVAL (NULL fn, bad timing), LUNA_ENOMEM; on error
   fn never runs. */
LUNA_API int luna_enqueue(luna_loop *loop, luna_timing timing, luna_fn fn, void *arg);

/* Removes every queued continuation (not cross-thread posts) for which
   match(fn, arg, ud) is true, keeping the others in order. Used by owners of
   `arg` memory that is going away (a closing Lua state). Returns how many were
   removed. Loop thread, not from inside that timing's drain of the queue. */
typedef bool (*luna_match_fn)(luna_fn fn, void *arg, void *ud);
LUNA_API size_t luna_purge(luna_loop *loop, luna_match_fn match, void *ud);

/* Posts fn(arg) to run once at the next run of `timing`. ANY thread, at any
   time, lock-free; posts from one thread run in the order posted. Nodes come
   from a pool of 1024 that grows by blocks of 256 from the allocator when a
   backlog outgrows it (blocks are kept until luna_loop_free, so a steady
   load stops allocating), so a post is never dropped. 0, LUNA_EINVAL (NULL
   loop or fn, bad timing), LUNA_ENOMEM when the allocator fails (fn never
   runs then). The loop must outlive the call. luna_loop_reserve_posts
   grows the pool ahead for producers that must not allocate. */
LUNA_API int luna_post(luna_loop *loop, luna_timing timing, luna_fn fn, void *arg);

/* Grows the inbox's node pool now so that at least `n` posts can wait at
   once (over all timings and producer threads) without luna_post calling
   the allocator: for hosts whose producers must never allocate (an audio
   or network thread) and that know their worst backlog. Nodes are 32
   bytes and stay until luna_loop_free. The pool starts with 1024; the
   largest it can be is 16,778,240 nodes. ANY thread, like luna_post.
   Returns 0 (also when the pool already holds n), LUNA_EINVAL (NULL loop,
   n beyond the largest pool), LUNA_ENOMEM (the pool keeps what it got). */
LUNA_API int luna_loop_reserve_posts(luna_loop *loop, size_t n);

/* ---- timers -------------------------------------------------------------- */

/* A handle: slot index and generation, so a stale handle is an error, not a
   crash. {0} is never a valid handle. */
typedef struct luna_timer_id { uint64_t id; } luna_timer_id;

/* What a timer's deadline is measured on. Frame waits (LUNA_TIMER_FRAME,
   0) compare against the frame counter; then one kind per clock of
   LUNA_CLOCK_MAP, LUNA_TIMER_<CLOCK> = LUNA_CLOCK_<CLOCK> + 1
   (LUNA_TIMER_SCALED = 1, UNSCALED = 2, REALTIME = 3, FIXED = 4), each
   compared against its clock. */
typedef enum luna_timer_kind {
  LUNA_TIMER_FRAME = 0,
#define LUNA__TIMER_KIND_ENUM(name, value, text) LUNA_TIMER_##name = (value) + 1,
  LUNA_CLOCK_MAP(LUNA__TIMER_KIND_ENUM)
#undef LUNA__TIMER_KIND_ENUM
  LUNA_TIMER_KIND_COUNT = LUNA_CLOCK_COUNT + 1
} luna_timer_kind;

/* The timer kind measured on `clock` (a luna_clock in range), and the clock
   of a timer kind other than LUNA_TIMER_FRAME. */
#define LUNA_TIMER_KIND_OF_CLOCK(clock) ((luna_timer_kind)((int)(clock) + 1))
#define LUNA_CLOCK_OF_TIMER_KIND(kind) ((luna_clock)((int)(kind) - 1))

/* Calls fn(arg) once at the first run of `timing` at which the kind's clock
   (frame counter for LUNA_TIMER_FRAME) reads >= deadline (absolute; clamped to
   LUNA_NS_MAX). Cost per run grows with the timers that fire, not with those
   pending. *out (may be NULL) receives the handle. 0, LUNA_EINVAL, LUNA_ENOMEM. */
LUNA_API int luna_timer_add(luna_loop *loop, luna_timing timing, luna_timer_kind kind,
                            int64_t deadline, luna_fn fn, void *arg, luna_timer_id *out);

/* Cancels a pending timer, also one collected as due in the current run but
   not yet called: fn will not run. 0, or LUNA_ENOENT when it already fired or
   was cancelled. */
LUNA_API int luna_timer_cancel(luna_loop *loop, luna_timer_id id);

/* ---- repeating items ------------------------------------------------------- */

typedef struct luna_item_id { uint64_t id; } luna_item_id;

/* A repeating item: called at each run of its timing; returns true to keep
   running, false to be removed. An item that fails should report its own
   error and return false. */
typedef bool (*luna_step_fn)(luna_loop *loop, void *arg);

/* Options of a repeating item. Zero means the default. */
typedef struct luna_item_options {
  int priority;    /* lower runs first; equal priorities run in registration order; default 0 */
  bool essential;  /* always runs, even past the timing's budget */
} luna_item_options;

/* Registers step(arg) for every run of `timing`, after the items already
   registered there with the same or a lower priority and before those with
   a higher one. Added during a run of that timing (from any step of it), it
   starts at the next run, whatever its priority. Insertion costs O(log n)
   plus the items it moves (none when it goes last). *out (may be NULL)
   receives the handle; `options` is only read during the call. 0,
   LUNA_EINVAL (NULL loop or step, bad timing), LUNA_ENOMEM; on error step
   never runs. */
LUNA_API int luna_item_add_ex(luna_loop *loop, luna_timing timing, luna_step_fn step,
                              void *arg, const luna_item_options *options, luna_item_id *out);

/* As luna_item_add_ex with default options (priority 0, not essential). */
LUNA_API int luna_item_add(luna_loop *loop, luna_timing timing, luna_step_fn step,
                           void *arg, luna_item_id *out);

/* Removes an item; safe from inside any callback, including its own step
   (it is only marked then, and never called again). 0 or LUNA_ENOENT. */
LUNA_API int luna_item_remove(luna_loop *loop, luna_item_id id);

/* ---- budgets ---------------------------------------------------------------- */

/* Caps the time one run of `timing` spends on repeating items (step 4) to
   `budget` ns, measured on the loop's cost clock from the start of step 4;
   0 removes the cap (the default). The value is read when step 4 starts, so
   a change made during that step applies from the next run.

   A run with a budget first calls the items the previous run deferred, in
   the order they were deferred, then walks the items in their usual order.
   It reads the cost clock when step 4 starts and before each non-essential
   item except the first one called in the run, until the budget is spent;
   once `budget` ns have passed, that item and every
   non-essential item after it are deferred: they run first at the timing's
   next run, before the others. Essential items run in their usual place in
   the walk, even past the budget, and are never deferred. So at least one
   non-essential item runs in every run, and:

   Fairness bound: with N non-essential items at `timing`, every one of them
   runs at least once in every N consecutive runs of the timing (at most
   N - 1 runs skip it in a row), as long as the set of items does not change
   and luna_loop_stop cuts none of those runs short.

   Cost: without a budget no clock is read. With one, the run reads the
   cost clock once per non-essential item it calls (CLOCK_MONOTONIC costs
   about 20-40 ns a read), so for thousands of very cheap items a coarser
   source of the host's may be worth installing. Removing the budget forgets the
   deferred items' order: the next run calls every item in its usual order.
   0 or LUNA_EINVAL (NULL loop, negative budget, bad timing). */
LUNA_API int luna_loop_set_budget(luna_loop *loop, luna_timing timing, luna_ns budget);
/* The budget of `timing` in ns; 0 when none (or for a bad timing). */
LUNA_API luna_ns luna_loop_budget(const luna_loop *loop, luna_timing timing);

/* The clock that budgets measure (monotonic ns). NULL restores the default
   (CLOCK_MONOTONIC, not the realtime source: under virtual time the
   realtime clock stands still within a frame). Tests install a fake one.
   It is called on the loop thread only, during runs of timings that have a
   budget. 0 or LUNA_EINVAL (NULL loop). */
LUNA_API int luna_loop_set_cost_source(luna_loop *loop, luna_time_fn fn, void *ud);

LUNA_END_DECLS

#endif
