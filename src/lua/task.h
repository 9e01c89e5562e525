/*
** task.h: the task record and its operations, shared by
** the files of src/lua. task.c owns the lifecycle and the one place that
** resumes a task's coroutine; anchors.c keeps unsettled tasks alive and
** walks them in creation order; names.c keeps the per-task facts few tasks
** have (names, creation tracebacks, t:handled() marks) in weak side tables;
** taskobj.c is the Task seen from Lua; cycles.c finds await cycles.
**
** A task is its coroutine: task.spawn and friends return the thread, and
** the scheduler's record (luna__task) is a C allocation reached through
** the thread's extra space (LUA_EXTRASPACE, one pointer in stock Lua 5.4).
** The record lives while the task is anchored (anchors.c): from creation
** until it is settled and no continuation holds it. It is then freed and
** the extra space keeps a tag that still says what the thread was (its id
** and final status, luna__settled_tag); the outcome stays on the thread's
** stack. Every thread copies the main thread's extra space when it is
** created, so the binding keeps the main thread's NULL: a plain coroutine
** reads NULL, which is how it is told from a task.
**
** Includes only Lua and the public lunaloop.h: the binding's state
** (luna__binding, binding.h) is an incomplete type here.
**
** A task waits on at most one thing at a time (t->wait). Disarming a wait
** removes what can be removed at once (timer, item, awaiter link); a queued
** continuation cannot be removed, so it is counted in t->pending and the
** task's anchor is released only when the task is settled and pending is 0.
*/
#ifndef LUNA_LUA_TASK_H
#define LUNA_LUA_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "lunaloop.h"
#include "lunaloop/extension.h"

typedef struct luna__binding luna__binding;
typedef struct luna__task luna__task;

/* Lifecycle of a task. PENDING: created by defer/spawn_at, not started. */
typedef enum luna__state {
  LUNA__PENDING,
  LUNA__RUNNING,   /* being resumed (or resuming a task it spawned) */
  LUNA__SUSPENDED, /* waiting (t->wait says on what) */
  LUNA__READY,     /* woken, in the ready queue, values pushed on its stack */
  LUNA__DONE,
  LUNA__FAILED,
  LUNA__CANCELLED
} luna__state;

#define LUNA__SETTLED(t) ((t)->state >= LUNA__DONE)

/* What a suspended task waits on: one row per wait kind, X(NAME, name),
   from which the enum (LUNA__W_NAME) and the names that t:info().wait and
   task.list report (luna__wait_name, introspect.c) are made, so the two
   cannot drift apart. NONE has no name: a task that waits on nothing
   reports no wait. */
#define LUNA__WAIT_MAP(X)                                                       \
  X(NONE, NULL)                                                                 \
  X(START, "start")         /* a deferred start continuation */                 \
  X(YIELD, "yield")         /* a continuation queued for a timing */            \
  X(TIMER, "timer")         /* a delay or a frame wait */                       \
  X(PREDICATE, "predicate") /* wait_until / wait_while: a runner item */        \
  X(TASK, "task")           /* another task settling */                         \
  X(EXTERNAL, "external")   /* something woken through luna__wake (composition) */ \
  X(GROUP, "group timer")   /* a delay or frame wait on a group's clock (group.c) */ \
  X(TICK, "tick")           /* a simulation's tick (task.wait_tick, sim.c) */

typedef enum luna__wait {
#define LUNA__WAIT_ENUM(NAME, name) LUNA__W_##NAME,
  LUNA__WAIT_MAP(LUNA__WAIT_ENUM)
#undef LUNA__WAIT_ENUM
  LUNA__WAIT_COUNT
} luna__wait;

/* 72 bytes on 64-bit targets, in the order a resume touches them: the
   first 48 are all a yield round trip reads and writes. Taken from the
   binding's blocks of records (the state's allocator, so a mod's cap
   counts them) and given back when the task is released (task.c). */
