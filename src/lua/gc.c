/*
** gc.c: the garbage collector paced by the frame (docs/frame-time.md).
** One pacer per loop, kept in the loop's pacer slot (lunaloop/extension.h),
** with every Lua state on the loop as a member; a member is paced with its
** own settings (task.gc, luna_lua_gc_set) or with the loop's
** (luna_lua_gc_set_loop), which the members without their own share.
**
** The work happens in three places only, so that a state without pacing
** pays nothing on any resume: an essential runner item at the end of each
** paced timing's run (pace_timing), the time a driver would sleep before
** the next frame (luna_lua_gc_idle), and nowhere else. Steps are measured
** on the loop's cost clock, the one the runner's budgets read.
** Includes binding.h, lunaloop/extension.h and the public lunaloop_lua.h.
*/
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "binding.h"
#include "lunaloop/extension.h"
#include "lunaloop_lua.h"

/* With the automatic collector stopped, a new cycle begins as soon as the
   heap has grown by this much since the last one ended: the collector then
   works through cycles back to back, a budget's worth a frame, as long as
   the state allocates (as Unity's incremental collector uses each frame's
   time slice). Waiting for Lua's own pause (the heap at twice what the last
   cycle left) let the heap pass a ceiling of four times the live bytes
   before the cycle begun then could end, and the ceiling's full collection
   was the run's longest frame (W8, performance.md). */
#define CYCLE_MIN_BYTES ((size_t)64 * 1024)
/* With the automatic collector running, the pacer begins its cycle
   earlier than Lua would, so that the cycle's work lands in paced steps
   rather than in the automatic steps of the next frame's allocations. */
#define AHEAD_PERCENT 150
/* Generational mode: a minor collection is due once the heap grew by this
   percentage of what the last one left (half of Lua's default minor
   multiplier, 20%, so the paced one comes before Lua's automatic one), and
   by at least MINOR_MIN_BYTES, so that a small heap is not collected every
   frame. */
#define MINOR_PERCENT 10
#define MINOR_MIN_BYTES ((size_t)64 * 1024)
/* The size of an incremental basic step that the pacer sets, as the log2
   of bytes (collectgarbage("incremental")'s stepsize; Lua's default is
   13, 8 KB): 1 KB makes a step about an eighth of Lua's, so the last step
   of a frame overshoots its budget by that much less. */
#define STEP_LOG2 10
/* The slice that full-collect requests of states without a budget share
   per frame at their timing: one millisecond, a small part of a 60 Hz
   frame, however many mods ask. */
#define REQUEST_BUDGET_NS ((luna_ns)1000 * 1000)
/* With a `frame` setting, the least part of the budget a frame gets
   however much of the frame is used (budget / FRAME_FLOOR_PART): heavy
   frames still move the cycle on, so that a run of them does not leave
   the heap to climb until they end. The rest of what they do not get is
   not made up elsewhere: the budget must keep up with the allocation rate
   on the frames' mix (frame-time.md). */
#define FRAME_FLOOR_PART 4

/* A paced timing's runner item: its argument names the pacer and timing. */
typedef struct pace_item {
  luna__gc_pacer *pacer;
  int timing;
  bool added;        /* registered on the loop (until a reset drops it) */
  luna_item_id id;
} pace_item;

struct luna__gc_pacer {
  luna_loop *loop;
  bool loop_set;                 /* luna_lua_gc_set_loop gave settings */
  luna_lua_gc_options opts;      /* those settings */
  luna__gc_member *members;
  luna__gc_member *cursor;       /* the next member of a walk: a member that
                                    leaves during one (a finalizer closed
                                    its state) moves it on */
  pace_item items[LUNA_TIMING_COUNT];
};

/* ---- helpers ---------------------------------------------------------------- */

static luna__binding *member_binding(luna__gc_member *m) {
  return (luna__binding *)(void *)((char *)m - offsetof(luna__binding, gc));
}

