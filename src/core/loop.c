/*
** loop.c: the loop: lifetime, listeners, frames, fixed steps, the run of a
** timing, and the public entry points of the other modules.
*/
#include <math.h>
#include <string.h>

#include "loop_internal.h"

/* True while the loop is calling out: a timing's callbacks, a host hook or a
   listener. The drivers (frame, begin_frame, run, reset, free) refuse then. */
static bool busy(const luna_loop *loop) {
  return loop->v.current >= 0 || loop->in_frame || loop->in_listener || loop->v.held > 0;
}


static bool valid_timing(int timing) {
  return timing >= 0 && timing < LUNA_TIMING_COUNT;
}

/* ---- lifetime -------------------------------------------------------------- */

int luna_loop_new(const luna_config *config, luna_loop **out) {
  luna_config defaults;
  luna__alloc alloc;
  luna_loop *loop;
  int t;
  if (out == NULL)
    return LUNA_EINVAL;
  if (config == NULL) {
    memset(&defaults, 0, sizeof defaults);
    config = &defaults;
  }
  if (config->fixed_dt_ns < 0 || config->max_fixed_steps < 0)
    return LUNA_EINVAL;
  luna__alloc_init(&alloc, config->alloc, config->alloc_ud);
  loop = luna__malloc(&alloc, sizeof *loop);
  if (loop == NULL)
    return LUNA_ENOMEM;
  memset(loop, 0, sizeof *loop);
  loop->alloc = alloc;
  if (luna__inbox_init(&loop->inbox, &loop->alloc) != 0) {
    luna__free(&alloc, loop, sizeof *loop);
    return LUNA_ENOMEM;
  }
  for (t = 0; t < LUNA_TIMING_COUNT; t++)
    memset(&loop->v.queues[t], 0, sizeof loop->v.queues[t]);
  luna__timers_init(&loop->timers);
  luna__runner_init(&loop->runner);
  luna__clocks_init(&loop->clocks, config->realtime, config->realtime_ud);
  loop->hook = config->hook;
  loop->hook_ud = config->hook_ud;
  loop->time_scale = 1.0;
  loop->v.fixed_dt = config->fixed_dt_ns ? config->fixed_dt_ns : LUNA__DEFAULT_FIXED_DT;
  loop->max_fixed_steps =
      config->max_fixed_steps ? config->max_fixed_steps : LUNA__DEFAULT_MAX_FIXED_STEPS;
  loop->v.current = -1;
  *out = loop;
  return 0;
}

/* Calls every listener registered before the dispatch began, in order.
   Listeners removed meanwhile are only marked, then compacted here. */
static void notify(luna_loop *loop, luna_event event) {
  size_t i, j, n = loop->nlisteners;
  loop->in_listener = true;
  for (i = 0; i < n; i++) {
    luna__listener l = loop->listeners[i];
    if (l.fn != NULL)
      l.fn(loop, event, l.ud);
  }
  loop->in_listener = false;
  for (i = j = 0; i < loop->nlisteners; i++)
    if (loop->listeners[i].fn != NULL)
      loop->listeners[j++] = loop->listeners[i];
  loop->nlisteners = j;
}

void luna_loop_free(luna_loop *loop) {
  luna__alloc alloc;
  int t;
  /* From a callback this cannot report LUNA_ESTATE; doing nothing is the
     only safe answer (the loop is still on the stack). */
  if (loop == NULL || busy(loop))
    return;
  notify(loop, LUNA_EVENT_FREE);
  if (loop->sim != NULL)
    luna__sim_destroy(loop->sim);
  alloc = loop->alloc;
  for (t = 0; t < LUNA_TIMING_COUNT; t++)
    luna__queue_free(&loop->v.queues[t], &alloc);
  luna__inbox_free(&loop->inbox, &alloc);
  luna__timers_free(&loop->timers, &alloc);
  luna__runner_free(&loop->runner, &alloc);
  luna__array_free(&alloc, (void **)&loop->listeners, &loop->listeners_cap,
                   sizeof *loop->listeners);
  luna__free(&alloc, loop, sizeof *loop);
}

int luna_loop_reset(luna_loop *loop) {
  int t;
  if (loop == NULL)
    return LUNA_EINVAL;
  if (busy(loop))
    return LUNA_ESTATE;
  notify(loop, LUNA_EVENT_RESET);
  /* Posts stay: in the inbox, pending, and those already queued. */
  for (t = 0; t < LUNA_TIMING_COUNT; t++)
    luna__queue_drop(&loop->v.queues[t]);
  luna__timers_drop(&loop->timers);
  luna__runner_drop(&loop->runner);
  loop->v.stop = false;
  return 0;
}

