/*
** repl_commands.c: the REPL's `:` commands. One table names each command,
** its aliases, its arguments and its help; the dispatcher, the usage lines
** and `:help` all read it, so a command is added in one place. It owns no
** state of its own (the commands change the session's). Includes repl.h
** (cli.h), lunaloop_lua.h and Lua.
*/
#include <stdlib.h>
#include <string.h>

#include <lua.h>

#include "lunaloop_lua.h"
#include "repl.h"

typedef struct command {
  const char *name;
  const char *aliases; /* other names, each followed by a space, or "" */
  const char *args;    /* what follows the name in a usage line, or "" */
  const char *help;    /* its line in :help; "\n" starts an indented line */
  void (*run)(const struct command *cmd, char *arg);
} command;

/* The paragraph above the commands in :help. */
static const char help_intro[] =
  "Type Lua: each chunk runs as a task, so it may await (task.delay(1)).\n"
  "Expressions print their values. A trailing & runs the chunk in the\n"
  "background. Ctrl-C cancels the running chunk (or clears the line) and\n"
  "leaves the other tasks and callbacks alone; a second Ctrl-C interrupts\n"
  "a frame that does not end. Ctrl-D exits after cancelling every task.\n";

/* The column of the help text after each synopsis: past the indent, the
   longest synopsis (":trace on FILE | off", 20 characters) and a blank. */
#define HELP_COLUMN 24

static void usage(const command *cmd) {
  luna__repl_printf(stderr, "usage: :%s %s\n", cmd->name, cmd->args);
}

/* A value the command refused: the options' message (cli.h), so `:hz` and
   `--hz` say the same. */
static void bad_value(const command *cmd, const char *arg, const char *expected) {
  luna__repl_printf(stderr, LUNA__CLI_BAD_VALUE "\n", arg, ":", cmd->name, expected);
}

static void report_frame(const char *what) {
  luna__repl_printf(stdout, "%s at frame %llu\n", what,
                    (unsigned long long)luna_loop_frame_count(R.loop));
}

static void cmd_help(const command *cmd, char *arg);

static void cmd_quit(const command *cmd, char *arg) {
  (void)cmd, (void)arg;
  R.quit = true;
}

static void cmd_tasks(const command *cmd, char *arg) {
  (void)cmd, (void)arg;
  luna__repl_call_helper("tasks", 0);
  if (lua_isstring(R.L, -1))
    luna__repl_printf(stdout, "%s\n", lua_tostring(R.L, -1));
  lua_pop(R.L, 1);
}

static void cmd_waits(const command *cmd, char *arg) {
  (void)cmd, (void)arg;
  luna__repl_report_tasks(stdout, NULL);
}

static void cmd_pause(const command *cmd, char *arg) {
  (void)cmd, (void)arg;
  R.paused = true;
  report_frame("paused");
}

static void cmd_resume(const command *cmd, char *arg) {
  (void)cmd, (void)arg;
  if (R.paused) {
    R.paused = false;
    luna__repl_pace();
  }
  report_frame("running");
}

static void cmd_step(const command *cmd, char *arg) {
  long long count = 1;
  if (*arg != '\0' && !luna__cli_parse_integer(arg, false, &count)) {
    bad_value(cmd, arg, LUNA__CLI_EXPECT_COUNT);
    return;
  }
  R.paused = true;
  long long done = 0;
  /* Ctrl-C stops the steps after the frame that runs (repl_interrupt.c). */
  while (done < count && !R.quit && !luna__ctrl_c_pending() && !luna__interrupted()) {
    luna__repl_run_frame(R.opts.frame_dt_ns);
    done++;
  }
  if (luna__take_ctrl_c())
    luna__repl_printf(stdout, "stopped after %lld of %lld frames\n", done, count);
  report_frame("paused");
}

static void cmd_timescale(const command *cmd, char *arg) {
  double x;
  if (*arg == '\0')
    luna__repl_printf(stdout, "time scale %g\n", luna_loop_time_scale(R.loop));
  else if (!luna__cli_parse_time_scale(arg, &x) || luna_loop_set_time_scale(R.loop, x) != 0)
    bad_value(cmd, arg, LUNA__CLI_EXPECT_TIME_SCALE);
  else
    luna__repl_printf(stdout, "time scale %g\n", x);
}

