/*
** set.c: a set of mods on one loop: loading a folder of mods in dependency
** order, the set's repeating item (disabling, message delivery, file
** checks), reload and unload, and the queries of lunaloop_mods.h.
*/
#define _XOPEN_SOURCE 700 /* realpath */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mods.h"

#define PENDING ((luna_mod_state)0) /* decided neither way yet (load_dir) */

/* ---- helpers ---------------------------------------------------------------------- */

static luna__mod *find_name(const luna_mods *set, const char *name) {
  size_t i;
  for (i = 0; i < set->nmods; i++)
    if (set->mods[i]->man.name != NULL && strcmp(set->mods[i]->man.name, name) == 0)
      return set->mods[i];
  return NULL;
}

/* A mod other than `except` that claims `name`: one whose manifest gave
   it that name (a mod whose manifest failed claims none). */
static luna__mod *find_claim(luna__mod **list, size_t n, const char *name,
                             const luna__mod *except) {
  size_t i;
  for (i = 0; i < n; i++)
    if (list[i] != except && list[i]->named && strcmp(list[i]->man.name, name) == 0)
      return list[i];
  return NULL;
}

static luna__mod *find_dir(const luna_mods *set, const char *dir) {
  size_t i;
  for (i = 0; i < set->nmods; i++)
    if (strcmp(set->mods[i]->dir, dir) == 0)
      return set->mods[i];
  return NULL;
}

static bool append(luna_mods *set, luna__mod *m) {
  if (set->nmods == set->capmods) {
    size_t cap = set->capmods ? set->capmods * 2 : 8;
    luna__mod **p = (luna__mod **)realloc(set->mods, cap * sizeof *p);
    if (p == NULL)
      return false;
    set->mods = p;
    set->capmods = cap;
  }
  m->index = set->nmods;
  set->mods[set->nmods++] = m;
  return true;
}

static luna__mod *new_mod(luna_mods *set, const char *realdir) {
  luna__mod *m = (luna__mod *)calloc(1, sizeof *m);
  if (m == NULL)
    return NULL;
  m->set = set;
  m->dir = (char *)malloc(strlen(realdir) + 1);
  if (m->dir == NULL) {
    free(m);
    return NULL;
  }
  strcpy(m->dir, realdir);
  return m;
}

/* True while Lua code of some mod is running (then no state may change). */
static bool inside_mod(const luna_mods *set) {
  size_t i;
  if (set->busy > 0)
    return true;
  for (i = 0; i < set->nmods; i++) {
    luna__mod *m = set->mods[i];
    if (m->running > 0 || (m->L != NULL && luna__guard_busy(m->L)))
      return true;
  }
  return false;
}

/* m's file signature; reports once that its folder is beyond the
   watcher's bounds, when it first is. */
static uint64_t signature(luna_mods *set, luna__mod *m) {
  bool over;
  uint64_t sig = luna__watch_signature(m->dir, &over);
  if (over && !m->watch_over)
    luna__mods_report(set, m->man.name,
                      "its folder is larger than the watcher looks at (8 levels, 1024 "
                      "folders, 4096 files, 16384 entries): changes past that are not seen");
  m->watch_over = over;
  return sig;
}

/* Marks m as failed with a message, reports it and counts it. */
static void fail(luna_mods *set, luna__mod *m, const char *fmt, const char *a, const char *b) {
  m->state = LUNA_MOD_FAILED;
  m->signature = signature(set, m); /* tried again when they change */
  m->waits_dependency = false;
  m->waits_name = false;
  snprintf(m->last_error, sizeof m->last_error, fmt, a, b);
  luna__escape_in_place(m->last_error, sizeof m->last_error, LUNA__ESC_KEEP_TRACEBACK);
  if (set->last_error[0] == '\0')
    snprintf(set->last_error, sizeof set->last_error, "mod '%s': %s", m->man.name,
             m->last_error);
  luna__mods_report(set, m->man.name, "not loaded: %s", m->last_error);
  set->errors++;
}

/* fail() for a dependency `dep` that is not loaded: m is tried again once
   it is, without a change of its own files. */
static void fail_dependency(luna_mods *set, luna__mod *m, const char *fmt, const char *dep,
                            const char *b) {
  fail(set, m, fmt, dep, b);
  m->waits_dependency = true;
}

/* fail() for a name another mod claims: m is tried again once no other
   mod claims it, without a change of its own files. */
