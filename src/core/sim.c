/*
** sim.c: the simulation group (lunaloop/sim.h): the tick accumulator and
** its catch-up policies, the clock stretch, normal ticks at the sim's
** timing pair, the history ring of snapshots (which tick is in which of the
** provider's slots, with its checksum), and the host-driven rollback
** operations and the sync-test built on it.
**
** The state itself is the provider's (the Lua binding's tables); this file
** only decides when to save, load, tick and discard. loop.c calls it
** through sim_internal.h at begin_frame and around the runs of the pair.
** Includes: the public headers and the core's own (loop_internal.h).
*/
#include <math.h>
#include <string.h>

#include "loop_internal.h"
#include "sim_internal.h"

#define NS_PER_S UINT64_C(1000000000)

/* One history entry: which tick the slot holds. */
typedef struct hist_entry {
  uint64_t tick;
  uint64_t checksum;
  uint32_t batch; /* the step that produced it: 1, or k of a batch */
  bool valid;
} hist_entry;

struct luna_sim {
  luna_loop *loop;
  luna_sim_config cfg; /* defaults filled in; rate_scale is the current one */
  uint64_t rate_ppb;   /* round(rate_scale x 1e9) */
  uint64_t rate_rem;   /* the stretch's remainder, in 1e-9 ns (< 1e9) */

  luna_ns acc;         /* [0, tick_ns): time towards the next tick */
  uint64_t debt;       /* LUNA_SIM_DEBT: ticks carried into this frame */
  int steps_due;       /* steps left in this frame */
  uint32_t last_batch; /* the batch of the frame's last step (1 or k) */

  uint64_t tick, head, confirmed;

  bool has_ops;
  luna_sim_provider ops;
  void *ud;

  hist_entry *hist;    /* cfg.history entries; tick N in N % history */

  luna_sim_tick_info cur;            /* the tick running now */
  const luna_sim_tick_info *active;  /* &cur while a tick runs, else NULL */
  bool normal_open;    /* a normal tick began and its Last run has not ended */
  int in_callback;     /* the provider's tick callback is running */
  int in_provider;     /* any provider callback is running */
  bool partial_pending; /* a partial tick ran: SLOT_PARTIAL holds the state */
  bool driving;        /* a begin_frame planned steps: the pair is the sim's
                          (a sim made during a frame leaves that frame be) */

  luna_sim_stats st;
};

/* ---- helpers --------------------------------------------------------------- */

static int slot_of(const luna_sim *sim, uint64_t tick) {
  return (int)(tick % (uint64_t)sim->cfg.history);
}

static hist_entry *find(const luna_sim *sim, uint64_t tick) {
  hist_entry *e = &sim->hist[slot_of(sim, tick)];
  return e->valid && e->tick == tick ? e : NULL;
}

/* Refused while a tick runs or the provider is called. */
static bool ticking(const luna_sim *sim) {
  return sim->normal_open || sim->in_callback > 0 || sim->in_provider > 0;
}

/* Enter/leave a provider callback: the loop is held meanwhile. */
static void enter(luna_sim *sim) {
  sim->in_provider++;
  sim->loop->v.held++;
}
static void leave(luna_sim *sim) {
  sim->loop->v.held--;
  sim->in_provider--;
}

static int p_save(luna_sim *sim, uint64_t tick, int slot, uint64_t *sum) {
  int rc;
  enter(sim);
  rc = sim->ops.save(sim->ud, tick, slot, sum);
  leave(sim);
  return rc;
}

static int p_load(luna_sim *sim, uint64_t tick, int slot) {
  int rc;
  enter(sim);
  rc = sim->ops.load(sim->ud, tick, slot);
  leave(sim);
  return rc;
}

static void p_discard(luna_sim *sim, hist_entry *e) {
  e->valid = false;
  if (sim->ops.discard == NULL)
    return;
  enter(sim);
  sim->ops.discard(sim->ud, e->tick, slot_of(sim, e->tick));
  leave(sim);
}

/* The provider's tick callback for `info` (sim->cur), with delta time
   reading info->dt_ns and nothing else of the loop changed. */