int luna_loop_add_listener(luna_loop *loop, luna_listener_fn fn, void *ud) {
  if (loop == NULL || fn == NULL)
    return LUNA_EINVAL;
  if (luna__grow(&loop->alloc, (void **)&loop->listeners, &loop->listeners_cap,
                 sizeof *loop->listeners, loop->nlisteners + 1) != 0)
    return LUNA_ENOMEM;
  loop->listeners[loop->nlisteners].fn = fn;
  loop->listeners[loop->nlisteners].ud = ud;
  loop->nlisteners++;
  return 0;
}

int luna_loop_remove_listener(luna_loop *loop, luna_listener_fn fn, void *ud) {
  size_t i;
  if (loop == NULL)
    return LUNA_EINVAL;
  for (i = 0; i < loop->nlisteners; i++) {
    luna__listener *l = &loop->listeners[i];
    if (l->fn != fn || l->ud != ud || fn == NULL)
      continue;
    if (loop->in_listener) {
      l->fn = NULL; /* the dispatch is walking the array: mark only */
    } else {
      memmove(l, l + 1, (loop->nlisteners - i - 1) * sizeof *l);
      loop->nlisteners--;
    }
    return 0;
  }
  return LUNA_ENOENT;
}

/* ---- the run of a timing ------------------------------------------------- */

/* Step 3: the clocks the timers of each kind compare against. The realtime
   source is read at most once per run, and only if a realtime timer waits. */
static bool fire_timers(luna_loop *loop, int timing, uint64_t start_seq) {
  luna_ns now[LUNA_TIMER_KIND_COUNT];
  _Static_assert(LUNA_TIMER_KIND_COUNT == 5, "fire_timers reads one clock per timer kind");
  now[LUNA_TIMER_FRAME] = (luna_ns)loop->v.frame;
  now[LUNA_TIMER_SCALED] = loop->clocks.scaled;
  now[LUNA_TIMER_UNSCALED] = loop->clocks.unscaled;
  now[LUNA_TIMER_REALTIME] =
      luna__timers_has(&loop->timers, timing, LUNA_TIMER_REALTIME)
          ? luna__clocks_realtime(&loop->clocks)
          : 0;
  now[LUNA_TIMER_FIXED] = loop->clocks.fixed;
  return luna__timers_fire(&loop->timers, timing, now, start_seq, loop);
}

/* One run of `timing`: the four steps of loop.h, in order. */
static int run_timing(luna_loop *loop, int timing) {
  /* What exists now is what this run may call: timers with a later sequence
     were added during the run, and so were items the runner keeps aside
     while it is active (from step 1 on). */
  uint64_t start_seq = luna__timers_seq(&loop->timers);
  /* Read once: a change made by a callback of this run applies next run. */
  bool profiling = loop->profiling;
  luna_ns began = profiling ? loop->runner.cost_fn(loop->runner.cost_ud) : 0;
  bool stopped;

  luna_sim *sim = loop->sim;
  int sim_timing = sim != NULL ? luna__sim_timing(sim) : -1;

  if (timing == LUNA_FIXED_UPDATE && sim_timing != LUNA_FIXED_UPDATE) {
    loop->clocks.fixed = luna_ns_add(loop->clocks.fixed, loop->v.fixed_dt);
    if (loop->fixed_steps_due > 0)
      loop->fixed_steps_due--;
    loop->v.in_fixed_step = true;
    loop->v.step_dt = loop->v.fixed_dt;
    loop->fixed_steps_run++;
  }
  loop->v.current = timing;
  loop->runner.active = timing;
  loop->run_seq = start_seq;
  /* A sim's normal tick starts here: tick number, delta time, the
     provider's tick callback, before the run's four steps (sim.h). */
  if (timing == sim_timing)
    luna__sim_begin_run(sim);

  /* Most runs of most timings have nothing to do (16 or more runs a frame,
     work usually at a few timings), so each step is skipped when its
     structure is empty: an idle run costs a few loads, not four calls. */
  luna__inbox_deliver(&loop->inbox, &loop->alloc, timing, &loop->v.queues[timing]);
  stopped = luna__queue_count(&loop->v.queues[timing]) > 0 &&
            luna__queue_drain(&loop->v.queues[timing], &loop->alloc, loop);
  if (!stopped && luna__timers_any(&loop->timers, timing))
    stopped = fire_timers(loop, timing, start_seq);
  if (!stopped && luna__runner_has_items(&loop->runner, timing))
    stopped = luna__runner_run(&loop->runner, timing, loop);

  loop->runner.active = -1;
  if (luna__runner_has_work(&loop->runner, timing))
    luna__runner_finish(&loop->runner, timing);
  loop->v.current = -1;
  if (timing == LUNA_LAST_FIXED_UPDATE && sim_timing != LUNA_FIXED_UPDATE)
    loop->v.in_fixed_step = false;
  /* The sim may have been freed by this run (only outside its pair). */
  if (sim_timing >= 0 && timing == sim_timing + 1 && loop->sim == sim)
    luna__sim_end_tick(sim);
  loop->runs[timing]++;
  if (profiling) {
    luna_ns cost = loop->runner.cost_fn(loop->runner.cost_ud) - began;
    loop->spent[timing] += cost;
    loop->history.current[timing] += cost;
    loop->history.measured = true;
  }
  if (stopped || loop->v.stop) {
    loop->v.stop = false;
    return LUNA_ESTOPPED;
  }
  return 0;
}

