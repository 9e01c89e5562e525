/*
** mods.h: the private state of a mod set, shared by the files of src/mods.
**
**   set.c      the set: loading a folder in dependency order, the upkeep
**              item (delivery, disabling, file checks), the public API
**   mod.c      one mod: its allocator, its state's lifecycle, reports
**   budget.c   the instruction budget: count hooks and the binding observer
**   sandbox.c  the whitelist environment a mod's code sees
**   bus.c      copying values between states, the bus, the `mods` module
**   manifest.c reading manifest.lua in a throwaway, empty state
**   watch.c    file signatures for hot reload
**
** Invariants:
** - A mod's lua_State is created, closed and replaced only when no Lua code
**   of that state runs (m->running == 0 and the binding is at depth 0):
**   from the set's item or from a public call made outside every mod.
** - Every call from C into a mod's state that may raise (allocate) happens
**   inside lua_pcall, so a mod at its memory cap can never panic the host.
** - A mod's budget context (budget.c) brackets every run of its Lua code:
**   the binding's observer brackets resumes, callbacks, predicates and the
**   error handler; set.c and bus.c bracket the calls they make themselves.
*/
#ifndef LUNA_MODS_INTERNAL_H
#define LUNA_MODS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#include "lunaloop_mods.h"

typedef struct luna__mod luna__mod;

/* What a manifest says. Strings are malloc'ed. */
typedef struct luna__manifest {
  char *name;
  char *version;
  char **depends;
  size_t ndepends;
  long long load_order;
} luna__manifest;

struct luna__mod {
  luna_mods *set;
  char *dir;                  /* realpath of the folder, malloc'ed */
  luna__manifest man;
  luna_mod_state state;
  lua_State *L;               /* NULL unless LOADED */
  /* allocator (mod.c) */
  size_t mem_used, mem_peak, mem_limit;
  bool mem_strict;            /* refuse past mem_limit (inside a context) */
  /* instruction budget (budget.c) */
  uint64_t budget;            /* the limit per context */
  uint64_t used;              /* instructions counted in this context */
  int step;                   /* hook granularity: min(budget, 1000) */
  int depth;                  /* nesting of budget contexts */
  bool exceeded;              /* this context ran out: raise everywhere */
  struct luna__binding *binding; /* L's, cached at luna__budget_install: its
                                 `stop_msg` mirrors `exceeded` */
  char exceeded_msg[200];     /* the first error of it, raised again */
  lua_State *ctx_thread;      /* thread the outermost context began on */
  int running;                /* > 0 while the set itself calls into L */
  /* overruns since the last load, and the verdict */
  uint64_t budget_overruns, memory_overruns;
  bool disable_pending;
  uint64_t loads;
  uint64_t errors_before;     /* errors of states closed earlier (including
                                 those of their cancellation at close), and
                                 failures of on_load and on_unload */
  /* hot reload */
  uint64_t signature;         /* of the files when last loaded or failed */
  bool waits_dependency;      /* failed for a dependency that is not loaded:
                                 tried again once it is (poll_files) */
  /* carried state for on_load, serialized (bus.c format) */
  char *carry;
  size_t carry_len;
  char last_error[512];
};

/* A bus message waiting for delivery. */
typedef struct luna__message {
  char *topic;
  char *from;                 /* sender's name ("host" for the host) */
  char *data;                 /* serialized value */
  size_t len;
} luna__message;

struct luna_mods {
  luna_loop *loop;
  luna_mods_config cfg;       /* with the defaults filled in */
  luna_item_id item;
  bool has_item;
  luna__mod **mods;           /* load order */
  size_t nmods, capmods;
  luna__message *queue;
  size_t nqueue, capqueue;
  size_t queue_bytes;         /* serialized bytes of the waiting messages */
  uint64_t frames_seen;       /* runs of the item, for watch_frames */
  uint64_t errors;            /* load failures and disables reported */
  int busy;                   /* > 0 while the set calls into any mod */
  char last_error[1024];
};

