/*
** test_gc.c: the collector paced by the frame (src/lua/gc.c). Every run
** uses a fake cost clock, as the runner's budget tests do: each read of it
** advances it by READ_NS, and every block the Lua allocator frees advances
** it by FREE_NS, so a step costs what it freed and two runs measure the
** same. The allocator also counts frees by the timing running at the
** time, which is how "no collection outside the paced timing" is seen.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <lauxlib.h>
#include <lualib.h>

#include "binding.h"
#include "lunaloop.h"
#include "lunaloop_lua.h"

#define READ_NS ((luna_ns)1000)
#define FREE_NS ((luna_ns)50)
#define US ((luna_ns)1000)
#define OUTSIDE LUNA_TIMING_COUNT /* frees outside any timing's run */

typedef struct world {
  luna_loop *loop;
  lua_State *L;
  luna_ns now;                          /* the fake cost clock */
  luna_ns free_ns;                      /* what a free costs on it */
  long frees[LUNA_TIMING_COUNT + 1];    /* by the timing running */
  size_t bytes, peak;                   /* the state's heap, by the allocator */
} world;

static luna_ns fake_read(void *ud) {
  world *w = ud;
  w->now += READ_NS;
  return w->now;
}

static void *world_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  world *w = ud;
  if (ptr != NULL)
    w->bytes -= osize;
  if (nsize == 0) {
    if (ptr != NULL) {
      int t = luna_loop_current_timing(w->loop);
      w->frees[t < 0 ? OUTSIDE : t]++;
      w->now += w->free_ns;
    }
    free(ptr);
    return NULL;
  }
  ptr = realloc(ptr, nsize);
  if (ptr != NULL) {
    w->bytes += nsize;
    if (w->bytes > w->peak)
      w->peak = w->bytes;
  }
  return ptr;
}

