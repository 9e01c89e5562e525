/*
** binding.c: the binding's lifecycle. One binding per Lua state, stored as a
** userdata in the registry; it attaches the state to a loop, cancels the
** state's tasks when the state closes or the loop is reset or freed, and
** reports errors.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "guard.h"
#include "lunaloop_lua.h"
#include "promise.h"

/* Registry keys: the addresses of these statics are unique in the process. */
static const char binding_key = 'b';
static const char cancel_key = 'c';
static const char handler_key = 'h';
static const char traceback_key = 't';

_Thread_local lua_State *volatile luna__running LUNA__TLS_MODEL = NULL;
_Thread_local lua_State *luna__closing LUNA__TLS_MODEL = NULL;
_Thread_local luna__task *luna__running_task LUNA__TLS_MODEL = NULL;

/* ---- accessors ------------------------------------------------------------ */

luna__binding *luna__get_binding(lua_State *L) {
  luna__binding *b;
  if (L == NULL) /* a host's bad input: the public API answers EINVAL, 0 or NULL */
    return NULL;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &binding_key);
  b = (luna__binding *)lua_touserdata(L, -1);
  lua_pop(L, 1);
  return b;
}

luna__binding *luna__check_binding(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  if (b == NULL)
    luaL_error(L, "lunaloop: no loop attached to this Lua state");
  if (b->loop == NULL)
    luaL_error(L, "lunaloop: the loop was freed");
  return b;
}

void luna__push_cancel_error(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &cancel_key);
}

/* The last error one of our hooks raised (registry), for the guarded
   xpcall: Lua calls a message handler with hooks off for such an error. */
static const char hook_error_key = 0;

int luna__raise_from_hook(lua_State *L, luna__hook_error kind) {
  luna__binding *b = luna__get_binding(L);
  if (b != NULL) {
    b->hook_error = (uint8_t)kind;
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &hook_error_key);
  }
  return lua_error(L);
}

static bool has_metatable(lua_State *L, int idx, const char *name) {
  bool same;
  if (!lua_getmetatable(L, idx))
    return false;
  luaL_getmetatable(L, name);
  same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

bool luna__is_cancel_error(lua_State *L, int idx) {
  return lua_istable(L, idx) && has_metatable(L, idx, LUNA__CANCEL_MT);
}

bool luna__is_timeout_error(lua_State *L, int idx) {
  return lua_istable(L, idx) && has_metatable(L, idx, LUNA__TIMEOUT_MT);
}

/* Removes the line `k` lines from the end (1: the last) from the
   traceback on top of L; nothing when it has fewer lines. */
static void drop_line_from_end(lua_State *L, int k) {
  size_t len;
  const char *tb = lua_tolstring(L, -1, &len), *p = tb + len, *to = tb + len;
  while (k > 0 && p > tb) {
    p--;
    if (p[0] == '\n' && p + 1 < tb + len && p[1] == '\t' && --k > 0)
      to = p;
  }
  if (k > 0)
    return;
  lua_pushlstring(L, tb, (size_t)(p - tb));
  lua_pushlstring(L, to, len - (size_t)(to - tb));
  lua_concat(L, 2);
  lua_remove(L, -2);
}

void luna__store_traceback(lua_State *L, int drop) {
  luaL_traceback(L, L, NULL, 1);
  if (drop > 0)
    drop_line_from_end(L, drop);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &traceback_key);
}

/* Message handler for protected calls of callbacks: keeps the error value
   unchanged (so handlers see exactly what was raised) and stores the
   traceback aside, for luna__push_last_traceback. */
int luna__msgh(lua_State *L) {
  luna__store_traceback(L, 0);
  lua_settop(L, 1);
  return 1;
}

void luna__push_last_traceback(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &traceback_key);
  lua_pushnil(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &traceback_key);
}

