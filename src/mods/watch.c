/*
** watch.c: file signatures for hot reload, with portable POSIX calls only
** (opendir/readdir/stat). A mod's signature hashes the path, size and
** modification time (with nanoseconds where struct stat has them) of every
** regular file under its folder, in name order, so an edit, a new file, a
** removed or renamed one all change it. Dot-files (editor swap files, .git)
** are ignored.
**
** A mod's folder is a stranger's: the walk never follows a symbolic link
** to a folder (a folder of k links to "." would be walked k^depth times),
** a link to a file counts as that file, and it looks at no more than
** MAX_DEPTH levels, MAX_DIRS folders, MAX_FILES files and MAX_ENTRIES
** directory entries in all, so one check costs at most about MAX_ENTRIES
** lstat calls whatever the folder holds. Past a bound the rest is not
** watched and the walk says so (the set reports it once).
*/
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mods.h"

#define MAX_DEPTH 8
#define MAX_DIRS 1024
#define MAX_FILES 4096
#define MAX_ENTRIES 16384

typedef struct walk {
  uint64_t hash;
  int files, dirs, entries;
  bool over; /* a bound was reached: some of the folder is not watched */
} walk;

static void mix(walk *w, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  size_t i;
  for (i = 0; i < n; i++) {
    w->hash ^= p[i];
    w->hash *= UINT64_C(0x100000001b3); /* FNV-1a */
  }
}

static long long mtime_ns(const struct stat *st) {
#if defined(__APPLE__)
  return (long long)st->st_mtimespec.tv_sec * 1000000000LL + st->st_mtimespec.tv_nsec;
#elif defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 200809L
  return (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
#else
  return (long long)st->st_mtime * 1000000000LL;
#endif
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void walk_dir(walk *w, const char *dir, int depth) {
  DIR *d;
  struct dirent *e;
  char **names = NULL;
  size_t n = 0, cap = 0, i;
  if (depth > MAX_DEPTH || w->dirs >= MAX_DIRS) {
    w->over = true;
    return;
  }
  w->dirs++;
  if ((d = opendir(dir)) == NULL)
    return;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    if (w->entries >= MAX_ENTRIES) {
      w->over = true;
      break;
    }
    w->entries++;
    if (n == cap) {
      char **p;
      cap = cap ? cap * 2 : 16;
      p = (char **)realloc(names, cap * sizeof *names);
      if (p == NULL)
        break;
      names = p;
    }
    names[n] = (char *)malloc(strlen(e->d_name) + 1);
    if (names[n] == NULL)
      break;
    strcpy(names[n++], e->d_name);
  }
  closedir(d);
  if (n > 0)
    qsort(names, n, sizeof *names, by_name);
  for (i = 0; i < n; i++) {
    char path[4096];
    struct stat st;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]) < sizeof path &&
        lstat(path, &st) == 0) {
      bool link = S_ISLNK(st.st_mode), to_dir = false;
      struct stat target;
      if (link && stat(path, &target) == 0) { /* else a dangling link: its own stat */
        to_dir = S_ISDIR(target.st_mode);
        st = target;
      }
      if (S_ISDIR(st.st_mode) && !link) {
        walk_dir(w, path, depth + 1);
      } else if (to_dir) {
        /* not followed */
      } else if (S_ISREG(st.st_mode) || link) {
        long long size = (long long)st.st_size, t = mtime_ns(&st);
        if (w->files >= MAX_FILES) {
          w->over = true;
        } else {
          w->files++;
          mix(w, path, strlen(path) + 1);
          mix(w, &size, sizeof size);
          mix(w, &t, sizeof t);
        }
      }
    }
    free(names[i]);
  }
  free(names);
}

uint64_t luna__watch_signature(const char *dir, bool *over) {
  walk w;
  memset(&w, 0, sizeof w);
  w.hash = UINT64_C(0xcbf29ce484222325);
  walk_dir(&w, dir, 0);
  if (over != NULL)
    *over = w.over;
  return w.files == 0 ? 0 : w.hash;
}
