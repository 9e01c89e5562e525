/*
** test_sim.c: the simulation group (lunaloop/sim.h) on the virtual clock:
** the catch-up policies with exact tick counts and alpha, the clock
** stretch, normal ticks at the timing pair against resimulated and partial
** ticks (which move no frame clock), the history ring, the order of saves,
** loads and discards seen by a fake state provider, the sync-test, bytes,
** and hostile arguments and reentrant calls.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "counting_alloc.h"
#include "lunaloop.h"
#include "test_log.h"
#include "loop_fixture.h"

#define MS INT64_C(1000000)

/* ---- a fake state provider --------------------------------------------------- */

#define MAX_SLOTS 80
#define MAX_INFO 2048

/* What the provider saw, as log entries: op x 1000000 + tick. */
enum { OP_SAVE = 1, OP_LOAD = 2, OP_DISCARD = 3, OP_TICK = 4, OP_CONFIRM = 5, OP_DETACH = 6 };
#define EV(op, tick) ((long)(op) * 1000000L + (long)(tick))

typedef struct fake {
  luna_loop *loop;
  uint64_t x;                 /* the live state */
  uint64_t slot[MAX_SLOTS];
  bool have[MAX_SLOTS];
  luna_sim_tick_info info[MAX_INFO];
  luna_ns delta[MAX_INFO];    /* luna_loop_delta inside each tick */
  luna_ns fixed[MAX_INFO];    /* the fixed clock inside each tick */
  size_t n;
  bool log_ops;               /* log saves, loads, discards (not ticks) */
  bool log_ticks;             /* log ticks too */
  int fail_save;              /* > 0: the next save fails with LUNA_ENOMEM */
  bool leak;                  /* a counter outside the state: nondeterminism */
  uint64_t leaked;
  int mismatches;
  luna_sim_mismatch last;
  int (*probe)(struct fake *f, luna_sim *sim); /* called inside tick */
  int probe_rc[16];
  size_t nprobe;
} fake;

static fake F;

static uint64_t sum_of(uint64_t x) { return x * UINT64_C(0x9E3779B97F4A7C15) ^ 0x5bd1e995; }

static int f_save(void *ud, uint64_t tick, int slot, uint64_t *checksum) {
  fake *f = ud;
  assert_true(slot >= 0 && slot < MAX_SLOTS);
  if (f->log_ops)
    log_push(EV(OP_SAVE, tick));
  if (f->fail_save > 0) {
    f->fail_save--;
    return LUNA_ENOMEM;
  }
  f->slot[slot] = f->x;
  f->have[slot] = true;
  assert_non_null(checksum); /* always given, also for the partial slot */
  *checksum = sum_of(f->x);
  return 0;
}

static int f_load(void *ud, uint64_t tick, int slot) {
  fake *f = ud;
  assert_true(slot >= 0 && slot < MAX_SLOTS);
  assert_true(f->have[slot]);
  if (f->log_ops)
    log_push(EV(OP_LOAD, tick));
  f->x = f->slot[slot];
  return 0;
}

static void f_discard(void *ud, uint64_t tick, int slot) {
  fake *f = ud;
  if (f->log_ops)
    log_push(EV(OP_DISCARD, tick));
  f->have[slot] = false;
}

static void f_tick(void *ud, luna_sim *sim, const luna_sim_tick_info *info) {
  fake *f = ud;
  assert_ptr_equal(luna_sim_current(sim), info);
  assert_true(luna_sim_in_tick_callback(sim));
  if (f->n < MAX_INFO) {
    f->info[f->n] = *info;
    f->delta[f->n] = luna_loop_delta(f->loop);
    f->fixed[f->n] = luna_loop_time(f->loop, LUNA_CLOCK_FIXED);
    f->n++;
  }
  if (f->log_ticks)
    log_push(EV(OP_TICK, info->tick));
  f->x = f->x * 31 + info->tick * 7 + (uint64_t)(info->dt_ns / MS);
  if (f->leak)
    f->x += f->leaked++;
  if (f->probe != NULL && f->nprobe < 16)
    f->probe_rc[f->nprobe++] = f->probe(f, sim);
}

static int f_export(void *ud, uint64_t tick, int slot, luna_sim_write_fn write, void *wud) {
  fake *f = ud;
  unsigned char b[8];
  int i;
  (void)tick;
  for (i = 0; i < 8; i++)
    b[i] = (unsigned char)(f->slot[slot] >> (8 * i));
  return write(wud, b, 4) != 0 ? LUNA_ENOMEM : write(wud, b + 4, 4);
}

static int f_import(void *ud, uint64_t tick, int slot, const void *bytes, size_t len,
                    uint64_t *checksum) {
  fake *f = ud;
  const unsigned char *b = bytes;
  uint64_t x = 0;
  int i;
  (void)tick;
  if (len != 8)
    return LUNA_EINVAL;
  for (i = 0; i < 8; i++)
    x |= (uint64_t)b[i] << (8 * i);
  f->slot[slot] = x;
  f->have[slot] = true;
  *checksum = sum_of(x);
  return 0;
}

static void f_confirm(void *ud, uint64_t tick) {
  fake *f = ud;
  if (f->log_ops)
    log_push(EV(OP_CONFIRM, tick));
}

static void f_mismatch(void *ud, const luna_sim_mismatch *m) {
  fake *f = ud;
  f->mismatches++;
  f->last = *m;
  assert_true(f->have[m->expected_slot]);
  assert_true(f->have[m->actual_slot]);
  assert_int_equal(sum_of(f->slot[m->expected_slot]), m->expected);
  assert_int_equal(sum_of(f->slot[m->actual_slot]), m->actual);
}

static void f_detach(void *ud, luna_sim *sim) {
  fake *f = ud;
  (void)sim;
  if (f->log_ops)
    log_push(EV(OP_DETACH, 0));
}

static const luna_sim_provider fake_ops = {
    f_save, f_load, f_discard, f_tick, f_export, f_import, f_confirm, f_mismatch, f_detach};

/* A sim with `c` on the fixture's loop, with the fake provider. */
static luna_sim *sim_with(fixture *fx, luna_sim_config c) {
  luna_sim *sim = NULL;
  memset(&F, 0, sizeof F);
  F.loop = fx->loop;
  assert_int_equal(luna_sim_new(fx->loop, &c, &sim), 0);
  assert_int_equal(luna_sim_set_provider(sim, &fake_ops, &F), 0);
  return sim;
}

static luna_sim_config cfg_ms(int tick_ms) {
  luna_sim_config c;
  memset(&c, 0, sizeof c);
  c.tick_ns = tick_ms * MS;
  return c;
}

/* ---- 1: 2, 3, 2, 3 ticks with exact alpha ------------------------------------- */

static void frames_of_50ms_run_2_3_2_3_ticks_with_exact_alpha(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  size_t before = 0;
  uint64_t expect = 1;
  int frame;
  for (frame = 0; frame < 8; frame++) {
    size_t i, ran;
    assert_int_equal(luna_loop_frame_ns(fx->loop, 50 * MS), 0);
    ran = F.n - before;
    assert_int_equal(ran, frame % 2 == 0 ? 2 : 3);
    for (i = before; i < F.n; i++) {
      assert_int_equal(F.info[i].tick, expect++);
      assert_int_equal(F.info[i].dt_ns, 20 * MS);
      assert_int_equal(F.info[i].batch, 1);
      assert_int_equal(F.info[i].flags,
                       LUNA_SIM_FIRST_FULL | (i == F.n - 1 ? LUNA_SIM_FINAL : 0u));
      assert_int_equal(F.delta[i], 20 * MS);
    }
    before = F.n;
    /* Exactly: 10 ms of 20 is 0.5, 0 is 0. */
    assert_true(luna_sim_alpha(sim) == (frame % 2 == 0 ? 0.5 : 0.0));
    assert_int_equal(luna_sim_pending_ns(sim), frame % 2 == 0 ? 10 * MS : 0);
    assert_int_equal(luna_sim_tick(sim), expect - 1);
    assert_int_equal(luna_sim_head(sim), expect - 1);
    assert_null(luna_sim_current(sim));
  }
  /* The FixedUpdate pair ran once per tick, the fixed clock is sim time. */
  {
    luna_loop_stats ls;
    luna_sim_stats ss;
    luna_loop_get_stats(fx->loop, &ls);
    luna_sim_get_stats(sim, &ss);
    assert_int_equal(ls.runs[LUNA_FIXED_UPDATE], 20);
    assert_int_equal(ls.runs[LUNA_LAST_FIXED_UPDATE], 20);
    assert_int_equal(ls.fixed_steps, 20);
    assert_int_equal(luna_loop_time(fx->loop, LUNA_CLOCK_FIXED), 400 * MS);
    assert_int_equal(ss.ticks, 20);
    assert_int_equal(ss.steps, 20);
    assert_int_equal(ss.saves, 20);
    assert_int_equal(ss.dropped_ticks, 0);
  }
}

