/*
** pattern.c: the pattern functions of a mod's string library (find,
** match, gmatch, gsub), with a matcher whose work is bounded.
**
** Lua's patterns (reference manual, section 6.4.1) backtrack: a pattern
** such as ".-.-.-x" against 2,000 letters takes on the order of n^4 steps
** inside one C call, where no count hook can stop it. This matcher follows
** the manual's rules (written from them, and checked against the stock
** functions by tests/mods/test_pattern.c) and counts its steps: one for
** each attempt to match the rest of the pattern at a position and one for
** each character tested against a class. A call that would take more
** steps than the mod's instruction budget raises "pattern too complex";
** every 65,536 steps it also checks the mod's time budget (the stop of
** budget.c), and the steps a call took are charged to the run's
** instruction count. Recursion is limited as in stock Lua (200 levels).
** Plain searches (find with plain, or a pattern without magic characters)
** use memmem, linear in the subject's length.
*/
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <string.h>

#include "mods.h"

#define MAX_CAPTURES 32
#define MAX_DEPTH 200
#define CAP_UNFINISHED (-1)
#define CAP_POSITION (-2)
#define TIME_CHECK_MASK 0xFFFF

typedef struct matcher {
  lua_State *L;
  luna__mod *mod;          /* NULL outside a mod */
  const char *src, *src_end;
  const char *pat, *pat_end;
  uint64_t steps, limit;
  int depth;
  int level;               /* captures open or closed */
  struct {
    const char *init;
    ptrdiff_t len;         /* or CAP_UNFINISHED, CAP_POSITION */
  } cap[MAX_CAPTURES];
} matcher;

static void step(matcher *ms) {
  ms->steps++;
  if (ms->steps > ms->limit)
    luaL_error(ms->L, "pattern too complex (more than %I steps)", (lua_Integer)ms->limit);
  if ((ms->steps & TIME_CHECK_MASK) == 0 && ms->mod != NULL)
    luna__budget_check_time(ms->L, ms->mod);
}

/* ---- classes ------------------------------------------------------------- */

/* c against %cl (cl a letter: a class, upper case its complement; any
   other character stands for itself). */
static bool class_has(int c, int cl) {
  bool in;
  switch (tolower(cl)) {
  case 'a': in = isalpha(c); break;
  case 'c': in = iscntrl(c); break;
  case 'd': in = isdigit(c); break;
  case 'g': in = isgraph(c); break;
  case 'l': in = islower(c); break;
  case 'p': in = ispunct(c); break;
  case 's': in = isspace(c); break;
  case 'u': in = isupper(c); break;
  case 'w': in = isalnum(c); break;
  case 'x': in = isxdigit(c); break;
  default: return cl == c;
  }
  return isupper(cl) ? !in : in;
}

/* The end of the single class that starts at p (one past it). */
static const char *class_end(matcher *ms, const char *p) {
  char c = *p++;
  if (c == '%') {
    if (p >= ms->pat_end)
      luaL_error(ms->L, "malformed pattern (ends with '%%')");
    return p + 1;
  }
  if (c == '[') {
    if (p < ms->pat_end && *p == '^')
      p++;
    /* The first character of a set is part of it, even a ']'. */
    do {
      if (p >= ms->pat_end)
        luaL_error(ms->L, "malformed pattern (missing ']')");
      c = *p++;
      if (c == '%' && p < ms->pat_end)
        p++;
    } while (p >= ms->pat_end || *p != ']');
    return p + 1;
  }
  return p;
}

/* c against the set [...] from p (its '[') to last (its ']'). */
static bool set_has(int c, const char *p, const char *last) {
  bool want = true;
  if (p[1] == '^') {
    want = false;
    p++;
  }
  while (++p < last) {
    if (*p == '%') {
      p++;
      if (class_has(c, (unsigned char)*p))
        return want;
    } else if (p[1] == '-' && p + 2 < last) {
      if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2])
        return want;
      p += 2;
    } else if ((unsigned char)*p == c) {
      return want;
    }
  }
  return !want;
}

