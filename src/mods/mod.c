/*
** mod.c: one mod's Lua state: its allocator with a memory cap, opening it
** (libraries, binding, sandbox, mod.lua as the task "main", on_load) and
** closing it (on_unload, then lua_close, which cancels its tasks).
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lualib.h>

#include "copy.h"
#include "mods.h"

/* ---- reports ------------------------------------------------------------------ */

/* Every report passes here, so every mod-controlled string in one (error
   messages, tracebacks, topics, folder names) is escaped here, once: a
   mod cannot forge a report line or send a terminal escape (src/lua/escape.c). The
   custom report function gets the escaped text too. */
void luna__mods_report(luna_mods *set, const char *mod, const char *fmt, ...) {
  char raw[4096], buf[4096], name[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  luna__escape(buf, sizeof buf, raw, strlen(raw), LUNA__ESC_KEEP_TRACEBACK, NULL);
  if (mod != NULL)
    luna__escape(name, sizeof name, mod, strlen(mod), 0, NULL);
  if (set->cfg.report != NULL) {
    set->cfg.report(set->cfg.report_ud, mod != NULL ? name : NULL, buf);
  } else {
    fflush(stdout);
    if (mod != NULL)
      fprintf(stderr, "lunaloop: mod '%s': %s\n", name, buf);
    else
      fprintf(stderr, "lunaloop: mods: %s\n", buf);
    fflush(stderr);
  }
}

/* ---- the allocator -------------------------------------------------------------- */

luna__mod *luna__mod_of(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  return (luna__mod *)ud;
}

/* The lua_Alloc of a mod. While its code runs (inside a budget context:
   every resume, callback, handler and __close handler, also those run by
   the cancellations at unload) it refuses to grow past mem_limit; between
   runs, when only the binding's own bookkeeping runs (a failed task's
   traceback and report), it allows 1/8 more. That margin is comfort, not
   safety: all that bookkeeping runs in protected calls, so a refusal there
   too ends in a report (the guard's report of last resort at worst), never
   in a panic; no code of the mod ever runs in it. A refusal is not yet an
   overrun: Lua answers most of them with an emergency collection and a
   retry. The overrun is counted when a task or callback fails with "not
   enough memory" (report_error, report_without_memory). */
void *luna__mod_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  luna__mod *m = (luna__mod *)ud;
  lua_Alloc host = m->set->cfg.alloc;
  size_t tag = osize;
  void *p;
  if (ptr == NULL)
    osize = 0; /* osize then tells the kind of object, not a size */
  if (nsize == 0) {
    if (host != NULL)
      host(m->set->cfg.alloc_ud, ptr, tag, 0);
    else
      free(ptr);
    m->mem_used -= osize;
    return NULL;
  }
  if (nsize > osize) {
    size_t cap = m->mem_strict ? m->mem_limit : m->mem_limit + m->mem_limit / 8;
    if (m->mem_used + m->host_bytes + (nsize - osize) > cap)
      return NULL;
  }
  p = host != NULL ? host(m->set->cfg.alloc_ud, ptr, tag, nsize) : realloc(ptr, nsize);
  if (p == NULL)
    return NULL;
  m->mem_used = m->mem_used - osize + nsize;
  if (m->mem_used > m->mem_peak)
    m->mem_peak = m->mem_used;
  return p;
}

bool luna__mod_charge(luna__mod *m, size_t n) {
  if (n > m->mem_limit || m->mem_used + m->host_bytes > m->mem_limit - n)
    return false;
  m->host_bytes += n;
  return true;
}

void luna__mod_uncharge(luna__mod *m, size_t n) {
  m->host_bytes -= n;
}

/* A copy made for m pays its growth from m's cap (copy.h). */
static bool pay(void *ud, size_t n) {
  return luna__mod_charge((luna__mod *)ud, n);
}

static void repay(void *ud, size_t n) {
  luna__mod_uncharge((luna__mod *)ud, n);
}

char *luna__mod_copy_out(lua_State *L, int idx, size_t *len, const char *what) {
  luna__mod *m = luna__mod_of(L);
  luna__copy_payer payer = {pay, repay, NULL, LUNA__CAP_REACHED};
  char *data = NULL;
  payer.ud = m;
  if (luna__copy_encode(L, idx, m->set->cfg.message_limit, what, &payer, &data, len) != LUA_OK)
    lua_error(L);
  return data;
}

