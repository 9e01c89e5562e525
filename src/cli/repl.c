/*
** repl.c: `lunaloop repl [options]`, a live loop with a prompt: the
** session's setup, its main loop and its end. The parts live in files of
** their own (repl.h lists them): output that keeps the typed line intact
** (repl_output.c), the helpers written in Lua (repl_lua.c), what Ctrl-C
** interrupts (repl_interrupt.c), the prompt and history (repl_prompt.c),
** frame pacing (repl_frames.c), chunks and the foreground task
** (repl_chunk.c), the `:` commands (repl_commands.c) and input
** (repl_input.c).
**
** One thread does everything: it polls stdin with a timeout that ends when
** the next frame is due, hands what came to the input, and runs the frame
** when it is due. Ctrl-D, or :quit, cancels every task (their to-be-closed
** variables run) and exits 0. SIGTERM and SIGHUP (signals.c) do the same,
** exiting 128 + the signal's number; a second one kills. :waits, and
** SIGQUIT (Ctrl-\), list what every task waits on and where.
**
** It owns the session (luna__repl). Includes repl.h (cli.h),
** lunaloop_lua.h and Lua.
*/
#include <poll.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "lunaloop_lua.h"
#include "repl.h"

luna_repl luna__repl;

static bool input_ended; /* the main loop ended at the end of piped input */

/* The globals of the REPL's state (task; print, io.write and the error
   handler routed through the REPL's output), the helpers, the --seed. */
static int setup_state(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "lunaloop");
  lua_call(L, 1, 1);
  lua_setglobal(L, "task");
  luna__repl_route_output(L);
  luna__repl_open_helpers(L);
  if (R.opts.has_seed) {
    lua_getglobal(L, "math");
    lua_getfield(L, -1, "randomseed");
    lua_pushinteger(L, (lua_Integer)R.opts.seed);
    lua_call(L, 1, 0);
    lua_pop(L, 1);
  }
  return 0;
}

/* One turn of the main loop before it waits: the signals, task.exit, and
   the next line of piped input. Returns false when the loop ends. *idle
   tells whether the prompt is free (no foreground chunk runs). */
static bool before_wait(bool *idle) {
  if (luna__interrupted()) { /* SIGTERM, SIGHUP: as Ctrl-D (their status later) */
    R.quit = true;
    return false;
  }
  if (luna__quit_requested())
    luna__repl_report_tasks(stderr, "SIGQUIT");
  if (luna__take_ctrl_c())
    luna__repl_handle_ctrl_c();
  if (luna__take_resize() && R.tty)
    luna__edit_resize();
  luna__repl_check_exit();
  if (R.quit)
    return false;
  *idle = luna__repl_foreground_settled();
  return true;
}

