/*
** repl.c: `lunaloop repl [options]`, a live loop with a prompt.
**
** The loop keeps ticking at --hz while the prompt waits: one thread polls
** stdin with a timeout that ends when the next frame is due, and hands each
** key to the line editor (lineedit.c, libedit in its unbuffered mode), so
** reading never blocks for a whole line. When stdin is not a terminal, lines
** are read without libedit, prompts and history, so the REPL can also be
** fed by a pipe.
**
** Each entered chunk runs as a task, so it may await at top level; the
** prompt returns when that chunk (the foreground task) settles, while the
** other tasks keep running. A trailing `&` or `:bg` runs it in the
** background. As in the stock `lua`, a line is first tried as `return
** <line>` and printed, and a chunk that ends early (a syntax error at
** <eof>) goes on at the next line under the continuation prompt.
**
** Output: `print`, `io.write` (to stdout) and the error reports of the
** REPL's state go through out_begin/out_end, which erase the line being
** typed, write, and let libedit redraw it, so a background task never
** garbles the input.
**
** Ctrl-C cancels the foreground chunk (interrupting Lua code that runs for
** good), or clears the line; it never touches another task or callback,
** unless a second Ctrl-C comes while the same frame still runs (one stuck
** in a loop: see on_sigint). Ctrl-D, or :quit, cancels every task (their
** to-be-closed variables run) and exits 0. SIGTERM and SIGHUP (signals.c)
** do the same, exiting 128 + the signal's number; a second one kills.
** :waits, and SIGQUIT (Ctrl-\), list what every task waits on and where.
*/
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "cli.h"
#include "lunaloop_lua.h"

#define PROMPT "> "
#define PROMPT2 ">> "
#define HISTORY_ENV "LUNALOOP_HISTORY"
#define HISTORY_FILE ".lunaloop_history"
#define NAME_MAX_LEN 24 /* a chunk's task is named after its first characters */
#define BG_USAGE "usage: :bg CODE\n"
#define AMP_USAGE "usage: CODE & (runs CODE in the background)\n"

/* The REPL is one per process: the signal handlers have no user data, so
   its state is a file-level singleton. */
static struct repl {
  lua_State *L;
  luna_loop *loop;
  luna_run_options opts;
  luna_pacer pacer;
  bool paused;
  bool tty;              /* stdin and stdout are terminals: libedit is used */
  bool quit;
  bool input_ended;      /* quit at the end of piped input */
  uint64_t syntax_errors; /* chunks that did not compile (printed here) */
  int status;            /* exit status once quit */
  /* Input. */
  char *pending;         /* the lines of an unfinished chunk, or NULL */
  size_t pending_len;
  bool hidden;           /* out_begin erased the line; out_end redraws it */
  bool at_line_start;    /* the last output ended with a newline */
  const char *prompt;
  char *in;              /* non-tty input not yet split into lines */
  size_t in_len, in_cap;
  bool in_eof;
  char *history;         /* history file, or NULL */
  /* The foreground chunk: a Task in the registry, or LUA_NOREF. */
  int fg_ref;
  uint64_t fg_id;        /* its id (t.id), or 0; set as soon as it is created */
  uint64_t chunks;       /* chunks run so far */
  /* A chunk being started (start_task): its task is the first one created,
     which on_task_created recognizes. */
  const char *starting;  /* its name while it is not created yet, or NULL */
  bool starting_bg;      /* it runs in the background */
  luna_trace *trace;
  luna_lua_observer trace_obs; /* the trace's observer, called from ours */
} R;

/* What runs now, for on_sigint. `calling`: the REPL calls Lua itself, on
   the user's behalf (a chunk starting, :tasks, :cancel, a cancellation, a
   chunk's results printed); 2 when that call runs on the REPL's own thread
   (call_lua), not only in tasks. `in_frame`: a frame runs. `fg_resumed`: the
   foreground chunk's coroutine is resumed (on_resume_begin/end), so what
   runs now is the chunk or code it called. `frame_sigints`: Ctrl-C
   presses during the frame that runs now. */
static volatile sig_atomic_t calling, in_frame, fg_resumed, frame_sigints;
/* A second Ctrl-C in one frame interrupted code other than the foreground
   chunk; frame_hit_id is the task it hit (0: a callback or a predicate). */
static volatile sig_atomic_t frame_hit;
static uint64_t frame_hit_id;
/* The ids of the tasks being resumed, innermost last (the observer keeps
   it; deeper nesting than RESUMED_MAX is counted but not named). */
#define RESUMED_MAX 64
static uint64_t resumed_ids[RESUMED_MAX];
static volatile sig_atomic_t resumed_depth;
/* The terminal echoed a ^C (it does while no line is edited): the next
   output, or the prompt, starts on a new line. */
static volatile sig_atomic_t echoed_ctrl_c;

/* Raises "interrupted" in the REPL's own thread once (see on_sigint). */
static void main_interrupt_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted");
}

/* Ctrl-C stops Lua code at its next instruction (luna_lua_interrupt) only
   when that code is what the user waits for: what the REPL calls itself,
   or the foreground chunk (and what it called) while a frame resumes it.
   Any other task or callback that a frame runs at that instant is left
   alone: the main loop cancels the waiting chunk, or clears the line, once
   the frame has ended. A frame that does not end (a background task or
   callback stuck in a loop) gets the second Ctrl-C that comes while it
   still runs: that one interrupts whatever runs. */
