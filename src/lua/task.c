/*
** task.c: the task's lifecycle (creation, start, waking, settling,
** cancellation) and the one place that resumes its coroutine. What keeps
** tasks alive is anchors.c; their names and report labels are names.c.
**
** Waking only queues a task on the ready ring (luna__wake); luna__resume is
** the one place that calls lua_resume, and luna__pump drains the ring from
** the outermost level, so a chain of tasks each awaiting the previous one
** settles in one loop, never in nested C calls. Spawn and cancel are the two
** deliberate exceptions: spawn runs the new task now until its first await,
** and cancel returns after its target unwound (docs/api.md: task.cancel).
**
** Includes binding.h (through anchors.h) and the core's interface for the
** binding.
*/
#include <stdio.h>
#include <string.h>

#include "anchors.h"
#include "binding.h"
#include "lunaloop/extension.h"

/* ---- checked accessors ---------------------------------------------------- */

lua_State *luna__test_thread(lua_State *L, int idx) {
  lua_State *co = lua_tothread(L, idx);
  return co != NULL && luna__extra(co) != 0 ? co : NULL;
}

lua_State *luna__check_thread(lua_State *L, int idx) {
  lua_State *co = luna__test_thread(L, idx);
  if (co == NULL) {
    if (lua_type(L, idx) == LUA_TTHREAD)
      luaL_argerror(L, idx, "Task expected, got a plain coroutine");
    luaL_typeerror(L, idx, "Task");
  }
  return co;
}

luna__task *luna__test_task(lua_State *L, int idx) {
  lua_State *co = luna__test_thread(L, idx);
  return co != NULL ? luna__record(co) : NULL;
}

luna__task *luna__check_task(lua_State *L, int idx) {
  return luna__record(luna__check_thread(L, idx));
}

luna__state luna__thread_state(lua_State *co) {
  luna__task *t = luna__record(co);
  return t != NULL ? (luna__state)t->state
                   : (luna__state)(LUNA__DONE + ((luna__extra(co) >> 1) & 3u));
}

uint64_t luna__thread_id(lua_State *co) {
  luna__task *t = luna__record(co);
  return t != NULL ? t->id : (uint64_t)(luna__extra(co) >> 3);
}

const char *luna__status_name(const luna__task *t) {
  switch ((luna__state)t->state) {
  case LUNA__RUNNING:
    return "running";
  case LUNA__DONE:
    return "done";
  case LUNA__FAILED:
    return "failed";
  case LUNA__CANCELLED:
    return "cancelled";
  default:
    /* A cancellation queued behind another one that is unwinding already
       reads "cancelled". */
    return t->cancel_requested ? "cancelled" : "suspended";
  }
}

const char *luna__thread_status(lua_State *co) {
  static const char *const settled[] = {"done", "failed", "cancelled"};
  luna__task *t = luna__record(co);
  return t != NULL ? luna__status_name(t) : settled[luna__thread_state(co) - LUNA__DONE];
}

/* ---- records ---------------------------------------------------------------- */

/* Records come in blocks and go back to a free list, never to the
   allocator while the binding lives: a task's record is freed when it
   settles, so a malloc and a free a task would otherwise follow its life,
   and glibc serves 72-byte requests from its fast bins, which it must
   consolidate again and again when many tasks come and go (W3). A block
   saves the allocator's header on each record too. 64 records, 4.6 KB. */
#define LUNA__RECORD_BLOCK 64

typedef struct record_block {
  struct record_block *next;
  luna__task rec[LUNA__RECORD_BLOCK];
} record_block;

/* Links a new block's records into the free list; false when the state's
   allocator refused it. */
static bool add_record_block(luna__binding *b) {
  void *ud;
  lua_Alloc alloc = lua_getallocf(b->L, &ud);
  record_block *blk = (record_block *)alloc(ud, NULL, 0, sizeof *blk);
  int i;
  if (blk == NULL)
    return false;
  blk->next = (record_block *)b->record_blocks;
  b->record_blocks = blk;
  for (i = 0; i < LUNA__RECORD_BLOCK; i++)
    *(luna__task **)&blk->rec[i] = i + 1 < LUNA__RECORD_BLOCK ? &blk->rec[i + 1] : b->free_records;
  b->free_records = &blk->rec[0];
  return true;
}

/* A record from the free list, or NULL when no block can be had (the
   state's allocator refused). Not zeroed. */
static luna__task *take_record(luna__binding *b) {
  luna__task *t;
  if (b->free_records == NULL && !add_record_block(b))
    return NULL;
  t = b->free_records;
  b->free_records = *(luna__task **)t;
  return t;
}

/* Gives t's record back; its thread's extra space keeps the settled tag. */
static void free_record(luna__binding *b, luna__task *t) {
  *(uintptr_t *)lua_getextraspace(t->co) = luna__settled_tag(t->id, t->state);
  *(luna__task **)t = b->free_records;
  b->free_records = t;
}

/* Drops the binding's reference once nothing can reach the task any more:
   it is settled and no continuation or ready entry holds its pointer. The
   record goes with it: from now on the thread is all there is. */
static void maybe_release(luna__binding *b, luna__task *t) {
  if (!LUNA__SETTLED(t) || t->pending != 0)
    return;
  luna__unanchor(b, t->ref);
  free_record(b, t);
}

void luna__free_records(luna__binding *b) {
  void *ud;
  lua_Alloc alloc = lua_getallocf(b->L, &ud);
  int slot;
  for (slot = 1; slot <= b->nslots && b->anchored > 0; slot++) {
    luna__task *t = luna__anchored(b, slot);
    if (t == NULL)
      continue;
    if (!LUNA__SETTLED(t))
      t->state = LUNA__CANCELLED; /* (abandoned: luna__abandon_all) */
    luna__unanchor(b, slot);
    free_record(b, t);
  }
  while (b->record_blocks != NULL) {
    record_block *blk = (record_block *)b->record_blocks;
    b->record_blocks = blk->next;
    alloc(ud, blk, sizeof *blk, 0);
  }
  b->free_records = NULL;
}

/* Appends a to the awaiters of target: a ring through on.await.next whose
   last member is target->aw_head, so appending and taking the first are
   O(1); removing another one (a cancelled awaiter) walks the ring, which
   holds as many tasks as await this one. */
void luna__link_awaiter(luna__task *a, luna__task *target) {
  luna__task *last = target->aw_head;
  a->on.await.target = target;
  if (last == NULL) {
    a->on.await.next = a;
  } else {
    a->on.await.next = last->on.await.next;
    last->on.await.next = a;
  }
  target->aw_head = a;
}

