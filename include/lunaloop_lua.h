/*
** lunaloop_lua.h: the Lua 5.4 binding. Lua coroutines become tasks that await
** yields, frame counts, delays and predicates at a chosen timing of a loop.
**
** Threads: every function here is for the loop thread, the thread that
** drives the loop and owns the Lua state, except luna_lua_interrupt and the
** promise functions that lunaloop/promise.h marks ANY thread (completing,
** polling, retaining and releasing a promise).
**
** Lifetimes: a Task is a Lua thread, the task's own coroutine; it stays
** alive while it is not settled (the binding holds it) and is collected
** like any value afterwards. The module owns the extra space of every
** thread (lua_getextraspace) and the thread metatable of the state
** (docs/embedding.md, "Tasks are threads").
**
** Bad input: given a NULL state, or one without a binding, the functions
** below return LUNA_EINVAL, 0, NULL or false, as each says. Not detectable,
** so undefined: a state that was closed, a pointer that is not a lua_State.
*/
#ifndef LUNALOOP_LUA_H
#define LUNALOOP_LUA_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lunaloop.h"
/* Promises completed by the host's threads. It also includes lua.h, which
   has no C++ guards of its own, with C linkage, so that a C++ host links
   against the C Lua library. */
#include "lunaloop/promise.h"

LUNA_BEGIN_DECLS

/* The module opener: what `require "lunaloop"` calls. Returns the module
   table (the same table on every call for one state). If no loop was attached
   to the state with luna_lua_attach, it creates one owned by the state (freed
   when the state closes) with a default configuration. */
LUNA_API int luaopen_lunaloop(lua_State *L);
/* `require "lunaloop.roblox"`: opens the module as luaopen_lunaloop does
   and returns the Roblox-style task library of the state (docs/roblox.md):
   task.spawn, defer, delay, wait, cancel, synchronize and desynchronize
   with Roblox's semantics, every other name falling through to the
   module. Opening the module also puts this function in
   package.preload["lunaloop.roblox"] when the state has a package
   library, so a host that links lunaloop statically gets it too. */
LUNA_API int luaopen_lunaloop_roblox(lua_State *L);

/* Attaches `loop` to the state L, so that its tasks run on that loop, and
   registers the module in package.loaded["lunaloop"] (not as a global).
   Several states may share one loop. The loop is not owned: free it after
   closing the state, or before (then the state's tasks are cancelled at
   luna_loop_free and the module raises "loop was freed" afterwards).
   Closing the state cancels its tasks first (to-be-closed variables run) and
   removes everything it queued on the loop. Returns 0; LUNA_EINVAL for NULL
   arguments, or when the module cannot be opened in L (it needs the
   standard base, table, string and math libraries: luaL_openlibs first);
   LUNA_ESTATE if the state already has a loop or is a worker state
   (lunaloop_workers.h); LUNA_ENOMEM. On error L is
   left without a binding and the loop untouched. */
LUNA_API int luna_lua_attach(lua_State *L, luna_loop *loop);

/* The loop of L's binding, or NULL when the module was not opened/attached. */
LUNA_API luna_loop *luna_lua_loop(lua_State *L);

/* Spawns a task from the function below `nargs` arguments on top of L's
   stack, like task.spawn: it runs now until its first await. Pops the
   function and arguments and pushes the Task, which is the task's thread
   (lua_tothread gives its lua_State: do not resume it, the scheduler
   does). `name` (may be NULL) names the task in reports ("main" for a
   script's main chunk). Called from a C function that a task runs, the
   new task runs nested, as with task.spawn.
   Returns 0, or LUNA_EINVAL (nothing popped) when the value is not a
   function or there is no binding. Creating the task allocates: out of
   memory (or a state that is closing) raises a Lua error, so call it from
   a protected call (lua_pcall of a C function) when the state may run
   short, as the mods do. */
LUNA_API int luna_lua_spawn(lua_State *L, int nargs, const char *name);

/* Tasks alive (created and not yet settled) in L. */
LUNA_API size_t luna_lua_task_count(lua_State *L);

/* Per-tick and periodic callbacks (task.on, task.every) registered in L. */
LUNA_API size_t luna_lua_callback_count(lua_State *L);

/* Calls of task.on and task.every callbacks made in L since it opened the
   module (0 without a binding): a tracer's "callbacks run" is the
   difference between two frames. Loop thread. */
LUNA_API uint64_t luna_lua_callback_calls(lua_State *L);

/* Errors reported so far in L (by the default handler or by task.on_error's
   handler; cancellations are never reported). */