static void p_tick(luna_sim *sim) {
  luna__loop_view *v = &sim->loop->v;
  bool in_step = v->in_fixed_step;
  luna_ns step_dt = v->step_dt;
  const luna_sim_tick_info *active = sim->active;
  sim->active = &sim->cur;
  v->in_fixed_step = true;
  v->step_dt = sim->cur.dt_ns;
  if (sim->has_ops) {
    enter(sim);
    sim->in_callback++;
    sim->ops.tick(sim->ud, sim, &sim->cur);
    sim->in_callback--;
    leave(sim);
  }
  v->in_fixed_step = in_step;
  v->step_dt = step_dt;
  sim->active = active;
}

/* Saves the sim's tick into the history; the entry is invalid on error. */
static int save_tick(luna_sim *sim, uint32_t batch, uint64_t *out) {
  hist_entry *e = &sim->hist[slot_of(sim, sim->tick)];
  uint64_t sum = 0;
  int rc = p_save(sim, sim->tick, slot_of(sim, sim->tick), &sum);
  if (rc != 0) {
    e->valid = false;
    return rc;
  }
  e->tick = sim->tick;
  e->checksum = sum;
  e->batch = batch;
  e->valid = true;
  sim->st.saves++;
  if (out != NULL)
    *out = sum;
  return 0;
}

/* After a full tick: the automatic save. */
static void auto_save(luna_sim *sim, uint32_t batch) {
  if (!sim->has_ops || sim->cfg.manual_save)
    return;
  if (save_tick(sim, batch, NULL) != 0)
    sim->st.save_errors++;
}

/* Undoes a partial tick: the state before it comes back from its slot. */
static void restore_partial(luna_sim *sim) {
  if (!sim->partial_pending)
    return;
  sim->partial_pending = false;
  if (p_load(sim, sim->tick, LUNA_SIM_SLOT_PARTIAL(sim->cfg.history)) != 0)
    sim->st.save_errors++;
}

/* The flags a full tick gets from where it is against the head (and moves
   the head). */
static uint32_t place(luna_sim *sim) {
  if (sim->tick > sim->head) {
    sim->head = sim->tick;
    return LUNA_SIM_FIRST_FULL;
  }
  return LUNA_SIM_RESIMULATING;
}

/* ---- the sync-test ------------------------------------------------------------ */

/* The batch of the saved step that ends at a tick after `from`: the first
   saved k in (from, to] with k - batch(k) == from, in *k. */
static bool next_step(const luna_sim *sim, uint64_t from, uint64_t to, uint64_t *k) {
  uint64_t t;
  for (t = from + 1; t <= to; t++) {
    const hist_entry *e = find(sim, t);
    if (e != NULL && t - e->batch == from) {
      *k = t;
      return true;
    }
    if (e != NULL)
      return false; /* a tick saved as a step from elsewhere: no chain */
  }
  return false;
}

/* After the first full tick N: load N - d and resimulate to N as the
   history recorded the steps, comparing each step's checksum with the
   saved one; the first mismatch of the check is reported. Only when the
   whole chain from N - d to N is in the history. */
static void check(luna_sim *sim) {
  uint64_t n = sim->tick, d = (uint64_t)sim->cfg.check_distance, from, k;
  int check_slot = LUNA_SIM_SLOT_CHECK(sim->cfg.history);
  bool reported = false;
  if (d == 0 || !sim->has_ops || n < d || find(sim, n) == NULL)
    return;
  from = n - d;
  if (find(sim, from) == NULL)
    return;
  for (k = from; k < n;)
    if (!next_step(sim, k, n, &k))
      return;
  if (p_load(sim, from, slot_of(sim, from)) != 0) {
    sim->st.save_errors++;
    return;
  }
  sim->tick = from;
  while (sim->tick < n) {
    hist_entry *e;
    uint64_t sum = 0;
    next_step(sim, sim->tick, n, &k);
    e = find(sim, k);
    sim->cur.batch = e->batch;
    sim->cur.dt_ns = (luna_ns)e->batch * sim->cfg.tick_ns;
    sim->cur.tick = k;
    sim->cur.flags = LUNA_SIM_RESIMULATING | (e->batch > 1 ? LUNA_SIM_CATCH_UP : 0u);
    sim->tick = k;
    p_tick(sim);
    sim->st.resimulated_ticks += e->batch;
    if (p_save(sim, k, check_slot, &sum) != 0) {
      sim->st.save_errors++;
      continue;
    }
    sim->st.checks++;
    if (sum != e->checksum) {
      sim->st.mismatches++;
      if (!reported && sim->ops.mismatch != NULL) {
        luna_sim_mismatch m;
        m.tick = k;
        m.expected = e->checksum;
        m.actual = sum;
        m.expected_slot = slot_of(sim, k);
        m.actual_slot = check_slot;
        enter(sim);
        sim->ops.mismatch(sim->ud, &m);
        leave(sim);
      }
      reported = true;
    }
  }
}

