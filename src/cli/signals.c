/*
** signals.c: every signal the program takes: those that stop `lunaloop
** run`, `repl` and `mods` cleanly, SIGQUIT's request for a report
** (report.c), and the REPL's Ctrl-C and SIGWINCH.
**
** SIGINT (Ctrl-C), SIGTERM (what timeout, docker stop and systemd send) and
** SIGHUP (the terminal went away) are one request: stop. The handler only
** does what is async-signal-safe: it notes the first signal, asks the
** binding to stop the Lua code running now (a runaway `while true do end`
** never reaches a frame boundary by itself), and restores the default
** action of all three, so that a second one kills at once. The frame loop
** sees the request, cancels every task (their to-be-closed variables run),
** closes the --trace file and exits with 128 + the signal's number, as
** shells report a process killed by it.
**
** SIGQUIT (Ctrl-\) only sets a flag: the frame loop prints what every task
** waits on, and where, between two frames, and goes on (the report of a
** stuck run, on demand).
**
** The REPL asks for Ctrl-C instead of letting it stop: SIGINT then runs the
** REPL's async-signal-safe choice of what to interrupt and notes the press
** for the REPL's loop (luna__take_ctrl_c), and SIGWINCH notes a resized
** terminal. Every signal the program takes is installed and restored here.
*/
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "cli.h"
#include "lunaloop_lua.h"

/* The signals that stop the program (SIGINT only when no Ctrl-C handler
   was given). */
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NSTOP (sizeof stop_signals / sizeof stop_signals[0])

static volatile sig_atomic_t stopped_by; /* the first stop signal, or 0 */
static volatile sig_atomic_t quit_requested;
static volatile sig_atomic_t ctrl_c_pressed, resized;
static void (*ctrl_c_handler)(void); /* the REPL's, or NULL */
static struct sigaction previous[NSTOP], previous_quit, previous_int, previous_winch;
static bool installed[NSTOP], quit_installed, int_installed, winch_installed;

static void on_stop(int sig) {
  int saved_errno = errno;
  struct sigaction dfl;
  if (stopped_by == 0)
    stopped_by = sig;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (size_t i = 0; i < NSTOP; i++) /* the second one kills */
    if (installed[i])
      sigaction(stop_signals[i], &dfl, NULL);
  luna_lua_interrupt();
  errno = saved_errno;
}

static void on_quit(int sig) {
  (void)sig;
  quit_requested = 1;
}

/* SIGINT when the REPL handles it: the REPL's choice first, then the press
   its loop takes. */
static void on_ctrl_c(int sig) {
  int saved_errno = errno;
  (void)sig;
  ctrl_c_handler();
  ctrl_c_pressed = 1;
  errno = saved_errno;
}

static void on_winch(int sig) {
  (void)sig;
  resized = 1;
}

/* Installs `handler` for sig. SIGHUP alone stays ignored when it was
   ignored at start: a program started under nohup must outlive its
   terminal (Go's runtime has the same rule). SIGINT and SIGQUIT, which a
   shell without job control ignores in background jobs, are taken anyway,
   since a signal sent to the process on purpose should do what it says. */
static bool install(int sig, void (*handler)(int), struct sigaction *old) {
  struct sigaction sa;
  if (sigaction(sig, NULL, old) != 0 || (sig == SIGHUP && old->sa_handler == SIG_IGN))
    return false;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  /* No SA_RESTART: the frame driver's sleep and the REPL's poll must return at
     once with EINTR. */
  sa.sa_flags = 0;
  return sigaction(sig, &sa, NULL) == 0;
}

void luna__signals_install(void (*on_ctrl_c_pressed)(void)) {
  ctrl_c_handler = on_ctrl_c_pressed;
  ctrl_c_pressed = 0;
  resized = 0;
  if (on_ctrl_c_pressed != NULL) {
    int_installed = install(SIGINT, on_ctrl_c, &previous_int);
    winch_installed = install(SIGWINCH, on_winch, &previous_winch);
  }
  for (size_t i = 0; i < NSTOP; i++)
    installed[i] = (stop_signals[i] != SIGINT || on_ctrl_c_pressed == NULL) &&
                   install(stop_signals[i], on_stop, &previous[i]);
  quit_installed = install(SIGQUIT, on_quit, &previous_quit);
}

void luna__signals_restore(void) {
  if (int_installed)
    sigaction(SIGINT, &previous_int, NULL);
  if (winch_installed)
    sigaction(SIGWINCH, &previous_winch, NULL);
  for (size_t i = 0; i < NSTOP; i++)
    if (installed[i])
      sigaction(stop_signals[i], &previous[i], NULL);
  if (quit_installed)
    sigaction(SIGQUIT, &previous_quit, NULL);
  for (size_t i = 0; i < NSTOP; i++)
    installed[i] = false;
  quit_installed = int_installed = winch_installed = false;
}

bool luna__interrupted(void) {
  return stopped_by != 0;
}

int luna__interrupt_status(void) {
  return stopped_by != 0 ? 128 + stopped_by : LUNA_EXIT_OK;
}

/* Takes a flag a handler set: true once per setting. A signal between the
   test and the clear is merged into the one taken, as signals merge. */
static bool take(volatile sig_atomic_t *flag) {
  if (!*flag)
    return false;
  *flag = 0;
  return true;
}

bool luna__quit_requested(void) {
  return take(&quit_requested);
}

bool luna__ctrl_c_pending(void) {
  return ctrl_c_pressed != 0;
}

bool luna__take_ctrl_c(void) {
  return take(&ctrl_c_pressed);
}

bool luna__take_resize(void) {
  return take(&resized);
}