static void fail_name(luna_mods *set, luna__mod *m, const luna__mod *other, size_t more) {
  char also[64] = "", text[sizeof m->last_error];
  if (more > 0)
    snprintf(also, sizeof also, " (and %zu more)", more);
  snprintf(text, sizeof text,
           "the name '%s' is claimed by the mods in %s and in %s%s: rename all but one",
           m->man.name, m->dir, other->dir, also);
  fail(set, m, "%s%s", text, "");
  m->waits_name = true;
}

/* The first dependency of m that is not loaded, or NULL. */
static const char *missing_dependency(const luna_mods *set, const luna__mod *m) {
  size_t i;
  for (i = 0; i < m->man.ndepends; i++) {
    const luna__mod *d = find_name(set, m->man.depends[i]);
    if (d == NULL || d->state != LUNA_MOD_LOADED)
      return m->man.depends[i];
  }
  return NULL;
}

/* Opens m's state; on failure reports it. m's dependencies are loaded. */
static bool open_mod(luna_mods *set, luna__mod *m) {
  m->signature = signature(set, m);
  if (luna__mod_open(m))
    return true;
  set->errors++;
  if (set->last_error[0] == '\0')
    snprintf(set->last_error, sizeof set->last_error, "mod '%s': %s", m->man.name,
             m->last_error);
  luna__mods_report(set, m->man.name, "failed to load: %s", m->last_error);
  return false;
}

/* Reads m's manifest (again); false (m failed and reported) when it is bad
   or its name is taken by another mod. */
static bool read_manifest(luna_mods *set, luna__mod *m) {
  char err[400];
  luna__mod *other;
  luna__manifest_free(&m->man);
  m->named = luna__manifest_read(m->dir, &m->man, err, sizeof err);
  if (!m->named) {
    fail(set, m, "%s%s", err, "");
    return false;
  }
  if ((other = find_claim(set->mods, set->nmods, m->man.name, m)) != NULL) {
    fail_name(set, m, other, 0);
    return false;
  }
  return true;
}

/* Loads m, whose state is closed: its manifest (again), its name, its
   dependencies, then its state. A name clash keeps m out of the set's
   names until it is renamed. 0 or LUNA_EINVAL (m failed and reported). */
static int load_mod(luna_mods *set, luna__mod *m) {
  const char *dep;
  if (!read_manifest(set, m))
    return LUNA_EINVAL;
  if ((dep = missing_dependency(set, m)) != NULL) {
    fail_dependency(set, m, "it depends on '%s', which is not loaded", dep, "");
    return LUNA_EINVAL;
  }
  return open_mod(set, m) ? 0 : LUNA_EINVAL;
}

/* Unloads (keeping on_unload's result) and loads m again. */
static int reload(luna_mods *set, luna__mod *m) {
  if (m->L != NULL)
    luna__mod_close(m, true, true);
  return load_mod(set, m);
}

/* The checks of the calls that change one mod by name: 0 with *out, or
   LUNA_EINVAL, LUNA_ENOENT, LUNA_ESTATE (inside a mod). */
static int find_to_change(luna_mods *set, const char *name, luna__mod **out) {
  if (set == NULL || name == NULL)
    return LUNA_EINVAL;
  if ((*out = find_name(set, name)) == NULL)
    return LUNA_ENOENT;
  return inside_mod(set) ? LUNA_ESTATE : 0;
}

static void process_disables(luna_mods *set) {
  size_t i;
  for (i = 0; i < set->nmods; i++) {
    luna__mod *m = set->mods[i];
    char time_limit[32] = "none";
    if (!m->disable_pending || m->state != LUNA_MOD_LOADED)
      continue;
    if (m->time_limit > 0)
      snprintf(time_limit, sizeof time_limit, "%g ms per frame", (double)m->time_limit / 1e6);
    snprintf(m->last_error, sizeof m->last_error,
             "disabled after %llu overruns: instruction budget exceeded %llu times "
             "(limit %llu instructions), time budget exceeded %llu times (limit %s), "
             "memory cap hit %llu times (limit %zu bytes)",
             (unsigned long long)(m->budget_overruns + m->memory_overruns + m->time_overruns),
             (unsigned long long)m->budget_overruns, (unsigned long long)m->budget,
             (unsigned long long)m->time_overruns, time_limit,
             (unsigned long long)m->memory_overruns, m->mem_limit);
    luna__mods_report(set, m->man.name, "%s", m->last_error);
    set->errors++;
    luna__mod_close(m, false, false);
    m->state = LUNA_MOD_DISABLED;
    m->disable_pending = false;
  }
}

