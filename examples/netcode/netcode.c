/*
** examples/netcode: client-server prediction in one process
** (docs/netcode.md). Two lunaloop loops, each with a simulation
** (luna_sim_new) attached to a Lua state of its own (luna_lua_attach_sim):
** the server and the client run the same game (netcode.lua) in their own
** roles. Between them a simulated network with latency, jitter and loss
** in both directions, deterministic under --seed: the client predicts its
** ship from its inputs, the server simulates authoritatively and sends
** snapshots (sim.export), the client imports them, rolls back and
** re-simulates when its prediction was wrong, smooths the correction and
** renders with the sim's alpha (a partial tick).
**
** Why a C host: one sim per loop and one loop per `lunaloop run`, so two
** simulations in one process are two loops, driven here frame by frame on
** one virtual clock (each loop's realtime source is the virtual one), so a
** run is repeatable: the same --seed gives the same log.
**
** usage: lunaloop_netcode [--seed N] [--frames N] [--latency MS] [--jitter MS] [--loss P]
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "lunaloop.h"
#include "lunaloop_lua.h"

#ifndef NETCODE_SCRIPT_DIR
#define NETCODE_SCRIPT_DIR "."
#endif

#define FRAME_NS INT64_C(16666667) /* 60 Hz frames */
#define TICK_NS INT64_C(20000000)  /* 50 Hz ticks */
#define MAX_PACKETS 4096

/* ---- the network: two one-way links ------------------------------------------ */

typedef struct packet {
  int64_t due_ns; /* when it arrives */
  uint64_t seq;   /* send order, for ties */
  char *bytes;
  size_t len;
} packet;

typedef struct link {
  packet q[MAX_PACKETS];
  int n;
  uint64_t sent, lost, delivered;
} link;

static struct {
  uint64_t rng;       /* splitmix64: the weather */
  long long seed, frames;
  int64_t now_ns;     /* the shared virtual clock */
  int64_t latency_ns, jitter_ns;
  double loss;
  uint64_t seq;
  link to_server, to_client;
} net;

static uint64_t rnd(void) {
  uint64_t x = (net.rng += 0x9e3779b97f4a7c15u);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
  return x ^ (x >> 31);
}

static double rnd01(void) {
  return (double)(rnd() >> 11) * (1.0 / 9007199254740992.0);
}

static void link_send(link *l, const char *bytes, size_t len) {
  packet *p;
  l->sent++;
  if (rnd01() < net.loss || l->n == MAX_PACKETS) {
    l->lost++;
    return;
  }
  p = &l->q[l->n++];
  p->due_ns = net.now_ns + net.latency_ns + (int64_t)(rnd01() * (double)net.jitter_ns);
  p->seq = net.seq++;
  p->bytes = (char *)malloc(len);
  if (p->bytes == NULL) {
    l->n--;
    l->lost++;
    return;
  }
  memcpy(p->bytes, bytes, len);
  p->len = len;
}

/* Pushes a list of the packets due now, in arrival order (jitter may
   reorder them against their send order, as a real network does). */
static void link_poll(lua_State *L, link *l) {
  int i, k = 0;
  lua_newtable(L);
  for (;;) {
    int best = -1;
    for (i = 0; i < l->n; i++)
      if (l->q[i].due_ns <= net.now_ns &&
          (best < 0 || l->q[i].due_ns < l->q[best].due_ns ||
           (l->q[i].due_ns == l->q[best].due_ns && l->q[i].seq < l->q[best].seq)))
        best = i;
    if (best < 0)
      break;
    lua_pushlstring(L, l->q[best].bytes, l->q[best].len);
    lua_rawseti(L, -2, ++k);
    free(l->q[best].bytes);
    l->q[best] = l->q[--l->n];
    l->delivered++;
  }
}

/* net.send(bytes) and net.poll() -> {bytes...}: the upvalue is 0 for the
   server's state, 1 for the client's. */
static int l_send(lua_State *L) {
  size_t len;
  const char *b = luaL_checklstring(L, 1, &len);
  link_send(lua_tointeger(L, lua_upvalueindex(1)) ? &net.to_server : &net.to_client, b, len);
  return 0;
}

static int l_poll(lua_State *L) {
  link_poll(L, lua_tointeger(L, lua_upvalueindex(1)) ? &net.to_client : &net.to_server);
  return 1;
}

/* ---- a peer: a loop, its sim and a state -------------------------------------- */

typedef struct peer {
  const char *role;
  luna_loop *loop;
  luna_sim *sim;
  lua_State *L;
} peer;