/* The tick callback runs at the start of the pair's first run, before what
   waits there; luna_sim_current is readable through the pair. */
static luna_sim *g_sim;
static bool item_log_tick(luna_loop *loop, void *arg) {
  const luna_sim_tick_info *t = luna_sim_current(g_sim);
  (void)loop;
  log_push((long)(intptr_t)arg * 1000 + (t != NULL ? (long)t->tick : -1));
  return true;
}
static void hook_log(luna_loop *loop, luna_timing timing, void *ud) {
  (void)loop;
  (void)ud;
  if (timing == LUNA_FIXED_UPDATE)
    log_push(-(long)luna_sim_current(g_sim)->tick);
}

static void the_tick_callback_runs_before_the_pair_and_current_spans_it(void **state) {
  fixture *fx = *state;
  luna_sim *sim;
  luna_loop_free(fx->loop);
  {
    luna_config c = counting_config(&fx->ca);
    c.hook = hook_log;
    assert_int_equal(luna_loop_new(&c, &fx->loop), 0);
  }
  sim = g_sim = sim_with(fx, cfg_ms(20));
  F.log_ticks = true;
  assert_int_equal(luna_item_add(fx->loop, LUNA_FIXED_UPDATE, item_log_tick, (void *)1, NULL), 0);
  assert_int_equal(luna_item_add(fx->loop, LUNA_LAST_FIXED_UPDATE, item_log_tick, (void *)2, NULL), 0);
  assert_int_equal(luna_item_add(fx->loop, LUNA_UPDATE, item_log_tick, (void *)3, NULL), 0);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 40 * MS), 0);
  ASSERT_LOG(EV(OP_TICK, 1), 1001, -1, 2001, EV(OP_TICK, 2), 1002, -2, 2002, 3000 - 1);
  (void)sim;
}

/* ---- 2: batch ------------------------------------------------------------------ */

static bool item_log_delta(luna_loop *loop, void *arg) {
  (void)arg;
  log_push((long)(luna_loop_delta(loop) / MS));
  return true;
}

static void batch_runs_1_1_4_in_a_120ms_frame(void **state) {
  fixture *fx = *state;
  luna_sim_config c = cfg_ms(20);
  luna_sim *sim;
  luna_sim_stats st;
  c.policy = LUNA_SIM_BATCH;
  c.max_ticks_per_frame = 3;
  c.max_batch = 4;
  sim = sim_with(fx, c);
  assert_int_equal(luna_item_add(fx->loop, LUNA_FIXED_UPDATE, item_log_delta, NULL, NULL), 0);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 120 * MS), 0);
  assert_int_equal(F.n, 3);
  assert_int_equal(F.info[0].tick, 1);
  assert_int_equal(F.info[0].batch, 1);
  assert_int_equal(F.info[0].flags, LUNA_SIM_FIRST_FULL);
  assert_int_equal(F.info[1].tick, 2);
  assert_int_equal(F.info[1].batch, 1);
  assert_int_equal(F.info[2].tick, 6);
  assert_int_equal(F.info[2].batch, 4);
  assert_int_equal(F.info[2].dt_ns, 80 * MS);
  assert_int_equal(F.info[2].flags, LUNA_SIM_FIRST_FULL | LUNA_SIM_CATCH_UP | LUNA_SIM_FINAL);
  assert_int_equal(F.delta[2], 80 * MS);
  assert_int_equal(F.fixed[2], 120 * MS);
  ASSERT_LOG(20, 20, 80); /* delta time at FixedUpdate in each step */
  assert_int_equal(luna_sim_tick(sim), 6);
  luna_sim_get_stats(sim, &st);
  assert_int_equal(st.dropped_ticks, 0);
  assert_int_equal(st.dropped_ns, 0);
  assert_int_equal(st.ticks, 6);
  assert_int_equal(st.steps, 3);
  assert_int_equal(st.batched_steps, 1);
  assert_int_equal(st.batched_ticks, 4);
  /* Only a batch's last tick is saved. */
  assert_int_equal(luna_sim_checksum(sim, 2, NULL), 0);
  assert_int_equal(luna_sim_checksum(sim, 3, NULL), LUNA_ENOENT);
  assert_int_equal(luna_sim_checksum(sim, 6, NULL), 0);

  /* 300 ms: 15 due; 2 singles and a batch of 4 cover 6, 9 are dropped. */
  assert_int_equal(luna_loop_frame_ns(fx->loop, 300 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 12);
  luna_sim_get_stats(sim, &st);
  assert_int_equal(st.dropped_ticks, 9);
  assert_int_equal(st.dropped_ns, 180 * MS);
  /* Within the cap nothing is batched. */
  F.n = 0;
  assert_int_equal(luna_loop_frame_ns(fx->loop, 60 * MS), 0);
  assert_int_equal(F.n, 3);
  assert_int_equal(F.info[2].batch, 1);
}

/* ---- 3: render-paced ------------------------------------------------------------ */

static void render_paced_runs_at_most_one_tick_a_frame(void **state) {
  fixture *fx = *state;
  luna_sim_config c = cfg_ms(20);
  luna_sim *sim;
  luna_sim_stats st;
  uint32_t seed = 12345;
  int i;
  c.policy = LUNA_SIM_RENDER_PACED;
  sim = sim_with(fx, c);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 1000 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 1);
  luna_sim_get_stats(sim, &st);
  assert_int_equal(st.slowdown_ticks, 49);
  assert_int_equal(st.slowdown_ns, 980 * MS);
  assert_int_equal(st.dropped_ticks, 0);
  assert_true(luna_sim_alpha(sim) == 0.0);
  /* 10 ms frames: a tick every other frame. */
  for (i = 0; i < 4; i++)
    assert_int_equal(luna_loop_frame_ns(fx->loop, 10 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 3);
  /* Any dt: at most one tick a frame, and simulated time never passes the
     frame clock. */
  for (i = 0; i < 2000; i++) {
    uint64_t before = luna_sim_tick(sim);
    seed = seed * 1103515245u + 12345u;
    assert_int_equal(luna_loop_frame_ns(fx->loop, (luna_ns)((seed >> 8) % 70) * MS + (seed & 1023)), 0);
    assert_true(luna_sim_tick(sim) - before <= 1);
    assert_true((luna_ns)luna_sim_tick(sim) * 20 * MS + luna_sim_pending_ns(sim) <=
                luna_loop_time(fx->loop, LUNA_CLOCK_SCALED));
  }
  luna_sim_get_stats(sim, &st);
  assert_true(st.slowdown_ticks > 49);
  /* What was given up plus what ran plus what is pending is the frame time. */
  assert_int_equal((luna_ns)luna_sim_tick(sim) * 20 * MS + st.slowdown_ns + luna_sim_pending_ns(sim),
                   luna_loop_time(fx->loop, LUNA_CLOCK_SCALED));
}

/* ---- 4: debt ----------------------------------------------------------------------- */

