/*
** files.c: the one way the host reads a file of a mod's folder (its
** manifest.lua, mod.lua, and what loadfile, dofile and require load).
**
** Every such file is
** - named by a path relative to the folder, resolved with realpath and
**   checked to stay inside the folder (a symbolic link may point elsewhere
**   inside it, never out: manifest.lua -> /etc/shadow is refused before a
**   byte is read, so no error message can quote such a file);
** - opened with O_NONBLOCK and O_NOFOLLOW (the resolved path has no links
**   left; a link swapped in for the last component after the check is
**   refused, not one swapped in for a folder above it) and O_NOCTTY, so
**   a FIFO, a terminal or a device node can never block the host; and
** - checked with fstat on the open descriptor to be a regular file before
**   it is read, at most `limit` bytes.
** Lua sources are parsed straight from the descriptor, 4 KiB at a time,
** so a 16 MiB source costs the host no buffer of its size: the chunk is
** built in the mod's own state, under its cap.
** A link to /dev/stdin leaves the folder and is refused by the first rule;
** a FIFO inside the folder opens at once and is refused by the last.
*/
#define _XOPEN_SOURCE 700 /* realpath, O_NOFOLLOW */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mods.h"

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

#define OUT_OR_NOTHING "it leads out of the mod's folder or to nothing"

/* Sets *why to a static reason and errno to e; returns -1. */
static int refuse(const char **why, const char *reason, int e) {
  *why = reason;
  errno = e;
  return -1;
}

/* Opens dir/rel as described above; the descriptor, or -1 with errno set
   and *why saying why (ENOENT: nothing there at all). */
static int open_in_folder(const char *dir, const char *rel, const char **why) {
  char full[PATH_MAX], real[PATH_MAX];
  size_t dirlen = strlen(dir);
  struct stat st;
  int fd;
  if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, rel) >= sizeof full)
    return refuse(why, "path too long", ENAMETOOLONG);
  /* A link out of the folder and a link to nothing get the same answer, so
     that a mod cannot tell from it whether a path outside exists. */
  if (realpath(full, real) == NULL) {
    int e = errno;
    if (e == ENOENT && lstat(full, &st) == 0)
      return refuse(why, OUT_OR_NOTHING, EACCES);
    return refuse(why, strerror(e), e);
  }
  if (strncmp(real, dir, dirlen) != 0 || real[dirlen] != '/')
    return refuse(why, OUT_OR_NOTHING, EACCES);
  fd = open(real, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return refuse(why, strerror(errno), errno);
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return refuse(why, "not a regular file", EINVAL);
  }
  return fd;
}

char *luna__read_in_folder(const char *dir, const char *rel, size_t limit, size_t *len,
                           const char **why) {
  char *buf = NULL;
  size_t n = 0, cap = 0;
  int fd = open_in_folder(dir, rel, why);
  if (fd < 0)
    return NULL;
  for (;;) {
    ssize_t got;
    if (n + 4096 + 1 > cap) {
      char *p;
      cap = cap ? cap * 2 : 8192;
      p = (char *)realloc(buf, cap);
      if (p == NULL) {
        free(buf);
        close(fd);
        refuse(why, "not enough memory", ENOMEM);
        return NULL;
      }
      buf = p;
    }
    got = read(fd, buf + n, cap - n - 1);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      int e = errno;
      free(buf);
      close(fd);
      refuse(why, strerror(e), e);
      return NULL;
    }
    n += (size_t)got;
    if (n > limit) {
      free(buf);
      close(fd);
      refuse(why, "the file is too large", EFBIG);
      return NULL;
    }
    if (got == 0)
      break;
  }
  close(fd);
  buf[n] = '\0';
  *len = n;
  return buf;
}

typedef struct reader {
  int fd;
  size_t total, limit;
  const char *why;  /* set when the read stopped for a reason of its own */
  char buf[4096];
} reader;

/* lua_Reader: the next piece of the file, or NULL at its end or when it
   stops early (then r->why says why, and the chunk is thrown away). */
static const char *read_piece(lua_State *L, void *ud, size_t *size) {
  reader *r = (reader *)ud;
  ssize_t got;
  (void)L;
  *size = 0;
  if (r->why != NULL)
    return NULL;
  do
    got = read(r->fd, r->buf, sizeof r->buf);
  while (got < 0 && errno == EINTR);
  if (got < 0) {
    r->why = strerror(errno);
    return NULL;
  }
  if (got == 0)
    return NULL;
  r->total += (size_t)got;
  if (r->total > r->limit) {
    r->why = "the file is too large";
    return NULL;
  }
  *size = (size_t)got;
  return r->buf;
}

int luna__load_in_folder(lua_State *L, const char *dir, const char *rel, size_t limit,
                         const char *chunkname, const char **why) {
  reader r;
  int st;
  r.fd = open_in_folder(dir, rel, why);
  if (r.fd < 0)
    return -1;
  r.total = 0;
  r.limit = limit;
  r.why = NULL;
  st = lua_load(L, read_piece, &r, chunkname, "t");
  close(r.fd);
  if (r.why != NULL) {
    lua_pop(L, 1); /* whatever the parser made of a cut file */
    *why = r.why;
    return -1;
  }
  return st;
}