static lua_State *member_state(luna__gc_member *m) {
  return member_binding(m)->L;
}

/* Bytes in use; 0 inside a __gc metamethod, where Lua refuses every
   lua_gc call (-1). */
static size_t bytes_of(lua_State *L) {
  int kb = lua_gc(L, LUA_GCCOUNT);
  return kb < 0 ? 0 : (size_t)kb * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB);
}

/* Whether L's collector is running a __gc metamethod now: Lua then
   ignores every lua_gc call, so settings cannot be applied. */
static bool in_finalizer(lua_State *L) {
  return lua_gc(L, LUA_GCISRUNNING) < 0;
}

static luna_ns cost_now(const luna__gc_pacer *p) {
  return luna__loop_cost_now(p->loop);
}

/* The settings m is paced with, or NULL when it is not paced. */
static const luna_lua_gc_options *settings_of(const luna__gc_member *m) {
  const luna_lua_gc_options *o = NULL;
  if (m->own)
    o = &m->opts;
  else if (m->pacer != NULL && m->pacer->loop_set)
    o = &m->pacer->opts;
  if (o != NULL && o->budget == 0 && !o->idle && o->ceiling == 0)
    return NULL;
  return o;
}

static int timing_of(const luna_lua_gc_options *o) {
  return o != NULL && o->timing != 0 ? (int)o->timing : LUNA_LAST_TIME_UPDATE;
}

/* Whether a and b are the same settings, field by field. */
static bool same_options(const luna_lua_gc_options *a, const luna_lua_gc_options *b) {
  return a->budget == b->budget && a->timing == b->timing && a->ceiling == b->ceiling &&
         a->stop_auto == b->stop_auto && a->idle == b->idle &&
         a->generational == b->generational && a->frame == b->frame;
}

static bool valid_options(const luna_lua_gc_options *o) {
  return o->budget >= 0 && o->frame >= 0 && (int)o->timing >= 0 &&
         (int)o->timing < LUNA_TIMING_COUNT;
}

/* The part of `budget` a frame gets now under settings o: all of it
   without a `frame` setting; with one, what is left of the frame since it
   began (luna__loop_frame_began), between budget / FRAME_FLOOR_PART and
   budget. */
static luna_ns frame_slice(const luna__gc_pacer *p, const luna_lua_gc_options *o,
                           luna_ns budget) {
  luna_ns used, left, least;
  if (o == NULL || o->frame <= 0 || budget <= 0)
    return budget;
  /* A host's cost clock may step back: a negative use counts as none. */
  used = luna__loop_cost_now(p->loop) - luna__loop_frame_began(p->loop);
  left = used <= 0 ? o->frame : used >= o->frame ? 0 : o->frame - used;
  least = budget / FRAME_FLOOR_PART;
  if (left < least)
    left = least;
  return left < budget ? left : budget;
}

/* Whether m's heap is past halfway from its live bytes to the ceiling of
   o: the `frame` setting then gives way and the whole budget is spent in
   every frame until the heap is back under, so that a run of heavy frames
   cannot take it to the ceiling's full collection. */
static bool behind(luna__gc_member *m, const luna_lua_gc_options *o) {
  if (o == NULL || o->ceiling == 0)
    return false;
  if (o->ceiling <= m->live)
    return true;
  return bytes_of(member_state(m)) > m->live + (o->ceiling - m->live) / 2;
}

/* Frames are timed (luna__loop_time_frames) while some state on the loop
   is paced with a `frame` setting, and only then. */
static void time_frames_if_needed(luna__gc_pacer *p) {
  const luna__gc_member *m;
  bool on = p->loop_set && p->opts.frame > 0;
  for (m = p->members; m != NULL && !on; m = m->next)
    on = m->own && m->opts.frame > 0;
  luna__loop_time_frames(p->loop, on);
}

static bool pace_step(luna_loop *loop, void *arg);

/* Registers the runner item of `timing` unless it is there: an essential
   item with the highest priority, so the paced steps come after
   everything else of the timing's run and no runner budget defers them.
   0 or LUNA_ENOMEM. */
