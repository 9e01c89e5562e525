/*
** test_budget.c: per-timing frame budgets of the runner
** (luna_loop_set_budget, luna_loop_set_cost_source, luna_item_options.
** essential): the exact items called per run under a fake cost clock, the
** deferred ones first at the next run, essential items always, the stats
** counters, the fairness bound (tight, and under random costs against a
** model), stop and removal with a deferred list, and that no clock is read
** without a budget.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "counting_alloc.h"
#include "loop_internal.h"
#include "lunaloop.h"
#include "test_log.h"

#define MS ((luna_ns)1000 * 1000)

typedef struct fixture {
  counting_alloc ca;
  luna_loop *loop;
} fixture;

/* The fake cost clock: each read advances it by `per_read` (or by a
   pseudo-random amount below `per_read` when `random`), items advance it by
   their own cost, and reads are counted. */
typedef struct fake_clock {
  luna_ns now, per_read;
  bool random;
  long reads;
} fake_clock;

static fake_clock g_clock;
static luna_ns g_cost[32]; /* cost of item i per call */
static uint32_t g_rng;

static uint32_t rnd(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return g_rng >> 8;
}

static luna_ns fake_read(void *ud) {
  fake_clock *c = ud;
  c->reads++;
  c->now += c->random ? (luna_ns)(rnd() % (uint32_t)c->per_read) : c->per_read;
  return c->now;
}

static int setup(void **state) {
  static fixture f;
  luna_config c;
  counting_init(&f.ca);
  c = counting_config(&f.ca);
  if (luna_loop_new(&c, &f.loop) != 0)
    return -1;
  memset(&g_clock, 0, sizeof g_clock);
  memset(g_cost, 0, sizeof g_cost);
  g_rng = 12345;
  if (luna_loop_set_cost_source(f.loop, fake_read, &g_clock) != 0)
    return -1;
  log_clear();
  *state = &f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  luna_loop_free(f->loop);
  ASSERT_NO_LEAKS(&f->ca);
  return 0;
}

/* Logs its number and spends its cost on the fake clock. */
static bool cost_step(luna_loop *loop, void *arg) {
  long i = (long)(intptr_t)arg;
  (void)loop;
  log_push(i);
  g_clock.now += g_cost[i];
  return true;
}

static int add(luna_loop *loop, long i, int priority, bool essential, luna_item_id *out) {
  luna_item_options o = {0};
  o.priority = priority;
  o.essential = essential;
  return luna_item_add_ex(loop, LUNA_UPDATE, cost_step, I2P(i), &o, out);
}

static void assert_stats(luna_loop *loop, uint64_t deferred, uint64_t exceeded) {
  luna_loop_stats st;
  luna_loop_get_stats(loop, &st);
  assert_int_equal(st.deferred[LUNA_UPDATE], deferred);
  assert_int_equal(st.budget_exceeded[LUNA_UPDATE], exceeded);
}

#define RUN_AND_EXPECT(loop, ...)                                              \
  do {                                                                         \
    log_clear();                                                               \
    assert_int_equal(luna_loop_run((loop), LUNA_UPDATE), 0);                   \
    ASSERT_LOG(__VA_ARGS__);                                                   \
  } while (0)

/* 1 ms per read, 3 ms budget, free items: a run reads the clock at the start
   and before each non-essential item but the first, so it calls three
   non-essential items and defers the others; essential item 3 runs in its
   place every time. Array order (priority, then registration): 6 1 2 3 4 5. */
