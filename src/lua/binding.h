/*
** binding.h: the Lua binding's private state, shared by the files of src/lua
** and included by them only (src/mods reaches the binding through guard.h).
** One section per concept, each naming the file that implements it: the
** task record (task.c), observers, the binding's state, who runs now, the
** accessors (binding.c), errors and reporting (report.c), the interrupt
** (interrupt.c), the guarded xpcall and coroutine functions (guarded.c),
** the lifecycle (lifecycle.c), then the task operations and the module's
** parts (task.c, taskobj.c, await.c, internal.c, introspect.c, callbacks.c).
**
** Handles (task.on, task.every) are kept alive by plain luaL_ref entries of
** the registry. A task is its coroutine, whose extra space leads to the C
** record (luna__task, task.h); its name, rarely set, lives in a weak-keyed
** side table.
** While a task is not settled, the binding holds it in its anchor table
** (anchors.c), so the garbage collector never frees a task that something may
** still wake.
**
** Invariants that everything here relies on:
** - A task waits on at most one thing at a time (t->wait). Disarming a wait
**   removes what can be removed at once (timer, item, awaiter link); a queued
**   continuation cannot be removed, so it is counted in t->pending and the
**   task's reference is released only when the task is settled and pending
**   is 0.
** - After cancellation is requested a task never arms a wait again: every
**   await raises the cancellation error first. So a stale continuation can
**   only ever find its task settled or not waiting on it.
** - Waking only queues (luna__wake): one place, luna__resume, resumes
**   coroutines, and the ready queue is drained by the outermost resume
**   (luna__pump), so resumes caused by wake-ups never nest.
*/
#ifndef LUNA_LUA_BINDING_H
#define LUNA_LUA_BINDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#include "lunaloop.h"
#include "gc.h"
#include "lunaloop_lua.h"
#include "task.h"

#if defined(__GNUC__) || defined(__clang__)
#define LUNA__ALWAYS_INLINE inline __attribute__((always_inline))
#define LUNA__NOINLINE __attribute__((noinline))
#else
#define LUNA__ALWAYS_INLINE inline
#define LUNA__NOINLINE
#endif

/* Thread-local storage that a signal handler may read: the initial-exec
   model never allocates on first access (the general model may, when the
   library is loaded with dlopen, as the Lua module is). */
#if defined(__GNUC__) || defined(__clang__)
#define LUNA__TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#define LUNA__TLS_MODEL
#endif

#define LUNA__TASK_MT "lunaloop.Task"
#define LUNA__HANDLE_MT "lunaloop.Handle"
#define LUNA__CANCEL_MT "lunaloop.Cancelled"
#define LUNA__TIMEOUT_MT "lunaloop.Timeout"

typedef struct luna__binding luna__binding;
typedef struct luna__task luna__task;
typedef struct luna__handle luna__handle;

/* A task.on or task.every handle: calls one Lua function, from a runner item
   (on) or from a timer that re-arms itself (every). */
struct luna__handle {
  luna__binding *b;
  luna_item_id item;       /* task.on */
  luna_timer_id timer;     /* task.every */
  int ref;                 /* the handle, in the registry while registered */
  int fn_ref;              /* its function, likewise (one lookup per call) */
  uint8_t timing;
  uint8_t kind;            /* 0: on, 1: every */
  uint8_t timer_kind;      /* every: the luna_timer_kind of its clock */
  bool active;
  bool calling;            /* its function is running: a removal keeps the
                              references until the call ends (end_call) */
  luna_ns anchor;          /* every: the k-th call is due at anchor + k * interval */
  luna_ns interval;
  int64_t calls_due;       /* every: intervals accounted for so far (k) */
  luna__handle *prev, *next; /* registered handles */
  struct luna__gclock *clock; /* a group's on/every (g:on, g:every): its
                                 clock; NULL for task.on and task.every */
};

