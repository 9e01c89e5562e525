/*
** test_gclock.c: group clocks (gclock.c). Exact frames at dt 0.1 s: the
** clock's time under scale and pause, nested effective scales, timers in
** (deadline, creation) order, frame timers counting only running frames,
** a timer created during its timing's run waiting for the next run,
** cancel (pending, collected), a stopped clock (scale 0), clear in
** creation order, free from inside one of its own callbacks, children
** outliving their parent, luna_loop_stop while firing, and a randomized
** check of firing frames against a model that advances per frame.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "counting_alloc.h"
#include "loop_internal.h"
#include "lunaloop.h"
#include "test_log.h"
#include "loop_fixture.h"

#define MS(x) ((luna_ns)(x) * 1000000)

static void frames(luna_loop *loop, int n) {
  int i;
  for (i = 0; i < n; i++)
    assert_int_equal(luna_loop_frame_ns(loop, MS(100)), 0);
}

/* Logs frame * 100 + arg. */
static void log_fire(luna_loop *loop, void *arg) {
  log_push((long)luna_loop_frame_count(loop) * 100 + (long)(intptr_t)arg);
}

static void time_follows_scale_and_pause(void **state) {
  fixture *f = *state;
  luna__gclock *c;
  assert_int_equal(luna__gclock_new(f->loop, NULL, &c), 0);
  frames(f->loop, 2);
  assert_int_equal(luna__gclock_time(c), MS(200));
  assert_int_equal(luna__gclock_set_scale(c, 0.5), 0);
  frames(f->loop, 2);
  assert_int_equal(luna__gclock_time(c), MS(300));
  assert_int_equal(luna__gclock_set_paused(c, true), 0);
  frames(f->loop, 5);
  assert_int_equal(luna__gclock_time(c), MS(300));
  assert_int_equal(luna__gclock_frames(c), 4);
  assert_int_equal(luna__gclock_set_paused(c, false), 0);
  frames(f->loop, 1);
  assert_int_equal(luna__gclock_time(c), MS(350));
  assert_int_equal(luna__gclock_frames(c), 5);
  assert_int_equal(luna__gclock_set_scale(c, -1), LUNA_EINVAL);
  assert_int_equal(luna__gclock_set_scale(c, 0.0 / 0.0), LUNA_EINVAL);
  assert_int_equal(luna__gclock_set_scale(c, 2e6), LUNA_EINVAL);
  luna__gclock_free(c, true);
}

static void nested_scales_multiply_and_pauses_inherit(void **state) {
  fixture *f = *state;
  luna__gclock *p, *k;
  assert_int_equal(luna__gclock_new(f->loop, NULL, &p), 0);
  assert_int_equal(luna__gclock_new(f->loop, p, &k), 0);
  assert_int_equal(luna__gclock_set_scale(p, 2), 0);
  assert_int_equal(luna__gclock_set_scale(k, 0.25), 0);
  assert_true(luna__gclock_effective_scale(k) == 0.5);
  /* k: 1 s on its clock takes 20 frames */
  assert_int_equal(luna__gclock_add_timer(k, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(1000), log_fire,
                                          (void *)1, NULL),
                   0);
  frames(f->loop, 4);
  assert_int_equal(luna__gclock_set_paused(p, true), 0);
  assert_true(luna__gclock_paused(k));
  assert_false(luna__gclock_own_paused(k));
  frames(f->loop, 10);
  assert_int_equal(luna__gclock_time(k), MS(200));
  assert_int_equal(luna__gclock_set_paused(p, false), 0);
  frames(f->loop, 16);
  ASSERT_LOG(3001);
  luna__gclock_free(k, true);
  luna__gclock_free(p, true);
}

static void timers_fire_in_deadline_then_creation_order(void **state) {
  fixture *f = *state;
  luna__gclock *c;
  assert_int_equal(luna__gclock_new(f->loop, NULL, &c), 0);
  assert_int_equal(luna__gclock_add_timer(c, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(300), log_fire,
                                          (void *)1, NULL), 0);
  assert_int_equal(luna__gclock_add_timer(c, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(200), log_fire,
                                          (void *)2, NULL), 0);
  assert_int_equal(luna__gclock_add_timer(c, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(200), log_fire,
                                          (void *)3, NULL), 0);
  assert_int_equal(luna__gclock_add_timer(c, LUNA_UPDATE, LUNA_TIMER_FRAME, 1, log_fire,
                                          (void *)4, NULL), 0);
  assert_int_equal(luna__gclock_count(c), 4);
  frames(f->loop, 3);
  ASSERT_LOG(104, 202, 203, 301);
  assert_int_equal(luna__gclock_count(c), 0);
  luna__gclock_free(c, true);
}

/* A timer added by a callback of its own timing's run, due now, fires at
   the next run, never in the same one. */
