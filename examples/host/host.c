/*
** host.c: a small game-like host that embeds lunaloop, the example of
** docs/embedding.md. Run it with `scripts/host` (add --fast to run frames
** back to back).
**
** What a real host does, in miniature:
** - It owns the frame. Each frame it calls luna_loop_begin_frame, then runs
**   the timings around its own phases: input (EarlyUpdate), physics on
**   fixed steps (FixedUpdate, 0..n times), update (Update: where scripts do
**   most of their work), late update (PreLateUpdate: the camera follows the
**   unit) and render-as-text (PostLateUpdate).
** - It owns the threads: a pool of POSIX workers reads and checksums files
**   and finds paths on grids for the scripts. Each job carries a promise
**   that the script awaits; the worker resolves or rejects it. When the
**   script gives a promise up (cancels it, or the task awaiting it is
**   cancelled), the cancel callback takes the job off the queue, or the
**   worker, polling luna_promise_is_cancelled, stops early.
** - It owns memory and time: the loop and both Lua states allocate through
**   the host's counting allocator, and the loop reads the host's clock.
** - It owns game objects whose scripts end with them: each enemy owns a
**   task.group (luna_lua_group_new), its brain is spawned into it, a stun
**   pauses it, and destroying the enemy cancels the group from the
**   destroy path (luna_lua_group_cancel): the brain's to-be-closed
**   variables run and its g:every callback is removed, in one call.
** - It runs two Lua states on one loop: the game (game.lua) and a HUD
**   (hud.lua), each with its own tasks. It ends when the game has no task
**   left, stops the workers, runs one more frame so that completions still
**   in flight are delivered, closes both states, frees the loop, and exits
**   0 only if no script error was reported, the job counts add up (each job
**   ends done, failed, stopped, taken off the queue or dropped) and no byte
**   is left allocated.
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep, strerror_r */
#endif

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>

#include "lunaloop.h"
#include "lunaloop_lua.h"
#include "pool.h"
#include "work.h"

#ifndef HOST_SCRIPT_DIR
#define HOST_SCRIPT_DIR "examples/host"
#endif

/* ---- memory and time: the host's own ---------------------------------------- */

/* One allocator with the lua_Alloc contract for the loop (luna_config.alloc)
   and for both Lua states (lua_newstate). It must be thread safe: luna_post
   allocates on the posting thread when the inbox's node pool is empty. */
typedef struct mem_stats {
  atomic_llong bytes;
  atomic_llong blocks;
} mem_stats;

static void *host_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  mem_stats *m = (mem_stats *)ud;
  void *np;
  if (ptr == NULL)
    osize = 0; /* Lua passes a type tag in osize for new blocks */
  if (nsize == 0) {
    if (ptr != NULL) {
      atomic_fetch_sub(&m->bytes, (long long)osize);
      atomic_fetch_sub(&m->blocks, 1);
      free(ptr);
    }
    return NULL;
  }
  np = realloc(ptr, nsize);
  if (np == NULL)
    return NULL;
  if (ptr == NULL)
    atomic_fetch_add(&m->blocks, 1);
  atomic_fetch_add(&m->bytes, (long long)nsize - (long long)osize);
  return np;
}

static luna_ns monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (luna_ns)ts.tv_sec * LUNA_NS_PER_SECOND + ts.tv_nsec;
}

/* The realtime clock the loop reads (luna_config.realtime). With --fast it
   is virtual: the sum of the frames' dt, so runs are repeatable. */
typedef struct host_clock {
  bool fast;
  luna_ns start, virtual_now;
} host_clock;

static luna_ns read_clock(void *ud) {
  host_clock *c = (host_clock *)ud;
  return c->fast ? c->virtual_now : monotonic_ns() - c->start;
}

/* ---- the world: a level, a unit, input, a camera ---------------------------- */

#define LEVEL_W 48
#define LEVEL_H 11
#define VIEW_W 32

