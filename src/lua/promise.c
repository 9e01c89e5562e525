/*
** promise.c: promises, a host job's result completed from any thread and
** awaited by Lua tasks (include/lunaloop/promise.h is the contract).
**
** Two halves meet here:
** - The C side (struct luna_promise) is shared with the host's threads. It
**   holds an atomic reference count, one atomic state word (completed, given
**   up by Lua, cancel callback running / called: every decision between a
**   completer and the loop thread is one compare-and-swap on it) and the
**   payload of the completion. A completion travels to the loop thread as
**   one luna_post of deliver_cb.
** - The Lua side (luna__pud, the Promise userdata) lives in one Lua state
**   and is touched on the loop thread only. It keeps the outcome once it
**   arrived (user value 1: a packed table of values, or the error) and the
**   tasks awaiting it in order (user value 2: an array of Tasks).
**
** Invariants:
** - pud->p and p->ud point at each other exactly while the Lua side waits
**   for the result (status PENDING and not given up); then the Lua side
**   holds one reference. Settling or giving up breaks both links first
**   ("let go") and drops that reference, so a late delivery or completion
**   finds p->ud == NULL and only frees its payload.
** - A task awaiting a promise waits with W_EXTERNAL and is listed in user
**   value 2. Every way it leaves the wait resumes its coroutine through
**   await_k (a delivery wakes it after unlisting it; a cancellation or a
**   scope interrupt resumes it while still listed), so await_k tells the
**   two apart by whether the task was still listed.
** - Delivery wakes with luna__wake and pumps once at the end, so awaiters
**   resume in the order they began awaiting, within the same run.
** - A per-state hub (registry) lists the pending Lua sides, so that
**   luna_loop_reset and luna_loop_free give them up, and maps each luna__pud
**   to its userdata through a weak table (a delivery must find the value
**   without keeping it alive: an unreachable Promise may be collected).
*/
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "list.h"
#include "lunaloop_lua.h"
#include "promise.h"

/* ---- the shared C side ----------------------------------------------------- */

/* Written when the promise is created and when it is freed, so that a call
   on a freed promise usually fails with LUNA_EINVAL instead of going on. */
#define PROMISE_MAGIC UINT32_C(0x6c50726f) /* "lPro" */
#define PROMISE_DEAD UINT32_C(0x64656164)  /* "dead" */

/* The bits of luna_promise.state. */
enum {
  ST_COMPLETED = 1, /* a completer claimed the completion */
  ST_GIVEN_UP = 2,  /* Lua let go without wanting the result any more */
  ST_CALLING = 4,   /* the cancel callback is running (on the loop thread) */
  ST_CALLED = 8     /* the cancel callback was called (it runs at most once) */
};

typedef struct luna__pud luna__pud;

struct luna_promise {
  uint32_t magic;
  _Atomic(uint32_t) refs;  /* host references, the Lua side, an undelivered post */
  _Atomic(unsigned) state; /* ST_* bits */
  luna_loop *loop;         /* immutable after creation */
  uint8_t timing;          /* immutable: where deliver_cb runs */
  /* The thread running the cancel callback: written before ST_CALLING is
     set (release), read by completers that saw ST_CALLING (acquire), so a
     callback that completes its own promise is not made to wait for itself. */
  pthread_t cb_thread;
  /* The payload: written by the completer that claimed the completion,
     read by the loop thread after the post (the inbox's release/acquire
     pair orders them), or by the completer itself when it discards. */
  bool reject;
  luna_promise_push_fn push;
  void *data;
  luna_promise_free_fn free_data;
  char *message; /* reject: a malloc'd copy */
  /* Loop thread only. */
  luna__pud *ud; /* the Lua side while it waits for the result, or NULL */
  luna_promise_cancel_fn on_cancel;
  void *cancel_ud;
};

/* Relaxed: a statistic for tests; nothing is published through it. */
static _Atomic(long) live_promises;

long luna__promise_live_count(void) {
  return atomic_load_explicit(&live_promises, memory_order_relaxed);
}

static bool valid(const luna_promise *p) {
  return p != NULL && p->magic == PROMISE_MAGIC;
}

/* Freed C blocks kept by the thread that let go of them last, for its next
   promise: a call of the worker pool made one and freed one per job (the
   free usually on the loop thread, which makes the next), and with 256 in
   flight glibc's per-thread cache (7 blocks a size) overflowed into its
   slower bins (W7: about 300 instructions a job in malloc and free). At
   most SPARE_BLOCKS a thread; a thread's spares are freed when it exits
   (spare_key's destructor); the main thread's stay reachable until the
   process exits. Under AddressSanitizer every block is freed, so a use of
   a freed promise is still caught. */
#if defined(__SANITIZE_ADDRESS__)
#define SPARE_BLOCKS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPARE_BLOCKS 0
#endif
#endif
#ifndef SPARE_BLOCKS
#define SPARE_BLOCKS 256
#endif

static _Thread_local luna_promise *spare_blocks; /* linked through ->data */
static _Thread_local unsigned nspare_blocks;
static _Thread_local bool spare_registered;
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static bool spare_key_made;

static void free_spares(void *unused) {
  (void)unused;
  while (spare_blocks != NULL) {
    luna_promise *p = spare_blocks;
    spare_blocks = (luna_promise *)p->data;
    free(p);
  }
  nspare_blocks = 0;
}