static luna__gclock *again_clock;
static void add_again(luna_loop *loop, void *arg) {
  log_fire(loop, arg);
  if ((intptr_t)arg < 3)
    assert_int_equal(luna__gclock_add_timer(again_clock, LUNA_UPDATE, LUNA_TIMER_FRAME,
                                            luna__gclock_frames(again_clock), add_again,
                                            (void *)((intptr_t)arg + 1), NULL),
                     0);
}

static void a_timer_added_during_its_run_waits_for_the_next(void **state) {
  fixture *f = *state;
  assert_int_equal(luna__gclock_new(f->loop, NULL, &again_clock), 0);
  assert_int_equal(luna__gclock_add_timer(again_clock, LUNA_UPDATE, LUNA_TIMER_FRAME, 0,
                                          add_again, (void *)1, NULL), 0);
  frames(f->loop, 4);
  ASSERT_LOG(101, 202, 303);
  luna__gclock_free(again_clock, true);
}

static luna_timer_id victim;
static luna__gclock *victim_clock;
static void cancel_victim(luna_loop *loop, void *arg) {
  log_fire(loop, arg);
  assert_int_equal(luna__gclock_cancel(victim_clock, victim), 0);
}

static void cancel_pending_and_collected(void **state) {
  fixture *f = *state;
  luna_timer_id a;
  assert_int_equal(luna__gclock_new(f->loop, NULL, &victim_clock), 0);
  assert_int_equal(luna__gclock_add_timer(victim_clock, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(100),
                                          log_fire, (void *)1, &a), 0);
  assert_int_equal(luna__gclock_cancel(victim_clock, a), 0);
  assert_int_equal(luna__gclock_cancel(victim_clock, a), LUNA_ENOENT);
  /* collected in the same firing, cancelled by the one before it */
  assert_int_equal(luna__gclock_add_timer(victim_clock, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(100),
                                          cancel_victim, (void *)2, NULL), 0);
  assert_int_equal(luna__gclock_add_timer(victim_clock, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(100),
                                          log_fire, (void *)3, &victim), 0);
  frames(f->loop, 2);
  ASSERT_LOG(102);
  assert_int_equal(luna__gclock_count(victim_clock), 0);
  luna__gclock_free(victim_clock, true);
}

static void a_stopped_clock_fires_what_is_due_and_nothing_else(void **state) {
  fixture *f = *state;
  luna__gclock *c;
  assert_int_equal(luna__gclock_new(f->loop, NULL, &c), 0);
  assert_int_equal(luna__gclock_set_scale(c, 0), 0);
  assert_int_equal(luna__gclock_add_timer(c, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_fire,
                                          (void *)1, NULL), 0);
  assert_int_equal(luna__gclock_add_timer(c, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, log_fire,
                                          (void *)2, NULL), 0);
  frames(f->loop, 5);
  ASSERT_LOG(101);
  assert_int_equal(luna__gclock_set_scale(c, 1), 0);
  frames(f->loop, 1);
  ASSERT_LOG(101, 602);
  luna__gclock_free(c, true);
}

static void each_cleared(void *ud, luna_fn fn, void *arg) {
  (void)ud;
  (void)fn;
  log_push((long)(intptr_t)arg);
}

static void clear_reports_in_creation_order(void **state) {
  fixture *f = *state;
  luna__gclock *c;
  assert_int_equal(luna__gclock_new(f->loop, NULL, &c), 0);
  assert_int_equal(luna__gclock_add_timer(c, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(900), log_fire,
                                          (void *)1, NULL), 0);
  assert_int_equal(luna__gclock_add_timer(c, LUNA_POST_LATE_UPDATE, LUNA_TIMER_FRAME, 3, log_fire,
                                          (void *)2, NULL), 0);
  assert_int_equal(luna__gclock_add_timer(c, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(100), log_fire,
                                          (void *)3, NULL), 0);
  assert_int_equal(luna__gclock_clear(c, each_cleared, NULL), 3);
  ASSERT_LOG(1, 2, 3);
  frames(f->loop, 10);
  ASSERT_LOG(1, 2, 3);
  luna__gclock_free(c, true);
}

/* Freed from inside its own callback: the rest of that firing is dropped. */
static luna__gclock *self_clock;
static void free_self(luna_loop *loop, void *arg) {
  log_fire(loop, arg);
  luna__gclock_free(self_clock, true);
}

static void free_from_its_own_callback(void **state) {
  fixture *f = *state;
  assert_int_equal(luna__gclock_new(f->loop, NULL, &self_clock), 0);
  assert_int_equal(luna__gclock_add_timer(self_clock, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(100),
                                          free_self, (void *)1, NULL), 0);
  assert_int_equal(luna__gclock_add_timer(self_clock, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(100),
                                          log_fire, (void *)2, NULL), 0);
  frames(f->loop, 3);
  ASSERT_LOG(101);
}

static void children_outlive_their_parent(void **state) {
  fixture *f = *state;
  luna__gclock *p, *k;
  assert_int_equal(luna__gclock_new(f->loop, NULL, &p), 0);
  assert_int_equal(luna__gclock_new(f->loop, p, &k), 0);
  assert_int_equal(luna__gclock_set_paused(p, true), 0);
  frames(f->loop, 2);
  luna__gclock_free(p, true);
  assert_false(luna__gclock_paused(k));
  frames(f->loop, 1);
  assert_int_equal(luna__gclock_time(k), MS(100));
  luna__gclock_free(k, true);
}

