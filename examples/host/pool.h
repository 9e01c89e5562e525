/*
** pool.h: a small pool of POSIX worker threads with a FIFO job queue, the
** kind a game engine already has. Nothing here knows about lunaloop: jobs
** are plain structs whose first member is a pool_job.
*/
#ifndef HOST_POOL_H
#define HOST_POOL_H

#include <stdbool.h>

typedef struct pool pool;
typedef struct pool_job pool_job;

struct pool_job {
  pool_job *next;              /* queue link, owned by the pool */
  void (*run)(pool_job *job);  /* on a worker thread; the job is the worker's from then on */
  void (*drop)(pool_job *job); /* the job will never run (pool_stop); any thread */
};

/* Starts `threads` workers. NULL when a thread cannot be started. */
pool *pool_start(int threads);

/* Queues a job (any thread). */
void pool_submit(pool *p, pool_job *job);

/* Removes a job that no worker has taken yet; true when it was removed (it
   will never run, and is the caller's again). Any thread. */
bool pool_remove(pool *p, pool_job *job);

/* Jobs queued or running. Any thread. */
int pool_busy(pool *p);

/* Drops the queued jobs (their drop callbacks run), waits for the running
   ones, joins the workers and frees the pool. */
void pool_stop(pool *p);

#endif