/* ---- observers (observer.c installs them and adapts the public one) ---- */
/* Observers: tracing and mod budgets watch the binding through these.
   on_thread runs when a task's coroutine is created (before it first
   runs); on_resume runs right before (begin = true) and after every resume
   of a task's coroutine. on_call runs right before and after every call of
   Lua code that is not a resume: a task.on/every callback, a wait_until /
   wait_while predicate, the task.on_error handler (L is the thread it is
   called on). on_wake runs when a task is woken (put on the ready ring),
   where the waking happens. Any of them may be NULL. */
typedef struct luna__observer {
  void (*on_thread)(void *ud, luna__task *t);
  void (*on_resume)(void *ud, luna__task *t, bool begin);
  void *ud;
  void (*on_call)(void *ud, lua_State *L, bool begin);
  void (*on_wake)(void *ud, luna__task *t);
} luna__observer;

/* A public observer (luna_lua_add_observer): the host's callbacks and the
   binding hooks that adapt them (their ud is the entry's index, so the
   array may move when it grows). id 0: a free entry. */
typedef struct luna__observer_entry {
  luna__observer hooks;
  luna_lua_observer pub;
  uint32_t id;
} luna__observer_entry;

/* The budget observer's slot (src/mods, through seam.c), the one internal
   observer; the public ones are in b->observers.a. */
enum { LUNA__OBSERVER_BUDGET = 0 };

/* Calls `hook` of every installed observer of binding b with the arguments:
   the budget's first, then the public ones in the order of their entries.
   The array and its length are read again after each call, so a callback
   that adds or removes an observer leaves the walk valid (an entry removed
   is cleared, never moved; one added may be called in the same walk). */
#define LUNA__OBSERVE(b, hook, ...)                                            \
  do {                                                                         \
    size_t obs_i_;                                                             \
    if ((b)->observed) { /* one test on the hot path when nobody watches */    \
      if ((b)->budget_observer.hook != NULL)                                   \
        (b)->budget_observer.hook((b)->budget_observer.ud, __VA_ARGS__);       \
      for (obs_i_ = 0; obs_i_ < (b)->observers.count; obs_i_++)                \
        if ((b)->observers.a[obs_i_].hooks.hook != NULL)                       \
          (b)->observers.a[obs_i_].hooks.hook((b)->observers.a[obs_i_].hooks.ud, \
                                              __VA_ARGS__);                    \
    }                                                                          \
  } while (0)

/* ---- the binding's state (lifecycle.c makes it, binding.c finds it) ---- */
struct luna__binding {
  /* Read or written on every resume: together, first. */
  lua_State *exec_L;     /* thread that calls callbacks at depth 0 */
  luna_loop *loop;       /* NULL once the loop was freed */
  luna__task *current;   /* innermost task being resumed */
  int depth;             /* nested resumes */
  bool pumping;
  bool drain_deferred;   /* a drain hit LUNA__DRAIN_LIMIT: the ready ring
                            waits for luna__drain_cb (task.c) */
  bool observed;         /* an observer is installed (budget_observer or
                            an entry of observers) */
  bool held;             /* the state's work waits for the next frame (a
                            mod's time budget is spent, src/mods): see
                            luna__held */
  bool abandon;          /* cancellations settle without resuming (a mod
                            that ran out of time while unloading) */
  luna__ring ready;      /* tasks woken and not yet resumed */
  /* resumes per timing in the current frame (introspection) */
  uint64_t stats_frame;
  uint32_t resumes[LUNA_TIMING_COUNT + 1]; /* [LUNA_TIMING_COUNT]: outside any run */