static int need_item(luna__gc_pacer *p, int timing) {
  luna_item_options io = {INT_MAX, true};
  pace_item *it = &p->items[timing];
  int rc;
  if (it->added)
    return 0;
  it->pacer = p;
  it->timing = timing;
  rc = luna_item_add_ex(p->loop, (luna_timing)timing, pace_step, it, &io, &it->id);
  it->added = rc == 0;
  return rc;
}

/* One step of m's collector, measured from `t0` (a reading of the cost
   clock): updates the counts and returns the clock after it. */
static luna_ns timed_step(luna__gc_member *m, luna_ns t0) {
  lua_State *L = member_state(m);
  int ended = lua_gc(L, LUA_GCSTEP, 0);
  luna_ns t1 = cost_now(m->pacer);
  m->st.steps++;
  m->last_step = t1 - t0;
  m->st.time_ns += t1 - t0;
  if (t1 - t0 > m->st.longest_step_ns)
    m->st.longest_step_ns = t1 - t0;
  if (m->generational) {
    m->minor_cost = t1 - t0;
    m->minor_base = bytes_of(L);
    m->requests = 0; /* a minor collection is all a request gets there */
  } else {
    /* The live set: what is in use when a cycle ends counts the objects
       made during the cycle too, which it could not collect; measured
       there, the next cycle began at twice that and the heap went past
       the ceiling before it ended (W8). The least in use between the
       cycle's steps, near the end of its sweep, is much closer. */
    size_t used = bytes_of(L);
    if (!m->in_cycle || used < m->cycle_low)
      m->cycle_low = used;
    if (ended) {
      m->st.cycles++;
      m->in_cycle = false;
      m->live = m->cycle_low;
      if (m->requests > 0)
        m->requests--;
    } else {
      m->in_cycle = true;
    }
  }
  return t1;
}

/* Whether an incremental member has collector work worth doing now: a
   cycle under way, a request, or a heap grown enough to begin one. */
static bool cycle_due(luna__gc_member *m, const luna_lua_gc_options *o) {
  size_t used;
  if (m->in_cycle || m->requests > 0)
    return true;
  used = bytes_of(member_state(m));
  if (o != NULL && o->stop_auto)
    return used >= m->live + CYCLE_MIN_BYTES;
  return used / AHEAD_PERCENT >= m->live / 100;
}

/* Generational: whether a minor collection is due, and whether it is
   overdue (grown by twice that), when it runs even if its last cost does
   not fit, since otherwise a costly one would never run at all. */
static bool minor_due(luna__gc_member *m, bool *overdue) {
  size_t used = bytes_of(member_state(m));
  size_t grown = used > m->minor_base ? used - m->minor_base : 0;
  size_t need = m->minor_base / 100 * MINOR_PERCENT;
  if (need < MINOR_MIN_BYTES)
    need = MINOR_MIN_BYTES;
  *overdue = grown >= 2 * need;
  return grown >= need || m->requests > 0;
}

/* The safety net: once m's heap passes its ceiling, one full collection,
   counted, and reported the first time; not again until the heap was back
   below the ceiling, so a live set above it does not collect every frame. */
static void check_ceiling(luna__gc_member *m, const luna_lua_gc_options *o) {
  lua_State *L = member_state(m);
  size_t used, after;
  luna_ns t0, t1;
  if (o == NULL || o->ceiling == 0)
    return;
  used = bytes_of(L);
  if (used <= o->ceiling) {
    m->ceiling_passed = false;
    return;
  }
  if (m->ceiling_passed)
    return;
  m->ceiling_passed = true;
  m->st.ceiling_hits++;
  t0 = cost_now(m->pacer);
  lua_gc(L, LUA_GCCOLLECT);
  t1 = cost_now(m->pacer);
  after = bytes_of(L);
  m->st.full_collections++;
  m->st.time_ns += t1 - t0;
  if (t1 - t0 > m->st.longest_step_ns)
    m->st.longest_step_ns = t1 - t0;
  m->in_cycle = false;
  m->requests = 0;
  m->live = m->mark = m->minor_base = after;
  if (!m->reported) {
    m->reported = true;
    fprintf(stderr,
            "lunaloop: the collector's ceiling of %zu bytes was passed (%zu in use) at frame "
            "%llu: ran a full collection (%zu in use after); later passes are counted in "
            "task.stats().gc.ceiling_hits only\n",
            o->ceiling, used, (unsigned long long)luna_loop_frame_count(m->pacer->loop), after);
    fflush(stderr);
  }
}