/* The character at s against the single class p..ep. */
static bool single(matcher *ms, const char *s, const char *p, const char *ep) {
  int c;
  step(ms);
  if (s >= ms->src_end)
    return false;
  c = (unsigned char)*s;
  switch (*p) {
  case '.': return true;
  case '%': return class_has(c, (unsigned char)p[1]);
  case '[': return set_has(c, p, ep - 1);
  default: return (unsigned char)*p == c;
  }
}

/* ---- matching ------------------------------------------------------------ */

static const char *match(matcher *ms, const char *s, const char *p);

static const char *greedy(matcher *ms, const char *s, const char *p, const char *ep) {
  ptrdiff_t n = 0;
  while (single(ms, s + n, p, ep))
    n++;
  for (; n >= 0; n--) {
    const char *r = match(ms, s + n, ep + 1);
    if (r != NULL)
      return r;
  }
  return NULL;
}

static const char *lazy(matcher *ms, const char *s, const char *p, const char *ep) {
  for (;;) {
    const char *r = match(ms, s, ep + 1);
    if (r != NULL)
      return r;
    if (!single(ms, s, p, ep))
      return NULL;
    s++;
  }
}

static const char *open_capture(matcher *ms, const char *s, const char *p, ptrdiff_t what) {
  const char *r;
  if (ms->level >= MAX_CAPTURES)
    luaL_error(ms->L, "too many captures");
  ms->cap[ms->level].init = s;
  ms->cap[ms->level].len = what;
  ms->level++;
  r = match(ms, s, p);
  if (r == NULL)
    ms->level--;
  return r;
}

static const char *close_capture(matcher *ms, const char *s, const char *p) {
  int l;
  const char *r;
  for (l = ms->level - 1; l >= 0; l--)
    if (ms->cap[l].len == CAP_UNFINISHED)
      break;
  if (l < 0)
    luaL_error(ms->L, "invalid pattern capture");
  ms->cap[l].len = s - ms->cap[l].init;
  r = match(ms, s, p);
  if (r == NULL)
    ms->cap[l].len = CAP_UNFINISHED;
  return r;
}

/* %bxy at s: x, then characters up to the y that balances it. */
static const char *balance(matcher *ms, const char *s, const char *p) {
  int depth = 1;
  if (p + 1 >= ms->pat_end)
    luaL_error(ms->L, "malformed pattern (missing arguments to '%%b')");
  if (s >= ms->src_end || *s != p[0])
    return NULL;
  while (++s < ms->src_end) {
    step(ms);
    if (*s == p[1]) {
      if (--depth == 0)
        return s + 1;
    } else if (*s == p[0]) {
      depth++;
    }
  }
  return NULL;
}

/* %1-%9 at s: the same text as that capture. */
static const char *backref(matcher *ms, const char *s, int digit) {
  int l = digit - '1';
  size_t len;
  if (l < 0 || l >= ms->level || ms->cap[l].len == CAP_UNFINISHED)
    luaL_error(ms->L, "invalid capture index %%%d", l + 1);
  if (ms->cap[l].len == CAP_POSITION)
    return NULL;
  len = (size_t)ms->cap[l].len;
  ms->steps += len;
  if ((size_t)(ms->src_end - s) >= len && memcmp(ms->cap[l].init, s, len) == 0)
    return s + len;
  return NULL;
}

/* The end of the match of pattern p at s, or NULL. One switch over the
   pattern item, as lstrlib.c's match (its loop and gotos), kept whole so the
   two can be read side by side; hence its length. */