  lua_State *L;          /* the main thread of the state */
  luna__task *ready_spill, *ready_spill_tail; /* behind the ready ring, linked
                            through on.ready.next, when it could not grow;
                            never non-empty while the ring has room */
  bool owns_loop;
  bool closing;          /* the state is closing (its __gc, or the guard's
                            begin_close): new work is refused */
  size_t ntasks;         /* live (unsettled) tasks */
  uint64_t next_id;
  /* The task records (task.c): blocks of LUNA__RECORD_BLOCK records from
     the state's allocator, a list through their first word; the free
     records, a list through theirs. Kept until the binding closes. */
  void *record_blocks;
  luna__task *free_records;
  /* what keeps unsettled tasks alive (anchors.c) */
  lua_State *anchor_L;   /* [1] the anchor table; user value 1 of the
                            binding's userdata */
  struct {
    int *a;
    size_t count, cap;   /* cap >= nslots: releasing never allocates */
  } free_slots;          /* free slots of the anchor table */
  int nslots;            /* slots of the anchor table made so far */
  int anchored;          /* slots that hold a task: 0 lets the walks over
                            every slot (closing a state) skip the table */
  int walks;             /* walks of the anchors in creation order under way
                            (anchors.c): released slots wait until they end */
  bool slots_held;       /* slots were released during a walk */
  struct {
    lua_State *L;        /* the thread it runs on */
    uint8_t what;        /* luna__calling: what Lua code that is not a task
                            is being called there, for the await errors */
  } calling;
  int stretch_tb_line;   /* while a stretch of callbacks runs: its frame's
                            line from the end of a traceback (callbacks.c) */
  /* registered task.on handles */
  luna__handle *handles;
  size_t nhandles;
  uint64_t callback_calls; /* task.on/every calls made so far (luna_lua_callback_calls) */
  bool cancelling;       /* a cancellation is unwinding */
  luna__ring cancels;    /* cancellations requested meanwhile */
  uint64_t spread_seq;   /* task.every{spread=true} registrations so far */
  luna__observer budget_observer; /* a mod's budget (seam.c); hooks NULL: none */
  struct {
    luna__observer_entry *a; /* from the state's allocator; freed by detach */
    size_t count, cap;       /* entries in use or cleared, allocated */
    uint32_t next_id;        /* ids handed out so far */
    uint32_t legacy_id;      /* luna_lua_set_observer's observer, or 0 */
  } observers;
  bool creation_traceback; /* task.debug{creation_traceback}: keep a traceback
                              of every task's spawn (luna__note_creation) */
  struct {
    lua_Hook hook;
    int mask, count;
  } bare_prev;            /* the hook that bare_yield_hook replaced (task.c) */
  char bare_where[LUA_IDSIZE + 24]; /* "<source>:<line>: " of that yield */
  uint8_t hook_error;     /* luna__hook_error: who raised the registry's
                              last hook error (luna__raise_from_hook) */
  uint64_t held_frame;   /* the frame `held` holds (luna_loop_frame_count) */
  uint64_t abandoned;    /* tasks settled unresumed under `abandon` */
  /* reporting and exit */
  void (*report_fallback)(void *ud, const char *what, const char *message);
  void *report_fallback_ud; /* the guard's report of last resort (guard.h) */
  uint64_t errors;
  size_t held_failures;   /* failures held for a later await (taskobj.c) */
  bool exit_requested;
  int exit_code;
  luna__gc_member gc;     /* its part of the loop's collector pacer (gc.c);
                             read only by the pacer, never on a resume */
  /* task.group (group.c) */
  size_t ngroups;         /* groups open: 0 lets a spawn skip the join */
  struct luna_lua_group *groups; /* every group with a clock, a list */
};

/* Lua code the binding calls outside any task, which cannot await. */
typedef enum luna__calling {
  LUNA__CALLING_NONE,
  LUNA__CALLING_CALLBACK,  /* a task.on or task.every callback */
  LUNA__CALLING_PREDICATE, /* a wait_until or wait_while predicate */
  LUNA__CALLING_HANDLER,   /* the task.on_error handler */
  LUNA__CALLING_SIGNAL,    /* a signal's handler (signal.c) */
  LUNA__CALLING_SIM        /* a simulation tick callback (sim.on_tick, sim.c) */
} luna__calling;

/* True while b's work must wait: b->held was set (by the mods layer, when
   a mod's time budget for the frame is spent) during the frame that is
   running now. Every place that would start the state's code on its own
   (a continuation, a timer, the ready ring, a task.on/every callback, a
   predicate) asks first and, when held, leaves the work for the next frame
   instead of dropping it. One byte test when nothing holds (task.c). */
bool luna__still_held(luna__binding *b);
static inline bool luna__held(luna__binding *b) {
  return b->held && luna__still_held(b);
}