static void on_sigint(void) {
  if (calling) {
    luna_lua_interrupt(); /* a task the call runs */
    /* The REPL's own thread: the binding only knows what it resumes or
       calls, and call_lua runs helpers and __tostring on R.L itself.
       lua_sethook may be called from a signal handler (lua.c does). */
    if (calling == 2)
      lua_sethook(R.L, main_interrupt_hook,
                  LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
  } else if (in_frame) {
    if (fg_resumed) {
      luna_lua_interrupt();
    } else if (frame_sigints > 0) {
      sig_atomic_t depth = resumed_depth;
      frame_hit_id = depth > 0 && depth <= RESUMED_MAX ? resumed_ids[depth - 1] : 0;
      frame_hit = 1;
      luna_lua_interrupt();
    }
    frame_sigints = 1;
  }
  /* (luna__edit_editing only reads a flag: safe in a handler.) */
  if (R.tty && !luna__edit_editing())
    echoed_ctrl_c = 1;
}

/* ---- output that keeps the typed line intact ------------------------------- */

/* After a ^C that the terminal echoed, a new line. */
static void after_echo(void) {
  if (echoed_ctrl_c) {
    echoed_ctrl_c = 0;
    fputs("\n", stdout);
    R.at_line_start = true;
  }
}

/* Erases the prompt and the line being typed, so output can be written on
   a clean line. libedit keeps the text; out_end redraws it. */
static void out_begin(void) {
  after_echo();
  if (!luna__edit_editing() || R.hidden)
    return;
  luna__edit_erase();
  R.hidden = true;
}

static void out_end(void) {
  fflush(stdout);
  fflush(stderr);
  if (!R.hidden)
    return;
  if (!R.at_line_start) {
    fputs("\n", stdout);
    R.at_line_start = true;
  }
  luna__edit_redraw(); /* prompt and line, cursor where it was */
  R.hidden = false;
}

/* Writes len bytes to `f` between out_begin and out_end. */
static void out_write(FILE *f, const char *s, size_t len) {
  out_begin();
  fwrite(s, 1, len, f);
  if (len > 0)
    R.at_line_start = s[len - 1] == '\n';
  out_end();
}

static void out_printf(FILE *f, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void out_printf(FILE *f, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  out_write(f, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* print(...): as the stock print (tostring of each value, tabs, newline),
   through out_write. */
static int l_print(lua_State *L) {
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; i++) {
    if (i > 1)
      luaL_addchar(&b, '\t');
    luaL_tolstring(L, i, NULL);
    luaL_addvalue(&b);
  }
  luaL_addchar(&b, '\n');
  luaL_pushresult(&b);
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  out_write(stdout, s, len);
  return 0;
}

/* io.write(...): the original (upvalue 1), between out_begin and out_end
   when the default output is stdout. */
static int l_io_write(lua_State *L) {
  int n = lua_gettop(L);
  bool to_stdout = false;
  lua_getglobal(L, "io");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "output");
    lua_getfield(L, -2, "stdout");
    if (lua_isfunction(L, -2)) {
      lua_pushvalue(L, -2);
      lua_call(L, 0, 1);
      to_stdout = lua_rawequal(L, -1, -2);
      lua_pop(L, 1);
    }
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  if (to_stdout) {
    out_begin();
    if (n > 0 && lua_type(L, n) == LUA_TSTRING) {
      size_t len;
      const char *s = lua_tolstring(L, n, &len);
      if (len > 0)
        R.at_line_start = s[len - 1] == '\n';
    } else if (n > 0) {
      R.at_line_start = false;
    }
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  int st = lua_pcall(L, n, LUA_MULTRET, 0);
  if (to_stdout)
    out_end();
  if (st != LUA_OK)
    return lua_error(L);
  return lua_gettop(L);
}

/* The table of Lua helpers (helpers_lua, below), in the registry. */
static int helpers_ref = LUA_NOREF;

/* The error handler of the REPL's state (task.on_error): the error of the
   foreground chunk (the one the prompt waits for, even when it fails before
   its first await) as the stock `lua` shows it; any other as the default
   report of the binding, which `lunaloop run` prints: "lunaloop: <what>
   failed: <message>", where `what` (argument 4) is the default report's
   subject ("task worker", "callback stdin:1", ...). Then the traceback. */
static int l_on_error(lua_State *L) {
  lua_settop(L, 4);
  const char *msg = luna_lua_tostring(L, 1);
  const char *tb = lua_tostring(L, 2);
  bool foreground = false;
  if (!lua_isnil(L, 3) && R.fg_id != 0) {
    lua_getfield(L, 3, "id");
    foreground = (uint64_t)lua_tointeger(L, -1) == R.fg_id;
    lua_pop(L, 1);
  }
  if (foreground && !lua_isstring(L, 1)) {
    /* As the stock lua shows it: a string from __tostring alone, otherwise
       what kind of value was raised, with the traceback. */
    bool shown = false;
    if (luaL_getmetafield(L, 1, "__tostring") != LUA_TNIL) {
      lua_pushvalue(L, 1);
      if (lua_pcall(L, 1, 1, 0) != LUA_OK) { /* what __tostring raised */
        msg = luna_lua_tostring(L, -1);
        shown = true;
      } else if (lua_type(L, -1) == LUA_TSTRING) {
        msg = lua_tostring(L, -1);
        tb = NULL;
        shown = true;
      }
    }
    if (!shown)
      msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_Buffer b;
  if (!foreground) {
    luaL_buffinit(L, &b);
    luaL_addstring(&b, LUNA_PROGNAME ": ");
    luaL_addstring(&b, lua_isstring(L, 4) ? lua_tostring(L, 4) : "task");
    luaL_addstring(&b, " failed: ");
  } else {
    luaL_buffinit(L, &b);
  }
  luaL_addstring(&b, msg);
  luaL_addchar(&b, '\n');
  if (tb != NULL) {
    luaL_addstring(&b, tb);
    luaL_addchar(&b, '\n');
  }
  luaL_pushresult(&b);
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  out_write(stderr, s, len);
  return 0;
}

/* ---- Lua helpers ----------------------------------------------------------- */

/* REPL commands that are easiest said in Lua. Called with the module. */
static const char helpers_lua[] =
  "local task = ...\n"
  "local H = {}\n"
  "-- The name in a 20-character column: cut between UTF-8 characters\n"
  "-- (bytes when it is not UTF-8), padded by characters.\n"
  "local function name_of(t, i)\n"
  "  local n = i.name or ('#' .. i.id)\n"
  "  local len = utf8.len(n)\n"
  "  if not len then\n"
  "    if #n > 20 then n = n:sub(1, 17) .. '...' end\n"
  "    len = #n\n"
  "  elseif len > 20 then\n"
  "    n, len = n:sub(1, utf8.offset(n, 18) - 1) .. '...', 20\n"
  "  end\n"
  "  return n .. string.rep(' ', 20 - len)\n"
  "end\n"
  "function H.tasks()\n"
  "  local list = task.list()\n"
  "  if #list == 0 then return 'no tasks' end\n"
  "  local out = {string.format('%4s  %-20s %-9s %-9s %-18s %-18s %s',\n"
  "    'id', 'name', 'status', 'wait', 'timing', 'due', 'age')}\n"
  "  for _, t in ipairs(list) do\n"
  "    local i = t:info()\n"
  "    local due = ''\n"
  "    if i.deadline and i.clock == 'frame' then\n"
  "      due = string.format('frame %d (in %d)', i.deadline, i.deadline - task.frame())\n"
  "    elseif i.deadline then\n"
  "      due = string.format('in %.3fs %s', i.deadline - task.time(i.clock), i.clock)\n"
  "    end\n"
  "    out[#out + 1] = string.format('%4d  %s %-9s %-9s %-18s %-18s %d',\n"
  "      i.id, name_of(t, i), i.status, i.wait or '-', i.timing or '-', due, i.age)\n"
  "  end\n"
  "  return table.concat(out, '\\n')\n"
  "end\n"
  "function H.find(id)\n"
  "  for _, t in ipairs(task.list()) do if t.id == id then return t end end\n"
  "end\n"
  "return H\n";

/* After the REPL's own call into Lua: what Ctrl-C hit has unwound. */
static void end_call(void) {
  calling = 0;
  luna_lua_interrupt_clear();
  if (lua_gethook(R.L) == main_interrupt_hook)
    lua_sethook(R.L, NULL, 0, 0); /* set after the last instruction ran */
}

/* lua_pcall for the REPL's own calls into Lua (on_sigint: Ctrl-C
   interrupts what they run). */
static int call_lua(int nargs, int nresults) {
  calling = 2;
  int st = lua_pcall(R.L, nargs, nresults, 0);
  end_call();
  return st;
}

/* Calls helper `name` with nargs arguments on top of L; 1 result or nil
   after printing the error. */
static void call_helper(const char *name, int nargs) {
  lua_State *L = R.L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, helpers_ref);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  lua_insert(L, -1 - nargs);
  int st = call_lua(nargs, 1);
  if (st != LUA_OK) {
    out_printf(stderr, "%s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    lua_pushnil(L);
  }
}

/* Pushes task t's method `name` called with no argument: its first result. */
static void call_method(int task_idx, const char *name, int nresults) {
  lua_State *L = R.L;
  task_idx = lua_absindex(L, task_idx);
  lua_getfield(L, task_idx, name);
  lua_pushvalue(L, task_idx);
  lua_call(L, 1, nresults);
}

/* ---- the prompt -------------------------------------------------------------- */

/* A new line to edit, under the prompt in force. */
static void show_prompt(void) {
  if (R.tty && !R.quit && !luna__edit_editing()) {
    after_echo();
    luna__edit_start(R.prompt);
  }
}

/* No line is edited while a chunk runs: the terminal is in its own mode,
   so it echoes what is typed (^C) itself. */
static void hide_prompt(void) {
  luna__edit_stop();
}

/* Adds a line (or chunk) to the history, on a terminal. */
static void remember(const char *line) {
  if (R.tty)
    luna__edit_remember(line);
}

/* ---- frames ------------------------------------------------------------------ */

static void check_exit(void) {
  int code = -1;
  if (!R.quit && luna_lua_exit_requested(R.L, &code)) {
    R.quit = true;
    R.status = code >= 0 ? code : (luna_lua_error_count(R.L) > 0 ? 1 : 0);
  }
}

static void run_frame(luna_ns dt) {
  if (R.trace != NULL)
    luna__trace_frame(R.trace, luna_loop_frame_count(R.loop) + 1, luna_lua_task_count(R.L));
  frame_sigints = 0;
  frame_hit = 0;
  in_frame = 1;
  int rc = luna_loop_frame_ns(R.loop, dt);
  in_frame = 0;
  luna_lua_interrupt_clear(); /* what Ctrl-C hit has unwound */
  if (rc < 0 && rc != LUNA_ESTOPPED)
    out_printf(stderr, LUNA_PROGNAME ": frame failed: %s\n", luna_strerror(rc));
  /* A callback or predicate that was hit reported its "interrupted"
     error; a task was cancelled, which is never reported: say so. */
  if (frame_hit && frame_hit_id != 0)
    out_printf(stderr, "interrupted task %llu, which kept the frame from ending\n",
               (unsigned long long)frame_hit_id);
  check_exit();
}

/* The REPL's observer: the task of a chunk being started, which tasks are
   being resumed (for on_sigint), and the trace's observer when tracing. */

/* A task was created, before it first runs. The first one while a chunk
   starts is the chunk's: in the foreground, its id tells l_on_error that a
   failure before its first await is the chunk's own; in the background,
   its id line comes now, before anything the chunk prints or reports. */
static void on_task_created(void *ud, const luna_lua_task_event *ev) {
  (void)ud;
  if (R.starting != NULL) {
    if (R.starting_bg)
      out_printf(stdout, "[%llu] %s\n", (unsigned long long)ev->id, R.starting);
    else
      R.fg_id = ev->id;
    R.starting = NULL;
  }
  if (R.trace_obs.task_created != NULL)
    R.trace_obs.task_created(R.trace_obs.ud, ev);
}

static void on_resume_begin(void *ud, const luna_lua_task_event *ev) {
  (void)ud;
  sig_atomic_t depth = resumed_depth;
  if (depth < RESUMED_MAX)
    resumed_ids[depth] = ev->id; /* stored before the depth that shows it */
  resumed_depth = depth + 1;
  if (ev->id == R.fg_id)
    fg_resumed = 1;
  if (R.trace_obs.resume_begin != NULL)
    R.trace_obs.resume_begin(R.trace_obs.ud, ev);
}

static void on_resume_end(void *ud, const luna_lua_task_event *ev) {
  (void)ud;
  if (ev->id == R.fg_id)
    fg_resumed = 0;
  if (resumed_depth > 0)
    resumed_depth--;
  if (R.trace_obs.resume_end != NULL)
    R.trace_obs.resume_end(R.trace_obs.ud, ev);
}

/* Traces from now on into tr (NULL: stops tracing; the caller closes the
   old trace). */
static void use_trace(luna_trace *tr) {
  R.trace = tr;
  memset(&R.trace_obs, 0, sizeof R.trace_obs);
  if (tr != NULL)
    luna__trace_observer(tr, R.L, &R.trace_obs);
}

/* ---- chunks -------------------------------------------------------------------- */

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
  luaL_unref(R.L, LUA_REGISTRYINDEX, R.fg_ref);
  R.fg_ref = LUA_NOREF;
  R.fg_id = 0;
  fg_resumed = 0;
}

/* Prints what the settled foreground chunk returned (as `lua` does), or
   that it was cancelled; its errors were shown by l_on_error. */
static void finish_chunk(void) {
  lua_State *L = R.L;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, R.fg_ref);
  int t = lua_gettop(L);
  call_method(t, "status", 1);
  const char *status = lua_tostring(L, -1);
  if (strcmp(status, "done") == 0) {
    lua_settop(L, t);
    lua_pushcfunction(L, l_print);
    call_method(t, "result", LUA_MULTRET); /* true, values... */
    lua_remove(L, t + 2);                  /* the leading true */
    int n = lua_gettop(L) - (t + 1);
    /* Protected: a __tostring may raise, or loop until Ctrl-C. */
    if (n > 0 && call_lua(n, 0) != LUA_OK)
      out_printf(stderr, "%s\n", luna_lua_tostring(L, -1));
  } else if (strcmp(status, "cancelled") == 0) {
    /* A chunk that never awaited was interrupted (so cancelled) by a
       Ctrl-C: that Ctrl-C is spent. A chunk that called task.exit was
       cancelled by it: the REPL ends, with nothing to say. */
    luna__take_ctrl_c();
    if (!luna_lua_exit_requested(L, NULL))
      out_printf(stdout, "cancelled\n");
  }
  lua_settop(L, top);
  forget_foreground();
}

/* True when the foreground chunk settled (it is then finished). */
static bool foreground_settled(void) {
  lua_State *L = R.L;
  if (R.fg_ref == LUA_NOREF)
    return true;
  lua_rawgeti(L, LUA_REGISTRYINDEX, R.fg_ref);
  call_method(-1, "status", 1);
  const char *s = lua_tostring(L, -1);
  bool settled = strcmp(s, "running") != 0 && strcmp(s, "suspended") != 0;
  lua_pop(L, 2);
  if (settled)
    finish_chunk();
  return settled;
}

/* Starts the function on top of L as a task named after `code`. In the
   foreground the prompt comes back when it settles; in the background at
   once, after saying its id. */
static void start_task(const char *code, bool background) {
  lua_State *L = R.L;
  char name[NAME_MAX_LEN + 1];
  chunk_name(code, name, sizeof name);
  R.chunks++;
  R.starting = name; /* on_task_created: its id, or its id line */
  R.starting_bg = background;
  calling = 1; /* it runs now, until its first await */
  int rc = luna_lua_spawn(L, 0, name);
  end_call();
  R.starting = NULL;
  if (rc < 0) {
    R.fg_id = 0;
    out_printf(stderr, LUNA_PROGNAME ": cannot start the chunk: %s\n", luna_strerror(rc));
    lua_pop(L, 1);
    return;
  }
  if (background) {
    /* It ran until its first await. One that never got there and was
       interrupted by Ctrl-C (the chunk just entered is what Ctrl-C stops)
       says so, as a foreground chunk does; that Ctrl-C is spent. */
    call_method(-1, "status", 1);
    bool cancelled = strcmp(lua_tostring(L, -1), "cancelled") == 0;
    lua_pop(L, 1);
    if (cancelled && !luna_lua_exit_requested(L, NULL)) {
      lua_getfield(L, -1, "id");
      out_printf(stdout, "[%lld] cancelled\n", (long long)lua_tointeger(L, -1));
      lua_pop(L, 1);
      luna__take_ctrl_c();
    }
    lua_pop(L, 1);
    return;
  }
  lua_getfield(L, -1, "id");
  R.fg_id = (uint64_t)lua_tointeger(L, -1);
  lua_pop(L, 1);
  R.fg_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  check_exit();
  if (foreground_settled())
    return;
  if (R.paused) {
    /* No frame runs while paused, so the chunk would hold the prompt until
       Ctrl-C: hand it to the background instead. */
    lua_rawgeti(L, LUA_REGISTRYINDEX, R.fg_ref);
    lua_getfield(L, -1, "id");
    out_printf(stdout, "[%lld] waits while paused: it goes on in the background\n",
               (long long)lua_tointeger(L, -1));
    lua_pop(L, 2);
    forget_foreground();
  }
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

static void drop_pending(void) {
  free(R.pending);
  R.pending = NULL;
  R.pending_len = 0;
  R.prompt = PROMPT;
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
  size_t len = R.pending_len;
  bool background = force_bg;
  int st;
  /* `chunk &`: only when what comes before the & is a whole chunk; `a &`
     followed by more lines is Lua's bitwise and. */
  if (strip_background(R.pending, &len)) {
    if (blank(R.pending, len)) { /* `&` alone would start an empty task */
      out_printf(stderr, force_bg ? BG_USAGE : AMP_USAGE);
      drop_pending();
      return;
    }
    if (compile(R.pending, len) == LUA_OK) {
      background = true;
      goto run;
    }
    lua_pop(L, 1);
    len = R.pending_len;
  }
  st = compile(R.pending, len);
  if (st != LUA_OK) {
    if (incomplete(L, st)) {
      R.prompt = PROMPT2;
      return;
    }
    out_printf(stderr, "%s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    R.syntax_errors++;
    remember(R.pending);
    drop_pending();
    return;
  }
run:
  remember(R.pending);
  char *code = R.pending;
  R.pending = NULL;
  drop_pending();
  start_task(code, background);
  free(code);
}

/* ---- commands ------------------------------------------------------------------ */

static const char help_text[] =
  "Type Lua: each chunk runs as a task, so it may await (task.delay(1)).\n"
  "Expressions print their values. A trailing & runs the chunk in the\n"
  "background. Ctrl-C cancels the running chunk (or clears the line) and\n"
  "leaves the other tasks and callbacks alone; a second Ctrl-C interrupts\n"
  "a frame that does not end. Ctrl-D exits after cancelling every task.\n"
  "  :tasks             live tasks: id, name, status, wait, timing, due, age\n"
  "  :waits             what each live task waits on, and the line it waits at\n"
  "                     (also Ctrl-\\, on stderr)\n"
  "  :pause, :resume    stop and restart the frames\n"
  "  :step [N]          run N frames now (default 1), pausing first;\n"
  "                     Ctrl-C stops it after the current frame\n"
  "  :timescale X       set the time scale\n"
  "  :hz N              set the frame rate\n"
  "  :cancel ID         cancel the task with that id\n"
  "  :load FILE [&]     run a Lua file as a task\n"
  "  :bg CODE           run CODE in the background\n"
  "  :trace on FILE     write a Chrome trace (Perfetto) from now on\n"
  "  :trace off         stop tracing and close the file\n"
  "  :help, :quit\n";

static bool parse_count(const char *s, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < 0)
    return false;
  *out = v;
  return true;
}

static bool parse_number(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || errno != 0 || !isfinite(v))
    return false;
  *out = v;
  return true;
}

static void report_frame(const char *what) {
  out_printf(stdout, "%s at frame %llu\n", what,
             (unsigned long long)luna_loop_frame_count(R.loop));
}

/* The task report (luna__report_tasks) on f, between out_begin and out_end. */
static void report_tasks(FILE *f, const char *why) {
  out_begin();
  luna__report_tasks(R.L, f, why);
  R.at_line_start = true;
  out_end();
}

static void cmd_trace(char *arg) {
  char *mode = strtok(arg, " \t");
  char *file = strtok(NULL, " \t");
  if (mode != NULL && strcmp(mode, "on") == 0 && file != NULL) {
    if (R.trace != NULL) {
      luna__trace_close(R.trace);
      use_trace(NULL);
    }
    use_trace(luna__trace_open(file));
    if (R.trace != NULL)
      out_printf(stdout, "tracing to %s\n", file);
  } else if (mode != NULL && strcmp(mode, "off") == 0) {
    if (R.trace == NULL) {
      out_printf(stderr, "not tracing\n");
      return;
    }
    char *path = strdup(luna__trace_path(R.trace));
    if (luna__trace_close(R.trace))
      out_printf(stdout, "trace written to %s\n", path ? path : "the file");
    use_trace(NULL);
    free(path);
  } else {
    out_printf(stderr, "usage: :trace on FILE | :trace off\n");
  }
}

static void command(char *line) {
  char *cmd = line + 1, *arg;
  size_t n = strcspn(cmd, " \t");
  arg = cmd + n;
  if (*arg != '\0')
    *arg++ = '\0';
  arg += strspn(arg, " \t");
  size_t alen = strlen(arg);
  while (alen > 0 && strchr(" \t\r", arg[alen - 1]) != NULL)
    arg[--alen] = '\0';
  long long count;
  double x;

  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "h") == 0 || strcmp(cmd, "?") == 0) {
    out_write(stdout, help_text, sizeof help_text - 1);
  } else if (strcmp(cmd, "quit") == 0 || strcmp(cmd, "q") == 0) {
    R.quit = true;
  } else if (strcmp(cmd, "tasks") == 0) {
    lua_getglobal(R.L, "task");
    lua_pop(R.L, 1);
    call_helper("tasks", 0);
    if (lua_isstring(R.L, -1))
      out_printf(stdout, "%s\n", lua_tostring(R.L, -1));
    lua_pop(R.L, 1);
  } else if (strcmp(cmd, "waits") == 0) {
    report_tasks(stdout, NULL);
  } else if (strcmp(cmd, "pause") == 0) {
    R.paused = true;
    report_frame("paused");
  } else if (strcmp(cmd, "resume") == 0) {
    if (R.paused) {
      R.paused = false;
      luna__pacer_start(&R.pacer, R.opts.frame_dt_ns);
    }
    report_frame("running");
  } else if (strcmp(cmd, "step") == 0) {
    count = 1;
    if (*arg != '\0' && !parse_count(arg, &count)) {
      out_printf(stderr, "usage: :step [N] (N >= 0 frames)\n");
      return;
    }
    R.paused = true;
    long long done = 0;
    /* Ctrl-C stops the steps after the frame that runs (see on_sigint). */
    while (done < count && !R.quit && !luna__ctrl_c_pending() && !luna__interrupted()) {
      run_frame(R.opts.frame_dt_ns);
      done++;
    }
    if (luna__take_ctrl_c()) {
      out_printf(stdout, "stopped after %lld of %lld frames\n", done, count);
    }
    report_frame("paused");
  } else if (strcmp(cmd, "timescale") == 0) {
    if (*arg == '\0') {
      out_printf(stdout, "time scale %g\n", luna_loop_time_scale(R.loop));
    } else if (!parse_number(arg, &x) || luna_loop_set_time_scale(R.loop, x) != 0) {
      out_printf(stderr, "usage: :timescale X (X >= 0)\n");
    } else {
      out_printf(stdout, "time scale %g\n", x);
    }
  } else if (strcmp(cmd, "hz") == 0) {
    if (*arg == '\0' || !parse_number(arg, &x) || x <= 0 || round(1e9 / x) < 1) {
      out_printf(stderr, "usage: :hz N (N > 0 frames per second)\n");
      return;
    }
    R.opts.frame_dt_ns = (luna_ns)round(1e9 / x);
    luna__pacer_start(&R.pacer, R.opts.frame_dt_ns);
    out_printf(stdout, "%g frames per second\n", x);
  } else if (strcmp(cmd, "cancel") == 0) {
    if (!parse_count(arg, &count)) {
      out_printf(stderr, "usage: :cancel ID (see :tasks)\n");
      return;
    }
    lua_pushinteger(R.L, count);
    call_helper("find", 1);
    if (lua_isnil(R.L, -1)) {
      out_printf(stderr, "no live task %lld\n", count);
    } else {
      lua_getfield(R.L, -1, "cancel");
      lua_pushvalue(R.L, -2);
      if (call_lua(1, 0) != LUA_OK) {
        out_printf(stderr, "%s\n", lua_tostring(R.L, -1));
        lua_pop(R.L, 1);
      } else {
        out_printf(stdout, "cancelled %lld\n", count);
      }
    }
    lua_pop(R.L, 1);
  } else if (strcmp(cmd, "load") == 0) {
    char name[NAME_MAX_LEN + 1];
    size_t len = strlen(arg);
    bool bg = strip_background(arg, &len);
    arg[len] = '\0';
    while (len > 0 && strchr(" \t", arg[len - 1]) != NULL)
      arg[--len] = '\0';
    if (len == 0) {
      out_printf(stderr, "usage: :load FILE [&]\n");
      return;
    }
    if (luaL_loadfile(R.L, arg) != LUA_OK) {
      out_printf(stderr, "%s\n", lua_tostring(R.L, -1));
      lua_pop(R.L, 1);
      return;
    }
    file_name(arg, name, sizeof name);
    start_task(name, bg);
  } else if (strcmp(cmd, "bg") == 0) {
    if (*arg == '\0') {
      out_printf(stderr, BG_USAGE);
      return;
    }
    R.pending = strdup(arg);
    R.pending_len = R.pending ? strlen(arg) : 0;
    if (R.pending == NULL)
      return;
    eval_pending(true);
    if (R.pending != NULL) { /* unfinished: :bg takes one line */
      out_printf(stderr, "stdin: :bg needs a complete chunk on one line\n");
      drop_pending();
    }
  } else if (strcmp(cmd, "trace") == 0) {
    cmd_trace(arg);
  } else {
    out_printf(stderr, "unknown command ':%s' (try :help)\n", cmd);
  }
}

