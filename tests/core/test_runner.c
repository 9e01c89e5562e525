/*
** test_runner.c: repeating items (luna_item_add / luna_item_remove):
** registration order, the added-during-a-run rule, removal by return value
** and by handle (marked during a run, compacted after, order kept), stale
** handles, and stop. Unit-level checks look at the runner's arrays.
*/
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "counting_alloc.h"
#include "loop_internal.h"
#include "lunaloop.h"
#include "test_log.h"
#include "loop_fixture.h"


static bool log_step(luna_loop *loop, void *arg) {
  (void)loop;
  log_push((long)(intptr_t)arg);
  return true;
}

/* Logs, and keeps running while its count (arg) is positive. */
static long countdown[8];
static bool countdown_step(luna_loop *loop, void *arg) {
  long i = (long)(intptr_t)arg;
  (void)loop;
  log_push(i);
  return --countdown[i] > 0;
}

static void items_run_every_run_in_registration_order(void **state) {
  fixture *f = *state;
  luna_item_id id;
  luna_loop_stats st;
  int i;
  for (i = 1; i <= 3; i++)
    assert_int_equal(luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(i), &id), 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_LAST_UPDATE), 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2, 3, 1, 2, 3);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.items[LUNA_UPDATE], 3);
  assert_int_equal(st.items[LUNA_LAST_UPDATE], 0);
}

static void step_returning_false_removes_the_item_and_keeps_the_order(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  countdown[1] = 3;
  countdown[2] = 1;
  countdown[3] = 2;
  luna_item_add(f->loop, LUNA_UPDATE, countdown_step, I2P(1), NULL);
  luna_item_add(f->loop, LUNA_UPDATE, countdown_step, I2P(2), NULL);
  luna_item_add(f->loop, LUNA_UPDATE, countdown_step, I2P(3), NULL);
  luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(4), NULL);
  luna_loop_run(f->loop, LUNA_UPDATE);
  luna_loop_run(f->loop, LUNA_UPDATE);
  luna_loop_run(f->loop, LUNA_UPDATE);
  luna_loop_run(f->loop, LUNA_UPDATE);
  ASSERT_LOG(1, 2, 3, 4, 1, 3, 4, 1, 4, 4);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.items[LUNA_UPDATE], 1);
  /* compacted in place: one element left, its slot points at index 0 */
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].n, 1);
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].dead, 0);
}

/* Adds item 9 to its own timing and item 8 to LastUpdate, on first call. */
static bool adder_step(luna_loop *loop, void *arg) {
  (void)arg;
  log_push(1);
  luna_item_add(loop, LUNA_UPDATE, log_step, I2P(9), NULL);
  luna_item_add(loop, LUNA_LAST_UPDATE, log_step, I2P(8), NULL);
  return false;
}

static void items_added_during_a_run_start_at_the_next_run(void **state) {
  fixture *f = *state;
  luna_item_add(f->loop, LUNA_UPDATE, adder_step, NULL, NULL);
  luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(2), NULL);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1, 2, 8); /* 9 waits; 8 is in a later timing of this frame */
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1, 2, 8, 2, 9, 8);
}

/* A continuation of Update adds an Update item: it waits too (anything
   registered while a timing runs is first considered at its next run). */
static void add_item_from_continuation(luna_loop *loop, void *arg) {
  (void)arg;
  luna_item_add(loop, LUNA_UPDATE, log_step, I2P(5), NULL);
}

static void items_added_by_a_continuation_of_the_same_run_wait(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_UPDATE, add_item_from_continuation, NULL);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG_EMPTY();
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(5);
}

static luna_item_id ids[8];
static bool removals_done;

/* Item 1 removes item 3 (not yet run) and item 2 removes item 1 (already
   run); both are only marked while the run walks the array. */
static bool remover_step(luna_loop *loop, void *arg) {
  long i = (long)(intptr_t)arg;
  log_push(i);
  if (i == 1 && !removals_done)
    assert_int_equal(luna_item_remove(loop, ids[3]), 0);
  if (i == 2 && !removals_done) {
    assert_int_equal(luna_item_remove(loop, ids[1]), 0);
    removals_done = true;
  }
  return true;
}

