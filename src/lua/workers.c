/*
** workers.c: worker Lua states (include/lunaloop_workers.h is the host's
** contract, docs/workers.md the scripts'). A pool of threads, each with a
** Lua state of its own, takes jobs from one queue; the Lua side of it
** (task.workers, ai:call, ai:map) is lua/lunaloop/workers.lua, written on
** the primitives at the end of this file.
**
** The pieces, and who touches them:
** - struct luna_workers (the pool): its mutex `mu` guards the queue, the
**   done list, the counters the workers write and the flags below; the
**   rest is the loop thread's. A worker that has just finished a job
**   polls for the next one for a moment, then sleeps on `work_cv`
**   (wait_for_work); the loop thread waits on `done_cv` only for a
**   deterministic job that is late.
** - A job is malloc'ed on the loop thread with its arguments already
**   copied (copy.h; a large string is pinned and read in place instead,
**   both ways: PIN_MIN), queued, run by one worker, and handed back through the
**   done list. The loop thread learns of it from a "bell": one luna_post of
**   bell_cb per batch (the flag `bell` says one is in the inbox), which
**   completes the jobs' promises right there (luna__promise_complete_now),
**   so the awaiting tasks resume in that same run of Update.
**   Deterministic jobs ({deliver_frame = k}) are not on the done list: the
**   loop thread keeps them in call order and completes them from a
**   repeating item at Update of their frame, waiting for the ones that are
**   late.
** - Workers never touch a promise except to read whether it was given up
**   (task.worker.cancelled()); every completion happens on the loop thread.
**   So closing the pool decides alone what the awaiting tasks get.
** - A worker's state W is the worker thread's alone (created, used and, but
**   at close, closed there). Its extra space holds the worker; its count
**   hook, armed only for a job with an instruction budget (a count hook
**   slows all Lua code down), charges the budget; closing the pool arms it
**   through a signal to stop a running job (on_stop_signal says how).
** - A share (task.workers.share) is one encoded snapshot with two atomic
**   counts: `users` (Share values of the owner, jobs holding it in their
**   arguments) and `refs` (users plus the worker states that decoded it).
**   A worker keeps its read-only decoded copy while users > 0 and drops it
**   at the next job after that ends (the global share_epoch tells it to
**   look).
** - The pool's C struct lives while its Pool value does and while a bell is
**   in the inbox: `alive` and `bell` decide when it is freed (pool_maybe_free).
**
** Includes: the binding's headers, copy.h, the public headers.
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP (init_queue_mutex) */
#endif

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "binding.h"
#include "copy.h"
#include "lunaloop/extension.h"
#include "lunaloop_workers.h"
#include "promise.h"
#include "workers.h"

#define POOL_MT "lunaloop.Pool"
#define JOB_MT "lunaloop.WorkerJob"
#define SHARE_MT "lunaloop.Share"
#define MAX_THREADS 256
#define HOOK_STEP 1000
#define CLOSED_MSG "the worker pool is closed"

static const char default_key = 'D'; /* registry: the state's default Pool */
static const char anchor_key = 'A';  /* registry: table of open Pools (kept alive) */
static const char pin_key = 'P';     /* registry: job address -> its pinned string(s) */

/* ---- shares ----------------------------------------------------------------- */

typedef struct share {
  _Atomic(long) refs;  /* users + worker states holding a decoded copy */
  _Atomic(long) users; /* Share values, jobs in flight */
  char *data;
  size_t len;
} share;

static _Atomic(uint64_t) share_epoch; /* bumped when a share loses its last user */

static void share_release(share *s) {
  if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1) {
    free(s->data);
    free(s);
  }
}

static void share_unuse(share *s) {
  if (atomic_fetch_sub_explicit(&s->users, 1, memory_order_acq_rel) == 1)
    atomic_fetch_add_explicit(&share_epoch, 1, memory_order_release);
  share_release(s);
}

static void share_use(share *s) {
  atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->users, 1, memory_order_relaxed);
}

/* ---- jobs -------------------------------------------------------------------- */

enum { JOB_CALL, JOB_POST, JOB_MAP };
enum { OUT_NONE, OUT_OK, OUT_ERR, OUT_DROPPED };

typedef struct job job;
struct job {
  job *next;             /* the queue, then the done list */
  job *det_next;         /* the loop's list of deterministic jobs */
  luna_workers *pool;
  uint8_t kind;
  uint8_t outcome;
  bool det;              /* delivered at frame `due` (deliver_frame) */
  bool done;             /* det: the worker finished it (under mu) */
  bool orphan;           /* det: the loop let go; the worker frees it (under mu) */
  bool pinned;           /* large strings of the arguments are read in place:
                            the pin table holds them under the job's address
                            until the worker is done with it (pin_string) */
  bool res_pinned;       /* large strings of the results are read in place from
                            the worker's state, which holds them under `seq`
                            until the loop releases them (release_results) */
  uint64_t due, seq;
  uint64_t instructions; /* budget; 0: none */
  luna_promise *promise; /* the pool's reference; NULL for posts */
  char *names;           /* "module\0function\0": names_in or malloc'ed */
  char names_in[64];
  const char *fn;
  char *args;            /* encoded arguments (kept with its capacity when recycled) */
  size_t args_len, args_cap;
  share **shares;        /* the shares the arguments hold (one use each) */
  size_t nshares, shares_cap;
  char *res;             /* OUT_OK: encoded results; OUT_ERR: the message */
  size_t res_len, res_cap;
  int worker;
};

static void job_free(job *j) {
  size_t i;
  for (i = 0; i < j->nshares; i++)
    share_unuse(j->shares[i]);
  free(j->shares);
  if (j->names != j->names_in)
    free(j->names);
  free(j->args);
  free(j->res);
  free(j);
}

/* ---- the pool ----------------------------------------------------------------- */

typedef struct worker {
  luna_workers *pool;
  int index; /* 1-based */
  pthread_t thread;
  bool started;
  lua_State *W;
  size_t mem, limit;
  bool oom;             /* the allocator refused during this job */
  job *current;
  lua_Integer map_item;  /* the item a map job's function runs on (0: none) */
  uint64_t used, budget;
  int step;             /* what the armed hook will charge when it fires */
  bool exceeded;
  bool stopped;         /* the hook stopped the job: the pool is closing */
  _Atomic(int) in_lua;  /* a job's Lua code may be running (the stop signal arms the hook) */
  uint32_t spin_ns;     /* how long to poll for a job after one (wait_for_work) */
  uint64_t epoch;       /* share_epoch when the cache was last swept */
  share **cached;       /* shares decoded in W */
  size_t ncached, cached_cap;
  char *error;          /* why the state could not be made (startup) */
  char *scratch;        /* the copier's buffer for this worker's encodings */
  size_t scratch_cap;
  char names[64];       /* the last job's "module\0function\0" (names_len bytes),
                           whose two Lua strings W's registry keeps at the
                           references mod_ref and fn_ref */
  size_t names_len;
  int mod_ref, fn_ref;
  size_t pins_out;      /* jobs whose results W holds pinned for the loop
                           (worker thread; see release_results) */
  size_t pinned_bytes;  /* the bytes of their strings (worker thread) */
  /* under the pool's mu: the seqs of those jobs the loop is done with, for
     the worker to unpin at its next job (drain_releases) */
  uint64_t *rel;
  size_t nrel, rel_cap;
  bool awaiting_release; /* the worker waits for them (settle_pins): signal */
} worker;

struct luna_workers {
  pthread_mutex_t mu;
  pthread_cond_t work_cv, done_cv, ready_cv;
  /* under mu */
  job *qhead, *qtail;
  _Atomic(size_t) queued; /* changed under mu; the loop thread reads it
                             without (only it adds, so it never reads less
                             than there is) */
  size_t running;
  int sleeping;     /* workers inside pthread_cond_wait(work_cv) */
  int spinning;     /* workers polling for a job after one (wait_for_work) */
  int max_spinning; /* at most this many poll at once: the cores less the
                       loop thread's (at least 1) */
  uint64_t job_ns;  /* a moving average of the jobs' run time, and when a
                       worker last took a job (should_wake) */
  uint64_t took_ns;
  _Atomic(int) loop_cpu; /* the CPU the loop thread last called from, -1:
                            unknown (a worker does not poll on it) */
  job *dhead, *dtail;
  bool bell;        /* a bell_cb is in the inbox */
  bool room_wanted; /* tasks wait for room: ring the bell when a job is taken */
  bool stopping;
  int ready;        /* workers that finished starting */
  luna_workers_stats st;
  _Atomic(int) stop_flag; /* read by the hooks */
  /* immutable after creation */
  luna_loop *loop;
  luna__binding *b;
  int nthreads;
  size_t cap;
  size_t memory_limit;
  uint64_t instructions;
  luna_alloc_fn alloc;
  void *alloc_ud;
  luna_workers_init_fn init;
  void *init_ud;
  char *path, *cpath;
  worker *w;
  /* loop thread only */
  bool closed, alive, listening;
  int delivering;        /* bell_cb or det_step on the stack: a task they
                            resume may close the pool and let it go, which
                            must not free it under them (pool_maybe_free) */
  size_t deferred;       /* jobs queued by those tasks whose wake-up was put
                            off to the delivery's end (hand_over) */
  job *lhead, *ltail;    /* jobs those tasks made while the workers had work,
                            not yet in the queue (hand_over, publish) */
  _Atomic(size_t) nlocal; /* their count (luna_workers_get_stats reads it) */
  uint64_t overflowed;   /* of those, queued past the limit (st.overflowed) */
  job *det_head;         /* deterministic jobs outstanding, by (due, seq) */
  bool det_item_on;
  luna_item_id det_item;
  uint64_t seq;
  luna_promise **room;   /* tasks waiting for room, in order: room[room_head]
                            up to room[nroom - 1] (wake_room takes from the
                            head, so waking n of them is O(n)) */
  size_t room_head, nroom, room_cap;
  job *spare;            /* finished job records kept for reuse (with their buffers) */
  job *pending;          /* jobs prepare_job is making, linked by next: one
                            an allocation's raise left there is reclaimed at
                            the next bell (no prepare runs then) or at free */
  size_t kept_big;       /* bytes of the spares' buffers above KEEP_CAP (<= KEEP_BIG) */
  size_t nspare;
  char *scratch;         /* the copier's buffer for the loop thread's encodings */
  size_t scratch_cap;
  void *hub_cache;       /* luna__promise_new_cached's */
};

static void *default_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, nsize);
}

/* ---- the worker's state ------------------------------------------------------ */

/* The worker state's allocator: the host's, under the memory limit. Runs
   on the worker thread (and on the loop thread while a closed pool closes
   the states, after the workers were joined). */
static void *worker_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  worker *w = (worker *)ud;
  luna_workers *p = w->pool;
  void *np;
  if (ptr == NULL)
    osize = 0;
  if (nsize == 0) {
    if (ptr != NULL) {
      p->alloc(p->alloc_ud, ptr, osize, 0);
      w->mem -= osize;
    }
    return NULL;
  }
  if (w->limit != 0 && nsize > osize && w->mem + (nsize - osize) > w->limit) {
    w->oom = true;
    return NULL;
  }
  np = p->alloc(p->alloc_ud, ptr, osize, nsize);
  if (np == NULL) {
    w->oom = true;
    return NULL;
  }
  w->mem = w->mem - osize + nsize;
  return np;
}

static worker *worker_of(lua_State *W) {
  return *(worker **)lua_getextraspace(W);
}

static void worker_hook(lua_State *W, lua_Debug *ar);

/* Stopping a running job when the pool closes. A count hook makes Lua 5.4
   call into the debug machinery at every instruction (two to three times
   slower code), so a job runs without one unless it has an instruction
   budget. Closing instead sends each worker thread LUNA__WORKERS_SIGNAL;
   the handler, on that thread, arms the hook to fire at the next
   instruction (as lua.c's Ctrl-C handler does from a signal) if a job's
   Lua code may be running there. A job entering Lua checks the stop flag
   after it said so (in_lua), and closing sets the flag before it signals,
   so one of the two always arms the hook. The hook is set on the job's
   main thread: code inside a coroutine that the job resumed is stopped
   when control comes back to it. A job blocked in a C function is waited
   for. */
#define LUNA__WORKERS_SIGNAL (SIGRTMIN + 6)

/* ThreadSanitizer delivers a signal only when the thread calls a function
   it intercepts, which a job spinning in (uninstrumented) liblua never
   does: under TSan every job keeps a count hook, the stop's fallback. */
#if defined(__SANITIZE_THREAD__)
#define ALWAYS_HOOK 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ALWAYS_HOOK 1
#endif
#endif
#ifndef ALWAYS_HOOK
#define ALWAYS_HOOK 0
#endif

static _Thread_local worker *this_worker __attribute__((tls_model("initial-exec")));

static void on_stop_signal(int sig) {
  worker *w = this_worker;
  (void)sig;
  if (w != NULL && atomic_load(&w->in_lua) && w->W != NULL)
    lua_sethook(w->W, worker_hook, LUA_MASKCOUNT, 1);
}

static pthread_once_t signal_once = PTHREAD_ONCE_INIT;

static void install_stop_signal(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(LUNA__WORKERS_SIGNAL, &sa, NULL);
}

/* The count hook of a job with a budget (or of a job the closing pool
   stops): charges the budget, stops the job once it is spent (and at
   every instruction after that, so that a pcall cannot swallow it) or once
   the pool closes. */
