/*
** group.c: task.group, lifetime and clock groups (docs/groups.md), and the
** C API over them for hosts (luna_lua_group_*, lunaloop_lua.h).
**
** A group is a full userdata (struct luna_lua_group) with a group clock of
** the core (luna__gclock, lunaloop/extension.h): its delays, frame waits,
** deferred starts and g:every callbacks are timers on that clock, so a
** pause or a scale change is O(1) in its members. Its user values:
**   1 members: an array of the threads that joined it, in joining order
**     (creation order); settled ones are pruned when the array has doubled
**     since the last prune, so a long-lived group spawning short tasks
**     stays small;
**   2 children: a weak-keyed set of its child groups;
**   3 its parent group, or nil (a child keeps its parent alive);
**   4 its name, or nil;
**   5 handles: a weak-keyed set of its g:on / g:every handles (removed at
**     cancel; removed ones go with the collector).
** Which group a task is in: a weak-keyed side table thread -> group
** (ephemeron: a member keeps its group alive), and one bit in the task's
** record (grouped), so a task outside every group pays one test on spawn
** and nothing else. A group keeps itself alive while something waits on
** its clock: a waiting task holds it on its await's frame, a handle in its
** second user value.
**
** Cancelling a group closes it and every group below it, removes their
** callbacks, cancels their member tasks in creation order (each unwinds
** at once, running its to-be-closed variables, as t:cancel), wakes the
** tasks that waited on their clocks without being members with the
** cancellation error, and frees their clocks. Closed groups refuse new
** work; a task spawned by a member of a closed group joins no group.
*/
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "lunaloop/extension.h"
#include "lunaloop_lua.h"

#define GROUP_MT "lunaloop.Group"

/* How deep groups nest: every walk over a group's descendants (cancel,
   count, wait; the clock's re-anchoring in the core) recurses once a
   level, so a script cannot nest them without bound. */
#define GROUP_DEPTH_MAX 100

enum { UV_MEMBERS = 1, UV_CHILDREN, UV_PARENT, UV_NAME, UV_HANDLES, UV_COUNT = UV_HANDLES };

struct luna_lua_group {
  luna__binding *b;
  luna__gclock *clock;  /* NULL once closed */
  struct luna_lua_group *parent;
  struct luna_lua_group *prev, *next; /* b->groups, while it has a clock */
  size_t nmembers;      /* the members array's length */
  size_t prune_at;      /* prune settled members when nmembers reaches it */
  size_t settled_below; /* members[1, settled_below] are known settled
                           (g:wait's scan starts after them) */
  int host_ref;         /* the host's reference (luna_lua_group_new) */
  int depth;            /* 0 for a group without a parent */
  bool closed;
  bool linked;          /* on b->groups */
};

typedef struct luna_lua_group group;

static const char group_of_key = 'g'; /* the side table thread -> group */

/* ---- finding groups ----------------------------------------------------- */

static group *test_group(lua_State *L, int idx) {
  return (group *)luaL_testudata(L, idx, GROUP_MT);
}

/* The group at idx, of this state; raises otherwise. */
static group *check_group(lua_State *L, int idx) {
  group *g = (group *)luaL_checkudata(L, idx, GROUP_MT);
  luna__binding *b = luna__get_binding(L);
  if (g->b != b)
    luaL_argerror(L, idx, "the group belongs to another Lua state");
  return g;
}

/* The group at idx, open (not cancelled); raises "<what>: the group is
   cancelled" otherwise. */
static group *check_open(lua_State *L, int idx, const char *what) {
  group *g = check_group(L, idx);
  if (g->closed || g->clock == NULL)
    luaL_error(L, "%s: the group is cancelled (it takes no new work)", what);
  if (g->b->loop == NULL)
    luaL_error(L, "lunaloop: the loop was freed");
  return g;
}

static void unlink_group(group *g) {
  luna__binding *b = g->b;
  if (!g->linked)
    return;
  if (g->prev != NULL)
    g->prev->next = g->next;
  else
    b->groups = g->next;
  if (g->next != NULL)
    g->next->prev = g->prev;
  g->prev = g->next = NULL;
  g->linked = false;
}

/* Frees g's clock and closes it (nothing else: the caller handled its
   tasks and callbacks). */
static void close_clock(group *g, bool loop_alive) {
  if (g->clock != NULL) {
    luna__gclock_free(g->clock, loop_alive);
    g->clock = NULL;
  }
  if (!g->closed) {
    g->closed = true;
    g->b->ngroups--;
  }
  unlink_group(g);
}

/* ---- membership ---------------------------------------------------------- */

/* Drops the settled threads from g's members array (at idx). */
static void prune(lua_State *L, group *g, int idx) {
  size_t r, w = 0;
  lua_getiuservalue(L, idx, UV_MEMBERS);
  for (r = 1; r <= g->nmembers; r++) {
    lua_State *co;
    lua_rawgeti(L, -1, (lua_Integer)r);
    co = lua_tothread(L, -1);
    if (co != NULL && luna__record(co) != NULL && !LUNA__SETTLED(luna__record(co))) {
      lua_rawseti(L, -2, (lua_Integer)++w);
    } else {
      lua_pop(L, 1);
    }
  }
  for (r = w + 1; r <= g->nmembers; r++) {
    lua_pushnil(L);
    lua_rawseti(L, -2, (lua_Integer)r);
  }
  lua_pop(L, 1);
  g->nmembers = w;
  g->settled_below = 0;
  g->prune_at = w * 2 > 64 ? w * 2 : 64;
}