/* ---- mod.c ---------------------------------------------------------------- */
/* Creates the mod's state, sandbox and module, then runs mod.lua as the task
   "main" and calls on_load with the carried state. false on failure, with
   m->last_error set and the state closed. */
bool luna__mod_open(luna__mod *m);
/* Closes the state (cancels tasks). `call_unload`: call on_unload first;
   `keep`: keep what it returned as the carried state. */
void luna__mod_close(luna__mod *m, bool call_unload, bool keep);
void luna__mod_free(luna__mod *m);
/* Reports through the set's report function. */
void luna__mods_report(luna_mods *set, const char *mod, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* The mod whose state L is (its allocator's ud). */
luna__mod *luna__mod_of(lua_State *L);
void *luna__mod_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
/* Protected call of f on m's state (f gets ud as a light userdata at index
   1), inside a budget context of its own when `budget`; false when it
   raised (the message and traceback are in m->last_error). */
bool luna__mod_pcall(luna__mod *m, lua_CFunction f, void *ud, bool budget);
/* task.on_error as mods see it: the mod's handler is called by the set's. */
int luna__l_mod_on_error(lua_State *L);
/* Counts an overrun and marks the mod for disabling at max_overruns. */
void luna__mod_overrun(luna__mod *m, bool memory);

/* ---- budget.c ------------------------------------------------------------- */
/* Installs the count hook on L's main thread and the binding observer. */
void luna__budget_install(luna__mod *m);
/* Sets the budget hook on a thread (unless another hook, e.g. that of
   luna_lua_interrupt, is pending on it). */
void luna__budget_hook_thread(luna__mod *m, lua_State *co);
/* Opens and closes a budget context; the outermost one resets the count. */
void luna__budget_begin(luna__mod *m, lua_State *thread);
void luna__budget_end(luna__mod *m);

/* ---- sandbox.c ------------------------------------------------------------ */
/* Builds the sandbox in L (opened libraries and the module are there) and
   makes it the state's global table. Raises on error. */
void luna__sandbox_open(lua_State *L, luna__mod *m);
/* Loads a file of the mod's folder as a text chunk with the sandbox as its
   environment; `rel` must stay inside the folder. Pushes the chunk, or
   raises. */
void luna__sandbox_loadfile(lua_State *L, luna__mod *m, const char *rel, const char *what);

/* ---- bus.c ---------------------------------------------------------------- */
/* Serializes the value at idx of L into a malloc'ed buffer; raises a Lua
   error in L (naming `what`) for values that cannot cross. */
char *luna__copy_out(lua_State *L, int idx, size_t limit, size_t *len, const char *what);
/* Pushes the value a buffer holds onto L (may raise: out of memory). */
void luna__copy_in(lua_State *L, const char *data, size_t len);
/* Queues a message (takes ownership of data). 0, or LUNA_ENOMEM with *why
   saying why (out of memory, or the bus is full: a static string). */
int luna__bus_post(luna_mods *set, const char *topic, const char *from, char *data, size_t len,
                   const char **why);
/* Delivers the messages queued before this call, in order. */
void luna__bus_deliver(luna_mods *set);
void luna__bus_clear(luna_mods *set);
/* Pushes the `mods` module table for m. */
int luna__open_mods_module(lua_State *L);

/* ---- manifest.c ----------------------------------------------------------- */
/* Reads dir/manifest.lua (missing: defaults, name = folder name). false with
   `err` set when it is malformed. */
bool luna__manifest_read(const char *dir, luna__manifest *out, char *err, size_t errlen);
void luna__manifest_free(luna__manifest *man);
/* Reads a whole file into a malloc'ed, NUL-terminated buffer; NULL with
   errno set on failure or when it exceeds `limit` bytes (EFBIG). */
char *luna__read_file(const char *path, size_t limit, size_t *len);

/* ---- watch.c -------------------------------------------------------------- */
/* A signature of every regular file under dir (names, sizes, mtimes), 0 if
   dir cannot be read. */
uint64_t luna__watch_signature(const char *dir);

#endif