static void worker_hook(lua_State *W, lua_Debug *ar) {
  worker *w = worker_of(W);
  (void)ar;
  if (atomic_load_explicit(&w->pool->stop_flag, memory_order_relaxed)) {
    w->stopped = true;
    lua_sethook(W, worker_hook, LUA_MASKCOUNT, 1);
    luaL_error(W, "cancelled: " CLOSED_MSG);
  }
  if (w->budget == 0)
    return;
  if (!w->exceeded) {
    uint64_t left;
    w->used += (uint64_t)w->step;
    if (w->used < w->budget) {
      left = w->budget - w->used;
      w->step = left < HOOK_STEP ? (int)left : HOOK_STEP;
      lua_sethook(W, worker_hook, LUA_MASKCOUNT, w->step);
      return;
    }
    w->exceeded = true;
  }
  lua_sethook(W, worker_hook, LUA_MASKCOUNT, 1);
  luaL_error(W, "the job ran out of its instruction budget (%I instructions)",
             (lua_Integer)w->budget);
}

/* task.worker.cancelled() -> boolean: the job's promise was given up (its
   awaiting task was cancelled, it timed out, ...) or the pool is closing. */
static int l_worker_cancelled(lua_State *W) {
  worker *w = worker_of(W);
  bool c = atomic_load_explicit(&w->pool->stop_flag, memory_order_relaxed) != 0;
  if (!c && w->current != NULL && w->current->promise != NULL)
    c = luna_promise_is_cancelled(w->current->promise);
  lua_pushboolean(W, c);
  return 1;
}

/* The read-only view of a decoded share: every table becomes an empty
   proxy whose metatable reads through to it. */
static const char freeze_src[] =
    "local setmetatable, next, type, error = setmetatable, next, type, error\n"
    "local function ro() error('a shared table is read-only', 2) end\n"
    "local function freeze(t)\n"
    "  for k, v in next, t do if type(v) == 'table' then t[k] = freeze(v) end end\n"
    "  return setmetatable({}, {__index = t, __newindex = ro, __len = function() return #t end,\n"
    "    __pairs = function() return next, t, nil end, __metatable = 'lunaloop.shared',\n"
    "    __name = 'lunaloop.shared'})\n"
    "end\n"
    "return freeze\n";

static const char freeze_key = 'F';
static const char cache_key = 'C';

/* Decodes share tokens in a worker state: one decoded, frozen copy per
   worker, kept for later jobs. */
static void worker_decode_special(lua_State *W, uint64_t token, void *ud) {
  worker *w = (worker *)ud;
  share *s = (share *)(uintptr_t)token;
  lua_rawgetp(W, LUA_REGISTRYINDEX, &cache_key);
  if (lua_rawgetp(W, -1, s) != LUA_TNIL) {
    lua_remove(W, -2);
    return;
  }
  lua_pop(W, 1);
  if (w->ncached == w->cached_cap) {
    size_t cap = w->cached_cap ? w->cached_cap * 2 : 8;
    share **a = (share **)realloc(w->cached, cap * sizeof *a);
    if (a == NULL)
      luaL_error(W, "not enough memory");
    w->cached = a;
    w->cached_cap = cap;
  }
  lua_rawgetp(W, LUA_REGISTRYINDEX, &freeze_key);
  luna__copy_decode(W, s->data, s->len);
  if (lua_type(W, -1) == LUA_TTABLE)
    lua_call(W, 1, 1);
  else
    lua_remove(W, -2);
  lua_pushvalue(W, -1);
  lua_rawsetp(W, -3, s);
  lua_remove(W, -2);
  atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
  w->cached[w->ncached++] = s;
}

/* A list of values (a job's arguments, its results) as bytes: a uint32
   count, then for each value either 'V', a uint32 length and the copier's
   encoding (copy.h), 'T', a uint32 length and a string's bytes, 'P', the
   address and uint32 length of a pinned string's bytes in the sender's
   state (PIN_MIN), or 'S' and a share's pointer. A Share crosses this
   way only as a value of the list itself (an argument), not inside a
   table: the copier refuses userdata. */
typedef struct obuf {
  char *p;
  size_t len, cap;
} obuf;

static bool obuf_put(obuf *b, const void *src, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    char *np;
    while (cap < b->len + n)
      cap *= 2;
    np = (char *)realloc(b->p, cap);
    if (np == NULL)
      return false;
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, src, n);
  b->len += n;
  return true;
}

static bool is_shared_view(lua_State *L, int idx) {
  bool shared = false;
  if (lua_type(L, idx) == LUA_TTABLE && luaL_getmetafield(L, idx, "__name") != LUA_TNIL) {
    shared = lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "lunaloop.shared") == 0;
    lua_pop(L, 1);
  }
  return shared;
}

static int add_share(job *j, share *s) {
  if (j->nshares == j->shares_cap) {
    size_t cap = j->shares_cap ? j->shares_cap * 2 : 4;
    share **a = (share **)realloc(j->shares, cap * sizeof *a);
    if (a == NULL)
      return -1;
    j->shares = a;
    j->shares_cap = cap;
  }
  share_use(s);
  j->shares[j->nshares++] = s;
  return 0;
}

/* The most a kept buffer (a spare job's, a scratch one) may hold on to. */
#define KEEP_CAP ((size_t)64 * 1024)

/* Arguments that are strings of at least PIN_MIN bytes are not copied at
   the call: the job holds a pointer to the string's bytes, which the worker
   copies into its state (lua_pushlstring) as it starts the job, and the
   string is pinned (kept reachable) in the state's pin table until the
   job comes back. Lua never moves a string, nor changes its bytes, so
   reading them from another thread is safe while it is reachable. One copy
   of the bytes a call instead of two; below PIN_MIN the pin's table
   writes cost more than the copy saves. Deterministic jobs copy: the loop
   may let go of one while a worker runs it (det_step's orphans). */
#define PIN_MIN ((size_t)16 * 1024)

/* Pins the string at idx of L for job j (pin_key's table: a string, or a
   list of them for a job with several). May raise (memory), leaving j
   pinned: every path that ends a job unpins it first (unpin_job). */
static void pin_string(lua_State *L, job *j, int idx) {
  int t;
  idx = lua_absindex(L, idx);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &pin_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &pin_key);
  }
  t = lua_gettop(L);
  j->pinned = true;
  switch (lua_rawgetp(L, t, j)) {
  case LUA_TNIL:
    lua_pushvalue(L, idx);
    lua_rawsetp(L, t, j);
    break;
  case LUA_TSTRING: /* a second one: the two in a list */
    lua_createtable(L, 4, 0);
    lua_insert(L, -2);
    lua_rawseti(L, -2, 1);
    lua_pushvalue(L, idx);
    lua_rawseti(L, -2, 2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, t, j);
    break;
  default:
    lua_pushvalue(L, idx);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    break;
  }
  /* again: a finalizer run by lua_createtable may have closed the pool,
     whose pool_close unpinned j (the entry is back now; prepare_job sees
     the close and unpins it for good) */
  j->pinned = true;
  lua_settop(L, t - 1);
}

/* Lets go of j's pinned strings (the worker is done with the job, or never
   got it). L: a thread of the job's state, which is not closing. */
static void unpin_job(lua_State *L, job *j) {
  if (!j->pinned)
    return;
  j->pinned = false;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &pin_key) == LUA_TTABLE) {
    lua_pushnil(L);
    lua_rawsetp(L, -2, j);
  }
  lua_pop(L, 1);
}

/* unpin_job on p's state, when it can still be used (closing, it frees the
   pin table with everything else once the workers are joined). */
static void unpin_in_pool(luna_workers *p, job *j) {
  if (j->pinned && p->b != NULL && !p->b->closing)
    unpin_job(luna__exec_state(p->b), j);
}

/* The same for a job's results, the other way: a result string of at
   least PIN_MIN bytes stays in the worker's state W, pinned in W's pin
   table under the job's seq, and the loop thread's decoding copies it from
   there. Once the loop is done with the results (push_results, or the job
   ends without them), it puts the seq on the worker's release list, and the
   worker unpins it as it takes its next job. W is not closed while pins are
   out: settle_pins first copies the results still in the done list into
   the job (materialize) and waits for the rest, which the loop thread is
   delivering; pool_close joins the workers and materializes the done list
   before it closes the states. Under a memory limit, pinned results may
   hold at most a sixteenth of it (may_pin_result): they count in W's
   memory until released, where a copied result was garbage at once (with a
   quarter, 600 KiB results under a 4 MiB limit made a job's allocation
   fail once where copying never did: workers_test.lua). Pins W (may
   raise: memory). Worker thread. */
static bool may_pin_result(lua_State *W, size_t len) {
  worker *w = worker_of(W);
  size_t limit = w->pool->memory_limit;
  return limit == 0 || (w->pinned_bytes <= limit / 16 && len <= limit / 16 - w->pinned_bytes);
}

static void pin_result(lua_State *W, job *j, int idx) {
  size_t len;
  idx = lua_absindex(W, idx);
  (void)lua_tolstring(W, idx, &len);
  if (lua_rawgetp(W, LUA_REGISTRYINDEX, &pin_key) != LUA_TTABLE) {
    lua_pop(W, 1);
    lua_newtable(W);
    lua_pushvalue(W, -1);
    lua_rawsetp(W, LUA_REGISTRYINDEX, &pin_key);
  }
  if (!j->res_pinned) {
    j->res_pinned = true;
    worker_of(W)->pins_out++;
  }
  if (lua_rawgeti(W, -1, (lua_Integer)j->seq) != LUA_TTABLE) {
    lua_pop(W, 1);
    lua_newtable(W);
    lua_pushvalue(W, -1);
    lua_rawseti(W, -3, (lua_Integer)j->seq);
  }
  lua_pushvalue(W, idx);
  lua_rawseti(W, -2, (lua_Integer)lua_rawlen(W, -2) + 1);
  lua_pop(W, 2);
  worker_of(W)->pinned_bytes += len;
}

/* Unpins the results of the job of seq `seq` in w's state. Worker thread. */
static void unpin_seq(worker *w, uint64_t seq) {
  lua_State *W = w->W;
  if (lua_rawgetp(W, LUA_REGISTRYINDEX, &pin_key) == LUA_TTABLE) {
    if (lua_rawgeti(W, -1, (lua_Integer)seq) == LUA_TTABLE) {
      lua_Integer i, n = (lua_Integer)lua_rawlen(W, -1);
      for (i = 1; i <= n; i++) {
        lua_rawgeti(W, -1, i);
        w->pinned_bytes -= lua_rawlen(W, -1);
        lua_pop(W, 1);
      }
    }
    lua_pop(W, 1);
    lua_pushnil(W);
    lua_rawseti(W, -2, (lua_Integer)seq);
  }
  lua_pop(W, 1);
  w->pins_out--;
}

/* Unpins what the loop released (w->rel). Worker thread, with the pool's
   mu held (unpinning allocates nothing and runs no Lua code). */
static void drain_releases(worker *w) {
  while (w->nrel > 0)
    unpin_seq(w, w->rel[--w->nrel]);
}

/* The loop is done with j's results: their pins go back to the worker.
   Loop thread. */
static void release_results(luna_workers *p, job *j) {
  worker *w;
  if (!j->res_pinned)
    return;
  j->res_pinned = false;
  w = &p->w[j->worker - 1];
  pthread_mutex_lock(&p->mu);
  if (w->nrel == w->rel_cap) {
    size_t cap = w->rel_cap ? w->rel_cap * 2 : 16;
    uint64_t *a = (uint64_t *)realloc(w->rel, cap * sizeof *a);
    if (a == NULL) { /* the pin stays until the state closes: memory, not safety */
      pthread_mutex_unlock(&p->mu);
      return;
    }
    w->rel = a;
    w->rel_cap = cap;
  }
  w->rel[w->nrel++] = j->seq;
  if (w->awaiting_release)
    pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
}

/* Copies the pinned strings of j's results into its buffer (each 'P'
   becomes a 'T' with the bytes), so that the results outlive the worker's
   state. The job's results are not being read meanwhile. False: out of
   memory (the results are then unusable). */
static bool materialize(job *j) {
  obuf b = {NULL, 0, 0};
  const char *q = j->res;
  uint32_t n, i;
  memcpy(&n, q, sizeof n);
  q += sizeof n;
  if (!obuf_put(&b, &n, sizeof n))
    return false;
  for (i = 0; i < n; i++) {
    char tag = *q++;
    if (tag == 'S') {
      if (!obuf_put(&b, "S", 1) || !obuf_put(&b, q, 8))
        goto nomem;
      q += 8;
    } else if (tag == 'P') {
      uint64_t at;
      uint32_t len;
      memcpy(&at, q, sizeof at);
      memcpy(&len, q + sizeof at, sizeof len);
      q += sizeof at + sizeof len;
      if (!obuf_put(&b, "T", 1) || !obuf_put(&b, &len, sizeof len) ||
          !obuf_put(&b, (const char *)(uintptr_t)at, len))
        goto nomem;
    } else { /* 'T' or 'V': a length and that many bytes */
      uint32_t len;
      memcpy(&len, q, sizeof len);
      if (!obuf_put(&b, &tag, 1) || !obuf_put(&b, q, sizeof len + len))
        goto nomem;
      q += sizeof len + len;
    }
  }
  free(j->res);
  j->res = b.p;
  j->res_len = b.len;
  j->res_cap = b.cap;
  return true;
nomem:
  free(b.p);
  return false;
}

/* Encodes the n values at first.. of L into *out, a malloc'ed buffer of
   *outcap bytes (or NULL, 0) that is reused and grown; *scratch and *scratch_cap
   the same for the copier's own buffer (kept by the caller's thread for
   the next call). `j` given: Shares among them cross by reference (held by
   j). The path of value i in messages starts with root_fmt (one %d: i) or,
   for i == 1 with `root1`, that. Returns LUA_OK, or the status with the
   message on top of L (*out still the caller's to free). */
