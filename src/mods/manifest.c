/*
** manifest.c: reading a mod's manifest.lua.
**
** The manifest is a text chunk that returns a table:
**   return { name = "core", version = "1.2.0", depends = {"base"}, load_order = 10 }
** It runs in a throwaway Lua state with no library at all and an empty
** environment, a 1 MiB memory cap and a 100,000-instruction budget, so the
** worst a manifest can do is fail. Every field is optional: name defaults
** to the folder's name, version to "0", depends to {}, load_order to 0.
** Unknown fields are errors (a misspelt "dependencies" must not silently
** drop the dependencies). Names and versions have small alphabets (below)
** since reports and bus messages quote them. The file is read like every
** file of a mod's folder (files.c): contained in the folder, never
** blocking, a regular file of at most MANIFEST_SIZE bytes.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mods.h"

#define MANIFEST_MEMORY (1024 * 1024)
#define MANIFEST_INSTRUCTIONS 100000
#define MAX_NAME 64
#define MANIFEST_SIZE (64 * 1024) /* bytes: a manifest is a few lines */

typedef struct capped {
  size_t used;
} capped;

static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  capped *c = (capped *)ud;
  void *p;
  if (ptr == NULL)
    osize = 0;
  if (nsize == 0) {
    free(ptr);
    c->used -= osize;
    return NULL;
  }
  if (nsize > osize && c->used + (nsize - osize) > MANIFEST_MEMORY)
    return NULL;
  p = realloc(ptr, nsize);
  if (p != NULL)
    c->used = c->used - osize + nsize;
  return p;
}

static void stop_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  luaL_error(L, "manifest.lua runs too long (more than %d instructions)", MANIFEST_INSTRUCTIONS);
}

/* Names: what the host puts in reports, in the sender of bus messages and
   in the folder-like places hosts may use them (a save file per mod), so
   only a small safe alphabet, and no path word: letters, digits, '_', '-'
   and '.', starting with a letter, a digit or '_' (so "." and ".." are
   refused, as is any name a shell would take for an option). "host" is
   the sender of the host's own messages: no mod may pose as it. */
static bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static bool valid_name(const char *s, size_t len) {
  size_t i;
  if (len == 0 || len > MAX_NAME || !name_char(s[0]) || (len == 4 && memcmp(s, "host", 4) == 0))
    return false;
  for (i = 1; i < len; i++)
    if (!name_char(s[i]) && s[i] != '-' && s[i] != '.')
      return false;
  return true;
}

/* Versions: 1-64 letters, digits and '.', '-', '+', '_', '~' (what
   semantic and Debian versions use): no spaces, no control characters. */
static bool valid_version(const char *s, size_t len) {
  size_t i;
  if (len == 0 || len > MAX_NAME)
    return false;
  for (i = 0; i < len; i++)
    if (!name_char(s[i]) && strchr(".-+~", s[i]) == NULL)
      return false;
  return true;
}

static char *dup_n(const char *s, size_t n) {
  char *p = (char *)malloc(n + 1);
  if (p != NULL) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

/* Field `field` of the table at index 1, when set, into *out (malloc'ed,
   replacing what *out held); raises `expected` (a format taking MAX_NAME)
   when it is not a string that `valid` accepts. */
static void take_string(lua_State *L, const char *field, bool (*valid)(const char *, size_t),
                        const char *expected, char **out) {
  size_t len;
  const char *s;
  if (lua_getfield(L, 1, field) == LUA_TNIL)
    return;
  s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
  if (s == NULL || !valid(s, len))
    luaL_error(L, expected, MAX_NAME);
  free(*out);
  *out = dup_n(s, len);
}

/* Protected: checks the table returned by the chunk (at index 1) and fills
   the manifest (light userdata at index 2). */
static int check_table(lua_State *L) {
  luna__manifest *man = (luna__manifest *)lua_touserdata(L, 2);
  size_t len;
  const char *s;
  if (!lua_istable(L, 1))
    return luaL_error(L, "manifest.lua must return a table, got %s", luaL_typename(L, 1));
  lua_pushnil(L);
  while (lua_next(L, 1) != 0) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    if (k == NULL || (strcmp(k, "name") != 0 && strcmp(k, "version") != 0 &&
                      strcmp(k, "depends") != 0 && strcmp(k, "load_order") != 0))
      return luaL_error(L, "manifest.lua: unknown field '%s' (expected name, version, "
                           "depends, load_order)", k != NULL ? k : luaL_typename(L, -2));
    lua_pop(L, 1);
  }
  take_string(L, "name", valid_name,
              "manifest.lua: name must be 1-%d letters, digits, '_', '-' or '.', starting "
              "with a letter, a digit or '_', and not 'host'",
              &man->name);
  take_string(L, "version", valid_version,
              "manifest.lua: version must be 1-%d letters, digits, '.', '-', '+', '_' or '~'",
              &man->version);
  if (lua_getfield(L, 1, "load_order") != LUA_TNIL) {
    if (!lua_isinteger(L, -1))
      return luaL_error(L, "manifest.lua: load_order must be an integer");
    man->load_order = (long long)lua_tointeger(L, -1);
  }
  if (lua_getfield(L, 1, "depends") != LUA_TNIL) {
    lua_Integer i, n;
    if (!lua_istable(L, -1))
      return luaL_error(L, "manifest.lua: depends must be a list of mod names");
    n = (lua_Integer)lua_rawlen(L, -1);
    if (n > 256)
      return luaL_error(L, "manifest.lua: too many dependencies");
    man->depends = (char **)calloc((size_t)n + 1, sizeof *man->depends);
    if (man->depends == NULL)
      return luaL_error(L, "not enough memory");
    for (i = 1; i <= n; i++) {
      lua_rawgeti(L, -1, i);
      s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
      if (s == NULL || !valid_name(s, len))
        return luaL_error(L, "manifest.lua: depends[%d] must be a mod name", (int)i);
      man->depends[man->ndepends++] = dup_n(s, len);
      lua_pop(L, 1);
    }
  }
  return 0;
}

