/*
** lineedit.c: line editing for `lunaloop repl` on a terminal, with libedit.
**
** The REPL polls stdin itself, because the loop must keep ticking while a
** line is typed, so libedit runs in its unbuffered mode: each
** luna__edit_key hands it one key, which it edits into the line and
** echoes, and a line is never waited for. Entering that mode starts a new,
** empty line, puts the terminal in raw mode and draws the prompt; leaving
** it gives the terminal back its own mode.
**
** libedit is used through its own wide-character API (histedit.h), not its
** readline-compatible layer: in Debian 12's libedit (3.1-20221030) every
** rl_callback_read_char writes a NUL through rl_line_buffer, a pointer that
** rl_initialize took into a 1,024-byte conversion buffer and that goes stale
** once a longer line makes libedit reallocate that buffer; a typed line of a
** few thousand characters then corrupts the heap. That layer also encodes
** the whole line to multibyte twice per key, which makes echo quadratic in
** the line's length. el_wgets returns libedit's own wide buffer; the line
** is encoded once, when it is entered.
**
** libedit has no user data for its prompt function, and there is one
** terminal: the editor is a file-level singleton.
*/
#include <errno.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <wchar.h>

#include <histedit.h>

#include "cli.h"

#define HISTORY_MAX 1000 /* lines kept in the history (and its file) */

static EditLine *el;
static History *hist;
static const char *prompt = ""; /* the prompt of the line being edited */
static bool editing;            /* unbuffered mode: prompt shown, terminal raw */
static bool eof_typed;          /* the last key was Ctrl-D on an empty line */

/* libedit's prompt function. */
static char *prompt_text(EditLine *e) {
  (void)e;
  return (char *)prompt;
}

/* Keys that libedit's readline layer bound, kept for the same keyboard:
   Home, End, Delete and Insert as terminals send them, Ctrl-arrows and
   Esc-arrows for words, Ctrl-R for an incremental history search. */
static const char *const key_bindings[][2] = {
  {"^R", "em-inc-search-prev"},
  {"\\e[1~", "ed-move-to-beg"},      {"\\e[4~", "ed-move-to-end"},
  {"\\e[7~", "ed-move-to-beg"},      {"\\e[8~", "ed-move-to-end"},
  {"\\e[H", "ed-move-to-beg"},       {"\\e[F", "ed-move-to-end"},
  {"\\e[3~", "ed-delete-next-char"}, {"\\e[2~", "ed-quoted-insert"},
  {"\\e[1;5C", "em-next-word"},      {"\\e[1;5D", "ed-prev-word"},
  {"\\e[5C", "em-next-word"},        {"\\e[5D", "ed-prev-word"},
  {"\\e\\e[C", "em-next-word"},      {"\\e\\e[D", "ed-prev-word"},
};

/* Ctrl-D, as libedit's em-delete-or-list: on an empty line the end of
   input, else it deletes the character under the cursor (at the end of a
   line it only beeps: the REPL completes nothing). It is the REPL's own so
   that the end of input is told from a line that holds a ^D typed with
   Ctrl-V (or Insert) Ctrl-D: in unbuffered mode libedit returns both as the
   one-character line "^D". */
static unsigned char end_or_delete(EditLine *e, int ch) {
  (void)ch;
  const LineInfoW *li = el_wline(e);
  if (li->lastchar == li->buffer) {
    eof_typed = true;
    fputs("^D", stdout); /* the echo libedit gives the end of input */
    fflush(stdout);
    return CC_EOF;
  }
  if (li->cursor == li->lastchar)
    return CC_ERROR;
  el_cursor(e, 1);
  el_wdeletestr(e, 1);
  return CC_REFRESH;
}

bool luna__edit_open(const char *history_file) {
  /* Keys arrive in the terminal's encoding, usually UTF-8: as GNU readline
     does, LC_CTYPE is taken from the environment to decode them. */
  setlocale(LC_CTYPE, "");
  el = el_init(LUNA_PROGNAME, stdin, stdout, stderr);
  hist = history_init();
  if (el == NULL || hist == NULL) {
    if (el != NULL)
      el_end(el);
    if (hist != NULL)
      history_end(hist);
    el = NULL;
    hist = NULL;
    return false;
  }
  HistEvent ev;
  history(hist, &ev, H_SETSIZE, HISTORY_MAX);
  el_set(el, EL_EDITOR, "emacs");
  el_set(el, EL_SIGNAL, 0); /* the REPL's signal handlers, not libedit's */
  el_set(el, EL_PROMPT, prompt_text);
  el_set(el, EL_HIST, history, hist);
  for (size_t i = 0; i < sizeof key_bindings / sizeof key_bindings[0]; i++)
    el_set(el, EL_BIND, key_bindings[i][0], key_bindings[i][1], (const char *)NULL);
  el_set(el, EL_ADDFN, "lunaloop-end-or-delete", "end of input on an empty line, else delete",
         end_or_delete);
  el_set(el, EL_BIND, "^D", "lunaloop-end-or-delete", (const char *)NULL);
  el_source(el, NULL); /* ~/.editrc */
  if (history_file != NULL)
    history(hist, &ev, H_LOAD, history_file);
  return true;
}