/* Spends at most about `budget` ns (plus one step) on m's collector and
   returns what it spent: incremental steps until the budget is spent or
   the cycle ends (and on through the next cycle while a request is owed
   one), or in generational mode one minor collection when it is due and
   its last cost fits. `margin` (idle time) stops the steps that much
   before the budget, so that the last one does not run past it. */
static luna_ns pace_member(luna__gc_member *m, const luna_lua_gc_options *o, luna_ns budget,
                           bool margin) {
  luna_ns start, t;
  bool overdue;
  if (budget <= 0)
    return 0;
  start = t = cost_now(m->pacer);
  if (m->generational) {
    if (minor_due(m, &overdue) && (m->minor_cost <= budget || (overdue && !margin)))
      t = timed_step(m, t);
    return t - start;
  }
  if (!cycle_due(m, o))
    return 0;
  while (t - start + (margin ? m->last_step : 0) < budget) {
    t = timed_step(m, t);
    if (!m->in_cycle && m->requests == 0)
      break; /* the cycle ended, and no request is owed another */
  }
  return t - start;
}

/* The part of the paced timing's work a member asks for: what it
   allocated since the last pace, at least 1 while it has a cycle or a
   request to finish. */
static size_t weight_of(luna__gc_member *m) {
  size_t used = bytes_of(member_state(m));
  size_t w = used > m->mark ? used - m->mark : 0;
  if (w == 0 && (m->in_cycle || m->requests > 0))
    w = 1;
  return w;
}

/* Whether m is paced at `timing`, with its settings in *o (NULL for a
   state that is not paced but owes a request). */
static bool paced_here(const luna__gc_member *m, int timing, const luna_lua_gc_options **o) {
  *o = settings_of(m);
  if (*o != NULL && ((*o)->budget > 0 || (*o)->ceiling > 0 || m->requests > 0))
    return timing_of(*o) == timing;
  return m->requests > 0 && timing == LUNA_LAST_TIME_UPDATE;
}

/* The end of a paced timing's run: the ceiling first, then each member's
   slice. The members paced with the loop's settings share its budget in
   proportion to what each allocated since the last pace; what one leaves
   unspent goes to those after it. Requests of members without a budget
   share REQUEST_BUDGET_NS the same way, first come first served. Each
   member given time runs at least one step, so a frame's work is its
   budget plus at most one step per state. */
static void pace_timing(luna__gc_pacer *p, int timing) {
  const luna_lua_gc_options *o;
  luna__gc_member *m;
  double shared_weight = 0;
  luna_ns shared_left = p->loop_set ? p->opts.budget : 0;
  /* The part of the shared budget this frame's `frame` setting leaves. */
  double shared_part = p->loop_set && p->opts.budget > 0
                           ? (double)frame_slice(p, &p->opts, p->opts.budget) /
                                 (double)p->opts.budget
                           : 1;
  luna_ns request_left = REQUEST_BUDGET_NS;
  for (m = p->members; m != NULL; m = m->next)
    if (paced_here(m, timing, &o) && !m->own)
      shared_weight += (double)weight_of(m);
  p->cursor = p->members;
  while ((m = p->cursor) != NULL) {
    luna_ns budget, spent;
    size_t w;
    p->cursor = m->next;
    if (!paced_here(m, timing, &o))
      continue;
    w = m->own ? 0 : weight_of(m); /* as the sum above counted it */
    check_ceiling(m, o);
    if (m->own) {
      budget = o == NULL ? 0 : behind(m, o) ? o->budget : frame_slice(p, o, o->budget);
    } else {
      budget = shared_weight > 0
                   ? (luna_ns)((double)shared_left * (double)w / shared_weight)
                   : 0;
      shared_weight -= (double)w;
      if (!behind(m, o))
        budget = (luna_ns)((double)budget * shared_part);
    }
    if (budget == 0 && m->requests > 0) {
      spent = pace_member(m, o, request_left, false);
      request_left -= spent < request_left ? spent : request_left;
    } else {
      spent = pace_member(m, o, budget, false);
    }
    if (!m->own)
      shared_left -= spent < shared_left ? spent : shared_left;
    m->mark = bytes_of(member_state(m));
  }
}