static int tostring_protected(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

LUNA_API const char *luna_lua_tostring(lua_State *L, int idx) {
  int st;
  if (L == NULL)
    return NULL;
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) == LUA_TSTRING) {
    lua_pushvalue(L, idx);
    return lua_tostring(L, -1);
  }
  lua_pushcfunction(L, tostring_protected);
  lua_pushvalue(L, idx);
  st = lua_pcall(L, 1, 1, 0);
  /* Out of memory, the error is Lua's message, a string: all there is to say. */
  if (st != LUA_OK && st != LUA_ERRMEM) {
    lua_pop(L, 1);
    lua_pushfstring(L, "(a %s value whose __tostring failed)", luaL_typename(L, idx));
  }
  return lua_tostring(L, -1);
}

/* ---- error reporting ---------------------------------------------------------- */

/* The default report: "lunaloop: task <name> failed: <msg>" and the traceback
   on stderr. */
static void default_report(lua_State *L, int err_idx, int tb_idx, const char *who) {
  const char *msg = luna_lua_tostring(L, err_idx);
  fprintf(stderr, "lunaloop: %s failed: %s\n", who, msg);
  lua_pop(L, 1);
  if (tb_idx != 0 && lua_type(L, tb_idx) == LUA_TSTRING)
    fprintf(stderr, "%s\n", lua_tostring(L, tb_idx));
  fflush(stderr);
}

/* The report of last resort, when there is not even the memory to call
   the error handler: the guard's report (guard.h) or a line on stderr.
   Allocates nothing in Lua. */
static void report_without_lua(luna__binding *b, lua_State *L, int err_idx, const char *what) {
  const char *msg = lua_type(L, err_idx) == LUA_TSTRING ? lua_tostring(L, err_idx) : NULL;
  if (b->report_fallback != NULL) {
    b->report_fallback(b->report_fallback_ud, what, msg);
    return;
  }
  fprintf(stderr, "lunaloop: %s failed: %s\n", what,
          msg != NULL ? msg : "(an error value, not shown: not enough memory)");
  fflush(stderr);
}

typedef struct report_args {
  luna__binding *b;
  const char *what;
} report_args;

/* luna__report's work, in protected mode: (args, err, traceback | nil,
   task | nil). */
static int report_protected(lua_State *L) {
  report_args *a = (report_args *)lua_touserdata(L, 1);
  luna__binding *b = a->b;
  int st;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &handler_key);
  if (!lua_isfunction(L, -1)) {
    default_report(L, 2, 3, a->what);
    return 0;
  }
  lua_pushvalue(L, 2);
  lua_pushvalue(L, 3);
  lua_pushvalue(L, 4);
  lua_pushstring(L, a->what); /* the default report's subject */
  {
    LUNA__BEGIN_CALLING(b, L, LUNA__CALLING_HANDLER);
    LUNA__OBSERVE(b, on_call, L, true);
    st = lua_pcall(L, 4, 0, 0);
    LUNA__OBSERVE(b, on_call, L, false);
    LUNA__END_CALLING(b);
  }
  /* A cancellation raised by the handler (task.exit there, or it
     cancelled the task it runs in) is no failure of the handler: it saw
     the error; the task it cancelled unwinds at its next await. */
  if (st == LUA_ERRMEM) {
    report_without_lua(b, L, 2, a->what);
  } else if (st != LUA_OK && !luna__is_cancel_error(L, -1)) {
    fprintf(stderr, "lunaloop: error handler failed: %s\n", luna_lua_tostring(L, -1));
    lua_pop(L, 2);
    default_report(L, 2, 3, a->what);
  }
  return 0;
}

