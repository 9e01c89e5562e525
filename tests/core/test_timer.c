/*
** test_timer.c: timers. Exact firing frames on the scaled clock (dt 0.1 s
** and 60 Hz), deadline order with creation-order ties, the order of kinds,
** timers added during a run, cancel (pending, collected-but-not-called,
** stale), clamping, time scale 0, realtime read once per run, stop while
** firing, a randomized heap check against a sorted reference, deep 4-ary
** heaps (ties, cancels from the middle, growth during a run's calls), and
** interleaved adds, cancels and frames against a reference model (node
** and handle timers mixed), also across the 2^32nd timer; node timers:
** ties with handle timers, cancels from a callback (due or pending),
** arming again after a fire or a cancel, stop, compaction, and the owner's
** rule for freeing a node.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "counting_alloc.h"
#include "loop_internal.h"
#include "lunaloop.h"
#include "test_log.h"
#include "loop_fixture.h"


/* A virtual realtime source the tests move by hand; counts its reads. */
static luna_ns fake_now;
static int fake_reads;
static luna_ns fake_source(void *ud) {
  (void)ud;
  fake_reads++;
  return fake_now;
}

static int setup_fake(void **state) {
  fake_now = 1000; /* any origin: the clock still starts at 0 */
  fake_reads = 0;
  return setup_with_realtime(state, fake_source);
}


/* Logs the frame in which it fires. */
static void log_frame(luna_loop *loop, void *arg) {
  (void)arg;
  log_push((long)luna_loop_frame_count(loop));
}

/* In Update of the current frame: a scaled timer at now + arg ns. */
static void add_delay(luna_loop *loop, void *arg) {
  luna_ns now = luna_loop_time(loop, LUNA_CLOCK_SCALED);
  log_push((long)luna_loop_frame_count(loop));
  assert_int_equal(luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_SCALED,
                                  now + (luna_ns)(intptr_t)arg, log_frame, NULL, NULL),
                   0);
}

static void scaled_timer_at_plus_one_second_fires_ten_frames_later_at_dt_0_1(void **state) {
  fixture *f = *state;
  int i;
  for (i = 0; i < 3; i++)
    luna_loop_frame(f->loop, 0.1);
  luna_enqueue(f->loop, LUNA_UPDATE, add_delay, I2P(1000000000));
  for (i = 0; i < 20; i++)
    assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(4, 14); /* awaited in frame F = 4, fires in F + 10 */
}

static void delays_at_60_hz_take_30_and_60_frames(void **state) {
  fixture *f = *state;
  int i;
  luna_enqueue(f->loop, LUNA_UPDATE, add_delay, I2P(500000000));
  luna_enqueue(f->loop, LUNA_UPDATE, add_delay, I2P(1000000000));
  for (i = 0; i < 70; i++)
    assert_int_equal(luna_loop_frame_ns(f->loop, 16666667), 0);
  ASSERT_LOG(1, 1, 31, 61);
}

static void equal_deadlines_fire_in_creation_order(void **state) {
  fixture *f = *state;
  int i;
  for (i = 1; i <= 5; i++)
    luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 100, log_fn, I2P(i), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 50, log_fn, I2P(0), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 200, log_fn, I2P(9), NULL);
  luna_loop_frame_ns(f->loop, 100);
  ASSERT_LOG(0, 1, 2, 3, 4, 5);
  luna_loop_frame_ns(f->loop, 100);
  ASSERT_LOG(0, 1, 2, 3, 4, 5, 9);
}

static void kinds_fire_frame_scaled_unscaled_realtime_fixed_whatever_the_deadlines(void **state) {
  fixture *f = *state;
  /* Created in reverse kind order; each with a deadline earlier than the
     kind before it, so only the kind order can explain the result. */
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FIXED, 0, log_fn, I2P(5), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_REALTIME, 1, log_fn, I2P(4), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_UNSCALED, 2, log_fn, I2P(3), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 3, log_fn, I2P(2), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 1, log_fn, I2P(1), NULL);
  fake_now += 100;
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1, 2, 3, 4, 5);
}

static void frame_timers_compare_with_the_frame_counter(void **state) {
  fixture *f = *state;
  int i;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 3, log_frame, NULL, NULL);
  luna_timer_add(f->loop, LUNA_PRE_UPDATE, LUNA_TIMER_FRAME, 0, log_frame, NULL, NULL);
  for (i = 0; i < 5; i++)
    luna_loop_frame(f->loop, 0.0);
  ASSERT_LOG(1, 3);
}

/* Adds an Update timer that is already due, from inside an Update run. */
static void add_due_timer(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_frame, NULL, NULL);
}

static void timers_added_during_a_run_wait_for_the_next_run_even_if_due(void **state) {
  fixture *f = *state;
  /* From a continuation (step 2) and from a timer (step 3) of the same run. */
  luna_enqueue(f->loop, LUNA_UPDATE, add_due_timer, I2P(-1));
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, add_due_timer, I2P(-2), NULL);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(-1, -2);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(-1, -2, 2, 2);
}

static void add_due_update_timer_from_pre_update(luna_loop *loop, void *arg) {
  (void)arg;
  luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_frame, NULL, NULL);
}

static void a_due_timer_added_at_an_earlier_timing_fires_this_frame(void **state) {
  fixture *f = *state;
  luna_enqueue(f->loop, LUNA_PRE_UPDATE, add_due_update_timer_from_pre_update, NULL);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1);
}

/* A timer that was set aside (created during the run) keeps its place in
   the heap: it still fires, in order, at the next run. */
static void add_two_due_timers(luna_loop *loop, void *arg) {
  (void)arg;
  luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 5, log_fn, I2P(20), NULL);
  luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, log_fn, I2P(10), NULL);
}

static void set_aside_timers_keep_their_order(void **state) {
  fixture *f = *state;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 3, log_fn, I2P(1), NULL);
  luna_enqueue(f->loop, LUNA_UPDATE, add_two_due_timers, NULL);
  luna_loop_frame_ns(f->loop, 10);
  ASSERT_LOG(1);
  luna_loop_frame_ns(f->loop, 10);
  ASSERT_LOG(1, 10, 20);
}

