/*
** trace.c: `--trace FILE` for run and repl. Writes a Chrome trace event file
** (the JSON array format, which Perfetto and chrome://tracing open):
**   - metadata naming the process and one track (tid) per timing, tid =
**     the timing's value, tid 16 for resumes outside any run (the main
**     chunk and REPL input, started by the host) and tid 17 for frames;
**   - one complete event ("ph": "X", "cat": "task") per task resume, named
**     after the task (t.name, or #id), with ts/dur in microseconds on
**     CLOCK_MONOTONIC from the moment the trace began;
**   - a flow arrow ("ph": "s" in the spawning resume, "f" at the first
**     resume of the task it created, "cat": "spawn", id = the new task's
**     id) from each task to the tasks it spawned;
**   - a flow arrow ("cat": "wake", id = 2^40 + n) from where a task was
**     woken (inside the waker's resume, or on the timing's track when a
**     Promise's completion came in from the inbox, with an instant event
**     "woken" there) to the task's next resume;
**   - per frame, a global instant event "frame", a slice "frame N" (cat
**     "frame") on the frames track from its start to its end and a slice
**     "spare" (cat "spare") from its end to the next frame's start: the
**     time the driver slept or did its own work;
**   - counters ("ph": "C") "tasks" (live tasks, before the frame), and after
**     it "heap" (bytes the Lua state uses), "callbacks" (the task.on and
**     task.every callbacks registered in the state) and "callbacks_run"
**     (their calls in that frame);
**   - an instant event "deferred" (cat "budget") on a timing's track when
**     its budget put callback calls off in that frame, with their count;
**   - a slice "gc" (cat "gc") on the collector track (tid 18) for the
**     frame's paced collector work (luna_lua_gc_get_stats): its length is
**     the time the pacer spent since the previous frame ended, placed at
**     the frame's end (where the default paced timing, LastTimeUpdate,
**     runs), with the steps and full collections in args.
** Events are built and escaped by cJSON and streamed to the file, one per
** line inside the array, so memory stays bounded however long the run. The
** file is not: a run that never ends would fill the disk (a user found 18
** GB after 11 minutes of --fast). So a trace stops recording at
** TRACE_LIMIT bytes (LUNALOOP_TRACE_LIMIT in the environment overrides it;
** 0: no limit), says so once on stderr, and still ends as valid JSON. 1 GiB
** is about what Perfetto's web UI can open.
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <lua.h>

#include "cli.h"
#include "lunaloop_lua.h"

/* The tid of resumes that happen outside any timing's run. */
#define HOST_TID LUNA_TIMING_COUNT
/* The tid of the frames and the spare time between them. */
#define FRAME_TID (LUNA_TIMING_COUNT + 1)
/* The tid of the collector's paced work. */
#define GC_TID (LUNA_TIMING_COUNT + 2)
/* Bytes of events after which a trace records nothing more (see above). */
#define TRACE_LIMIT ((long long)1 << 30)

struct luna_trace {
  FILE *f;
  char *path;
  bool first;       /* no event written yet: the next one has no comma */
  bool failed;      /* a write or an allocation failed: reported at close */
  bool full;        /* the size limit was reached: nothing more is written */
  long long bytes;  /* of events written so far */
  long long limit;  /* TRACE_LIMIT or LUNALOOP_TRACE_LIMIT; 0: none */
  luna_ns origin;   /* CLOCK_MONOTONIC when the trace began */
  luna_loop *loop;  /* for the frame number of each slice */
  lua_State *L;     /* the state observed, or NULL */
  uint32_t observer; /* its observer's id (luna_lua_add_observer) */
  /* The resumes in progress: resumes nest (a task that spawns another runs
     it inside its own resume) and pair up. */
  struct resume {
    luna_ns begin;
    uint64_t id;
  } *stack;
  size_t depth, cap;
  /* Tasks created inside another task's resume that have not run yet: the
     flow arrow from their creator ends at their first resume. Ids grow, so
     the array is sorted; a task that started is set to 0, and the zeros
     before `head` are skipped (most tasks start in creation order). */
  struct {
    uint64_t *id;
    size_t head, count, cap;
  } unstarted;
  /* Tasks woken that have not resumed since, in the order they were
     woken, with the wake flow's id for each: the arrow ends at the task's
     next resume. Woken tasks resume in that order (the ready ring is first
     in, first out), so the entry at `head` is nearly always the one wanted;
     an entry taken out of order is set to 0 and skipped later. A task
     cannot be woken again before it resumes (it waits on nothing then). */
  struct {
    struct woken {
      uint64_t task, flow;
    } *a;
    size_t head, count, cap;
  } woken;
  uint64_t wakes; /* wake flows started so far */
  uint64_t callback_calls; /* luna_lua_callback_calls at the last frame's end */
  /* The frame in progress and the end of the last one (0: none yet). */
  uint64_t frame;
  luna_ns frame_begin, frame_end;
  uint64_t deferred[LUNA_TIMING_COUNT]; /* luna_loop_stats.deferred so far */
  luna_lua_gc_stats gc;                 /* the pacer's figures so far */
};