/* ---- who runs now (binding.c defines the thread-local values) ----------- */
/* Every site that runs Lua code saves what runs now, sets its own and puts
   the saved values back after, through these helpers only: the task that
   runs (luna__enter_task), the thread an interrupt lands on
   (luna__enter_thread), the thread that calls callbacks at depth 0
   (luna__enter_exec) and what kind of code that is not a task is being
   called (luna__begin_calling).
   They are always inlined: entering a task is on the resume path, where
   each is the plain loads and stores written out. */

/* The Lua thread this OS thread is running (a task's coroutine, or the
   thread a callback runs on), for luna_lua_interrupt: a signal-safe read.
   Per OS thread, so loops driven by different threads never race on it. */
extern _Thread_local lua_State *volatile luna__running LUNA__TLS_MODEL;

/* The task being resumed on this thread (the innermost one), or NULL. Set
   with b->current by luna__enter_task; the awaits read it to find their
   task without a lookup (luna__fast_await). Thread-local, so states
   driven on different threads never see each other's task. */
extern _Thread_local luna__task *luna__running_task LUNA__TLS_MODEL;

/* The thread whose pending __close handlers are being run after its code
   ended (an ended task's, close_in_task; a coroutine closed by the guarded
   coroutine functions), or NULL: an interrupt stops the handler it lands
   in and lets the next one run (interrupt.c). Saved and restored around. */
extern _Thread_local lua_State *luna__closing LUNA__TLS_MODEL;

/* Lua code runs on L from now until luna__leave_thread (a task's
   coroutine, a callback's or predicate's thread, a plain coroutine): an
   interrupt lands on L. Returns the thread that ran before. */
static LUNA__ALWAYS_INLINE lua_State *luna__enter_thread(lua_State *L) {
  lua_State *outer = luna__running;
  luna__running = L;
  return outer;
}

static LUNA__ALWAYS_INLINE void luna__leave_thread(lua_State *outer) {
  luna__running = outer;
}

/* What luna__enter_task replaced, for luna__leave_task. */
typedef struct luna__outer {
  luna__task *current;  /* b->current */
  luna__task *task;     /* luna__running_task */
} luna__outer;

/* Task t runs (is resumed, or has its to-be-closed variables run) from now
   until luna__leave_task: it is b's current task and this thread's
   running task. Nests. Its coroutine becomes the running thread apart
   (luna__enter_thread), since a resume runs its observers in between. */
static LUNA__ALWAYS_INLINE luna__outer luna__enter_task(luna__binding *b, luna__task *t) {
  luna__outer o;
  o.current = b->current;
  o.task = luna__running_task;
  b->current = t;
  luna__running_task = t;
  return o;
}

static LUNA__ALWAYS_INLINE void luna__leave_task(luna__binding *b, luna__outer o) {
  b->current = o.current;
  luna__running_task = o.task;
}

/* The thread on which callbacks and handlers may be called now. */
static inline lua_State *luna__exec_state(luna__binding *b) {
  return b->current != NULL ? b->current->co : b->exec_L;
}

/* Code called from Lua on L is about to run the loop's work (start, cancel
   or step): when no task is being resumed, L becomes the thread callbacks
   and reports run on until luna__leave_exec, so they run on the thread
   that called into the binding. Returns what to give luna__leave_exec. */
static inline lua_State *luna__enter_exec(luna__binding *b, lua_State *L) {
  lua_State *saved = b->exec_L;
  if (b->depth == 0)
    b->exec_L = L;
  return saved;
}

static inline void luna__leave_exec(luna__binding *b, lua_State *saved) {
  b->exec_L = saved;
}

/* What luna__begin_calling replaced, for luna__end_calling. */
typedef struct luna__calling_saved {
  lua_State *L;
  uint8_t what;
} luna__calling_saved;

/* Notes that b calls Lua code of kind `what` on L until the matching
   luna__end_calling, which restores what was noted before (calls nest). */
static inline luna__calling_saved luna__begin_calling(luna__binding *b, lua_State *L,
                                                      luna__calling what) {
  luna__calling_saved saved;
  saved.L = b->calling.L;
  saved.what = b->calling.what;
  b->calling.L = L;
  b->calling.what = (uint8_t)what;
  return saved;
}