static void main_loop(void) {
  luna__repl_pace();
  luna__repl_show_prompt();
  while (!R.quit) {
    bool idle;
    if (!before_wait(&idle))
      break;
    if (idle && !R.tty) {
      if (luna__repl_next_plain_line())
        continue; /* one line at a time, checking the chunk in between */
      if (luna__repl_input_eof()) {
        luna__repl_handle_line(NULL); /* as Ctrl-D, with task.exit()'s status */
        input_ended = true;
        break;
      }
    }
    if (idle)
      luna__repl_show_prompt();
    else
      luna__repl_hide_prompt();

    /* Wait for input, a signal, or the next frame, after giving the time
       to the paced collector. */
    luna__repl_idle_gc();
    struct pollfd pfd = {STDIN_FILENO, POLLIN, 0};
    bool want_input = idle && !luna__repl_input_eof();
    int n = poll(&pfd, want_input ? 1 : 0, luna__repl_poll_timeout());
    if (R.tty && n > 0 && (pfd.revents & POLLIN) == 0 &&
        (pfd.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) {
      R.quit = true; /* the terminal hung up, nothing left to read: as Ctrl-D */
      break;         /* (piped input ends through read_plain, which keeps a last
                        line without a newline) */
    }
    if (n > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      if (R.tty)
        luna__repl_read_key(); /* after a line, the prompt comes back once no chunk runs */
      else
        luna__repl_read_plain();
      continue; /* more input may be waiting; the frame check comes again */
    }
    luna__repl_frame_if_due();
  }
}

/* The loop and the Lua state of the session, set up; returns -1 to go on,
   else the exit status (after saying why on stderr). */
static int open_session(void) {
  luna_config config = {0};
  config.fixed_dt_ns = R.opts.fixed_dt_ns;
  if (luna_loop_new(&config, &R.loop) < 0) {
    fprintf(stderr, LUNA_PROGNAME ": cannot create the loop\n");
    return LUNA_EXIT_ERROR;
  }
  luna_loop_set_time_scale(R.loop, R.opts.time_scale);
  luna__cli_pace_gc(R.loop);
  luna__repl_frames_open();
  R.L = luaL_newstate();
  if (R.L != NULL) {
    luaL_openlibs(R.L); /* before attaching: the module's Lua code uses them */
    luna_lua_guard_interrupts(R.L); /* Ctrl-C reaches handlers, coroutines */
  }
  if (R.L == NULL || luna_lua_attach(R.L, R.loop) < 0) {
    fprintf(stderr, LUNA_PROGNAME ": cannot create the Lua state\n");
    if (R.L != NULL)
      lua_close(R.L);
    R.L = NULL;
    luna_loop_free(R.loop);
    return LUNA_EXIT_ERROR;
  }
  lua_pushcfunction(R.L, setup_state);
  if (lua_pcall(R.L, 0, 0, 0) != LUA_OK) {
    fprintf(stderr, LUNA_PROGNAME ": %s\n", lua_tostring(R.L, -1));
    return LUNA_EXIT_ERROR;
  }
  /* The REPL's observer is installed for good; a trace adds its own. */
  if (!luna__repl_observe()) {
    fprintf(stderr, LUNA_PROGNAME ": cannot observe the Lua state\n");
    return LUNA_EXIT_ERROR;
  }
  if (R.opts.trace != NULL) {
    luna__repl_use_trace(luna__trace_open(R.opts.trace));
    if (R.trace == NULL)
      return LUNA_EXIT_USAGE;
  }
  return -1;
}

/* Runs the session on a prepared state; returns its exit status. */
static int run_session(void) {
  if (R.tty && !luna__repl_prompt_open())
    fprintf(stderr, LUNA_PROGNAME ": cannot set up line editing; reading plain lines\n");
  if (R.tty) {
    printf(LUNA_PROGNAME " %s (%s): each chunk runs as a task; :help for commands\n",
           LUNA_VERSION_STRING, LUA_RELEASE);
  }
  luna__signals_install(luna__repl_on_ctrl_c); /* Ctrl-C is the REPL's; SIGTERM, SIGHUP stop */
  main_loop();
  luna__repl_hide_prompt();
  if (R.tty && !luna__repl_at_line_start())
    fputs("\n", stdout);
  if (R.tty)
    fputs("\n", stdout);
  fflush(stdout);
  /* Ctrl-D: every task is cancelled, in creation order, its to-be-closed
     variables running (their output is plain: no prompt is shown now). */
  luna__repl_call_begin();
  luna_lua_cancel_all(R.L);
  luna__repl_call_end();
  /* A stop signal, also one that came after the loop ended: a hang-up
     wakes poll (POLLHUP, above) before its SIGHUP is delivered. */
  if (luna__interrupted())
    R.status = luna__interrupt_status();
  luna__signals_restore();
  luna__repl_prompt_close();
  int status = R.status;
  /* Replayed input ends as a script does (lunaloop run, stock lua): 1 when
     an error was reported or a chunk did not compile, so a failing replay
     fails its caller. */
  if (input_ended && status == LUNA_EXIT_OK &&
      (luna_lua_error_count(R.L) > 0 || R.syntax_errors > 0))
    status = LUNA_EXIT_ERROR;
  return status;
}

int luna__cli_repl(int argc, char **argv, int first) {
  int status = luna__repl_parse_options(argc - first, argv + first, &R.opts);
  if (status >= 0)
    return status;
  R.tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  status = open_session();
  if (status < 0)
    status = run_session();
  if (R.L == NULL)
    return status; /* nothing was set up */
  if (R.trace != NULL) {
    if (!luna__trace_close(R.trace) && status == LUNA_EXIT_OK)
      status = LUNA_EXIT_ERROR;
    luna__repl_use_trace(NULL);
  }
  luna__repl_drop_pending();
  luna__repl_input_close();
  lua_close(R.L);
  luna__cli_free_loop(R.loop);
  return status;
}
