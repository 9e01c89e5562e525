/*
** mods.c: `lunaloop mods [options] DIR` (docs/modding.md): loads
** every mod in DIR in dependency order into a mod set on one loop, then
** drives frames like `run` until no mod has a task or callback alive (and no
** message waits), --frames frames have run, or a stop signal (Ctrl-C,
** SIGTERM, SIGHUP: signals.c). There is no stuck-run check: a mod whose
** tasks all wait is normal here (the bus, a reload or another mod may wake
** them); SIGQUIT lists what they wait on. The set reloads mods
** whose files change, and disables those that keep overrunning their
** instruction budget or memory cap; a summary of every mod goes to stderr
** at the end, after every mod has been unloaded (so that errors raised while
** their tasks are cancelled are counted).
*/
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lunaloop_mods.h"

typedef struct mods_options {
  luna_run_options run;     /* fast, frame_dt_ns, fixed_dt_ns, frames, time scale, seed */
  luna_mods_config mods;
  const char *dir;
} mods_options;

enum { OPT_WATCH = LUNA__OPT_OWN, OPT_MEMORY, OPT_BUDGET, OPT_TIME_BUDGET, OPT_MAX_OVERRUNS };

static const struct option long_options[] = {
  LUNA__CLI_FRAME_OPTIONS,
  {"watch", required_argument, NULL, OPT_WATCH},
  {"memory", required_argument, NULL, OPT_MEMORY},
  {"budget", required_argument, NULL, OPT_BUDGET},
  {"time-budget", required_argument, NULL, OPT_TIME_BUDGET},
  {"max-overruns", required_argument, NULL, OPT_MAX_OVERRUNS},
  {"help", no_argument, NULL, 'h'},
  {NULL, 0, NULL, 0}
};

/* Parses argv[1..] (argv[0] is "mods"); -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, mods_options *o) {
  long long n;
  int c, index;
  memset(o, 0, sizeof *o);
  luna__cli_run_defaults(&o->run);
  optind = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "+:h", long_options, &index)) != -1) {
    const char *name = c >= LUNA__OPT_FAST ? long_options[index].name : NULL;
    int rc;
    if (c >= LUNA__OPT_FAST && c < LUNA__OPT_OWN) {
      if ((rc = luna__cli_frame_option(c, name, optarg, &o->run)) != -1)
        return rc;
      continue;
    }
    switch (c) {
    case 'h':
      luna__cli_usage(stdout);
      return LUNA_EXIT_OK;
    case OPT_WATCH:
      if (!luna__cli_parse_integer(optarg, false, &n) || n > 1000000000LL)
        return luna__cli_bad_value(name, optarg, "a whole number of frames >= 0");
      o->mods.watch_frames = n == 0 ? -1 : (int)n;
      break;
    case OPT_MEMORY:
      if (!luna__cli_parse_bytes(optarg, &o->mods.memory_limit))
        return luna__cli_bad_value(name, optarg, "a positive size in bytes, e.g. 512k or 64m");
      break;
    case OPT_BUDGET:
      if (!luna__cli_parse_integer(optarg, false, &n) || n == 0 || n > 2000000000LL)
        return luna__cli_bad_value(name, optarg, "a positive number of instructions");
      o->mods.instruction_limit = n;
      break;
    case OPT_TIME_BUDGET:
      if (!luna__cli_parse_integer(optarg, false, &n) || n > 3600000LL)
        return luna__cli_bad_value(name, optarg, "a whole number of milliseconds >= 0");
      o->mods.time_limit = n == 0 ? -1 : n * (luna_ns)1000000;
      break;
    case OPT_MAX_OVERRUNS:
      if (!luna__cli_parse_integer(optarg, false, &n) || n == 0 || n > 1000000LL)
        return luna__cli_bad_value(name, optarg, "a positive whole number");
      o->mods.max_overruns = (unsigned)n;
      break;
    default:
      return luna__cli_getopt_error(c, argv);
    }
  }
  o->mods.has_seed = o->run.has_seed;
  o->mods.seed = o->run.seed;
  if (optind >= argc)
    return luna__cli_usage_error("mods: missing DIR");
  if (optind + 1 < argc)
    return luna__cli_usage_error("mods: one DIR only, got '%s' too", argv[optind + 1]);
  o->dir = argv[optind];
  return -1;
}

/* Writes what every loaded mod's tasks wait on (SIGQUIT), mod by mod. A
   mod with no pending work is normal here (it may wait for the bus, a
   reload, another mod), so `mods` has no stuck-run check. */
static void report_mods(luna_mods *set, luna_loop *loop) {
  size_t i, n = luna_mods_count(set);
  fflush(stdout);
  fprintf(stderr, LUNA_PROGNAME ": tasks at frame %llu (SIGQUIT):\n",
          (unsigned long long)luna_loop_frame_count(loop));
  for (i = 0; i < n; i++) {
    luna_mod_info info;
    lua_State *L;
    if (luna_mods_get_info(set, i, &info) != 0 || (L = luna_mods_state(set, info.name)) == NULL)
      continue;
    fprintf(stderr, "  mod %s:\n", info.name);
    luna__write_task_list(L, stderr, "    ");
  }
  fflush(stderr);
}