LUNA_API uint64_t luna_lua_error_count(lua_State *L);

/* True when a script called task.exit([code]); *code (may be NULL) gets the
   code it asked for, or -1 when it gave none. */
LUNA_API bool luna_lua_exit_requested(lua_State *L, int *code);

/* Cancels every task of L in creation order (their to-be-closed variables
   run) and removes its callbacks. Returns how many tasks were cancelled. A
   task that is running now (this is called from a C function it runs, or
   from a task it resumed) only gets the request: it unwinds at its next
   await, and is not counted. */
LUNA_API size_t luna_lua_cancel_all(lua_State *L);

/* True when L's tasks can no longer make progress, so a driver that goes
   on running frames would wait for ever (docs/api.md, "Stuck runs"): at
   least one task is alive, no task.on/task.every callback is registered,
   the loop holds nothing that runs by itself (no queued continuation or
   post, no timer, no runner item at any timing, so no delay, frame wait,
   yield, deferred start or wait_until/wait_while predicate of any state
   on the loop), and every live task of L waits on another task, a
   combinator or a channel operation, or on a Promise that nobody but Lua
   holds (one that the host or a worker holds may still be completed: that
   is progress), or on the clock of a paused or stopped group that the
   host does not hold (luna_lua_group_new). Call it between frames, on the loop thread.
   Allocates nothing in L and never raises; false for a NULL L or one
   without a binding. */
LUNA_API bool luna_lua_stuck(lua_State *L);

/* Writes one line per live task of L to `out`, in creation order, each
   starting with `indent` (may be NULL): "task NAME (#ID)" or "task #ID",
   what it waits on ("waits on task worker (#2)", "waits on
   channel:receive", "waits until 2.500 s on the scaled clock (Update)",
   ...) and, for a task suspended in an await, " at
   source:line" of that await in its code. Returns how many tasks were
   written. Allocates nothing in L (so it may report a mod's state at its
   memory cap) and never raises; 0 for a NULL L, a state without a binding
   or a NULL `out`. Loop thread only, not while a frame runs. */
LUNA_API size_t luna_lua_write_tasks(lua_State *L, FILE *out, const char *indent);

/* The exit status of a run that ended stuck (`lunaloop run`, task.run). */
#define LUNA_LUA_EXIT_STUCK 3

/* The report of a stuck run, on `out`: "lunaloop: deadlock at frame N:
   every task is asleep and nothing can wake one", then the tasks as
   luna_lua_write_tasks writes them, indented by two spaces. stdout is
   flushed first, so the report follows what the script printed. */
LUNA_API void luna_lua_report_stuck(lua_State *L, FILE *out);

/* ---- observing the binding (tracing, profilers) ------------------------------ */

/* What an observer callback is told about a task. Valid only during the
   callback: copy what you keep. */
typedef struct luna_lua_task_event {
  uint64_t id;      /* the task's id (t.id), from 1 in creation order */
  const char *name; /* t.name, or NULL when the task has no name */
  int timing;       /* the luna_timing running now, or -1 outside any run
                       (a task spawned or cancelled by the host) */
} luna_lua_task_event;

/* Callbacks of an observer; any may be NULL. They run on the loop thread,
   inside the binding: they must not call into L's Lua state or the loop
   (no spawn, no cancel, no luna_loop_* that changes anything).
   - task_created: a task was created, before it first runs;
   - resume_begin / resume_end: right before and right after every resume
     of a task's coroutine (its start, and every return from an await).
     Resumes may nest (a task that spawns another runs it inside its own
     resume), and always pair up: begin A, begin B, end B, end A;
   - task_woken: something woke the task, whose next resume_begin is that
     wake-up: a Task it awaited settled, a host Promise it awaited was
     completed, a channel, combinator or scope released it. Called where
     the waking happens: inside the waker's resume, or outside any task (a
     Promise's completion delivered when a timing's run takes the inbox).
     Its place after ud keeps initializers written for the first four
     fields valid (this field is then NULL). */
typedef struct luna_lua_observer {
  void (*task_created)(void *ud, const luna_lua_task_event *ev);
  void (*resume_begin)(void *ud, const luna_lua_task_event *ev);
  void (*resume_end)(void *ud, const luna_lua_task_event *ev);
  void *ud;
  void (*task_woken)(void *ud, const luna_lua_task_event *ev);
} luna_lua_observer;