static void debt_carries_10_of_50_and_drops_32(void **state) {
  fixture *fx = *state;
  luna_sim_config c = cfg_ms(20);
  luna_sim *sim;
  luna_sim_stats st;
  c.policy = LUNA_SIM_DEBT;
  c.max_ticks_per_frame = 8;
  c.max_debt = 10;
  sim = sim_with(fx, c);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 1000 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 8);
  luna_sim_get_stats(sim, &st);
  assert_int_equal(st.debt, 10);
  assert_int_equal(st.dropped_ticks, 32);
  assert_int_equal(st.dropped_ns, 640 * MS);
  /* Later frames pay the debt within the cap. */
  assert_int_equal(luna_loop_frame_ns(fx->loop, 0), 0);
  assert_int_equal(luna_sim_tick(sim), 16);
  luna_sim_get_stats(sim, &st);
  assert_int_equal(st.debt, 2);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0); /* 2 carried + 1 due */
  assert_int_equal(luna_sim_tick(sim), 19);
  luna_sim_get_stats(sim, &st);
  assert_int_equal(st.debt, 0);
  assert_int_equal(st.debt_carried, 12);
  assert_int_equal(st.dropped_ticks, 32);
  assert_int_equal(st.ticks, 19);
}

/* ---- 5: clock stretch ---------------------------------------------------------------- */

static void a_stretch_of_0_984_runs_exactly_984_ticks_in_1000_frames(void **state) {
  fixture *fx = *state;
  luna_sim_config c = cfg_ms(20);
  luna_sim *sim;
  int i;
  c.rate_scale = 0.984;
  sim = sim_with(fx, c);
  for (i = 0; i < 1000; i++)
    assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 984);
  assert_int_equal(luna_sim_pending_ns(sim), 0);
  assert_int_equal(luna_loop_frame_count(fx->loop), 1000);
  assert_int_equal(luna_loop_time(fx->loop, LUNA_CLOCK_SCALED), 20000 * MS);
  assert_int_equal(luna_loop_time(fx->loop, LUNA_CLOCK_UNSCALED), 20000 * MS);
  assert_int_equal(luna_loop_time(fx->loop, LUNA_CLOCK_FIXED), 984 * 20 * MS);
  /* Faster, set while running; then half speed, where each 3 ns frame
     gives 1.5 ns and the half ns carries to the next frame. */
  assert_int_equal(luna_sim_set_rate_scale(sim, 1.016), 0);
  for (i = 0; i < 1000; i++)
    assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 984 + 1016);
  assert_true(luna_sim_rate_scale(sim) == 1.016);
  assert_int_equal(luna_sim_set_rate_scale(sim, 0.5), 0);
  for (i = 0; i < 1000; i++)
    assert_int_equal(luna_loop_frame_ns(fx->loop, 3), 0); /* 1.5 ns each */
  assert_int_equal(luna_sim_pending_ns(sim), 1500);
  assert_int_equal(luna_sim_set_rate_scale(sim, 0), 0); /* paused */
  assert_int_equal(luna_loop_frame_ns(fx->loop, 1000 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 2000);
}

/* ---- 9: time inside resimulation --------------------------------------------------- */

static bool item_count(luna_loop *loop, void *arg) {
  (void)loop;
  (*(int *)arg)++;
  return true;
}

static void resimulated_ticks_have_the_tick_dt_and_the_frame_clocks_stand_still(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  luna_ns clocks[LUNA_CLOCK_COUNT];
  uint64_t ran = 0, frames;
  int fixed_runs = 0, k;
  size_t i;
  assert_int_equal(luna_item_add(fx->loop, LUNA_FIXED_UPDATE, item_count, &fixed_runs, NULL), 0);
  for (k = 0; k < 8; k++)
    assert_int_equal(luna_loop_frame_ns(fx->loop, 50 * MS), 0); /* 20 ticks */
  assert_int_equal(luna_sim_tick(sim), 20);
  assert_int_equal(fixed_runs, 20);
  for (k = 0; k < LUNA_CLOCK_COUNT; k++)
    if (k != LUNA_CLOCK_REALTIME)
      clocks[k] = luna_loop_time(fx->loop, (luna_clock)k);
  frames = luna_loop_frame_count(fx->loop);
  F.n = 0;
  assert_int_equal(luna_sim_resimulate(sim, 12, &ran), 0);
  assert_int_equal(ran, 8);
  assert_int_equal(F.n, 8);
  for (i = 0; i < F.n; i++) {
    assert_int_equal(F.info[i].tick, 13 + i);
    assert_int_equal(F.info[i].dt_ns, 20 * MS);
    assert_int_equal(F.info[i].batch, 1);
    assert_int_equal(F.info[i].flags, LUNA_SIM_RESIMULATING);
    assert_int_equal(F.delta[i], 20 * MS);          /* delta reads the tick */
    assert_int_equal(F.fixed[i], clocks[LUNA_CLOCK_FIXED]); /* the clock stands */
  }
  for (k = 0; k < LUNA_CLOCK_COUNT; k++)
    if (k != LUNA_CLOCK_REALTIME)
      assert_int_equal(luna_loop_time(fx->loop, (luna_clock)k), clocks[k]);
  assert_int_equal(luna_loop_frame_count(fx->loop), frames);
  assert_int_equal(fixed_runs, 20); /* no timing ran */
  assert_int_equal(luna_loop_delta(fx->loop), 50 * MS);
  assert_int_equal(luna_sim_tick(sim), 20);
  /* Deterministic: the resimulated ticks were saved with the same sums. */
  {
    luna_sim_stats st;
    luna_sim_get_stats(sim, &st);
    assert_int_equal(st.resimulated_ticks, 8);
    assert_int_equal(st.rollbacks, 1);
    assert_int_equal(st.host_steps, 8);
  }
  /* The next frame goes on from 20 as a first full tick. */
  F.n = 0;
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0);
  assert_int_equal(F.info[0].tick, 21);
  assert_int_equal(F.info[0].flags, LUNA_SIM_FIRST_FULL | LUNA_SIM_FINAL);
}

/* ---- the history ring ------------------------------------------------------------ */

static void loads_past_the_history_are_enoent(void **state) {
  fixture *fx = *state;
  luna_sim_config c = cfg_ms(20);
  luna_sim *sim;
  uint64_t oldest = 0;
  int k;
  c.history = 8;
  sim = sim_with(fx, c);
  assert_int_equal(luna_sim_slots(sim), 10);
  assert_int_equal(luna_sim_oldest(sim, &oldest), LUNA_ENOENT);
  assert_int_equal(luna_sim_load(sim, 0), LUNA_ENOENT); /* never saved */
  for (k = 0; k < 20; k++)
    assert_int_equal(luna_sim_step(sim, 0), 0);
  assert_int_equal(luna_sim_oldest(sim, &oldest), 0);
  assert_int_equal(oldest, 13);
  assert_int_equal(luna_sim_load(sim, 12), LUNA_ENOENT); /* fell out */
  assert_int_equal(luna_sim_load(sim, 21), LUNA_ENOENT); /* the future */
  assert_int_equal(luna_sim_load(sim, UINT64_MAX), LUNA_ENOENT);
  assert_int_equal(luna_sim_tick(sim), 20);
  assert_int_equal(luna_sim_load(sim, 13), 0);
  assert_int_equal(luna_sim_tick(sim), 13);
  assert_int_equal(luna_sim_head(sim), 20);
  assert_int_equal(luna_sim_load(sim, 14), LUNA_ENOENT); /* discarded */
  assert_int_equal(luna_sim_checksum(sim, 14, NULL), LUNA_ENOENT);
  assert_int_equal(luna_sim_checksum(sim, 13, NULL), 0);
}

/* ---- 6: load order ------------------------------------------------------------ */