/* Drives frames until nothing is alive, --frames, or a stop signal. */
static bool drive(luna_mods *set, luna_loop *loop, const luna_run_options *o) {
  luna_driver driver;
  luna_driver_init(&driver, loop, o->frame_dt_ns, o->fast ? LUNA_DRIVE_FAST : LUNA_DRIVE_REAL);
  for (;;) {
    int rc;
    if (luna__interrupted() || !luna_mods_alive(set))
      return true;
    if (luna__quit_requested())
      report_mods(set, loop);
    if (o->has_frames && driver.frames >= o->frames)
      return true;
    luna_lua_gc_idle(loop, luna_driver_remaining(&driver));
    if (!luna_driver_wait(&driver))
      continue;
    rc = luna_driver_frame(&driver);
    if (rc < 0 && rc != LUNA_ESTOPPED) {
      fprintf(stderr, LUNA_PROGNAME ": frame %llu failed: %s\n",
              (unsigned long long)luna_loop_frame_count(loop), luna_strerror(rc));
      return false;
    }
  }
}

static const char *state_name(luna_mod_state s) {
  switch (s) {
  case LUNA_MOD_LOADED:
    return "loaded";
  case LUNA_MOD_FAILED:
    return "failed";
  case LUNA_MOD_DISABLED:
    return "disabled";
  default:
    return "unloaded";
  }
}

/* One line per mod on stderr: name, version, state, and why when not loaded.
   `states` (may be NULL) holds each mod's state from before the final
   unload, which leaves every loaded mod UNLOADED. */
static void summary(const luna_mods *set, const luna_mod_state *states) {
  size_t i, n = luna_mods_count(set);
  fflush(stdout);
  fprintf(stderr, LUNA_PROGNAME ": mods:");
  for (i = 0; i < n; i++) {
    luna_mod_info info;
    if (luna_mods_get_info(set, i, &info) != 0)
      continue;
    if (states != NULL)
      info.state = states[i];
    fprintf(stderr, "\n  %s %s: %s, %llu error%s, peak memory %zu KiB", info.name,
            info.version, state_name(info.state), (unsigned long long)info.errors,
            info.errors == 1 ? "" : "s", (info.memory_peak + 1023) / 1024);
    if (info.state != LUNA_MOD_LOADED && info.last_error[0] != '\0')
      fprintf(stderr, " (%s)", info.last_error);
  }
  fputc('\n', stderr);
  fflush(stderr);
}

int luna__cli_mods(int argc, char **argv, int first) {
  mods_options o;
  luna_config config = {0};
  luna_loop *loop = NULL;
  luna_mods *set = NULL;
  int status = parse_options(argc - first, argv + first, &o);
  int rc;
  bool ok;
  if (status >= 0)
    return status;
  config.fixed_dt_ns = o.run.fixed_dt_ns;
  if ((rc = luna_loop_new(&config, &loop)) < 0) {
    fprintf(stderr, LUNA_PROGNAME ": cannot create the loop: %s\n", luna_strerror(rc));
    return LUNA_EXIT_ERROR;
  }
  luna_loop_set_time_scale(loop, o.run.time_scale);
  luna__cli_pace_gc(loop);
  if (o.run.fast)
    luna_loop_use_virtual_realtime(loop);
  if ((rc = luna_mods_new(loop, &o.mods, &set)) < 0) {
    fprintf(stderr, LUNA_PROGNAME ": cannot create the mod set: %s\n", luna_strerror(rc));
    luna_loop_free(loop);
    return LUNA_EXIT_ERROR;
  }
  luna__signals_install(NULL);
  rc = luna_mods_load_dir(set, o.dir);
  if (rc < 0 && luna_mods_count(set) == 0) {
    const char *msg = luna_mods_last_error(set);
    status = luna__cli_usage_error("mods: %s", msg[0] != '\0' ? msg : "cannot load DIR");
  } else if (luna_mods_count(set) == 0) {
    status = luna__cli_usage_error("mods: no mods in '%s' (folders with a mod.lua)", o.dir);
  } else {
    size_t i, n;
    luna_mod_state *states;
    ok = drive(set, loop, &o.run);
    n = luna_mods_count(set);
    states = (luna_mod_state *)malloc(n * sizeof *states);
    for (i = 0; states != NULL && i < n; i++) {
      luna_mod_info info;
      states[i] = luna_mods_get_info(set, i, &info) == 0 ? info.state : LUNA_MOD_UNLOADED;
    }
    /* Unload first, so that the errors raised while the mods' tasks are
       cancelled are reported before the summary and counted in it. */
    luna_mods_unload_all(set);
    summary(set, states);
    free(states);
    if (luna__interrupted())
      status = luna__interrupt_status();
    else
      status = !ok || luna_mods_error_count(set) > 0 ? LUNA_EXIT_ERROR : LUNA_EXIT_OK;
  }
  luna_mods_free(set);
  luna__signals_restore();
  luna_loop_free(loop);
  return status;
}
