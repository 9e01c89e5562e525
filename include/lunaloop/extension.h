/*
** lunaloop/extension.h: the core's interface for the layers built on it,
** such as the Lua binding. It owns nothing; it names what those layers may
** read and do beyond loop.h, so that no file outside src/core includes a
** private core header or reads struct luna_loop.
**
** Not installed and not part of the ABI: the library builds the core and
** the layers above it together, and these names may change with any
** release. The functions are hidden symbols of that one library.
**
** Threads: everything here is for the loop thread only, and nothing checks
** its arguments (a NULL loop, a timing out of range or a NULL fn is
** undefined): the callers have checked them already, which is why these
** exist beside the public functions.
**
** What a layer does once per task resume, yield or callback call (read the
** frame number, the timing running now, delta time; hold the loop; queue a
** continuation) is static inline over a view that is the first member of
** the loop, so it costs what the same code written in place would; the
** rest are plain calls.
*/
#ifndef LUNALOOP_EXTENSION_H
#define LUNALOOP_EXTENSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loop.h"

LUNA_BEGIN_DECLS

/* Prefetches the memory at p for reading: a hint, never a fault, whatever
   p is. The core's queue and timers give it the argument of the callback
   after the one they are about to call, and a warm function (below) the
   memory that argument points to: a continuation's argument (a Lua task) is
   usually cold, and waiting for it would dominate the cost of a resume. */
#if defined(__GNUC__) || defined(__clang__)
#define LUNA__PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define LUNA__PREFETCH(p) ((void)(p))
#endif

/* One queued continuation (the core's queue.h owns the queue's logic). */
typedef struct luna__entry {
  luna_fn fn;
  void *arg;
  bool posted; /* came from luna_post: kept by reset and purge */
} luna__entry;

/* The continuation queue of one timing, double buffered: `wait` collects
   what is queued for the timing's next run, `run` is what a run drains. */
typedef struct luna__queue {
  luna__entry *run;  /* being drained: [run_head, run_n) not yet called */
  size_t run_head, run_n, run_cap;
  luna__entry *wait; /* for the next run, in FIFO order */
  size_t wait_n, wait_cap;
} luna__queue;

/* Appends fn(arg) to q's wait array when it has room and returns true;
   false when it is full (nothing changed: the caller grows it). */
static inline bool luna__queue_try_push(luna__queue *q, luna_fn fn, void *arg, bool posted) {
  luna__entry *e;
  if (q->wait_n == q->wait_cap)
    return false;
  e = &q->wait[q->wait_n++];
  e->fn = fn;
  e->arg = arg;
  e->posted = posted;
  return true;
}

/* The loop's fields that the layers above use on their hot paths. The
   core keeps them here and nowhere else; a layer reads them through the
   accessors below and never writes them (held changes only through
   luna__loop_hold, the queues only through luna__loop_enqueue and
   luna__queue_take_next). */
typedef struct luna__loop_view {
  uint64_t frame;     /* frames begun (luna_loop_frame_count) */
  luna_ns delta;      /* scaled delta of the current frame */
  luna_ns fixed_dt;   /* the fixed step length, > 0 */
  luna_ns step_dt;    /* delta time inside a step: fixed_dt for the plain
                         fixed step, the tick's dt_ns for a sim's tick */
  int current;        /* timing running now, or -1 (luna_loop_current_timing) */
  int held;           /* > 0: a layer runs code that must not drive frames */
  bool stop;          /* luna_loop_stop was called during a run: the run
                         ends after the callback that called it */
  bool in_fixed_step; /* from a FixedUpdate run to the end of its
                         LastFixedUpdate (or a sim's tick, lunaloop/sim.h):
                         delta time reads step_dt */
  luna__queue queues[LUNA_TIMING_COUNT]; /* continuations, per timing */
} luna__loop_view;

/* The view of `loop`. It is the first member of struct luna_loop, so the
   conversion is free and the pointer is stable for the loop's life. */
static inline const luna__loop_view *luna__loop_view_of(const luna_loop *loop) {
  return (const luna__loop_view *)(const void *)loop;
}

/* Frames begun: luna_loop_frame_count without the NULL check. */
static inline uint64_t luna__loop_frame(const luna_loop *loop) {
  return luna__loop_view_of(loop)->frame;
}

/* The timing running now, or -1: luna_loop_current_timing without the
   NULL check. */
static inline int luna__loop_timing(const luna_loop *loop) {
  return luna__loop_view_of(loop)->current;
}

/* Delta time in ns as luna_loop_delta reads it (the step's dt inside a
   fixed step or a sim's tick, else the frame's scaled delta), without the
   NULL check. */