static int encode_values(lua_State *L, int first, int n, const char *what, const char *root_fmt,
                         const char *root1, job *j, job *results_of, char **out, size_t *outlen,
                         size_t *outcap, char **scratch, size_t *scratch_cap) {
  obuf b = {*out, 0, *outcap};
  luna__copy_opts o;
  uint32_t count = (uint32_t)n;
  char root[48];
  int i, st = LUA_OK;
  first = lua_absindex(L, first);
  memset(&o, 0, sizeof o);
  o.limit = UINT32_MAX;
  o.buf = *scratch;
  o.cap = *scratch_cap;
  o.what = what;
  o.context = "between states";
  if (!obuf_put(&b, &count, sizeof count))
    goto nomem;
  for (i = 0; i < n; i++) {
    int idx = first + i;
    share **sp = j != NULL ? (share **)luaL_testudata(L, idx, SHARE_MT) : NULL;
    if (sp != NULL && *sp != NULL) {
      uint64_t token = (uint64_t)(uintptr_t)*sp;
      if (!obuf_put(&b, "S", 1) || !obuf_put(&b, &token, sizeof token) || add_share(j, *sp) != 0)
        goto nomem;
      continue;
    }
    if (is_shared_view(L, idx)) {
      lua_pushfstring(L, "%s: a table of task.workers.share cannot be sent back (copy what you "
                         "need; at result %d)", what, i + 1);
      st = LUA_ERRRUN;
      goto fail;
    }
    if (lua_type(L, idx) == LUA_TSTRING) {
      /* a string as itself: one copy in, and the receiver's
         lua_pushlstring straight from the bytes (no copier framing); a
         large argument not even that: the worker reads it in place */
      size_t slen;
      const char *str = lua_tolstring(L, idx, &slen);
      job *pj = j != NULL ? j : results_of;
      if (slen >= PIN_MIN && slen <= UINT32_MAX && pj != NULL && !pj->det &&
          (j != NULL || may_pin_result(L, slen))) {
        uint32_t len = (uint32_t)slen;
        uint64_t at = (uint64_t)(uintptr_t)str;
        if (j != NULL)
          pin_string(L, j, idx);
        else
          pin_result(L, results_of, idx);
        if (!obuf_put(&b, "P", 1) || !obuf_put(&b, &at, sizeof at) || !obuf_put(&b, &len, sizeof len))
          goto nomem;
        continue;
      }
      if (slen <= UINT32_MAX) {
        uint32_t len = (uint32_t)slen;
        if (!obuf_put(&b, "T", 1) || !obuf_put(&b, &len, sizeof len) || !obuf_put(&b, str, slen))
          goto nomem;
        continue;
      }
    }
    if (i == 0 && root1 != NULL)
      snprintf(root, sizeof root, "%s", root1);
    else
      snprintf(root, sizeof root, root_fmt, i + 1);
    o.root = root;
    st = luna__copy_encode_opts(L, idx, &o);
    if (st != LUA_OK)
      goto fail;
    {
      uint32_t len = (uint32_t)o.len;
      if (!obuf_put(&b, "V", 1) || !obuf_put(&b, &len, sizeof len) || !obuf_put(&b, o.buf, o.len))
        goto nomem;
    }
  }
  st = LUA_OK;
  goto done;
nomem:
  lua_pushfstring(L, "%s: not enough memory", what);
  st = LUA_ERRMEM;
fail:
done:
  if (o.cap > KEEP_CAP) {
    free(o.buf);
    o.buf = NULL;
    o.cap = 0;
  }
  *scratch = o.buf;
  *scratch_cap = o.cap;
  *out = b.p;
  *outlen = st == LUA_OK ? b.len : 0;
  *outcap = b.cap;
  return st;
}

static void worker_decode_special(lua_State *W, uint64_t token, void *ud);

/* Pushes the values of encode_values' bytes and returns how many; `w`:
   decode shares in that worker's state (NULL: they read nil). May raise. */
static int decode_values(lua_State *L, const char *p, worker *w) {
  uint32_t n, i;
  memcpy(&n, p, sizeof n);
  p += sizeof n;
  luaL_checkstack(L, (int)(n > 1000000 ? 1000000 : n) + 4, "too many values");
  for (i = 0; i < n; i++) {
    if (*p++ == 'S') {
      uint64_t token;
      memcpy(&token, p, sizeof token);
      p += sizeof token;
      if (w != NULL)
        worker_decode_special(L, token, w);
      else
        lua_pushnil(L);
    } else if (p[-1] == 'T') {
      uint32_t len;
      memcpy(&len, p, sizeof len);
      p += sizeof len;
      lua_pushlstring(L, p, len);
      p += len;
    } else if (p[-1] == 'P') { /* a pinned string of the sender's state */
      uint64_t at;
      uint32_t len;
      memcpy(&at, p, sizeof at);
      memcpy(&len, p + sizeof at, sizeof len);
      p += sizeof at + sizeof len;
      lua_pushlstring(L, (const char *)(uintptr_t)at, len);
    } else {
      uint32_t len;
      memcpy(&len, p, sizeof len);
      p += sizeof len;
      luna__copy_decode(L, p, len);
      p += len;
    }
  }
  return (int)n;
}

/* Drops the decoded copies of shares nobody uses any more. Worker thread. */
static void sweep_cache(worker *w) {
  uint64_t e = atomic_load_explicit(&share_epoch, memory_order_acquire);
  size_t i = 0;
  if (e == w->epoch)
    return;
  w->epoch = e;
  lua_rawgetp(w->W, LUA_REGISTRYINDEX, &cache_key);
  while (i < w->ncached) {
    share *s = w->cached[i];
    if (atomic_load_explicit(&s->users, memory_order_acquire) == 0) {
      lua_pushnil(w->W);
      lua_rawsetp(w->W, -2, s);
      share_release(s);
      w->cached[i] = w->cached[--w->ncached];
    } else {
      i++;
    }
  }
  lua_pop(w->W, 1);
}

static void drop_cache(worker *w) {
  size_t i;
  for (i = 0; i < w->ncached; i++)
    share_release(w->cached[i]);
  w->ncached = 0;
}

/* Registry field marking a worker state: its main thread's extra space
   holds its worker (worker_of), so no binding may be made in it
   (luna__is_worker_state, lifecycle.c). A name, not the address of a
   static: a worker's require "lunaloop" may load another copy of the
   library (lunaloop.so beside the lunaloop program), whose statics are
   its own. */
#define WORKER_STATE_FIELD "lunaloop.worker state"

bool luna__is_worker_state(lua_State *L) {
  bool is = lua_getfield(L, LUA_REGISTRYINDEX, WORKER_STATE_FIELD) != LUA_TNIL;
  lua_pop(L, 1);
  return is;
}

static int open_worker_state(lua_State *W) {
  worker *w = (worker *)lua_touserdata(W, 1);
  luna_workers *p = w->pool;
  lua_pushboolean(W, 1);
  lua_setfield(W, LUA_REGISTRYINDEX, WORKER_STATE_FIELD);
  luaL_openlibs(W);
  lua_getglobal(W, "package");
  if (p->path != NULL) {
    lua_pushstring(W, p->path);
    lua_setfield(W, -2, "path");
  }
  if (p->cpath != NULL) {
    lua_pushstring(W, p->cpath);
    lua_setfield(W, -2, "cpath");
  }
  lua_pop(W, 1);
  /* task.worker: what a job may ask of its worker */
  lua_createtable(W, 0, 1);
  lua_createtable(W, 0, 2);
  lua_pushcfunction(W, l_worker_cancelled);
  lua_setfield(W, -2, "cancelled");
  lua_pushinteger(W, w->index);
  lua_setfield(W, -2, "id");
  lua_setfield(W, -2, "worker");
  lua_setglobal(W, "task");
  if (luaL_loadbuffer(W, freeze_src, sizeof freeze_src - 1, "=lunaloop/share") != LUA_OK)
    lua_error(W);
  lua_call(W, 0, 1);
  lua_rawsetp(W, LUA_REGISTRYINDEX, &freeze_key);
  lua_newtable(W);
  lua_rawsetp(W, LUA_REGISTRYINDEX, &cache_key);
  /* run_protected's names, at registry references (integer keys: the
     registry's array part, cheaper than a pointer key's hash) */
  lua_pushboolean(W, 0);
  w->mod_ref = luaL_ref(W, LUA_REGISTRYINDEX);
  lua_pushboolean(W, 0);
  w->fn_ref = luaL_ref(W, LUA_REGISTRYINDEX);
  if (p->init != NULL) {
    int top = lua_gettop(W);
    if (p->init(W, w->index, p->init_ud) != 0) {
      if (lua_gettop(W) > top && lua_type(W, -1) == LUA_TSTRING)
        return lua_error(W);
      return luaL_error(W, "the host's init hook refused worker %d", w->index);
    }
    lua_settop(W, top);
  }
  return 0;
}

/* Makes w's state; NULL and a malloc'ed message in *err on failure. */
static lua_State *make_state(worker *w, char **err) {
  lua_State *W;
  w->mem = 0;
  w->oom = false;
  w->names_len = 0; /* the strings were the old state's */
  w->pinned_bytes = 0; /* and so were the pins (settle_pins copied them out) */
  w->epoch = atomic_load_explicit(&share_epoch, memory_order_acquire);
  W = lua_newstate(worker_alloc, w);
  if (W == NULL) {
    *err = strdup("not enough memory for a worker state");
    return NULL;
  }
  *(worker **)lua_getextraspace(W) = w;
  lua_pushcfunction(W, open_worker_state);
  lua_pushlightuserdata(W, w);
  if (lua_pcall(W, 1, 0, 0) != LUA_OK) {
    const char *m = lua_tostring(W, -1);
    *err = strdup(m != NULL ? m : "worker state failed to open");
    lua_close(W);
    return NULL;
  }
  return W;
}

/* ---- running a job (worker thread) --------------------------------------------- */

static int job_msgh(lua_State *W) {
  worker *w = worker_of(W);
  const char *msg = luaL_tolstring(W, 1, NULL);
  const char *tb, *item;
  luaL_traceback(W, W, NULL, 1);
  tb = lua_tostring(W, -1);
  item = w->map_item > 0 ? lua_pushfstring(W, ", item %I", w->map_item) : "";
  lua_pushfstring(W, "%s\n(worker %d, %s.%s%s) %s", msg, w->index, w->current->names,
                  w->current->fn, item, tb);
  return 1;
}

static int run_protected(lua_State *W) {
  worker *w = worker_of(W);
  job *j = w->current;
  char what[160];
  int base, n, st;
  size_t nlen = (size_t)(j->fn - j->names) + strlen(j->fn) + 1;
  lua_settop(W, 0);
  /* the function: require(module)[fn]. The names as Lua strings: those of
     the last job when they are the same (the usual run of calls of one
     function); making them from the job's bytes hashed and interned both
     each time (the job's buffer is at a new address each time, so Lua's
     cache of C strings missed), a sixth of an empty job on the worker. */
  lua_getglobal(W, "require");
  if (nlen == w->names_len && memcmp(j->names, w->names, nlen) == 0) {
    lua_rawgeti(W, LUA_REGISTRYINDEX, w->mod_ref);
    lua_rawgeti(W, LUA_REGISTRYINDEX, w->fn_ref);
  } else {
    w->names_len = 0;
    lua_pushstring(W, j->names);
    lua_pushvalue(W, -1);
    lua_rawseti(W, LUA_REGISTRYINDEX, w->mod_ref);
    lua_pushstring(W, j->fn);
    lua_pushvalue(W, -1);
    lua_rawseti(W, LUA_REGISTRYINDEX, w->fn_ref);
    if (nlen <= sizeof w->names) {
      memcpy(w->names, j->names, nlen);
      w->names_len = nlen;
    }
  }
  lua_insert(W, 1); /* fn name, require, module name */
  lua_call(W, 1, 1);
  if (lua_type(W, 2) != LUA_TTABLE)
    return luaL_error(W, "module '%s' returned a %s, not a table of functions", j->names,
                      luaL_typename(W, 2));
  lua_insert(W, 1); /* module, fn name */
  if (lua_gettable(W, 1) != LUA_TFUNCTION)
    return luaL_error(W, "module '%s' has no function '%s' (found a %s)", j->names, j->fn,
                      luaL_typename(W, -1));
  base = lua_gettop(W);
  n = decode_values(W, j->args, w);
  if (j->kind == JOB_MAP) {
    /* args: (list, first index, extra...): fn(item, index, extra...) for
       each, first results */
    lua_Integer i, len, first;
    int list = base + 1, k, nextra = n - 2;
    first = lua_tointeger(W, base + 2);
    len = (lua_Integer)lua_rawlen(W, list);
    luaL_checkstack(W, nextra + 4, "too many arguments to map");
    lua_createtable(W, (int)len, 0);
    for (i = 1; i <= len; i++) {
      lua_pushvalue(W, base);
      lua_rawgeti(W, list, i);
      lua_pushinteger(W, first + i - 1);
      for (k = 1; k <= nextra; k++)
        lua_pushvalue(W, base + 2 + k);
      w->map_item = first + i - 1;
      lua_call(W, 2 + nextra, 1);
      lua_rawseti(W, -2, i);
    }
    w->map_item = 0;
    lua_replace(W, base);
    lua_settop(W, base);
    base--;
    n = 1;
  } else {
    lua_call(W, n, LUA_MULTRET);
    n = lua_gettop(W) - base + 1;
    base--;
  }
  if (j->kind == JOB_POST)
    return 0;
  {
    /* "module.fn" (names are "module\0fn\0"): the results' messages */
    size_t mlen = (size_t)(j->fn - 1 - j->names), flen = strlen(j->fn);
    if (mlen + flen + 2 <= sizeof what) {
      memcpy(what, j->names, mlen);
      what[mlen] = '.';
      memcpy(what + mlen + 1, j->fn, flen + 1);
    } else {
      snprintf(what, sizeof what, "%s.%s", j->names, j->fn);
    }
  }
  st = encode_values(W, base + 1, n, what, "result %d", NULL, NULL, j, &j->res, &j->res_len,
                     &j->res_cap, &w->scratch, &w->scratch_cap);
  if (st != LUA_OK)
    return lua_error(W);
  return 0;
}

