/*
** repl_output.c: the REPL's output, kept apart from the line being typed.
** `print`, `io.write` (to stdout) and the error reports of the REPL's state
** go through luna__repl_out_begin/out_end, which erase the prompt and the
** typed line, write, and let libedit redraw them, so a background task
** never garbles the input. It owns whether the line is hidden and whether
** the last output ended a line. Includes repl.h (cli.h) and Lua.
*/
#include <signal.h>
#include <stdarg.h>

#include <lauxlib.h>
#include <lua.h>

#include "lunaloop_lua.h"
#include "repl.h"

static bool hidden;               /* out_begin erased the line; out_end redraws it */
static bool at_line_start = true; /* the last output ended with a newline */
/* The terminal echoed a ^C (it does while no line is edited): the next
   output, or the prompt, starts on a new line. Set in the Ctrl-C handler. */
static volatile sig_atomic_t echoed_ctrl_c;

void luna__repl_echoed_ctrl_c(void) {
  echoed_ctrl_c = 1;
}

void luna__repl_after_echo(void) {
  if (echoed_ctrl_c) {
    echoed_ctrl_c = 0;
    fputs("\n", stdout);
    at_line_start = true;
  }
}

bool luna__repl_at_line_start(void) {
  return at_line_start;
}

void luna__repl_set_line_start(void) {
  at_line_start = true;
}

void luna__repl_out_begin(void) {
  luna__repl_after_echo();
  if (!luna__edit_editing() || hidden)
    return;
  luna__edit_erase();
  hidden = true;
}

void luna__repl_out_end(void) {
  fflush(stdout);
  fflush(stderr);
  if (!hidden)
    return;
  if (!at_line_start) {
    fputs("\n", stdout);
    at_line_start = true;
  }
  luna__edit_redraw(); /* prompt and line, cursor where it was */
  hidden = false;
}

/* Writes len bytes to f between out_begin and out_end. */
static void out_write(FILE *f, const char *s, size_t len) {
  luna__repl_out_begin();
  fwrite(s, 1, len, f);
  if (len > 0)
    at_line_start = s[len - 1] == '\n';
  luna__repl_out_end();
}

void luna__repl_printf(FILE *f, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  out_write(f, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

void luna__repl_report_tasks(FILE *f, const char *why) {
  luna__repl_out_begin();
  luna__report_tasks(R.L, f, why);
  at_line_start = true;
  luna__repl_out_end();
}

/* Ends the buffer and writes what it holds to f. */
static void write_buffer(lua_State *L, luaL_Buffer *b, FILE *f) {
  size_t len;
  luaL_pushresult(b);
  const char *s = lua_tolstring(L, -1, &len);
  out_write(f, s, len);
}

/* print(...): as the stock print (tostring of each value, tabs, newline),
   through out_write. */
static int l_print(lua_State *L) {
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; i++) {
    if (i > 1)
      luaL_addchar(&b, '\t');
    luaL_tolstring(L, i, NULL);
    luaL_addvalue(&b);
  }
  luaL_addchar(&b, '\n');
  write_buffer(L, &b, stdout);
  return 0;
}

/* io.write(...): the original (upvalue 1), between out_begin and out_end
   when the default output is stdout. */
static int l_io_write(lua_State *L) {
  int n = lua_gettop(L);
  bool to_stdout = false;
  lua_getglobal(L, "io");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "output");
    lua_getfield(L, -2, "stdout");
    if (lua_isfunction(L, -2)) {
      lua_pushvalue(L, -2);
      lua_call(L, 0, 1);
      to_stdout = lua_rawequal(L, -1, -2);
      lua_pop(L, 1);
    }
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  if (to_stdout) {
    luna__repl_out_begin();
    if (n > 0 && lua_type(L, n) == LUA_TSTRING) {
      size_t len;
      const char *s = lua_tolstring(L, n, &len);
      if (len > 0)
        at_line_start = s[len - 1] == '\n';
    } else if (n > 0) {
      at_line_start = false;
    }
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  int st = lua_pcall(L, n, LUA_MULTRET, 0);
  if (to_stdout)
    luna__repl_out_end();
  if (st != LUA_OK)
    return lua_error(L);
  return lua_gettop(L);
}

/* The message of a foreground chunk's error object that is not a string,
   as the stock lua shows it: a string from __tostring alone (*tb is then
   NULL), otherwise what kind of value was raised. */
static const char *non_string_message(lua_State *L, const char **tb) {
  if (luaL_getmetafield(L, 1, "__tostring") != LUA_TNIL) {
    lua_pushvalue(L, 1);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) /* what __tostring raised */
      return luna_lua_tostring(L, -1);
    if (lua_type(L, -1) == LUA_TSTRING) {
      *tb = NULL;
      return lua_tostring(L, -1);
    }
  }
  return lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
}

/* The error handler of the REPL's state (task.on_error): the error of the
   foreground chunk (the one the prompt waits for, even when it fails before
   its first await) as the stock `lua` shows it; any other as the default
   report of the binding, which `lunaloop run` prints: "lunaloop: <what>
   failed: <message>", where `what` (argument 4) is the default report's
   subject ("task worker", "callback stdin:1", ...). Then the traceback. */
static int l_on_error(lua_State *L) {
  lua_settop(L, 4);
  const char *msg = luna_lua_tostring(L, 1);
  const char *tb = lua_tostring(L, 2);
  uint64_t fg_id = luna__repl_fg_id();
  bool foreground = false;
  if (!lua_isnil(L, 3) && fg_id != 0) {
    lua_getfield(L, 3, "id");
    foreground = (uint64_t)lua_tointeger(L, -1) == fg_id;
    lua_pop(L, 1);
  }
  if (foreground && !lua_isstring(L, 1))
    msg = non_string_message(L, &tb);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  if (!foreground) {
    luaL_addstring(&b, LUNA_PROGNAME ": ");
    luaL_addstring(&b, lua_isstring(L, 4) ? lua_tostring(L, 4) : "task");
    luaL_addstring(&b, " failed: ");
  }
  luaL_addstring(&b, msg);
  luaL_addchar(&b, '\n');
  if (tb != NULL) {
    luaL_addstring(&b, tb);
    luaL_addchar(&b, '\n');
  }
  write_buffer(L, &b, stderr);
  return 0;
}

void luna__repl_push_print(lua_State *L) {
  lua_pushcfunction(L, l_print);
}

void luna__repl_route_output(lua_State *L) {
  lua_pushcfunction(L, l_print);
  lua_setglobal(L, "print");
  lua_getglobal(L, "io");
  lua_getfield(L, -1, "write");
  lua_pushcclosure(L, l_io_write, 1);
  lua_setfield(L, -2, "write");
  lua_pop(L, 1);
  lua_getglobal(L, "task");
  lua_getfield(L, -1, "on_error");
  lua_pushcfunction(L, l_on_error);
  lua_call(L, 1, 0);
  lua_pop(L, 1);
}
