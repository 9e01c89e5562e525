/*
** test_threads.c: loops and Lua states on several threads, and a task that
** drives another loop from inside its own resume. The binding keeps "what
** this thread is running" (the task an await belongs to, the Lua thread
** luna_lua_interrupt hooks) per OS thread; two loops driven at once by two
** threads must not share it (the TSan stage of scripts/test runs these:
** they are labelled "thread"), and a nested run of another state must
** leave every await to its own task.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "embed_util.h"

/* 200 tasks, each awaiting 60 times by turns a yield, a next_frame and a
   short delay; `done` counts those that finished, `order` is false if a
   task ever resumed out of its own sequence. */
static const char churn_script[] =
    "done, bad = 0, 0\n"
    "for i = 1, 200 do\n"
    "  task.spawn(function()\n"
    "    local me = task.current()\n"
    "    for k = 1, 60 do\n"
    "      if k % 3 == 0 then task.delay(0.01)\n"
    "      elseif k % 3 == 1 then task.yield()\n"
    "      else task.next_frame() end\n"
    "      if task.current() ~= me then bad = bad + 1 end\n"
    "    end\n"
    "    done = done + 1\n"
    "  end)\n"
    "end\n";

typedef struct worker {
  luna_loop *loop;
  lua_State *L;
  int frames; /* frames run until every task finished */
  int rc;     /* the first failing luna_loop_frame code, or 0 */
} worker;

static void *drive(void *arg) {
  worker *w = arg;
  while (w->frames < 10000 && luna_lua_task_count(w->L) > 0) {
    if ((w->rc = luna_loop_frame(w->loop, 1.0 / 60.0)) != 0)
      break;
    w->frames++;
  }
  return NULL;
}

/* Two loops, each with its own state, driven at the same time by two
   threads: every task finishes, in its own order, on its own loop. */
static void two_loops_on_two_threads_keep_their_tasks_apart(void **state) {
  worker w[2];
  pthread_t th[2];
  int i;
  (void)state;
  for (i = 0; i < 2; i++) {
    memset(&w[i], 0, sizeof w[i]);
    assert_int_equal(luna_loop_new(NULL, &w[i].loop), 0);
    w[i].L = new_state(w[i].loop);
    run(w[i].L, churn_script);
  }
  for (i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&th[i], NULL, drive, &w[i]), 0);
  for (i = 0; i < 2; i++)
    assert_int_equal(pthread_join(th[i], NULL), 0);
  for (i = 0; i < 2; i++) {
    assert_int_equal(w[i].rc, 0);
    assert_int_equal(global_int(w[i].L, "done"), 200);
    assert_int_equal(global_int(w[i].L, "bad"), 0);
    assert_int_equal(luna_lua_task_count(w[i].L), 0);
    lua_close(w[i].L);
    luna_loop_free(w[i].loop);
  }
}

/* drive_other(n): runs n frames of the other loop, from inside a task. */
static luna_loop *other_loop;

static int l_drive_other(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  while (n-- > 0)
    if (luna_loop_frame(other_loop, 0.05) != 0)
      return luaL_error(L, "luna_loop_frame failed");
  return 0;
}

/* A task of state A runs frames of loop B (whose tasks resume and await in
   between) and then awaits itself: each await must find its own task, in
   both states, before and after the nested resumes. */
static void a_task_driving_another_loop_keeps_its_own_awaits(void **state) {
  luna_loop *la, *lb;
  lua_State *A, *B;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &la), 0);
  assert_int_equal(luna_loop_new(NULL, &lb), 0);
  other_loop = lb;
  A = new_state(la);
  B = new_state(lb);
  lua_pushcfunction(A, l_drive_other);
  lua_setglobal(A, "drive_other");
  run(B, "ticks = 0\n"
         "for i = 1, 3 do task.spawn(function()\n"
         "  while true do task.yield(); ticks = ticks + 1 end\n"
         "end) end\n");
  run(A, "log = {}\n"
         "task.spawn(function()\n"
         "  for i = 1, 4 do\n"
         "    drive_other(2)\n"
         "    task.yield()\n"
         "    log[#log + 1] = tostring(task.frame())\n"
         "  end\n"
         "  local ok, err = pcall(task.yield, 'Nope')\n"
         "  log[#log + 1] = ok and 'no error' or 'refused'\n"
         "end)\n");
  while (luna_lua_task_count(A) > 0)
    assert_int_equal(luna_loop_frame(la, 0.05), 0);
  run(A, "result = table.concat(log, ' ')");
  expect_global(A, "result", "1 2 3 4 refused");
  assert_int_equal(global_int(B, "ticks"), 3 * 8); /* 8 frames of B, 3 tasks */
  run(B, "for _, t in ipairs(task.list()) do t:cancel() end");
  lua_close(A);
  lua_close(B);
  luna_loop_free(la);
  luna_loop_free(lb);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(two_loops_on_two_threads_keep_their_tasks_apart),
      cmocka_unit_test(a_task_driving_another_loop_keeps_its_own_awaits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