static void unlink_awaiter(luna__task *a) {
  luna__task *target = a->on.await.target, *prev = target->aw_head;
  while (prev->on.await.next != a) /* from the last: the first is O(1) */
    prev = prev->on.await.next;
  if (prev == a) {
    target->aw_head = NULL;
  } else {
    prev->on.await.next = a->on.await.next;
    if (target->aw_head == a)
      target->aw_head = prev;
  }
  a->on.await.target = a->on.await.next = NULL;
}

/* Removes whatever the task waits on that can be removed now. */
static void disarm(luna__binding *b, luna__task *t) {
  switch ((luna__wait)t->wait) {
  case LUNA__W_TIMER:
    (void)luna__loop_cancel_timer_node(b->loop, &t->on.timer.node);
    break;
  case LUNA__W_PREDICATE:
    luna_item_remove(b->loop, t->on.item.id);
    break;
  case LUNA__W_TASK:
    unlink_awaiter(t);
    break;
  case LUNA__W_GROUP:
    luna__gclock_cancel((luna__gclock *)t->on.gtimer.clock, t->on.gtimer.id);
    break;
  default: /* continuations stay queued; t->pending covers them */
    break;
  }
  t->wait = LUNA__W_NONE;
}

/* ---- rings of tasks ------------------------------------------------------------ */

/* Appends t to the ring r of binding b, growing it when full. False, and
   nothing changed, when it is full and cannot grow (the state's allocator
   refused: a mod at its memory cap). Never raises: it runs in the loop's
   callbacks, where no Lua error handler is active. */
static bool ring_push(luna__binding *b, luna__ring *r, luna__task *t);

/* Doubles the ring's room (64 to begin with); false, and nothing changed,
   when the allocator refuses. */
static bool ring_grow(luna__binding *b, luna__ring *r) {
  size_t cap = r->cap ? r->cap * 2 : 64;
  void *ud;
  lua_Alloc alloc = lua_getallocf(b->L, &ud);
  luna__task **a = (luna__task **)alloc(ud, NULL, 0, cap * sizeof *a);
  size_t i;
  if (a == NULL)
    return false;
  for (i = 0; i < r->count; i++)
    a[i] = r->a[(r->head + i) % r->cap];
  if (r->a != NULL)
    alloc(ud, r->a, r->cap * sizeof *a, 0);
  r->a = a;
  r->cap = cap;
  r->head = 0;
  return true;
}

static bool ring_push(luna__binding *b, luna__ring *r, luna__task *t) {
  if (r->count == r->cap && !ring_grow(b, r))
    return false;
  r->a[(r->head + r->count) % r->cap] = t;
  r->count++;
  return true;
}

static luna__task *ring_pop(luna__ring *r) {
  luna__task *t = r->a[r->head];
  r->head = (r->head + 1) % r->cap;
  r->count--;
  return t;
}

void luna__ring_free(luna__binding *b, luna__ring *r) {
  void *ud;
  lua_Alloc alloc = lua_getallocf(b->L, &ud);
  if (r->a != NULL)
    alloc(ud, r->a, r->cap * sizeof *r->a, 0);
  memset(r, 0, sizeof *r);
}

/* Queues a woken task; the entry holds it (t->pending). When the ring
   cannot grow, the task is queued through itself instead: a ready task
   waits on nothing, so its wait union is free, and it cannot arm another
   wait before it is resumed. Once one task is there, the later ones follow
   it, so the order stays first in, first out; nothing woken is lost. */
static void ready_push(luna__binding *b, luna__task *t) {
  LUNA__OBSERVE(b, on_wake, t);
  t->pending++;
  if (b->ready_spill == NULL && ring_push(b, &b->ready, t))
    return;
  t->on.ready.next = NULL;
  if (b->ready_spill == NULL)
    b->ready_spill = t;
  else
    b->ready_spill_tail->on.ready.next = t;
  b->ready_spill_tail = t;
}

/* Takes the oldest woken task. The spill list only ever waits behind a
   full ring: each pop moves its head into the slot just freed (no
   allocation), so "the ring is empty" is all the hot paths test. */
static luna__task *ready_pop(luna__binding *b) {
  luna__task *t = ring_pop(&b->ready);
  if (b->ready_spill != NULL) {
    luna__task *s = b->ready_spill;
    b->ready_spill = s->on.ready.next;
    (void)ring_push(b, &b->ready, s); /* a slot was just freed */
  }
  return t;
}

/* ---- settling ---------------------------------------------------------------------- */

/* The values an awaiter is woken with when the task it awaited failed:
   the failed Task and the error (wake_awaiters). No other wake-up raises
   two values. */
#define LUNA__FAILURE_NRESUME 2

/* A settled task's coroutine keeps its outcome (below) and, on top, the
   address of settled_mark: a plain coroutine that has ended is empty, but
   this one is not, and the stock functions would take it for one not
   started yet (coroutine.resume would call its last result, close would
   wipe its results). The mark lets the guarded functions (binding.c)
   answer as for a dead coroutine. One push a task. */
static const char settled_mark = 'e';

bool luna__ended_task_thread(lua_State *co) {
  return lua_status(co) == LUA_OK && lua_gettop(co) > 0 &&
         lua_touserdata(co, -1) == (void *)&settled_mark;
}

/* How many values of the settled t's outcome its coroutine holds: all but
   the mark (which a coroutine at the end of its stack may lack). */
static int outcome_count(luna__task *t) {
  int n = lua_gettop(t->co);
  return n > 0 && lua_touserdata(t->co, n) == (void *)&settled_mark ? n - 1 : n;
}

/* The slot of a failed task's outcome that counts the awaiters woken with
   its error that have neither raised nor dropped it yet (take_failure): on
   the thread, since the record is freed while they may still hold it. */
#define LUNA__HOLDERS_SLOT 4

