/*
** report.c: the report of what every live task waits on, and where, that
** SIGQUIT asks for in run and the REPL (:waits too), and its task list,
** which `mods` writes once per mod. The lines are the binding's
** (luna_lua_write_tasks). Includes cli.h and lunaloop_lua.h.
*/
#include <stdio.h>

#include "cli.h"
#include "lunaloop_lua.h"

void luna__report_tasks(lua_State *L, FILE *out, const char *why) {
  luna_loop *loop = luna_lua_loop(L);
  fflush(stdout);
  fprintf(out, LUNA_PROGNAME ": tasks at frame %llu%s%s%s:\n",
          (unsigned long long)(loop != NULL ? luna_loop_frame_count(loop) : 0),
          why != NULL ? " (" : "", why != NULL ? why : "", why != NULL ? ")" : "");
  luna__write_task_list(L, out, "  ");
  fflush(out);
}

void luna__write_task_list(lua_State *L, FILE *out, const char *indent) {
  if (luna_lua_write_tasks(L, out, indent) == 0)
    fprintf(out, "%sno tasks\n", indent);
}