/* ---- input --------------------------------------------------------------------- */

/* A whole line of input (NULL at end of input), from the terminal or a
   pipe. `line` is the caller's, and may be changed. */
static void handle_line(char *line) {
  if (line == NULL) {
    /* Input that ends inside an unfinished chunk: its syntax error, as the
       stock `lua` gives it (a replayed session then exits 1). */
    if (R.pending != NULL) {
      if (compile(R.pending, R.pending_len) != LUA_OK) {
        out_printf(stderr, "%s\n", lua_tostring(R.L, -1));
        R.syntax_errors++;
      }
      lua_pop(R.L, 1); /* the error, or the function */
    }
    drop_pending();
    R.quit = true;
    return;
  }
  if (R.pending == NULL && line[strspn(line, " \t")] == ':') {
    remember(line);
    command(line + strspn(line, " \t"));
    return;
  }
  if (R.pending == NULL && line[strspn(line, " \t\r")] == '\0')
    return; /* an empty line: a new prompt */
  size_t len = strlen(line);
  char *p = realloc(R.pending, R.pending_len + len + 2);
  if (p == NULL) {
    out_printf(stderr, LUNA_PROGNAME ": not enough memory\n");
    drop_pending();
    return;
  }
  if (R.pending_len > 0)
    p[R.pending_len++] = '\n';
  memcpy(p + R.pending_len, line, len + 1);
  R.pending = p;
  R.pending_len += len;
  eval_pending(false);
}