static const char *const level_rows[LEVEL_H] = {
    "################################################",
    "#S.........#...........#..........#............#",
    "#..........#...........#..........#............#",
    "#..........#.....#.....#.....#....#.....#......#",
    "#................#...........#..........#......#",
    "#######.##########.#########.#####.#####.#######",
    "#................#.....#.....#.........#.......#",
    "#.....#..........#.....#.....#....#....#.......#",
    "#.....#................#..........#............#",
    "#.....#.........#......#...#......#...........G#",
    "################################################"};

typedef struct world {
  unsigned char wall[LEVEL_W * LEVEL_H];
  work_point start, goal;
  /* the unit: physics moves it along its route at fixed steps */
  double x, y, speed;     /* cells, cells per second */
  work_point *route;      /* owned; NULL when not walking */
  size_t route_n, next;   /* next waypoint to reach */
  double camera;          /* left column of the view, follows the unit */
  bool keys_space;        /* input of this frame */
  char status[128];       /* the HUD's line (hud.lua) */
  bool render_requested;
  char render_label[64];
} world;

static world W;

static void world_init(void) {
  int x, y;
  for (y = 0; y < LEVEL_H; y++) {
    for (x = 0; x < LEVEL_W; x++) {
      char c = x < (int)strlen(level_rows[y]) ? level_rows[y][x] : '#';
      W.wall[y * LEVEL_W + x] = c == '#';
      if (c == 'S')
        W.start = (work_point){x, y};
      if (c == 'G')
        W.goal = (work_point){x, y};
    }
  }
  W.x = W.start.x;
  W.y = W.start.y;
  W.speed = 10.0;
}

/* ---- jobs: the pool, promises and Lua meet here ------------------------------ */

typedef enum job_kind { JOB_CHECKSUM, JOB_PATH, JOB_PATH_HUGE } job_kind;
static const char *const job_names[] = {"checksum", "find_path", "find_path_huge"};

typedef struct job {
  pool_job base;         /* first: the pool sees a pool_job */
  int id;
  job_kind kind;
  luna_promise *promise; /* the host's reference, released when the job ends */
  char path[512];        /* JOB_CHECKSUM */
  work_point from, to;   /* JOB_PATH */
} job;

/* Every submitted job ends in exactly one of the other counts, so they add
   up to `submitted` (the host checks it at the end): done (resolved),
   failed (rejected by its worker, or its result could not be delivered),
   stopped (by its worker, the script having cancelled it), unqueued (taken
   off the queue when cancelled) or dropped (still queued at shutdown). */
typedef struct job_stats {
  atomic_int submitted, done, failed, stopped, unqueued, dropped;
} job_stats;

static pool *workers;
static job_stats jstats;
static int next_job_id;

/* Ends a job on any thread: the host's reference goes, the job is freed.
   (Freeing is safe even though the job is the cancel callback's argument:
   the callback never runs after a completion, and a completion waits for a
   running callback; a job that was never completed ends only inside the
   callback or in pool_stop, after the scripts are gone.) */
static void job_end(job *j) {
  luna_promise_release(j->promise);
  free(j);
}

static bool job_stop(void *ud) {
  return luna_promise_is_cancelled(((job *)ud)->promise);
}

/* Results cross threads as C data; these turn them into Lua values on the
   loop thread, at the promise's timing. */
typedef struct checksum_result {
  uint32_t crc;
  long long bytes;
} checksum_result;

static int push_checksum(lua_State *L, void *data) {
  checksum_result *r = (checksum_result *)data;
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, (lua_Integer)r->crc);
  lua_setfield(L, -2, "crc");
  lua_pushinteger(L, (lua_Integer)r->bytes);
  lua_setfield(L, -2, "bytes");
  return 1;
}

typedef struct path_result {
  work_point *points;
  size_t n;
} path_result;