static void cancel_pending_timer_and_stale_handles(void **state) {
  fixture *f = *state;
  luna_timer_id a, b, zero = {0}, bogus = {UINT64_C(0x12345678000fffff)};
  luna_loop_stats st;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, log_fn, I2P(1), &a);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, log_fn, I2P(2), &b);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 2);
  assert_int_equal(luna_timer_cancel(f->loop, a), 0);
  assert_int_equal(luna_timer_cancel(f->loop, a), LUNA_ENOENT);
  assert_int_equal(luna_timer_cancel(f->loop, zero), LUNA_ENOENT);
  assert_int_equal(luna_timer_cancel(f->loop, bogus), LUNA_ENOENT);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 1);
  luna_loop_frame(f->loop, 0.1);
  ASSERT_LOG(2);
  assert_int_equal(luna_timer_cancel(f->loop, b), LUNA_ENOENT); /* fired */
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 0);
  /* A reused slot gets a new generation. */
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, log_fn, I2P(3), &b);
  assert_true(a.id != b.id);
  assert_int_equal(luna_timer_cancel(f->loop, a), LUNA_ENOENT);
  assert_int_equal(luna_timer_cancel(f->loop, b), 0);
}

static luna_timer_id victim;

static void cancel_victim(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  assert_int_equal(luna_timer_cancel(loop, victim), 0);
}

static void cancelling_a_collected_timer_before_its_call_prevents_it(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, cancel_victim, I2P(1), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 2, log_fn, I2P(2), &victim);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 3, log_fn, I2P(3), NULL);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(1, 3);
  assert_int_equal(luna_timer_cancel(f->loop, victim), LUNA_ENOENT);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 0);
  assert_int_equal(f->loop->timers.heaps[LUNA_UPDATE * 5 + 1].live, 0);
}

/* luna__loop_set_warm: the warm function gets the argument of the next
   timer with the named fn, once, just before the call before it; never
   that of another fn, nor of a timer cancelled after it was collected. */
static void warm_log(void *arg) { log_push(100 + (long)(intptr_t)arg); }

static void warmed_fn(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  if ((long)(intptr_t)arg == 1 || (long)(intptr_t)arg == 6)
    assert_int_equal(luna_timer_cancel(loop, victim), 0);
}

static void warm_runs_one_call_ahead_for_its_fn_only(void **state) {
  fixture *f = *state;
  luna__loop_set_warm(f->loop, warmed_fn, warm_log);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1, warmed_fn, I2P(1), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 2, warmed_fn, I2P(2), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 3, log_fn, I2P(3), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 4, warmed_fn, I2P(4), &victim);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 5, warmed_fn, I2P(5), NULL);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  /* 2 is warmed before 1's call; 4 (cancelled by 1) never; 5 before 4's
     turn, which is skipped. */
  ASSERT_LOG(102, 1, 2, 3, 105, 5);
  /* Off: nothing is warmed, not even a cancelled timer (whose fn is NULL,
     like the one named). */
  luna__loop_set_warm(f->loop, NULL, warm_log);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, warmed_fn, I2P(6), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, warmed_fn, I2P(7), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, warmed_fn, I2P(8), &victim);
  assert_int_equal(luna_loop_frame(f->loop, 0.1), 0);
  ASSERT_LOG(102, 1, 2, 3, 105, 5, 6, 7);
}

static luna_timer_id self_id;
static void cancel_self(luna_loop *loop, void *arg) {
  (void)arg;
  log_push(luna_timer_cancel(loop, self_id));
}

static void a_firing_timer_reads_its_own_handle_as_stale(void **state) {
  fixture *f = *state;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, cancel_self, NULL, &self_id);
  luna_loop_frame(f->loop, 0.1);
  ASSERT_LOG(LUNA_ENOENT);
}

/* Whether heap entry e's timer is live, read as timer.c does. */
static bool entry_is_live(const luna__timers *tm, const luna__heap_entry *e) {
  if (e->ref & 1u)
    return tm->slots[e->ref >> 1].pos != 0;
  return ((const luna__timer_node *)e->ref)->word == e->stamp;
}

/* The deadline of a pending timer, as its heap entry holds it (no slot
   records where its entry is: the heap is searched). */
static luna_ns pending_deadline(luna_loop *loop, luna_timer_id id) {
  const luna__timers *tm = &loop->timers;
  uint32_t idx = (uint32_t)id.id - 1;
  const luna__timer *t = &tm->slots[idx];
  const luna__heap *h = &tm->heaps[t->pos >> 1];
  size_t i;
  assert_int_not_equal(t->pos, 0);
  for (i = 0; i < h->n; i++)
    if (h->a[i].ref == (((uintptr_t)idx << 1) | 1u))
      return h->a[i].deadline;
  fail_msg("timer not in its heap");
  return 0;
}

/* Deadlines clamp to LUNA_NS_MAX; clocks stop at LUNA_CLOCK_MAX (half of
   it: a frame past it is refused), so a clamped deadline is never reached
   by time that still runs, and never fires early. */
static void deadlines_clamp_to_ns_max_beyond_the_clocks_reach(void **state) {
  fixture *f = *state;
  luna_timer_id id;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, INT64_MAX, log_fn, I2P(1), &id);
  assert_int_equal(pending_deadline(f->loop, id), LUNA_NS_MAX);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, INT64_MIN, log_fn, I2P(0), &id);
  assert_int_equal(pending_deadline(f->loop, id), -LUNA_NS_MAX);
  assert_int_equal(luna_loop_frame_ns(f->loop, LUNA_CLOCK_MAX), 0);
  ASSERT_LOG(0);
  assert_int_equal(luna_loop_frame_ns(f->loop, INT64_MAX), LUNA_ERANGE);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), LUNA_CLOCK_MAX);
  assert_int_equal(luna_loop_frame_ns(f->loop, 0), 0);
  ASSERT_LOG(0);
}

/* With time scale 0 (a paused game), scaled timers must wait while
   unscaled ones still fire: a scheduler that measured every delay on one
   clock either froze the unscaled timer or let the scaled one through. dt
   0.05: the unscaled +1 s timer fires at frame 20, the scaled one never. */
