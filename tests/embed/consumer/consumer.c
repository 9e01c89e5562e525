/*
** consumer.c: a tiny host built out of tree against an installed lunaloop
** (tests/embed/install_test.sh builds it with CMake, static and shared, and
** with pkg-config). A worker thread resolves a promise that a Lua task
** awaits; the host drives frames until no task is left.
*/
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <lunaloop.h>
#include <lunaloop_lua.h>

#include <lauxlib.h>
#include <lualib.h>

static int push_string(lua_State *L, void *data) {
  lua_pushstring(L, (const char *)data);
  return 1;
}

static void *worker(void *arg) {
  luna_promise *p = (luna_promise *)arg;
  luna_promise_resolve(p, push_string, (void *)"hello from a thread", NULL);
  luna_promise_release(p);
  return NULL;
}

/* job() -> Promise, completed by a new thread. */
static int l_job(lua_State *L) {
  luna_promise *p;
  pthread_t th;
  int rc = luna_lua_promise_new(L, LUNA_UPDATE, &p);
  if (rc != 0)
    return luaL_error(L, "job: %s", luna_strerror(rc));
  if (pthread_create(&th, NULL, worker, p) != 0)
    return luaL_error(L, "job: cannot start a thread");
  pthread_detach(th);
  return 1;
}

int main(void) {
  luna_loop *loop;
  lua_State *L;
  int frames = 0, ok;
  if (luna_version() != LUNA_VERSION_NUM) {
    fprintf(stderr, "consumer: built against lunaloop %s, runs with %s\n", LUNA_VERSION_STRING,
            luna_version_string());
    return 1;
  }
  if (luna_loop_new(NULL, &loop) != 0)
    return 1;
  L = luaL_newstate();
  luaL_openlibs(L);
  if (luna_lua_attach(L, loop) != 0)
    return 1;
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(L, "task");
  lua_pushcfunction(L, l_job);
  lua_setglobal(L, "job");
  if (luaL_dostring(L, "task.spawn(function()\n"
                       "  message = task.await(job())\n"
                       "  task.delay(0.1)\n"
                       "end)") != LUA_OK) {
    fprintf(stderr, "consumer: %s\n", lua_tostring(L, -1));
    return 1;
  }
  while (luna_lua_task_count(L) > 0 && frames < 100000) {
    luna_loop_frame(loop, 1.0 / 60);
    frames++;
  }
  lua_getglobal(L, "message");
  ok = lua_isstring(L, -1) && strcmp(lua_tostring(L, -1), "hello from a thread") == 0;
  lua_close(L);
  luna_loop_free(loop);
  printf("consumer: lunaloop %s, %s after %d frames\n", LUNA_VERSION_STRING,
         ok ? "ok" : "FAILED", frames);
  return ok ? 0 : 1;
}
