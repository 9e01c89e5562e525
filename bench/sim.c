/*
** sim.c: the rollback workload of the simulation group (docs/netcode.md):
** per frame, save the tick, roll back 8 ticks and simulate them again, over
** N entities in one registered table, the way a predicting client does when
** the server's state arrives every frame. Three implementations in one
** process, interleaved round by round, on process CPU time:
**   lunaloop   a sim (luna_sim_new, manual policy) attached to the state
**              (luna_lua_attach_sim); per frame luna_sim_step (the tick,
**              with its automatic save), then luna_sim_resimulate from 8
**              ticks back (a load and 8 ticks, each saved);
**   purelua    the same ticks with the snapshots by hand in plain Lua: a
**              deep copy of the world into a ring of 9 tables after each
**              tick, a restore by copying one back field by field, the 8
**              ticks again with their copies;
**   ticks      the 9 ticks of simulation alone (no snapshot): the part of
**              both that is not copying.
** Each prints workload=S1_rollback impl=<impl> n=<N> us_per_frame=<x> and
** a check value (the sum of the entities' x, equal for all three).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "bench.h"
#include "lunaloop.h"
#include "lunaloop_lua.h"

#define BACK 8

/* The entities and their tick, shared by the three. */
static const char world_src[] =
    "local n = ...\n"
    "local world = {ships = {}, tick = 0}\n"
    "for i = 1, n do world.ships[i] = {id = i, x = i * 1.0, y = 0.0, vx = 1.0, vy = 0.5, hp = 100,\n"
    "  name = 'ship' .. i} end\n"
    "local function tick(t)\n"
    "  local ships = world.ships\n"
    "  for i = 1, #ships do\n"
    "    local s = ships[i]\n"
    "    s.x = s.x + s.vx * 0.02; s.y = s.y + s.vy * 0.02\n"
    "    if s.x > 1000 then s.vx = -s.vx end\n"
    "  end\n"
    "  world.tick = t\n"
    "end\n"
    "local function check()\n"
    "  local sum = 0\n"
    "  for _, s in ipairs(world.ships) do sum = sum + s.x end\n"
    "  return sum\n"
    "end\n"
    "return world, tick, check\n";

/* purelua: the snapshot ring by hand. */
static const char purelua_src[] =
    "local world, tick = ...\n"
    "local ring, RING = {}, 9\n"
    "local function copy(src)\n"
    "  local out = {}\n"
    "  for k, v in pairs(src) do\n"
    "    if type(v) == 'table' then out[k] = copy(v) else out[k] = v end\n"
    "  end\n"
    "  return out\n"
    "end\n"
    "local function restore(dst, src)\n"
    "  for k, v in pairs(src) do\n"
    "    if type(v) == 'table' and type(dst[k]) == 'table' then restore(dst[k], v) else dst[k] = v end\n"
    "  end\n"
    "end\n"
    "ring[0] = copy(world)\n"
    "for k = 1, 8 do tick(k); ring[k % RING] = copy(world) end -- the history a rollback needs\n"
    "return function(frames)\n"
    "  local t = world.tick\n"
    "  for _ = 1, frames do\n"
    "    t = t + 1; tick(t); ring[t % RING] = copy(world)\n"
    "    restore(world, ring[(t - 8) % RING])\n"
    "    for k = t - 7, t do tick(k); ring[k % RING] = copy(world) end\n"
    "  end\n"
    "end\n";

/* ticks: the simulation alone. */
static const char ticks_src[] =
    "local world, tick = ...\n"
    "for k = 1, 8 do tick(k) end\n"
    "return function(frames)\n"
    "  local t = world.tick\n"
    "  for _ = 1, frames do\n"
    "    t = t + 1; tick(t)\n"
    "    for k = t - 7, t do tick(k) end\n"
    "  end\n"
    "end\n";