static void loading_15_then_10_gives_the_tick_10_snapshot(void **state) {
  fixture *fx = *state;
  luna_sim_config c = cfg_ms(20);
  luna_sim *sim;
  uint64_t at10 = 0, sum10 = 0, sum = 0;
  int k;
  c.manual_save = true;
  sim = sim_with(fx, c);
  for (k = 1; k <= 20; k++) {
    assert_int_equal(luna_sim_step(sim, 0), 0);
    assert_int_equal(luna_sim_save(sim, &sum), 0);
    assert_int_equal(sum, sum_of(F.x));
    if (k == 10) {
      at10 = F.x;
      sum10 = sum;
    }
  }
  F.log_ops = true;
  assert_int_equal(luna_sim_load(sim, 15), 0);
  assert_int_equal(luna_sim_load(sim, 10), 0);
  ASSERT_LOG(EV(OP_LOAD, 15), EV(OP_DISCARD, 16), EV(OP_DISCARD, 17), EV(OP_DISCARD, 18),
             EV(OP_DISCARD, 19), EV(OP_DISCARD, 20), EV(OP_LOAD, 10), EV(OP_DISCARD, 11),
             EV(OP_DISCARD, 12), EV(OP_DISCARD, 13), EV(OP_DISCARD, 14), EV(OP_DISCARD, 15));
  assert_int_equal(F.x, at10);
  assert_int_equal(sum_of(F.x), sum10);
  assert_int_equal(luna_sim_tick(sim), 10);
  /* Resimulating from 10 reproduces the old 20 (a deterministic fake). */
  log_clear();
  F.log_ops = false;
  assert_int_equal(luna_sim_resimulate(sim, 10, NULL), 0);
  assert_int_equal(luna_sim_tick(sim), 20);
  assert_int_equal(luna_sim_checksum(sim, 20, NULL), LUNA_ENOENT); /* manual_save */
}

/* ---- 10: partial ticks ----------------------------------------------------------- */

static void a_full_tick_after_a_partial_one_starts_from_the_pre_partial_state(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  uint64_t plain = 0, with_partial = 0, x5;
  int k;
  for (k = 0; k < 5; k++)
    assert_int_equal(luna_sim_step(sim, 0), 0);
  x5 = F.x;
  /* Without a partial tick. */
  assert_int_equal(luna_sim_step(sim, 0), 0);
  assert_int_equal(luna_sim_checksum(sim, 6, &plain), 0);
  assert_int_equal(luna_sim_load(sim, 5), 0);
  assert_int_equal(F.x, x5);
  /* With two. */
  F.n = 0;
  assert_int_equal(luna_sim_partial(sim, 10 * MS), 0);
  assert_int_equal(F.n, 1);
  assert_int_equal(F.info[0].tick, 6);
  assert_int_equal(F.info[0].dt_ns, 10 * MS);
  assert_int_equal(F.info[0].flags, LUNA_SIM_PARTIAL);
  assert_int_equal(F.delta[0], 10 * MS);
  assert_true(F.x != x5);     /* the render sees the partial state */
  assert_int_equal(luna_sim_tick(sim), 5);
  assert_int_equal(luna_sim_partial(sim, 15 * MS), 0); /* restores, then again */
  assert_int_equal(F.info[1].dt_ns, 15 * MS);
  assert_int_equal(luna_sim_step(sim, 0), 0);
  assert_int_equal(luna_sim_checksum(sim, 6, &with_partial), 0);
  assert_int_equal(with_partial, plain);
  {
    luna_sim_stats st;
    luna_sim_get_stats(sim, &st);
    assert_int_equal(st.partial_ticks, 2);
  }
  /* A normal tick restores too, and a load cancels the restore. */
  assert_int_equal(luna_sim_partial(sim, 5 * MS), 0);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 7);
  assert_int_equal(luna_sim_checksum(sim, 7, &plain), 0);
  assert_int_equal(luna_sim_load(sim, 6), 0);
  assert_int_equal(luna_sim_step(sim, 0), 0);
  assert_int_equal(luna_sim_checksum(sim, 7, &with_partial), 0);
  assert_int_equal(with_partial, plain);
  assert_int_equal(luna_sim_partial(sim, 5 * MS), 0);
  assert_int_equal(luna_sim_load(sim, 7), 0);
  assert_int_equal(sum_of(F.x), plain);
  assert_int_equal(luna_sim_step(sim, 0), 0);
  assert_int_equal(luna_sim_tick(sim), 8);
}

/* ---- the sync-test ---------------------------------------------------------------- */

static void the_sync_test_passes_a_deterministic_provider_and_reports_a_leak(void **state) {
  fixture *fx = *state;
  luna_sim_config c = cfg_ms(20);
  luna_sim *sim;
  luna_sim_stats st;
  int k;
  c.check_distance = 7;
  sim = sim_with(fx, c);
  for (k = 0; k < 200; k++)
    assert_int_equal(luna_loop_frame_ns(fx->loop, 50 * MS), 0); /* 500 ticks */
  luna_sim_get_stats(sim, &st);
  assert_int_equal(st.tick, 500);
  assert_int_equal(st.checks, (500 - 7) * 7); /* every tick from 7 on, d each */
  assert_int_equal(st.mismatches, 0);
  assert_int_equal(F.mismatches, 0);
  /* Only the frame's ticks count as run; the checks' as resimulated. */
  assert_int_equal(st.ticks, 500);
  assert_int_equal(st.resimulated_ticks, (500 - 7) * 7);
  /* A provider with a counter outside its state. */
  F.leak = true;
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0);
  assert_int_equal(F.mismatches, 1); /* the first differing tick only */
  assert_int_equal(F.last.tick, 495);
  assert_int_equal(F.last.expected_slot, 495 % 64);
  assert_int_equal(F.last.actual_slot, LUNA_SIM_SLOT_CHECK(64));
  assert_true(F.last.expected != F.last.actual);
  luna_sim_get_stats(sim, &st);
  assert_int_equal(st.mismatches, 7);
  /* Host steps beyond the head are checked too, with batches replayed. */
  F.leak = false;
  assert_int_equal(luna_sim_set_check_distance(sim, 0), 0);
  for (k = 0; k < 10; k++)
    assert_int_equal(luna_sim_step(sim, 0), 0);
  assert_int_equal(luna_sim_set_check_distance(sim, 3), 0);
  F.mismatches = 0;
  assert_int_equal(luna_sim_step(sim, 0), 0);
  assert_int_equal(F.mismatches, 0);
  luna_sim_get_stats(sim, &st);
  assert_int_equal(st.checks, (500 - 7) * 7 + 7 + 3);
}

static void the_sync_test_replays_batches_as_they_ran(void **state) {
  fixture *fx = *state;
  luna_sim_config c = cfg_ms(20);
  luna_sim *sim;
  luna_sim_stats st;
  c.check_distance = 5;
  c.policy = LUNA_SIM_BATCH;
  c.max_ticks_per_frame = 2;
  c.max_batch = 4;
  sim = sim_with(fx, c);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 100 * MS), 0); /* 1, then 2..5 */
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0);  /* 6: check 1..6 */
  luna_sim_get_stats(sim, &st);
  assert_int_equal(st.tick, 6);
  assert_int_equal(st.checks, 2); /* the batch 2..5, then 6 */
  assert_int_equal(st.mismatches, 0);
  assert_int_equal(F.info[F.n - 2].batch, 4); /* replayed as a batch */
  assert_int_equal(F.info[F.n - 2].flags, LUNA_SIM_RESIMULATING | LUNA_SIM_CATCH_UP);
}

/* ---- the pair, other policies, no provider ------------------------------------ */

static void a_sim_at_pre_update_leaves_fixed_update_to_the_plain_accumulator(void **state) {
  fixture *fx = *state;
  luna_sim_config c = cfg_ms(10);
  luna_sim *sim;
  luna_loop_stats ls;
  int pre = 0, fixed = 0;
  c.timing = LUNA_PRE_UPDATE;
  sim = sim_with(fx, c);
  assert_int_equal(luna_item_add(fx->loop, LUNA_PRE_UPDATE, item_count, &pre, NULL), 0);
  assert_int_equal(luna_item_add(fx->loop, LUNA_FIXED_UPDATE, item_count, &fixed, NULL), 0);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 40 * MS), 0); /* fixed dt 20 ms */
  assert_int_equal(pre, 4);
  assert_int_equal(fixed, 2);
  assert_int_equal(luna_sim_tick(sim), 4);
  assert_int_equal(luna_loop_fixed_steps(fx->loop), 0);
  assert_int_equal(luna_loop_time(fx->loop, LUNA_CLOCK_FIXED), 40 * MS);
  assert_int_equal(F.delta[0], 10 * MS);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 5 * MS), 0); /* no tick: PreUpdate skipped */
  assert_int_equal(pre, 4);
  luna_loop_get_stats(fx->loop, &ls);
  assert_int_equal(ls.runs[LUNA_PRE_UPDATE], 4);
  assert_int_equal(ls.runs[LUNA_UPDATE], 2);
}