static inline void luna__end_calling(luna__binding *b, luna__calling_saved saved) {
  b->calling.L = saved.L;
  b->calling.what = saved.what;
}

/* ---- accessors (binding.c) ---------------------------------------------- */
/* The binding of L; raises a Lua error when there is none or its loop was freed. */
luna__binding *luna__check_binding(lua_State *L);
/* The binding of L or NULL, never raises. */
luna__binding *luna__get_binding(lua_State *L);
/* Pops the binding's userdata (or nil: none) into L's registry slot for
   it (lifecycle.c). */
void luna__set_binding(lua_State *L);

/* The binding of a module function: its upvalue 1 (a light userdata), which
   saves a registry lookup on the hot paths (every await, every spawn).
   Raises when the loop was freed. */
static inline luna__binding *luna__upvalue_binding(lua_State *L) {
  luna__binding *b = (luna__binding *)lua_touserdata(L, lua_upvalueindex(1));
  if (b->loop == NULL)
    luaL_error(L, "lunaloop: the loop was freed");
  return b;
}

/* Protects the metatable on top of L (made by luaL_newmetatable): its
   __metatable is its __name. Every metatable of an object the binding
   hands out gets it. */
void luna__protect_metatable(lua_State *L);

/* ---- errors and reporting (report.c) ------------------------------------- */
/* Makes the metatables of the cancellation and timeout errors and the one
   cancellation error value (lifecycle.c, when a binding is created). */
void luna__open_errors(lua_State *L);
/* Pushes the cancellation error value. */
void luna__push_cancel_error(lua_State *L);
bool luna__is_cancel_error(lua_State *L, int idx);
bool luna__is_timeout_error(lua_State *L, int idx);
/* Reports an error: err at `err_idx` of L, traceback at `tb_idx` (0: none),
   the task at `task_idx` (0: a callback named `what`). Counts it. */
void luna__report(luna__binding *b, lua_State *L, int err_idx, int tb_idx,
                  int task_idx, const char *what);
/* Message handler that keeps the error and stores its traceback; the
   traceback is then pushed (and forgotten) by luna__push_last_traceback. */
int luna__msgh(lua_State *L);
/* luna__msgh's work: stores the traceback of L from level 1 aside, with
   the line `drop` lines from its end left out when drop > 0 (a stretch of
   callbacks leaves its own C frame out, callbacks.c). */
void luna__store_traceback(lua_State *L, int drop);
void luna__push_last_traceback(lua_State *L);
/* task.on_error(fn | nil) -> previous handler (nil for the default). */
int luna__set_handler(lua_State *L);

/* ---- the interrupt and the hooks' errors (interrupt.c) ------------------ */
/* Who raised an error from a hook (luna__raise_from_hook). */
typedef enum luna__hook_error {
  LUNA__HOOK_NONE,
  LUNA__HOOK_INTERRUPT,  /* luna_lua_interrupt: stands while it is pending */
  LUNA__HOOK_BUDGET,     /* the guard's stop (a mod's budget): stands until
                            the guard ends it (luna__guard_end_stop) */
  LUNA__HOOK_BARE_YIELD  /* a bare coroutine.yield in a task: one-shot */
} luna__hook_error;

/* Raises the value on top of L from inside a hook, noting it (and `kind`)
   for the guarded xpcall, which lets such an error through without its
   message handler: Lua calls a handler with hooks off for it, so a loop
   there could never be stopped. */
int luna__raise_from_hook(lua_State *L, luna__hook_error kind);
/* True when the error at idx is the one our hooks raised last and it still
   stands: an interrupt's while one is pending on this thread, a mod's
   budget error while its stop is on, the bare-yield error (one-shot). Any
   other error meanwhile (say in a __close handler) is an ordinary one. */
bool luna__is_stop_error(lua_State *L, int idx);
/* Raises the interrupt on L: the cancellation error in the task being
   resumed (which it cancels), "interrupted" anywhere else. */