static void cmd_hz(const command *cmd, char *arg) {
  double hz;
  luna_ns period;
  if (*arg == '\0') {
    usage(cmd);
    return;
  }
  if (!luna__cli_parse_rate(arg, &hz, &period)) {
    bad_value(cmd, arg, LUNA__CLI_EXPECT_RATE);
    return;
  }
  R.opts.frame_dt_ns = period;
  luna__repl_pace();
  luna__repl_printf(stdout, "%g frames per second\n", hz);
}

static void cmd_cancel(const command *cmd, char *arg) {
  long long id;
  if (*arg == '\0') {
    usage(cmd);
    return;
  }
  if (!luna__cli_parse_integer(arg, false, &id)) {
    bad_value(cmd, arg, LUNA__CLI_EXPECT_COUNT);
    return;
  }
  lua_pushinteger(R.L, id);
  luna__repl_call_helper("find", 1);
  if (lua_isnil(R.L, -1)) {
    luna__repl_printf(stderr, "no live task %lld\n", id);
  } else {
    lua_getfield(R.L, -1, "cancel");
    lua_pushvalue(R.L, -2);
    if (luna__repl_call_lua(1, 0) != LUA_OK) {
      luna__repl_printf(stderr, "%s\n", lua_tostring(R.L, -1));
      lua_pop(R.L, 1);
    } else {
      luna__repl_printf(stdout, "cancelled %lld\n", id);
    }
  }
  lua_pop(R.L, 1);
}

/* Bars of the :frames chart are at most this many characters wide: with
   the value before them a row fits in 60 columns. */
#define FRAMES_BAR 40
/* Rows :frames draws without an argument. */
#define FRAMES_DEFAULT 20

/* :frames [N]: the cost of the last N profiled frames (luna_loop_frame_costs
   with timing -1), oldest first, one row each: the milliseconds and a bar
   scaled to the longest frame shown. */
static void cmd_frames(const command *cmd, char *arg) {
  long long want = FRAMES_DEFAULT;
  luna_ns costs[LUNA_FRAME_HISTORY], longest = 0;
  char bars[FRAMES_BAR];
  size_t n;
  if (*arg != '\0' && (!luna__cli_parse_integer(arg, false, &want) || want < 1)) {
    bad_value(cmd, arg, LUNA__CLI_EXPECT_COUNT);
    return;
  }
  if (want > LUNA_FRAME_HISTORY)
    want = LUNA_FRAME_HISTORY;
  n = luna_loop_frame_costs(R.loop, -1, costs, (size_t)want);
  if (n == 0) {
    luna__repl_printf(stdout, "no profiled frames (task.debug{profile = true} records them)\n");
    return;
  }
  for (size_t i = 0; i < n; i++)
    if (costs[i] > longest)
      longest = costs[i];
  memset(bars, '#', sizeof bars);
  luna__repl_out_begin();
  printf("last %zu profiled frames, ms of CPU time, oldest first:\n", n);
  for (size_t i = 0; i < n; i++) {
    /* Rounded up, so a frame that cost anything has a bar. */
    int bar = longest > 0 ? (int)((costs[i] * FRAMES_BAR + longest - 1) / longest) : 0;
    printf("  %9.3f |%.*s\n", (double)costs[i] / 1e6, bar, bars);
  }
  luna__repl_set_line_start();
  luna__repl_out_end();
}

static void cmd_load(const command *cmd, char *arg) {
  if (!luna__repl_run_file(arg))
    usage(cmd);
}

static void cmd_bg(const command *cmd, char *arg) {
  (void)cmd;
  luna__repl_run_background(arg);
}

static void cmd_trace(const command *cmd, char *arg) {
  char *mode = strtok(arg, " \t");
  char *file = strtok(NULL, " \t");
  if (mode != NULL && strcmp(mode, "on") == 0 && file != NULL) {
    if (R.trace != NULL) {
      luna__trace_close(R.trace);
      luna__repl_use_trace(NULL);
    }
    luna__repl_use_trace(luna__trace_open(file));
    if (R.trace != NULL)
      luna__repl_printf(stdout, "tracing to %s\n", file);
  } else if (mode != NULL && strcmp(mode, "off") == 0) {
    if (R.trace == NULL) {
      luna__repl_printf(stderr, "not tracing\n");
      return;
    }
    char *path = strdup(luna__trace_path(R.trace));
    if (luna__trace_close(R.trace))
      luna__repl_printf(stdout, "trace written to %s\n", path ? path : "the file");
    luna__repl_use_trace(NULL);
    free(path);
  } else {
    usage(cmd);
  }
}