static void remove_during_a_run_only_marks_and_compaction_keeps_order(void **state) {
  fixture *f = *state;
  int i;
  removals_done = false;
  for (i = 1; i <= 5; i++)
    luna_item_add(f->loop, LUNA_UPDATE, remover_step, I2P(i), &ids[i]);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2, 4, 5);
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].n, 3);
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].a[0].arg, I2P(2));
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].a[1].arg, I2P(4));
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].a[2].arg, I2P(5));
  /* Handles still find the moved items. */
  assert_int_equal(luna_item_remove(f->loop, ids[4]), 0);
  log_clear();
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(2, 5);
}

static bool remove_self_and_keep(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  assert_int_equal(luna_item_remove(loop, ids[0]), 0);
  return true; /* ignored: it was removed */
}

static void an_item_that_removes_itself_is_never_called_again(void **state) {
  fixture *f = *state;
  luna_item_add(f->loop, LUNA_UPDATE, remove_self_and_keep, I2P(1), &ids[0]);
  luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(2), NULL);
  luna_loop_run(f->loop, LUNA_UPDATE);
  luna_loop_run(f->loop, LUNA_UPDATE);
  ASSERT_LOG(1, 2, 2);
  assert_int_equal(luna_item_remove(f->loop, ids[0]), LUNA_ENOENT);
}

static void stale_and_bogus_handles_are_enoent(void **state) {
  fixture *f = *state;
  luna_item_id a, b, zero = {0}, bogus = {UINT64_C(0xffffffff00000fff)};
  countdown[1] = 1;
  luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(1), &a);
  assert_int_equal(luna_item_remove(f->loop, zero), LUNA_ENOENT);
  assert_int_equal(luna_item_remove(f->loop, bogus), LUNA_ENOENT);
  assert_int_equal(luna_item_remove(f->loop, a), 0);
  assert_int_equal(luna_item_remove(f->loop, a), LUNA_ENOENT);
  /* The slot is reused with a new generation: the old handle stays stale. */
  luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(2), &b);
  assert_true((uint32_t)a.id == (uint32_t)b.id);
  assert_true(a.id != b.id);
  assert_int_equal(luna_item_remove(f->loop, a), LUNA_ENOENT);
  luna_loop_run(f->loop, LUNA_UPDATE);
  ASSERT_LOG(2);
  assert_int_equal(luna_item_remove(f->loop, b), 0);
  /* An item that ended by returning false has a stale handle too. */
  luna_item_add(f->loop, LUNA_UPDATE, countdown_step, I2P(1), &a);
  luna_loop_run(f->loop, LUNA_UPDATE);
  assert_int_equal(luna_item_remove(f->loop, a), LUNA_ENOENT);
}

static void removal_outside_runs_compacts_without_the_timing_running(void **state) {
  fixture *f = *state;
  luna_item_id many[100];
  luna_loop_stats st;
  int i;
  for (i = 0; i < 100; i++)
    luna_item_add(f->loop, LUNA_TIME_UPDATE, log_step, I2P(i), &many[i]);
  for (i = 0; i < 100; i++)
    if (i % 10 != 0)
      assert_int_equal(luna_item_remove(f->loop, many[i]), 0);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.items[LUNA_TIME_UPDATE], 10);
  /* never more than half dead, even though TimeUpdate never ran */
  assert_true(f->loop->runner.items[LUNA_TIME_UPDATE].n <= 20);
  luna_loop_run(f->loop, LUNA_TIME_UPDATE);
  ASSERT_LOG(0, 10, 20, 30, 40, 50, 60, 70, 80, 90);
  for (i = 0; i < 100; i += 10)
    assert_int_equal(luna_item_remove(f->loop, many[i]), 0);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.items[LUNA_TIME_UPDATE], 0);
}

static bool stop_step(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  luna_loop_stop(loop);
  return true;
}

