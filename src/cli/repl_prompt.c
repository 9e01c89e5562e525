/*
** repl_prompt.c: the REPL's prompt and its history on a terminal: which
** prompt is in force (the continuation prompt under an unfinished chunk),
** when a line is edited under it, and the history file. It owns the prompt
** text and the history path; the editing itself is lineedit.c's. Includes
** repl.h (cli.h).
*/
#include <stdlib.h>
#include <string.h>

#include "repl.h"

#define PROMPT "> "
#define PROMPT2 ">> "
#define HISTORY_ENV "LUNALOOP_HISTORY"
#define HISTORY_FILE ".lunaloop_history"

static const char *prompt = PROMPT;
static char *history; /* the history file, or NULL */

/* $LUNALOOP_HISTORY (empty: no history), else ~/.lunaloop_history. */
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

bool luna__repl_prompt_open(void) {
  history = history_path();
  if (luna__edit_open(history))
    return true;
  R.tty = false;
  return false;
}

void luna__repl_prompt_close(void) {
  if (R.tty)
    luna__edit_close(history);
  free(history);
  history = NULL;
}

void luna__repl_show_prompt(void) {
  if (R.tty && !R.quit && !luna__edit_editing()) {
    luna__repl_after_echo();
    luna__edit_start(prompt);
  }
}

void luna__repl_hide_prompt(void) {
  luna__edit_stop();
}

void luna__repl_continue_prompt(bool unfinished) {
  prompt = unfinished ? PROMPT2 : PROMPT;
}

void luna__repl_remember(const char *line) {
  if (R.tty)
    luna__edit_remember(line);
}