/* ---- lifetime ------------------------------------------------------------ */

static bool valid_count(int n) { return n >= 0 && n <= LUNA_SIM_MAX_TICKS_MAX; }

static bool valid_scale(double s) {
  return !isnan(s) && s >= 0 && s <= LUNA_SIM_RATE_SCALE_MAX;
}

/* Fills `c` from `in` (NULL: defaults); LUNA_EINVAL for a bad field. */
static int resolve(const luna_sim_config *in, luna_sim_config *c) {
  if (in == NULL)
    memset(c, 0, sizeof *c);
  else
    *c = *in;
  if (c->tick_ns < 0 || c->tick_ns > LUNA_SIM_TICK_NS_MAX || !valid_count(c->max_ticks_per_frame) ||
      !valid_count(c->max_batch) || !valid_count(c->max_debt) || c->history < 0 ||
      c->history > LUNA_SIM_HISTORY_MAX || c->check_distance < 0 || !valid_scale(c->rate_scale) ||
      (int)c->policy < 0 || c->policy > LUNA_SIM_MANUAL || (int)c->timing < 0 ||
      c->timing >= LUNA_TIMING_COUNT || !LUNA_TIMING_IS_FIRST(c->timing))
    return LUNA_EINVAL;
  if (c->tick_ns == 0)
    c->tick_ns = LUNA_SIM_DEFAULT_TICK_NS;
  if (c->max_ticks_per_frame == 0)
    c->max_ticks_per_frame = LUNA_SIM_DEFAULT_MAX_TICKS;
  if (c->max_batch == 0)
    c->max_batch = LUNA_SIM_DEFAULT_MAX_BATCH;
  if (c->max_debt == 0)
    c->max_debt = c->max_ticks_per_frame;
  if (c->history == 0)
    c->history = LUNA_SIM_DEFAULT_HISTORY;
  if (c->timing == LUNA_INITIALIZATION)
    c->timing = LUNA_FIXED_UPDATE;
  if (c->rate_scale == 0)
    c->rate_scale = 1.0;
  if (c->check_distance >= c->history || (c->check_distance > 0 && c->manual_save))
    return LUNA_EINVAL;
  return 0;
}

/* True while one of the sim's pair's timings runs. */
static bool in_pair(const luna_loop *loop, int timing) {
  return loop->v.current == timing || loop->v.current == timing + 1;
}

int luna_sim_new(luna_loop *loop, const luna_sim_config *config, luna_sim **out) {
  luna_sim_config c;
  luna_sim *sim;
  size_t bytes;
  int rc;
  if (loop == NULL || out == NULL)
    return LUNA_EINVAL;
  if ((rc = resolve(config, &c)) != 0)
    return rc;
  if (loop->sim != NULL)
    return LUNA_EALREADY;
  if (in_pair(loop, (int)c.timing))
    return LUNA_ESTATE;
  sim = luna__malloc(&loop->alloc, sizeof *sim);
  if (sim == NULL)
    return LUNA_ENOMEM;
  memset(sim, 0, sizeof *sim);
  bytes = (size_t)c.history * sizeof *sim->hist;
  sim->hist = luna__malloc(&loop->alloc, bytes);
  if (sim->hist == NULL) {
    luna__free(&loop->alloc, sim, sizeof *sim);
    return LUNA_ENOMEM;
  }
  memset(sim->hist, 0, bytes);
  sim->loop = loop;
  sim->cfg = c;
  sim->rate_ppb = (uint64_t)luna__round_ns(c.rate_scale * 1e9);
  sim->last_batch = 1;
  loop->sim = sim;
  *out = sim;
  return 0;
}

