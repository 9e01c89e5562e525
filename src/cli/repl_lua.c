/*
** repl_lua.c: the REPL's commands that are easiest said in Lua (:tasks
** formats a table, :cancel finds a task by id), kept as a chunk of Lua text
** compiled into the REPL's state once, and the calls into them. It owns the
** helpers' table in the registry. Includes repl.h (cli.h) and Lua.
*/
#include <lauxlib.h>
#include <lua.h>

#include "repl.h"

/* The table of Lua helpers (helpers_lua, below), in the registry. */
static int helpers_ref = LUA_NOREF;

/* Called with the module; returns the table of helpers. */
static const char helpers_lua[] =
  "local task = ...\n"
  "local H = {}\n"
  "-- The name in a 20-character column: cut between UTF-8 characters\n"
  "-- (bytes when it is not UTF-8), padded by characters.\n"
  "local function name_of(t, i)\n"
  "  local n = i.name or ('#' .. i.id)\n"
  "  local len = utf8.len(n)\n"
  "  if not len then\n"
  "    if #n > 20 then n = n:sub(1, 17) .. '...' end\n"
  "    len = #n\n"
  "  elseif len > 20 then\n"
  "    n, len = n:sub(1, utf8.offset(n, 18) - 1) .. '...', 20\n"
  "  end\n"
  "  return n .. string.rep(' ', 20 - len)\n"
  "end\n"
  "function H.tasks()\n"
  "  local list = task.list()\n"
  "  if #list == 0 then return 'no tasks' end\n"
  "  local out = {string.format('%4s  %-20s %-9s %-9s %-18s %-18s %s',\n"
  "    'id', 'name', 'status', 'wait', 'timing', 'due', 'age')}\n"
  "  for _, t in ipairs(list) do\n"
  "    local i = t:info()\n"
  "    local due = ''\n"
  "    if i.deadline and i.clock == 'frame' then\n"
  "      due = string.format('frame %d (in %d)', i.deadline, i.deadline - task.frame())\n"
  "    elseif i.deadline then\n"
  "      due = string.format('in %.3fs %s', i.deadline - task.time(i.clock), i.clock)\n"
  "    end\n"
  "    out[#out + 1] = string.format('%4d  %s %-9s %-9s %-18s %-18s %d',\n"
  "      i.id, name_of(t, i), i.status, i.wait or '-', i.timing or '-', due, i.age)\n"
  "  end\n"
  "  return table.concat(out, '\\n')\n"
  "end\n"
  "function H.find(id)\n"
  "  for _, t in ipairs(task.list()) do if t.id == id then return t end end\n"
  "end\n"
  "return H\n";

void luna__repl_open_helpers(lua_State *L) {
  if (luaL_loadbuffer(L, helpers_lua, sizeof helpers_lua - 1, "=repl") != LUA_OK)
    lua_error(L);
  lua_getglobal(L, "task");
  lua_call(L, 1, 1);
  helpers_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

void luna__repl_call_helper(const char *name, int nargs) {
  lua_State *L = R.L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, helpers_ref);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  lua_insert(L, -1 - nargs);
  int st = luna__repl_call_lua(nargs, 1);
  if (st != LUA_OK) {
    luna__repl_printf(stderr, "%s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    lua_pushnil(L);
  }
}

void luna__repl_call_method(int task_idx, const char *name, int nresults) {
  lua_State *L = R.L;
  task_idx = lua_absindex(L, task_idx);
  lua_getfield(L, task_idx, name);
  lua_pushvalue(L, task_idx);
  lua_call(L, 1, nresults);
}
