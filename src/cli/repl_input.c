/*
** repl_input.c: the REPL's input. On a terminal each key goes to the line
** editor (lineedit.c, libedit in its unbuffered mode) as poll says it
** came, so reading never blocks for a whole line while frames are due.
** When stdin is not a terminal, lines are read without libedit, prompts and
** history, so the REPL can also be fed by a pipe. A whole line is a `:`
** command or a line of a chunk. It owns the buffer of piped input.
** Includes repl.h (cli.h).
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "repl.h"

static char *in; /* non-tty input not yet split into lines */
static size_t in_len, in_cap;
static bool in_eof;

void luna__repl_handle_line(char *line) {
  if (line == NULL) {
    /* Input that ends inside an unfinished chunk: its syntax error, as the
       stock `lua` gives it (a replayed session then exits 1). */
    luna__repl_end_chunks();
    R.quit = true;
    return;
  }
  bool chunk_pending = luna__repl_chunk_pending();
  if (!chunk_pending && line[strspn(line, " \t")] == ':') {
    luna__repl_remember(line);
    luna__repl_command(line + strspn(line, " \t"));
    return;
  }
  if (!chunk_pending && line[strspn(line, " \t\r")] == '\0')
    return; /* an empty line: a new prompt */
  luna__repl_add_line(line);
}

/* A line it ends (Enter), or the end of input (Ctrl-D on an empty line),
   is handled; the prompt is hidden then. */
void luna__repl_read_key(void) {
  char *line;
  int r = luna__edit_key(&line);
  if (r == 0)
    return; /* still editing */
  luna__repl_set_line_start();
  if (r > 0 && line == NULL) {
    luna__repl_printf(stderr, LUNA_PROGNAME ": not enough memory\n");
    return;
  }
  luna__repl_handle_line(line);
  free(line);
}

void luna__repl_read_plain(void) {
  if (in_len == in_cap) {
    size_t cap = in_cap ? in_cap * 2 : 4096;
    char *p = realloc(in, cap);
    if (p == NULL) {
      in_eof = true;
      return;
    }
    in = p;
    in_cap = cap;
  }
  ssize_t n = read(STDIN_FILENO, in + in_len, in_cap - in_len);
  if (n > 0)
    in_len += (size_t)n;
  else if (n == 0 || (errno != EINTR && errno != EAGAIN))
    in_eof = true;
}

/* One line at a time, and only while no chunk runs (the main loop asks),
   so a piped script sees each chunk finish before the next starts; at the
   end of input, the last unterminated line counts. */
bool luna__repl_next_plain_line(void) {
  char *nl = in_len > 0 ? memchr(in, '\n', in_len) : NULL;
  size_t len;
  if (nl != NULL)
    len = (size_t)(nl - in);
  else if (in_eof && in_len > 0)
    len = in_len;
  else
    return false;
  char *line = malloc(len + 1);
  if (line == NULL)
    return false;
  memcpy(line, in, len);
  line[len] = '\0';
  size_t used = nl != NULL ? len + 1 : len;
  memmove(in, in + used, in_len - used);
  in_len -= used;
  luna__repl_set_line_start();
  luna__repl_handle_line(line);
  free(line);
  return true;
}

bool luna__repl_input_eof(void) {
  return in_eof;
}

void luna__repl_input_close(void) {
  free(in);
  in = NULL;
  in_len = in_cap = 0;
}
