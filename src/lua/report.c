/*
** report.c: the binding's errors. The cancellation and timeout error
** values, the message handler that keeps a callback's traceback aside,
** and luna__report, which hands a failure to the task.on_error handler (or
** the default report on stderr, or the report of last resort when there is
** not the memory for either). Includes binding.h, guard.h and the public
** lunaloop_lua.h.
*/
#include <stdio.h>

#include "binding.h"
#include "guard.h"
#include "lunaloop_lua.h"

/* Registry keys: the addresses of these statics are unique in the process. */
static const char cancel_key = 'c';
static const char handler_key = 'h';
static const char traceback_key = 't';

/* ---- helpers ---------------------------------------------------------------- */

static bool has_metatable(lua_State *L, int idx, const char *name) {
  bool same;
  if (!lua_getmetatable(L, idx))
    return false;
  luaL_getmetatable(L, name);
  same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
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

static int tostring_protected(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

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
  luna__calling_saved saved;
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
  saved = luna__begin_calling(b, L, LUNA__CALLING_HANDLER);
  LUNA__OBSERVE(b, on_call, L, true);
  st = lua_pcall(L, 4, 0, 0);
  LUNA__OBSERVE(b, on_call, L, false);
  luna__end_calling(b, saved);
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

static int cancel_tostring(lua_State *L) {
  lua_pushliteral(L, "task cancelled");
  return 1;
}

static int timeout_tostring(lua_State *L) {
  lua_getfield(L, 1, "message");
  return 1;
}

/* ---- entry points ------------------------------------------------------------ */

void luna__push_cancel_error(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &cancel_key);
}

bool luna__is_cancel_error(lua_State *L, int idx) {
  return lua_istable(L, idx) && has_metatable(L, idx, LUNA__CANCEL_MT);
}

bool luna__is_timeout_error(lua_State *L, int idx) {
  return lua_istable(L, idx) && has_metatable(L, idx, LUNA__TIMEOUT_MT);
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

/* task.on_error(fn | nil) -> previous handler (nil for the default). */
int luna__set_handler(lua_State *L) {
  return luna__guard_swap_handler(L, &handler_key);
}

void luna__guard_set_report(lua_State *L, luna__guard_report_fn fn, void *ud) {
  luna__binding *b = luna__get_binding(L);
  if (b != NULL) {
    b->report_fallback = fn;
    b->report_fallback_ud = ud;
  }
}

/* ---- opening ------------------------------------------------------------------ */

void luna__open_errors(lua_State *L) {
  luaL_newmetatable(L, LUNA__CANCEL_MT);
  lua_pushcfunction(L, cancel_tostring);
  lua_setfield(L, -2, "__tostring");
  luna__protect_metatable(L);
  lua_pop(L, 1);
  luaL_newmetatable(L, LUNA__TIMEOUT_MT);
  lua_pushcfunction(L, timeout_tostring);
  lua_setfield(L, -2, "__tostring");
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
