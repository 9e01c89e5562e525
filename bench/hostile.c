/*
** hostile.c: the "hostile mods" workload: how long a frame can take when
** mods attack the host's time, against the per-mod time budget
** (docs/modding.md, "Time"). Four attacking mods and an innocent one run on
** one loop for N frames:
**
**   c_calls     a loop of expensive C calls (s:upper() of a 1 MiB string,
**               about one instruction each), restarted every frame
**   pattern     a loop of pathological string.find calls in pcall
**   callbacks   200 task.on callbacks of about 2 ms each (one budget per
**               mod and frame covers them all)
**   ping_pong   two tasks passing a value over channels, 1 ms of work a hop
**   innocent    one task.on callback that counts its calls
**
** The attackers are never disabled (max_overruns is huge), so every frame
** is attacked. Output, one line:
**   workload=hostile_mods impl=lunaloop n=<frames> budget_ms=<B>
**   attackers=4 longest_frame_ms=<x> median_frame_ms=<y> bound_ms=<4*B>
**   innocent_calls=<k>
** with the time budget B per mod and frame. The bound the docs promise is,
** per attacking mod, its budget plus one C call: what longest_frame_ms
** shows beyond bound_ms is the C calls under way at the deadlines (and the
** innocent mod). Without a time budget the first frame alone would take
** minutes (c_calls makes 2.5 million calls of 0.1 ms within its
** instruction budget), so there is no such run to compare.
*/
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "lunaloop_mods.h"

static const char *const mods[][2] = {
    {"innocent", "calls = 0\ntask.on('Update', function() calls = calls + 1 end)\n"},
    {"c_calls", "local s = ('x'):rep(1 << 20)\n"
                "local function attack()\n"
                "  task.defer(attack)\n"
                "  while true do local u = s:upper() end\n"
                "end\n"
                "task.defer(attack)\n"},
    {"pattern", "local s = ('a'):rep(2000)\n"
                "local function attack()\n"
                "  task.defer(attack)\n"
                "  while true do pcall(string.find, s, '.-.-.-x') end\n"
                "end\n"
                "task.defer(attack)\n"},
    {"callbacks", "for i = 1, 200 do\n"
                  "  task.on('Update', function() for _ = 1, 250000 do end end)\n"
                  "end\n"},
    {"ping_pong", "local a, b = task.channel(1), task.channel(1)\n"
                  "task.spawn(function() while true do b:send(a:receive()); "
                  "for _ = 1, 100000 do end end end)\n"
                  "task.spawn(function() while true do a:send(1); b:receive(); "
                  "for _ = 1, 100000 do end end end)\n"},
};
#define NMODS (sizeof mods / sizeof mods[0])

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void quiet_report(void *ud, const char *mod, const char *message) {
  (void)ud;
  (void)mod;
  (void)message;
}

static int by_value(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void run(const char *dir, long frames, luna_ns budget) {
  luna_loop *loop;
  luna_mods *set;
  luna_mods_config cfg;
  int64_t *took = (int64_t *)calloc((size_t)frames, sizeof *took), longest = 0;
  long f;
  lua_State *L;
  long long calls = -1;
  if (took == NULL)
    bench_die("hostile: out of memory");
  memset(&cfg, 0, sizeof cfg);
  cfg.watch_frames = -1;
  cfg.time_limit = budget;
  cfg.max_overruns = 1000000000u;
  cfg.report = quiet_report;
  if (luna_loop_new(NULL, &loop) != 0 || luna_mods_new(loop, &cfg, &set) != 0)
    bench_die("hostile: cannot create the loop or the mods");
  luna_mods_load_dir(set, dir);
  for (f = 0; f < frames; f++) {
    int64_t t0 = bench_now_ns();
    luna_loop_frame(loop, 1.0 / 60);
    took[f] = bench_now_ns() - t0;
    if (took[f] > longest)
      longest = took[f];
  }
  if ((L = luna_mods_state(set, "innocent")) != NULL) {
    lua_getglobal(L, "calls");
    calls = (long long)lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  qsort(took, (size_t)frames, sizeof *took, by_value);
  printf("workload=hostile_mods impl=lunaloop n=%ld budget_ms=%g attackers=%zu "
         "longest_frame_ms=%.2f median_frame_ms=%.2f bound_ms=%g innocent_calls=%lld\n",
         frames, (double)budget / 1e6, NMODS - 1, (double)longest / 1e6,
         (double)took[frames / 2] / 1e6, (double)(NMODS - 1) * budget / 1e6, calls);
  fflush(stdout);
  free(took);
  luna_mods_free(set);
  luna_loop_free(loop);
}

void bench_hostile(long frames) {
  char dir[] = "/tmp/lunaloop-hostile-XXXXXX";
  size_t i;
  if (mkdtemp(dir) == NULL)
    bench_die("hostile: cannot make a temporary folder");
  for (i = 0; i < NMODS; i++) {
    char path[512];
    FILE *fp;
    snprintf(path, sizeof path, "%s/%s", dir, mods[i][0]);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/mod.lua", dir, mods[i][0]);
    if ((fp = fopen(path, "w")) == NULL)
      bench_die("hostile: cannot write %s", path);
    fputs(mods[i][1], fp);
    fclose(fp);
  }
  run(dir, frames, 5 * (luna_ns)1000000);
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