static void make_spare_key(void) {
  spare_key_made = pthread_key_create(&spare_key, free_spares) == 0;
}

/* Keeps the block p, no longer used, for this thread's next promise;
   false when it is to be freed instead. */
static bool keep_block(luna_promise *p) {
  if (nspare_blocks >= SPARE_BLOCKS)
    return false;
  if (!spare_registered) { /* the key's value makes its destructor run at exit */
    pthread_once(&spare_once, make_spare_key);
    if (!spare_key_made || pthread_setspecific(spare_key, &spare_registered) != 0)
      return false;
    spare_registered = true;
  }
  p->data = spare_blocks;
  spare_blocks = p;
  nspare_blocks++;
  return true;
}

/* A zeroed block: a spare one of this thread, or a new one. */
static luna_promise *new_block(void) {
  luna_promise *p = spare_blocks;
  if (p == NULL)
    return (luna_promise *)calloc(1, sizeof *p);
  spare_blocks = (luna_promise *)p->data;
  nspare_blocks--;
  memset(p, 0, sizeof *p);
  return p;
}

static void release(luna_promise *p) {
  /* Release: this holder's writes to *p happen before the free. Acquire:
     the holder that frees sees every other holder's writes. (An acq_rel
     read-modify-write rather than a separate fence, which ThreadSanitizer
     does not model.) */
  if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
    return;
  p->magic = PROMISE_DEAD;
  free(p->message);
  p->message = NULL;
  if (!keep_block(p))
    free(p);
  atomic_fetch_sub_explicit(&live_promises, 1, memory_order_relaxed);
}

/* Frees the payload of a completion (the data through its free callback). */
static void discard_payload(luna_promise *p) {
  luna_promise_free_fn free_data = p->free_data;
  void *data = p->data;
  p->push = NULL;
  p->data = NULL;
  p->free_data = NULL;
  free(p->message);
  p->message = NULL;
  if (free_data != NULL)
    free_data(data);
}

static void deliver_cb(luna_loop *loop, void *arg);

/* Claims the completion: returns the state bits it found (without
   ST_COMPLETED), or -1 when the promise was already completed. A cancel
   callback running on another thread is waited for (it is short by
   contract), so that once a completion returned, the callback is neither
   running nor going to run: the host may then free what the callback uses.
   A callback that completes its own promise does not wait for itself. */
static long claim(luna_promise *p) {
  unsigned s = atomic_load_explicit(&p->state, memory_order_acquire);
  for (;;) {
    if (s & ST_COMPLETED)
      return -1;
    if ((s & ST_CALLING) && !pthread_equal(p->cb_thread, pthread_self())) {
      sched_yield();
      s = atomic_load_explicit(&p->state, memory_order_acquire);
      continue;
    }
    /* Acq_rel: acquire pairs with let_go's release (the callback's effects
       and cb_thread are visible); release orders nothing yet (the payload
       is published by the post). Acquire on failure: s is re-examined. */
    if (atomic_compare_exchange_weak_explicit(&p->state, &s, s | ST_COMPLETED,
                                              memory_order_acq_rel, memory_order_acquire))
      return (long)s;
  }
}

/* Sends a claimed completion (payload filled in) to the loop thread, or,
   when Lua had already given the promise up (`found` has ST_GIVEN_UP),
   frees its payload right here. 0, or LUNA_ENOMEM: then the claim is undone
   and the payload fields are cleared (the caller still owns the data). */
static int publish(luna_promise *p, unsigned found) {
  int rc;
  if (found & ST_GIVEN_UP) {
    discard_payload(p);
    return 0;
  }
  /* Relaxed: the caller holds a reference, so the count cannot reach zero
     meanwhile; the post itself publishes the promise to the loop thread. */
  atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
  rc = luna_post(p->loop, (luna_timing)p->timing, deliver_cb, p);
  if (rc == 0)
    return 0;
  atomic_fetch_sub_explicit(&p->refs, 1, memory_order_relaxed);
  p->push = NULL;
  p->data = NULL;
  p->free_data = NULL;
  p->message = NULL;
  p->reject = false;
  /* Release: the cleared fields are written before the next claim can
     succeed and write them again. */
  atomic_fetch_and_explicit(&p->state, ~(unsigned)ST_COMPLETED, memory_order_release);
  return rc;
}

/* ---- the Lua side ------------------------------------------------------------ */

typedef enum pstatus { P_PENDING, P_DONE, P_FAILED, P_CANCELLED } pstatus;

typedef struct hub hub;

struct luna__pud {
  luna_promise *p;  /* while waiting for the result; NULL once let go */
  luna__binding *b;
  hub *hub;
  lua_Integer slot; /* its index in the hub's weak table while p is set */
  uint8_t status;   /* pstatus */
  uint8_t shape;    /* P_DONE: how uservalue 1 holds the values (SHAPE_*) */
  uint32_t ndirect; /* tasks in task.await(p), not combinator watchers */
  luna__pud *prev, *next; /* the hub's pending list */
};

/* One per Lua state, created with its first promise, finalized when the
   state closes (after the promises, which are younger). */
