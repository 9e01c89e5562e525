/*
** lunaloop_mods.h: isolated, budgeted, hot-reloadable Lua mods on a shared
** loop. A mod is a folder with mod.lua and manifest.lua; each loaded mod gets
** its own Lua state (its own allocator with a memory cap, its own globals, a
** whitelist sandbox) attached to the loop with luna_lua_attach, an
** instruction budget per resume or call, and a message bus whose values are
** deep-copied between states. docs/modding.md is the guide for mod authors
** and hosts; it lists the exact sandbox whitelist.
**
** Threads: every function here is for the loop thread (the thread that
** drives the loop), and none may be called from inside a mod's Lua code
** (they return LUNA_ESTATE then), except the read-only queries and the
** sends (luna_mods_send, luna_mods_send_string: a host function that a
** mod calls may post to the bus).
**
** The set does its per-frame work (delivering bus messages, disabling mods
** that overran their budgets, checking files for hot reload) in one repeating
** item at config.timing of the loop, so a host that drives frames with
** luna_loop_frame needs no other call. A frame delivers at most 100,000
** steps of messages (a message taken off the queue, a subscriber called
** or a removed one passed, is a step); the rest waits for the next frame,
** in order. Free the set before the loop.
*/
#ifndef LUNALOOP_MODS_H
#define LUNALOOP_MODS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lunaloop_lua.h"

LUNA_BEGIN_DECLS

typedef struct luna_mods luna_mods;

/* Where a mod is in its life. */
typedef enum luna_mod_state {
  LUNA_MOD_LOADED = 1,   /* its state runs on the loop */
  LUNA_MOD_FAILED = 2,   /* its manifest or mod.lua failed to load, or a
                            dependency is missing, failed or in a cycle;
                            last_error says which. A change of its files
                            (hot reload) or luna_mods_reload tries again. */
  LUNA_MOD_DISABLED = 3, /* unloaded after max_overruns budget or memory
                            overruns; a change of its files or
                            luna_mods_reload brings it back */
  LUNA_MOD_UNLOADED = 4  /* unloaded by luna_mods_unload */
} luna_mod_state;

/* Receives one line a mod printed (without the newline and without the
   "[name] " prefix the default adds). */
typedef void (*luna_mods_print_fn)(void *ud, const char *mod, const char *line, size_t len);

/* Receives a report: a task or callback of a mod failed (with traceback), a
   mod failed to load, was disabled, reloaded or unloaded. `mod` may be NULL
   for reports about the set itself (e.g. a dependency cycle). */
typedef void (*luna_mods_report_fn)(void *ud, const char *mod, const char *message);

/* Configuration. A zero field means "the default", so `{0}` is valid. */
typedef struct luna_mods_config {
  size_t memory_limit;        /* bytes per mod state; 0: 64 MiB. Allocations
                                 past it fail ("not enough memory") while the
                                 mod's code runs; the binding's own
                                 bookkeeping between runs may go 1/8 over */
  uint64_t instruction_limit; /* VM instructions per resume or call; 0:
                                 10,000,000 */
  luna_ns time_limit;         /* ns of wall-clock time each mod's code may
                                 run per frame, over all its resumes,
                                 callbacks, predicates, bus deliveries and
                                 to-be-closed variables together; loading
                                 and unloading get one each. Past it the
                                 run in progress is stopped ("time budget
                                 exceeded"), the mod's other work waits for
                                 the next frame, and one time overrun is
                                 counted for the frame. 0: 50 ms;
                                 negative: no time limit (and no watchdog
                                 thread). With a limit, the watchdog
                                 thread stops a long C call's loop by
                                 sending the loop thread SIGRTMIN + 5
                                 (handler installed once per process):
                                 the host must leave that signal alone
                                 and unblocked on the loop thread */
  luna_time_fn clock;         /* the clock time_limit is measured on
                                 (monotonic ns); NULL: CLOCK_MONOTONIC.
                                 Called on the loop thread only; tests
                                 install a fake one. The watchdog thread
                                 times its wake-ups on CLOCK_MONOTONIC and
                                 lets this clock decide */
  void *clock_ud;
  unsigned max_overruns;      /* instruction, time or memory overruns after
                                 which a mod is disabled; 0: 3 */
  int watch_frames;           /* check the mods' files every N frames; 0:
                                 30; negative: never (luna_mods_poll still
                                 checks on demand) */
  size_t message_limit;       /* bytes of one copied value (bus message or
                                 carried state); 0: 1 MiB. Each sender (each
                                 mod, the host) may have 64 times this in
                                 bytes, and 65,536 messages, waiting */
  int timing;                 /* the timing of the set's item (message
                                 delivery, disabling, file checks); 0:
                                 LUNA_EARLY_UPDATE (so LUNA_INITIALIZATION
                                 cannot be chosen) */
  bool has_seed;              /* seed every mod's math.random with `seed` */
  long long seed;
  luna_mods_print_fn print;   /* NULL: "[name] line" on stdout */
  void *print_ud;
  luna_mods_report_fn report; /* NULL: "lunaloop: mod 'name': message" on stderr */
  void *report_ud;
  lua_Alloc alloc;            /* NULL: realloc and free. The allocator under
                                 every mod state's capped one (it sees only
                                 the requests within the cap); called on the
                                 loop thread. A refusal (NULL for a growth)
                                 is out of memory for that mod, never for
                                 the host: see docs/modding.md, "Crashes
                                 and out-of-memory" */
  void *alloc_ud;
} luna_mods_config;

