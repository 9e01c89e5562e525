/*
** repl.h: what the files of `lunaloop repl` share; private to them (the
** rest of the program sees luna__cli_repl in cli.h). Each file owns one
** part of the REPL and the state of that part; this header holds the
** session state they all read, and the functions one part offers the
** others, grouped by the file that defines them. It includes cli.h and the
** public headers only.
*/
#ifndef LUNA_CLI_REPL_H
#define LUNA_CLI_REPL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <lua.h>

#include "cli.h"

/* The session. The REPL is one per process (the signal handlers have no
   user data), so this is a process-wide singleton, defined in repl.c. */
typedef struct luna_repl {
  lua_State *L;
  luna_loop *loop;
  luna_run_options opts;  /* opts.frame_dt_ns follows :hz */
  bool paused;            /* :pause; :step pauses too */
  bool tty;               /* stdin and stdout are terminals: libedit is used */
  bool quit;              /* the main loop ends */
  int status;             /* exit status once quit */
  uint64_t syntax_errors; /* chunks that did not compile (printed) */
  luna_trace *trace;      /* --trace or :trace on, or NULL */
} luna_repl;

extern luna_repl luna__repl;
/* The files of the REPL name the session R. */
#define R luna__repl

/* ---- repl_output.c: output that keeps the typed line intact -------------- */

/* Erases the prompt and the typed line (libedit keeps the text), so output
   can be written on a clean line; luna__repl_out_end flushes and redraws
   them below it. */
void luna__repl_out_begin(void);
void luna__repl_out_end(void);
/* Writes a formatted line of at most 1023 bytes to f between out_begin and
   out_end. */