/* Adds the thread on top of L to the group at idx. */
static void add_member(lua_State *L, group *g, int idx) {
  idx = lua_absindex(L, idx);
  if (g->nmembers >= g->prune_at)
    prune(L, g, idx);
  lua_getiuservalue(L, idx, UV_MEMBERS);
  lua_pushvalue(L, -2);
  lua_rawseti(L, -2, (lua_Integer)(g->nmembers + 1));
  g->nmembers++;
  lua_pop(L, 1);
  luna__push_side_table(L, &group_of_key);
  lua_pushvalue(L, -2); /* the thread */
  lua_pushvalue(L, idx);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

/* Pushes the group of the task running now (its thread co), or nothing
   and NULL. */
static group *push_group_of(lua_State *L, lua_State *co) {
  group *g;
  luna__push_side_table(L, &group_of_key);
  lua_pushthread(co);
  lua_xmove(co, L, 1);
  lua_rawget(L, -2);
  lua_remove(L, -2);
  g = test_group(L, -1);
  if (g == NULL)
    lua_pop(L, 1);
  return g;
}

bool luna__group_join(lua_State *L, luna__binding *b, int group_idx) {
  group *g;
  if (group_idx > 0) {
    g = test_group(L, group_idx);
    if (g == NULL)
      return false;
    lua_pushvalue(L, group_idx);
  } else {
    luna__task *p = b->current;
    if (p == NULL || !p->grouped)
      return false;
    g = push_group_of(L, p->co);
    if (g == NULL)
      return false;
    if (g->closed) {
      lua_pop(L, 1);
      return false;
    }
  }
  lua_pushvalue(L, -2); /* the new thread, for add_member */
  add_member(L, g, -2);
  lua_pop(L, 2);
  return true;
}

/* ---- creating ------------------------------------------------------------- */

/* Pushes a new open group under `parent` (at parent_idx, 0: none) named by
   the string at name_idx (0: none). */
static group *new_group(lua_State *L, luna__binding *b, int parent_idx, int name_idx) {
  group *g, *parent = NULL;
  int rc;
  if (b->closing)
    luaL_error(L, LUNA__CLOSING_MSG);
  if (b->loop == NULL)
    luaL_error(L, "lunaloop: the loop was freed");
  if (parent_idx != 0) {
    parent_idx = lua_absindex(L, parent_idx);
    parent = check_group(L, parent_idx);
    if (parent->closed || parent->clock == NULL)
      luaL_error(L, "task.group: the parent group is cancelled");
    if (parent->depth + 1 >= GROUP_DEPTH_MAX)
      luaL_error(L, "task.group: groups nest at most %d deep", GROUP_DEPTH_MAX);
  }
  if (name_idx != 0)
    name_idx = lua_absindex(L, name_idx);
  g = (group *)lua_newuserdatauv(L, sizeof *g, UV_COUNT);
  memset(g, 0, sizeof *g);
  g->b = b;
  g->host_ref = LUA_NOREF;
  g->closed = true; /* until it has a clock: its __gc then does nothing */
  g->prune_at = 64;
  luaL_setmetatable(L, GROUP_MT);
  lua_newtable(L);
  lua_setiuservalue(L, -2, UV_MEMBERS);
  luna__new_weak_table(L, "k");
  lua_setiuservalue(L, -2, UV_CHILDREN);
  luna__new_weak_table(L, "k"); /* a registered handle is held by the registry */
  lua_setiuservalue(L, -2, UV_HANDLES);
  if (name_idx != 0) {
    lua_pushvalue(L, name_idx);
    lua_setiuservalue(L, -2, UV_NAME);
  }
  if (parent != NULL) {
    lua_pushvalue(L, parent_idx);
    lua_setiuservalue(L, -2, UV_PARENT);
    lua_getiuservalue(L, parent_idx, UV_CHILDREN);
    lua_pushvalue(L, -2);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
  }
  /* The clock last: nothing below raises. */
  rc = luna__gclock_new(b->loop, parent != NULL ? parent->clock : NULL, &g->clock);
  if (rc != 0) {
    LUNA__PUSH_MEMERR(L);
    lua_error(L);
  }
  luna__gclock_set_owner(g->clock, g);
  g->parent = parent;
  g->depth = parent != NULL ? parent->depth + 1 : 0;
  g->closed = false;
  b->ngroups++;
  g->next = b->groups;
  if (b->groups != NULL)
    b->groups->prev = g;
  b->groups = g;
  g->linked = true;
  return g;
}

static const char *const group_options[] = {"time_scale", "paused", "name", "parent", NULL};

static double check_scale(lua_State *L, int idx, const char *prefix) {
  lua_Number v;
  int isnum;
  v = lua_tonumberx(L, idx, &isnum);
  if (!isnum)
    luaL_argerror(L, idx, lua_pushfstring(L, "%sexpected a time scale (a number from 0 to "
                                          "1e6), got %s", prefix, luaL_typename(L, idx)));
  if (v != v || v < 0 || v > LUNA_TIME_SCALE_MAX)
    luaL_argerror(L, idx, lua_pushfstring(L, "%sexpected a time scale from 0 to 1e6, got %s",
                                          prefix, luna__number_text(L, v)));
  return (double)v;
}

/* task.group([opts]) -> Group. opts: time_scale (default 1), paused
   (default false), name (a string), parent (a Group; default the group of
   the task running now, false for none). */
static int l_group(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  double scale = 1.0;
  bool paused = false;
  int parent_idx = 0, name_idx = 0;
  group *g;
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luna__check_options(L, 1, group_options);
  } else {
    lua_settop(L, 0);
    lua_newtable(L);
  }
  lua_settop(L, 1);
  lua_getfield(L, 1, "time_scale"); /* 2 */
  if (!lua_isnil(L, 2)) {
    int isnum;
    lua_Number v = lua_tonumberx(L, 2, &isnum);
    if (!isnum)
      luaL_argerror(L, 1, lua_pushfstring(L, "opts.time_scale: expected a number from 0 to "
                                          "1e6, got %s", luaL_typename(L, 2)));
    if (v != v || v < 0 || v > LUNA_TIME_SCALE_MAX)
      luaL_argerror(L, 1, lua_pushfstring(L, "opts.time_scale: expected a number from 0 to "
                                          "1e6, got %s", luna__number_text(L, v)));
    scale = (double)v;
  }
  paused = luna__field_boolean(L, 1, "paused", false);
  lua_getfield(L, 1, "name"); /* 3 */
  if (!lua_isnil(L, 3)) {
    if (lua_type(L, 3) != LUA_TSTRING)
      luaL_argerror(L, 1, lua_pushfstring(L, "opts.name: expected a string, got %s",
                                          luaL_typename(L, 3)));
    name_idx = 3;
  }
  lua_getfield(L, 1, "parent"); /* 4 */
  if (lua_type(L, 4) == LUA_TBOOLEAN && !lua_toboolean(L, 4)) {
    parent_idx = 0;
  } else if (!lua_isnil(L, 4)) {
    group *p = test_group(L, 4);
    if (p == NULL)
      luaL_argerror(L, 1, lua_pushfstring(L, "opts.parent: expected a Group or false, got %s",
                                          luaL_typename(L, 4)));
    if (p->b != b)
      luaL_argerror(L, 1, "opts.parent: the group belongs to another Lua state");
    parent_idx = 4;
  } else if (b->current != NULL && b->current->grouped) {
    group *p = push_group_of(L, b->current->co); /* 5 */
    if (p != NULL && !p->closed)
      parent_idx = 5;
  }
  g = new_group(L, b, parent_idx, name_idx);
  if (scale != 1.0)
    (void)luna__gclock_set_scale(g->clock, scale);
  if (paused)
    (void)luna__gclock_set_paused(g->clock, true);
  return 1;
}