static inline luna_ns luna__loop_dt(const luna_loop *loop) {
  const luna__loop_view *v = luna__loop_view_of(loop);
  return v->in_fixed_step ? v->step_dt : v->delta;
}

/* Marks the loop held (+1) or releases it (-1): while held, the drivers
   (luna_loop_frame, begin_frame, run, reset) return LUNA_ESTATE, as inside
   a callback. The Lua binding holds the loop around every task resume, so a
   host C function that a task calls cannot start a nested frame. Inline:
   it runs twice per resume. */
static inline void luna__loop_hold(luna_loop *loop, int delta) {
  ((luna__loop_view *)(void *)loop)->held += delta;
}

/* luna__loop_enqueue's slow path: grows the queue, then appends. */
int luna__loop_enqueue_grow(luna_loop *loop, luna_timing timing, luna_fn fn, void *arg);

/* luna_enqueue for a caller whose timing is in range and fn not NULL (the
   binding's task.yield): 0 or LUNA_ENOMEM (fn never runs then). Inline: it
   runs once per yield, and only growing the queue needs a call. */
static inline int luna__loop_enqueue(luna_loop *loop, luna_timing timing, luna_fn fn,
                                     void *arg) {
  luna__queue *q = &((luna__loop_view *)(void *)loop)->queues[timing];
  return luna__queue_try_push(q, fn, arg, false) ? 0
                                                : luna__loop_enqueue_grow(loop, timing, fn, arg);
}

/* A continuation that handles several entries in one call (the binding's
   yields, one entry a task per frame): luna__loop_running_queue, called by
   the continuation while the drain of the running timing's queue calls it,
   gives that queue (constant for the whole call), and
   luna__queue_take_next takes the entry the drain would call next when it
   is another call of fn (queued by luna__loop_enqueue or luna_enqueue,
   never a post) and luna_loop_stop was not called, and returns its
   argument: fn handles it in the same call, and the drain goes on after it
   as if it had called it. NULL otherwise, nothing taken. The queue's order
   is unchanged; what it saves is the drain's indirect call and fn's entry
   and exit per entry. It prefetches the argument of the entry after the
   one taken, as the drain does. Only fn itself may take its entries, and
   only from within the drain, which re-reads its index after every call.
   Outside a run (no queue is drained), luna__loop_running_queue gives
   `none`, an empty queue of the caller's that nothing is ever taken from. */
static inline luna__queue *luna__loop_running_queue(luna_loop *loop, luna__queue *none) {
  luna__loop_view *v = (luna__loop_view *)(void *)loop;
  return v->current >= 0 ? &v->queues[v->current] : none;
}

static inline void *luna__queue_take_next(luna_loop *loop, luna__queue *q, luna_fn fn) {
  size_t head;
  const luna__entry *e;
  if (luna__loop_view_of(loop)->stop)
    return NULL;
  head = q->run_head;
  if (head >= q->run_n)
    return NULL;
  e = &q->run[head];
  if (e->fn != fn)
    return NULL;
  q->run_head = head + 1;
  if (head + 1 < q->run_n)
    LUNA__PREFETCH(e[1].arg);
  return e->arg;
}

/* luna_timer_add for a caller whose timing and kind are in range and fn not
   NULL (the binding's awaits): 0 or LUNA_ENOMEM (fn never runs then). */
int luna__loop_add_timer(luna_loop *loop, luna_timing timing, luna_timer_kind kind,
                         int64_t deadline, luna_fn fn, void *arg, luna_timer_id *out);

/* ---- timers held by their owner ------------------------------------------ */

/* A timer node: a timer whose state is one word in memory its owner keeps
   (the Lua binding's task record), so that a timer takes no slot of the
   core's, only its heap entry (32 bytes on 64-bit targets). The word is
   the stamp of the node's current arming while it is armed (odd: a unique
   creation sequence, the heap and a set low bit) and 0 once it fired or was
   cancelled. The core has no pointer from the node to its entry: a
   cancelled node's entry stays in its heap until a run pops it or the heap
   is rebuilt, and is skipped then because its stamp no longer matches the
   node's word, so a node may be armed again at once (after firing, inside
   its own callback, or after a cancel) and its old entry can never fire it.

   The owner's part, because a cancelled entry may still read the word:
   - from the first arming on, the word must hold what the core writes
     there (a stamp or 0) or an even value (an aligned pointer, NULL): never
     an odd value of the owner's, which a stale entry could take for its
     stamp. The binding keeps it in a union whose other members begin with
     pointers (task.h);
   - before the node's memory is freed or used for anything else, the node
     must be cancelled (or have fired) and luna__loop_sweep_timers called:
     afterwards no entry refers to it. Neither is needed when the loop is
     freed first (luna_loop_free reads no node).
   A node is not armed twice at once: cancel it first. */