/* A first timing, the host hook, then its Last partner. */
static int run_pair(luna_loop *loop, int timing) {
  int rc = run_timing(loop, timing);
  if (rc != 0)
    return rc;
  if (loop->hook != NULL) {
    loop->hook(loop, (luna_timing)timing, loop->hook_ud);
    if (loop->v.stop) {
      loop->v.stop = false;
      return LUNA_ESTOPPED;
    }
  }
  return run_timing(loop, timing + 1);
}

/* ---- driving the frame --------------------------------------------------- */

/* Ends the frame's record: when a run of it was profiled, its costs join
   the history ring (the oldest frame drops out). Called at the end of
   luna_loop_frame_ns and at each begin_frame, so a host that drives the
   timings itself (begin_frame, then luna_loop_run) is recorded too. */
static void record_frame(luna_loop *loop) {
  if (!loop->history.measured)
    return;
  memcpy(loop->history.ring[loop->history.recorded % LUNA_FRAME_HISTORY],
         loop->history.current, sizeof loop->history.current);
  memset(loop->history.current, 0, sizeof loop->history.current);
  loop->history.recorded++;
  loop->history.measured = false;
}

int luna_loop_begin_frame_ns(luna_loop *loop, luna_ns dt) {
  luna_ns scaled, steps;
  if (loop == NULL || dt < 0)
    return LUNA_EINVAL;
  if (busy(loop))
    return LUNA_ESTATE;
  if (dt > LUNA_CLOCK_MAX - loop->clocks.unscaled)
    return LUNA_ERANGE;
  scaled = luna__scale_ns(dt, loop->time_scale);
  if (scaled > LUNA_CLOCK_MAX - loop->clocks.scaled)
    return LUNA_ERANGE;
  record_frame(loop);
  if (loop->time_frames)
    loop->frame_began = loop->runner.cost_fn(loop->runner.cost_ud);
  loop->v.frame++;
  loop->unscaled_delta = dt;
  loop->v.delta = scaled;
  loop->clocks.unscaled = luna_ns_add(loop->clocks.unscaled, dt);
  loop->clocks.scaled = luna_ns_add(loop->clocks.scaled, scaled);
  loop->v.in_fixed_step = false;

  /* Fixed steps: all arithmetic in integer ns, so 1/60 s steps of a 0.05 s
     frame are 2 in the first frame (50,000,000 < 3 * 16,666,667) and then 3
     as the remainder builds up, exactly and repeatably. */
  if (loop->sim != NULL)
    luna__sim_begin_frame(loop->sim, scaled);
  if (loop->sim != NULL && luna__sim_timing(loop->sim) == LUNA_FIXED_UPDATE) {
    loop->fixed_steps_due = 0; /* the sim drives the FixedUpdate pair */
    return 0;
  }
  loop->accumulator = luna_ns_add(loop->accumulator, scaled);
  steps = loop->accumulator / loop->v.fixed_dt;
  loop->accumulator -= steps * loop->v.fixed_dt;
  if (steps > loop->max_fixed_steps) {
    luna_ns dropped = steps - loop->max_fixed_steps;
    loop->dropped_fixed_steps += (uint64_t)dropped;
    loop->dropped_fixed_ns = luna_ns_add(loop->dropped_fixed_ns, dropped * loop->v.fixed_dt);
    steps = loop->max_fixed_steps;
  }
  loop->fixed_steps_due = (int)steps;
  return 0;
}