/* Moves copies of the settled task's outcome onto the awaiter and queues it. */
static void wake_awaiters(luna__binding *b, luna__task *t) {
  lua_Integer holders = 0;
  while (t->aw_head != NULL) {
    luna__task *a = t->aw_head->on.await.next; /* the first */
    unlink_awaiter(a); /* O(1): its predecessor is the last */
    a->wait = LUNA__W_NONE;
    if (t->state == LUNA__DONE && !lua_checkstack(a->co, outcome_count(t))) {
      /* No room for the results (memory): the awaiter gets that error. */
      LUNA__PUSH_MEMERR(a->co);
      a->on.ready.nresume = 1;
      a->resume_error = true;
    } else if (t->state == LUNA__DONE) {
      int i, n = outcome_count(t);
      for (i = 1; i <= n; i++) {
        lua_pushvalue(t->co, i);
        lua_xmove(t->co, a->co, 1);
      }
      a->on.ready.nresume = n;
      a->resume_error = false;
    } else if (t->state == LUNA__FAILED && lua_checkstack(a->co, 2)) {
      /* [the failed Task, its error]: await_k raises the error on top; the
         Task below it marks a failure handed over, which is reported if
         the awaiter loses this wake-up before it could raise it
         (take_failure). (Without room for two values, memory being
         short, the error alone, as for a cancellation.) */
      luna__push_task(a->co, t);
      lua_pushvalue(t->co, 1);
      lua_xmove(t->co, a->co, 1);
      a->on.ready.nresume = LUNA__FAILURE_NRESUME;
      a->resume_error = true;
      holders++;
    } else {
      lua_pushvalue(t->co, 1);
      lua_xmove(t->co, a->co, 1);
      a->on.ready.nresume = 1;
      a->resume_error = true;
    }
    a->state = LUNA__READY;
    ready_push(b, a);
  }
  if (holders > 0) { /* room: settle made it */
    lua_pushinteger(t->co, holders);
    lua_replace(t->co, LUNA__HOLDERS_SLOT);
  }
}

/* t is READY and about to lose its wake-up (it is cancelled or interrupted
   before it resumed). Pops the values it was woken with. When they carry
   the failure of a task it awaited and every other awaiter woken with it
   has dropped it too, nobody will raise that failure: it is moved to L as
   [Task, error] for report_failure, and true is returned. (An awaiter that
   resumed raised it: the count then never reaches zero.) */
static bool take_failure(luna__task *t, lua_State *L) {
  lua_State *failed = NULL;
  lua_Integer left = -1;
  if (t->resume_error && t->on.ready.nresume == LUNA__FAILURE_NRESUME)
    failed = luna__test_thread(t->co, -2);
  if (failed != NULL && lua_gettop(failed) >= LUNA__HOLDERS_SLOT) {
    left = lua_tointeger(failed, LUNA__HOLDERS_SLOT) - 1;
    lua_pushinteger(failed, left); /* room: the settled mark's slot was checked for two */
    lua_replace(failed, LUNA__HOLDERS_SLOT);
  }
  if (left == 0 && lua_checkstack(L, 2)) {
    lua_xmove(t->co, L, 2);
    return true;
  }
  lua_pop(t->co, t->on.ready.nresume);
  return false;
}

/* Reports the failure take_failure moved to the top of L, and pops it. */
static void report_failure(luna__binding *b, lua_State *L) {
  lua_State *failed = lua_tothread(L, -2);
  int top = lua_gettop(L);
  lua_checkstack(L, 3);
  lua_pushvalue(failed, 2); /* the traceback: FAILED keeps [error, traceback, ...] */
  lua_xmove(failed, L, 1);
  if (!luna__hold_failure(b, L, top - 1)) /* marked t:handled(): held instead */
    luna__report_task(b, L, top, top + 1, top - 1, NULL);
  lua_settop(L, top - 2);
}

/* Settles t: status, unlink, wake awaiters, release. The outcome is on t->co:
   the results for DONE, [error, traceback, label, holders] for FAILED (the
   label for reports made later: luna__task_label; holders: see
   LUNA__HOLDERS_SLOT), [error, nil] otherwise; the settled mark goes on
   top, with room for one value more above it. */
static void settle(luna__binding *b, luna__task *t, luna__state state) {
  t->state = (uint8_t)state;
  t->wait = LUNA__W_NONE;
  b->ntasks--;
  if (lua_checkstack(t->co, 2)) /* false at the stack's limit or out of memory */
    lua_pushlightuserdata(t->co, (void *)&settled_mark);
  wake_awaiters(b, t);
  maybe_release(b, t);
}

static LUNA__NOINLINE void finish_ok(luna__binding *b, luna__task *t, int nres) {
  int extra = lua_gettop(t->co) - nres;
  if (extra > 0) {
    lua_rotate(t->co, 1, -extra);
    lua_pop(t->co, extra);
  }
  if (t->cancel_requested) {
    lua_settop(t->co, 0);
    luna__push_cancel_error(t->co);
    settle(b, t, LUNA__CANCELLED);
    return;
  }
  settle(b, t, LUNA__DONE);
}

/* luaL_traceback of the thread at index 1, for a protected call. */
static int traceback_of(lua_State *L) {
  luaL_traceback(L, lua_tothread(L, 1), NULL, 0);
  return 1;
}

/* Runs t's pending to-be-closed variables (its resume ended in an error,
   so Lua left them for lua_resetthread) as part of t's run: t is the
   current task meanwhile, as during a resume, so a handler that cancels
   its own task or another one sees the same rules as in the task's body
   (a cancellation it makes while another unwinds is queued), and
   task.current() is t. An interrupt stops the handler it lands in and
   lets the next one run (luna__closing). The save and restore follow
   resume()'s. The handlers are the task's code, so they run as a call the
   observers see (on_call on t's coroutine): a mod's budget and memory cap
   bound them as they bound the task's body. Returns luna__close_thread's
   status. */
static int close_in_task(luna__binding *b, luna__task *t, lua_State *L) {
  lua_State *outer_closing = luna__closing, *outer_running;
  luna__outer outer;
  int st;
  luna__closing = t->co;
  outer = luna__enter_task(b, t);
  outer_running = luna__enter_thread(t->co);
  b->depth++;
  LUNA__OBSERVE(b, on_call, t->co, true);
  st = luna__close_thread(t->co, L);
  LUNA__OBSERVE(b, on_call, t->co, false);
  b->depth--;
  luna__leave_task(b, outer);
  luna__closing = outer_closing;
  luna__leave_thread(outer_running);
  return st;
}

/* (text) -> the string, for a protected call. */
static int push_string(lua_State *L) {
  lua_pushstring(L, (const char *)lua_touserdata(L, 1));
  return 1;
}

/* Pushes on L the traceback of t's error (the error itself is on top of
   L), or nil: none for a cancellation, and none when memory ran out,
   since what the task allocated is still on its stack and anything built
   now would fail again, in the caller's context (that task is closed and
   collected first). Building it allocates, so it runs protected. */