void luna__mod_overrun(luna__mod *m, luna__overrun kind) {
  if (kind == LUNA__OVERRUN_MEMORY)
    m->memory_overruns++;
  else if (kind == LUNA__OVERRUN_TIME)
    m->time_overruns++;
  else
    m->budget_overruns++;
  if (m->budget_overruns + m->memory_overruns + m->time_overruns >= m->set->cfg.max_overruns)
    m->disable_pending = true;
}

/* An error escaped every protected call (a bug, or bookkeeping that ran out
   of memory): say which mod before Lua aborts. */
static int panic(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  const char *msg = lua_tostring(L, -1);
  fprintf(stderr, "lunaloop: mod '%s': unprotected error in its Lua state: %s\n",
          m->man.name, msg != NULL ? msg : "?");
  fflush(stderr);
  return 0;
}

/* ---- protected calls ---------------------------------------------------------------- */

static int msgh(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL)
    msg = luaL_tolstring(L, 1, NULL);
  luaL_traceback(L, L, msg, 1);
  return 1;
}

typedef struct pcall_ctx {
  lua_CFunction f;
  void *ud;
} pcall_ctx;

static int trampoline(lua_State *L) {
  pcall_ctx *c = (pcall_ctx *)lua_touserdata(L, 1);
  lua_settop(L, 0);
  lua_pushlightuserdata(L, c->ud);
  return c->f(L);
}

bool luna__mod_pcall(luna__mod *m, lua_CFunction f, void *ud, bool budget) {
  lua_State *L = m->L;
  int base = lua_gettop(L), st;
  pcall_ctx c = {f, ud};
  m->running++;
  m->set->busy++;
  lua_pushcfunction(L, msgh);
  lua_pushcfunction(L, trampoline);
  lua_pushlightuserdata(L, &c);
  if (budget)
    luna__budget_begin(m, L);
  st = lua_pcall(L, 1, 0, base + 1);
  if (budget)
    luna__budget_end(m);
  if (st != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    snprintf(m->last_error, sizeof m->last_error, "%s",
             msg != NULL ? msg : (st == LUA_ERRMEM ? "not enough memory" : "error"));
    luna__escape_in_place(m->last_error, sizeof m->last_error, LUNA__ESC_KEEP_TRACEBACK);
  }
  lua_settop(L, base);
  m->set->busy--;
  m->running--;
  return st == LUA_OK;
}

/* ---- the error handler -------------------------------------------------------------- */

static const char mod_handler_key = 'h';

/* The binding's error handler in every mod state: fn(err, traceback, task,
   what). It counts a failure from "not enough memory" as a memory overrun,
   then calls the handler the mod installed with task.on_error, or reports
   through the set, naming the mod: "<mod>: <what> failed: <message>". */
static int report_error(lua_State *L) {
  luna__mod *m = luna__mod_of(L);
  const char *msg;
  const char *tb = lua_tostring(L, 2);
  const char *what;
  lua_settop(L, 4);
  what = lua_isstring(L, 4) ? lua_tostring(L, 4) : lua_isnil(L, 3) ? "callback" : "task";
  if (lua_type(L, 1) == LUA_TSTRING && strcmp(lua_tostring(L, 1), "not enough memory") == 0)
    luna__mod_overrun(m, LUNA__OVERRUN_MEMORY);
  /* A mod whose time for the frame is spent has its errors reported by
     the set: its handler would be stopped at its first instruction. */
  if (!luna__mod_held(m) &&
      lua_rawgetp(L, LUA_REGISTRYINDEX, &mod_handler_key) == LUA_TFUNCTION) {
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_pushvalue(L, 4);
    if (lua_pcall(L, 4, 0, 0) == LUA_OK)
      return 0;
    luna__mods_report(m->set, m->man.name, "its task.on_error handler failed: %s",
                      luna_lua_tostring(L, -1));
    lua_settop(L, 4);
  }
  msg = luna_lua_tostring(L, 1);
  if (tb != NULL)
    luna__mods_report(m->set, m->man.name, "%s failed: %s\n%s", what, msg, tb);
  else
    luna__mods_report(m->set, m->man.name, "%s failed: %s", what, msg);
  return 0;
}

/* The binding's report of last resort (guard.h): a report that could not
   reach report_error for lack of memory. */