static bool pace_step(luna_loop *loop, void *arg) {
  pace_item *it = (pace_item *)arg;
  (void)loop;
  pace_timing(it->pacer, it->timing);
  return true;
}

/* Puts m's collector in the state its settings ask for: the mode (a
   switch to generational mode runs one full collection, as Lua's does;
   incremental mode gets the pacer's step size), the automatic collector
   stopped or running, a fresh start for the pacer's estimates, and the
   item of its timing. 0 or LUNA_ENOMEM. */
static int apply(luna__gc_member *m) {
  lua_State *L = member_state(m);
  const luna_lua_gc_options *o = settings_of(m);
  bool stop = o != NULL && o->stop_auto;
  if (o != NULL) {
    if (o->generational)
      lua_gc(L, LUA_GCGEN, 0, 0);
    else
      lua_gc(L, LUA_GCINC, 0, 0, STEP_LOG2);
    m->generational = o->generational;
  }
  if (stop && !m->stopped)
    lua_gc(L, LUA_GCSTOP);
  else if (!stop && m->stopped)
    lua_gc(L, LUA_GCRESTART);
  m->stopped = stop;
  m->in_cycle = false;
  m->ceiling_passed = false;
  m->live = m->mark = m->minor_base = bytes_of(L);
  m->minor_cost = m->last_step = 0;
  if (o != NULL && (o->budget > 0 || o->ceiling > 0))
    return need_item(m->pacer, timing_of(o));
  return 0;
}

static void unlink_member(luna__gc_pacer *p, luna__gc_member *m) {
  if (p->cursor == m)
    p->cursor = m->next;
  if (m->prev != NULL)
    m->prev->next = m->next;
  else
    p->members = m->next;
  if (m->next != NULL)
    m->next->prev = m->prev;
  m->prev = m->next = NULL;
  m->pacer = NULL;
}

static void on_loop_event(luna_loop *loop, luna_event event, void *ud) {
  luna__gc_pacer *p = (luna__gc_pacer *)ud;
  int i;
  /* A reset drops every runner item: the next settings add them again. */
  for (i = 0; i < LUNA_TIMING_COUNT; i++)
    p->items[i].added = false;
  if (event != LUNA_EVENT_FREE)
    return;
  while (p->members != NULL)
    unlink_member(p, p->members);
  luna_loop_remove_listener(loop, on_loop_event, p);
  *luna__loop_pacer(loop) = NULL;
  luna__loop_realloc(loop, p, sizeof *p, 0);
}

static luna__gc_pacer *pacer_of(luna_loop *loop, bool make) {
  luna__gc_pacer *p = (luna__gc_pacer *)*luna__loop_pacer(loop);
  if (p != NULL || !make)
    return p;
  p = (luna__gc_pacer *)luna__loop_realloc(loop, NULL, 0, sizeof *p);
  if (p == NULL)
    return NULL;
  memset(p, 0, sizeof *p);
  p->loop = loop;
  if (luna_loop_add_listener(loop, on_loop_event, p) != 0) {
    luna__loop_realloc(loop, p, sizeof *p, 0);
    return NULL;
  }
  *luna__loop_pacer(loop) = p;
  return p;
}

