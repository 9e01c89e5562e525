/*
** test_group.c: groups from the host's side (luna_lua_group_*, the pattern
** of docs/embedding.md: a game object owns a group and cancels it from its
** destroy path), a group of one state refused by another, a group whose
** loop was freed first, and a reset of the loop with groups in use. Each
** test ends with nothing leaked (ASan checks the heap).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <lauxlib.h>
#include <lualib.h>

#include "lunaloop.h"
#include "lunaloop_lua.h"
#include "state_fixture.h"

/* The host makes a group, spawns a script function into it, pauses and
   slows it, and cancels it from a destroy path outside any task: the
   member's to-be-closed variable runs in that call, its callback is gone,
   and the group refuses new work after. */
static void a_host_owned_group_from_creation_to_destroy(void **state) {
  luna_loop *loop;
  lua_State *L;
  luna_lua_group *g;
  size_t n = 99;
  int i;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  run(L, "closed = 0; woke = 0; ticks = 0\n"
         "function brain(g)\n"
         "  local c <close> = setmetatable({}, {__close = function() closed = closed + 1 end})\n"
         "  g:on(function() ticks = ticks + 1 end)\n"
         "  while true do g:delay(0.1); woke = woke + 1 end\n"
         "end\n");
  g = luna_lua_group_new(L, "enemy", NULL);
  assert_non_null(g);
  lua_getglobal(L, "brain");
  assert_int_equal(luna_lua_group_push(L, g), 0);
  assert_int_equal(luna_lua_group_spawn(L, g, 1, "brain"), 0);
  assert_int_equal(lua_type(L, -1), LUA_TTHREAD);
  lua_pop(L, 1);
  assert_int_equal(lua_gettop(L), 0);
  for (i = 0; i < 3; i++)
    assert_int_equal(luna_loop_frame(loop, 0.1), 0);
  assert_int_equal(global_int(L, "woke"), 3);
  assert_int_equal(global_int(L, "ticks"), 3);
  assert_int_equal(luna_lua_group_set_paused(L, g, true), 0);
  for (i = 0; i < 3; i++)
    assert_int_equal(luna_loop_frame(loop, 0.1), 0);
  assert_int_equal(global_int(L, "woke"), 3);
  assert_int_equal(global_int(L, "ticks"), 3);
  assert_int_equal(luna_lua_group_set_paused(L, g, false), 0);
  assert_int_equal(luna_lua_group_set_time_scale(L, g, 0.5), 0);
  assert_int_equal(luna_lua_group_set_time_scale(L, g, -1), LUNA_EINVAL);
  for (i = 0; i < 4; i++)
    assert_int_equal(luna_loop_frame(loop, 0.1), 0);
  assert_int_equal(global_int(L, "woke"), 5);
  assert_false(luna_lua_group_cancelled(L, g));
  assert_int_equal(luna_lua_group_cancel(L, g, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(global_int(L, "closed"), 1);
  assert_true(luna_lua_group_cancelled(L, g));
  assert_int_equal(luna_lua_task_count(L), 0);
  assert_int_equal(luna_lua_callback_count(L), 0);
  assert_int_equal(luna_lua_group_set_paused(L, g, true), LUNA_ESTATE);
  lua_getglobal(L, "brain");
  assert_int_equal(luna_lua_group_spawn(L, g, 0, NULL), LUNA_ESTATE);
  lua_pop(L, 1);
  assert_int_equal(luna_lua_group_cancel(L, g, &n), 0);
  assert_int_equal(n, 0);
  luna_lua_group_release(L, g);
  assert_int_equal(lua_gettop(L), 0);
  lua_close(L);
  luna_loop_free(loop);
}

/* A group belongs to the state that made it: every function refuses it
   in another state, and nothing is pushed or changed. */
static void a_group_of_another_state_is_refused(void **state) {
  luna_loop *loop;
  lua_State *a, *b;
  luna_lua_group *g, *child;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  a = new_task_state(loop);
  b = new_task_state(loop);
  g = luna_lua_group_new(a, NULL, NULL);
  assert_non_null(g);
  assert_int_equal(luna_lua_group_push(b, g), LUNA_EINVAL);
  assert_int_equal(lua_gettop(b), 0);
  assert_int_equal(luna_lua_group_set_paused(b, g, true), LUNA_EINVAL);
  assert_int_equal(luna_lua_group_set_time_scale(b, g, 2), LUNA_EINVAL);
  assert_int_equal(luna_lua_group_cancel(b, g, NULL), LUNA_EINVAL);
  lua_pushcfunction(b, luaopen_base);
  assert_int_equal(luna_lua_group_spawn(b, g, 0, NULL), LUNA_EINVAL);
  lua_pop(b, 1);
  assert_null(luna_lua_group_new(b, "child", g));
  assert_true(luna_lua_group_cancelled(b, g));
  luna_lua_group_release(b, g); /* ignored */
  assert_false(luna_lua_group_cancelled(a, g));
  child = luna_lua_group_new(a, "child", g);
  assert_non_null(child);
  assert_int_equal(luna_lua_group_set_paused(a, g, true), 0);
  assert_int_equal(luna_lua_group_push(a, child), 0);
  lua_setglobal(a, "child");
  run(a, "assert(child:paused() and child.name == 'child')");
  luna_lua_group_release(a, child);
  luna_lua_group_release(a, g);
  lua_close(b);
  lua_close(a);
  luna_loop_free(loop);
}

/* The loop freed before the state: the groups are closed with it, their
   members cancelled, and the state still closes cleanly. A reset cancels
   the members and the groups stay usable. */
static void loop_freed_or_reset_under_groups(void **state) {
  luna_loop *loop;
  lua_State *L;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  run(L, "g = task.group{name = 'g'}\n"
         "g:defer(function() g:delay(5) end)\n"
         "g:spawn(function() g:delay(5) end)\n"
         "g:every(0.1, function() end)\n");
  assert_int_equal(luna_loop_frame(loop, 0.1), 0);
  assert_int_equal(luna_loop_reset(loop), 0);
  assert_int_equal(luna_lua_task_count(L), 0);
  run(L, "n = 0; g:spawn(function() g:delay(0.1); n = 1 end)");
  assert_int_equal(luna_loop_frame(loop, 0.1), 0);
  assert_int_equal(global_int(L, "n"), 1);
  run(L, "g:spawn(function() g:delay(5) end); g:defer(function() end)");
  luna_loop_free(loop);
  run(L, "assert(g:cancelled()); assert(not pcall(g.spawn, g, print))");
  lua_close(L);
}

/* A member calls into the host, which destroys the member's own object:
   the other members are cancelled in the call, the caller unwinds at its
   next await (its cleanup runs then). */
static luna_lua_group *self_group;
static int l_destroy(lua_State *L) {
  size_t n = 0;
  assert_int_equal(luna_lua_group_cancel(L, self_group, &n), 0);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static void a_member_destroying_its_own_object_from_c(void **state) {
  luna_loop *loop;
  lua_State *L;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  lua_register(L, "destroy", l_destroy);
  self_group = luna_lua_group_new(L, "self", NULL);
  assert_non_null(self_group);
  assert_int_equal(luna_lua_group_push(L, self_group), 0);
  lua_setglobal(L, "g");
  run(L, "log = {}\n"
         "g:spawn(function()\n"
         "  local c <close> = setmetatable({}, {__close = function() log[#log + 1] = 'other' end})\n"
         "  g:delay(9)\n"
         "end)\n"
         "boss = g:spawn(function()\n"
         "  local c <close> = setmetatable({}, {__close = function() log[#log + 1] = 'boss' end})\n"
         "  g:delay(0.1)\n"
         "  local n = destroy()\n"
         "  log[#log + 1] = 'destroy returned ' .. n\n"
         "  task.yield()\n"
         "  log[#log + 1] = 'never'\n"
         "end)\n");
  assert_int_equal(luna_loop_frame(loop, 0.1), 0);
  run(L, "assert(table.concat(log, ',') == 'other,destroy returned 2,boss', table.concat(log, ','))\n"
         "assert(boss:status() == 'cancelled')");
  assert_int_equal(luna_lua_task_count(L), 0);
  luna_lua_group_release(L, self_group);
  lua_close(L);
  luna_loop_free(loop);
}

/* The member that destroyed its own object from C goes on to its next
   await, and that await is one of its group's (what a game object's
   script mostly waits on): it unwinds there with the cancellation error,
   as lunaloop_lua.h promises, instead of failing with "g:delay: the group
   is cancelled" (which was reported, though the task ended cancelled). */
static void a_member_destroying_its_own_object_unwinds_at_a_group_await(void **state) {
  luna_loop *loop;
  lua_State *L;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  lua_register(L, "destroy", l_destroy);
  self_group = luna_lua_group_new(L, "self", NULL);
  assert_non_null(self_group);
  assert_int_equal(luna_lua_group_push(L, self_group), 0);
  lua_setglobal(L, "g");
  run(L, "log = {}\n"
         "boss = g:spawn(function()\n"
         "  local c <close> = setmetatable({}, {__close = function(_, e)\n"
         "    log[#log + 1] = 'boss ' .. tostring(task.is_cancelled(e)) end})\n"
         "  g:delay(0.1)\n"
         "  log[#log + 1] = 'destroy returned ' .. destroy()\n"
         "  g:delay(0.1)\n"
         "  log[#log + 1] = 'never'\n"
         "end)\n");
  assert_int_equal(luna_loop_frame(loop, 0.1), 0);
  run(L, "assert(table.concat(log, ',') == 'destroy returned 1,boss true', table.concat(log, ','))\n"
         "assert(boss:status() == 'cancelled')");
  assert_int_equal(luna_lua_error_count(L), 0);
  assert_int_equal(luna_lua_task_count(L), 0);
  luna_lua_group_release(L, self_group);
  lua_close(L);
  luna_loop_free(loop);
}

/* lua_close with members still waiting on their groups' clocks, deferred
   starts and callbacks of groups, and a group the host still holds: every
   task is cancelled before any group's memory goes (ASan checks it). */
static void closing_the_state_with_groups_in_use(void **state) {
  luna_loop *loop;
  lua_State *L;
  luna_lua_group *held;
  (void)state;
  assert_int_equal(luna_loop_new(NULL, &loop), 0);
  L = new_task_state(loop);
  held = luna_lua_group_new(L, "held", NULL);
  assert_non_null(held);
  assert_int_equal(luna_lua_group_push(L, held), 0);
  lua_setglobal(L, "held");
  run(L, "closed = 0\n"
         "local outer = task.group()\n"
         "local inner = task.group{parent = outer}\n"
         "for _, g in ipairs{outer, inner, held} do\n"
         "  g:spawn(function()\n"
         "    local c <close> = setmetatable({}, {__close = function() closed = closed + 1 end})\n"
         "    g:delay(100)\n"
         "  end)\n"
         "  g:defer(function() g:delay(100) end)\n"
         "  g:every(1, function() end)\n"
         "  g:on(function() end)\n"
         "  task.ungrouped(function() g:delay(100) end)\n"
         "end\n"
         "outer, inner = nil, nil\n");
  assert_int_equal(luna_loop_frame(loop, 0.1), 0);
  lua_close(L);
  luna_loop_free(loop);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_host_owned_group_from_creation_to_destroy),
      cmocka_unit_test(a_group_of_another_state_is_refused),
      cmocka_unit_test(loop_freed_or_reset_under_groups),
      cmocka_unit_test(a_member_destroying_its_own_object_from_c),
      cmocka_unit_test(a_member_destroying_its_own_object_unwinds_at_a_group_await),
      cmocka_unit_test(closing_the_state_with_groups_in_use),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