typedef struct luna__timer_node {
  uint64_t word; /* the core's: see above */
} luna__timer_node;

/* True while the node is armed (neither fired nor cancelled since). */
static inline bool luna__timer_node_armed(const luna__timer_node *node) {
  return (node->word & 1u) != 0;
}

/* Arms `node` (not armed) to call fn(loop, node) at the first run of
   `timing` at which the clock of `kind` reaches `deadline`, as
   luna_timer_add does (same ordering: deadline, then creation, with the
   handle timers; same clamping). The word is written at once; the node is
   disarmed just before its call. 0, or LUNA_ENOMEM (the heap could not
   grow: nothing changed, fn never runs). Loop thread only; timing, kind
   and fn are not checked. */
int luna__loop_add_timer_node(luna_loop *loop, luna_timing timing, luna_timer_kind kind,
                              int64_t deadline, luna_fn fn, luna__timer_node *node);

/* Cancels an armed node: 0, or LUNA_ENOENT when it is not armed (it fired,
   was cancelled or never armed). O(1) amortized: its entry is only left
   behind (a heap is rebuilt without such entries once they are more than
   half of it). A node collected by the run firing now and not yet called
   is not called. */
int luna__loop_cancel_timer_node(luna_loop *loop, luna__timer_node *node);

/* Drops every cancelled entry from every heap, reading every entry's node:
   after it, no entry refers to a node that is not armed, so their memory
   may be freed (see above). O(timers). The binding calls it once, before
   it frees its records. */
void luna__loop_sweep_timers(luna_loop *loop);

/* Warming ahead of a timer's call. Firing timers prefetches the node (or
   the slot) of the timer after the next one; a client whose timer callback
   `fn` takes an argument that points at more cold memory (a node in a Lua
   task's record, and its coroutine) names it here, and `warm` is called
   with the argument of the next live timer with that fn just before the
   call before it, when the argument is in cache, to prefetch what it
   points to. Timers fire in
   deadline order, which for sleeping tasks is a random walk over memory;
   continuations run in the order they were queued, mostly the order the
   tasks were made in, which the hardware prefetcher follows, so they are
   not warmed. warm must only prefetch. One client per loop; fn or warm
   NULL turns it off. */
void luna__loop_set_warm(luna_loop *loop, luna_fn fn, void (*warm)(void *arg));

/* ---- batches of repeating items ---------------------------------------- */

/* One element of a timing's array of repeating items, as the runner keeps
   it (24 bytes on LP64: what its walk reads). A batch function reads only
   step and arg, through luna__batch_peek. */
typedef struct luna__item {
  luna_step_fn step; /* NULL: removed, waiting for compaction */
  void *arg;
  uint32_t slot;     /* its handle's slot */
  int priority;      /* the array's sort key; kept after removal */
} luna__item;

/* Batches. One step function may be declared batched
   (luna__loop_set_batch): the plain walk (no budget) then hands each
   stretch of consecutive items with that step to the batch function in one
   call instead of calling the step once per item. The batch function takes
   the items one by one with luna__batch_peek / luna__batch_take, in array
   order, and may stop early: the walk goes on with the first item it did
   not take (if it took none, the walk calls that item's step itself). The
   calls must keep the walk's rules: an item removed by an earlier call is
   skipped (peek never returns it), nothing is taken once luna_loop_stop was
   called (peek returns NULL), and an item is removed through
   luna_item_remove, never by a return value. This is how the Lua binding
   calls many task.on callbacks inside one protected call (the cost of
   entering protected mode is paid once for the stretch, and again only
   after a callback raised). Budgeted runs never batch: each item's cost is
   measured there. */
typedef struct luna__batch {
  luna__item *const *a; /* &the timing's array: its length is fixed during a
                           run, but an item added by a call may make room
                           for the merge at the run's end, moving it */
  size_t i, n;         /* the next index to look at; the end of the walk */
  luna_step_fn step;   /* the batched step */
  const bool *stop;    /* the loop's luna_loop_stop flag */
} luna__batch;

typedef void (*luna__batch_fn)(luna_loop *loop, luna__batch *bt);

/* The argument of the next item of the stretch, without taking it; NULL
   once the stretch ends (an item of another step, or the end of the walk)
   or the loop is stopping. Skips removed items. Inline: it runs once per
   callback of the stretch. */
static inline void *luna__batch_peek(luna__batch *bt) {
  if (*bt->stop)
    return NULL;
  for (; bt->i < bt->n; bt->i++) {
    const luna__item *item = &(*bt->a)[bt->i];
    if (item->step == bt->step)
      return item->arg;
    if (item->step != NULL)
      return NULL;
  }
  return NULL;
}

/* Takes the item luna__batch_peek returned: the caller calls it now. */
static inline void luna__batch_take(luna__batch *bt) { bt->i++; }