static luna_ns now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (luna_ns)ts.tv_sec * LUNA_NS_PER_SECOND + ts.tv_nsec;
}

/* Microseconds since the trace began, as the format wants them. */
static double micros(const luna_trace *tr, luna_ns t) {
  return (double)(t - tr->origin) / 1000.0;
}

/* Writes one event and frees it; past the size limit, only frees it. */
static void emit(luna_trace *tr, cJSON *ev) {
  char *text = ev != NULL && !tr->full ? cJSON_PrintUnformatted(ev) : NULL;
  int n;
  cJSON_Delete(ev);
  if (tr->full)
    return;
  if (text == NULL) {
    tr->failed = true;
    return;
  }
  if ((n = fprintf(tr->f, "%s%s", tr->first ? "" : ",\n", text)) < 0)
    tr->failed = true;
  else
    tr->bytes += n;
  tr->first = false;
  cJSON_free(text);
  if (tr->limit > 0 && tr->bytes >= tr->limit) {
    tr->full = true;
    fprintf(stderr,
            LUNA_PROGNAME ": the trace %s reached %lld bytes: later events are not "
            "recorded (LUNALOOP_TRACE_LIMIT=bytes sets the limit, 0 removes it)\n",
            tr->path, tr->bytes);
  }
}

/* {"name": name, "ph": ph, "pid": 1, "tid": tid}: the fields every event has. */
static cJSON *event(const char *name, const char *ph, int tid) {
  cJSON *ev = cJSON_CreateObject();
  if (ev == NULL)
    return NULL;
  cJSON_AddStringToObject(ev, "name", name);
  cJSON_AddStringToObject(ev, "ph", ph);
  cJSON_AddNumberToObject(ev, "pid", 1);
  cJSON_AddNumberToObject(ev, "tid", tid);
  return ev;
}

/* A metadata event: {"name": what, "ph": "M", ..., "args": {key: value}}. */
static void metadata(luna_trace *tr, const char *what, int tid, const char *key,
                     const char *str, int num) {
  cJSON *ev = event(what, "M", tid);
  cJSON *args = ev != NULL ? cJSON_AddObjectToObject(ev, "args") : NULL;
  if (args != NULL) {
    if (str != NULL)
      cJSON_AddStringToObject(args, key, str);
    else
      cJSON_AddNumberToObject(args, key, num);
  }
  emit(tr, ev);
}

luna_trace *luna__trace_open(const char *path) {
  luna_trace *tr = calloc(1, sizeof *tr);
  if (tr == NULL || (tr->path = strdup(path)) == NULL) {
    fprintf(stderr, LUNA_PROGNAME ": cannot trace to %s: not enough memory\n", path);
    free(tr);
    return NULL;
  }
  tr->f = fopen(path, "w");
  if (tr->f == NULL) {
    fprintf(stderr, LUNA_PROGNAME ": cannot trace to %s: %s\n", path, strerror(errno));
    free(tr->path);
    free(tr);
    return NULL;
  }
  tr->first = true;
  tr->origin = now_ns();
  tr->limit = TRACE_LIMIT;
  if (getenv("LUNALOOP_TRACE_LIMIT") != NULL) {
    const char *s = getenv("LUNALOOP_TRACE_LIMIT");
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end != s && *end == '\0' && v >= 0) /* anything else: the default */
      tr->limit = v;
  }
  fputs("[\n", tr->f);
  metadata(tr, "process_name", 0, "name", LUNA_PROGNAME, 0);
  for (int t = 0; t <= GC_TID; t++) {
    const char *name = t < HOST_TID     ? luna_timing_name(t)
                       : t == HOST_TID  ? "host (outside any timing)"
                       : t == FRAME_TID ? "frames"
                                        : "collector";
    metadata(tr, "thread_name", t, "name", name, 0);
    metadata(tr, "thread_sort_index", t, "sort_index", NULL, t);
  }
  return tr;
}