static void stop_during_items_skips_the_rest_of_this_run_only(void **state) {
  fixture *f = *state;
  luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(1), NULL);
  luna_item_add(f->loop, LUNA_UPDATE, stop_step, I2P(2), &ids[2]);
  luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(3), NULL);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), LUNA_ESTOPPED);
  ASSERT_LOG(1, 2);
  luna_item_remove(f->loop, ids[2]);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2, 1, 3);
}

static void item_add_rejects_bad_arguments_and_reports_enomem(void **state) {
  fixture *f = *state;
  luna_item_id id = {42};
  luna_loop_stats st;
  assert_int_equal(luna_item_add(NULL, LUNA_UPDATE, log_step, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_item_add(f->loop, LUNA_UPDATE, NULL, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_item_add(f->loop, (luna_timing)16, log_step, NULL, &id), LUNA_EINVAL);
  assert_int_equal(id.id, 42);
  counting_fail_after(&f->ca, 0);
  assert_int_equal(luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(1), &id), LUNA_ENOMEM);
  counting_fail_after(&f->ca, 1); /* the item array grows, the slab fails */
  assert_int_equal(luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(1), &id), LUNA_ENOMEM);
  counting_fail_after(&f->ca, -1);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.items[LUNA_UPDATE], 0);
  luna_loop_run(f->loop, LUNA_UPDATE);
  ASSERT_LOG_EMPTY();
  assert_int_equal(luna_item_remove(f->loop, id), LUNA_ENOENT);
}

/* ---- priorities ------------------------------------------------------------ */

static int add_prio(luna_loop *loop, luna_timing timing, luna_step_fn step,
                    long v, int priority, luna_item_id *out) {
  luna_item_options o = {0};
  o.priority = priority;
  return luna_item_add_ex(loop, timing, step, I2P(v), &o, out);
}

/* Asserts the runner's main array of `timing` is sorted and every live
   item's slot points back at it. */
static void assert_runner_consistent(luna_loop *loop, int timing) {
  const luna__items *it = &loop->runner.items[timing];
  size_t i;
  for (i = 0; i < it->n; i++) {
    if (i > 0)
      assert_true(it->a[i - 1].priority <= it->a[i].priority);
    if (it->a[i].step != NULL)
      assert_int_equal(loop->runner.slots[it->a[i].slot].pos, i);
  }
}

static void priorities_order_items_and_ties_keep_registration_order(void **state) {
  fixture *f = *state;
  luna_item_options defaults = {0};
  assert_int_equal(add_prio(f->loop, LUNA_UPDATE, log_step, 1, 5, NULL), 0);
  assert_int_equal(luna_item_add(f->loop, LUNA_UPDATE, log_step, I2P(2), NULL), 0);
  assert_int_equal(add_prio(f->loop, LUNA_UPDATE, log_step, 3, 5, NULL), 0);
  assert_int_equal(add_prio(f->loop, LUNA_UPDATE, log_step, 4, -3, NULL), 0);
  assert_int_equal(luna_item_add_ex(f->loop, LUNA_UPDATE, log_step, I2P(5), &defaults, NULL), 0);
  assert_int_equal(luna_item_add_ex(f->loop, LUNA_UPDATE, log_step, I2P(6), NULL, NULL), 0);
  assert_int_equal(add_prio(f->loop, LUNA_UPDATE, log_step, 7, INT_MAX, NULL), 0);
  assert_int_equal(add_prio(f->loop, LUNA_UPDATE, log_step, 8, INT_MIN, NULL), 0);
  assert_int_equal(add_prio(f->loop, LUNA_UPDATE, log_step, 9, -3, NULL), 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(8, 4, 9, 2, 5, 6, 1, 3, 7);
  log_clear();
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(8, 4, 9, 2, 5, 6, 1, 3, 7);
  assert_runner_consistent(f->loop, LUNA_UPDATE);
}

/* Inserting in the middle moves items: their handles must follow. */
static void insertion_in_the_middle_keeps_handles_valid(void **state) {
  fixture *f = *state;
  luna_item_id h[6];
  int i;
  for (i = 1; i <= 4; i++)
    add_prio(f->loop, LUNA_UPDATE, log_step, i, 10, &h[i]);
  /* Removed outside a run, item 2 stays in the array as a dead entry (not
     over half dead): insertions still find their place around it. */
  assert_int_equal(luna_item_remove(f->loop, h[2]), 0);
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].dead, 1);
  add_prio(f->loop, LUNA_UPDATE, log_step, 5, 0, &h[5]);
  add_prio(f->loop, LUNA_UPDATE, log_step, 0, 10, &h[0]);
  assert_runner_consistent(f->loop, LUNA_UPDATE);
  assert_int_equal(luna_item_remove(f->loop, h[3]), 0);
  luna_loop_run(f->loop, LUNA_UPDATE);
  ASSERT_LOG(5, 1, 4, 0);
  assert_int_equal(luna_item_remove(f->loop, h[2]), LUNA_ENOENT);
  assert_int_equal(luna_item_remove(f->loop, h[5]), 0);
  assert_int_equal(luna_item_remove(f->loop, h[4]), 0);
  log_clear();
  luna_loop_run(f->loop, LUNA_UPDATE);
  ASSERT_LOG(1, 0);
  assert_runner_consistent(f->loop, LUNA_UPDATE);
}