/* Checks every mod's files and reloads what changed or what waited for a
   dependency or a name; returns how many were reloaded. */
static size_t poll_files(luna_mods *set) {
  size_t i, n = 0;
  for (i = 0; i < set->nmods; i++) {
    luna__mod *m = set->mods[i];
    uint64_t sig;
    if (m->state == LUNA_MOD_UNLOADED)
      continue;
    sig = signature(set, m);
    if (sig == m->signature) {
      if (m->state == LUNA_MOD_FAILED && m->waits_dependency &&
          missing_dependency(set, m) == NULL) {
        luna__mods_report(set, m->man.name, "its dependencies are loaded now: reloading");
        reload(set, m);
        n++;
      } else if (m->state == LUNA_MOD_FAILED && m->waits_name &&
                 find_claim(set->mods, set->nmods, m->man.name, m) == NULL) {
        luna__mods_report(set, m->man.name, "no other mod claims its name now: reloading");
        reload(set, m);
        n++;
      }
      continue;
    }
    m->signature = sig;
    luna__mods_report(set, m->man.name, "files changed: reloading");
    reload(set, m);
    n++;
  }
  return n;
}

/* The set's item: disable what overran, deliver messages, check files. */
static bool upkeep(luna_loop *loop, void *arg) {
  luna_mods *set = (luna_mods *)arg;
  (void)loop;
  process_disables(set);
  luna__bus_deliver(set);
  process_disables(set);
  set->frames_seen++;
  if (set->cfg.watch_frames > 0 && set->frames_seen % (uint64_t)set->cfg.watch_frames == 0)
    poll_files(set);
  return true;
}

/* ---- the API ---------------------------------------------------------------------------- */

LUNA_API int luna_mods_new(luna_loop *loop, const luna_mods_config *config, luna_mods **out) {
  luna_mods *set;
  int rc;
  if (loop == NULL || out == NULL)
    return LUNA_EINVAL;
  if (config != NULL && (config->timing < 0 || config->timing >= LUNA_TIMING_COUNT))
    return LUNA_EINVAL;
  set = (luna_mods *)calloc(1, sizeof *set);
  if (set == NULL)
    return LUNA_ENOMEM;
  if (config != NULL)
    set->cfg = *config;
  if (set->cfg.memory_limit == 0)
    set->cfg.memory_limit = (size_t)64 * 1024 * 1024;
  if (set->cfg.instruction_limit == 0)
    set->cfg.instruction_limit = 10000000;
  if (set->cfg.instruction_limit > INT_MAX)
    set->cfg.instruction_limit = INT_MAX;
  if (set->cfg.time_limit == 0)
    set->cfg.time_limit = 50 * (luna_ns)1000000;
  if (set->cfg.max_overruns == 0)
    set->cfg.max_overruns = 3;
  if (set->cfg.watch_frames == 0)
    set->cfg.watch_frames = 30;
  if (set->cfg.message_limit == 0)
    set->cfg.message_limit = (size_t)1024 * 1024;
  if (set->cfg.timing == 0)
    set->cfg.timing = LUNA_EARLY_UPDATE;
  set->loop = loop;
  luna__topics_init(set);
  if (set->cfg.time_limit > 0 && (set->watchdog = luna__watchdog_new()) == NULL) {
    free(set);
    return LUNA_ENOMEM;
  }
  rc = luna_item_add(loop, (luna_timing)set->cfg.timing, upkeep, set, &set->item);
  if (rc != 0) {
    luna__watchdog_free(set->watchdog);
    free(set);
    return rc;
  }
  set->has_item = true;
  *out = set;
  return 0;
}

LUNA_API void luna_mods_free(luna_mods *set) {
  size_t i;
  if (set == NULL)
    return;
  luna__bus_clear(set); /* first: it gives the mods' charges back */
  for (i = set->nmods; i-- > 0;)
    luna__mod_free(set->mods[i]);
  free(set->mods);
  if (set->has_item)
    luna_item_remove(set->loop, set->item);
  luna__topics_free(set);
  luna__watchdog_free(set->watchdog);
  free(set);
}