static void set_error(job *j, const char *msg) {
  free(j->res);
  j->res = strdup(msg != NULL ? msg : "(no message)");
  j->res_len = j->res != NULL ? strlen(j->res) : 0;
  j->res_cap = j->res != NULL ? j->res_len + 1 : 0;
  j->outcome = OUT_ERR;
}

/* A pinned result copied into its job (materialize) before the worker
   state it points into is closed. When even that copy cannot be made the
   job fails with an out-of-memory error for its awaiting task (with no
   memory for the message either, it is dropped: the task gets the
   cancellation error). Worker thread, or the loop thread at pool close. */
static void copy_out(job *j) {
  if (materialize(j))
    return;
  set_error(j, "not enough memory to copy the job's result out of its worker's state");
  if (j->res == NULL)
    j->outcome = OUT_DROPPED;
}

/* Before w's state is closed to be made again: no pinned result of it may
   be read after. Its jobs in the done list get their results copied
   (materialize); the ones the loop thread took are being delivered, and
   their releases are waited for. False when the pool is closing first
   (pool_close then does it, with the state left open). Worker thread. */
static bool settle_pins(worker *w) {
  luna_workers *p = w->pool;
  job *d;
  bool ok;
  if (w->pins_out == 0)
    return true;
  pthread_mutex_lock(&p->mu);
  for (d = p->dhead; d != NULL; d = d->next) {
    if (d->res_pinned && d->worker == w->index) {
      copy_out(d);
      d->res_pinned = false;
      w->pins_out--;
    }
  }
  w->awaiting_release = true;
  for (;;) {
    drain_releases(w);
    if (w->pins_out == 0 || p->stopping)
      break;
    pthread_cond_wait(&p->work_cv, &p->mu);
  }
  w->awaiting_release = false;
  ok = w->pins_out == 0;
  pthread_mutex_unlock(&p->mu);
  return ok;
}

static void run_job(worker *w, job *j) {
  lua_State *W = w->W;
  int st;
  j->worker = w->index;
  if (j->promise != NULL && luna_promise_is_cancelled(j->promise)) {
    j->outcome = OUT_DROPPED;
    return;
  }
  if (W == NULL) { /* recreating after running out of memory failed last time */
    char *err = NULL;
    W = w->W = make_state(w, &err);
    if (W == NULL) {
      char msg[300];
      snprintf(msg, sizeof msg, "worker %d has no Lua state: %s", w->index, err ? err : "?");
      free(err);
      set_error(j, msg);
      return;
    }
  }
  sweep_cache(w);
  w->current = j;
  w->map_item = 0;
  w->used = 0;
  w->budget = j->instructions;
  w->exceeded = false;
  w->stopped = false;
  w->oom = false;
  w->limit = w->pool->memory_limit;
  w->step = w->budget != 0 && w->budget < HOOK_STEP ? (int)w->budget : HOOK_STEP;
  if (w->budget != 0 || ALWAYS_HOOK)
    lua_sethook(W, worker_hook, LUA_MASKCOUNT, w->step);
  j->res_pinned = false;
  lua_settop(W, 0);
  lua_pushcfunction(W, job_msgh);
  lua_pushcfunction(W, run_protected);
  atomic_store(&w->in_lua, 1);
  if (atomic_load(&w->pool->stop_flag))
    lua_sethook(W, worker_hook, LUA_MASKCOUNT, 1);
  st = lua_pcall(W, 0, 0, 1);
  atomic_store(&w->in_lua, 0);
  lua_sethook(W, NULL, 0, 0);
  if (st == LUA_OK) {
    j->outcome = OUT_OK;
  } else if (w->stopped) {
    j->outcome = OUT_DROPPED; /* closing: the awaiting tasks get the cancellation error */
  } else if (st == LUA_ERRMEM || w->oom) {
    char msg[400];
    const char *m = lua_tostring(W, -1);
    snprintf(msg, sizeof msg,
             "worker %d ran out of memory (limit %zu bytes) in %s.%s: %s; its state was recreated",
             w->index, w->limit, j->names, j->fn, m != NULL ? m : "not enough memory");
    set_error(j, msg);
  } else {
    set_error(j, lua_tostring(W, -1));
  }
  if (j->outcome == OUT_OK && j->promise != NULL && luna_promise_is_cancelled(j->promise))
    j->outcome = OUT_DROPPED;
  if (j->res_pinned && j->outcome != OUT_OK) { /* nobody will read them */
    j->res_pinned = false;
    unpin_seq(w, j->seq);
  }
  if (j->res_pinned && w->oom) {
    /* the job succeeded although an allocation failed on the way (a pcall
       caught it, or the emergency collection made room): its state is made
       again below, and settle_pins would wait for this job's release, which
       only comes once the job is in the done list. Its results are copied
       now, while the state is open. */
    copy_out(j);
    j->res_pinned = false;
    unpin_seq(w, j->seq);
  }
  w->current = NULL;
  lua_settop(W, 0);
  if (w->oom && settle_pins(w)) {
    char *err = NULL;
    w->limit = 0; /* closing frees only */
    drop_cache(w);
    lua_close(W);
    w->limit = w->pool->memory_limit;
    w->W = make_state(w, &err);
    free(err);
    pthread_mutex_lock(&w->pool->mu);
    w->pool->st.recreated++;
    pthread_mutex_unlock(&w->pool->mu);
  }
}

static void bell_cb(luna_loop *loop, void *arg);

/* How long a worker that has just finished a job polls for the next one
   before it sleeps on work_cv, at most and at least (the budget adapts
   between the two: wait_for_work). Waking a sleeping worker (the futex
   wake in pthread_cond_signal, then the scheduler running the thread) is
   most of an empty job's round trip: polling took W7's one-at-a-time round
   trip from 10-18 us to about 2 us on the quiet 2-core development
   machine. The next job of a task that awaits each result comes one
   delivery later (the bell, the loop's next Update, the resume and the
   call), a batch's next job sooner: with frames back to back, 93% of the
   polls there found a job within 2 us, 95% within 4 us, nearly all the
   rest within 16 us. 50 us leaves room for a loop with more to do between
   a result and the next call, and for a loaded machine's jitter, without
   keeping a core busy long for nothing; 2 us, the least, still finds the
   usual next job, so a budget that shrank grows back at the first one. */
#define SPIN_MAX_NS 50000
#define SPIN_MIN_NS 2000

/* Jobs shorter than this on average are "short" for should_wake, and a
   short job's worker counts as about to take the next; WAKE_DEPTH jobs
   queued per awake worker are left to it before a sleeper is woken. */
#define WAKE_WORTH_NS 20000
#define WAKE_DEPTH 2
/* At most this many jobs queued by tasks that a delivery resumed wait for
   its end to wake a worker (hand_over). */
#define WAKE_BATCH 16
/* At most this many jobs of such tasks wait on the loop thread to be
   handed over together (hand_over, publish). */
#define LOCAL_BATCH 16

/* A hint to the CPU that this is a busy-wait: on x86 PAUSE (it stops
   the loop's speculative loads from being flushed as a memory-order
   violation when the line changes, and yields the core's resources to a
   hyper-thread sibling), on ARM64 YIELD; elsewhere only a compiler barrier
   (the atomic loads around it are reloaded anyway). */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#else
  atomic_signal_fence(memory_order_seq_cst);
#endif
}

static uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Polls, without the mutex, until a job is queued or the pool is stopping
   (-> true) or the clock passes `deadline` (-> false). Reads the counters
   only (queued, stop_flag): the queue itself is read under mu by the
   caller, which may find the job taken by another worker. The clock is
   read every 8 polls: cheap through the vDSO, but a syscall on a machine
   whose clock source has none. */
static bool spin_for_work(luna_workers *p, uint64_t deadline) {
  unsigned i;
  for (i = 1;; i++) {
    if (atomic_load_explicit(&p->queued, memory_order_relaxed) > 0 ||
        atomic_load_explicit(&p->stop_flag, memory_order_relaxed))
      return true;
    cpu_relax();
    if ((i & 7) == 0 && monotonic_ns() >= deadline)
      return false;
  }
}