/* ---- cancelling ------------------------------------------------------------ */

typedef struct member_ref {
  uint64_t id;
  int index; /* in the scratch table */
} member_ref;

static int by_id(const void *x, const void *y) {
  uint64_t a = ((const member_ref *)x)->id, b = ((const member_ref *)y)->id;
  return a < b ? -1 : a > b;
}

/* Appends the group at idx and its open descendants to the array at list
   (depth first, parents before children). */
static void collect_groups(lua_State *L, int idx, int list, int *n) {
  group *g = (group *)lua_touserdata(L, idx);
  idx = lua_absindex(L, idx);
  luaL_checkstack(L, 4, "lunaloop: nested groups");
  if (g->closed)
    return;
  lua_pushvalue(L, idx);
  lua_rawseti(L, list, ++*n);
  lua_getiuservalue(L, idx, UV_CHILDREN);
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    lua_pop(L, 1);
    collect_groups(L, -1, list, n);
  }
  lua_pop(L, 1);
}

typedef struct clear_ctx {
  luna__binding *b;
  lua_State *L;
} clear_ctx;

void luna__group_timer_cb(luna_loop *loop, void *arg);

/* A timer left on a cancelled group's clock: a task that waited on it
   without being a member gets the cancellation error; a deferred start of
   a member (settled by now) lets go of its record. */
static void clear_one(void *ud, luna_fn fn, void *arg) {
  clear_ctx *c = (clear_ctx *)ud;
  luna__task *t = (luna__task *)arg;
  if (fn == luna__group_timer_cb) {
    if (t->state == LUNA__SUSPENDED && t->wait == LUNA__W_GROUP) {
      t->wait = LUNA__W_NONE;
      luna__push_cancel_error(t->co);
      luna__wake(c->b, t, t->co, 1, true);
    }
  } else if (fn == luna__start_cb) {
    luna__drop_continuation(t);
  }
}

/* Closes the ngroups groups of the array at list for new work and removes
   their callbacks (none runs while the members unwind). Raises nothing:
   everything that allocates is done before it. */
static void close_groups(lua_State *L, int list, int ngroups) {
  int i;
  for (i = 1; i <= ngroups; i++) {
    group *k;
    lua_rawgeti(L, list, i);
    k = (group *)lua_touserdata(L, -1);
    k->closed = true; /* refuse new work from now on */
    k->b->ngroups--;
    lua_getiuservalue(L, -1, UV_HANDLES);
    lua_pushnil(L);
    while (lua_next(L, -2) != 0) {
      lua_pop(L, 1);
      luna__remove_handle((luna__handle *)lua_touserdata(L, -1));
    }
    lua_pop(L, 2);
  }
}

/* Cancels one member (t NULL or settled: nothing); 1 when it was live. */
static size_t cancel_member(luna__binding *b, luna__task *t, bool nested) {
  if (t == NULL || LUNA__SETTLED(t))
    return 0;
  if (nested) {
    luna__cancel(b, t); /* queued behind the cancellation unwinding */
    return 1;
  }
  if (t->state == LUNA__RUNNING || t->cancel_requested) {
    /* Running (the caller, or a task that resumed it): it unwinds when
       control returns to it. Requested already: it ends when it runs. */
    t->cancel_requested = true;
    return 1;
  }
  luna__cancel(b, t);
  return 1;
}

/* Cancels the group at idx (see the top of the file). Returns the number
   of tasks cancelled. Runs the members' to-be-closed variables. */