struct luna__task {
  luna__binding *b;
  lua_State *co;      /* the coroutine, the task's handle; kept alive by the
                         anchor table while this record exists */
  uint32_t pending;   /* continuations and ready entries holding this task */
  int ref;            /* its slot in the anchor table (anchors.c): a task
                         is anchored for as long as it has a record */
  uint8_t state;      /* luna__state */
  uint8_t wait;       /* luna__wait */
  uint8_t timing;     /* timing of the current wait */
  uint8_t timer_kind : 3;        /* luna_timer_kind of the current timer wait */
  uint8_t cancel_requested : 1;
  uint8_t resume_error : 1;      /* the next resume raises the value on top of co */
  uint8_t until : 1;             /* predicate wait: 1 for wait_until */
  uint8_t interrupt : 1;         /* raise the cancellation error once at the next
                                    await without cancelling the task (scope bodies) */
  uint8_t has_deps : 1;          /* waiting in a combinator that declared what it
                                    waits on (cycles.c) */
  uint32_t dependents : 31; /* combinators' lists holding this task (cycles.c) */
  uint32_t grouped : 1;     /* a member of a task.group (group.c): its tasks
                               spawn into it; 0 for every task outside one */
  /* What the current wait holds; a task waits on one thing at a time. The
     first word of every member is the timer node's, a pointer or left
     alone, never an odd value of ours: a cancelled timer's heap entry may
     still compare its stamp with the node after the record went on to
     other waits or to another task (lunaloop/extension.h). */
  union {
    struct {
      luna__timer_node node; /* the delay's or frame wait's timer */
      int64_t deadline; /* ns, or a frame number (introspection) */
    } timer;            /* LUNA__W_TIMER */
    struct {
      void *unused;     /* (the node's word: not ours to write) */
      luna_item_id id;
    } item;             /* LUNA__W_PREDICATE */
    struct {
      void *clock;      /* the luna__gclock (lunaloop/extension.h) */
      luna_timer_id id;
    } gtimer;           /* LUNA__W_GROUP */
    struct {
      luna__task *next; /* queued behind a full ready ring */
      int nresume;      /* values pushed on co for the next resume */
    } ready;            /* PENDING (the start's arguments) and READY: no wait */
    struct {
      luna__task *target; /* the task awaited */
      luna__task *next;   /* the next of target's awaiters (a ring) */
    } await;            /* LUNA__W_TASK */
  } on;
  luna__task *aw_head;  /* the last of the tasks awaiting this one: a ring
                           through their on.await.next, in order from
                           aw_head's next; most tasks are never awaited */
  uint64_t id;        /* creation number, from 1 */
  uint64_t created_frame; /* luna_loop_frame_count at creation */
};

#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(luna__task) == 72, "a task is 72 bytes on 64-bit targets");
#endif
_Static_assert(offsetof(luna__task, on.timer.node) == offsetof(luna__task, on.item.unused) &&
                   offsetof(luna__task, on.timer.node) == offsetof(luna__task, on.gtimer.clock) &&
                   offsetof(luna__task, on.timer.node) == offsetof(luna__task, on.ready.next) &&
                   offsetof(luna__task, on.timer.node) == offsetof(luna__task, on.await.target),
               "the timer node's word is shared only with pointers");
/* On 32-bit targets a pointer covers half of the word, a member's second
   field the other: the word stays even only where the pointer's half holds
   the low-order bits. */
#if UINTPTR_MAX != UINT64_MAX && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "lunaloop: the task record's timer node needs a little-endian target when pointers are 32 bits"
#endif

/* A first-in first-out ring of tasks that grows through the state's
   allocator (the host's, or a mod's capped one), doubling: steady state
   allocates nothing. The ready queue and the queued cancellations. */
typedef struct luna__ring {
  luna__task **a;
  size_t head, count, cap;
} luna__ring;

_Static_assert(LUA_EXTRASPACE >= sizeof(void *), "lunaloop keeps a pointer in a thread's extra space");

/* ---- the handle: a thread and what its extra space holds ----------------- */
/* The extra space of co as a word: 0 for a plain coroutine, a record's
   address (even) while the task has one, luna__settled_tag (odd) after. */
static inline uintptr_t luna__extra(lua_State *co) {
  return *(uintptr_t *)lua_getextraspace(co);
}
/* The tag of a settled task whose record is gone: (id << 3) | (state -
   LUNA__DONE) << 1 | 1. An id beyond 2^61 (2^29 on 32-bit targets) is cut. */
static inline uintptr_t luna__settled_tag(uint64_t id, int state) {
  return ((uintptr_t)id << 3) | ((uintptr_t)(state - LUNA__DONE) << 1) | 1u;
}
/* The record of the task whose thread is co; NULL for a plain coroutine
   and for a settled task whose record was freed. */
static inline luna__task *luna__record(lua_State *co) {
  uintptr_t v = luna__extra(co);
  return (v & 1u) ? NULL : (luna__task *)v;
}
/* The thread of the task at idx, or NULL when the value is no task's
   (not a thread, or a plain coroutine). */
lua_State *luna__test_thread(lua_State *L, int idx);
/* The same, raising "task expected, got ..." (a plain coroutine is named
   as one) when the value is no task's. */