/* Orders candidates by load_order, then name. */
static int by_order(const void *a, const void *b) {
  const luna__mod *x = *(luna__mod *const *)a, *y = *(luna__mod *const *)b;
  if (x->man.load_order != y->man.load_order)
    return x->man.load_order < y->man.load_order ? -1 : 1;
  return strcmp(x->man.name, y->man.name);
}

static luna__mod *find_among(luna__mod **list, size_t n, const char *name) {
  size_t i;
  for (i = 0; i < n; i++)
    if (strcmp(list[i]->man.name, name) == 0)
      return list[i];
  return NULL;
}

/* Marks the members of one dependency cycle among the pending mods as
   failed, naming the whole cycle. Does nothing when no mod is pending. */
static void break_cycle(luna_mods *set, luna__mod **pend, size_t npend) {
  luna__mod *path[256];
  size_t len = 0, i, start = 0;
  luna__mod *cur = NULL;
  char text[400];
  for (i = 0; i < npend && cur == NULL; i++)
    if (pend[i]->state == PENDING)
      cur = pend[i];
  if (cur == NULL)
    return; /* (path stays empty: nothing to name) */
  while (cur != NULL && len < 256) {
    luna__mod *next = NULL;
    for (i = 0; i < len; i++)
      if (path[i] == cur)
        break;
    if (i < len) {
      start = i;
      break;
    }
    path[len++] = cur;
    for (i = 0; i < cur->man.ndepends && next == NULL; i++) {
      luna__mod *d = find_among(pend, npend, cur->man.depends[i]);
      if (d != NULL && d->state == PENDING)
        next = d;
    }
    cur = next;
  }
  text[0] = '\0';
  for (i = start; i < len; i++) {
    strncat(text, path[i]->man.name, sizeof text - strlen(text) - 1);
    strncat(text, " -> ", sizeof text - strlen(text) - 1);
  }
  strncat(text, path[start]->man.name, sizeof text - strlen(text) - 1);
  for (i = start; i < len; i++) {
    fail(set, path[i], "dependency cycle: %s%s", text, "");
    append(set, path[i]);
  }
}

/* The candidates of `d` (dir's listing): subfolders with a mod.lua, not
   known to the set yet, each a new mod in a malloc'ed array (*n of them).
   Stops early when out of memory: the mods found so far are loaded. */
static luna__mod **list_candidates(luna_mods *set, const char *dir, DIR *d, size_t *n) {
  struct dirent *e;
  luna__mod **pend = NULL;
  size_t npend = 0, cap = 0;
  while ((e = readdir(d)) != NULL) {
    char path[PATH_MAX], real[PATH_MAX], file[PATH_MAX + 16];
    struct stat st;
    luna__mod *m;
    if (e->d_name[0] == '.')
      continue;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path ||
        realpath(path, real) == NULL || stat(real, &st) != 0 || !S_ISDIR(st.st_mode))
      continue;
    snprintf(file, sizeof file, "%s/mod.lua", real);
    if (stat(file, &st) != 0 || find_dir(set, real) != NULL)
      continue;
    if (npend == cap) {
      luna__mod **p;
      cap = cap ? cap * 2 : 8;
      p = (luna__mod **)realloc(pend, cap * sizeof *p);
      if (p == NULL)
        break;
      pend = p;
    }
    m = new_mod(set, real);
    if (m == NULL)
      break;
    pend[npend++] = m;
  }
  *n = npend;
  return pend;
}

/* Reads the candidates' manifests; bad ones fail at once, and so does
   every mod that claims a name another mod claims (all of them, so that
   the order in which the folder lists them decides nothing). Then sorts
   them by load_order and name and lists the failed ones in the set. True
   when some failed. */
static bool read_candidates(luna_mods *set, luna__mod **pend, size_t npend) {
  size_t i;
  bool any_failed = false;
  for (i = 0; i < npend; i++) {
    char err[400];
    pend[i]->state = PENDING;
    pend[i]->named = luna__manifest_read(pend[i]->dir, &pend[i]->man, err, sizeof err);
    if (!pend[i]->named)
      fail(set, pend[i], "%s%s", err, "");
  }
  for (i = 0; i < npend; i++) {
    luna__mod *m = pend[i], *other;
    size_t k, more = 0;
    if (!m->named)
      continue;
    if ((other = find_claim(set->mods, set->nmods, m->man.name, m)) == NULL &&
        (other = find_claim(pend, npend, m->man.name, m)) != NULL)
      for (k = 0; k < npend; k++)
        more += pend[k] != m && pend[k] != other && pend[k]->named &&
                strcmp(pend[k]->man.name, m->man.name) == 0;
    if (other != NULL)
      fail_name(set, m, other, more);
  }
  if (npend > 0)
    qsort(pend, npend, sizeof *pend, by_order);
  for (i = 0; i < npend; i++)
    if (pend[i]->state == LUNA_MOD_FAILED) {
      append(set, pend[i]);
      any_failed = true;
    }
  return any_failed;
}