static void a_host_driving_the_timings_gets_a_tick_per_due_step(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  assert_int_equal(luna_loop_begin_frame_ns(fx->loop, 40 * MS), 0);
  assert_int_equal(luna_sim_steps_due(sim), 2);
  assert_int_equal(luna_loop_fixed_steps(fx->loop), 2);
  assert_int_equal(luna_loop_run(fx->loop, LUNA_FIXED_UPDATE), 0);
  assert_int_equal(luna_sim_tick(sim), 1);
  assert_non_null(luna_sim_current(sim));
  assert_int_equal(luna_loop_delta(fx->loop), 20 * MS);
  assert_int_equal(luna_sim_save(sim, NULL), LUNA_ESTATE); /* inside the tick */
  assert_int_equal(luna_loop_run(fx->loop, LUNA_LAST_FIXED_UPDATE), 0);
  assert_null(luna_sim_current(sim));
  assert_int_equal(luna_loop_delta(fx->loop), 40 * MS);
  assert_int_equal(luna_loop_run(fx->loop, LUNA_FIXED_UPDATE), 0); /* Last skipped */
  assert_int_equal(luna_loop_run(fx->loop, LUNA_FIXED_UPDATE), 0); /* no step due */
  assert_int_equal(luna_sim_tick(sim), 2);
  assert_null(luna_sim_current(sim));
  assert_int_equal(luna_loop_time(fx->loop, LUNA_CLOCK_FIXED), 40 * MS);
  assert_int_equal(F.n, 2);
  assert_int_equal(F.info[1].flags, LUNA_SIM_FIRST_FULL | LUNA_SIM_FINAL);
}

static void manual_policy_frames_run_no_ticks(void **state) {
  fixture *fx = *state;
  luna_sim_config c = cfg_ms(20);
  luna_sim *sim;
  int fixed = 0;
  c.policy = LUNA_SIM_MANUAL;
  sim = sim_with(fx, c);
  assert_int_equal(luna_item_add(fx->loop, LUNA_FIXED_UPDATE, item_count, &fixed, NULL), 0);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 1000 * MS), 0);
  assert_int_equal(fixed, 0);
  assert_int_equal(luna_sim_tick(sim), 0);
  assert_int_equal(luna_sim_pending_ns(sim), 0);
  assert_int_equal(luna_sim_step(sim, LUNA_SIM_FINAL), 0);
  assert_int_equal(F.info[0].flags, LUNA_SIM_FIRST_FULL | LUNA_SIM_FINAL);
  assert_int_equal(fixed, 0);
}

static void a_sim_without_provider_counts_ticks(void **state) {
  fixture *fx = *state;
  luna_sim *sim = NULL;
  luna_sim_config c = cfg_ms(20);
  unsigned char b[1] = {0};
  assert_int_equal(luna_sim_new(fx->loop, &c, &sim), 0);
  assert_ptr_equal(luna_sim_of(fx->loop), sim);
  assert_ptr_equal(luna_sim_loop(sim), fx->loop);
  assert_null(luna_sim_provider_ud(sim));
  assert_int_equal(luna_loop_frame_ns(fx->loop, 50 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 2);
  assert_true(luna_sim_alpha(sim) == 0.5);
  assert_int_equal(luna_sim_step(sim, 0), 0);
  assert_int_equal(luna_sim_tick(sim), 3);
  assert_int_equal(luna_sim_save(sim, NULL), LUNA_ENOTSUP);
  assert_int_equal(luna_sim_load(sim, 1), LUNA_ENOTSUP);
  assert_int_equal(luna_sim_partial(sim, MS), LUNA_ENOTSUP);
  assert_int_equal(luna_sim_import(sim, 1, b, 1, NULL), LUNA_ENOTSUP);
  assert_string_equal(luna_err_name(LUNA_ENOTSUP), "ENOTSUP");
  /* Freed with the loop (the fixture's teardown checks for leaks). */
}

static void the_default_is_60_hz_at_fixed_update_with_64_ticks_of_history(void **state) {
  fixture *fx = *state;
  luna_sim *sim = NULL;
  luna_sim_config c;
  int i;
  assert_int_equal(luna_sim_new(fx->loop, NULL, &sim), 0);
  luna_sim_get_config(sim, &c);
  assert_int_equal(c.tick_ns, 16666667);
  assert_int_equal(c.max_ticks_per_frame, 8);
  assert_int_equal(c.max_batch, 4);
  assert_int_equal(c.max_debt, 8);
  assert_int_equal(c.history, 64);
  assert_int_equal(c.timing, LUNA_FIXED_UPDATE);
  assert_int_equal(c.policy, LUNA_SIM_DROP);
  assert_true(c.rate_scale == 1.0);
  /* 60 frames of 16,666,667 ns: 60 ticks, alpha 0 every frame. */
  for (i = 0; i < 60; i++) {
    assert_int_equal(luna_loop_frame_ns(fx->loop, 16666667), 0);
    assert_true(luna_sim_alpha(sim) == 0.0);
  }
  assert_int_equal(luna_sim_tick(sim), 60);
  assert_int_equal(luna_sim_free(sim), 0);
  assert_null(luna_sim_of(fx->loop));
  /* The plain accumulator takes FixedUpdate back, from 0. */
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0);
  assert_int_equal(luna_loop_time(fx->loop, LUNA_CLOCK_FIXED), 60 * INT64_C(16666667) + 20 * MS);
}

/* ---- export / import ------------------------------------------------------------------ */

typedef struct buf {
  unsigned char b[64];
  size_t n;
  int fail_at;
} buf;
static int buf_write(void *ud, const void *bytes, size_t len) {
  buf *w = ud;
  if (w->fail_at > 0 && w->n >= (size_t)w->fail_at)
    return LUNA_ENOMEM;
  memcpy(w->b + w->n, bytes, len);
  w->n += len;
  return 0;
}