static int push_path(lua_State *L, void *data) {
  path_result *r = (path_result *)data;
  size_t i;
  lua_createtable(L, (int)r->n, 0);
  for (i = 0; i < r->n; i++) {
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, r->points[i].x);
    lua_setfield(L, -2, "x");
    lua_pushinteger(L, r->points[i].y);
    lua_setfield(L, -2, "y");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static void free_path(void *data) {
  path_result *r = (path_result *)data;
  free(r->points);
  free(r);
}

/* Worker thread. */
static void run_job(pool_job *base) {
  job *j = (job *)base;
  char msg[sizeof j->path + 200];
  int rc = 0;
  if (j->kind == JOB_CHECKSUM) {
    checksum_result *r = (checksum_result *)malloc(sizeof *r);
    int err = r == NULL ? ENOMEM : work_checksum(j->path, &r->crc, &r->bytes, job_stop, j);
    if (err == 0) {
      rc = luna_promise_resolve(j->promise, push_checksum, r, free);
      if (rc != 0)
        free(r);
    } else {
      char reason[128];
      free(r);
      if (err < 0)
        snprintf(reason, sizeof reason, "stopped");
      else if (strerror_r(err, reason, sizeof reason) != 0)
        snprintf(reason, sizeof reason, "error %d", err);
      snprintf(msg, sizeof msg, "cannot checksum '%s': %s", j->path, reason);
      luna_promise_reject(j->promise, msg);
      rc = -1; /* failed, not done */
    }
  } else {
    work_grid g = {LEVEL_W, LEVEL_H, W.wall}; /* the level is read-only now */
    unsigned char *huge = NULL;
    path_result *r = (path_result *)calloc(1, sizeof *r);
    int found = -2;
    if (j->kind == JOB_PATH_HUGE) {
      /* A 1500 x 1500 random maze, corner to corner: slow on purpose. */
      huge = work_random_walls(1500, 1500, 12345u, 28);
      g = (work_grid){1500, 1500, huge};
      j->from = (work_point){0, 0};
      j->to = (work_point){1499, 1499};
    }
    if (r != NULL && g.wall != NULL)
      found = work_find_path(&g, j->from, j->to, &r->points, &r->n, job_stop, j);
    free(huge);
    if (found == 1) {
      rc = luna_promise_resolve(j->promise, push_path, r, free_path);
      if (rc != 0)
        free_path(r);
    } else {
      free(r);
      if (found == -1) {
        /* The script gave the promise up: nobody wants a result. Ending
           the job without completing it is fine. */
        atomic_fetch_add(&jstats.stopped, 1);
        printf("[worker] job %d (%s): stopped early, the script cancelled it\n", j->id,
               job_names[j->kind]);
        job_end(j);
        return;
      }
      snprintf(msg, sizeof msg, found == 0 ? "no path from (%d,%d) to (%d,%d)"
                                           : "out of memory finding a path from (%d,%d) to (%d,%d)",
               j->from.x, j->from.y, j->to.x, j->to.y);
      luna_promise_reject(j->promise, msg);
      rc = -1; /* failed, not done */
    }
  }
  /* Only a delivered result is "done": a rejected job, or a result that
     could not be delivered, is "failed". */
  atomic_fetch_add(rc == 0 ? &jstats.done : &jstats.failed, 1);
  job_end(j);
}

/* Loop thread: the script gave the promise up before it was completed. A
   job still queued is taken off the queue (it will never run); a running
   one stops at its next poll of luna_promise_is_cancelled. */
static void job_cancelled(luna_promise *p, void *ud) {
  job *j = (job *)ud;
  (void)p;
  if (pool_remove(workers, &j->base)) {
    printf("[host] job %d (%s) cancelled before a worker took it\n", j->id, job_names[j->kind]);
    atomic_fetch_add(&jstats.unqueued, 1);
    job_end(j);
  } else {
    printf("[host] job %d (%s) cancelled while running: its worker will stop\n", j->id,
           job_names[j->kind]);
  }
}

/* pool_stop: a job that will never run. By then the scripts are gone, so
   nobody awaits it; it is rejected anyway, for completeness. */
static void job_dropped(pool_job *base) {
  job *j = (job *)base;
  luna_promise_reject(j->promise, "the host is shutting down");
  atomic_fetch_add(&jstats.dropped, 1);
  job_end(j);
}

/* Loop thread (inside a script's call): creates the job's promise, pushes
   it on L (what the script gets), and queues the job. */
static int submit(lua_State *L, job *j) {
  int rc = luna_lua_promise_new(L, LUNA_UPDATE, &j->promise);
  if (rc != 0) {
    free(j);
    return luaL_error(L, "cannot create a promise: %s", luna_strerror(rc));
  }
  luna_promise_on_cancel(j->promise, job_cancelled, j);
  j->id = ++next_job_id;
  j->base.run = run_job;
  j->base.drop = job_dropped;
  atomic_fetch_add(&jstats.submitted, 1);
  pool_submit(workers, &j->base);
  return 1;
}

static job *new_job(lua_State *L, job_kind kind) {
  job *j = (job *)calloc(1, sizeof *j);
  if (j == NULL)
    luaL_error(L, "out of memory");
  j->kind = kind;
  return j;
}

/* ---- the `host` module the scripts see ------------------------------------- */

/* host.checksum(path) -> Promise of {bytes = n, crc = n}; rejected with a
   message when the file cannot be read. */
static int l_checksum(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  job *j;
  luaL_argcheck(L, strlen(path) < sizeof j->path, 1, "path too long");
  j = new_job(L, JOB_CHECKSUM);
  strcpy(j->path, path);
  return submit(L, j);
}

static work_point check_point(lua_State *L, int idx) {
  work_point p;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_getfield(L, idx, "x");
  lua_getfield(L, idx, "y");
  p.x = (int)luaL_checkinteger(L, -2);
  p.y = (int)luaL_checkinteger(L, -1);
  lua_pop(L, 2);
  return p;
}

/* host.find_path(from, to) -> Promise of a route {{x=, y=}, ...} on the
   level, both ends included; rejected when there is no path. */
static int l_find_path(lua_State *L) {
  job *j;
  work_point from = check_point(L, 1), to = check_point(L, 2);
  j = new_job(L, JOB_PATH);
  j->from = from;
  j->to = to;
  return submit(L, j);
}

/* host.find_path_huge() -> Promise of a route across a 1500 x 1500 maze
   (slow: meant to be cancelled). */
static int l_find_path_huge(lua_State *L) {
  return submit(L, new_job(L, JOB_PATH_HUGE));
}

/* host.key(name) -> boolean: pressed this frame (only "space" exists). */
static int l_key(lua_State *L) {
  lua_pushboolean(L, strcmp(luaL_checkstring(L, 1), "space") == 0 && W.keys_space);
  return 1;
}

/* host.walk(route): the unit follows the route (physics moves it). */
static int l_walk(lua_State *L) {
  size_t i, n;
  work_point *route;
  luaL_checktype(L, 1, LUA_TTABLE);
  n = (size_t)lua_rawlen(L, 1);
  luaL_argcheck(L, n > 0, 1, "empty route");
  route = (work_point *)malloc(n * sizeof *route);
  if (route == NULL)
    return luaL_error(L, "out of memory");
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, 1, (lua_Integer)i + 1);
    route[i] = check_point(L, lua_gettop(L));
    lua_pop(L, 1);
  }
  free(W.route);
  W.route = route;
  W.route_n = n;
  W.next = 0;
  return 0;
}