int luna__raise_interrupt(lua_State *L);
/* True while luna_lua_interrupt's interrupt is pending on this thread. */
bool luna__interrupt_pending(void);
/* Arms the interrupt's hook on L (it raises at L's next instruction). */
void luna__arm_interrupt(lua_State *L);
/* Removes the interrupt hook from a thread about to run its to-be-closed
   handlers, so cleanup runs even while an interrupt is pending. */
void luna__drop_interrupt_hook(lua_State *co);
/* When an interrupt is pending and its hook sits on co (it landed in co):
   removes the hook and returns true; false otherwise. */
bool luna__take_interrupt_hook(lua_State *co);

/* ---- the guarded xpcall and coroutine functions (guarded.c) ------------- */
/* Pushes xpcall(f, msgh, ...) as the base library's (yieldable the same
   way), except that msgh is not called for an error one of our hooks
   raised, while it stands (see luna__hook_error). The handler runs one C
   call deeper than with the stock xpcall. A mod's sandbox has it. */
void luna__push_guarded_xpcall(lua_State *L);

/* Replaces coroutine.resume, coroutine.wrap and coroutine.close of L's
   global coroutine table (when there is one) by the binding's guarded
   versions (luna_lua_guard_interrupts): done when the module is opened. */
void luna__guard_coroutines(lua_State *L);

/* coroutine.create's work: pushes a new thread holding the function that
   is argument 1 of the calling C function (raises an argument error when
   it is not a function) and returns it. */
lua_State *luna__push_coroutine(lua_State *L);

/* Closes a dead or suspended coroutine's pending to-be-closed variables
   (lua_closethread from Lua 5.4.6, lua_resetthread before): its status. */
#if LUA_VERSION_NUM == 504 && LUA_VERSION_RELEASE_NUM >= 50406
#define luna__close_thread(co, from) lua_closethread((co), (from))
#else
#define luna__close_thread(co, from) ((void)(from), lua_resetthread(co))
#endif

/* ---- lifecycle (lifecycle.c) and the module table (module.c) ------------ */
/* Builds the `lunaloop` module table of b's state (once; the same table
   after) and pushes it (module.c). */
int luna__open_module(lua_State *L, luna__binding *b);

/* Pushes Lua's "not enough memory" message without allocating: the state
   made it at creation and never collects it (lstate.c, memerrmsg), and a
   short string that exists is found, not made. For the few places that
   must put an error value somewhere outside any protected call. */
#define LUNA__PUSH_MEMERR(L) lua_pushliteral((L), "not enough memory")
/* The error of work refused because the state is closing. */
#define LUNA__CLOSING_MSG "lunaloop: the Lua state is closing (no new tasks or callbacks)"

/* ---- await.c ------------------------------------------------------------ */
/* The task calling an await when everything luna__check_await_in verifies
   holds: L is the task being resumed, it may suspend here, no cancellation
   or interrupt is pending and its loop is alive. NULL otherwise: the caller
   then takes the checked path, which raises the right error. One compare
   chain instead of a binding lookup on every await. */
static inline luna__task *luna__fast_await(lua_State *L) {
  luna__task *t = luna__running_task;
  if (t != NULL && t->co == L && !t->cancel_requested && !t->interrupt &&
      t->b->loop != NULL && lua_isyieldable(L))
    return t;
  return NULL;
}

/* Checks that L is a task that may await now and returns it; raises a clear
   error naming `what` otherwise, or the cancellation error when the task
   was cancelled. */
luna__task *luna__check_await(lua_State *L, const char *what);
/* task.await(t) and t:await(): upvalue 1 is the binding. */
int luna__l_await(lua_State *L);
luna__task *luna__check_await_in(lua_State *L, luna__binding *b, const char *what);
/* The same, with the position of a message error taken at `level` (as Lua's
   error(): 1 is the caller of the C function), for awaits written in Lua
   (lua/lunaloop/) whose errors should point at the user's call. */