static void time_scale_zero_holds_scaled_timers_but_not_unscaled_ones(void **state) {
  fixture *f = *state;
  int i;
  luna_loop_set_time_scale(f->loop, 0.0);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 1000000000, log_fn, I2P(-1), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_UNSCALED, 1000000000, log_frame, NULL, NULL);
  for (i = 0; i < 100; i++)
    assert_int_equal(luna_loop_frame(f->loop, 0.05), 0);
  ASSERT_LOG(20);
  assert_int_equal(luna_loop_time(f->loop, LUNA_CLOCK_SCALED), 0);
}

static void realtime_is_read_once_per_run_and_only_when_needed(void **state) {
  fixture *f = *state;
  int i;
  fake_reads = 0;
  luna_loop_run(f->loop, LUNA_UPDATE);
  assert_int_equal(fake_reads, 0); /* no realtime timer waits */
  for (i = 0; i < 4; i++)
    luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_REALTIME, 100 + i, log_fn, I2P(i), NULL);
  fake_now += 101;
  luna_loop_run(f->loop, LUNA_UPDATE);
  assert_int_equal(fake_reads, 1);
  ASSERT_LOG(0, 1);
  fake_now += 10;
  luna_loop_run(f->loop, LUNA_UPDATE);
  assert_int_equal(fake_reads, 2);
  ASSERT_LOG(0, 1, 2, 3);
}

static void stop_then_log(luna_loop *loop, void *arg) {
  log_push((long)(intptr_t)arg);
  luna_loop_stop(loop);
}

static void stop_while_firing_keeps_the_collected_rest_in_order(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 0, log_fn, I2P(1), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, stop_then_log, I2P(2), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_fn, I2P(3), NULL);
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FIXED, 0, log_fn, I2P(4), NULL);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), LUNA_ESTOPPED);
  ASSERT_LOG(1, 2);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 2);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  ASSERT_LOG(1, 2, 3, 4);
}

static void timer_add_rejects_bad_arguments_and_reports_enomem(void **state) {
  fixture *f = *state;
  luna_timer_id id = {7};
  assert_int_equal(luna_timer_add(NULL, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_fn, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, NULL, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_timer_add(f->loop, (luna_timing)16, LUNA_TIMER_SCALED, 0, log_fn, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, (luna_timer_kind)5, 0, log_fn, NULL, &id), LUNA_EINVAL);
  assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, (luna_timer_kind)-1, 0, log_fn, NULL, &id), LUNA_EINVAL);
  assert_int_equal(id.id, 7);
  counting_fail_after(&f->ca, 0);
  assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_fn, I2P(1), &id), LUNA_ENOMEM);
  counting_fail_after(&f->ca, 1); /* heap grows, slab fails */
  assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, log_fn, I2P(1), &id), LUNA_ENOMEM);
  counting_fail_after(&f->ca, -1);
  luna_loop_frame(f->loop, 0.1);
  ASSERT_LOG_EMPTY();
}

/* A node timer is its heap entry (and the owner's word); a handle timer
   adds its slot. */
static void a_timer_costs_at_most_48_bytes(void **state) {
  (void)state;
  assert_int_equal(sizeof(luna__timer_node), 8);
#if UINTPTR_MAX == UINT64_MAX
  assert_int_equal(sizeof(luna__timer), 16);
  assert_int_equal(sizeof(luna__heap_entry), 32);
#endif
  assert_true(sizeof(luna__timer) + sizeof(luna__heap_entry) <= 48);
}

/* ---- randomized heap check ----------------------------------------------- */

#define RND_N 3000

static uint64_t rng = 88172645463325252ULL;
static uint64_t xorshift(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

typedef struct ref_timer {
  luna_ns deadline;
  long seq;
  bool cancelled;
  luna_timer_id id;
} ref_timer;

static ref_timer refs[RND_N];

static int ref_cmp(const void *x, const void *y) {
  const ref_timer *a = x, *b = y;
  if (a->deadline != b->deadline)
    return a->deadline < b->deadline ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Checks the heap invariant (4 children a node), the entries' copy of the
   sequence, and the counts: `dead` entries are cancelled (their slots not
   freed yet), the others live. */
static void check_heap(const luna__timers *tm, const luna__heap *h) {
  size_t i, dead = 0;
  unsigned hnum = (unsigned)(h - tm->heaps);
  assert_int_equal(h->due, 0);
  assert_true(h->n <= h->cap);
  for (i = 0; i < h->n; i++) {
    const luna__heap_entry *e = &h->a[i];
    if (!entry_is_live(tm, e))
      dead++;
    else if (e->ref & 1u)
      assert_int_equal(tm->slots[e->ref >> 1].pos >> 1, hnum);
    assert_int_equal((e->stamp >> 1) & 0x7f, hnum);
    assert_true(e->stamp & 1u);
    if (i > 0) {
      const luna__heap_entry *p = &h->a[(i - 1) / 4];
      assert_true(p->deadline < e->deadline ||
                  (p->deadline == e->deadline && p->stamp < e->stamp));
    }
  }
  assert_int_equal(dead, h->dead);
  assert_int_equal(h->n - h->dead, h->live);
}

static void check_all_heaps(const luna__timers *tm) {
  int i;
  for (i = 0; i < LUNA__TIMER_HEAPS; i++)
    check_heap(tm, &tm->heaps[i]);
}

static void random_timers_fire_in_deadline_then_creation_order(void **state) {
  fixture *f = *state;
  long i, fired = 0;
  int frame;
  for (i = 0; i < RND_N; i++) {
    refs[i].deadline = (luna_ns)(xorshift() % 500); /* many ties */
    refs[i].seq = i;
    refs[i].cancelled = false;
    assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_UNSCALED,
                                    refs[i].deadline, log_fn, I2P(i), &refs[i].id),
                     0);
  }
  for (i = 0; i < RND_N; i++)
    if (xorshift() % 3 == 0) {
      refs[i].cancelled = true;
      assert_int_equal(luna_timer_cancel(f->loop, refs[i].id), 0);
    }
  check_heap(&f->loop->timers, &f->loop->timers.heaps[LUNA_UPDATE * 5 + LUNA_TIMER_UNSCALED]);
  qsort(refs, RND_N, sizeof refs[0], ref_cmp);
  for (frame = 0; frame < 10; frame++) {
    luna_loop_frame_ns(f->loop, 50);
    check_heap(&f->loop->timers, &f->loop->timers.heaps[LUNA_UPDATE * 5 + LUNA_TIMER_UNSCALED]);
  }
  for (i = 0; i < RND_N; i++) {
    if (refs[i].cancelled)
      continue;
    assert_true((size_t)fired < g_log.n);
    assert_int_equal(g_log.v[fired], refs[i].seq);
    fired++;
  }
  assert_int_equal(g_log.n, (size_t)fired);
}