void luna__report(luna__binding *b, lua_State *L, int err_idx, int tb_idx,
                  int task_idx, const char *what) {
  int top = lua_gettop(L);
  report_args a;
  a.b = b;
  a.what = what;
  err_idx = lua_absindex(L, err_idx);
  if (tb_idx != 0)
    tb_idx = lua_absindex(L, tb_idx);
  if (task_idx != 0)
    task_idx = lua_absindex(L, task_idx);
  b->errors++;
  /* An interrupt that failed a callback or a predicate left its hook on L:
     the hook is sticky until luna_lua_interrupt_clear, so that a pcall in
     the interrupted code cannot swallow it. That code has unwound by the
     time its error is reported; without this, the handler, and every
     callback after it on L in the same frame, would raise "interrupted"
     too ("error handler failed: interrupted"). */
  luna__drop_interrupt_hook(L);
  /* Callers run outside any protected call (loop callbacks), so all that
     allocates runs in one: a state out of memory still gets its report,
     through report_without_lua. */
  if (!lua_checkstack(L, 10)) {
    report_without_lua(b, L, err_idx, what);
    return;
  }
  lua_pushcfunction(L, report_protected);
  lua_pushlightuserdata(L, &a);
  lua_pushvalue(L, err_idx);
  if (tb_idx != 0)
    lua_pushvalue(L, tb_idx);
  else
    lua_pushnil(L);
  if (task_idx != 0)
    lua_pushvalue(L, task_idx);
  else
    lua_pushnil(L);
  if (lua_pcall(L, 4, 0, 0) != LUA_OK)
    report_without_lua(b, L, err_idx, what);
  lua_settop(L, top);
}

void luna__guard_set_report(lua_State *L, luna__guard_report_fn fn, void *ud) {
  luna__binding *b = luna__get_binding(L);
  if (b != NULL) {
    b->report_fallback = fn;
    b->report_fallback_ud = ud;
  }
}

/* task.on_error(fn | nil) -> previous handler (nil for the default). */
int luna__set_handler(lua_State *L) {
  if (!lua_isnoneornil(L, 1))
    luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &handler_key);
  lua_pushvalue(L, 1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &handler_key);
  return 1;
}

/* ---- interrupt -------------------------------------------------------------- */

/* Set by luna_lua_interrupt, cleared by luna_lua_interrupt_clear. While it
   is set, the hook raises at every instruction of the thread it sits on,
   so a pcall around a runaway loop cannot swallow the interrupt. Per OS
   thread, like luna__running: a driver clearing its own interrupt after
   a frame must not clear another thread's, and the hook runs on the
   thread that was interrupted. */
static _Thread_local volatile sig_atomic_t interrupt_pending LUNA__TLS_MODEL;

static void interrupt_hook(lua_State *L, lua_Debug *ar);

/* Raises the interrupt on L: the cancellation error in the task being
   resumed (which it cancels), "interrupted" anywhere else. */
static int raise_interrupt(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  if (b != NULL && b->current != NULL && b->current->co == L) {
    b->current->cancel_requested = true;
    luna__push_cancel_error(L);
  } else {
    luaL_where(L, 1);
    lua_pushliteral(L, "interrupted");
    lua_concat(L, 2);
  }
  return luna__raise_from_hook(L, LUNA__HOOK_INTERRUPT);
}

/* True when L runs the pending __close handlers of code that ended (an
   ended task's, a closed coroutine's) and the function just called is one
   of them (nothing below it but the base). */
static bool next_close_handler(lua_State *L, lua_Debug *ar) {
  lua_Debug below;
  return L == luna__closing && ar->event == LUA_HOOKCALL && !lua_getstack(L, 1, &below);
}

bool luna__interrupt_pending(void) {
  return interrupt_pending != 0;
}