lua_State *luna__check_thread(lua_State *L, int idx);
/* The task's status and id, from its record or its settled tag. */
luna__state luna__thread_state(lua_State *co);
uint64_t luna__thread_id(lua_State *co);
const char *luna__thread_status(lua_State *co);
/* The record of the task at idx: luna__check_task raises when the value is
   no task's, and both give NULL for a settled task whose record is gone
   (every caller handles a settled task without its record). */
luna__task *luna__check_task(lua_State *L, int idx);
luna__task *luna__test_task(lua_State *L, int idx);

/* ---- task.c: lifecycle and the one resume path ------------------------- */
/* Creates a task from the function at fn_idx and the nargs values above it
   (they stay on L), pushes its thread; the task is PENDING. */
luna__task *luna__new_task(lua_State *L, luna__binding *b, int fn_idx, int nargs);
/* The same, the task joining the group at group_idx of L (0: the group of
   the task running now, if any; -1: no group). */
luna__task *luna__new_task_in(lua_State *L, luna__binding *b, int fn_idx, int nargs,
                              int group_idx);
/* Starts a PENDING task now (spawn). */
void luna__start(luna__binding *b, luna__task *t);
/* Queues a PENDING task to start at the next run of `timing`. */
int luna__start_at(luna__binding *b, luna__task *t, luna_timing timing);
/* Wakes a suspended task: the nvalues values on top of L are moved to it
   (raised at its await if is_error). It is resumed by the outermost pump. */
void luna__wake(luna__binding *b, luna__task *t, lua_State *L, int nvalues, bool is_error);
/* Makes a (suspending on task.await) the last awaiter of target. */
void luna__link_awaiter(luna__task *a, luna__task *target);
/* What the binding must have before any loop callback runs, since those run
   outside every protected call (raises a memory error on L). Called once,
   when the module opens: the ready ring's first room (the spill list behind
   the ring, ready_push, is drained only through a ring that has room, so a
   wake-up must never meet a ring that could not grow from nothing) and the
   bare-yield error's text. */
void luna__preallocate(lua_State *L, luna__binding *b);

/* Frees a ring's array (the binding is closing). */
void luna__ring_free(luna__binding *b, luna__ring *r);
/* Resumes the ready queue if nothing else is resuming. */
void luna__pump(luna__binding *b);
/* Holds the ready queue: tasks woken until luna__pump_release are queued
   and not resumed, so a delivery that settles many promises at once
   settles them all before the first awaiter runs (which then finds the
   rest settled instead of yielding for each). Returns what to pass to
   luna__pump_release, which resumes the queue once nothing else holds it.
   Wake-up order is unchanged. */
bool luna__pump_hold(luna__binding *b);
void luna__pump_release(luna__binding *b, bool held);
/* Cancels t (returns after it unwound unless called during an unwinding). */
void luna__cancel(luna__binding *b, luna__task *t);
/* Raises the cancellation error in t once at its current or next await,
   without cancelling t (used to stop a scope's body). */
void luna__interrupt(luna__binding *b, luna__task *t);
/* Cancels every live task in creation order. Returns how many. */
size_t luna__cancel_all(luna__binding *b);
/* The state is closing and its cancellations did not all run: every task
   still unsettled is disarmed and settled as cancelled without being
   resumed. Runs no Lua code, allocates nothing. */
void luna__abandon_all(luna__binding *b);

/* The continuation that drains the ready ring after a drain was cut short
   (task.c); the binding purges it with its other continuations. */
void luna__drain_cb(luna_loop *loop, void *arg);

/* A queued continuation of t was dropped by the core (reset): forget it. */
void luna__drop_continuation(luna__task *t);
/* True when co is the coroutine of a task that has ended (it holds the
   task's outcome and a mark on top). For any thread; two reads. */
bool luna__ended_task_thread(lua_State *co);
/* True when the task of co has an outcome to read: it settled, or its
   cancellation is queued behind one unwinding (it reads "cancelled"
   already, and its outcome can only be the cancellation error). */
bool luna__has_outcome(lua_State *co);
/* Pushes the outcome of the task of co, which has one (luna__has_outcome):
   true + values when done, or false + error. Returns the count pushed. */
int luna__push_result(lua_State *L, luna__binding *b, lua_State *co);
const char *luna__status_name(const luna__task *t);
/* Frees the records of every task still anchored (the binding is closing:
   nothing will resume or wake them). */
void luna__free_records(luna__binding *b);
int luna__open_task(lua_State *L, luna__binding *b);
/* The continuation that resumes a task waiting on a timing (shared with
   binding.c for purging). */
void luna__resume_cb(luna_loop *loop, void *arg);
void luna__start_cb(luna_loop *loop, void *arg);
/* The callback of the timer of a delay or frame wait (arg: the node in
   the task's record, luna__loop_add_timer_node). */