struct hub {
  luna__binding *b;
  luna_loop *loop; /* whose listener we are; NULL once it was freed */
  luna__pud *first, *last;
  /* registry references (luaL_ref) to the weak table of Promise values
     and to the Promise metatable: an integer key is the registry's array
     part, where making a promise looked both up by hashed keys */
  int weak_ref, mt_ref, settled_ref;
  /* A pending Promise is the weak table's value at its pud's slot, an
     integer key in the array part: a hashed key (the pud's address) cost
     a new hash node per promise, and the table's rehashes as dead ones
     piled up (W7: about 550 instructions of a 2,000-instruction promise).
     A slot is free again once its Lua side let go (let_go), kept in
     free_slots, whose room is reserved as each new slot is numbered, so
     freeing one never allocates. */
  lua_Integer *free_slots;
  size_t nfree, nslots, slots_cap;
  bool gone; /* finalized (the state closes): no new promise */
};

/* Registry keys: the addresses are unique in the process. */
static const char hub_key = 'H';
static const char settled_key = 'S'; /* the settled Promises' metatable */

/* ---- checked accessors ------------------------------------------------------------ */

/* Both Promise metatables (pending and settled, open_metatable) hold the
   address of this static as a light userdata at the integer key
   PROMISE_MARK_KEY (the same address: unique to this copy of the library
   in the process): the type check is a metatable and one lookup of an
   integer in it, where luaL_testudata looked the metatable up in the
   registry by name (a third of an await of a settled promise) and a
   pointer key cost Lua's generic lookup (~170 instructions, twice an
   await of a worker's Promise). */
static const char promise_marker = 'P';
#define PROMISE_MARK_KEY ((lua_Integer)(uintptr_t)&promise_marker)

static luna__pud *test_pud(lua_State *L, int idx) {
  void *ud = lua_touserdata(L, idx);
  bool is;
  if (ud == NULL || lua_type(L, idx) != LUA_TUSERDATA || !lua_getmetatable(L, idx))
    return NULL;
  is = lua_rawgeti(L, -1, PROMISE_MARK_KEY) == LUA_TLIGHTUSERDATA &&
       lua_touserdata(L, -1) == (void *)&promise_marker;
  lua_pop(L, 2);
  return is ? (luna__pud *)ud : NULL;
}

bool luna__is_promise(lua_State *L, int idx) {
  return test_pud(L, idx) != NULL;
}

bool luna__promise_may_settle(lua_State *L, int idx) {
  luna__pud *pud = test_pud(L, idx);
  if (pud == NULL)
    return false;
  if (pud->status != P_PENDING)
    return true;
  if (pud->p == NULL)
    return false; /* given up: nothing will deliver */
  /* Acquire, as the completers' releases: a completion claimed is seen
     with its post, whose reference keeps the count above 1 until it is
     delivered on this thread. */
  return atomic_load_explicit(&pud->p->refs, memory_order_acquire) > 1 ||
         (atomic_load_explicit(&pud->p->state, memory_order_acquire) & ST_COMPLETED) != 0;
}

static luna__pud *check_pud(lua_State *L, int idx) {
  luna__pud *pud = test_pud(L, idx);
  if (pud == NULL)
    luaL_typeerror(L, idx, LUNA__PROMISE_MT);
  return pud;
}

static const char *status_name(const luna__pud *pud) {
  static const char *const names[] = {"pending", "done", "failed", "cancelled"};
  return names[pud->status];
}

/* ---- settling ------------------------------------------------------------------ */

/* Marks p given up (loop thread) and runs its cancel callback, once, if
   one is registered and no completion was claimed first. */
static void give_up_c(luna_promise *p) {
  unsigned s = atomic_load_explicit(&p->state, memory_order_relaxed), n;
  bool call;
  /* Written only while no callback was ever called, so never while a
     completer may be reading it (they read it only while ST_CALLING). */
  if (!(s & (ST_COMPLETED | ST_CALLED)) && p->on_cancel != NULL)
    p->cb_thread = pthread_self();
  do {
    call = !(s & (ST_COMPLETED | ST_CALLED)) && p->on_cancel != NULL;
    n = s | ST_GIVEN_UP | (call ? ST_CALLING | ST_CALLED : 0u);
    /* Release: cb_thread is visible to a completer that sees ST_CALLING.
       Relaxed on failure: only the bits are re-examined. */
  } while (!atomic_compare_exchange_weak_explicit(&p->state, &s, n, memory_order_acq_rel,
                                                  memory_order_relaxed));
  if (!call)
    return;
  p->on_cancel(p, p->cancel_ud);
  /* Release: what the callback did happens before a waiting completer
     (which acquires the state) goes on. */
  atomic_fetch_and_explicit(&p->state, ~(unsigned)ST_CALLING, memory_order_release);
}

/* Lets go of the C side: breaks the links, drops the Lua side's reference.
   With tell_host (Lua gives up without the result): marks it given up and
   runs the host's cancel callback unless a completion was already claimed. */
static void let_go(luna__pud *pud, bool tell_host) {
  luna_promise *p = pud->p;
  if (p == NULL)
    return;
  LUNA__LIST_UNLINK(&pud->hub->first, &pud->hub->last, pud);
  pud->hub->free_slots[pud->hub->nfree++] = pud->slot;
  pud->p = NULL;
  p->ud = NULL;
  if (tell_host)
    give_up_c(p);
  release(p);
}