const char *luna__trace_path(const luna_trace *tr) {
  return tr->path;
}

/* Appends x to a growing array of n elements of `size` bytes; false (and
   the trace marked failed) when it cannot grow. */
static bool grow(luna_trace *tr, void **a, size_t *cap, size_t n, size_t size) {
  size_t c;
  void *p;
  if (n < *cap)
    return true;
  c = *cap ? *cap * 2 : 16;
  if ((p = realloc(*a, c * size)) == NULL) {
    tr->failed = true;
    return false;
  }
  *a = p;
  *cap = c;
  return true;
}

/* A flow event of the arrow of category `cat` ("spawn": from a creator to
   task `id`; "wake": from a waker): "s" where it starts, "f" (bound to the
   slice that encloses it) where it ends. */
static void flow_of(luna_trace *tr, const char *cat, const char *ph, int tid, uint64_t id,
                    luna_ns t) {
  cJSON *e = event(cat, ph, tid);
  if (e == NULL) {
    tr->failed = true;
    return;
  }
  cJSON_AddStringToObject(e, "cat", cat);
  cJSON_AddNumberToObject(e, "id", (double)id);
  cJSON_AddNumberToObject(e, "ts", micros(tr, t));
  if (ph[0] == 'f')
    cJSON_AddStringToObject(e, "bp", "e");
  emit(tr, e);
}

static void flow(luna_trace *tr, const char *ph, int tid, uint64_t id, luna_ns t) {
  flow_of(tr, "spawn", ph, tid, id, t);
}

static int tid_of(const luna_lua_task_event *ev) {
  return ev->timing >= 0 ? ev->timing : HOST_TID;
}

/* A task was created: inside a resume, the arrow from its creator starts. */
static void task_created(void *ud, const luna_lua_task_event *ev) {
  luna_trace *tr = ud;
  if (tr->depth == 0 || tr->depth > tr->cap)
    return; /* created by the host, or inside a resume that was not stored */
  if (!grow(tr, (void **)&tr->unstarted.id, &tr->unstarted.cap, tr->unstarted.count,
            sizeof *tr->unstarted.id))
    return;
  tr->unstarted.id[tr->unstarted.count++] = ev->id;
  flow(tr, "s", tid_of(ev), ev->id, now_ns());
}

/* Wake flows start at 2^40, above any spawn flow's id (a task id). */
#define WAKE_FLOW_BASE ((uint64_t)1 << 40)

/* A task was woken: the arrow to its next resume starts here. Outside any
   resume (a Promise completed by the host), an instant event "woken" on
   the timing's track gives the arrow a place to start from. */
static void task_woken(void *ud, const luna_lua_task_event *ev) {
  luna_trace *tr = ud;
  luna_ns t = now_ns();
  uint64_t id;
  if (!grow(tr, (void **)&tr->woken.a, &tr->woken.cap, tr->woken.count, sizeof *tr->woken.a))
    return;
  id = WAKE_FLOW_BASE + ++tr->wakes;
  tr->woken.a[tr->woken.count++] = (struct woken){ev->id, id};
  if (tr->depth == 0) {
    cJSON *e = event("woken", "i", tid_of(ev));
    if (e == NULL) {
      tr->failed = true;
      return;
    }
    cJSON_AddStringToObject(e, "cat", "wake");
    cJSON_AddStringToObject(e, "s", "t");
    cJSON_AddNumberToObject(e, "ts", micros(tr, t));
    emit(tr, e);
  }
  flow_of(tr, "wake", "s", tid_of(ev), id, t);
}

/* The wake flow waiting for task id's resume, taken (0: none): the entry
   at head in the usual order, else found by a scan from there. */
static uint64_t take_woken(luna_trace *tr, uint64_t id) {
  struct woken *a = tr->woken.a;
  for (size_t i = tr->woken.head; i < tr->woken.count; i++)
    if (a[i].task == id) {
      uint64_t flow_id = a[i].flow;
      a[i].task = 0;
      while (tr->woken.head < tr->woken.count && a[tr->woken.head].task == 0)
        tr->woken.head++;
      if (tr->woken.head == tr->woken.count)
        tr->woken.head = tr->woken.count = 0;
      return flow_id;
    }
  return 0;
}