/* Adds `observer` (copied) to L's binding and stores its id in *id (never
   0), for luna_lua_remove_observer. Observers are independent: a profiler,
   a tracer and a mod's budget may all watch one state, each is called in
   the order it was added (an id freed by a removal may be reused for its
   place), and each pair of resume_begin/resume_end reaches every observer
   installed for the whole resume. With no observer installed a resume costs
   one flag test; with some, one indirect call per installed callback.
   Adding from inside an observer callback is allowed (the new one may be
   called for the event under way). Loop thread. Returns 0, LUNA_EINVAL (L
   has no binding, NULL observer or id), LUNA_ESTATE (the state is
   closing), LUNA_ENOMEM (the array of observers could not grow; nothing
   added). */
LUNA_API int luna_lua_add_observer(lua_State *L, const luna_lua_observer *observer,
                                   uint32_t *id);

/* Removes the observer `id` returned by luna_lua_add_observer: from the
   next event on it is not called (a callback may remove its own observer).
   Loop thread. Returns 0, LUNA_EINVAL (L has no binding), LUNA_ENOENT (no
   observer has that id: removed already, or never added). */
LUNA_API int luna_lua_remove_observer(lua_State *L, uint32_t id);

/* The one-observer form: installs `observer` as luna_lua_add_observer
   would, first removing the observer this function installed before; NULL
   only removes it. Observers added with luna_lua_add_observer are left
   alone. Returns 0, LUNA_EINVAL when L has no binding, LUNA_ESTATE,
   LUNA_ENOMEM (then the previous one stays removed). */
LUNA_API int luna_lua_set_observer(lua_State *L, const luna_lua_observer *observer);

/* Task resumes per timing in the current frame of L's binding (what
   task.stats() reports as `resumes`): out[t] for timing t, and
   out[LUNA_TIMING_COUNT] for resumes outside any run. Returns the frame the
   counts belong to, or 0 (all zero) when L has no binding; NULL L or out
   returns 0 and writes nothing. */
LUNA_API uint64_t luna_lua_resume_counts(lua_State *L, uint64_t out[LUNA_TIMING_COUNT + 1]);

/* Async-signal-safe: makes the task, callback or predicate that the binding
   is running now on the calling thread (in any state) raise "interrupted"
   at its next instruction, so a runaway script can be stopped from a SIGINT
   handler. Does nothing when the binding runs no Lua code on that thread.
   A signal handler runs on the thread the signal was delivered to: a host
   that drives its loop on another thread directs SIGINT there
   (pthread_sigmask in the other threads, or pthread_kill). */
LUNA_API void luna_lua_interrupt(void);

/* Ends the calling thread's interrupt: until this is called, the
   interrupted code keeps raising at every instruction (so a pcall cannot
   swallow it), except in the to-be-closed handlers of the task or
   coroutine it unwinds (in those of a task or coroutine that had already
   ended, it stops the handler it lands in and lets the next one run), and
   on the thread of an
   interrupted callback once its error is reported
   (so the error handler and the frame's other callbacks run). An
   interrupted wait_until/wait_while predicate raises into its task instead
   of being reported, so until this is called, later callbacks of that
   frame on the same Lua thread raise "interrupted" too. Call it once the
   driver has control again (after the frame), before cancelling tasks. */
LUNA_API void luna_lua_interrupt_clear(void);

/* Makes luna_lua_interrupt reach plain coroutines of L's state: replaces
   the globals coroutine.resume, coroutine.wrap and coroutine.close with
   versions that give what the base library's give (same results, errors
   and to-be-closed handling) and that make the coroutine being resumed or
   closed the interrupt's target (it runs on a thread of its own, which
   the binding does not resume); an interrupt that stopped it closes it
   (its to-be-closed handlers run) and stops its resumer too. The same
   versions keep a task's coroutine the scheduler's: resuming a suspended
   one raises, closing one cancels the task (docs/api.md, "A task's own
   coroutine"). Opening the module (luaopen_lunaloop, luna_lua_attach)
   installs them already; call this only for a coroutine table opened
   after that. Code that kept the old functions in locals keeps them.
   Raises only on memory errors. (Not reached: a message handler that is
   running when the interrupt comes, since Lua runs it again with hooks
   off; a mod's sandbox has an xpcall for its budget.) Does nothing for a
   NULL state. */
LUNA_API void luna_lua_guard_interrupts(lua_State *L);

/* Pushes a string for the value at idx, as tostring() would, and returns
   it; never raises: when a __tostring metamethod raises or returns a
   non-string, pushes "(a <type> value whose __tostring failed)" instead.
   For reporting error values that may come from untrusted code. A
   __tostring that never returns still hangs (no hook is installed).
   NULL for a NULL state (nothing pushed). */