/* ---- the binding's interface (gc.h) ------------------------------------------ */

int luna__gc_join(luna__binding *b, luna_loop *loop) {
  luna__gc_member *m = &b->gc;
  luna__gc_pacer *p = pacer_of(loop, true);
  if (p == NULL)
    return LUNA_ENOMEM;
  m->pacer = p;
  m->prev = NULL;
  m->next = p->members;
  if (p->members != NULL)
    p->members->prev = m;
  p->members = m;
  return p->loop_set ? apply(m) : 0;
}

void luna__gc_leave(luna__binding *b) {
  luna__gc_pacer *p = b->gc.pacer;
  if (p != NULL) {
    unlink_member(p, &b->gc);
    time_frames_if_needed(p);
  }
}

void luna__gc_request_full(luna__binding *b) {
  luna__gc_member *m = &b->gc;
  const luna_lua_gc_options *o = settings_of(m);
  int owed = m->in_cycle ? 2 : 1; /* a cycle under way began before the request */
  if (m->pacer == NULL || need_item(m->pacer, timing_of(o)) != 0)
    return; /* no memory for the item: the request is dropped, as the
               collector would have run anyway */
  if (m->requests < owed)
    m->requests = owed;
}

/* ---- C API --------------------------------------------------------------------- */

int luna_lua_gc_set(lua_State *L, const luna_lua_gc_options *opts) {
  luna__binding *b = L != NULL ? luna__get_binding(L) : NULL;
  if (b == NULL || b->gc.pacer == NULL || (opts != NULL && !valid_options(opts)))
    return LUNA_EINVAL;
  if (in_finalizer(L))
    return LUNA_ESTATE;
  /* The same settings again change nothing: applying them would begin the
     pacer's estimates afresh and drop a cycle under way, so a script that
     sets them every frame would never collect. */
  if (opts != NULL && b->gc.own && same_options(opts, &b->gc.opts))
    return 0;
  b->gc.own = opts != NULL;
  if (opts != NULL)
    b->gc.opts = *opts;
  time_frames_if_needed(b->gc.pacer);
  return apply(&b->gc);
}

int luna_lua_gc_set_loop(luna_loop *loop, const luna_lua_gc_options *opts) {
  luna__gc_pacer *p;
  luna__gc_member *m;
  int rc = 0;
  if (loop == NULL || (opts != NULL && !valid_options(opts)))
    return LUNA_EINVAL;
  p = pacer_of(loop, opts != NULL);
  if (p == NULL)
    return opts != NULL ? LUNA_ENOMEM : 0;
  if (opts != NULL && p->loop_set && same_options(opts, &p->opts))
    return 0; /* the same settings again: see luna_lua_gc_set */
  p->loop_set = opts != NULL;
  if (opts != NULL)
    p->opts = *opts;
  for (m = p->members; m != NULL; m = m->next)
    if (!m->own && rc == 0)
      rc = apply(m);
  time_frames_if_needed(p);
  return rc;
}

luna_ns luna_lua_gc_idle(luna_loop *loop, luna_ns spare) {
  luna__gc_pacer *p = loop != NULL ? pacer_of(loop, false) : NULL;
  luna__gc_member *m;
  luna_ns start, left = spare;
  if (p == NULL || spare <= 0)
    return 0;
  start = cost_now(p);
  p->cursor = p->members;
  while ((m = p->cursor) != NULL && left > 0) {
    const luna_lua_gc_options *o = settings_of(m);
    p->cursor = m->next;
    if (o == NULL || !o->idle)
      continue;
    check_ceiling(m, o);
    left -= pace_member(m, o, left, true);
  }
  return cost_now(p) - start;
}