/* Decides the pending mod m if it can be now: fails it (a dependency is
   missing or failed: true, *failed set) or loads it (its dependencies are
   all loaded: true, *failed when the load failed); false while a
   dependency is still pending. */
static bool decide(luna_mods *set, const char *dir, luna__mod **pend, size_t npend,
                   luna__mod *m, bool *failed) {
  size_t k;
  bool ready = true;
  for (k = 0; k < m->man.ndepends; k++) {
    const char *dn = m->man.depends[k];
    luna__mod *dm = find_name(set, dn);
    luna__mod *dp = find_among(pend, npend, dn);
    if (dm == NULL && (dp == NULL || dp->state == LUNA_MOD_FAILED)) {
      if (dp != NULL)
        fail_dependency(set, m, "it depends on '%s', which failed to load", dn, "");
      else
        fail_dependency(set, m, "it depends on '%s', which is not in %s", dn, dir);
      append(set, m);
      *failed = true;
      return true;
    } else if (dm == NULL || dm->state == PENDING) {
      ready = false;
    } else if (dm->state != LUNA_MOD_LOADED) {
      fail_dependency(set, m, "it depends on '%s', which failed to load", dn, "");
      append(set, m);
      *failed = true;
      return true;
    }
  }
  if (!ready)
    return false;
  append(set, m);
  if (!open_mod(set, m))
    *failed = true;
  return true;
}

LUNA_API int luna_mods_load_dir(luna_mods *set, const char *dir) {
  DIR *d;
  luna__mod **pend;
  size_t npend, i;
  bool any_failed;
  if (set == NULL || dir == NULL)
    return LUNA_EINVAL;
  if (inside_mod(set))
    return LUNA_ESTATE;
  set->last_error[0] = '\0';
  d = opendir(dir);
  if (d == NULL) {
    snprintf(set->last_error, sizeof set->last_error, "cannot read '%s': %s", dir,
             strerror(errno));
    return LUNA_EINVAL;
  }
  pend = list_candidates(set, dir, d, &npend);
  closedir(d);
  any_failed = read_candidates(set, pend, npend);
  /* Load in dependency order: each round loads (or fails) the first pending
     mod, by load_order and name, whose dependencies are all decided. */
  for (;;) {
    bool progress = false, left = false;
    for (i = 0; i < npend && !progress; i++) {
      if (pend[i]->state != PENDING)
        continue;
      left = true;
      progress = decide(set, dir, pend, npend, pend[i], &any_failed);
    }
    if (!left)
      break;
    if (!progress) {
      break_cycle(set, pend, npend);
      any_failed = true;
    }
  }
  free(pend);
  return any_failed ? LUNA_EINVAL : 0;
}

LUNA_API int luna_mods_load(luna_mods *set, const char *path) {
  char real[PATH_MAX];
  luna__mod *m;
  if (set == NULL || path == NULL)
    return LUNA_EINVAL;
  if (inside_mod(set))
    return LUNA_ESTATE;
  set->last_error[0] = '\0';
  if (realpath(path, real) == NULL) {
    snprintf(set->last_error, sizeof set->last_error, "cannot open '%s': %s", path,
             strerror(errno));
    return LUNA_EINVAL;
  }
  if ((m = find_dir(set, real)) != NULL) {
    if (m->state != LUNA_MOD_LOADED)
      return reload(set, m);
    snprintf(set->last_error, sizeof set->last_error,
             "mod '%s' is loaded already (luna_mods_reload reloads it)", m->man.name);
    return LUNA_ESTATE;
  }
  m = new_mod(set, real);
  if (m == NULL || !append(set, m)) {
    luna__mod_free(m);
    return LUNA_ENOMEM;
  }
  return load_mod(set, m);
}