static void push_error_traceback(luna__binding *b, luna__task *t, lua_State *L, int status,
                                 bool cancelled) {
  if (status == LUA_ERRMEM) {
    luna__drop_interrupt_hook(t->co);
    close_in_task(b, t, L);
    lua_settop(t->co, 0);
    lua_gc(L, LUA_GCCOLLECT);
    lua_pushnil(L);
  } else if (!cancelled) {
    lua_pushcfunction(L, traceback_of);
    lua_pushthread(t->co);
    lua_xmove(t->co, L, 1);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
      lua_pop(L, 1);
      lua_pushnil(L);
    }
  } else {
    lua_pushnil(L);
  }
}

/* Runs t's __close handlers with its error (at err of L), then empties its
   stack. One that raises replaces the error in stock Lua; here the task
   keeps its first error (so awaiters see what the task raised) and the
   handler's error is reported, not lost. */
static void close_with_error(luna__binding *b, luna__task *t, lua_State *L, int err,
                             int task_idx, const char *label) {
  char what[LUNA__LABEL_SIZE + 32];
  luna__drop_interrupt_hook(t->co);
  if (close_in_task(b, t, L) != LUA_OK && lua_gettop(t->co) > 0) {
    /* (lua_resetthread reports the original status even when the handlers
       ran fine; a changed error value is what tells a handler raised.) */
    lua_pushvalue(t->co, -1);
    lua_xmove(t->co, L, 1);
    /* A cancellation (Ctrl-C in a handler, a handler cancelling its own
       task) is not reported; the task ends cancelled (finish_error). */
    if (!lua_rawequal(L, -1, err) && !luna__is_cancel_error(L, -1)) {
      snprintf(what, sizeof what, "to-be-closed variable of task %s", label);
      luna__report(b, L, -1, 0, task_idx, what);
    }
    lua_pop(L, 1);
  }
  lua_settop(t->co, 0);
}

/* The coroutine raised: keep the error value unchanged and its traceback,
   close its to-be-closed variables (they see the error), then settle. An
   error that nobody awaits is reported; cancellation never is. */
static LUNA__NOINLINE void finish_error(luna__binding *b, luna__task *t, int status) {
  lua_State *L = luna__exec_state(b);
  int top = lua_gettop(L);
  bool cancelled;
  int err, tb, task_idx;
  char label[LUNA__LABEL_SIZE];

  lua_checkstack(L, 8);
  lua_pushvalue(t->co, -1);
  lua_xmove(t->co, L, 1);
  err = lua_gettop(L);
  cancelled = luna__is_cancel_error(L, err);
  push_error_traceback(b, t, L, status, cancelled);
  tb = lua_gettop(L);
  luna__push_task(L, t);
  task_idx = lua_gettop(L);
  luna__task_label(L, task_idx, label, sizeof label);
  close_with_error(b, t, L, err, task_idx, label);

  if (t->cancel_requested && !cancelled) {
    /* It raised something else while being cancelled: it still ends
       cancelled, and that error is not lost. */
    luna__report_task(b, L, err, tb, task_idx, label);
    cancelled = true;
  }
  if (cancelled) {
    luna__push_cancel_error(t->co);
    lua_pushnil(t->co);
    settle(b, t, LUNA__CANCELLED);
  } else {
    lua_pushvalue(L, err);
    lua_pushvalue(L, tb);
    /* The label, for reports made once the function is gone (a scope's
       second failure): protected, it allocates; nil if memory is short. */
    lua_pushcfunction(L, push_string);
    lua_pushlightuserdata(L, label);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
      lua_pop(L, 1);
      lua_pushnil(L);
    }
    lua_pushinteger(L, 0); /* LUNA__HOLDERS_SLOT */
    lua_xmove(L, t->co, 4);
    /* Whether anyone will raise the error is decided now, after the
       __close handlers ran: one may have cancelled the only awaiter (an
       awaiter cancelled later, before it resumed, reports it itself:
       take_failure). */
    bool awaited = t->aw_head != NULL;
    settle(b, t, LUNA__FAILED);
    if (!awaited && !luna__hold_failure(b, L, task_idx))
      luna__report_task(b, L, err, tb, task_idx, label);
  }
  lua_settop(L, top);
}

/* The error of a bare yield in a task. */
#define BARE_YIELD_MSG                                                                     \
  "coroutine.yield inside a task: use a task.* await (task.yield, task.delay, "          \
  "task.await, ...) instead"

/* A task yielded without a task.* await (a bare coroutine.yield in its own
   body). It cannot be resumed meaningfully, so it fails: a one-shot hook
   raises the error from inside the task, so its to-be-closed variables
   and traceback see the right place. The hook first fires as the yield
   returns (LUA_MASKRET), while the yield's caller is still at the line of
   the call: raised there when that caller is a Lua function. A C caller
   (pcall(coroutine.yield)) would catch it, so the hook is then moved to
   the next Lua instruction (a count hook), outside that C function; the
   message names the yield's line all the same (b->bare_where). So is it
   when the hook replaced a count hook (a mod's budget), which is called
   below and positions its own error at level 0: a Lua function there. */
static void bare_yield_hook(lua_State *L, lua_Debug *ar) {
  luna__binding *b = luna__get_binding(L);
  lua_Debug caller;
  if (ar->event == LUA_HOOKRET &&
      ((b != NULL && (b->bare_prev.mask & LUA_MASKCOUNT)) ||
       !(lua_getstack(L, 1, &caller) && lua_getinfo(L, "S", &caller) && caller.what[0] != 'C'))) {
    lua_sethook(L, bare_yield_hook, LUA_MASKCOUNT, 1);
    return;
  }
  /* Puts back the hook it replaced (a mod's budget, a pending interrupt):
     a pcall around the bare yield must not leave the task unhooked. That
     hook's count starts again, so it is called once now, as if its count
     had run out: a mod's budget is charged a full step for each bare
     yield (a pcall loop around one cannot run for ever uncounted), and a
     pending interrupt is raised. */
  if (b != NULL && b->bare_prev.hook != NULL) {
    lua_sethook(L, b->bare_prev.hook, b->bare_prev.mask, b->bare_prev.count);
    if (b->bare_prev.mask & LUA_MASKCOUNT)
      b->bare_prev.hook(L, ar);
  } else {
    lua_sethook(L, NULL, 0, 0);
  }
  if (luna__interrupt_pending())
    luna__arm_interrupt(L); /* a signal between the hook's read and write */
  lua_pushstring(L, b != NULL ? b->bare_where : "");
  lua_pushliteral(L, BARE_YIELD_MSG);
  lua_concat(L, 2);
  luna__raise_from_hook(L, LUNA__HOOK_BARE_YIELD);
}

