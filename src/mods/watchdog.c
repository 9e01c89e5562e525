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
** lua_sethook may be called asynchronously only on the thread that runs
** the state, as lua.c's signal handler does: from another thread its walk
** over the running thread's call frames would race with the frames being
** pushed, popped and freed. So the watchdog does not call it: it sends the
** loop's thread a signal (LUNA__WATCHDOG_SIGNAL, a real-time signal), and
** the handler, on that thread, arms the hook of the context's thread if
** the budget's hook is still the one installed there (never over a
** pending interrupt). The handler finds the watchdog through a
** thread-local pointer that the loop thread sets while a context is open,
** so a signal that arrives after the context closed, or for a watchdog
** already freed, does nothing. The remaining race is lua.c's own: the
** handler may interrupt the loop thread in the middle of a hook change of
** its own (the worst outcome is a hook that fires an instruction late or
** not at all, which the next signal a millisecond later makes up for).
** A loop thread that blocks the signal gets no early stop: its mods are
** then bounded by the count hook alone (every 1000 instructions).
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
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "mods.h"

/* The signal by which the watchdog asks the loop thread to arm a budget
   hook: a real-time signal, which no default action of the process or of
   Lua uses. The handler is installed once per process, when the first
   watchdog starts. */
#define LUNA__WATCHDOG_SIGNAL (SIGRTMIN + 5)

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
  pthread_t loop;         /* the thread that opened the context */
  /* What the signal handler reads: L, also written on the loop thread (a
     signal handler may read it at any instant, hence atomic). */
  _Atomic(lua_State *) target;
};

/* The watchdog of the context open on this thread, for the handler (the
   initial-exec model: reading it in a handler must not allocate). */
static _Thread_local luna__watchdog *on_this_thread
    __attribute__((tls_model("initial-exec")));

/* On the loop thread, at the watchdog's signal: arms the budget hook of the
   open context's thread, unless another hook (an interrupt, a bare yield's)
   was set there meanwhile. */
static void on_signal(int sig) {
  luna__watchdog *wd = on_this_thread;
  lua_State *L;
  (void)sig;
  if (wd == NULL || (L = atomic_load_explicit(&wd->target, memory_order_relaxed)) == NULL)
    return;
  if (lua_gethook(L) == luna__budget_hook)
    lua_sethook(L, luna__budget_hook, LUA_MASKCOUNT, 1);
}

static pthread_once_t handler_once = PTHREAD_ONCE_INIT;
static bool handler_ok;

static void install_handler(void) {
  struct sigaction sa;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = on_signal;
  handler_ok = sigaction(LUNA__WATCHDOG_SIGNAL, &sa, NULL) == 0;
}

/* Sets what the handler reads (loop thread, under the mutex). */
static void set_target(luna__watchdog *wd, lua_State *L) {
  wd->L = L;
  atomic_store_explicit(&wd->target, L, memory_order_relaxed);
  on_this_thread = L != NULL ? wd : NULL;
}

luna_ns luna__watchdog_now(void) {
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
    luna_ns now = luna__watchdog_now();
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
    pthread_kill(wd->loop, LUNA__WATCHDOG_SIGNAL); /* on_signal arms it there */
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
  pthread_once(&handler_once, install_handler);
  if (!handler_ok)
    goto fail_mutex;
  atomic_init(&wd->target, NULL);
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
  if (on_this_thread == wd) /* a signal still pending finds nothing */
    on_this_thread = NULL;
  pthread_cond_destroy(&wd->cv);
  pthread_mutex_destroy(&wd->mu);
  free(wd);
}

void luna__watchdog_arm(luna__watchdog *wd, lua_State *L, luna_ns deadline) {
  pthread_mutex_lock(&wd->mu);
  set_target(wd, L);
  wd->loop = pthread_self();
  wd->deadline = deadline;
  /* One mod's contexts only move the deadline later (each begins with
     what the frame left it); another mod's may move it earlier. */
  if (wd->idle || deadline < wd->waiting_for)
    pthread_cond_signal(&wd->cv);
  pthread_mutex_unlock(&wd->mu);
}

void luna__watchdog_thread(luna__watchdog *wd, lua_State *L) {
  pthread_mutex_lock(&wd->mu);
  set_target(wd, L);
  pthread_mutex_unlock(&wd->mu);
}

void luna__watchdog_disarm(luna__watchdog *wd) {
  pthread_mutex_lock(&wd->mu);
  set_target(wd, NULL);
  pthread_mutex_unlock(&wd->mu);
}
