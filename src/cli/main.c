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

/* The one text of --help, for every command (`run --help` and `mods --help`
   print it too). The man page is generated from it by help2man
   (cmake/docs.cmake), so its layout follows help2man's rules: "Usage:" and
   "or:" lines become the SYNOPSIS, a line ending in ':' over indented lines
   a subsection, and an indented word followed by two spaces a tagged item.
   The bash completion is generated from it too (cmake/completion.cmake): a
   heading "Options of A, B and C:" says which commands take the options
   under it, and an option followed by an upper-case word takes a value.
   tests/package checks both against this text. */
static const char usage_text[] =
  "Usage: " LUNA_PROGNAME " run [options] SCRIPT [ARGS...]\n"
  "  or:  " LUNA_PROGNAME " repl [options]\n"
  "  or:  " LUNA_PROGNAME " mods [options] DIR\n"
  "  or:  " LUNA_PROGNAME " --help | --version\n"
  "Runs Lua scripts as tasks on a game-style frame loop: Lua coroutines that\n"
  "await yields, frames, delays and predicates at the 16 timings of a frame.\n"
  "\n"
  "Commands:\n"
  "  run SCRIPT [ARGS...]  runs SCRIPT's main chunk as the task \"main\" (ARGS\n"
  "                        are its '...' and arg[1..]), then drives frames until\n"
  "                        no task or callback is alive, or until\n"
  "                        task.exit([code]) is called; the global 'task' is\n"
  "                        require \"lunaloop\"\n"
  "  repl                  a live loop with a prompt: the loop keeps ticking at\n"
  "                        --hz while the prompt waits; each chunk runs as a\n"
  "                        task (top-level await works, a trailing & runs it in\n"
  "                        the background); :help lists its commands\n"
  "  mods DIR              loads every mod in DIR (each folder with a mod.lua\n"
  "                        and a manifest.lua) in dependency order, each in its\n"
  "                        own sandboxed Lua state on one loop, then drives\n"
  "                        frames until no mod has a task or callback alive\n"
  "\n"
  "Options of run, repl and mods:\n"
  "  --fast            virtual time: frames back to back, dt = 1/hz exactly\n"
  "                    (default: real time, paced at hz, dt measured)\n"
  "  --hz N            frame rate, default 60\n"
  "  --fixed-hz N      fixed steps per second, default 50\n"
  "  --time-scale X    initial time scale, default 1\n"
  "  --seed N          seed math.random, for repeatable runs\n"
  "  -h, --help        show this text\n"
  "\n"
  "Options of run and mods:\n"
  "  --frames N        stop after N frames (remaining tasks are cancelled)\n"
  "\n"
  "Options of run:\n"
  "  --roblox          the global task is require \"lunaloop.roblox\": Roblox's\n"
  "                    task.spawn/defer/delay/wait/cancel (docs/roblox.md)\n"
  "  --sim-tick-rate N  a simulation of N ticks per second at FixedUpdate,\n"
  "                    as task.sim (docs/netcode.md)\n"
  "  --sim-check D     its sync-test: every tick rolled back D ticks and\n"
  "                    re-simulated, a mismatch reported (default 0: off)\n"
  "  --sim-history N   ticks of snapshots it keeps (default 64)\n"
  "\n"
  "Options of run and repl:\n"
  "  --trace FILE      write a Chrome trace (open it in Perfetto): one track\n"
  "                    per timing, one slice per task resume, frame markers\n"
  "\n"
  "Options of mods:\n"
  "  --watch N         check the mods' files every N frames, 0: never\n"
  "                    (default 30)\n"
  "  --memory BYTES    memory cap of each mod, with k/m/g suffixes (default 64m)\n"
  "  --budget N        instructions per resume or call (default 10000000)\n"
  "  --time-budget MS  milliseconds of each mod's code per frame, 0: no limit\n"
  "                    (default 50)\n"
  "  --max-overruns K  disable a mod after K overruns (default 3)\n"
  "\n"
  "Other options:\n"
  "  --version         show the versions of lunaloop and of Lua\n"
  "\n"
  "Exit status:\n"
  "  0     everything finished and no error was reported\n"
  "  1     a task error was reported; for mods also a mod that failed to load\n"
  "        or was disabled\n"
  "  2     a usage error, or a script that fails to load\n"
  "  3     run: the run was stuck (every task waits on a task or a channel and\n"
  "        nothing else can wake one); what each task waits on is printed\n"
  "  130   Ctrl-C (SIGINT)\n"
  "  143   SIGTERM\n"
  "  129   SIGHUP\n"
  "  CODE  task.exit(CODE)\n"
  "\n"
  "Signals:\n"
  "  SIGINT, SIGTERM, SIGHUP  cancel every task (to-be-closed variables run)\n"
  "                           and exit; a second one kills at once\n"
  "  SIGQUIT                  (Ctrl-\\) print what every task waits on, and\n"
  "                           where; the run goes on\n";

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