/* The calling thread's CPU, or -1 where the system does not say. */
static int current_cpu(void) {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

/* The loop thread made its last call on the CPU this worker runs on
   (sched_getcpu reads the rseq area, no system call, on a current
   glibc). */
static bool on_loop_cpu(luna_workers *p) {
  int loop = atomic_load_explicit(&p->loop_cpu, memory_order_relaxed);
  return loop >= 0 && loop == current_cpu();
}

/* Waits, with mu held (and held again on return), until a job is queued
   or the pool is stopping. After a job (`spin`) the worker first polls for
   w->spin_ns without the mutex, counted in `spinning` so that hand_over
   does not wake a sleeping worker for a job a spinning one will take; then
   (or at once) it sleeps on work_cv, counted in `sleeping` so that
   hand_over signals only when someone sleeps. No wake-up is lost: both
   counts change under mu, and a worker always looks at the queue under mu
   after it stopped spinning and before each wait, so a job queued while
   it spun or was about to sleep is seen then.

   The budget halves (down to SPIN_MIN_NS) after a spin that found nothing
   and doubles (up to SPIN_MAX_NS) after one that did. A spin that finds
   nothing is worse than wasted when the loop thread waits for the core
   the worker spins on (a loaded machine; a loop thread and its worker on
   one core): the loop cannot make the next job until the spin ends, so
   every round trip would pay the whole spin (W7's one-at-a-time round trip
   with the process pinned to one core: 16-19 us without polling, 122-129
   us with a fixed 50 us poll, 21-25 us with this one). Halving brings the
   budget down to SPIN_MIN_NS in five jobs, and does the same for a host
   whose jobs come a frame apart (where no poll pays); a poll that pays
   earns it back as fast.

   A job that comes soon after a poll gave up (within SPIN_MAX_NS of its
   start) sets the budget to twice that wait: the next poll would have
   found it. Without this the budget had two stable states: once it
   shrank to SPIN_MIN_NS (a loaded moment), each job found the worker
   asleep, each call paid the futex wake (a few microseconds in the loop
   thread), so the calls came further apart than the shrunk poll and it
   never grew again (W7 pipelined: 4 to 16 us a job instead of 1.6; futex
   calls per job 0.05 in one state and 1.1 in the other). It does not grow
   when the job came from this worker's CPU (on_loop_cpu): then the loop
   thread made it only because the worker slept (a process pinned to one
   core, or a wake-up that put both threads on one CPU), and a longer poll
   would have kept it from being made. */
static void wait_for_work(luna_workers *p, worker *w, bool spin) {
  uint64_t began = 0;
  if (spin && !p->stopping && p->qhead == NULL && p->spinning < p->max_spinning) {
    uint64_t deadline;
    bool seen = true;
    began = monotonic_ns();
    deadline = began + w->spin_ns;
    p->spinning++;
    while (seen && !p->stopping && p->qhead == NULL) {
      pthread_mutex_unlock(&p->mu);
      seen = spin_for_work(p, deadline);
      pthread_mutex_lock(&p->mu);
    }
    p->spinning--;
    if (seen)
      w->spin_ns = w->spin_ns * 2 < SPIN_MAX_NS ? w->spin_ns * 2 : SPIN_MAX_NS;
    else
      w->spin_ns = w->spin_ns / 2 > SPIN_MIN_NS ? w->spin_ns / 2 : SPIN_MIN_NS;
  }
  if (p->stopping || p->qhead != NULL)
    return;
  do {
    p->sleeping++;
    pthread_cond_wait(&p->work_cv, &p->mu);
    p->sleeping--;
  } while (!p->stopping && p->qhead == NULL);
  if (began != 0) {
    uint64_t waited = monotonic_ns() - began;
    if (waited < SPIN_MAX_NS && !on_loop_cpu(p))
      w->spin_ns = waited * 2 >= SPIN_MAX_NS ? SPIN_MAX_NS
                   : waited * 2 <= SPIN_MIN_NS ? SPIN_MIN_NS
                                               : (uint32_t)(waited * 2);
  }
}

static void *worker_main(void *arg) {
  worker *w = (worker *)arg;
  luna_workers *p = w->pool;
  char *err = NULL;
  bool spin = false; /* a job has ended: poll for the next before sleeping */
  sigset_t set;
  this_worker = w;
  sigemptyset(&set);
  sigaddset(&set, LUNA__WORKERS_SIGNAL);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  w->limit = p->memory_limit;
  w->spin_ns = SPIN_MAX_NS;
  w->W = make_state(w, &err);
  pthread_mutex_lock(&p->mu);
  w->error = err;
  p->ready++;
  pthread_cond_broadcast(&p->ready_cv);
  if (w->W == NULL) {
    pthread_mutex_unlock(&p->mu);
    return NULL;
  }
  for (;;) {
    job *j;
    bool ring = false;
    uint64_t began;
    wait_for_work(p, w, spin);
    if (p->stopping)
      break;
    j = p->qhead;
    p->qhead = j->next;
    if (p->qhead == NULL)
      p->qtail = NULL;
    j->next = NULL;
    atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
    drain_releases(w);
    p->running++;
    began = p->took_ns = monotonic_ns();
    if (p->room_wanted && !p->bell)
      ring = p->bell = true;
    pthread_mutex_unlock(&p->mu);
    if (ring && luna_post(p->loop, LUNA_UPDATE, bell_cb, p) != 0) {
      pthread_mutex_lock(&p->mu);
      p->bell = false;
      pthread_mutex_unlock(&p->mu);
    }
    {
      uint64_t dt;
      run_job(w, j);
      dt = monotonic_ns() - began;
      if (dt > 1000000000u)
        dt = 1000000000u;
      spin = true;
      ring = false;
      pthread_mutex_lock(&p->mu);
      p->job_ns = (p->job_ns * 7 + dt) / 8;
    }
    p->running--;
    if (j->outcome == OUT_OK)
      p->st.completed++;
    else if (j->outcome == OUT_ERR)
      p->st.failed++;
    else
      p->st.dropped++;
    if (j->det) {
      if (j->orphan) {
        pthread_mutex_unlock(&p->mu);
        luna_promise_release(j->promise);
        job_free(j);
        pthread_mutex_lock(&p->mu);
        continue;
      }
      j->done = true;
      pthread_cond_broadcast(&p->done_cv);
    } else {
      if (p->dtail != NULL)
        p->dtail->next = j;
      else
        p->dhead = j;
      p->dtail = j;
      if (!p->bell)
        ring = p->bell = true;
    }
    if (ring) {
      pthread_mutex_unlock(&p->mu);
      if (luna_post(p->loop, LUNA_UPDATE, bell_cb, p) != 0) {
        pthread_mutex_lock(&p->mu);
        p->bell = false; /* the next completion tries again */
        pthread_mutex_unlock(&p->mu);
      }
      pthread_mutex_lock(&p->mu);
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* ---- delivering (loop thread) ---------------------------------------------------- */

static int push_results(lua_State *L, void *data) {
  job *j = (job *)data;
  int n = decode_values(L, j->res, NULL);
  release_results(j->pool, j);
  return n;
}

static int push_closed(lua_State *L, void *data) {
  (void)data;
  luna__push_cancel_error(L);
  return lua_error(L);
}

/* The most finished job records a pool keeps for reuse (enough for a full
   queue and a job on each worker: pipelined calls then make none), and
   the most bytes
   their buffers larger than KEEP_CAP may hold together (a large payload's
   next call then reuses them instead of faulting in fresh pages). */
#define MAX_SPARE 1024
#define KEEP_BIG ((size_t)8 * 1024 * 1024)

static size_t big_bytes(const job *j) {
  return (j->args_cap > KEEP_CAP ? j->args_cap : 0) + (j->res_cap > KEEP_CAP ? j->res_cap : 0);
}

/* Ends j, keeping its record and (small) buffers in p's spares for the
   next job. Loop thread, with p alive. */
static void job_recycle(luna_workers *p, job *j) {
  size_t i;
  char *args, *res;
  size_t args_cap, res_cap;
  share **shares;
  size_t shares_cap;
  unpin_in_pool(p, j);
  release_results(p, j);
  if (p->nspare >= MAX_SPARE || p->nspare >= p->cap + (size_t)p->nthreads + 64) {
    job_free(j);
    return;
  }
  for (i = 0; i < j->nshares; i++)
    share_unuse(j->shares[i]);
  if (j->names != j->names_in)
    free(j->names);
  if (p->kept_big + big_bytes(j) > KEEP_BIG) {
    if (j->args_cap > KEEP_CAP) {
      free(j->args);
      j->args = NULL;
      j->args_cap = 0;
    }
    if (j->res_cap > KEEP_CAP) {
      free(j->res);
      j->res = NULL;
      j->res_cap = 0;
    }
  }
  p->kept_big += big_bytes(j);
  args = j->args, args_cap = j->args_cap;
  res = j->res, res_cap = j->res_cap;
  shares = j->shares, shares_cap = j->shares_cap;
  memset(j, 0, sizeof *j);
  j->args = args, j->args_cap = args_cap;
  j->res = res, j->res_cap = res_cap;
  j->shares = shares, j->shares_cap = shares_cap;
  j->next = p->spare;
  p->spare = j;
  p->nspare++;
}

/* A job record for p: a spare one, or a new one (NULL: out of memory). */
static job *job_take(luna_workers *p) {
  job *j = p->spare;
  if (j == NULL)
    return (job *)calloc(1, sizeof *j);
  p->spare = j->next;
  p->nspare--;
  p->kept_big -= big_bytes(j);
  j->next = NULL;
  return j;
}

/* The pool whose deliver() is completing a promise right now (loop
   thread): the free callback a promise calls then recycles into it; one
   called later (the pool may be gone) frees. */
static _Thread_local luna_workers *recycling;

static void free_job_cb(void *data) {
  job *j = (job *)data;
  if (recycling != NULL && j->pool == recycling)
    job_recycle(recycling, j);
  else
    job_free(j);
}

static void report_post_error(luna_workers *p, job *j) {
  lua_State *L;
  char what[200];
  if (p->b == NULL || p->b->loop == NULL || p->b->closing)
    return;
  L = luna__exec_state(p->b);
  if (!lua_checkstack(L, 4))
    return;
  snprintf(what, sizeof what, "worker post %s.%s", j->names, j->fn);
  {
    /* the message, and the worker's "(worker N, module.fn) stack
       traceback: ..." that job_msgh put after it, as the handler's err and
       traceback, as a failed task's are */
    const char *tb = j->res != NULL ? strstr(j->res, "\n(worker ") : NULL, *next;
    while (tb != NULL && (next = strstr(tb + 1, "\n(worker ")) != NULL)
      tb = next; /* the last: the message itself may hold the words */
    if (tb != NULL) {
      lua_pushlstring(L, j->res, (size_t)(tb - j->res));
      lua_pushstring(L, tb + 1);
      luna__report(p->b, L, -2, -1, 0, what);
      lua_pop(L, 2);
    } else {
      lua_pushstring(L, j->res != NULL ? j->res : "(no message)");
      luna__report(p->b, L, -1, 0, 0, what);
      lua_pop(L, 1);
    }
  }
}

/* The job's results are no values (the encoding's count is 0). */
static bool no_values(const job *j) {
  uint32_t n;
  if (j->res == NULL || j->res_len < sizeof n)
    return false;
  memcpy(&n, j->res, sizeof n);
  return n == 0;
}

/* Completes one job's promise now (loop thread, at loop level), or reports
   a post's error. Frees the job. */
static void deliver(luna_workers *p, job *j) {
  luna_promise *pr = j->promise;
  unpin_in_pool(p, j); /* before the results, which may keep j for later */
  if (pr == NULL) {
    if (j->outcome == OUT_ERR)
      report_post_error(p, j);
    job_recycle(p, j);
    return;
  }
  if (j->outcome == OUT_OK && no_values(j)) {
    /* nothing to push: the promise settles without a protected call */
    luna__promise_complete_now(pr, NULL, NULL, NULL, NULL);
    job_recycle(p, j);
  } else if (j->outcome == OUT_OK) {
    luna_workers *outer = recycling;
    recycling = p;
    if (luna__promise_complete_now(pr, push_results, j, free_job_cb, NULL) != 0)
      job_recycle(p, j);
    recycling = outer;
  } else if (j->outcome == OUT_ERR) {
    luna__promise_complete_now(pr, NULL, NULL, NULL, j->res);
    job_recycle(p, j);
  } else {
    job_recycle(p, j);
  }
  luna_promise_release(pr);
}

/* Wakes up to `room` tasks waiting for room (the given-up ones are
   skipped), in order. Each promise is taken out of p->room before it is
   completed: completing it resumes its task at once, and that task may
   call again (adding to p->room) or close the pool (which releases what
   p->room holds then), so nothing of p->room is held across a resume. */
static void wake_room(luna_workers *p, size_t room) {
  while (p->room_head < p->nroom && room > 0 && !p->closed) {
    luna_promise *r = p->room[p->room_head++];
    if (p->room_head == p->nroom)
      p->room_head = p->nroom = 0;
    if (!luna_promise_is_cancelled(r)) {
      luna__promise_complete_now(r, NULL, NULL, NULL, NULL);
      room--;
    }
    luna_promise_release(r);
  }
}

static void pool_maybe_free(luna_workers *p);
static int det_arm(luna_workers *p);
static void flush_wake(luna_workers *p);
static void publish(luna_workers *p);

static void bell_cb(luna_loop *loop, void *arg) {
  luna_workers *p = (luna_workers *)arg;
  job *list;
  size_t room;
  (void)loop;
  pthread_mutex_lock(&p->mu);
  p->bell = false;
  list = p->dhead;
  p->dhead = p->dtail = NULL;
  {
    size_t q = atomic_load_explicit(&p->queued, memory_order_relaxed);
    room = q < p->cap ? p->cap - q : 0;
  }
  pthread_mutex_unlock(&p->mu);
  if (p->closed) { /* closed meanwhile: close took the done list already */
    pool_maybe_free(p);
    return;
  }
  while (p->pending != NULL) { /* left by a raise in prepare_job */
    job *j = p->pending;
    p->pending = j->next;
    job_recycle(p, j);
  }
  p->delivering++;
  {
    /* every result of the batch settles before the first awaiter runs: a
       task awaiting them in turn finds the rest settled (W7 pipelined) */
    bool held = luna__pump_hold(p->b);
    while (list != NULL) {
      job *j = list;
      list = j->next;
      j->next = NULL;
      deliver(p, j);
    }
    luna__pump_release(p->b, held);
  }
  if (!p->closed)
    det_arm(p); /* after a reset dropped the det item */
  if (p->room_head < p->nroom && room > 0 && !p->closed) {
    wake_room(p, room);
    pthread_mutex_lock(&p->mu);
    p->room_wanted = p->room_head < p->nroom;
    pthread_mutex_unlock(&p->mu);
  }
  if (!p->closed)
    publish(p);
  flush_wake(p); /* the tasks resumed here have yielded */
  p->delivering--;
  pool_maybe_free(p); /* a task resumed here closed the pool and let it go */
}

/* The repeating item at Update while deterministic jobs are outstanding:
   completes, in call order, every one due by this frame, waiting for a
   late one. */
static bool det_step(luna_loop *loop, void *arg) {
  luna_workers *p = (luna_workers *)arg;
  uint64_t frame = luna__loop_frame(loop);
  while (p->det_head != NULL && p->det_head->due <= frame && !p->closed) {
    job *j = p->det_head;
    bool given_up = j->promise != NULL && luna_promise_is_cancelled(j->promise);
    p->det_head = j->det_next;
    j->det_next = NULL;
    pthread_mutex_lock(&p->mu);
    if (!j->done && given_up) {
      j->orphan = true; /* nobody waits: the worker (or close) frees it */
      pthread_mutex_unlock(&p->mu);
      continue;
    }
    /* a late job may wait behind a running one that should_wake let
       be, or on the loop thread (publish): the loop is about to block, so
       hand those over and wake whoever sleeps */
    if (!j->done && atomic_load_explicit(&p->nlocal, memory_order_relaxed) > 0) {
      pthread_mutex_unlock(&p->mu);
      publish(p);
      pthread_mutex_lock(&p->mu);
    }
    if (!j->done && p->sleeping > 0 && atomic_load_explicit(&p->queued, memory_order_relaxed) > 0)
      pthread_cond_broadcast(&p->work_cv);
    while (!j->done)
      pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    p->delivering++;
    deliver(p, j);
    p->delivering--;
  }
  if (!p->closed)
    publish(p);
  flush_wake(p);
  if (p->det_head == NULL || p->closed) {
    p->det_item_on = false;
    pool_maybe_free(p); /* a task resumed here closed the pool and let it go */
    return false;
  }
  return true;
}

/* Makes sure the det item runs while deterministic jobs are outstanding. */
static int det_arm(luna_workers *p) {
  luna_item_options io = {-1000000, true};
  if (p->det_item_on || p->det_head == NULL || p->closed || p->loop == NULL)
    return 0;
  if (luna_item_add_ex(p->loop, LUNA_UPDATE, det_step, p, &io, &p->det_item) != 0)
    return LUNA_ENOMEM;
  p->det_item_on = true;
  return 0;
}

/* ---- closing ------------------------------------------------------------------------ */

/* Ends a job that will not be delivered normally: with `complete` (the
   state and loop live on), its awaiting tasks get, at the promise's timing,
   the results if it had finished and the cancellation error if not (the
   completions are posted, so closing runs no Lua code: it is safe from a
   task, a callback or the host); otherwise (the state or loop is going
   away) the promise is let go of, which gives it up. A finished post's
   error is counted in `failed` but not reported then. */
static void end_job(job *j, bool complete) {
  luna_promise *pr = j->promise;
  if (pr == NULL || !complete) {
    if (pr != NULL)
      luna_promise_release(pr);
    job_free(j);
    return;
  }
  if (j->outcome == OUT_OK) {
    if (luna_promise_resolve(pr, push_results, j, free_job_cb) != 0)
      job_free(j);
  } else if (j->outcome == OUT_ERR) {
    luna_promise_reject(pr, j->res);
    job_free(j);
  } else if (luna_promise_resolve(pr, push_closed, j, free_job_cb) != 0) {
    job_free(j);
  }
  luna_promise_release(pr);
}

static void pool_listener(luna_loop *loop, luna_event event, void *ud);

/* Closes the worker states of a closed pool (its workers are joined).
   Not while a delivery is on the stack: the jobs bell_cb or det_step took
   may still have results pinned in them, and a finalizer that runs during
   one of their settles can close the pool (pool_close leaves the states
   to the delivery's end, or to pool_free). Idempotent. Loop thread. */
static void close_states(luna_workers *p) {
  int i;
  for (i = 0; i < p->nthreads; i++) {
    worker *w = &p->w[i];
    if (w->W != NULL) {
      w->limit = 0;
      drop_cache(w);
      lua_close(w->W);
      w->W = NULL;
    }
    free(w->cached);
    w->cached = NULL;
    free(w->error);
    w->error = NULL;
    free(w->scratch);
    w->scratch = NULL;
  }
}

static void pool_close(luna_workers *p, bool complete) {
  job *q, *d, *det, *j;
  int i;
  size_t k;
  if (p->closed)
    return;
  p->closed = true;
  pthread_mutex_lock(&p->mu);
  p->stopping = true;
  atomic_store(&p->stop_flag, 1);
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  for (i = 0; i < p->nthreads; i++)
    if (p->w[i].started && atomic_load(&p->w[i].in_lua))
      pthread_kill(p->w[i].thread, LUNA__WORKERS_SIGNAL);
  for (i = 0; i < p->nthreads; i++)
    if (p->w[i].started)
      pthread_join(p->w[i].thread, NULL);
  pthread_mutex_lock(&p->mu);
  if (p->lhead != NULL) { /* the loop's own, not handed over: queued ones too */
    if (p->qtail != NULL)
      p->qtail->next = p->lhead;
    else
      p->qhead = p->lhead;
    p->qtail = p->ltail;
    p->lhead = p->ltail = NULL;
    atomic_fetch_add_explicit(&p->queued, atomic_load_explicit(&p->nlocal, memory_order_relaxed),
                              memory_order_relaxed);
    p->st.submitted += atomic_load_explicit(&p->nlocal, memory_order_relaxed);
    p->st.overflowed += p->overflowed;
    p->overflowed = 0;
    atomic_store_explicit(&p->nlocal, 0, memory_order_relaxed);
  }
  q = p->qhead;
  p->qhead = p->qtail = NULL;
  p->st.dropped += atomic_load_explicit(&p->queued, memory_order_relaxed);
  atomic_store_explicit(&p->queued, 0, memory_order_relaxed);
  d = p->dhead;
  p->dhead = p->dtail = NULL;
  pthread_mutex_unlock(&p->mu);
  det = p->det_head;
  p->det_head = NULL;
  if (p->det_item_on && p->loop != NULL) {
    luna_item_remove(p->loop, p->det_item);
    p->det_item_on = false;
  }
  if (p->b == NULL || p->b->loop == NULL || p->b->closing || p->loop == NULL)
    complete = false;
  for (j = p->pending; j != NULL; j = j->next) /* the workers are joined: no one reads */
    unpin_in_pool(p, j);
  while (d != NULL) {
    j = d;
    d = j->next;
    unpin_in_pool(p, j);
    if (j->res_pinned) { /* the worker states close below */
      copy_out(j);
      j->res_pinned = false;
    }
    end_job(j, complete);
  }
  while (q != NULL) { /* a deterministic one is ended through the det list */
    j = q;
    q = j->next;
    unpin_in_pool(p, j);
    if (!j->det || j->orphan)
      end_job(j, complete && !j->orphan);
  }
  while (det != NULL) {
    j = det;
    det = j->det_next;
    end_job(j, complete);
  }
  for (k = p->room_head; k < p->nroom; k++) {
    if (complete)
      luna_promise_resolve(p->room[k], NULL, NULL, NULL);
    luna_promise_release(p->room[k]);
  }
  p->room_head = p->nroom = 0;
  if (p->delivering == 0)
    close_states(p);
}

static void pool_free(luna_workers *p) {
  int i;
  close_states(p);
  if (p->listening && p->loop != NULL)
    luna_loop_remove_listener(p->loop, pool_listener, p);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->work_cv);
  pthread_cond_destroy(&p->done_cv);
  pthread_cond_destroy(&p->ready_cv);
  while (p->pending != NULL) {
    job *j = p->pending;
    p->pending = j->next;
    job_free(j);
  }
  while (p->spare != NULL) {
    job *j = p->spare;
    p->spare = j->next;
    job_free(j);
  }
  free(p->scratch);
  free(p->room);
  for (i = 0; i < p->nthreads; i++)
    free(p->w[i].rel);
  free(p->w);
  free(p->path);
  free(p->cpath);
  free(p);
}

/* Frees the pool once it is closed, its Pool value is gone and no bell is
   in the inbox (the workers are joined: only the loop thread is left). */
static void pool_maybe_free(luna_workers *p) {
  if (p->closed && p->delivering == 0)
    close_states(p); /* left by a close during a delivery */
  if (p->closed && !p->alive && !p->bell && p->delivering == 0)
    pool_free(p);
}

static void pool_listener(luna_loop *loop, luna_event event, void *ud) {
  luna_workers *p = (luna_workers *)ud;
  (void)loop;
  if (event == LUNA_EVENT_RESET) {
    /* The reset drops the loop's items (the det item too) and gives up
       the promises: the workers see that; the det list is walked again
       from a new item at the next submission or bell. */
    p->det_item_on = false;
    return;
  }
  pool_close(p, false);
  p->bell = false; /* the inbox is discarded with the loop */
  p->listening = false;
  p->loop = NULL;
  pool_maybe_free(p);
}

/* ---- the public C API ---------------------------------------------------------------- */

/* The pool's mutex. Its holders keep it for a few dozen instructions
   (a queue push or pop, counters), and in a pipelined burst of calls the
   loop thread and a worker want it at once: a default glibc mutex then
   sends the loser to a futex wait and a context switch (a fifth of the
   loop thread's samples were in the kernel in W7's pipelined round trip,
   perf); an adaptive one spins briefly first, while the holder is about
   to let go (performance.md, W7 run 7: 2.3 -> 1.6 us a job). */
static void init_queue_mutex(pthread_mutex_t *mu) {
#if defined(PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP)
  pthread_mutexattr_t a;
  if (pthread_mutexattr_init(&a) == 0) {
    (void)pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(mu, &a);
    pthread_mutexattr_destroy(&a);
    return;
  }
#endif
  pthread_mutex_init(mu, NULL);
}

static int online_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

typedef struct pool_ud {
  luna_workers *p;
} pool_ud;

static void copy_package_path(lua_State *L, luna_workers *p) {
  if (lua_getglobal(L, "package") == LUA_TTABLE) {
    if (lua_getfield(L, -1, "path") == LUA_TSTRING)
      p->path = strdup(lua_tostring(L, -1));
    lua_pop(L, 1);
    if (lua_getfield(L, -1, "cpath") == LUA_TSTRING)
      p->cpath = strdup(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

static void ensure_metatables(lua_State *L);
static void ensure_lua_side(lua_State *L, luna__binding *b);

static int fail(lua_State *L, int rc, const char *msg) {
  lua_pushstring(L, msg);
  return rc;
}

LUNA_API int luna_workers_new(lua_State *L, const luna_workers_config *cfg, luna_workers **out) {
  luna_workers_config c;
  luna__binding *b;
  luna_workers *p;
  pool_ud *ud;
  int i, started = 0;
  if (L == NULL)
    return LUNA_EINVAL;
  if (!lua_checkstack(L, 4))
    return LUNA_ENOMEM;
  ensure_metatables(L);
  b = luna__get_binding(L);
  if (b == NULL)
    return fail(L, LUNA_EINVAL, "the state has no lunaloop binding");
  if (b->loop == NULL || b->closing)
    return fail(L, LUNA_ESTATE, "the state's loop was freed or the state is closing");
  ensure_lua_side(L, b);
  memset(&c, 0, sizeof c);
  if (cfg != NULL)
    c = *cfg;
  if (c.threads < 0 || c.threads > MAX_THREADS)
    return fail(L, LUNA_EINVAL, "threads must be 0..256");
  if (c.threads == 0)
    c.threads = online_cores() > 1 ? online_cores() - 1 : 1;
  if (c.queue == 0)
    c.queue = 64 * (size_t)c.threads;
  p = (luna_workers *)calloc(1, sizeof *p);
  if (p == NULL)
    return fail(L, LUNA_ENOMEM, "out of memory");
  p->w = (worker *)calloc((size_t)c.threads, sizeof *p->w);
  if (p->w == NULL) {
    free(p);
    return fail(L, LUNA_ENOMEM, "out of memory");
  }
  init_queue_mutex(&p->mu);
  pthread_cond_init(&p->work_cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  pthread_cond_init(&p->ready_cv, NULL);
  p->loop = b->loop;
  p->b = b;
  p->nthreads = c.threads;
  p->max_spinning = online_cores() > 1 ? online_cores() - 1 : 1;
  atomic_init(&p->loop_cpu, -1);
  atomic_init(&p->nlocal, 0);
  p->job_ns = 8 * WAKE_WORTH_NS; /* unknown: long until jobs show otherwise */
  p->cap = c.queue;
  p->memory_limit = c.memory_limit;
  p->instructions = c.instructions;
  p->alloc = c.alloc != NULL ? c.alloc : default_alloc;
  p->alloc_ud = c.alloc != NULL ? c.alloc_ud : NULL;
  p->init = c.init;
  p->init_ud = c.init_ud;
  p->st.threads = c.threads;
  copy_package_path(L, p);
  pthread_once(&signal_once, install_stop_signal);
  if (luna_loop_add_listener(p->loop, pool_listener, p) != 0) {
    p->closed = true;
    pool_free(p);
    return fail(L, LUNA_ENOMEM, "out of memory");
  }
  p->listening = true;
  /* the Pool value first (it may raise): from now on its __gc closes */
  ud = (pool_ud *)lua_newuserdatauv(L, sizeof *ud, 0);
  ud->p = NULL;
  luaL_setmetatable(L, POOL_MT);
  ud->p = p;
  p->alive = true;
  for (i = 0; i < c.threads; i++) {
    worker *w = &p->w[i];
    w->pool = p;
    w->index = i + 1;
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
      break;
    w->started = true;
    started++;
  }
  pthread_mutex_lock(&p->mu);
  while (p->ready < started)
    pthread_cond_wait(&p->ready_cv, &p->mu);
  pthread_mutex_unlock(&p->mu);
  for (i = 0; i < c.threads; i++) {
    if (!p->w[i].started || p->w[i].error != NULL) {
      char msg[400];
      snprintf(msg, sizeof msg, "worker %d could not start: %s", i + 1,
               p->w[i].error != NULL ? p->w[i].error : "cannot create the thread");
      pool_close(p, false);
      lua_pop(L, 1);
      lua_pushstring(L, msg);
      return LUNA_ESTATE;
    }
  }
  /* anchored until closed; the first is the state's default */
  lua_rawgetp(L, LUA_REGISTRYINDEX, &anchor_key);
  if (lua_type(L, -1) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &anchor_key);
  }
  lua_pushvalue(L, -2);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &default_key) == LUA_TNIL) {
    lua_pushvalue(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &default_key);
  }
  lua_pop(L, 1);
  if (out != NULL)
    *out = p;
  return 0;
}

static void unanchor(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &anchor_key) == LUA_TTABLE) {
    lua_pushvalue(L, idx);
    lua_pushnil(L);
    lua_rawset(L, -3);
  }
  lua_pop(L, 1);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &default_key) != LUA_TNIL && lua_rawequal(L, -1, idx)) {
    lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &default_key);
  }
  lua_pop(L, 1);
}

