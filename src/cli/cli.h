/*
** cli.h: what the files of the lunaloop program share. The program is a thin
** host: it parses options, drives a luna_loop frame by frame and lets the Lua
** binding do the scheduling. Nothing here is public API.
*/
#ifndef LUNA_CLI_H
#define LUNA_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lunaloop.h"
#include "lunaloop_lua.h"

/* Exit statuses of the program (the --help text lists them).
   task.exit(code) may give any other code. */
enum {
  LUNA_EXIT_OK = 0,          /* everything finished, no error reported */
  LUNA_EXIT_ERROR = 1,       /* a task error was reported */
  LUNA_EXIT_USAGE = 2,       /* usage error, or the script failed to load */
  LUNA_EXIT_STUCK = LUNA_LUA_EXIT_STUCK /* 3: no task could make progress any more */
};

/* The program name used in every message. */
#define LUNA_PROGNAME "lunaloop"

/* ---- main.c ---------------------------------------------------------------- */

/* Prints the --help text (every command and option; the man page is made
   from it) to `out`. */
void luna__cli_usage(FILE *out);

/* ---- values.c: the values of options and commands ---------------------- */

/* Values, shared by the options of run, repl and mods and by
   the REPL's commands, so that `--hz` and `:hz` accept the same range and
   refuse with the same text. Each parses the whole string and returns
   false for anything else: a finite double; a rate in Hz in the range of
   LUNA__CLI_EXPECT_RATE as a period in ns (rounded), and the rate itself
   in *hz unless hz is NULL; a time scale from 0 to LUNA_TIME_SCALE_MAX; a
   decimal integer (a '-' only when is_signed). */
bool luna__cli_parse_double(const char *s, double *out);
bool luna__cli_parse_rate(const char *s, double *hz, luna_ns *period);
bool luna__cli_parse_time_scale(const char *s, double *out);
bool luna__cli_parse_integer(const char *s, bool is_signed, long long *out);
/* BYTES with an optional k, m or g suffix (powers of 1024), > 0. */
bool luna__cli_parse_bytes(const char *s, size_t *out);

/* What each parser expects, as a bad value's message says it. The rate's
   range keeps every period from 1 ns to 1e18 ns, which the clocks count. */
#define LUNA__CLI_EXPECT_RATE "a rate in Hz from 1e-9 to 1e9"
#define LUNA__CLI_EXPECT_TIME_SCALE "a number from 0 to 1e6" /* LUNA_TIME_SCALE_MAX */
#define LUNA__CLI_EXPECT_COUNT "a whole number >= 0"
#define LUNA__CLI_EXPECT_INTEGER "an integer"

/* The message of a bad value: the value, the option or command with its
   prefix ("--" or ":") and name, and what was expected (the REPL prints
   it as it is; luna__cli_bad_value prints it as a usage error). */
#define LUNA__CLI_BAD_VALUE "bad value '%s' for %s%s (expected %s)"

/* Reports LUNA__CLI_BAD_VALUE for the option --NAME as a usage error and
   returns LUNA_EXIT_USAGE. */
int luna__cli_bad_value(const char *option, const char *value, const char *expected);

/* Prints "lunaloop: <message>" and a hint to --help on stderr and returns
   LUNA_EXIT_USAGE, so callers can `return luna__cli_usage_error(...)`. */
int luna__cli_usage_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* ---- options.c: the options of `lunaloop run` ---------------------------- */

typedef struct luna_run_options {
  bool fast;              /* virtual time: frames back to back, dt = 1/hz */
  luna_ns frame_dt_ns;    /* round(1e9 / hz): the frame period */
  luna_ns fixed_dt_ns;    /* round(1e9 / fixed_hz): the fixed step */
  bool has_frames;        /* --frames given */
  uint64_t frames;        /* stop after this many frames */
  double time_scale;      /* initial time scale, >= 0 */
  bool has_seed;          /* --seed given: call math.randomseed(seed) */
  long long seed;
  const char *trace;      /* --trace FILE: a Chrome trace of the run, or NULL */
  bool roblox;            /* --roblox: the global task is require "lunaloop.roblox" */
  bool has_sim;           /* --sim-tick-rate given: a simulation is attached (task.sim) */
  luna_ns sim_tick_ns;    /* its tick, round(1e9 / rate) */
  int sim_check;          /* --sim-check D: the sync-test's check distance, 0: off */
  int sim_history;        /* --sim-history N: ticks kept, 0: the default (64) */
  int script;             /* index of SCRIPT in the argv given to the parser */
} luna_run_options;

/* The frame-driving options that run, repl and mods share: their getopt
   values (a command's own options start at LUNA__OPT_OWN) and their
   entries for a getopt_long table. */