/* True, once, when task id was waiting for its first resume. */
static bool take_unstarted(luna_trace *tr, uint64_t id) {
  size_t lo = tr->unstarted.head, hi = tr->unstarted.count;
  uint64_t *a = tr->unstarted.id;
  while (lo < hi) { /* the zeros of started tasks are skipped around */
    size_t mid = lo + (hi - lo) / 2, m = mid;
    while (m < hi && a[m] == 0)
      m++;
    if (m == hi || a[m] > id) {
      hi = mid;
    } else if (a[m] < id) {
      lo = m + 1;
    } else {
      a[m] = 0;
      while (tr->unstarted.head < tr->unstarted.count && a[tr->unstarted.head] == 0)
        tr->unstarted.head++;
      if (tr->unstarted.head == tr->unstarted.count)
        tr->unstarted.head = tr->unstarted.count = 0;
      return true;
    }
  }
  return false;
}

static void resume_begin(void *ud, const luna_lua_task_event *ev) {
  luna_trace *tr = ud;
  luna_ns t = now_ns();
  uint64_t wake;
  if (tr->unstarted.count > 0 && take_unstarted(tr, ev->id))
    flow(tr, "f", tid_of(ev), ev->id, t);
  if (tr->woken.count > 0 && (wake = take_woken(tr, ev->id)) != 0)
    flow_of(tr, "wake", "f", tid_of(ev), wake, t);
  if (!grow(tr, (void **)&tr->stack, &tr->cap, tr->depth, sizeof *tr->stack)) {
    tr->depth++; /* keep begin/end paired; this slice is lost */
    return;
  }
  tr->stack[tr->depth++] = (struct resume){t, ev->id};
}

static void resume_end(void *ud, const luna_lua_task_event *ev) {
  luna_trace *tr = ud;
  luna_ns end = now_ns(), begin;
  char label[32];
  cJSON *e, *args;
  if (tr->depth == 0)
    return; /* tracing began inside this resume: no begin to pair with */
  if (--tr->depth >= tr->cap)
    return; /* its begin could not be stored */
  begin = tr->stack[tr->depth].begin;
  if (ev->name == NULL)
    snprintf(label, sizeof label, "#%llu", (unsigned long long)ev->id);
  e = event(ev->name != NULL ? ev->name : label, "X", tid_of(ev));
  if (e == NULL) {
    tr->failed = true;
    return;
  }
  cJSON_AddStringToObject(e, "cat", "task");
  cJSON_AddNumberToObject(e, "ts", micros(tr, begin));
  cJSON_AddNumberToObject(e, "dur", (double)(end - begin) / 1000.0);
  args = cJSON_AddObjectToObject(e, "args");
  if (args != NULL) {
    cJSON_AddNumberToObject(args, "id", (double)ev->id);
    if (tr->loop != NULL)
      cJSON_AddNumberToObject(args, "frame", (double)luna_loop_frame_count(tr->loop));
  }
  emit(tr, e);
}

int luna__trace_attach(luna_trace *tr, lua_State *L) {
  luna_lua_observer obs = {.task_created = task_created,
                           .resume_begin = resume_begin,
                           .resume_end = resume_end,
                           .ud = tr,
                           .task_woken = task_woken};
  int rc = luna_lua_add_observer(L, &obs, &tr->observer);
  if (rc == 0) {
    tr->L = L;
    luna_lua_gc_get_stats(L, &tr->gc); /* work before the trace is not its */
    tr->callback_calls = luna_lua_callback_calls(L);
    tr->loop = luna_lua_loop(L);
  }
  return rc;
}

/* A slice on the frames track from t0 to t1. */
static void frame_slice(luna_trace *tr, const char *name, const char *cat, luna_ns t0,
                        luna_ns t1) {
  cJSON *e = event(name, "X", FRAME_TID);
  if (e == NULL) {
    tr->failed = true;
    return;
  }
  cJSON_AddStringToObject(e, "cat", cat);
  cJSON_AddNumberToObject(e, "ts", micros(tr, t0));
  cJSON_AddNumberToObject(e, "dur", (double)(t1 - t0) / 1000.0);
  emit(tr, e);
}

/* A counter event: {"name": name, "ph": "C", "args": {name: value}}. */
static void counter(luna_trace *tr, const char *name, luna_ns t, double value) {
  cJSON *e = event(name, "C", 0), *args;
  if (e == NULL) {
    tr->failed = true;
    return;
  }
  cJSON_AddNumberToObject(e, "ts", micros(tr, t));
  args = cJSON_AddObjectToObject(e, "args");
  if (args != NULL)
    cJSON_AddNumberToObject(args, name, value);
  emit(tr, e);
}