/* host.arrived() -> boolean; host.unit() -> x, y. */
static int l_arrived(lua_State *L) {
  lua_pushboolean(L, W.route == NULL);
  return 1;
}

static int l_unit(lua_State *L) {
  lua_pushnumber(L, W.x);
  lua_pushnumber(L, W.y);
  return 2;
}

/* host.status(text): the HUD line printed under each rendered view. */
static int l_status(lua_State *L) {
  snprintf(W.status, sizeof W.status, "%s", luaL_checkstring(L, 1));
  return 0;
}

/* host.snapshot(label): render the view at this frame's render phase. */
static int l_snapshot(lua_State *L) {
  snprintf(W.render_label, sizeof W.render_label, "%s", luaL_optstring(L, 1, ""));
  W.render_requested = true;
  return 0;
}

/* host.busy() -> jobs queued or running. */
static int l_busy(lua_State *L) {
  lua_pushinteger(L, pool_busy(workers));
  return 1;
}

/* ---- game objects that own a group ------------------------------------------- */

/* An enemy of the host's world. Its brain (enemy_brain in game.lua) runs
   in the enemy's own group: everything the brain starts joins the group,
   so destroying the enemy is one call that ends all of it. */
typedef struct enemy {
  const char *name;
  luna_lua_group *group; /* NULL: not spawned yet, or destroyed */
  int ticks;             /* host.enemy_tick calls (the brain's g:every) */
  uint64_t last_tick;    /* the frame of the last one */
  uint64_t destroyed_at;
  size_t cancelled;      /* tasks its destruction cancelled */
} enemy;