/* Adds, during its run, Update items of priorities lower and higher than
   its own and equal to it, and one more from a continuation. */
static luna_item_id added[4];
static void add_low_item(luna_loop *loop, void *arg) {
  (void)arg;
  add_prio(loop, LUNA_UPDATE, log_step, 30, -5, &added[3]);
}
static bool add_prio_step(luna_loop *loop, void *arg) {
  (void)arg;
  log_push(1);
  assert_int_equal(add_prio(loop, LUNA_UPDATE, log_step, 10, -10, &added[0]), 0);
  assert_int_equal(add_prio(loop, LUNA_UPDATE, log_step, 20, 10, &added[1]), 0);
  assert_int_equal(add_prio(loop, LUNA_UPDATE, log_step, 40, 0, &added[2]), 0);
  return false;
}

static void items_added_during_a_run_wait_whatever_their_priority(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  add_prio(f->loop, LUNA_UPDATE, log_step, 2, -1, NULL);
  add_prio(f->loop, LUNA_UPDATE, add_prio_step, 0, 0, NULL);
  add_prio(f->loop, LUNA_UPDATE, log_step, 3, 0, NULL);
  luna_enqueue(f->loop, LUNA_UPDATE, add_low_item, NULL);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(2, 1, 3); /* -10, -5, 10 and 0 all wait */
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.items[LUNA_UPDATE], 6);
  log_clear();
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  /* Merged in priority order; 40 (priority 0) after 3, registered earlier. */
  ASSERT_LOG(10, 30, 2, 3, 40, 20);
  assert_runner_consistent(f->loop, LUNA_UPDATE);
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].npending, 0);
  /* Their handles followed the merge. */
  assert_int_equal(luna_item_remove(f->loop, added[0]), 0);
  assert_int_equal(luna_item_remove(f->loop, added[2]), 0);
  log_clear();
  luna_loop_run(f->loop, LUNA_UPDATE);
  ASSERT_LOG(30, 2, 3, 20);
}

/* Item 1 (priority 0) removes item 3 (priority 5, not yet run), item 4
   (priority -5, already run) and an item it added itself in this run. */
static luna_item_id pr_ids[8];
static bool pr_remover(luna_loop *loop, void *arg) {
  luna_item_id fresh;
  (void)arg;
  log_push(1);
  assert_int_equal(luna_item_remove(loop, pr_ids[3]), 0);
  assert_int_equal(luna_item_remove(loop, pr_ids[4]), 0);
  assert_int_equal(add_prio(loop, LUNA_UPDATE, log_step, 9, -20, &fresh), 0);
  assert_int_equal(add_prio(loop, LUNA_UPDATE, log_step, 8, -30, NULL), 0);
  assert_int_equal(luna_item_remove(loop, fresh), 0);
  assert_int_equal(luna_item_remove(loop, fresh), LUNA_ENOENT);
  return false;
}