void luna__arm_interrupt(lua_State *L) {
  lua_sethook(L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
}

static void interrupt_hook(lua_State *L, lua_Debug *ar) {
  if (!interrupt_pending || next_close_handler(L, ar)) {
    /* Done; or the interrupt stopped one __close handler of an ended task
       or coroutine (raising at every instruction, a pcall there cannot
       keep it going) and the next one begins: that one runs. */
    lua_sethook(L, NULL, 0, 0);
    return;
  }
  raise_interrupt(L);
}

void luna__drop_interrupt_hook(lua_State *co) {
  if (lua_gethook(co) == interrupt_hook)
    lua_sethook(co, NULL, 0, 0);
}

LUNA_API void luna_lua_interrupt_clear(void) {
  interrupt_pending = 0;
}

LUNA_API void luna_lua_interrupt(void) {
  lua_State *L = luna__running;
  interrupt_pending = 1;
  if (L != NULL)
    luna__arm_interrupt(L);
}

/* ---- xpcall that a stop goes through ---------------------------------------- */

/* True when the error at idx is the one our hooks raised last and it still
   stands: an interrupt's while one is pending on this thread, a mod's
   budget error while its stop is on, the bare-yield error (one-shot). Any
   other error meanwhile (say in a __close handler) is an ordinary one. */
static bool is_stop_error(lua_State *L, int idx) {
  luna__binding *b;
  bool same;
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &hook_error_key);
  same = !lua_isnil(L, -1) && lua_rawequal(L, -1, idx);
  lua_pop(L, 1);
  if (!same || (b = luna__get_binding(L)) == NULL)
    return false;
  switch ((luna__hook_error)b->hook_error) {
  case LUNA__HOOK_INTERRUPT:
    return interrupt_pending;
  case LUNA__HOOK_BUDGET:
    return b->stop_msg != NULL;
  case LUNA__HOOK_BARE_YIELD: /* cleared when its resume returns (task.c) */
    return true;
  default:
    return false;
  }
}

/* The message handler of a guarded xpcall: upvalue 1 is the caller's. It
   runs one C call below the error, so a handler that reads the stack
   (debug.getinfo, debug.traceback with a level) sees this frame too. */
static int guarded_handler(lua_State *L) {
  if (is_stop_error(L, 1))
    return 1; /* the stop's error, unchanged */
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* After the protected call, or its continuation after a yield: `base`
   values below the results (the function and handler). */
static int guarded_done(lua_State *L, int status, lua_KContext base) {
  if (status != LUA_OK && status != LUA_YIELD) {
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2; /* false, the error */
  }
  return lua_gettop(L) - (int)base; /* true, the results */
}

static int guarded_xpcall(lua_State *L) {
  int nargs = lua_gettop(L) - 2;
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, guarded_handler, 1);
  lua_replace(L, 2);    /* f, handler, args... */
  lua_pushboolean(L, 1);
  lua_pushvalue(L, 1);
  lua_rotate(L, 3, 2);  /* f, handler, true, f, args... */
  return guarded_done(L, lua_pcallk(L, nargs, LUA_MULTRET, 2, 2, guarded_done), 2);
}

void luna__push_guarded_xpcall(lua_State *L) {
  lua_pushcfunction(L, guarded_xpcall);
}

/* ---- coroutines that an interrupt reaches ------------------------------------ */

/* luna_lua_interrupt puts its hook on luna__running, the thread the binding
   resumed last; a plain coroutine that a task resumes runs on a thread of
   its own, where a loop would never see it. These versions of resume,
   wrap and close make the coroutine luna__running while it runs. */

/* Closes co's pending to-be-closed variables (dead or suspended co) with
   co as luna__running, so an interrupt reaches a handler that loops. */
static int close_running(lua_State *L, lua_State *co) {
  lua_State *outer = luna__running, *outer_closing = luna__closing;
  int st;
  luna__running = co;
  luna__closing = co;
  st = luna__close_thread(co, L);
  luna__closing = outer_closing;
  luna__running = outer;
  return st;
}

/* After co ran or closed: an interrupt that landed in it left its hook on
   co. Then co is closed (its handlers run without that hook, as a task's
   own do when an interrupt unwinds it) and the interrupt goes on in L, so
   the code that resumed co stops too: a task is cancelled, not failed. */
static void pass_interrupt(lua_State *L, lua_State *co) {
  lua_Debug ar;
  if (!interrupt_pending || lua_gethook(co) != interrupt_hook)
    return;
  lua_sethook(co, NULL, 0, 0);
  /* Not one that is running or resuming another (resume refused it). */
  if (co != L && !(lua_status(co) == LUA_OK && lua_getstack(co, 0, &ar))) {
    close_running(L, co);
    pass_interrupt(L, co); /* one that landed in a handler meanwhile */
  }
  luna__arm_interrupt(L);
  raise_interrupt(L);
}

