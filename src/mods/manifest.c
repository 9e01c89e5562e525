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
** drop the dependencies). Names are 1-64 letters, digits, '_', '-', '.'.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mods.h"

#define MANIFEST_MEMORY (1024 * 1024)
#define MANIFEST_INSTRUCTIONS 100000
#define MAX_NAME 64

char *luna__read_file(const char *path, size_t limit, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t n = 0, cap = 0;
  if (f == NULL)
    return NULL;
  for (;;) {
    size_t got;
    if (n + 4096 + 1 > cap) {
      char *p;
      cap = cap ? cap * 2 : 8192;
      p = (char *)realloc(buf, cap);
      if (p == NULL) {
        free(buf);
        fclose(f);
        errno = ENOMEM;
        return NULL;
      }
      buf = p;
    }
    got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (n > limit) {
      free(buf);
      fclose(f);
      errno = EFBIG;
      return NULL;
    }
    if (got == 0)
      break;
  }
  if (ferror(f)) {
    int e = errno;
    free(buf);
    fclose(f);
    errno = e ? e : EIO;
    return NULL;
  }
  fclose(f);
  buf[n] = '\0';
  *len = n;
  return buf;
}

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

static bool valid_name(const char *s, size_t len) {
  size_t i;
  if (len == 0 || len > MAX_NAME)
    return false;
  for (i = 0; i < len; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '-' || c == '.'))
      return false;
  }
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
  if (lua_getfield(L, 1, "name") != LUA_TNIL) {
    s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
    if (s == NULL || !valid_name(s, len))
      return luaL_error(L, "manifest.lua: name must be 1-%d letters, digits, '_', '-' or '.'",
                        MAX_NAME);
    free(man->name);
    man->name = dup_n(s, len);
  }
  if (lua_getfield(L, 1, "version") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TSTRING || (len = lua_rawlen(L, -1)) > 64)
      return luaL_error(L, "manifest.lua: version must be a string of at most 64 bytes");
    free(man->version);
    man->version = dup_n(lua_tostring(L, -1), len);
  }
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

bool luna__manifest_read(const char *dir, luna__manifest *out, char *err, size_t errlen) {
  char path[4096];
  const char *base = strrchr(dir, '/');
  char *src;
  size_t len;
  capped c = {0};
  lua_State *L;
  bool ok = false;
  memset(out, 0, sizeof *out);
  base = base != NULL ? base + 1 : dir;
  out->name = dup_n(base, strlen(base));
  out->version = dup_n("0", 1);
  if (out->name == NULL || out->version == NULL) {
    snprintf(err, errlen, "not enough memory");
    goto done;
  }
  snprintf(path, sizeof path, "%s/manifest.lua", dir);
  src = luna__read_file(path, 64 * 1024, &len);
  if (src == NULL) {
    if (errno == ENOENT) { /* no manifest: the defaults */
      ok = valid_name(out->name, strlen(out->name));
      if (!ok)
        snprintf(err, errlen, "the folder name is not a valid mod name; add a manifest.lua "
                              "with a name");
      goto done;
    }
    snprintf(err, errlen, "cannot read manifest.lua: %s", strerror(errno));
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
      else
        ok = true;
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
