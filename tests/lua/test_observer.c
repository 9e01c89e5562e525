/*
** test_observer.c: luna_lua_add_observer, luna_lua_remove_observer,
** luna_lua_set_observer and luna_lua_resume_counts, the
** public hooks that `--trace` and other tracers use: every resume is seen
** with its task's id, name and timing, nested resumes pair up, removing the
** observer stops the calls, and the counts match task.stats().
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <lauxlib.h>
#include <lualib.h>

#include "binding.h"
#include "lunaloop.h"
#include "lunaloop_lua.h"
#include "state_fixture.h"

/* What the observer saw, as text: "+name@timing" for a begin, "-name" for
   an end, "*id" for a creation; names are "#id" when unnamed. */
static char seen[4096];

static void note(const char *fmt, const luna_lua_task_event *ev, char sign) {
  char name[64], item[96];
  if (ev->name != NULL)
    snprintf(name, sizeof name, "%s", ev->name);
  else
    snprintf(name, sizeof name, "#%llu", (unsigned long long)ev->id);
  snprintf(item, sizeof item, fmt, sign, name, ev->timing);
  strncat(seen, item, sizeof seen - strlen(seen) - 1);
}

static void on_created(void *ud, const luna_lua_task_event *ev) {
  (void)ud;
  char item[32];
  snprintf(item, sizeof item, "*%llu ", (unsigned long long)ev->id);
  strncat(seen, item, sizeof seen - strlen(seen) - 1);
}
static void on_begin(void *ud, const luna_lua_task_event *ev) {
  (*(int *)ud)++;
  note("%c%s@%d ", ev, '+');
}
static void on_end(void *ud, const luna_lua_task_event *ev) {
  (void)ud;
  note("%c%s ", ev, '-');
}

static void observer_sees_every_resume_with_its_name_and_timing(void **state) {
  luna_loop *loop;
  lua_State *L;
  int begins = 0;
  luna_lua_observer obs = {on_created, on_begin, on_end, &begins, NULL};
  (void)state;
  seen[0] = '\0';
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  assert_int_equal(luna_lua_set_observer(L, &obs), 0);
  /* a spawns b inside its first resume: b's resume nests in a's */
  run(L, "a = task.defer(function()\n"
         "  local b = task.spawn(function() task.yield('LastUpdate') end)\n"
         "  task.yield('PreLateUpdate')\n"
         "end)\n"
         "a.name = 'a'\n");
  assert_int_equal(luna_loop_frame(loop, 0.01), 0);
  assert_string_equal(seen, "*1 +a@8 *2 +#2@8 -#2 -a +#2@9 -#2 +a@10 -a ");
  assert_int_equal(begins, 4);

  uint64_t counts[LUNA_TIMING_COUNT + 1];
  assert_int_equal(luna_lua_resume_counts(L, counts), 1);
  assert_int_equal(counts[LUNA_UPDATE], 2);
  assert_int_equal(counts[LUNA_LAST_UPDATE], 1);
  assert_int_equal(counts[LUNA_PRE_LATE_UPDATE], 1);
  assert_int_equal(counts[LUNA_TIMING_COUNT], 0);
  assert_int_equal(luna_lua_resume_counts(L, NULL), 0);
  assert_int_equal(luna_lua_resume_counts(NULL, counts), 0);

  /* a host spawn resumes outside any run: timing -1 */
  seen[0] = '\0';
  run(L, "f = function() end");
  lua_getglobal(L, "f");
  assert_int_equal(luna_lua_spawn(L, 0, "host"), 0);
  lua_pop(L, 1);
  assert_string_equal(seen, "*3 +host@-1 -host ");

  /* removed: no more calls */
  assert_int_equal(luna_lua_set_observer(L, NULL), 0);
  seen[0] = '\0';
  run(L, "task.spawn(function() end)");
  assert_string_equal(seen, "");
  lua_close(L);
  luna_loop_free(loop);
}

static void set_observer_needs_a_binding(void **state) {
  lua_State *L = luaL_newstate();
  luna_lua_observer obs = {0};
  uint64_t counts[LUNA_TIMING_COUNT + 1];
  (void)state;
  assert_int_equal(luna_lua_set_observer(L, &obs), LUNA_EINVAL);
  assert_int_equal(luna_lua_resume_counts(L, counts), 0);
  assert_int_equal(counts[LUNA_UPDATE], 0);
  lua_close(L);
}

static void count_internal_resume(void *ud, luna__task *t, bool begin) {
  (void)t;
  if (begin)
    (*(int *)ud)++;
}

/* Regression: the binding had one observer slot, so installing a tracer on
   a mod's state replaced the mod's instruction budget. Each owner now has
   its own slot and both see every resume. */