enum {
  LUNA__OPT_FAST = 256, /* long-only options start past every char value */
  LUNA__OPT_HZ,
  LUNA__OPT_FIXED_HZ,
  LUNA__OPT_FRAMES,
  LUNA__OPT_TIME_SCALE,
  LUNA__OPT_SEED,
  LUNA__OPT_OWN
};
#define LUNA__CLI_FRAME_OPTIONS                                                \
  {"fast", no_argument, NULL, LUNA__OPT_FAST},                                 \
  {"hz", required_argument, NULL, LUNA__OPT_HZ},                               \
  {"fixed-hz", required_argument, NULL, LUNA__OPT_FIXED_HZ},                   \
  {"frames", required_argument, NULL, LUNA__OPT_FRAMES},                       \
  {"time-scale", required_argument, NULL, LUNA__OPT_TIME_SCALE},               \
  {"seed", required_argument, NULL, LUNA__OPT_SEED}

/* The defaults: 60 Hz frames, 50 Hz fixed steps, time scale 1. */
void luna__cli_run_defaults(luna_run_options *opts);

/* Applies the shared option `c` (a LUNA__OPT_* below LUNA__OPT_OWN, whose
   long name is `name`) with its value `arg`. Returns -1 when applied, or
   LUNA_EXIT_USAGE after reporting a bad value. */
int luna__cli_frame_option(int c, const char *name, const char *arg, luna_run_options *opts);

/* Reports what getopt_long refused (c is ':' for a missing value, else an
   unknown option) and returns LUNA_EXIT_USAGE. */
int luna__cli_getopt_error(int c, char **argv);

/* Parses the options of `run` from argv[1..argc-1] (argv[0] is the word
   "run") into *opts. Returns -1 when the run should go on, or the exit status
   to end with at once: 0 after --help, LUNA_EXIT_USAGE after a usage error
   (already reported on stderr). */
int luna__run_parse_options(int argc, char **argv, luna_run_options *opts);

/* The same for `repl` (argv[0] is the word "repl"): the options of run but
   --frames, and no SCRIPT (script is 0). */
int luna__repl_parse_options(int argc, char **argv, luna_run_options *opts);

/* ---- run.c ------------------------------------------------------------------- */

/* `lunaloop run [options] SCRIPT [ARGS...]`. argv[first] is the word "run";
   the words before it become the negative indices of the global `arg`.
   Returns the exit status. */
int luna__cli_run(int argc, char **argv, int first);

/* ---- script.c: the Lua state a script runs in ------------------------------- */

struct lua_State;

/* Prepares L for a script: the global `task` (require "lunaloop"), the
   global `arg` as the stock `lua` sets it (arg[0] = argv[script]), the
   --seed, then loads the script and pushes the chunk followed by its
   arguments (argv[script+1..argc-1]). Returns how many arguments were pushed
   after the chunk, or -1 after printing the error on stderr; *status then
   holds the exit status (LUNA_EXIT_USAGE for a script that fails to load). */
int luna__script_prepare(struct lua_State *L, const luna_run_options *opts,
                         int argc, char **argv, int script, int *status);

/* ---- signals.c: every signal the program takes ---------------------------- */

/* Installs the handlers of the stop signals: SIGTERM, SIGHUP and, when
   on_ctrl_c is NULL (run, mods), SIGINT. The first one sets the
   interrupted flag, stops the Lua code running now (luna_lua_interrupt)
   and restores the default action of all of them, so a second one kills
   the process at once. SIGHUP stays ignored when it was ignored at start
   (nohup). Also SIGQUIT (Ctrl-\), which only asks for the report of
   luna__report_tasks.
   With on_ctrl_c (the REPL), SIGINT does not stop: its handler calls
   on_ctrl_c (in the signal handler: async-signal-safe code only), then
   notes the press for luna__take_ctrl_c; and SIGWINCH is noted for
   luna__take_resize. */
void luna__signals_install(void (*on_ctrl_c)(void));

/* Restores the actions that were in place before install. */
void luna__signals_restore(void);

/* True once a stop signal came. */
bool luna__interrupted(void);

/* 128 + the number of the stop signal that came (130 for Ctrl-C, 143 for
   SIGTERM, 129 for SIGHUP), as shells report it; 0 when none came. */
int luna__interrupt_status(void);

/* True once after each SIGQUIT (it clears the request). */
bool luna__quit_requested(void);

/* With a Ctrl-C handler installed: true while a Ctrl-C press is noted and
   not taken yet; luna__take_ctrl_c takes it (true once per noted press,
   however many came before). */
bool luna__ctrl_c_pending(void);
bool luna__take_ctrl_c(void);

/* True once after SIGWINCH (a Ctrl-C handler installed it). */
bool luna__take_resize(void);

/* ---- report.c: what the tasks wait on ------------------------------------ */

/* Writes "lunaloop: tasks at frame N (<why>):" ("...frame N:" when why is
   NULL) and then one line per live task of L (what it waits on, and
   where: luna_lua_write_tasks), or "no tasks", to out. */
void luna__report_tasks(struct lua_State *L, FILE *out, const char *why);
/* One line per live task of L after `indent`, or "no tasks" (the list of
   luna__report_tasks; `mods` writes one per mod). */