/* ---- deep heaps ------------------------------------------------------------ */

/* Timers fired by the tests below log here (g_log holds 4096). */
#define DEEP_MAX 12000
static long deep_log[DEEP_MAX];
static size_t deep_n;
static void deep_fn(luna_loop *loop, void *arg) {
  (void)loop;
  assert_true(deep_n < DEEP_MAX);
  deep_log[deep_n++] = (long)(intptr_t)arg;
}

/* 6,000 timers on three deadlines, added in a shuffled order of deadlines:
   the heap is seven levels of four, every pop walks a hole through runs of
   equal deadlines, and each deadline's timers still fire in creation
   order. Every seventh is cancelled first, from wherever it sits. */
static void equal_deadlines_keep_creation_order_through_a_deep_heap(void **state) {
  fixture *f = *state;
  enum { N = 6000 };
  static luna_timer_id ids[N];
  static luna_ns dl[N];
  long i, k = 0;
  luna_ns d;
  rng = 1234567;
  deep_n = 0;
  for (i = 0; i < N; i++) {
    dl[i] = (luna_ns)(xorshift() % 3) * 10;
    assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, dl[i],
                                    deep_fn, I2P(i), &ids[i]),
                     0);
  }
  for (i = 0; i < N; i += 7)
    assert_int_equal(luna_timer_cancel(f->loop, ids[i]), 0);
  check_all_heaps(&f->loop->timers);
  assert_int_equal(luna_loop_frame_ns(f->loop, 100), 0);
  for (d = 0; d <= 20; d += 10)
    for (i = 0; i < N; i++)
      if (dl[i] == d && i % 7 != 0) {
        assert_true((size_t)k < deep_n);
        assert_int_equal(deep_log[k], i);
        k++;
      }
  assert_int_equal(deep_n, (size_t)k);
  check_all_heaps(&f->loop->timers);
}

/* Cancels taken from inside the heap (nodes with children, leaves, the
   root's children), each followed by a full check: a cancelled entry stays
   in the heap, marked, until the cancelled ones are more than half of it,
   when the heap is rebuilt without them (several times over 1,600 of 2,000
   cancelled): the entries never number more than twice the live timers
   plus 64, and the cancelled ones count as nothing. Then the rest fires in
   order and the cancelled ones never do. */
static void cancels_from_the_middle_keep_the_heap_and_the_order(void **state) {
  fixture *f = *state;
  enum { N = 2000 };
  static luna_timer_id ids[N];
  static luna_ns dl[N];
  static bool gone[N];
  const luna__heap *h = &f->loop->timers.heaps[LUNA_UPDATE * 5 + LUNA_TIMER_UNSCALED];
  long i, k = 0, left = N;
  luna_ns d;
  rng = 99;
  deep_n = 0;
  for (i = 0; i < N; i++) {
    dl[i] = (luna_ns)(xorshift() % 400);
    gone[i] = false;
    luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_UNSCALED, dl[i], deep_fn, I2P(i), &ids[i]);
  }
  for (k = 0; k < 1600; k++) {
    /* Pick by position: the middle half of the heap, or near the top. */
    size_t pos = k % 5 == 0 ? 1 + xorshift() % 4 : h->n / 4 + xorshift() % (h->n / 2);
    uint32_t slot;
    /* a live entry: a cancelled one stays in the heap until popped */
    while (!entry_is_live(&f->loop->timers, &h->a[pos]))
      pos = (pos + 1) % h->n;
    slot = (uint32_t)(h->a[pos].ref >> 1);
    for (i = 0; i < N; i++)
      if (!gone[i] && (uint32_t)ids[i].id - 1 == slot)
        break;
    assert_true(i < N);
    assert_int_equal(luna_timer_cancel(f->loop, ids[i]), 0);
    assert_int_equal(luna_timer_cancel(f->loop, ids[i]), LUNA_ENOENT);
    gone[i] = true;
    left--;
    assert_int_equal(h->n - h->dead, (size_t)left);
    assert_true(h->n <= 2 * (size_t)left + 64);
    check_heap(&f->loop->timers, h);
  }
  assert_int_equal(luna_loop_frame_ns(f->loop, 1000), 0);
  k = 0;
  for (d = 0; d < 400; d++)
    for (i = 0; i < N; i++)
      if (dl[i] == d && !gone[i]) {
        assert_int_equal(deep_log[k], i);
        k++;
      }
  assert_int_equal(deep_n, (size_t)left);
}

/* A callback that adds 300 timers to the heap it is being called from:
   the array grows (several times) while the run still holds the other due
   timers at its end. They keep their order; then a stop puts the rest
   back, and the next runs fire them and then the added ones. */
static void add_300_to_my_heap(luna_loop *loop, void *arg) {
  int i;
  deep_fn(loop, arg);
  for (i = 0; i < 300; i++)
    assert_int_equal(luna_timer_add(loop, LUNA_UPDATE, LUNA_TIMER_SCALED, i % 2,
                                    deep_fn, I2P(1000 + i), NULL),
                     0);
}

static void stop_deep(luna_loop *loop, void *arg) {
  deep_fn(loop, arg);
  luna_loop_stop(loop);
}