/* Calls the ns form `fn` of a driver with dt given in seconds: LUNA_EINVAL
   for a negative, NaN or infinite dt. */
static int in_seconds(int (*fn)(luna_loop *, luna_ns), luna_loop *loop, double dt_seconds) {
  luna_ns dt;
  if (luna_seconds_to_ns(dt_seconds, &dt) != 0)
    return LUNA_EINVAL;
  return fn(loop, dt);
}

int luna_loop_begin_frame(luna_loop *loop, double dt_seconds) {
  return in_seconds(luna_loop_begin_frame_ns, loop, dt_seconds);
}

int luna_loop_frame_ns(luna_loop *loop, luna_ns dt) {
  int timing;
  /* begin_frame checks the loop, dt and reentrancy for both. */
  int rc = luna_loop_begin_frame_ns(loop, dt);
  if (rc != 0)
    return rc;
  loop->in_frame = true;
  for (timing = 0; timing < LUNA_TIMING_COUNT && rc == 0; timing += 2) {
    if (loop->sim != NULL && timing == luna__sim_timing(loop->sim)) {
      /* Once per step the sim's policy planned (sim.h). */
      while (rc == 0 && loop->sim != NULL && luna_sim_steps_due(loop->sim) > 0)
        rc = run_pair(loop, timing);
    } else if (timing == LUNA_FIXED_UPDATE) {
      /* Once per fixed step due; each FixedUpdate run consumes one. */
      while (rc == 0 && loop->fixed_steps_due > 0)
        rc = run_pair(loop, timing);
    } else {
      rc = run_pair(loop, timing);
    }
  }
  loop->in_frame = false;
  if (loop->sim != NULL)
    luna__sim_end_tick(loop->sim); /* a tick a stop left open */
  record_frame(loop);
  return rc;
}

int luna_loop_frame(luna_loop *loop, double dt_seconds) {
  return in_seconds(luna_loop_frame_ns, loop, dt_seconds);
}

int luna_loop_run(luna_loop *loop, luna_timing timing) {
  if (loop == NULL || !valid_timing((int)timing))
    return LUNA_EINVAL;
  if (busy(loop))
    return LUNA_ESTATE;
  return run_timing(loop, (int)timing);
}

void luna_loop_stop(luna_loop *loop) {
  if (loop != NULL && (loop->v.current >= 0 || loop->in_frame))
    loop->v.stop = true;
}

int luna_loop_fixed_steps(const luna_loop *loop) {
  if (loop != NULL && loop->sim != NULL && luna__sim_timing(loop->sim) == LUNA_FIXED_UPDATE)
    return luna_sim_steps_due(loop->sim);
  return loop != NULL ? loop->fixed_steps_due : 0;
}

/* ---- clocks ---------------------------------------------------------------- */

uint64_t luna_loop_frame_count(const luna_loop *loop) { return loop != NULL ? loop->v.frame : 0; }

luna_ns luna_loop_time(luna_loop *loop, luna_clock clock) {
  if (loop == NULL)
    return 0;
  switch (clock) {
  case LUNA_CLOCK_SCALED:
    return loop->clocks.scaled;
  case LUNA_CLOCK_UNSCALED:
    return loop->clocks.unscaled;
  case LUNA_CLOCK_REALTIME:
    return luna__clocks_realtime(&loop->clocks);
  case LUNA_CLOCK_FIXED:
    return loop->clocks.fixed;
  default:
    return 0;
  }
}

luna_ns luna_loop_delta(const luna_loop *loop) {
  if (loop == NULL)
    return 0;
  return loop->v.in_fixed_step ? loop->v.step_dt : loop->v.delta;
}

luna_ns luna_loop_unscaled_delta(const luna_loop *loop) {
  return loop != NULL ? loop->unscaled_delta : 0;
}

int luna_loop_set_time_scale(luna_loop *loop, double scale) {
  if (loop == NULL || isnan(scale) || scale < 0 || scale > LUNA_TIME_SCALE_MAX)
    return LUNA_EINVAL;
  loop->time_scale = scale;
  return 0;
}