static size_t cancel_group(lua_State *L, int idx) {
  group *g = (group *)lua_touserdata(L, idx);
  luna__binding *b = g->b;
  int top = lua_gettop(L), list, tasks, ngroups = 0, ntasks = 0, i;
  member_ref *refs;
  size_t cancelled = 0;
  bool nested = b->cancelling;
  lua_State *saved;
  if (g->closed)
    return 0;
  idx = lua_absindex(L, idx);
  lua_newtable(L);
  list = lua_gettop(L);
  collect_groups(L, idx, list, &ngroups);
  if (ngroups == 1) {
    /* One group: its members array is in creation order already (a task
       joins when it is made), and a closed group's array never changes. */
    size_t m;
    lua_getiuservalue(L, idx, UV_MEMBERS);
    tasks = lua_gettop(L);
    close_groups(L, list, ngroups);
    saved = luna__enter_exec(b, L); /* nothing raises from here on */
    for (m = 1; m <= g->nmembers; m++) {
      lua_State *co;
      lua_rawgeti(L, tasks, (lua_Integer)m);
      co = lua_tothread(L, -1);
      lua_pop(L, 1);
      if (co != NULL)
        cancelled += cancel_member(b, luna__record(co), nested);
    }
    goto clocks;
  }
  /* The members of all of them, in creation order. */
  lua_newtable(L);
  tasks = lua_gettop(L);
  for (i = 1; i <= ngroups; i++) {
    group *k;
    size_t m;
    lua_rawgeti(L, list, i);
    k = (group *)lua_touserdata(L, -1);
    lua_getiuservalue(L, -1, UV_MEMBERS);
    for (m = 1; m <= k->nmembers; m++) {
      lua_State *co;
      lua_rawgeti(L, -1, (lua_Integer)m);
      co = lua_tothread(L, -1);
      if (co != NULL && luna__record(co) != NULL && !LUNA__SETTLED(luna__record(co)))
        lua_rawseti(L, tasks, ++ntasks);
      else
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
  }
  refs = (member_ref *)lua_newuserdatauv(L, sizeof *refs * (size_t)(ntasks > 0 ? ntasks : 1), 0);
  for (i = 1; i <= ntasks; i++) {
    lua_rawgeti(L, tasks, i);
    refs[i - 1].id = luna__record(lua_tothread(L, -1))->id;
    refs[i - 1].index = i;
    lua_pop(L, 1);
  }
  qsort(refs, (size_t)ntasks, sizeof *refs, by_id);
  close_groups(L, list, ngroups);
  saved = luna__enter_exec(b, L); /* nothing raises from here on */
  for (i = 0; i < ntasks; i++) {
    lua_rawgeti(L, tasks, refs[i].index);
    cancelled += cancel_member(b, luna__record(lua_tothread(L, -1)), nested);
    lua_pop(L, 1);
  }
clocks:
  /* What still waits on their clocks is no member of theirs. */
  for (i = ngroups; i >= 1; i--) {
    group *k;
    clear_ctx c;
    lua_rawgeti(L, list, i);
    k = (group *)lua_touserdata(L, -1);
    lua_pop(L, 1);
    c.b = b;
    c.L = L;
    if (k->clock != NULL)
      (void)luna__gclock_clear(k->clock, clear_one, &c);
    close_clock(k, b->loop != NULL);
  }
  luna__leave_exec(b, saved);
  lua_settop(L, top);
  luna__pump(b);
  return cancelled;
}

/* ---- the methods ------------------------------------------------------------- */

/* g:cancel() -> number of tasks cancelled. Also __close. When the caller is
   a member, it unwinds as soon as this returns. */
static int l_cancel(lua_State *L) {
  group *g = check_group(L, 1);
  luna__binding *b = g->b;
  bool before = luna__cancel_pending(L, b);
  size_t n = cancel_group(L, 1);
  luna__check_cancelled(L, b, before);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static int l_close(lua_State *L) {
  group *g = check_group(L, 1);
  luna__binding *b = g->b;
  bool before = luna__cancel_pending(L, b);
  (void)cancel_group(L, 1);
  luna__check_cancelled(L, b, before);
  return 0;
}

static int spawn_into(lua_State *L, const char *what, int mode) {
  group *g = check_open(L, 1, what);
  luna__binding *b = g->b;
  luna__task *t;
  int fn = 2;
  luna_timing timing = LUNA_UPDATE;
  if (mode == 2) { /* spawn_at */
    if (lua_isnoneornil(L, 2))
      return luaL_argerror(L, 2, "expected a timing name");
    timing = luna__opt_timing(L, 2, LUNA_UPDATE);
    fn = 3;
  }
  luaL_checktype(L, fn, LUA_TFUNCTION);
  t = luna__new_task_in(L, b, fn, lua_gettop(L) - fn, 1);
  if (mode == 0) {
    bool before = luna__cancel_pending(L, b);
    lua_State *saved = luna__enter_exec(b, L);
    luna__start(b, t);
    luna__leave_exec(b, saved);
    luna__check_cancelled(L, b, before);
    return 1;
  }
  /* A deferred start waits on the group's clock: not while it is paused. */
  {
    int rc = luna__gclock_add_timer(g->clock, timing, LUNA_TIMER_FRAME,
                                    luna__gclock_frames(g->clock), luna__start_cb, t, NULL);
    if (rc != 0) {
      luna__cancel(b, t);
      return luaL_error(L, "%s: cannot queue the task: %s", what, luna_strerror(rc));
    }
    t->pending++;
    t->wait = LUNA__W_START;
    t->timing = (uint8_t)timing;
  }
  return 1;
}

/* g:spawn(fn, ...) -> Task: task.spawn, the task a member of g. */
static int l_spawn(lua_State *L) { return spawn_into(L, "g:spawn", 0); }
/* g:defer(fn, ...) -> Task: starts at the next run of Update at which g is
   not paused. */
static int l_defer(lua_State *L) { return spawn_into(L, "g:defer", 1); }
/* g:spawn_at(timing, fn, ...) -> Task: likewise at `timing`. */
static int l_spawn_at(lua_State *L) { return spawn_into(L, "g:spawn_at", 2); }

/* The timer of a task's wait on a group clock fired. */
void luna__group_timer_cb(luna_loop *loop, void *arg) {
  luna__task *t = (luna__task *)arg;
  (void)loop;
  luna__wake(t->b, t, t->co, 0, false);
  luna__pump(t->b);
}

/* The group at 1, open, for one of its awaits. A calling task whose
   cancellation is pending (it caught the error of its own g:cancel(), or
   a host function cancelled the group under it) unwinds here with the
   cancellation error, as at any await, instead of failing on the closed
   group. */
static group *check_await_group(lua_State *L, const char *what) {
  group *g = check_group(L, 1);
  luna__task *t = g->b->current;
  if ((g->closed || g->clock == NULL) && t != NULL && t->co == L && t->cancel_requested)
    (void)luna__check_await_in(L, g->b, what); /* raises the cancellation error */
  return check_open(L, 1, what);
}

/* Suspends the calling task on g's clock until it reads `deadline`. */
static int group_wait(lua_State *L, group *g, luna__task *t, luna_timing timing,
                      luna_timer_kind kind, int64_t deadline) {
  int rc = luna__gclock_add_timer(g->clock, timing, kind, deadline, luna__group_timer_cb, t,
                                  &t->on.gtimer.id);
  if (rc != 0)
    return luaL_error(L, "lunaloop: cannot add a timer: %s", luna_strerror(rc));
  t->on.gtimer.clock = g->clock;
  t->wait = LUNA__W_GROUP;
  t->timing = (uint8_t)timing;
  lua_settop(L, 1); /* the group stays alive while the task waits on it */
  return luna__suspend(L, t);
}

/* g:delay(seconds, [timing]): task.delay on the group's clock. */
static int l_delay(lua_State *L) {
  group *g = check_await_group(L, "g:delay");
  luna_ns ns = luna__check_seconds(L, 2);
  luna_timing timing = luna__opt_timing(L, 3, LUNA_UPDATE);
  luna__task *t;
  if (lua_gettop(L) > 3)
    return luaL_argerror(L, 4, "g:delay waits on the group's clock only (use task.delay "
                               "for the unscaled, realtime and fixed clocks)");
  t = luna__check_await_in(L, g->b, "g:delay");
  return group_wait(L, g, t, timing, LUNA_TIMER_SCALED,
                    luna_ns_add(luna__gclock_time(g->clock), ns));
}

/* g:yield([timing]): the next run of `timing` at which g is not paused. */
static int l_yield(lua_State *L) {
  group *g = check_await_group(L, "g:yield");
  luna_timing timing = luna__opt_timing(L, 2, LUNA_UPDATE);
  luna__task *t = luna__check_await_in(L, g->b, "g:yield");
  return group_wait(L, g, t, timing, LUNA_TIMER_FRAME, luna__gclock_frames(g->clock));
}

/* g:next_frame([timing]): the first run of `timing` after one more frame
   of g (frames count while g is not paused). */
static int l_next_frame(lua_State *L) {
  group *g = check_await_group(L, "g:next_frame");
  luna_timing timing = luna__opt_timing(L, 2, LUNA_UPDATE);
  luna__task *t = luna__check_await_in(L, g->b, "g:next_frame");
  return group_wait(L, g, t, timing, LUNA_TIMER_FRAME, luna__gclock_frames(g->clock) + 1);
}

/* g:delay_frame(n, [timing]): after n more frames of g. */
static int l_delay_frame(lua_State *L) {
  group *g = check_await_group(L, "g:delay_frame");
  lua_Integer n = luaL_checkinteger(L, 2);
  luna_timing timing;
  luna__task *t;
  if (n < 0)
    return luaL_argerror(L, 2, lua_pushfstring(L, "expected a non-negative frame count, got %I",
                                               n));
  timing = luna__opt_timing(L, 3, LUNA_UPDATE);
  t = luna__check_await_in(L, g->b, "g:delay_frame");
  if (n > LUNA_NS_MAX)
    n = LUNA_NS_MAX;
  return group_wait(L, g, t, timing, LUNA_TIMER_FRAME, luna__gclock_frames(g->clock) + n);
}

/* g:pause(), g:resume(): stop and restart the group's clock (and so its
   delays, frame waits, deferred starts and callbacks, and its
   descendants'). O(1) in its members. */
static int set_paused(lua_State *L, bool paused, const char *what) {
  group *g = check_open(L, 1, what);
  if (luna__gclock_set_paused(g->clock, paused) != 0)
    return luaL_error(L, "%s: %s", what, luna_strerror(LUNA_ENOMEM));
  lua_settop(L, 1);
  return 1;
}
static int l_pause(lua_State *L) { return set_paused(L, true, "g:pause"); }
static int l_resume(lua_State *L) { return set_paused(L, false, "g:resume"); }

/* g:paused() -> true when g or an ancestor is paused. */
static int l_paused(lua_State *L) {
  group *g = check_group(L, 1);
  lua_pushboolean(L, g->clock != NULL && luna__gclock_paused(g->clock));
  return 1;
}

/* g:time_scale([x]) -> its own scale (after setting it to x). */
static int l_time_scale(lua_State *L) {
  group *g = check_group(L, 1);
  if (!lua_isnoneornil(L, 2)) {
    double x = check_scale(L, 2, "");
    g = check_open(L, 1, "g:time_scale");
    if (luna__gclock_set_scale(g->clock, x) != 0)
      return luaL_error(L, "g:time_scale: %s", luna_strerror(LUNA_ENOMEM));
  }
  lua_pushnumber(L, g->clock != NULL ? luna__gclock_scale(g->clock) : 0.0);
  return 1;
}

/* g:effective_scale() -> its scale times its ancestors' (0 while paused
   counts as its scale: see g:paused()). */
static int l_effective_scale(lua_State *L) {
  group *g = check_group(L, 1);
  lua_pushnumber(L, g->clock != NULL ? luna__gclock_effective_scale(g->clock) : 0.0);
  return 1;
}

/* g:time() -> seconds on the group's clock; g:frame() -> frames it ran. */
static int l_time(lua_State *L) {
  group *g = check_open(L, 1, "g:time");
  lua_pushnumber(L, (lua_Number)luna__gclock_time(g->clock) / 1e9);
  return 1;
}

static int l_frame(lua_State *L) {
  group *g = check_open(L, 1, "g:frame");
  lua_pushinteger(L, (lua_Integer)luna__gclock_frames(g->clock));
  return 1;
}

/* g:on(...), g:every(...): task.on and task.every as callbacks of g. */
/* Notes the Handle on top of L among the group's (at 1) handles. */
static void note_handle(lua_State *L) {
  lua_getiuservalue(L, 1, UV_HANDLES);
  lua_pushvalue(L, -2);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

static int l_on(lua_State *L) {
  group *g = check_open(L, 1, "g:on");
  luna__group_on(L, g->b, g->clock);
  note_handle(L);
  return 1;
}

static int l_every(lua_State *L) {
  group *g = check_open(L, 1, "g:every");
  luna__group_every(L, g->b, g->clock);
  note_handle(L);
  return 1;
}

/* g:members() -> array of the member tasks not settled, in creation order
   (members of child groups not included). */
static int l_members(lua_State *L) {
  group *g = check_group(L, 1);
  size_t m;
  int n = 0;
  lua_settop(L, 1);
  lua_newtable(L);
  lua_getiuservalue(L, 1, UV_MEMBERS);
  for (m = 1; m <= g->nmembers; m++) {
    lua_State *co;
    lua_rawgeti(L, 3, (lua_Integer)m);
    co = lua_tothread(L, -1);
    if (co != NULL && luna__record(co) != NULL && !LUNA__SETTLED(luna__record(co)))
      lua_rawseti(L, 2, ++n);
    else
      lua_pop(L, 1);
  }
  lua_settop(L, 2);
  return 1;
}

/* g:count() -> its live members, those of its open descendants included. */
static size_t count_live(lua_State *L, int idx) {
  group *g = (group *)lua_touserdata(L, idx);
  size_t m, n = 0;
  idx = lua_absindex(L, idx);
  luaL_checkstack(L, 4, "lunaloop: nested groups");
  lua_getiuservalue(L, idx, UV_MEMBERS);
  for (m = 1; m <= g->nmembers; m++) {
    lua_State *co;
    lua_rawgeti(L, -1, (lua_Integer)m);
    co = lua_tothread(L, -1);
    if (co != NULL && luna__record(co) != NULL && !LUNA__SETTLED(luna__record(co)))
      n++;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  lua_getiuservalue(L, idx, UV_CHILDREN);
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    lua_pop(L, 1);
    n += count_live(L, -1);
  }
  lua_pop(L, 1);
  return n;
}

static int l_count(lua_State *L) {
  check_group(L, 1);
  lua_pushinteger(L, (lua_Integer)count_live(L, 1));
  return 1;
}

/* The first live member of the group at idx or its descendants that is
   not `self` (pushed), or nothing and false. */
static bool push_first_live(lua_State *L, int idx, luna__task *self) {
  group *g = (group *)lua_touserdata(L, idx);
  size_t m;
  bool below = true; /* everything before m is settled so far */
  idx = lua_absindex(L, idx);
  luaL_checkstack(L, 4, "lunaloop: nested groups");
  lua_getiuservalue(L, idx, UV_MEMBERS);
  /* A settled member never lives again: each scan starts after those the
     last one passed, so g:wait over N members costs O(N) in all. */
  for (m = g->settled_below + 1; m <= g->nmembers; m++) {
    lua_State *co;
    luna__task *t;
    lua_rawgeti(L, -1, (lua_Integer)m);
    co = lua_tothread(L, -1);
    t = co != NULL ? luna__record(co) : NULL;
    if (t != NULL && !LUNA__SETTLED(t)) {
      if (t != self) {
        lua_remove(L, -2);
        return true;
      }
      below = false;
    } else if (below) {
      g->settled_below = m;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  lua_getiuservalue(L, idx, UV_CHILDREN);
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    lua_pop(L, 1);
    if (push_first_live(L, -1, self)) {
      lua_replace(L, -3); /* over the children table; drops the key */
      lua_pop(L, 1);
      return true;
    }
  }
  lua_pop(L, 1);
  return false;
}

/* internal for g:wait (group.lua): g:_next_live() -> a live member other
   than the caller, or nil. */
static int l_next_live(lua_State *L) {
  luna__binding *b;
  check_group(L, 1);
  b = luna__get_binding(L);
  if (!push_first_live(L, 1, b->current))
    lua_pushnil(L);
  return 1;
}

static int l_is_member(lua_State *L) {
  group *g = check_group(L, 1);
  lua_State *co = luna__check_thread(L, 2);
  group *k;
  luna__push_side_table(L, &group_of_key);
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  k = test_group(L, -1);
  (void)co;
  while (k != NULL && k != g)
    k = k->parent;
  lua_pushboolean(L, k == g);
  return 1;
}

/* g:cancelled() -> true once cancelled. */
static int l_cancelled(lua_State *L) {
  lua_pushboolean(L, check_group(L, 1)->closed);
  return 1;
}

/* g:parent() -> the parent Group or nil. */
static int l_parent(lua_State *L) {
  check_group(L, 1);
  lua_getiuservalue(L, 1, UV_PARENT);
  return 1;
}

static int l_tostring(lua_State *L) {
  group *g = check_group(L, 1);
  const char *state = g->closed ? "cancelled"
                      : (g->clock != NULL && luna__gclock_paused(g->clock)) ? "paused"
                                                                            : "running";
  if (lua_getiuservalue(L, 1, UV_NAME) == LUA_TSTRING)
    lua_pushfstring(L, "Group(%s, %s): %p", lua_tostring(L, -1), state, (void *)g);
  else
    lua_pushfstring(L, "Group(%s): %p", state, (void *)g);
  return 1;
}

void luna__every_cb(luna_loop *loop, void *arg);

/* A timer left on the clock of a group being finalized while it is still
   in use, which happens only when the state closes (lua_close finalizes
   everything, the groups before the binding, which then abandons the
   tasks): nothing may point at the clock once it is freed. */
static void orphan_one(void *ud, luna_fn fn, void *arg) {
  (void)ud;
  if (fn == luna__group_timer_cb) {
    luna__task *t = (luna__task *)arg;
    if (t->state == LUNA__SUSPENDED && t->wait == LUNA__W_GROUP)
      t->wait = LUNA__W_NONE; /* abandoned with the state, never woken */
  } else if (fn == luna__start_cb) {
    luna__drop_continuation((luna__task *)arg);
  } else if (fn == luna__every_cb) {
    luna__handle *h = (luna__handle *)arg;
    h->clock = NULL;
    h->timer.id = 0;
  }
}

static int l_gc(lua_State *L) {
  group *g = (group *)lua_touserdata(L, 1);
  if (g->b == NULL || !g->linked)
    return 0;
  /* Its handles forget the clock (g:on's read it at each call, and
     removing a g:every cancels its timer there). */
  if (lua_getiuservalue(L, 1, UV_HANDLES) == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2) != 0) {
      luna__handle *h = (luna__handle *)lua_touserdata(L, -2);
      lua_pop(L, 1);
      if (h != NULL && h->clock != NULL) {
        h->clock = NULL;
        if (h->active)
          h->timer.id = 0; /* an every's timer goes with the clock */
      }
    }
  }
  lua_pop(L, 1);
  if (g->clock != NULL && luna__gclock_count(g->clock) > 0)
    (void)luna__gclock_clear(g->clock, orphan_one, NULL);
  close_clock(g, g->b->loop != NULL);
  return 0;
}

static int l_index(lua_State *L) {
  const char *k = lua_tostring(L, 2);
  if (k != NULL && strcmp(k, "name") == 0) {
    check_group(L, 1);
    lua_getiuservalue(L, 1, UV_NAME);
    return 1;
  }
  lua_pushvalue(L, lua_upvalueindex(1)); /* the methods */
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  return 1;
}

bool luna__group_wait_stuck(const luna__task *t) {
  const group *g = (const group *)luna__gclock_owner((luna__gclock *)t->on.gtimer.clock);
  return g == NULL || g->host_ref == LUA_NOREF;
}

void luna__groups_reset(luna__binding *b) {
  group *g;
  clear_ctx c;
  c.b = b;
  c.L = luna__exec_state(b);
  for (g = b->groups; g != NULL; g = g->next)
    if (g->clock != NULL)
      (void)luna__gclock_clear(g->clock, clear_one, &c);
}

void luna__groups_detach(luna__binding *b, bool loop_alive) {
  clear_ctx c;
  c.b = b;
  c.L = b->L;
  while (b->groups != NULL) {
    group *g = b->groups;
    /* The deferred starts its clock holds let go of their tasks' records
       (the tasks were settled by the cancellation before this). */
    if (loop_alive && g->clock != NULL)
      (void)luna__gclock_clear(g->clock, clear_one, &c);
    close_clock(g, loop_alive);
  }
}

/* task.ungrouped(fn, ...) -> Task: task.spawn outside every group, even
   from a member. */
static int l_ungrouped(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  luna__task *t;
  bool before = luna__cancel_pending(L, b);
  lua_State *saved;
  luaL_checktype(L, 1, LUA_TFUNCTION);
  t = luna__new_task_in(L, b, 1, lua_gettop(L) - 1, -1);
  saved = luna__enter_exec(b, L);
  luna__start(b, t);
  luna__leave_exec(b, saved);
  luna__check_cancelled(L, b, before);
  return 1;
}

/* task.group_of(t) -> the Group t is a direct member of, or nil. */
static int l_group_of(lua_State *L) {
  luna__check_thread(L, 1);
  luna__push_side_table(L, &group_of_key);
  lua_pushvalue(L, 1);
  lua_rawget(L, -2);
  return 1;
}

static const luaL_Reg group_methods[] = {
    {"spawn", l_spawn},       {"defer", l_defer},
    {"spawn_at", l_spawn_at}, {"delay", l_delay},
    {"yield", l_yield},       {"next_frame", l_next_frame},
    {"delay_frame", l_delay_frame}, {"on", l_on},
    {"every", l_every},       {"pause", l_pause},
    {"resume", l_resume},     {"paused", l_paused},
    {"time_scale", l_time_scale}, {"effective_scale", l_effective_scale},
    {"time", l_time},         {"frame", l_frame},
    {"cancel", l_cancel},     {"cancelled", l_cancelled},
    {"members", l_members},   {"count", l_count},
    {"has", l_is_member},     {"parent", l_parent},
    {"_next_live", l_next_live}, {NULL, NULL}};

static const luaL_Reg module_group_funcs[] = {
    {"group", l_group}, {"ungrouped", l_ungrouped}, {"group_of", l_group_of}, {NULL, NULL}};

void luna__open_groups(lua_State *L, luna__binding *b) {
  luaL_newmetatable(L, GROUP_MT);
  lua_pushcfunction(L, l_close);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, l_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_tostring);
  lua_setfield(L, -2, "__tostring");
  luaL_newlib(L, group_methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -4, "__group_methods"); /* for group.lua (g:wait), which takes it off */
  lua_pushcclosure(L, l_index, 1);
  lua_setfield(L, -2, "__index");
  luna__protect_metatable(L);
  lua_pop(L, 1);
  lua_pushlightuserdata(L, b);
  luaL_setfuncs(L, module_group_funcs, 1);
}

/* ---- the C API ------------------------------------------------------------------ */

typedef struct new_args {
  const char *name;
  luna_lua_group *parent;
  luna_lua_group *out;
} new_args;

static int p_new(lua_State *L) {
  new_args *a = (new_args *)lua_touserdata(L, 1);
  luna__binding *b = luna__check_binding(L);
  int parent_idx = 0, name_idx = 0;
  if (a->parent != NULL) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, a->parent->host_ref);
    parent_idx = lua_gettop(L);
  }
  if (a->name != NULL) {
    lua_pushstring(L, a->name);
    name_idx = lua_gettop(L);
  }
  a->out = new_group(L, b, parent_idx, name_idx);
  a->out->host_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