void luna__write_task_list(struct lua_State *L, FILE *out, const char *indent);

/* ---- trace.c: --trace FILE, a Chrome trace event file ---------------------- */

typedef struct luna_trace luna_trace;

/* Creates FILE and writes the metadata (the process, one track per timing);
   NULL after printing why on stderr. */
luna_trace *luna__trace_open(const char *path);
const char *luna__trace_path(const luna_trace *tr);
/* Traces every task resume of L from now on (adds an observer to L, which
   luna__trace_close removes: close the trace before the state); 0 or a
   LUNA_E* code. */
int luna__trace_attach(luna_trace *tr, struct lua_State *L);
/* The frame marker and the count of live tasks: call right before running
   frame number `frame`. */
void luna__trace_frame(luna_trace *tr, uint64_t frame, size_t tasks);
/* The frame's slice, its budget deferrals and the counters: call right
   after the frame luna__trace_frame announced. */
void luna__trace_frame_end(luna_trace *tr);
/* Ends the JSON array and closes the file (NULL is ignored). Returns false,
   after saying so on stderr, when anything could not be written. */
bool luna__trace_close(luna_trace *tr);

/* ---- lineedit.c: line editing on a terminal, for the REPL ------------------ */

/* Sets up libedit on stdin and stdout (both terminals): emacs keys,
   ~/.editrc (its lines may start with "lunaloop:"), and the history, loaded
   from history_file when it is not NULL. Also sets LC_CTYPE from the
   environment, which decides how keys are decoded and lines encoded.
   False when libedit cannot be set up; the other functions then do
   nothing. */
bool luna__edit_open(const char *history_file);

/* Stops editing and saves the history to history_file (unless NULL). */
void luna__edit_close(const char *history_file);

/* Starts editing a new, empty line: the terminal goes raw and the prompt
   is drawn. `prompt` must stay valid while the line is edited. Does
   nothing while a line is edited already. */
void luna__edit_start(const char *prompt);

/* Stops editing: the terminal is back in its own mode (it echoes what is
   typed itself, ^C included). */
void luna__edit_stop(void);

/* True between luna__edit_start and the end of the line (or stop). */
bool luna__edit_editing(void);

/* Reads one key from stdin (call it when poll says stdin is readable; an
   escape sequence counts as one key) and edits it into the line. Returns
   1 when Enter ended the line: *line is then the line without its newline,
   malloc'd, in the locale's encoding (NULL when memory is short); -1 for
   Ctrl-D on an empty line, or a terminal with nothing to read (it hung
   up): the end of input; 0 otherwise, also for an edit that leaves the
   line empty. After 1 or -1 the editing has stopped. */
int luna__edit_key(char **line);

/* Erases the prompt and the line from the screen (the text is kept), so
   output can be written on a clean line; luna__edit_redraw draws them
   again, below that output, with the cursor where it was. */
void luna__edit_erase(void);
void luna__edit_redraw(void);

/* Call after SIGWINCH: the terminal's width changed. */
void luna__edit_resize(void);

/* Adds a line (or a chunk of lines) to the history. */
void luna__edit_remember(const char *text);

/* ---- repl.c: `lunaloop repl` ----------------------------------------------- */

/* `lunaloop repl [options]`: a live loop with a prompt (its files share
   the private repl.h); returns the exit status (0 after Ctrl-D or :quit, task.exit's code, 2 for a usage error). */
int luna__cli_repl(int argc, char **argv, int first);

/* ---- mods.c: `lunaloop mods` ------------------------------------------------- */

/* `lunaloop mods [options] DIR`: loads every mod in DIR (docs/modding.md)
   and drives frames until no mod has work left; returns the exit status. */
int luna__cli_mods(int argc, char **argv, int first);

/* The collector pacing every command starts with (docs/frame-time.md,
   "Choosing the settings"): incremental steps in the time the driver would
   sleep before each frame, with Lua's automatic collector left running, so
   a script or mod that sets nothing still has part of its collector's
   work moved out of its frames. Under --fast no frame leaves spare time,
   so nothing changes there. A script's task.gc replaces it for its state. */
static inline void luna__cli_pace_gc(luna_loop *loop) {
  luna_lua_gc_options o = {0};
  o.idle = true;
  (void)luna_lua_gc_set_loop(loop, &o); /* out of memory: the run goes unpaced */
}

/* Frees a loop whose Lua state was closed, after delivering what the
   state's teardown posted to it: a worker pool closed with calls pending
   posts their completions (each holds its promise and the job), and
   luna_loop_free discards posts without calling them (lunaloop/loop.h:
   run the loop until they are delivered before freeing). With no state
   left, those deliveries only release what they hold. At most a few
   frames of dt 0: a post made while a frame runs is delivered by the
   next. */
static inline void luna__cli_free_loop(luna_loop *loop) {
  int i;
  for (i = 0; i < 4 && !luna_loop_idle(loop); i++)
    (void)luna_loop_frame(loop, 0.0);
  luna_loop_free(loop);
}

#endif