void luna__timer_cb(luna_loop *loop, void *arg);
/* The task whose record holds the timer node `node`. */
static inline luna__task *luna__timer_task(void *node) {
  return (luna__task *)(void *)((char *)node - offsetof(luna__task, on.timer.node));
}
/* Prefetches the lua_State of the task `arg` (luna__loop_set_warm). */
void luna__warm_task(void *arg);

/* ---- anchors.c: what keeps unsettled tasks alive -------------------------- */
/* Walks the unsettled tasks in creation order, without a list of their own
   (anchors.c): luna__begin_walk sorts the anchor table by id, in place (it
   allocates nothing and cannot raise), and returns its slot count; slot s
   holds luna__walk_task(b, s), NULL when empty (settled tasks may still
   hold a slot: skip them). Until the matching luna__end_walk, tasks
   created take slots after every other (read b->nslots again), so they
   are walked too. Walks nest. */
int luna__begin_walk(luna__binding *b);
luna__task *luna__walk_task(luna__binding *b, int slot);
void luna__end_walk(luna__binding *b);
/* Frees the anchor table's free-slot array (the binding is closing). */
void luna__anchors_free(luna__binding *b);
/* Pushes the task's thread (t has a record, so it is anchored). */
void luna__push_task(lua_State *L, luna__task *t);

/* ---- names.c: names, labels, side tables --------------------------------- */
/* Pushes registry[key], a table, creating it the first time: a plain
   table when mode is NULL, else a weak one with that __mode ("k", "v"). */
void luna__push_registry_table(lua_State *L, const void *key, const char *mode);
/* Pushes a new empty table whose metatable has __mode = mode. */
void luna__new_weak_table(lua_State *L, const char *mode);
/* Pushes the weak-keyed table registry[key] (per-task facts that few tasks
   have: names, creation tracebacks, t:handled() marks), creating it the
   first time. */
void luna__push_side_table(lua_State *L, const void *key);
/* Pushes the name of the task at idx (a string, or nil) and returns its
   type; luna__set_name pops a string or nil and names the task at idx. */
int luna__push_name(lua_State *L, int idx);
void luna__set_name(lua_State *L, int idx);
/* Writes the label of the task at task_idx of L for reports into buf: its
   name, or "<source>:<line>" of its function (kept after it failed), or
   "#<id>" when neither is known. Allocates nothing in Lua (it runs outside
   any protected call). */
void luna__task_label(lua_State *L, int task_idx, char *buf, size_t size);
/* The size of a label buffer: a name longer than 511 bytes is cut. */
#define LUNA__LABEL_SIZE 512
/* Reports the error at err_idx of L (traceback at tb_idx, 0: none) as the
   failure of the task at task_idx ("task <label>"), label being its
   luna__task_label, or computed now when NULL. Indices are absolute.
   Counts it (luna__report). */
void luna__report_task(luna__binding *b, lua_State *L, int err_idx, int tb_idx, int task_idx,
                       const char *label);

/* ---- cycles.c ------------------------------------------------------------ */
/* Await cycles (cycles.c). luna__awaits: true when `from` waits, directly
   or through other tasks, on `goal`, so that goal waiting on from would
   never end; O(1) when nothing waits on goal. luna__depend: the task at
   task_idx, about to wait in a combinator, waits on the Tasks of the list
   (a table, read again at each search) until luna__undepend;
   luna__depend_one: a Task was added to that list since. */
bool luna__awaits(lua_State *L, luna__task *from, luna__task *goal);
/* The argument error of an await that would close a cycle (task.await,
   and the combinators through internals.CYCLE). */
#define LUNA__AWAIT_CYCLE_MSG "await cycle: that task is (indirectly) awaiting this one"
void luna__depend(lua_State *L, int task_idx, int list_idx);
void luna__depend_one(lua_State *L, int task_idx, int dep_idx);
void luna__undepend(lua_State *L, int task_idx);

/* ---- taskobj.c: the Task's methods, failures handled later (t:handled()) -- */
/* t:cancel(), task.cancel(t) (taskobj.c says what it does). */
int luna__l_cancel(lua_State *L);
/* The task at task_idx, which just failed with nobody awaiting it, was
   marked by t:handled(): its failure is held (and true returned) instead
   of reported. */
bool luna__hold_failure(luna__binding *b, lua_State *L, int task_idx);
/* The failure of the task of co is being taken (task.await, t:result()):
   no longer held. */
void luna__take_held(lua_State *L, luna__binding *b, lua_State *co);
/* The run ends: reports the failures still held, in the order they happened. */
void luna__report_held(luna__binding *b, lua_State *L);

#endif