/* Resumes co with the nargs values on top of L, co being luna__running
   meanwhile. Returns how many results it moved to L, or -1 with an error
   value on top of L (co's error, or what kept the values from moving), as
   the base library's resume does. */
static int resume_running(lua_State *L, lua_State *co, int nargs) {
  lua_State *outer = luna__running;
  int st, nres;
  if (!lua_checkstack(co, nargs)) {
    lua_pushliteral(L, "too many arguments to resume");
    return -1;
  }
  lua_xmove(L, co, nargs);
  luna__running = co;
  st = lua_resume(co, L, nargs, &nres);
  luna__running = outer;
  pass_interrupt(L, co);
  if (st != LUA_OK && st != LUA_YIELD) {
    lua_xmove(co, L, 1);
    return -1;
  }
  if (!lua_checkstack(L, nres + 1)) {
    lua_pop(co, nres);
    lua_pushliteral(L, "too many results to resume");
    return -1;
  }
  lua_xmove(co, L, nres);
  return nres;
}

/* coroutine.resume(co, ...) -> true, ... | false, err. A suspended task's
   coroutine is refused with an error at the call, before anything moves:
   only the scheduler resumes a task. An ended task's is a dead coroutine. */
static int guarded_resume(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  int n;
  luaL_argexpected(L, co != NULL, 1, "thread"); /* as Lua 5.4.4 words it */
  if (luna__in_await(co))
    return luaL_error(L, "%s", LUNA__RESUME_TASK_MSG);
  if (luna__ended_task_thread(co)) { /* its results are the task's */
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "cannot resume dead coroutine");
    return 2;
  }
  n = resume_running(L, co, lua_gettop(L) - 1);
  lua_pushboolean(L, n >= 0);
  lua_insert(L, n >= 0 ? -(n + 1) : -2);
  return n >= 0 ? n + 1 : 2;
}

/* The function coroutine.wrap returns: upvalue 1 is its coroutine. On an
   error the coroutine is closed (its to-be-closed variables run) and the
   error goes on to the caller, a string with the caller's position. */
static int guarded_wrapped(lua_State *L) {
  lua_State *co = lua_tothread(L, lua_upvalueindex(1));
  int n = resume_running(L, co, lua_gettop(L)), st;
  if (n >= 0)
    return n;
  st = lua_status(co);
  if (st != LUA_OK && st != LUA_YIELD) { /* it died: close it */
    st = close_running(L, co);
    pass_interrupt(L, co);
    lua_xmove(co, L, 1); /* the error, or one a closing handler raised */
  }
  if (st != LUA_ERRMEM && lua_type(L, -1) == LUA_TSTRING) {
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
  }
  return lua_error(L);
}

/* coroutine.close(co) -> true | false, err: for a dead or suspended one;
   "cannot close a running/normal coroutine" otherwise, as the base
   library says it. Closing a suspended task's coroutine cancels the task,
   as task.cancel does (its to-be-closed variables see the cancellation,
   its awaiters are told, it ends "cancelled"), and returns true: closing
   a coroutine is how plain Lua says "this will not be resumed", and a
   stock close would run its __close handlers with no error and leave the
   task waiting on a dead coroutine. Finding the task walks the live tasks
   (luna__thread_task): task.cancel(t) is the O(1) way. */
