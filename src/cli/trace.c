/*
** trace.c: `--trace FILE` for run and repl. Writes a Chrome trace event file
** (the JSON array format, which Perfetto and chrome://tracing open):
**   - metadata naming the process and one track (tid) per timing, tid =
**     the timing's value, plus tid 16 for resumes outside any run (the
**     main chunk and REPL input, started by the host);
**   - one complete event ("ph": "X") per task resume, named after the task
**     (t.name, or #id), with ts/dur in microseconds on CLOCK_MONOTONIC from
**     the moment the trace began;
**   - per frame, a global instant event "frame" and a counter "tasks".
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

#include "cli.h"
#include "lunaloop_lua.h"

/* The tid of resumes that happen outside any timing's run. */
#define HOST_TID LUNA_TIMING_COUNT
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
  /* Begin times of the resumes in progress: resumes nest (a task that
     spawns another runs it inside its own resume) and pair up. */
  luna_ns *stack;
  size_t depth, cap;
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
  for (int t = 0; t <= HOST_TID; t++) {
    const char *name = t < HOST_TID ? luna_timing_name(t) : "host (outside any timing)";
    metadata(tr, "thread_name", t, "name", name, 0);
    metadata(tr, "thread_sort_index", t, "sort_index", NULL, t);
  }
  return tr;
}

const char *luna__trace_path(const luna_trace *tr) {
  return tr->path;
}

static void resume_begin(void *ud, const luna_lua_task_event *ev) {
  luna_trace *tr = ud;
  (void)ev;
  if (tr->depth == tr->cap) {
    size_t cap = tr->cap ? tr->cap * 2 : 16;
    luna_ns *s = realloc(tr->stack, cap * sizeof *s);
    if (s == NULL) {
      tr->failed = true;
      tr->depth++; /* keep begin/end paired; this slice is lost */
      return;
    }
    tr->stack = s;
    tr->cap = cap;
  }
  tr->stack[tr->depth++] = now_ns();
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
  begin = tr->stack[tr->depth];
  if (ev->name == NULL)
    snprintf(label, sizeof label, "#%llu", (unsigned long long)ev->id);
  e = event(ev->name != NULL ? ev->name : label, "X",
            ev->timing >= 0 ? ev->timing : HOST_TID);
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

void luna__trace_observer(luna_trace *tr, lua_State *L, luna_lua_observer *obs) {
  tr->loop = luna_lua_loop(L);
  obs->task_created = NULL;
  obs->resume_begin = resume_begin;
  obs->resume_end = resume_end;
  obs->ud = tr;
}

int luna__trace_attach(luna_trace *tr, lua_State *L) {
  luna_lua_observer obs;
  luna__trace_observer(tr, L, &obs);
  return luna_lua_set_observer(L, &obs);
}

void luna__trace_detach(lua_State *L) {
  luna_lua_set_observer(L, NULL);
}

void luna__trace_frame(luna_trace *tr, uint64_t frame, size_t tasks) {
  luna_ns t = now_ns();
  cJSON *ev = event("frame", "i", 0), *args;
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
  ev = event("tasks", "C", 0);
  if (ev == NULL) {
    tr->failed = true;
    return;
  }
  cJSON_AddNumberToObject(ev, "ts", micros(tr, t));
  args = cJSON_AddObjectToObject(ev, "args");
  if (args != NULL)
    cJSON_AddNumberToObject(args, "tasks", (double)tasks);
  emit(tr, ev);
}

bool luna__trace_close(luna_trace *tr) {
  bool ok;
  if (tr == NULL)
    return true;
  fputs("\n]\n", tr->f);
  ok = !tr->failed && !ferror(tr->f);
  if (fclose(tr->f) != 0)
    ok = false;
  if (!ok)
    fprintf(stderr, LUNA_PROGNAME ": writing the trace %s failed\n", tr->path);
  free(tr->stack);
  free(tr->path);
  free(tr);
  return ok;
}