/* Pushes the Promise value of pud, or returns false (nothing pushed) when
   it is unreachable and being collected. */
static bool push_ud(lua_State *L, luna__pud *pud) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, pud->hub->weak_ref);
  lua_rawgeti(L, -1, pud->slot);
  lua_remove(L, -2);
  if (lua_touserdata(L, -1) != pud) { /* collected (nil) */
    lua_pop(L, 1);
    return false;
  }
  return true;
}

/* How a fulfilled Promise keeps its values in uservalue 1: a table with n
   (any count), the one value itself, or nothing (no values): the usual
   one or none cost no table. */
enum { SHAPE_TABLE, SHAPE_ONE, SHAPE_NONE };

/* Pushes what awaiting a settled promise gives: its values (returns their
   count) or its error (returns 1). */
static int push_outcome(lua_State *L, int ud, luna__pud *pud) {
  lua_Integer i, n;
  if (pud->status == P_CANCELLED) {
    luna__push_cancel_error(L);
    return 1;
  }
  if (pud->status == P_DONE && pud->shape == SHAPE_NONE)
    return 0;
  lua_getiuservalue(L, ud, 1);
  if (pud->status == P_FAILED || pud->shape == SHAPE_ONE)
    return 1;
  lua_getfield(L, -1, "n");
  n = lua_tointeger(L, -1);
  lua_pop(L, 1);
  luaL_checkstack(L, (int)n + 1, "too many results");
  for (i = 1; i <= n; i++)
    lua_rawgeti(L, -(int)i, i);
  lua_remove(L, -(int)n - 1);
  return (int)n;
}

/* Wakes every task listed as awaiting the settled promise at `ud`, in the
   order they began awaiting, with copies of its outcome, and empties the
   list. A listed task that is not waiting any more (a scope interrupt
   already woke it) is skipped: its await_k raises what it was woken with.
   With memerr, each gets the memory error instead, which needs no memory:
   for when copying the outcome could not be done. */
static void wake_waiters(lua_State *L, int ud, luna__pud *pud, bool memerr) {
  luna__binding *b = pud->b;
  lua_Integer i, n;
  int list, type = lua_getiuservalue(L, ud, 2);
  if (type == LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  list = lua_gettop(L);
  n = type == LUA_TTABLE ? (lua_Integer)lua_rawlen(L, list) : 1; /* else one task itself */
  for (i = 1; i <= n; i++) {
    luna__task *t;
    if (type == LUA_TTABLE)
      lua_rawgeti(L, list, i);
    else
      lua_pushvalue(L, list);
    t = luna__test_task(L, -1);
    lua_pop(L, 1);
    if (t != NULL && t->state == LUNA__SUSPENDED && t->wait == LUNA__W_EXTERNAL) {
      if (memerr) {
        LUNA__PUSH_MEMERR(L);
        luna__wake(b, t, L, 1, true);
      } else {
        int nv = push_outcome(L, ud, pud);
        luna__wake(b, t, L, nv, pud->status != P_DONE);
      }
    }
  }
  lua_pop(L, 1);
  lua_pushnil(L);
  lua_setiuservalue(L, ud, 2);
}

/* Lua gives up the pending promise at `ud`: it is cancelled, the host is
   told, its awaiters get the cancellation error (the caller pumps). */
static void give_up(lua_State *L, int ud, luna__pud *pud) {
  if (pud->status != P_PENDING)
    return;
  pud->status = P_CANCELLED;
  let_go(pud, true);
  wake_waiters(L, ud, pud, false);
}

/* wake_waiters in protected mode: (Promise userdata, pud). */
static int wake_protected(lua_State *L) {
  wake_waiters(L, 1, (luna__pud *)lua_touserdata(L, 2), false);
  return 0;
}

/* Builds the outcome of a completion, in protected mode: (p) -> the
   rejection's message, or the values the host's push callback pushed as
   SHAPE_* says, and that shape. Raises what the push callback raised, or a memory error:
   either is then the outcome, a failure. */
static int build_outcome(lua_State *L) {
  luna_promise *p = (luna_promise *)lua_touserdata(L, 1);
  int i, n = 0;
  lua_settop(L, 1);
  if (p->reject) {
    lua_pushstring(L, p->message);
    lua_pushinteger(L, SHAPE_TABLE);
    return 2;
  }
  if (p->push != NULL) {
    n = p->push(L, p->data);
    if (n < 0 || n > lua_gettop(L) - 1)
      return luaL_error(L, "promise push callback returned %d but pushed %d values", n,
                        lua_gettop(L) - 1);
    lua_settop(L, n + 1);
  }
  if (n <= 1) {
    if (n == 0)
      lua_pushnil(L);
    lua_pushinteger(L, n == 0 ? SHAPE_NONE : SHAPE_ONE);
    return 2;
  }
  lua_createtable(L, n, 1);
  lua_insert(L, 2);
  for (i = n; i >= 1; i--)
    lua_rawseti(L, 2, i);
  lua_pushinteger(L, n);
  lua_setfield(L, 2, "n");
  lua_settop(L, 2);
  lua_pushinteger(L, SHAPE_TABLE);
  return 2;
}

/* The completion arrived (loop thread, at the promise's timing): store the
   outcome in the Promise, free the payload, wake the awaiters. This runs
   in a loop callback, outside any protected call: what allocates (building
   the outcome, copying it to each awaiter) runs in protected calls; the
   awaiters a failed copy left waiting get the memory error. */
static void settle(luna__pud *pud) {
  luna_promise *p = pud->p;
  lua_State *L = luna__exec_state(pud->b);
  int top = lua_gettop(L), ud, st;
  bool room = lua_checkstack(L, 8) != 0;
  if (!push_ud(L, pud)) {
    /* Unreachable, finalizer pending: its __gc lets go of the C side. */
    discard_payload(p);
    return;
  }
  ud = lua_gettop(L);
  if (!p->reject && p->push == NULL) {
    /* no values (the usual worker job that returns nothing): nothing to
       build, so nothing that could raise, and no protected call */
    pud->status = P_DONE;
    pud->shape = SHAPE_NONE;
    lua_pushnil(L);
  } else {
    lua_pushcfunction(L, build_outcome);
    lua_pushlightuserdata(L, p);
    st = lua_pcall(L, 1, 2, 0);
    pud->status = st == LUA_OK && !p->reject ? P_DONE : P_FAILED;
    pud->shape = SHAPE_TABLE;
    if (st == LUA_OK) {
      pud->shape = (uint8_t)lua_tointeger(L, -1);
      lua_pop(L, 1);
    }
  }
  lua_setiuservalue(L, ud, 1);
  discard_payload(p);
  let_go(pud, false);
  /* Settled, it has nothing left to give up when it is collected: the
     metatable without __gc spares the collector a finalizer call per
     promise (W7: ~330 instructions a job in GCTM). (It stays on Lua's
     list of objects to finalize; only the call goes.) */
  lua_rawgeti(L, LUA_REGISTRYINDEX, pud->hub->settled_ref);
  lua_setmetatable(L, ud);
  /* One awaiter and an outcome of one value or none: waking it allocates
     nothing (the stack room is there, luna__wake does not raise), so it
     needs no protected call either. */
  if (room && (pud->status == P_FAILED || pud->shape != SHAPE_TABLE) &&
      lua_getiuservalue(L, ud, 2) != LUA_TTABLE) {
    lua_pop(L, 1);
    wake_waiters(L, ud, pud, false);
    lua_settop(L, top);
    return;
  }
  lua_settop(L, ud);
  lua_pushcfunction(L, wake_protected);
  lua_pushvalue(L, ud);
  lua_pushlightuserdata(L, pud);
  if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
    lua_pop(L, 1);
    wake_waiters(L, ud, pud, true);
  }
  lua_settop(L, top);
}