static void budget_calls_exact_items_and_runs_deferred_ones_first(void **state) {
  fixture *f = *state;
  int i;
  g_clock.per_read = 1 * MS;
  for (i = 1; i <= 5; i++)
    assert_int_equal(add(f->loop, i, 0, i == 3, NULL), 0);
  assert_int_equal(add(f->loop, 6, -1, false, NULL), 0);
  assert_int_equal(luna_loop_set_budget(f->loop, LUNA_UPDATE, 3 * MS), 0);
  assert_int_equal(luna_loop_budget(f->loop, LUNA_UPDATE), 3 * MS);

  RUN_AND_EXPECT(f->loop, 6, 1, 2, 3); /* 4 and 5 deferred */
  assert_int_equal(g_clock.reads, 4);
  assert_stats(f->loop, 2, 1);
  RUN_AND_EXPECT(f->loop, 4, 5, 6, 3); /* deferred first; 1 and 2 deferred */
  assert_int_equal(g_clock.reads, 8);
  assert_stats(f->loop, 4, 2);
  RUN_AND_EXPECT(f->loop, 1, 2, 6, 3);
  assert_stats(f->loop, 6, 3);
  RUN_AND_EXPECT(f->loop, 4, 5, 6, 3);
  assert_int_equal(g_clock.reads, 16);
  assert_stats(f->loop, 8, 4);

  /* No budget: everything in order, no clock read, the deferred list is
     forgotten, the counters stay. */
  assert_int_equal(luna_loop_set_budget(f->loop, LUNA_UPDATE, 0), 0);
  RUN_AND_EXPECT(f->loop, 6, 1, 2, 3, 4, 5);
  assert_int_equal(g_clock.reads, 16);
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].ndeferred, 0);
  assert_stats(f->loop, 8, 4);
  assert_int_equal(luna_loop_set_budget(f->loop, LUNA_UPDATE, 3 * MS), 0);
  RUN_AND_EXPECT(f->loop, 6, 1, 2, 3);

  /* A budget large enough for everyone: no deferral, not counted. */
  assert_int_equal(luna_loop_set_budget(f->loop, LUNA_UPDATE, 100 * MS), 0);
  RUN_AND_EXPECT(f->loop, 4, 5, 6, 1, 2, 3);
  RUN_AND_EXPECT(f->loop, 6, 1, 2, 3, 4, 5);
  assert_stats(f->loop, 10, 5);
}

/* Items that each cost more than the budget: one non-essential item per run
   (plus the essential one), in turn. Each runs exactly once every N = 4
   runs, so the bound "at least once in every N consecutive runs" is tight. */
static void one_item_per_run_when_each_exceeds_the_budget(void **state) {
  fixture *f = *state;
  long last[6] = {0};
  int run, i;
  g_clock.per_read = 0;
  for (i = 1; i <= 4; i++)
    g_cost[i] = 10 * MS;
  add(f->loop, 1, 0, false, NULL);
  add(f->loop, 2, 0, false, NULL);
  add(f->loop, 5, 0, true, NULL); /* essential, between 2 and 3 */
  add(f->loop, 3, 0, false, NULL);
  add(f->loop, 4, 0, false, NULL);
  luna_loop_set_budget(f->loop, LUNA_UPDATE, 1 * MS);
  RUN_AND_EXPECT(f->loop, 1, 5);
  RUN_AND_EXPECT(f->loop, 2, 5);
  RUN_AND_EXPECT(f->loop, 3, 5);
  RUN_AND_EXPECT(f->loop, 4, 5);
  RUN_AND_EXPECT(f->loop, 1, 5);
  for (run = 6; run <= 200; run++) {
    log_clear();
    assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
    assert_int_equal(g_log.n, 2);
    assert_int_equal(g_log.v[1], 5);
    assert_int_equal(g_log.v[0], (run - 1) % 4 + 1);
    if (last[g_log.v[0]] != 0)
      assert_int_equal(run - last[g_log.v[0]], 4);
    last[g_log.v[0]] = run;
  }
  assert_stats(f->loop, 200 * 3, 200);
}

/* The fairness bound under random costs and budgets, checked against a
   model of the rule: a run's order of non-essential items is the previous run's deferred
   list, then the others in array order; some prefix of it (at least one) is
   called, the rest becomes the new list; essential items run in their array
   place. Also: no non-essential item goes N runs without a call. */
