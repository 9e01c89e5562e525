/*
** sandbox.c: the environment a mod's code sees.
**
** A mod's state opens only base, coroutine, table, os, string, math and utf8
** (never io, package or debug), attaches the binding (whose Lua-side code
** keeps the original global table as its upvalue), and then replaces the
** state's global table (registry[LUA_RIDX_GLOBALS]) by a fresh table built
** from the whitelist below. So every chunk a mod loads, with or without an
** explicit env, starts from the sandbox, and the original globals are out of
** reach. docs/modding.md lists the same whitelist for mod authors; change
** both together.
**
** Rules, each with a test in tests/mods/test_sandbox.c:
** - no binary chunks: load, loadfile, dofile and require load text only;
** - files only from the mod's own folder: relative paths without "..",
**   resolved with realpath and checked to stay inside the folder (so a
**   symbolic link cannot lead out), regular files opened without blocking
**   (files.c reads them, as it reads manifest.lua);
** - string.dump is removed from the state's string library, which is also
**   the string metatable's __index;
** - no __gc metamethods (finalizers run with hooks off, so the budget could
**   not stop one): setmetatable refuses a metatable with a __gc field;
**   getmetatable returns only metatables the mod set itself, the string
**   metatable, and __metatable fields, so the binding's own metatables
**   (Task, Handle, Channel, Scope...) cannot be given a __gc either;
** - coroutine.resume/close accept only coroutines made by the sandbox's
**   coroutine.create/wrap and tasks' coroutines (which the binding's
**   guarded functions refuse to resume, and close by cancelling the task,
**   as everywhere), and every coroutine gets the budget hook;
** - no single call whose cost the budgets cannot reach: the pattern
**   functions are the bounded matcher (pattern.c), collectgarbage allows
**   only count, isrunning, one basic step and collect (a request the
**   loop's collector pacer serves in slices), string.rep of an empty
**   result and table.move over more slots than the memory cap holds
**   return or raise at once, and table.sort checks the time budget
**   between comparisons (docs/modding.md, "Time");
** - the task module is built from an allowed list (task_allowed: no step,
**   run, exit, set_budget, debug or gc, since the loop, its budgets,
**   profiling and collector pacing belong to the host), time_scale read-only, and on_error's
**   handler called by the set's own handler;
** - every object the binding hands out has a protected metatable
**   (__metatable is its name) whose methods are out of reach, and the
**   binding's Lua code captured the functions it calls when it loaded, so
**   rewriting string, table or math changes nothing but the mod's own code
**   (tests/mods/test_sandbox.c enumerates everything a mod can reach).
*/
#define _XOPEN_SOURCE 700 /* PATH_MAX */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mods.h"

/* Upvalue-less registry keys. */
static const char own_mts_key = 'm';     /* weak-keyed set of mod-set metatables */
static const char own_threads_key = 't'; /* weak-keyed set of sandbox coroutines */
static const char loaded_key = 'l';      /* require's cache */

#define MAX_SOURCE (16u * 1024u * 1024u) /* largest Lua file a mod may load */

/* ---- files of the mod's folder ------------------------------------------------------- */

/* A path a mod may name: relative, no "..", no empty component, no NUL. */
static bool safe_relative(const char *rel) {
  const char *p = rel;
  if (rel[0] == '\0' || rel[0] == '/' || strchr(rel, '\\') != NULL)
    return false;
  while (*p != '\0') {
    const char *end = strchr(p, '/');
    size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
    if (n == 0 || (n == 2 && p[0] == '.' && p[1] == '.'))
      return false;
    p += n;
    if (*p == '/')
      p++;
  }
  return true;
}

void luna__sandbox_loadfile(lua_State *L, luna__mod *m, const char *rel, const char *what) {
  char chunkname[256];
  const char *why;
  int st;
  if (!safe_relative(rel))
    luaL_error(L, "%s: '%s' is not a path inside the mod's folder "
                  "(relative, without '..')", what, rel);
  snprintf(chunkname, sizeof chunkname, "@%s/%s", m->man.name, rel);
  st = luna__load_in_folder(L, m->dir, rel, MAX_SOURCE, chunkname, &why);
  if (st < 0)
    luaL_error(L, "%s: cannot read '%s': %s", what, rel, why);
  if (st != LUA_OK)
    lua_error(L);
}

/* ---- load, loadfile, dofile, require ---------------------------------------------------- */

/* load(chunk [, chunkname [, mode [, env]]]): the stock load, mode forced
   to "t". Without env the chunk gets the sandbox (the state's globals). */