/* Terminal input: one key for the line editor. A line it ends (Enter), or
   the end of input (Ctrl-D on an empty line), is handled; the prompt is
   hidden then. */
static void read_key(void) {
  char *line;
  int r = luna__edit_key(&line);
  if (r == 0)
    return; /* still editing */
  R.at_line_start = true;
  if (r > 0 && line == NULL) {
    out_printf(stderr, LUNA_PROGNAME ": not enough memory\n");
    return;
  }
  handle_line(line);
  free(line);
}

/* Non-tty input: reads what is there and hands over the complete lines, one
   at a time while no chunk runs (so a piped script sees each chunk finish
   before the next starts). */
static void read_plain(void) {
  if (R.in_len == R.in_cap) {
    size_t cap = R.in_cap ? R.in_cap * 2 : 4096;
    char *p = realloc(R.in, cap);
    if (p == NULL) {
      R.in_eof = true;
      return;
    }
    R.in = p;
    R.in_cap = cap;
  }
  ssize_t n = read(STDIN_FILENO, R.in + R.in_len, R.in_cap - R.in_len);
  if (n > 0)
    R.in_len += (size_t)n;
  else if (n == 0 || (errno != EINTR && errno != EAGAIN))
    R.in_eof = true;
}

/* Hands over the next complete line of non-tty input; true if there was one
   (at end of input, the last unterminated line counts). */
