/*
** mods.h: the private state of a mod set, shared by the files of src/mods.
**
**   set.c      the set: loading a folder in dependency order, the upkeep
**              item (delivery, disabling, file checks), the public API
**   mod.c      one mod: its allocator, its state's lifecycle, reports
**   budget.c   the instruction and time budgets: count hooks and the
**              binding observer
**   watchdog.c the thread that stops a mod's code when its time runs out
**   pattern.c  the bounded pattern matcher of the mods' string library
**   sandbox.c  the whitelist environment a mod's code sees
**   copy.c     copying values between states as bytes (copy.h)
**   bus.c      the message bus: its queue, senders' shares, delivery order
**   modlib.c   the `mods` module a mod sees, and its subscribers' calls
**   host.c     the host's posts to the bus (luna_mods_send*)
**   topics.c   the bus's index of subscriptions by topic
**   manifest.c reading manifest.lua in a throwaway, empty state
**   watch.c    file signatures for hot reload
**   files.c    reading a file of a mod's folder (contained, never blocking)
**
** Invariants:
** - A mod's lua_State is created, closed and replaced only when no Lua code
**   of that state runs (m->running == 0 and the binding is at depth 0):
**   from the set's item or from a public call made outside every mod.
** - Every call from C into a mod's state that may raise (allocate) happens
**   inside lua_pcall, so a mod at its memory cap can never panic the host.
** - A mod's budget context (budget.c) brackets every run of its Lua code:
**   the binding's observer brackets resumes, callbacks, predicates and the
**   error handler; set.c, mod.c and modlib.c bracket the calls they make
**   themselves.
*/
#ifndef LUNA_MODS_INTERNAL_H
#define LUNA_MODS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#include "guard.h"
#include "lunaloop_mods.h"

typedef struct luna__mod luna__mod;
typedef struct luna__watchdog luna__watchdog;

/* Depth of nested contexts whose threads a mod remembers (budget.c). */
#define LUNA__THREAD_STACK 32

/* What an overrun was of (luna__mod_overrun). */
typedef enum luna__overrun {
  LUNA__OVERRUN_BUDGET,
  LUNA__OVERRUN_MEMORY,
  LUNA__OVERRUN_TIME
} luna__overrun;

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
  size_t index;               /* its place in set->mods (load order) */
  char *dir;                  /* realpath of the folder, malloc'ed */
  luna__manifest man;
  luna_mod_state state;
  lua_State *L;               /* NULL unless LOADED */
  /* allocator (mod.c) */
  size_t mem_used, mem_peak, mem_limit;
  size_t host_bytes;          /* host memory kept for it (its waiting bus
                                 messages, its topic index nodes): counts
                                 against mem_limit with mem_used */
  size_t queued, queued_bytes; /* its share of the bus: messages waiting */
  bool mem_strict;            /* refuse past mem_limit (inside a context) */
  bool unloading;             /* its tasks are being cancelled to close its
                                 state: past the time budget they are
                                 abandoned (budget.c) */
  /* instruction budget (budget.c) */
  uint64_t budget;            /* the limit per context */
  uint64_t used;              /* instructions counted in this context */
  int step;                   /* hook granularity: min(budget, 1000) */
  int depth;                  /* nesting of budget contexts */
  bool exceeded;              /* this context ran out: raise everywhere */
  luna__binding *binding;     /* L's, kept at luna__budget_install (opaque:
                                 reached through guard.h) */
  luna__guard_observer observer; /* the budget's observer of L (budget.c):
                                 the binding keeps a pointer to it */
  char exceeded_msg[200];     /* the first error of it, raised again */
  lua_State *ctx_thread;      /* thread the outermost context began on */
  /* time budget (budget.c) */
  luna_ns time_limit;         /* ns per frame; <= 0: none */
  luna_ns time_spent;         /* by the contexts of time_frame that ended */
  uint64_t time_frame;        /* the frame time_spent counts (or the load's) */
  luna_ns ctx_began;          /* the clock when the outermost context began */
  bool time_counted;          /* a time overrun was counted in time_frame */
  lua_State *thread;          /* the thread the mod's code runs on now,
                                 inside a context (the watchdog's target) */
  lua_State *threads[LUNA__THREAD_STACK]; /* `thread` outside each nested
                                 context, by depth */
  unsigned sort_calls;        /* comparisons of the sandbox's table.sort */
  int running;                /* > 0 while the set itself calls into L */
  /* overruns since the last load, and the verdict */
  uint64_t budget_overruns, memory_overruns, time_overruns;
  bool disable_pending;
  uint64_t loads;
  uint64_t errors_before;     /* errors of states closed earlier (including
                                 those of their cancellation at close), and
                                 failures of on_load and on_unload */
  /* hot reload */
  uint64_t signature;         /* of the files when last loaded or failed */
  bool waits_dependency;      /* failed for a dependency that is not loaded:
                                 tried again once it is (poll_files) */
  bool waits_name;            /* failed for a name another mod claims: tried
                                 again once none does (poll_files) */
  bool named;                 /* its manifest was read: it claims man.name */
  bool watch_over;            /* its folder is beyond the watcher's bounds
                                 (reported when it first was) */
  /* carried state for on_load, serialized (copy.h) */
  char *carry;
  size_t carry_len;
  char last_error[512];
};

