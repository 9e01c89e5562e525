/*
** names.c: what a task is called, and the side tables that keep the facts
** few tasks have. A task's name, its creation traceback and its
** t:handled() mark live in weak-keyed tables of the registry, keyed by its
** thread, rather than in fields that every task would pay for; the label of a task in a
** report is its name, or where its function was defined.
**
** Also the two helpers every file of src/lua uses for tables kept in the
** registry under a C address: one found or created on first use, and a
** weak table.
**
** Includes binding.h (for luna__report); nothing of src/core.
*/
#include <stdio.h>

#include "binding.h"

/* ---- registry tables ---------------------------------------------------- */

void luna__new_weak_table(lua_State *L, const char *mode) {
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushstring(L, mode);
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
}

void luna__push_registry_table(lua_State *L, const void *key, const char *mode) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE)
    return;
  lua_pop(L, 1);
  if (mode != NULL)
    luna__new_weak_table(L, mode);
  else
    lua_newtable(L);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, key);
}

void luna__push_side_table(lua_State *L, const void *key) {
  luna__push_registry_table(L, key, "k");
}

/* ---- names -------------------------------------------------------------- */

static const char names_key = 'n';

int luna__push_name(lua_State *L, int idx) {
  int type;
  idx = lua_absindex(L, idx);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &names_key) != LUA_TTABLE)
    return LUA_TNIL; /* the nil pushed is the answer */
  lua_pushvalue(L, idx);
  type = lua_rawget(L, -2);
  lua_remove(L, -2);
  return type;
}

void luna__set_name(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  luna__push_side_table(L, &names_key);
  lua_pushvalue(L, idx);
  lua_pushvalue(L, -3);
  lua_rawset(L, -3);
  lua_pop(L, 2);
}

/* ---- labels in reports -------------------------------------------------- */

void luna__task_label(lua_State *L, int task_idx, char *buf, size_t size) {
  lua_State *co = lua_tothread(L, task_idx);
  lua_Debug ar;
  int level = 0;
  luna__push_name(L, task_idx);
  if (lua_type(L, -1) == LUA_TSTRING) {
    snprintf(buf, size, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return;
  }
  lua_pop(L, 1);
  if (luna__thread_state(co) == LUNA__FAILED && lua_type(co, 3) == LUA_TSTRING) {
    snprintf(buf, size, "%s", lua_tostring(co, 3)); /* kept by finish_error: */
    return;                                        /* the function is gone */
  }
  while (lua_getstack(co, level + 1, &ar))
    level++;
  if (lua_getstack(co, level, &ar) && lua_getinfo(co, "S", &ar) && ar.linedefined > 0)
    snprintf(buf, size, "%s:%d", ar.short_src, ar.linedefined);
  else
    snprintf(buf, size, "#%llu", (unsigned long long)luna__thread_id(co));
}

void luna__report_task(luna__binding *b, lua_State *L, int err_idx, int tb_idx, int task_idx,
                       const char *label) {
  char buf[LUNA__LABEL_SIZE], what[LUNA__LABEL_SIZE + 8]; /* "task " + label */
  if (label == NULL) {
    luna__task_label(L, task_idx, buf, sizeof buf);
    label = buf;
  }
  snprintf(what, sizeof what, "task %s", label);
  luna__report(b, L, err_idx, tb_idx, task_idx, what);
}