static void deliver_cb(luna_loop *loop, void *arg) {
  luna_promise *p = (luna_promise *)arg;
  luna__pud *pud = p->ud;
  luna__binding *b = NULL;
  (void)loop;
  if (pud != NULL && pud->status == P_PENDING) {
    b = pud->b;
    settle(pud);
  } else {
    discard_payload(p); /* Lua let go meanwhile: nothing to do in Lua */
  }
  release(p); /* the post's reference */
  if (b != NULL)
    luna__pump(b);
}

/* ---- the hub: reset, free and close --------------------------------------------- */

/* luna_loop_reset / luna_loop_free: the binding's own listener (registered
   before ours) has cancelled the state's tasks, which gave up the promises
   they awaited; what is still pending is given up here. */
static void hub_event(luna_loop *loop, luna_event event, void *ud) {
  hub *h = (hub *)ud;
  lua_State *L = luna__exec_state(h->b);
  (void)loop;
  while (h->first != NULL) {
    luna__pud *pud = h->first;
    int top = lua_gettop(L);
    if (push_ud(L, pud))
      give_up(L, top + 1, pud);
    else
      let_go(pud, true);
    lua_settop(L, top);
  }
  luna__pump(h->b);
  if (event == LUNA_EVENT_FREE)
    h->loop = NULL;
}

/* Lets go of every pending Lua side and leaves the loop. Runs no Lua code
   and allocates nothing. */
static void hub_detach(hub *h) {
  while (h->first != NULL)
    let_go(h->first, true);
  if (h->loop != NULL) {
    luna_loop_remove_listener(h->loop, hub_event, h);
    h->loop = NULL;
  }
}

/* A free slot of h's weak table (-> 0), reserving room in free_slots for
   its return; LUNA_ENOMEM when that room cannot be had. */
static int take_slot(hub *h, lua_Integer *slot) {
  if (h->nfree > 0) {
    *slot = h->free_slots[--h->nfree];
    return 0;
  }
  if (h->gone)
    return LUNA_ESTATE;
  if (h->nslots == h->slots_cap) {
    size_t cap = h->slots_cap < 8 ? 8 : h->slots_cap * 2;
    lua_Integer *a = (lua_Integer *)realloc(h->free_slots, cap * sizeof *a);
    if (a == NULL)
      return LUNA_ENOMEM;
    h->free_slots = a;
    h->slots_cap = cap;
  }
  *slot = (lua_Integer)++h->nslots;
  return 0;
}

/* The state closes. Its Promises were finalized first (they are younger),
   so the list is normally empty already. */
static int hub_gc(lua_State *L) {
  hub *h = (hub *)lua_touserdata(L, 1);
  hub_detach(h);
  free(h->free_slots);
  h->free_slots = NULL;
  h->nfree = h->nslots = h->slots_cap = 0;
  h->gone = true;
  return 0;
}