static void stop_in_callback(luna_loop *loop, void *arg) {
  log_fire(loop, arg);
  luna_loop_stop(loop);
}

static void stop_while_firing_keeps_the_rest_for_the_next_run(void **state) {
  fixture *f = *state;
  luna__gclock *c;
  assert_int_equal(luna__gclock_new(f->loop, NULL, &c), 0);
  assert_int_equal(luna__gclock_add_timer(c, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(100),
                                          stop_in_callback, (void *)1, NULL), 0);
  assert_int_equal(luna__gclock_add_timer(c, LUNA_UPDATE, LUNA_TIMER_SCALED, MS(100), log_fire,
                                          (void *)2, NULL), 0);
  assert_int_equal(luna_loop_frame_ns(f->loop, MS(100)), LUNA_ESTOPPED);
  ASSERT_LOG(101);
  frames(f->loop, 1);
  ASSERT_LOG(101, 202);
  luna__gclock_free(c, true);
}

/* Random scales, pauses and timers against a model that advances the
   group clock frame by frame: each timer fires at the first frame after
   its creation at which the clock runs and has reached its deadline, in
   (deadline, creation) order within the frame. (dt * scale is a whole
   number of ns here, so the anchored clock and the model agree exactly.) */
static void random_timers_against_a_model(void **state) {
  fixture *f = *state;
  enum { N = 90, FRAMES = 300 };
  luna__gclock *c;
  luna_ns want_at[N], model_at[FRAMES + 1];
  bool running_at[FRAMES + 1];
  int made_in[N];
  long expect[N];
  size_t nexpect = 0;
  int i, n = 0, frame;
  double scale = 1.0;
  bool paused = false;
  luna_ns model = 0;
  srand(7);
  log_clear();
  assert_int_equal(luna__gclock_new(f->loop, NULL, &c), 0);
  for (frame = 1; frame <= FRAMES; frame++) {
    int op = rand() % 10;
    if (op < 3 && n < N) {
      want_at[n] = model + (luna_ns)(rand() % 8) * MS(50);
      made_in[n] = frame - 1;
      assert_int_equal(luna__gclock_add_timer(c, LUNA_UPDATE, LUNA_TIMER_SCALED, want_at[n],
                                              log_fire, (void *)(intptr_t)n, NULL),
                       0);
      n++;
    } else if (op == 3) {
      paused = !paused;
      assert_int_equal(luna__gclock_set_paused(c, paused), 0);
    } else if (op == 4) {
      scale = (double)(rand() % 5) / 2;
      assert_int_equal(luna__gclock_set_scale(c, scale), 0);
    }
    assert_int_equal(luna_loop_frame_ns(f->loop, MS(100)), 0);
    if (!paused)
      model += (luna_ns)((double)MS(100) * scale + 0.5);
    model_at[frame] = model;
    running_at[frame] = !paused;
    assert_int_equal(luna__gclock_time(c), model);
  }
  /* The expected log: frame by frame, the due timers by deadline then
     creation (creation is the index). */
  {
    bool done[N] = {false};
    for (frame = 1; frame <= FRAMES; frame++) {
      for (;;) {
        int best = -1;
        for (i = 0; i < n; i++)
          if (!done[i] && made_in[i] < frame && running_at[frame] && model_at[frame] >= want_at[i] &&
              (best < 0 || want_at[i] < want_at[best]))
            best = i;
        if (best < 0)
          break;
        done[best] = true;
        expect[nexpect++] = (long)frame * 100 + best;
      }
    }
  }
  assert_true(n > 30);
  assert_int_equal(g_log.n, nexpect);
  for (i = 0; i < (int)nexpect; i++)
    assert_int_equal(g_log.v[i], expect[i]);
  assert_int_equal(luna__gclock_count(c), (size_t)n - nexpect);
  luna__gclock_free(c, true);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(time_follows_scale_and_pause, setup, teardown),
      cmocka_unit_test_setup_teardown(nested_scales_multiply_and_pauses_inherit, setup, teardown),
      cmocka_unit_test_setup_teardown(timers_fire_in_deadline_then_creation_order, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_timer_added_during_its_run_waits_for_the_next, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(cancel_pending_and_collected, setup, teardown),
      cmocka_unit_test_setup_teardown(a_stopped_clock_fires_what_is_due_and_nothing_else, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(clear_reports_in_creation_order, setup, teardown),
      cmocka_unit_test_setup_teardown(free_from_its_own_callback, setup, teardown),
      cmocka_unit_test_setup_teardown(children_outlive_their_parent, setup, teardown),
      cmocka_unit_test_setup_teardown(stop_while_firing_keeps_the_rest_for_the_next_run, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(random_timers_against_a_model, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