/* The coroutine ended right after a bare yield, before any instruction
   could raise its error: the body was coroutine.yield itself, or C
   functions only (task.spawn(pcall, coroutine.yield)). It fails with
   that error all the same. Returns the status to settle with. */
static const char bare_yield_key = 'y'; /* registry: BARE_YIELD_MSG, made at open */

static LUNA__NOINLINE int bare_yield_ended(luna__binding *b, luna__task *t) {
  lua_sethook(t->co, b->bare_prev.hook, b->bare_prev.mask, b->bare_prev.count);
  lua_settop(t->co, 0);
  lua_rawgetp(t->co, LUA_REGISTRYINDEX, &bare_yield_key); /* allocates nothing */
  return LUA_ERRRUN;
}

void luna__preallocate(lua_State *L, luna__binding *b) {
  if (b->ready.cap == 0 && !ring_grow(b, &b->ready))
    luaL_error(L, "not enough memory");
  lua_pushliteral(L, BARE_YIELD_MSG);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &bare_yield_key);
}

/* Arms bare_yield_hook on t's coroutine, keeping the hook it replaces, and
   notes the position of the yield: "<source>:<line>: " of the innermost
   Lua function on the coroutine, which is suspended in the yield (its
   line is that of the call in progress), or "" when there is none. */
static LUNA__NOINLINE void arm_bare_yield(luna__binding *b, luna__task *t) {
  lua_Debug ar;
  int level;
  b->bare_where[0] = '\0';
  for (level = 1; lua_getstack(t->co, level, &ar); level++)
    if (lua_getinfo(t->co, "Sl", &ar) && ar.currentline > 0) {
      snprintf(b->bare_where, sizeof b->bare_where, "%s:%d: ", ar.short_src, ar.currentline);
      break;
    }
  b->bare_prev.hook = lua_gethook(t->co);
  b->bare_prev.mask = lua_gethookmask(t->co);
  b->bare_prev.count = lua_gethookcount(t->co);
  lua_sethook(t->co, bare_yield_hook, LUA_MASKRET, 0);
}

/* t's coroutine was closed (lua_closethread by a host, a coroutine.close
   captured before the binding guarded it) or run (a coroutine.resume of a
   task not yet started, reached through the debug library) by someone
   else than the scheduler: its to-be-closed variables have run, or its
   body did, with nothing to tell the task. It ends cancelled, as closing
   it through the guarded coroutine.close does; its awaiters are told. */
static LUNA__NOINLINE void driven_elsewhere(luna__binding *b, luna__task *t) {
  lua_Debug ar;
  if (lua_status(t->co) == LUA_OK && lua_getstack(t->co, 0, &ar)) {
    /* Running there now (only the debug library reaches that): left alone,
       but for lua_resume's refusal, taken off its stack. */
    if (t->state == LUNA__RUNNING) {
      lua_pop(t->co, 1);
      t->state = LUNA__SUSPENDED;
    }
    return;
  }
  if (lua_status(t->co) != LUA_OK)
    luna__close_thread(t->co, luna__exec_state(b)); /* suspended there: closed */
  t->cancel_requested = true;
  lua_settop(t->co, 0);
  luna__push_cancel_error(t->co);
  lua_pushnil(t->co);
  settle(b, t, LUNA__CANCELLED);
}

/* After lua_resume failed: true when it refused to resume co because co
   was closed (a dead coroutine: only its message is left) or is running
   elsewhere, rather than co raising (its status is then the error's) or
   being too deep for a C stack (a task not started keeps its function). */
static LUNA__NOINLINE bool resumed_elsewhere(lua_State *co) {
  lua_Debug ar;
  return lua_status(co) == LUA_OK && (lua_gettop(co) == 1 || lua_getstack(co, 0, &ar));
}

/* The counter of resumes for task.stats (per timing, current frame only)
   that a resume made now adds to: the frame's, cleared when a new frame
   began. It reads the frame and timing through the loop's view
   (extension.h), a load each. Both stay the same until the code that
   drives the loop runs again, so a caller that resumes several tasks in a
   row takes it once (luna__resume_cb). */
static uint32_t *resume_counter(luna__binding *b) {
  uint64_t frame = luna__loop_frame(b->loop);
  int timing = luna__loop_timing(b->loop);
  if (frame != b->stats_frame) {
    memset(b->resumes, 0, sizeof b->resumes);
    b->stats_frame = frame;
  }
  return &b->resumes[timing < 0 ? LUNA_TIMING_COUNT : timing];
}

/* ---- the one place that resumes ------------------------------------------------ */

/* What a resume reads of the binding and the thread's state before it
   starts and puts back when it ends (resume_ctx_of): the same for a run of
   resumes made one after another at the same level, so such a caller
   (luna__resume_cb) takes it once for all of them. */
typedef struct resume_ctx {
  lua_State *from;          /* luna__exec_state(b) */
  uint32_t *counter;        /* resume_counter(b) */
  luna__outer outer;        /* what luna__enter_task(b, ...) replaces */
  lua_State *outer_running; /* what luna__enter_thread replaces */
} resume_ctx;

static LUNA__ALWAYS_INLINE resume_ctx resume_ctx_of(luna__binding *b) {
  resume_ctx c;
  c.from = luna__exec_state(b);
  c.counter = resume_counter(b);
  c.outer.current = b->current;
  c.outer.task = luna__running_task;
  c.outer_running = luna__running;
  return c;
}

/* Inlined into each of its few callers on purpose: a yield returns from
   lua_resume through a longjmp, which leaves the CPU's return-address
   predictor out of step, so every call level between the continuation and
   lua_resume costs a mispredicted return, and the instructions after such
   calls are the hottest of a yield round trip. Settling stays out of
   line. `c` is resume_ctx_of(b), taken by the caller; `hold` false when
   the caller holds the loop itself (luna__loop_hold) around its resumes. */
