/*
** pool.c: worker threads taking jobs from one mutex-protected FIFO.
*/
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>

struct pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pool_job *head, *tail; /* queued, under mu */
  int running;           /* jobs taken and not finished, under mu */
  bool stopping;
  int nthreads;
  pthread_t threads[];
};

static void *worker(void *arg) {
  pool *p = (pool *)arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    pool_job *job;
    while (p->head == NULL && !p->stopping)
      pthread_cond_wait(&p->cv, &p->mu);
    if (p->head == NULL)
      break; /* stopping and nothing queued */
    job = p->head;
    p->head = job->next;
    if (p->head == NULL)
      p->tail = NULL;
    p->running++;
    pthread_mutex_unlock(&p->mu);
    job->run(job); /* may free the job */
    pthread_mutex_lock(&p->mu);
    p->running--;
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

pool *pool_start(int threads) {
  pool *p = (pool *)calloc(1, sizeof *p + (size_t)threads * sizeof(pthread_t));
  int i;
  if (p == NULL)
    return NULL;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  for (i = 0; i < threads; i++) {
    if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
      p->nthreads = i;
      pool_stop(p);
      return NULL;
    }
  }
  p->nthreads = threads;
  return p;
}

void pool_submit(pool *p, pool_job *job) {
  pthread_mutex_lock(&p->mu);
  job->next = NULL;
  if (p->tail != NULL)
    p->tail->next = job;
  else
    p->head = job;
  p->tail = job;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

bool pool_remove(pool *p, pool_job *job) {
  pool_job **link, *prev = NULL;
  bool found = false;
  pthread_mutex_lock(&p->mu);
  for (link = &p->head; *link != NULL; prev = *link, link = &(*link)->next) {
    if (*link == job) {
      *link = job->next;
      if (p->tail == job)
        p->tail = prev;
      found = true;
      break;
    }
  }
  pthread_mutex_unlock(&p->mu);
  return found;
}

int pool_busy(pool *p) {
  int n = 0;
  pool_job *j;
  pthread_mutex_lock(&p->mu);
  for (j = p->head; j != NULL; j = j->next)
    n++;
  n += p->running;
  pthread_mutex_unlock(&p->mu);
  return n;
}

void pool_stop(pool *p) {
  pool_job *queued;
  int i;
  pthread_mutex_lock(&p->mu);
  queued = p->head;
  p->head = p->tail = NULL;
  p->stopping = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  while (queued != NULL) {
    pool_job *next = queued->next;
    queued->drop(queued);
    queued = next;
  }
  for (i = 0; i < p->nthreads; i++)
    pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}