static int l_load(lua_State *L) {
  int n = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  if (n < 3)
    lua_settop(L, 4); /* fn, chunk, name, mode */
  lua_pushliteral(L, "t");
  lua_replace(L, 4);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* The path argument of loadfile and dofile: a string without NUL (the C
   calls under it would read only up to the NUL, and load another file than
   the one named). */
static const char *check_path(lua_State *L) {
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  luaL_argcheck(L, strlen(path) == len, 1, "a path without NUL bytes expected");
  return path;
}

/* loadfile(path [, mode [, env]]) -> chunk | nil, message */
static int l_loadfile(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  const char *path = check_path(L);
  int env = !lua_isnone(L, 3) ? 3 : 0;
  lua_settop(L, 3);
  luna__sandbox_loadfile(L, m, path, "loadfile");
  if (env != 0) {
    lua_pushvalue(L, env);
    if (lua_setupvalue(L, -2, 1) == NULL)
      lua_pop(L, 1);
  }
  return 1;
}

static int dofile_cont(lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  (void)ctx;
  return lua_gettop(L) - 1;
}

/* dofile(path): runs a file of the mod's folder, returns its results. */
static int l_dofile(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  const char *path = check_path(L);
  lua_settop(L, 1);
  luna__sandbox_loadfile(L, m, path, "dofile");
  lua_callk(L, 0, LUA_MULTRET, 0, dofile_cont);
  return dofile_cont(L, 0, 0);
}

/* True when dir/rel names something (lstat only: opening a FIFO could
   block, and following a link would tell whether a file outside the
   folder exists; luna__sandbox_loadfile then checks what it is). */
static bool file_exists(const luna__mod *m, const char *rel) {
  char full[PATH_MAX];
  struct stat st;
  if ((size_t)snprintf(full, sizeof full, "%s/%s", m->dir, rel) >= sizeof full)
    return false;
  return lstat(full, &st) == 0;
}

/* require(name): preloaded modules (lunaloop, mods and the whitelisted
   libraries), else name.lua or name/init.lua of the mod's folder, dots
   meaning folders. Names are letters, digits, '_' and '-' between dots.
   As with the stock require, a module that fails (missing, a syntax error,
   an error while it runs) is not cached: requiring it again tries again and
   raises the same error. While a module runs it is marked as loading, so a
   cycle of requires is an error; the mark is removed when it fails. */
static int l_require(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  size_t i, n;
  const char *name = luaL_checklstring(L, 1, &n);
  char rel[PATH_MAX], alt[PATH_MAX];
  lua_settop(L, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &loaded_key);
  lua_getfield(L, 2, name);
  if (lua_toboolean(L, -1)) {
    if (lua_islightuserdata(L, -1))
      return luaL_error(L, "require: loop in the modules required by '%s'", name);
    return 1;
  }
  lua_pop(L, 1);
  if (n == 0 || n >= sizeof rel - 16 || name[0] == '.' || name[n - 1] == '.' ||
      strlen(name) != n)
    return luaL_error(L, "require: bad module name '%s'", name);
  for (i = 0; i < n; i++) {
    char c = name[i];
    if (c == '.') {
      if (name[i + 1] == '.')
        return luaL_error(L, "require: bad module name '%s'", name);
      rel[i] = '/';
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-') {
      rel[i] = c;
    } else {
      return luaL_error(L, "require: bad module name '%s' (only letters, digits, '_', "
                           "'-' and dots; modules come from the mod's own folder)", name);
    }
  }
  memcpy(alt, rel, n);
  memcpy(rel + n, ".lua", 5);
  memcpy(alt + n, "/init.lua", 10);
  if (!file_exists(m, rel)) {
    if (!file_exists(m, alt))
      return luaL_error(L, "require: cannot open module '%s' in the mod's folder:\n"
                           "\tno file '%s'\n\tno file '%s'", name, rel, alt);
    memcpy(rel, alt, n + 10);
  }
  /* Loading it (errors leave no mark), then running it marked as loading. */
  luna__sandbox_loadfile(L, m, rel, "require");
  lua_pushlightuserdata(L, (void *)&loaded_key);
  lua_setfield(L, 2, name);
  lua_pushvalue(L, 1);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    lua_pushvalue(L, 1); /* the key exists: a raw set allocates nothing */
    lua_pushnil(L);
    lua_rawset(L, 2);
    return lua_error(L);
  }
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, 2, name);
  return 1;
}