static LUNA__ALWAYS_INLINE void resume_with(luna__binding *b, luna__task *t, int nargs,
                                            const resume_ctx *c, bool hold) {
  int st, nres = 0;
  bool ended_bare = false;
  /* Below the nargs values the scheduler pushed, at least the await's mark
     (luna__yield_task) or the task's function: a coroutine closed behind
     the scheduler's back has lost them, and lua_resume would read below
     its stack. (With no values to pass, lua_resume refuses a closed
     coroutine itself: see the error branch below. A plain yield, resumed
     with no values, pays nothing here.) */
  if (nargs > 0 && lua_gettop(t->co) <= nargs) {
    driven_elsewhere(b, t);
    return;
  }
  t->state = LUNA__RUNNING;
  t->wait = LUNA__W_NONE;
  b->current = t; /* luna__enter_task, what it replaces being in c */
  luna__running_task = t;
  b->depth++;
  (*c->counter)++;
  LUNA__OBSERVE(b, on_resume, t, true);
  luna__running = t->co; /* luna__enter_thread */
  if (hold)
    luna__loop_hold(b->loop, 1);
  st = lua_resume(t->co, c->from, nargs, &nres);
  while (st == LUA_YIELD && t->wait == LUNA__W_NONE) {
    if (nres > 0)
      lua_pop(t->co, nres);
    arm_bare_yield(b, t);
    st = lua_resume(t->co, c->from, 0, &nres);
    if (st == LUA_OK && lua_gethook(t->co) == bare_yield_hook) {
      st = bare_yield_ended(b, t); /* no Lua instruction ran to raise it */
      ended_bare = true;
    }
    /* The guarded xpcall that could skip its handler for the error has
       done so by now; later, that error value is an ordinary one. */
    if (b->hook_error == LUNA__HOOK_BARE_YIELD)
      b->hook_error = LUNA__HOOK_NONE;
  }
  if (hold)
    luna__loop_hold(b->loop, -1);
  luna__leave_thread(c->outer_running);
  LUNA__OBSERVE(b, on_resume, t, false);
  b->depth--;
  luna__leave_task(b, c->outer);

  if (st == LUA_YIELD) {
    if (nres > 0) /* an await yields no values: no call on every resume */
      lua_pop(t->co, nres);
    t->state = LUNA__SUSPENDED;
  } else if (st == LUA_OK) {
    finish_ok(b, t, nres);
  } else if (!ended_bare && resumed_elsewhere(t->co)) {
    driven_elsewhere(b, t);
  } else {
    finish_error(b, t, st);
  }
}

static LUNA__ALWAYS_INLINE void resume(luna__binding *b, luna__task *t, int nargs) {
  resume_ctx c = resume_ctx_of(b);
  resume_with(b, t, nargs, &c, true);
}

/* Resumes one drain of the ready ring makes before the rest waits for the
   next run of the timing. Wake-ups are resumed in the same run that woke
   them, so tasks that wake each other for ever (two tasks
   passing values over a channel) would hold the frame for ever, each
   resume a run of its own, beyond any budget: this lets the frame end. A
   chain of 10,000 awaits still settles in one run. */
#define LUNA__DRAIN_LIMIT 100000

void luna__drain_cb(luna_loop *loop, void *arg) {
  luna__binding *b = (luna__binding *)arg;
  (void)loop;
  b->drain_deferred = false;
  luna__pump(b);
}

/* Puts the rest of the ready ring off to the next run of the timing
   running now (Update outside a frame). False when that cannot be queued
   (memory): the drain then goes on. */
static bool defer_drain(luna__binding *b) {
  int timing = luna_loop_current_timing(b->loop);
  if (luna__loop_enqueue(b->loop, timing >= 0 ? (luna_timing)timing : LUNA_UPDATE,
                         luna__drain_cb, b) != 0)
    return false;
  b->drain_deferred = true;
  return true;
}

/* luna__pump's loop, once there is something to resume and nothing else
   resumes. */
static void pump_ready(luna__binding *b) {
  uint32_t resumes = 0;
  b->pumping = true;
  while (b->ready.count > 0) {
    luna__task *t;
    if ((++resumes > LUNA__DRAIN_LIMIT || luna__held(b)) && defer_drain(b))
      break;
    t = ready_pop(b);
    t->pending--;
    if (t->state == LUNA__READY)
      resume(b, t, t->on.ready.nresume);
    else
      maybe_release(b, t);
  }
  b->pumping = false;
}

void luna__pump(luna__binding *b) {
  if (b->ready.count > 0 && !b->pumping && b->depth == 0 && !b->drain_deferred)
    pump_ready(b);
}

bool luna__pump_hold(luna__binding *b) {
  bool held = b->pumping;
  b->pumping = true;
  return held;
}

void luna__pump_release(luna__binding *b, bool held) {
  b->pumping = held;
  luna__pump(b);
}

/* Resumes t now, then, at the outermost level, everything it woke. */
static LUNA__ALWAYS_INLINE void run_now(luna__binding *b, luna__task *t, int nargs) {
  resume(b, t, nargs);
  if (b->ready.count > 0) /* most resumes wake nobody: no call */
    luna__pump(b);
}

void luna__wake(luna__binding *b, luna__task *t, lua_State *L, int nvalues, bool is_error) {
  if (lua_checkstack(t->co, nvalues + 1)) {
    lua_xmove(L, t->co, nvalues);
  } else { /* no room for the values (memory): t gets that error instead */
    lua_pop(L, nvalues);
    LUNA__PUSH_MEMERR(t->co);
    nvalues = 1;
    is_error = true;
  }
  t->on.ready.nresume = nvalues;
  t->resume_error = is_error;
  t->wait = LUNA__W_NONE;
  t->state = LUNA__READY;
  ready_push(b, t);
}

/* ---- starting ---------------------------------------------------------------------- */

luna__task *luna__new_task(lua_State *L, luna__binding *b, int fn_idx, int nargs) {
  return luna__new_task_in(L, b, fn_idx, nargs, 0);
}

luna__task *luna__new_task_in(lua_State *L, luna__binding *b, int fn_idx, int nargs,
                              int group_idx) {
  luna__task *t;
  lua_State *co;
  int i, ref;
  bool joined = false;
  if (b->closing)
    luaL_error(L, LUNA__CLOSING_MSG);
  if (fn_idx < 0) /* (no pseudo-index is a task's function) */
    fn_idx = lua_absindex(L, fn_idx);
  co = lua_newthread(L);
  /* Copies of the function and its arguments go through L: room on both.
     (A C function is only promised LUA_MINSTACK free slots.) */
  if (!lua_checkstack(L, nargs + 4) || !lua_checkstack(co, nargs + 1))
    luaL_error(L, "lunaloop: too many arguments for a task (%d)", nargs);
  for (i = 0; i <= nargs; i++)
    lua_pushvalue(L, fn_idx + i);
  lua_xmove(L, co, nargs + 1);
  /* Group membership before the anchor and the record (it may raise). A
     state without groups pays one test. */
#if defined(__GNUC__) || defined(__clang__)
  if (__builtin_expect(b->ngroups > 0, 0) && group_idx >= 0)
#else
  if (b->ngroups > 0 && group_idx >= 0)
#endif
    joined = luna__group_join(L, b, group_idx);
  ref = luna__anchor(L, b);
  /* The record last: everything above may raise, and a raise after it
     would lose it. Only the slot must be given back if it cannot be had. */
  t = take_record(b);
  if (t == NULL) {
    luna__unanchor(b, ref);
    LUNA__PUSH_MEMERR(L);
    lua_error(L);
  }
  *t = (luna__task){0};
  *(luna__task **)lua_getextraspace(co) = t;
  t->b = b;
  t->co = co;
  t->ref = ref;
  t->state = LUNA__PENDING;
  t->on.ready.nresume = nargs;
  t->id = ++b->next_id;
  t->created_frame = luna__loop_frame(b->loop);
  if (joined) /* (memset cleared it) */
    t->grouped = 1;
  b->ntasks++;
  if (b->creation_traceback)
    luna__note_creation(L);
  LUNA__OBSERVE(b, on_thread, t);
  return t;
}