static void growing_the_heap_during_its_calls_keeps_the_due_timers(void **state) {
  fixture *f = *state;
  long i, k = 0;
  size_t cap;
  luna_loop_stats st;
  deep_n = 0;
  luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0, add_300_to_my_heap, I2P(0), NULL);
  for (i = 1; i < 12; i++)
    luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 0,
                   i == 6 ? stop_deep : deep_fn, I2P(i), NULL);
  cap = f->loop->timers.heaps[LUNA_UPDATE * 5 + LUNA_TIMER_SCALED].cap;
  assert_true(cap < 64);
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), LUNA_ESTOPPED);
  assert_true(f->loop->timers.heaps[LUNA_UPDATE * 5 + LUNA_TIMER_SCALED].cap >= 4 * cap);
  assert_int_equal(deep_n, 7);
  for (i = 0; i < 7; i++)
    assert_int_equal(deep_log[i], i);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 5 + 300);
  check_all_heaps(&f->loop->timers);
  /* The next run: the five put back (deadline 0, created first), then the
     added ones of deadline 0, then those of deadline 1 (clock 0: not yet). */
  assert_int_equal(luna_loop_run(f->loop, LUNA_UPDATE), 0);
  for (i = 7; i < 12; i++)
    assert_int_equal(deep_log[k++ + 7], i);
  for (i = 0; i < 300; i += 2)
    assert_int_equal(deep_log[k++ + 7], 1000 + i);
  assert_int_equal(deep_n, (size_t)(k + 7));
  assert_int_equal(luna_loop_frame_ns(f->loop, 1), 0);
  for (i = 1; i < 300; i += 2)
    assert_int_equal(deep_log[k++ + 7], 1000 + i);
  assert_int_equal(deep_n, (size_t)(k + 7));
}

/* ---- node timers --------------------------------------------------------- */

/* Nodes of the tests: a callback's arg is the node, whose index is logged. */
#define NODES 256
static luna__timer_node nodes[NODES];

static long node_index(void *arg) { return (long)((luna__timer_node *)arg - nodes); }

static void node_log(luna_loop *loop, void *arg) {
  (void)loop;
  assert_false(luna__timer_node_armed((luna__timer_node *)arg)); /* disarmed before its call */
  log_push(node_index(arg));
}

static int add_node(luna_loop *loop, luna_timer_kind kind, int64_t deadline, luna_fn fn, long i) {
  return luna__loop_add_timer_node(loop, LUNA_UPDATE, kind, deadline, fn, &nodes[i]);
}

static int setup_nodes(void **state) {
  memset(nodes, 0, sizeof nodes);
  return setup_fake(state);
}

/* Node and handle timers share the heaps: one deadline order, ties in
   creation order across both sorts (frame waits often share a deadline). */
static void nodes_and_handles_tie_in_creation_order(void **state) {
  fixture *f = *state;
  long i;
  for (i = 0; i < 10; i++) {
    if (i % 3 == 0)
      assert_int_equal(luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_FRAME, 2, log_fn,
                                      I2P(100 + i), NULL),
                       0);
    else
      assert_int_equal(add_node(f->loop, LUNA_TIMER_FRAME, 2, node_log, i), 0);
  }
  assert_int_equal(add_node(f->loop, LUNA_TIMER_FRAME, 1, node_log, 20), 0);
  assert_true(luna__timer_node_armed(&nodes[1]));
  check_all_heaps(&f->loop->timers);
  luna_loop_frame(f->loop, 0.1);
  ASSERT_LOG(20);
  luna_loop_frame(f->loop, 0.1);
  ASSERT_LOG(20, 100, 1, 2, 103, 4, 5, 106, 7, 8, 109);
  assert_false(luna__timer_node_armed(&nodes[1]));
  assert_int_equal(luna__loop_cancel_timer_node(f->loop, &nodes[1]), LUNA_ENOENT);
}

/* Node 0's call cancels node 1 (collected with it, not yet called) and
   node 2 (pending, later), and cancels itself (already disarmed). */
static void node_cancels_others(luna_loop *loop, void *arg) {
  node_log(loop, arg);
  assert_int_equal(luna__loop_cancel_timer_node(loop, &nodes[1]), 0);
  assert_int_equal(luna__loop_cancel_timer_node(loop, &nodes[1]), LUNA_ENOENT);
  assert_int_equal(luna__loop_cancel_timer_node(loop, &nodes[2]), 0);
  assert_int_equal(luna__loop_cancel_timer_node(loop, (luna__timer_node *)arg), LUNA_ENOENT);
}

static void cancelling_nodes_from_a_callback_due_or_pending(void **state) {
  fixture *f = *state;
  luna_loop_stats st;
  add_node(f->loop, LUNA_TIMER_SCALED, 0, node_cancels_others, 0);
  add_node(f->loop, LUNA_TIMER_SCALED, 0, node_log, 1);
  add_node(f->loop, LUNA_TIMER_SCALED, 500, node_log, 2);
  add_node(f->loop, LUNA_TIMER_SCALED, 0, node_log, 3);
  luna_loop_frame_ns(f->loop, 10);
  ASSERT_LOG(0, 3);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 0);
  luna_loop_frame_ns(f->loop, 1000);
  ASSERT_LOG(0, 3);
  check_all_heaps(&f->loop->timers);
  assert_int_equal(f->loop->timers.heaps[LUNA_UPDATE * 5 + LUNA_TIMER_SCALED].n, 0);
}

/* A node armed again in its own call fires at its new deadline, once. */
static void node_rearms_itself(luna_loop *loop, void *arg) {
  node_log(loop, arg);
  if (g_log.n < 3)
    assert_int_equal(luna__loop_add_timer_node(loop, LUNA_UPDATE, LUNA_TIMER_FRAME,
                                               (int64_t)luna_loop_frame_count(loop) + 2,
                                               node_rearms_itself, (luna__timer_node *)arg),
                     0);
}

/* Re-arming after a fire and after a cancel: the old entry, still in the
   heap after a cancel, never fires the node again, whether the new
   deadline is earlier or later than the old one; a cancel made between
   the collection and the call keeps the node out of that run. */