double luna_loop_time_scale(const luna_loop *loop) { return loop != NULL ? loop->time_scale : 0.0; }

int luna_loop_set_fixed_dt(luna_loop *loop, luna_ns fixed_dt) {
  if (loop == NULL || fixed_dt <= 0)
    return LUNA_EINVAL;
  loop->v.fixed_dt = fixed_dt;
  /* Seen at once inside a plain fixed step (not inside a sim's tick). */
  if (loop->v.in_fixed_step && luna_sim_current(loop->sim) == NULL)
    loop->v.step_dt = fixed_dt;
  return 0;
}

luna_ns luna_loop_fixed_dt(const luna_loop *loop) { return loop != NULL ? loop->v.fixed_dt : 0; }

int luna_loop_set_realtime_source(luna_loop *loop, luna_time_fn fn, void *ud) {
  if (loop == NULL)
    return LUNA_EINVAL;
  luna__clocks_set_source(&loop->clocks, fn, ud);
  return 0;
}

int luna_loop_current_timing(const luna_loop *loop) { return loop != NULL ? loop->v.current : -1; }

void luna_loop_get_stats(luna_loop *loop, luna_loop_stats *out) {
  int t;
  if (out == NULL)
    return;
  memset(out, 0, sizeof *out);
  if (loop == NULL)
    return;
  out->frames = loop->v.frame;
  out->fixed_steps = loop->fixed_steps_run;
  out->dropped_fixed_steps = loop->dropped_fixed_steps;
  out->dropped_fixed_ns = loop->dropped_fixed_ns;
  for (t = 0; t < LUNA_TIMING_COUNT; t++) {
    out->queued[t] = luna__queue_count(&loop->v.queues[t]) +
                     luna__inbox_pending(&loop->inbox, t);
    out->timers[t] = luna__timers_count(&loop->timers, t);
    out->items[t] = luna__runner_count(&loop->runner, t);
    out->deferred[t] = loop->runner.deferred[t];
    out->budget_exceeded[t] = loop->runner.budget_exceeded[t];
    out->runs[t] = loop->runs[t];
    out->spent_ns[t] = loop->spent[t];
  }
  out->posts_allocated = luna__u64_load_relaxed(&loop->inbox.allocated);
}

bool luna_loop_idle(luna_loop *loop) {
  int t;
  if (loop == NULL)
    return false;
  for (t = 0; t < LUNA_TIMING_COUNT; t++)
    if (luna__queue_count(&loop->v.queues[t]) > 0 || luna__timers_count(&loop->timers, t) > 0 ||
        luna__runner_count(&loop->runner, t) > 0)
      return false;
  return luna__inbox_empty(&loop->inbox);
}

/* ---- one-shot continuations --------------------------------------------- */

int luna_enqueue(luna_loop *loop, luna_timing timing, luna_fn fn, void *arg) {
  if (loop == NULL || fn == NULL || !valid_timing((int)timing))
    return LUNA_EINVAL;
  return luna__loop_enqueue(loop, timing, fn, arg);
}

size_t luna_purge(luna_loop *loop, luna_match_fn match, void *ud) {
  size_t n = 0;
  int t;
  if (loop == NULL || match == NULL)
    return 0;
  for (t = 0; t < LUNA_TIMING_COUNT; t++)
    n += luna__queue_purge(&loop->v.queues[t], match, ud);
  return n;
}

int luna_loop_reserve_posts(luna_loop *loop, size_t n) {
  if (loop == NULL)
    return LUNA_EINVAL;
  return luna__inbox_reserve(&loop->inbox, &loop->alloc, n);
}

int luna_post(luna_loop *loop, luna_timing timing, luna_fn fn, void *arg) {
  if (loop == NULL || fn == NULL || !valid_timing((int)timing))
    return LUNA_EINVAL;
  return luna__inbox_post(&loop->inbox, &loop->alloc, (int)timing, fn, arg);
}

/* ---- timers and items ------------------------------------------------------ */

int luna_timer_add(luna_loop *loop, luna_timing timing, luna_timer_kind kind,
                   int64_t deadline, luna_fn fn, void *arg, luna_timer_id *out) {
  if (loop == NULL || fn == NULL || !valid_timing((int)timing) ||
      (int)kind < 0 || kind >= LUNA_TIMER_KIND_COUNT)
    return LUNA_EINVAL;
  return luna__loop_add_timer(loop, timing, kind, deadline, fn, arg, out);
}