static const char *match(matcher *ms, const char *s, const char *p) {
  if (++ms->depth > MAX_DEPTH)
    luaL_error(ms->L, "pattern too complex");
  step(ms);
  while (p < ms->pat_end) {
    const char *ep;
    if (*p == '(') {
      s = p + 1 < ms->pat_end && p[1] == ')' ? open_capture(ms, s, p + 2, CAP_POSITION)
                                             : open_capture(ms, s, p + 1, CAP_UNFINISHED);
      goto done;
    }
    if (*p == ')') {
      s = close_capture(ms, s, p + 1);
      goto done;
    }
    if (*p == '$' && p + 1 == ms->pat_end) {
      if (s != ms->src_end)
        s = NULL;
      goto done;
    }
    if (*p == '%' && p + 1 < ms->pat_end) {
      if (p[1] == 'b') {
        s = balance(ms, s, p + 2);
        if (s == NULL)
          goto done;
        p += 4;
        continue;
      }
      if (p[1] == 'f') {
        int before, here;
        p += 2;
        if (p >= ms->pat_end || *p != '[')
          luaL_error(ms->L, "missing '[' after '%%f' in pattern");
        ep = class_end(ms, p);
        before = s == ms->src ? 0 : (unsigned char)s[-1];
        here = s < ms->src_end ? (unsigned char)*s : 0;
        if (set_has(before, p, ep - 1) || !set_has(here, p, ep - 1)) {
          s = NULL;
          goto done;
        }
        p = ep;
        continue;
      }
      if (isdigit((unsigned char)p[1])) {
        s = backref(ms, s, (unsigned char)p[1]);
        if (s == NULL)
          goto done;
        p += 2;
        continue;
      }
    }
    ep = class_end(ms, p);
    if (!single(ms, s, p, ep)) {
      if (ep < ms->pat_end && (*ep == '*' || *ep == '?' || *ep == '-')) {
        p = ep + 1; /* zero of them */
        continue;
      }
      s = NULL;
      goto done;
    }
    if (ep < ms->pat_end) {
      const char *r;
      switch (*ep) {
      case '?':
        r = match(ms, s + 1, ep + 1);
        if (r != NULL) {
          s = r;
          goto done;
        }
        p = ep + 1;
        continue;
      case '+': s = greedy(ms, s + 1, p, ep); goto done;
      case '*': s = greedy(ms, s, p, ep); goto done;
      case '-': s = lazy(ms, s, p, ep); goto done;
      default: break;
      }
    }
    s++;
    p = ep;
  }
done:
  ms->depth--;
  return s;
}

/* ---- captures ------------------------------------------------------------ */

/* Pushes capture i (the whole match s..e when there are none and i is 0). */
static void push_capture(matcher *ms, int i, const char *s, const char *e) {
  if (i >= ms->level) {
    if (i != 0)
      luaL_error(ms->L, "invalid capture index %%%d", i + 1);
    lua_pushlstring(ms->L, s, (size_t)(e - s));
    return;
  }
  if (ms->cap[i].len == CAP_UNFINISHED)
    luaL_error(ms->L, "unfinished capture");
  if (ms->cap[i].len == CAP_POSITION)
    lua_pushinteger(ms->L, (ms->cap[i].init - ms->src) + 1);
  else
    lua_pushlstring(ms->L, ms->cap[i].init, (size_t)ms->cap[i].len);
}

/* Pushes every capture (or the whole match, when s is not NULL and there
   are none); returns how many. */
static int push_captures(matcher *ms, const char *s, const char *e) {
  int i, n = ms->level == 0 && s != NULL ? 1 : ms->level;
  luaL_checkstack(ms->L, n, "too many captures");
  for (i = 0; i < n; i++)
    push_capture(ms, i, s, e);
  return n;
}

/* ---- the functions --------------------------------------------------------- */