LUNA_API const char *luna_lua_tostring(lua_State *L, int idx);

/* ---- pacing the garbage collector by the frame (docs/frame-time.md) -------- */

/* How the collector of a state, or of every state on a loop, is paced.
   Zero in a field means its default, so `{0}` turns pacing off. */
typedef struct luna_lua_gc_options {
  luna_ns budget;     /* ns of collector work per frame at `timing`, shared
                         by the states paced together; 0: none at a timing */
  luna_timing timing; /* the timing whose run ends with the paced steps;
                         0 (Initialization, not offered) means the default,
                         LUNA_LAST_TIME_UPDATE, the end of the frame */
  size_t ceiling;     /* bytes in use above which the pacer runs one full
                         collection (the safety net); 0: none */
  bool stop_auto;     /* stop Lua's automatic collector: all collection
                         then happens in paced steps, idle steps, mod
                         requests and the ceiling's full collection */
  bool idle;          /* also step in the time the driver would sleep
                         before the next frame (luna_lua_gc_idle) */
  bool generational;  /* put the state in generational mode (a step is
                         then a whole minor collection); false: incremental */
  luna_ns frame;      /* ns of cost-clock time a frame may take, collector
                         work included; 0: off. When the paced timing
                         comes, a frame that has used more than
                         frame - budget gets only what is left of it, and
                         at least a quarter of the budget (so cycles go on
                         in heavy frames), or all of the budget while the
                         heap is past halfway from the live bytes to the
                         ceiling: light frames collect, heavy ones
                         mostly wait, and frame times even out (the spare
                         time of a frame-limited game, for a driver that
                         runs frames back to back). Measured from
                         luna_loop_begin_frame_ns on the loop's cost clock */
} luna_lua_gc_options;

/* What the pacer did for a state (or, summed, for every state of a loop)
   since pacing began. Times are on the loop's cost clock
   (luna_loop_set_cost_source). */
typedef struct luna_lua_gc_stats {
  uint64_t steps;            /* paced and idle steps: incremental basic
                                steps, or minor collections */
  uint64_t cycles;           /* incremental cycles those steps completed */
  uint64_t full_collections; /* full collections the pacer ran */
  luna_ns time_ns;           /* ns spent in all of the above */
  luna_ns longest_step_ns;   /* the longest single step (or full collection) */
  size_t bytes;              /* bytes the state uses now (Lua's count) */
  uint64_t ceiling_hits;     /* times the ceiling was found passed */
} luna_lua_gc_stats;

/* Paces L's collector with `opts` (copied), in place of the loop's
   settings; NULL returns L to the loop's settings (luna_lua_gc_set_loop).
   The effect is what task.gc describes: at the end of each run of the
   timing, incremental steps until the budget is spent or the cycle ends;
   the collector's mode and stop_auto are applied now (LUA_GCINC or
   LUA_GCGEN, LUA_GCSTOP or LUA_GCRESTART). A state without a budget, idle
   or ceiling is not paced and pays nothing. Loop thread, not from inside a
   collector step (a __gc metamethod). Returns 0; LUNA_EINVAL for a NULL
   or unbound L, or a timing out of range; LUNA_ESTATE from inside a __gc
   metamethod of L (Lua ignores the collector's calls there); LUNA_ENOMEM.
   luna_loop_reset drops the paced steps of every state on the loop: give
   the settings again after one. */
LUNA_API int luna_lua_gc_set(lua_State *L, const luna_lua_gc_options *opts);

/* Paces every state on `loop` that has no settings of its own (the mods
   of a set, for example) with `opts`, or stops that with NULL. The states
   paced together share one budget per frame, each getting a part in
   proportion to the bytes it allocated since the previous frame. A state
   attached later joins. Returns 0, LUNA_EINVAL (NULL loop, timing out of
   range), LUNA_ENOMEM. Loop thread, not from a __gc metamethod. */
LUNA_API int luna_lua_gc_set_loop(luna_loop *loop, const luna_lua_gc_options *opts);

/* Spends up to `spare` ns (on the loop's cost clock) on collector steps
   for the states of `loop` paced with `idle`, before the driver sleeps to
   the next frame: call it with luna_driver_remaining. A step begins only
   while more than the state's last step is left (so `spare` is passed by
   at most one step), and steps stop once every such state's cycle is
   done. Returns the ns spent (0 when nothing is paced with idle, or for a
   NULL loop or spare <= 0). Loop thread, between frames. */
LUNA_API luna_ns luna_lua_gc_idle(luna_loop *loop, luna_ns spare);