void luna__start(luna__binding *b, luna__task *t) {
  run_now(b, t, t->on.ready.nresume);
}

bool luna__still_held(luna__binding *b) {
  if (b->loop != NULL && luna__loop_frame(b->loop) == b->held_frame)
    return true;
  b->held = false;
  return false;
}

/* Like luna__resume_cb, one call starts the run of deferred starts queued
   one after another (task.defer in a loop), in the queue's order. */
void luna__start_cb(luna_loop *loop, void *arg) {
  luna__task *t = (luna__task *)arg;
  luna__binding *b = t->b;
  luna__queue none = {0}, *q = luna__loop_running_queue(loop, &none);
  resume_ctx c = resume_ctx_of(b); /* as in luna__resume_cb */
  luna__loop_hold(loop, 1);
  do {
    if (t->b != b) {
      b = t->b;
      c = resume_ctx_of(b);
    }
    t->pending--;
    if (t->state == LUNA__PENDING && t->wait == LUNA__W_START && !t->cancel_requested) {
      /* Held: the start waits for the timing's next run (or, when that
         cannot be queued, runs now). */
      if (luna__held(b) && luna__start_at(b, t, (luna_timing)t->timing) == 0)
        continue;
      resume_with(b, t, t->on.ready.nresume, &c, false);
      if (b->ready.count > 0) /* as run_now */
        luna__pump(b);
    } else {
      maybe_release(b, t);
    }
  } while ((t = (luna__task *)luna__queue_take_next(loop, q, luna__start_cb)) != NULL);
  luna__loop_hold(loop, -1);
}

int luna__start_at(luna__binding *b, luna__task *t, luna_timing timing) {
  /* timing is in range (a parsed name, or the task's own) */
  int rc = luna__loop_enqueue(b->loop, timing, luna__start_cb, t);
  if (rc == 0) {
    t->pending++;
    t->wait = LUNA__W_START;
    t->timing = (uint8_t)timing;
  }
  return rc;
}

/* One call handles the run of yields queued one after another (most of a
   timing's queue when many tasks yield each frame): after each resume it
   takes the next entry when that is another resume (luna__loop_take_next),
   in the queue's order, so the drain's indirect call and this function's
   entry and exit are paid once a run of entries instead of once a task. */
void luna__resume_cb(luna_loop *loop, void *arg) {
  luna__task *t = (luna__task *)arg;
  luna__binding *b = t->b;
  /* The same for a binding's tasks for the whole call: each resume puts
     back what it changed, and no frame begins meanwhile. The tasks of one
     queue may be of several states sharing the loop (mods). The loop is
     held for the whole run instead of around each resume: between two,
     only this function runs. */
  luna__queue none = {0}, *q = luna__loop_running_queue(loop, &none);
  resume_ctx c = resume_ctx_of(b);
  luna__loop_hold(loop, 1);
  do {
    if (t->b != b) {
      b = t->b;
      c = resume_ctx_of(b);
    }
    t->pending--;
    if (t->state == LUNA__SUSPENDED && t->wait == LUNA__W_YIELD) {
      if (luna__held(b) && luna_enqueue(loop, (luna_timing)t->timing, luna__resume_cb, t) == 0) {
        t->pending++; /* held: waits for the timing's next run */
        continue;
      }
      t->resume_error = false;
      t->on.ready.nresume = 0;
      resume_with(b, t, 0, &c, false);
      if (b->ready.count > 0) /* as run_now */
        luna__pump(b);
    } else {
      maybe_release(b, t);
    }
  } while ((t = (luna__task *)luna__queue_take_next(loop, q, luna__resume_cb)) != NULL);
  luna__loop_hold(loop, -1);
}

/* The loop's warm function (luna__loop_set_warm) for the timers that
   resume a task: firing prefetched the task two calls ahead, so here, one
   call ahead, the task is in cache and its coroutine's lua_State (about
   200 bytes, another allocation) is asked for. Tasks waking from timers
   in deadline order walk memory at random, so without it each wake-up
   would wait for two cache misses in a row (the task, then its
   coroutine's state). */
void luna__warm_task(void *arg) {
  const char *co = (const char *)luna__timer_task(arg)->co;
  LUNA__PREFETCH(co);
  LUNA__PREFETCH(co + 64);
  LUNA__PREFETCH(co + 128);
}

/* The timer of a delay or frame wait fired. A cancelled task's timer was
   cancelled with it, so t is waiting on it. When nothing is resuming and
   nobody is queued ahead, t is resumed here rather than through the ready
   queue: the same order, one call level less (see resume). */
void luna__timer_cb(luna_loop *loop, void *arg) {
  luna__task *t = luna__timer_task(arg);
  luna__binding *b = t->b;
  (void)loop;
  if (b->ready.count > 0 || b->pumping || b->depth > 0 || luna__held(b)) {
    luna__wake(b, t, t->co, 0, false); /* (the pump defers a held state's) */
    luna__pump(b);
    return;
  }
  t->wait = LUNA__W_NONE;
  t->on.ready.nresume = 0;
  t->resume_error = false;
  run_now(b, t, 0);
}

/* ---- cancellation ---------------------------------------------------------------- */

