/*
** guarded.c: the guarded xpcall and coroutine.resume, coroutine.wrap,
** coroutine.close and coroutine.status (which calls a settled task's
** thread dead). luna_lua_interrupt puts its hook on luna__running, the
** thread the binding resumed last; a plain coroutine that a task resumes
** runs on a thread of its own, where the hook would never see it, so these
** versions make the coroutine luna__running while it runs and carry an
** interrupt that landed in it on to their caller. They also keep a task's
** coroutine the scheduler's alone, and an xpcall lets an error one of the
** binding's hooks raised (interrupt.c) through without its handler.
** Includes binding.h and the public lunaloop_lua.h only.
*/
#include "binding.h"
#include "lunaloop_lua.h"

/* ---- helpers ---------------------------------------------------------------- */

/* The message handler of a guarded xpcall: upvalue 1 is the caller's. It
   runs one C call below the error, so a handler that reads the stack
   (debug.getinfo, debug.traceback with a level) sees this frame too. */
static int guarded_handler(lua_State *L) {
  if (luna__is_stop_error(L, 1))
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

/* Closes co's pending to-be-closed variables (dead or suspended co) with
   co as luna__running, so an interrupt reaches a handler that loops. */
static int close_running(lua_State *L, lua_State *co) {
  lua_State *outer_closing = luna__closing, *outer = luna__enter_thread(co);
  int st;
  luna__closing = co;
  st = luna__close_thread(co, L);
  luna__closing = outer_closing;
  luna__leave_thread(outer);
  return st;
}

/* After co ran or closed: an interrupt that landed in it left its hook on
   co. Then co is closed (its handlers run without that hook, as a task's
   own do when an interrupt unwinds it) and the interrupt goes on in L, so
   the code that resumed co stops too: a task is cancelled, not failed. */
static void pass_interrupt(lua_State *L, lua_State *co) {
  lua_Debug ar;
  if (!luna__take_interrupt_hook(co))
    return;
  /* Not one that is running or resuming another (resume refused it). */
  if (co != L && !(lua_status(co) == LUA_OK && lua_getstack(co, 0, &ar))) {
    close_running(L, co);
    pass_interrupt(L, co); /* one that landed in a handler meanwhile */
  }
  luna__arm_interrupt(L);
  luna__raise_interrupt(L);
}

/* Resumes co with the nargs values on top of L, co being luna__running
   meanwhile. Returns how many results it moved to L, or -1 with an error
   value on top of L (co's error, or what kept the values from moving), as
   the base library's resume does. */
static int resume_running(lua_State *L, lua_State *co, int nargs) {
  lua_State *outer;
  int st, nres;
  if (!lua_checkstack(co, nargs)) {
    lua_pushliteral(L, "too many arguments to resume");
    return -1;
  }
  lua_xmove(L, co, nargs);
  outer = luna__enter_thread(co);
  st = lua_resume(co, L, nargs, &nres);
  luna__leave_thread(outer);
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

/* ---- entry points ------------------------------------------------------------ */

/* xpcall(f, msgh, ...), as the base library's. */
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

/* coroutine.wrap(f) */
static int guarded_wrap(lua_State *L) {
  luna__push_coroutine(L);
  lua_pushcclosure(L, guarded_wrapped, 1);
  return 1;
}

/* coroutine.close(co) -> true | false, err: for a dead or suspended one;
   "cannot close a running/normal coroutine" otherwise, as the base
   library says it. Closing a suspended task's coroutine cancels the task,
   as task.cancel does (its to-be-closed variables see the cancellation,
   its awaiters are told, it ends "cancelled"), and returns true: closing
   a coroutine is how plain Lua says "this will not be resumed", and a
   stock close would run its __close handlers with no error and leave the
   task waiting on a dead coroutine. The thread is the task, so this is
   task.cancel(co). */
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
      (t = luna__record(co)) != NULL && !LUNA__SETTLED(t)) {
    lua_pushcfunction(L, luna__l_cancel);
    lua_pushvalue(L, 1);
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

/* coroutine.status(co): the stock answer, except for a settled task's
   thread: it still holds the task's outcome, which the stock function
   would take for a coroutine not started yet ("suspended"); it is
   "dead", as resume and close treat it. Upvalue 1: the stock function. */
static int guarded_status(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co != NULL, 1, "coroutine");
  if (luna__ended_task_thread(co)) {
    lua_pushliteral(L, "dead");
    return 1;
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

lua_State *luna__push_coroutine(lua_State *L) {
  lua_State *co;
  luaL_checktype(L, 1, LUA_TFUNCTION);
  co = lua_newthread(L);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  return co;
}

void luna__push_guarded_xpcall(lua_State *L) {
  lua_pushcfunction(L, guarded_xpcall);
}

/* ---- luaL_Reg tables ---------------------------------------------------------- */

static const luaL_Reg guarded_coroutine_funcs[] = {
    {"resume", guarded_resume},
    {"wrap", guarded_wrap},
    {"close", guarded_close},
    {NULL, NULL}};

/* ---- opening ------------------------------------------------------------------ */

void luna__guard_coroutines(lua_State *L) {
  if (lua_getglobal(L, "coroutine") == LUA_TTABLE) {
    luaL_setfuncs(L, guarded_coroutine_funcs, 0);
    if (lua_getfield(L, -1, "status") == LUA_TFUNCTION &&
        lua_tocfunction(L, -1) != guarded_status) {
      lua_pushcclosure(L, guarded_status, 1);
      lua_setfield(L, -2, "status");
    } else {
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
}

LUNA_API void luna_lua_guard_interrupts(lua_State *L) {
  if (L != NULL)
    luna__guard_coroutines(L);
}