void luna__promise_detach(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &hub_key) == LUA_TUSERDATA)
    hub_detach((hub *)lua_touserdata(L, -1));
  lua_pop(L, 1);
}

static void open_metatable(lua_State *L);

/* The hub of L's state, created (with the weak table and the Promise
   metatable) on first use; NULL when the loop listener cannot be added. */
static hub *get_hub(lua_State *L, luna__binding *b) {
  hub *h;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &hub_key) == LUA_TUSERDATA) {
    h = (hub *)lua_touserdata(L, -1);
    lua_pop(L, 1);
    return h;
  }
  lua_pop(L, 1);
  open_metatable(L);
  luna__new_weak_table(L, "v");
  luaL_getmetatable(L, LUNA__PROMISE_MT);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &settled_key);
  h = (hub *)lua_newuserdatauv(L, sizeof *h, 0);
  memset(h, 0, sizeof *h);
  h->b = b;
  lua_rotate(L, -4, 1); /* hub, weak, metatable, settled */
  h->settled_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  h->mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  h->weak_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, hub_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  /* Last, after everything that may raise a memory error, so that a raise
     never leaves a listener pointing at an unanchored hub. */
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &hub_key);
  lua_pop(L, 1);
  if (luna_loop_add_listener(b->loop, hub_event, h) != 0)
    return NULL;
  h->loop = b->loop;
  return h;
}

/* ---- awaiting ------------------------------------------------------------------------ */

/* Appends t to the awaiters of the Promise at ud. They are kept in its
   uservalue 2: nothing, one task itself (the usual case: no table), or a
   list of them. */
static void add_waiter(lua_State *L, int ud, luna__task *t) {
  int type = lua_getiuservalue(L, ud, 2);
  if (type == LUA_TNIL) {
    lua_pop(L, 1);
    luna__push_task(L, t);
    lua_setiuservalue(L, ud, 2);
    return;
  }
  if (type != LUA_TTABLE) { /* the one listed so far becomes a list */
    lua_createtable(L, 2, 0);
    lua_insert(L, -2);
    lua_rawseti(L, -2, 1);
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, ud, 2);
  }
  luna__push_task(L, t);
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  lua_pop(L, 1);
}

/* Removes t from the awaiters of the Promise at ud, keeping the order of
   the others. False when it was not listed (a delivery unlisted it). */
static bool remove_waiter(lua_State *L, int ud, luna__task *t) {
  lua_Integer i, j, n;
  bool found = false;
  int type = lua_getiuservalue(L, ud, 2);
  if (type != LUA_TNIL && type != LUA_TTABLE) {
    found = luna__test_task(L, -1) == t;
    lua_pop(L, 1);
    if (found) {
      lua_pushnil(L);
      lua_setiuservalue(L, ud, 2);
    }
    return found;
  }
  if (type == LUA_TTABLE) {
    n = (lua_Integer)lua_rawlen(L, -1);
    for (i = 1; i <= n && !found; i++) {
      lua_rawgeti(L, -1, i);
      found = luna__test_task(L, -1) == t;
      lua_pop(L, 1);
    }
    if (found) {
      for (j = i - 1; j < n; j++) {
        lua_rawgeti(L, -1, j + 1);
        lua_rawseti(L, -2, j);
      }
      lua_pushnil(L);
      lua_rawseti(L, -2, n);
    }
  }
  lua_pop(L, 1);
  return found;
}

/* The continuation of an await on a promise; the Promise is at index 1.
   Woken by the delivery (already unlisted): return the values, or raise
   the rejection. Still listed: the task was cancelled (or its scope
   interrupted it); if it was the last task awaiting with task.await, Lua
   gives the promise up, and the host is told. */
static int await_k(lua_State *L, int status, lua_KContext ctx) {
  luna__task *t = (luna__task *)(ctx & ~(lua_KContext)1); /* t | direct */
  luna__pud *pud;
  bool direct = (ctx & 1) != 0;
  bool listed;
  (void)status;
  if (luna__running_task != t)
    return luna__refuse_resume(L, t, ctx, await_k);
  pud = (luna__pud *)lua_touserdata(L, 1);
  listed = remove_waiter(L, 1, t);
  if (listed && direct)
    pud->ndirect--;
  if (t->resume_error) {
    t->resume_error = false;
    if (listed && direct && pud->ndirect == 0 && pud->status == P_PENDING) {
      lua_pushvalue(L, 1);
      give_up(L, lua_gettop(L), pud);
      lua_pop(L, 1);
    }
    return lua_error(L);
  }
  return t->on.ready.nresume;
}

int luna__await_promise(lua_State *L, int idx, bool direct) {
  /* both callers (task.await, watch_promise) checked that it is one: a
     second luaL_checkudata was a third of an await's cost */
  luna__pud *pud = (luna__pud *)lua_touserdata(L, idx);
  luna__task *t = luna__check_await(L, "task.await");
  if (idx != 1)
    return luaL_error(L, "lunaloop: a promise is awaited from argument 1");
  if (pud->status != P_PENDING) {
    int n = push_outcome(L, 1, pud);
    if (pud->status == P_DONE)
      return n;
    return lua_error(L);
  }
  if (pud->b != t->b)
    return luaL_argerror(L, 1, "the promise belongs to another Lua state");
  lua_settop(L, 1); /* keeps the Promise alive while we wait, for await_k */
  add_waiter(L, 1, t);
  if (direct)
    pud->ndirect++;
  t->wait = LUNA__W_EXTERNAL;
  t->timing = pud->p->timing;
  /* A task is a userdata block, aligned for any type: bit 0 is free. */
  return luna__yield_task(L, (lua_KContext)t | (direct ? 1 : 0), await_k);
}