static int guarded_close(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luna__binding *b;
  luna__task *t;
  lua_Debug ar;
  int st;
  luaL_argexpected(L, co != NULL, 1, "thread");
  if (co == L)
    return luaL_error(L, "cannot close a running coroutine");
  if (lua_status(co) == LUA_OK && lua_getstack(co, 0, &ar))
    return luaL_error(L, "cannot close a normal coroutine");
  if (luna__in_await(co) && (b = luna__get_binding(L)) != NULL && b->loop != NULL &&
      (t = luna__thread_task(b, co)) != NULL) {
    lua_pushcfunction(L, luna__l_cancel);
    luna__push_task(L, t);
    lua_call(L, 1, 0);
    lua_pushboolean(L, 1);
    return 1;
  }
  if (luna__ended_task_thread(co)) { /* dead: nothing to close, results kept */
    lua_pushboolean(L, 1);
    return 1;
  }
  st = close_running(L, co);
  pass_interrupt(L, co);
  lua_pushboolean(L, st == LUA_OK);
  if (st == LUA_OK)
    return 1;
  lua_xmove(co, L, 1);
  return 2;
}

lua_State *luna__push_coroutine(lua_State *L) {
  lua_State *co;
  luaL_checktype(L, 1, LUA_TFUNCTION);
  co = lua_newthread(L);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  return co;
}

/* coroutine.wrap(f) */
static int guarded_wrap(lua_State *L) {
  luna__push_coroutine(L);
  lua_pushcclosure(L, guarded_wrapped, 1);
  return 1;
}

LUNA_API void luna_lua_guard_interrupts(lua_State *L) {
  if (L != NULL)
    luna__guard_coroutines(L);
}

void luna__guard_coroutines(lua_State *L) {
  if (lua_getglobal(L, "coroutine") == LUA_TTABLE) {
    lua_pushcfunction(L, guarded_resume);
    lua_setfield(L, -2, "resume");
    lua_pushcfunction(L, guarded_wrap);
    lua_setfield(L, -2, "wrap");
    lua_pushcfunction(L, guarded_close);
    lua_setfield(L, -2, "close");
  }
  lua_pop(L, 1);
}

/* ---- lifecycle ---------------------------------------------------------------- */

static bool owned_continuation(luna_fn fn, void *arg, void *ud) {
  if (fn == luna__drain_cb)
    return arg == ud;
  if (fn != luna__resume_cb && fn != luna__start_cb)
    return false;
  return ((luna__task *)arg)->b == (luna__binding *)ud;
}

/* Cancels the state's tasks and removes its callbacks. Used when the state
   closes, and on loop reset and free. */
static void detach_work(luna__binding *b) {
  if (b->loop == NULL)
    return;
  luna__cancel_all(b);
  luna__remove_all_handles(b);
}

/* For a reset: the core is about to drop our queued continuations, so the
   tasks they hold must forget them (or their references would never be
   released). */
static bool release_continuation(luna_fn fn, void *arg, void *ud) {
  if (!owned_continuation(fn, arg, ud))
    return false;
  if (fn == luna__drain_cb)
    ((luna__binding *)ud)->drain_deferred = false;
  else
    luna__drop_continuation((luna__task *)arg);
  return true;
}

static void on_loop_event(luna_loop *loop, luna_event event, void *ud) {
  luna__binding *b = (luna__binding *)ud;
  (void)loop;
  detach_work(b);
  if (event == LUNA_EVENT_RESET && b->loop != NULL)
    luna_purge(b->loop, release_continuation, b);
  if (event == LUNA_EVENT_FREE) {
    luna_purge(b->loop, owned_continuation, b);
    b->loop = NULL;
    b->owns_loop = false;
  }
}

/* Takes the state off the loop without running Lua code and frees the
   binding's C arrays: callbacks removed, unsettled tasks abandoned (their
   to-be-closed variables do not run), continuations purged. What remains
   for the state's own close is Lua memory only. Idempotent. */
static void detach(luna__binding *b) {
  b->closing = true;
  if (b->loop != NULL) {
    luna__remove_all_handles(b);
    luna__abandon_all(b);
    luna_purge(b->loop, owned_continuation, b);
    luna_loop_remove_listener(b->loop, on_loop_event, b);
    if (b->owns_loop)
      luna_loop_free(b->loop);
    b->loop = NULL;
  }
  luna__ring_free(b, &b->ready);
  luna__ring_free(b, &b->cancels);
  luna__anchors_free(b);
}