static void a_node_armed_again_fires_only_at_its_new_deadline(void **state) {
  fixture *f = *state;
  int i;
  add_node(f->loop, LUNA_TIMER_FRAME, 1, node_rearms_itself, 5);
  for (i = 0; i < 8; i++)
    luna_loop_frame(f->loop, 0.1); /* frames 1 to 8 */
  ASSERT_LOG(5, 5, 5);             /* at 1, 3, 5 */
  log_clear();
  /* Cancelled, then armed later: the old entry (frame 10) is skipped. */
  add_node(f->loop, LUNA_TIMER_FRAME, 10, node_log, 6);
  assert_int_equal(luna__loop_cancel_timer_node(f->loop, &nodes[6]), 0);
  add_node(f->loop, LUNA_TIMER_FRAME, 12, node_log, 6);
  /* Cancelled, then armed earlier: fires once, at 11 and not at 13. */
  add_node(f->loop, LUNA_TIMER_FRAME, 13, node_log, 7);
  assert_int_equal(luna__loop_cancel_timer_node(f->loop, &nodes[7]), 0);
  add_node(f->loop, LUNA_TIMER_FRAME, 11, node_log, 7);
  /* Cancelled and armed for the same deadline: it fires after node 9,
     armed between (its place is that of its new arming). */
  add_node(f->loop, LUNA_TIMER_FRAME, 12, node_log, 8);
  add_node(f->loop, LUNA_TIMER_FRAME, 12, node_log, 9);
  assert_int_equal(luna__loop_cancel_timer_node(f->loop, &nodes[8]), 0);
  add_node(f->loop, LUNA_TIMER_FRAME, 12, node_log, 8);
  check_all_heaps(&f->loop->timers);
  for (i = 0; i < 8; i++) {
    luna_loop_frame(f->loop, 0.1); /* frames 9 to 16 */
    log_push(-(long)luna_loop_frame_count(f->loop));
  }
  ASSERT_LOG(-9, -10, 7, -11, 6, 9, 8, -12, -13, -14, -15, -16);
  check_all_heaps(&f->loop->timers);
}

/* Stop in the middle of a run of nodes: the rest go back, in order, and a
   node cancelled while put back stays cancelled. */
static void node_stops(luna_loop *loop, void *arg) {
  node_log(loop, arg);
  luna_loop_stop(loop);
  assert_int_equal(luna__loop_cancel_timer_node(loop, &nodes[3]), 0);
}

static void stop_while_firing_nodes_keeps_the_rest(void **state) {
  fixture *f = *state;
  long i;
  for (i = 0; i < 6; i++)
    add_node(f->loop, LUNA_TIMER_SCALED, i, i == 1 ? node_stops : node_log, i);
  assert_int_equal(luna_loop_frame_ns(f->loop, 10), LUNA_ESTOPPED);
  ASSERT_LOG(0, 1);
  check_all_heaps(&f->loop->timers);
  assert_int_equal(luna_loop_frame_ns(f->loop, 10), 0);
  ASSERT_LOG(0, 1, 2, 4, 5);
}

/* Thousands of nodes cancelled: their entries are compacted away (the
   entries stay within about twice the live nodes plus 64), the rest fires
   in order, and a compaction made inside a run, among its due entries,
   keeps their order. */
static void cancel_half_of_due(luna_loop *loop, void *arg) {
  long i, me = node_index(arg);
  log_push(me);
  if (me == 0)
    for (i = 1; i < NODES; i += 2)
      assert_int_equal(luna__loop_cancel_timer_node(loop, &nodes[i]), 0);
}

static void cancelled_nodes_are_compacted_away(void **state) {
  fixture *f = *state;
  const luna__heap *h = &f->loop->timers.heaps[LUNA_UPDATE * 5 + LUNA_TIMER_SCALED];
  long i, round;
  for (round = 0; round < 20; round++) {
    for (i = 0; i < NODES; i++)
      add_node(f->loop, LUNA_TIMER_SCALED, 1000 + (i * 7919) % 101, node_log, i);
    for (i = 0; i < NODES; i++)
      if (i % 8 != 0) {
        assert_int_equal(luna__loop_cancel_timer_node(f->loop, &nodes[i]), 0);
        assert_true(h->n + h->due <= 2 * h->live + 64);
      }
    for (i = 0; i < NODES; i += 8)
      assert_int_equal(luna__loop_cancel_timer_node(f->loop, &nodes[i]), 0);
    check_all_heaps(&f->loop->timers);
  }
  assert_int_equal(h->live, 0);
  assert_true(h->n <= 64);
  luna__loop_sweep_timers(f->loop);
  assert_int_equal(h->n, 0);
  /* Inside a run: node 0 cancels every odd one, among the due entries. */
  for (i = 0; i < NODES; i++)
    add_node(f->loop, LUNA_TIMER_SCALED, i == 0 ? 0 : 1, i == 0 ? cancel_half_of_due : node_log, i);
  assert_int_equal(luna_loop_frame_ns(f->loop, 10), 0);
  assert_int_equal(g_log.n, NODES / 2);
  for (i = 0; i < NODES / 2; i++)
    assert_int_equal(g_log.v[i], 2 * i);
  assert_int_equal(h->n + h->due, 0);
  check_all_heaps(&f->loop->timers);
}

/* The owner's rule (lunaloop/extension.h): cancel, sweep, then free. The
   nodes live in memory of their own here, freed while their cancelled
   entries would otherwise still be in the heap; the runs after it read
   nothing of them (ASan would report a use after free). A reset disarms
   the nodes still armed. */
static void a_swept_node_may_be_freed(void **state) {
  fixture *f = *state;
  luna__timer_node *own[40];
  luna_loop_stats st;
  int i;
  for (i = 0; i < 40; i++) {
    own[i] = malloc(sizeof *own[i]);
    assert_non_null(own[i]);
    assert_int_equal(luna__loop_add_timer_node(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED,
                                               50 + i, node_log, own[i]),
                     0);
  }
  add_node(f->loop, LUNA_TIMER_SCALED, 60, node_log, 1);
  for (i = 0; i < 40; i++)
    assert_int_equal(luna__loop_cancel_timer_node(f->loop, own[i]), 0);
  luna__loop_sweep_timers(f->loop);
  for (i = 0; i < 40; i++)
    free(own[i]);
  luna_loop_get_stats(f->loop, &st);
  assert_int_equal(st.timers[LUNA_UPDATE], 1);
  assert_int_equal(luna_loop_frame_ns(f->loop, 100), 0);
  ASSERT_LOG(1);
  add_node(f->loop, LUNA_TIMER_SCALED, 500, node_log, 2);
  assert_true(luna__timer_node_armed(&nodes[2]));
  assert_int_equal(luna_loop_reset(f->loop), 0);
  assert_false(luna__timer_node_armed(&nodes[2]));
  assert_int_equal(luna__loop_cancel_timer_node(f->loop, &nodes[2]), LUNA_ENOENT);
  luna_loop_frame_ns(f->loop, 1000);
  ASSERT_LOG(1);
}

