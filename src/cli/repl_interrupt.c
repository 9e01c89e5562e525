/*
** repl_interrupt.c: what runs now in the REPL, and what a Ctrl-C stops.
**
** Ctrl-C cancels the foreground chunk (interrupting Lua code that runs for
** good), or clears the line; it never touches another task or callback,
** unless a second Ctrl-C comes while the same frame still runs (one stuck
** in a loop: see luna__repl_on_ctrl_c). signals.c takes the signal and
** calls that choice from its handler; the main loop then takes the press
** (luna__repl_handle_ctrl_c).
**
** It owns the flags the handler reads: whether the REPL calls Lua itself,
** whether a frame runs, which tasks are being resumed (kept by the REPL's
** observer of its state, which also serves the chunk being started; the
** trace adds an observer of its own). Includes repl.h (cli.h), lunaloop_lua.h and Lua.
*/
#include <signal.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "lunaloop_lua.h"
#include "repl.h"

/* What runs now, for the Ctrl-C handler. `calling`: the REPL calls Lua
   itself, on the user's behalf (a chunk starting, :tasks, :cancel, a
   cancellation, a chunk's results printed); 2 when that call runs on the
   REPL's own thread (luna__repl_call_lua), not only in tasks. `in_frame`: a
   frame runs. `fg_resumed`: the foreground chunk's coroutine is resumed
   (on_resume_begin/end), so what runs now is the chunk or code it called.
   `frame_sigints`: Ctrl-C presses during the frame that runs now. */
static volatile sig_atomic_t calling, in_frame, fg_resumed, frame_sigints;
/* A second Ctrl-C in one frame interrupted code other than the foreground
   chunk; frame_hit_id is the task it hit (0: a callback or a predicate). */
static volatile sig_atomic_t frame_hit;
static uint64_t frame_hit_id;
/* The ids of the tasks being resumed, innermost last (the observer keeps
   it; deeper nesting than RESUMED_MAX is counted but not named). */
#define RESUMED_MAX 64
static uint64_t resumed_ids[RESUMED_MAX];
static volatile sig_atomic_t resumed_depth;

/* Raises "interrupted" in the REPL's own thread once (see on_ctrl_c). */
static void main_interrupt_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted");
}

/* Ctrl-C stops Lua code at its next instruction (luna_lua_interrupt) only
   when that code is what the user waits for: what the REPL calls itself,
   or the foreground chunk (and what it called) while a frame resumes it.
   Any other task or callback that a frame runs at that instant is left
   alone: the main loop cancels the waiting chunk, or clears the line, once
   the frame has ended. A frame that does not end (a background task or
   callback stuck in a loop) gets the second Ctrl-C that comes while it
   still runs: that one interrupts whatever runs. */
void luna__repl_on_ctrl_c(void) {
  if (calling) {
    luna_lua_interrupt(); /* a task the call runs */
    /* The REPL's own thread: the binding only knows what it resumes or
       calls, and luna__repl_call_lua runs helpers and __tostring on R.L
       itself. lua_sethook may be called from a signal handler (lua.c
       does). */
    if (calling == 2)
      lua_sethook(R.L, main_interrupt_hook,
                  LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
  } else if (in_frame) {
    if (fg_resumed) {
      luna_lua_interrupt();
    } else if (frame_sigints > 0) {
      sig_atomic_t depth = resumed_depth;
      frame_hit_id = depth > 0 && depth <= RESUMED_MAX ? resumed_ids[depth - 1] : 0;
      frame_hit = 1;
      luna_lua_interrupt();
    }
    frame_sigints = 1;
  }
  /* (luna__edit_editing only reads a flag: safe in a handler.) */
  if (R.tty && !luna__edit_editing())
    luna__repl_echoed_ctrl_c();
}

void luna__repl_call_begin(void) {
  calling = 1;
}

/* After the REPL's own call into Lua: what Ctrl-C hit has unwound. */
void luna__repl_call_end(void) {
  calling = 0;
  luna_lua_interrupt_clear();
  if (lua_gethook(R.L) == main_interrupt_hook)
    lua_sethook(R.L, NULL, 0, 0); /* set after the last instruction ran */
}

int luna__repl_call_lua(int nargs, int nresults) {
  calling = 2;
  int st = lua_pcall(R.L, nargs, nresults, 0);
  luna__repl_call_end();
  return st;
}

void luna__repl_frame_begin(void) {
  frame_sigints = 0;
  frame_hit = 0;
  in_frame = 1;
}

uint64_t luna__repl_frame_end(void) {
  in_frame = 0;
  luna_lua_interrupt_clear(); /* what Ctrl-C hit has unwound */
  return frame_hit ? frame_hit_id : 0;
}

void luna__repl_forget_resumed(void) {
  fg_resumed = 0;
}

void luna__repl_handle_ctrl_c(void) {
  if (luna__repl_cancel_foreground())
    return; /* the main loop sees it settled and prints "cancelled" */
  luna__repl_drop_pending();
  if (luna__edit_editing()) {
    fputs("^C\r\n", stdout);
    luna__repl_hide_prompt();
    luna__repl_show_prompt(); /* a new, empty line under the first prompt */
  }
}

/* ---- the REPL's observer ------------------------------------------------- */

static void on_task_created(void *ud, const luna_lua_task_event *ev) {
  (void)ud;
  luna__repl_task_created(ev->id);
}

static void on_resume_begin(void *ud, const luna_lua_task_event *ev) {
  (void)ud;
  sig_atomic_t depth = resumed_depth;
  if (depth < RESUMED_MAX)
    resumed_ids[depth] = ev->id; /* stored before the depth that shows it */
  resumed_depth = depth + 1;
  if (ev->id == luna__repl_fg_id())
    fg_resumed = 1;
}

static void on_resume_end(void *ud, const luna_lua_task_event *ev) {
  (void)ud;
  if (ev->id == luna__repl_fg_id())
    fg_resumed = 0;
  if (resumed_depth > 0)
    resumed_depth--;
}

bool luna__repl_observe(void) {
  luna_lua_observer obs = {.task_created = on_task_created,
                           .resume_begin = on_resume_begin,
                           .resume_end = on_resume_end};
  uint32_t id;
  return luna_lua_add_observer(R.L, &obs, &id) == 0;
}

void luna__repl_use_trace(luna_trace *tr) {
  R.trace = tr;
  if (tr != NULL && luna__trace_attach(tr, R.L) != 0) {
    luna__repl_printf(stderr, LUNA_PROGNAME ": cannot observe the Lua state for the trace\n");
    luna__trace_close(tr);
    R.trace = NULL;
  }
}