/* Declares `step` batched: the plain walk hands stretches of its items to
   `fn` (see luna__batch). NULL, NULL: no batches. One per loop. */
void luna__loop_set_batch(luna_loop *loop, luna_step_fn step, luna__batch_fn fn);

/* Reads the loop's cost clock (luna_loop_set_cost_source): what the
   binding's collector pacer measures its steps with, so that a test's fake
   cost clock drives budgets and GC slices alike. */
luna_ns luna__loop_cost_now(luna_loop *loop);

/* While `on`, each luna_loop_begin_frame_ns (and so each frame) reads the
   cost clock once and keeps the reading, which luna__loop_frame_began
   returns: the pacer's `frame` setting measures how much of a frame is
   used when its paced timing comes. Off by default, so a frame reads no
   clock for it. Loop thread. */
void luna__loop_time_frames(luna_loop *loop, bool on);
/* The cost clock when the current frame began (0 before the first frame
   timed while luna__loop_time_frames is on). */
luna_ns luna__loop_frame_began(const luna_loop *loop);

/* The slot where the binding keeps its one collector pacer per loop
   (src/lua/gc.c): NULL until it makes one. The core never reads it; the
   pacer frees itself when the loop tells its listeners LUNA_EVENT_FREE. */
void **luna__loop_pacer(luna_loop *loop);

/* The loop's allocator, with the lua_Alloc contract (nsize 0 frees): for
   memory of the layers above that lives as long as the loop, such as the
   pacer. */
void *luna__loop_realloc(luna_loop *loop, void *p, size_t osize, size_t nsize);

/* ---- group clocks (gclock.c; the binding's task.group) ------------------ */

/* A group clock: the loop's scaled clock times an effective scale (its own
   scale times its ancestors'), stopped while it or an ancestor is paused,
   and a count of the frames begun while it was not paused. Kept as anchors,
   so a frame costs nothing per clock and a pause or a scale change costs a
   walk over the clock's descendant clocks, never over its timers. Timers
   on it (kind LUNA_TIMER_SCALED, deadline in group ns; LUNA_TIMER_FRAME,
   deadline in group frames) fire at the first run of their timing at which
   the group clock has reached the deadline, in (deadline, creation) order
   within one (timing, kind); a timer created during a run of its timing
   never fires in that run. Created with scale 1, not paused, its clocks at
   0. Loop thread only; a clock must not outlive its loop. */
typedef struct luna__gclock luna__gclock;
/* 0 or LUNA_ENOMEM. parent may be NULL. */
int luna__gclock_new(luna_loop *loop, luna__gclock *parent, luna__gclock **out);
/* Frees c and its timers without calling them; its children go on as
   roots, at the times they read now. From inside one of c's own timer
   callbacks the memory goes when that firing returns. loop_alive false:
   the loop was freed already (only memory is given back). */
void luna__gclock_free(luna__gclock *c, bool loop_alive);
/* Scale in [0, LUNA_TIME_SCALE_MAX]: 0, LUNA_EINVAL (NaN, negative, too
   big) or LUNA_ENOMEM (a proxy could not be re-armed). */
int luna__gclock_set_scale(luna__gclock *c, double scale);
int luna__gclock_set_paused(luna__gclock *c, bool paused);
double luna__gclock_scale(const luna__gclock *c);
bool luna__gclock_own_paused(const luna__gclock *c);
double luna__gclock_effective_scale(const luna__gclock *c);
bool luna__gclock_paused(const luna__gclock *c); /* it or an ancestor */
luna_ns luna__gclock_time(const luna__gclock *c);
int64_t luna__gclock_frames(const luna__gclock *c);
/* Timers of kind LUNA_TIMER_SCALED or LUNA_TIMER_FRAME (else LUNA_EINVAL):
   0 or LUNA_ENOMEM; cancel: 0 or LUNA_ENOENT. */
int luna__gclock_add_timer(luna__gclock *c, luna_timing timing, luna_timer_kind kind,
                           int64_t deadline, luna_fn fn, void *arg, luna_timer_id *out);
int luna__gclock_cancel(luna__gclock *c, luna_timer_id id);
size_t luna__gclock_count(const luna__gclock *c);
/* An opaque pointer of the layer above (the binding: the clock's group). */
void luna__gclock_set_owner(luna__gclock *c, void *owner);
void *luna__gclock_owner(const luna__gclock *c);
/* Removes every timer of c and then calls each(ud, fn, arg) for each, in
   creation order (the binding wakes the tasks that waited on them).
   Returns how many. */
size_t luna__gclock_clear(luna__gclock *c, void (*each)(void *ud, luna_fn fn, void *arg),
                          void *ud);

LUNA_END_DECLS

#endif