static void a_snapshot_goes_out_and_back_in_as_bytes(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  buf w;
  uint64_t sum = 0, saved = 0, x7;
  int k;
  memset(&w, 0, sizeof w);
  for (k = 0; k < 7; k++)
    assert_int_equal(luna_sim_step(sim, 0), 0);
  x7 = F.x;
  assert_int_equal(luna_sim_export(sim, 7, buf_write, &w), 0);
  assert_int_equal(w.n, 8);
  assert_int_equal(luna_sim_export(sim, 8, buf_write, &w), LUNA_ENOENT);
  assert_int_equal(luna_sim_export(sim, 7, NULL, &w), LUNA_EINVAL);
  {
    buf bad;
    memset(&bad, 0, sizeof bad);
    bad.fail_at = 4;
    assert_int_equal(luna_sim_export(sim, 7, buf_write, &bad), LUNA_ENOMEM);
  }
  for (k = 0; k < 5; k++)
    assert_int_equal(luna_sim_step(sim, 0), 0);
  /* A save game: the bytes of 7 as tick 100, then loaded. */
  assert_int_equal(luna_sim_import(sim, 100, w.b, w.n, &sum), 0);
  assert_int_equal(luna_sim_checksum(sim, 7, &saved), 0);
  assert_int_equal(sum, saved);
  assert_int_equal(luna_sim_import(sim, 101, w.b, 3, NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_checksum(sim, 101, NULL), LUNA_ENOENT);
  assert_int_equal(luna_sim_import(sim, 102, NULL, 8, NULL), LUNA_EINVAL);
  /* A tick near UINT64_MAX made the next step wrap: refused above 2^62. */
  assert_int_equal(luna_sim_import(sim, UINT64_MAX, w.b, w.n, NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_import(sim, LUNA_SIM_TICK_MAX + 1, w.b, w.n, NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_checksum(sim, UINT64_MAX, NULL), LUNA_ENOENT);
  assert_int_equal(luna_sim_load(sim, 100), 0);
  assert_int_equal(F.x, x7);
  assert_int_equal(luna_sim_tick(sim), 100);
  assert_int_equal(luna_sim_step(sim, 0), 0);
  assert_int_equal(F.info[F.n - 1].tick, 101);
  assert_int_equal(F.info[F.n - 1].flags, LUNA_SIM_FIRST_FULL);
}

/* ---- confirm ------------------------------------------------------------------------- */

static void confirmed_ticks_are_not_rolled_back(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  int k;
  for (k = 0; k < 10; k++)
    assert_int_equal(luna_sim_step(sim, 0), 0);
  F.log_ops = true;
  assert_int_equal(luna_sim_confirm(sim, 11), LUNA_EINVAL);
  assert_int_equal(luna_sim_confirm(sim, 4), 0);
  assert_int_equal(luna_sim_confirm(sim, 3), 0); /* older: nothing */
  assert_int_equal(luna_sim_confirm(sim, 4), 0);
  ASSERT_LOG(EV(OP_CONFIRM, 4));
  assert_int_equal(luna_sim_confirmed(sim), 4);
  assert_int_equal(luna_sim_load(sim, 3), LUNA_ESTATE);
  assert_int_equal(luna_sim_load(sim, 4), 0);
}

/* ---- failures of the provider ------------------------------------------------------------ */

static void a_failed_save_is_counted_and_not_held(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  luna_sim_stats st;
  F.fail_save = 1;
  assert_int_equal(luna_loop_frame_ns(fx->loop, 40 * MS), 0);
  luna_sim_get_stats(sim, &st);
  assert_int_equal(st.save_errors, 1);
  assert_int_equal(st.saves, 1);
  assert_int_equal(luna_sim_load(sim, 1), LUNA_ENOENT);
  assert_int_equal(luna_sim_checksum(sim, 2, NULL), 0);
  F.fail_save = 1;
  assert_int_equal(luna_sim_save(sim, NULL), LUNA_ENOMEM);
  assert_int_equal(luna_sim_checksum(sim, 2, NULL), LUNA_ENOENT);
  F.fail_save = 1;
  assert_int_equal(luna_sim_partial(sim, MS), LUNA_ENOMEM);
  assert_int_equal(F.n, 2); /* no partial tick ran */
}

/* ---- hostile arguments and reentrancy --------------------------------------------------- */

static void bad_configurations_are_einval(void **state) {
  fixture *fx = *state;
  luna_sim *sim = NULL;
  luna_sim_config c;
  size_t i;
#define BAD(stmt)                                                              \
  do {                                                                         \
    memset(&c, 0, sizeof c);                                                   \
    stmt;                                                                      \
    assert_int_equal(luna_sim_new(fx->loop, &c, &sim), LUNA_EINVAL);           \
    assert_null(sim);                                                          \
    assert_null(luna_sim_of(fx->loop));                                        \
  } while (0)
  BAD(c.tick_ns = -1);
  BAD(c.tick_ns = LUNA_SIM_TICK_NS_MAX + 1);
  BAD(c.max_ticks_per_frame = -1);
  BAD(c.max_ticks_per_frame = LUNA_SIM_MAX_TICKS_MAX + 1);
  BAD(c.max_batch = -3);
  BAD(c.max_debt = -1);
  BAD(c.history = -1);
  BAD(c.history = LUNA_SIM_HISTORY_MAX + 1);
  BAD(c.timing = LUNA_LAST_FIXED_UPDATE);
  BAD(c.timing = (luna_timing)LUNA_TIMING_COUNT);
  BAD(c.timing = (luna_timing)-2);
  BAD(c.policy = (luna_sim_policy)5);
  BAD(c.policy = (luna_sim_policy)-1);
  BAD(c.check_distance = -1);
  BAD(c.check_distance = 64);
  BAD(c.history = 8; c.check_distance = 8);
  BAD(c.check_distance = 2; c.manual_save = true);
  BAD(c.rate_scale = -0.5);
  BAD(c.rate_scale = NAN);
  BAD(c.rate_scale = LUNA_SIM_RATE_SCALE_MAX * 2);
  assert_int_equal(luna_sim_new(NULL, NULL, &sim), LUNA_EINVAL);
  assert_int_equal(luna_sim_new(fx->loop, NULL, NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_new(fx->loop, NULL, &sim), 0);
  {
    luna_sim *other = NULL;
    assert_int_equal(luna_sim_new(fx->loop, NULL, &other), LUNA_EALREADY);
    assert_null(other);
  }
  assert_int_equal(luna_sim_set_rate_scale(sim, -1), LUNA_EINVAL);
  assert_int_equal(luna_sim_set_rate_scale(sim, 17), LUNA_EINVAL);
  assert_int_equal(luna_sim_set_check_distance(sim, 64), LUNA_EINVAL);
  assert_int_equal(luna_sim_set_check_distance(sim, -1), LUNA_EINVAL);
  for (i = 0; i < 1; i++) {
    luna_sim_provider p = fake_ops;
    p.tick = NULL;
    assert_int_equal(luna_sim_set_provider(sim, &p, &F), LUNA_EINVAL);
    p = fake_ops;
    p.save = NULL;
    assert_int_equal(luna_sim_set_provider(sim, &p, &F), LUNA_EINVAL);
    p = fake_ops;
    p.load = NULL;
    assert_int_equal(luna_sim_set_provider(sim, &p, &F), LUNA_EINVAL);
  }
  assert_int_equal(luna_sim_step(sim, LUNA_SIM_PARTIAL), LUNA_EINVAL);
  assert_int_equal(luna_sim_step(sim, LUNA_SIM_RESIMULATING), LUNA_EINVAL);
  assert_int_equal(luna_sim_step(sim, 1u << 20), LUNA_EINVAL);
  assert_int_equal(luna_sim_tick(sim), 0);
#undef BAD
}

static void null_sims_are_einval_and_read_zero(void **state) {
  luna_sim_stats st;
  luna_sim_config c;
  (void)state;
  memset(&st, 0xff, sizeof st);
  memset(&c, 0xff, sizeof c);
  assert_int_equal(luna_sim_free(NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_set_provider(NULL, &fake_ops, NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_save(NULL, NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_load(NULL, 0), LUNA_EINVAL);
  assert_int_equal(luna_sim_step(NULL, 0), LUNA_EINVAL);
  assert_int_equal(luna_sim_resimulate(NULL, 0, NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_partial(NULL, 1), LUNA_EINVAL);
  assert_int_equal(luna_sim_confirm(NULL, 0), LUNA_EINVAL);
  assert_int_equal(luna_sim_export(NULL, 0, buf_write, NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_import(NULL, 0, "", 0, NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_checksum(NULL, 0, NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_oldest(NULL, NULL), LUNA_EINVAL);
  assert_int_equal(luna_sim_set_rate_scale(NULL, 1), LUNA_EINVAL);
  assert_int_equal(luna_sim_set_check_distance(NULL, 0), LUNA_EINVAL);
  assert_null(luna_sim_of(NULL));
  assert_null(luna_sim_loop(NULL));
  assert_null(luna_sim_current(NULL));
  assert_null(luna_sim_provider_ud(NULL));
  assert_false(luna_sim_in_tick_callback(NULL));
  assert_int_equal(luna_sim_tick(NULL), 0);
  assert_int_equal(luna_sim_head(NULL), 0);
  assert_int_equal(luna_sim_confirmed(NULL), 0);
  assert_true(luna_sim_alpha(NULL) == 0.0);
  assert_int_equal(luna_sim_pending_ns(NULL), 0);
  assert_int_equal(luna_sim_tick_ns(NULL), 0);
  assert_int_equal(luna_sim_steps_due(NULL), 0);
  assert_int_equal(luna_sim_slots(NULL), 0);
  luna_sim_get_stats(NULL, &st);
  assert_int_equal(st.ticks, 0);
  luna_sim_get_config(NULL, &c);
  assert_int_equal(c.tick_ns, 0);
  luna_sim_get_stats(NULL, NULL);
  luna_sim_get_config(NULL, NULL);
}

static int probe_everything(fake *f, luna_sim *sim) {
  buf w;
  int bad = 0;
  memset(&w, 0, sizeof w);
  (void)f;
  bad += luna_sim_save(sim, NULL) != LUNA_ESTATE;
  bad += luna_sim_load(sim, 1) != LUNA_ESTATE;
  bad += luna_sim_step(sim, 0) != LUNA_ESTATE;
  bad += luna_sim_resimulate(sim, 1, NULL) != LUNA_ESTATE;
  bad += luna_sim_partial(sim, 1) != LUNA_ESTATE;
  bad += luna_sim_confirm(sim, 0) != LUNA_ESTATE;
  bad += luna_sim_import(sim, 1, "12345678", 8, NULL) != LUNA_ESTATE;
  bad += luna_sim_export(sim, 1, buf_write, &w) != LUNA_ESTATE;
  bad += luna_sim_set_provider(sim, NULL, NULL) != LUNA_ESTATE;
  bad += luna_sim_set_check_distance(sim, 1) != LUNA_ESTATE;
  bad += luna_sim_free(sim) != LUNA_ESTATE;
  bad += luna_loop_frame_ns(luna_sim_loop(sim), 1) != LUNA_ESTATE;
  bad += luna_loop_run(luna_sim_loop(sim), LUNA_UPDATE) != LUNA_ESTATE;
  bad += luna_loop_reset(luna_sim_loop(sim)) != LUNA_ESTATE;
  bad += luna_sim_new(luna_sim_loop(sim), NULL, &(luna_sim *){NULL}) != LUNA_EALREADY;
  return bad;
}

static void calls_from_inside_a_tick_are_refused(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  size_t i;
  F.probe = probe_everything;
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0); /* normal tick */
  assert_int_equal(luna_sim_step(sim, 0), 0);                 /* host step */
  assert_int_equal(luna_sim_partial(sim, MS), 0);             /* partial */
  assert_int_equal(luna_sim_resimulate(sim, 1, NULL), 0);     /* resimulated */
  assert_int_equal(F.nprobe, 4);
  for (i = 0; i < F.nprobe; i++)
    assert_int_equal(F.probe_rc[i], 0);
  assert_false(luna_sim_in_tick_callback(sim));
  assert_int_equal(luna_sim_tick(sim), 2);
}

static bool item_probe(luna_loop *loop, void *arg) {
  int *rc = arg;
  luna_sim *sim = luna_sim_of(loop);
  rc[0] = luna_sim_load(sim, 0);
  rc[1] = luna_sim_free(sim);
  rc[2] = luna_sim_new(loop, NULL, &(luna_sim *){NULL});
  rc[3] = luna_sim_in_tick_callback(sim);
  return false;
}

static bool item_free_sim(luna_loop *loop, void *arg) {
  *(int *)arg = luna_sim_free(luna_sim_of(loop));
  return false;
}

static void the_pair_is_inside_the_tick_and_other_timings_are_not(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  int rc[4] = {9, 9, 9, 9}, freed = 9, fixed = 0;
  assert_int_equal(luna_sim_save(sim, NULL), 0); /* tick 0 */
  assert_int_equal(luna_item_add(fx->loop, LUNA_FIXED_UPDATE, item_probe, rc, NULL), 0);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0);
  assert_int_equal(rc[0], LUNA_ESTATE);
  assert_int_equal(rc[1], LUNA_ESTATE);
  assert_int_equal(rc[2], LUNA_EALREADY);
  assert_int_equal(rc[3], 0);
  /* From Update the sim may roll back, and be freed. */
  assert_int_equal(luna_item_add(fx->loop, LUNA_UPDATE, item_free_sim, &freed, NULL), 0);
  assert_int_equal(luna_item_add(fx->loop, LUNA_FIXED_UPDATE, item_count, &fixed, NULL), 0);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0);
  assert_int_equal(freed, 0);
  assert_null(luna_sim_of(fx->loop));
  assert_int_equal(fixed, 1);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0); /* plain fixed step */
  assert_int_equal(fixed, 2);
}

static bool item_stop(luna_loop *loop, void *arg) {
  (void)arg;
  luna_loop_stop(loop);
  return false;
}

static void a_stopped_frame_closes_its_tick(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  assert_int_equal(luna_item_add(fx->loop, LUNA_FIXED_UPDATE, item_stop, NULL, NULL), 0);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 40 * MS), LUNA_ESTOPPED);
  assert_int_equal(luna_sim_tick(sim), 1);
  assert_null(luna_sim_current(sim));
  assert_int_equal(luna_loop_delta(fx->loop), 40 * MS);
  assert_int_equal(luna_sim_load(sim, 1), 0);
  /* The step the stop skipped is gone with the frame, as the plain
     accumulator's would be. */
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 2);
}

/* The owner of the state may stop providing it during a tick (a Lua state
   closed by the host hook between FixedUpdate and LastFixedUpdate): the
   removal used to be refused with LUNA_ESTATE for the whole tick, which
   left a provider whose ud was gone; only inside a provider callback is it
   refused now. The tick goes on without a provider, the next ones count. */
static bool item_remove_provider(luna_loop *loop, void *arg) {
  *(int *)arg = luna_sim_set_provider(luna_sim_of(loop), NULL, NULL);
  return false;
}

static void the_provider_can_be_removed_during_a_tick_but_not_inside_its_callbacks(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  int rc = 1;
  assert_int_equal(luna_item_add(fx->loop, LUNA_FIXED_UPDATE, item_remove_provider, &rc, NULL), 0);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 40 * MS), 0);
  assert_int_equal(rc, 0);
  assert_null(luna_sim_provider_ud(sim));
  assert_int_equal(F.n, 1); /* the frame's second tick ran without it */
  assert_int_equal(luna_loop_frame_ns(fx->loop, 40 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 4);
}

static void replacing_the_provider_detaches_it_and_empties_the_history(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  assert_int_equal(luna_sim_step(sim, 0), 0);
  assert_int_equal(luna_sim_checksum(sim, 1, NULL), 0);
  assert_ptr_equal(luna_sim_provider_ud(sim), &F);
  F.log_ops = true;
  assert_int_equal(luna_sim_set_provider(sim, NULL, NULL), 0);
  ASSERT_LOG(EV(OP_DETACH, 0));
  assert_int_equal(luna_sim_checksum(sim, 1, NULL), LUNA_ENOENT);
  assert_null(luna_sim_provider_ud(sim));
  assert_int_equal(luna_sim_set_provider(sim, &fake_ops, &F), 0);
  log_clear();
  luna_loop_free(fx->loop); /* detaches */
  ASSERT_LOG(EV(OP_DETACH, 0));
  {
    luna_config c = counting_config(&fx->ca);
    assert_int_equal(luna_loop_new(&c, &fx->loop), 0);
  }
}

static bool item_make_sim(luna_loop *loop, void *arg) {
  *(int *)arg = luna_sim_new(loop, NULL, &(luna_sim *){NULL});
  return false;
}

static void a_sim_made_during_a_frame_takes_the_pair_at_the_next(void **state) {
  fixture *fx = *state;
  int made = 9, fixed = 0;
  luna_sim *sim;
  /* Made at EarlyUpdate: this frame's plain fixed steps still run. */
  assert_int_equal(luna_item_add(fx->loop, LUNA_EARLY_UPDATE, item_make_sim, &made, NULL), 0);
  assert_int_equal(luna_item_add(fx->loop, LUNA_FIXED_UPDATE, item_count, &fixed, NULL), 0);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 50 * MS), 0); /* plain 20 ms: 2 */
  assert_int_equal(made, 0);
  assert_int_equal(fixed, 2);
  sim = luna_sim_of(fx->loop);
  assert_int_equal(luna_sim_tick(sim), 0);
  /* From the next frame the sim's 60 Hz ticks, from an empty accumulator
     (the plain one's 10 ms are not carried over). */
  assert_int_equal(luna_loop_frame_ns(fx->loop, 50 * MS), 0);
  assert_int_equal(luna_sim_tick(sim), 2); /* 50 ms / 16.67 ms */
  assert_int_equal(fixed, 4);
  assert_int_equal(luna_sim_pending_ns(sim), 50 * MS - 2 * LUNA_SIM_DEFAULT_TICK_NS);
}

static void the_longest_tick_in_the_largest_batch_fits(void **state) {
  fixture *fx = *state;
  luna_sim_config c;
  luna_sim *sim;
  memset(&c, 0, sizeof c);
  c.tick_ns = LUNA_SIM_TICK_NS_MAX;
  c.policy = LUNA_SIM_BATCH;
  c.max_ticks_per_frame = 1;
  c.max_batch = LUNA_SIM_MAX_TICKS_MAX;
  sim = sim_with(fx, c);
  assert_int_equal(luna_loop_frame_ns(fx->loop, LUNA_CLOCK_MAX - 1), 0);
  assert_int_equal(F.n, 1);
  assert_int_equal(F.info[0].batch, LUNA_SIM_MAX_TICKS_MAX - 1);
  assert_int_equal(F.info[0].dt_ns, (luna_ns)(LUNA_SIM_MAX_TICKS_MAX - 1) * LUNA_SIM_TICK_NS_MAX);
  assert_true(F.info[0].dt_ns > 0);
  assert_int_equal(luna_sim_tick(sim), LUNA_SIM_MAX_TICKS_MAX - 1);
  assert_int_equal(luna_loop_frame_ns(fx->loop, 2), LUNA_ERANGE);
}

static void loading_an_imported_future_raises_the_head(void **state) {
  fixture *fx = *state;
  luna_sim *sim = sim_with(fx, cfg_ms(20));
  unsigned char b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint64_t ran = 9;
  assert_int_equal(luna_sim_import(sim, 500, b, 8, NULL), 0);
  assert_int_equal(luna_sim_resimulate(sim, 500, &ran), 0);
  assert_int_equal(ran, 0);
  assert_int_equal(luna_sim_tick(sim), 500);
  assert_int_equal(luna_sim_head(sim), 500);
  assert_int_equal(F.x, UINT64_C(0x0807060504030201));
  assert_int_equal(luna_loop_frame_ns(fx->loop, 20 * MS), 0);
  assert_int_equal(F.info[0].tick, 501);
  assert_int_equal(F.info[0].flags, LUNA_SIM_FIRST_FULL | LUNA_SIM_FINAL);
}

/* Property: under every policy and any frame dts, time is conserved:
   ticks run + dropped + given up (render-paced) + carried (debt) + pending
   is the frame time fed, to the ns; no frame runs more steps than the cap
   (one when render-paced), no step covers more than max_batch ticks, tick
   numbers are consecutive across steps, and only a frame's last step has
   FINAL. */
static void time_is_conserved_under_every_policy(void **state) {
  fixture *fx = *state;
  luna_sim_policy p;
  for (p = LUNA_SIM_DROP; p <= LUNA_SIM_RENDER_PACED; p++) {
    luna_sim_config c = cfg_ms(7);
    luna_sim *sim;
    uint32_t seed = 99u + (uint32_t)p;
    uint64_t last = 0;
    luna_ns fed = 0;
    int frame;
    c.policy = p;
    c.max_ticks_per_frame = 3;
    c.max_batch = 5;
    c.max_debt = 6;
    c.history = 4;
    luna_loop_free(fx->loop);
    {
      luna_config lc = counting_config(&fx->ca);
      assert_int_equal(luna_loop_new(&lc, &fx->loop), 0);
    }
    sim = sim_with(fx, c);
    for (frame = 0; frame < 3000; frame++) {
      luna_sim_stats st;
      luna_ns dt;
      size_t i, first = F.n = 0;
      seed = seed * 1103515245u + 12345u;
      dt = (seed >> 16) % 8 == 0 ? (luna_ns)((seed >> 8) % 200) * MS : (luna_ns)((seed >> 8) % 20000) * 1000;
      fed += dt;
      assert_int_equal(luna_loop_frame_ns(fx->loop, dt), 0);
      assert_true(F.n <= (p == LUNA_SIM_RENDER_PACED ? 1u : 3u));
      for (i = first; i < F.n; i++) {
        assert_true(F.info[i].batch >= 1 && F.info[i].batch <= 5);
        assert_int_equal(F.info[i].tick, last + F.info[i].batch);
        assert_int_equal(F.info[i].dt_ns, (luna_ns)F.info[i].batch * 7 * MS);
        assert_int_equal((F.info[i].flags & LUNA_SIM_FINAL) != 0, i == F.n - 1);
        assert_int_equal((F.info[i].flags & LUNA_SIM_CATCH_UP) != 0, F.info[i].batch > 1);
        assert_true(F.info[i].flags & LUNA_SIM_FIRST_FULL);
        last = F.info[i].tick;
      }
      luna_sim_get_stats(sim, &st);
      assert_int_equal(st.tick, last);
      assert_true(st.debt <= 6);
      assert_int_equal((luna_ns)st.tick * 7 * MS + st.dropped_ns + st.slowdown_ns +
                           (luna_ns)st.debt * 7 * MS + luna_sim_pending_ns(sim),
                       fed);
      assert_true(luna_sim_alpha(sim) >= 0.0 && luna_sim_alpha(sim) < 1.0);
    }
    {
      luna_sim_stats st;
      luna_sim_get_stats(sim, &st);
      if (p == LUNA_SIM_BATCH)
        assert_true(st.batched_steps > 0);
      if (p == LUNA_SIM_DEBT)
        assert_true(st.debt_carried > 0);
      if (p != LUNA_SIM_RENDER_PACED)
        assert_true(st.dropped_ticks > 0);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
      T(frames_of_50ms_run_2_3_2_3_ticks_with_exact_alpha),
      T(the_tick_callback_runs_before_the_pair_and_current_spans_it),
      T(batch_runs_1_1_4_in_a_120ms_frame),
      T(render_paced_runs_at_most_one_tick_a_frame),
      T(debt_carries_10_of_50_and_drops_32),
      T(a_stretch_of_0_984_runs_exactly_984_ticks_in_1000_frames),
      T(resimulated_ticks_have_the_tick_dt_and_the_frame_clocks_stand_still),
      T(loads_past_the_history_are_enoent),
      T(loading_15_then_10_gives_the_tick_10_snapshot),
      T(a_full_tick_after_a_partial_one_starts_from_the_pre_partial_state),
      T(the_sync_test_passes_a_deterministic_provider_and_reports_a_leak),
      T(the_sync_test_replays_batches_as_they_ran),
      T(a_sim_at_pre_update_leaves_fixed_update_to_the_plain_accumulator),
      T(a_host_driving_the_timings_gets_a_tick_per_due_step),
      T(manual_policy_frames_run_no_ticks),
      T(a_sim_without_provider_counts_ticks),
      T(the_default_is_60_hz_at_fixed_update_with_64_ticks_of_history),
      T(a_snapshot_goes_out_and_back_in_as_bytes),
      T(confirmed_ticks_are_not_rolled_back),
      T(a_failed_save_is_counted_and_not_held),
      T(bad_configurations_are_einval),
      T(null_sims_are_einval_and_read_zero),
      T(calls_from_inside_a_tick_are_refused),
      T(the_pair_is_inside_the_tick_and_other_timings_are_not),
      T(a_stopped_frame_closes_its_tick),
      T(replacing_the_provider_detaches_it_and_empties_the_history),
      T(the_provider_can_be_removed_during_a_tick_but_not_inside_its_callbacks),
      T(a_sim_made_during_a_frame_takes_the_pair_at_the_next),
      T(the_longest_tick_in_the_largest_batch_fits),
      T(loading_an_imported_future_raises_the_head),
      T(time_is_conserved_under_every_policy),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