static void add_stats(luna_lua_gc_stats *sum, luna__gc_member *m) {
  sum->steps += m->st.steps;
  sum->cycles += m->st.cycles;
  sum->full_collections += m->st.full_collections;
  sum->time_ns += m->st.time_ns;
  if (m->st.longest_step_ns > sum->longest_step_ns)
    sum->longest_step_ns = m->st.longest_step_ns;
  sum->bytes += bytes_of(member_state(m));
  sum->ceiling_hits += m->st.ceiling_hits;
}

int luna_lua_gc_get_stats(lua_State *L, luna_lua_gc_stats *out) {
  luna__binding *b = L != NULL ? luna__get_binding(L) : NULL;
  if (b == NULL || out == NULL)
    return LUNA_EINVAL;
  memset(out, 0, sizeof *out);
  add_stats(out, &b->gc);
  return 0;
}

int luna_lua_gc_loop_stats(luna_loop *loop, luna_lua_gc_stats *out) {
  luna__gc_pacer *p;
  luna__gc_member *m;
  if (loop == NULL || out == NULL)
    return LUNA_EINVAL;
  memset(out, 0, sizeof *out);
  p = pacer_of(loop, false);
  for (m = p != NULL ? p->members : NULL; m != NULL; m = m->next)
    add_stats(out, m);
  return 0;
}

/* ---- task.gc and task.stats().gc ------------------------------------------------ */

static void set_number(lua_State *L, const char *k, lua_Number v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

static void set_integer(lua_State *L, const char *k, uint64_t v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, k);
}

void luna__gc_push_stats(lua_State *L, luna__binding *b) {
  luna_lua_gc_stats st;
  luna_lua_gc_get_stats(b->L, &st);
  lua_createtable(L, 0, 7);
  set_integer(L, "steps", st.steps);
  set_integer(L, "cycles", st.cycles);
  set_integer(L, "full_collections", st.full_collections);
  set_number(L, "time", luna_ns_to_seconds(st.time_ns));
  set_number(L, "longest_step", luna_ns_to_seconds(st.longest_step_ns));
  set_integer(L, "bytes", st.bytes);
  set_integer(L, "ceiling_hits", st.ceiling_hits);
}

/* opts.<field> as a finite number >= 0, or `def` when absent; errors name
   the option and what it takes. */
static lua_Number field_number(lua_State *L, const char *field, const char *what) {
  lua_Number v = 0;
  int type = lua_getfield(L, 1, field);
  if (type != LUA_TNIL) {
    int ok = 0;
    v = lua_tonumberx(L, -1, &ok);
    if (type != LUA_TNUMBER || !ok || !(v >= 0) || !isfinite(v))
      luaL_argerror(L, 1, lua_pushfstring(L, "opts.%s: expected %s, got %s", field, what,
                                          type == LUA_TNUMBER ? luna__number_text(L, v)
                                                              : luaL_typename(L, -1)));
  }
  lua_pop(L, 1);
  return v;
}

/* Reads task.gc's options table at 1 into *o, raising on the first bad
   field before anything is changed. */