static void detach(luna_sim *sim) {
  int i;
  if (sim->has_ops && sim->ops.detach != NULL) {
    enter(sim);
    sim->ops.detach(sim->ud, sim);
    leave(sim);
  }
  sim->has_ops = false;
  memset(&sim->ops, 0, sizeof sim->ops);
  sim->ud = NULL;
  for (i = 0; i < sim->cfg.history; i++)
    sim->hist[i].valid = false;
  sim->partial_pending = false;
}

void luna__sim_destroy(luna_sim *sim) {
  luna_loop *loop = sim->loop;
  detach(sim);
  loop->sim = NULL;
  luna__free(&loop->alloc, sim->hist, (size_t)sim->cfg.history * sizeof *sim->hist);
  luna__free(&loop->alloc, sim, sizeof *sim);
}

int luna_sim_free(luna_sim *sim) {
  if (sim == NULL)
    return LUNA_EINVAL;
  if (ticking(sim) || in_pair(sim->loop, (int)sim->cfg.timing))
    return LUNA_ESTATE;
  if (sim->driving && sim->cfg.timing == LUNA_FIXED_UPDATE) {
    sim->loop->accumulator = 0; /* the plain accumulator starts from 0 */
    sim->loop->fixed_steps_due = 0;
  }
  luna__sim_destroy(sim);
  return 0;
}

luna_sim *luna_sim_of(const luna_loop *loop) { return loop != NULL ? loop->sim : NULL; }

luna_loop *luna_sim_loop(const luna_sim *sim) { return sim != NULL ? sim->loop : NULL; }

void luna_sim_get_config(const luna_sim *sim, luna_sim_config *out) {
  if (out == NULL)
    return;
  if (sim == NULL) {
    memset(out, 0, sizeof *out);
    return;
  }
  *out = sim->cfg;
}

int luna_sim_set_provider(luna_sim *sim, const luna_sim_provider *ops, void *ud) {
  if (sim == NULL ||
      (ops != NULL && (ops->save == NULL || ops->load == NULL || ops->tick == NULL)))
    return LUNA_EINVAL;
  /* Removing is refused only inside a provider callback (the provider is
     on the stack): a state closed during a tick must still be able to
     stop being called. */
  if (ops == NULL ? sim->in_provider > 0 : ticking(sim))
    return LUNA_ESTATE;
  detach(sim);
  if (ops != NULL) {
    sim->ops = *ops;
    sim->ud = ud;
    sim->has_ops = true;
  }
  return 0;
}

void *luna_sim_provider_ud(const luna_sim *sim) {
  return sim != NULL && sim->has_ops ? sim->ud : NULL;
}

/* ---- reading ----------------------------------------------------------------- */

uint64_t luna_sim_tick(const luna_sim *sim) { return sim != NULL ? sim->tick : 0; }
uint64_t luna_sim_head(const luna_sim *sim) { return sim != NULL ? sim->head : 0; }
uint64_t luna_sim_confirmed(const luna_sim *sim) { return sim != NULL ? sim->confirmed : 0; }

double luna_sim_alpha(const luna_sim *sim) {
  if (sim == NULL)
    return 0.0;
  return (double)sim->acc / (double)sim->cfg.tick_ns;
}

luna_ns luna_sim_pending_ns(const luna_sim *sim) { return sim != NULL ? sim->acc : 0; }
luna_ns luna_sim_tick_ns(const luna_sim *sim) { return sim != NULL ? sim->cfg.tick_ns : 0; }
int luna_sim_steps_due(const luna_sim *sim) { return sim != NULL ? sim->steps_due : 0; }

const luna_sim_tick_info *luna_sim_current(const luna_sim *sim) {
  return sim != NULL ? sim->active : NULL;
}

bool luna_sim_in_tick_callback(const luna_sim *sim) {
  return sim != NULL && sim->in_callback > 0;
}

int luna_sim_slots(const luna_sim *sim) { return sim != NULL ? sim->cfg.history + 2 : 0; }

int luna_sim_checksum(const luna_sim *sim, uint64_t tick, uint64_t *checksum) {
  const hist_entry *e;
  if (sim == NULL)
    return LUNA_EINVAL;
  if ((e = find(sim, tick)) == NULL)
    return LUNA_ENOENT;
  if (checksum != NULL)
    *checksum = e->checksum;
  return 0;
}

