/*
** watch.c: file signatures for hot reload, with portable POSIX calls only
** (opendir/readdir/lstat/stat). A mod's signature sums a hash of the path,
** size and modification time (with nanoseconds where struct stat has them)
** of every regular file under its folder, so an edit, a new file, a
** removed or renamed one all change it; a sum, so the order readdir lists
** them in does not matter and nothing has to be kept or sorted. Dot-files
** (editor swap files, .git) are ignored.
**
** A mod's folder is a stranger's: the walk never follows a symbolic link
** to a folder (a folder of k links to "." would be walked k^depth times),
** a link to a file counts as that file, and it looks at no more than
** MAX_DEPTH levels, MAX_DIRS folders, MAX_FILES files and MAX_ENTRIES
** directory entries in all, so one check costs at most about MAX_ENTRIES
** lstat calls, and no memory but its stack (one path per level), whatever
** the folder holds. Past a bound the rest is not watched and the walk says
** so (the set reports it once).
*/
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "mods.h"

#define MAX_DEPTH 8
#define MAX_DIRS 1024
#define MAX_FILES 4096
#define MAX_ENTRIES 16384

typedef struct walk {
  uint64_t sum; /* of the entries' hashes: the order readdir gives is free */
  int files, dirs, entries;
  bool over;    /* a bound was reached: some of the folder is not watched */
} walk;

/* FNV-1a over data, going on from h. */
static uint64_t mix(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  size_t i;
  for (i = 0; i < n; i++) {
    h ^= p[i];
    h *= UINT64_C(0x100000001b3);
  }
  return h;
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

/* Adds one file to the signature: a hash of its path, size and mtime. */
static void add_file(walk *w, const char *path, const struct stat *st) {
  long long size = (long long)st->st_size, t = mtime_ns(st);
  uint64_t h = mix(UINT64_C(0xcbf29ce484222325), path, strlen(path) + 1);
  h = mix(h, &size, sizeof size);
  h = mix(h, &t, sizeof t);
  w->sum += h * UINT64_C(0x9e3779b97f4a7c15) | 1; /* never a zero term */
  w->files++;
}

/* Walks one folder, handling each entry as readdir gives it: nothing is
   kept but the path on the stack, so a folder of any size costs the host
   no memory, only the bounded number of lstat calls. */
static void walk_dir(walk *w, const char *dir, int depth) {
  DIR *d;
  struct dirent *e;
  if (depth > MAX_DEPTH || w->dirs >= MAX_DIRS) {
    w->over = true;
    return;
  }
  w->dirs++;
  if ((d = opendir(dir)) == NULL)
    return;
  while ((e = readdir(d)) != NULL) {
    char path[4096];
    struct stat st, target;
    bool link, to_dir = false;
    if (e->d_name[0] == '.')
      continue;
    if (w->entries >= MAX_ENTRIES) {
      w->over = true;
      break;
    }
    w->entries++;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path ||
        lstat(path, &st) != 0)
      continue;
    link = S_ISLNK(st.st_mode);
    if (link && stat(path, &target) == 0) { /* else a dangling link: its own stat */
      to_dir = S_ISDIR(target.st_mode);
      st = target;
    }
    if (S_ISDIR(st.st_mode) && !link)
      walk_dir(w, path, depth + 1);
    else if (to_dir)
      continue; /* not followed */
    else if (!S_ISREG(st.st_mode) && !link)
      continue;
    else if (w->files >= MAX_FILES)
      w->over = true;
    else
      add_file(w, path, &st);
  }
  closedir(d);
}

uint64_t luna__watch_signature(const char *dir, bool *over) {
  walk w;
  memset(&w, 0, sizeof w);
  walk_dir(&w, dir, 0);
  if (over != NULL)
    *over = w.over;
  return w.files == 0 ? 0 : w.sum ^ (uint64_t)w.files;
}
