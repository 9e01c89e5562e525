/*
** gc.h: the collector pacer's part of each binding (gc.c), kept in the
** binding's state so that joining the loop's pacer never allocates. Only
** gc.c reads or writes these fields; the rest of src/lua calls the
** functions below. Includes the public lunaloop_lua.h for the options and
** statistics types.
*/
#ifndef LUNA_LUA_GC_H
#define LUNA_LUA_GC_H

#include <stdbool.h>
#include <stddef.h>

#include "lunaloop_lua.h"

typedef struct luna__gc_pacer luna__gc_pacer;
typedef struct luna__binding luna__binding;

/* One state's membership of its loop's pacer. */
typedef struct luna__gc_member {
  luna__gc_pacer *pacer;      /* NULL before joining and once the loop is freed */
  struct luna__gc_member *prev, *next; /* the pacer's members */
  bool own;                   /* settings of its own (task.gc, luna_lua_gc_set) */
  luna_lua_gc_options opts;   /* those settings */
  bool stopped;               /* the pacer stopped the automatic collector */
  bool generational;          /* the mode the pacer put the state in */
  bool in_cycle;              /* a paced step began a cycle that has not ended */
  bool ceiling_passed;        /* above the ceiling since its full collection:
                                 not collected again until back below it */
  bool reported;              /* the ceiling's report was written */
  int requests;               /* cycle ends still owed to full-collect requests */
  size_t live;                /* the live bytes of the last cycle: the least
                                 in use between its steps (see timed_step) */
  size_t cycle_low;           /* the least in use between this cycle's steps */
  size_t mark;                /* bytes in use when the last pace ended */
  size_t minor_base;          /* generational: bytes after the last minor one */
  luna_ns minor_cost;         /* generational: what the last minor one cost */
  luna_ns last_step;          /* what the last step cost: idle time keeps
                                 that much spare */
  luna_lua_gc_stats st;
} luna__gc_member;

/* Joins b to its loop's pacer, making the pacer on the loop's first state:
   0 or LUNA_ENOMEM. Called while the binding is made, once. */
int luna__gc_join(luna__binding *b, luna_loop *loop);
/* Leaves the pacer (the state is closing or detaching). Idempotent. */
void luna__gc_leave(luna__binding *b);
/* A full collection asked for by code that must not stall the frame (a
   mod's collectgarbage("collect")): served in slices at the paced timing,
   with a default budget when the state is not paced. */
void luna__gc_request_full(luna__binding *b);
/* Pushes the table of task.stats().gc for b. */
void luna__gc_push_stats(lua_State *L, luna__binding *b);
/* Adds task.gc to the module table on top of L, with b as its upvalue. */
void luna__open_gc(lua_State *L, luna__binding *b);

#endif