static void die(const char *what, int rc) {
  fprintf(stderr, "netcode: %s: %s\n", what, luna_strerror(rc));
  exit(1);
}

static void open_peer(peer *p, const char *role, int is_client) {
  luna_sim_config cfg;
  int rc;
  char path[1024];
  memset(&cfg, 0, sizeof cfg);
  cfg.tick_ns = TICK_NS;
  cfg.history = 128;
  cfg.policy = LUNA_SIM_DROP;
  p->role = role;
  if ((rc = luna_loop_new(NULL, &p->loop)) != 0)
    die("loop", rc);
  luna_loop_use_virtual_realtime(p->loop);
  if ((rc = luna_sim_new(p->loop, &cfg, &p->sim)) != 0)
    die("sim", rc);
  p->L = luaL_newstate();
  luaL_openlibs(p->L);
  if ((rc = luna_lua_attach(p->L, p->loop)) != 0)
    die("attach", rc);
  luaL_requiref(p->L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(p->L, "task");
  if ((rc = luna_lua_attach_sim(p->L, p->sim)) != 0)
    die("attach the sim", rc);
  lua_newtable(p->L);
  lua_pushinteger(p->L, is_client);
  lua_pushcclosure(p->L, l_send, 1);
  lua_setfield(p->L, -2, "send");
  lua_pushinteger(p->L, is_client);
  lua_pushcclosure(p->L, l_poll, 1);
  lua_setfield(p->L, -2, "poll");
  lua_setglobal(p->L, "net");
  lua_pushstring(p->L, role);
  lua_setglobal(p->L, "ROLE");
  lua_pushinteger(p->L, (lua_Integer)net.seed);
  lua_setglobal(p->L, "SEED");
  lua_pushinteger(p->L, (lua_Integer)net.frames);
  lua_setglobal(p->L, "FRAMES");
  snprintf(path, sizeof path, "%s/netcode.lua", NETCODE_SCRIPT_DIR);
  if (luaL_loadfile(p->L, path) != LUA_OK || luna_lua_spawn(p->L, 0, role) != 0) {
    fprintf(stderr, "netcode: %s: %s\n", role, lua_tostring(p->L, -1));
    exit(1);
  }
  lua_pop(p->L, 1);
}

static long long arg_number(int argc, char **argv, const char *name, long long dflt) {
  int i;
  for (i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0)
      return strtoll(argv[i + 1], NULL, 10);
  return dflt;
}

int main(int argc, char **argv) {
  peer server, client;
  long long frames = arg_number(argc, argv, "--frames", 600), f;
  int status = 0;
  net.seed = arg_number(argc, argv, "--seed", 1);
  net.frames = frames;
  net.rng = (uint64_t)net.seed;
  net.latency_ns = arg_number(argc, argv, "--latency", 60) * 1000000;
  net.jitter_ns = arg_number(argc, argv, "--jitter", 30) * 1000000;
  net.loss = (double)arg_number(argc, argv, "--loss", 10) / 100.0;
  printf("netcode: seed %lld, %lld frames at 60 Hz, ticks at 50 Hz, latency %lld ms + "
         "jitter up to %lld ms, loss %.0f%% each way\n",
         arg_number(argc, argv, "--seed", 1), frames, (long long)(net.latency_ns / 1000000),
         (long long)(net.jitter_ns / 1000000), net.loss * 100);
  open_peer(&server, "server", 0);
  open_peer(&client, "client", 1);
  for (f = 0; f < frames; f++) {
    int rc;
    net.now_ns += FRAME_NS;
    if ((rc = luna_loop_frame_ns(server.loop, FRAME_NS)) != 0 ||
        (rc = luna_loop_frame_ns(client.loop, FRAME_NS)) != 0)
      die("frame", rc);
  }
  printf("network: to server %llu sent, %llu lost; to client %llu sent, %llu lost\n",
         (unsigned long long)net.to_server.sent, (unsigned long long)net.to_server.lost,
         (unsigned long long)net.to_client.sent, (unsigned long long)net.to_client.lost);
  if (luna_lua_error_count(server.L) + luna_lua_error_count(client.L) > 0)
    status = 1;
  lua_close(client.L);
  lua_close(server.L);
  luna_loop_free(client.loop);
  luna_loop_free(server.loop);
  while (net.to_server.n > 0)
    free(net.to_server.q[--net.to_server.n].bytes);
  while (net.to_client.n > 0)
    free(net.to_client.q[--net.to_client.n].bytes);
  return status;
}