static void check_gc_options(lua_State *L, luna_lua_gc_options *o) {
  static const char *const known[] = {"budget", "timing", "ceiling", "stop_auto",
                                      "idle", "mode", "frame", NULL};
  static const char *const modes[] = {"incremental", "generational", NULL};
  lua_Number ceiling;
  int mode;
  luna__check_options(L, 1, known);
  memset(o, 0, sizeof *o);
  if (luna_seconds_to_ns(field_number(L, "budget", "a finite, non-negative number of seconds"),
                         &o->budget) != 0)
    luaL_argerror(L, 1, "opts.budget: expected a finite, non-negative number of seconds");
  if (luna_seconds_to_ns(field_number(L, "frame", "a finite, non-negative number of seconds"),
                         &o->frame) != 0)
    luaL_argerror(L, 1, "opts.frame: expected a finite, non-negative number of seconds");
  o->timing = luna__field_timing(L, 1, "timing", LUNA_LAST_TIME_UPDATE);
  if (o->timing == 0)
    luaL_argerror(L, 1, "opts.timing: the collector cannot be paced at Initialization");
  ceiling = field_number(L, "ceiling", "a whole number of bytes >= 0");
  if (ceiling != floor(ceiling) || ceiling > (lua_Number)SIZE_MAX / 2)
    luaL_argerror(L, 1, lua_pushfstring(L, "opts.ceiling: expected a whole number of bytes "
                                           ">= 0, got %s", luna__number_text(L, ceiling)));
  o->ceiling = (size_t)ceiling;
  o->stop_auto = luna__field_boolean(L, 1, "stop_auto", false);
  o->idle = luna__field_boolean(L, 1, "idle", false);
  lua_getfield(L, 1, "mode");
  for (mode = 0; !lua_isnil(L, -1) && modes[mode] != NULL; mode++)
    if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), modes[mode]) == 0)
      break;
  if (!lua_isnil(L, -1) && modes[mode] == NULL)
    luaL_argerror(L, 1, lua_pushfstring(L, "opts.mode: expected 'incremental' or "
                                           "'generational', got %s",
                                        luna_lua_tostring(L, -1)));
  lua_pop(L, 1);
  o->generational = mode == 1;
  if (o->stop_auto && o->budget == 0 && !o->idle)
    luaL_argerror(L, 1, "opts.stop_auto: needs a budget or idle (the collector would never "
                        "run)");
  if (o->frame > 0 && o->budget == 0)
    luaL_argerror(L, 1, "opts.frame: needs a budget (it shares out the budget's time)");
}

/* task.gc([opts]) -> settings: paces this state's collector with opts
   (every field optional: budget in seconds per frame, timing, ceiling in
   bytes, stop_auto, idle, mode "incremental" or "generational", frame in
   seconds: the frame time the budget fills up to); given
   false, returns the state to the loop's settings. Returns the settings in
   force: the fields above and `own` (whether they are this state's). */
static int l_gc(lua_State *L) {
  luna__binding *b = luna__upvalue_binding(L);
  const luna_lua_gc_options *o;
  luna_lua_gc_options opts;
  int rc = 0;
  switch (lua_type(L, 1)) {
  case LUA_TNONE:
  case LUA_TNIL:
    break;
  case LUA_TTABLE:
    check_gc_options(L, &opts);
    rc = luna_lua_gc_set(b->L, &opts);
    break;
  default:
    if (lua_type(L, 1) != LUA_TBOOLEAN || lua_toboolean(L, 1))
      return luaL_typeerror(L, 1, "table, false or nil");
    rc = luna_lua_gc_set(b->L, NULL);
  }
  if (rc == LUNA_ENOMEM)
    return luaL_error(L, "not enough memory");
  if (rc == LUNA_ESTATE)
    return luaL_error(L, "task.gc: cannot change the collector from a __gc metamethod");
  o = settings_of(&b->gc);
  lua_createtable(L, 0, 9);
  set_number(L, "budget", o != NULL ? luna_ns_to_seconds(o->budget) : 0);
  set_number(L, "frame", o != NULL ? luna_ns_to_seconds(o->frame) : 0);
  lua_pushstring(L, luna_timing_name(timing_of(o)));
  lua_setfield(L, -2, "timing");
  set_integer(L, "ceiling", o != NULL ? o->ceiling : 0);
  lua_pushboolean(L, o != NULL && o->stop_auto);
  lua_setfield(L, -2, "stop_auto");
  lua_pushboolean(L, o != NULL && o->idle);
  lua_setfield(L, -2, "idle");
  lua_pushstring(L, o != NULL && o->generational ? "generational" : "incremental");
  lua_setfield(L, -2, "mode");
  lua_pushboolean(L, b->gc.own);
  lua_setfield(L, -2, "own");
  return 1;
}

void luna__open_gc(lua_State *L, luna__binding *b) {
  lua_pushlightuserdata(L, b);
  lua_pushcclosure(L, l_gc, 1);
  lua_setfield(L, -2, "gc");
}
