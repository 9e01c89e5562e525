/*
** test_hostile_bus.c: what a hostile mod can make the host do through the
** bus: keep host memory outside its cap, fill the queue for everyone, cut
** topics at a NUL, copy huge topics, and make each delivery walk every
** subscription of every mod. Every test here ends by freeing the set and
** the loop; ASan checks that nothing leaked. The delivery bound is
** asserted by counts per frame, never by times.
*/
#include "mods_util.h"

/* A test that hangs is killed by SIGALRM, so ctest reports a failure. */
#define GUARD_SECONDS 60

/* The waiting copies of a mod's messages and its subscribed topics were
   host memory counted nowhere: 400 sends with an 8 MiB topic took the
   host to 3.3 GB while the mod's own memory stayed at 16 MiB. They are
   now charged to the mod's memory cap (mods.stats().host_memory) until
   delivered or removed, so a mod at its cap cannot post more. */
static void bus_and_subscriptions_are_charged_to_the_mods_cap(void **state) {
  luna_mods_config c;
  fixture *f;
  (void)state;
  c = fx_config();
  c.memory_limit = 1u << 20;
  f = fx_new(&c);
  fx_write(f, "a/mod.lua",
           "local s = string.rep('x', 65536)\n"
           "local sent, ok, err = 0, true, nil\n"
           "while ok and sent < 100 do\n"
           "  ok, err = pcall(mods.send, 't', s)\n"
           "  if ok then sent = sent + 1 end\n"
           "end\n"
           "local st = mods.stats()\n"
           "print(sent < 16, st.host_memory >= sent * 65536, st.messages_waiting == sent, err)\n"
           "task.yield()\n"
           "print('delivered', mods.stats().host_memory, mods.stats().messages_waiting)\n"
           "local subs = {}\n"
           "for i = 1, 100 do subs[i] = mods.subscribe(string.rep('t', 200) .. i, print) end\n"
           "mods.subscribe(string.rep('t', 200) .. 1, print):remove()\n"
           "print('subscribed', mods.stats().host_memory >= 100 * 200)\n"
           "for i = 1, 100 do subs[i]:remove() end\n"
           "print('removed', mods.stats().host_memory)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_string_equal(f->out, "[a] true\ttrue\ttrue\tmods.send: not enough memory (the mod's "
                              "memory cap also counts what the host keeps for it)\n");
  assert_true(fx_info(f, "a").host_memory >= 65536);
  fx_frames(f, 1);
  assert_has(f->out, "[a] delivered\t0\t0\n[a] subscribed\ttrue\n[a] removed\t0\n");
  assert_int_equal(fx_info(f, "a").host_memory, 0);
  fx_free(f);
}

/* One mod could fill the shared 65,536-message queue every frame, so every
   other mod's send, and the host's, failed. Each sender now has its own
   share: the flood is refused for the flooding mod only, and every message
   is still delivered, in the order sent, over the next frames. */
static void a_flood_fills_only_the_flooding_mods_share(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  alarm(GUARD_SECONDS);
  fx_write(f, "a/manifest.lua", "return {name = 'a', load_order = 1}");
  fx_write(f, "a/mod.lua",
           "local n, ok, err = 0, true, nil\n"
           "while ok do ok, err = pcall(mods.send, 'x', n + 1); if ok then n = n + 1 end end\n"
           "print(n, err)\n");
  fx_write(f, "b/manifest.lua", "return {name = 'b', load_order = 2}");
  fx_write(f, "b/mod.lua", "print(pcall(mods.send, 'x', 'from b'))\n");
  fx_write(f, "c/manifest.lua", "return {name = 'c', load_order = 3}");
  fx_write(f, "c/mod.lua",
           "got, last = 0, nil\n"
           "mods.subscribe('x', function(v, _, from) got = got + 1; last = from end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_string_equal(f->out, "[a] 65536\tmods.send: the bus is full (65536 messages of this "
                              "sender waiting)\n[b] true\n");
  assert_int_equal(luna_mods_send_string(f->set, "x", "h", 1), 0);
  /* 65,538 messages with one receiver: two steps each, 100,000 a frame */
  fx_frames(f, 1);
  assert_int_equal(fx_global(f, "c", "got"), 50000);
  fx_frames(f, 1);
  assert_int_equal(fx_global(f, "c", "got"), 65538);
  {
    lua_State *L = luna_mods_state(f->set, "c");
    lua_getglobal(L, "last");
    assert_string_equal(lua_tostring(L, -1), "host");
    lua_pop(L, 1);
  }
  alarm(0);
  fx_free(f);
}

/* A topic was copied with strlen, so "a\0b" was cut at the NUL and reached
   the subscribers of "a". A NUL in a topic is now refused at the call. */
static void a_nul_in_a_topic_is_refused(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "a/mod.lua",
           "mods.subscribe('a', function(v) print('a got', v) end)\n"
           "print(pcall(mods.send, 'a\\0b', 1))\n"
           "print(pcall(mods.subscribe, '\\0', print))\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 2);
  assert_string_equal(f->out,
                      "[a] false\tmods.send: the topic has a NUL byte (at byte 2)\n"
                      "[a] false\tmods.subscribe: the topic has a NUL byte (at byte 1)\n");
  fx_free(f);
}

/* A topic had no length limit: each send copied an 8 MiB topic into host
   memory. Topics are now at most 256 bytes, for mods and the host. */
static void topics_longer_than_256_bytes_are_refused(void **state) {
  fixture *f = fx_new(NULL);
  char topic[300];
  (void)state;
  fx_write(f, "a/mod.lua",
           "local long, ok = string.rep('t', 257), string.rep('t', 256)\n"
           "mods.subscribe(ok, function(v) print('got', v) end)\n"
           "print(pcall(mods.send, long, 1))\n"
           "print(pcall(mods.subscribe, long, print))\n"
           "print(pcall(mods.send, string.rep('t', 8 << 20), 1))\n"
           "mods.send(ok, 'fits')\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  memset(topic, 't', 257);
  topic[257] = '\0';
  assert_int_equal(luna_mods_send_string(f->set, topic, "h", 1), LUNA_EINVAL);
  assert_string_equal(luna_mods_last_error(f->set),
                      "luna_mods_send_string: the topic is 257 bytes long (at most 256)");
  topic[256] = '\0';
  assert_int_equal(luna_mods_send_string(f->set, topic, "host fits", 9), 0);
  fx_frames(f, 1);
  assert_string_equal(f->out,
                      "[a] false\tmods.send: the topic is 257 bytes long (at most 256)\n"
                      "[a] false\tmods.subscribe: the topic is 257 bytes long (at most 256)\n"
                      "[a] false\tmods.send: the topic is 8388608 bytes long (at most 256)\n"
                      "[a] got\tfits\n[a] got\thost fits\n");
  fx_free(f);
}

/* Delivery scanned every subscription of every mod for each message with
   strcmp: 20,000 idle subscriptions made a full bus never finish a frame,
   and nothing bounded a frame's deliveries. The receivers now come from an
   index by topic, so idle subscriptions cost nothing, and a frame does at
   most 100,000 steps (a message taken, a subscription visited): the rest,
   even of one message's fan-out, waits for the next frame, in order. */
static void delivery_visits_only_matching_subscriptions_and_is_bounded(void **state) {
  fixture *f = fx_new(NULL);
  int i;
  (void)state;
  alarm(GUARD_SECONDS);
  fx_write(f, "a/manifest.lua", "return {name = 'a', load_order = 1}");
  fx_write(f, "a/mod.lua",
           "for i = 1, 10000 do mods.subscribe('idle', print) end\n"
           "for i = 1, 10000 do mods.subscribe('idle' .. i, print) end\n"
           "fan = 0\n"
           "local function f() fan = fan + 1 end\n"
           "for i = 1, 70000 do mods.subscribe('fan', f) end\n");
  fx_write(f, "b/manifest.lua", "return {name = 'b', load_order = 2}");
  fx_write(f, "b/mod.lua",
           "hot, last, fan = 0, 0, 0\n"
           "mods.subscribe('hot', function(v) hot = hot + 1; assert(v == last + 1); last = v end)\n"
           "local function f() fan = fan + 1 end\n"
           "for i = 1, 50000 do mods.subscribe('fan', f) end\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  /* 60,000 messages with one receiver each: 50,000 in the first frame */
  for (i = 1; i <= 60000; i++) {
    lua_State *L = luna_mods_state(f->set, "b");
    lua_pushinteger(L, i);
    assert_int_equal(luna_mods_send(f->set, "hot", L, -1), 0);
    lua_pop(L, 1);
  }
  fx_frames(f, 1);
  assert_int_equal(fx_global(f, "b", "hot"), 50000);
  fx_frames(f, 1);
  assert_int_equal(fx_global(f, "b", "hot"), 60000);
  assert_int_equal(fx_global(f, "b", "last"), 60000);
  /* A fan-out of 120,000: one step to take it, 99,999 subscriptions in the
     first frame (all of a's, 29,999 of b's), the rest in the next. */
  assert_int_equal(luna_mods_send_string(f->set, "fan", "1", 1), 0);
  fx_frames(f, 1);
  assert_int_equal(fx_global(f, "a", "fan"), 70000);
  assert_int_equal(fx_global(f, "b", "fan"), 29999);
  assert_int_equal(luna_mods_send_string(f->set, "fan", "2", 1), 0);
  fx_frames(f, 1);
  /* 20,001 of the first message, then 1 + 70,000 + 9,998 of the second */
  assert_int_equal(fx_global(f, "a", "fan"), 140000);
  assert_int_equal(fx_global(f, "b", "fan"), 59998);
  assert_true(luna_mods_alive(f->set));
  fx_frames(f, 1);
  assert_int_equal(fx_global(f, "b", "fan"), 100000);
  assert_int_equal(f->replen, 0);
  alarm(0);
  fx_free(f);
}

/* A delivery cut by the frame's bound keeps its place inside a mod's
   subscriptions until the next frame. A mod reloaded or unloaded in
   between must not be resumed in a state that is gone: the new instance
   gets the messages after that one, the mods after it get it whole. */
static void a_mod_reloaded_while_its_delivery_waits_is_not_resumed(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "a/manifest.lua", "return {name = 'a', load_order = 1}");
  fx_write(f, "a/mod.lua",
           "got = 0\n"
           "local function f() got = got + 1 end\n"
           "for i = 1, 120000 do mods.subscribe('fan', f) end\n");
  fx_write(f, "b/manifest.lua", "return {name = 'b', load_order = 2}");
  fx_write(f, "b/mod.lua",
           "got = 0\n"
           "mods.subscribe('fan', function(v) got = got + 1; print('b got', v) end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_int_equal(luna_mods_send_string(f->set, "fan", "1", 1), 0);
  assert_int_equal(luna_mods_send_string(f->set, "fan", "2", 1), 0);
  fx_frames(f, 1);
  assert_int_equal(fx_global(f, "a", "got"), 99999);
  assert_int_equal(luna_mods_reload(f->set, "a"), 0);
  fx_frames(f, 1);
  /* The new a gets none of message 1 (b gets it: one step), then 99,998
     of message 2 (one step for taking it): the frame's 100,000. */
  assert_string_equal(f->out, "[b] b got\t1\n");
  assert_int_equal(fx_global(f, "a", "got"), 99998);
  assert_int_equal(luna_mods_unload(f->set, "a"), 0);
  fx_frames(f, 1);
  assert_string_equal(f->out, "[b] b got\t1\n[b] b got\t2\n");
  assert_false(luna_mods_alive(f->set));
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bus_and_subscriptions_are_charged_to_the_mods_cap),
      cmocka_unit_test(a_flood_fills_only_the_flooding_mods_share),
      cmocka_unit_test(a_nul_in_a_topic_is_refused),
      cmocka_unit_test(topics_longer_than_256_bytes_are_refused),
      cmocka_unit_test(delivery_visits_only_matching_subscriptions_and_is_bounded),
      cmocka_unit_test(a_mod_reloaded_while_its_delivery_waits_is_not_resumed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