LUNA_API int luna_workers_close(luna_workers *w) {
  if (w == NULL)
    return LUNA_EINVAL;
  if (w->closed)
    return LUNA_EALREADY;
  pool_close(w, true);
  /* the Pool value stays anchored until the state closes or pool:close()
     is called from Lua; it reads as closed */
  return 0;
}

LUNA_API void luna_workers_get_stats(luna_workers *w, luna_workers_stats *out) {
  if (out == NULL)
    return;
  memset(out, 0, sizeof *out);
  if (w == NULL)
    return;
  pthread_mutex_lock(&w->mu);
  *out = w->st;
  out->queued = atomic_load_explicit(&w->queued, memory_order_relaxed);
  out->running = w->running;
  pthread_mutex_unlock(&w->mu);
  { /* the loop thread's jobs not handed over yet (publish) count as queued */
    size_t n = atomic_load_explicit(&w->nlocal, memory_order_relaxed);
    out->queued += n;
    out->submitted += n;
  }
}

/* ---- the Lua side's primitives ------------------------------------------------------- */

static int l_pool_gc(lua_State *L);
static int l_pool_tostring(lua_State *L);
static int l_pool_close(lua_State *L);
static int l_pool_stats(lua_State *L);
static int l_job_gc(lua_State *L);
static int l_share_gc(lua_State *L);
static int l_share_tostring(lua_State *L);

static const luaL_Reg pool_methods[] = {
    {"close", l_pool_close}, {"stats", l_pool_stats}, {NULL, NULL}};

/* The Pool, job and Share metatables, made at the state's first use of
   the workers (not when the module opens: most states never use them). */
static void ensure_metatables(lua_State *L) {
  if (luaL_newmetatable(L, POOL_MT)) {
    lua_pushcfunction(L, l_pool_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_pool_tostring);
    lua_setfield(L, -2, "__tostring");
    luaL_newlib(L, pool_methods);
    lua_setfield(L, -2, "__index");
    luna__protect_metatable(L);
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, JOB_MT)) {
    lua_pushcfunction(L, l_job_gc);
    lua_setfield(L, -2, "__gc");
    luna__protect_metatable(L);
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, SHARE_MT)) {
    lua_pushcfunction(L, l_share_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_share_tostring);
    lua_setfield(L, -2, "__tostring");
    luna__protect_metatable(L);
  }
  lua_pop(L, 1);
}


static luna_workers *check_pool(lua_State *L, int idx, bool open) {
  pool_ud *ud = (pool_ud *)luaL_checkudata(L, idx, POOL_MT);
  if (ud->p == NULL || (open && ud->p->closed))
    luaL_error(L, "task.workers: " CLOSED_MSG);
  return ud->p;
}

static int l_pool_gc(lua_State *L) {
  pool_ud *ud = (pool_ud *)lua_touserdata(L, 1);
  luna_workers *p = ud->p;
  if (p == NULL)
    return 0;
  ud->p = NULL;
  pool_close(p, false);
  p->alive = false;
  pool_maybe_free(p);
  return 0;
}

/* pool:close(): see luna_workers_close. Idempotent. */
static int l_pool_close(lua_State *L) {
  luna_workers *p = check_pool(L, 1, false);
  pool_close(p, true);
  unanchor(L, 1);
  return 0;
}