/* ---- print ------------------------------------------------------------------------------ */

/* print(...): one line, values separated by tabs, through the set's print
   function ("[name] line" on stdout by default). The line is escaped
   (src/lua/escape.c; tabs kept) into a buffer of the mod's own state, so neither a
   terminal escape nor a forged line reaches the host's output, and a huge
   line costs the mod's memory, not the host's. */
static int l_print(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  int i, n = lua_gettop(L);
  luaL_Buffer b;
  size_t len, done = 0;
  const char *line;
  luaL_buffinit(L, &b);
  for (i = 1; i <= n; i++) {
    if (i > 1)
      luaL_addchar(&b, '\t');
    luaL_tolstring(L, i, NULL);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  line = lua_tolstring(L, -1, &len);
  luaL_buffinit(L, &b);
  while (done < len) {
    size_t used, room = len - done < 1024 ? 4 * (len - done) + 8 : 4096;
    char *p = luaL_prepbuffsize(&b, room);
    luaL_addsize(&b, luna__escape(p, room, line + done, len - done, LUNA__ESC_KEEP_TAB, &used));
    done += used;
  }
  luaL_pushresult(&b);
  line = lua_tolstring(L, -1, &len);
  if (m->set->cfg.print != NULL) {
    m->set->cfg.print(m->set->cfg.print_ud, m->man.name, line, len);
  } else {
    printf("[%s] ", m->man.name);
    fwrite(line, 1, len, stdout);
    putchar('\n');
    fflush(stdout);
  }
  return 0;
}

/* ---- metatables -------------------------------------------------------------------------- */

/* setmetatable(t, mt): as stock, but a metatable with a __gc field is
   refused, and mt is remembered as one the mod may get back. */
static int l_setmetatable(lua_State *L) {
  int t = lua_type(L, 2);
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
  if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
    return luaL_error(L, "cannot change a protected metatable");
  if (t == LUA_TTABLE) {
    /* Raw, as Lua looks it up when it marks the table for finalization
       (only here: a __gc added to mt later is never called). */
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, 2) != LUA_TNIL)
      return luaL_error(L, "setmetatable: __gc metamethods are not allowed in mods "
                           "(use a to-be-closed variable or on_unload)");
    lua_pop(L, 1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &own_mts_key);
    lua_pushvalue(L, 2);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
  }
  lua_settop(L, 2);
  lua_setmetatable(L, 1);
  return 1;
}

/* getmetatable(v): a __metatable field if there is one; else the metatable
   if the mod set it itself, or v is a string; else nil. */
static int l_getmetatable(lua_State *L) {
  luaL_checkany(L, 1);
  if (!lua_getmetatable(L, 1)) {
    lua_pushnil(L);
    return 1;
  }
  if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
    return 1;
  if (lua_type(L, 1) == LUA_TSTRING)
    return 1;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &own_mts_key);
  lua_pushvalue(L, -2);
  if (lua_rawget(L, -2) == LUA_TNIL)
    lua_pushnil(L);
  else
    lua_pushvalue(L, -3);
  return 1;
}

/* collectgarbage(opt [, 0]): only what cannot stall: "count", "isrunning",
   "step" as one basic step (a step of a given size costs time in
   proportion to the heap inside one C call, where no budget can stop it),
   and "collect" (the default) as a request that the loop's collector
   pacer serves in slices at its paced timing; it returns 0 at once, as
   the stock one does. Tuning or stopping the collector is the host's. */
