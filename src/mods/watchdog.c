/*
** watchdog.c: the thread that stops a mod's code when its time runs out.
**
** The count hook of a mod (budget.c) fires only between VM instructions,
** and one instruction can call a C function that runs long (a concatenation
** that copies megabytes, a collection of a big heap). So each outermost
** budget context tells the set's watchdog its deadline and the thread its
** code runs on; once the deadline passes while the context is still open,
** the watchdog calls lua_sethook on that thread to make the budget hook
** fire at the next instruction, as lua.c's Ctrl-C handler does from a
** signal. The hook then reads the set's clock and stops the context: a loop
** of C calls ends right after the call under way. It arms again every
** millisecond until the context closes, since the hook re-arms itself on
** the loop thread and may overwrite the watchdog's count.
**
** lua_sethook is the one call Lua allows from outside the thread running
** the state (it writes the hook fields and flags the running frames); the
** watchdog makes it only while the target thread is the running thread of
** an open context, under the mutex that the loop thread takes to change
** either, so the target cannot be collected meanwhile. What remains is a
** race the mutex cannot cover, since the loop thread runs Lua without it:
** - the hook fields are written while the running thread reads them (the
**   worst outcome is a hook that fires an instruction late or not at all,
**   which the next arming a millisecond later makes up for);
** - lua_sethook flags the thread's call frames by walking them, while the
**   running thread pushes and pops frames; lua.c's signal handler makes
**   the same walk, but on the thread it interrupts, never concurrently. A
**   frame freed under the walk (the collector shrinks a thread's frame list)
**   would be written after it was freed. Delivering the arming as a signal
**   to the loop thread, whose handler calls lua_sethook there as lua.c
**   does, would close this; until then it is a known limit;
** - the check that the hook is still the budget's (not a pending interrupt
**   or a bare yield's) and the arming are two steps, so a hook the loop
**   thread sets between them can be overwritten.
**
** Cost on the loop thread: one uncontended mutex lock per context opened,
** closed, or per coroutine switch inside one; a condition signal only when
** the watchdog sleeps without a deadline (the last one passed with no
** context open: about once a frame) or past the new one (another mod's,
** which has less time left). The watchdog sleeps otherwise, on
** CLOCK_MONOTONIC.
*/
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "mods.h"

/* How often an expired context's thread is armed again. */
#define REARM_NS 1000000

struct luna__watchdog {
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* on CLOCK_MONOTONIC */
  pthread_t thread;
  bool quit;
  bool idle;              /* the thread waits without a deadline */
  luna_ns waiting_for;    /* else the time it sleeps until */
  lua_State *L;           /* the running thread of the open context, or NULL */
  luna_ns deadline;       /* of the open context, CLOCK_MONOTONIC ns */
};

static luna_ns now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (luna_ns)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void wait_until(luna__watchdog *wd, luna_ns when) {
  struct timespec ts;
  wd->waiting_for = when;
  ts.tv_sec = (time_t)(when / 1000000000);
  ts.tv_nsec = (long)(when % 1000000000);
  pthread_cond_timedwait(&wd->cv, &wd->mu, &ts);
}

static void *watch(void *arg) {
  luna__watchdog *wd = (luna__watchdog *)arg;
  pthread_mutex_lock(&wd->mu);
  while (!wd->quit) {
    luna_ns now = now_ns();
    /* Until the last deadline, even between contexts: the next one of the
       mod moves it later, so the loop thread need not signal. Runs of a
       mod are often a microsecond long; a watchdog that went idle after
       each one would be signalled (a system call) at the next. */
    if (now < wd->deadline) {
      wait_until(wd, wd->deadline);
      continue;
    }
    if (wd->L == NULL) {
      wd->idle = true;
      pthread_cond_wait(&wd->cv, &wd->mu);
      wd->idle = false;
      continue;
    }
    if (lua_gethook(wd->L) == luna__budget_hook)
      lua_sethook(wd->L, luna__budget_hook, LUA_MASKCOUNT, 1);
    wait_until(wd, now + REARM_NS);
  }
  pthread_mutex_unlock(&wd->mu);
  return NULL;
}

luna__watchdog *luna__watchdog_new(void) {
  luna__watchdog *wd = (luna__watchdog *)calloc(1, sizeof *wd);
  pthread_condattr_t ca;
  if (wd == NULL)
    return NULL;
  if (pthread_mutex_init(&wd->mu, NULL) != 0)
    goto fail_mutex;
  if (pthread_condattr_init(&ca) != 0)
    goto fail_attr;
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (pthread_cond_init(&wd->cv, &ca) != 0) {
    pthread_condattr_destroy(&ca);
    goto fail_attr;
  }
  pthread_condattr_destroy(&ca);
  /* The thread takes no signal: SIGINT, SIGTERM or SIGQUIT sent to the
     process must reach the loop's thread, where they cut its sleep short
     and stop the Lua code that runs there. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int created = pthread_create(&wd->thread, NULL, watch, wd);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (created != 0) {
    pthread_cond_destroy(&wd->cv);
    goto fail_attr;
  }
  return wd;
fail_attr:
  pthread_mutex_destroy(&wd->mu);
fail_mutex:
  free(wd);
  return NULL;
}

void luna__watchdog_free(luna__watchdog *wd) {
  if (wd == NULL)
    return;
  pthread_mutex_lock(&wd->mu);
  wd->quit = true;
  pthread_cond_signal(&wd->cv);
  pthread_mutex_unlock(&wd->mu);
  pthread_join(wd->thread, NULL);
  pthread_cond_destroy(&wd->cv);
  pthread_mutex_destroy(&wd->mu);
  free(wd);
}

void luna__watchdog_arm(luna__watchdog *wd, lua_State *L, luna_ns deadline) {
  pthread_mutex_lock(&wd->mu);
  wd->L = L;
  wd->deadline = deadline;
  /* One mod's contexts only move the deadline later (each begins with
     what the frame left it); another mod's may move it earlier. */
  if (wd->idle || deadline < wd->waiting_for)
    pthread_cond_signal(&wd->cv);
  pthread_mutex_unlock(&wd->mu);
}

void luna__watchdog_thread(luna__watchdog *wd, lua_State *L) {
  pthread_mutex_lock(&wd->mu);
  wd->L = L;
  pthread_mutex_unlock(&wd->mu);
}

void luna__watchdog_disarm(luna__watchdog *wd) {
  pthread_mutex_lock(&wd->mu);
  wd->L = NULL;
  pthread_mutex_unlock(&wd->mu);
}