static void world_open(world *w) {
  memset(w, 0, sizeof *w);
  w->free_ns = FREE_NS;
  assert_int_equal(luna_loop_new(NULL, &w->loop), 0);
  assert_int_equal(luna_loop_set_cost_source(w->loop, fake_read, w), 0);
  w->L = lua_newstate(world_alloc, w);
  luaL_openlibs(w->L);
  assert_int_equal(luna_lua_attach(w->L, w->loop), 0);
  luaL_requiref(w->L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(w->L, "task");
}

/* Another state on w's loop, allocating through w too (its frees cost
   time on the fake clock as well). */
static lua_State *second_state(world *w) {
  lua_State *L = lua_newstate(world_alloc, w);
  luaL_openlibs(L);
  assert_int_equal(luna_lua_attach(L, w->loop), 0);
  luaL_requiref(L, "lunaloop", luaopen_lunaloop, 1);
  lua_setglobal(L, "task");
  return L;
}

static void world_close(world *w) {
  lua_close(w->L);
  luna_loop_free(w->loop);
}

static void run(lua_State *L, const char *code) {
  if (luaL_dostring(L, code) != LUA_OK)
    fail_msg("lua: %s", lua_tostring(L, -1));
}

/* A task that makes `n` small tables of garbage at every Update and keeps
   one table of `keep` live ones (replaced one by one), so the heap has a
   live part the collector must mark and garbage it must sweep. Tables of
   a fixed shape are made by constructors: nothing is resized, so every
   free is the collector's. */
static void start_churn(lua_State *L, int n, int keep) {
  char code[512];
  snprintf(code, sizeof code,
           "local n, keep = %d, %d\n"
           "local live = {}\n"
           "for i = 1, keep do live[i] = {i, i} end\n"
           "task.spawn(function()\n"
           "  local k = 0\n"
           "  while true do\n"
           "    for i = 1, n do local g = {i, k} end\n"
           "    k = k %% keep + 1; live[k] = {k, k}\n"
           "    task.yield('Update')\n"
           "  end\n"
           "end)",
           n, keep);
  run(L, code);
}

static luna_lua_gc_stats stats_of(lua_State *L) {
  luna_lua_gc_stats st;
  assert_int_equal(luna_lua_gc_get_stats(L, &st), 0);
  return st;
}

static void frames(world *w, int n) {
  int i;
  for (i = 0; i < n; i++)
    assert_int_equal(luna_loop_frame(w->loop, 1.0 / 60), 0);
}

/* Paces w's state with `o`, runs `n` frames and checks that every block
   freed during them was freed at the paced timing; returns how many. */
static long frees_only_at_the_paced_timing(world *w, const luna_lua_gc_options *o, int n) {
  long before[LUNA_TIMING_COUNT + 1];
  int t, paced = o->timing != 0 ? (int)o->timing : LUNA_LAST_TIME_UPDATE;
  assert_int_equal(luna_lua_gc_set(w->L, o), 0);
  memcpy(before, w->frees, sizeof before);
  frames(w, n);
  for (t = 0; t <= LUNA_TIMING_COUNT; t++)
    if (t != paced)
      assert_int_equal(w->frees[t] - before[t], 0);
  return w->frees[paced] - before[paced];
}

/* A frame's paced work never exceeds its budget by more than one basic
   step, and over 6,000 frames of heavy allocation with the automatic
   collector stopped, cycles keep completing and the heap stays below the
   ceiling without the ceiling's full collection ever running. */
static void paced_frames_stay_in_budget_and_cycles_complete(void **state) {
  world w;
  luna_lua_gc_options o = {0};
  luna_lua_gc_stats before, after;
  int f;
  (void)state;
  world_open(&w);
  start_churn(w.L, 400, 20000); /* a cycle takes several frames */
  o.budget = 20 * US;
  o.stop_auto = true;
  o.ceiling = 8u << 20; /* the heap peaks at about twice its live 2 MB */
  assert_int_equal(luna_lua_gc_set(w.L, &o), 0);
  for (f = 0; f < 6000; f++) {
    before = stats_of(w.L);
    frames(&w, 1);
    after = stats_of(w.L);
    assert_true(after.time_ns - before.time_ns <= o.budget + after.longest_step_ns);
  }
  after = stats_of(w.L);
  assert_true(after.cycles >= 50); /* one about every 80 frames */
  assert_int_equal(after.full_collections, 0);
  assert_int_equal(after.ceiling_hits, 0);
  assert_true(w.peak < o.ceiling);
  world_close(&w);
}

/* With stop_auto, a cycle begins as soon as the heap has grown by 64 KB
   since the last one ended, not once it has doubled as Lua's own pause
   would have it: waiting for that, with most of a frame's garbage made
   while the cycle ran, let the heap pass a ceiling of four times the live
   bytes before the cycle could end (W8). A state that allocates nothing
   begins no cycle. */
static void stop_auto_begins_the_next_cycle_once_the_heap_grew(void **state) {
  world w;
  luna_lua_gc_options o = {0};
  uint64_t c0;
  (void)state;
  world_open(&w);
  o.budget = 100000 * US; /* far more than a cycle of this heap takes */
  o.stop_auto = true;
  assert_int_equal(luna_lua_gc_set(w.L, &o), 0);
  frames(&w, 3);
  c0 = stats_of(w.L).cycles;
  frames(&w, 10); /* nothing allocates: no cycle */
  assert_int_equal(stats_of(w.L).cycles, c0);
  start_churn(w.L, 2000, 20000); /* 2 MB live, about 150 KB of garbage a frame */
  frames(&w, 1);
  c0 = stats_of(w.L).cycles;
  frames(&w, 10); /* one whole cycle each frame */
  assert_int_equal(stats_of(w.L).cycles, c0 + 10);
  world_close(&w);
}

/* With stop_auto, every free of the state's collector (each block the
   allocator frees while frames run) happens in the paced timing's run. */
static void stop_auto_collects_only_at_the_paced_timing(void **state) {
  world w;
  luna_lua_gc_options o = {0};
  (void)state;
  world_open(&w);
  start_churn(w.L, 300, 500);
  o.budget = 500 * US;
  o.stop_auto = true;
  o.timing = LUNA_LAST_PRE_LATE_UPDATE;
  assert_true(frees_only_at_the_paced_timing(&w, &o, 600) > 10000);
  assert_true(stats_of(w.L).cycles > 10);
  world_close(&w);
}

/* Generational mode: each paced step is one minor collection, and with
   stop_auto they run only at the paced timing. */
static void generational_minor_collections_run_only_at_the_paced_timing(void **state) {
  world w;
  luna_lua_gc_options o = {0};
  luna_lua_gc_stats st;
  (void)state;
  world_open(&w);
  start_churn(w.L, 2000, 500);
  o.budget = 2000 * US;
  o.stop_auto = true;
  o.generational = true;
  assert_true(frees_only_at_the_paced_timing(&w, &o, 300) > 10000);
  st = stats_of(w.L);
  assert_true(st.steps >= 20);
  assert_true(st.steps <= 300); /* at most one minor collection a frame */
  assert_int_equal(st.cycles, 0);
  world_close(&w);
}

/* Passing the ceiling runs exactly one full collection, counted once,
   even though the heap stays above the ceiling for many frames after. */
static void the_ceiling_runs_exactly_one_full_collection(void **state) {
  world w;
  luna_lua_gc_options o = {0};
  luna_lua_gc_stats st;
  (void)state;
  world_open(&w);
  o.budget = 1; /* one step a frame: the pacer cannot keep up */
  o.stop_auto = true;
  o.ceiling = w.bytes + (512u << 10);
  assert_int_equal(luna_lua_gc_set(w.L, &o), 0);
  run(w.L, "keep = {} for i = 1, 20000 do keep[i] = {i} end");
  frames(&w, 50);
  st = stats_of(w.L);
  assert_int_equal(st.full_collections, 1);
  assert_int_equal(st.ceiling_hits, 1);
  assert_true(st.bytes > o.ceiling); /* what it keeps is live */
  run(w.L, "keep = nil");
  frames(&w, 50);
  st = stats_of(w.L);
  assert_int_equal(st.full_collections, 1);
  world_close(&w);
}

/* A mod's collectgarbage("collect") is a request: the pacer serves it in
   slices over several frames (each within the request's slice plus one
   step), and the cycle it asked for completes. */
static void a_full_collect_request_is_served_in_slices(void **state) {
  world w;
  luna_lua_gc_stats st, prev;
  int f, busy = 0;
  (void)state;
  world_open(&w);
  /* `after` is live and newer than the garbage: Lua's sweep begins by
     freeing every dead object that is newer than the newest live one in
     one go (sweeptolive), which would make the first step the whole
     cycle. */
  run(w.L, "collectgarbage('stop') g = {} for i = 1, 200000 do g[i] = {i} end g = nil\n"
           "after = {}");
  luna__gc_request_full(luna__get_binding(w.L));
  prev = stats_of(w.L);
  for (f = 0; f < 100 && stats_of(w.L).cycles < 1; f++) {
    frames(&w, 1);
    st = stats_of(w.L);
    assert_true(st.time_ns - prev.time_ns <= 1000 * US + st.longest_step_ns);
    busy += st.steps > prev.steps;
    prev = st;
  }
  st = stats_of(w.L);
  assert_int_equal(st.cycles, 1);
  assert_int_equal(st.full_collections, 0);
  assert_true(busy >= 2);
  assert_true(st.bytes < (size_t)(4u << 20));
  frames(&w, 10);
  assert_int_equal(stats_of(w.L).cycles, 1); /* served, then nothing more */
  world_close(&w);
}

/* Requests of several states without a budget share one slice a frame,
   so a crowd of mods asking for full collections cannot stretch the frame
   by a slice each; every request is still served. */
static void full_collect_requests_of_several_states_share_one_slice(void **state) {
  world w;
  lua_State *L[3];
  luna_lua_gc_options o = {0};
  luna_lua_gc_stats all, prev;
  int i, f;
  (void)state;
  world_open(&w);
  w.free_ns = 5; /* steps well below the slice, so the slice is what counts */
  L[0] = w.L;
  L[1] = second_state(&w);
  L[2] = second_state(&w);
  o.ceiling = (size_t)1 << 30; /* paced without a budget: the pacer's small steps */
  for (i = 0; i < 3; i++) {
    assert_int_equal(luna_lua_gc_set(L[i], &o), 0);
    run(L[i], "collectgarbage('stop') g = {} for i = 1, 100000 do g[i] = {i} end g = nil\n"
              "after = {}");
    luna__gc_request_full(luna__get_binding(L[i]));
  }
  assert_int_equal(luna_lua_gc_loop_stats(w.loop, &prev), 0);
  for (f = 0; f < 200 && prev.cycles < 3; f++) {
    frames(&w, 1);
    assert_int_equal(luna_lua_gc_loop_stats(w.loop, &all), 0);
    assert_true(all.time_ns - prev.time_ns <= 1000 * US + 3 * all.longest_step_ns);
    prev = all;
  }
  assert_int_equal(prev.cycles, 3);
  lua_close(L[1]);
  lua_close(L[2]);
  world_close(&w);
}

/* Two runs of the same program make the same steps and cycles. */
static void two_runs_make_the_same_step_counts(void **state) {
  luna_lua_gc_stats st[2];
  int i;
  (void)state;
  for (i = 0; i < 2; i++) {
    world w;
    luna_lua_gc_options o = {0};
    world_open(&w);
    start_churn(w.L, 300, 1000);
    o.budget = 200 * US;
    o.stop_auto = true;
    assert_int_equal(luna_lua_gc_set(w.L, &o), 0);
    frames(&w, 500);
    st[i] = stats_of(w.L);
    world_close(&w);
  }
  assert_true(st[0].steps > 100);
  assert_int_equal(st[0].steps, st[1].steps);
  assert_int_equal(st[0].cycles, st[1].cycles);
  assert_int_equal(st[0].time_ns, st[1].time_ns);
}

/* Two states paced with the loop's settings share one budget, in
   proportion to what each allocated since the previous frame. */
static void states_on_a_loop_share_its_budget_by_allocation(void **state) {
  world w;
  lua_State *L2;
  luna_lua_gc_options o = {0};
  luna_lua_gc_stats a, b, all;
  (void)state;
  world_open(&w);
  L2 = second_state(&w);
  start_churn(w.L, 1200, 500);
  start_churn(L2, 300, 500);
  o.budget = 300 * US; /* too little for both: the split shows */
  o.stop_auto = true;
  assert_int_equal(luna_lua_gc_set_loop(w.loop, &o), 0);
  frames(&w, 300);
  a = stats_of(w.L);
  b = stats_of(L2);
  assert_true(a.time_ns > 2 * b.time_ns);
  assert_true(b.steps > 0);
  assert_int_equal(luna_lua_gc_loop_stats(w.loop, &all), 0);
  assert_int_equal(all.steps, a.steps + b.steps);
  lua_close(L2);
  world_close(&w);
}

/* Idle time is spent on steps up to the spare time given (the first step,
   of a cost not known yet, may pass it), and not once the cycle is done. */
static void idle_time_goes_to_steps_until_the_cycle_is_done(void **state) {
  world w;
  luna_lua_gc_options o = {0};
  luna_ns spent;
  (void)state;
  world_open(&w);
  o.idle = true;
  o.stop_auto = true;
  assert_int_equal(luna_lua_gc_set(w.L, &o), 0);
  run(w.L, "g = {} for i = 1, 20000 do g[i] = {i} end g = nil");
  spent = luna_lua_gc_idle(w.loop, 200 * US);
  assert_true(spent <= 200 * US + stats_of(w.L).longest_step_ns);
  assert_true(stats_of(w.L).steps > 0);
  while (stats_of(w.L).cycles == 0)
    assert_true(luna_lua_gc_idle(w.loop, 1000 * US) > 0);
  assert_true(luna_lua_gc_idle(w.loop, 1000 * US) <= 2 * READ_NS); /* nothing to do */
  world_close(&w);
}

/* Without pacing the pacer adds no runner item: resumes and timings pay
   nothing for it. */
static void a_state_without_pacing_adds_no_work_to_the_frame(void **state) {
  world w;
  luna_loop_stats ls;
  int t;
  (void)state;
  world_open(&w);
  start_churn(w.L, 10, 10);
  frames(&w, 3);
  luna_loop_get_stats(w.loop, &ls);
  for (t = 0; t < LUNA_TIMING_COUNT; t++)
    assert_int_equal(ls.items[t], 0);
  assert_int_equal(stats_of(w.L).steps, 0);
  world_close(&w);
}

/* burn(ns): advances the fake cost clock, as a frame's own work would. */
static int l_burn(lua_State *L) {
  world *w = lua_touserdata(L, lua_upvalueindex(1));
  w->now += (luna_ns)luaL_checkinteger(L, 1);
  return 0;
}

/* With a `frame` setting, the paced slice is what is left of the frame
   when LastTimeUpdate comes, at most the budget and at least a quarter of
   it: a light frame gets the whole budget, a frame with half the budget
   left gets about half, a frame already past its time a quarter; but the
   whole budget while the heap is past halfway to the ceiling. */
static void frame_setting_gives_the_slice_what_is_left_of_the_frame(void **state) {
  world w;
  luna_lua_gc_options o = {0};
  const luna_ns budget = 40 * US, frame = 4000 * US;
  /* What each frame's work costs before the paced timing, and the slice
     expected: all of it, half, the floor. */
  const luna_ns work[3] = {0, frame - budget / 2, 2 * frame};
  const luna_ns slice[3] = {budget, budget / 2, budget / 4};
  luna_ns spent[3] = {0, 0, 0};
  int f, k;
  (void)state;
  world_open(&w);
  lua_pushlightuserdata(w.L, &w);
  lua_pushcclosure(w.L, l_burn, 1);
  lua_setglobal(w.L, "burn");
  w.free_ns = 0; /* every step costs one clock read: slices are exact */
  start_churn(w.L, 4000, 200000); /* a cycle lasts many frames */
  run(w.L, "work = 0 task.on('Update', function() burn(work) end)");
  o.budget = budget;
  o.frame = frame;
  o.stop_auto = true;
  assert_int_equal(luna_lua_gc_set(w.L, &o), 0);
  frames(&w, 3);
  for (f = 0; f < 300; f++) {
    luna_lua_gc_stats before, after;
    k = f % 3;
    lua_pushinteger(w.L, (lua_Integer)work[k]);
    lua_setglobal(w.L, "work");
    before = stats_of(w.L);
    frames(&w, 1);
    after = stats_of(w.L);
    /* Up to the slice, plus the step that passed it; a cycle that ended
       stops short, so the sums below are compared. */
    assert_true(after.time_ns - before.time_ns <= slice[k] + after.longest_step_ns);
    spent[k] += after.time_ns - before.time_ns;
  }
  /* 100 frames of each: at most a tenth over 100 slices (the reads made
     before the paced timing take a microsecond from the half-left frames'
     slice), and at least 8/10 of them (a cycle's end stops a slice short,
     and the light frames, where cycles move fastest, end most). */
  for (k = 0; k < 3; k++) {
    assert_true(spent[k] <= 100 * slice[k] * 11 / 10);
    assert_true(spent[k] >= 100 * slice[k] * 8 / 10);
  }
  /* Past halfway from the live bytes to the ceiling (here a ceiling below
     them: always), `frame` gives way and heavy frames get the whole
     budget too. The first frame runs the ceiling's one full collection. */
  o.ceiling = 1;
  assert_int_equal(luna_lua_gc_set(w.L, &o), 0);
  lua_pushinteger(w.L, (lua_Integer)work[2]);
  lua_setglobal(w.L, "work");
  frames(&w, 1);
  assert_int_equal(stats_of(w.L).full_collections, 1);
  {
    luna_lua_gc_stats before = stats_of(w.L), after;
    frames(&w, 10);
    after = stats_of(w.L);
    assert_int_equal(after.full_collections, 1);
    /* (the first of them begins no cycle: the heap must grow first) */
    assert_true(after.time_ns - before.time_ns >= 10 * budget * 7 / 10);
  }
  o.ceiling = 0;
  /* Without `frame`, the same heavy frames get the whole budget. */
  o.frame = 0;
  assert_int_equal(luna_lua_gc_set(w.L, &o), 0);
  lua_pushinteger(w.L, (lua_Integer)work[2]);
  lua_setglobal(w.L, "work");
  frames(&w, 1); /* the settings begin afresh: the heap grows first */
  {
    luna_lua_gc_stats before = stats_of(w.L), after;
    frames(&w, 10);
    after = stats_of(w.L);
    /* (a cycle's end stops a frame short, and the next begins a frame
       later) */
    assert_true(after.time_ns - before.time_ns >= 10 * budget * 7 / 10);
  }
  world_close(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(paced_frames_stay_in_budget_and_cycles_complete),
      cmocka_unit_test(stop_auto_begins_the_next_cycle_once_the_heap_grew),
      cmocka_unit_test(stop_auto_collects_only_at_the_paced_timing),
      cmocka_unit_test(generational_minor_collections_run_only_at_the_paced_timing),
      cmocka_unit_test(the_ceiling_runs_exactly_one_full_collection),
      cmocka_unit_test(a_full_collect_request_is_served_in_slices),
      cmocka_unit_test(full_collect_requests_of_several_states_share_one_slice),
      cmocka_unit_test(two_runs_make_the_same_step_counts),
      cmocka_unit_test(states_on_a_loop_share_its_budget_by_allocation),
      cmocka_unit_test(idle_time_goes_to_steps_until_the_cycle_is_done),
      cmocka_unit_test(a_state_without_pacing_adds_no_work_to_the_frame),
      cmocka_unit_test(frame_setting_gives_the_slice_what_is_left_of_the_frame),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