int luna_sim_oldest(const luna_sim *sim, uint64_t *oldest) {
  bool any = false;
  uint64_t min = 0;
  int i;
  if (sim == NULL)
    return LUNA_EINVAL;
  for (i = 0; i < sim->cfg.history; i++)
    if (sim->hist[i].valid && (!any || sim->hist[i].tick < min)) {
      min = sim->hist[i].tick;
      any = true;
    }
  if (!any)
    return LUNA_ENOENT;
  if (oldest != NULL)
    *oldest = min;
  return 0;
}

void luna_sim_get_stats(const luna_sim *sim, luna_sim_stats *out) {
  if (out == NULL)
    return;
  if (sim == NULL) {
    memset(out, 0, sizeof *out);
    return;
  }
  *out = sim->st;
  out->tick = sim->tick;
  out->head = sim->head;
  out->confirmed = sim->confirmed;
  out->debt = sim->debt;
}

/* ---- settings ------------------------------------------------------------- */

int luna_sim_set_rate_scale(luna_sim *sim, double scale) {
  if (sim == NULL || !valid_scale(scale))
    return LUNA_EINVAL;
  sim->cfg.rate_scale = scale;
  sim->rate_ppb = (uint64_t)luna__round_ns(scale * 1e9);
  return 0;
}

double luna_sim_rate_scale(const luna_sim *sim) { return sim != NULL ? sim->cfg.rate_scale : 0.0; }

int luna_sim_set_check_distance(luna_sim *sim, int d) {
  if (sim == NULL || d < 0 || d >= sim->cfg.history || (d > 0 && sim->cfg.manual_save))
    return LUNA_EINVAL;
  if (ticking(sim))
    return LUNA_ESTATE;
  sim->cfg.check_distance = d;
  return 0;
}

/* ---- the frame ------------------------------------------------------------------ */

int luna__sim_timing(const luna_sim *sim) { return sim->driving ? (int)sim->cfg.timing : -1; }

/* dt x rate scale, exact over frames: the scale as parts per billion, the
   remainder of each product carried to the next. Clamped to
   LUNA_CLOCK_MAX. */