/* Every command, in the order :help lists them. */
static const command commands[] = {
  {"tasks", "", "", "live tasks: id, name, status, wait, timing, due, age", cmd_tasks},
  {"waits", "", "", "what each live task waits on, and the line it waits at\n"
                    "(also Ctrl-\\, on stderr)", cmd_waits},
  {"pause", "", "", "stop the frames", cmd_pause},
  {"resume", "", "", "restart the frames", cmd_resume},
  {"step", "", "[N]", "run N frames now (default 1), pausing first;\n"
                      "Ctrl-C stops it after the current frame", cmd_step},
  {"timescale", "", "[X]", "show or set the time scale\n"
                           "(X: " LUNA__CLI_EXPECT_TIME_SCALE ")", cmd_timescale},
  {"hz", "", "N", "set the frame rate (N: " LUNA__CLI_EXPECT_RATE ")", cmd_hz},
  {"frames", "", "[N]", "chart the cost of the last N profiled frames (default\n"
                        "20, at most 128; task.debug{profile = true} records)", cmd_frames},
  {"cancel", "", "ID", "cancel the task with that id (see :tasks)", cmd_cancel},
  {"load", "", "FILE [&]", "run a Lua file as a task", cmd_load},
  {"bg", "", "CODE", "run CODE in the background", cmd_bg},
  {"trace", "", "on FILE | off", "on: write a Chrome trace (Perfetto) from now on;\n"
                                 "off: stop tracing and close the file", cmd_trace},
  {"help", "h ? ", "", "this text", cmd_help},
  {"quit", "q ", "", "cancel every task and exit (as Ctrl-D)", cmd_quit},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* Writes one command's lines of :help to out: its synopsis ("  :name
   ARGS, :alias") and its help text from HELP_COLUMN on. */
static void help_lines(const command *cmd, FILE *out) {
  char synopsis[HELP_COLUMN];
  int n = snprintf(synopsis, sizeof synopsis, ":%s%s%s", cmd->name,
                   cmd->args[0] != '\0' ? " " : "", cmd->args);
  for (const char *a = cmd->aliases; *a != '\0' && n >= 0 && (size_t)n < sizeof synopsis;
       a += strcspn(a, " ") + 1)
    n += snprintf(synopsis + n, sizeof synopsis - (size_t)n, ", :%.*s", (int)strcspn(a, " "), a);
  fprintf(out, "  %-*s ", HELP_COLUMN - 3, synopsis);
  for (const char *h = cmd->help;;) {
    size_t len = strcspn(h, "\n");
    fprintf(out, "%.*s\n", (int)len, h);
    if (h[len] == '\0')
      break;
    h += len + 1;
    fprintf(out, "%*s", HELP_COLUMN, "");
  }
}

static void cmd_help(const command *cmd, char *arg) {
  (void)cmd, (void)arg;
  luna__repl_out_begin();
  fputs(help_intro, stdout);
  for (size_t i = 0; i < NCOMMANDS; i++)
    help_lines(&commands[i], stdout);
  luna__repl_set_line_start();
  luna__repl_out_end();
}

/* The command named `name`, by its name or an alias, or NULL. */
static const command *find_command(const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; i < NCOMMANDS; i++) {
    if (strcmp(commands[i].name, name) == 0)
      return &commands[i];
    for (const char *a = commands[i].aliases; *a != '\0'; a += strcspn(a, " ") + 1)
      if (n > 0 && strcspn(a, " ") == n && strncmp(a, name, n) == 0)
        return &commands[i];
  }
  return NULL;
}

void luna__repl_command(char *line) {
  char *name = line + 1, *arg;
  size_t n = strcspn(name, " \t");
  arg = name + n;
  if (*arg != '\0')
    *arg++ = '\0';
  arg += strspn(arg, " \t");
  size_t alen = strlen(arg);
  while (alen > 0 && strchr(" \t\r", arg[alen - 1]) != NULL)
    arg[--alen] = '\0';
  const command *cmd = find_command(name);
  if (cmd == NULL)
    luna__repl_printf(stderr, "unknown command ':%s' (try :help)\n", name);
  else
    cmd->run(cmd, arg);
}