static void removal_during_a_run_with_priorities(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  add_prio(f->loop, LUNA_UPDATE, log_step, 3, 5, &pr_ids[3]);
  add_prio(f->loop, LUNA_UPDATE, pr_remover, 1, 0, &pr_ids[1]);
  add_prio(f->loop, LUNA_UPDATE, log_step, 2, 0, &pr_ids[2]);
  add_prio(f->loop, LUNA_UPDATE, log_step, 4, -5, &pr_ids[4]);
  add_prio(f->loop, LUNA_UPDATE, log_step, 5, 7, &pr_ids[5]);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(4, 1, 2, 5);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.items[LUNA_UPDATE], 3); /* 2, 5 and 8 */
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].n, 3);
  assert_int_equal(f->loop->runner.items[LUNA_UPDATE].dead, 0);
  assert_runner_consistent(f->loop, LUNA_UPDATE);
  log_clear();
  luna_loop_run(f->loop, LUNA_UPDATE);
  ASSERT_LOG(8, 2, 5);
  assert_int_equal(luna_item_remove(f->loop, pr_ids[1]), LUNA_ENOENT);
  assert_int_equal(luna_item_remove(f->loop, pr_ids[3]), LUNA_ENOENT);
  assert_int_equal(luna_item_remove(f->loop, pr_ids[5]), 0);
  assert_int_equal(luna_item_remove(f->loop, pr_ids[2]), 0);
}

/* Adding during a run can fail like any add: nothing is half done. */
static counting_alloc *failing_ca;
static bool add_while_failing(luna_loop *loop, void *arg) {
  luna_item_id id = {7};
  (void)arg;
  log_push(1);
  counting_fail_after(failing_ca, 0);
  assert_int_equal(add_prio(loop, LUNA_UPDATE, log_step, 99, -1, &id), LUNA_ENOMEM);
  assert_int_equal(id.id, 7);
  counting_fail_after(failing_ca, -1);
  return false;
}

static void enomem_while_adding_during_a_run_changes_nothing(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  failing_ca = &f->ca;
  add_prio(f->loop, LUNA_UPDATE, add_while_failing, 0, 0, NULL);
  add_prio(f->loop, LUNA_UPDATE, log_step, 2, 0, NULL);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2, 2);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.items[LUNA_UPDATE], 1);
}

/* Reset drops items of every priority; their handles go stale. */
static void reset_drops_items_of_every_priority(void **state) {
  fixture *f = *state;
  luna_item_id a, b;
  luna_loop_stats st;
  add_prio(f->loop, LUNA_UPDATE, log_step, 1, 3, &a);
  add_prio(f->loop, LUNA_UPDATE, log_step, 2, -3, &b);
  assert_int_equal(luna_loop_reset(f->loop), 0);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.items[LUNA_UPDATE], 0);
  assert_int_equal(luna_item_remove(f->loop, a), LUNA_ENOENT);
  assert_int_equal(luna_item_remove(f->loop, b), LUNA_ENOENT);
  luna_loop_run(f->loop, LUNA_UPDATE);
  ASSERT_LOG_EMPTY();
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
      T(items_run_every_run_in_registration_order),
      T(step_returning_false_removes_the_item_and_keeps_the_order),
      T(items_added_during_a_run_start_at_the_next_run),
      T(items_added_by_a_continuation_of_the_same_run_wait),
      T(remove_during_a_run_only_marks_and_compaction_keeps_order),
      T(an_item_that_removes_itself_is_never_called_again),
      T(stale_and_bogus_handles_are_enoent),
      T(removal_outside_runs_compacts_without_the_timing_running),
      T(stop_during_items_skips_the_rest_of_this_run_only),
      T(item_add_rejects_bad_arguments_and_reports_enomem),
      T(priorities_order_items_and_ties_keep_registration_order),
      T(insertion_in_the_middle_keeps_handles_valid),
      T(items_added_during_a_run_wait_whatever_their_priority),
      T(removal_during_a_run_with_priorities),
      T(enomem_while_adding_during_a_run_changes_nothing),
      T(reset_drops_items_of_every_priority),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