/* What luna_mods_get_info tells about one mod. The strings belong to the set
   and stay valid until the mod is loaded again or the set is freed. */
typedef struct luna_mod_info {
  const char *name;
  const char *version;
  const char *dir;            /* the mod's folder, as resolved by realpath */
  luna_mod_state state;
  size_t memory;              /* bytes its state uses now (0 when not loaded) */
  size_t host_memory;         /* bytes the host keeps for it now (its bus
                                 messages waiting, its subscribed topics);
                                 counted against memory_limit with `memory` */
  size_t memory_peak;         /* the most it ever used, over all its loads */
  size_t tasks;               /* tasks alive */
  size_t callbacks;           /* task.on / task.every callbacks registered */
  uint64_t errors;            /* errors reported by all its loads: of its
                                 tasks and callbacks, while its tasks were
                                 cancelled at unload, of on_load/on_unload */
  uint64_t budget_overruns;   /* since it was last (re)loaded */
  uint64_t memory_overruns;   /* since it was last (re)loaded */
  uint64_t time_overruns;     /* frames in which it reached its time
                                 budget, since it was last (re)loaded */
  uint64_t loads;             /* times its mod.lua was loaded (1 + reloads) */
  const char *last_error;     /* why it failed or was disabled; "" if none */
} luna_mod_info;

/* Creates a mod set on `loop` (not owned) and registers its repeating item.
   `config` may be NULL. 0, LUNA_EINVAL (NULL loop or out, a negative or
   out-of-range timing), LUNA_ENOMEM. */
LUNA_API int luna_mods_new(luna_loop *loop, const luna_mods_config *config, luna_mods **out);

/* Unloads every mod in reverse load order (their tasks are cancelled, their
   to-be-closed variables run; on_unload is not called), drops undelivered
   messages, removes the set's item and frees it. NULL is ignored. Must come
   before luna_loop_free. */
LUNA_API void luna_mods_free(luna_mods *set);

/* Loads every mod in `dir` (each subfolder with a mod.lua; dot-folders are
   skipped) in dependency order: a mod loads after the mods it depends on,
   ties broken by load_order, then name. A mod whose dependency is missing,
   failed, or lies in a cycle is not loaded and each is reported naming the
   mods involved; the others load. Each mod's main chunk runs as the task
   "main" until its first await. Returns 0 when every mod loaded,
   LUNA_EINVAL when some did not (luna_mods_last_error names the first
   problem) or `dir` cannot be read, LUNA_ESTATE from inside a mod. */
LUNA_API int luna_mods_load_dir(luna_mods *set, const char *dir);

/* Loads one mod from its folder; its dependencies must be loaded already.
   0, LUNA_EINVAL (failed, also when another mod of the set claims its
   name: see luna_mods_last_error; the mod is still listed, as FAILED, and
   hot reload retries it), LUNA_ESTATE (inside a mod, or this folder's mod
   is loaded already: luna_mods_last_error says so; luna_mods_reload
   reloads it). */
LUNA_API int luna_mods_load(luna_mods *set, const char *path);

/* Unloads a mod: on_unload (if the mod registered one) is called and its
   result dropped, then the state is closed (tasks cancelled, to-be-closed
   variables run). The mod stays listed as UNLOADED. 0, LUNA_ENOENT (no such
   mod), LUNA_ESTATE (inside a mod). */
