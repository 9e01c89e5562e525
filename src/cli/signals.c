/*
** signals.c: Ctrl-C for `lunaloop run`. The handler only does what is
** async-signal-safe: it sets a flag, asks the binding to stop the Lua code
** running now (a runaway `while true do end` never reaches a frame boundary
** by itself), and restores the default action so that a second Ctrl-C
** kills at once. The frame loop sees the flag, cancels every task (their
** to-be-closed variables run) and exits with 130.
*/
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "cli.h"
#include "lunaloop_lua.h"

static volatile sig_atomic_t interrupted;
static struct sigaction previous;

static void on_sigint(int sig) {
  int saved_errno = errno;
  struct sigaction dfl;
  (void)sig;
  interrupted = 1;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGINT, &dfl, NULL); /* the second Ctrl-C kills */
  luna_lua_interrupt();
  errno = saved_errno;
}

void luna__signals_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  /* No SA_RESTART: the pacer's sleep must return at once with EINTR. */
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, &previous);
}

void luna__signals_restore(void) {
  sigaction(SIGINT, &previous, NULL);
}

bool luna__interrupted(void) {
  return interrupted != 0;
}