void luna__repl_printf(FILE *f, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The task report (luna__report_tasks) on f, between out_begin and out_end. */
void luna__repl_report_tasks(FILE *f, const char *why);
/* The terminal echoed a ^C (called from the Ctrl-C handler: it only sets a
   flag); luna__repl_after_echo then starts the next output on a new line. */
void luna__repl_echoed_ctrl_c(void);
void luna__repl_after_echo(void);
/* Whether the last output ended a line; input that ended a line sets it. */
bool luna__repl_at_line_start(void);
void luna__repl_set_line_start(void);
/* Routes print, io.write (to stdout) and the error reports (task.on_error)
   of L between out_begin and out_end. Raises on failure. */
void luna__repl_route_output(lua_State *L);
/* Pushes the REPL's print (a chunk's results are printed with it, whatever
   the global `print` is now). */
void luna__repl_push_print(lua_State *L);

/* ---- repl_lua.c: the REPL's commands that are written in Lua -------------- */

/* Loads the helpers into L (the global `task` must be set). Raises on
   failure. */
void luna__repl_open_helpers(lua_State *L);
/* Calls helper `name` with the nargs arguments on top of R.L, protected
   (luna__repl_call_lua); leaves its one result, or nil after printing the
   error. */
void luna__repl_call_helper(const char *name, int nargs);
/* Pushes the results of the method `name` of the task at task_idx called
   with no argument (unprotected: the binding's methods do not raise). */
void luna__repl_call_method(int task_idx, const char *name, int nresults);

/* ---- repl_interrupt.c: what runs now, and what Ctrl-C interrupts --------- */

/* The Ctrl-C handler given to luna__signals_install (signal context). */
void luna__repl_on_ctrl_c(void);
/* Installs the REPL's observer on R.L; false when it cannot. */
bool luna__repl_observe(void);
/* Traces from now on into tr (NULL: stops; the caller closes the old
   trace first, which removes its observer). A trace that cannot observe
   the state is closed, after saying so, and R.trace stays NULL. */
void luna__repl_use_trace(luna_trace *tr);
/* Brackets code that the REPL runs on the user's behalf (a chunk starting,
   the final cancellation): Ctrl-C interrupts the tasks it runs. */
void luna__repl_call_begin(void);
void luna__repl_call_end(void);
/* lua_pcall on R.L for the REPL's own calls into Lua: Ctrl-C also
   interrupts what runs on the REPL's own thread. */
int luna__repl_call_lua(int nargs, int nresults);
/* Brackets one frame; frame_end returns the id of the task a second
   Ctrl-C interrupted because it kept the frame from ending, or 0. */
void luna__repl_frame_begin(void);
uint64_t luna__repl_frame_end(void);
/* The foreground chunk is forgotten: it no longer counts as resumed. */
void luna__repl_forget_resumed(void);
/* The main loop's answer to a Ctrl-C: cancels the foreground chunk, or
   forgets the line being typed (and an unfinished chunk). */
void luna__repl_handle_ctrl_c(void);

/* ---- repl_prompt.c: the prompt and the history ----------------------------- */

/* Sets up line editing with the history file; false when libedit cannot
   (R.tty is then cleared). luna__repl_prompt_close saves the history. */
bool luna__repl_prompt_open(void);
void luna__repl_prompt_close(void);
/* A new line to edit under the prompt in force (on a terminal, unless
   quitting or editing already); hide: no line is edited while a chunk runs,
   so the terminal echoes what is typed (^C) itself. */
void luna__repl_show_prompt(void);
void luna__repl_hide_prompt(void);
/* The prompt of the next line: the continuation prompt while a chunk is
   unfinished. */
void luna__repl_continue_prompt(bool unfinished);
/* Adds a line (or chunk) to the history, on a terminal. */
void luna__repl_remember(const char *line);

/* ---- repl_frames.c: frame pacing ------------------------------------------- */

/* Sets up the loop's clocks for the options (--fast: virtual realtime). */
void luna__repl_frames_open(void);
/* Restarts the real-time grid at R.opts.frame_dt_ns (after :resume, :hz). */
void luna__repl_pace(void);
/* How long poll may wait for input, in ms (-1 while paused: forever). */
int luna__repl_poll_timeout(void);
/* Spends the time before the next frame on the paced collector
   (luna_lua_gc_idle), unless the frames are paused. */
void luna__repl_idle_gc(void);
/* Runs the next frame if it is due (and not paused). */
void luna__repl_frame_if_due(void);
/* Runs one frame with this dt, reports what a Ctrl-C hit in it, and looks
   for task.exit. */
void luna__repl_run_frame(luna_ns dt);
/* Quits with task.exit's status once a task called it. */
void luna__repl_check_exit(void);

/* ---- repl_chunk.c: chunks of input and the foreground task ---------------- */

/* Adds a line of Lua to the pending chunk and runs the chunk once it is
   complete. */
void luna__repl_add_line(const char *line);
/* True while an unfinished chunk waits for its next line. */
bool luna__repl_chunk_pending(void);
/* Forgets the unfinished chunk (the prompt goes back to the first one). */
void luna__repl_drop_pending(void);
/* Input ended: an unfinished chunk's syntax error is printed, as the stock
   `lua` prints it. */
void luna__repl_end_chunks(void);
/* `:bg CODE`: runs one complete line in the background. */
void luna__repl_run_background(const char *code);
/* `:load FILE [&]`: runs a Lua file as a task (arg may be changed); false
   when arg names no file (a usage error, for the caller to print). */
bool luna__repl_run_file(char *arg);
/* True when no foreground chunk holds the prompt (one that settled is
   finished now: its results printed). */
bool luna__repl_foreground_settled(void);
/* Cancels the foreground chunk; false when there is none. */
bool luna__repl_cancel_foreground(void);
/* The id of the foreground chunk's task, or 0. */
uint64_t luna__repl_fg_id(void);
/* From the observer: a task was created (before it first runs). */
void luna__repl_task_created(uint64_t id);

/* ---- repl_commands.c: the `:` commands -------------------------------------- */

/* Runs the command line (it starts with ':'; it may be changed). */
void luna__repl_command(char *line);

/* ---- repl_input.c: lines from the terminal or a pipe ----------------------- */

/* Terminal input: one key for the line editor. */
void luna__repl_read_key(void);
/* Non-tty input: reads what is there (the end of input is noted). */
void luna__repl_read_plain(void);
/* Hands over the next complete line of non-tty input; true if there was
   one. */
bool luna__repl_next_plain_line(void);
/* True once non-tty input ended (and all of it was read). */
bool luna__repl_input_eof(void);
/* A whole line of input, or NULL at the end of input; may be changed. */
void luna__repl_handle_line(char *line);
/* Frees what input keeps. */
void luna__repl_input_close(void);

#endif