/* Cancels the state's tasks and removes its callbacks, in protected mode:
   (binding) -> nothing. */
static int detach_work_protected(lua_State *L) {
  detach_work((luna__binding *)lua_touserdata(L, 1));
  return 0;
}

/* __gc of the binding: the state is closing. Tasks are cancelled first (their
   to-be-closed variables run while the state is whole), in a protected call
   (a state out of memory may not get through them all); then everything
   that points into this state leaves the loop, whatever the cancellations
   managed. From the start, new work is refused (luna__new_task). */
static int binding_gc(lua_State *L) {
  luna__binding *b = (luna__binding *)lua_touserdata(L, 1);
  b->closing = true;
  if (b->loop != NULL) {
    b->exec_L = b->L;
    lua_pushcfunction(L, detach_work_protected);
    lua_pushlightuserdata(L, b);
    (void)lua_pcall(L, 1, 0, 0); /* what it did not finish, detach abandons */
    lua_settop(L, 1);
  }
  detach(b);
  return 0;
}

void luna__guard_begin_close(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  if (b != NULL)
    b->closing = true;
}

bool luna__guard_closing(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  return b != NULL && b->closing;
}

void luna__guard_detach(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  if (b == NULL)
    return;
  luna__promise_detach(L);
  detach(b);
}

/* Sets the table on top of L's __metatable field to its own __name, so
   getmetatable gives that name and setmetatable refuses to change it: no
   code of the state can give a binding object a __gc or another
   behaviour. The binding's own checks read the metatable raw. */
void luna__protect_metatable(lua_State *L) {
  lua_getfield(L, -1, "__name");
  lua_setfield(L, -2, "__metatable");
}

static void new_error_metatables(lua_State *L) {
  luaL_newmetatable(L, LUNA__CANCEL_MT);
  lua_pushliteral(L, "task cancelled");
  lua_setfield(L, -2, "__tostring");
  luna__protect_metatable(L);
  lua_pop(L, 1);
  luaL_newmetatable(L, LUNA__TIMEOUT_MT);
  luna__protect_metatable(L);
  lua_pop(L, 1);
  /* The cancellation error is one shared value: comparing with it is how
     is_cancelled and the runtime recognise it. Its message is its __tostring. */
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "task cancelled");
  lua_setfield(L, -2, "message");
  luaL_setmetatable(L, LUNA__CANCEL_MT);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &cancel_key);
}

static int cancel_tostring(lua_State *L) {
  lua_pushliteral(L, "task cancelled");
  return 1;
}

/* Creates the binding of L on `loop`. Everything that may raise (a memory
   error) comes first; the loop learns of the binding last, so that a raise
   never leaves the loop a listener into a binding nothing keeps. */
static int create_binding(lua_State *L, luna_loop *loop, bool owns) {
  luna__binding *b;
  int rc;
  b = (luna__binding *)lua_newuserdatauv(L, sizeof *b, 1);
  memset(b, 0, sizeof *b);
  b->anchor_L = lua_newthread(L);
  lua_newtable(L);
  lua_xmove(L, b->anchor_L, 1); /* [1] the anchor table (task.c) */
  lua_setiuservalue(L, -2, 1);
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  b->L = lua_tothread(L, -1);
  lua_pop(L, 1);
  b->exec_L = b->L;
  b->exit_code = -1;
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, binding_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &binding_key);
  new_error_metatables(L);
  luaL_getmetatable(L, LUNA__CANCEL_MT);
  lua_pushcfunction(L, cancel_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  luna__tune_loop(loop);
  rc = luna_loop_add_listener(loop, on_loop_event, b);
  if (rc != 0) {
    lua_pushnil(L); /* forgotten: its __gc finds no loop */
    lua_rawsetp(L, LUA_REGISTRYINDEX, &binding_key);
    return rc;
  }
  b->loop = loop;
  b->owns_loop = owns;
  return 0;
}