/* lunaloop: the registered world and its tick callback. */
static const char lunaloop_src[] =
    "local world, tick = ...\n"
    "local sim = task.sim\n"
    "sim.state('world', world)\n"
    "sim.on_tick(function(t) tick(t.tick) end)\n";

static lua_State *new_state(luna_loop *loop, long n) {
  lua_State *L = bench_new_state();
  if (luna_lua_attach(L, loop) != 0)
    bench_die("sim: cannot attach the loop");
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(L, "task");
  if (luaL_loadstring(L, world_src) != LUA_OK)
    bench_die("sim: %s", lua_tostring(L, -1));
  lua_pushinteger(L, n);
  lua_call(L, 1, 3); /* world, tick, check */
  return L;
}

static double check_value(lua_State *L) {
  double v;
  lua_pushvalue(L, 3);
  lua_call(L, 0, 1);
  v = lua_tonumber(L, -1);
  lua_pop(L, 1);
  return v;
}

/* One implementation over `frames` frames: CPU ns per frame and the check. */
static double run_impl(const char *impl, long n, long frames, double *check) {
  luna_loop *loop;
  luna_sim *sim = NULL;
  lua_State *L;
  int64_t t0, spent;
  long f;
  if (luna_loop_new(NULL, &loop) != 0)
    bench_die("sim: cannot make a loop");
  L = new_state(loop, n);
  if (strcmp(impl, "lunaloop") == 0) {
    luna_sim_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.tick_ns = 20000000;
    cfg.policy = LUNA_SIM_MANUAL;
    cfg.history = 16;
    if (luna_sim_new(loop, &cfg, &sim) != 0 || luna_lua_attach_sim(L, sim) != 0)
      bench_die("sim: cannot make the simulation");
    if (luaL_loadstring(L, lunaloop_src) != LUA_OK)
      bench_die("sim: %s", lua_tostring(L, -1));
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_call(L, 2, 0);
    for (f = 0; f < BACK; f++) /* the history a rollback needs */
      luna_sim_step(sim, 0);
    t0 = bench_cpu_ns();
    for (f = 0; f < frames; f++) {
      if (luna_sim_step(sim, LUNA_SIM_FINAL) != 0 ||
          luna_sim_resimulate(sim, luna_sim_tick(sim) - BACK, NULL) != 0)
        bench_die("sim: a step or a rollback failed");
    }
    spent = bench_cpu_ns() - t0;
  } else {
    const char *src = strcmp(impl, "purelua") == 0 ? purelua_src : ticks_src;
    if (luaL_loadstring(L, src) != LUA_OK)
      bench_die("sim: %s", lua_tostring(L, -1));
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_call(L, 2, 1); /* the warm-up ticks; returns run(frames) */
    lua_pushinteger(L, frames);
    t0 = bench_cpu_ns();
    lua_call(L, 1, 0);
    spent = bench_cpu_ns() - t0;
  }
  *check = check_value(L);
  lua_close(L);
  luna_loop_free(loop);
  return (double)spent / (double)frames;
}

void bench_sim(long n, long frames, int rounds) {
  static const char *const impls[] = {"lunaloop", "purelua", "ticks"};
  double best[3] = {0, 0, 0}, check[3] = {0, 0, 0};
  int r, i;
  for (r = 0; r < rounds; r++)
    for (i = 0; i < 3; i++) {
      int k = (i + r) % 3; /* the order rotates from round to round */
      double ns = run_impl(impls[k], n, frames, &check[k]);
      if (r == 0 || ns < best[k])
        best[k] = ns;
    }
  for (i = 0; i < 3; i++)
    printf("workload=S1_rollback impl=%s n=%ld us_per_frame=%.1f check=%.6g\n", impls[i], n,
           best[i] / 1e3, check[i]);
  printf("workload=S1_rollback ratio lunaloop/purelua=%.2f copies_only lunaloop/purelua=%.2f\n",
         best[0] / best[1], (best[0] - best[2]) / (best[1] - best[2]));
  fflush(stdout);
}