void luna__trace_frame(luna_trace *tr, uint64_t frame, size_t tasks) {
  luna_ns t = now_ns();
  cJSON *ev = event("frame", "i", 0), *args;
  if (tr->frame_end != 0)
    frame_slice(tr, "spare", "spare", tr->frame_end, t);
  tr->frame = frame;
  tr->frame_begin = t;
  if (ev == NULL) {
    tr->failed = true;
    return;
  }
  cJSON_AddStringToObject(ev, "s", "g"); /* global: a line across all tracks */
  cJSON_AddNumberToObject(ev, "ts", micros(tr, t));
  args = cJSON_AddObjectToObject(ev, "args");
  if (args != NULL)
    cJSON_AddNumberToObject(args, "frame", (double)frame);
  emit(tr, ev);
  counter(tr, "tasks", t, (double)tasks);
}

/* Instant events for the callback calls each timing's budget put off in
   the frame that ended (the growth of luna_loop_stats.deferred). */
static void note_deferred(luna_trace *tr, const luna_loop_stats *st, luna_ns t) {
  for (int i = 0; i < LUNA_TIMING_COUNT; i++) {
    uint64_t n = st->deferred[i] - tr->deferred[i];
    cJSON *e, *args;
    tr->deferred[i] = st->deferred[i];
    if (n == 0 || (e = event("deferred", "i", i)) == NULL)
      continue;
    cJSON_AddStringToObject(e, "cat", "budget");
    cJSON_AddStringToObject(e, "s", "t");
    cJSON_AddNumberToObject(e, "ts", micros(tr, t));
    args = cJSON_AddObjectToObject(e, "args");
    if (args != NULL)
      cJSON_AddNumberToObject(args, "callbacks", (double)n);
    emit(tr, e);
  }
}

/* The pacer's work since the last frame ended, as one slice ending at t. */
static void note_gc(luna_trace *tr, luna_ns t) {
  luna_lua_gc_stats gs;
  cJSON *e, *args;
  luna_ns spent;
  if (luna_lua_gc_get_stats(tr->L, &gs) != 0 || gs.time_ns <= tr->gc.time_ns)
    return;
  spent = gs.time_ns - tr->gc.time_ns;
  if ((e = event("gc", "X", GC_TID)) != NULL) {
    cJSON_AddStringToObject(e, "cat", "gc");
    cJSON_AddNumberToObject(e, "ts", micros(tr, t - spent));
    cJSON_AddNumberToObject(e, "dur", (double)spent / 1000.0);
    args = cJSON_AddObjectToObject(e, "args");
    if (args != NULL) {
      cJSON_AddNumberToObject(args, "steps", (double)(gs.steps - tr->gc.steps));
      cJSON_AddNumberToObject(args, "full_collections",
                              (double)(gs.full_collections - tr->gc.full_collections));
    }
    emit(tr, e);
  } else {
    tr->failed = true;
  }
  tr->gc = gs;
}

void luna__trace_frame_end(luna_trace *tr) {
  luna_ns t = now_ns();
  luna_loop_stats st;
  char name[40];
  if (tr->frame_begin == 0)
    return; /* no frame began since tracing did */
  snprintf(name, sizeof name, "frame %llu", (unsigned long long)tr->frame);
  frame_slice(tr, name, "frame", tr->frame_begin, t);
  tr->frame_begin = 0;
  tr->frame_end = t;
  luna_loop_get_stats(tr->loop, &st);
  note_deferred(tr, &st, t);
  if (tr->L != NULL)
    note_gc(tr, t);
  if (tr->L != NULL)
    counter(tr, "heap", t,
            (double)lua_gc(tr->L, LUA_GCCOUNT, 0) * 1024 + lua_gc(tr->L, LUA_GCCOUNTB, 0));
  if (tr->L != NULL) {
    uint64_t calls = luna_lua_callback_calls(tr->L);
    counter(tr, "callbacks", t, (double)luna_lua_callback_count(tr->L));
    counter(tr, "callbacks_run", t, (double)(calls - tr->callback_calls));
    tr->callback_calls = calls;
  }
}

bool luna__trace_close(luna_trace *tr) {
  bool ok;
  if (tr == NULL)
    return true;
  if (tr->L != NULL)
    luna_lua_remove_observer(tr->L, tr->observer);
  fputs("\n]\n", tr->f);
  ok = !tr->failed && !ferror(tr->f);
  if (fclose(tr->f) != 0)
    ok = false;
  if (!ok)
    fprintf(stderr, LUNA_PROGNAME ": writing the trace %s failed\n", tr->path);
  free(tr->stack);
  free(tr->unstarted.id);
  free(tr->woken.a);
  free(tr->path);
  free(tr);
  return ok;
}