/* ---- against a reference model ------------------------------------------- */

/* Adds, cancels and frames interleaved at random (fixed seeds) over three
   kinds, node and handle timers mixed, with callbacks that cancel other timers (pending, collected, fired
   or themselves) and add new ones (some already due), checked frame by
   frame against a model that is a plain list: what fires in a run is every
   timer due at its start and created before it, by kind, deadline and
   creation; a cancel answers 0 while the timer has not been called. */

#define MODEL_MAX 40000
enum { M_NONE, M_PENDING, M_FIRED, M_CANCELLED };

typedef struct mtimer {
  int kind;
  luna_ns deadline;
  int state;
} mtimer;

static mtimer model[MODEL_MAX];
static luna_timer_id model_ids[MODEL_MAX];
static long model_n;      /* timers created, in the model */
static long real_n;       /* timers created, by the loop's side */
static long real_log[MODEL_MAX * 2], model_log[MODEL_MAX * 2];
static size_t real_logn, model_logn;
static luna_ns run_now[3]; /* frame, scaled, unscaled at the last Update */

static const luna_timer_kind model_kinds[3] = {LUNA_TIMER_FRAME, LUNA_TIMER_SCALED,
                                               LUNA_TIMER_UNSCALED};

static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* What timer k's callback does, the same on both sides. */
static long action_cancel(long k) { /* a timer to cancel, or -1 */
  uint64_t r = mix((uint64_t)k * 3 + 1);
  if (r % 4 != 0)
    return -1;
  return (long)((r >> 8) % (uint64_t)(k + 40)) - 20 + k / 2;
}
static bool action_add(long k) { return mix((uint64_t)k * 3 + 2) % 3 == 0; }
static int new_kind(long k) { return (int)(mix((uint64_t)k * 5 + 3) % 3); }
static luna_ns new_offset(long k, int kind) {
  uint64_t r = mix((uint64_t)k * 5 + 4);
  return kind == 0 ? (luna_ns)(r % 12) - 2 : (luna_ns)(r % 200) - 20;
}

static void model_add(long k, const luna_ns now[3]) {
  assert_true(k < MODEL_MAX);
  model[k].kind = new_kind(k);
  model[k].deadline = now[model[k].kind] + new_offset(k, model[k].kind);
  model[k].state = M_PENDING;
}

static int model_cancel(long j) {
  if (j < 0 || j >= model_n || model[j].state != M_PENDING)
    return LUNA_ENOENT;
  model[j].state = M_CANCELLED;
  return 0;
}

static void real_add(luna_loop *loop, long k, const luna_ns now[3]);

/* Half the timers are nodes (lunaloop/extension.h), half handle timers. */
static luna__timer_node model_nodes[MODEL_MAX];
static bool use_node(long k) { return mix((uint64_t)k * 7 + 5) % 2 == 0; }

static int real_cancel(luna_loop *loop, long j) {
  if (j < 0 || j >= real_n)
    return LUNA_ENOENT;
  return use_node(j) ? luna__loop_cancel_timer_node(loop, &model_nodes[j])
                     : luna_timer_cancel(loop, model_ids[j]);
}

static void model_cb(luna_loop *loop, void *arg) {
  long k = (long)(intptr_t)arg, j = action_cancel(k);
  luna_ns now[3];
  real_log[real_logn++] = k;
  if (j >= 0)
    real_log[real_logn++] = -100 + real_cancel(loop, j);
  if (action_add(k)) {
    now[0] = (luna_ns)luna_loop_frame_count(loop);
    now[1] = luna_loop_time(loop, LUNA_CLOCK_SCALED);
    now[2] = luna_loop_time(loop, LUNA_CLOCK_UNSCALED);
    real_add(loop, real_n++, now);
  }
}

static void model_node_cb(luna_loop *loop, void *arg) {
  model_cb(loop, I2P((luna__timer_node *)arg - model_nodes));
}

static void real_add(luna_loop *loop, long k, const luna_ns now[3]) {
  int kind = new_kind(k);
  assert_true(k < MODEL_MAX);
  if (use_node(k))
    assert_int_equal(luna__loop_add_timer_node(loop, LUNA_UPDATE, model_kinds[kind],
                                               now[kind] + new_offset(k, kind),
                                               model_node_cb, &model_nodes[k]),
                     0);
  else
    assert_int_equal(luna_timer_add(loop, LUNA_UPDATE, model_kinds[kind],
                                    now[kind] + new_offset(k, kind), model_cb, I2P(k),
                                    &model_ids[k]),
                     0);
}

/* A continuation of Update: the clocks its timers compare against. */
static void record_now(luna_loop *loop, void *arg) {
  (void)arg;
  run_now[0] = (luna_ns)luna_loop_frame_count(loop);
  run_now[1] = luna_loop_time(loop, LUNA_CLOCK_SCALED);
  run_now[2] = luna_loop_time(loop, LUNA_CLOCK_UNSCALED);
}

static long due_list[MODEL_MAX];
static int due_cmp(const void *x, const void *y) {
  const mtimer *a = &model[*(const long *)x], *b = &model[*(const long *)y];
  if (a->kind != b->kind)
    return a->kind - b->kind;
  if (a->deadline != b->deadline)
    return a->deadline < b->deadline ? -1 : 1;
  return *(const long *)x < *(const long *)y ? -1 : 1; /* creation */
}

/* The model's Update run at run_now. */
static void model_run(void) {
  long k, nd = 0, i;
  for (k = 0; k < model_n; k++)
    if (model[k].state == M_PENDING && model[k].deadline <= run_now[model[k].kind])
      due_list[nd++] = k;
  qsort(due_list, (size_t)nd, sizeof due_list[0], due_cmp);
  for (i = 0; i < nd; i++) {
    long j;
    k = due_list[i];
    if (model[k].state != M_PENDING)
      continue; /* cancelled by an earlier call of this run */
    model[k].state = M_FIRED;
    model_log[model_logn++] = k;
    j = action_cancel(k);
    if (j >= 0)
      model_log[model_logn++] = -100 + model_cancel(j);
    if (action_add(k))
      model_add(model_n++, run_now);
  }
}