static void cancel_one(luna__binding *b, luna__task *t) {
  switch ((luna__state)t->state) {
  case LUNA__PENDING:
    t->cancel_requested = true;
    lua_settop(t->co, 0);
    luna__push_cancel_error(t->co);
    lua_pushnil(t->co);
    settle(b, t, LUNA__CANCELLED);
    break;
  case LUNA__SUSPENDED:
  case LUNA__READY: {
    lua_State *L = luna__exec_state(b);
    bool failure = t->state == LUNA__READY && take_failure(t, L);
    disarm(b, t);
    t->cancel_requested = true;
    if (b->abandon) {
      /* Its to-be-closed variables are abandoned: the state is being
         closed after its time ran out (src/mods), and lua_close frees
         the coroutine without running them. */
      lua_settop(t->co, 0);
      luna__push_cancel_error(t->co);
      lua_pushnil(t->co);
      b->abandoned++;
      settle(b, t, LUNA__CANCELLED);
      if (failure) { /* no Lua may run now: counted, not handed to a handler */
        b->errors++;
        lua_pop(L, 2);
      }
      break;
    }
    luna__push_cancel_error(t->co);
    t->resume_error = true;
    t->on.ready.nresume = 1;
    resume(b, t, 1);
    if (failure) /* after t unwound: the handler sees settled state */
      report_failure(b, L);
    break;
  }
  case LUNA__RUNNING:
    /* It unwinds when control comes back to it: at its next await, or when
       the call that resumed another task returns (luna__check_cancelled). */
    t->cancel_requested = true;
    break;
  default:
    break;
  }
}

void luna__cancel(luna__binding *b, luna__task *t) {
  if (LUNA__SETTLED(t) || (t->cancel_requested && t->state != LUNA__RUNNING))
    return;
  if (b->cancelling) {
    /* Another cancellation is unwinding (we are in a __close handler): queue
       this one; the outermost cancel finishes it before returning. If the
       queue cannot grow (memory), it is cancelled now, nested in the one
       unwinding: sooner than usual, but never lost. */
    if (!ring_push(b, &b->cancels, t)) {
      cancel_one(b, t);
      return;
    }
    t->cancel_requested = true;
    t->pending++;
    return;
  }
  b->cancelling = true;
  cancel_one(b, t);
  while (b->cancels.count > 0) {
    luna__task *next = ring_pop(&b->cancels);
    next->pending--;
    next->cancel_requested = false; /* let cancel_one see it as live */
    if (!LUNA__SETTLED(next))
      cancel_one(b, next);
    else
      maybe_release(b, next);
  }
  b->cancelling = false;
  luna__pump(b);
}

void luna__interrupt(luna__binding *b, luna__task *t) {
  switch ((luna__state)t->state) {
  case LUNA__SUSPENDED:
    disarm(b, t);
    luna__push_cancel_error(t->co);
    luna__wake(b, t, t->co, 1, true);
    break;
  case LUNA__READY: { /* already queued: replace what it was woken with */
    lua_State *L = luna__exec_state(b);
    bool failure = take_failure(t, L);
    luna__push_cancel_error(t->co);
    t->on.ready.nresume = 1;
    t->resume_error = true;
    if (failure)
      report_failure(b, L);
    break;
  }
  case LUNA__RUNNING:
  case LUNA__PENDING:
    t->interrupt = true;
    break;
  default:
    break;
  }
}

size_t luna__cancel_all(luna__binding *b) {
  size_t n = 0;
  bool nested = b->cancelling;
  int slot;
  /* In creation order. Cancelling may create tasks (in __close handlers):
     during the walk they take slots after every other, so they are
     cancelled too, in their own creation order. */
  luna__begin_walk(b);
  /* (b->anchored: none left, the rest of the slots are empty; a task that
     a cancellation creates is anchored before the test is read again) */
  for (slot = 1; slot <= b->nslots && b->anchored > 0; slot++) {
    luna__task *t = luna__anchored(b, slot);
    if (t == NULL || LUNA__SETTLED(t))
      continue;
    if (nested) {
      /* Another cancellation is unwinding: each is queued behind it. */
      luna__cancel(b, t);
      continue;
    }
    if (t->state == LUNA__RUNNING || t->cancel_requested) {
      /* Running: it unwinds when control returns to it. Already requested
         and not running: it cannot wait on anything any more (every await
         raises), so it ends as soon as it runs. */
      t->cancel_requested = true;
      continue;
    }
    luna__cancel(b, t);
    n++;
  }
  luna__end_walk(b);
  if (!nested)
    luna__report_held(b, luna__exec_state(b)); /* the run ends: none is lost */
  return nested ? b->ntasks : n;
}

void luna__abandon_all(luna__binding *b) {
  int slot;
  b->ready.count = 0;
  b->ready.head = 0;
  b->ready_spill = b->ready_spill_tail = NULL;
  b->cancels.count = 0;
  b->cancels.head = 0;
  for (slot = 1; slot <= b->nslots && b->anchored > 0; slot++) {
    luna__task *t = luna__anchored(b, slot);
    if (t == NULL || LUNA__SETTLED(t))
      continue;
    disarm(b, t);
    t->aw_head = NULL; /* its awaiters are abandoned too */
    t->cancel_requested = true;
    t->state = LUNA__CANCELLED;
    b->ntasks--;
    /* The outcome a settled task keeps: [error, traceback]. A task that is
       not running has room for two values (it suspended in a C function,
       or has not started). */
    lua_settop(t->co, 0);
    luna__push_cancel_error(t->co);
    lua_pushnil(t->co);
  }
}

void luna__drop_continuation(luna__task *t) {
  t->pending--;
  maybe_release(t->b, t);
}

/* ---- results ------------------------------------------------------------------------ */

bool luna__has_outcome(lua_State *co) {
  luna__task *t = luna__record(co);
  return t == NULL || LUNA__SETTLED(t) || (t->cancel_requested && t->state != LUNA__RUNNING);
}

int luna__push_result(lua_State *L, luna__binding *b, lua_State *co) {
  luna__state state = luna__thread_state(co);
  if (state < LUNA__DONE) { /* a queued cancellation (luna__has_outcome) */
    lua_pushboolean(L, 0);
    luna__push_cancel_error(L);
    return 2;
  }
  if (state == LUNA__FAILED && b->held_failures > 0)
    luna__take_held(L, b, co);
  if (state == LUNA__DONE) {
    int i, n = lua_gettop(co);
    if (n > 0 && lua_touserdata(co, n) == (void *)&settled_mark)
      n--; /* all but the mark (which a coroutine at the end of its stack may lack) */
    luaL_checkstack(L, n + 1, "too many results");
    lua_pushboolean(L, 1);
    for (i = 1; i <= n; i++) {
      lua_pushvalue(co, i);
      lua_xmove(co, L, 1);
    }
    return n + 1;
  }
  lua_pushboolean(L, 0);
  lua_pushvalue(co, 1);
  lua_xmove(co, L, 1);
  return 2;
}