LUNA_API int luna_mods_unload(luna_mods *set, const char *name) {
  luna__mod *m;
  int rc = find_to_change(set, name, &m);
  if (rc != 0)
    return rc;
  luna__mods_report(set, m->man.name, "unloading");
  luna__mod_close(m, true, false);
  m->state = LUNA_MOD_UNLOADED;
  return 0;
}

LUNA_API int luna_mods_unload_all(luna_mods *set) {
  size_t i;
  if (set == NULL)
    return LUNA_EINVAL;
  if (inside_mod(set))
    return LUNA_ESTATE;
  for (i = set->nmods; i-- > 0;) {
    luna__mod *m = set->mods[i];
    if (m->L == NULL)
      continue;
    luna__mod_close(m, false, false);
    m->state = LUNA_MOD_UNLOADED;
  }
  return 0;
}

LUNA_API int luna_mods_reload(luna_mods *set, const char *name) {
  luna__mod *m;
  int rc = find_to_change(set, name, &m);
  if (rc != 0)
    return rc;
  set->last_error[0] = '\0';
  luna__mods_report(set, m->man.name, "reloading");
  return reload(set, m);
}

LUNA_API int luna_mods_poll(luna_mods *set, size_t *reloaded) {
  size_t n;
  if (set == NULL)
    return LUNA_EINVAL;
  if (inside_mod(set))
    return LUNA_ESTATE;
  process_disables(set);
  n = poll_files(set);
  if (reloaded != NULL)
    *reloaded = n;
  return 0;
}

LUNA_API size_t luna_mods_count(const luna_mods *set) {
  return set != NULL ? set->nmods : 0;
}

LUNA_API int luna_mods_get_info(const luna_mods *set, size_t i, luna_mod_info *out) {
  const luna__mod *m;
  if (set == NULL || out == NULL || i >= set->nmods)
    return LUNA_ENOENT;
  m = set->mods[i];
  memset(out, 0, sizeof *out);
  out->name = m->man.name;
  out->version = m->man.version != NULL ? m->man.version : "0";
  out->dir = m->dir;
  out->state = m->state;
  out->memory = m->L != NULL ? m->mem_used : 0;
  out->host_memory = m->host_bytes;
  out->memory_peak = m->mem_peak;
  out->tasks = m->L != NULL ? luna_lua_task_count(m->L) : 0;
  out->callbacks = m->L != NULL ? luna_lua_callback_count(m->L) : 0;
  out->errors = m->errors_before + (m->L != NULL ? luna_lua_error_count(m->L) : 0);
  out->budget_overruns = m->budget_overruns;
  out->memory_overruns = m->memory_overruns;
  out->time_overruns = m->time_overruns;
  out->loads = m->loads;
  out->last_error = m->last_error;
  return 0;
}

LUNA_API int luna_mods_find(const luna_mods *set, const char *name, size_t *index) {
  const luna__mod *m;
  if (set == NULL || name == NULL)
    return LUNA_EINVAL;
  if ((m = find_name(set, name)) == NULL)
    return LUNA_ENOENT;
  if (index != NULL)
    *index = m->index;
  return 0;
}

LUNA_API lua_State *luna_mods_state(const luna_mods *set, const char *name) {
  const luna__mod *m = set != NULL && name != NULL ? find_name(set, name) : NULL;
  return m != NULL && m->state == LUNA_MOD_LOADED ? m->L : NULL;
}

LUNA_API bool luna_mods_alive(const luna_mods *set) {
  size_t i;
  if (set == NULL)
    return false;
  if (set->nqueue > 0)
    return true;
  for (i = 0; i < set->nmods; i++) {
    const luna__mod *m = set->mods[i];
    if (m->state == LUNA_MOD_LOADED && m->L != NULL &&
        luna_lua_task_count(m->L) + luna_lua_callback_count(m->L) > 0)
      return true;
  }
  return false;
}

LUNA_API uint64_t luna_mods_error_count(const luna_mods *set) {
  uint64_t n;
  size_t i;
  if (set == NULL)
    return 0;
  n = set->errors;
  for (i = 0; i < set->nmods; i++) {
    const luna__mod *m = set->mods[i];
    n += m->errors_before + (m->L != NULL ? luna_lua_error_count(m->L) : 0);
  }
  return n;
}

LUNA_API const char *luna_mods_last_error(const luna_mods *set) {
  return set != NULL ? set->last_error : "";
}