/* The editor itself is not ended: el_end restores the terminal with
   TCSAFLUSH, which would throw away what was typed ahead of the exit, and
   leaving the unbuffered mode has given the terminal its mode back. */
void luna__edit_close(const char *history_file) {
  if (el == NULL)
    return;
  luna__edit_stop();
  HistEvent ev;
  if (history_file != NULL)
    history(hist, &ev, H_SAVE, history_file);
}

void luna__edit_start(const char *new_prompt) {
  if (el == NULL || editing)
    return;
  prompt = new_prompt;
  fflush(stdout);
  el_set(el, EL_UNBUFFERED, 1);
  editing = true;
}

void luna__edit_stop(void) {
  if (!editing)
    return;
  el_set(el, EL_UNBUFFERED, 0);
  editing = false;
}

bool luna__edit_editing(void) {
  return editing;
}

/* The n characters of a line, as a multibyte string in the locale's
   encoding (malloc'd), or NULL when memory is short. A character the
   locale cannot encode becomes '?'. */
static char *encode_line(const wchar_t *w, size_t n) {
  char *s = malloc(n * MB_CUR_MAX + 1);
  if (s == NULL)
    return NULL;
  mbstate_t st;
  memset(&st, 0, sizeof st);
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = wcrtomb(s + len, w[i], &st);
    if (k == (size_t)-1) {
      s[len++] = '?';
      memset(&st, 0, sizeof st);
    } else {
      len += k;
    }
  }
  s[len] = '\0';
  return s;
}

/* Enter ends the line (libedit appends a newline to it); Ctrl-D on an
   empty line makes libedit return the ^D alone, which is the end of input
   only when end_or_delete saw that key (a ^D inserted literally gives the
   same line).

   In unbuffered mode el_wgets returns after every key with the line as it
   is now, and NULL (a count of 0 or -1) whenever the line is empty: after
   Backspace over its last character, Ctrl-U, Ctrl-W, Ctrl-K, Delete, or a
   key that did nothing on an empty line, the same answer as for a read
   that failed. So the end of input is found before libedit reads: the
   caller calls this when poll says stdin is readable, and a terminal with
   nothing to read then has hung up (or its read would fail); only that
   and Ctrl-D end the input. */
int luna__edit_key(char **line) {
  *line = NULL;
  if (!editing)
    return 0;
  int avail = 0;
  if (ioctl(STDIN_FILENO, FIONREAD, &avail) != 0 || avail <= 0) {
    /* Readable with nothing to read: the terminal hung up. Going on would
       poll a dead terminal in a busy loop. */
    luna__edit_stop();
    return -1;
  }
  int n = 0;
  eof_typed = false;
  const wchar_t *w = el_wgets(el, &n);
  if (w == NULL || n <= 0)
    return 0; /* an empty line, or a signal cut the read short: still editing */
  bool eof = eof_typed && n == 1 && w[0] == ('D' & 0x1f);
  if (!eof && w[n - 1] != L'\n')
    return 0; /* still editing */
  if (!eof)
    *line = encode_line(w, (size_t)n - 1);
  luna__edit_stop();
  return eof ? -1 : 1;
}

static int terminal_columns(void) {
  struct winsize ws;
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  return 80;
}

/* Goes up from the cursor's row to the prompt's and clears to the end of
   the screen. Rows are counted one column a character, so a line with
   tabs, control or double-width characters before the cursor may leave a
   row of it behind. */
void luna__edit_erase(void) {
  if (!editing)
    return;
  const LineInfoW *li = el_wline(el);
  size_t point = (size_t)(li->cursor - li->buffer);
  int rows = (int)((strlen(prompt) + point) / (size_t)terminal_columns());
  fflush(stdout);
  fputs("\r", stdout);
  if (rows > 0)
    printf("\033[%dA", rows);
  fputs("\033[J", stdout);
  fflush(stdout);
}

void luna__edit_redraw(void) {
  if (!editing)
    return;
  fflush(stdout);
  el_set(el, EL_REFRESH);
}

void luna__edit_resize(void) {
  if (el != NULL)
    el_resize(el);
}

void luna__edit_remember(const char *text) {
  HistEvent ev;
  if (hist != NULL)
    history(hist, &ev, H_ENTER, text);
}
