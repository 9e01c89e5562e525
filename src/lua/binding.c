/*
** binding.c: the binding's accessors. One binding per Lua state, a
** userdata kept in the registry (lifecycle.c makes and forgets it); this
** file finds it, defines who runs now on this OS thread (the thread-local
** values behind luna__enter_task, binding.h) and answers the host's
** queries about an attached state. Includes binding.h and the public
** lunaloop_lua.h only.
*/
#include "binding.h"
#include "lunaloop_lua.h"

/* Registry key of the binding: the address of this static is unique in the
   process. */
static const char binding_key = 'b';

_Thread_local lua_State *volatile luna__running LUNA__TLS_MODEL = NULL;
_Thread_local luna__task *luna__running_task LUNA__TLS_MODEL = NULL;

/* ---- entry points ------------------------------------------------------------ */

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
  luna__binding *b;
  /* Called on a task's own thread (task.await, task.delay ... inside a
     task), the task's record names its state's binding: a word of the
     thread's extra space read instead of the registry's pointer-keyed
     lookup (~200 instructions; an await of a worker's Promise made two). */
  luna__task *t = L != NULL ? luna__record(L) : NULL;
  if (t != NULL && t->b->loop != NULL) {
#ifndef NDEBUG
    b = luna__get_binding(L);
    if (b != t->b)
      luaL_error(L, "lunaloop: internal error: a task's record names another state's binding");
#endif
    return t->b;
  }
  b = luna__get_binding(L);
  if (b == NULL)
    luaL_error(L, "lunaloop: no loop attached to this Lua state");
  if (b->loop == NULL)
    luaL_error(L, "lunaloop: the loop was freed");
  return b;
}

void luna__set_binding(lua_State *L) {
  lua_rawsetp(L, LUA_REGISTRYINDEX, &binding_key);
}

/* Sets the table on top of L's __metatable field to its own __name, so
   getmetatable gives that name and setmetatable refuses to change it: no
   code of the state can give a binding object a __gc or another
   behaviour. The binding's own checks read the metatable raw. */
void luna__protect_metatable(lua_State *L) {
  lua_getfield(L, -1, "__name");
  lua_setfield(L, -2, "__metatable");
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

LUNA_API uint64_t luna_lua_callback_calls(lua_State *L) {
  luna__binding *b = luna__get_binding(L);
  return b != NULL ? b->callback_calls : 0;
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