static void public_and_internal_observers_see_the_same_resumes(void **state) {
  luna_loop *loop;
  lua_State *L;
  int public_begins = 0, internal_begins = 0;
  luna_lua_observer obs = {NULL, on_begin, on_end, &public_begins, NULL};
  luna__observer internal = {NULL, count_internal_resume, &internal_begins, NULL, NULL};
  (void)state;
  seen[0] = '\0';
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  assert_true(luna__set_observer(L, LUNA__OBSERVER_BUDGET, &internal));
  assert_int_equal(luna_lua_set_observer(L, &obs), 0);
  run(L, "for i = 1, 3 do task.spawn(function() task.yield(); task.yield() end) end");
  assert_int_equal(luna_loop_frame(loop, 0.01), 0);
  assert_int_equal(luna_loop_frame(loop, 0.01), 0);
  assert_int_equal(public_begins, 9);
  assert_int_equal(internal_begins, 9);
  /* removing the public one leaves the internal one in place */
  assert_int_equal(luna_lua_set_observer(L, NULL), 0);
  run(L, "task.spawn(function() end)");
  assert_int_equal(public_begins, 9);
  assert_int_equal(internal_begins, 10);
  lua_close(L);
  luna_loop_free(loop);
}

/* Counts the begins of one observer; the first one removes the observer
   whose id `victim` points at (its own, or another's) from its callback. */
typedef struct counter {
  lua_State *L;
  int begins, ends;
  uint32_t *victim;
} counter;
static void count_begin(void *ud, const luna_lua_task_event *ev) {
  counter *c = ud;
  (void)ev;
  if (c->begins++ == 0 && c->victim != NULL)
    assert_int_equal(luna_lua_remove_observer(c->L, *c->victim), 0);
}
static void count_end(void *ud, const luna_lua_task_event *ev) {
  (void)ev;
  ((counter *)ud)->ends++;
}

/* The binding had one public slot, so a profiler and the tracer replaced
   each other: now any number are added and removed by id, each sees every
   resume beside the budget's internal one, luna_lua_set_observer replaces
   only the observer it installed, and a callback may remove an observer
   (its own included) in the middle of a walk. */
static void observers_are_added_and_removed_by_id_independently(void **state) {
  luna_loop *loop;
  lua_State *L;
  int internal_begins = 0;
  luna__observer internal = {NULL, count_internal_resume, &internal_begins, NULL, NULL};
  counter profiler = {0}, tracer = {0}, legacy = {0}, legacy2 = {0}, selfish = {0};
  luna_lua_observer p = {NULL, count_begin, count_end, &profiler, NULL};
  luna_lua_observer t = {NULL, count_begin, count_end, &tracer, NULL};
  luna_lua_observer l = {NULL, count_begin, count_end, &legacy, NULL};
  luna_lua_observer l2 = {NULL, count_begin, count_end, &legacy2, NULL};
  luna_lua_observer s = {NULL, count_begin, count_end, &selfish, NULL};
  uint32_t pid = 0, tid = 0, sid = 0;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  assert_true(luna__set_observer(L, LUNA__OBSERVER_BUDGET, &internal));
  assert_int_equal(luna_lua_add_observer(L, &p, &pid), 0);
  assert_int_equal(luna_lua_add_observer(L, &t, &tid), 0);
  assert_int_equal(luna_lua_set_observer(L, &l), 0);
  assert_true(pid != 0 && tid != 0 && pid != tid);
  run(L, "for i = 1, 3 do task.spawn(function() task.yield() end) end");
  assert_int_equal(luna_loop_frame(loop, 0.01), 0);
  assert_int_equal(internal_begins, 6);
  assert_int_equal(profiler.begins, 6);
  assert_int_equal(tracer.begins, 6);
  assert_int_equal(legacy.begins, 6);
  assert_int_equal(profiler.ends, 6);

  /* set_observer replaces its own only; remove takes one id once */
  assert_int_equal(luna_lua_set_observer(L, &l2), 0);
  assert_int_equal(luna_lua_remove_observer(L, tid), 0);
  assert_int_equal(luna_lua_remove_observer(L, tid), LUNA_ENOENT);
  assert_int_equal(luna_lua_remove_observer(L, 0), LUNA_ENOENT);
  run(L, "task.spawn(function() end)");
  assert_int_equal(profiler.begins, 7);
  assert_int_equal(tracer.begins, 6);
  assert_int_equal(legacy.begins, 6);
  assert_int_equal(legacy2.begins, 1);
  assert_int_equal(internal_begins, 7);

  /* an observer that removes itself at its first begin: that call is the
     last it gets, and the others of the walk are still called */
  selfish.L = L;
  selfish.victim = &sid;
  assert_int_equal(luna_lua_add_observer(L, &s, &sid), 0);
  run(L, "task.spawn(function() end) task.spawn(function() end)");
  assert_int_equal(selfish.begins, 1);
  assert_int_equal(selfish.ends, 0);
  assert_int_equal(profiler.begins, 9);
  assert_int_equal(legacy2.begins, 3);

  /* removing everything leaves the budget's observer alone */
  assert_int_equal(luna_lua_remove_observer(L, pid), 0);
  assert_int_equal(luna_lua_set_observer(L, NULL), 0);
  run(L, "task.spawn(function() end)");
  assert_int_equal(profiler.begins, 9);
  assert_int_equal(legacy2.begins, 3);
  assert_int_equal(internal_begins, 10);
  assert_int_equal(luna_lua_add_observer(L, NULL, &pid), LUNA_EINVAL);
  assert_int_equal(luna_lua_add_observer(L, &p, NULL), LUNA_EINVAL);
  assert_int_equal(luna_lua_add_observer(NULL, &p, &pid), LUNA_EINVAL);
  assert_int_equal(luna_lua_remove_observer(NULL, 1), LUNA_EINVAL);
  lua_close(L);
  luna_loop_free(loop);
}