LUNA_API int luna_mods_unload(luna_mods *set, const char *name);

/* Unloads every loaded mod in reverse load order, as luna_mods_free does
   (tasks cancelled, to-be-closed variables run, on_unload not called), but
   keeps the set: the mods stay listed, as UNLOADED, and what goes wrong
   while they close (a to-be-closed variable that raises, runs out of memory
   or over its budget) is reported and counted in luna_mods_error_count and
   the mods' errors. For a host that reports once everything has closed, as
   `lunaloop mods` does. 0, LUNA_EINVAL (NULL set), LUNA_ESTATE (inside a
   mod). */
LUNA_API int luna_mods_unload_all(luna_mods *set);

/* Unloads and loads a mod again from its folder, re-reading its manifest.
   A table returned by its on_unload handler is copied into the new state and
   given to the on_load handler the new mod.lua registers. Also brings back a
   FAILED, DISABLED or UNLOADED mod. 0, LUNA_EINVAL (the new load failed),
   LUNA_ENOENT, LUNA_ESTATE. */
LUNA_API int luna_mods_reload(luna_mods *set, const char *name);

/* Checks every mod's files now (modification time and size of each regular
   file in its folder, recursively, without following links to folders, at
   most 8 levels, 1024 folders, 4096 files and 16384 entries per mod: a
   larger folder is reported once) and reloads those that changed, and the
   failed mods whose missing dependency is loaded or whose contested name
   is free now. The set's item does the same every watch_frames frames.
   Stores how many mods were reloaded in *reloaded (may be NULL). 0,
   LUNA_EINVAL (NULL set), LUNA_ESTATE (inside a mod: nothing is checked
   and *reloaded is untouched). */
LUNA_API int luna_mods_poll(luna_mods *set, size_t *reloaded);

/* Posts a message from the host: the value at `idx` of any Lua state L (nil,
   boolean, number, string, or a table of those) is copied now and delivered
   to the subscribers of `topic` at the next run of the set's timing, with
   sender "host". `topic` is at most 256 bytes. 0, LUNA_EINVAL (a topic
   too long, no value at idx, a value that cannot cross, too large, or a
   cycle: luna_mods_last_error says why), LUNA_ENOMEM (out of memory, or
   the host's share of the bus is full: 65,536 of its messages, or 64
   times message_limit in bytes of them, wait for delivery; each mod has a
   share of its own, so no mod's flood fills the host's;
   luna_mods_last_error says which). */
LUNA_API int luna_mods_send(luna_mods *set, const char *topic, lua_State *L, int idx);

/* Posts a string message from the host (as luna_mods_send). */
LUNA_API int luna_mods_send_string(luna_mods *set, const char *topic, const char *s, size_t len);

/* Mods known to the set (loaded or not), in load order. */
LUNA_API size_t luna_mods_count(const luna_mods *set);

/* Fills *out for the i-th mod (0-based, load order). 0 or LUNA_ENOENT. */
LUNA_API int luna_mods_get_info(const luna_mods *set, size_t i, luna_mod_info *out);

/* Finds the mod named `name` and stores its index (0-based, load order, as
   luna_mods_get_info takes it) in *index (may be NULL: then only whether
   it exists is told). 0, LUNA_EINVAL (NULL set or name), LUNA_ENOENT (no
   mod of that name; *index is untouched). A read-only query. */
LUNA_API int luna_mods_find(const luna_mods *set, const char *name, size_t *index);

/* The Lua state of a loaded mod (NULL otherwise), for hosts that add their
   own API to it. Keep to the state's rules: run its code with lua_pcall. */
LUNA_API lua_State *luna_mods_state(const luna_mods *set, const char *name);

/* True while a loaded mod has a task or callback alive, or a message waits
   for delivery: what `lunaloop mods` runs until. */
LUNA_API bool luna_mods_alive(const luna_mods *set);

/* Errors reported by all mods so far (tasks, callbacks, loads, disables,
   failures of on_load and on_unload, errors while a mod's tasks are
   cancelled at unload). */
LUNA_API uint64_t luna_mods_error_count(const luna_mods *set);

/* The message of the last failed call on the set ("" if none). */
LUNA_API const char *luna_mods_last_error(const luna_mods *set);

LUNA_END_DECLS

#endif
