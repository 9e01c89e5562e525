/*
** repl_chunk.c: chunks of REPL input and the task each runs as. As in the
** stock `lua`, a line is first tried as `return <line>` and printed, and a
** chunk that ends early (a syntax error at <eof>) goes on at the next line
** under the continuation prompt. Each complete chunk runs as a task, so it
** may await at top level; the prompt returns when that chunk (the
** foreground task) settles, while the other tasks keep running. A trailing
** `&` or `:bg` runs it in the background.
**
** It owns the unfinished chunk and the foreground task. Includes repl.h
** (cli.h), lunaloop_lua.h and Lua.
*/
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "lunaloop_lua.h"
#include "repl.h"

#define NAME_MAX_LEN 24 /* a chunk's task is named after its first characters */
#define BG_USAGE "usage: :bg CODE\n"
#define AMP_USAGE "usage: CODE & (runs CODE in the background)\n"

static char *pending; /* the lines of an unfinished chunk, or NULL */
static size_t pending_len;
/* The foreground chunk: a Task in the registry, or LUA_NOREF. */
static int fg_ref = LUA_NOREF;
static uint64_t fg_id; /* its id (t.id), or 0; set as soon as it is created */
/* A chunk being started (start_task): its task is the first one created,
   which luna__repl_task_created recognizes. */
static const char *starting; /* its name while it is not created yet, or NULL */
static bool starting_bg;     /* it runs in the background */

/* True when the error on top of L says the chunk ended early (lua.c's
   test); the message is popped then. */
static bool incomplete(lua_State *L, int status) {
  static const char mark[] = "<eof>";
  size_t len;
  const char *msg;
  if (status != LUA_ERRSYNTAX)
    return false;
  msg = lua_tolstring(L, -1, &len);
  if (len >= sizeof mark - 1 && strcmp(msg + len - (sizeof mark - 1), mark) == 0) {
    lua_pop(L, 1);
    return true;
  }
  return false;
}

/* Compiles code: first as `return <code>` (an expression whose values are
   printed), then as it is. Pushes the function and returns LUA_OK, or
   pushes the error of the plain form. */
static int compile(const char *code, size_t len) {
  lua_State *L = R.L;
  lua_pushliteral(L, "return ");
  lua_pushlstring(L, code, len);
  lua_concat(L, 2);
  size_t rlen;
  const char *ret = lua_tolstring(L, -1, &rlen);
  if (luaL_loadbuffer(L, ret, rlen, "=stdin") == LUA_OK) {
    lua_remove(L, -2);
    return LUA_OK;
  }
  lua_pop(L, 2);
  return luaL_loadbuffer(L, code, len, "=stdin");
}

/* A task name from the first characters of the chunk's first line. */
static void chunk_name(const char *code, char *out, size_t size) {
  size_t n = 0;
  while (*code == ' ' || *code == '\t')
    code++;
  while (code[n] != '\0' && code[n] != '\n' && n + 1 < size)
    n++;
  memcpy(out, code, n);
  out[n] = '\0';
  if (code[n] != '\0' && code[n] != '\n' && n >= 3) { /* cut short */
    n -= 3;
    while (n > 0 && (out[n] & 0xC0) == 0x80) /* not inside a UTF-8 character */
      n--;
    memcpy(out + n, "...", 4);
  }
}

/* A file's task name: the path itself, or "..." and its end when it is
   longer than a name (the end names the file; the start is often just
   the same directories). */
static void file_name(const char *path, char *out, size_t size) {
  size_t len = strlen(path);
  if (len < size) {
    memcpy(out, path, len + 1);
    return;
  }
  path += len - (size - 4);
  while ((*path & 0xC0) == 0x80) /* start on a whole UTF-8 character */
    path++;
  memcpy(out, "...", 3);
  memcpy(out + 3, path, strlen(path) + 1);
}

static void forget_foreground(void) {
  luaL_unref(R.L, LUA_REGISTRYINDEX, fg_ref);
  fg_ref = LUA_NOREF;
  fg_id = 0;
  luna__repl_forget_resumed();
}

/* Pushes the status string of the task at idx. */
static const char *task_status(int idx) {
  luna__repl_call_method(idx, "status", 1);
  return lua_tostring(R.L, -1);
}

/* Prints what the settled foreground chunk returned (as `lua` does), or
   that it was cancelled; its errors were shown by the error handler
   (repl_output.c). */
