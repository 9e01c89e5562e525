/*
** test_batch.c: the runner's batches (luna__runner_set_batch, runner.h):
** a stretch of consecutive items of the batched step goes to the batch
** function in one call, in array order; items of other steps end a
** stretch; removed items are never handed out; a stop ends the stretch and
** the run; a batch that takes nothing leaves the item to its own step; a
** budgeted run calls each item; an item added during the stretch may move
** the array, and the stretch follows it.
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
#include "loop_fixture.h"

#define BATCH_MARK (-1) /* logged when a batch function begins */

static luna_item_id ids[16];

static bool other_step(luna_loop *loop, void *arg) {
  (void)loop;
  log_push((long)(intptr_t)arg);
  return true;
}

/* The batched step. arg 1..99: logs it; 100 + k: logs it and removes item
   k; 200 + k: logs it and stops the loop; 300 + k: logs it and adds a
   batched item 9; 400 + k: logs it and adds 100 items of other_step (8). */
static bool action_step(luna_loop *loop, void *arg) {
  long a = (long)(intptr_t)arg;
  log_push(a);
  if (a >= 100 && a < 200)
    luna_item_remove(loop, ids[a - 100]);
  else if (a >= 200 && a < 300)
    luna_loop_stop(loop);
  else if (a >= 300 && a < 400)
    luna_item_add(loop, LUNA_UPDATE, action_step, I2P(9), &ids[9]);
  else if (a >= 400) /* past the array's room: the runner moves it */
    for (int k = 0; k < 100; k++)
      luna_item_add(loop, LUNA_UPDATE, other_step, I2P(8), NULL);
  return true;
}

static int take_limit; /* items a batch takes at most; < 0: all */

static void batch(luna_loop *loop, luna__batch *bt) {
  void *arg;
  int taken = 0;
  log_push(BATCH_MARK);
  while ((take_limit < 0 || taken < take_limit) && (arg = luna__batch_peek(bt)) != NULL) {
    luna__batch_take(bt);
    taken++;
    action_step(loop, arg);
  }
}

static int setup_batch(void **state) {
  fixture *f;
  if (setup(state) != 0)
    return -1;
  f = *state;
  take_limit = -1;
  luna__runner_set_batch(&f->loop->runner, action_step, batch);
  return 0;
}

static void add(fixture *f, luna_step_fn step, long arg, int k) {
  assert_int_equal(luna_item_add(f->loop, LUNA_UPDATE, step, I2P(arg), &ids[k]), 0);
}

static void stretches_of_the_batched_step_go_in_one_call_in_order(void **state) {
  fixture *f = *state;
  add(f, action_step, 1, 1);
  add(f, action_step, 2, 2);
  add(f, other_step, 3, 3);
  add(f, action_step, 4, 4);
  add(f, action_step, 5, 5);
  add(f, other_step, 6, 6);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(BATCH_MARK, 1, 2, 3, BATCH_MARK, 4, 5, 6);
}

static void removed_items_are_skipped_and_do_not_end_a_stretch(void **state) {
  fixture *f = *state;
  add(f, action_step, 1, 1);
  add(f, action_step, 2, 2);
  add(f, other_step, 3, 3);
  add(f, action_step, 4, 4);
  luna_item_remove(f->loop, ids[3]); /* removed before the run */
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(BATCH_MARK, 1, 2, 4);
}

static void an_item_removed_by_an_earlier_call_is_not_handed_out(void **state) {
  fixture *f = *state;
  add(f, action_step, 1, 1);
  add(f, action_step, 103, 2); /* removes item 3 */
  add(f, action_step, 3, 3);
  add(f, action_step, 4, 4);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(BATCH_MARK, 1, 103, 4, BATCH_MARK, 1, 103, 4);
  assert_int_equal(luna__runner_count(&f->loop->runner, LUNA_UPDATE), 3);
}

static void a_stop_ends_the_stretch_and_the_run(void **state) {
  fixture *f = *state;
  add(f, action_step, 1, 1);
  add(f, action_step, 202, 2);
  add(f, action_step, 3, 3);
  add(f, other_step, 4, 4);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), LUNA_ESTOPPED);
  ASSERT_LOG(BATCH_MARK, 1, 202);
  luna_item_remove(f->loop, ids[2]);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(BATCH_MARK, 1, 202, BATCH_MARK, 1, 3, 4);
}

static void items_added_during_a_stretch_wait_for_the_next_run(void **state) {
  fixture *f = *state;
  add(f, action_step, 301, 1);
  add(f, action_step, 2, 2);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(BATCH_MARK, 301, 2);
  luna_item_remove(f->loop, ids[1]);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(BATCH_MARK, 301, 2, BATCH_MARK, 2, 9);
}

static void a_stretch_follows_the_array_when_an_addition_moves_it(void **state) {
  fixture *f = *state;
  add(f, action_step, 401, 1);
  add(f, action_step, 103, 2); /* removes item 3, read from the moved array */
  add(f, action_step, 3, 3);
  add(f, action_step, 4, 4);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(BATCH_MARK, 401, 103, 4);
  assert_int_equal(luna__runner_count(&f->loop->runner, LUNA_UPDATE), 103);
}

static void a_batch_that_stops_early_gets_the_rest_again(void **state) {
  fixture *f = *state;
  take_limit = 2;
  add(f, action_step, 1, 1);
  add(f, action_step, 2, 2);
  add(f, action_step, 3, 3);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(BATCH_MARK, 1, 2, BATCH_MARK, 3);
}

static void an_item_the_batch_does_not_take_is_called_by_its_step(void **state) {
  fixture *f = *state;
  take_limit = 0;
  add(f, action_step, 1, 1);
  add(f, action_step, 2, 2);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(BATCH_MARK, 1, BATCH_MARK, 2);
}

static luna_ns fake_cost;
static luna_ns cost_clock(void *ud) {
  (void)ud;
  return fake_cost;
}

static void budgeted_runs_call_each_item_by_its_step(void **state) {
  fixture *f = *state;
  luna__runner_set_cost_source(&f->loop->runner, cost_clock, NULL);
  assert_int_equal(luna_loop_set_budget(f->loop, LUNA_UPDATE, 1000000), 0);
  add(f, action_step, 1, 1);
  add(f, action_step, 2, 2);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2);
}

static void without_a_batch_function_every_step_is_called_alone(void **state) {
  fixture *f = *state;
  luna__runner_set_batch(&f->loop->runner, NULL, NULL);
  add(f, action_step, 1, 1);
  add(f, action_step, 2, 2);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup_batch, teardown)
      T(stretches_of_the_batched_step_go_in_one_call_in_order),
      T(removed_items_are_skipped_and_do_not_end_a_stretch),
      T(an_item_removed_by_an_earlier_call_is_not_handed_out),
      T(a_stop_ends_the_stretch_and_the_run),
      T(items_added_during_a_stretch_wait_for_the_next_run),
      T(a_stretch_follows_the_array_when_an_addition_moves_it),
      T(a_batch_that_stops_early_gets_the_rest_again),
      T(an_item_the_batch_does_not_take_is_called_by_its_step),
      T(budgeted_runs_call_each_item_by_its_step),
      T(without_a_batch_function_every_step_is_called_alone),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