#define FN 9  /* non-essential items */
#define FE 3  /* essential items */
#define FT (FN + FE)
static void fairness_bound_holds_with_random_costs(void **state) {
  fixture *f = *state;
  static const int prio[FT] = {2, 0, -1, 2, 0, 5, 0, -1, 2, 0, 5, -1};
  bool essential[FT + 1] = {false};
  long order[FT];  /* array order: item numbers 1..FT */
  long defer[FN], ndefer = 0, last[FT + 1] = {0};
  uint64_t total_deferred = 0, total_exceeded = 0;
  long run, i, j, k, max_defer = 0;
  g_clock.per_read = 1 * MS;
  g_clock.random = true;
  for (i = 1; i <= FT; i++) {
    essential[i] = i % 4 == 0; /* items 4, 8, 12 */
    assert_int_equal(add(f->loop, i, prio[i - 1], essential[i], NULL), 0);
  }
  /* The expected array order: stable by priority. */
  for (i = 0, k = 0; i < FT; i++) {
    long v = i + 1;
    for (j = k; j > 0 && prio[order[j - 1] - 1] > prio[v - 1]; j--)
      order[j] = order[j - 1];
    order[j] = v;
    k++;
  }
  for (run = 1; run <= 5000; run++) {
    long seq[FN], nseq = 0, called = 0, want[FT], nwant = 0;
    bool in_defer[FT + 1] = {false}, in_prefix[FT + 1] = {false};
    for (i = 1; i <= FN + FE; i++)
      g_cost[i] = (luna_ns)(rnd() % 1500) * 1000; /* 0 .. 1.5 ms */
    /* The bound does not depend on the budget: vary it too (1 .. 14 ms). */
    luna_loop_set_budget(f->loop, LUNA_UPDATE, (luna_ns)(1 + rnd() % 14) * MS);
    /* The model's order of non-essential items for this run. */
    for (i = 0; i < ndefer; i++) {
      seq[nseq++] = defer[i];
      in_defer[defer[i]] = true;
    }
    for (i = 0; i < FT; i++)
      if (!essential[order[i]] && !in_defer[order[i]])
        seq[nseq++] = order[i];
    assert_int_equal(nseq, FN);

    log_clear();
    assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
    for (i = 0; i < (long)g_log.n; i++)
      if (!essential[g_log.v[i]])
        called++;
    assert_true(called >= 1);
    /* The log must be: the called part of the deferred list, then the array
       walk with essential items and the called others. */
    for (i = 0; i < called; i++)
      in_prefix[seq[i]] = true;
    for (i = 0; i < ndefer && i < called; i++)
      want[nwant++] = defer[i];
    for (i = 0; i < FT; i++) {
      long v = order[i];
      if (essential[v] || (in_prefix[v] && !in_defer[v]))
        want[nwant++] = v;
    }
    assert_int_equal(g_log.n, nwant);
    for (i = 0; i < nwant; i++)
      assert_int_equal(g_log.v[i], want[i]);

    for (i = 0; i < called; i++)
      last[seq[i]] = run;
    ndefer = 0;
    for (i = called; i < nseq; i++)
      defer[ndefer++] = seq[i];
    total_deferred += (uint64_t)ndefer;
    total_exceeded += ndefer > 0;
    if (ndefer > max_defer)
      max_defer = ndefer;
    for (i = 1; i <= FT; i++)
      if (!essential[i])
        assert_true(run - last[i] < FN); /* skipped at most N - 1 runs */
  }
  assert_true(max_defer >= FN - 1);    /* some runs called a single item */
  assert_true(total_exceeded > 1000);  /* the budget mattered ... */
  assert_true(total_exceeded < 4900);  /* ... but not in every run */
  assert_stats(f->loop, total_deferred, total_exceeded);
}

static long g_rt_reads;
static luna_ns counting_realtime(void *ud) {
  (void)ud;
  return (luna_ns)++g_rt_reads;
}

/* No budget, no clock read: not the cost clock, not the realtime source. */
static void no_clock_is_read_without_a_budget(void **state) {
  fixture *f = *state;
  int i;
  g_clock.per_read = 1;
  g_rt_reads = 0;
  luna_loop_set_realtime_source(f->loop, counting_realtime, NULL);
  g_rt_reads = 0;
  for (i = 1; i <= 3; i++) {
    add(f->loop, i, 0, false, NULL);
    luna_item_add(f->loop, LUNA_FIXED_UPDATE, cost_step, I2P(10 + i), NULL);
    luna_item_add(f->loop, LUNA_LAST_TIME_UPDATE, cost_step, I2P(20 + i), NULL);
  }
  add(f->loop, 4, 0, true, NULL);
  for (i = 0; i < 20; i++)
    assert_int_equal(luna_loop_frame(f->loop, 0.05), 0);
  assert_int_equal(g_clock.reads, 0);
  /* A budget on a timing without items reads nothing either. */
  luna_loop_set_budget(f->loop, LUNA_LAST_UPDATE, 1);
  assert_int_equal(luna_loop_frame(f->loop, 0.05), 0);
  assert_int_equal(g_clock.reads, 0);
  /* With a budget on Update (large): the start, then before items 2 and 3. */
  luna_loop_set_budget(f->loop, LUNA_UPDATE, 1000 * MS);
  for (i = 0; i < 5; i++)
    assert_int_equal(luna_loop_frame(f->loop, 0.05), 0);
  assert_int_equal(g_clock.reads, 15);
  assert_int_equal(g_rt_reads, 0);
  assert_stats(f->loop, 0, 0);
}