static bool owned(lua_State *L, const luna_lua_group *g) {
  return g != NULL && g->b != NULL && g->b == luna__get_binding(L) && g->host_ref != LUA_NOREF;
}

LUNA_API luna_lua_group *luna_lua_group_new(lua_State *L, const char *name,
                                            luna_lua_group *parent) {
  new_args a;
  int st;
  if (luna__get_binding(L) == NULL || (parent != NULL && !owned(L, parent)))
    return NULL;
  a.name = name;
  a.parent = parent;
  a.out = NULL;
  lua_pushcfunction(L, p_new);
  lua_pushlightuserdata(L, &a);
  st = lua_pcall(L, 1, 0, 0);
  if (st != LUA_OK) {
    lua_pop(L, 1);
    return NULL;
  }
  return a.out;
}

LUNA_API int luna_lua_group_push(lua_State *L, luna_lua_group *g) {
  if (!owned(L, g))
    return LUNA_EINVAL;
  lua_rawgeti(L, LUA_REGISTRYINDEX, g->host_ref);
  return 0;
}

static int p_cancel(lua_State *L) {
  luna_lua_group *g = (luna_lua_group *)lua_touserdata(L, 1);
  size_t *n = (size_t *)lua_touserdata(L, 2);
  lua_rawgeti(L, LUA_REGISTRYINDEX, g->host_ref);
  *n = cancel_group(L, 3);
  return 0;
}