static enemy enemies[] = {{"bat", NULL, 0, 0, 0, 0}, {"slime", NULL, 0, 0, 0, 0}};
#define NENEMIES (sizeof enemies / sizeof enemies[0])

/* Creation: a group named after the enemy, and the brain spawned into it
   with (name, group). */
static bool enemy_spawn(lua_State *L, enemy *e) {
  e->group = luna_lua_group_new(L, e->name, NULL);
  if (e->group == NULL)
    return false;
  lua_getglobal(L, "enemy_brain");
  lua_pushstring(L, e->name);
  luna_lua_group_push(L, e->group);
  if (luna_lua_group_spawn(L, e->group, 2, e->name) != 0)
    return false;
  lua_pop(L, 1); /* the brain's Task: the group holds it */
  return true;
}

/* The destroy path: cancel the group (the brain unwinds now, its cleanup
   runs, its callbacks go), then let go of the host's reference. */
static void enemy_destroy(lua_State *L, enemy *e, uint64_t frame) {
  if (e->group == NULL)
    return;
  if (luna_lua_group_cancel(L, e->group, &e->cancelled) != 0)
    fprintf(stderr, "host: cancelling %s's group failed\n", e->name);
  luna_lua_group_release(L, e->group);
  e->group = NULL;
  e->destroyed_at = frame;
  printf("[host] frame %llu: %s destroyed, %zu task(s) of its group cancelled\n",
         (unsigned long long)frame, e->name, e->cancelled);
}

/* host.enemy_tick(name): the brain's periodic callback reports in. */
static int l_enemy_tick(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  size_t i;
  for (i = 0; i < NENEMIES; i++)
    if (strcmp(enemies[i].name, name) == 0) {
      enemies[i].ticks++;
      enemies[i].last_tick = luna_loop_frame_count(luna_lua_loop(L));
    }
  return 0;
}

/* The host's own events, between frames: enemies appear, the bat is
   stunned for a second (its group paused: its brain and callback stop,
   the rest of the game goes on), then both are destroyed. */
static void enemy_events(lua_State *L, uint64_t frame) {
  size_t i;
  if (frame == 30)
    for (i = 0; i < NENEMIES; i++)
      if (!enemy_spawn(L, &enemies[i]))
        fprintf(stderr, "host: cannot spawn %s\n", enemies[i].name);
  if (frame == 60 && enemies[0].group != NULL)
    luna_lua_group_set_paused(L, enemies[0].group, true);
  if (frame == 120 && enemies[0].group != NULL)
    luna_lua_group_set_paused(L, enemies[0].group, false);
  if (frame == 150)
    enemy_destroy(L, &enemies[0], frame);
  if (frame == 180)
    enemy_destroy(L, &enemies[1], frame);
}

static const luaL_Reg host_funcs[] = {
    {"checksum", l_checksum}, {"find_path", l_find_path}, {"find_path_huge", l_find_path_huge},
    {"key", l_key},           {"walk", l_walk},           {"arrived", l_arrived},
    {"unit", l_unit},         {"status", l_status},       {"snapshot", l_snapshot},
    {"busy", l_busy},         {"enemy_tick", l_enemy_tick}, {NULL, NULL}};

static void push_point(lua_State *L, work_point p) {
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, p.x);
  lua_setfield(L, -2, "x");
  lua_pushinteger(L, p.y);
  lua_setfield(L, -2, "y");
}

/* A Lua state on the loop with the globals `task` and `host`, its script
   started as the task "main" (so it may await at top level). */