luna__task *luna__check_await_at(lua_State *L, luna__binding *b, const char *what, int level);
/* Suspends the calling task (whose wait is armed) until woken. */
int luna__suspend(lua_State *L, luna__task *t);
/* Suspends the calling task with continuation k (called with ctx): every
   suspension of a task goes through here, which pushes a mark on its
   frame. A continuation must first check that the scheduler resumed it
   (luna__running_task is its task) and otherwise return
   luna__refuse_resume(L, t, ctx, k). */
int luna__yield_task(lua_State *L, lua_KContext ctx, lua_KFunction k);
/* True when co is a task's coroutine that only the scheduler may resume:
   suspended in an await (luna__yield_task marked its frame), or not
   started yet. For any thread; a read of each value of its frame. */
bool luna__in_await(lua_State *co);
/* A continuation found it was resumed by someone else than the scheduler (a
   coroutine.resume captured before the binding guarded it, a host's
   lua_resume): drops what that resumer passed and suspends t again as it
   was, yielding LUNA__RESUME_TASK_MSG to that resumer. */
int luna__refuse_resume(lua_State *L, luna__task *t, lua_KContext ctx, lua_KFunction k);
#define LUNA__RESUME_TASK_MSG                                                         \
  "cannot resume a task's coroutine; the scheduler resumes it (use task.cancel, or " \
  "await the task)"
luna_timing luna__opt_timing(lua_State *L, int idx, luna_timing def);
luna_clock luna__opt_clock(lua_State *L, int idx, luna_clock def);
luna_ns luna__check_seconds(lua_State *L, int idx);
/* Pushes and returns a number as text for an error message: as %f in
   lua_pushfstring, but "nan" for a NaN (printf may give "-nan"). */
const char *luna__number_text(lua_State *L, lua_Number v);
/* Options tables: unknown keys raise; fields parsed with errors naming them. */
void luna__check_options(lua_State *L, int opts, const char *const known[]);
luna_timing luna__field_timing(lua_State *L, int opts, const char *field, luna_timing def);
luna_clock luna__field_clock(lua_State *L, int opts, const char *field, luna_clock def);
/* opts.<field> as a boolean: nil gives `def`; any other type raises, since
   Lua would read 0 or "no" as true. */
bool luna__field_boolean(lua_State *L, int opts, const char *field, bool def);
/* True when L is the current task and its cancellation was requested.
   Inline, as luna__check_cancelled: every task.spawn asks both. */
static inline bool luna__cancel_pending(lua_State *L, luna__binding *b) {
  luna__task *t = b->current;
  return t != NULL && t->co == L && t->cancel_requested;
}
/* Raises the cancellation error in L (luna__check_cancelled's rare path). */
int luna__raise_cancelled(lua_State *L);
/* Raises the cancellation error in L when L is the current task and its
   cancellation was requested during a call that resumed another task
   (`before` is luna__cancel_pending from before that call: a task already
   unwinding from its cancellation may still spawn and cancel). */
static inline void luna__check_cancelled(lua_State *L, luna__binding *b, bool before) {
  if (!before && luna__cancel_pending(L, b))
    luna__raise_cancelled(L);
}
void luna__open_await(lua_State *L, luna__binding *b);

/* ---- internal.c: primitives for the Lua-side composition code ---------- */
/* The names of the module's Lua chunks (the files of lua/lunaloop/,
   chunks.h) all begin with this: where an await is, the introspection
   skips their frames for the user's call into them. */
#define LUNA__CHUNK_PREFIX "=lunaloop/"
void luna__open_compose(lua_State *L);
/* Pushes the library a chunk built for require under `name` ("roblox":
   lua/lunaloop/roblox.lua) and returns its type (nil: none). */
int luna__push_library(lua_State *L, const char *name);
/* Runs the lazy chunk `name` ("=lunaloop/workers.lua") with the module,
   internals and prelude, the first time it is asked for in a state; later
   calls do nothing. Raises when the module is not open. */
void luna__run_lazy_chunk(lua_State *L, const char *name);
/* luna__run_lazy_chunk of the simulation group's chunk. */
void luna__load_sim(lua_State *L);

