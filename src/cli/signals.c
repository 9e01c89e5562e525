/*
** signals.c: the signals that stop `lunaloop run`, `repl` and `mods`
** cleanly, and SIGQUIT's report.
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
*/
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "cli.h"
#include "lunaloop_lua.h"

/* The signals that stop the program; the REPL handles SIGINT itself. */
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NSTOP (sizeof stop_signals / sizeof stop_signals[0])

static volatile sig_atomic_t stopped_by; /* the first stop signal, or 0 */
static volatile sig_atomic_t quit_requested;
static struct sigaction previous[NSTOP], previous_quit;
static bool installed[NSTOP], quit_installed;

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
  /* No SA_RESTART: the pacer's sleep and the REPL's poll must return at
     once with EINTR. */
  sa.sa_flags = 0;
  return sigaction(sig, &sa, NULL) == 0;
}

void luna__signals_install(bool with_sigint) {
  for (size_t i = 0; i < NSTOP; i++)
    installed[i] = (stop_signals[i] != SIGINT || with_sigint) &&
                   install(stop_signals[i], on_stop, &previous[i]);
  quit_installed = install(SIGQUIT, on_quit, &previous_quit);
}

void luna__signals_restore(void) {
  for (size_t i = 0; i < NSTOP; i++)
    if (installed[i])
      sigaction(stop_signals[i], &previous[i], NULL);
  if (quit_installed)
    sigaction(SIGQUIT, &previous_quit, NULL);
  for (size_t i = 0; i < NSTOP; i++)
    installed[i] = false;
  quit_installed = false;
}

bool luna__interrupted(void) {
  return stopped_by != 0;
}

int luna__interrupt_status(void) {
  return stopped_by != 0 ? 128 + stopped_by : LUNA_EXIT_OK;
}

bool luna__quit_requested(void) {
  if (!quit_requested)
    return false;
  quit_requested = 0;
  return true;
}

void luna__report_tasks(lua_State *L, FILE *out, const char *why) {
  luna_loop *loop = luna_lua_loop(L);
  fflush(stdout);
  fprintf(out, LUNA_PROGNAME ": tasks at frame %llu%s%s%s:\n",
          (unsigned long long)(loop != NULL ? luna_loop_frame_count(loop) : 0),
          why != NULL ? " (" : "", why != NULL ? why : "", why != NULL ? ")" : "");
  luna__write_task_list(L, out, "  ");
  fflush(out);
}

void luna__write_task_list(lua_State *L, FILE *out, const char *indent) {
  if (luna_lua_write_tasks(L, out, indent) == 0)
    fprintf(out, "%sno tasks\n", indent);
}
