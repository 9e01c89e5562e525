/*
** mods_util.h: a fixture for the mod tests: a temporary folder of mods, a
** loop and a mod set whose prints and reports are collected in buffers, and
** a cleanup that removes the folder and checks nothing is left running.
*/
#ifndef LUNA_TEST_MODS_UTIL_H
#define LUNA_TEST_MODS_UTIL_H

#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <lauxlib.h>
#include <lualib.h>

#include "lunaloop_mods.h"

typedef struct fixture {
  char dir[256];
  luna_loop *loop;
  luna_mods *set;
  char out[1 << 16]; /* "[mod] line\n" for every print */
  size_t outlen;
  char rep[1 << 16]; /* "mod: message\n" for every report */
  size_t replen;
} fixture;

static inline void fx_append(char *buf, size_t *len, size_t cap, const char *fmt, ...) {
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (n > 0)
    *len += (size_t)n < cap - *len ? (size_t)n : cap - *len - 1;
}

static inline void fx_print(void *ud, const char *mod, const char *line, size_t len) {
  fixture *f = (fixture *)ud;
  fx_append(f->out, &f->outlen, sizeof f->out, "[%s] %.*s\n", mod, (int)len, line);
}

static inline void fx_report(void *ud, const char *mod, const char *msg) {
  fixture *f = (fixture *)ud;
  fx_append(f->rep, &f->replen, sizeof f->rep, "%s: %s\n", mod != NULL ? mod : "-", msg);
}

/* The defaults, with files never watched (tests poll when they want). */
static inline luna_mods_config fx_config(void) {
  luna_mods_config c;
  memset(&c, 0, sizeof c);
  c.watch_frames = -1;
  return c;
}

/* Creates the folder, the loop and the set; cfg may be NULL (then
   fx_config()). */
static inline fixture *fx_new(const luna_mods_config *cfg) {
  fixture *f = (fixture *)calloc(1, sizeof *f);
  luna_mods_config c = cfg != NULL ? *cfg : fx_config();
  assert_non_null(f);
  strcpy(f->dir, "/tmp/lunaloop-mods-XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  assert_int_equal(luna_loop_new(NULL, &f->loop), 0);
  /* The time budget measures the real clock unless a test installs its
     own: a generous one keeps the other tests from depending on how busy
     the machine is. */
  if (c.time_limit == 0)
    c.time_limit = (luna_ns)60 * 1000000000;
  c.print = fx_print;
  c.print_ud = f;
  c.report = fx_report;
  c.report_ud = f;
  assert_int_equal(luna_mods_new(f->loop, &c, &f->set), 0);
  return f;
}

/* Writes dir/rel (making its folders). */
static inline void fx_write(fixture *f, const char *rel, const char *text) {
  char path[512];
  char *p;
  FILE *fp;
  snprintf(path, sizeof path, "%s/%s", f->dir, rel);
  for (p = path + strlen(f->dir) + 1; (p = strchr(p, '/')) != NULL; p++) {
    *p = '\0';
    mkdir(path, 0755);
    *p = '/';
  }
  fp = fopen(path, "w");
  assert_non_null(fp);
  fputs(text, fp);
  fclose(fp);
}

static inline void fx_frames(fixture *f, int n) {
  while (n-- > 0)
    assert_int_equal(luna_loop_frame(f->loop, 1.0 / 60), 0);
}

static inline int fx_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static inline void fx_free(fixture *f) {
  luna_mods_free(f->set);
  luna_loop_free(f->loop);
  nftw(f->dir, fx_rm, 16, FTW_DEPTH | FTW_PHYS);
  free(f);
}

/* The info of the mod named `name`. */
static inline luna_mod_info fx_info(fixture *f, const char *name) {
  luna_mod_info info;
  size_t i;
  assert_int_equal(luna_mods_find(f->set, name, &i), 0);
  assert_int_equal(luna_mods_get_info(f->set, i, &info), 0);
  return info;
}

/* luna_mods_poll, which must succeed: how many mods it reloaded. */
static inline size_t fx_poll(fixture *f) {
  size_t n = 0;
  assert_int_equal(luna_mods_poll(f->set, &n), 0);
  return n;
}

/* Reads a global integer of a loaded mod's state. */
static inline long long fx_global(fixture *f, const char *mod, const char *name) {
  lua_State *L = luna_mods_state(f->set, mod);
  long long v;
  assert_non_null(L);
  lua_getglobal(L, name);
  v = (long long)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return v;
}

#define assert_has(buf, text)                                                        \
  do {                                                                               \
    if (strstr((buf), (text)) == NULL)                                               \
      fail_msg("expected to find \"%s\" in:\n%s", (text), (buf));                    \
  } while (0)

#define assert_lacks(buf, text)                                                      \
  do {                                                                               \
    if (strstr((buf), (text)) != NULL)                                               \
      fail_msg("did not expect \"%s\" in:\n%s", (text), (buf));                      \
  } while (0)

#endif