static void report_without_memory(void *ud, const char *what, const char *message) {
  luna__mod *m = (luna__mod *)ud;
  if (message != NULL && strcmp(message, "not enough memory") == 0)
    luna__mod_overrun(m, LUNA__OVERRUN_MEMORY);
  luna__mods_report(m->set, m->man.name, "%s failed: %s", what,
                    message != NULL ? message : "not enough memory to show its error");
}

int luna__l_mod_on_error(lua_State *L) {
  return luna__guard_swap_handler(L, &mod_handler_key);
}

/* ---- opening ------------------------------------------------------------------------ */

/* Standard libraries a mod's state opens; the sandbox picks from them. io,
   package and debug are never opened. */
static const luaL_Reg libs[] = {
    {LUA_GNAME, luaopen_base},       {LUA_COLIBNAME, luaopen_coroutine},
    {LUA_TABLIBNAME, luaopen_table}, {LUA_OSLIBNAME, luaopen_os},
    {LUA_STRLIBNAME, luaopen_string}, {LUA_MATHLIBNAME, luaopen_math},
    {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL}};

/* Protected: libraries, binding, sandbox, seed; pushes mod.lua's chunk. */
static int setup(lua_State *L) {
  luna__mod *m = (luna__mod *)lua_touserdata(L, 1);
  const luaL_Reg *lib;
  int rc;
  for (lib = libs; lib->func != NULL; lib++) {
    luaL_requiref(L, lib->name, lib->func, 1);
    lua_pop(L, 1);
  }
  rc = luna_lua_attach(L, m->set->loop);
  if (rc != 0)
    return luaL_error(L, "cannot attach the loop: %s", luna_strerror(rc));
  luna__budget_install(m);
  luna__guard_set_report(L, report_without_memory, m);
  /* The default error handler names the mod. */
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "lunaloop");
  lua_getfield(L, -1, "on_error");
  lua_pushcfunction(L, report_error);
  lua_call(L, 1, 0);
  lua_pop(L, 2);
  if (m->set->cfg.has_seed) {
    lua_getglobal(L, "math");
    lua_getfield(L, -1, "randomseed");
    lua_pushinteger(L, (lua_Integer)m->set->cfg.seed);
    lua_call(L, 1, 0);
    lua_pop(L, 1);
  }
  luna__sandbox_open(L, m);
  return 0;
}

/* Protected, at binding depth 0: loads mod.lua and starts it as "main". */
static int start_main(lua_State *L) {
  luna__mod *m = (luna__mod *)lua_touserdata(L, 1);
  int rc;
  luna__sandbox_loadfile(L, m, "mod.lua", "mod.lua");
  rc = luna_lua_spawn(L, 0, "main");
  if (rc != 0)
    return luaL_error(L, "cannot start mod.lua: %s", luna_strerror(rc));
  return 0;
}

/* Protected, budgeted: on_load(copy of the carried state). */
static int call_on_load(lua_State *L) {
  luna__mod *m = (luna__mod *)lua_touserdata(L, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &luna__on_load_key);
  if (!lua_isfunction(L, -1))
    return 0;
  luna__copy_decode(L, m->carry, m->carry_len);
  lua_call(L, 1, 0);
  return 0;
}

/* Protected, budgeted: keeps a copy of on_unload's result as the carried
   state when m->carry_wanted. */
typedef struct unload_ctx {
  luna__mod *m;
  bool keep;
} unload_ctx;

static int call_on_unload(lua_State *L) {
  unload_ctx *u = (unload_ctx *)lua_touserdata(L, 1);
  luna__mod *m = u->m;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &luna__on_unload_key);
  if (!lua_isfunction(L, -1))
    return 0;
  lua_call(L, 0, 1);
  if (u->keep && !lua_isnil(L, -1)) {
    size_t len;
    char *data = luna__mod_copy_out(L, -1, &len, "on_unload result");
    free(m->carry);
    m->carry = data;
    m->carry_len = len;
  }
  return 0;
}

static int cancel_all(lua_State *L) {
  luna_lua_cancel_all(L);
  return 0;
}

/* Closes m's state. From the start the binding refuses new work (tasks,
   callbacks, subscriptions, sends): nothing the dying mod does reaches the
   loop or the bus. Its tasks are cancelled first, in a protected call
   while the state is whole, so that what goes wrong in their to-be-closed
   variables (an error, "not enough memory", the budget) is reported and
   counted in m->errors_before like any other error; each cancellation is a
   resume with its budget and the strict memory cap, and they share the
   unload's time budget (luna__mod_close starts it): once it is spent,
   the tasks not cancelled yet are abandoned (the binding settles them
   without running their to-be-closed variables) and one report says how
   many. Then the guard takes whatever is left off the loop without
   running Lua code (cancellations that could not run for lack of
   memory), so lua_close runs no mod code: its finalizers run with hooks
   off, where no budget could stop them. */