/* pool:stats() -> table of the counters (luna_workers_stats). */
static int l_pool_stats(lua_State *L) {
  luna_workers *p = check_pool(L, 1, false);
  luna_workers_stats s;
  luna_workers_get_stats(p, &s);
  lua_createtable(L, 0, 11);
#define F(name) (lua_pushinteger(L, (lua_Integer)s.name), lua_setfield(L, -2, #name))
  F(threads);
  F(queued);
  F(running);
  F(submitted);
  F(completed);
  F(failed);
  F(dropped);
  F(waited);
  F(overflowed);
  F(recreated);
#undef F
  lua_pushinteger(L, (lua_Integer)p->cap);
  lua_setfield(L, -2, "queue");
  lua_pushboolean(L, p->closed);
  lua_setfield(L, -2, "closed");
  return 1;
}

static int l_pool_tostring(lua_State *L) {
  pool_ud *ud = (pool_ud *)luaL_checkudata(L, 1, POOL_MT);
  if (ud->p == NULL || ud->p->closed)
    lua_pushliteral(L, "Pool (closed)");
  else
    lua_pushfstring(L, "Pool (%d threads)", ud->p->nthreads);
  return 1;
}

static size_t field_size(lua_State *L, int opts, const char *name, size_t def) {
  lua_Integer v = 0;
  int t = lua_getfield(L, opts, name);
  if (t == LUA_TNIL) {
    lua_pop(L, 1);
    return def;
  }
  if (!lua_isinteger(L, -1) || (v = lua_tointeger(L, -1)) < 0)
    luaL_error(L, "task.workers: option '%s' must be a non-negative integer, got %s", name,
               t == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
  lua_pop(L, 1);
  return (size_t)v;
}

/* workers_new(opts | nil) -> Pool: task.workers{threads, queue, memory,
   instructions}. */
static int l_workers_new(lua_State *L) {
  static const char *const known[] = {"threads", "queue", "memory", "instructions", NULL};
  luna_workers_config c;
  int rc;
  memset(&c, 0, sizeof c);
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luna__check_options(L, 1, known);
    lua_getfield(L, 1, "threads");
    if (!lua_isnil(L, -1) && (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 ||
                              lua_tointeger(L, -1) > MAX_THREADS))
      return luaL_error(L, "task.workers: option 'threads' must be an integer 1..%d, got %s",
                        MAX_THREADS, luaL_tolstring(L, -1, NULL));
    c.threads = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    c.queue = field_size(L, 1, "queue", 0);
    c.memory_limit = field_size(L, 1, "memory", 0);
    c.instructions = field_size(L, 1, "instructions", 0);
    lua_settop(L, 1);
  }
  rc = luna_workers_new(L, &c, NULL);
  if (rc == LUNA_ENOMEM && lua_gettop(L) <= 1)
    return luaL_error(L, "not enough memory");
  if (rc != 0)
    return luaL_error(L, "task.workers: %s", lua_tostring(L, -1));
  return 1;
}

/* workers_default() -> Pool | nil */
static int l_workers_default(lua_State *L) {
  pool_ud *ud;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &default_key);
  ud = (pool_ud *)luaL_testudata(L, -1, POOL_MT);
  if (ud == NULL || ud->p == NULL || ud->p->closed)
    lua_pushnil(L);
  return 1;
}

typedef struct job_ud {
  job *j;
} job_ud;

static int l_job_gc(lua_State *L) {
  job_ud *ud = (job_ud *)lua_touserdata(L, 1);
  if (ud->j != NULL) {
    unpin_job(L, ud->j);
    job_free(ud->j);
    ud->j = NULL;
  }
  return 0;
}

static int hand_over(lua_State *L, luna_workers *p, job *j, job_ud *ud, int pool_idx);

/* nil and the message of a call on a closed pool: returned, for the Lua
   side to raise at the user's line. */
static int closed_refusal(lua_State *L) {
  lua_pushnil(L);
  lua_pushliteral(L, "task.workers: " CLOSED_MSG);
  return 2;
}

/* Takes j off p's pending list. */
static void unpend(luna_workers *p, job *j) {
  job **at = &p->pending;
  while (*at != j)
    at = &(*at)->next;
  *at = j->next;
  j->next = NULL;
}

/* Makes a job of kind `kind` for module.fn with the nargs values at L's
   index `first` as its arguments (copied now; `what` begins the messages
   of a refusal) and hands it to the pool as workers_submit does: pushes
   what hand_over pushes, or nil and the message of a refusal (for the
   caller to raise at the user's line). instr < 0: the pool's budget;
   det > 0: delivered det frames after this one; pool_idx: the Pool's
   index in L (a Job handle keeps it). */
static int prepare_job(lua_State *L, luna_workers *p, int kind, const char *mod, size_t mlen,
                       const char *fn, size_t flen, lua_Integer instr, lua_Integer det,
                       const char *what, int first, int nargs, int pool_idx) {
  job *j = job_take(p);
  if (j == NULL)
    return luaL_error(L, "not enough memory");
  /* pending until it is handed over or has a Job handle (a finalizer
     that runs during the copy may make a job of its own meanwhile) */
  j->next = p->pending;
  p->pending = j;
  if (mlen + flen + 2 <= sizeof j->names_in)
    j->names = j->names_in;
  else if ((j->names = (char *)malloc(mlen + flen + 2)) == NULL)
    return luaL_error(L, "not enough memory");
  memcpy(j->names, mod, mlen + 1);
  memcpy(j->names + mlen + 1, fn, flen + 1);
  j->fn = j->names + mlen + 1;
  j->pool = p;
  j->kind = (uint8_t)kind;
  j->instructions = instr < 0 ? p->instructions : (uint64_t)instr;
  if (det > 0 && kind != JOB_POST) {
    j->det = true;
    j->due = luna__loop_frame(p->loop) + (uint64_t)det;
  }
  j->seq = ++p->seq;
  if (encode_values(L, first, nargs, what, "argument %d", kind == JOB_MAP ? "items" : NULL, j, NULL,
                    &j->args, &j->args_len, &j->args_cap, &p->scratch,
                    &p->scratch_cap) != LUA_OK) {
    unpend(p, j);
    job_recycle(p, j);
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
  }
  if (p->closed) { /* a finalizer run by the pinning's allocations closed the pool */
    unpend(p, j);
    unpin_job(L, j);
    job_free(j);
    return closed_refusal(L);
  }
  return hand_over(L, p, j, NULL, pool_idx);
}

/* nil and "task.workers: the worker module's field <field> was changed
   (expected <expected>, got <type>)" for the field's value on top: a
   tampered module handle, refused at the user's line. */
static int field_refusal(lua_State *L, const char *field, const char *expected) {
  const char *got = luaL_typename(L, -1);
  lua_pushnil(L);
  lua_pushfstring(L, "task.workers: the worker module's field '%s' was changed (expected %s, got %s)",
                  field, expected, got);
  return 2;
}

/* The Module field whose name is at index `key` (read raw: no
   metamethod runs) as an integer >= `min`, or `dflt` when nil; false (the
   value left on top) otherwise. */
static bool opt_field(lua_State *L, int key, lua_Integer min, lua_Integer dflt, lua_Integer *out) {
  int isnum;
  lua_pushvalue(L, key);
  if (lua_rawget(L, 1) == LUA_TNIL) {
    *out = dflt;
    return true;
  }
  *out = lua_tointegerx(L, -1, &isnum);
  return isnum && lua_type(L, -1) == LUA_TNUMBER && *out >= min;
}

static const char *const kind_names[] = {"call", "post", "map", NULL};

/* The C path of ai:call (through l_module_call), ai:post and ai:map's
   chunks (workers.lua): a closure over the Module metatable and the kind
   (JOB_*):
   job(m, fn, ...) -> Promise | true (a post) | false, room, Job |
   nil, message (a refusal, for the caller to raise at the user's line) |
   nothing (m is not a Module or fn not a string: the caller raises the
   argument error). Reads the Module's fields raw (open made them: pool,
   name, and the two optional integers; a tampered one is refused), copies
   the arguments and hands the job over as workers_submit does. One C call
   where the Lua checks and an eight-argument primitive were: the loop
   thread's share of a pipelined empty job (W7) is mostly this and the
   delivery. */
static int job_core(lua_State *L) {
  int kind = (int)lua_tointeger(L, lua_upvalueindex(2));
  int nargs = lua_gettop(L) - 2;
  pool_ud *pu;
  size_t mlen, flen;
  const char *mod, *fn, *what;
  lua_Integer instr, det;
  char buf[80];
  if (nargs < 0 || !lua_getmetatable(L, 1))
    return 0;
  if (!lua_rawequal(L, -1, lua_upvalueindex(1)) || lua_type(L, 2) != LUA_TSTRING)
    return 0;
  lua_pop(L, 1);
  fn = lua_tolstring(L, 2, &flen);
  /* the fields stay on the stack above the arguments; the pool's first,
     at index nargs + 3 (a Job handle made by hand_over refers to it) */
  lua_pushvalue(L, lua_upvalueindex(4)); /* the keys are upvalues: no string is made */
  lua_rawget(L, 1);
  pu = (pool_ud *)lua_touserdata(L, -1);
  if (pu == NULL || !lua_getmetatable(L, -1))
    return field_refusal(L, "pool", "a worker pool");
  if (!lua_rawequal(L, -1, lua_upvalueindex(3))) {
    lua_pop(L, 1);
    return field_refusal(L, "pool", "a worker pool");
  }
  lua_pop(L, 1);
  lua_pushvalue(L, lua_upvalueindex(5));
  if (lua_rawget(L, 1) != LUA_TSTRING)
    return field_refusal(L, "name", "a string");
  mod = lua_tolstring(L, -1, &mlen);
  if (!opt_field(L, lua_upvalueindex(6), 0, -1, &instr))
    return field_refusal(L, "instructions", "an integer >= 0 or nil");
  if (!opt_field(L, lua_upvalueindex(7), 1, 0, &det))
    return field_refusal(L, "deliver_frame", "an integer >= 1 or nil");
  if (pu->p == NULL || pu->p->closed)
    return closed_refusal(L);
  {
    size_t klen = strlen(kind_names[kind]);
    if (mlen + klen + 2 <= sizeof buf) { /* "module:kind", no Lua string for the usual name */
      memcpy(buf, mod, mlen);
      buf[mlen] = ':';
      memcpy(buf + mlen + 1, kind_names[kind], klen + 1);
      what = buf;
    } else {
      what = lua_pushfstring(L, "%s:%s", mod, kind_names[kind]);
    }
  }
  return prepare_job(L, pu->p, kind, mod, mlen, fn, flen, instr, det, what, 3, nargs, nargs + 3);
}

static int l_workers_job(lua_State *L) {
  return job_core(L);
}

static int call_k(lua_State *L, int status, lua_KContext ctx) {
  (void)L;
  (void)status;
  (void)ctx;
  return 1;
}

/* ai:call itself (Methods.call of workers.lua): job_core's Promise, or,
   for anything else (back-pressure, a refusal, a bad argument), the Lua
   function in upvalue 8 called as slow(m, fn, job_core's results...),
   which awaits room or raises at the user's line, 3 levels up. The usual
   call then runs no Lua function of ours: a Lua Methods.call around the C
   path was a vararg call and return a job (W7 pipelined). */
static int l_module_call(lua_State *L) {
  int n = job_core(L), top = lua_gettop(L), i;
  if (n == 1 && lua_type(L, -1) == LUA_TUSERDATA)
    return 1;
  luaL_checkstack(L, n + 4, NULL);
  lua_pushvalue(L, lua_upvalueindex(8));
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  for (i = top - n + 1; i <= top; i++)
    lua_pushvalue(L, i);
  lua_callk(L, n + 2, 1, 0, call_k);
  return 1;
}

/* workers_job_for(Module, kind [, slow]) -> job: l_workers_job over that
   metatable for kind "call", "post" or "map" (upvalues: the Module
   metatable, the kind, the Pool metatable and the four field names); with
   `slow` (a function, kind "call"), l_module_call, which calls it for
   what is not a Promise. */
static int l_workers_job_for(lua_State *L) {
  int kind;
  bool slow;
  luaL_checktype(L, 1, LUA_TTABLE);
  kind = luaL_checkoption(L, 2, NULL, kind_names);
  slow = !lua_isnoneornil(L, 3);
  if (slow)
    luaL_checktype(L, 3, LUA_TFUNCTION);
  lua_settop(L, 3);
  lua_pushvalue(L, 1);
  lua_pushinteger(L, kind);
  ensure_metatables(L);
  luaL_getmetatable(L, POOL_MT);
  lua_pushliteral(L, "pool");
  lua_pushliteral(L, "name");
  lua_pushliteral(L, "instructions");
  lua_pushliteral(L, "deliver_frame");
  if (slow) {
    lua_pushvalue(L, 3);
    lua_pushcclosure(L, l_module_call, 8);
  } else {
    lua_pushcclosure(L, l_workers_job, 7);
  }
  return 1;
}

static void det_insert(luna_workers *p, job *j) {
  job **at = &p->det_head;
  while (*at != NULL && ((*at)->due < j->due || ((*at)->due == j->due && (*at)->seq < j->seq)))
    at = &(*at)->det_next;
  j->det_next = *at;
  *at = j;
}

/* workers_submit(job) -> Promise | true (a post) | false, room, job |
   nil, message (the pool was closed meanwhile): hands a job that waited
   for room to the pool again. */
static int l_workers_submit(lua_State *L) {
  job_ud *ud = (job_ud *)luaL_checkudata(L, 1, JOB_MT);
  job *j = ud->j;
  if (j == NULL)
    return luaL_error(L, "task.workers: the job was submitted already");
  if (j->pool->closed)
    return closed_refusal(L);
  return hand_over(L, j->pool, j, ud, 0);
}

/* Records the loop thread's CPU for on_loop_cpu: stored only when it
   changed, so the line the polling workers read stays shared. */