/* The module table's builder lives in module.c. */
int luna__open_module(lua_State *L, luna__binding *b);

/* luna_lua_attach's work, in protected mode: (loop) -> nothing. A failure
   of create_binding raises its code as an integer. */
static int attach_protected(lua_State *L) {
  luna_loop *loop = (luna_loop *)lua_touserdata(L, 1);
  int rc = create_binding(L, loop, false);
  if (rc != 0) {
    lua_pushinteger(L, rc);
    return lua_error(L);
  }
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 0);
  return 0;
}

LUNA_API int luna_lua_attach(lua_State *L, luna_loop *loop) {
  luna__binding *b;
  int st, rc;
  if (L == NULL || loop == NULL)
    return LUNA_EINVAL;
  if (luna__get_binding(L) != NULL)
    return LUNA_ESTATE;
  /* Protected, so that a state without the standard libraries the module
     uses, or out of memory, gets an error code instead of a Lua panic. */
  if (!lua_checkstack(L, 3))
    return LUNA_ENOMEM;
  lua_pushcfunction(L, attach_protected);
  lua_pushlightuserdata(L, loop);
  st = lua_pcall(L, 1, 0, 0);
  if (st == LUA_OK)
    return 0;
  rc = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1)
                            : st == LUA_ERRMEM ? LUNA_ENOMEM : LUNA_EINVAL;
  lua_pop(L, 1);
  /* Undo a half-made binding: off the loop now, forgotten by the state (its
     __gc then finds no loop). */
  b = luna__get_binding(L);
  if (b != NULL) {
    luna_loop_remove_listener(loop, on_loop_event, b);
    b->loop = NULL;
    lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &binding_key);
  }
  return rc;
}

LUNA_API int luaopen_lunaloop(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  if (b == NULL) {
    luna_loop *loop;
    int rc = luna_loop_new(NULL, &loop);
    if (rc != 0)
      return luaL_error(L, "lunaloop: cannot create a loop: %s", luna_strerror(rc));
    rc = create_binding(L, loop, true);
    if (rc != 0) {
      luna_loop_free(loop);
      return luaL_error(L, "lunaloop: cannot attach the loop: %s", luna_strerror(rc));
    }
    b = luna__get_binding(L);
  }
  return luna__open_module(L, b);
}

LUNA_API luna_loop *luna_lua_loop(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  return b != NULL ? b->loop : NULL;
}

LUNA_API size_t luna_lua_task_count(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  return b != NULL ? b->ntasks : 0;
}

LUNA_API size_t luna_lua_callback_count(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  return b != NULL ? b->nhandles : 0;
}

LUNA_API uint64_t luna_lua_error_count(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  return b != NULL ? b->errors : 0;
}

LUNA_API bool luna_lua_exit_requested(lua_State *L, int *code) {
  luna__binding *b = luna__get_binding(L);
  if (b == NULL || !b->exit_requested)
    return false;
  if (code != NULL)
    *code = b->exit_code;
  return true;
}

LUNA_API size_t luna_lua_cancel_all(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  size_t n;
  if (b == NULL || b->loop == NULL)
    return 0;
  n = luna__cancel_all(b);
  luna__remove_all_handles(b);
  return n;
}

LUNA_API int luna_lua_spawn(lua_State *L, int nargs, const char *name) {
  luna__binding *b = luna__get_binding(L);
  luna__task *t;
  int fn_idx = b != NULL ? lua_gettop(L) - nargs : 0;
  if (b == NULL || b->loop == NULL || nargs < 0 || fn_idx < 1 ||
      !lua_isfunction(L, fn_idx))
    return LUNA_EINVAL;
  t = luna__new_task(L, b, fn_idx, nargs);
  if (name != NULL) {
    lua_pushstring(L, name);
    luna__set_name(L, -2);
  }
  lua_replace(L, fn_idx);
  lua_settop(L, fn_idx);
  luna__start(b, t);
  return 0;
}