/* What malloc keeps beside each block (glibc: 8-16 bytes), counted in the
   host memory charged to a mod. */
#define LUNA__MALLOC_OVERHEAD 16
/* Why a charge to a mod's cap (luna__mod_charge) was refused. */
#define LUNA__CAP_REACHED \
  "not enough memory (the mod's memory cap also counts what the host keeps for it)"
/* Topics are at most this many bytes, without NUL (bus.c). */
#define LUNA__MAX_TOPIC 256
/* Delivery steps per frame: a message taken, or a subscription visited. */
#define LUNA__BUS_STEPS 100000

/* A bus message waiting for delivery. */
typedef struct luna__message {
  luna__mod *sender;          /* NULL for the host */
  char *topic;                /* malloc'ed: the topic, a NUL, then `from` */
  size_t topic_len;
  const char *from;           /* sender's name ("host" for the host) */
  char *data;                 /* serialized value */
  size_t len;
  size_t charge;              /* bytes charged to the sender's cap */
} luna__message;

typedef struct luna__topic_node luna__topic_node; /* topics.c */

struct luna_mods {
  luna_loop *loop;
  luna_mods_config cfg;       /* with the defaults filled in */
  luna_item_id item;
  bool has_item;
  luna__mod **mods;           /* load order */
  size_t nmods, capmods;
  /* the bus (bus.c): a ring of waiting messages, in the order sent */
  luna__message *queue;
  size_t qhead, nqueue, capqueue;
  size_t host_queued, host_queued_bytes; /* the host's share of it */
  struct {
    bool active;              /* the head message is being delivered */
    bool resume;              /* stopped inside the mod at `index` */
    size_t index;             /* mods before this place are done */
    uint64_t loads;           /* of that mod, when it stopped */
    lua_Integer pos, n;       /* where in its subscriptions, of how many */
  } cursor;
  luna__mod **match;          /* receivers of one message (nmods slots) */
  size_t capmatch;
  /* the subscription index (topics.c) */
  luna__topic_node **buckets;
  size_t nbuckets, nnodes;
  uint64_t topic_seed;
  uint64_t frames_seen;       /* runs of the item, for watch_frames */
  uint64_t errors;            /* load failures and disables reported */
  int busy;                   /* > 0 while the set calls into any mod */
  luna__watchdog *watchdog;   /* NULL without a time limit */
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
void luna__mod_overrun(luna__mod *m, luna__overrun kind);
/* Charges n bytes of host memory kept for m to its cap: false (nothing
   charged) when its state and what the host keeps for it would pass
   mem_limit. luna__mod_uncharge gives them back. */
bool luna__mod_charge(luna__mod *m, size_t n);
void luna__mod_uncharge(luna__mod *m, size_t n);
/* Copies the value at idx of L (a mod's state) into a malloc'ed buffer
   (copy.h), at most message_limit bytes, its growth charged to the mod's
   cap while it is made; raises in L (naming `what`) for a value that
   cannot cross. */
char *luna__mod_copy_out(lua_State *L, int idx, size_t *len, const char *what);

/* ---- budget.c ------------------------------------------------------------- */
/* Installs the count hook on L's main thread and the binding observer. */
void luna__budget_install(luna__mod *m);
/* Sets the budget hook on a thread (unless another hook, e.g. that of
   luna_lua_interrupt, is pending on it). */
void luna__budget_hook_thread(luna__mod *m, lua_State *co);
/* Opens and closes a budget context; the outermost one resets the count. */
void luna__budget_begin(luna__mod *m, lua_State *thread);
void luna__budget_end(luna__mod *m);
/* The count hook of every thread of a mod (the watchdog arms it). */
void luna__budget_hook(lua_State *L, lua_Debug *ar);
/* Starts a fresh time budget (loading and unloading each get one). */
void luna__budget_fresh(luna__mod *m);
/* The mod's code goes on on thread co (a coroutine it resumes or closes);
   returns the thread it ran on before, to give back when co returns. */
lua_State *luna__budget_switch(luna__mod *m, lua_State *co);
/* True when m's time for this frame is spent: its work waits for the next
   frame. (The bus keeps such a mod's messages for it.) */
bool luna__mod_held(luna__mod *m);
/* Raises the time budget's stop in L when m's time has run out (the
   pattern matcher calls it every so many steps). */
void luna__budget_check_time(lua_State *L, luna__mod *m);
/* Counts n instructions of work a C function did for the open context
   (the matcher's steps); past the budget, L stops at its next
   instruction. */
void luna__budget_charge(lua_State *L, luna__mod *m, uint64_t n);

/* ---- watchdog.c ----------------------------------------------------------- */
/* Starts the thread; NULL when it cannot be started. */
luna__watchdog *luna__watchdog_new(void);
void luna__watchdog_free(luna__watchdog *wd);
/* A context opens on thread L and may run until `deadline` (CLOCK_MONOTONIC
   ns); past it, the watchdog arms luna__budget_hook on the context's
   running thread to fire at the next instruction, and again every
   millisecond until the context closes. Loop thread. */
void luna__watchdog_arm(luna__watchdog *wd, lua_State *L, luna_ns deadline);
/* The open context's code runs on L now. */
void luna__watchdog_thread(luna__watchdog *wd, lua_State *L);
/* The context closed. */
void luna__watchdog_disarm(luna__watchdog *wd);
/* CLOCK_MONOTONIC in ns: the clock the watchdog sleeps on, and the set's
   default clock. Any thread. */
luna_ns luna__watchdog_now(void);

/* ---- pattern.c ------------------------------------------------------------ */
/* Sets find, match, gmatch and gsub in the table on top of L to the
   bounded matcher's, for mod m (NULL: no mod; then a call may take
   LUNA__PATTERN_STEPS steps and no time budget applies). */
#define LUNA__PATTERN_STEPS 10000000
void luna__pattern_install(lua_State *L, luna__mod *m);

/* ---- sandbox.c ------------------------------------------------------------ */
/* Builds the sandbox in L (opened libraries and the module are there) and
   makes it the state's global table. Raises on error. */
void luna__sandbox_open(lua_State *L, luna__mod *m);
/* Loads a file of the mod's folder as a text chunk with the sandbox as its
   environment; `rel` must stay inside the folder. Pushes the chunk, or
   raises. */
void luna__sandbox_loadfile(lua_State *L, luna__mod *m, const char *rel, const char *what);

/* ---- bus.c ---------------------------------------------------------------- */
/* Why `topic` (len bytes) cannot be a topic, written into buf (a message
   to put after "mods.send: "), or NULL when it can. */
const char *luna__bus_bad_topic(const char *topic, size_t len, char *buf, size_t buflen);
/* Why `sender` (NULL: the host) cannot post `len` more bytes now (a static
   message to raise or to put in last_error), or NULL when it can. */
const char *luna__bus_full(const luna_mods *set, const luna__mod *sender, size_t len);
/* Queues a message from `sender` (NULL: the host; takes ownership of
   data; the topic is checked by the caller). 0, or LUNA_ENOMEM with *why
   saying why (out of memory, the sender's share of the bus is full, or
   its cap is reached: a static string). */
int luna__bus_post(luna_mods *set, luna__mod *sender, const char *topic, size_t topic_len,
                   char *data, size_t len, const char **why);
/* Delivers the messages queued before this call, in order, at most
   LUNA__BUS_STEPS steps of it; the rest waits for the next call. */
void luna__bus_deliver(luna_mods *set);
void luna__bus_clear(luna_mods *set);

/* ---- modlib.c ------------------------------------------------------------- */
/* Registry keys of the handlers a mod registers with mods.on_load and
   mods.on_unload (called by mod.c). */
extern const char luna__on_load_key, luna__on_unload_key;
/* Pushes the `mods` module table for the mod whose state L is. */
int luna__open_mods_module(lua_State *L);

/* What one delivery of a message to one mod needs, and where it stopped
   when the frame's bound was reached. */
typedef struct luna__delivery {
  const luna__message *msg;
  bool resume;          /* go on with the array the mod's state kept */
  lua_Integer pos, n;   /* subscriptions visited so far, of the n it had */
  size_t *steps;        /* the frame's delivery steps */
  bool paused;          /* out: the bound was reached; pos, n say where */
} luna__delivery;
/* Protected, in the receiving mod's state (luna__mod_pcall, ud a
   luna__delivery): calls each of its subscribers of the message's topic,
   each in its own budget context, until the frame's steps run out (then
   the array and the place are kept for the next frame). */
int luna__deliver_to_subscribers(lua_State *L);

/* ---- topics.c ------------------------------------------------------------- */
/* The index of subscriptions by topic: (topic, mod) -> active count. add
   charges a new node to m's cap: false with *why (static) when that or
   the allocation fails. remove takes one away; forget drops all of m's. */
void luna__topics_init(luna_mods *set);
bool luna__topics_add(luna_mods *set, luna__mod *m, const char *topic, size_t len,
                      const char **why);
void luna__topics_remove(luna_mods *set, luna__mod *m, const char *topic, size_t len);
size_t luna__topics_count(luna_mods *set, const luna__mod *m, const char *topic, size_t len);
void luna__topics_forget(luna_mods *set, luna__mod *m);
/* The mods with an active subscription to topic, in load order, into out
   (at most cap); returns how many. */
size_t luna__topics_match(luna_mods *set, const char *topic, size_t len, luna__mod **out,
                          size_t cap);
void luna__topics_free(luna_mods *set);

/* ---- manifest.c ----------------------------------------------------------- */
/* Reads dir/manifest.lua (missing: defaults, name = folder name). false with
   `err` set when it is malformed. */
bool luna__manifest_read(const char *dir, luna__manifest *out, char *err, size_t errlen);
void luna__manifest_free(luna__manifest *man);
/* ---- files.c -------------------------------------------------------------- */
/* Reads dir/rel (dir a realpath) into a malloc'ed, NUL-terminated buffer:
   the resolved path must stay inside dir, the file is opened without
   blocking and must be a regular file of at most `limit` bytes. NULL on
   failure with errno set (ENOENT: there is no such file) and *why a static
   reason. */
char *luna__read_in_folder(const char *dir, const char *rel, size_t limit, size_t *len,
                           const char **why);
/* Loads dir/rel, checked as luna__read_in_folder does, as a text chunk of
   at most `limit` bytes named `chunkname` into L, read from the file piece
   by piece (no host buffer of its size). The lua_load status with the
   chunk or the message pushed, or -1 with nothing pushed and *why (static)
   saying why the file could not be read. */
int luna__load_in_folder(lua_State *L, const char *dir, const char *rel, size_t limit,
                         const char *chunkname, const char **why);

/* ---- watch.c -------------------------------------------------------------- */
/* A signature of every regular file under dir (names, sizes, mtimes), 0 if
   dir cannot be read. Symbolic links to folders are not followed; *over
   (may be NULL) is set when the folder exceeds the walk's bounds (watch.c:
   8 levels, 1024 folders, 4096 files, 16384 entries), past which the rest
   is not watched. */
uint64_t luna__watch_signature(const char *dir, bool *over);

#endif