static void setup(matcher *ms, lua_State *L, const char *s, size_t ls, const char *p,
                  size_t lp) {
  luna__mod *m = (luna__mod *)lua_touserdata(L, lua_upvalueindex(1));
  ms->L = L;
  ms->mod = m;
  ms->src = s;
  ms->src_end = s + ls;
  ms->pat = p;
  ms->pat_end = p + lp;
  ms->steps = 0;
  ms->limit = m != NULL ? m->budget : LUNA__PATTERN_STEPS;
  ms->depth = 0;
  ms->level = 0;
}

/* Charges the steps to the run's instruction count. */
static void charge(matcher *ms) {
  if (ms->mod != NULL)
    luna__budget_charge(ms->L, ms->mod, ms->steps);
}

static const char *attempt(matcher *ms, const char *s, const char *p) {
  ms->level = 0;
  ms->depth = 0;
  return match(ms, s, p);
}

/* A start position (1-based, negative from the end) as an offset, or -1
   when it lies past the end. */
static lua_Integer start_of(lua_State *L, int arg, size_t len) {
  lua_Integer i = luaL_optinteger(L, arg, 1);
  if (i > 0) {
    if ((lua_Unsigned)i - 1 > len)
      return -1;
    return i - 1;
  }
  if (i == 0)
    return 0;
  if ((lua_Unsigned)-(i + 1) >= len) /* -i > len */
    return 0;
  return (lua_Integer)len + i;
}

static bool has_magic(const char *p, size_t lp) {
  size_t i;
  for (i = 0; i < lp; i++)
    if (strchr("^$*+?.([%-", p[i]) != NULL && p[i] != '\0')
      return true;
  return false;
}

static int find_or_match(lua_State *L, bool find) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  lua_Integer init = start_of(L, 3, ls);
  matcher ms;
  const char *s1;
  bool anchor;
  if (init < 0) {
    luaL_pushfail(L);
    return 1;
  }
  if (find && (lua_toboolean(L, 4) || !has_magic(p, lp))) {
    const char *at = lp == 0 ? s + init
                             : (const char *)memmem(s + init, ls - (size_t)init, p, lp);
    if (at == NULL) {
      luaL_pushfail(L);
      return 1;
    }
    lua_pushinteger(L, (at - s) + 1);
    lua_pushinteger(L, (at - s) + (lua_Integer)lp);
    return 2;
  }
  setup(&ms, L, s, ls, p, lp);
  anchor = lp > 0 && *p == '^';
  if (anchor)
    ms.pat++;
  s1 = s + init;
  do {
    const char *e = attempt(&ms, s1, ms.pat);
    if (e != NULL) {
      int n;
      charge(&ms);
      if (find) {
        lua_pushinteger(L, (s1 - s) + 1);
        lua_pushinteger(L, e - s);
        return push_captures(&ms, NULL, NULL) + 2;
      }
      n = push_captures(&ms, s1, e);
      return n;
    }
  } while (s1++ < ms.src_end && !anchor);
  charge(&ms);
  luaL_pushfail(L);
  return 1;
}

static int l_find(lua_State *L) {
  return find_or_match(L, true);
}

static int l_match(lua_State *L) {
  return find_or_match(L, false);
}

/* gmatch's state: a userdata (upvalue 2 of the iterator) with the subject
   and pattern as upvalues 3 and 4. */
typedef struct gm_state {
  size_t pos;              /* where the next search starts */
  ptrdiff_t last;          /* end of the last match, -1 if none */
} gm_state;

static int gmatch_next(lua_State *L) {
  gm_state *g = (gm_state *)lua_touserdata(L, lua_upvalueindex(2));
  size_t ls, lp;
  const char *s = lua_tolstring(L, lua_upvalueindex(3), &ls);
  const char *p = lua_tolstring(L, lua_upvalueindex(4), &lp);
  matcher ms;
  const char *src;
  setup(&ms, L, s, ls, p, lp);
  for (src = s + g->pos; src <= ms.src_end; src++) {
    const char *e = attempt(&ms, src, p);
    if (e != NULL && e - s != g->last) {
      g->pos = (size_t)(e - s);
      g->last = e - s;
      charge(&ms);
      return push_captures(&ms, src, e);
    }
  }
  charge(&ms);
  g->pos = ls + 1;
  return 0;
}