static lua_State *open_script(luna_loop *loop, mem_stats *mem, const char *dir,
                              const char *file, int nworkers) {
  char path[1024];
  lua_State *L = lua_newstate(host_alloc, mem);
  int rc;
  if (L == NULL)
    return NULL;
  luaL_openlibs(L);
  rc = luna_lua_attach(L, loop);
  if (rc != 0) {
    fprintf(stderr, "host: luna_lua_attach: %s\n", luna_strerror(rc));
    lua_close(L);
    return NULL;
  }
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(L, "task");
  luaL_newlib(L, host_funcs);
  lua_pushfstring(L, "%s/", dir);
  lua_setfield(L, -2, "dir");
  lua_pushinteger(L, nworkers);
  lua_setfield(L, -2, "workers");
  push_point(L, W.start);
  lua_setfield(L, -2, "start");
  push_point(L, W.goal);
  lua_setfield(L, -2, "goal");
  lua_setglobal(L, "host");
  snprintf(path, sizeof path, "%s/%s", dir, file);
  if (luaL_loadfile(L, path) != LUA_OK) {
    fprintf(stderr, "host: %s\n", lua_tostring(L, -1));
    lua_close(L);
    return NULL;
  }
  rc = luna_lua_spawn(L, 0, "main");
  if (rc != 0) {
    fprintf(stderr, "host: luna_lua_spawn: %s\n", luna_strerror(rc));
    lua_close(L);
    return NULL;
  }
  lua_settop(L, 0);
  return L;
}

/* ---- the frame: the host's phases around lunaloop's timings ---------------- */

/* The input phase: a scripted "player" presses space at frame 90 and then
   every 60 frames. */
static void read_input(uint64_t frame) {
  W.keys_space = frame >= 90 && (frame - 90) % 60 == 0;
}

/* One fixed step of physics: the unit moves along its route. */
static void physics_step(double dt) {
  double budget = W.speed * dt;
  while (W.route != NULL && budget > 0) {
    work_point to = W.route[W.next];
    double dx = to.x - W.x, dy = to.y - W.y, d = fabs(dx) + fabs(dy);
    if (d <= budget) {
      W.x = to.x;
      W.y = to.y;
      budget -= d;
      if (++W.next == W.route_n) {
        free(W.route);
        W.route = NULL;
      }
    } else {
      W.x += dx / d * budget;
      W.y += dy / d * budget;
      budget = 0;
    }
  }
}

/* Late update: the camera follows the unit, smoothly. */
static void camera_follow(void) {
  double want = W.x - VIEW_W / 2.0;
  if (want < 0)
    want = 0;
  if (want > LEVEL_W - VIEW_W)
    want = LEVEL_W - VIEW_W;
  W.camera += (want - W.camera) * 0.2;
}

/* Render as text: the view, the route ahead and the HUD line. */
static void render(uint64_t frame) {
  int x, y, left = (int)lround(W.camera);
  int ux = (int)lround(W.x), uy = (int)lround(W.y);
  char line[VIEW_W + 1];
  printf("[render] frame %llu %s\n", (unsigned long long)frame, W.render_label);
  for (y = 0; y < LEVEL_H; y++) {
    for (x = 0; x < VIEW_W; x++) {
      int wx = left + x;
      char c = W.wall[y * LEVEL_W + wx] ? '#' : ' ';
      if (wx == W.goal.x && y == W.goal.y)
        c = 'G';
      line[x] = c;
    }
    if (W.route != NULL) {
      size_t i;
      for (i = W.next; i < W.route_n; i++)
        if (W.route[i].y == y && W.route[i].x >= left && W.route[i].x < left + VIEW_W)
          line[W.route[i].x - left] = '.';
    }
    if (uy == y && ux >= left && ux < left + VIEW_W)
      line[ux - left] = '@';
    line[VIEW_W] = '\0';
    printf("  %s\n", line);
  }
  printf("  %s\n", W.status);
  W.render_requested = false;
  W.render_label[0] = '\0';
}

typedef struct host {
  luna_loop *loop;
  bool stopped;
} host;