int luna__l_is_promise(lua_State *L) {
  lua_pushboolean(L, luna__is_promise(L, 1));
  return 1;
}

int luna__l_watch_promise(lua_State *L) {
  check_pud(L, 1);
  lua_settop(L, 1);
  return luna__await_promise(L, 1, false);
}

/* ---- the Promise object --------------------------------------------------------------- */

/* p:status() -> "pending" | "done" | "failed" | "cancelled" */
static int l_status(lua_State *L) {
  lua_pushstring(L, status_name(check_pud(L, 1)));
  return 1;
}

/* p:result() -> true, ... when done; false, err when failed or cancelled.
   Raises while pending. */
static int l_result(lua_State *L) {
  luna__pud *pud = check_pud(L, 1);
  int n;
  if (pud->status == P_PENDING)
    return luaL_error(L, "promise is pending; await it instead");
  lua_pushboolean(L, pud->status == P_DONE);
  n = push_outcome(L, 1, pud);
  return n + 1;
}

/* p:cancel(): gives the promise up: its awaiters get the cancellation error
   (they resume in this run), the host's cancel callback runs, a later
   completion is discarded. A settled promise is left alone. */
static int l_cancel(lua_State *L) {
  luna__pud *pud = check_pud(L, 1);
  luna__binding *b = pud->b;
  if (pud->status == P_PENDING) {
    lua_State *saved = luna__enter_exec(b, L);
    give_up(L, 1, pud);
    luna__pump(b);
    luna__leave_exec(b, saved);
  }
  return 0;
}

static int l_tostring(lua_State *L) {
  lua_pushfstring(L, "Promise(%s)", status_name(check_pud(L, 1)));
  return 1;
}

/* Collected (or the state closes) before the result arrived: Lua gives it
   up without touching other values (no task can be waiting on an
   unreachable promise; at lua_close the tasks are cancelled afterwards). */
static int l_gc(lua_State *L) {
  luna__pud *pud = (luna__pud *)lua_touserdata(L, 1);
  if (pud->status == P_PENDING)
    pud->status = P_CANCELLED;
  let_go(pud, true);
  return 0;
}

/* ---- the C API ------------------------------------------------------------------------ */

LUNA_API int luna_lua_promise_new(lua_State *L, luna_timing timing, luna_promise **out) {
  if (L == NULL || out == NULL || (int)timing < 0 || (int)timing >= LUNA_TIMING_COUNT)
    return LUNA_EINVAL;
  return luna__promise_new_in(L, luna__get_binding(L), timing, out);
}

int luna__promise_new_in(lua_State *L, luna__binding *b, luna_timing timing, luna_promise **out) {
  return luna__promise_new_cached(L, b, timing, NULL, out);
}

int luna__promise_new_cached(lua_State *L, luna__binding *b, luna_timing timing, void **cache,
                             luna_promise **out) {
  luna__pud *pud;
  luna_promise *p;
  lua_Integer slot;
  hub *h;
  int rc;
  if (b == NULL)
    return LUNA_EINVAL;
  if (b->loop == NULL || b->closing)
    return LUNA_ESTATE;
  h = cache != NULL ? (hub *)*cache : NULL;
  if (h == NULL) {
    h = get_hub(L, b);
    if (h == NULL)
      return LUNA_ENOMEM;
    if (cache != NULL && h->loop != NULL)
      *cache = h;
  }
  /* Lua allocations first (they may raise), then the C side. */
  pud = (luna__pud *)lua_newuserdatauv(L, sizeof *pud, 2);
  memset(pud, 0, sizeof *pud);
  if ((rc = take_slot(h, &slot)) != 0) {
    lua_pop(L, 1);
    return rc;
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, h->weak_ref);
  lua_pushvalue(L, -2);
  lua_rawseti(L, -2, slot); /* a raise here loses the slot number, nothing else */
  lua_pop(L, 1);
  p = new_block();
  if (p == NULL) {
    h->free_slots[h->nfree++] = slot;
    lua_pop(L, 1); /* no metatable yet: collected like a plain value */
    return LUNA_ENOMEM;
  }
  pud->slot = slot;
  p->magic = PROMISE_MAGIC;
  atomic_init(&p->refs, 2); /* the caller's and the Lua side's */
  atomic_init(&p->state, 0u);
  p->loop = b->loop;
  p->timing = (uint8_t)timing;
  p->ud = pud;
  pud->p = p;
  pud->b = b;
  pud->hub = h;
  pud->status = P_PENDING;
  pud->prev = h->last;
  if (h->last != NULL)
    h->last->next = pud;
  else
    h->first = pud;
  h->last = pud;
  lua_rawgeti(L, LUA_REGISTRYINDEX, h->mt_ref);
  lua_setmetatable(L, -2);
  atomic_fetch_add_explicit(&live_promises, 1, memory_order_relaxed);
  *out = p;
  return 0;
}