static void note_loop_cpu(luna_workers *p) {
  int cpu = current_cpu();
  if (atomic_load_explicit(&p->loop_cpu, memory_order_relaxed) != cpu)
    atomic_store_explicit(&p->loop_cpu, cpu, memory_order_relaxed);
}

/* Wakes a sleeping worker for jobs whose wake-up hand_over put off, if
   one is still needed. Loop thread, at the end of a delivery. */
static void flush_wake(luna_workers *p) {
  bool wake;
  if (p->deferred == 0)
    return;
  p->deferred = 0;
  pthread_mutex_lock(&p->mu);
  wake = p->sleeping > 0 && atomic_load_explicit(&p->queued, memory_order_relaxed) > 0;
  pthread_mutex_unlock(&p->mu);
  if (wake)
    pthread_cond_signal(&p->work_cv);
}

/* Whether a job just queued should wake a sleeping worker (under mu). A
   polling worker takes a job without a signal (wait_for_work), so only
   the jobs the polling ones leave count; and while jobs are short (their
   moving average under WAKE_WORTH_NS) a running worker is about to poll
   too, so the awake workers (polling or running) are left up to
   WAKE_DEPTH queued jobs each before a sleeper is woken. Waking costs the
   loop thread a futex call, and the woken thread then competes for the
   cores with the loop thread and the awake worker: on 2 cores with 2
   workers it was woken for most pipelined empty jobs (performance.md, W7
   run 8). Long jobs keep the old rule (wake for every job no polling
   worker takes), so a burst of them still spreads over every worker. */
static bool should_wake(luna_workers *p) {
  size_t q = atomic_load_explicit(&p->queued, memory_order_relaxed);
  size_t polling = (size_t)p->spinning;
  if (p->sleeping == 0 || q <= polling)
    return false;
  if (p->job_ns >= WAKE_WORTH_NS || q > (polling + p->running) * WAKE_DEPTH)
    return true;
  if (p->running == 0)
    return q > polling * WAKE_DEPTH;
  /* a running job counts as about to end only if one began lately: one
     that has run for WAKE_WORTH_NS already may be long, whatever the
     average says */
  return monotonic_ns() - p->took_ns >= WAKE_WORTH_NS;
}

/* Hands j to the pool: -> Promise | true (a post), or, when the queue is
   full and the caller is a task that may await, nothing is queued and it
   returns false, a Promise `room` to await before trying again, and the
   Job handle (ud, or a new one holding j). j is the pool's pending job
   (ud NULL) or ud's. */
static int hand_over(lua_State *L, luna_workers *p, job *j, job_ud *ud, int pool_idx) {
  luna_promise *pr = NULL;
  bool full, can_wait, ring;
  int rc;
  /* only the task's own thread may await: a plain coroutine inside a task
     (or any other caller) queues past the limit */
  can_wait = p->b->current != NULL && p->b->current->co == L && lua_isyieldable(L);
  full = atomic_load_explicit(&p->queued, memory_order_relaxed) +
             atomic_load_explicit(&p->nlocal, memory_order_relaxed) >=
         p->cap;
  if (full && can_wait) {
    if (ud == NULL) {
      /* the handle keeps the Pool (its user value): the job refers to it */
      ud = (job_ud *)lua_newuserdatauv(L, sizeof *ud, 1);
      ud->j = NULL;
      luaL_setmetatable(L, JOB_MT);
      lua_pushvalue(L, pool_idx);
      lua_setiuservalue(L, -2, 1);
      ud->j = j;
      unpend(p, j);
    } else {
      lua_pushvalue(L, 1);
    }
    if (p->nroom == p->room_cap && p->room_head > 0) { /* slide the waiting ones down */
      memmove(p->room, p->room + p->room_head, (p->nroom - p->room_head) * sizeof *p->room);
      p->nroom -= p->room_head;
      p->room_head = 0;
    }
    if (p->nroom == p->room_cap) {
      size_t cap = p->room_cap ? p->room_cap * 2 : 8;
      luna_promise **a = (luna_promise **)realloc(p->room, cap * sizeof *a);
      if (a == NULL)
        return luaL_error(L, "not enough memory");
      p->room = a;
      p->room_cap = cap;
    }
    rc = luna__promise_new_cached(L, p->b, LUNA_UPDATE, &p->hub_cache, &pr);
    if (rc != 0)
      return luaL_error(L, "task.workers: cannot wait for room: %s", luna_strerror(rc));
    if (p->closed) { /* a finalizer run by the allocations closed the pool */
      luna_promise_release(pr);
      return closed_refusal(L); /* (the handle frees the job) */
    }
    p->room[p->nroom++] = pr;
    pthread_mutex_lock(&p->mu);
    p->room_wanted = true;
    p->st.waited++;
    /* A worker may have taken a job since `full` was read, before it could
       see room_wanted: then nobody rings for this wait, and it would last
       until some job ends (for ever behind a job that waits on this task).
       Seen under the mutex, that room is rung for here. */
    ring = atomic_load_explicit(&p->queued, memory_order_relaxed) +
                   atomic_load_explicit(&p->nlocal, memory_order_relaxed) <
               p->cap &&
           !p->bell;
    if (ring)
      p->bell = true;
    pthread_mutex_unlock(&p->mu);
    if (ring && luna_post(p->loop, LUNA_UPDATE, bell_cb, p) != 0) {
      pthread_mutex_lock(&p->mu);
      p->bell = false; /* out of memory: the next job taken or ended rings */
      pthread_mutex_unlock(&p->mu);
    }
    lua_pushboolean(L, 0);
    lua_rotate(L, -3, 1); /* false, job, room */
    lua_insert(L, -2);    /* false, room, job */
    return 3;
  }
  if (j->kind != JOB_POST) {
    rc = luna__promise_new_cached(L, p->b, LUNA_UPDATE, &p->hub_cache, &pr);
    if (rc != 0)
      return luaL_error(L, "task.workers: cannot make the promise: %s", luna_strerror(rc));
    if (p->closed) { /* a finalizer run by the allocation closed the pool */
      luna_promise_release(pr);
      if (ud == NULL) {
        unpend(p, j);
        unpin_job(L, j);
        job_free(j);
      } /* (else the handle frees it) */
      return closed_refusal(L);
    }
    j->promise = pr;
  } else {
    lua_pushboolean(L, 1);
  }
  if (j->det) {
    /* the loop's list holds it too (it is freed by the delivery) */
    det_insert(p, j);
    if (det_arm(p) != 0) {
      job **at = &p->det_head;
      while (*at != j)
        at = &(*at)->det_next;
      *at = j->det_next;
      j->promise = NULL;
      luna_promise_release(pr);
      return luaL_error(L, "not enough memory");
    }
  }
  if (ud != NULL)
    ud->j = NULL;
  else
    unpend(p, j);
  if (full)
    p->overflowed++;
  j->next = NULL;
  if (p->ltail != NULL)
    p->ltail->next = j;
  else
    p->lhead = j;
  p->ltail = j;
  {
    size_t n = atomic_load_explicit(&p->nlocal, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->nlocal, n, memory_order_relaxed);
    /* A task that a delivery resumed (it usually makes more calls before
       it yields) keeps its jobs here while the workers have some queued,
       and hands them over together: one lock for up to LOCAL_BATCH jobs
       instead of one each, the lock the worker taking jobs out holds as
       often (W7 pipelined: a fifth of the loop thread's time was
       pthread_mutex_lock and unlock). They go at once when the queue is
       empty (a worker may be polling for them), when the batch is full,
       and at the delivery's end (after the task yielded). */
    if (p->delivering > 0 && n < LOCAL_BATCH &&
        atomic_load_explicit(&p->queued, memory_order_relaxed) > 0)
      return 1;
  }
  publish(p);
  return 1;
}

/* Hands the loop's local jobs (hand_over) to the workers under one lock,
   waking one if should_wake says so, or leaving that to the delivery's
   end (flush_wake) for a task that it resumed. Loop thread. */
static void publish(luna_workers *p) {
  size_t n = atomic_load_explicit(&p->nlocal, memory_order_relaxed);
  bool wake;
  if (n == 0)
    return;
  note_loop_cpu(p);
  pthread_mutex_lock(&p->mu);
  if (p->qtail != NULL)
    p->qtail->next = p->lhead;
  else
    p->qhead = p->lhead;
  p->qtail = p->ltail;
  atomic_fetch_add_explicit(&p->queued, n, memory_order_relaxed);
  p->st.submitted += n;
  p->st.overflowed += p->overflowed;
  wake = should_wake(p);
  pthread_mutex_unlock(&p->mu);
  p->lhead = p->ltail = NULL;
  p->overflowed = 0;
  atomic_store_explicit(&p->nlocal, 0, memory_order_relaxed);
  if (wake && p->delivering > 0 && p->deferred + n < WAKE_BATCH) {
    /* A task that a delivery resumed usually makes more calls before it
       yields (W7 pipelined: 256): waking now and again for each job that
       the woken worker, faster than the calls, keeps catching up with
       costs a futex call and two context switches a job when the worker
       shares the loop thread's CPU (a loaded machine); the delivery wakes
       it once when the task yielded (flush_wake), or the WAKE_BATCH-th
       such job does. The jobs are queued already: a worker that polls or
       ends a job takes them meanwhile. */
    p->deferred += n;
    wake = false;
  } else if (wake) {
    p->deferred = 0;
  }
  /* after the unlock: the woken worker's first act is to take mu, which
     it would otherwise find held (a futex wait and wake more) */
  if (wake)
    pthread_cond_signal(&p->work_cv);
}

/* ---- shares (loop side) ---------------------------------------------------------------- */

static int l_share_gc(lua_State *L) {
  share **sp = (share **)lua_touserdata(L, 1);
  if (*sp != NULL) {
    share_unuse(*sp);
    *sp = NULL;
  }
  return 0;
}

static int l_share_tostring(lua_State *L) {
  share **sp = (share **)luaL_checkudata(L, 1, SHARE_MT);
  lua_pushfstring(L, "Share (%I bytes)", (lua_Integer)(*sp != NULL ? (*sp)->len : 0));
  return 1;
}

/* workers_share(value) -> Share | nil, message */
static int l_workers_share(lua_State *L) {
  share **sp;
  share *s;
  char *data;
  size_t len;
  luaL_checkany(L, 1);
  lua_settop(L, 1);
  ensure_metatables(L);
  sp = (share **)lua_newuserdatauv(L, sizeof *sp, 0);
  *sp = NULL;
  luaL_setmetatable(L, SHARE_MT);
  {
    luna__copy_opts o;
    memset(&o, 0, sizeof o);
    o.limit = UINT32_MAX;
    o.what = "task.workers.share";
    o.context = "between states";
    o.root = "value";
    if (luna__copy_encode_opts(L, 1, &o) != LUA_OK) {
      free(o.buf);
      lua_pushnil(L);
      lua_insert(L, -2);
      return 2;
    }
    data = o.buf;
    len = o.len;
  }
  s = (share *)malloc(sizeof *s);
  if (s == NULL) {
    free(data);
    return luaL_error(L, "not enough memory");
  }
  atomic_init(&s->refs, 1);
  atomic_init(&s->users, 1);
  s->data = data;
  s->len = len;
  *sp = s;
  return 1;
}

/* ---- registration ------------------------------------------------------------------------ */

/* task.workers before first use: a stub whose first use runs
   lua/lunaloop/workers.lua (which replaces module.workers by the real
   table); a stub kept by the caller forwards to it. */
static const char real_key = 'R';

/* Pushes the real task.workers table, running workers.lua first if it has
   not run in this state (module: the module table's index). */
static void push_real_of(lua_State *L, int module) {
  module = lua_absindex(L, module);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &real_key) == LUA_TTABLE)
    return;
  lua_pop(L, 1);
  luna__run_lazy_chunk(L, "=lunaloop/workers.lua");
  lua_getfield(L, module, "workers");
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &real_key);
}

static void push_real(lua_State *L) { push_real_of(L, lua_upvalueindex(1)); }

/* A pool made from C before any script used task.workers: its methods
   (pool:open) come from workers.lua. */
static void ensure_lua_side(lua_State *L, luna__binding *b) {
  int top = lua_gettop(L);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &real_key) != LUA_TTABLE) {
    luna__open_module(L, b);
    push_real_of(L, -1);
  }
  lua_settop(L, top);
}

static int l_stub_index(lua_State *L) {
  push_real(L);
  lua_pushvalue(L, 2);
  lua_gettable(L, -2);
  return 1;
}

static int l_stub_call(lua_State *L) {
  int n = lua_gettop(L) - 1;
  push_real(L);
  lua_replace(L, 1);
  lua_call(L, n, LUA_MULTRET);
  return lua_gettop(L);
}

void luna__open_workers(lua_State *L) {
  int module = lua_absindex(L, -1);
  /* module.workers: the stub (lazy_chunks of internal.c) */
  lua_newtable(L);
  lua_createtable(L, 0, 4);
  lua_pushvalue(L, module);
  lua_pushcclosure(L, l_stub_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushvalue(L, module);
  lua_pushcclosure(L, l_stub_call, 1);
  lua_setfield(L, -2, "__call");
  lua_pushliteral(L, "lunaloop.workers");
  lua_setfield(L, -2, "__name");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_setfield(L, module, "workers");
}

/* workers_pool_methods() -> the Pool's methods table (workers.lua adds open) */
static int l_workers_pool_methods(lua_State *L) {
  ensure_metatables(L);
  luaL_getmetatable(L, POOL_MT);
  lua_getfield(L, -1, "__index");
  return 1;
}

const luaL_Reg luna__workers_internals[] = {
    {"workers_pool_methods", l_workers_pool_methods},
    {"workers_new", l_workers_new},         {"workers_default", l_workers_default},
    {"workers_job_for", l_workers_job_for}, {"workers_submit", l_workers_submit},
    {"workers_share", l_workers_share},     {NULL, NULL}};