/* The state closes with observers still installed: their array is freed
   with the binding (the leak check of the asan build sees it), and a
   host that removes one later gets an error, not a crash. */
static void observers_left_installed_are_freed_with_the_state(void **state) {
  luna_loop *loop;
  lua_State *L;
  counter c = {0};
  luna_lua_observer o = {NULL, count_begin, count_end, &c, NULL};
  uint32_t id;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  for (int i = 0; i < 9; i++) /* past the first growth */
    assert_int_equal(luna_lua_add_observer(L, &o, &id), 0);
  run(L, "task.spawn(function() end)");
  assert_int_equal(c.begins, 9);
  lua_close(L);
  luna_loop_free(loop);
}

static void on_woken(void *ud, const luna_lua_task_event *ev) {
  (void)ud;
  note("%c%s@%d ", ev, '!');
}

static int push_42(lua_State *L, void *data) {
  (void)data;
  lua_pushinteger(L, 42);
  return 1;
}

/* task_woken is told where a task is woken: a Task it awaited settling
   (inside the waker's turn, before the woken task's next resume), and a
   host Promise completed on another path (outside any resume, at the
   timing whose run takes the inbox). The spawn-only and yield-only paths
   wake nothing. */
static void task_woken_sees_awaits_settle_and_promises_complete(void **state) {
  luna_loop *loop;
  lua_State *L;
  luna_promise *p;
  int begins = 0;
  luna_lua_observer obs = {.resume_begin = on_begin, .ud = &begins, .task_woken = on_woken};
  (void)state;
  seen[0] = '\0';
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  assert_int_equal(luna_lua_add_observer(L, &obs, &(uint32_t){0}), 0);
  run(L, "a = task.defer(function() task.yield() end) a.name = 'a'\n"
         "w = task.defer(function() task.await(a) end) w.name = 'w'\n");
  assert_int_equal(luna_loop_frame(loop, 0.01), 0); /* both start, a yields */
  assert_int_equal(luna_loop_frame(loop, 0.01), 0); /* a ends and wakes w */
  assert_string_equal(seen, "+a@8 +w@8 +a@8 !w@8 +w@8 ");
  seen[0] = '\0';
  assert_int_equal(luna_lua_promise_new(L, LUNA_UPDATE, &p), 0);
  lua_setglobal(L, "p");
  run(L, "h = task.defer(function() got = task.await(p) end) h.name = 'h'");
  assert_int_equal(luna_loop_frame(loop, 0.01), 0); /* h starts, waits */
  assert_int_equal(luna_promise_resolve(p, push_42, NULL, NULL), 0);
  assert_int_equal(luna_loop_frame(loop, 0.01), 0); /* delivered at Update */
  assert_string_equal(seen, "+h@8 !h@8 +h@8 ");
  assert_int_equal(global_int(L, "got"), 42);
  luna_promise_release(p);
  lua_close(L);
  luna_loop_free(loop);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(observer_sees_every_resume_with_its_name_and_timing),
      cmocka_unit_test(set_observer_needs_a_binding),
      cmocka_unit_test(public_and_internal_observers_see_the_same_resumes),
      cmocka_unit_test(observers_are_added_and_removed_by_id_independently),
      cmocka_unit_test(observers_left_installed_are_freed_with_the_state),
      cmocka_unit_test(task_woken_sees_awaits_settle_and_promises_complete),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