/* ---- introspect.c: task.list, task.stats, t:info ------------------------ */
void luna__open_introspect(lua_State *L, luna__binding *b);
int luna__l_info(lua_State *L);
const char *luna__wait_name(const luna__task *t);
/* Keeps a traceback of the code that is creating the Task on top of L (the
   calling thread), for t:info().traceback. Called by luna__new_task only
   while b->creation_traceback is on. */
void luna__note_creation(lua_State *L);

/* ---- observer.c --------------------------------------------------------- */
/* Installs (or, with NULL, removes) the observer of slot `slot` of L's
   binding (LUNA__OBSERVER_BUDGET, the only internal one: never allocates).
   Returns false when L has no binding. */
bool luna__set_observer(lua_State *L, int slot, const luna__observer *observer);
/* Frees the public observers' array (the binding's detach). */
void luna__observers_free(luna__binding *b);

/* ---- callbacks.c -------------------------------------------------------- */
/* Sets the loop up for the binding, the same for every binding of a loop
   (callbacks.c): the runner calls task.on callbacks in stretches, several
   in one protected call, and firing timers warms the coroutine of a task
   one call ahead of resuming it (luna__warm_task). */
void luna__tune_loop(luna_loop *loop);
void luna__remove_all_handles(luna__binding *b);
void luna__open_callbacks(lua_State *L, luna__binding *b);
/* The message handler of a protected call that calls many Lua functions in
   a loop (a stretch of callbacks, a signal's fire): luna__msgh without the
   loop's own C frame in the traceback, whose line from the end is
   b->stretch_tb_line, set (and restored after) by the caller to
   luna__next_frame_line(L) of the thread before the call. */
int luna__stretch_msgh(lua_State *L);
int luna__next_frame_line(lua_State *L);
/* A group's g:on and g:every (group.c): the arguments of task.on or
   task.every from index 2 (index 1 is the group, which the handle keeps
   alive); pushes the Handle. */
int luna__group_on(lua_State *L, luna__binding *b, struct luna__gclock *clock);
int luna__group_every(lua_State *L, luna__binding *b, struct luna__gclock *clock);
/* Removes a handle (handle:remove()). */
void luna__remove_handle(luna__handle *h);

/* ---- group.c: task.group ------------------------------------------------- */
/* The task being made (its thread on top of L) joins the group at
   group_idx of L, or with group_idx 0 the group of the task running now
   (when it has one, open). Returns true when it joined. May raise. */
bool luna__group_join(lua_State *L, luna__binding *b, int group_idx);
/* The state leaves its loop (loop_alive: before the loop is freed) or
   closes: every group's clock is freed and the group closed. */
void luna__groups_detach(luna__binding *b, bool loop_alive);
/* The loop is being reset (its timers go): every group's clock drops its
   timers, letting go of the deferred starts they held. */
void luna__groups_reset(luna__binding *b);
/* For luna_lua_stuck, when the loop holds nothing that runs by itself: t
   waits on a group's clock (W_GROUP), which then moves only if code
   resumes the group or changes its scale. True unless the host holds the
   group (luna_lua_group_new), which may still do that. */
bool luna__group_wait_stuck(const luna__task *t);
void luna__open_groups(lua_State *L, luna__binding *b);

/* ---- signal.c ------------------------------------------------------------ */
/* task.signal, the Signal and Connection objects (signal.c). */
void luna__open_signal(lua_State *L, luna__binding *b);
/* True when the value at idx is a Signal; luna__l_is_signal: (x) -> boolean. */
bool luna__is_signal(lua_State *L, int idx);
int luna__l_is_signal(lua_State *L);
/* task.await(s) for the Signal at idx: suspends the calling task until the
   next fire and returns its values (raises the cancellation error when the
   signal is destroyed meanwhile). Called from a C function whose frame
   holds nothing above idx that it needs. */
int luna__await_signal(lua_State *L, int idx);
/* The continuation of a deferred fire (arg: the signal), its binding, and
   what a reset that drops it must do (lifecycle.c purges them). */
void luna__signal_deferred_cb(luna_loop *loop, void *arg);
luna__binding *luna__signal_binding(void *arg);
void luna__signal_drop_deferred(void *arg);

#endif
