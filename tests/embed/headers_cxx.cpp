// headers_cxx.cpp: the public headers compiled as C++ (-std=c++11, pedantic,
// warnings as errors) and linked against the C libraries: every declaration
// must have C linkage, lua.h included first or not. It also runs a promise
// round trip, so a wrong signature would show at run time too.
#include "lunaloop.h"
#include "lunaloop_lua.h"
#include "lunaloop_workers.h"

#include <cstdio>
#include <cstring>

#include <lauxlib.h> // after lunaloop_lua.h: lua.h is already in, with C linkage
#include <lualib.h>

static_assert(LUNA_TIMING_COUNT == 16, "16 timings");
static_assert(LUNA_VERSION_NUM == LUNA_VERSION_MAJOR * 10000 + LUNA_VERSION_MINOR * 100 +
                                      LUNA_VERSION_PATCH,
              "version number");

namespace {

int push_answer(lua_State *L, void *data) {
  lua_pushinteger(L, *static_cast<int *>(data));
  return 1;
}

void free_answer(void *data) { delete static_cast<int *>(data); }

int new_promise(lua_State *L) {
  luna_promise *p = nullptr;
  if (luna_lua_promise_new(L, LUNA_UPDATE, &p) != LUNA_OK)
    return luaL_error(L, "luna_lua_promise_new failed");
  luna_promise_resolve(p, push_answer, new int(42), free_answer);
  luna_promise_release(p);
  return 1;
}

} // namespace

int main() {
  luna_loop *loop = nullptr;
  luna_config config = luna_config();
  if (luna_loop_new(&config, &loop) != LUNA_OK)
    return 1;
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  if (luna_lua_attach(L, loop) != LUNA_OK)
    return 1;
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(L, "task");
  lua_pushcfunction(L, new_promise);
  lua_setglobal(L, "job");
  if (luaL_dostring(L, "task.spawn(function() answer = task.await(job()) end)") != LUA_OK) {
    std::fprintf(stderr, "%s\n", lua_tostring(L, -1));
    return 1;
  }
  luna_loop_frame(loop, 1.0 / 60);
  lua_getglobal(L, "answer");
  int answer = static_cast<int>(lua_tointeger(L, -1));
  lua_close(L);
  luna_loop_free(loop);
  std::printf("C++: %s, version %s, answer %d\n", luna_strerror(LUNA_EALREADY),
              LUNA_VERSION_STRING, answer);
  return answer == 42 && std::strcmp(luna_timing_name(LUNA_UPDATE), "Update") == 0 ? 0 : 1;
}