static void check_logs(void) {
  size_t i;
  assert_int_equal(real_logn, model_logn);
  for (i = 0; i < real_logn; i++)
    if (real_log[i] != model_log[i]) {
      fprintf(stderr, "diverged at %zu: loop %ld, model %ld\n", i, real_log[i],
                      model_log[i]);
      fail();
    }
}

static void run_against_the_model(fixture *f, uint64_t seed, uint64_t first_seq) {
  luna_loop *loop = f->loop;
  luna_loop_stats st;
  long k, frame, pending;
  luna_ns now[3] = {0, 0, 0};
  rng = seed;
  model_n = real_n = 0;
  real_logn = model_logn = 0;
  memset(model_nodes, 0, sizeof model_nodes);
  loop->timers.seq = first_seq; /* what the sequences start from */
  assert_int_equal(luna_loop_set_time_scale(loop, 0.5), 0);
  for (k = 0; k < 3000; k++) {
    real_add(loop, real_n++, now);
    model_add(model_n++, now);
  }
  for (frame = 0; frame < 250; frame++) {
    int op, nops = (int)(xorshift() % 40);
    for (op = 0; op < nops; op++) {
      if (xorshift() % 3 == 0) {
        long j = (long)(xorshift() % (uint64_t)(model_n + 10));
        int rc = real_cancel(loop, j);
        assert_int_equal(rc, model_cancel(j));
      } else {
        real_add(loop, real_n++, now);
        model_add(model_n++, now);
      }
    }
    luna_enqueue(loop, LUNA_UPDATE, record_now, NULL);
    assert_int_equal(luna_loop_frame_ns(loop, 10), 0);
    model_run();
    assert_int_equal(real_n, model_n);
    check_logs();
    check_all_heaps(&loop->timers);
    now[0] = run_now[0];
    now[1] = run_now[1];
    now[2] = run_now[2];
    for (k = pending = 0; k < model_n; k++)
      pending += model[k].state == M_PENDING;
    luna_loop_get_stats(loop, &st);
    assert_int_equal(st.timers[LUNA_UPDATE], (size_t)pending);
  }
  assert_true(model_logn > 5000);
}

static void interleaved_adds_cancels_and_frames_match_a_reference_model(void **state) {
  run_against_the_model(*state, 0x5eed, 0);
}

/* The same past the 2^32nd timer (the entries once held only the low 32
   bits of a sequence, and read the slots past it; they hold it all now:
   the test stays as a guard on the stamps' arithmetic there). */
static void the_model_still_holds_across_the_2_pow_32nd_timer(void **state) {
  fixture *f = *state;
  run_against_the_model(f, 0xfeed, ((uint64_t)1 << 32) - 4000);
  assert_true(f->loop->timers.seq > ((uint64_t)1 << 32));
}

/* Ties across the boundary: creation order even where the low 32 bits of
   the later sequence are smaller. */
static void ties_across_the_2_pow_32nd_timer_keep_creation_order(void **state) {
  fixture *f = *state;
  int i;
  f->loop->timers.seq = ((uint64_t)1 << 32) - 3;
  for (i = 0; i < 40; i++)
    luna_timer_add(f->loop, LUNA_UPDATE, LUNA_TIMER_SCALED, 5 * (i % 2), log_fn, I2P(i), NULL);
  check_all_heaps(&f->loop->timers);
  luna_loop_frame_ns(f->loop, 10);
  assert_int_equal(g_log.n, 40);
  for (i = 0; i < 20; i++) {
    assert_int_equal(g_log.v[i], 2 * i);          /* deadline 0 */
    assert_int_equal(g_log.v[20 + i], 2 * i + 1); /* deadline 5 */
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup_fake, teardown)
#define TN(name) cmocka_unit_test_setup_teardown(name, setup_nodes, teardown)
      T(scaled_timer_at_plus_one_second_fires_ten_frames_later_at_dt_0_1),
      T(delays_at_60_hz_take_30_and_60_frames),
      T(equal_deadlines_fire_in_creation_order),
      T(kinds_fire_frame_scaled_unscaled_realtime_fixed_whatever_the_deadlines),
      T(frame_timers_compare_with_the_frame_counter),
      T(timers_added_during_a_run_wait_for_the_next_run_even_if_due),
      T(a_due_timer_added_at_an_earlier_timing_fires_this_frame),
      T(set_aside_timers_keep_their_order),
      T(cancel_pending_timer_and_stale_handles),
      T(cancelling_a_collected_timer_before_its_call_prevents_it),
      T(a_firing_timer_reads_its_own_handle_as_stale),
      T(warm_runs_one_call_ahead_for_its_fn_only),
      T(deadlines_clamp_to_ns_max_beyond_the_clocks_reach),
      T(time_scale_zero_holds_scaled_timers_but_not_unscaled_ones),
      T(realtime_is_read_once_per_run_and_only_when_needed),
      T(stop_while_firing_keeps_the_collected_rest_in_order),
      T(timer_add_rejects_bad_arguments_and_reports_enomem),
      T(a_timer_costs_at_most_48_bytes),
      T(random_timers_fire_in_deadline_then_creation_order),
      T(equal_deadlines_keep_creation_order_through_a_deep_heap),
      T(cancels_from_the_middle_keep_the_heap_and_the_order),
      T(growing_the_heap_during_its_calls_keeps_the_due_timers),
      T(interleaved_adds_cancels_and_frames_match_a_reference_model),
      T(the_model_still_holds_across_the_2_pow_32nd_timer),
      T(ties_across_the_2_pow_32nd_timer_keep_creation_order),
      TN(nodes_and_handles_tie_in_creation_order),
      TN(cancelling_nodes_from_a_callback_due_or_pending),
      TN(a_node_armed_again_fires_only_at_its_new_deadline),
      TN(stop_while_firing_nodes_keeps_the_rest),
      TN(cancelled_nodes_are_compacted_away),
      TN(a_swept_node_may_be_freed),
#undef TN
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