static void run_timing(host *h, luna_timing t) {
  int rc = luna_loop_run(h->loop, t);
  if (rc == LUNA_ESTOPPED)
    h->stopped = true; /* task.exit: the host ends after this frame */
  else if (rc != 0)
    fprintf(stderr, "host: luna_loop_run(%s): %s\n", luna_timing_name(t), luna_strerror(rc));
}

static void frame(host *h, luna_ns dt) {
  uint64_t n;
  luna_loop_begin_frame_ns(h->loop, dt);
  n = luna_loop_frame_count(h->loop);
  run_timing(h, LUNA_INITIALIZATION);
  run_timing(h, LUNA_LAST_INITIALIZATION);
  /* input */
  run_timing(h, LUNA_EARLY_UPDATE);
  read_input(n);
  run_timing(h, LUNA_LAST_EARLY_UPDATE);
  /* physics: once per fixed step due (each FixedUpdate run consumes one) */
  while (luna_loop_fixed_steps(h->loop) > 0) {
    run_timing(h, LUNA_FIXED_UPDATE);
    physics_step(luna_ns_to_seconds(luna_loop_fixed_dt(h->loop)));
    run_timing(h, LUNA_LAST_FIXED_UPDATE);
  }
  /* update: the scripts' default timing */
  run_timing(h, LUNA_PRE_UPDATE);
  run_timing(h, LUNA_LAST_PRE_UPDATE);
  run_timing(h, LUNA_UPDATE);
  run_timing(h, LUNA_LAST_UPDATE);
  /* late update */
  run_timing(h, LUNA_PRE_LATE_UPDATE);
  camera_follow();
  run_timing(h, LUNA_LAST_PRE_LATE_UPDATE);
  /* render (the HUD script updates its line at PostLateUpdate, before) */
  run_timing(h, LUNA_POST_LATE_UPDATE);
  if (W.render_requested || (W.route != NULL && n % 60 == 0))
    render(n);
  run_timing(h, LUNA_LAST_POST_LATE_UPDATE);
  run_timing(h, LUNA_TIME_UPDATE);
  run_timing(h, LUNA_LAST_TIME_UPDATE);
}