LUNA_API int luna_promise_on_cancel(luna_promise *p, luna_promise_cancel_fn fn, void *ud) {
  unsigned s;
  if (!valid(p))
    return LUNA_EINVAL;
  s = atomic_load_explicit(&p->state, memory_order_acquire);
  if (s & ST_COMPLETED)
    return LUNA_EALREADY;
  p->on_cancel = fn;
  p->cancel_ud = ud;
  if (s & ST_GIVEN_UP)
    give_up_c(p); /* Lua let go before: call it now (once) */
  return 0;
}

/* Claims p and stores its outcome: a copy of `message` (a rejection) when
   it is not NULL, else the result (push, data, free_data); the state p was
   found in goes to *found. 0, LUNA_ENOMEM (the copy; nothing claimed) or
   LUNA_EALREADY (completed already; nothing stored). */
static int take(luna_promise *p, luna_promise_push_fn push, void *data,
                luna_promise_free_fn free_data, const char *message, unsigned *found) {
  char *copy = NULL;
  long st;
  if (message != NULL) {
    size_t len = strlen(message);
    copy = (char *)malloc(len + 1);
    if (copy == NULL)
      return LUNA_ENOMEM;
    memcpy(copy, message, len + 1);
  }
  st = claim(p);
  if (st < 0) {
    free(copy);
    return LUNA_EALREADY;
  }
  if (copy != NULL) {
    p->reject = true;
    p->message = copy;
  } else {
    p->push = push;
    p->data = data;
    p->free_data = free_data;
  }
  *found = (unsigned)st;
  return 0;
}

LUNA_API int luna_promise_resolve(luna_promise *p, luna_promise_push_fn push, void *data,
                                  luna_promise_free_fn free_data) {
  unsigned found;
  int rc;
  if (!valid(p))
    return LUNA_EINVAL;
  rc = take(p, push, data, free_data, NULL, &found);
  return rc != 0 ? rc : publish(p, found);
}

LUNA_API int luna_promise_reject(luna_promise *p, const char *message) {
  unsigned found;
  char *copy;
  int rc;
  if (!valid(p) || message == NULL)
    return LUNA_EINVAL;
  rc = take(p, NULL, NULL, NULL, message, &found);
  if (rc != 0)
    return rc;
  copy = p->message; /* publish forgets it when it cannot post */
  rc = publish(p, found);
  if (rc != 0)
    free(copy);
  return rc;
}

int luna__promise_complete_now(luna_promise *p, luna_promise_push_fn push, void *data,
                               luna_promise_free_fn free_data, const char *message) {
  unsigned found;
  int rc;
  if (!valid(p))
    return LUNA_EINVAL;
  rc = take(p, push, data, free_data, message, &found);
  if (rc != 0)
    return rc;
  if (found & ST_GIVEN_UP) {
    discard_payload(p);
    return 0;
  }
  /* as publish, with the delivery made here instead of posted */
  atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
  deliver_cb(p->loop, p);
  return 0;
}

LUNA_API bool luna_promise_is_cancelled(const luna_promise *p) {
  /* Acquire: pairs with give_up_c, for a worker that polls and then reads
     what the loop thread wrote before giving up. */
  return valid(p) && (atomic_load_explicit(&((luna_promise *)p)->state, memory_order_acquire) &
                      ST_GIVEN_UP) != 0;
}

LUNA_API int luna_promise_retain(luna_promise *p) {
  if (!valid(p))
    return LUNA_EINVAL;
  /* Relaxed: the caller holds a reference (standard reference counting). */
  atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
  return 0;
}

LUNA_API int luna_promise_release(luna_promise *p) {
  if (!valid(p) || atomic_load_explicit(&p->refs, memory_order_relaxed) == 0)
    return LUNA_EINVAL;
  release(p);
  return 0;
}

/* ---- the Promise metatable ------------------------------------------------------ */

static const luaL_Reg promise_methods[] = {
    {"status", l_status}, {"result", l_result}, {"cancel", l_cancel}, {NULL, NULL}};

static const luaL_Reg promise_meta[] = {
    {"__close", l_cancel}, {"__tostring", l_tostring}, {"__gc", l_gc}, {NULL, NULL}};

/* The Promise metatable, and the one a Promise gets once settled (settle):
   the same fields but __gc, with the same methods table. */
static void open_metatable(lua_State *L) {
  if (luaL_newmetatable(L, LUNA__PROMISE_MT)) {
    luaL_setfuncs(L, promise_meta, 0);
    luna__protect_metatable(L);
    luaL_newlib(L, promise_methods);
    lua_setfield(L, -2, "__index");
    lua_pushlightuserdata(L, (void *)&promise_marker);
    lua_rawseti(L, -2, PROMISE_MARK_KEY);
    lua_createtable(L, 0, 8); /* the settled one: a copy without __gc */
    lua_pushnil(L);
    while (lua_next(L, -3) != 0) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, -4);
    }
    lua_pushnil(L);
    lua_setfield(L, -2, "__gc");
    lua_rawsetp(L, LUA_REGISTRYINDEX, &settled_key);
  }
  lua_pop(L, 1);
}