static luna_ns stretch(luna_sim *sim, luna_ns dt) {
  uint64_t q, r, part, whole;
  if (sim->rate_ppb == NS_PER_S)
    return dt;
  q = (uint64_t)dt / NS_PER_S;
  r = (uint64_t)dt % NS_PER_S;
  if (sim->rate_ppb != 0 && q > (uint64_t)LUNA_CLOCK_MAX / sim->rate_ppb)
    return LUNA_CLOCK_MAX;
  whole = q * sim->rate_ppb; /* q x 1e9 ns x ppb / 1e9 */
  part = r * sim->rate_ppb + sim->rate_rem; /* < 1e9 x 1.6e10 + 1e9 < 2^64 */
  sim->rate_rem = part % NS_PER_S;
  whole += part / NS_PER_S;
  return whole > (uint64_t)LUNA_CLOCK_MAX ? LUNA_CLOCK_MAX : (luna_ns)whole;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

void luna__sim_begin_frame(luna_sim *sim, luna_ns scaled_dt) {
  luna_ns tick = sim->cfg.tick_ns;
  uint64_t due, cap = (uint64_t)sim->cfg.max_ticks_per_frame, run = 0, drop = 0;
  luna__sim_end_tick(sim);
  if (!sim->driving && sim->cfg.timing == LUNA_FIXED_UPDATE) {
    /* The plain accumulator stops; what it held is not the sim's. */
    sim->loop->accumulator = 0;
    sim->loop->fixed_steps_due = 0;
  }
  sim->driving = true;
  sim->steps_due = 0;
  sim->last_batch = 1;
  if (sim->cfg.policy == LUNA_SIM_MANUAL)
    return;
  sim->acc += stretch(sim, scaled_dt); /* acc < tick <= 2^61: no overflow */
  due = (uint64_t)(sim->acc / tick);
  sim->acc %= tick;
  switch (sim->cfg.policy) {
  case LUNA_SIM_BATCH:
    if (due <= cap) {
      run = due;
    } else {
      uint64_t k = min_u64(due - (cap - 1), (uint64_t)sim->cfg.max_batch);
      run = cap;
      sim->last_batch = (uint32_t)k;
      drop = due - (cap - 1) - k;
    }
    break;
  case LUNA_SIM_DEBT: {
    uint64_t total = sim->debt + due, rest, carry;
    run = min_u64(total, cap);
    rest = total - run;
    carry = min_u64(rest, (uint64_t)sim->cfg.max_debt);
    drop = rest - carry;
    sim->debt = carry;
    sim->st.debt_carried += carry;
    break;
  }
  case LUNA_SIM_RENDER_PACED:
    run = min_u64(due, 1);
    sim->st.slowdown_ticks += due - run;
    sim->st.slowdown_ns = luna_ns_add(sim->st.slowdown_ns, (luna_ns)(due - run) * tick);
    break;
  default: /* LUNA_SIM_DROP */
    run = min_u64(due, cap);
    drop = due - run;
    break;
  }
  sim->st.dropped_ticks += drop;
  sim->st.dropped_ns = luna_ns_add(sim->st.dropped_ns, (luna_ns)drop * tick);
  sim->steps_due = (int)run;
}

bool luna__sim_begin_run(luna_sim *sim) {
  luna_loop *loop = sim->loop;
  uint32_t batch;
  luna__sim_end_tick(sim); /* the host ran the first timing twice */
  if (sim->steps_due <= 0)
    return false;
  restore_partial(sim);
  batch = sim->steps_due == 1 ? sim->last_batch : 1;
  sim->steps_due--;
  sim->tick += batch;
  sim->cur.tick = sim->tick;
  sim->cur.batch = batch;
  sim->cur.dt_ns = (luna_ns)batch * sim->cfg.tick_ns;
  sim->cur.flags = place(sim) | (batch > 1 ? LUNA_SIM_CATCH_UP : 0u) |
                   (sim->steps_due == 0 ? LUNA_SIM_FINAL : 0u);
  sim->normal_open = true;
  sim->active = &sim->cur;
  sim->st.ticks += batch;
  sim->st.steps++;
  if (batch > 1) {
    sim->st.batched_steps++;
    sim->st.batched_ticks += batch;
  }
  if (sim->cur.flags & LUNA_SIM_RESIMULATING)
    sim->st.resimulated_ticks += batch;
  loop->v.in_fixed_step = true;
  loop->v.step_dt = sim->cur.dt_ns;
  if (sim->cfg.timing == LUNA_FIXED_UPDATE) {
    loop->clocks.fixed = luna_ns_add(loop->clocks.fixed, sim->cur.dt_ns);
    loop->fixed_steps_run++;
  }
  p_tick(sim);
  auto_save(sim, batch);
  return true;
}

void luna__sim_end_tick(luna_sim *sim) {
  bool first;
  if (!sim->normal_open)
    return;
  first = (sim->cur.flags & LUNA_SIM_FIRST_FULL) != 0;
  sim->normal_open = false;
  sim->active = NULL;
  sim->loop->v.in_fixed_step = false;
  if (first)
    check(sim);
}

/* ---- host-driven rollback ------------------------------------------------------ */

/* The checks every operation that changes tick or state starts with. */
static int can_change(const luna_sim *sim, bool needs_ops) {
  if (sim == NULL)
    return LUNA_EINVAL;
  if (ticking(sim))
    return LUNA_ESTATE;
  if (needs_ops && !sim->has_ops)
    return LUNA_ENOTSUP;
  return 0;
}

int luna_sim_save(luna_sim *sim, uint64_t *checksum) {
  int rc = can_change(sim, true);
  const hist_entry *e;
  if (rc != 0)
    return rc;
  restore_partial(sim);
  e = find(sim, sim->tick);
  return save_tick(sim, e != NULL ? e->batch : 1, checksum);
}

int luna_sim_load(luna_sim *sim, uint64_t tick) {
  int rc = can_change(sim, true), i;
  if (rc != 0)
    return rc;
  if (tick < sim->confirmed)
    return LUNA_ESTATE;
  if (find(sim, tick) == NULL)
    return LUNA_ENOENT;
  if ((rc = p_load(sim, tick, slot_of(sim, tick))) != 0)
    return rc;
  sim->partial_pending = false;
  sim->tick = tick;
  if (tick > sim->head)
    sim->head = tick; /* an imported future: simulated elsewhere */
  for (i = 0; i < sim->cfg.history; i++)
    if (sim->hist[i].valid && sim->hist[i].tick > tick)
      p_discard(sim, &sim->hist[i]);
  sim->st.rollbacks++;
  return 0;
}

int luna_sim_step(luna_sim *sim, uint32_t flags) {
  int rc = can_change(sim, false);
  if (rc != 0)
    return rc;
  if (flags & ~(uint32_t)(LUNA_SIM_FINAL | LUNA_SIM_CATCH_UP))
    return LUNA_EINVAL;
  restore_partial(sim);
  sim->tick++;
  sim->cur.tick = sim->tick;
  sim->cur.batch = 1;
  sim->cur.dt_ns = sim->cfg.tick_ns;
  sim->cur.flags = place(sim) | flags;
  if (sim->cur.flags & LUNA_SIM_RESIMULATING)
    sim->st.resimulated_ticks++;
  sim->st.host_steps++;
  p_tick(sim);
  auto_save(sim, 1);
  if (sim->cur.flags & LUNA_SIM_FIRST_FULL)
    check(sim);
  return 0;
}

int luna_sim_resimulate(luna_sim *sim, uint64_t from, uint64_t *ran) {
  uint64_t n = 0;
  int rc = luna_sim_load(sim, from);
  if (rc == 0)
    while (sim->tick < sim->head && (rc = luna_sim_step(sim, 0)) == 0)
      n++;
  if (ran != NULL)
    *ran = n;
  return rc;
}

int luna_sim_partial(luna_sim *sim, luna_ns dt) {
  int rc = can_change(sim, true);
  uint64_t sum;
  if (rc != 0)
    return rc;
  if (dt <= 0 || dt > sim->cfg.tick_ns)
    return LUNA_EINVAL;
  restore_partial(sim);
  if ((rc = p_save(sim, sim->tick, LUNA_SIM_SLOT_PARTIAL(sim->cfg.history), &sum)) != 0)
    return rc;
  sim->partial_pending = true;
  sim->cur.tick = sim->tick + 1;
  sim->cur.batch = 1;
  sim->cur.dt_ns = dt;
  sim->cur.flags = LUNA_SIM_PARTIAL;
  sim->st.partial_ticks++;
  p_tick(sim);
  return 0;
}

int luna_sim_confirm(luna_sim *sim, uint64_t tick) {
  int rc = can_change(sim, false);
  if (rc != 0)
    return rc;
  if (tick > sim->tick)
    return LUNA_EINVAL;
  if (tick <= sim->confirmed)
    return 0;
  sim->confirmed = tick;
  if (sim->has_ops && sim->ops.confirm != NULL) {
    enter(sim);
    sim->ops.confirm(sim->ud, tick);
    leave(sim);
  }
  return 0;
}

int luna_sim_export(luna_sim *sim, uint64_t tick, luna_sim_write_fn write, void *ud) {
  int rc;
  if (sim == NULL || write == NULL)
    return LUNA_EINVAL;
  if (sim->in_provider > 0)
    return LUNA_ESTATE;
  if (!sim->has_ops || sim->ops.export_bytes == NULL)
    return LUNA_ENOTSUP;
  if (find(sim, tick) == NULL)
    return LUNA_ENOENT;
  enter(sim);
  rc = sim->ops.export_bytes(sim->ud, tick, slot_of(sim, tick), write, ud);
  leave(sim);
  return rc;
}

int luna_sim_import(luna_sim *sim, uint64_t tick, const void *bytes, size_t len,
                    uint64_t *checksum) {
  int rc = can_change(sim, true);
  hist_entry *e;
  uint64_t sum = 0;
  if (rc != 0)
    return rc;
  if ((bytes == NULL && len > 0) || tick > LUNA_SIM_TICK_MAX)
    return LUNA_EINVAL;
  if (sim->ops.import_bytes == NULL)
    return LUNA_ENOTSUP;
  e = &sim->hist[slot_of(sim, tick)];
  enter(sim);
  rc = sim->ops.import_bytes(sim->ud, tick, slot_of(sim, tick), bytes, len, &sum);
  leave(sim);
  if (rc != 0) {
    e->valid = false;
    return rc;
  }
  e->tick = tick;
  e->checksum = sum;
  e->batch = 1;
  e->valid = true;
  if (checksum != NULL)
    *checksum = sum;
  return 0;
}
