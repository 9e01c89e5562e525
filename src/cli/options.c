/*
** options.c: the options of `lunaloop run` and `repl`, parsed with
** getopt_long, and the frame options that `mods` shares. Values are read by
** the parsers of values.c; every bad value is a usage error that names the
** option and what it expected.
*/
#include <getopt.h>
#include <string.h>

#include "cli.h"

enum { OPT_TRACE = LUNA__OPT_OWN, OPT_ROBLOX, OPT_SIM_TICK_RATE, OPT_SIM_CHECK, OPT_SIM_HISTORY };

static const struct option long_options[] = {
  LUNA__CLI_FRAME_OPTIONS,
  {"trace", required_argument, NULL, OPT_TRACE},
  {"roblox", no_argument, NULL, OPT_ROBLOX},
  {"sim-tick-rate", required_argument, NULL, OPT_SIM_TICK_RATE},
  {"sim-check", required_argument, NULL, OPT_SIM_CHECK},
  {"sim-history", required_argument, NULL, OPT_SIM_HISTORY},
  {"help", no_argument, NULL, 'h'},
  {NULL, 0, NULL, 0}
};

int luna__cli_bad_value(const char *option, const char *value, const char *expected) {
  return luna__cli_usage_error(LUNA__CLI_BAD_VALUE, value, "--", option, expected);
}

void luna__cli_run_defaults(luna_run_options *opts) {
  memset(opts, 0, sizeof *opts);
  opts->frame_dt_ns = 16666667; /* round(1e9 / 60) */
  opts->fixed_dt_ns = 20000000; /* 1e9 / 50 */
  opts->time_scale = 1.0;
}

int luna__cli_frame_option(int c, const char *name, const char *arg, luna_run_options *opts) {
  long long n;
  switch (c) {
  case LUNA__OPT_FAST:
    opts->fast = true;
    return -1;
  case LUNA__OPT_HZ:
  case LUNA__OPT_FIXED_HZ:
    if (!luna__cli_parse_rate(arg, NULL, c == LUNA__OPT_HZ ? &opts->frame_dt_ns : &opts->fixed_dt_ns))
      return luna__cli_bad_value(name, arg, LUNA__CLI_EXPECT_RATE);
    return -1;
  case LUNA__OPT_FRAMES:
    if (!luna__cli_parse_integer(arg, false, &n))
      return luna__cli_bad_value(name, arg, LUNA__CLI_EXPECT_COUNT);
    opts->has_frames = true;
    opts->frames = (uint64_t)n;
    return -1;
  case LUNA__OPT_TIME_SCALE:
    if (!luna__cli_parse_time_scale(arg, &opts->time_scale))
      return luna__cli_bad_value(name, arg, LUNA__CLI_EXPECT_TIME_SCALE);
    return -1;
  default: /* LUNA__OPT_SEED */
    if (!luna__cli_parse_integer(arg, true, &opts->seed))
      return luna__cli_bad_value(name, arg, LUNA__CLI_EXPECT_INTEGER);
    opts->has_seed = true;
    return -1;
  }
}

int luna__cli_getopt_error(int c, char **argv) {
  if (c == ':')
    return luna__cli_usage_error("option '%s' needs a value", argv[optind - 1]);
  if (optopt != 0 && optopt < 256) /* an unknown short option, maybe in a cluster */
    return luna__cli_usage_error("unknown option '-%c'", optopt);
  return luna__cli_usage_error("unknown option '%s'", argv[optind - 1]);
}

/* The parser of run and repl: `repl` refuses --frames and any SCRIPT. */
static int parse_options(int argc, char **argv, luna_run_options *opts, bool repl) {
  int c, index;
  luna__cli_run_defaults(opts);
  /* Reset getopt for a new argv: 0 re-initializes glibc's and musl's state.
     '+' stops at SCRIPT so that the script's own options stay its own. */
  optind = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "+:h", long_options, &index)) != -1) {
    const char *name = (c >= LUNA__OPT_FAST) ? long_options[index].name : NULL;
    int rc;
    if (c == 'h') {
      luna__cli_usage(stdout);
      return LUNA_EXIT_OK;
    }
    if (c == OPT_TRACE) {
      opts->trace = optarg;
      continue;
    }
    if (c == OPT_ROBLOX) {
      if (repl)
        return luna__cli_usage_error("repl: --roblox is an option of run only");
      opts->roblox = true;
      continue;
    }
    if (c == OPT_SIM_TICK_RATE || c == OPT_SIM_CHECK || c == OPT_SIM_HISTORY) {
      long long n = 0;
      if (repl)
        return luna__cli_usage_error("repl: --%s is an option of run only", name);
      if (c == OPT_SIM_TICK_RATE) {
        /* 0.001 Hz (ticks of 1000 s, as task.sim_open's `tick`) to 1e9
           Hz (1 ns): inside what the sim takes (up to LUNA_SIM_TICK_NS_MAX) */
        double hz = 0;
        if (!luna__cli_parse_rate(optarg, &hz, &opts->sim_tick_ns) || !(hz >= 1e-3) ||
            opts->sim_tick_ns <= 0 || opts->sim_tick_ns > LUNA_SIM_TICK_NS_MAX)
          return luna__cli_bad_value(name, optarg, "a tick rate in Hz from 0.001 to 1e9");
        opts->has_sim = true;
        continue;
      }
      if (!luna__cli_parse_integer(optarg, false, &n) ||
          n > (c == OPT_SIM_CHECK ? LUNA_SIM_HISTORY_MAX - 1 : LUNA_SIM_HISTORY_MAX) ||
          (c == OPT_SIM_HISTORY && n < 1))
        return luna__cli_bad_value(name, optarg, c == OPT_SIM_CHECK
                                                     ? "a check distance from 0 to 65535"
                                                     : "a history from 1 to 65536 ticks");
      if (c == OPT_SIM_CHECK)
        opts->sim_check = (int)n;
      else
        opts->sim_history = (int)n;
      continue;
    }
    if (c < LUNA__OPT_FAST || c >= LUNA__OPT_OWN)
      return luna__cli_getopt_error(c, argv);
    if (c == LUNA__OPT_FRAMES && repl)
      return luna__cli_usage_error("repl: --frames is an option of run only");
    if ((rc = luna__cli_frame_option(c, name, optarg, opts)) != -1)
      return rc;
  }
  if (repl) {
    if (optind < argc)
      return luna__cli_usage_error("repl: unexpected argument '%s'", argv[optind]);
    return -1;
  }
  if (!opts->has_sim && (opts->sim_check > 0 || opts->sim_history > 0))
    return luna__cli_usage_error("run: --sim-check and --sim-history need --sim-tick-rate");
  if (opts->has_sim && opts->sim_check >= (opts->sim_history > 0 ? opts->sim_history
                                                                  : LUNA_SIM_DEFAULT_HISTORY))
    return luna__cli_usage_error("run: --sim-check must be less than the history (%d ticks)",
                                 opts->sim_history > 0 ? opts->sim_history
                                                       : LUNA_SIM_DEFAULT_HISTORY);
  if (optind >= argc)
    return luna__cli_usage_error("run: missing SCRIPT");
  opts->script = optind;
  return -1;
}

int luna__run_parse_options(int argc, char **argv, luna_run_options *opts) {
  return parse_options(argc, argv, opts, false);
}

int luna__repl_parse_options(int argc, char **argv, luna_run_options *opts) {
  return parse_options(argc, argv, opts, true);
}