static void set_budget_rejects_bad_arguments(void **state) {
  fixture *f = *state;
  luna_item_id id;
  assert_int_equal(luna_loop_set_budget(f->loop, LUNA_UPDATE, -1), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_budget(f->loop, (luna_timing)16, 5), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_budget(f->loop, (luna_timing)-1, 5), LUNA_EINVAL);
  assert_int_equal(luna_loop_set_budget(NULL, LUNA_UPDATE, 5), LUNA_EINVAL);
  assert_int_equal(luna_loop_budget(f->loop, LUNA_UPDATE), 0);
  assert_int_equal(luna_loop_budget(f->loop, (luna_timing)16), 0);
  assert_int_equal(luna_loop_budget(NULL, LUNA_UPDATE), 0);
  assert_int_equal(luna_loop_set_budget(f->loop, LUNA_LAST_TIME_UPDATE, LUNA_NS_MAX), 0);
  assert_int_equal(luna_loop_budget(f->loop, LUNA_LAST_TIME_UPDATE), LUNA_NS_MAX);
  assert_int_equal(luna_loop_set_cost_source(NULL, fake_read, &g_clock), LUNA_EINVAL);
  assert_int_equal(luna_item_add_ex(f->loop, LUNA_UPDATE, NULL, NULL, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_item_add_ex(NULL, LUNA_UPDATE, cost_step, NULL, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_item_add_ex(f->loop, (luna_timing)16, cost_step, NULL, NULL, &id),
                   LUNA_EINVAL);
  /* NULL restores CLOCK_MONOTONIC: the fake is no longer read. */
  g_clock.per_read = 1 * MS;
  assert_int_equal(luna_loop_set_cost_source(f->loop, NULL, NULL), 0);
  add(f->loop, 1, 0, false, NULL);
  add(f->loop, 2, 0, false, NULL);
  luna_loop_set_budget(f->loop, LUNA_UPDATE, 60 * 1000 * MS);
  RUN_AND_EXPECT(f->loop, 1, 2);
  assert_int_equal(g_clock.reads, 0);
}

/* Item 3 stops the loop the first time it runs, from the deferred list: the
   rest of the list stays first, and item 3 is not skipped by the next walk
   (its "called from the list" mark was cleared). Budget 2 ms, 1 ms a read. */
static bool stopped_once;
static bool stop_once_step(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  if (!stopped_once) {
    stopped_once = true;
    luna_loop_stop(loop);
  }
  return true;
}

static void stop_during_a_budgeted_run_keeps_the_deferred_order(void **state) {
  fixture *f = *state;
  luna_item_options o = {0};
  stopped_once = false;
  g_clock.per_read = 1 * MS;
  add(f->loop, 1, 0, false, NULL);
  add(f->loop, 2, 0, false, NULL);
  luna_item_add_ex(f->loop, LUNA_UPDATE, stop_once_step, I2P(3), &o, NULL);
  add(f->loop, 4, 0, false, NULL);
  luna_loop_set_budget(f->loop, LUNA_UPDATE, 2 * MS);
  RUN_AND_EXPECT(f->loop, 1, 2); /* 3, 4 deferred */
  log_clear();
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), LUNA_ESTOPPED);
  ASSERT_LOG(3);
  RUN_AND_EXPECT(f->loop, 4, 1); /* 2, 3 deferred */
  RUN_AND_EXPECT(f->loop, 2, 3); /* 1, 4 deferred */
  RUN_AND_EXPECT(f->loop, 1, 4);
}