void luna__manifest_free(luna__manifest *man) {
  size_t i;
  free(man->name);
  free(man->version);
  for (i = 0; i < man->ndepends; i++)
    free(man->depends[i]);
  free(man->depends);
  memset(man, 0, sizeof *man);
}

/* True when the folder's name (`base`) may serve as the mod's name. */
static bool folder_name_ok(const char *base, char *err, size_t errlen) {
  if (valid_name(base, strlen(base)))
    return true;
  snprintf(err, errlen, "the folder name is not a valid mod name; add a manifest.lua with a "
                        "name");
  return false;
}

bool luna__manifest_read(const char *dir, luna__manifest *out, char *err, size_t errlen) {
  const char *base = strrchr(dir, '/'), *why;
  char shown[1100]; /* the folder's name escaped: 255 bytes, 4 for each at most */
  char *src;
  size_t len;
  capped c = {0};
  lua_State *L;
  bool ok = false;
  memset(out, 0, sizeof *out);
  base = base != NULL ? base + 1 : dir;
  /* The folder's name is the default name; as it is also the name reports
     use when the manifest is bad, its control characters are escaped. */
  luna__escape(shown, sizeof shown, base, strlen(base), 0, NULL);
  out->name = dup_n(shown, strlen(shown));
  out->version = dup_n("0", 1);
  if (out->name == NULL || out->version == NULL) {
    snprintf(err, errlen, "not enough memory");
    goto done;
  }
  src = luna__read_in_folder(dir, "manifest.lua", MANIFEST_SIZE, &len, &why);
  if (src == NULL) {
    if (errno == ENOENT) { /* no manifest: the defaults */
      ok = folder_name_ok(base, err, errlen);
      goto done;
    }
    snprintf(err, errlen, "cannot read manifest.lua: %s", why);
    goto done;
  }
  L = lua_newstate(capped_alloc, &c);
  if (L == NULL) {
    free(src);
    snprintf(err, errlen, "not enough memory");
    goto done;
  }
  lua_sethook(L, stop_hook, LUA_MASKCOUNT, MANIFEST_INSTRUCTIONS);
  if (luaL_loadbufferx(L, src, len, "@manifest.lua", "t") != LUA_OK) {
    snprintf(err, errlen, "%s", lua_tostring(L, -1));
  } else {
    lua_newtable(L); /* the empty environment */
    lua_setupvalue(L, -2, 1);
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
      snprintf(err, errlen, "%s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "error");
    } else {
      lua_pushcfunction(L, check_table);
      lua_insert(L, -2);
      lua_pushlightuserdata(L, out);
      if (lua_pcall(L, 2, 0, 0) != LUA_OK)
        snprintf(err, errlen, "%s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "error");
      else if (strcmp(out->name, shown) != 0) /* its own name: checked above */
        ok = true;
      else
        ok = folder_name_ok(base, err, errlen);
    }
  }
  lua_close(L);
  free(src);
done:
  if (!ok) {
    /* Keep the name (for reports), drop the rest. */
    char *name = out->name;
    out->name = NULL;
    luna__manifest_free(out);
    out->name = name;
    out->version = dup_n("0", 1);
  }
  return ok;
}
