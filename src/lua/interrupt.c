/*
** interrupt.c: luna_lua_interrupt and the hooks' errors. An interrupt puts
** a hook on the Lua thread this OS thread runs (luna__running) that raises
** at every instruction until the interrupt is cleared; a hook that raises
** notes its error, so the guarded xpcall (guarded.c) can let it through
** without calling a message handler. Includes binding.h and the public
** lunaloop_lua.h only.
*/
#include <signal.h>

#include "binding.h"
#include "lunaloop_lua.h"

_Thread_local lua_State *luna__closing LUNA__TLS_MODEL = NULL;

/* Set by luna_lua_interrupt, cleared by luna_lua_interrupt_clear. While it
   is set, the hook raises at every instruction of the thread it sits on,
   so a pcall around a runaway loop cannot swallow the interrupt. Per OS
   thread, like luna__running: a driver clearing its own interrupt after
   a frame must not clear another thread's, and the hook runs on the
   thread that was interrupted. */
static _Thread_local volatile sig_atomic_t interrupt_pending LUNA__TLS_MODEL;

/* The last error one of our hooks raised (registry), for the guarded
   xpcall: Lua calls a message handler with hooks off for such an error. */
static const char hook_error_key = 0;

/* ---- helpers ---------------------------------------------------------------- */

/* True when L runs the pending __close handlers of code that ended (an
   ended task's, a closed coroutine's) and the function just called is one
   of them (nothing below it but the base). */
static bool next_close_handler(lua_State *L, lua_Debug *ar) {
  lua_Debug below;
  return L == luna__closing && ar->event == LUA_HOOKCALL && !lua_getstack(L, 1, &below);
}

static void interrupt_hook(lua_State *L, lua_Debug *ar) {
  if (!interrupt_pending || next_close_handler(L, ar)) {
    /* Done; or the interrupt stopped one __close handler of an ended task
       or coroutine (raising at every instruction, a pcall there cannot
       keep it going) and the next one begins: that one runs. */
    lua_sethook(L, NULL, 0, 0);
    return;
  }
  luna__raise_interrupt(L);
}

/* ---- entry points ------------------------------------------------------------ */

int luna__raise_from_hook(lua_State *L, luna__hook_error kind) {
  luna__binding *b = luna__get_binding(L);
  if (b != NULL) {
    b->hook_error = (uint8_t)kind;
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &hook_error_key);
  }
  return lua_error(L);
}

int luna__raise_interrupt(lua_State *L) {
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

bool luna__is_stop_error(lua_State *L, int idx) {
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
  case LUNA__HOOK_BUDGET: /* cleared when the guard's stop ends (seam.c) */
    return true;
  case LUNA__HOOK_BARE_YIELD: /* cleared when its resume returns (task.c) */
    return true;
  default:
    return false;
  }
}

bool luna__interrupt_pending(void) {
  return interrupt_pending != 0;
}

void luna__arm_interrupt(lua_State *L) {
  lua_sethook(L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
}

void luna__drop_interrupt_hook(lua_State *co) {
  if (lua_gethook(co) == interrupt_hook)
    lua_sethook(co, NULL, 0, 0);
}

bool luna__take_interrupt_hook(lua_State *co) {
  if (!interrupt_pending || lua_gethook(co) != interrupt_hook)
    return false;
  lua_sethook(co, NULL, 0, 0);
  return true;
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