int luna_timer_cancel(luna_loop *loop, luna_timer_id id) {
  if (loop == NULL)
    return LUNA_EINVAL;
  return luna__timers_cancel(&loop->timers, id);
}

int luna_item_add_ex(luna_loop *loop, luna_timing timing, luna_step_fn step,
                     void *arg, const luna_item_options *options, luna_item_id *out) {
  if (loop == NULL || step == NULL || !valid_timing((int)timing))
    return LUNA_EINVAL;
  return luna__runner_add(&loop->runner, &loop->alloc, (int)timing, step, arg,
                          options ? options->priority : 0,
                          options ? options->essential : false, out);
}

int luna_item_add(luna_loop *loop, luna_timing timing, luna_step_fn step,
                  void *arg, luna_item_id *out) {
  return luna_item_add_ex(loop, timing, step, arg, NULL, out);
}

int luna_item_remove(luna_loop *loop, luna_item_id id) {
  if (loop == NULL)
    return LUNA_EINVAL;
  return luna__runner_remove(&loop->runner, id);
}

int luna_loop_set_budget(luna_loop *loop, luna_timing timing, luna_ns budget) {
  if (loop == NULL || !valid_timing((int)timing) || budget < 0)
    return LUNA_EINVAL;
  loop->runner.budget[timing] = budget;
  return 0;
}

luna_ns luna_loop_budget(const luna_loop *loop, luna_timing timing) {
  if (loop == NULL || !valid_timing((int)timing))
    return 0;
  return loop->runner.budget[timing];
}

int luna_loop_set_profiling(luna_loop *loop, bool on) {
  if (loop == NULL)
    return LUNA_EINVAL;
  loop->profiling = on;
  return 0;
}

bool luna_loop_profiling(const luna_loop *loop) { return loop != NULL && loop->profiling; }

size_t luna_loop_frame_costs(const luna_loop *loop, int timing, luna_ns *out, size_t n) {
  uint64_t have, first, f;
  size_t i = 0;
  if (loop == NULL || out == NULL || timing < -1 || timing >= LUNA_TIMING_COUNT)
    return 0;
  have = loop->history.recorded < LUNA_FRAME_HISTORY ? loop->history.recorded
                                                     : LUNA_FRAME_HISTORY;
  if (n < have)
    have = n;
  first = loop->history.recorded - have;
  for (f = first; f < loop->history.recorded; f++) {
    const luna_ns *row = loop->history.ring[f % LUNA_FRAME_HISTORY];
    luna_ns sum = 0;
    if (timing >= 0) {
      sum = row[timing];
    } else {
      for (int t = 0; t < LUNA_TIMING_COUNT; t++)
        sum += row[t];
    }
    out[i++] = sum;
  }
  return i;
}

int luna_loop_set_cost_source(luna_loop *loop, luna_time_fn fn, void *ud) {
  if (loop == NULL)
    return LUNA_EINVAL;
  luna__runner_set_cost_source(&loop->runner, fn, ud);
  return 0;
}

/* ---- the interface of the layers above (lunaloop/extension.h) ------------- */

int luna__loop_enqueue_grow(luna_loop *loop, luna_timing timing, luna_fn fn, void *arg) {
  return luna__queue_push(&loop->v.queues[timing], &loop->alloc, fn, arg, false);
}

void luna__loop_set_warm(luna_loop *loop, luna_fn fn, void (*warm)(void *arg)) {
  loop->warm.fn = warm != NULL ? fn : NULL;
  loop->warm.warm = warm;
}

luna_ns luna__loop_cost_now(luna_loop *loop) {
  return loop->runner.cost_fn(loop->runner.cost_ud);
}

void luna__loop_time_frames(luna_loop *loop, bool on) { loop->time_frames = on; }

luna_ns luna__loop_frame_began(const luna_loop *loop) { return loop->frame_began; }

void **luna__loop_pacer(luna_loop *loop) {
  return &loop->pacer;
}

void *luna__loop_realloc(luna_loop *loop, void *p, size_t osize, size_t nsize) {
  return loop->alloc.fn(loop->alloc.ud, p, osize, nsize);
}

void luna__loop_set_batch(luna_loop *loop, luna_step_fn step, luna__batch_fn fn) {
  luna__runner_set_batch(&loop->runner, step, fn);
}
