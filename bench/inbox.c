/*
** inbox.c: W5, the cross-thread inbox. Two producer threads post n callbacks
** each while the loop thread runs frames (luna_loop_frame) until all 2n have
** run at Update. Two implementations, on the same loop and the same frames:
** - lunaloop: luna_post, the lock-free inbox (a node pool and a Treiber stack
**   per timing);
** - mutex: the queue a host would otherwise write, a pthread mutex around a
**   growable array that a repeating item at Update swaps out and runs.
** Both first reserve room for the worst backlog this load can make (all 2n
** posts waiting at once: luna_loop_reserve_posts for lunaloop, both arrays
** presized for the mutex queue), as a host whose producers must not
** allocate would, so whether a pass allocates does not depend on how the
** threads happen to be scheduled. Each run does two warm passes, then the
** measured pass: ns_per_op is the process's CPU time (all three threads)
** from the producers' start to the last callback, per post; allocs_per_op counts the allocations of the
** measured pass (on every thread) per post.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "lunaloop.h"

#define PRODUCERS 2

void bench_mark_other_thread(void);

typedef struct entry {
  luna_fn fn;
  void *arg;
} entry;

/* The mutex queue: producers append to `a` under the lock; the drain swaps
   `a` with `run` under the lock and runs `run` outside it. */
typedef struct mutex_queue {
  pthread_mutex_t mu;
  entry *a;
  size_t n, cap;
  entry *run;
  size_t run_cap;
} mutex_queue;

typedef struct pass {
  luna_loop *loop;
  mutex_queue *mq; /* NULL: lunaloop */
  long per_producer;
  pthread_barrier_t start;
} pass;

static long delivered; /* loop thread only */

static void count_fn(luna_loop *loop, void *arg) {
  (void)loop;
  (void)arg;
  delivered++;
}

static void mq_push(mutex_queue *q, luna_fn fn, void *arg) {
  pthread_mutex_lock(&q->mu);
  if (q->n == q->cap) {
    size_t ncap = q->cap ? q->cap * 2 : 1024;
    entry *na = bench_alloc(NULL, q->a, q->cap * sizeof *q->a, ncap * sizeof *q->a);
    if (na == NULL)
      bench_die("out of memory");
    q->a = na;
    q->cap = ncap;
  }
  q->a[q->n].fn = fn;
  q->a[q->n].arg = arg;
  q->n++;
  pthread_mutex_unlock(&q->mu);
}

/* The repeating item that delivers the mutex queue at Update. */
static bool mq_drain(luna_loop *loop, void *arg) {
  mutex_queue *q = arg;
  entry *run;
  size_t n, i, cap;
  pthread_mutex_lock(&q->mu);
  run = q->a;
  n = q->n;
  cap = q->cap;
  q->a = q->run;
  q->cap = q->run_cap;
  q->n = 0;
  pthread_mutex_unlock(&q->mu);
  for (i = 0; i < n; i++)
    run[i].fn(loop, run[i].arg);
  q->run = run;
  q->run_cap = cap;
  return true;
}

static void *producer(void *ud) {
  pass *p = ud;
  long i;
  bench_mark_other_thread();
  pthread_barrier_wait(&p->start);
  for (i = 0; i < p->per_producer; i++) {
    if (p->mq != NULL)
      mq_push(p->mq, count_fn, NULL);
    else if (luna_post(p->loop, LUNA_UPDATE, count_fn, NULL) != 0)
      bench_die("luna_post failed");
  }
  return NULL;
}

/* One pass: returns the CPU time in ns from the start to the last call. */
static int64_t run_pass(pass *p) {
  pthread_t th[PRODUCERS];
  long total = p->per_producer * PRODUCERS;
  int64_t t0;
  int i;
  delivered = 0;
  pthread_barrier_init(&p->start, NULL, PRODUCERS + 1);
  for (i = 0; i < PRODUCERS; i++)
    if (pthread_create(&th[i], NULL, producer, p) != 0)
      bench_die("pthread_create failed");
  pthread_barrier_wait(&p->start);
  t0 = bench_cpu_ns();
  while (delivered < total)
    if (luna_loop_frame_ns(p->loop, 16666667) != 0)
      bench_die("luna_loop_frame failed");
  t0 = bench_cpu_ns() - t0;
  for (i = 0; i < PRODUCERS; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&p->start);
  return t0;
}

bool bench_inbox(const char *impl, long n, bool quick, bench_result *out) {
  luna_config config;
  mutex_queue mq;
  pass p;
  long a0;
  int64_t ns;
  (void)quick;
  memset(&config, 0, sizeof config);
  memset(&p, 0, sizeof p);
  config.alloc = bench_alloc;
  if (luna_loop_new(&config, &p.loop) != 0)
    bench_die("luna_loop_new failed");
  p.per_producer = n;
  if (strcmp(impl, "mutex") == 0) {
    memset(&mq, 0, sizeof mq);
    pthread_mutex_init(&mq.mu, NULL);
    mq.cap = mq.run_cap = (size_t)n * PRODUCERS;
    mq.a = bench_alloc(NULL, NULL, 0, mq.cap * sizeof *mq.a);
    mq.run = bench_alloc(NULL, NULL, 0, mq.run_cap * sizeof *mq.run);
    if (mq.a == NULL || mq.run == NULL)
      bench_die("out of memory");
    p.mq = &mq;
    if (luna_item_add(p.loop, LUNA_UPDATE, mq_drain, &mq, NULL) != 0)
      bench_die("luna_item_add failed");
  } else if (strcmp(impl, "lunaloop") == 0) {
    if (luna_loop_reserve_posts(p.loop, (size_t)n * PRODUCERS) != 0)
      bench_die("luna_loop_reserve_posts failed");
  } else {
    luna_loop_free(p.loop);
    return false;
  }
  run_pass(&p); /* warm: caches, page faults, the queue's arrays */
  run_pass(&p);
  a0 = bench_allocs();
  ns = run_pass(&p);
  out->ns_per_op = (double)ns / (double)(n * PRODUCERS);
  out->allocs_per_op = (double)(bench_allocs() - a0) / (double)(n * PRODUCERS);
  out->ops = (double)(n * PRODUCERS);
  luna_loop_free(p.loop);
  if (p.mq != NULL) {
    bench_alloc(NULL, mq.a, mq.cap * sizeof *mq.a, 0);
    bench_alloc(NULL, mq.run, mq.run_cap * sizeof *mq.run, 0);
    pthread_mutex_destroy(&mq.mu);
  }
  return true;
}