static int l_collectgarbage(lua_State *L) {
  static const char *const allowed[] = {"count", "step", "isrunning", "collect", NULL};
  const char *opt = luaL_optstring(L, 1, "collect");
  int i;
  for (i = 0; allowed[i] != NULL; i++)
    if (strcmp(opt, allowed[i]) == 0)
      break;
  if (allowed[i] == NULL)
    return luaL_error(L, "collectgarbage: option '%s' is not allowed in mods (only 'count', "
                         "'isrunning', 'step', one basic step, and 'collect', served in "
                         "slices between frames)", opt);
  if (i == 3) {
    luna__guard_request_collect(L);
    lua_pushinteger(L, 0);
    return 1;
  }
  if (i == 1 && !lua_isnoneornil(L, 2) && luaL_checkinteger(L, 2) != 0)
    return luaL_error(L, "collectgarbage: mods may take one basic step only ('step' without "
                         "a size)");
  lua_settop(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* string.rep(s, n [, sep]): the stock one, except that an empty result is
   returned at once: the stock loop copies nothing n - 1 times, so
   ("").rep("", math.maxinteger) would run for ever without allocating.
   Every other result is bounded by the memory cap, and so is its time. */
static int l_string_rep(lua_State *L) {
  size_t l, lsep = 0;
  luaL_checklstring(L, 1, &l);
  luaL_checkinteger(L, 2);
  luaL_optlstring(L, 3, "", &lsep);
  if (l + lsep == 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* The comparator of the sandbox's table.sort: the mod's (upvalue 1) or
   `<`, and every 1024 comparisons a check of the time budget, so that a
   sort of millions of values (seconds inside one C call) stops at the
   deadline too. */
static int sort_less(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  bool less;
  if ((++m->sort_calls & 1023) == 0)
    luna__budget_check_time(L, m);
  if (lua_isnil(L, lua_upvalueindex(1))) {
    less = lua_compare(L, 1, 2, LUA_OPLT);
  } else {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, 2, 1);
    less = lua_toboolean(L, -1);
  }
  lua_pushboolean(L, less);
  return 1;
}

/* table.sort(t [, comp]): the stock sort (upvalue 1) with sort_less. */
static int l_table_sort(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (!lua_isnoneornil(L, 2))
    luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_settop(L, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, sort_less, 1);
  lua_call(L, 2, 0);
  return 0;
}

/* table.move(a1, f, e, t [, a2]): the stock one for at most as many
   elements as the mod's memory could hold (16 bytes a value, its cap): the
   stock loop moves nils as readily as values, so table.move({}, 1, 2^53, 2)
   would run for ever without allocating. */
static int l_table_move(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
  if (e >= f && (lua_Unsigned)e - (lua_Unsigned)f >= (lua_Unsigned)(m->mem_limit / 16))
    return luaL_error(L, "table.move: too many elements (at most %I in a mod: its memory "
                         "cap over 16 bytes)", (lua_Integer)(m->mem_limit / 16));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* ---- coroutines ------------------------------------------------------------------------- */

static void remember_thread(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &own_threads_key);
  lua_pushvalue(L, idx);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

/* coroutine.create(f): as stock, with the budget hook on the new thread. */
static int l_co_create(lua_State *L) {
  lua_State *co = luna__guard_push_coroutine(L);
  luna__budget_hook_thread(luna__mod_of(L), co);
  remember_thread(L, -1);
  return 1;
}

/* The mod's own coroutines pass, and its tasks' in any state, as in a
   host's state: the binding's guarded functions refuse to resume one that
   is waiting or not started and close it by cancelling the task; a
   running, resuming or settled one gets stock Lua's answers (a settled
   task's coroutine is dead: closing it returns true). Others (the mod's
   main thread, say) are refused. */
static lua_State *check_own_thread(lua_State *L, const char *fname) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co != NULL, 1, "coroutine");
  lua_rawgetp(L, LUA_REGISTRYINDEX, &own_threads_key);
  lua_pushvalue(L, 1);
  if (lua_rawget(L, -2) == LUA_TNIL && co != L && !luna__guard_is_task(co))
    luaL_error(L, "%s: only coroutines made by coroutine.create or coroutine.wrap, "
                  "or a task's", fname);
  lua_pop(L, 2);
  return co;
}

/* Calls the upvalue (the binding's resume or close) with the arguments,
   telling the budget (the watchdog's target) that the mod's code runs on
   co meanwhile. Protected, so that the running thread is given back
   whatever happens (a thread the watchdog still pointed at could be
   collected). */
static int call_on(lua_State *L, lua_State *co) {
  luna__mod *m = luna__mod_of(L);
  lua_State *before;
  int st;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  before = luna__budget_switch(m, co);
  st = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  luna__budget_switch(m, before);
  if (st != LUA_OK)
    return lua_error(L);
  return lua_gettop(L);
}

/* coroutine.resume(co, ...) / coroutine.close(co): upvalue 1 is the
   binding's guarded function, upvalue 2 its name for the errors; for the
   mod's own coroutines and its tasks' only. */
static int l_co_guarded(lua_State *L) {
  return call_on(L, check_own_thread(L, lua_tostring(L, lua_upvalueindex(2))));
}

/* coroutine.wrap, written on the sandbox's create/resume so its coroutine
   is hooked and its own. An error closes the coroutine and propagates, as
   in stock Lua 5.4. */
static const char wrap_lua[] =
    "local create, resume, status, close, error, pack, unpack = ...\n"
    "local function finish(co, r)\n"
    "  if r[1] then return unpack(r, 2, r.n) end\n"
    "  if status(co) == 'dead' then close(co) end\n"
    "  error(r[2], 0)\n"
    "end\n"
    "return function(f)\n"
    "  local co = create(f)\n"
    "  return function(...) return finish(co, pack(resume(co, ...))) end\n"
    "end\n";

/* ---- the task module, as mods see it ------------------------------------------------- */

static int l_time_scale(lua_State *L) {
  if (!lua_isnone(L, 1))
    return luaL_error(L, "task.time_scale: mods may read the time scale, not set it");
  lua_pushnumber(L, luna_loop_time_scale(luna_lua_loop(L)));
  return 1;
}

/* The task module as mods see it: a new table with exactly these fields of
   the lunaloop module (the loop, its budgets and its profiling belong to
   the host: step, run, exit, set_budget and debug are not here), then
   time_scale read-only and on_error's handler called by the set's own. A
   field the binding adds later stays out until it is listed here. */
static const char *const task_allowed[] = {
    "spawn", "defer", "spawn_at", "cancel", "current", "is_cancelled", "is_timeout",
    "frame", "time", "delta_time", "yield", "next_frame", "delay_frame", "delay",
    "wait_until", "wait_while", "await", "on", "every", "list", "stats", "when_all",
    "when_any", "timeout", "scope", "channel", "timings", "version",
    "signal", "group", "group_of", "ungrouped", NULL};

static void copy_fields(lua_State *L, int from, const char *const *names);

/* Replaces the lunaloop module on top of L by the mods' task module. */
static void build_task_module(lua_State *L) {
  int module = lua_gettop(L);
  lua_newtable(L);
  copy_fields(L, module, task_allowed);
  lua_pushcfunction(L, l_time_scale);
  lua_setfield(L, -2, "time_scale");
  lua_pushcfunction(L, luna__l_mod_on_error);
  lua_setfield(L, -2, "on_error");
  lua_replace(L, module);
}

/* ---- building the environment ------------------------------------------------------------ */

/* Sets to[name] = from[name] for each name (from and to absolute). */
static void copy_fields_from(lua_State *L, int from, int to, const char *const *names) {
  for (; *names != NULL; names++) {
    lua_getfield(L, from, *names);
    lua_setfield(L, to, *names);
  }
}

/* The same into the table on top of L. */
static void copy_fields(lua_State *L, int from, const char *const *names) {
  copy_fields_from(L, from, lua_gettop(L), names);
}

static void new_weak_set(lua_State *L, const void *key) {
  luna__guard_push_weak_set(L, key);
  lua_pop(L, 1);
}

/* The globals a mod gets in place of the stock ones (set on its sandbox). */
static const luaL_Reg replaced[] = {
    {"loadfile", l_loadfile},         {"dofile", l_dofile},
    {"require", l_require},           {"print", l_print},
    {"setmetatable", l_setmetatable}, {"getmetatable", l_getmetatable},
    {NULL, NULL}};

/* The base library's safe functions, and the replaced ones, into the
   sandbox S (G: the stock globals). */
static void add_base(lua_State *L, int G, int S) {
  static const char *const base[] = {
      "assert", "error",  "ipairs", "next",     "pairs",  "pcall",    "xpcall",
      "rawequal", "rawget", "rawset", "rawlen", "select", "tonumber", "tostring",
      "type",   "_VERSION", NULL};
  copy_fields(L, G, base);
  lua_pushvalue(L, S);
  lua_setfield(L, S, "_G");
  lua_getfield(L, G, "load");
  lua_pushcclosure(L, l_load, 1);
  lua_setfield(L, S, "load");
  luna__guard_push_xpcall(L); /* a budget stop skips the message handler */
  lua_setfield(L, S, "xpcall");
  lua_pushvalue(L, S);
  luaL_setfuncs(L, replaced, 0);
  lua_pop(L, 1);
  lua_getfield(L, G, "collectgarbage");
  lua_pushcclosure(L, l_collectgarbage, 1);
  lua_setfield(L, S, "collectgarbage");
}

/* string, table, math, utf8 and os into the sandbox S. */
static void add_libraries(lua_State *L, luna__mod *m, int G, int S) {
  static const char *const os_safe[] = {"time", "clock", "date", "difftime", NULL};
  /* string: the state's own library without dump, with the bounded
     pattern matcher and rep (it is also the string metatable's __index, so
     ("").dump is gone too and ("x"):find is bounded). */
  lua_getfield(L, G, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  luna__pattern_install(L, m);
  lua_getfield(L, -1, "rep");
  lua_pushcclosure(L, l_string_rep, 1);
  lua_setfield(L, -2, "rep");
  lua_setfield(L, S, "string");
  /* table: a copy (the binding's Lua code keeps using the stock one) with
     a bounded move and a sort that the time budget reaches. */
  lua_newtable(L);
  lua_getfield(L, G, "table");
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_settable(L, -5);
  }
  lua_getfield(L, -1, "move");
  lua_pushcclosure(L, l_table_move, 1);
  lua_setfield(L, -3, "move");
  lua_getfield(L, -1, "sort");
  lua_pushcclosure(L, l_table_sort, 1);
  lua_setfield(L, -3, "sort");
  lua_pop(L, 1);
  lua_setfield(L, S, "table");
  lua_getfield(L, G, "math");
  lua_setfield(L, S, "math");
  lua_getfield(L, G, "utf8");
  lua_setfield(L, S, "utf8");

  lua_getfield(L, G, "os"); /* os: a new table with the safe few */
  lua_newtable(L);
  copy_fields(L, lua_gettop(L) - 1, os_safe);
  lua_setfield(L, S, "os");
  lua_pop(L, 1);
}

/* coroutine into the sandbox S: the safe functions, and create, resume,
   close and wrap that keep to the mod's own coroutines. */
static void add_coroutine(lua_State *L, int G, int S) {
  static const char *const co_safe[] = {"yield", "status", "running", "isyieldable", NULL};
  int co, out;
  lua_newtable(L);
  lua_getfield(L, G, "coroutine");
  co = lua_gettop(L);
  out = co - 1;
  copy_fields_from(L, co, out, co_safe);
  lua_pushcfunction(L, l_co_create);
  lua_setfield(L, out, "create");
  lua_getfield(L, co, "resume");
  lua_pushliteral(L, "coroutine.resume");
  lua_pushcclosure(L, l_co_guarded, 2);
  lua_setfield(L, out, "resume");
  lua_getfield(L, co, "close");
  lua_pushliteral(L, "coroutine.close");
  lua_pushcclosure(L, l_co_guarded, 2);
  lua_setfield(L, out, "close");
  if (luaL_loadbufferx(L, wrap_lua, sizeof wrap_lua - 1, "=coroutine.wrap", "t") != LUA_OK)
    lua_error(L);
  lua_getfield(L, out, "create");
  lua_getfield(L, out, "resume");
  lua_getfield(L, out, "status");
  lua_getfield(L, out, "close");
  lua_getfield(L, G, "error");
  lua_getfield(L, G, "table");
  lua_getfield(L, -1, "pack");
  lua_getfield(L, -2, "unpack");
  lua_remove(L, -3);
  lua_call(L, 7, 1);
  lua_setfield(L, out, "wrap");
  lua_pop(L, 1);
  lua_setfield(L, S, "coroutine");
}

/* task and mods into the sandbox S, and require's cache of the sandbox's
   modules. */
static void add_modules(lua_State *L, int S) {
  static const char *const preload[] = {"string", "table", "math", "utf8", "os",
                                        "coroutine", "mods", NULL};
  int loaded;
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "lunaloop");
  lua_remove(L, -2);
  build_task_module(L);
  lua_setfield(L, S, "task");
  luna__open_mods_module(L);
  /* Also in the registry's loaded table (out of a mod's reach), where
     luaL_argerror looks for a function's name when the call site gives
     none (pcall(mods.send, ...)): "mods.send", not "?". */
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, "mods");
  lua_pop(L, 1);
  lua_setfield(L, S, "mods");

  lua_newtable(L);
  loaded = lua_gettop(L);
  copy_fields_from(L, S, loaded, preload);
  lua_getfield(L, S, "task");
  lua_setfield(L, loaded, "lunaloop");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &loaded_key);
}

void luna__sandbox_open(lua_State *L, luna__mod *m) {
  int G, S;
  new_weak_set(L, &own_mts_key);
  new_weak_set(L, &own_threads_key);
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  G = lua_gettop(L);
  lua_newtable(L);
  S = lua_gettop(L);
  add_base(L, G, S);
  add_libraries(L, m, G, S);
  add_coroutine(L, G, S);
  add_modules(L, S);
  /* The sandbox becomes the state's global table. */
  lua_pushvalue(L, S);
  lua_rawseti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  lua_settop(L, G - 1);
}