static void finish_chunk(void) {
  lua_State *L = R.L;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, fg_ref);
  int t = lua_gettop(L);
  const char *status = task_status(t);
  if (strcmp(status, "done") == 0) {
    lua_settop(L, t);
    luna__repl_push_print(L);
    luna__repl_call_method(t, "result", LUA_MULTRET); /* true, values... */
    lua_remove(L, t + 2);                             /* the leading true */
    int n = lua_gettop(L) - (t + 1);
    /* Protected: a __tostring may raise, or loop until Ctrl-C. */
    if (n > 0 && luna__repl_call_lua(n, 0) != LUA_OK)
      luna__repl_printf(stderr, "%s\n", luna_lua_tostring(L, -1));
  } else if (strcmp(status, "cancelled") == 0) {
    /* A chunk that never awaited was interrupted (so cancelled) by a
       Ctrl-C: that Ctrl-C is spent. A chunk that called task.exit was
       cancelled by it: the REPL ends, with nothing to say. */
    luna__take_ctrl_c();
    if (!luna_lua_exit_requested(L, NULL))
      luna__repl_printf(stdout, "cancelled\n");
  }
  lua_settop(L, top);
  forget_foreground();
}

bool luna__repl_foreground_settled(void) {
  lua_State *L = R.L;
  if (fg_ref == LUA_NOREF)
    return true;
  lua_rawgeti(L, LUA_REGISTRYINDEX, fg_ref);
  const char *s = task_status(-1);
  bool settled = strcmp(s, "running") != 0 && strcmp(s, "suspended") != 0;
  lua_pop(L, 2);
  if (settled)
    finish_chunk();
  return settled;
}

/* The id of the task at idx. */
static lua_Integer task_id(int idx) {
  lua_getfield(R.L, idx, "id");
  lua_Integer id = lua_tointeger(R.L, -1);
  lua_pop(R.L, 1);
  return id;
}

/* A background chunk ran until its first await. One that never got there
   and was interrupted by Ctrl-C (the chunk just entered is what Ctrl-C
   stops) says so, as a foreground chunk does; that Ctrl-C is spent. */
static void started_in_background(void) {
  lua_State *L = R.L;
  bool cancelled = strcmp(task_status(-1), "cancelled") == 0;
  lua_pop(L, 1);
  if (cancelled && !luna_lua_exit_requested(L, NULL)) {
    luna__repl_printf(stdout, "[%lld] cancelled\n", (long long)task_id(-1));
    luna__take_ctrl_c();
  }
  lua_pop(L, 1);
}

/* Starts the function on top of L as a task named after `code`. In the
   foreground the prompt comes back when it settles; in the background at
   once, after saying its id. */
static void start_task(const char *code, bool background) {
  lua_State *L = R.L;
  char name[NAME_MAX_LEN + 1];
  chunk_name(code, name, sizeof name);
  starting = name; /* luna__repl_task_created: its id, or its id line */
  starting_bg = background;
  luna__repl_call_begin(); /* it runs now, until its first await */
  int rc = luna_lua_spawn(L, 0, name);
  luna__repl_call_end();
  starting = NULL;
  if (rc < 0) {
    fg_id = 0;
    luna__repl_printf(stderr, LUNA_PROGNAME ": cannot start the chunk: %s\n", luna_strerror(rc));
    lua_pop(L, 1);
    return;
  }
  if (background) {
    started_in_background();
    return;
  }
  fg_id = (uint64_t)task_id(-1);
  fg_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  luna__repl_check_exit();
  if (luna__repl_foreground_settled())
    return;
  if (R.paused) {
    /* No frame runs while paused, so the chunk would hold the prompt until
       Ctrl-C: hand it to the background instead. */
    lua_rawgeti(L, LUA_REGISTRYINDEX, fg_ref);
    luna__repl_printf(stdout, "[%lld] waits while paused: it goes on in the background\n",
                      (long long)task_id(-1));
    lua_pop(L, 1);
    forget_foreground();
  }
}

void luna__repl_task_created(uint64_t id) {
  if (starting == NULL)
    return;
  /* In the foreground, the id tells the error handler that a failure
     before the first await is the chunk's own; in the background, the id
     line comes now, before anything the chunk prints or reports. */
  if (starting_bg)
    luna__repl_printf(stdout, "[%llu] %s\n", (unsigned long long)id, starting);
  else
    fg_id = id;
  starting = NULL;
}

uint64_t luna__repl_fg_id(void) {
  return fg_id;
}