LUNA_API int luna_lua_group_cancel(lua_State *L, luna_lua_group *g, size_t *cancelled) {
  size_t n = 0;
  int st;
  if (!owned(L, g))
    return LUNA_EINVAL;
  lua_pushcfunction(L, p_cancel);
  lua_pushlightuserdata(L, g);
  lua_pushlightuserdata(L, &n);
  st = lua_pcall(L, 2, 0, 0);
  if (cancelled != NULL)
    *cancelled = n;
  if (st != LUA_OK) {
    lua_pop(L, 1);
    return LUNA_ENOMEM;
  }
  return 0;
}

LUNA_API int luna_lua_group_set_paused(lua_State *L, luna_lua_group *g, bool paused) {
  if (!owned(L, g))
    return LUNA_EINVAL;
  if (g->closed || g->clock == NULL)
    return LUNA_ESTATE;
  return luna__gclock_set_paused(g->clock, paused);
}

LUNA_API int luna_lua_group_set_time_scale(lua_State *L, luna_lua_group *g, double scale) {
  if (!owned(L, g))
    return LUNA_EINVAL;
  if (g->closed || g->clock == NULL)
    return LUNA_ESTATE;
  return luna__gclock_set_scale(g->clock, scale);
}

LUNA_API bool luna_lua_group_cancelled(lua_State *L, const luna_lua_group *g) {
  return !owned(L, g) || g->closed;
}

LUNA_API int luna_lua_group_spawn(lua_State *L, luna_lua_group *g, int nargs, const char *name) {
  int fn;
  if (!owned(L, g) || nargs < 0 || lua_gettop(L) < nargs + 1)
    return LUNA_EINVAL;
  if (g->closed || g->clock == NULL)
    return LUNA_ESTATE;
  fn = lua_gettop(L) - nargs;
  if (lua_type(L, fn) != LUA_TFUNCTION)
    return LUNA_EINVAL;
  /* g:spawn(fn, ...) through the method, for its checks and its start. */
  lua_rawgeti(L, LUA_REGISTRYINDEX, g->host_ref);
  lua_getfield(L, -1, "spawn");
  lua_insert(L, fn);
  lua_insert(L, fn + 1); /* spawn, group, fn, args */
  lua_call(L, nargs + 2, 1);
  if (name != NULL) {
    lua_pushstring(L, name);
    luna__set_name(L, -2);
  }
  return 0;
}

LUNA_API void luna_lua_group_release(lua_State *L, luna_lua_group *g) {
  if (!owned(L, g))
    return;
  luaL_unref(L, LUA_REGISTRYINDEX, g->host_ref);
  g->host_ref = LUA_NOREF;
}