static bool next_plain_line(void) {
  char *nl = R.in_len > 0 ? memchr(R.in, '\n', R.in_len) : NULL;
  size_t len;
  if (nl != NULL)
    len = (size_t)(nl - R.in);
  else if (R.in_eof && R.in_len > 0)
    len = R.in_len;
  else
    return false;
  char *line = malloc(len + 1);
  if (line == NULL)
    return false;
  memcpy(line, R.in, len);
  line[len] = '\0';
  size_t used = nl != NULL ? len + 1 : len;
  memmove(R.in, R.in + used, R.in_len - used);
  R.in_len -= used;
  R.at_line_start = true;
  handle_line(line);
  free(line);
  return true;
}

/* ---- signals and the terminal ---------------------------------------------------- */

/* Ctrl-C: cancels the foreground chunk, or else forgets the line being
   typed (and an unfinished chunk) and shows a fresh prompt. */
static void handle_sigint(void) {
  if (R.fg_ref != LUA_NOREF) {
    lua_State *L = R.L;
    /* The terminal (not in editing mode while a chunk runs) echoed ^C:
       what the cancellation prints goes on the lines below (after_echo). */
    lua_rawgeti(L, LUA_REGISTRYINDEX, R.fg_ref);
    lua_getfield(L, -1, "cancel");
    lua_insert(L, -2);
    if (call_lua(1, 0) != LUA_OK)
      lua_pop(L, 1);
    return; /* the main loop sees it settled and prints "cancelled" */
  }
  drop_pending();
  if (luna__edit_editing()) {
    fputs("^C\r\n", stdout);
    hide_prompt();
    show_prompt(); /* a new, empty line under the first prompt */
  }
}