static void close_state(luna__mod *m) {
  int base;
  if (m->L == NULL)
    return;
  base = lua_gettop(m->L);
  m->running++;
  m->set->busy++;
  luna__guard_begin_close(m->L);
  m->unloading = true;
  if (luna__guard_held(m->binding))
    luna__guard_abandon(m->binding);
  lua_pushcfunction(m->L, cancel_all);
  if (lua_pcall(m->L, 0, 0, 0) != LUA_OK) {
    /* Outside any budget: no __tostring of the mod's may run here. */
    luna__mods_report(m->set, m->man.name, "cancelling its tasks failed: %s",
                      lua_type(m->L, -1) == LUA_TSTRING ? lua_tostring(m->L, -1)
                                                       : "(not a string)");
    m->errors_before++;
  }
  if (m->binding != NULL && luna__guard_abandoned(m->binding) > 0) {
    luna__mods_report(m->set, m->man.name,
                      "unloading used up its time budget (%g ms): the to-be-closed "
                      "variables of %llu tasks did not run",
                      (double)m->time_limit / 1e6,
                      (unsigned long long)luna__guard_abandoned(m->binding));
    m->errors_before++;
  }
  m->unloading = false;
  lua_settop(m->L, base);
  m->set->busy--;
  luna__guard_detach(m->L);
  m->errors_before += luna_lua_error_count(m->L);
  luna__topics_forget(m->set, m); /* its subscriptions go with the state */
  lua_close(m->L);
  m->running--;
  m->L = NULL;
  m->binding = NULL; /* freed with the state */
  m->depth = 0;
  m->exceeded = false;
}

bool luna__mod_open(luna__mod *m) {
  luna_mods *set = m->set;
  m->mem_limit = set->cfg.memory_limit;
  m->budget = set->cfg.instruction_limit;
  m->step = m->budget < 1000 ? (int)m->budget : 1000;
  m->used = 0;
  m->depth = 0;
  m->exceeded = false;
  m->binding = NULL; /* set by luna__budget_install */
  m->mem_strict = false;
  m->budget_overruns = m->memory_overruns = m->time_overruns = 0;
  m->time_limit = set->cfg.time_limit;
  m->thread = NULL;
  luna__budget_fresh(m); /* loading gets a time budget of its own */
  m->disable_pending = false;
  m->last_error[0] = '\0';
  m->L = lua_newstate(luna__mod_alloc, m);
  if (m->L == NULL) {
    snprintf(m->last_error, sizeof m->last_error, "cannot create its Lua state: not enough memory");
    m->state = LUNA_MOD_FAILED;
    goto fail;
  }
  lua_atpanic(m->L, panic);
  m->loads++;
  if (!luna__mod_pcall(m, setup, m, false) || !luna__mod_pcall(m, start_main, m, false)) {
    m->state = LUNA_MOD_FAILED;
    close_state(m);
    goto fail;
  }
  m->state = LUNA_MOD_LOADED;
  if (m->carry != NULL) {
    if (!luna__mod_pcall(m, call_on_load, m, true)) {
      luna__mods_report(set, m->man.name, "on_load failed: %s", m->last_error);
      m->errors_before++;
    }
    free(m->carry);
    m->carry = NULL;
    m->carry_len = 0;
  }
  return true;
fail:
  free(m->carry);
  m->carry = NULL;
  m->carry_len = 0;
  return false;
}

void luna__mod_close(luna__mod *m, bool call_unload, bool keep) {
  if (m->L == NULL)
    return;
  luna__budget_fresh(m); /* unloading gets a time budget of its own */
  if (call_unload) {
    unload_ctx u = {m, keep};
    if (!luna__mod_pcall(m, call_on_unload, &u, true)) {
      luna__mods_report(m->set, m->man.name, "on_unload failed: %s", m->last_error);
      m->errors_before++;
    }
  }
  close_state(m);
}

void luna__mod_free(luna__mod *m) {
  if (m == NULL)
    return;
  luna__budget_fresh(m);
  close_state(m);
  luna__manifest_free(&m->man);
  free(m->dir);
  free(m->carry);
  free(m);
}