/* ---- main ---------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr, "usage: lunaloop_host [--fast] [--workers N] [--max-frames N] [--dir DIR]\n"
                  "  --fast          frames back to back with dt = 1/60 s (virtual time)\n"
                  "  --workers N     worker threads (default 3)\n"
                  "  --max-frames N  give up after N frames (default 100000)\n"
                  "  --dir DIR       where game.lua and hud.lua are (default " HOST_SCRIPT_DIR ")\n");
}

int main(int argc, char **argv) {
  static const luna_ns frame_ns = (LUNA_NS_PER_SECOND + 30) / 60;
  mem_stats mem;
  host_clock clk = {false, 0, 0};
  luna_config config;
  host h = {NULL, false};
  lua_State *game, *hud;
  const char *dir = HOST_SCRIPT_DIR;
  long max_frames = 100000, nworkers = 3;
  uint64_t errors;
  bool counts_ok;
  luna_ns last;
  int i, rc;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--fast") == 0)
      clk.fast = true;
    else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc)
      nworkers = strtol(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--max-frames") == 0 && i + 1 < argc)
      max_frames = strtol(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
      dir = argv[++i];
    else {
      usage();
      return 2;
    }
  }
  if (nworkers < 1 || nworkers > 64 || max_frames < 1) {
    usage();
    return 2;
  }

  atomic_init(&mem.bytes, 0);
  atomic_init(&mem.blocks, 0);
  clk.start = monotonic_ns();
  world_init();

  /* The loop, with the host's allocator and clock (zero fields: defaults). */
  memset(&config, 0, sizeof config);
  config.alloc = host_alloc;
  config.alloc_ud = &mem;
  config.realtime = read_clock;
  config.realtime_ud = &clk;
  rc = luna_loop_new(&config, &h.loop);
  if (rc != 0) {
    fprintf(stderr, "host: luna_loop_new: %s\n", luna_strerror(rc));
    return 1;
  }
  workers = pool_start((int)nworkers);
  if (workers == NULL) {
    fprintf(stderr, "host: cannot start the worker threads\n");
    return 1;
  }

  printf("[host] lunaloop %s, %ld workers, %s time\n", LUNA_VERSION_STRING, nworkers,
         clk.fast ? "virtual" : "real");
  /* Two states on one loop: the HUD first, so its every() is registered
     when the game's first task runs. */
  hud = open_script(h.loop, &mem, dir, "hud.lua", (int)nworkers);
  game = hud != NULL ? open_script(h.loop, &mem, dir, "game.lua", (int)nworkers) : NULL;
  if (game == NULL)
    return 1;

  last = monotonic_ns();
  while (luna_lua_task_count(game) > 0 && !h.stopped) {
    luna_ns dt = frame_ns;
    if ((long)luna_loop_frame_count(h.loop) >= max_frames) {
      fprintf(stderr, "host: the game did not finish in %ld frames\n", max_frames);
      break;
    }
    if (!clk.fast) { /* pace at 60 Hz, dt measured */
      luna_ns next = last + frame_ns, now = monotonic_ns();
      if (next > now) {
        struct timespec ts = {(time_t)((next - now) / LUNA_NS_PER_SECOND),
                              (long)((next - now) % LUNA_NS_PER_SECOND)};
        nanosleep(&ts, NULL);
      }
      now = monotonic_ns();
      dt = now - last;
      last = now;
    } else {
      clk.virtual_now += dt;
    }
    frame(&h, dt);
    enemy_events(game, luna_loop_frame_count(h.loop));
  }

  /* Shutdown, in the order docs/embedding.md gives: stop the producers, let
     the loop deliver what they completed, close the states, free the loop. */
  pool_stop(workers);
  frame(&h, frame_ns);
  errors = luna_lua_error_count(game) + luna_lua_error_count(hud);
  {
    int done = atomic_load(&jstats.done), failed = atomic_load(&jstats.failed);
    int stopped = atomic_load(&jstats.stopped), unqueued = atomic_load(&jstats.unqueued);
    int dropped = atomic_load(&jstats.dropped), submitted = atomic_load(&jstats.submitted);
    printf("[host] %llu frames; jobs: %d submitted, %d done, %d failed, %d stopped early by "
           "their worker, %d taken off the queue, %d dropped at shutdown\n",
           (unsigned long long)luna_loop_frame_count(h.loop), submitted, done, failed, stopped,
           unqueued, dropped);
    /* The workers have all stopped: every job has ended, in one count. */
    counts_ok = done + failed + stopped + unqueued + dropped == submitted;
    if (!counts_ok)
      printf("[host] error: the job counts do not add up to %d\n", submitted);
  }
  if (luna_lua_task_count(game) > 0)
    errors++;
  /* Each enemy's group ended its brain and the task it spawned, and its
     callback: no tick after its destruction; the bat, stunned for 60
     frames, ticked less. */
  {
    size_t k;
    for (k = 0; k < NENEMIES; k++) {
      enemy *e = &enemies[k];
      printf("[host] %s: %d ticks, the last at frame %llu\n", e->name, e->ticks,
             (unsigned long long)e->last_tick);
      if (e->group != NULL)
        enemy_destroy(game, e, luna_loop_frame_count(h.loop));
      else if (e->cancelled != 2 || e->ticks == 0 || e->last_tick > e->destroyed_at)
        counts_ok = false;
    }
    if (enemies[0].ticks >= enemies[1].ticks)
      counts_ok = false;
  }
  lua_close(game); /* cancels what is left of its tasks first */
  lua_close(hud);  /* removes its periodic callback */
  luna_loop_free(h.loop);
  free(W.route);
  printf("[host] %llu script error(s); %lld bytes in %lld blocks still allocated\n",
         (unsigned long long)errors, atomic_load(&mem.bytes), atomic_load(&mem.blocks));
  return errors == 0 && counts_ok && atomic_load(&mem.bytes) == 0 ? 0 : 1;
}