static char *history_path(void) {
  const char *env = getenv(HISTORY_ENV);
  if (env != NULL)
    return env[0] != '\0' ? strdup(env) : NULL;
  const char *home = getenv("HOME");
  if (home == NULL || home[0] == '\0')
    return NULL;
  size_t len = strlen(home) + sizeof "/" HISTORY_FILE;
  char *p = malloc(len);
  if (p != NULL)
    snprintf(p, len, "%s/%s", home, HISTORY_FILE);
  return p;
}

/* ---- setup and the main loop ------------------------------------------------------ */

/* Globals of the REPL's state: task, and print / io.write / the error
   handler routed through out_write. */
static int setup_state(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "lunaloop");
  lua_call(L, 1, 1);
  lua_setglobal(L, "task");
  lua_pushcfunction(L, l_print);
  lua_setglobal(L, "print");
  lua_getglobal(L, "io");
  lua_getfield(L, -1, "write");
  lua_pushcclosure(L, l_io_write, 1);
  lua_setfield(L, -2, "write");
  lua_pop(L, 1);
  lua_getglobal(L, "task");
  lua_getfield(L, -1, "on_error");
  lua_pushcfunction(L, l_on_error);
  lua_call(L, 1, 0);
  if (luaL_loadbuffer(L, helpers_lua, sizeof helpers_lua - 1, "=repl") != LUA_OK)
    return lua_error(L);
  lua_insert(L, -2);
  lua_call(L, 1, 1);
  helpers_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