static int l_gmatch(lua_State *L) {
  size_t ls;
  gm_state *g;
  lua_Integer init;
  luaL_checklstring(L, 1, &ls);
  luaL_checkstring(L, 2);
  init = start_of(L, 3, ls);
  lua_settop(L, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  g = (gm_state *)lua_newuserdatauv(L, sizeof *g, 0);
  g->pos = init < 0 ? ls + 1 : (size_t)init;
  g->last = -1;
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, gmatch_next, 4);
  return 1;
}

/* Appends the replacement string (argument 3) for the match s..e. */
static void add_string(matcher *ms, luaL_Buffer *b, const char *s, const char *e) {
  size_t l, i;
  const char *r = lua_tolstring(ms->L, 3, &l);
  for (i = 0; i < l; i++) {
    char c = r[i];
    if (c != '%') {
      luaL_addchar(b, c);
      continue;
    }
    c = ++i < l ? r[i] : '\0';
    if (c == '%') {
      luaL_addchar(b, '%');
    } else if (c == '0') {
      luaL_addlstring(b, s, (size_t)(e - s));
    } else if (isdigit((unsigned char)c)) {
      push_capture(ms, c - '1', s, e);
      luaL_tolstring(ms->L, -1, NULL);
      lua_remove(ms->L, -2);
      luaL_addvalue(b);
    } else {
      luaL_error(ms->L, "invalid use of '%%' in replacement string");
    }
  }
}

static void add_value(matcher *ms, luaL_Buffer *b, const char *s, const char *e, int tr) {
  lua_State *L = ms->L;
  if (tr == LUA_TFUNCTION) {
    int n;
    lua_pushvalue(L, 3);
    n = push_captures(ms, s, e);
    lua_call(L, n, 1);
  } else if (tr == LUA_TTABLE) {
    push_capture(ms, 0, s, e);
    lua_gettable(L, 3);
  } else {
    add_string(ms, b, s, e);
    return;
  }
  if (!lua_toboolean(L, -1)) {
    lua_pop(L, 1);
    luaL_addlstring(b, s, (size_t)(e - s)); /* keep the original */
  } else if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  } else {
    luaL_addvalue(b);
  }
}

static int l_gsub(lua_State *L) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  const char *src = s, *last = NULL;
  int tr = lua_type(L, 3);
  lua_Integer max = luaL_optinteger(L, 4, (lua_Integer)ls + 1), n = 0;
  bool anchor = lp > 0 && *p == '^';
  matcher ms;
  luaL_Buffer b;
  luaL_argexpected(L, tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION ||
                          tr == LUA_TTABLE, 3, "string/function/table");
  luaL_buffinit(L, &b);
  if (anchor) {
    p++;
    lp--;
  }
  setup(&ms, L, s, ls, p, lp);
  while (n < max) {
    const char *e = attempt(&ms, src, p);
    if (e != NULL && e != last) {
      n++;
      add_value(&ms, &b, src, e, tr);
      src = last = e;
    } else if (src < ms.src_end) {
      luaL_addchar(&b, *src++);
    } else {
      break;
    }
    if (anchor)
      break;
  }
  charge(&ms);
  luaL_addlstring(&b, src, (size_t)(ms.src_end - src));
  luaL_pushresult(&b);
  lua_pushinteger(L, n);
  return 2;
}

void luna__pattern_install(lua_State *L, luna__mod *m) {
  static const luaL_Reg funcs[] = {
      {"find", l_find}, {"match", l_match}, {"gmatch", l_gmatch}, {"gsub", l_gsub}, {NULL, NULL}};
  lua_pushlightuserdata(L, m);
  luaL_setfuncs(L, funcs, 1);
}
