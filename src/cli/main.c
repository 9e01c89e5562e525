/*
** main.c: the entry point of the lunaloop program. It answers --help and
** --version itself and hands everything else to a command (run, repl, mods),
** each in its own file, found through one table.
*/
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <lua.h>

#include "cli.h"

/* A command gets the whole argv and the index of its own word, so that it
   can still see the words before it (`run` puts them in arg[-n..-1]). */
typedef int (*command_fn)(int argc, char **argv, int first);

static const struct command {
  const char *name;
  command_fn fn;
} commands[] = {
  {"run", luna__cli_run},
  {"repl", luna__cli_repl},
  {"mods", luna__cli_mods},
  {NULL, NULL}
};

static const char usage_text[] =
  "usage: " LUNA_PROGNAME " run [options] SCRIPT [ARGS...]\n"
  "       " LUNA_PROGNAME " repl [options]          a live loop with a prompt\n"
  "       " LUNA_PROGNAME " mods [options] DIR      load every mod in DIR and run the loop\n"
  "       " LUNA_PROGNAME " --help | --version\n"
  "\n"
  "run: runs SCRIPT's main chunk as the task \"main\" (ARGS are its '...' and\n"
  "arg[1..]), then drives frames until no task or callback is alive, or until\n"
  "task.exit([code]) is called. The global 'task' is require \"lunaloop\".\n"
  "  --fast          virtual time: frames back to back, dt = 1/hz exactly\n"
  "                  (default: real time, paced at hz, dt measured)\n"
  "  --hz N          frame rate, default 60\n"
  "  --fixed-hz N    fixed steps per second, default 50\n"
  "  --frames N      stop after N frames (remaining tasks are cancelled)\n"
  "  --time-scale X  initial time scale, default 1\n"
  "  --seed N        seed math.random, for repeatable runs\n"
  "  --trace FILE    write a Chrome trace (open it in Perfetto): one track\n"
  "                  per timing, one slice per task resume, frame markers\n"
  "  -h, --help      show this text\n"
  "\n"
  "repl: the loop keeps ticking at --hz while the prompt waits; each chunk\n"
  "runs as a task (top-level await works, a trailing & runs it in the\n"
  "background). Takes the options of run but --frames; :help lists commands.\n"
  "\n"
  "exit status: 0 when everything finished without a reported error, 1 when a\n"
  "task error was reported, 2 for a usage error or a script that fails to load,\n"
  "130 after Ctrl-C; task.exit(code) ends with code.\n";

void luna__cli_usage(FILE *out) {
  fputs(usage_text, out);
}

int luna__cli_usage_error(const char *fmt, ...) {
  va_list ap;
  fputs(LUNA_PROGNAME ": ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\ntry '" LUNA_PROGNAME " --help' for more information\n", stderr);
  return LUNA_EXIT_USAGE;
}

static void print_version(void) {
  printf(LUNA_PROGNAME " %s (%s)\n", LUNA_VERSION_STRING, LUA_RELEASE);
}

/* Answers --help and --version, or runs the command named by the first word
   that is not an option; returns its exit status (cli.h lists them). */
int main(int argc, char **argv) {
  static const struct option options[] = {
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'v'},
    {NULL, 0, NULL, 0}
  };
  int c;
  /* '+': stop at the command word, whose options are its own business;
     ':': report problems ourselves, in the program's style. */
  opterr = 0;
  while ((c = getopt_long(argc, argv, "+:hv", options, NULL)) != -1) {
    switch (c) {
    case 'h':
      luna__cli_usage(stdout);
      return LUNA_EXIT_OK;
    case 'v':
      print_version();
      return LUNA_EXIT_OK;
    default:
      if (optopt != 0 && optopt < 256) /* an unknown short option, maybe in a cluster */
        return luna__cli_usage_error("unknown option '-%c'", optopt);
      return luna__cli_usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind >= argc) {
    luna__cli_usage(stderr);
    return LUNA_EXIT_USAGE;
  }
  for (const struct command *cmd = commands; cmd->name != NULL; cmd++) {
    if (strcmp(cmd->name, argv[optind]) == 0)
      return cmd->fn(argc, argv, optind);
  }
  return luna__cli_usage_error("unknown command '%s'", argv[optind]);
}