static void main_loop(void) {
  luna__pacer_start(&R.pacer, R.opts.frame_dt_ns);
  show_prompt();
  while (!R.quit) {
    if (luna__interrupted()) { /* SIGTERM, SIGHUP: as Ctrl-D (their status below) */
      R.quit = true;
      break;
    }
    if (luna__quit_requested())
      report_tasks(stderr, "SIGQUIT");
    if (luna__take_ctrl_c())
      handle_sigint();
    if (luna__take_resize() && R.tty)
      luna__edit_resize();
    check_exit();
    if (R.quit)
      break;
    bool idle = foreground_settled();
    if (idle && !R.tty) {
      if (next_plain_line())
        continue; /* one line at a time, checking the chunk in between */
      if (R.in_eof) {
        handle_line(NULL); /* end of input: as Ctrl-D, with task.exit()'s status */
        R.input_ended = true;
        break;
      }
    }
    if (idle)
      show_prompt();
    else
      hide_prompt();

    /* Wait for input, a signal, or the next frame. */
    int timeout = -1;
    if (!R.paused) {
      luna_ns left = luna__pacer_remaining(&R.pacer);
      timeout = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
    }
    struct pollfd pfd = {STDIN_FILENO, POLLIN, 0};
    bool want_input = idle && !R.in_eof;
    int n = poll(&pfd, want_input ? 1 : 0, timeout);
    if (R.tty && n > 0 && (pfd.revents & POLLIN) == 0 &&
        (pfd.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) {
      R.quit = true; /* the terminal hung up, nothing left to read: as Ctrl-D */
      break;        /* (piped input ends through read_plain, which keeps a last
                       line without a newline) */
    }
    if (n > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      if (R.tty)
        read_key(); /* after a line, the prompt comes back once no chunk runs */
      else
        read_plain();
      continue; /* more input may be waiting; the frame check comes again */
    }
    if (!R.paused && luna__pacer_remaining(&R.pacer) <= 0) {
      luna_ns dt = luna__pacer_tick(&R.pacer);
      run_frame(R.opts.fast ? R.opts.frame_dt_ns : dt);
    }
  }
}

int luna__cli_repl(int argc, char **argv, int first) {
  int status = luna__repl_parse_options(argc - first, argv + first, &R.opts);
  if (status >= 0)
    return status;
  R.prompt = PROMPT;
  R.fg_ref = LUA_NOREF;
  R.at_line_start = true;
  R.tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);

  luna_config config = {0};
  config.fixed_dt_ns = R.opts.fixed_dt_ns;
  if (luna_loop_new(&config, &R.loop) < 0) {
    fprintf(stderr, LUNA_PROGNAME ": cannot create the loop\n");
    return LUNA_EXIT_ERROR;
  }
  luna_loop_set_time_scale(R.loop, R.opts.time_scale);
  if (R.opts.fast)
    luna_loop_use_virtual_realtime(R.loop);
  R.L = luaL_newstate();
  if (R.L != NULL) {
    luaL_openlibs(R.L); /* before attaching: the module's Lua code uses them */
    luna_lua_guard_interrupts(R.L); /* Ctrl-C reaches handlers, coroutines */
  }
  if (R.L == NULL || luna_lua_attach(R.L, R.loop) < 0) {
    fprintf(stderr, LUNA_PROGNAME ": cannot create the Lua state\n");
    if (R.L != NULL)
      lua_close(R.L);
    luna_loop_free(R.loop);
    return LUNA_EXIT_ERROR;
  }
  lua_pushcfunction(R.L, setup_state);
  if (lua_pcall(R.L, 0, 0, 0) != LUA_OK) {
    fprintf(stderr, LUNA_PROGNAME ": %s\n", lua_tostring(R.L, -1));
    status = LUNA_EXIT_ERROR;
    goto done;
  }
  if (R.opts.has_seed) {
    lua_getglobal(R.L, "math");
    lua_getfield(R.L, -1, "randomseed");
    lua_pushinteger(R.L, (lua_Integer)R.opts.seed);
    lua_call(R.L, 1, 0);
    lua_pop(R.L, 1);
  }
  /* The REPL's observer is installed for good; it calls the trace's. */
  {
    luna_lua_observer obs = {on_task_created, on_resume_begin, on_resume_end, NULL};
    if (luna_lua_set_observer(R.L, &obs) < 0) {
      fprintf(stderr, LUNA_PROGNAME ": cannot observe the Lua state\n");
      status = LUNA_EXIT_ERROR;
      goto done;
    }
  }
  if (R.opts.trace != NULL) {
    use_trace(luna__trace_open(R.opts.trace));
    if (R.trace == NULL) {
      status = LUNA_EXIT_USAGE;
      goto done;
    }
  }

  if (R.tty) {
    R.history = history_path();
    if (!luna__edit_open(R.history)) {
      fprintf(stderr, LUNA_PROGNAME ": cannot set up line editing; reading plain lines\n");
      R.tty = false;
    }
  }
  if (R.tty) {
    printf(LUNA_PROGNAME " %s (%s): each chunk runs as a task; :help for commands\n",
           LUNA_VERSION_STRING, LUA_RELEASE);
  }
  luna__signals_install(on_sigint); /* Ctrl-C is the REPL's; SIGTERM, SIGHUP stop */
  main_loop();
  hide_prompt();
  if (R.tty && !R.at_line_start)
    fputs("\n", stdout);
  if (R.tty)
    fputs("\n", stdout);
  fflush(stdout);
  /* Ctrl-D: every task is cancelled, in creation order, its to-be-closed
     variables running (their output is plain: no prompt is shown now). */
  calling = 1;
  luna_lua_cancel_all(R.L);
  end_call();
  /* A stop signal, also one that came after the loop ended: a hang-up
     wakes poll (POLLHUP, above) before its SIGHUP is delivered. */
  if (luna__interrupted())
    R.status = luna__interrupt_status();
  luna__signals_restore();
  if (R.tty)
    luna__edit_close(R.history);
  free(R.history);
  status = R.status;
  /* Replayed input ends as a script does (lunaloop run, stock lua): 1 when
     an error was reported or a chunk did not compile, so a failing replay
     fails its caller. */
  if (R.input_ended && status == LUNA_EXIT_OK &&
      (luna_lua_error_count(R.L) > 0 || R.syntax_errors > 0))
    status = LUNA_EXIT_ERROR;
done:
  if (R.trace != NULL) {
    if (!luna__trace_close(R.trace) && status == LUNA_EXIT_OK)
      status = LUNA_EXIT_ERROR;
    use_trace(NULL);
  }
  drop_pending();
  free(R.in);
  lua_close(R.L);
  luna_loop_free(R.loop);
  return status;
}