/* Fills *out with what the pacer did for L and its bytes in use now.
   Returns 0, or LUNA_EINVAL for a NULL or unbound L or NULL out. */
LUNA_API int luna_lua_gc_get_stats(lua_State *L, luna_lua_gc_stats *out);

/* The same summed over every state on `loop` (longest_step_ns: the
   longest of any). Returns 0, or LUNA_EINVAL for a NULL loop or out. */
LUNA_API int luna_lua_gc_loop_stats(luna_loop *loop, luna_lua_gc_stats *out);

/* ---- groups (task.group; docs/groups.md, docs/embedding.md) ------------
   A group the host owns, for a game object whose tasks and callbacks end
   with it: create it when the object is made, hand it to the object's
   scripts (luna_lua_group_push) or spawn them into it
   (luna_lua_group_spawn), pause or slow it, and cancel it from the
   object's destroy path. The handle stays valid until
   luna_lua_group_release, cancelled or not; every function refuses a
   group of another state (LUNA_EINVAL). Loop thread only: between
   frames, or from a C function that a task or callback calls (a member
   that cancels its own group this way is cancelled too and unwinds at
   its next await). */
typedef struct luna_lua_group luna_lua_group;

/* Creates a group (time scale 1, not paused) named `name` (may be NULL)
   under `parent` (a host group of L, or NULL) and keeps a reference for
   the host. NULL when L has no binding, parent is not L's, or memory ran
   out (nothing raised). */
LUNA_API luna_lua_group *luna_lua_group_new(lua_State *L, const char *name,
                                            luna_lua_group *parent);
/* Pushes the group's Lua value (a Group, as task.group makes). 0 or
   LUNA_EINVAL (nothing pushed). */
LUNA_API int luna_lua_group_push(lua_State *L, luna_lua_group *g);
/* Spawns the function below the nargs values on top of L into g, as
   g:spawn (it runs now until its first await), names it `name` (may be
   NULL), and leaves the Task where the function and arguments were.
   LUNA_EINVAL (bad arguments, nothing popped), LUNA_ESTATE (g is
   cancelled, nothing popped), or 0. Creating the task allocates: out of
   memory raises, as luna_lua_spawn. */
LUNA_API int luna_lua_group_spawn(lua_State *L, luna_lua_group *g, int nargs, const char *name);
/* g:pause() / g:resume() and g:time_scale(scale): 0, LUNA_EINVAL (not
   L's, or a scale that is NaN, negative or above 1e6), LUNA_ESTATE
   (cancelled) or LUNA_ENOMEM. */
LUNA_API int luna_lua_group_set_paused(lua_State *L, luna_lua_group *g, bool paused);
LUNA_API int luna_lua_group_set_time_scale(lua_State *L, luna_lua_group *g, double scale);
/* g:cancel(): every member task (and those of groups below it) cancelled
   in creation order, their to-be-closed variables run, every callback
   removed, the groups closed. Runs in a protected call: errors of the
   members' cleanup are reported as for t:cancel(). *cancelled (may be
   NULL) gets the number of tasks cancelled. 0, LUNA_EINVAL, or
   LUNA_ENOMEM (the cancellation could not finish). Cancelling again does
   nothing. */
LUNA_API int luna_lua_group_cancel(lua_State *L, luna_lua_group *g, size_t *cancelled);
/* True once g is cancelled (or when g is not L's). */
LUNA_API bool luna_lua_group_cancelled(lua_State *L, const luna_lua_group *g);
/* Drops the host's reference: the group lives on while scripts or its
   members hold it, and is not cancelled by this. g is invalid after, as
   it is once L is closed (release it before lua_close). */
LUNA_API void luna_lua_group_release(lua_State *L, luna_lua_group *g);

/* ---- the simulation group (lunaloop/sim.h, docs/netcode.md) ---- */

/* Attaches the simulation `sim` that the host made on L's loop
   (luna_sim_new) to the state: the Lua side becomes its state provider
   (tables registered with sim.state, tick callbacks, timers, effects) and
   task.sim the group over it. The state then owns the provider, not the
   sim: closing the state detaches it, and the host still frees the sim
   (or the loop does). Returns 0; LUNA_EINVAL for NULL arguments, a state
   without the module's binding or a sim of another loop; LUNA_EALREADY
   when the sim has a provider already; LUNA_ESTATE when the state could
   not make the group (out of memory, or from inside one of the sim's
   ticks). Loop thread. */
LUNA_API int luna_lua_attach_sim(lua_State *L, luna_sim *sim);

LUNA_END_DECLS

#endif
