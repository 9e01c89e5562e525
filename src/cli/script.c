/*
** script.c: the Lua state a script runs in. Everything that can raise (the
** module, the `arg` table, math.randomseed, loading the file) runs inside one
** protected call, like lua.c's pmain, so that a failure becomes a message
** and an exit status instead of a panic.
*/
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "cli.h"

/* What the protected call needs, passed as a light userdata. */
typedef struct prepare_ctx {
  const luna_run_options *opts;
  int argc;
  char **argv;
  int script;       /* index of SCRIPT in argv */
  bool load_failed; /* the error came from loading the script itself */
} prepare_ctx;

/* Sets the global `arg` as the stock `lua` does: arg[0] is the script, the
   script's arguments follow at 1, 2, ..., and the words before the script
   (program, command, options) go to -1, -2, ... */
static void set_arg(lua_State *L, const prepare_ctx *ctx) {
  int nargs = ctx->argc - ctx->script - 1;
  lua_createtable(L, nargs, ctx->script + 1);
  for (int i = 0; i < ctx->argc; i++) {
    lua_pushstring(L, ctx->argv[i]);
    lua_rawseti(L, -2, (lua_Integer)i - ctx->script);
  }
  lua_setglobal(L, "arg");
}

/* The protected part of luna__script_prepare. Returns the chunk and the
   script's arguments. */
static int prepare(lua_State *L) {
  prepare_ctx *ctx = lua_touserdata(L, 1);
  const char *path = ctx->argv[ctx->script];
  lua_settop(L, 0);

  /* task = require "lunaloop": the attached binding is in package.loaded. */
  lua_getglobal(L, "require");
  lua_pushliteral(L, "lunaloop");
  lua_call(L, 1, 1);
  lua_setglobal(L, "task");
  if (ctx->opts->roblox) { /* --roblox: Roblox's task library instead */
    lua_getglobal(L, "require");
    lua_pushliteral(L, "lunaloop.roblox");
    lua_call(L, 1, 1);
    lua_setglobal(L, "task");
  }

  set_arg(L, ctx);

  if (ctx->opts->has_seed) {
    lua_getglobal(L, "math");
    lua_getfield(L, -1, "randomseed");
    lua_pushinteger(L, (lua_Integer)ctx->opts->seed);
    lua_call(L, 1, 0);
    lua_pop(L, 1);
  }

  /* "-" reads the script from stdin, as with the stock `lua`. */
  if (luaL_loadfile(L, strcmp(path, "-") == 0 ? NULL : path) != LUA_OK) {
    ctx->load_failed = true;
    return lua_error(L);
  }
  int nargs = ctx->argc - ctx->script - 1;
  luaL_checkstack(L, nargs, "too many arguments to script");
  for (int i = ctx->script + 1; i < ctx->argc; i++)
    lua_pushstring(L, ctx->argv[i]);
  return 1 + nargs;
}

int luna__script_prepare(lua_State *L, const luna_run_options *opts, int argc,
                         char **argv, int script, int *status) {
  prepare_ctx ctx = {opts, argc, argv, script, false};
  int base = lua_gettop(L);
  lua_pushcfunction(L, prepare);
  lua_pushlightuserdata(L, &ctx);
  if (lua_pcall(L, 1, LUA_MULTRET, 0) != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    if (msg == NULL)
      msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, -1));
    fprintf(stderr, LUNA_PROGNAME ": %s\n", msg);
    lua_settop(L, base);
    *status = ctx.load_failed ? LUNA_EXIT_USAGE : LUNA_EXIT_ERROR;
    return -1;
  }
  return lua_gettop(L) - base - 1;
}