bool luna__repl_cancel_foreground(void) {
  if (fg_ref == LUA_NOREF)
    return false;
  lua_State *L = R.L;
  /* The terminal (not in editing mode while a chunk runs) echoed ^C: what
     the cancellation prints goes on the lines below (after_echo). */
  lua_rawgeti(L, LUA_REGISTRYINDEX, fg_ref);
  lua_getfield(L, -1, "cancel");
  lua_insert(L, -2);
  if (luna__repl_call_lua(1, 0) != LUA_OK)
    lua_pop(L, 1);
  return true;
}

/* Strips a trailing `&` (and blanks) off code[0..*len): true when there was
   one. */
static bool strip_background(const char *code, size_t *len) {
  size_t n = *len;
  while (n > 0 && strchr(" \t\r\n", code[n - 1]) != NULL)
    n--;
  if (n == 0 || code[n - 1] != '&')
    return false;
  *len = n - 1;
  return true;
}

bool luna__repl_chunk_pending(void) {
  return pending != NULL;
}

void luna__repl_drop_pending(void) {
  free(pending);
  pending = NULL;
  pending_len = 0;
  luna__repl_continue_prompt(false);
}

/* True when code[0..len) is only blanks. */
static bool blank(const char *code, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (strchr(" \t\r\n", code[i]) == NULL)
      return false;
  return true;
}

/* Runs (or keeps, when unfinished) the pending chunk. `force_bg`: :bg. */
static void eval_pending(bool force_bg) {
  lua_State *L = R.L;
  size_t len = pending_len;
  bool background = force_bg;
  int st;
  /* `chunk &`: only when what comes before the & is a whole chunk; `a &`
     followed by more lines is Lua's bitwise and. */
  if (strip_background(pending, &len)) {
    if (blank(pending, len)) { /* `&` alone would start an empty task */
      luna__repl_printf(stderr, force_bg ? BG_USAGE : AMP_USAGE);
      luna__repl_drop_pending();
      return;
    }
    if (compile(pending, len) == LUA_OK) {
      background = true;
      goto run;
    }
    lua_pop(L, 1);
    len = pending_len;
  }
  st = compile(pending, len);
  if (st != LUA_OK) {
    if (incomplete(L, st)) {
      luna__repl_continue_prompt(true);
      return;
    }
    luna__repl_printf(stderr, "%s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    R.syntax_errors++;
    luna__repl_remember(pending);
    luna__repl_drop_pending();
    return;
  }
run:
  luna__repl_remember(pending);
  char *code = pending;
  pending = NULL;
  luna__repl_drop_pending();
  start_task(code, background);
  free(code);
}

void luna__repl_add_line(const char *line) {
  size_t len = strlen(line);
  char *p = realloc(pending, pending_len + len + 2);
  if (p == NULL) {
    luna__repl_printf(stderr, LUNA_PROGNAME ": not enough memory\n");
    luna__repl_drop_pending();
    return;
  }
  if (pending_len > 0)
    p[pending_len++] = '\n';
  memcpy(p + pending_len, line, len + 1);
  pending = p;
  pending_len += len;
  eval_pending(false);
}

void luna__repl_end_chunks(void) {
  if (pending != NULL) {
    if (compile(pending, pending_len) != LUA_OK) {
      luna__repl_printf(stderr, "%s\n", lua_tostring(R.L, -1));
      R.syntax_errors++;
    }
    lua_pop(R.L, 1); /* the error, or the function */
  }
  luna__repl_drop_pending();
}

void luna__repl_run_background(const char *code) {
  if (*code == '\0') {
    luna__repl_printf(stderr, BG_USAGE);
    return;
  }
  pending = strdup(code);
  pending_len = pending ? strlen(code) : 0;
  if (pending == NULL)
    return;
  eval_pending(true);
  if (pending != NULL) { /* unfinished: :bg takes one line */
    luna__repl_printf(stderr, "stdin: :bg needs a complete chunk on one line\n");
    luna__repl_drop_pending();
  }
}

bool luna__repl_run_file(char *arg) {
  char name[NAME_MAX_LEN + 1];
  size_t len = strlen(arg);
  bool bg = strip_background(arg, &len);
  arg[len] = '\0';
  while (len > 0 && strchr(" \t", arg[len - 1]) != NULL)
    arg[--len] = '\0';
  if (len == 0)
    return false;
  if (luaL_loadfile(R.L, arg) != LUA_OK) {
    luna__repl_printf(stderr, "%s\n", lua_tostring(R.L, -1));
    lua_pop(R.L, 1);
    return true;
  }
  file_name(arg, name, sizeof name);
  start_task(name, bg);
  return true;
}