/* Removing deferred items takes them off the list (also from inside the
   run); items added meanwhile join the others in array order. */
static luna_item_id g_ids[16];
static bool remover_once;
static bool remover_step(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  if (!remover_once) {
    remover_once = true;
    assert_int_equal(luna_item_remove(loop, g_ids[2]), 0); /* deferred, later */
    assert_int_equal(add(loop, 7, -100, false, &g_ids[7]), 0);
  }
  return true;
}

static void removal_and_addition_with_a_deferred_list(void **state) {
  fixture *f = *state;
  luna_item_options o = {0};
  luna_loop_stats st;
  int i;
  remover_once = false;
  g_clock.per_read = 1 * MS;
  for (i = 1; i <= 5; i++)
    add(f->loop, i, 0, false, &g_ids[i]);
  luna_loop_set_budget(f->loop, LUNA_UPDATE, 2 * MS);
  RUN_AND_EXPECT(f->loop, 1, 2); /* 3, 4, 5 deferred */
  assert_int_equal(luna_item_remove(f->loop, g_ids[4]), 0);
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].ndeferred, 2);
  o.priority = -1;
  luna_item_add_ex(f->loop, LUNA_UPDATE, remover_step, I2P(6), &o, &g_ids[6]);
  RUN_AND_EXPECT(f->loop, 3, 5); /* array 6 1 2 3 5: 6, 1, 2 deferred */
  RUN_AND_EXPECT(f->loop, 6, 1); /* 6 removed 2, added 7; 3, 5 deferred */
  RUN_AND_EXPECT(f->loop, 3, 5); /* array 7 6 1 3 5: 7, 6, 1 deferred */
  RUN_AND_EXPECT(f->loop, 7, 6);
  assert_stats(f->loop, 3 + 3 + 2 + 3 + 3, 5);
  assert_int_equal(luna_item_remove(f->loop, g_ids[2]), LUNA_ENOENT);
  /* An item removing itself from the list position, by returning false, is
     covered by the runner tests; reset clears the list with the items. */
  assert_int_equal(luna_loop_reset(f->loop), 0);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.items[LUNA_UPDATE], 0);
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].ndeferred, 0);
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].defer_head, 0);
  add(f->loop, 8, 0, false, NULL);
  add(f->loop, 9, 0, false, NULL);
  RUN_AND_EXPECT(f->loop, 8, 9);
}

/* A deferred item whose step returns false when finally called is removed
   like any other, and the list goes on. */
static bool once_step(luna_loop *loop, void *arg) {
  (void)loop;
  log_push((long)(intptr_t)arg);
  return false;
}

static void a_deferred_item_that_ends_is_removed(void **state) {
  fixture *f = *state;
  luna_item_options o = {0};
  luna_loop_stats st;
  g_clock.per_read = 1 * MS;
  add(f->loop, 1, 0, false, NULL);
  luna_item_add_ex(f->loop, LUNA_UPDATE, once_step, I2P(2), &o, NULL);
  luna_item_add_ex(f->loop, LUNA_UPDATE, once_step, I2P(3), &o, NULL);
  add(f->loop, 4, 0, false, NULL);
  luna_loop_set_budget(f->loop, LUNA_UPDATE, 1 * MS); /* one a run */
  RUN_AND_EXPECT(f->loop, 1);
  RUN_AND_EXPECT(f->loop, 2);
  RUN_AND_EXPECT(f->loop, 3);
  RUN_AND_EXPECT(f->loop, 4);
  RUN_AND_EXPECT(f->loop, 1);
  RUN_AND_EXPECT(f->loop, 4);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.items[LUNA_UPDATE], 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
      T(budget_calls_exact_items_and_runs_deferred_ones_first),
      T(one_item_per_run_when_each_exceeds_the_budget),
      T(fairness_bound_holds_with_random_costs),
      T(no_clock_is_read_without_a_budget),
      T(set_budget_rejects_bad_arguments),
      T(stop_during_a_budgeted_run_keeps_the_deferred_order),
      T(removal_and_addition_with_a_deferred_list),
      T(a_deferred_item_that_ends_is_removed),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
